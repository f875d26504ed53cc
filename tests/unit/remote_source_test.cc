// RemoteSource: exact reads while opening, whole cached blocks once serving, parallel
// prefetch, failures not cached, and the disk cache serving a second mount.

#include "core/source/remote_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "core/cache/disk_cache.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

constexpr uint64_t kBlock = RemoteSource::kBlockSize;

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  uint32_t x = 12345;
  for (char& c : s) {
    x = x * 1103515245u + 12345u;
    c = static_cast<char>(x >> 16);
  }
  return s;
}

// A server stand-in: records every range asked for and how many were in flight at once;
// can fail reads or stall them.
class FakeObject final : public ByteSource {
 public:
  static constexpr uint64_t kBlockSize = RemoteSource::kBlockSize;

  explicit FakeObject(std::string bytes) : bytes_(std::move(bytes)) {}
  uint64_t Size() const override { return bytes_.size(); }
  const std::string& Name() const override { return name_; }
  Status Read(uint64_t offset, uint64_t length, ReadSink& sink) const override {
    CKPTFS_RETURN_IF_ERROR(CheckRange(offset, length));
    const std::span<uint8_t> out = sink.Fill();
    const int now = ++in_flight_;
    for (int seen = max_in_flight_;
         now > seen && !max_in_flight_.compare_exchange_weak(seen, now);) {
    }
    const bool stall =
        stalled_block_ == UINT64_MAX ? stalling_.load() : offset / kBlockSize == stalled_block_;
    if (stall) {
      ::usleep(stall_us_);
    } else if (delay_us_) {
      ::usleep(delay_us_);
    }
    --in_flight_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ranges_.emplace_back(offset, out.size());
    }
    if (failing_) return Status::IoError(name_ + ": server gone");
    // What HttpSource says when --timeout passes with no answer.
    if (stall) return Status::IoError(name_ + ": read failed: no answer in time", ETIMEDOUT);
    std::memcpy(out.data(), bytes_.data() + offset, out.size());
    return Status::Ok();
  }

  std::vector<std::pair<uint64_t, uint64_t>> ranges() const {
    std::lock_guard<std::mutex> lock(mu_);
    return ranges_;
  }
  uint64_t bytes_served() const {
    uint64_t n = 0;
    for (const auto& r : ranges()) n += r.second;
    return n;
  }

  std::atomic<bool> failing_{false};
  uint32_t delay_us_ = 0;
  // Stalled reads wait stall_us_, then fail as timed out: every read while stalling_, or
  // only those of block stalled_block_ when it is set.
  std::atomic<bool> stalling_{false};
  uint64_t stalled_block_ = UINT64_MAX;
  uint32_t stall_us_ = 0;
  mutable std::atomic<int> max_in_flight_{0};

 private:
  std::string name_ = "model.safetensors";
  std::string bytes_;
  mutable std::atomic<int> in_flight_{0};
  mutable std::mutex mu_;
  mutable std::vector<std::pair<uint64_t, uint64_t>> ranges_;
};

struct Fixture {
  explicit Fixture(size_t size, uint64_t cache = 64u << 20, DiskCache* disk = nullptr,
                   std::chrono::milliseconds timeout = std::chrono::seconds(30))
      : bytes(Pattern(size)), codec(ReadOptions{.cache_bytes = cache}) {
    auto object = std::make_unique<FakeObject>(bytes);
    fake = object.get();
    source = std::make_unique<RemoteSource>(
        std::move(object), "http://h/m\n\"etag\"\n" + std::to_string(size), codec, disk, timeout);
  }
  ~Fixture() { codec.Shutdown(); }

  std::string Read(uint64_t offset, uint64_t length) {
    std::string out(length, '\0');
    Status s = source->ReadAt(offset, {reinterpret_cast<uint8_t*>(out.data()), length});
    EXPECT_TRUE(s.ok()) << s.message();
    return out;
  }

  std::string bytes;
  ReadContext codec;
  FakeObject* fake = nullptr;
  std::unique_ptr<RemoteSource> source;
};

