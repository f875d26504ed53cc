// pytorch_model.bin (Checkpoint::torch_view): a torch.save zip of every model tensor with
// a torch type: data.pkl, one stored record per storage (an extent over the shard bytes),
// version, then the central directory. Records follow the pickle's order, which is the
// order of the storages in the shards, so torch.load reads the file front to back.
// Deterministic: the same checkpoint always gives the same bytes. A file of the whole
// checkpoint (LayoutBuilder::whole_mode).
//
// Most mounts never read this file: Plan only measures it; its first use (Extents) lays
// it out: its extents, the bytes kept (the pickle, data.pkl's and version's headers, the
// end records), and the record table the bytes made on every read are made from (each
// storage record's local header, the central directory in chunks of kDirectoryChunk
// entries: kept, those would cost 130 bytes a tensor).
#include <algorithm>
#include <cstring>
#include <mutex>
#include <tuple>

#include "core/checkpoint/model.h"
#include "core/encoding/torch_file.h"
#include "core/encoding/zip.h"
#include "core/layout/views/torch_archive.h"
#include "core/layout/views/views.h"

namespace ckptfs {
namespace {

// torch's reader takes the archive name from the records; torch.save uses the file stem.
constexpr std::string_view kTorchArchive = "pytorch_model/";
constexpr uint32_t kDirectoryChunk = 1024;  // central-directory entries made per extent

// Where the zip's bytes go, in file order (EmitTorchZip).
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

ZipRecord StorageRecord(const Storage& s, uint32_t key) {
  return {std::string(kTorchArchive) + "data/" + std::to_string(key), s.size, s.crc32};
}

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

// Counts the bytes: the file's size, all a mount needs until the file is opened.
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

class TorchZipView final : public View, public ExtentMaker {
 public:
  explicit TorchZipView(const Checkpoint& ckpt) : ckpt_(ckpt) {}
  std::string RootName() const override { return ckpt_.torch_view; }

  void Plan() override {
    TorchZipSize size;
    EmitTorchZip(ckpt_, size, &notes);
    size_ = size.offset();
  }

  void LayOut(LayoutBuilder& b) override {
    kept_source_ = b.AddSource(std::make_unique<KeptBytes>(*this));
    made_source_ = b.AddSource(std::make_unique<MadeBytes>(*this));
    // Every piece is a whole-checkpoint file's, so whole_mode is already no more readable
    // than any shard they will name.
    ino_ = b.AddMadeFile(Layout::kRoot, RootName(), b.whole_mode(), 0, b.AddMaker(this));
  }

  void Finish(LayoutBuilder& b) override { b.node(ino_).size = size_; }

  ExtentList Extents(const Node&) const override {
    Make();
    return ExtentList(std::span<const Extent>(made_.extents));
  }

 private:
  // What the first use makes.
  struct Made {
    std::vector<Extent> extents;            // two a tensor
    std::string kept;                       // the bytes kept (source kept_source_)
    std::vector<uint32_t> record_storages;  // record key -> index into Checkpoint::storages
    std::vector<uint64_t> header_offsets;   // record key -> its local header in the file
    std::vector<uint64_t> chunk_offsets;    // directory chunk -> where it starts in the file
  };

  // Lays the zip out as extents: kept bytes at their offset in Made::kept, storages at
  // their shards, made-again bytes (source made_source_) at their offset in the file.
  class Maker final : public TorchZipSink {
   public:
    Maker(Made& out, const TorchZipView& view) : out_(out), view_(view) {}
    bool WantsBytes() const override { return true; }
    void Bytes(std::string_view bytes) override {
      Append(view_.kept_source_, out_.kept.size(), bytes.size());
      out_.kept += bytes;
    }
    void UnmadeBytes(uint64_t) override {}  // never called: WantsBytes()
    void StorageBytes(const Storage& s) override {
      StoredRange one;
      for (const StoredRange& r : RangesOf(view_.ckpt_, s, one)) {
        Append(r.shard, r.offset, r.size, /*tensor=*/true);
      }
    }
    void RecordHeader(uint32_t, std::string_view bytes) override {
      Append(view_.made_source_, offset_, bytes.size());
    }
    void DirectoryChunk(uint32_t, std::string_view bytes) override {
      out_.chunk_offsets.push_back(offset_);
      Append(view_.made_source_, offset_, bytes.size());
    }
    void Records(std::vector<uint32_t> storages, std::vector<uint64_t> header_offsets) override {
      out_.record_storages = std::move(storages);
      out_.header_offsets = std::move(header_offsets);
    }

