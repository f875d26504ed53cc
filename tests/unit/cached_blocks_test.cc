// CachedBlocks (core/source/cached_blocks.h), the one cached-block mechanism of zstd frames
// and remote blocks, over a fake BlockSet: bytes, loads only of touched blocks, one load per
// block however many readers, parallel loads of one read's blocks, scheduling within the
// budget, failed loads retried, lent blocks pinned. Part of scripts/test.sh's
// ThreadSanitizer subset.
#include "core/source/cached_blocks.h"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace ckptfs {
namespace {

uint8_t ByteAt(uint64_t offset) { return static_cast<uint8_t>(offset * 131 + offset / 251); }

// Blocks of uneven sizes, as zstd frames are; counts its loads and who ran them.
class FakeBlocks final : public BlockSet {
 public:
  explicit FakeBlocks(std::vector<uint64_t> sizes) {
    uint64_t at = 0;
    for (uint64_t n : sizes) {
      ranges_.push_back({at, at + n});
      at += n;
    }
    size_ = at;
    loads_ = std::make_unique<std::atomic<int>[]>(ranges_.size());
  }

  size_t BlockCount() const override { return ranges_.size(); }
  size_t BlockAt(uint64_t offset) const override {
    size_t i = 0;
    while (ranges_[i].end <= offset) ++i;
    return i;
  }
  ByteRange BlockRange(size_t block) const override { return ranges_[block]; }
  Status LoadBlock(size_t block, std::span<uint8_t> out, bool* publish) const override {
    loads_[block].fetch_add(1);
    {
      std::lock_guard lock(mu_);
      loaders_.insert(std::this_thread::get_id());
    }
    if (delay.count()) std::this_thread::sleep_for(delay);
    if (fail_block == block && fail_once.exchange(false)) {
      return Status::IoError("block " + std::to_string(block) + " failed");
    }
    for (size_t i = 0; i < out.size(); ++i) out[i] = ByteAt(ranges_[block].begin + i);
    *publish = publish_loads;
    return Status::Ok();
  }
  void Published(size_t, std::span<const uint8_t> bytes) const override {
    published_bytes.fetch_add(bytes.size());
  }

  uint64_t size() const { return size_; }
  int loads(size_t block) const { return loads_[block].load(); }
  int total_loads() const {
    int n = 0;
    for (size_t i = 0; i < ranges_.size(); ++i) n += loads_[i].load();
    return n;
  }
  size_t loader_threads() const {
    std::lock_guard lock(mu_);
    return loaders_.size();
  }

  std::chrono::milliseconds delay{0};
  size_t fail_block = SIZE_MAX;
  mutable std::atomic<bool> fail_once{false};
  bool publish_loads = false;
  mutable std::atomic<uint64_t> published_bytes{0};

 private:
  std::vector<ByteRange> ranges_;
  uint64_t size_ = 0;
  std::unique_ptr<std::atomic<int>[]> loads_;
  mutable std::mutex mu_;
  mutable std::set<std::thread::id> loaders_;
};

std::string Expected(uint64_t offset, uint64_t n) {
  std::string out(n, '\0');
  for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<char>(ByteAt(offset + i));
  return out;
}

std::string Read(const CachedBlocks& blocks, uint64_t offset, uint64_t n,
                 Status* status = nullptr) {
  std::string out(n, '\0');
  Status s = blocks.Read(offset, {reinterpret_cast<uint8_t*>(out.data()), out.size()});
  if (status) *status = s;
  return s.ok() ? out : std::string();
}

const std::vector<uint64_t> kSizes = {1000, 3000, 500, 4096, 7, 2048, 1000, 3333};

TEST(CachedBlocksTest, ReadsGiveTheBytesAndLoadOnlyTouchedBlocks) {
  FakeBlocks set(kSizes);
  ReadContext context({.cache_bytes = 1 << 20});  // no workers: everything in this thread
  CachedBlocks blocks(set, context, CachedBlocks::Workers::kDecode);
  EXPECT_EQ(Read(blocks, 1500, 3000), Expected(1500, 3000));  // blocks 1 and 2
  EXPECT_EQ(set.loads(0), 0);
  EXPECT_EQ(set.loads(1), 1);
  EXPECT_EQ(set.loads(2), 1);
  EXPECT_EQ(set.total_loads(), 2);
  EXPECT_EQ(Read(blocks, 3999, 2), Expected(3999, 2));  // cached: no load
  EXPECT_EQ(set.total_loads(), 2);
  EXPECT_EQ(Read(blocks, 0, set.size()), Expected(0, set.size()));
  for (size_t b = 0; b < kSizes.size(); ++b) EXPECT_EQ(set.loads(b), 1) << b;
}

TEST(CachedBlocksTest, OneReadLoadsItsBlocksOnSeveralThreads) {
  FakeBlocks set(kSizes);
  set.delay = std::chrono::milliseconds(30);
  ReadContext context({.cache_bytes = 1 << 20, .prefetch = {.decode_threads = 2}});
  context.StartWorkers();
  CachedBlocks blocks(set, context, CachedBlocks::Workers::kDecode);
  EXPECT_EQ(Read(blocks, 0, set.size()), Expected(0, set.size()));
  context.Shutdown();
  for (size_t b = 0; b < kSizes.size(); ++b) EXPECT_EQ(set.loads(b), 1) << b;
  // The reader loads the first block while the workers take the rest: not readahead (the
  // read asked for them), so not counted as prefetches.
  EXPECT_GE(set.loader_threads(), 2u);
  EXPECT_EQ(context.prefetches.load(), 0u);
}

TEST(CachedBlocksTest, ConcurrentReadersShareEveryLoad) {
  FakeBlocks set(kSizes);
  set.delay = std::chrono::milliseconds(2);
  ReadContext context({.cache_bytes = 1 << 20, .prefetch = {.decode_threads = 2}});
  context.StartWorkers();
  CachedBlocks blocks(set, context, CachedBlocks::Workers::kDecode);
  std::vector<std::thread> readers;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 16; ++t) {
    readers.emplace_back([&, t] {
      for (uint64_t off = static_cast<uint64_t>(t) * 97; off < set.size(); off += 1777) {
        const uint64_t n = std::min<uint64_t>(2500, set.size() - off);
        if (Read(blocks, off, n) != Expected(off, n)) wrong.fetch_add(1);
      }
    });
  }
  for (std::thread& r : readers) r.join();
  context.Shutdown();
  EXPECT_EQ(wrong.load(), 0);
  for (size_t b = 0; b < kSizes.size(); ++b) EXPECT_EQ(set.loads(b), 1) << b;
  EXPECT_GT(context.cache().counters().coalesced + context.cache().counters().hits, 0u);
}

