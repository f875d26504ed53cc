#include "core/layout/layout.h"

#include <malloc.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/checkpoint/model.h"
#include "core/format/npy.h"
#include "core/format/safetensors.h"
#include "core/format/shape.h"
#include "core/format/torch_file.h"
#include "core/format/zip.h"
#include "core/layout/escape.h"

namespace ckptfs {

namespace {

// Appends the extents of a range at `file_size`, which grows by `length`; returns how many.
uint32_t AppendExtents(std::vector<Extent>& extents, uint64_t& file_size, uint32_t source,
                       uint64_t offset, uint64_t length, bool tensor) {
  uint32_t added = 0;
  while (length > 0) {
    const uint64_t part = std::min(length, Extent::kMaxLength);
    extents.push_back(Extent{file_size, offset, static_cast<uint32_t>(part),
                             source & Extent::kInline, tensor ? 1u : 0u});
    file_size += part;
    offset += part;
    length -= part;
    ++added;
  }
  return added;
}

bool Before(const struct timespec& a, const struct timespec& b) {
  return a.tv_sec != b.tv_sec ? a.tv_sec < b.tv_sec : a.tv_nsec < b.tv_nsec;
}

// The newest of `files`' mtimes, or `newest` if none is later.
struct timespec Newest(const std::vector<StoredFile>& files, struct timespec newest) {
  for (const StoredFile& f : files) {
    if (Before(newest, f.mtime)) newest = f.mtime;
  }
  return newest;
}

}  // namespace

// Grows the node table. Children lists are made at the end: nodes are grouped by parent
// (a counting sort, no per-directory vectors) and each group sorted by name, so lookups
// can binary-search.
class Layout::Builder {
 public:
  // `source_modes`: the permission bits of each of out.sources_.
  Builder(Layout& out, std::vector<uint16_t> source_modes)
      : out_(out), source_modes_(std::move(source_modes)) {
    out_.nodes_.resize(2);  // [0] unused, [1] root
  }

  uint64_t AddDir(uint64_t parent, std::string_view name) {
    return AddNode(parent, name, NodeKind::kDirectory);
  }

  // `mode`: the most a file may show; each stored extent appended narrows it.
  uint64_t AddFile(uint64_t parent, std::string_view name, uint16_t mode,
                   NodeKind kind = NodeKind::kFile) {
    uint64_t ino = AddNode(parent, name, kind);
    out_.nodes_[ino].first = static_cast<uint32_t>(out_.extents_.size());
    out_.nodes_[ino].mode = mode;
    return ino;
  }

  // Lets file `ino`, made earlier with no extents, take its extents from here on.
  void BeginExtents(uint64_t ino) {
    out_.nodes_[ino].first = static_cast<uint32_t>(out_.extents_.size());
  }

  // Appends an extent to file `ino`, which must be the file most recently added or begun.
  void AppendSource(uint64_t ino, uint32_t source, uint64_t offset, uint64_t length,
                    bool tensor = false) {
    Node& node = out_.nodes_[ino];
    // Even an empty range: a file showing bytes of a source is no more readable than it.
    if (source < Extent::kFirstSynthesized) node.mode &= source_modes_[source];
    node.count += AppendExtents(out_.extents_, node.size, source, offset, length, tensor);
  }

  // Appends the bytes of contiguous tensor `t`: one extent per stored range.
  void AppendTensor(uint64_t ino, const Checkpoint& ckpt, const Tensor& t) {
    StoredRange one;
    for (const StoredRange& r : RangesOf(ckpt, t, one)) {
      AppendSource(ino, r.shard, r.offset, r.size, /*tensor=*/true);
    }
  }

  // Makes file `ino` no more readable than stored file `source`, without an extent.
  void NarrowMode(uint64_t ino, uint32_t source) { out_.nodes_[ino].mode &= source_modes_[source]; }

  void AppendInline(uint64_t ino, std::string_view bytes) {
    const uint64_t pool_offset = out_.pool_.size();
    out_.pool_ += bytes;
    AppendSource(ino, Extent::kInline, pool_offset, bytes.size());
  }

  // AppendInline for bytes many files repeat (an .npy header depends only on dtype and
  // shape, and a model has few distinct shapes): the pool keeps one copy of each.
  void AppendShared(uint64_t ino, std::string bytes) {
    auto [it, added] = shared_.try_emplace(std::move(bytes), out_.pool_.size());
    if (added) out_.pool_ += it->first;
    AppendSource(ino, Extent::kInline, it->second, it->first.size());
  }

