// RemoteSource: an object on a server (an HttpSource) read in blocks through the mount's
// shared block cache, the disk cache, and many fetches in flight.
//
// Two phases. While a checkpoint is being opened, reads go straight to the server for
// exactly the bytes asked for: parsing headers (a safetensors header, a zip's directory,
// a seek table) then fetches only those bytes, not a block around each. (A warm disk
// cache answers it instead: each read made while opening is kept there as it was read,
// beside the blocks, so a second mount sends the server nothing but the requests that
// check each object is unchanged.) Once the mount serves (BeginServing), every read is cut
// into blocks, each fetched once into the block cache through CachedBlocks
// (core/source/cached_blocks.h) and shared by all views. The blocks are kBlockSize, cut
// also at the offsets SetBlockCuts names (a shard's tensors' edges): small tensors share a
// block, a remainder under kMinBlock joins the block before it, so a read of one tensor
// fetches that tensor's bytes, not a partial block of each neighbour (kMinBlock at most).
//
// Where a block comes from, in order: the block cache (memory); the disk cache, when the
// mount has one (checked against the object's identity: URL, ETag and size, so bytes of
// an older version are never used; the caller passes no disk cache for an object with
// neither a strong ETag nor a Last-Modified, HttpSource::NamesItsBytes; a block's name
// there is its offset and length); another mount sharing the disk cache that is fetching
// it already (DiskCache::TryClaim: this one waits for its entry, within --timeout); the
// server, after which the block is written to the disk cache.
//
// How many blocks are fetched at once is the context's FetchLimit (core/cache/
// fetch_limit.h): a fetch on the fetch workers waits for a slot, a reader's own does not,
// and every fetch's time feeds the rule.
//
// Parallelism: Prefetch(range) queues the blocks of the range on the context's fetch
// workers, so a read that starts a tensor fetches the rest of it in parallel chunks, and
// a sequential reader's window (see Readahead) is in flight while it copies. A read that
// spans several missing blocks queues all but the first before fetching the first itself
// (CachedBlocks).
// ReadAt callers once serving (a ZstdSource decoding a shard whole, `verify` or `pack` of
// a plain shard) feed a Readahead of the source's own, so streaming through it fetches
// ahead too. FUSE reads come through Lend and the volume's per-file readahead instead, and
// so do a ZstdSource's frame decodes (lent reads of exactly their frame's bytes, asked for
// with Prefetch first): the frames a read needs are known, and a readahead fed by their
// chunks ran a whole window past them. So the bytes fetched for one frame are its
// compressed bytes rounded out to whole blocks: less than kBlockSize more at each end.
// Prefetch never asks for more than ReadContext::AheadBudget() at once, and the fetch
// queue is bounded: a slow server means waiting, never unbounded memory.
//
// Timeouts. Once a read of the object ran out of time (the object's ReadAt failed with
// ETIMEDOUT: no answer within --timeout), every further read of the object fails at once,
// with that first error, for TimedOutWindow(timeout), or until a block of it arrives (a
// fetch that began before the timeout and was answered after all): the server has stopped
// answering for this object, and asking it again would only make each reader wait
// --timeout once more. That reader may be the kernel retrying what it was refused (a
// failed readahead page by page, an mmap fault once or twice more), or an mmap fault whose
// own request was queued behind readahead requests that timed out (the kernel sends at most
// a dozen at once), or any other block the loader touches next. So a fault fails within
// --timeout plus a little, whichever of its requests timed out first, never a multiple of
// it. After the window, the next read asks the server again.
//
// Thread-safe. Errors (the server's, with its retries and --timeout) are IoErrors (EIO)
// naming the object; a failed block is not cached, so the next read tries again (after
// TimedOutWindow, for a timeout).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/cache/prefetch.h"
#include "core/cache/read_context.h"
#include "core/source/byte_source.h"
#include "core/source/cached_blocks.h"

namespace ckptfs {

class DiskCache;

class RemoteSource final : public ByteSource, private BlockSet {
 public:
  static constexpr uint64_t kBlockSize = uint64_t{1} << 20;
  // Blocks cut at a tensor's edges are never smaller than this (small tensors share one,
  // up to kBlockSize), and a tensor's last block takes a remainder smaller than this
  // rather than make it a block of its own: blocks are at most kBlockSize + kMinBlock.
  static constexpr uint64_t kMinBlock = uint64_t{64} << 10;

