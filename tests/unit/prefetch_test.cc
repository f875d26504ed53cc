#include "core/cache/prefetch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/cache/read_context.h"

namespace ckptfs {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

// Polls `done` for up to five seconds: worker threads run when the scheduler says so.
template <typename Pred>
bool WaitFor(Pred done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(ThreadPoolTest, RunsEveryTask) {
  ThreadPool pool(2, 1000);
  EXPECT_EQ(pool.threads(), 2u);
  std::atomic<int> ran{0};
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(pool.TrySubmit([&] { ran.fetch_add(1); }));
  EXPECT_TRUE(WaitFor([&] { return ran.load() == 200; }));
}

TEST(ThreadPoolTest, ZeroThreadsMeansOnePerCore) {
  ThreadPool pool(0);
  EXPECT_EQ(pool.threads(), std::max(1u, std::thread::hardware_concurrency()));
}

TEST(ThreadPoolTest, RefusesPastMaxQueued) {
  ThreadPool pool(1, 2);
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::atomic<bool> blocker_running{false};
  std::atomic<int> ran{0};
  ASSERT_TRUE(pool.TrySubmit([&, opened] {
    blocker_running = true;
    opened.wait();
  }));
  ASSERT_TRUE(WaitFor([&] { return blocker_running.load(); }));
  // The only worker is busy: two tasks may wait, the third is refused.
  EXPECT_TRUE(pool.TrySubmit([&] { ran.fetch_add(1); }));
  EXPECT_TRUE(pool.TrySubmit([&] { ran.fetch_add(1); }));
  EXPECT_FALSE(pool.TrySubmit([&] { ran.fetch_add(100); }));
  EXPECT_EQ(pool.queued(), 2u);
  gate.set_value();
  EXPECT_TRUE(WaitFor([&] { return ran.load() == 2 && pool.queued() == 0; }));
  // Room again once the queue drained.
  EXPECT_TRUE(pool.TrySubmit([&] { ran.fetch_add(1); }));
  EXPECT_TRUE(WaitFor([&] { return ran.load() == 3; }));
}

TEST(ThreadPoolTest, DestructorDropsPendingTasksAndJoins) {
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::atomic<bool> blocker_running{false};
  std::atomic<bool> blocker_finished{false};
  std::atomic<int> ran{0};
  auto token = std::make_shared<int>(0);  // held by the pending tasks' captures
  std::thread opener;
  {
    ThreadPool pool(1, 10);
    ASSERT_TRUE(pool.TrySubmit([&, opened] {
      blocker_running = true;
      opened.wait();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      blocker_finished = true;
    }));
    ASSERT_TRUE(WaitFor([&] { return blocker_running.load(); }));
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(pool.TrySubmit([&ran, token] { ran.fetch_add(1); }));
    EXPECT_EQ(token.use_count(), 6);
    // Open the gate only once the destructor below has had time to start: the pending
    // tasks must be dropped, not run, and the running one must be waited for.
    opener = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      gate.set_value();
    });
  }
  EXPECT_TRUE(blocker_finished.load());
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(token.use_count(), 1);
  opener.join();
}

TEST(ThreadPoolTest, TasksMaySubmitTasks) {
  // Tasks submitting tasks: the common prefetch shape (a loaded block schedules the next).
  std::atomic<int> ran{0};
  {
    ThreadPool pool(2, 4);
    std::function<void()> chain = [&] {
      if (ran.fetch_add(1) < 50) pool.TrySubmit(chain);
    };
    ASSERT_TRUE(pool.TrySubmit(chain));
    EXPECT_TRUE(WaitFor([&] { return ran.load() > 50; }));
  }
  EXPECT_EQ(ran.load(), 51);
}

TEST(ThreadPoolTest, ThrowingTaskKeepsWorkerAlive) {
  ThreadPool pool(1, 10);
  std::atomic<int> ran{0};
  ASSERT_TRUE(pool.TrySubmit([] { throw std::runtime_error("prefetch failed"); }));
  ASSERT_TRUE(pool.TrySubmit([&] { ran.fetch_add(1); }));
  EXPECT_TRUE(WaitFor([&] { return ran.load() == 1; }));
}

Readahead::Options SmallWindows() {
  Readahead::Options o;
  o.initial_window = 4 * kMiB;
  o.max_window = 16 * kMiB;
  o.streams = 4;
  o.slack = kMiB;
  return o;
}

