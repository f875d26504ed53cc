// CachedBlocks: the one way a source's bytes go through the mount's block cache.
//
// A source read in blocks (a compressed shard's frames, a remote object's 1 MiB blocks)
// says what its blocks are and how to load one (a BlockSet); CachedBlocks does the rest,
// the same way for both:
// - lookup and coalesced load: a block is loaded once while it stays cached, however many
//   readers ask for it at once (BlockCache::GetOrLoad), and pinned while it is lent;
// - reads: a read spanning several blocks queues all but the first on the context's
//   workers before loading the first itself, so the blocks of one read load in parallel;
//   a read only ever loads the blocks it touches;
// - readahead: Schedule(range) queues the blocks of a range not cached or loading yet, one
//   queued task per block however many windows ask for it, at most ReadContext::AheadBudget()
//   bytes per call; prefetch is best effort (a full queue drops it, and the reader then
//   loads the block itself);
// - accounting: a queued load is charged to the WorkCounters of the thread that queued it
//   (current_work_counters, read_context.h);
// - recycling: a block whose every byte has been handed out is marked consumed, so a reader
//   streaming through a source recycles its own blocks first (BlockCache::MarkConsumed).
//
// Which workers load ahead is the source's call: decoding is CPU work (kDecode), fetching
// is waiting on a server (kFetch). Thread-safe; the BlockSet and the context must outlive
// this object, and the context's workers must be stopped or drained (ReadContext::Shutdown,
// DropPending) before it dies, since queued tasks point at it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/cache/block_cache.h"
#include "core/cache/prefetch.h"
#include "core/cache/read_context.h"
#include "core/source/byte_source.h"
#include "core/status.h"

namespace ckptfs {

// What a source tells CachedBlocks about its blocks. Blocks tile [0, size) in order.
class BlockSet {
 public:
  virtual ~BlockSet() = default;
  virtual size_t BlockCount() const = 0;
  // The block holding `offset` (< the source's size).
  virtual size_t BlockAt(uint64_t offset) const = 0;
  // Where block `block`'s bytes sit in the source.
  virtual ByteRange BlockRange(size_t block) const = 0;
  // Fills `out` (exactly BlockRange(block).size() bytes) with the block's bytes. Setting
  // `*publish` asks for Published once the block is in the cache and its waiters have it.
  virtual Status LoadBlock(size_t block, std::span<uint8_t> out, bool* publish) const = 0;
  // Called after a load that set `*publish` (a fetched block written to the disk cache
  // while no reader waits for it).
  virtual void Published(size_t /*block*/, std::span<const uint8_t> /*bytes*/) const {}
};

class CachedBlocks {
 public:
  using Workers = ReadContext::Workers;

  CachedBlocks(const BlockSet& blocks, ReadContext& context, Workers workers);
  CachedBlocks(const CachedBlocks&) = delete;
  CachedBlocks& operator=(const CachedBlocks&) = delete;

  // Block `block`, pinned, loaded if it is not cached.
  Result<BlockCache::Handle> Get(size_t block) const;
  // Readahead: queues loads of the blocks overlapping [begin, end) that are neither cached
  // nor loading nor queued, from the first on, until AheadBudget() bytes or a full queue;
  // counted in the context's prefetches (kDecode) or remote_prefetches (kFetch).
  void Schedule(uint64_t begin, uint64_t end) const { Queue(begin, end, true); }
  // Whether block `block` is cached or being loaded (a hint: it may be evicted at once).
  bool Holds(size_t block) const;
  // Calls `fn(block, bytes)` for each block overlapping [offset, offset + length), in
  // order, with the bytes of the block inside the range. The caller checks the range.
  Status ForEach(
      uint64_t offset, uint64_t length,
      const std::function<void(BlockCache::Handle&, std::span<const uint8_t>)>& fn) const;
  // Copies [offset, offset + out.size()) into `out`.
  Status Read(uint64_t offset, std::span<uint8_t> out) const;
  // Appends the blocks' bytes covering [offset, offset + length), each keeping its block pinned.
  Status Lend(uint64_t offset, uint64_t length, std::vector<LentBytes>* out) const;

 private:
  // Schedule's work; `ahead` counts the queued loads as prefetches (a read's own later
  // blocks, queued to load in parallel, are not).
  void Queue(uint64_t begin, uint64_t end, bool ahead) const;

  const BlockSet& blocks_;
  ReadContext& context_;
  const Workers workers_;
  const uint64_t cache_id_;
  std::unique_ptr<std::atomic<bool>[]> queued_;  // block has a load task queued
  // Bytes of each block handed out since it was last loaded; at its size the block has
  // been read through and is marked consumed.
  std::unique_ptr<std::atomic<uint64_t>[]> consumed_;
};

}  // namespace ckptfs
