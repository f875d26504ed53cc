#include "core/layout/layout.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "core/format/npy.h"
#include "core/format/safetensors.h"
#include "core/layout/escape.h"

namespace ckptfs {

// Grows the node table; directory children are collected per node and flattened,
// sorted, at the end so lookups can binary-search.
class Layout::Builder {
 public:
  explicit Builder(Layout& out) : out_(out) {
    out_.nodes_.resize(2);  // [0] unused, [1] the root
    pending_children_.resize(2);
  }

  uint64_t AddDir(uint64_t parent, std::string name) {
    std::string key = DirKey(parent, name);
    if (auto it = dirs_.find(key); it != dirs_.end()) return it->second;
    uint64_t ino = AddNode(parent, std::move(name), NodeKind::kDirectory);
    dirs_.emplace(std::move(key), ino);
    return ino;
  }

  uint64_t AddFile(uint64_t parent, std::string name, NodeKind kind = NodeKind::kFile) {
    uint64_t ino = AddNode(parent, std::move(name), kind);
    out_.nodes_[ino].first = static_cast<uint32_t>(out_.extents_.size());
    return ino;
  }

  // Appends an extent to file `ino`, which must be the file most recently added.
  void AppendSource(uint64_t ino, uint32_t source, uint64_t offset, uint64_t length) {
    if (length == 0) return;
    Node& node = out_.nodes_[ino];
    out_.extents_.push_back(Extent{node.size, length, offset, source});
    node.size += length;
    ++node.count;
  }

  void AppendInline(uint64_t ino, std::string_view bytes) {
    const uint64_t pool_offset = out_.pool_.size();
    out_.pool_ += bytes;
    AppendSource(ino, Extent::kInline, pool_offset, bytes.size());
  }

  void Finish() {
    for (uint64_t ino = 1; ino < out_.nodes_.size(); ++ino) {
      Node& node = out_.nodes_[ino];
      if (node.kind != NodeKind::kDirectory) continue;
      std::vector<uint64_t>& kids = pending_children_[ino];
      std::sort(kids.begin(), kids.end(), [this](uint64_t a, uint64_t b) {
        return out_.nodes_[a].name < out_.nodes_[b].name;
      });
      node.first = static_cast<uint32_t>(out_.children_.size());
      node.count = static_cast<uint32_t>(kids.size());
      out_.children_.insert(out_.children_.end(), kids.begin(), kids.end());
      std::vector<uint64_t>().swap(kids);
    }
  }

 private:
  static std::string DirKey(uint64_t parent, const std::string& name) {
    return std::to_string(parent) + '/' + name;
  }

  uint64_t AddNode(uint64_t parent, std::string name, NodeKind kind) {
    const uint64_t ino = out_.nodes_.size();
    Node node;
    node.name = std::move(name);
    node.parent = parent;
    node.kind = kind;
    out_.nodes_.push_back(std::move(node));
    pending_children_.emplace_back();
    pending_children_[parent].push_back(ino);
    return ino;
  }

  Layout& out_;
  std::unordered_map<std::string, uint64_t> dirs_;
  std::vector<std::vector<uint64_t>> pending_children_;
};

namespace {

constexpr std::string_view kReservedRootNames[] = {"model.safetensors", "tensors", "shards",
                                                   ".ckptfs"};

// Element size descending, then name: with an 8-aligned data start, laying tensors end to
// end in this order keeps every tensor aligned to its element size with no padding.
std::vector<uint32_t> MergedOrder(const Checkpoint& ckpt) {
  std::vector<uint32_t> order(ckpt.tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return DtypeSize(ckpt.tensors[a].dtype) > DtypeSize(ckpt.tensors[b].dtype);
  });
  return order;  // tensors are already sorted by name; stable_sort keeps that within a size
}

std::string OneTensorHeader(const Tensor& t, const Metadata& metadata) {
  TensorEntry entry{t.name, t.dtype, t.shape, 0, t.size};
  return BuildSafetensorsHeader({&entry, 1}, metadata);
}

}  // namespace