// RunAll finishes every task whether the workers run (a serving daemon), do not yet
// (before the fork: workers are made for the call and joined), or are busy.
TEST(ReadContextRunAll, RunsEveryTaskWithAndWithoutWorkers) {
  for (bool started : {false, true}) {
    ReadContext context(ReadOptions{});
    if (started) context.StartWorkers();
    std::vector<std::atomic<int>> runs(50);
    std::vector<std::function<void()>> tasks;
    for (auto& r : runs) tasks.emplace_back([&r] { r.fetch_add(1); });
    context.RunAll(std::move(tasks));
    for (auto& r : runs) EXPECT_EQ(r.load(), 1) << "started " << started;
  }
}

TEST(ReadContextRunAll, FinishesWhenTheWorkersAreBusy) {
  ReadOptions options;
  options.prefetch.decode_threads = 1;
  options.prefetch.max_queued = 1;
  ReadContext context(options);
  context.StartWorkers();
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  // The one worker blocks and the queue is full: RunAll's caller must do the work itself.
  ASSERT_TRUE(context.TrySubmit(ReadContext::Workers::kDecode, [released] { released.wait(); }));
  context.TrySubmit(ReadContext::Workers::kDecode, [] {});
  std::atomic<int> done{0};
  context.RunAll({[&] { ++done; }, [&] { ++done; }, [&] { ++done; }});
  EXPECT_EQ(done.load(), 3);
  release.set_value();
}

TEST(ReadaheadTest, RandomReadsPrefetchNothing) {
  Readahead ra;
  std::mt19937_64 rng(12345);
  for (int i = 0; i < 2000; ++i) {
    const uint64_t offset = rng() % (uint64_t{1} << 40);
    const uint64_t length = 4096 + rng() % kMiB;
    EXPECT_TRUE(ra.OnRead(offset, length).empty()) << "read " << i << " at " << offset;
  }
}

TEST(ReadaheadTest, SingleReadIsNotAPattern) {
  Readahead ra;
  EXPECT_TRUE(ra.OnRead(0, kMiB).empty());
  // Reading the same bytes again is not progress either.
  EXPECT_TRUE(ra.OnRead(0, kMiB).empty());
  EXPECT_TRUE(ra.OnRead(0, kMiB).empty());
  EXPECT_TRUE(ra.OnRead(0, 0).empty());
}

// The window doubles once the reader has read twice the window, not on every read:
// prefetch stays one window ahead, and no further ahead than the reader has come
// (beyond the initial window).
TEST(ReadaheadTest, SequentialWindowsGrowWithWhatWasRead) {
  Readahead ra(SmallWindows());
  EXPECT_TRUE(ra.OnRead(0, kMiB).empty());
  EXPECT_EQ(ra.OnRead(1 * kMiB, kMiB), (ByteRange{2 * kMiB, 6 * kMiB}));  // window 4
  EXPECT_EQ(ra.OnRead(2 * kMiB, kMiB), (ByteRange{6 * kMiB, 7 * kMiB}));  // still 4
  uint64_t window = 4 * kMiB, requested = 7 * kMiB;
  for (uint64_t i = 3; i < 40; ++i) {
    const uint64_t end = (i + 1) * kMiB;
    if (end >= 2 * window) window = std::min(2 * window, 16 * kMiB);  // 8 at 8, 16 at 16
    EXPECT_EQ(ra.OnRead(i * kMiB, kMiB), (ByteRange{requested, end + window})) << i;
    requested = end + window;
  }
  EXPECT_EQ(window, 16 * kMiB);
}

// Issue 28: a reader that reads one tensor sequentially and stops is never more than one
// window ahead, and that window is at most the initial one or what it has read so far,
// however small its requests.
TEST(ReadaheadTest, OneTensorReadLeavesAtMostOneWindowAhead) {
  for (const uint64_t request : {uint64_t{128} << 10, kMiB}) {
    Readahead::Options o = SmallWindows();
    o.max_window = 64 * kMiB;
    Readahead ra(o);
    const uint64_t tensor_begin = 40 * kMiB, tensor_end = tensor_begin + 5591040;
    uint64_t requested_until = 0;
    for (uint64_t at = tensor_begin; at < tensor_end; at += request) {
      const uint64_t read_end = std::min(at + request, tensor_end);
      const ByteRange r = ra.OnRead(at, read_end - at);
      if (r.empty()) continue;
      requested_until = r.end;
      EXPECT_LE(r.end - read_end, std::max(o.initial_window, read_end - tensor_begin)) << at;
    }
    EXPECT_GT(requested_until, tensor_end) << "a sequential reader gets a window";
    EXPECT_LE(requested_until, tensor_end + 2 * o.initial_window) << "request " << request;
  }
}

