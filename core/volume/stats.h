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
  // Where a read's time and bytes go (docs/benchmarks.md, "Where the time goes"): read
  // requests by the size the kernel asked (up to 4 KiB, 64 KiB, 256 KiB, 1 MiB, more),
  // the time spent gathering their bytes (planning, reading sources, copying) and sending
  // replies (the front end's, in nanoseconds), and how the bytes reached the reply: copied
  // by the daemon into its buffer, lent from memory it holds (cache blocks, headers), or
  // passed as a descriptor for the kernel to splice.
  std::atomic<uint64_t> reads_by_size[5] = {};
  std::atomic<uint64_t> gather_ns{0};
  std::atomic<uint64_t> reply_ns{0};
  std::atomic<uint64_t> bytes_copied{0};
  std::atomic<uint64_t> bytes_lent{0};
  std::atomic<uint64_t> bytes_by_descriptor{0};
  // How replies reach the kernel: spliced from shard files, or copied (the front end
  // finds out once at mount and says so here rather than on the terminal).
  std::atomic<bool> replies_spliced{true};
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();

  static void Add(std::atomic<uint64_t>& counter, uint64_t n) {
    counter.fetch_add(n, std::memory_order_relaxed);
  }
  // The reads_by_size slot of a request of `size` bytes.
  static size_t SizeClass(uint64_t size) {
    return size <= (4u << 10)     ? 0
           : size <= (64u << 10)  ? 1
           : size <= (256u << 10) ? 2
           : size <= (1u << 20)   ? 3
                                  : 4;
  }
};

// Resident set size of this process in bytes (0 if /proc is unavailable).
uint64_t CurrentRssBytes();

}  // namespace ckptfs
