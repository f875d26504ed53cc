// FetchLimit: how many range requests a mount keeps in flight, following what the link
// gives.
//
// A fixed number fits one link only: eight requests swamp a loopback server bound by its
// CPU and starve an object store or CDN that gives each connection 10 MB/s behind 40 ms
// to the first byte (eight at a time cap such a link at ~60 MB/s). So the number is a
// limit that moves, by a delay-based rule (TCP Vegas; Netflix's concurrency-limits
// "gradient"): each fetch of the server that brought at least kMinSampleBytes gives one
// sample, the time it took per byte. Every `limit` fetches ended (a round: about one round
// trip with the limit in flight) the median sample of the round is taken; the best round's
// median is what the link gives a request that does not queue (a median, not the fastest
// fetch: over a fast link one lucky fetch made every later round look slow). Each round's
// median is compared with the best:
// - within kGrowWithin of the best, and the round kept at least 3/4 of the limit busy
//   (more in flight was asked for): more requests add throughput without slowing each
//   other (a link limited per connection), so the limit grows: it doubles until the rule
//   first had to shrink it (slow start), then grows by one a round;
// - more than kShrinkPast times the best: the requests share something (a saturated
//   link, a server out of CPU) and more would only queue, so the limit shrinks in
//   proportion, to where the median would be back near the best, but not below
//   `initial` (8 in a mount: the fixed pool this replaces; a CPU-bound loopback server
//   answers each request later the more are in flight while serving more bytes a
//   second, and held at 2 a loopback `cat` ran at half speed);
// - in between, it holds.
// A fetch that failed (the server's errors outlasted HttpSource's retries of 429 and 5xx,
// a timeout) halves the limit, once a round; a 429 or 5xx that a retry got past shows as a
// slow sample and counts in the median. The limit stays within [min, max]. The best only
// ever falls: should the link itself become slower for good, the rule would pin the limit
// at its floor; after kStuckRounds rounds there with every median past kShrinkPast times
// the best, the best is taken afresh from the last round. Failures may take the limit
// below `initial`, down to `min`.
//
// Who waits: the fetch workers (readahead, a tensor's later blocks) call Acquire and
// wait while the limit is in flight; a reader's own fetch (a FUSE thread that needs the
// block now) calls Enter and never waits, since readers must not queue behind guesses.
// Both count in in_flight() and both give samples.
//
// Memory: the limit bounds requests, not bytes. Every fetched block is charged to the
// block cache before its buffer exists (BlockCache, docs/security.md "Memory"), so a larger
// limit only lets more of the cache's room be in flight; ReadContext keeps `max` within a
// quarter of the cache in blocks.
//
// Thread-safe. Time is what the caller measured: unit tests feed a simulated link.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace ckptfs {

class FetchLimit {
 public:
  struct Options {
    size_t min = 2;
    size_t max = 64;
    size_t initial = 8;
  };
  // Fetches smaller than this give no sample: their time is mostly the first-byte latency
  // and says nothing about how fast bytes flow.
  static constexpr uint64_t kMinSampleBytes = 256 << 10;
  static constexpr double kGrowWithin = 1.25;
  static constexpr double kShrinkPast = 2.0;
  static constexpr int kStuckRounds = 8;

  struct Snapshot {
    size_t limit = 0;
    size_t in_flight = 0;
    size_t max_seen = 0;  // the most in flight at once since the mount began
    // Milliseconds per MiB: the best round's median, and the last round's (0: none yet).
    double best_ms_per_mib = 0;
    double recent_ms_per_mib = 0;
  };

  FetchLimit();
  explicit FetchLimit(Options options);

  // A worker's fetch: waits while `limit` fetches are in flight, then takes a slot.
  void Acquire();
  // Takes a slot if one is free without waiting; false otherwise.
  bool TryAcquire();
  // A reader's fetch: takes a slot at once, even past the limit.
  void Enter();
  // A fetch that took a slot ended: `bytes` received in `took`, or failed (`ok` false).
  void Done(uint64_t bytes, std::chrono::nanoseconds took, bool ok);

  Snapshot snapshot() const;
  size_t limit() const { return snapshot().limit; }

 private:
  void Take();                  // mu_ held
  void EndRound();              // mu_ held
  void SetLimit(size_t limit);  // mu_ held; clamps

  const Options options_;
  mutable std::mutex mu_;
  std::condition_variable freed_;
  size_t limit_;               // guarded by mu_
  size_t in_flight_ = 0;       // guarded by mu_
  size_t max_seen_ = 0;        // guarded by mu_
  size_t round_peak_ = 0;      // guarded by mu_: most in flight this round
  size_t round_done_ = 0;      // guarded by mu_: fetches ended this round
  bool round_failed_ = false;  // guarded by mu_: the limit halved this round already
  bool slow_start_ = true;     // guarded by mu_: never shrunk yet
  int stuck_rounds_ = 0;       // guarded by mu_
  double best_ = 0;            // guarded by mu_: seconds per byte; 0 until a sample
  double last_median_ = 0;     // guarded by mu_: of the last round that had samples
  std::vector<double> round_;  // guarded by mu_: this round's per-byte times
};

}  // namespace ckptfs
