// ReadContext: what every cached source of one mount shares: the block cache (decoded
// frames of compressed shards, fetched blocks of remote ones, both read through
// CachedBlocks), the decode workers and the fetch workers for readahead, the one set of
// prefetch settings, the disk cache of fetched bytes, and their counters.
//
// Worker threads start only on StartWorkers(), which the mount daemon calls after it
// forks (threads do not survive fork). Before that, and after Shutdown(), prefetch
// requests are dropped and every read decodes or fetches in the caller's thread.
// Decoding is CPU work (one worker per core); fetching is waiting on a server, so it has
// more workers (PrefetchSettings::fetch_threads), of which FetchLimit (fetch_limit()) lets
// as many fetch at once as the link rewards. Thread-safe.
//
// Memory bound (docs/security.md, "Memory"): the daemon's RSS stays within cache_bytes +
// 40 MiB, for any frame size and any number of readers:
// - Decoded blocks: the cache charges a block before its buffer exists and admits it
//   only within cache_bytes (loads wait for room; see BlockCache), pinned blocks, loads
//   in flight and prefetches included, and keeps spare buffers only inside that room.
// - Frames larger than a quarter of the cache never become blocks: their shard is
//   stream-decoded once into a spill file (ZstdSource), one stream decode per mount at a
//   time, in 384 KiB of buffers plus the frame's zstd window (at most 8 MiB for files
//   written at levels 1-19 without --long; a larger window adds the difference).
// - Un-grouping a byte-grouped frame needs a buffer of its largest region: leased from
//   LeaseScratch, which holds at most kScratchBytes (16 MiB) of such buffers, leased or
//   kept for reuse, or one region when a region is larger (at most a quarter of the cache,
//   like any cached frame).
// - Fixed: code, libraries and mount state; per FUSE worker (16) a reply copied or read
//   into a buffer of at most 1 MiB, a 256 KiB compressed-input buffer and a zstd context;
//   the stream decode above. (What these came to when measured: docs/security.md.)
// The one excess the cache allows is a stalled reply's blocks (BlockCache).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/cache/block_cache.h"
#include "core/cache/fetch_limit.h"
#include "core/cache/prefetch.h"

namespace ckptfs {

class DiskCache;

// Work done on behalf of one kind of read (a view of a mount: stats.json "views"): the
// decodes and fetches its reads caused, the prefetches they started included. Relaxed
// atomics, bumped where the work is done.
struct WorkCounters {
  std::atomic<uint64_t> bytes_decoded{0};          // frames decoded
  std::atomic<uint64_t> compressed_bytes_read{0};  // their compressed bytes
  std::atomic<uint64_t> remote_bytes_fetched{0};   // bytes received from servers
};

// The counters the calling thread's work is charged to, or null (work for no read: a
// mount's header reads, `verify`). Set for the length of a read by ScopedWorkCounters;
// CachedBlocks hands it on to the loads it queues, so work a read starts on the workers
// is charged to it too. A plain thread-local pointer: nothing on the read path locks or
// allocates for it. The counters must outlive the loads queued while they were set (a
// Volume's do: it drains the workers before they go).
inline thread_local WorkCounters* current_work_counters = nullptr;

class ScopedWorkCounters {
 public:
  explicit ScopedWorkCounters(WorkCounters* counters) : saved_(current_work_counters) {
    current_work_counters = counters;
  }
  ~ScopedWorkCounters() { current_work_counters = saved_; }
  ScopedWorkCounters(const ScopedWorkCounters&) = delete;
  ScopedWorkCounters& operator=(const ScopedWorkCounters&) = delete;

 private:
  WorkCounters* saved_;
};

// Adds `n` to `member` of the current work counters, if any.
inline void ChargeWork(std::atomic<uint64_t> WorkCounters::*member, uint64_t n) {
  if (WorkCounters* c = current_work_counters) (c->*member).fetch_add(n, std::memory_order_relaxed);
}

// True on the context's fetch workers while they run a task: a fetch there is readahead
// and waits for FetchLimit; anywhere else it is a reader's and does not.
inline thread_local bool on_fetch_worker = false;

struct ReadOptions {
  uint64_t cache_bytes = 512ull << 20;
  PrefetchSettings prefetch = {};
  std::string spill_dir = "/var/tmp";  // where single-frame shards are decoded once
  // Receives one line for events a user should see that are not a failed read (a corrupt
  // disk cache entry dropped): core never logs itself. May be empty.
  std::function<void(const std::string&)> warn = {};
};

class ReadContext {
 public:
  explicit ReadContext(ReadOptions options);
  ~ReadContext();