  // The .npy header of `t`: neighbours in name order mostly share dtype and shape, so the
  // last one is reused without making and hashing the header again.
  void AppendNpyHeader(uint64_t ino, const Tensor& t) {
    if (!last_npy_.has_value() || last_npy_dtype_ != t.dtype || last_npy_shape_ != t.shape) {
      AppendShared(ino, BuildNpyHeader(t.dtype, t.shape));
      const Extent& e = out_.extents_.back();
      last_npy_ = std::make_pair(e.source_offset, e.length);
      last_npy_dtype_ = t.dtype;
      last_npy_shape_ = t.shape;
      return;
    }
    AppendSource(ino, Extent::kInline, last_npy_->first, last_npy_->second);
  }

  void Finish() {
    std::vector<Node>& nodes = out_.nodes_;
    std::vector<uint32_t> start(nodes.size() + 1, 0);
    for (uint64_t ino = 2; ino < nodes.size(); ++ino) ++start[nodes[ino].parent + 1];
    for (size_t i = 1; i < start.size(); ++i) start[i] += start[i - 1];
    out_.children_.resize(nodes.size() - 2);
    std::vector<uint32_t> fill(start.begin(), start.end() - 1);
    for (uint64_t ino = 2; ino < nodes.size(); ++ino)
      out_.children_[fill[nodes[ino].parent]++] = ino;
    for (uint64_t ino = 1; ino < nodes.size(); ++ino) {
      if (nodes[ino].kind != NodeKind::kDirectory) continue;
      nodes[ino].first = start[ino];
      nodes[ino].count = start[ino + 1] - start[ino];
      auto begin = out_.children_.begin() + start[ino];
      std::sort(begin, begin + nodes[ino].count,
                [&](uint64_t a, uint64_t b) { return nodes[a].name() < nodes[b].name(); });
    }
    // Children come after their parent, so walking back finishes each directory before
    // its parent reads it: a directory gets r-x for each class that reads a child.
    std::vector<uint16_t> readers(nodes.size(), 0);
    for (uint64_t ino = nodes.size() - 1; ino >= 1; --ino) {
      Node& node = nodes[ino];
      if (node.kind == NodeKind::kDirectory) {
        if (node.count == 0) {
          node.mode = 0555;  // nothing inside to hide; lets no one read anything above
          continue;
        }
        node.mode = static_cast<uint16_t>(readers[ino] | readers[ino] >> 2);
      }
      if (ino > 1) readers[node.parent] |= node.mode & 0444;
    }
    // The tables grew by doubling; a mount keeps them for its lifetime, so drop the slack
    // (up to half of each at a million tensors).
    nodes.shrink_to_fit();
    out_.extents_.shrink_to_fit();
    out_.pool_.shrink_to_fit();
  }

 private:
  uint64_t AddNode(uint64_t parent, std::string_view name, NodeKind kind) {
    Node node;
    node.name_data = out_.names_.Add(name);
    node.name_size = static_cast<uint32_t>(name.size());
    node.parent = static_cast<uint32_t>(parent);
    node.kind = kind;
    out_.nodes_.push_back(node);
    return out_.nodes_.size() - 1;
  }

