#include "core/cache/block_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cassert>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <limits>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

namespace ckptfs {
namespace {

// 16 shards: enough that FUSE worker threads (a handful) and prefetch workers (one per
// core) rarely meet on one mutex; more would only lengthen the eviction scan.
constexpr size_t kShardBits = 4;
constexpr size_t kShardCount = size_t{1} << kShardBits;

// Longest a load waits for room before it goes over the capacity (see Admit): far longer
// than decoding a few frames takes, short enough that a stall it breaks is noticed only
// as one slow read.
constexpr auto kMaxRoomWait = std::chrono::seconds(5);

// splitmix64's finalizer: block numbers are small consecutive integers, so the raw key
// would put neighbouring blocks of one source in neighbouring buckets and one shard.
uint64_t HashKey(const BlockKey& key) {
  uint64_t x = key.source * 0x9E3779B97F4A7C15ull ^ key.block;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Bytes of blocks this thread holds pinned (its Handles, and the block its loader is
// filling). A load that would have to wait for room compares it with what the waiters hold
// in total: when every pinned byte belongs to a waiter, nobody can free room, so one waiter
// goes ahead over the capacity instead of all of them waiting forever. Handles are released
// on the thread that took them (a FUSE reply, a prefetch task); if one were not, the figure
// would only make that detection earlier or later, never wrong data. Signed, and read
// through HeldBytes, so a release on another thread cannot wrap it to a huge figure that
// would count every pin as stalled and let every load go over the capacity.
thread_local int64_t t_held_bytes = 0;

uint64_t HeldBytes() { return t_held_bytes > 0 ? static_cast<uint64_t>(t_held_bytes) : 0; }

struct KeyHash {
  size_t operator()(const BlockKey& key) const { return static_cast<size_t>(HashKey(key)); }
};

}  // namespace

class BlockCache::Entry {
 public:
  enum class State { kLoading, kReady, kFailed };

  BlockKey key;
  size_t size = 0;
  BlockCache::Buffer data;  // set once, under the shard mutex, when ready

  // The rest is guarded by the shard's mutex.
  State state = State::kLoading;
  Status error;              // when kFailed
  uint32_t refs = 0;         // Handles plus callers inside GetOrLoad (loader and waiters)
  uint64_t released_at = 0;  // clock_ value when the last pin went; orders eviction
  bool consumed = false;     // a reader has read it all: evicted before unconsumed blocks
  bool in_cold = false;      // linked in the shard's list of consumed blocks
  // Links of the shard's LRU list, non-null exactly while the entry is unpinned and cached.
  Entry* prev = nullptr;
  Entry* next = nullptr;
};

struct BlockCache::Shard {
  std::mutex mu;
  std::condition_variable loaded;  // a load in this shard finished (ready or failed)
  std::unordered_map<BlockKey, Entry*, KeyHash> table;
  // Dummy heads of two circular lists of unpinned entries, each in release order (next is
  // the least recently released): consumed blocks, evicted first, and the others.
  Entry lru;
  Entry cold;

  Shard() {
    lru.prev = lru.next = &lru;
    cold.prev = cold.next = &cold;
  }
  static bool Empty(const Entry& head) { return head.next == &head; }
  bool LruEmpty() const { return Empty(lru); }
  // Links `e` into the list its state calls for; returns the bytes it adds to the cold list.
  uint64_t LruAppend(Entry* e) {
    e->in_cold = e->consumed;
    Entry& head = e->consumed ? cold : lru;
    e->next = &head;
    e->prev = head.prev;
    e->prev->next = e;
    head.prev = e;
    return e->in_cold ? e->size : 0;
  }
  // Unlinks `e`; returns the bytes it takes off the cold list.
  static uint64_t LruRemove(Entry* e) {
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->prev = e->next = nullptr;
    const bool was_cold = std::exchange(e->in_cold, false);
    return was_cold ? e->size : 0;
  }
};

BlockCache::Handle::Handle(BlockCache* cache, Entry* entry) : cache_(cache), entry_(entry) {
  t_held_bytes += static_cast<int64_t>(entry->size);
}

BlockCache::Handle::Handle(Handle&& other) noexcept : cache_(other.cache_), entry_(other.entry_) {
  other.cache_ = nullptr;
  other.entry_ = nullptr;
}

BlockCache::Handle& BlockCache::Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    if (entry_ != nullptr) cache_->Unpin(entry_);
    cache_ = other.cache_;
    entry_ = other.entry_;
    other.cache_ = nullptr;
    other.entry_ = nullptr;
  }
  return *this;
}

BlockCache::Handle::~Handle() {
  if (entry_ != nullptr) cache_->Unpin(entry_);
}

std::span<const uint8_t> BlockCache::Handle::data() const {
  // No lock: the entry is ready and pinned, so its buffer is immutable and stays put.
  if (entry_ == nullptr) return {};
  return {entry_->data.get(), entry_->size};
}

BlockCache::BlockCache(uint64_t capacity_bytes)
    : shards_(new Shard[kShardCount]), shard_count_(kShardCount), capacity_(capacity_bytes) {}

BlockCache::~BlockCache() {
  for (size_t i = 0; i < shard_count_; ++i) {
    for (auto& [key, entry] : shards_[i].table) {
      assert(entry->refs == 0 && "BlockCache destroyed while a Handle is alive");
      delete entry;
    }
  }
}

uint64_t BlockCache::NewSourceId() {
  return next_source_id_.fetch_add(1, std::memory_order_relaxed);
}

BlockCache::Shard& BlockCache::ShardFor(const BlockKey& key) const {
  return shards_[HashKey(key) >> (64 - kShardBits)];
}

Result<BlockCache::Handle> BlockCache::GetOrLoad(const BlockKey& key, size_t size,
                                                 const Loader& loader) {
  Shard& shard = ShardFor(key);
  Entry* entry = nullptr;
  {
    std::unique_lock lock(shard.mu);
    auto it = shard.table.find(key);
    if (it != shard.table.end()) {
      entry = it->second;
      if (entry->size != size) {
        return Status::InvalidArgument("block cache: block " + std::to_string(key.block) +
                                       " of source " + std::to_string(key.source) + " is " +
                                       std::to_string(entry->size) + " bytes, asked for " +
                                       std::to_string(size));
      }
      if (entry->refs++ == 0) {
        cold_bytes_.fetch_sub(Shard::LruRemove(entry), std::memory_order_relaxed);
        pinned_bytes_.fetch_add(entry->size, std::memory_order_relaxed);
      }
      if (entry->state == Entry::State::kReady) {
        hits_.fetch_add(1, std::memory_order_relaxed);
        entry->consumed = false;  // wanted again: back among the blocks worth keeping
        return Handle(this, entry);
      }
      coalesced_.fetch_add(1, std::memory_order_relaxed);
      // Waiting for another caller's load is waiting for room too (that load may be
      // waiting in Admit): the pins this caller holds count as stalled meanwhile.
      const uint64_t held = HeldBytes();
      if (held > 0) {
        lock.unlock();  // room_mu_ comes before any shard mutex
        AddWaitingHeld(held, true);
        lock.lock();
      }
      shard.loaded.wait(lock, [entry] { return entry->state != Entry::State::kLoading; });
      if (held > 0) {
        lock.unlock();
        AddWaitingHeld(held, false);
        lock.lock();
      }
      if (entry->state == Entry::State::kReady) return Handle(this, entry);
      // Failed: the loader already took the entry out of the table and uncharged it; the
      // last caller to see the error frees it.
      Status error = entry->error;
      if (--entry->refs == 0) {
        lock.unlock();
        delete entry;
      }
      return error;
    }
    entry = new Entry;
    entry->key = key;
    entry->size = size;
    entry->refs = 1;
    shard.table.emplace(key, entry);
    entries_.fetch_add(1, std::memory_order_relaxed);
    misses_.fetch_add(1, std::memory_order_relaxed);
  }
  // Make room before the new buffer exists, so memory never holds both the old blocks and
  // the new one beyond the capacity; other callers for this key wait for it meanwhile.
  Admit(size);
  CKPTFS_RETURN_IF_ERROR(Load(shard, entry, loader));
  return Handle(this, entry);
}

void BlockCache::Admit(size_t size) {
  std::unique_lock lock(room_mu_);
  auto fits = [&] { return charged_bytes_.load(std::memory_order_relaxed) + size <= capacity_; };
  EvictIfNeeded(size);
  if (!fits()) {
    const uint64_t held = HeldBytes();
    const auto give_up = std::chrono::steady_clock::now() + kMaxRoomWait;
    waiting_held_ += held;
    waiters_.fetch_add(1, std::memory_order_relaxed);
    for (;;) {
      EvictIfNeeded(size);
      if (fits()) break;
      // Everything pinned is held by callers waiting for room or for a load (or nothing
      // is pinned and the block alone is larger than the cache): no release can come, so
      // go over. After kMaxRoomWait too: a backstop for a wait the cache cannot see (a
      // caller holding pins behind a lock outside the cache, such as a spill decode).
      if (pinned_bytes_.load(std::memory_order_relaxed) <= waiting_held_ ||
          std::chrono::steady_clock::now() >= give_up) {
        overdrafts_.fetch_add(1, std::memory_order_relaxed);
        break;
      }
      // Releases notify; the timeout only bounds a wait whose wakeup raced a release.
      room_freed_.wait_for(lock, std::chrono::milliseconds(50));
    }
    waiters_.fetch_sub(1, std::memory_order_relaxed);
    waiting_held_ -= held;
  }
  // Charged under room_mu_, so two loads never both take the last room.
  const uint64_t charged = charged_bytes_.fetch_add(size, std::memory_order_relaxed) + size;
  pinned_bytes_.fetch_add(size, std::memory_order_relaxed);
  if (charged > peak_charged_bytes_.load(std::memory_order_relaxed)) {
    peak_charged_bytes_.store(charged, std::memory_order_relaxed);  // writers hold room_mu_
  }
}

void BlockCache::AddWaitingHeld(uint64_t held, bool add) {
  {
    std::lock_guard lock(room_mu_);
    if (add) {
      waiting_held_ += held;
    } else {
      waiting_held_ -= held;
    }
  }
  if (add) room_freed_.notify_all();  // a stall a loader in Admit must now see
}

void BlockCache::NotifyRoom() {
  if (waiters_.load(std::memory_order_relaxed) == 0) return;
  { std::lock_guard lock(room_mu_); }  // a waiter is either before its check or asleep
  room_freed_.notify_all();
}

Status BlockCache::Load(Shard& shard, Entry* entry, const Loader& loader) {
  Status status;
  // A recycled buffer if one fits, else fresh mmap memory; never zero-filled by us. Spare
  // buffers that no load can take go now: block memory stays within the capacity.
  Buffer buffer = TakeSpare(entry->size);
  if (!buffer) {
    TrimSpares();
    buffer = AllocateBuffer(entry->size);
  }
  // The block being filled is this thread's: a load nested in the loader (a remote
  // source under a zstd shard) must not wait for room this one holds.
  t_held_bytes += static_cast<int64_t>(entry->size);
  if (buffer == nullptr && entry->size > 0) {
    status = Status::IoError(
        "block cache: cannot allocate " + std::to_string(entry->size) + " bytes", ENOMEM);
  } else {
    // A throwing loader must still wake the waiters, or they would sleep forever.
    try {
      status = loader(std::span<uint8_t>(buffer.get(), entry->size));
    } catch (const std::exception& e) {
      status = Status::IoError(std::string("block loader threw: ") + e.what());
    } catch (...) {
      status = Status::IoError("block loader threw");
    }
  }
  t_held_bytes -= static_cast<int64_t>(entry->size);

  bool free_entry = false;
  {
    std::lock_guard lock(shard.mu);
    if (status.ok()) {
      entry->data = std::move(buffer);
      entry->state = Entry::State::kReady;
      bytes_loaded_.fetch_add(entry->size, std::memory_order_relaxed);
    } else {
      // Out of the table at once, so the next GetOrLoad retries instead of joining a
      // load that already failed; waiters keep the entry alive through their refs.
      entry->state = Entry::State::kFailed;
      entry->error = status;
      shard.table.erase(entry->key);
      entries_.fetch_sub(1, std::memory_order_relaxed);
      charged_bytes_.fetch_sub(entry->size, std::memory_order_relaxed);
      pinned_bytes_.fetch_sub(entry->size, std::memory_order_relaxed);
      load_errors_.fetch_add(1, std::memory_order_relaxed);
      free_entry = --entry->refs == 0;
    }
  }
  shard.loaded.notify_all();
  if (!status.ok()) NotifyRoom();
  if (free_entry) delete entry;
  return status;
}

void BlockCache::Handle::MarkConsumed() {
  if (entry_ == nullptr) return;
  std::lock_guard lock(cache_->ShardFor(entry_->key).mu);
  entry_->consumed = true;
}

void BlockCache::Unpin(Entry* entry) {
  t_held_bytes -= static_cast<int64_t>(entry->size);
  Shard& shard = ShardFor(entry->key);
  {
    std::lock_guard lock(shard.mu);
    if (--entry->refs > 0) return;
    // Handles only ever point at ready entries, which stay in the table until evicted,
    // and eviction only takes unpinned ones: this entry is still cached.
    pinned_bytes_.fetch_sub(entry->size, std::memory_order_relaxed);
    entry->released_at = clock_.fetch_add(1, std::memory_order_relaxed);
    cold_bytes_.fetch_add(shard.LruAppend(entry), std::memory_order_relaxed);
  }
  EvictIfNeeded();
  NotifyRoom();
}

bool BlockCache::OverBudget(uint64_t incoming) const {
  return charged_bytes_.load(std::memory_order_relaxed) + incoming > capacity_ ||
         cold_bytes_.load(std::memory_order_relaxed) > ColdBudget();
}

uint64_t BlockCache::ColdBudget() const { return capacity_ / 8; }

void BlockCache::EvictIfNeeded(uint64_t incoming) {
  if (!OverBudget(incoming)) return;
  // Freed after every lock is dropped: releasing megabytes can mean munmap.
  std::vector<std::unique_ptr<Entry>> victims;
  std::lock_guard evict_lock(evict_mu_);
  while (OverBudget(incoming)) {
    // The victim is the globally least recently released consumed entry if there is one,
    // else the least recently released of all: the oldest of the shards' list heads.
    // One lock at a time: a snapshot that a reader may change before we come back, which
    // at worst evicts a slightly younger block.
    size_t oldest_shard = shard_count_;
    bool oldest_cold = false;
    uint64_t oldest_tick = std::numeric_limits<uint64_t>::max();
    for (size_t i = 0; i < shard_count_; ++i) {
      std::lock_guard lock(shards_[i].mu);
      const bool cold = !Shard::Empty(shards_[i].cold);
      const Entry* head = cold ? shards_[i].cold.next : shards_[i].lru.next;
      if (!cold && shards_[i].LruEmpty()) continue;
      if ((cold && !oldest_cold) || (cold == oldest_cold && head->released_at < oldest_tick)) {
        oldest_tick = head->released_at;
        oldest_shard = i;
        oldest_cold = cold;
      }
    }
    if (oldest_shard == shard_count_) break;  // everything left is pinned
    Shard& shard = shards_[oldest_shard];
    std::lock_guard lock(shard.mu);
    Entry& head = Shard::Empty(shard.cold) ? shard.lru : shard.cold;
    if (Shard::Empty(head)) continue;  // its entries were pinned meanwhile; look again
    Entry* victim = head.next;
    cold_bytes_.fetch_sub(Shard::LruRemove(victim), std::memory_order_relaxed);
    shard.table.erase(victim->key);
    entries_.fetch_sub(1, std::memory_order_relaxed);
    charged_bytes_.fetch_sub(victim->size, std::memory_order_relaxed);
    evictions_.fetch_add(1, std::memory_order_relaxed);
    victims.emplace_back(victim);
  }
  // Keep a few victims' buffers for the loads that evicted them: a fresh multi-MiB buffer
  // costs a page fault per 4 KiB, more than the memcpy that fills it.
  for (auto& victim : victims) KeepSpare(std::move(victim->data), victim->size);
  // evict_lock is released before `victims` is destroyed (reverse declaration order).
}

// Block buffers come straight from mmap, 2 MiB aligned and marked for transparent huge
// pages: filling a decoded 4 MiB frame then takes two page faults instead of a thousand,
// and freeing one returns its memory to the system at once (no allocator arena keeps it).
BlockCache::Buffer BlockCache::AllocateBuffer(size_t size) {
  constexpr size_t kHuge = 2 << 20;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t bytes = std::max(page, (size + page - 1) / page * page);
  if (bytes < kHuge) {
    // Populated at once: the loader writes every byte anyway, and one call that maps the
    // pages costs less than a page fault per 4 KiB (a 1 MiB remote block took 256).
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    return p == MAP_FAILED ? Buffer(nullptr, {0}) : Buffer(static_cast<uint8_t*>(p), {bytes});
  }
  // Over-map by 2 MiB, then trim both ends so the buffer starts on a huge-page boundary.
  void* raw =
      ::mmap(nullptr, bytes + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return Buffer(nullptr, {0});
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHuge - 1) & ~(uintptr_t{kHuge} - 1);
  if (aligned > start) ::munmap(raw, aligned - start);
  const uintptr_t end = start + bytes + kHuge;
  if (end > aligned + bytes)
    ::munmap(reinterpret_cast<void*>(aligned + bytes), end - aligned - bytes);
  ::madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);
  return Buffer(reinterpret_cast<uint8_t*>(aligned), {bytes});
}

