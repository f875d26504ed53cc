// tensors/a/b/leaf.npy: every tensor, model or not, one file each: an .npy header and the
// tensor's stored bytes, or a one-tensor .safetensors where numpy lacks the dtype. A tensor
// of a float type numpy lacks (BF16, F8_E4M3, F8_E5M2: core/encoding/widen.h) has both: its
// stored bytes as leaf.safetensors, and leaf.npy of float32, widened on each read from the
// stored range under it (WidenedSource), never held whole. Paths
// follow the tensor name's dotted components (TensorPathComponents), or the segments of
// the key a format stores it under (FormatReader::key_segments, TF's). A tensor of a block
// type (BlockType: GGUF's Q4_0, Q8_0...) is leaf.<type>, its stored blocks alone, with a
// note for them all. Strided tensors are left out with a note. A file is no more readable than its
// shard; its mtime is its shard's (Node::tensor).
#include <algorithm>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "core/checkpoint/format_reader.h"
#include "core/encoding/npy.h"
#include "core/encoding/safetensors.h"
#include "core/encoding/shape.h"
#include "core/encoding/widen.h"
#include "core/layout/escape.h"
#include "core/layout/views/views.h"
#include "core/layout/views/widened_source.h"

namespace ckptfs {
namespace {

// Creates the directories of tensor paths visited in sorted order. All paths under one
// directory are adjacent in that order: keeping the current path as a stack creates each
// directory exactly once, without a map.
class DirectoryWalker {
 public:
  DirectoryWalker(LayoutBuilder& builder, uint64_t root) : builder_(builder), stack_{{"", root}} {}

  // The directory holding `dirs` (escaped components below the root), creating it.
  uint64_t Enter(std::vector<std::string>& dirs) {
    size_t common = 0;
    while (common < dirs.size() && common + 1 < stack_.size() &&
           stack_[common + 1].first == dirs[common]) {
      ++common;
    }
    stack_.resize(common + 1);
    for (size_t i = common; i < dirs.size(); ++i) {
      uint64_t ino = builder_.AddDir(stack_.back().second, dirs[i]);
      stack_.emplace_back(std::move(dirs[i]), ino);
    }
    return stack_.back().second;
  }

 private:
  LayoutBuilder& builder_;
  std::vector<std::pair<std::string, uint64_t>> stack_;
};

// The tensors/ path of tensor `i` of `ckpt`, stored under keys of `segments` (or null).
std::vector<std::string> PathOf(const Checkpoint& ckpt, uint32_t i,
                                std::vector<std::string> (*segments)(std::string_view)) {
  if (!segments) return TensorPathComponents(ckpt.tensors[i].name);
  return KeyPathComponents(segments(TensorKeys(ckpt)[i]));
}

// Keyed tensors in the order of their tensors/ paths: a directory's files then come
// together for the DirectoryWalker, which sorting by dotted name does not promise ("a"/"b"
// and "a.c" share the dotted prefix "a.").
std::vector<uint32_t> KeyPathOrder(const Checkpoint& ckpt,
                                   std::vector<std::string> (*segments)(std::string_view)) {
  std::vector<std::pair<std::vector<std::string>, uint32_t>> paths;
  paths.reserve(ckpt.tensors.size());
  for (uint32_t i = 0; i < ckpt.tensors.size(); ++i)
    paths.emplace_back(PathOf(ckpt, i, segments), i);
  std::sort(paths.begin(), paths.end());
  std::vector<uint32_t> order;
  order.reserve(paths.size());
  for (const auto& p : paths) order.push_back(p.second);
  return order;
}

std::string OneTensorHeader(const Tensor& t, const Metadata& metadata) {
  TensorEntry entry{t.name, t.dtype, t.shape, 0, t.size};
  return BuildSafetensorsHeader({&entry, 1}, metadata);
}

class TensorsView final : public View {
 public:
  explicit TensorsView(const Checkpoint& ckpt) : ckpt_(ckpt) {}
  std::string RootName() const override { return "tensors"; }

  void LayOut(LayoutBuilder& b) override {
    DirectoryWalker walker(b, b.AddDir(Layout::kRoot, RootName()));
    auto* const segments = TensorKeys(ckpt_).empty() ? nullptr : FormatOf(ckpt_).key_segments;
    const bool by_key = segments != nullptr;
    const std::vector<uint32_t> order =
        by_key ? KeyPathOrder(ckpt_, segments) : std::vector<uint32_t>();
    for (uint32_t k = 0; k < ckpt_.tensors.size(); ++k) {
      const uint32_t i = by_key ? order[k] : k;
      const Tensor& t = ckpt_.tensors[i];
      if (!t.contiguous()) {
        notes.push_back("tensor \"" + t.name + "\" is a strided view (shape " +
                        ShapeText(t.shape, '(', ')') + ", stride " + ShapeText(t.stride, '(', ')') +
                        (t.in_model ? "): only in pytorch_model.bin, not in "
                                      "model.safetensors, pytorch_model/ or tensors/"
                                    : "): in no view (not in tensors/, and not the "
                                      "model: --model-key to choose)"));
        continue;
      }
      std::vector<std::string> parts = PathOf(ckpt_, i, segments);
      std::string leaf = std::move(parts.back());
      parts.pop_back();
      const uint64_t dir = walker.Enter(parts);
      if (std::optional<BlockType> blocks = BlocksOf(ckpt_, i)) {
        AddBlocks(b, dir, leaf, i, *blocks);
        continue;
      }
      const bool npy = !NumpyDescr(t.dtype).empty();
      if (WidensToF32(t.dtype)) AddWidenedNpy(b, dir, leaf, i);
      const uint64_t ino = b.AddFile(dir, leaf + (npy ? ".npy" : ".safetensors"), 0444);
      b.node(ino).tensor = static_cast<int32_t>(i);
      if (npy) {
        AppendNpyHeader(b, ino, t.dtype, t.shape);
      } else {
        b.AppendInline(ino, OneTensorHeader(t, ckpt_.metadata));
      }
      b.AppendTensor(ino, t);
    }
    if (!block_types_.empty()) {
      std::string types;
      for (const std::string_view type : block_types_) {
        types += (types.empty() ? "" : ", ") + std::string(type);
      }
      notes.push_back(std::to_string(block_tensors_) + " tensor(s) of block types (" + types +
                      "): in tensors/ only, as their stored blocks (leaf.<type>); not in " +
                      ckpt_.safetensors_view + " or " + ckpt_.torch_view);
    }
  }