  Layout& out_;
  std::vector<uint16_t> source_modes_;
  std::unordered_map<std::string, uint64_t> shared_;       // bytes -> pool offset
  std::optional<std::pair<uint64_t, uint32_t>> last_npy_;  // pool offset, length
  Dtype last_npy_dtype_ = Dtype::kU8;
  std::vector<uint64_t> last_npy_shape_;
};

// Creates the directories of tensor names visited in sorted order. All names under one
// directory share a prefix of the raw name, so they are adjacent in that order: keeping
// the current path as a stack creates each directory exactly once, without a map.
class Layout::DirectoryWalker {
 public:
  DirectoryWalker(Builder& builder, uint64_t root) : builder_(builder), stack_{{"", root}} {}

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
  Builder& builder_;
  std::vector<std::pair<std::string, uint64_t>> stack_;
};

namespace {

// With the merged views' names (Checkpoint::safetensors_view, torch_view), what a stored
// file at the root cannot be called.
constexpr std::string_view kReservedRootNames[] = {"pytorch_model", "tensors", "shards", ".ckptfs"};
// torch's reader takes the archive name from the records; torch.save uses the file stem.
constexpr std::string_view kTorchArchive = "pytorch_model/";
constexpr std::string_view kTorchVersion = "3\n";  // the format version torch 1.13 writes

uint32_t Crc32(std::string_view bytes) {
  return static_cast<uint32_t>(crc32(crc32(0, nullptr, 0),
                                     reinterpret_cast<const Bytef*>(bytes.data()),
                                     static_cast<uInt>(bytes.size())));
}

// TF tensors in the order of their tensors/ paths: a directory's files then come together
// for the DirectoryWalker, which sorting by dotted name does not promise ("a"/"b" and "a.c"
// share the dotted prefix "a.").
std::vector<uint32_t> KeyPathOrder(const Checkpoint& ckpt) {
  std::vector<std::pair<std::vector<std::string>, uint32_t>> paths;
  paths.reserve(ckpt.tensors.size());
  for (uint32_t i = 0; i < ckpt.tensors.size(); ++i) {
    paths.emplace_back(TfTensorPathComponents(ckpt.tensor_keys[i]), i);
  }
  std::sort(paths.begin(), paths.end());
  std::vector<uint32_t> order;
  order.reserve(paths.size());
  for (const auto& p : paths) order.push_back(p.second);
  return order;
}

// The header entry of tensor `order[j]` of model.safetensors, at data offset
// `data_offset`, after a ',' unless it opens the header's JSON: the bytes of
// BuildSafetensorsHeader(every entry, ckpt.metadata), made at mount to be measured, then
// again on each read, rather than kept: they are 90 bytes a tensor.
void AppendMergedEntry(std::string& out, const Checkpoint& ckpt, std::span<const uint32_t> order,
                       size_t j, uint64_t data_offset) {
  const Tensor& t = ckpt.tensors[order[j]];
  if (j > 0 || !ckpt.metadata.empty()) out += ',';
  AppendSafetensorsEntry(out, ModelName(ckpt, t), t.dtype, t.shape, data_offset,
                         data_offset + t.size);
}

std::string OneTensorHeader(const Tensor& t, const Metadata& metadata) {
  TensorEntry entry{t.name, t.dtype, t.shape, 0, t.size};
  return BuildSafetensorsHeader({&entry, 1}, metadata);
}

}  // namespace

namespace {

// Where the merged torch zip goes, in file order: bytes made once on first read and kept
// (the pickle, data.pkl's and version's headers, the end records), storage ranges, and
// the bytes made again on every read from the record table (each storage record's local
// header, its central-directory entry in chunks of kDirectoryChunk records): those would
// cost 130 bytes a tensor if kept. Layout::Build only measures them (the pickle too);
// the first use lays them out as extents and makes the kept bytes and the table.
class TorchZipSink {
 public:
  virtual ~TorchZipSink() = default;
  // Whether Bytes needs the bytes themselves; if not, only their sizes count, and the
  // pickle is measured instead of made.
  virtual bool WantsBytes() const = 0;
  virtual void Bytes(std::string_view bytes) = 0;
  // Bytes of `size` the sink does not want made (only when !WantsBytes()).
  virtual void UnmadeBytes(uint64_t size) = 0;
  virtual void StorageBytes(const Storage& storage) = 0;
  virtual void RecordHeader(uint32_t key, std::string_view bytes) = 0;
  virtual void DirectoryChunk(uint32_t chunk, std::string_view bytes) = 0;
  // Record key -> storage, and key -> local header offset: what the made-again bytes need.
  virtual void Records(std::vector<uint32_t> storages, std::vector<uint64_t> header_offsets) = 0;
  uint64_t offset() const { return offset_; }

 protected:
  uint64_t offset_ = 0;
};

constexpr uint32_t kDirectoryChunk = 1024;  // central-directory entries made per extent

ZipRecord StorageRecord(const Storage& s, uint32_t key) {
  return {std::string(kTorchArchive) + "data/" + std::to_string(key), s.size, s.crc32};
}

// The merged torch.save zip: data.pkl, one stored record per storage, version, then the
// central directory. Records follow the pickle's order, which is the order of the
// storages in the shards, so torch.load reads the file front to back. Deterministic:
// the same checkpoint always gives the same pieces.
void EmitTorchZip(const Checkpoint& ckpt, TorchZipSink& sink, std::vector<std::string>* notes) {
  std::vector<uint32_t> order;
  for (uint32_t i = 0; i < ckpt.tensors.size(); ++i) {
    const Tensor& t = ckpt.tensors[i];
    if (!t.in_model) continue;
    if (TorchStorageClass(t.dtype)) {
      order.push_back(i);
    } else if (notes) {
      notes->push_back("tensor \"" + t.name + "\" (" + std::string(DtypeName(t.dtype)) +
                       ") is not in pytorch_model.bin or pytorch_model/: PyTorch 1.13 has no "
                       "such type");
    }
  }
  std::stable_sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
    const Storage& sa = ckpt.storages[ckpt.tensors[x].storage];
    const Storage& sb = ckpt.storages[ckpt.tensors[y].storage];
    return std::tie(sa.shard, sa.offset) < std::tie(sb.shard, sb.offset);
  });
  // Storage -> record key, in first-use order: a flat table, one slot per storage, costs
  // a fraction of a hash map's time and memory at a million storages.
  constexpr uint32_t kNoKey = UINT32_MAX;
  std::vector<uint32_t> keys(ckpt.storages.size(), kNoKey);
  std::vector<uint32_t> records_of;  // record key -> storage
  TorchPickleBuilder pickler(/*count_only=*/!sink.WantsBytes());
  std::vector<uint64_t> stride;
  for (uint32_t i : order) {
    const Tensor& t = ckpt.tensors[i];
    if (keys[t.storage] == kNoKey) {
      keys[t.storage] = static_cast<uint32_t>(records_of.size());
      records_of.push_back(t.storage);
    }
    const Storage& s = ckpt.storages[t.storage];
    stride = t.contiguous() ? RowMajorStrides(t.shape) : t.stride;
    pickler.Add(TorchPickleEntry{ModelName(ckpt, t), t.dtype, keys[t.storage],
                                 s.size / DtypeSize(s.dtype), t.storage_offset, t.shape, stride});
  }
  std::vector<uint32_t>().swap(keys);
  const uint64_t pickle_size = pickler.Finish();
  const std::string pickle = pickler.Take();  // empty when only measured