   private:
    void Append(uint32_t source, uint64_t offset, uint64_t length, bool tensor = false) {
      AppendExtents(out_.extents, offset_, source, offset, length, tensor);
    }
    Made& out_;
    const TorchZipView& view_;
  };

  // Made::kept, lent to replies.
  class KeptBytes final : public ByteSource {
   public:
    explicit KeptBytes(const TorchZipView& view) : view_(view) {}
    uint64_t Size() const override {
      view_.Make();
      return view_.made_.kept.size();
    }
    const std::string& Name() const override { return view_.ckpt_.torch_view; }
    Status Read(uint64_t offset, uint64_t length, ReadSink& sink) const override {
      CKPTFS_RETURN_IF_ERROR(CheckRange(offset, length));
      LendOrCopy({reinterpret_cast<const uint8_t*>(view_.made_.kept.data()) + offset, length},
                 sink);
      return Status::Ok();
    }

   private:
    const TorchZipView& view_;
  };

  // The storage records' local headers and the central directory's chunks, made on each
  // read from the record table, at their offsets in the file.
  class MadeBytes final : public ByteSource {
   public:
    explicit MadeBytes(const TorchZipView& view) : view_(view) {}
    uint64_t Size() const override { return view_.size_; }
    const std::string& Name() const override { return view_.ckpt_.torch_view; }
    Status Read(uint64_t offset, uint64_t length, ReadSink& sink) const override {
      CKPTFS_RETURN_IF_ERROR(CheckRange(offset, length));
      view_.Make();
      return ReadMadePieces(offset, length, sink, Name(), [this](uint64_t at, std::string& bytes) {
        return view_.Piece(at, bytes);
      });
    }

   private:
    const TorchZipView& view_;
  };

  void Make() const {
    std::call_once(once_, [this] {
      Maker sink(made_, *this);
      EmitTorchZip(ckpt_, sink, nullptr);
      made_.kept.shrink_to_fit();
      made_.extents.shrink_to_fit();
      // Making the bytes allocated and freed about as much again in small pieces; give
      // those pages back, or a long-lived daemon keeps them for nothing.
      ReleaseFreeMemory();
    });
  }

  // The made-again piece holding file offset `at` into `bytes`; returns where it starts.
  uint64_t Piece(uint64_t at, std::string& bytes) const {
    const std::vector<uint32_t>& storages = made_.record_storages;
    const std::vector<uint64_t>& chunks = made_.chunk_offsets;
    bytes.clear();
    if (!chunks.empty() && at >= chunks.front()) {
      const auto c = static_cast<uint32_t>(std::upper_bound(chunks.begin(), chunks.end(), at) -
                                           chunks.begin() - 1);
      const uint32_t first = c * kDirectoryChunk;
      const uint32_t end =
          std::min<uint32_t>(first + kDirectoryChunk, static_cast<uint32_t>(storages.size()));
      for (uint32_t key = first; key < end; ++key) {
        AppendZipCentralEntry(bytes, StorageRecord(ckpt_.storages[storages[key]], key),
                              made_.header_offsets[key]);
      }
      return chunks[c];
    }
    const std::vector<uint64_t>& headers = made_.header_offsets;
    auto it = std::upper_bound(headers.begin(), headers.end(), at);
    if (it == headers.begin()) return UINT64_MAX;
    const auto key = static_cast<uint32_t>(it - headers.begin() - 1);
    bytes = ZipLocalHeader(StorageRecord(ckpt_.storages[storages[key]], key), headers[key]);
    return headers[key];
  }

  const Checkpoint& ckpt_;
  uint64_t ino_ = 0;
  uint64_t size_ = 0;
  uint32_t kept_source_ = 0;
  uint32_t made_source_ = 0;
  mutable std::once_flag once_;
  mutable Made made_;
};

}  // namespace

std::unique_ptr<View> MakeTorchZipView(const Checkpoint& ckpt) {
  return std::make_unique<TorchZipView>(ckpt);
}

}  // namespace ckptfs
