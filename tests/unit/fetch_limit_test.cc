// FetchLimit against simulated links: a virtual clock, no sleeps. A reader keeps as many
// fetches in flight as the limit allows (or a fixed number, for a reader that wants
// fewer); each fetch's duration is the link's answer for the number in flight when it
// started; fetches end in order of their end times.

#include "core/cache/fetch_limit.h"

#include <gtest/gtest.h>

#include <functional>
#include <queue>
#include <vector>

namespace ckptfs {
namespace {

using std::chrono::nanoseconds;

constexpr uint64_t kBlock = 1 << 20;
constexpr double kMs = 1e6;  // nanoseconds

struct Fetch {
  double end_ns;
  bool ok;
  double took_ns;
  bool operator>(const Fetch& other) const { return end_ns > other.end_ns; }
};

// A link: how long one kBlock fetch takes when `in_flight` fetches (itself included) are
// running, and whether fetch number `n` fails.
struct Link {
  std::function<double(size_t in_flight)> duration_ns;
  std::function<bool(size_t n)> fails = [](size_t) { return false; };
};

struct Trace {
  std::vector<size_t> limits;  // the limit after each fetch ended
  size_t max_in_flight = 0;
};

// Runs `fetches` fetches over `link`; `want` caps what the reader keeps in flight.
Trace Simulate(FetchLimit& limit, const Link& link, size_t fetches, size_t want = SIZE_MAX) {
  std::priority_queue<Fetch, std::vector<Fetch>, std::greater<>> running;
  double now = 0;
  size_t started = 0;
  Trace trace;
  while (trace.limits.size() < fetches) {
    while (running.size() < want && limit.TryAcquire()) {
      const double took = link.duration_ns(running.size() + 1);
      running.push({now + took, !link.fails(started++), took});
      trace.max_in_flight = std::max(trace.max_in_flight, running.size());
    }
    if (running.empty()) break;  // the limit admits nothing: cannot happen with min >= 1
    const Fetch f = running.top();
    running.pop();
    now = f.end_ns;
    limit.Done(kBlock, nanoseconds(static_cast<int64_t>(f.took_ns)), f.ok);
    trace.limits.push_back(limit.limit());
  }
  // The fetches still running end too (not traced), so the next call starts with none.
  for (; !running.empty(); running.pop()) {
    limit.Done(kBlock, nanoseconds(static_cast<int64_t>(running.top().took_ns)), running.top().ok);
  }
  return trace;
}

// An object store or CDN: 40 ms to the first byte, 10 MB/s for each connection, however
// many there are.
Link PerConnectionLink() {
  return {[](size_t) { return 40 * kMs + static_cast<double>(kBlock) / 10e6 * 1e9; }};
}

// One link of `mbps` MB/s that the fetches share equally, behind `latency_ms`.
Link SharedLink(double mbps, double latency_ms) {
  return {[=](size_t n) {
    return latency_ms * kMs +
           static_cast<double>(n) * static_cast<double>(kBlock) / (mbps * 1e6) * 1e9;
  }};
}

TEST(FetchLimitTest, PerConnectionLinkGrowsToTheBound) {
  FetchLimit limit({.min = 2, .max = 64, .initial = 4});
  const Trace trace = Simulate(limit, PerConnectionLink(), 2000);
  EXPECT_EQ(trace.limits.back(), 64u);
  EXPECT_EQ(trace.max_in_flight, 64u);
  // Slow start: the bound within a few hundred fetches (4 + 8 + 16 + 32 rounds).
  EXPECT_EQ(trace.limits[200], 64u);
  EXPECT_EQ(limit.snapshot().max_seen, 64u);
}

TEST(FetchLimitTest, SharedLinkKeepsItSmall) {
  for (const double latency_ms : {0.0, 1.0, 40.0}) {
    FetchLimit limit({.min = 2, .max = 64, .initial = 4});
    const Trace trace = Simulate(limit, SharedLink(100, latency_ms), 5000);
    // Past the first rounds the limit never runs off: more in flight would only queue.
    for (size_t i = 1000; i < trace.limits.size(); ++i) {
      ASSERT_LE(trace.limits[i], 8u) << "latency " << latency_ms << " ms, fetch " << i;
    }
  }
}

TEST(FetchLimitTest, CpuBoundLoopbackServerKeepsItSmall) {
  // Two cores: two fetches run at full speed (4 ms a block), more share them.
  FetchLimit limit({.min = 2, .max = 64, .initial = 4});
  const Link link{
      [](size_t n) { return 4 * kMs * static_cast<double>(std::max<size_t>(2, n)) / 2; }};
  const Trace trace = Simulate(limit, link, 5000);
  for (size_t i = 1000; i < trace.limits.size(); ++i) ASSERT_LE(trace.limits[i], 6u) << i;
}

TEST(FetchLimitTest, DelayNeverTakesItBelowWhereItStarted) {
  // A mount starts at 8, the fixed pool it replaces: a CPU-bound loopback server answers
  // each request later with more in flight but still serves as many bytes a second, and
  // held at 2 it served half.
  FetchLimit limit({.min = 2, .max = 64, .initial = 8});
  const Link link{
      [](size_t n) { return 4 * kMs * static_cast<double>(std::max<size_t>(2, n)) / 2; }};
  const Trace trace = Simulate(limit, link, 3000);
  for (size_t i = 0; i < trace.limits.size(); ++i) ASSERT_GE(trace.limits[i], 8u) << i;
  for (size_t i = 1000; i < trace.limits.size(); ++i) ASSERT_LE(trace.limits[i], 12u) << i;
}

TEST(FetchLimitTest, ErrorsShrinkIt) {
  FetchLimit limit({.min = 2, .max = 64, .initial = 4});
  Link link = PerConnectionLink();
  ASSERT_EQ(Simulate(limit, link, 1000).limits.back(), 64u);
  // The server starts answering 503 past its retries: halved once a round, down to min.
  link.fails = [](size_t) { return true; };
  const Trace failing = Simulate(limit, link, 200);
  EXPECT_EQ(failing.limits.back(), 2u);
  EXPECT_LT(failing.limits[0], 64u) << "the first failure halves it at once";
  // Back to health: it grows again, by one a round now (no second slow start).
  link.fails = [](size_t) { return false; };
  const Trace healed = Simulate(limit, link, 400);
  EXPECT_GT(healed.limits.back(), 2u);
}

TEST(FetchLimitTest, AReaderThatWantsFewDoesNotGrowIt) {
  FetchLimit limit({.min = 2, .max = 64, .initial = 4});
  // It may grow once (three of four busy), never again: a round must use 3/4 of it.
  const Trace trace = Simulate(limit, PerConnectionLink(), 1000, /*want=*/3);
  EXPECT_LE(trace.limits.back(), 8u);
  EXPECT_LE(trace.max_in_flight, 3u);
}

TEST(FetchLimitTest, ASlowerLinkIsMeasuredAgain) {
  FetchLimit limit({.min = 2, .max = 64, .initial = 4});
  const Trace fast = Simulate(limit, PerConnectionLink(), 1000);
  ASSERT_EQ(fast.limits.back(), 64u);
  // The same kind of link, each connection now 4x slower: the best seen no longer
  // applies; after a few rounds at min it is measured afresh and the limit grows again.
  const Link slower{
      [](size_t) { return 4 * (40 * kMs + static_cast<double>(kBlock) / 10e6 * 1e9); }};
  const Trace trace = Simulate(limit, slower, 3000);
  EXPECT_GT(trace.limits.back(), 8u);
}

TEST(FetchLimitTest, ReadersEnterPastTheLimitAndWorkersWait) {
  FetchLimit limit({.min = 2, .max = 4, .initial = 2});
  limit.Acquire();
  limit.Acquire();
  EXPECT_FALSE(limit.TryAcquire());
  limit.Enter();  // a reader's own fetch never waits
  EXPECT_EQ(limit.snapshot().in_flight, 3u);
  EXPECT_EQ(limit.snapshot().max_seen, 3u);
  limit.Done(100, nanoseconds(1000), true);
  limit.Done(100, nanoseconds(1000), true);
  EXPECT_TRUE(limit.TryAcquire());
}

}  // namespace
}  // namespace ckptfs