TEST(ReadaheadTest, LongSequentialRunNeverRequestsTwice) {
  Readahead::Options o = SmallWindows();
  Readahead ra(o);
  uint64_t requested_until = 0;
  uint64_t requested_bytes = 0;
  constexpr uint64_t kRead = 128 * 1024;
  for (uint64_t offset = 0; offset < 200 * kMiB; offset += kRead) {
    const ByteRange r = ra.OnRead(offset, kRead);
    if (r.empty()) continue;
    if (requested_until != 0) {
      EXPECT_EQ(r.begin, requested_until) << "at " << offset;
    }
    EXPECT_GE(r.begin, offset + kRead);
    EXPECT_LE(r.end, offset + kRead + o.max_window);
    requested_until = r.end;
    requested_bytes += r.size();
  }
  const uint64_t last_read_end = 200 * kMiB;
  EXPECT_EQ(requested_until, last_read_end + o.max_window);
  EXPECT_EQ(requested_bytes, requested_until - 2 * kRead);
}

TEST(ReadaheadTest, ReadsOutOfOrderWithinSlackStaySequential) {
  Readahead ra(SmallWindows());
  EXPECT_TRUE(ra.OnRead(0, kMiB).empty());
  EXPECT_EQ(ra.OnRead(1 * kMiB, kMiB), (ByteRange{2 * kMiB, 6 * kMiB}));
  // [3M, 4M) overtakes [2M, 3M): one request ahead is still the same reader.
  EXPECT_EQ(ra.OnRead(3 * kMiB, kMiB), (ByteRange{6 * kMiB, 8 * kMiB}));
  // The straggler belongs to the stream: nothing new, and no reset.
  EXPECT_TRUE(ra.OnRead(2 * kMiB, kMiB).empty());
  EXPECT_EQ(ra.OnRead(4 * kMiB, kMiB), (ByteRange{8 * kMiB, 9 * kMiB}));
  EXPECT_EQ(ra.OnRead(6 * kMiB, kMiB), (ByteRange{9 * kMiB, 11 * kMiB}));
  EXPECT_EQ(ra.OnRead(7 * kMiB, kMiB), (ByteRange{11 * kMiB, 16 * kMiB}));  // window 8
  // A straggler a few requests late still is one.
  EXPECT_TRUE(ra.OnRead(5 * kMiB, kMiB).empty());
  EXPECT_EQ(ra.OnRead(8 * kMiB, kMiB), (ByteRange{16 * kMiB, 17 * kMiB}));
  // Two requests ahead is beyond the slack: that is a seek.
  EXPECT_TRUE(ra.OnRead(11 * kMiB, kMiB).empty());
}

TEST(ReadaheadTest, SeekStartsOverWithTheInitialWindow) {
  Readahead ra(SmallWindows());
  for (uint64_t i = 0; i < 10; ++i) ra.OnRead(i * kMiB, kMiB);
  // A jump forward beyond the slack, or backward, is a seek: no prefetch on it...
  EXPECT_TRUE(ra.OnRead(100 * kMiB, kMiB).empty());
  // ...and the next sequential read starts again from the initial window.
  EXPECT_EQ(ra.OnRead(101 * kMiB, kMiB), (ByteRange{102 * kMiB, 106 * kMiB}));
  EXPECT_TRUE(ra.OnRead(50 * kMiB, 4096).empty());
  EXPECT_EQ(ra.OnRead(50 * kMiB + 4096, 4096),
            (ByteRange{50 * kMiB + 8192, 50 * kMiB + 8192 + 4 * kMiB}));
}

TEST(ReadaheadTest, SeekWithOneStreamForgetsTheOldStream) {
  Readahead::Options o = SmallWindows();
  o.streams = 1;
  Readahead ra(o);
  for (uint64_t i = 0; i < 10; ++i) ra.OnRead(i * kMiB, kMiB);
  EXPECT_TRUE(ra.OnRead(1 * kGiB, kMiB).empty());
  // Back where the first stream was: it is gone, so this is a seek again.
  EXPECT_TRUE(ra.OnRead(10 * kMiB, kMiB).empty());
  EXPECT_EQ(ra.OnRead(11 * kMiB, kMiB), (ByteRange{12 * kMiB, 16 * kMiB}));
}

