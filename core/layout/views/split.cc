// pytorch_model/: the per-key split layout (docs/split.md). map.pt (kSplitMapFile) is
// torch.save of the list of the model's keys (ModelName) in stored order; each <key>.pt
// (SplitKeyFileName) is torch.save(tensor) of one model tensor with a torch type.
//
// Which tensors, in map.pt's order: model tensors torch has a type for and whose bytes
// are one row-major run, in stored order: by shard, then storage in the order the shard
// lists them (a torch pickle's first use, which torch.save's record offsets do not keep
// past ten storages; a safetensors header's), then offset, then name. A split source's
// order is its map.pt's. Strided tensors and types torch lacks have their notes already
// (tensors/, pytorch_model.bin); a key whose hashed file name an earlier key took is left
// out, with a note, so that map.pt never lists a key whose file holds another's tensor.
//
// Memory: a node, a child slot and a name per tensor. A key file's extents and its bytes
// around the tensor's (zip headers and pickle) are made on each read; map.pt is measured
// at mount and made on its first read. A key file is no more readable than its shard;
// map.pt is a file of the whole checkpoint.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <tuple>
#include <unordered_set>

#include "core/checkpoint/model.h"
#include "core/encoding/names.h"
#include "core/encoding/torch_file.h"
#include "core/encoding/zip.h"
#include "core/layout/views/torch_archive.h"
#include "core/layout/views/views.h"

namespace ckptfs {
namespace {

// torch.load takes the archive name from the records; every split file uses this one.
constexpr std::string_view kSplitArchive = "archive/";

std::vector<uint32_t> SplitViewOrder(const Checkpoint& ckpt, std::vector<std::string>* notes) {
  std::vector<uint32_t> order;
  for (uint32_t i = 0; i < ckpt.tensors.size(); ++i) {
    const Tensor& t = ckpt.tensors[i];
    if (t.in_model && t.contiguous() && TorchStorageClass(t.dtype)) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
    const Tensor& a = ckpt.tensors[x];
    const Tensor& b = ckpt.tensors[y];
    return std::tie(a.shard, a.storage, a.offset) < std::tie(b.shard, b.storage, b.offset);
  });
  // Only hashed names meet, and only a key of over 84 bytes (each escaping to at most 3)
  // can have one.
  std::unordered_set<std::string> hashed;
  std::erase_if(order, [&](uint32_t i) {
    const std::string_view key = ModelName(ckpt, ckpt.tensors[i]);
    if (3 * key.size() + 3 <= kMaxFileName) return false;
    std::string name = SplitKeyFileName(key);
    if (name.size() != kSplitHashedSize || hashed.insert(name).second) return false;
    if (notes) {
      notes->push_back("tensor \"" + ckpt.tensors[i].name +
                       "\" is not in pytorch_model/: its file " + name + " is another key's");
    }
    return true;
  });
  return order;
}

// A <key>.pt file: torch.save(tensor) with the tensor's bytes as its one storage record,
// `head` before them (data.pkl and the record's local header), `tail` after (version, the
// central directory, the end records).
struct SplitFile {
  std::string head;
  uint64_t data_size = 0;
  std::string tail;
  uint64_t size() const { return head.size() + data_size + tail.size(); }
};

SplitFile MakeSplitFile(const Checkpoint& ckpt, const Tensor& t) {
  const std::vector<uint64_t> stride = RowMajorStrides(t.shape);
  const uint64_t numel = t.size / DtypeSize(t.dtype);
  const std::string pickle =
      BuildTorchTensorPickle(TorchPickleEntry{"", t.dtype, 0, numel, 0, t.shape, stride});
  // The stored CRC holds only when the tensor is its whole storage; torch ignores it.
  const Storage& s = ckpt.storages[t.storage];
  const uint32_t data_crc = s.has_crc32 && s.size == t.size ? s.crc32 : 0;
  const std::string archive(kSplitArchive);
  const ZipRecord records[] = {{archive + "data.pkl", pickle.size(), Crc32(pickle)},
                               {archive + "data/0", t.size, data_crc},
                               {archive + "version", kTorchVersion.size(), Crc32(kTorchVersion)}};
  SplitFile out;
  uint64_t offsets[3];
  offsets[0] = 0;
  out.head = ZipLocalHeader(records[0], 0) + pickle;
  offsets[1] = out.head.size();
  out.head += ZipLocalHeader(records[1], offsets[1]);
  out.data_size = t.size;
  offsets[2] = out.head.size() + t.size;
  out.tail = ZipLocalHeader(records[2], offsets[2]) + std::string(kTorchVersion);
  out.tail += ZipCentralDirectory(records, offsets, offsets[2] + out.tail.size());
  return out;
}

// map.pt: torch.save of the list of the view's keys, in order.
std::string MakeMapFile(const Checkpoint& ckpt, std::span<const uint32_t> order) {
  std::vector<std::string_view> keys;
  keys.reserve(order.size());
  for (uint32_t i : order) keys.push_back(ModelName(ckpt, ckpt.tensors[i]));
  const std::string pickle = BuildTorchStringListPickle(keys);
  const std::string archive(kSplitArchive);
  const ZipRecord records[] = {{archive + "data.pkl", pickle.size(), Crc32(pickle)},
                               {archive + "version", kTorchVersion.size(), Crc32(kTorchVersion)}};
  std::string out = ZipLocalHeader(records[0], 0) + pickle;
  const uint64_t offsets[] = {0, out.size()};
  out += ZipLocalHeader(records[1], offsets[1]) + std::string(kTorchVersion);
  return out + ZipCentralDirectory(records, offsets, out.size());
}

class SplitView final : public View, public ExtentMaker {
 public:
  explicit SplitView(const Checkpoint& ckpt) : ckpt_(ckpt) {}
  std::string RootName() const override { return "pytorch_model"; }

