#include "core/pack/pack.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_getCParams
#include <zstd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <vector>

#include "core/checkpoint/format_reader.h"
#include "core/codec/frame_index.h"
#include "core/codec/zstd_source.h"
#include "core/encoding/safetensors.h"

namespace ckptfs {
namespace {

// A file to write, as pieces laid end to end: synthesized bytes or ranges of sources.
struct Piece {
  const ByteSource* source = nullptr;  // nullptr: `bytes`
  uint64_t offset = 0;
  uint64_t length = 0;
  std::string bytes;
};

struct OutputFile {
  std::string name;  // in DEST
  std::vector<Piece> pieces;
  bool compress = true;
  // --byte-group: the multi-byte elements' runs in the file, sorted, not overlapping.
  std::vector<ElementRun> runs;
  // The ranges whose CRC-32 the workers compute on the way (PackSummary::range_crcs),
  // sorted, not overlapping; `crc32` is filled in by the writer.
  std::vector<RangeCrc> crc_ranges;

  uint64_t Size() const {
    uint64_t n = 0;
    for (const Piece& p : pieces) n += p.length;
    return n;
  }
};

Piece Whole(const ByteSource& source) { return Piece{&source, 0, source.Size(), {}}; }
Piece Bytes(std::string bytes) {
  const uint64_t n = bytes.size();
  return Piece{nullptr, 0, n, std::move(bytes)};
}

// Fills `out` from the pieces of `file` starting at byte `offset`.
Status ReadPieces(const OutputFile& file, uint64_t offset, std::span<uint8_t> out) {
  uint64_t base = 0;
  size_t done = 0;
  for (const Piece& p : file.pieces) {
    if (done == out.size()) break;
    if (offset + done < base + p.length) {
      const uint64_t from = offset + done - base;
      const size_t n = std::min<uint64_t>(out.size() - done, p.length - from);
      if (p.source) {
        CKPTFS_RETURN_IF_ERROR(p.source->ReadAt(p.offset + from, out.subspan(done, n)));
      } else {
        std::memcpy(out.data() + done, p.bytes.data() + from, n);
      }
      done += n;
    }
    base += p.length;
  }
  return Status::Ok();
}

class Writer {
 public:
  static Result<Writer> Create(const std::string& path) {
    // PrepareDest removed any leftover: a .part that exists now is not ours to truncate.
    int fd = ::open((path + ".part").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    0644);
    if (fd < 0) return Status::IoError(path + ": cannot create: " + std::strerror(errno), errno);
    return Writer(path, fd);
  }
  Writer(Writer&& o) noexcept
      : path_(std::move(o.path_)), fd_(std::exchange(o.fd_, -1)), written_(o.written_) {}
  ~Writer() {
    if (fd_ >= 0) {
      ::close(fd_);
      ::unlink((path_ + ".part").c_str());
    }
  }
  Status Write(std::span<const uint8_t> bytes) {
    for (size_t done = 0; done < bytes.size();) {
      ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Status::IoError(path_ + ": write failed: " + std::strerror(errno), errno);
      done += static_cast<size_t>(n);
    }
    written_ += bytes.size();
    return Status::Ok();
  }
  uint64_t written() const { return written_; }
  // Makes the file visible under its final name.
  Status Commit() {
    if (::fsync(fd_) != 0 || ::close(fd_) != 0) {
      fd_ = -1;
      return Status::IoError(path_ + ": cannot flush: " + std::strerror(errno), errno);
    }
    fd_ = -1;
    if (::rename((path_ + ".part").c_str(), path_.c_str()) != 0) {
      return Status::IoError(path_ + ": cannot rename into place: " + std::strerror(errno), errno);
    }
    return Status::Ok();
  }