  // A measured pickle's CRC is unknown, but no size depends on it.
  const std::string archive(kTorchArchive);
  const ZipRecord pickle_record{archive + "data.pkl", pickle_size,
                                sink.WantsBytes() ? Crc32(pickle) : 0};
  const ZipRecord version_record{archive + "version", kTorchVersion.size(), Crc32(kTorchVersion)};
  const uint64_t pickle_header = sink.offset();
  sink.Bytes(ZipLocalHeader(pickle_record, pickle_header));
  if (sink.WantsBytes()) {
    sink.Bytes(pickle);
  } else {
    sink.UnmadeBytes(pickle_size);
  }
  std::vector<uint64_t> header_offsets(records_of.size());
  for (uint32_t key = 0; key < records_of.size(); ++key) {
    const Storage& s = ckpt.storages[records_of[key]];
    header_offsets[key] = sink.offset();
    sink.RecordHeader(key, ZipLocalHeader(StorageRecord(s, key), header_offsets[key]));
    sink.StorageBytes(s);
  }
  const uint64_t version_header = sink.offset();
  sink.Bytes(ZipLocalHeader(version_record, version_header));
  sink.Bytes(kTorchVersion);

  const uint64_t directory_offset = sink.offset();
  std::string cd;
  AppendZipCentralEntry(cd, pickle_record, pickle_header);
  sink.Bytes(cd);
  for (uint32_t first = 0; first < records_of.size(); first += kDirectoryChunk) {
    cd.clear();
    const auto end =
        static_cast<uint32_t>(std::min<size_t>(first + kDirectoryChunk, records_of.size()));
    for (uint32_t key = first; key < end; ++key) {
      AppendZipCentralEntry(cd, StorageRecord(ckpt.storages[records_of[key]], key),
                            header_offsets[key]);
    }
    sink.DirectoryChunk(first / kDirectoryChunk, cd);
  }
  cd.clear();
  AppendZipCentralEntry(cd, version_record, version_header);
  sink.Bytes(cd + ZipEndRecords(records_of.size() + 2, directory_offset,
                                sink.offset() - directory_offset + cd.size()));
  sink.Records(std::move(records_of), std::move(header_offsets));
}

// --- pytorch_model/: the per-key split view --------------------------------------------

// torch.load takes the archive name from the records; every split file uses this one.
constexpr std::string_view kSplitArchive = "archive/";

// The tensors of pytorch_model/, in map.pt's order: model tensors torch has a type for
// and whose bytes are one row-major run, in stored order: by shard, then storage in the
// order the shard lists them (a torch pickle's first use, which torch.save's record
// offsets do not keep past ten storages; a safetensors header's), then offset, then name.
// A split source's order is its map.pt's. Strided tensors and types torch lacks have
// their notes already (tensors/, pytorch_model.bin); a key whose hashed file name an
// earlier key took is left out here, with a line to `notes` if given, so that map.pt
// never lists a key whose file holds another's tensor.
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

// A pytorch_model/<key>.pt file: torch.save(tensor) with the tensor's bytes as its one
// storage record, `head` before them (data.pkl and the record's local header), `tail`
// after (version, the central directory, the end records).
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

// pytorch_model/map.pt: torch.save of the list of the view's keys (SplitViewOrder), in order.
std::string MakeSplitMapFile(const Checkpoint& ckpt, std::span<const uint32_t> order) {
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

// Counts the bytes: pytorch_model.bin's size, all a mount needs until the file is opened.
class TorchZipSize final : public TorchZipSink {
 public:
  bool WantsBytes() const override { return false; }
  void Bytes(std::string_view bytes) override { offset_ += bytes.size(); }
  void UnmadeBytes(uint64_t size) override { offset_ += size; }
  void StorageBytes(const Storage& storage) override { offset_ += storage.size; }
  void RecordHeader(uint32_t, std::string_view bytes) override { offset_ += bytes.size(); }
  void DirectoryChunk(uint32_t, std::string_view bytes) override { offset_ += bytes.size(); }
  void Records(std::vector<uint32_t>, std::vector<uint64_t>) override {}
};

}  // namespace

