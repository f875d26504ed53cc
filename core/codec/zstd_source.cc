#include "core/codec/zstd_source.h"

#define ZSTD_STATIC_LINKING_ONLY
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

namespace ckptfs {
namespace {

// Reads of a not-yet-spilled shard that start within kPrefixStart and end within the
// caller's header_prefix are served by decoding just that prefix: that is how a format's
// header is read at mount without decoding the shard.
constexpr uint64_t kPrefixStart = 64 << 10;

using DCtxPtr = std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)>;

ZSTD_DCtx* ThreadDCtx() {
  thread_local DCtxPtr dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  return dctx.get();
}

Status PreadAll(int fd, uint64_t offset, std::span<uint8_t> out, const std::string& name) {
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n =
        ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return Status::IoError(name + ": spill file read failed at offset " +
                             std::to_string(offset + done));
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<ZstdSource>> ZstdSource::Open(std::unique_ptr<ByteSource> compressed,
                                                     ReadContext& context, uint64_t header_prefix) {
  CKPTFS_ASSIGN_OR_RETURN(FrameIndex index, ReadFrameIndex(*compressed));
  // Un-grouping needs the whole frame, which only the cached path has (see the header).
  const uint64_t limit = MaxCachedFrame(context.cache().capacity());
  for (size_t i = 0; i < index.frames.size(); ++i) {
    const Frame& f = index.frames[i];
    if (f.region_count && f.decoded_size > limit) {
      return Status::Unsupported(compressed->Name() + ": frame " + std::to_string(i) +
                                 " is byte-grouped and " + std::to_string(f.decoded_size) +
                                 " bytes, more than a frame may be with this cache size (" +
                                 std::to_string(limit) + ", a quarter of it); use a --cache-size " +
                                 "of at least " + std::to_string(f.decoded_size * 4) + " bytes");
    }
  }
  return std::unique_ptr<ZstdSource>(
      new ZstdSource(std::move(compressed), std::move(index), context, header_prefix));
}

ZstdSource::ZstdSource(std::unique_ptr<ByteSource> compressed, FrameIndex index,
                       ReadContext& context, uint64_t header_prefix)
    : compressed_(std::move(compressed)),
      index_(std::move(index)),
      context_(context),
      header_prefix_(header_prefix),
      whole_(std::any_of(index_.frames.begin(), index_.frames.end(),
                         [limit = MaxCachedFrame(context.cache().capacity())](const Frame& f) {
                           return f.decoded_size > limit;
                         })) {
  const BlockSet& frames = *this;  // the base is private: converted here
  if (!whole_)
    frames_ = std::make_unique<CachedBlocks>(frames, context, CachedBlocks::Workers::kDecode);
}

ZstdSource::~ZstdSource() {
  if (spill_fd_ >= 0) ::close(spill_fd_);
}

Status ZstdSource::CheckUnchanged() const { return compressed_->CheckUnchanged(); }

std::string ZstdSource::Identity() const {
  const bool all_checked = index_.seekable && !index_.frames.empty() &&
                           std::all_of(index_.frames.begin(), index_.frames.end(),
                                       [](const Frame& f) { return f.checksum.has_value(); });
  if (!all_checked) {
    std::string base = compressed_->Identity();
    return base.empty() ? base : "zstd\n" + base;
  }
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  for (const Frame& f : index_.frames) {
    const uint64_t entry[2] = {f.decoded_size, *f.checksum};
    XXH3_128bits_update(state, entry, sizeof(entry));
  }
  const XXH128_hash_t h = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  char hex[33];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return "zstd-frames\n" + std::to_string(index_.decoded_size) + "\n" +
         std::to_string(index_.frames.size()) + "\n" + hex;
}

std::string ZstdSource::StorageKind() const {
  const std::string frames = std::to_string(index_.frames.size());
  if (whole_) return "zstd, " + frames + " frame(s), decoded whole";
  return std::string(index_.seekable ? "seekable zstd, " : "zstd, ") + frames + " frames" +
         (index_.grouped() ? ", byte-grouped" : "");
}

Status ZstdSource::DecodeFrame(size_t i, std::span<uint8_t> out) const {
  Status s = DecodeFrameBytes(i, out);
  // After the compressed bytes were read, so a rewrite during the read is caught too, and
  // before the loader returns, so a frame of the new file never reaches the cache. A
  // changed shard also explains a decode error better than "corrupt" does.
  Status unchanged = compressed_->CheckUnchanged();
  return unchanged.ok() ? s : unchanged;
}

Status ZstdSource::DecodeFrameBytes(size_t i, std::span<uint8_t> out) const {
  const Frame& f = index_.frames[i];
  auto where = [&] {
    return Name() + ": frame " + std::to_string(i) + " at compressed offset " +
           std::to_string(f.compressed_offset) + " (decoded offset " +
           std::to_string(f.decoded_offset) + "): ";
  };
  // Streams the compressed bytes through a small per-thread buffer straight into `out`
  // (a stable output buffer: no window copy). A whole-frame input buffer per decode would
  // cost page faults, and one per FUSE thread would cost more memory than the cache bound
  // allows.
  constexpr size_t kChunk = 256 << 10;
  thread_local std::unique_ptr<uint8_t[]> in(new uint8_t[kChunk]);
  thread_local std::vector<LentBytes> lent;  // its capacity stays with the thread
  ZSTD_DCtx* dctx = ThreadDCtx();
  ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only);
  ZSTD_DCtx_setParameter(dctx, ZSTD_d_stableOutBuffer, 1);
  ZSTD_outBuffer output{out.data(), out.size(), 0};
  size_t ret = 1;
  auto decode = [&](std::span<const uint8_t> bytes) {
    ZSTD_inBuffer input{bytes.data(), bytes.size(), 0};
    while (input.pos < input.size) {
      // The frame ended before its compressed bytes did: the index lumps frames together.
      if (ret == 0) {
        return Status::Corruption(where() + "compressed bytes are not exactly one zstd frame");
      }
      const size_t in_before = input.pos, out_before = output.pos;
      ret = ZSTD_decompressStream(dctx, &output, &input);
      if (ZSTD_isError(ret)) return Status::Corruption(where() + ZSTD_getErrorName(ret));
      if (ret != 0 && input.pos == in_before && output.pos == out_before) {
        return Status::Corruption(where() + "decodes past the " + std::to_string(out.size()) +
                                  " bytes the index gives");
      }
    }
    return Status::Ok();
  };
  // Exactly the frame's compressed bytes, all at once: a remote shard fetches the blocks
  // holding them in parallel rather than one per chunk below.
  compressed_->Prefetch(f.compressed_offset, f.compressed_size);
  // Read as lent spans where the source lends them (a remote shard's cached blocks): no
  // copy, and, unlike ReadAt, no readahead of the remote object's own. The frames a read
  // needs are known; that readahead, fed by each frame's chunks, ran up to its largest
  // window past them (issue 28: 72 MB fetched for one 5.5 MiB tensor).
  class ChunkSink final : public ReadSink {
   public:
    ChunkSink(std::vector<LentBytes>* lent_to, std::span<uint8_t> buffer)
        : ReadSink(lent_to), buffer_(buffer) {}
    std::span<uint8_t> Fill() override {
      filled_ = true;
      return buffer_;
    }
    bool filled() const { return filled_; }

   private:
    std::span<uint8_t> buffer_;
    bool filled_ = false;
  };
  for (uint64_t read = 0; read < f.compressed_size;) {
    const size_t n = std::min<uint64_t>(kChunk, f.compressed_size - read);
    lent.clear();
    ChunkSink sink(&lent, {in.get(), n});
    Status s = compressed_->Read(f.compressed_offset + read, n, sink);
    read += n;
    if (s.ok() && sink.filled()) s = decode({in.get(), n});
    for (size_t j = 0; s.ok() && !sink.filled() && j < lent.size(); ++j) s = decode(lent[j].bytes);
    lent.clear();  // unpins the blocks
    CKPTFS_RETURN_IF_ERROR(s);
  }
  context_.compressed_bytes_read.fetch_add(f.compressed_size, std::memory_order_relaxed);
  if (ret != 0) {
    return Status::Corruption(
        where() + (output.pos == output.size
                       ? "decodes past the " + std::to_string(out.size()) + " bytes the index gives"
                       : std::string("frame is truncated")));
  }
  if (output.pos != out.size()) {
    return Status::Corruption(where() + "decodes to " + std::to_string(output.pos) +
                              " bytes, index says " + std::to_string(out.size()));
  }
  if (f.region_count) {
    // A buffer of the largest region, leased within the context's scratch budget (see the
    // memory bound in read_context.h) and reused, so un-grouping costs no fresh pages.
    uint64_t largest = 0;
    for (const GroupRegion& r : index_.RegionsOf(f))
      largest = std::max<uint64_t>(largest, r.length);
    ReadContext::ScratchLease scratch = context_.LeaseScratch(largest);
    UngroupFrame(out, index_.RegionsOf(f), scratch.buffer());
  }
  // Of a grouped frame, the checksum is the original bytes': a record that lies fails here.
  if (f.checksum && SeekableChecksum(out) != *f.checksum) {
    return Status::Corruption(where() + "checksum mismatch" +
                              (f.region_count ? " after un-grouping its bytes" : ""));
  }
  context_.bytes_decoded.fetch_add(output.pos, std::memory_order_relaxed);
  context_.frames_decoded.fetch_add(1, std::memory_order_relaxed);
  ChargeWork(&WorkCounters::bytes_decoded, output.pos);
  ChargeWork(&WorkCounters::compressed_bytes_read, f.compressed_size);
  return Status::Ok();
}

ByteRange ZstdSource::BlockRange(size_t i) const {
  const Frame& f = index_.frames[i];
  return {f.decoded_offset, f.decoded_offset + f.decoded_size};
}

Status ZstdSource::LoadBlock(size_t i, std::span<uint8_t> out, bool*) const {
  Status s = DecodeFrame(i, out);
  if (!s.ok()) context_.decode_errors.fetch_add(1, std::memory_order_relaxed);
  return s;
}

void ZstdSource::Prefetch(uint64_t offset, uint64_t length) const {
  if (!frames_ || length == 0 || offset >= Size()) return;
  const uint64_t end = std::min(Size(), offset + length);
  // The compressed bytes of those frames first, so the disk (or server) reads them while
  // the workers decode earlier frames, instead of each decode waiting on its own reads;
  // not those of frames at either end already decoded (or decoding): a remote shard would
  // fetch them for nothing.
  size_t first = index_.FrameAt(offset), last = index_.FrameAt(end - 1);
  while (first < last && frames_->Holds(first)) ++first;
  while (last > first && frames_->Holds(last)) --last;
  if (!frames_->Holds(first)) {
    const Frame& a = index_.frames[first];
    const Frame& b = index_.frames[last];
    compressed_->Prefetch(a.compressed_offset,
                          b.compressed_offset + b.compressed_size - a.compressed_offset);
  }
  frames_->Schedule(offset, end);
}

Status ZstdSource::Read(uint64_t offset, uint64_t length, ReadSink& sink) const {
  CKPTFS_RETURN_IF_ERROR(CheckRange(offset, length));
  if (length == 0) return Status::Ok();
  if (!sink.lent || whole_ || !frames_) return ReadInto(offset, sink.Fill());
  CKPTFS_RETURN_IF_ERROR(frames_->Lend(offset, length, sink.lent));
  return compressed_->CheckUnchanged();
}

Status ZstdSource::ReadInto(uint64_t offset, std::span<uint8_t> out) const {
  if (whole_) {
    if (spill_fd_ < 0 && offset < kPrefixStart && offset + out.size() <= header_prefix_) {
      return ReadPrefix(offset, out);
    }
    CKPTFS_RETURN_IF_ERROR(EnsureSpilled());
    CKPTFS_RETURN_IF_ERROR(PreadAll(spill_fd_, offset, out, Name()));
    // The spill file is ours (unlinked, held by descriptor) and cannot change; the shard
    // it was decoded from can, and then its bytes are no longer the shard's.
    return compressed_->CheckUnchanged();
  }
  CKPTFS_RETURN_IF_ERROR(frames_->Read(offset, out));
  // Frames cached before a rewrite hold the old bytes, whole and unmixed; still, a shard
  // changed in place gives EIO on every read from then on, as a plain shard does.
  return compressed_->CheckUnchanged();
}

// Decodes from the first frame only as far as `offset + out.size()`.
Status ZstdSource::ReadPrefix(uint64_t offset, std::span<uint8_t> out) const {
  const uint64_t end = offset + out.size();
  return DecodeStream(
      [&](std::span<const uint8_t> chunk, uint64_t at) {
        // Copy the overlap of [at, at + chunk.size()) with [offset, end).
        const uint64_t lo = std::max(offset, at), hi = std::min<uint64_t>(end, at + chunk.size());
        if (lo < hi) std::memcpy(out.data() + (lo - offset), chunk.data() + (lo - at), hi - lo);
        return Status::Ok();
      },
      end);
}

Status ZstdSource::EnsureSpilled() const {
  std::lock_guard<std::mutex> lock(spill_mu_);
  if (spill_fd_ >= 0) return Status::Ok();
  // Frame headers may declare any size: decoding a bomb whole is refused up front, as
  // learning the size of a frame without one is (frame_index.h).
  if (Size() > StreamDecodeLimit(compressed_->Size())) {
    return Status::Corruption(Name() + ": decoding this shard whole would give " +
                              std::to_string(Size()) + " bytes, more than " +
                              std::to_string(kMaxStreamDecodeRatio) +
                              " times its compressed size (a zstd bomb?); decompress it with "
                              "zstd -d, or pack it with a seek table, if it is real");
  }
  const std::string& dir = context_.options().spill_dir;
  struct statvfs vfs;
  if (::statvfs(dir.c_str(), &vfs) == 0 &&
      static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize < Size()) {
    return Status::IoError(Name() + ": decoding this single-frame shard needs " +
                               std::to_string(Size()) + " bytes free in " + dir,
                           ENOSPC);
  }
  // Unlinked from the start: nothing is left behind however the daemon ends.
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Status::IoError(dir + ": cannot create a spill file: " + std::strerror(errno), errno);
  }
  Status s = DecodeStream([&](std::span<const uint8_t> chunk, uint64_t offset) {
    if (::pwrite(fd, chunk.data(), chunk.size(), static_cast<off_t>(offset)) !=
        static_cast<ssize_t>(chunk.size())) {
      return Status::IoError(Name() + ": writing the spill file failed: " + std::strerror(errno),
                             errno);
    }
    return Status::Ok();
  });
  if (!s.ok()) {
    ::close(fd);
    context_.decode_errors.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  spill_fd_.store(fd, std::memory_order_release);
  return Status::Ok();
}

// Refuses to produce more than the index declared: a frame that lies about its size
// cannot fill the disk.
Status ZstdSource::DecodeStream(
    const std::function<Status(std::span<const uint8_t>, uint64_t)>& sink, uint64_t stop_at) const {
  // A partial decode stops as soon as it has enough; a whole one runs to the end of the
  // input, so frame trailers (checksums) are checked and trailing garbage is caught.
  const bool partial = stop_at < Size();
  auto more = [&](uint64_t decoded) { return !partial || decoded < stop_at; };
  // One stream decode at a time per mount: its window (up to the frame's window size, 8 MiB
  // at zstd's levels 1-19) and buffers are the fixed overhead the memory bound allows for.
  std::lock_guard<std::mutex> one_at_a_time(context_.stream_mu());
  DCtxPtr dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  std::unique_ptr<XXH64_state_t, XXH_errorcode (*)(XXH64_state_t*)> hash(XXH64_createState(),
                                                                         XXH64_freeState);
  constexpr size_t kChunk = 256 << 10;
  std::vector<uint8_t> in(kChunk), buf(ZSTD_DStreamOutSize());
  uint64_t decoded = 0;
  size_t last = 0;
  for (const Frame& f : index_.frames) {
    if (!more(decoded)) break;
    XXH64_reset(hash.get(), 0);
    const uint64_t frame_start = decoded;
    for (uint64_t pos = f.compressed_offset;
         pos < f.compressed_offset + f.compressed_size && more(decoded);) {
      const size_t n = std::min<uint64_t>(in.size(), f.compressed_offset + f.compressed_size - pos);
      CKPTFS_RETURN_IF_ERROR(compressed_->ReadAt(pos, {in.data(), n}));
      // Counters tell whole decodes only; a header prefix is read once, at mount.
      if (!partial) {
        context_.compressed_bytes_read.fetch_add(n, std::memory_order_relaxed);
        ChargeWork(&WorkCounters::compressed_bytes_read, n);
      }
      ZSTD_inBuffer input{in.data(), n, 0};
      while (input.pos < input.size && more(decoded)) {
        ZSTD_outBuffer output{buf.data(), buf.size(), 0};
        last = ZSTD_decompressStream(dctx.get(), &output, &input);
        if (ZSTD_isError(last)) {
          CKPTFS_RETURN_IF_ERROR(compressed_->CheckUnchanged());
          return Status::Corruption(Name() + ": near compressed offset " +
                                    std::to_string(pos + input.pos) + ": " +
                                    ZSTD_getErrorName(last));
        }
        if (decoded + output.pos > Size()) {
          return Status::Corruption(Name() + ": decodes past its declared size of " +
                                    std::to_string(Size()) + " bytes");
        }
        if (f.checksum) XXH64_update(hash.get(), buf.data(), output.pos);
        CKPTFS_RETURN_IF_ERROR(sink({buf.data(), output.pos}, decoded));
        decoded += output.pos;
      }
      pos += n;
    }
    // Each frame's compressed bytes were all read before anything of the next: the shard
    // must still be the one mounted, or what was decoded mixes two versions.
    CKPTFS_RETURN_IF_ERROR(compressed_->CheckUnchanged());
    if (!more(decoded)) break;
    // A whole frame went through: hold it to the seek table, as DecodeFrame does.
    if (f.checksum && (decoded - frame_start != f.decoded_size ||
                       static_cast<uint32_t>(XXH64_digest(hash.get())) != *f.checksum)) {
      return Status::Corruption(Name() + ": frame at compressed offset " +
                                std::to_string(f.compressed_offset) + ": checksum mismatch");
    }
  }
  if (!partial) {
    context_.bytes_decoded.fetch_add(decoded, std::memory_order_relaxed);
    ChargeWork(&WorkCounters::bytes_decoded, decoded);
  }
  if (partial ? decoded < stop_at : (decoded != Size() || last != 0)) {
    return Status::Corruption(Name() + ": decodes to " + std::to_string(decoded) +
                              " bytes, frames declare " + std::to_string(Size()));
  }
  return Status::Ok();
}

size_t ZstdSource::VerifyAll(const std::function<void(const Status&, size_t frame)>& report,
                             const std::function<void(uint64_t decoded)>& progress) const {
  if (whole_) {
    Status s = DecodeStream([&](std::span<const uint8_t> bytes, uint64_t) {
      if (progress) progress(bytes.size());
      return Status::Ok();
    });
    if (!s.ok()) report(s, kWholeStream);
    return s.ok() ? 0 : 1;
  }
  size_t damaged = 0;
  for (size_t i = 0; i < index_.frames.size(); ++i) {
    // Frame decodes fetch only their own frame (DecodeFrameBytes): the next one is asked
    // for here, so a remote shard is fetched while this frame decodes.
    if (i + 1 < index_.frames.size()) {
      const Frame& next = index_.frames[i + 1];
      compressed_->Prefetch(next.compressed_offset, next.compressed_size);
    }
    std::unique_ptr<uint8_t[]> out(new uint8_t[index_.frames[i].decoded_size]);
    Status s = DecodeFrame(i, {out.get(), index_.frames[i].decoded_size});
    if (!s.ok()) {
      report(s, i);
      ++damaged;
    }
    if (progress) progress(index_.frames[i].decoded_size);
  }
  return damaged;
}

}  // namespace ckptfs