 private:
  Writer(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
  uint64_t written_ = 0;
};

// The CRC-32 of the part of OutputFile::crc_ranges[range] that one frame holds.
struct CrcPiece {
  size_t range = 0;
  uint64_t length = 0;
  uint32_t crc32 = 0;
};

// Bytes that grow without being zeroed first, and keep their memory: std::vector's resize
// zeroed what the read and the compressor then overwrite, 5% of a pack's CPU (perf).
class FrameBuffer {
 public:
  void resize(size_t n) {
    if (n > capacity_) {
      data_ = std::make_unique_for_overwrite<uint8_t[]>(n);
      capacity_ = n;
    }
    size_ = n;
  }
  uint8_t* data() { return data_.get(); }
  size_t size() const { return size_; }
  std::span<uint8_t> bytes() { return {data_.get(), size_}; }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

// One frame being compressed.
struct FrameJob {
  FrameBuffer plain;
  FrameBuffer compressed;
  std::vector<GroupRegion> regions;  // grouped before compression
  uint32_t checksum = 0;             // of `plain` as read, before grouping
  std::vector<CrcPiece> crc_pieces;  // of `plain` as read, in file order
  Status status;
};

// The CRC-32 of each part of `ranges` (sorted, not overlapping) that lies in the frame at
// `offset` of its file, whose bytes `plain` holds as read.
void CrcPieces(std::span<const RangeCrc> ranges, uint64_t offset, std::span<const uint8_t> plain,
               std::vector<CrcPiece>& out) {
  out.clear();
  const uint64_t end = offset + plain.size();
  // Sorted and not overlapping, so ends are sorted too: the first range ending past us.
  auto it =
      std::upper_bound(ranges.begin(), ranges.end(), offset,
                       [](uint64_t at, const RangeCrc& r) { return at < r.offset + r.length; });
  for (; it != ranges.end() && it->offset < end; ++it) {
    const uint64_t from = std::max(it->offset, offset);
    const uint64_t to = std::min(it->offset + it->length, end);
    const uInt n = static_cast<uInt>(to - from);
    out.push_back(
        {static_cast<size_t>(it - ranges.begin()), n,
         static_cast<uint32_t>(crc32(crc32(0, nullptr, 0), plain.data() + (from - offset), n))});
  }
}

constexpr int kGroupedMinMatch = 7;

Status CompressFrame(FrameJob& job, int level) {
  job.checksum = SeekableChecksum(job.plain.bytes());
  if (!job.regions.empty()) {
    thread_local std::vector<uint8_t> scratch;
    GroupFrame(job.plain.bytes(), job.regions, scratch);
  }
  job.compressed.resize(ZSTD_compressBound(job.plain.size()));
  thread_local std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> cctx(ZSTD_createCCtx(),
                                                                       ZSTD_freeCCtx);
  size_t n = 0;
  if (job.regions.empty()) {
    n = ZSTD_compressCCtx(cctx.get(), job.compressed.data(), job.compressed.size(),
                          job.plain.data(), job.plain.size(), level);
  } else {
    // A grouped frame's sign/exponent planes are low-entropy noise: short matches found
    // there cost more bits than the Huffman-coded literals they replace, and the greedy
    // and lazy match finders (levels below btopt) do not price them. Longer minimum
    // matches: BF16 weights at level 3 pack to 1.44x instead of 1.38x (docs/usage.md).
    ZSTD_CCtx_reset(cctx.get(), ZSTD_reset_parameters);
    ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, level);
    const ZSTD_compressionParameters params = ZSTD_getCParams(level, job.plain.size(), 0);
    if (params.strategy < ZSTD_btopt && params.minMatch < kGroupedMinMatch) {
      ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_minMatch, kGroupedMinMatch);
    }
    n = ZSTD_compress2(cctx.get(), job.compressed.data(), job.compressed.size(), job.plain.data(),
                       job.plain.size());
  }
  if (ZSTD_isError(n)) return Status::IoError(std::string("zstd: ") + ZSTD_getErrorName(n));
  job.compressed.resize(n);
  return Status::Ok();
}

// Frames in flight per worker thread: while the writer waits for the oldest frame, the
// other workers run ahead by about one frame each. Each frame in flight holds its plain
// bytes and its compressed copy (about 2 x frame_size).
constexpr size_t kFramesInFlightPerThread = 2;

// The frames of every file to compress, numbered one after another across the files, read
// and compressed on a pool of worker threads made once per pack, and handed back in
// order (Take, then Release). The pool never idles at a shard boundary: it compresses the
// next shard's first frames while the writer finishes this one, or copies a file.
//
// A frame lives in slot (number % slots): a worker may claim frame g only once frame
// g - slots was released, so at most `slots` frames are in flight. Workers read their own
// frames (ByteSource reads are thread-safe), so reading is parallel too.
//
// A frame that fails (read or compression) keeps its status for Take to return and stops
// further claims; the frames before it were all claimed already and still finish, so Take
// returns the first failure in frame order whatever the thread count. The destructor
// stops the workers and joins them all.
class FramePipeline {
 public:
  FramePipeline(std::vector<const OutputFile*> files, const PackOptions& options, size_t threads)
      : files_(std::move(files)), options_(options) {
    first_.push_back(0);
    for (const OutputFile* f : files_) {
      first_.push_back(first_.back() + (f->Size() + options.frame_size - 1) / options.frame_size);
    }
    const size_t workers = static_cast<size_t>(std::min<uint64_t>(threads, first_.back()));
    slots_.resize(std::max<size_t>(1, workers) * kFramesInFlightPerThread);
    workers_.reserve(workers);
    try {
      for (size_t t = 0; t < workers; ++t) workers_.emplace_back([this] { Work(); });
    } catch (...) {
      StopAndJoin();  // no thread outlives a pipeline that failed to start
      throw;
    }
  }
  FramePipeline(const FramePipeline&) = delete;
  FramePipeline& operator=(const FramePipeline&) = delete;
  ~FramePipeline() { StopAndJoin(); }