// What the first use of pytorch_model.bin makes: its extents (storages point at their
// shards, kept bytes at the kLazy pool, made-again headers at their record key or
// directory chunk), the kept bytes, and the record table.
class Layout::TorchZipLazy final : public TorchZipSink {
 public:
  TorchZipLazy(LazyBytes& out, const Checkpoint& ckpt) : out_(out), ckpt_(&ckpt) {}
  bool WantsBytes() const override { return true; }
  void Bytes(std::string_view bytes) override {
    Append(Extent::kLazy, out_.bytes.size(), bytes.size());
    out_.bytes += bytes;
  }
  void UnmadeBytes(uint64_t) override {}  // never called: WantsBytes()
  void StorageBytes(const Storage& s) override {
    StoredRange one;
    for (const StoredRange& r : RangesOf(*ckpt_, s, one)) {
      Append(r.shard, r.offset, r.size, /*tensor=*/true);
    }
  }
  void RecordHeader(uint32_t key, std::string_view bytes) override {
    Append(Extent::kZipHeader, key, bytes.size());
  }
  void DirectoryChunk(uint32_t chunk, std::string_view bytes) override {
    Append(Extent::kZipDirectory, chunk, bytes.size());
  }
  void Records(std::vector<uint32_t> storages, std::vector<uint64_t> header_offsets) override {
    out_.record_storages = std::move(storages);
    out_.header_offsets = std::move(header_offsets);
  }

 private:
  void Append(uint32_t source, uint64_t offset, uint64_t length, bool tensor = false) {
    AppendExtents(out_.extents, offset_, source, offset, length, tensor);
  }
  LazyBytes& out_;
  const Checkpoint* ckpt_;
};

void Layout::MakeLazyBytes() const {
  std::call_once(lazy_->once, [this] {
    TorchZipLazy sink(*lazy_, *ckpt_);
    EmitTorchZip(*ckpt_, sink, nullptr);
    lazy_->bytes.shrink_to_fit();
    lazy_->extents.shrink_to_fit();
    // Making the bytes allocated and freed about as much again in small pieces; give
    // those pages back, or a long-lived daemon keeps them for nothing.
    ReleaseFreeMemory();
  });
}

void Layout::MakeSplitMap() const {
  std::call_once(lazy_->split_once, [this] {
    lazy_->split_map = MakeSplitMapFile(*ckpt_, SplitViewOrder(*ckpt_, nullptr));
  });
}

std::string_view Layout::InlineBytes(const Extent& e) const {
  if (e.source == Extent::kInline) return std::string_view(pool_).substr(e.source_offset, e.length);
  if (e.source == Extent::kSplitMap) {
    MakeSplitMap();
    return std::string_view(lazy_->split_map).substr(e.source_offset, e.length);
  }
  MakeLazyBytes();
  return std::string_view(lazy_->bytes).substr(e.source_offset, e.length);
}

std::string Layout::GeneratedBytes(const Extent& e) const {
  if (e.source == Extent::kSplitHead || e.source == Extent::kSplitTail) {
    SplitFile file = MakeSplitFile(*ckpt_, ckpt_->tensors[e.source_offset]);
    return std::move(e.source == Extent::kSplitHead ? file.head : file.tail);
  }
  if (e.source == Extent::kHeaderEntries) {
    const HeaderChunk& chunk = header_chunks_[e.source_offset];
    std::string out;
    uint64_t data_offset = chunk.data_offset;
    for (uint32_t j = chunk.begin; j < chunk.end; ++j) {
      AppendMergedEntry(out, *ckpt_, merged_order_, j, data_offset);
      data_offset += ckpt_->tensors[merged_order_[j]].size;
    }
    return out;
  }
  MakeLazyBytes();
  const std::vector<uint32_t>& storages = lazy_->record_storages;
  std::string out;
  if (e.source == Extent::kZipHeader) {
    const auto key = static_cast<uint32_t>(e.source_offset);
    out = ZipLocalHeader(StorageRecord(ckpt_->storages[storages[key]], key),
                         lazy_->header_offsets[key]);
  } else {
    const auto first = static_cast<uint32_t>(e.source_offset * kDirectoryChunk);
    const uint32_t end =
        std::min<uint32_t>(first + kDirectoryChunk, static_cast<uint32_t>(storages.size()));
    for (uint32_t key = first; key < end; ++key) {
      AppendZipCentralEntry(out, StorageRecord(ckpt_->storages[storages[key]], key),
                            lazy_->header_offsets[key]);
    }
  }
  return out;
}