void BlockCache::BufferFree::operator()(uint8_t* p) const {
  if (p != nullptr) ::munmap(p, bytes);
}

void BlockCache::KeepSpare(Buffer buffer, size_t size) {
  if (!buffer || size == 0) return;
  std::lock_guard lock(spare_mu_);
  // Spares are memory too: kept only in room the charged blocks leave free.
  if (spare_bytes_ + size > MaxSpareBytes() ||
      charged_bytes_.load(std::memory_order_relaxed) + spare_bytes_ + size > capacity_) {
    return;  // freed on return
  }
  spare_bytes_ += size;
  spares_.emplace_back(size, std::move(buffer));
}

BlockCache::Buffer BlockCache::TakeSpare(size_t size) {
  std::lock_guard lock(spare_mu_);
  for (auto it = spares_.begin(); it != spares_.end(); ++it) {
    if (it->first != size) continue;
    Buffer buffer = std::move(it->second);
    spare_bytes_ -= size;
    spares_.erase(it);
    return buffer;
  }
  return Buffer(nullptr, {0});
}

void BlockCache::TrimSpares() {
  std::vector<std::pair<size_t, Buffer>> freed;  // unmapped after the lock is dropped
  std::lock_guard lock(spare_mu_);
  while (!spares_.empty() &&
         charged_bytes_.load(std::memory_order_relaxed) + spare_bytes_ > capacity_) {
    spare_bytes_ -= spares_.back().first;
    freed.push_back(std::move(spares_.back()));
    spares_.pop_back();
  }
}