TEST(ReadaheadTest, InterleavedStreamsKeepTheirOwnWindows) {
  Readahead ra(SmallWindows());
  const uint64_t a = 0, b = 10 * kGiB;
  EXPECT_TRUE(ra.OnRead(a, kMiB).empty());
  EXPECT_TRUE(ra.OnRead(b, kMiB).empty());
  EXPECT_EQ(ra.OnRead(a + kMiB, kMiB), (ByteRange{a + 2 * kMiB, a + 6 * kMiB}));
  EXPECT_EQ(ra.OnRead(b + kMiB, kMiB), (ByteRange{b + 2 * kMiB, b + 6 * kMiB}));
  EXPECT_EQ(ra.OnRead(a + 2 * kMiB, kMiB), (ByteRange{a + 6 * kMiB, a + 7 * kMiB}));
  // A random read in between touches neither stream.
  EXPECT_TRUE(ra.OnRead(5 * kGiB, kMiB).empty());
  EXPECT_EQ(ra.OnRead(b + 2 * kMiB, kMiB), (ByteRange{b + 6 * kMiB, b + 7 * kMiB}));
  for (uint64_t i = 3; i < 7; ++i) {
    EXPECT_EQ(ra.OnRead(a + i * kMiB, kMiB), (ByteRange{a + (i + 4) * kMiB, a + (i + 5) * kMiB}));
    EXPECT_EQ(ra.OnRead(b + i * kMiB, kMiB), (ByteRange{b + (i + 4) * kMiB, b + (i + 5) * kMiB}));
  }
  // Each has read twice its first window: each doubles its own.
  EXPECT_EQ(ra.OnRead(a + 7 * kMiB, kMiB), (ByteRange{a + 11 * kMiB, a + 16 * kMiB}));
  EXPECT_EQ(ra.OnRead(b + 7 * kMiB, kMiB), (ByteRange{b + 11 * kMiB, b + 16 * kMiB}));
}

TEST(ReadaheadTest, NewStreamsReplaceTheLeastRecentlyUsed) {
  Readahead::Options o = SmallWindows();
  o.streams = 2;
  Readahead ra(o);
  const uint64_t a = 0, b = 10 * kGiB, c = 20 * kGiB;
  ra.OnRead(a, kMiB);
  ra.OnRead(b, kMiB);
  ra.OnRead(a + kMiB, kMiB);  // a is now more recent than b
  ra.OnRead(c, kMiB);         // replaces b
  EXPECT_FALSE(ra.OnRead(a + 2 * kMiB, kMiB).empty());
  EXPECT_FALSE(ra.OnRead(c + kMiB, kMiB).empty());
  EXPECT_TRUE(ra.OnRead(b + kMiB, kMiB).empty());  // b was forgotten: a seek
}

TEST(ReadaheadTest, RangesStopAtTheLimit) {
  Readahead::Options o = SmallWindows();
  o.limit = 5 * kMiB + 100;
  Readahead ra(o);
  ra.OnRead(0, kMiB);
  EXPECT_EQ(ra.OnRead(kMiB, kMiB), (ByteRange{2 * kMiB, 5 * kMiB + 100}));
  EXPECT_TRUE(ra.OnRead(2 * kMiB, kMiB).empty());
  EXPECT_TRUE(ra.OnRead(3 * kMiB, kMiB).empty());
}