  void Plan() override {
    order_ = SplitViewOrder(ckpt_, &notes);
    map_size_ = MakeMapFile(ckpt_, order_).size();
  }

  void LayOut(LayoutBuilder& b) override {
    dir_ = b.AddDir(Layout::kRoot, RootName());
    map_ = b.AddFile(dir_, kSplitMapFile, b.whole_mode());
  }

  // The key files, in map.pt's order (the plan's). A key file's size depends only on its
  // dtype and shape, which neighbours mostly share. Children are sorted by
  // LayoutBuilder::Finish.
  void Finish(LayoutBuilder& b) override {
    b.BeginExtents(map_);
    b.AppendSource(map_, b.AddSource(std::make_unique<MapBytes>(*this)), 0, map_size_);
    made_source_ = b.AddSource(std::make_unique<KeyFileBytes>(*this));
    const uint8_t maker = b.AddMaker(this);
    const Tensor* last = nullptr;
    uint64_t last_size = 0;
    for (uint32_t i : order_) {
      const Tensor& t = ckpt_.tensors[i];
      if (!last || last->dtype != t.dtype || last->shape != t.shape) {
        last_size = MakeSplitFile(ckpt_, t).size();
        last = &t;
      }
      const uint64_t ino =
          b.AddMadeFile(dir_, SplitKeyFileName(ModelName(ckpt_, t)), 0444, last_size, maker);
      b.node(ino).tensor = static_cast<int32_t>(i);
      StoredRange one;
      for (const StoredRange& r : RangesOf(ckpt_, t, one)) b.NarrowMode(ino, r.shard);
    }
    order_ = {};  // map.pt's bytes make it again
  }

  // Head, the tensor's stored ranges, tail. Only the head's size needs the pickle; the
  // tail is the rest of the file.
  ExtentList Extents(const Node& node) const override {
    const auto i = static_cast<uint32_t>(node.tensor);
    const Tensor& t = ckpt_.tensors[i];
    const uint64_t head = MakeSplitFile(ckpt_, t).head.size();
    std::vector<Extent> made;
    uint64_t at = 0;
    AppendExtents(made, at, made_source_, KeyFileAddress(i, 0), head, false);
    StoredRange one;
    for (const StoredRange& r : RangesOf(ckpt_, t, one)) {
      AppendExtents(made, at, r.shard, r.offset, r.size, /*tensor=*/true);
    }
    AppendExtents(made, at, made_source_, KeyFileAddress(i, head), node.size - at, false);
    return ExtentList(std::move(made));
  }

 private:
  // KeyFileBytes' offsets: tensor i's head then tail, at (i << 32) + k (both together are
  // a pickle and zip headers: far under 4 GiB).
  static uint64_t KeyFileAddress(uint32_t tensor, uint64_t k) {
    return (uint64_t{tensor} << 32) + k;
  }

  // The key files' bytes around their tensors, made on each read.
  class KeyFileBytes final : public ByteSource {
   public:
    explicit KeyFileBytes(const SplitView& view) : view_(view) {}
    uint64_t Size() const override { return UINT64_MAX; }
    const std::string& Name() const override { return name_; }
    Status Read(uint64_t offset, uint64_t length, ReadSink& sink) const override {
      const uint64_t tensor = offset >> 32;
      const uint64_t k = offset & UINT32_MAX;
      if (tensor >= view_.ckpt_.tensors.size()) {
        return Status::Corruption(name_ + ": no tensor " + std::to_string(tensor));
      }
      const SplitFile file = view_.MakeFileOf(static_cast<uint32_t>(tensor));
      const std::string bytes = file.head + file.tail;
      if (k > bytes.size() || length > bytes.size() - k) {
        return Status::Corruption(name_ + ": read past the made bytes of a key file");
      }
      if (length > 0) std::memcpy(sink.Fill().data(), bytes.data() + k, length);
      return Status::Ok();
    }

   private:
    const SplitView& view_;
    const std::string name_ = "pytorch_model/";
  };

  // map.pt's bytes, made on the first read and kept, lent to replies.
  class MapBytes final : public ByteSource {
   public:
    explicit MapBytes(const SplitView& view) : view_(view) {}
    uint64_t Size() const override { return view_.map_size_; }
    const std::string& Name() const override { return name_; }
    Status Read(uint64_t offset, uint64_t length, ReadSink& sink) const override {
      CKPTFS_RETURN_IF_ERROR(CheckRange(offset, length));
      LendOrCopy({reinterpret_cast<const uint8_t*>(Bytes().data()) + offset, length}, sink);
      return Status::Ok();
    }

   private:
    const std::string& Bytes() const {
      std::call_once(once_, [this] {
        bytes_ = MakeMapFile(view_.ckpt_, SplitViewOrder(view_.ckpt_, nullptr));
      });
      return bytes_;
    }
    const SplitView& view_;
    const std::string name_ = "pytorch_model/map.pt";
    mutable std::once_flag once_;
    mutable std::string bytes_;
  };

  SplitFile MakeFileOf(uint32_t tensor) const {
    return MakeSplitFile(ckpt_, ckpt_.tensors[tensor]);
  }

  const Checkpoint& ckpt_;
  uint64_t dir_ = 0;
  uint64_t map_ = 0;
  std::vector<uint32_t> order_;  // until Finish
  uint64_t map_size_ = 0;
  uint32_t made_source_ = 0;
};

}  // namespace

std::unique_ptr<View> MakeSplitView(const Checkpoint& ckpt) {
  return std::make_unique<SplitView>(ckpt);
}

}  // namespace ckptfs