Layout Layout::Build(const Checkpoint& ckpt) {
  Layout layout;
  Builder b(layout);
  // Sources: shards first so a tensor's shard number is its source number.
  for (const auto* group : {&ckpt.shards, &ckpt.index, &ckpt.others}) {
    for (const StoredFile& f : *group) layout.sources_.push_back(f.source.get());
  }
  const uint32_t first_index = static_cast<uint32_t>(ckpt.shards.size());
  const uint32_t first_other = first_index + static_cast<uint32_t>(ckpt.index.size());

  // Root: non-weight files unchanged, unless a view owns the name.
  for (uint32_t i = 0; i < ckpt.others.size(); ++i) {
    const StoredFile& f = ckpt.others[i];
    if (std::find(std::begin(kReservedRootNames), std::end(kReservedRootNames), f.name) !=
        std::end(kReservedRootNames)) {
      layout.hidden_.push_back(f.name);
      continue;
    }
    uint64_t ino = b.AddFile(kRoot, f.name);
    b.AppendSource(ino, first_other + i, 0, f.source->Size());
  }

  // The merged single-file checkpoint.
  std::vector<uint32_t> order = MergedOrder(ckpt);
  std::vector<TensorEntry> entries;
  entries.reserve(order.size());
  uint64_t data_offset = 0;
  for (uint32_t i : order) {
    const Tensor& t = ckpt.tensors[i];
    entries.push_back(TensorEntry{t.name, t.dtype, t.shape, data_offset, data_offset + t.size});
    data_offset += t.size;
  }
  uint64_t merged = b.AddFile(kRoot, "model.safetensors");
  b.AppendInline(merged, BuildSafetensorsHeader(entries, ckpt.metadata));
  std::vector<TensorEntry>().swap(entries);
  for (uint32_t i : order) {
    const Tensor& t = ckpt.tensors[i];
    b.AppendSource(merged, t.shard, t.offset, t.size);
  }

  // One file per tensor.
  uint64_t tensors_dir = b.AddDir(kRoot, "tensors");
  for (uint32_t i = 0; i < ckpt.tensors.size(); ++i) {
    const Tensor& t = ckpt.tensors[i];
    std::vector<std::string> parts = TensorPathComponents(t.name);
    uint64_t dir = tensors_dir;
    for (size_t p = 0; p + 1 < parts.size(); ++p) dir = b.AddDir(dir, std::move(parts[p]));
    const bool npy = !NumpyDescr(t.dtype).empty();
    uint64_t ino = b.AddFile(dir, parts.back() + (npy ? ".npy" : ".safetensors"));
    layout.nodes_[ino].tensor = static_cast<int32_t>(i);
    b.AppendInline(ino, npy ? BuildNpyHeader(t.dtype, t.shape) : OneTensorHeader(t, ckpt.metadata));
    b.AppendSource(ino, t.shard, t.offset, t.size);
  }

  // The original files, index included.
  uint64_t shards_dir = b.AddDir(kRoot, "shards");
  for (uint32_t i = 0; i < first_other; ++i) {
    const ByteSource& src = *layout.sources_[i];
    uint64_t ino = b.AddFile(
        shards_dir, i < first_index ? ckpt.shards[i].name : ckpt.index[i - first_index].name);
    b.AppendSource(ino, i, 0, src.Size());
  }

  uint64_t meta_dir = b.AddDir(kRoot, ".ckptfs");
  b.AddFile(meta_dir, "stats.json", NodeKind::kStats);
  b.Finish();
  return layout;
}

const Node* Layout::Find(uint64_t ino) const {
  return ino >= kRoot && ino < nodes_.size() ? &nodes_[ino] : nullptr;
}

std::span<const uint64_t> Layout::Children(uint64_t dir) const {
  const Node* node = Find(dir);
  if (!node || node->kind != NodeKind::kDirectory) return {};
  return std::span<const uint64_t>(children_).subspan(node->first, node->count);
}

uint64_t Layout::Lookup(uint64_t parent, std::string_view name) const {
  std::span<const uint64_t> kids = Children(parent);
  auto it =
      std::lower_bound(kids.begin(), kids.end(), name,
                       [this](uint64_t ino, std::string_view n) { return nodes_[ino].name < n; });
  return it != kids.end() && nodes_[*it].name == name ? *it : 0;
}

std::span<const Extent> Layout::Extents(uint64_t ino, uint64_t offset, uint64_t length) const {
  const Node* node = Find(ino);
  if (!node || node->kind != NodeKind::kFile || offset >= node->size || length == 0) return {};
  std::span<const Extent> all = std::span<const Extent>(extents_).subspan(node->first, node->count);
  const uint64_t end = offset + std::min(length, node->size - offset);
  // First extent whose end is past `offset`, then every one that starts before `end`.
  auto first = std::upper_bound(all.begin(), all.end(), offset, [](uint64_t off, const Extent& e) {
    return off < e.file_offset + e.length;
  });
  auto last = std::lower_bound(first, all.end(), end,
                               [](const Extent& e, uint64_t off) { return e.file_offset < off; });
  return {first, last};
}

}  // namespace ckptfs