TEST(ReadaheadTest, ConcurrentReadersEachGetTheirStream) {
  constexpr int kReaders = 4;
  Readahead ra(SmallWindows());
  std::vector<std::vector<ByteRange>> ranges(kReaders);
  std::vector<std::thread> threads;
  for (int t = 0; t < kReaders; ++t) {
    threads.emplace_back([&, t] {
      const uint64_t base = static_cast<uint64_t>(t) * 100 * kGiB;
      for (uint64_t i = 0; i < 500; ++i) {
        const ByteRange r = ra.OnRead(base + i * 256 * 1024, 256 * 1024);
        if (!r.empty()) ranges[t].push_back(r);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kReaders; ++t) {
    const uint64_t base = static_cast<uint64_t>(t) * 100 * kGiB;
    ASSERT_FALSE(ranges[t].empty());
    EXPECT_EQ(ranges[t].front().begin, base + 512 * 1024);
    for (size_t i = 1; i < ranges[t].size(); ++i) {
      EXPECT_EQ(ranges[t][i].begin, ranges[t][i - 1].end);
    }
    EXPECT_EQ(ranges[t].back().end, base + 500 * 256 * 1024 + 16 * kMiB);
  }
}

// A reader coming down a source a request at a time (a large memcpy out of a map that
// copies from the end down) gets the initial window below it once it has come down more
// than a few requests: never requested twice, never more than that window below the
// reader, and never grown (where the copy's piece ends, whatever lies below is waste).
TEST(ReadaheadTest, BackwardReaderGetsTheWindowBelow) {
  Readahead ra(SmallWindows());
  const uint64_t top = 200 * kMiB, window = 4 * kMiB;
  uint64_t requested_from = 0, requested = 0, first_end = 0;
  for (uint64_t i = 1; i <= 100; ++i) {
    const uint64_t at = top - i * kMiB;
    const ByteRange r = ra.OnRead(at, kMiB);
    const uint64_t below = (top - kMiB) - at;  // read below where the stream began
    if (below < 4 * kMiB) {
      EXPECT_TRUE(r.empty()) << "not yet a backward reader at " << i;
      continue;
    }
    const ByteRange want{at - window, requested_from == 0 ? at : requested_from};
    EXPECT_EQ(r, want) << i;
    if (first_end == 0) first_end = r.end;
    requested_from = r.begin;
    requested += r.size();
  }
  EXPECT_EQ(first_end, top - 5 * kMiB);
  EXPECT_EQ(requested, first_end - requested_from) << "nothing requested twice";
  EXPECT_EQ(requested_from, top - 100 * kMiB - window);
}

// A forward reader whose first requests reach the threads highest first goes down at
// most that batch: no window below it, and its forward window as usual.
TEST(ReadaheadTest, ForwardReaderArrivingHighestFirstPrefetchesNothingBelow) {
  Readahead ra(SmallWindows());
  const uint64_t base = 40 * kMiB;
  for (uint64_t i = 4; i-- > 0;) EXPECT_TRUE(ra.OnRead(base + i * kMiB, kMiB).empty()) << i;
  EXPECT_EQ(ra.OnRead(base + 4 * kMiB, kMiB), (ByteRange{base + 5 * kMiB, base + 9 * kMiB}));
  EXPECT_EQ(ra.OnRead(base + 5 * kMiB, kMiB), (ByteRange{base + 9 * kMiB, base + 10 * kMiB}));
}

// What the daemon saw of numpy copying a mapped file out in 64 MiB pieces: each piece
// faulted in from its top down, two 1 MiB requests per fault in either order and a
// single page at each fault's upper edge, pieces in ascending order. Everything requested
// below a piece lies inside that piece or within one window of the reader.
TEST(ReadaheadTest, MmapPiecesFaultedTopDownPrefetchDownwards) {
  Readahead ra(SmallWindows());
  constexpr uint64_t kPiece = 64 * kMiB, kPage = 4096;
  uint64_t prefetched_below = 0;
  for (uint64_t piece = 0; piece < 4; ++piece) {
    const uint64_t bottom = piece * kPiece, top = bottom + kPiece;
    for (uint64_t fault = top; fault > bottom; fault -= 2 * kMiB) {
      const bool swap = (fault / (2 * kMiB)) % 2 == 1;
      const uint64_t first = swap ? fault - 2 * kMiB : fault - kMiB;
      const uint64_t second = swap ? fault - kMiB : fault - 2 * kMiB;
      for (const ByteRange read : {ByteRange{first, first + kMiB}, ByteRange{second, second + kMiB},
                                   ByteRange{fault - kPage, fault}}) {
        const ByteRange r = ra.OnRead(read.begin, read.size());
        if (r.empty()) continue;
        if (r.end <= read.begin) {  // below the reader: at most the initial window under it
          EXPECT_GE(r.begin + 4 * kMiB, read.begin) << fault;
          prefetched_below += r.size();
        } else {  // above: at most one window over it
          EXPECT_LE(r.end, read.end + 16 * kMiB) << fault;
        }
      }
    }
  }
  // Most of each piece was prefetched ahead of the reader's faults.
  EXPECT_GT(prefetched_below, 3 * kPiece);
}

}  // namespace
}  // namespace ckptfs
