#include "core/cache/fetch_limit.h"

#include <algorithm>
#include <cmath>

namespace ckptfs {

FetchLimit::FetchLimit() : FetchLimit(Options()) {}

FetchLimit::FetchLimit(Options options)
    : options_{std::max<size_t>(1, options.min), std::max(options.min, options.max),
               options.initial},
      limit_(std::clamp(options.initial, options_.min, options_.max)) {}

void FetchLimit::Take() {
  ++in_flight_;
  max_seen_ = std::max(max_seen_, in_flight_);
  round_peak_ = std::max(round_peak_, in_flight_);
}

void FetchLimit::Acquire() {
  std::unique_lock lock(mu_);
  freed_.wait(lock, [this] { return in_flight_ < limit_; });
  Take();
}

bool FetchLimit::TryAcquire() {
  std::lock_guard lock(mu_);
  if (in_flight_ >= limit_) return false;
  Take();
  return true;
}

void FetchLimit::Enter() {
  std::lock_guard lock(mu_);
  Take();
}

void FetchLimit::SetLimit(size_t limit) { limit_ = std::clamp(limit, options_.min, options_.max); }

void FetchLimit::Done(uint64_t bytes, std::chrono::nanoseconds took, bool ok) {
  size_t limit_before;
  size_t limit_after;
  {
    std::lock_guard lock(mu_);
    limit_before = limit_;
    if (in_flight_ > 0) --in_flight_;
    if (!ok) {
      // Once a round, as TCP halves once per loss event: the fetches in flight when the
      // server started failing all fail, and that is one signal, not `limit` of them.
      if (!round_failed_) {
        round_failed_ = true;
        slow_start_ = false;
        SetLimit(limit_ / 2);
      }
    } else if (bytes >= kMinSampleBytes) {
      const double per_byte =
          std::chrono::duration<double>(took).count() / static_cast<double>(bytes);
      round_.push_back(per_byte);
    }
    if (++round_done_ >= limit_) EndRound();
    limit_after = limit_;
  }
  // One slot freed: one waiter may take it. Waking them all (up to the 64 fetch workers)
  // for every fetch that ends cost a loopback mount a third of its speed on two cores.
  // A limit that grew frees more slots: then every waiter looks.
  if (limit_after > limit_before) {
    freed_.notify_all();
  } else {
    freed_.notify_one();
  }
}

void FetchLimit::EndRound() {
  const size_t peak = round_peak_;
  const bool failed = round_failed_;
  std::vector<double> samples;
  samples.swap(round_);
  round_done_ = 0;
  round_failed_ = false;
  round_peak_ = in_flight_;
  if (samples.empty() || failed) return;  // a failure decided this round
  auto mid = samples.begin() + static_cast<std::ptrdiff_t>(samples.size() / 2);
  std::nth_element(samples.begin(), mid, samples.end());
  const double median = *mid;
  last_median_ = median;
  // The best is the best round's median, not the fastest fetch: over a fast link (a
  // loopback server, a millisecond a block) one fetch that slipped past the scheduler
  // made every later round look twice as slow, and the limit sank to its minimum.
  if (best_ == 0 || median < best_) best_ = median;
  const double gradient = best_ / median;  // 1: as fast as the best; 0.5: twice as slow
  if (median <= best_ * kGrowWithin) {
    stuck_rounds_ = 0;
    // Only a round that used most of the limit proves more would help: a reader that
    // keeps three requests busy learns nothing about a fourth.
    if (4 * peak >= 3 * limit_) SetLimit(slow_start_ ? limit_ * 2 : limit_ + 1);
  } else if (median > best_ * kShrinkPast) {
    slow_start_ = false;
    // Delay never takes the limit below where it started (the fixed pool it replaces): a
    // server bound by its CPU (loopback) answers each request later the more are in
    // flight, while it still serves more bytes a second; at 2 in flight `cat` there fell
    // to half. Only failures go lower.
    const size_t floor = std::max(options_.min, options_.initial);
    if (limit_ > floor) {
      stuck_rounds_ = 0;
    } else if (++stuck_rounds_ >= kStuckRounds) {
      // The link itself is slower now than at its best: measure it again.
      best_ = median;
      stuck_rounds_ = 0;
      return;
    }
    // To where the median should come back near the best, if per-byte time grows with
    // the number in flight (a shared link).
    SetLimit(std::max(floor, static_cast<size_t>(std::floor(static_cast<double>(limit_) * gradient *
                                                            kGrowWithin))));
  } else {
    stuck_rounds_ = 0;
  }
}

FetchLimit::Snapshot FetchLimit::snapshot() const {
  std::lock_guard lock(mu_);
  constexpr double kMsPerMib = 1e3 * (1 << 20);  // seconds per byte -> ms per MiB
  return {limit_, in_flight_, max_seen_, best_ * kMsPerMib, last_median_ * kMsPerMib};
}

}  // namespace ckptfs