  void StartWorkers();
  // Stops workers, dropping queued prefetches; call before the sources die.
  void Shutdown();
  // Drops queued prefetches and waits for running ones, then restarts the workers if they
  // were running: after it, no task touches a source that was only reachable through
  // tasks. A run calls it when one of its checkpoints closes; the others lose only
  // prefetches (best effort anyway).
  void DropPending();
  // Runs `task` on one of the `workers` if their queue has room; false if dropped.
  enum class Workers : uint8_t { kDecode, kFetch };
  bool TrySubmit(Workers workers, std::function<void()> task);
  // Runs every task to completion, in parallel: on the decode workers when they run, else
  // (before the daemon forks, and after Shutdown) on workers made for the call and joined
  // before it returns, so no thread outlives it. The calling thread takes tasks too, so
  // they finish even when the workers are busy or their queue is full.
  void RunAll(std::vector<std::function<void()>> tasks);

  // A sequential-read detector for `limit` bytes (a file, a source) with the mount's
  // settings: windows start at the remote or the local initial window and stay within a
  // quarter of the cache.
  std::unique_ptr<Readahead> NewReadahead(uint64_t limit, bool remote) const;
  // The most bytes one request may schedule ahead (PrefetchSettings::ahead_divisor).
  uint64_t AheadBudget() const;

  // The disk cache remote sources share, or null. Set once, before sources use it.
  void SetDiskCache(std::unique_ptr<DiskCache> disk);
  DiskCache* disk_cache() const { return disk_.get(); }

  BlockCache& cache() { return cache_; }
  // How many range requests are in flight, and may be (see FetchLimit).
  FetchLimit& fetch_limit() { return fetch_limit_; }
  const FetchLimit& fetch_limit() const { return fetch_limit_; }
  // Held by each stream decode (spill files, header prefixes): one at a time.
  std::mutex& stream_mu() { return stream_mu_; }
  const ReadOptions& options() const { return options_; }

  std::atomic<uint64_t> bytes_decoded{0};          // decoded bytes produced
  std::atomic<uint64_t> compressed_bytes_read{0};  // compressed bytes fetched
  std::atomic<uint64_t> frames_decoded{0};
  std::atomic<uint64_t> decode_errors{0};
  std::atomic<uint64_t> prefetches{0};            // frames scheduled ahead of readers
  std::atomic<uint64_t> remote_bytes_fetched{0};  // bytes received from servers
  std::atomic<uint64_t> remote_requests{0};       // range requests sent
  std::atomic<uint64_t> remote_prefetches{0};     // blocks queued ahead of readers
  std::atomic<uint64_t> disk_cache_bytes{0};      // bytes served from the disk cache
  // Remote objects whose server gave no ETag or Last-Modified (a same-size replacement
  // cannot be told): the first one opened warns (options().warn), the rest count here.
  std::atomic<uint64_t> unvalidated_objects{0};

  // A buffer of at least `bytes` for transient work (un-grouping a frame), returned to the
  // context when the lease dies. Waits while other leases hold the scratch budget.
  class ScratchLease {
   public:
    ScratchLease(ScratchLease&& other) noexcept;
    ScratchLease& operator=(ScratchLease&&) = delete;
    ~ScratchLease();
    std::vector<uint8_t>& buffer() { return buffer_; }

   private:
    friend class ReadContext;
    ScratchLease(ReadContext* context, std::vector<uint8_t> buffer)
        : context_(context), buffer_(std::move(buffer)) {}
    ReadContext* context_;
    std::vector<uint8_t> buffer_;
  };
  static constexpr uint64_t kScratchBytes = 16ull << 20;
  ScratchLease LeaseScratch(size_t bytes);

 private:
  void ReturnScratch(std::vector<uint8_t> buffer);

  ReadOptions options_;
  BlockCache cache_;
  FetchLimit fetch_limit_;
  std::unique_ptr<DiskCache> disk_;  // before the pools: tasks may use it until joined
  std::mutex stream_mu_;
  std::mutex scratch_mu_;
  std::condition_variable scratch_freed_;
  uint64_t scratch_leased_ = 0;                     // guarded by scratch_mu_: capacity leased
  std::vector<std::vector<uint8_t>> scratch_free_;  // guarded by scratch_mu_
  std::mutex pool_mu_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<ThreadPool> fetch_pool_;
};

}  // namespace ckptfs
