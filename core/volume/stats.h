// Live counters of a mount, shown as /.ckptfs/stats.json. Updated with relaxed atomics
// from every FUSE worker thread; a snapshot may be slightly torn across counters, which
// is fine for monitoring.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace ckptfs {

struct Stats {
  std::atomic<uint64_t> reads{0};              // read requests served
  std::atomic<uint64_t> bytes_read{0};         // bytes returned to clients
  std::atomic<uint64_t> bytes_fetched{0};      // bytes taken from stored files
  std::atomic<uint64_t> bytes_synthesized{0};  // bytes of generated headers served
  std::atomic<uint64_t> read_errors{0};
  std::atomic<uint64_t> opens{0};
  // How replies reach the kernel: spliced from shard files, or copied (the front end
  // finds out once at mount and says so here rather than on the terminal).
  std::atomic<bool> replies_spliced{true};
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();

  static void Add(std::atomic<uint64_t>& counter, uint64_t n) {
    counter.fetch_add(n, std::memory_order_relaxed);
  }
};

// Resident set size of this process in bytes (0 if /proc is unavailable).
uint64_t CurrentRssBytes();

}  // namespace ckptfs