 private:
  // leaf.<type> of tensor `i`, stored in blocks: its bytes as stored, no header (the
  // xattrs say the type, shape and block). In no merged view (SelectModel).
  void AddBlocks(LayoutBuilder& b, uint64_t dir, const std::string& leaf, uint32_t i,
                 const BlockType& blocks) {
    const uint64_t ino = b.AddFile(dir, leaf + "." + std::string(blocks.extension), 0444);
    b.node(ino).tensor = static_cast<int32_t>(i);
    b.AppendTensor(ino, ckpt_.tensors[i]);
    ++block_tensors_;
    if (std::find(block_types_.begin(), block_types_.end(), blocks.name) == block_types_.end()) {
      block_types_.push_back(blocks.name);
    }
  }

  // leaf.npy of tensor `i`, a BF16 or F8 one: a float32 header, then each stored range of
  // the tensor through the WidenedSource of its file. A range that is not whole elements
  // (no reader makes one) leaves the tensor with its .safetensors alone, and a note.
  void AddWidenedNpy(LayoutBuilder& b, uint64_t dir, const std::string& leaf, uint32_t i) {
    const Tensor& t = ckpt_.tensors[i];
    const uint32_t size = DtypeSize(t.dtype);
    StoredRange one;
    const std::span<const StoredRange> ranges = RangesOf(ckpt_, t, one);
    for (const StoredRange& r : ranges) {
      if (r.size % size != 0) {
        notes.push_back("tensor \"" + t.name +
                        "\" is stored in pieces of part elements: "
                        "in tensors/ as .safetensors only, not widened to .npy");
        return;
      }
    }
    const uint64_t ino = b.AddFile(dir, leaf + ".npy", 0444);
    b.node(ino).tensor = static_cast<int32_t>(i);
    AppendNpyHeader(b, ino, Dtype::kF32, t.shape);
    for (const StoredRange& r : ranges) {
      const uint32_t phase = static_cast<uint32_t>(r.offset % size);
      auto [it, added] = widened_.try_emplace(std::make_tuple(r.shard, t.dtype, phase), 0u);
      if (added) {
        auto source = std::make_unique<WidenedSource>(b.Source(r.shard), t.dtype, phase);
        it->second = b.AddSource(std::move(source));
      }
      const auto& widened = static_cast<const WidenedSource&>(b.Source(it->second));
      // Made bytes narrow no mode: the stored file's does.
      b.NarrowMode(ino, r.shard);
      b.AppendSource(ino, it->second, widened.WidenedOffset(r.offset), r.size / size * 4,
                     /*tensor=*/true);
    }
  }

  // The .npy header of `t`: neighbours in name order mostly share dtype and shape, so the
  // last one is reused without making and hashing the header again.
  void AppendNpyHeader(LayoutBuilder& b, uint64_t ino, Dtype dtype,
                       const std::vector<uint64_t>& shape) {
    if (last_npy_ && last_dtype_ == dtype && last_shape_ == shape) {
      b.AppendSource(ino, last_npy_->source, last_npy_->source_offset, last_npy_->length);
      return;
    }
    last_npy_ = b.AppendShared(ino, BuildNpyHeader(dtype, shape));
    last_dtype_ = dtype;
    last_shape_ = shape;
  }

  const Checkpoint& ckpt_;
  std::optional<Extent> last_npy_;
  Dtype last_dtype_ = Dtype::kU8;
  std::vector<uint64_t> last_shape_;
  // The WidenedSource of each (stored file, dtype, phase) that has a widened tensor: a
  // few per shard, however many tensors.
  std::map<std::tuple<uint32_t, Dtype, uint32_t>, uint32_t> widened_;
  // Tensors of block types laid out, and their types in order of first use, for the note.
  uint64_t block_tensors_ = 0;
  std::vector<std::string_view> block_types_;
};

}  // namespace

std::unique_ptr<View> MakeTensorsView(const Checkpoint& ckpt) {
  return std::make_unique<TensorsView>(ckpt);
}

}  // namespace ckptfs
