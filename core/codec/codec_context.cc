#include "core/codec/codec_context.h"

#include "core/cache/prefetch.h"

namespace ckptfs {
namespace {
// Queued prefetches beyond this are dropped: readahead must never build a backlog.
constexpr size_t kMaxQueuedPrefetches = 256;
}  // namespace

CodecContext::CodecContext(CodecOptions options)
    : options_(std::move(options)), cache_(options_.cache_bytes) {}

CodecContext::~CodecContext() { Shutdown(); }

void CodecContext::StartWorkers() {
  std::lock_guard<std::mutex> lock(pool_mu_);
  if (!pool_) pool_ = std::make_unique<ThreadPool>(options_.threads, kMaxQueuedPrefetches);
}

void CodecContext::Shutdown() {
  std::unique_ptr<ThreadPool> pool;
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    pool.swap(pool_);
  }
  pool.reset();  // joins outside the lock
}

bool CodecContext::TrySubmit(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(pool_mu_);
  return pool_ && pool_->TrySubmit(std::move(task));
}

}  // namespace ckptfs
