#include "core/codec/codec_context.h"

#include "core/cache/disk_cache.h"
#include "core/cache/prefetch.h"

namespace ckptfs {
namespace {
// Queued prefetches beyond this are dropped: readahead must never build a backlog.
constexpr size_t kMaxQueuedPrefetches = 256;
// Range requests in flight at once: enough to fill a fast link whose round trips are
// milliseconds long, few enough that a loopback server on two cores is not swamped.
constexpr size_t kFetchThreads = 8;
}  // namespace

CodecContext::CodecContext(CodecOptions options)
    : options_(std::move(options)), cache_(options_.cache_bytes) {}

CodecContext::~CodecContext() { Shutdown(); }

void CodecContext::StartWorkers() {
  std::lock_guard<std::mutex> lock(pool_mu_);
  if (!pool_) pool_ = std::make_unique<ThreadPool>(options_.threads, kMaxQueuedPrefetches);
  if (!fetch_pool_) fetch_pool_ = std::make_unique<ThreadPool>(kFetchThreads, kMaxQueuedPrefetches);
}

void CodecContext::Shutdown() {
  std::unique_ptr<ThreadPool> pool, fetch_pool;
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    pool.swap(pool_);
    fetch_pool.swap(fetch_pool_);
  }
  pool.reset();  // joins outside the lock
  fetch_pool.reset();
}

void CodecContext::DropPending() {
  bool started = false;
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    started = pool_ != nullptr;
  }
  if (!started) return;
  Shutdown();
  StartWorkers();
}

bool CodecContext::TrySubmitFetch(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(pool_mu_);
  return fetch_pool_ && fetch_pool_->TrySubmit(std::move(task));
}

void CodecContext::SetDiskCache(std::unique_ptr<DiskCache> disk) { disk_ = std::move(disk); }

bool CodecContext::TrySubmit(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(pool_mu_);
  return pool_ && pool_->TrySubmit(std::move(task));
}

}  // namespace ckptfs