  // How long an object that timed out fails at once (see the top of this file): the
  // object's own --timeout, at least kMinTimedOutWindow (the kernel's retry comes within
  // milliseconds, but a loaded machine may take longer to send it) and at most
  // kMaxTimedOutWindow (a reader asking again later asks the server again).
  static constexpr std::chrono::milliseconds kMinTimedOutWindow{1000};
  static constexpr std::chrono::milliseconds kMaxTimedOutWindow{5000};
  static std::chrono::milliseconds TimedOutWindow(std::chrono::milliseconds timeout) {
    return std::clamp(timeout, kMinTimedOutWindow, kMaxTimedOutWindow);
  }

  // `identity` names this version of the object (see HttpSource::Identity); the disk
  // cache keys blocks by it. `timeout` is how long one read of `object` may take
  // (HttpOptions::timeout). `context` (and `disk`, if not null) must outlive the source.
  RemoteSource(std::unique_ptr<ByteSource> object, std::string identity, ReadContext& context,
               DiskCache* disk, std::chrono::milliseconds timeout);
  ~RemoteSource() override;

  uint64_t Size() const override { return object_->Size(); }
  // Once serving, lends cached blocks when the reader takes lent spans.
  Status Read(uint64_t offset, uint64_t length, ReadSink& sink) const override;
  const std::string& Name() const override { return object_->Name(); }
  struct timespec MTime() const override {
    return object_->MTime();
  }
  void Prefetch(uint64_t offset, uint64_t length) const override;
  void BeginServing() override;
  // Cuts the blocks at these offsets too (see the top of this file). Before BeginServing.
  void SetBlockCuts(std::vector<uint64_t> cuts) override;
  // The object's identity (URL, validator, size), or empty if the server gave no
  // validator: a changed object could then not be told from the one cached.
  std::string Identity() const override;

 private:
  Status ReadInto(uint64_t offset, std::span<uint8_t> out) const;
  // BlockSet: fixed kBlockSize blocks, loaded from the disk cache, else the server (then
  // published to the disk cache).
  size_t BlockCount() const override;
  size_t BlockAt(uint64_t offset) const override;
  ByteRange BlockRange(size_t block) const override;
  // The disk cache's name for a block of `length` bytes (its offset is the block number
  // the cache is given): blocks cut differently never share a name.
  std::string DiskName(uint64_t length) const;
  Status LoadBlock(size_t block, std::span<uint8_t> out, bool* from_server) const override;
  void Published(size_t block, std::span<const uint8_t> bytes) const override;
  uint64_t BlockLength(uint64_t block) const;
  // Before BeginServing: exact ranges from the server, unless the disk cache holds every
  // block the range touches.
  Status ReadWhileOpening(uint64_t offset, std::span<uint8_t> out) const;
  bool ReadFromDisk(uint64_t offset, std::span<uint8_t> out) const;
  // Timeouts (see the top of this file). The error the object timed out with less than
  // timed_out_window_ ago, with no block fetched since, or Ok.
  Status RecentTimeout() const;
  // Remembers that a read of the object timed out now with `status`.
  void NoteTimeout(const Status& status) const;
  // A block was fetched: the object answers again.
  void ClearTimeout() const;
  // A serving read of `length` bytes through `read`, failing at once while the object has
  // just timed out.
  template <typename ReadBlocks>
  Status ServeBlocks(uint64_t length, ReadBlocks read) const;

  std::unique_ptr<ByteSource> object_;
  const std::string identity_;
  ReadContext& context_;
  DiskCache* const disk_;
  std::atomic<bool> serving_{false};
  // Where each block starts, and Size() last; empty: kBlockSize blocks. Set before serving.
  std::vector<uint64_t> starts_;
  std::unique_ptr<CachedBlocks> blocks_;  // made by BeginServing, once the blocks are known
  const std::chrono::milliseconds timeout_;
  std::unique_ptr<Readahead> readahead_;  // for ReadAt callers
  // The disk cache block last read while opening: header parsing makes many small reads
  // (a zip's local headers), most within one block.
  mutable std::mutex opening_mu_;
  mutable uint64_t opening_block_ = UINT64_MAX;  // guarded by opening_mu_
  mutable std::vector<uint8_t> opening_bytes_;   // guarded by opening_mu_
  const std::chrono::milliseconds timed_out_window_;
  mutable std::mutex timed_out_mu_;
  mutable bool timed_out_ = false;                              // guarded by timed_out_mu_
  mutable std::chrono::steady_clock::time_point timed_out_at_;  // guarded by timed_out_mu_
  mutable Status timed_out_status_;                             // guarded by timed_out_mu_
};

}  // namespace ckptfs