  // The next frame in order, once compressed (its status says if it failed). Valid until
  // Release; call only while frames remain.
  FrameJob& Take() {
    std::unique_lock<std::mutex> lock(mu_);
    Slot& slot = slots_[next_take_ % slots_.size()];
    ready_.wait(lock, [&] { return slot.ready; });
    return slot.job;
  }
  // Hands the frame Take returned back, freeing its slot for a later frame.
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      slots_[next_take_ % slots_.size()].ready = false;
      ++next_take_;
    }
    space_.notify_all();
  }

 private:
  struct Slot {
    FrameJob job;
    bool ready = false;  // compressed (or failed), not yet released
  };

  void StopAndJoin() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    space_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      space_.wait(lock, [&] {
        return stop_ || next_claim_ == first_.back() || next_claim_ < next_take_ + slots_.size();
      });
      if (stop_ || next_claim_ == first_.back()) return;
      const uint64_t g = next_claim_++;
      Slot& slot = slots_[g % slots_.size()];
      lock.unlock();
      slot.job.status = Fill(g, slot.job);
      lock.lock();
      slot.ready = true;
      if (!slot.job.status.ok()) stop_ = true;  // claimed frames still finish
      if (g == next_take_) ready_.notify_one();
    }
  }

  // Reads frame `g` into `job` and compresses it.
  Status Fill(uint64_t g, FrameJob& job) {
    const size_t i = std::upper_bound(first_.begin(), first_.end(), g) - first_.begin() - 1;
    const OutputFile& file = *files_[i];
    const uint64_t offset = (g - first_[i]) * options_.frame_size;
    const uint64_t n = std::min(options_.frame_size, file.Size() - offset);
    job.plain.resize(n);
    CKPTFS_RETURN_IF_ERROR(ReadPieces(file, offset, job.plain.bytes()));
    CrcPieces(file.crc_ranges, offset, job.plain.bytes(), job.crc_pieces);
    job.regions.clear();
    if (options_.byte_group) job.regions = RegionsInFrame(file.runs, offset, offset + n);
    return CompressFrame(job, options_.level);
  }

  const std::vector<const OutputFile*> files_;
  const PackOptions& options_;
  std::vector<uint64_t> first_;  // first_[i]: number of files_[i]'s first frame; back(): total

  std::mutex mu_;
  std::condition_variable space_;  // workers: a slot was released, or stop
  std::condition_variable ready_;  // Take: the frame it waits for is done
  std::vector<Slot> slots_;        // a slot's job: its claiming worker's until ready, then Take's
  uint64_t next_claim_ = 0;        // under mu_, as are the rest
  uint64_t next_take_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;  // last: started once the rest is set
};