Layout Layout::Build(const Checkpoint& ckpt) {
  Layout layout;
  layout.ckpt_ = &ckpt;
  // Sources: shards first, then decoded data (Checkpoint::decoded), so a tensor's shard
  // number is its source number.
  std::vector<uint16_t> modes;
  for (const auto* group : {&ckpt.shards, &ckpt.decoded, &ckpt.index, &ckpt.others}) {
    for (const StoredFile& f : *group) {
      layout.sources_.push_back(f.source.get());
      layout.source_mtimes_.push_back(f.mtime);
      modes.push_back(static_cast<uint16_t>(f.mode & 0555));
    }
  }
  layout.newest_shard_mtime_ = Newest(ckpt.shards, {});
  layout.directory_mtime_ = ckpt.dir_mtime;
  if (ckpt.dir_mtime.tv_sec == 0 && ckpt.dir_mtime.tv_nsec == 0) {
    layout.directory_mtime_ = Newest(ckpt.others, Newest(ckpt.index, layout.newest_shard_mtime_));
  }
  // Files made from the whole checkpoint show no more than its least readable shard.
  uint16_t whole = 0444;
  for (const StoredFile& f : ckpt.shards) whole &= static_cast<uint16_t>(f.mode);
  Builder b(layout, std::move(modes));
  const uint32_t first_decoded = static_cast<uint32_t>(ckpt.shards.size());
  const uint32_t first_index = first_decoded + static_cast<uint32_t>(ckpt.decoded.size());
  const uint32_t first_other = first_index + static_cast<uint32_t>(ckpt.index.size());

  // Root: non-weight files unchanged, unless a view owns the name. "FOLDER/NAME" (a
  // sentence-transformers module folder's file, OpenHfModuleFolders) goes in FOLDER.
  std::vector<std::pair<std::string, uint64_t>> folders;
  auto reserved = [&ckpt](const std::string& name) {
    return name == ckpt.safetensors_view || name == ckpt.torch_view ||
           std::find(std::begin(kReservedRootNames), std::end(kReservedRootNames), name) !=
               std::end(kReservedRootNames);
  };
  for (const std::string& folder : ckpt.folders) {
    if (!reserved(folder)) folders.emplace_back(folder, b.AddDir(kRoot, folder));
  }
  for (uint32_t i = 0; i < ckpt.others.size(); ++i) {
    const StoredFile& f = ckpt.others[i];
    const size_t slash = f.name.find('/');
    const std::string top = f.name.substr(0, slash);
    if (reserved(top)) {
      layout.hidden_.push_back(f.name);
      continue;
    }
    uint64_t parent = kRoot;
    if (slash != std::string::npos) {
      auto folder = std::find_if(folders.begin(), folders.end(),
                                 [&](const auto& d) { return d.first == top; });
      if (folder == folders.end()) continue;  // not a listed folder: never from a reader
      parent = folder->second;
    }
    uint64_t ino =
        b.AddFile(parent, f.name.substr(slash == std::string::npos ? 0 : slash + 1), 0555);
    b.AppendSource(ino, first_other + i, 0, f.source->Size());
    layout.stored_nodes_.emplace_back(static_cast<uint32_t>(ino), first_other + i);
  }

  // The merged safetensors header and pytorch_model.bin's size depend on every tensor
  // but not on the tree: other threads work them out while this one lays out tensors/
  // (at a million tensors each is most of a second). Their nodes are made here, in the
  // same order as ever, and the merged file's extents appended once its header is done.
  std::vector<uint32_t> order;
  std::vector<uint32_t> chunk_sizes;
  std::thread merged_thread([&ckpt, &layout, &order, &chunk_sizes] {
    order = AlignedOrder(ckpt);
    // Complex tensors: no safetensors dtype every reader knows (dtype.h); noted below.
    std::erase_if(order, [&ckpt](uint32_t i) {
      return !ckpt.tensors[i].in_model || IsComplex(ckpt.tensors[i].dtype);
    });
    std::string bytes;
    uint64_t data_offset = 0;
    HeaderChunk chunk{0, 0, 0};
    for (uint32_t j = 0; j < order.size(); ++j) {
      AppendMergedEntry(bytes, ckpt, order, j, data_offset);
      data_offset += ckpt.tensors[order[j]].size;
      chunk.end = j + 1;
      if (chunk.end - chunk.begin == Extent::kHeaderChunk ||
          bytes.size() >= Extent::kHeaderChunkBytes || chunk.end == order.size()) {
        layout.header_chunks_.push_back(chunk);
        chunk_sizes.push_back(static_cast<uint32_t>(bytes.size()));
        bytes.clear();
        chunk = HeaderChunk{chunk.end, chunk.end, data_offset};
      }
    }
    layout.header_chunks_.shrink_to_fit();
  });
  TorchZipSize zip_size;
  std::vector<std::string> zip_notes;
  std::thread zip_thread(
      [&ckpt, &zip_size, &zip_notes] { EmitTorchZip(ckpt, zip_size, &zip_notes); });
  // Three extents a tensor (merged file; .npy header and data): reserved, so the table
  // does not grow by copying.
  const size_t n = ckpt.tensors.size();
  layout.extents_.reserve(3 * n + layout.sources_.size() + 16);
  layout.pool_.reserve(64 << 10);
  const uint64_t merged = b.AddFile(kRoot, ckpt.safetensors_view, whole);
  // The extents wait for the first use (MakeLazyBytes): most mounts never read this file,
  // and they cost two a tensor. Every piece is a whole-checkpoint file's, so `whole` is
  // already no more readable than any shard they would name.
  layout.torch_zip_ = b.AddFile(kRoot, ckpt.torch_view, whole);

  // One file per tensor.
  DirectoryWalker walker(b, b.AddDir(kRoot, "tensors"));
  const bool by_key = !ckpt.tensor_keys.empty();
  const std::vector<uint32_t> path_order = by_key ? KeyPathOrder(ckpt) : std::vector<uint32_t>();
  for (uint32_t k = 0; k < ckpt.tensors.size(); ++k) {
    const uint32_t i = by_key ? path_order[k] : k;
    const Tensor& t = ckpt.tensors[i];
    if (!t.contiguous()) {
      layout.notes_.push_back("tensor \"" + t.name + "\" is a strided view (shape " +
                              ShapeText(t.shape, '(', ')') + ", stride " +
                              ShapeText(t.stride, '(', ')') +
                              (t.in_model ? "): only in pytorch_model.bin, not in "
                                            "model.safetensors, pytorch_model/ or tensors/"
                                          : "): in no view (not in tensors/, and not the "
                                            "model: --model-key to choose)"));
      continue;
    }
    std::vector<std::string> parts =
        by_key ? TfTensorPathComponents(ckpt.tensor_keys[i]) : TensorPathComponents(t.name);
    std::string leaf = std::move(parts.back());
    parts.pop_back();
    const uint64_t dir = walker.Enter(parts);
    const bool npy = !NumpyDescr(t.dtype).empty();
    uint64_t ino = b.AddFile(dir, leaf + (npy ? ".npy" : ".safetensors"), 0444);
    layout.nodes_[ino].tensor = static_cast<int32_t>(i);
    if (npy) {
      b.AppendNpyHeader(ino, t);
    } else {
      b.AppendInline(ino, OneTensorHeader(t, ckpt.metadata));
    }
    b.AppendTensor(ino, ckpt, t);
  }

  zip_thread.join();
  layout.nodes_[layout.torch_zip_].size = zip_size.offset();
  layout.notes_.insert(layout.notes_.begin(), zip_notes.begin(), zip_notes.end());
  merged_thread.join();
  for (const Tensor& t : ckpt.tensors) {
    if (t.in_model && t.contiguous() && IsComplex(t.dtype)) {
      layout.notes_.push_back("tensor \"" + t.name + "\" is " + std::string(DtypeName(t.dtype)) +
                              " (complex): not in model.safetensors, which has no such dtype "
                              "for every reader; in tensors/ and pytorch_model.bin");
    }
  }
  b.BeginExtents(merged);
  // The bytes of BuildSafetensorsHeader, with the opening and closing kept and the
  // entries made per read (AppendMergedEntry). The JSON body is the opening, the
  // entries and '}'; the 8-byte length before it counts the padding too.
  const std::string opening = SafetensorsHeaderOpening(ckpt.metadata);
  uint64_t body = opening.size() + 1;
  for (uint32_t size : chunk_sizes) body += size;
  const uint64_t padding = (8 - body % 8) % 8;
  std::string prefix;
  for (int i = 0; i < 8; ++i) {
    prefix.push_back(static_cast<char>(((body + padding) >> (8 * i)) & 0xff));
  }
  b.AppendInline(merged, prefix + opening);
  for (uint32_t chunk = 0; chunk < chunk_sizes.size(); ++chunk) {
    b.AppendSource(merged, Extent::kHeaderEntries, chunk, chunk_sizes[chunk]);
  }
  b.AppendInline(merged, "}" + std::string(padding, ' '));
  for (uint32_t i : order) {
    b.AppendTensor(merged, ckpt, ckpt.tensors[i]);
  }
  layout.merged_order_ = std::move(order);

  // The original files, index included.
  uint64_t shards_dir = b.AddDir(kRoot, "shards");
  for (uint32_t i = 0; i < first_other; ++i) {
    if (i >= first_decoded && i < first_index) continue;  // decoded data: no stored file
    const ByteSource& src = *layout.sources_[i];
    uint64_t ino = b.AddFile(
        shards_dir, i < first_index ? ckpt.shards[i].name : ckpt.index[i - first_index].name, 0555);
    b.AppendSource(ino, i, 0, src.Size());
    // After the root's stored files: stored_nodes_ stays in inode order for MTime.
    layout.stored_nodes_.emplace_back(static_cast<uint32_t>(ino), i);
  }

  // pytorch_model/: map.pt's bytes are measured now and made on first read; a key file's
  // size depends only on its dtype and shape, which neighbours mostly share. Children are
  // sorted by Finish.
  layout.split_dir_ = b.AddDir(kRoot, "pytorch_model");
  {
    const std::vector<uint32_t> split_order = SplitViewOrder(ckpt, &layout.notes_);
    const uint64_t map = b.AddFile(layout.split_dir_, kSplitMapFile, whole);
    b.AppendSource(map, Extent::kSplitMap, 0, MakeSplitMapFile(ckpt, split_order).size());
    const Tensor* last = nullptr;
    uint64_t last_size = 0;
    for (uint32_t i : split_order) {
      const Tensor& t = ckpt.tensors[i];
      const std::string name = SplitKeyFileName(ModelName(ckpt, t));
      if (!last || last->dtype != t.dtype || last->shape != t.shape) {
        last_size = MakeSplitFile(ckpt, t).size();
        last = &t;
      }
      const uint64_t ino = b.AddFile(layout.split_dir_, name, 0444);
      Node& node = layout.nodes_[ino];
      node.tensor = static_cast<int32_t>(i);
      node.size = last_size;
      StoredRange one;
      for (const StoredRange& r : RangesOf(ckpt, t, one)) b.NarrowMode(ino, r.shard);
    }
  }

  uint64_t meta_dir = b.AddDir(kRoot, ".ckptfs");
  b.AddFile(meta_dir, "stats.json", whole, NodeKind::kStats);
  b.AppendInline(b.AddFile(meta_dir, "metadata.json", whole), MetadataJson(ckpt));
  b.Finish();
  return layout;
}

