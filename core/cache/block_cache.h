// BlockCache: the one byte-bounded LRU of decoded blocks shared by every view of a mount.
//
// Contract:
// - Entries are keyed by (source id, block number) and charged their size in bytes.
//   The total charge of unpinned entries is kept at or below the capacity by evicting
//   the least recently used unpinned entries.
// - GetOrLoad returns a Handle that pins its entry: a pinned entry is never evicted or
//   freed, so a reader may copy from Handle::data() without holding any lock. Pinned
//   entries still count towards the charge; while many are pinned the charge may exceed
//   the capacity by at most the pinned bytes (readers in flight x block size).
// - On a miss the caller's loader fills a buffer of the requested size. Concurrent
//   GetOrLoad calls for the same key wait for one load instead of decoding twice. A
//   failed load is not cached: every waiter gets its Status and the next call retries.
// - Thread safety: every method may be called from any thread. Keys are spread over
//   several independently locked shards so readers of different blocks rarely contend.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "core/status.h"

namespace ckptfs {

struct BlockKey {
  uint64_t source = 0;  // from BlockCache::NewSourceId()
  uint64_t block = 0;
  bool operator==(const BlockKey&) const = default;
};

class BlockCache {
 public:
  struct Counters {
    uint64_t hits = 0;
    uint64_t misses = 0;          // loads started
    uint64_t coalesced = 0;       // callers that waited for another caller's load
    uint64_t evictions = 0;
    uint64_t load_errors = 0;
    uint64_t bytes_loaded = 0;    // bytes produced by loaders (decoded bytes)
    uint64_t charged_bytes = 0;   // current total charge
    uint64_t pinned_bytes = 0;    // current charge of pinned entries
    uint64_t entries = 0;
    uint64_t capacity_bytes = 0;
  };

  class Entry;  // opaque

  // A pinned reference to a cached block. Move-only; the pin is released on destruction.
  class Handle {
   public:
    Handle() = default;
    Handle(Handle&& other) noexcept;
    Handle& operator=(Handle&& other) noexcept;
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    ~Handle();

    std::span<const uint8_t> data() const;
    explicit operator bool() const { return entry_ != nullptr; }

   private:
    friend class BlockCache;
    Handle(BlockCache* cache, Entry* entry) : cache_(cache), entry_(entry) {}
    BlockCache* cache_ = nullptr;
    Entry* entry_ = nullptr;
  };

  // Fills `out` (exactly the requested size) with the block's bytes.
  using Loader = std::function<Status(std::span<uint8_t> out)>;

  explicit BlockCache(uint64_t capacity_bytes);
  ~BlockCache();  // all Handles must be gone
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // A fresh id for a source whose blocks will be cached.
  uint64_t NewSourceId();

  // The pinned block `key`, loading `size` bytes with `loader` on a miss.
  Result<Handle> GetOrLoad(const BlockKey& key, size_t size, const Loader& loader);

  // True if `key` is cached or being loaded (used by prefetch to skip work).
  bool ContainsOrLoading(const BlockKey& key) const;

  uint64_t capacity() const;
  Counters counters() const;

 private:
  struct Shard;
  Shard& ShardFor(const BlockKey& key) const;
  void Unpin(Entry* entry);

  std::unique_ptr<Shard[]> shards_;
  size_t shard_count_;
  uint64_t capacity_;
  // (private state as the implementation needs)
};

}  // namespace ckptfs
