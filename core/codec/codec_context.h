// CodecContext: what every compressed source of one mount shares: the block cache of
// decoded frames, the decode thread pool for readahead, and decode counters.
//
// Worker threads start only on StartWorkers(), which the mount daemon calls after it
// forks (threads do not survive fork). Before that, and after Shutdown(), prefetch
// requests are dropped and every read decodes in the caller's thread. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "core/cache/block_cache.h"

namespace ckptfs {

class ThreadPool;

struct CodecOptions {
  uint64_t cache_bytes = 512ull << 20;
  size_t threads = 0;                  // decode workers; 0: one per core
  std::string spill_dir = "/var/tmp";  // where single-frame shards are decoded once
};

class CodecContext {
 public:
  explicit CodecContext(CodecOptions options);
  ~CodecContext();

  void StartWorkers();
  // Stops workers, dropping queued prefetches; call before the sources die.
  void Shutdown();
  // Runs `task` on a worker if one is free enough; false if dropped.
  bool TrySubmit(std::function<void()> task);

  BlockCache& cache() { return cache_; }
  const CodecOptions& options() const { return options_; }

  std::atomic<uint64_t> bytes_decoded{0};          // decoded bytes produced
  std::atomic<uint64_t> compressed_bytes_read{0};  // compressed bytes fetched
  std::atomic<uint64_t> frames_decoded{0};
  std::atomic<uint64_t> decode_errors{0};
  std::atomic<uint64_t> prefetches{0};  // frames scheduled ahead of readers

 private:
  CodecOptions options_;
  BlockCache cache_;
  std::mutex pool_mu_;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace ckptfs