const char* Layout::NameArena::Add(std::string_view name) {
  constexpr size_t kBlock = 256 << 10;
  if (capacity - used < name.size() + 1) {
    capacity = std::max(kBlock, name.size() + 1);
    blocks.push_back(std::make_unique_for_overwrite<char[]>(capacity));
    used = 0;
  }
  char* out = blocks.back().get() + used;
  std::memcpy(out, name.data(), name.size());
  out[name.size()] = '\0';
  used += name.size() + 1;
  return out;
}

void ReleaseFreeMemory() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

const Node* Layout::Find(uint64_t ino) const {
  return ino >= kRoot && ino < nodes_.size() ? &nodes_[ino] : nullptr;
}

struct timespec Layout::MTime(uint64_t ino) const {
  const Node* node = Find(ino);
  if (!node) return {};
  if (node->kind == NodeKind::kDirectory) return directory_mtime_;
  if (node->tensor >= 0) return source_mtimes_[ckpt_->tensors[node->tensor].shard];
  auto it = std::lower_bound(stored_nodes_.begin(), stored_nodes_.end(), ino,
                             [](const auto& entry, uint64_t i) { return entry.first < i; });
  if (it != stored_nodes_.end() && it->first == ino) return source_mtimes_[it->second];
  return newest_shard_mtime_;  // model.safetensors, pytorch_model.bin, .ckptfs/*
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
                       [this](uint64_t ino, std::string_view n) { return nodes_[ino].name() < n; });
  return it != kids.end() && nodes_[*it].name() == name ? *it : 0;
}