// Writes `file` into DEST/NAME.zst as seekable zstd from its frames, which `pipeline`
// hands back in order.
Status WriteSeekable(const OutputFile& file, const std::string& dest, const PackOptions& options,
                     FramePipeline& pipeline, uint64_t& done, uint64_t total,
                     PackSummary& summary) {
  CKPTFS_ASSIGN_OR_RETURN(Writer out, Writer::Create(dest + "/" + file.name + ".zst"));
  const uint64_t size = file.Size();
  std::vector<Frame> frames;
  std::vector<std::vector<GroupRegion>> grouped;  // per frame, for the record
  std::vector<RangeCrc> crcs = file.crc_ranges;   // zero: the CRC of no bytes
  for (uint64_t offset = 0; offset < size; offset += options.frame_size) {
    FrameJob& job = pipeline.Take();
    CKPTFS_RETURN_IF_ERROR(job.status);
    for (const CrcPiece& p : job.crc_pieces) {
      RangeCrc& r = crcs[p.range];
      r.crc32 =
          static_cast<uint32_t>(crc32_combine(r.crc32, p.crc32, static_cast<z_off_t>(p.length)));
    }
    Frame f;
    f.compressed_size = job.compressed.size();
    f.decoded_size = job.plain.size();
    f.checksum = job.checksum;
    frames.push_back(f);
    grouped.push_back(std::move(job.regions));
    CKPTFS_RETURN_IF_ERROR(out.Write(job.compressed.bytes()));
    pipeline.Release();
    done += f.decoded_size;
    if (options.progress) options.progress(done, total);
  }
  // The record goes last among the frames, listed as one of 0 decoded bytes (see
  // core/codec/byte_group.h); a shard with nothing to group gets none, as without the option.
  if (const std::string record = BuildByteGroupRecord(grouped); !record.empty()) {
    CKPTFS_RETURN_IF_ERROR(
        out.Write({reinterpret_cast<const uint8_t*>(record.data()), record.size()}));
    Frame f;
    f.compressed_size = record.size();
    f.checksum = SeekableChecksum({});
    frames.push_back(f);
  }
  const std::string table = BuildSeekTable(frames, /*with_checksums=*/true);
  CKPTFS_RETURN_IF_ERROR(out.Write({reinterpret_cast<const uint8_t*>(table.data()), table.size()}));
  summary.decoded_bytes += size;
  summary.compressed_bytes += out.written();
  ++summary.shards;
  if (!crcs.empty()) summary.range_crcs[file.name] = std::move(crcs);
  return out.Commit();
}

Status WriteCopy(const OutputFile& file, const std::string& dest, PackSummary& summary) {
  CKPTFS_ASSIGN_OR_RETURN(Writer out, Writer::Create(dest + "/" + file.name));
  FrameBuffer buf;  // a config.json's few bytes get a buffer of their size, not 4 MiB
  buf.resize(std::min<uint64_t>(4u << 20, file.Size()));
  for (uint64_t offset = 0, size = file.Size(); offset < size;) {
    const size_t n = std::min<uint64_t>(buf.size(), size - offset);
    CKPTFS_RETURN_IF_ERROR(ReadPieces(file, offset, {buf.data(), n}));
    CKPTFS_RETURN_IF_ERROR(out.Write({buf.data(), n}));
    offset += n;
  }
  summary.copied_bytes += out.written();
  return out.Commit();
}

