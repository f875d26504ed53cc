// BlockCache: the one byte-bounded LRU of decoded blocks shared by every view of a mount.
//
// Contract:
// - Entries are keyed by (source id, block number) and charged their size in bytes from
//   the moment their load is admitted (before their buffer exists) until evicted.
// - Memory bound: the charge, pinned entries and loads in flight included, plus the spare
//   buffers kept for reuse, stays at or below the capacity. A load that does not fit waits
//   until releases and evictions make room for it. The one exception keeps the cache from
//   deadlocking: when every pinned byte belongs to callers that are themselves waiting for
//   room (a reply that pins one block while it loads the next, a block larger than the
//   whole cache), one of them goes ahead over the capacity (counted in `overdrafts`); it
//   is at most one block beyond the capacity per such stalled caller.
// - GetOrLoad returns a Handle that pins its entry: a pinned entry is never evicted or
//   freed, so a reader may copy from Handle::data() without holding any lock.
// - On a miss the caller's loader fills a buffer of the requested size. Concurrent
//   GetOrLoad calls for the same key wait for one load instead of decoding twice. A
//   failed load is not cached: every waiter gets its Status and the next call retries.
// - A reader that has consumed a block may mark it so: consumed blocks are evicted before
//   all others (oldest first), so streaming cannot push out blocks decoded ahead, and
//   they may use only an eighth of the capacity, so streaming touches little memory.
// - Thread safety: every method may be called from any thread. Keys are spread over
//   several independently locked shards so readers of different blocks rarely contend.
//   A Handle should be released on the thread that got it: the cache tells a caller that
//   holds pins (and must not wait for room) by a per-thread count.
//
// Details the contract above leaves open:
// - Recency is the time a block was last released: an entry leaves the LRU order while
//   pinned and re-enters it as most recently used when its last Handle goes (leveldb's
//   in-use list). Eviction therefore never looks at pinned entries at all.
// - The capacity is global, not split per shard: one 4 MiB block in a cache of 8 MiB
//   must not evict its whole shard. Eviction takes the globally least recently released
//   entry (each shard's LRU list is ordered by a global clock).
// - Capacity 0 caches nothing: each block lives only while some Handle pins it, and
//   loads run one at a time.
// - A block's size is part of its identity: asking for a cached key with another size is
//   an InvalidArgument error (two sources sharing an id, or a stale block table).
// - A loader that throws fails the load like an error Status (IoError): exceptions never
//   leave GetOrLoad. A buffer that cannot be allocated fails with ENOMEM.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

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
    uint64_t misses = 0;     // loads started
    uint64_t coalesced = 0;  // callers that waited for another caller's load
    uint64_t evictions = 0;
    uint64_t load_errors = 0;
    uint64_t bytes_loaded = 0;   // bytes produced by loaders (decoded bytes)
    uint64_t charged_bytes = 0;  // current total charge
    uint64_t pinned_bytes = 0;   // current charge of pinned entries
    uint64_t entries = 0;
    uint64_t capacity_bytes = 0;
    uint64_t overdrafts = 0;          // loads let past the capacity to break a stall
    uint64_t peak_charged_bytes = 0;  // highest charge so far
    uint64_t spare_bytes = 0;         // evicted buffers kept for reuse (within the capacity)
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
    // A reader has consumed the whole block: once unpinned it is evicted before any block
    // not yet consumed, so streaming through a checkpoint recycles its own frames instead
    // of pushing out frames decoded ahead or still wanted by other readers.
    void MarkConsumed();

   private:
    friend class BlockCache;
    Handle(BlockCache* cache, Entry* entry);
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
  // Charges a new block of `size` bytes once it fits (see the memory bound above).
  void Admit(size_t size);
  // Wakes loads waiting in Admit: a pin was released or a load failed.
  void NotifyRoom();
  // Adds (or takes back) pins of a caller waiting for another caller's load.
  void AddWaitingHeld(uint64_t held, bool add);
  // Evicted buffers kept for reuse, bounded by MaxSpareBytes() and by the room the charge
  // leaves under the capacity (not charged: they hold no block).
  static constexpr uint64_t kMaxSpareBytes = 16ull << 20;
  // Block memory straight from mmap: see AllocateBuffer in the .cc.
  struct BufferFree {
    size_t bytes = 0;
    void operator()(uint8_t* p) const;
  };
  using Buffer = std::unique_ptr<uint8_t[], BufferFree>;
  static Buffer AllocateBuffer(size_t size);
  void KeepSpare(Buffer buffer, size_t size);
  // Frees spares until charge plus spares fit the capacity.
  void TrimSpares();
  // Consumed blocks may hold at most ColdBudget() bytes even when the cache has room:
  // a reader streaming through a checkpoint then recycles a few buffers instead of
  // touching fresh memory up to the capacity, while a recent re-read still hits.
  uint64_t ColdBudget() const;
  bool OverBudget(uint64_t incoming) const;
  std::atomic<uint64_t> cold_bytes_{0};
  Buffer TakeSpare(size_t size);
  uint64_t MaxSpareBytes() const;
  mutable std::mutex spare_mu_;
  std::vector<std::pair<size_t, Buffer>> spares_;  // guarded by spare_mu_
  uint64_t spare_bytes_ = 0;                       // guarded by spare_mu_
  // Runs the loader for `entry` (pinned by the caller, state loading) and publishes the
  // outcome to every waiter.
  Status Load(Shard& shard, Entry* entry, const Loader& loader);
  // Evicts least recently released entries until the charge plus `incoming` fits the
  // capacity or nothing unpinned is left.
  void EvictIfNeeded(uint64_t incoming = 0);

  std::unique_ptr<Shard[]> shards_;
  size_t shard_count_;
  uint64_t capacity_;

  // Serializes evictors (never held by readers of a hit): only eviction lowers the charge
  // of live entries, so one evictor at a time never evicts more than needed. Lock order:
  // evict_mu_ before any shard's mutex; at most one shard mutex is held at a time.
  std::mutex evict_mu_;
  std::atomic<uint64_t> clock_{0};  // orders releases across shards
  // Admission: held while a load is charged, so two loads never both take the last room.
  // Lock order: room_mu_ before evict_mu_.
  std::mutex room_mu_;
  std::condition_variable room_freed_;
  uint64_t waiting_held_ = 0;  // guarded by room_mu_: bytes pinned by waiting callers
  std::atomic<int> waiters_{0};
  std::atomic<uint64_t> overdrafts_{0};
  std::atomic<uint64_t> peak_charged_bytes_{0};
  std::atomic<uint64_t> next_source_id_{1};

  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> misses_{0};
  std::atomic<uint64_t> coalesced_{0};
  std::atomic<uint64_t> evictions_{0};
  std::atomic<uint64_t> load_errors_{0};
  std::atomic<uint64_t> bytes_loaded_{0};
  std::atomic<uint64_t> charged_bytes_{0};
  std::atomic<uint64_t> pinned_bytes_{0};
  std::atomic<uint64_t> entries_{0};
};

}  // namespace ckptfs
