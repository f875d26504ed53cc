#include "core/cache/read_context.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "core/cache/disk_cache.h"

namespace ckptfs {

namespace {

// Readahead fetches are 1 MiB blocks (RemoteSource::kBlockSize): at most a quarter of the
// cache in flight, like one readahead request (AheadBudget).
constexpr uint64_t kFetchBytes = uint64_t{1} << 20;

FetchLimit::Options LimitOptions(const ReadOptions& options) {
  const PrefetchSettings& p = options.prefetch;
  const uint64_t by_cache = options.cache_bytes / 4 / kFetchBytes;
  FetchLimit::Options limit;
  limit.min = std::max<size_t>(1, p.fetch_limit_min);
  limit.max = std::max<size_t>(limit.min,
                               std::min<uint64_t>(std::max<size_t>(1, p.fetch_threads), by_cache));
  limit.initial = p.fetch_limit_initial;
  return limit;
}

}  // namespace

ReadContext::ReadContext(ReadOptions options)
    : options_(std::move(options)),
      cache_(options_.cache_bytes),
      fetch_limit_(LimitOptions(options_)) {}

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
  options.grow_to_read = remote;
  return std::make_unique<Readahead>(options);
}

uint64_t ReadContext::AheadBudget() const {
  return cache_.capacity() / std::max<uint64_t>(1, options_.prefetch.ahead_divisor);
}

void ReadContext::SetDiskCache(std::unique_ptr<DiskCache> disk) { disk_ = std::move(disk); }

bool ReadContext::TrySubmit(Workers workers, std::function<void()> task) {
  std::lock_guard<std::mutex> lock(pool_mu_);
  if (workers == Workers::kDecode) return pool_ && pool_->TrySubmit(std::move(task));
  return fetch_pool_ && fetch_pool_->TrySubmit([task = std::move(task)] {
    on_fetch_worker = true;
    task();
    on_fetch_worker = false;
  });
}

void ReadContext::RunAll(std::vector<std::function<void()>> tasks) {
  if (tasks.empty()) return;
  // Tasks are claimed by index, by the caller and by helpers queued on workers; a helper
  // that starts after the caller returned finds nothing left (the state outlives both).
  struct Shared {
    std::vector<std::function<void()>> tasks;
    std::atomic<size_t> next{0};
    std::mutex mu;
    std::condition_variable done_cv;
    size_t done = 0;  // guarded by mu
    void Work() {
      for (size_t i; (i = next.fetch_add(1)) < tasks.size();) {
        tasks[i]();
        std::lock_guard lock(mu);
        if (++done == tasks.size()) done_cv.notify_all();
      }
    }
  };
  auto shared = std::make_shared<Shared>();
  shared->tasks = std::move(tasks);
  const size_t helpers = shared->tasks.size() - 1;
  std::unique_ptr<ThreadPool> own;  // destroyed (joined) before returning
  size_t queued = 0;
  for (size_t i = 0; i < helpers; ++i) {
    if (TrySubmit(Workers::kDecode, [shared] { shared->Work(); })) ++queued;
  }
  if (queued == 0 && helpers > 0) {
    size_t threads = options_.prefetch.decode_threads;
    if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
    own = std::make_unique<ThreadPool>(std::min(helpers, threads), helpers);
    for (size_t i = 0; i < helpers; ++i) own->TrySubmit([shared] { shared->Work(); });
  }
  shared->Work();
  std::unique_lock lock(shared->mu);
  shared->done_cv.wait(lock, [&] { return shared->done == shared->tasks.size(); });
}

ReadContext::ScratchLease::ScratchLease(ScratchLease&& other) noexcept
    : context_(std::exchange(other.context_, nullptr)), buffer_(std::move(other.buffer_)) {}

ReadContext::ScratchLease::~ScratchLease() {
  if (context_) context_->ReturnScratch(std::move(buffer_));
}

ReadContext::ScratchLease ReadContext::LeaseScratch(size_t bytes) {
  std::unique_lock lock(scratch_mu_);
  // Alone, a lease may exceed the budget (one region larger than it); otherwise it waits.
  scratch_freed_.wait(
      lock, [&] { return scratch_leased_ == 0 || scratch_leased_ + bytes <= kScratchBytes; });
  // A kept buffer that fits, else any (grown below): a mount's regions are mostly one size.
  std::vector<uint8_t> buffer;
  if (!scratch_free_.empty()) {
    auto it = std::find_if(scratch_free_.begin(), scratch_free_.end(),
                           [&](const std::vector<uint8_t>& b) { return b.capacity() >= bytes; });
    if (it == scratch_free_.end()) it = scratch_free_.begin();
    buffer = std::move(*it);
    scratch_free_.erase(it);
  }
  if (buffer.capacity() < bytes) {
    std::vector<uint8_t>().swap(buffer);
    buffer.reserve(bytes);  // exactly: resize alone may double
  }
  buffer.resize(bytes);
  scratch_leased_ += buffer.capacity();
  // Kept buffers and leases together stay within the budget.
  uint64_t kept = 0;
  for (const auto& b : scratch_free_) kept += b.capacity();
  while (!scratch_free_.empty() && kept + scratch_leased_ > kScratchBytes) {
    kept -= scratch_free_.back().capacity();
    scratch_free_.pop_back();
  }
  return ScratchLease(this, std::move(buffer));
}

void ReadContext::ReturnScratch(std::vector<uint8_t> buffer) {
  {
    std::lock_guard lock(scratch_mu_);
    scratch_leased_ -= buffer.capacity();
    uint64_t kept = 0;
    for (const auto& b : scratch_free_) kept += b.capacity();
    if (kept + scratch_leased_ + buffer.capacity() <= kScratchBytes) {
      scratch_free_.push_back(std::move(buffer));
    }
  }
  scratch_freed_.notify_all();
}

}  // namespace ckptfs