// New shards of at most `shard_size` bytes of tensor data, tensors in aligned order.
std::vector<OutputFile> Reshard(const Checkpoint& ckpt, uint64_t shard_size) {
  std::vector<std::vector<uint32_t>> groups;
  uint64_t bytes = 0;
  for (uint32_t i : AlignedOrder(ckpt)) {
    const uint64_t size = ckpt.tensors[i].size;
    if (groups.empty() || (bytes + size > shard_size && bytes > 0)) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(i);
    bytes += size;
  }
  if (groups.empty()) groups.emplace_back();  // a checkpoint of no tensors is one empty shard
  std::vector<OutputFile> shards;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t g = 0; g < groups.size(); ++g) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", g + 1, groups.size());
    OutputFile file{name, {}, true, {}, {}};
    std::vector<TensorEntry> entries;
    uint64_t offset = 0;
    for (uint32_t i : groups[g]) {
      const Tensor& t = ckpt.tensors[i];
      entries.push_back({t.name, t.dtype, t.shape, offset, offset + t.size});
      offset += t.size;
      weight_map[t.name] = name;
    }
    file.pieces.push_back(Bytes(BuildSafetensorsHeader(entries, ckpt.metadata)));
    const uint64_t data_start = file.pieces.back().length;
    for (const TensorEntry& e : entries) {
      file.runs.push_back({data_start + e.begin, e.end - e.begin, DtypeSize(e.dtype)});
      // A new safetensors shard: each tensor is a storage without a CRC.
      if (e.end > e.begin) file.crc_ranges.push_back({data_start + e.begin, e.end - e.begin, 0});
    }
    for (uint32_t i : groups[g]) {
      StoredRange one;
      for (const StoredRange& r : RangesOf(ckpt, ckpt.tensors[i], one)) {
        if (r.size)
          file.pieces.push_back(Piece{ShardFile(ckpt, r.shard).source.get(), r.offset, r.size, {}});
      }
    }
    shards.push_back(std::move(file));
  }
  nlohmann::json index = {{"metadata", {{"total_size", ckpt.TotalTensorBytes()}}},
                          {"weight_map", weight_map}};
  shards.push_back(
      OutputFile{"model.safetensors.index.json", {Bytes(index.dump(2) + "\n")}, false, {}, {}});
  return shards;
}

// Sorts `ranges` by offset and keeps the first of any that overlap.
template <typename Range>
void KeepDisjoint(std::vector<Range>& ranges) {
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.offset < b.offset; });
  std::vector<Range> kept;
  for (const Range& r : ranges) {
    if (kept.empty() || r.offset >= kept.back().offset + kept.back().length) kept.push_back(r);
  }
  ranges = std::move(kept);
}

// Where the storages lie in the shard files (files[i] is shard i): with `byte_group`, the
// runs of every storage's elements; and the ranges of those without a CRC, for the
// workers to checksum. Storages never share bytes in the formats read; if some did,
// grouping one twice would not undo, so the first of any overlap is kept (a storage
// left out of crc_ranges is read back by WritePackedCrcs instead).
void AddStorageRanges(const Checkpoint& ckpt, bool byte_group, std::vector<OutputFile>& files) {
  for (const Storage& s : ckpt.storages) {
    StoredRange one;
    for (const StoredRange& r : RangesOf(ckpt, s, one)) {
      // Past the shards are the decoded data of legacy torch files, not files of ours.
      if (r.shard >= ckpt.shards.size()) continue;
      if (byte_group) files[r.shard].runs.push_back({r.offset, r.size, DtypeSize(s.dtype)});
      if (!s.has_crc32 && r.size) files[r.shard].crc_ranges.push_back({r.offset, r.size, 0});
    }
  }
  for (OutputFile& f : files) {
    KeepDisjoint(f.runs);
    KeepDisjoint(f.crc_ranges);
  }
}

// The names this pack writes into DEST.
std::set<std::string> OutputNames(const std::vector<OutputFile>& files) {
  std::set<std::string> names;
  for (const OutputFile& f : files) names.insert(f.compress ? f.name + ".zst" : f.name);
  names.insert(std::string(kPackedCrcFile));  // written after the pack (WritePackedCrcs)
  return names;
}

// See the header: DEST missing, empty, or holding only this pack's own files.
Status PrepareDest(const std::string& dest, const std::set<std::string>& ours, bool force) {
  if (::mkdir(dest.c_str(), 0755) == 0) return Status::Ok();
  if (errno != EEXIST)
    return Status::IoError(dest + ": cannot create: " + std::strerror(errno), errno);
  DIR* d = ::opendir(dest.c_str());
  if (!d) return Status::InvalidArgument(dest + ": exists and is not a directory");
  std::vector<std::string> parts;
  std::string foreign;
  bool finished = false;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const bool part =
        name.size() > 5 && name.ends_with(".part") && ours.count(name.substr(0, name.size() - 5));
    struct stat st;
    const bool regular =
        ::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
    if (!regular || (!part && !ours.count(name))) {
      if (foreign.empty()) foreign = name;
    } else if (part) {
      parts.push_back(name);
    } else {
      finished = true;
    }
  }
  ::closedir(d);
  if (!foreign.empty()) {
    return Status::InvalidArgument(dest + ": destination is not empty: it holds \"" + foreign +
                                   "\", which this pack does not write");
  }
  if (finished && parts.empty() && !force) {
    return Status::InvalidArgument(dest +
                                   ": destination is not empty: it holds a finished pack "
                                   "(--force replaces it)");
  }
  for (const std::string& name : parts) {
    if (::unlink((dest + "/" + name).c_str()) != 0 && errno != ENOENT) {
      return Status::IoError(dest + "/" + name + ": cannot remove: " + std::strerror(errno), errno);
    }
  }
  return Status::Ok();
}

}  // namespace

