// ZstdSource: a zstd-compressed shard seen as its decoded bytes (a ByteSource again).
//
// Frames up to kMaxCachedFrame are decoded on demand, one frame per cache block, through
// CachedBlocks (core/source/cached_blocks.h): a read decodes only the frames it touches,
// each at most once while it stays cached, several readers of one frame share one decode,
// and a read spanning two frames decodes them on two cores. A frame's decode reads exactly
// its compressed bytes (asking the compressed source to prefetch them, then taking them as
// lent spans where it lends: no readahead past the frame). Prefetch() decodes frames
// ahead on the context's decode workers; the volume calls it for sequential readers and
// for the rest of a tensor whose start was read (see Volume::Read). Each decode is charged
// to the thread's WorkCounters (read_context.h) as well as the context's counters.
//
// A shard with any frame larger than MaxCachedFrame(cache capacity) (a quarter of the
// cache, at most 64 MiB: single-frame zstd as the `zstd` command writes it, or frames too
// big for a small --cache-size) is decoded once, on first touch, into an unlinked
// temporary file in the spill directory, then read from there (and spliced, via Fd()).
// A shard that would decode whole to more than StreamDecodeLimit of its compressed size
// (frame_index.h) is refused instead (Corruption): its frame headers may claim any size.
// Until then, reads near the start (the safetensors header at mount) stream-decode just
// that prefix. Stream decodes run one at a time per mount in fixed buffers (256 KiB in,
// 128 KiB out) plus the frame's zstd window: that, not the frame, is what they cost in
// memory, so no frame size escapes the cache's bound (see ReadContext).
//
// A byte-grouped frame (`ckptfs pack --byte-group`, core/codec/byte_group.h) is un-grouped
// right after it is decoded, before its checksum is checked and before it is cached, so
// every reader sees the original bytes. The stream path (spill, prefix) cannot un-group:
// Open refuses a grouped shard with a frame that would take it (a frame larger than
// MaxCachedFrame of the cache), naming the --cache-size that would do.
//
// Every decode checks the frame's size, that it is exactly one frame, and the seek
// table's checksum when present; failures are Corruption naming the shard, frame and
// offset. Every decoded frame, every spill decode and every read (from the cache or the
// spill file) is also checked against the shard as it was at mount
// (compressed->CheckUnchanged(), after the bytes were read): a shard rewritten in place
// gives that error (EIO), never a mix of old and new bytes, and no frame of the new file
// is cached. Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "core/cache/read_context.h"
#include "core/codec/frame_index.h"
#include "core/source/byte_source.h"
#include "core/source/cached_blocks.h"

namespace ckptfs {

inline constexpr uint64_t kMaxCachedFrame = 64ull << 20;
// Frames up to this size go through a cache of `cache_bytes`; a shard with a larger one
// is decoded through the spill file. A quarter: several readers' frames fit at once.
inline constexpr uint64_t MaxCachedFrame(uint64_t cache_bytes) {
  return cache_bytes / 4 < kMaxCachedFrame ? cache_bytes / 4 : kMaxCachedFrame;
}

class ZstdSource final : public ByteSource, private BlockSet {
 public:
  // `compressed` holds the .zst bytes; `context` must outlive the source. Until a shard
  // stored as one large frame is spilled, a read that starts in its first 64 KiB and ends
  // within `header_prefix` bytes decodes just that prefix: the format's header, read at
  // mount (its caller knows how large a header may be; 0: no such reads).
  static Result<std::unique_ptr<ZstdSource>> Open(std::unique_ptr<ByteSource> compressed,
                                                  ReadContext& context, uint64_t header_prefix = 0);
  ~ZstdSource() override;

  uint64_t Size() const override { return index_.decoded_size; }
  // Lends cached frames when the reader takes lent spans; a shard decoded whole (a spill
  // file) is copied.
  Status Read(uint64_t offset, uint64_t length, ReadSink& sink) const override;
  const std::string& Name() const override { return compressed_->Name(); }
  struct timespec MTime() const override {
    return compressed_->MTime();
  }
  // The spill file, once a single-frame shard has been decoded; -1 before.
  int Fd() const override { return spill_fd_.load(std::memory_order_acquire); }
  void Prefetch(uint64_t offset, uint64_t length) const override;
  void BeginServing() override { compressed_->BeginServing(); }
  Status CheckUnchanged() const override;
  // A seek table with a checksum for every frame names the decoded bytes themselves
  // ("zstd-frames", then each frame's size and XXH64 checksum, hashed): the same packed
  // shard copied anywhere, local or remote, has the same identity. Otherwise "zstd" and
  // the compressed file's identity (empty if it has none).
  std::string Identity() const override;

  std::string StorageKind() const override;
  // Bytes of the .zst file as stored (frames and seek table).
  uint64_t StoredSize() const override { return compressed_->Size(); }

  const FrameIndex& index() const { return index_; }
  bool decodes_whole() const { return whole_; }
  // Decodes frame `i` into `out` (exactly its decoded size), checking it.
  Status DecodeFrame(size_t i, std::span<uint8_t> out) const;
  // Decodes everything without caching it, checking every frame; calls `report` once per
  // damaged frame with its index in index().frames (or once with kWholeStream for a
  // damaged stream decoded whole), and `progress`, if set, with the decoded bytes of each
  // step as it goes. Returns the number reported.
  static constexpr size_t kWholeStream = SIZE_MAX;
  size_t VerifyAll(const std::function<void(const Status&, size_t frame)>& report,
                   const std::function<void(uint64_t decoded)>& progress = {}) const;

 private:
  Status ReadInto(uint64_t offset, std::span<uint8_t> out) const;
  ZstdSource(std::unique_ptr<ByteSource> compressed, FrameIndex index, ReadContext& context,
             uint64_t header_prefix);

  // BlockSet: a block is a frame, loaded by decoding it.
  size_t BlockCount() const override { return index_.frames.size(); }
  size_t BlockAt(uint64_t offset) const override { return index_.FrameAt(offset); }
  ByteRange BlockRange(size_t i) const override;
  Status LoadBlock(size_t i, std::span<uint8_t> out, bool* publish) const override;

  Status DecodeFrameBytes(size_t i, std::span<uint8_t> out) const;
  Status ReadPrefix(uint64_t offset, std::span<uint8_t> out) const;
  Status EnsureSpilled() const;
  // Stream-decodes from the first frame, handing each decoded chunk and its offset to
  // `sink`, until at least `stop_at` bytes are out; with the default, the whole shard.
  Status DecodeStream(const std::function<Status(std::span<const uint8_t>, uint64_t)>& sink,
                      uint64_t stop_at = UINT64_MAX) const;

  std::unique_ptr<ByteSource> compressed_;
  FrameIndex index_;
  ReadContext& context_;
  uint64_t header_prefix_;
  bool whole_;
  std::unique_ptr<CachedBlocks> frames_;  // null when whole_
  mutable std::mutex spill_mu_;
  mutable std::atomic<int> spill_fd_{-1};
};

}  // namespace ckptfs