TEST(RemoteSourceTest, WhileOpeningReadsExactlyTheBytesAsked) {
  Fixture f(5 * kBlock);
  EXPECT_EQ(f.Read(8, 100), f.bytes.substr(8, 100));
  EXPECT_EQ(f.Read(3 * kBlock - 10, 20), f.bytes.substr(3 * kBlock - 10, 20));
  const std::vector<std::pair<uint64_t, uint64_t>> want = {{8, 100}, {3 * kBlock - 10, 20}};
  EXPECT_EQ(f.fake->ranges(), want);
  std::vector<LentBytes> lent;  // while opening, reads are copied: nothing is lent
  EXPECT_EQ(ckptfs::testing::Lend(*f.source, 8, 100, &lent).code(), Status::Code::kUnsupported);
}

TEST(RemoteSourceTest, ServingFetchesWholeBlocksOnceAndServesRepeatsFromCache) {
  Fixture f(3 * kBlock + 123);
  f.source->BeginServing();
  EXPECT_EQ(f.Read(kBlock + 5, 10), f.bytes.substr(kBlock + 5, 10));
  EXPECT_EQ(f.Read(kBlock + 500, 1000), f.bytes.substr(kBlock + 500, 1000));
  // The short last block is fetched at its true length.
  EXPECT_EQ(f.Read(3 * kBlock + 100, 23), f.bytes.substr(3 * kBlock + 100, 23));
  const std::vector<std::pair<uint64_t, uint64_t>> want = {{kBlock, kBlock}, {3 * kBlock, 123}};
  EXPECT_EQ(f.fake->ranges(), want);
  EXPECT_EQ(f.codec.remote_bytes_fetched.load(), kBlock + 123);
}

TEST(RemoteSourceTest, OneTensorCostsAtMostItsSizePlusTwoBlocks) {
  Fixture f(40 * kBlock);
  f.codec.StartWorkers();
  f.source->BeginServing();
  // A tensor starting and ending mid-block, read the way FUSE does: 128 KiB at a time,
  // lent from the cache, the first read asking for the rest of the tensor ahead.
  const uint64_t begin = 7 * kBlock + 4321, length = 9 * kBlock + 77;
  std::string got;
  for (uint64_t off = 0; off < length; off += 128 << 10) {
    const uint64_t n = std::min<uint64_t>(128 << 10, length - off);
    if (off == 0) f.source->Prefetch(begin + n, length - n);
    std::vector<LentBytes> lent;
    ASSERT_TRUE(ckptfs::testing::Lend(*f.source, begin + off, n, &lent).ok());
    for (const LentBytes& l : lent) {
      got.append(reinterpret_cast<const char*>(l.bytes.data()), l.bytes.size());
    }
  }
  EXPECT_EQ(got, f.bytes.substr(begin, length));
  f.codec.Shutdown();  // let queued prefetches finish or drop before counting
  EXPECT_LE(f.fake->bytes_served(), length + 2 * kBlock);
  for (const auto& [offset, size] : f.fake->ranges()) {
    EXPECT_GE(offset + size, begin);
    EXPECT_LE(offset, begin + length);
  }
}

TEST(RemoteSourceTest, PrefetchFetchesBlocksInParallel) {
  Fixture f(16 * kBlock);
  f.fake->delay_us_ = 20'000;
  f.codec.StartWorkers();
  f.source->BeginServing();
  EXPECT_EQ(f.Read(0, 16 * kBlock), f.bytes);  // one big read: later blocks fetched ahead
  EXPECT_GE(f.fake->max_in_flight_.load(), 4);
  EXPECT_EQ(f.fake->bytes_served(), 16 * kBlock);
}

TEST(RemoteSourceTest, SequentialReadAtStreamsAhead) {
  Fixture f(32 * kBlock);
  f.fake->delay_us_ = 2'000;
  f.codec.StartWorkers();
  f.source->BeginServing();
  for (uint64_t off = 0; off < 32 * kBlock; off += 64 << 10) {
    ASSERT_EQ(f.Read(off, 64 << 10), f.bytes.substr(off, 64 << 10));
  }
  EXPECT_GT(f.codec.remote_prefetches.load(), 8u);
  EXPECT_EQ(f.fake->bytes_served(), 32 * kBlock);  // nothing fetched twice
}