Status PackCheckpoint(const Checkpoint& ckpt, const std::string& dest, const PackOptions& options,
                      PackSummary* summary) {
  for (const StoredFile& s : ckpt.shards) {
    if (s.stored_name != s.name) {
      return Status::InvalidArgument(ckpt.source_path + ": already packed (" + s.stored_name +
                                     " is compressed); mount it as it is");
    }
  }
  if (options.frame_size == 0 || options.frame_size > kMaxCachedFrame) {
    return Status::InvalidArgument("--frame-size must be between 1 and " +
                                   std::to_string(kMaxCachedFrame) + " bytes");
  }
  if (options.level < ZSTD_minCLevel() || options.level > ZSTD_maxCLevel()) {
    return Status::InvalidArgument("--level must be between " + std::to_string(ZSTD_minCLevel()) +
                                   " and " + std::to_string(ZSTD_maxCLevel()));
  }
  if (options.shard_size) {
    // Resharding writes safetensors, which have no strides: refuse rather than drop.
    for (size_t i = 0; i < ckpt.tensors.size(); ++i) {
      const Tensor& t = ckpt.tensors[i];
      if (!t.contiguous()) {
        return Status::Unsupported(
            "--shard-size writes safetensors shards, which cannot hold "
            "strided tensor \"" +
            t.name + "\"; pack without it");
      }
      if (std::optional<BlockType> blocks = BlocksOf(ckpt, i)) {
        return Status::Unsupported("--shard-size writes safetensors shards, which cannot hold " +
                                   std::string(blocks->name) + " tensor \"" + t.name +
                                   "\"; pack without it");
      }
    }
  }
  std::vector<OutputFile> files;
  if (options.shard_size) {
    files = Reshard(ckpt, options.shard_size);
  } else {
    for (const StoredFile& s : ckpt.shards)
      files.push_back({s.name, {Whole(*s.source)}, true, {}, {}});
    AddStorageRanges(ckpt, options.byte_group, files);
    for (const StoredFile& f : ckpt.index)
      files.push_back({f.name, {Whole(*f.source)}, false, {}, {}});
  }
  for (const StoredFile& f : ckpt.others) {
    // A module folder's file (hf_layout.h, OpenHfModuleFolders) is not the checkpoint's:
    // pack writes one flat directory, as it always did.
    if (f.name.find('/') != std::string::npos) continue;
    files.push_back({f.name, {Whole(*f.source)}, false, {}, {}});
  }
  CKPTFS_RETURN_IF_ERROR(PrepareDest(dest, OutputNames(files), options.force));
  // A replaced pack's zip CRCs describe its old shards: gone before any new shard lands.
  ::unlink((dest + "/" + std::string(kPackedCrcFile)).c_str());

  uint64_t total = 0, done = 0;
  for (const OutputFile& f : files) total += f.compress ? f.Size() : 0;
  const size_t threads =
      options.threads ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  std::vector<const OutputFile*> compressed;
  for (const OutputFile& f : files) {
    if (f.compress) compressed.push_back(&f);
  }
  FramePipeline pipeline(std::move(compressed), options, threads);
  PackSummary written;
  for (const OutputFile& f : files) {
    CKPTFS_RETURN_IF_ERROR(f.compress
                               ? WriteSeekable(f, dest, options, pipeline, done, total, written)
                               : WriteCopy(f, dest, written));
  }
  if (summary) *summary = written;
  return Status::Ok();
}

}  // namespace ckptfs