ExtentList Layout::Extents(uint64_t ino, uint64_t offset, uint64_t length) const {
  const Node* node = Find(ino);
  if (!node || node->kind != NodeKind::kFile || offset >= node->size || length == 0) return {};
  std::span<const Extent> all;
  std::vector<Extent> made;
  if (IsSplitFile(*node)) {
    // Head, the tensor's stored ranges, tail: made here rather than kept (72 bytes a
    // tensor). Only the head's size needs the pickle; the tail is the rest of the file.
    const auto i = static_cast<uint32_t>(node->tensor);
    const Tensor& t = ckpt_->tensors[i];
    const uint64_t head = MakeSplitFile(*ckpt_, t).head.size();
    uint64_t at = 0;
    AppendExtents(made, at, Extent::kSplitHead, i, head, false);
    StoredRange one;
    for (const StoredRange& r : RangesOf(*ckpt_, t, one)) {
      AppendExtents(made, at, r.shard, r.offset, r.size, /*tensor=*/true);
    }
    AppendExtents(made, at, Extent::kSplitTail, i, node->size - at, false);
    all = made;
  } else if (ino == torch_zip_) {
    MakeLazyBytes();
    all = lazy_->extents;
  } else {
    all = std::span<const Extent>(extents_).subspan(node->first, node->count);
  }
  const uint64_t end = offset + std::min(length, node->size - offset);
  // First extent whose end is past `offset`, then every one that starts before `end`.
  auto first = std::upper_bound(all.begin(), all.end(), offset, [](uint64_t off, const Extent& e) {
    return off < e.file_offset + e.length;
  });
  auto last = std::lower_bound(first, all.end(), end,
                               [](const Extent& e, uint64_t off) { return e.file_offset < off; });
  if (!made.empty()) return ExtentList(std::vector<Extent>(first, last));
  return ExtentList(std::span<const Extent>(first, last));
}

}  // namespace ckptfs
