#include "core/cache/read_context.h"

#include <algorithm>

#include "core/cache/disk_cache.h"

namespace ckptfs {

ReadContext::ReadContext(ReadOptions options)
    : options_(std::move(options)), cache_(options_.cache_bytes) {}

ReadContext::~ReadContext() { Shutdown(); }

void ReadContext::StartWorkers() {
  std::lock_guard<std::mutex> lock(pool_mu_);
  const PrefetchSettings& p = options_.prefetch;
  if (!pool_) pool_ = std::make_unique<ThreadPool>(p.decode_threads, p.max_queued);
  if (!fetch_pool_) fetch_pool_ = std::make_unique<ThreadPool>(p.fetch_threads, p.max_queued);
}

void ReadContext::Shutdown() {
  std::unique_ptr<ThreadPool> pool, fetch_pool;
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    pool.swap(pool_);
    fetch_pool.swap(fetch_pool_);
  }
  pool.reset();  // joins outside the lock
  fetch_pool.reset();
}

void ReadContext::DropPending() {
  bool started = false;
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    started = pool_ != nullptr;
  }
  if (!started) return;
  Shutdown();
  StartWorkers();
}

std::unique_ptr<Readahead> ReadContext::NewReadahead(uint64_t limit, bool remote) const {
  const PrefetchSettings& p = options_.prefetch;
  Readahead::Options options;
  options.initial_window = remote ? p.remote_initial_window : p.initial_window;
  options.max_window =
      std::max<uint64_t>(options.initial_window, std::min(p.max_window, cache_.capacity() / 4));
  options.streams = p.streams;
  options.slack = p.slack;
  options.limit = limit;
  return std::make_unique<Readahead>(options);
}

uint64_t ReadContext::AheadBudget() const {
  return cache_.capacity() / std::max<uint64_t>(1, options_.prefetch.ahead_divisor);
}

void ReadContext::SetDiskCache(std::unique_ptr<DiskCache> disk) { disk_ = std::move(disk); }

bool ReadContext::TrySubmit(Workers workers, std::function<void()> task) {
  std::lock_guard<std::mutex> lock(pool_mu_);
  ThreadPool* pool = workers == Workers::kDecode ? pool_.get() : fetch_pool_.get();
  return pool && pool->TrySubmit(std::move(task));
}

}  // namespace ckptfs