TEST(RemoteSourceTest, FailedBlockIsNotCachedAndTheNextReadRetries) {
  Fixture f(2 * kBlock);
  f.source->BeginServing();
  f.fake->failing_ = true;
  std::string out(10, '\0');
  Status s = f.source->ReadAt(0, {reinterpret_cast<uint8_t*>(out.data()), out.size()});
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_NE(s.message().find("model.safetensors"), std::string::npos) << s.message();
  f.fake->failing_ = false;
  EXPECT_EQ(f.Read(0, 10), f.bytes.substr(0, 10));
}

// Lends [offset, offset + length); the status, and how long it took in *ms.
Status TimedLend(const RemoteSource& source, uint64_t offset, uint64_t length, int64_t* ms) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<LentBytes> lent;
  Status s = ckptfs::testing::Lend(source, offset, length, &lent);
  *ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                              start)
            .count();
  return s;
}

// The mmap fault of a stalled server: the kernel's read-around spans blocks 1 and 2; block
// 2 is only queued (the fetch workers are busy: here there are none) while block 1 stalls
// for the whole timeout. The kernel then asks again for the faulting page, in block 2: it
// fails at once, with EIO, not after another timeout.
TEST(RemoteSourceTest, ARangeThatTimedOutFailsAgainAtOnce) {
  Fixture f(6 * kBlock, 64u << 20, nullptr, std::chrono::milliseconds(1500));
  f.source->BeginServing();
  f.fake->stall_us_ = 300'000;
  f.fake->stalling_ = true;
  int64_t ms = 0;
  Status s = TimedLend(*f.source, kBlock + kBlock / 2, kBlock, &ms);
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_EQ(s.errno_value(), EIO) << "readers see EIO, not ETIMEDOUT";
  EXPECT_NE(s.message().find("no answer in time"), std::string::npos) << s.message();
  EXPECT_GE(ms, 290);
  for (const uint64_t offset : {2 * kBlock, kBlock + 4096, kBlock + kBlock / 2}) {
    s = TimedLend(*f.source, offset, 4096, &ms);
    EXPECT_EQ(s.errno_value(), EIO) << offset;
    EXPECT_NE(s.message().find("no answer in time"), std::string::npos) << s.message();
    EXPECT_LT(ms, 150) << "a range that just timed out fails at once; offset " << offset;
  }
  std::string out(10, '\0');
  s = f.source->ReadAt(2 * kBlock + 5, {reinterpret_cast<uint8_t*>(out.data()), out.size()});
  EXPECT_EQ(s.errno_value(), EIO) << "ReadAt callers (a .zst shard's frames) too";
  EXPECT_EQ(f.fake->ranges().size(), 1u) << "the server was asked once";
  // Other blocks are asked for, and the window ends: the server is asked again.
  f.fake->stalling_ = false;
  EXPECT_EQ(f.Read(4 * kBlock, 10), f.bytes.substr(4 * kBlock, 10));
  ::usleep(static_cast<useconds_t>(
      RemoteSource::TimedOutWindow(std::chrono::milliseconds(1500)).count() * 1000));
  EXPECT_EQ(f.Read(2 * kBlock, 10), f.bytes.substr(2 * kBlock, 10));
  EXPECT_EQ(f.Read(kBlock, 10), f.bytes.substr(kBlock, 10));
}

TEST(RemoteSourceTest, TimedOutWindowFollowsTheTimeoutWithinBounds) {
  using std::chrono::milliseconds;
  EXPECT_EQ(RemoteSource::TimedOutWindow(milliseconds(100)), RemoteSource::kMinTimedOutWindow);
  EXPECT_EQ(RemoteSource::TimedOutWindow(milliseconds(3000)), milliseconds(3000));
  EXPECT_EQ(RemoteSource::TimedOutWindow(milliseconds(30000)), RemoteSource::kMaxTimedOutWindow);
}