uint64_t BlockCache::MaxSpareBytes() const {
  return std::min<uint64_t>(kMaxSpareBytes, capacity_ / 8);
}

bool BlockCache::ContainsOrLoading(const BlockKey& key) const {
  Shard& shard = ShardFor(key);
  std::lock_guard lock(shard.mu);
  return shard.table.count(key) > 0;
}

uint64_t BlockCache::capacity() const { return capacity_; }

BlockCache::Counters BlockCache::counters() const {
  Counters c;
  c.hits = hits_.load(std::memory_order_relaxed);
  c.misses = misses_.load(std::memory_order_relaxed);
  c.coalesced = coalesced_.load(std::memory_order_relaxed);
  c.evictions = evictions_.load(std::memory_order_relaxed);
  c.load_errors = load_errors_.load(std::memory_order_relaxed);
  c.bytes_loaded = bytes_loaded_.load(std::memory_order_relaxed);
  c.charged_bytes = charged_bytes_.load(std::memory_order_relaxed);
  c.pinned_bytes = pinned_bytes_.load(std::memory_order_relaxed);
  c.entries = entries_.load(std::memory_order_relaxed);
  c.capacity_bytes = capacity_;
  c.overdrafts = overdrafts_.load(std::memory_order_relaxed);
  c.peak_charged_bytes = peak_charged_bytes_.load(std::memory_order_relaxed);
  {
    std::lock_guard lock(spare_mu_);
    c.spare_bytes = spare_bytes_;
  }
  return c;
}

}  // namespace ckptfs