TEST(CachedBlocksTest, ScheduleLoadsAheadOnceWithinTheBudget) {
  FakeBlocks set(std::vector<uint64_t>(64, 1000));
  // A quarter of 16000 bytes: at most 4 blocks of 1000 per Schedule call.
  ReadContext context({.cache_bytes = 16000, .prefetch = {.decode_threads = 1}});
  context.StartWorkers();
  CachedBlocks blocks(set, context, CachedBlocks::Workers::kFetch);
  blocks.Schedule(0, set.size());
  blocks.Schedule(0, set.size());  // the same blocks again: queued or cached, not reloaded
  context.Shutdown();              // waits for running tasks; queued ones are dropped
  EXPECT_LE(set.total_loads(), 4);
  for (size_t b = 0; b < 64; ++b) EXPECT_LE(set.loads(b), 1) << b;
  for (size_t b = 4; b < 64; ++b) EXPECT_EQ(set.loads(b), 0) << b;
  EXPECT_EQ(context.prefetches.load(), 0u);  // fetch workers count as remote prefetches
  EXPECT_LE(context.remote_prefetches.load(), 4u);
}

TEST(CachedBlocksTest, FailedLoadIsNotCachedAndTheNextReadRetries) {
  FakeBlocks set(kSizes);
  set.fail_block = 2;
  set.fail_once = true;
  ReadContext context({.cache_bytes = 1 << 20});
  CachedBlocks blocks(set, context, CachedBlocks::Workers::kDecode);
  Status s;
  Read(blocks, 3900, 300, &s);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("block 2 failed"), std::string::npos);
  EXPECT_EQ(Read(blocks, 3900, 300, &s), Expected(3900, 300));
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(set.loads(2), 2);
}

TEST(CachedBlocksTest, LentBlocksStayPinnedAndPublishedOnce) {
  FakeBlocks set(kSizes);
  set.publish_loads = true;
  ReadContext context({.cache_bytes = 1 << 20});
  CachedBlocks blocks(set, context, CachedBlocks::Workers::kFetch);
  {
    std::vector<LentBytes> lent;
    ASSERT_TRUE(blocks.Lend(900, 3200, &lent).ok());  // blocks 0, 1 and 2
    ASSERT_EQ(lent.size(), 3u);
    std::string got;
    for (const LentBytes& l : lent) got.append(l.bytes.begin(), l.bytes.end());
    EXPECT_EQ(got, Expected(900, 3200));
    EXPECT_EQ(context.cache().counters().pinned_bytes, 4500u);
  }
  EXPECT_EQ(context.cache().counters().pinned_bytes, 0u);
  EXPECT_EQ(set.published_bytes.load(), 4500u);
  std::vector<LentBytes> again;
  ASSERT_TRUE(blocks.Lend(900, 3200, &again).ok());  // hits: not published again
  EXPECT_EQ(set.published_bytes.load(), 4500u);
}

// The scratch buffers of un-grouping (ReadContext::LeaseScratch): reused, and within the
// budget unless one lease alone needs more.
TEST(CachedBlocksTest, ScratchLeasesAreReusedAndStayWithinTheBudget) {
  ReadContext context({.cache_bytes = 1 << 20});
  const uint8_t* first = nullptr;
  {
    auto lease = context.LeaseScratch(4 << 20);
    EXPECT_GE(lease.buffer().size(), 4u << 20);
    first = lease.buffer().data();
  }
  {
    auto again = context.LeaseScratch(1 << 20);  // the kept 4 MiB buffer fits: reused
    EXPECT_EQ(again.buffer().data(), first);
  }
  {
    auto huge = context.LeaseScratch(ReadContext::kScratchBytes + 1);  // alone: allowed
    EXPECT_GE(huge.buffer().size(), ReadContext::kScratchBytes + 1);
  }
  // Two leases of 10 MiB: the second waits for the first.
  std::atomic<int> holding{0}, most{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      auto lease = context.LeaseScratch(10 << 20);
      const int now = holding.fetch_add(1) + 1;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      holding.fetch_sub(1);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(most.load(), 1);
}

}  // namespace
}  // namespace ckptfs