// A block fetched after all (its fetch began before the timeout) is served, not failed.
TEST(RemoteSourceTest, ABlockFetchedSinceATimeoutIsServed) {
  Fixture f(4 * kBlock, 64u << 20, nullptr, std::chrono::milliseconds(5000));
  f.codec.StartWorkers();
  f.source->BeginServing();
  f.fake->stalled_block_ = 1;
  f.fake->stall_us_ = 200'000;
  f.fake->delay_us_ = 400'000;  // block 2, queued on a worker, arrives after block 1 failed
  int64_t ms = 0;
  EXPECT_FALSE(TimedLend(*f.source, kBlock + kBlock / 2, kBlock, &ms).ok());
  for (int i = 0; i < 200 && f.fake->ranges().size() < 2; ++i) ::usleep(10'000);
  ::usleep(100'000);  // the worker has published block 2
  std::vector<LentBytes> lent;
  EXPECT_TRUE(ckptfs::testing::Lend(*f.source, 2 * kBlock, 4096, &lent).ok());
  EXPECT_FALSE(TimedLend(*f.source, kBlock, 4096, &ms).ok());
  EXPECT_LT(ms, 150) << "block 1 itself still fails at once";
  EXPECT_EQ(f.fake->ranges().size(), 2u);
}

// At most kMaxTimedOut ranges are remembered: the oldest is asked for again.
TEST(RemoteSourceTest, RememberedTimeoutsAreBounded) {
  constexpr size_t kBlocks = RemoteSource::kMaxTimedOut + 1;
  Fixture f(kBlocks * kBlock, 64u << 20, nullptr, std::chrono::milliseconds(5000));
  f.source->BeginServing();
  f.fake->stalling_ = true;
  int64_t ms = 0;
  for (size_t b = 0; b < kBlocks; ++b) EXPECT_FALSE(TimedLend(*f.source, b * kBlock, 1, &ms).ok());
  ASSERT_EQ(f.fake->ranges().size(), kBlocks);
  EXPECT_FALSE(TimedLend(*f.source, (kBlocks - 1) * kBlock, 1, &ms).ok());
  EXPECT_EQ(f.fake->ranges().size(), kBlocks) << "the newest is remembered";
  EXPECT_FALSE(TimedLend(*f.source, 0, 1, &ms).ok());
  EXPECT_EQ(f.fake->ranges().size(), kBlocks + 1) << "the oldest was forgotten";
}

TEST(RemoteSourceTest, LendHandsOutCachedBlocks) {
  Fixture f(3 * kBlock);
  f.source->BeginServing();
  std::vector<LentBytes> lent;
  ASSERT_TRUE(ckptfs::testing::Lend(*f.source, kBlock - 10, kBlock + 20, &lent).ok());
  ASSERT_EQ(lent.size(), 3u);
  std::string got;
  for (const LentBytes& l : lent)
    got.append(reinterpret_cast<const char*>(l.bytes.data()), l.bytes.size());
  EXPECT_EQ(got, f.bytes.substr(kBlock - 10, kBlock + 20));
  EXPECT_FALSE(ckptfs::testing::Lend(*f.source, 3 * kBlock - 1, 2, &lent).ok());  // past the end
}

TEST(RemoteSourceTest, DiskCacheServesASecondMountWithoutTheServer) {
  const std::string dir =
      ::testing::TempDir() + "/remote_source_disk_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  {
    auto disk = DiskCache::Open(dir, 64u << 20);
    ASSERT_TRUE(disk.ok()) << disk.status().message();
    Fixture first(4 * kBlock + 9, 64u << 20, disk->get());
    first.source->BeginServing();
    EXPECT_EQ(first.Read(0, 4 * kBlock + 9), first.bytes);
    EXPECT_EQ(first.fake->bytes_served(), 4 * kBlock + 9);
  }
  auto disk = DiskCache::Open(dir, 64u << 20);
  ASSERT_TRUE(disk.ok()) << disk.status().message();
  Fixture second(4 * kBlock + 9, 64u << 20, disk->get());
  // Header reads while opening are answered by the warm disk cache too.
  EXPECT_EQ(second.Read(8, 100), second.bytes.substr(8, 100));
  EXPECT_EQ(second.Read(kBlock - 4, 8), second.bytes.substr(kBlock - 4, 8));
  second.source->BeginServing();
  EXPECT_EQ(second.Read(0, 4 * kBlock + 9), second.bytes);
  EXPECT_EQ(second.fake->bytes_served(), 0u);
  EXPECT_EQ(second.codec.disk_cache_bytes.load(), 4 * kBlock + 9 + 108);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ckptfs
