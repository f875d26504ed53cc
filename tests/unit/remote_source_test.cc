// RemoteSource: exact reads while opening, whole cached blocks once serving, parallel
// prefetch, failures not cached, and the disk cache serving a second mount.

#include "core/source/remote_source.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "core/cache/disk_cache.h"
#include "core/codec/frame_index.h"
#include "core/codec/zstd_source.h"
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
      : bytes(Pattern(size)), context(ReadOptions{.cache_bytes = cache}) {
    auto object = std::make_unique<FakeObject>(bytes);
    fake = object.get();
    source = std::make_unique<RemoteSource>(
        std::move(object), "http://h/m\n\"etag\"\n" + std::to_string(size), context, disk, timeout);
  }
  ~Fixture() { context.Shutdown(); }

  std::string Read(uint64_t offset, uint64_t length) {
    std::string out(length, '\0');
    Status s = source->ReadAt(offset, {reinterpret_cast<uint8_t*>(out.data()), length});
    EXPECT_TRUE(s.ok()) << s.message();
    return out;
  }

  std::string bytes;
  ReadContext context;
  FakeObject* fake = nullptr;
  std::unique_ptr<RemoteSource> source;
};

// ---------------------------------------------------------------------------
// A packed (seekable zstd) shard on a server: ZstdSource over RemoteSource over the fake.
// Issue 28: reading one tensor decodes only the frames overlapping it and fetches only
// their compressed bytes, rounded out to whole blocks (less than one block more at each
// end); a sequential reader gets at most one window ahead.

constexpr uint64_t kMiB = uint64_t{1} << 20;

struct Packed {
  std::string plain, bytes;
  std::vector<Frame> frames;
};

// Incompressible bytes in frames of `frame_size`, with a checksummed seek table: the
// compressed frames straddle the remote blocks.
Packed Pack(size_t size, size_t frame_size) {
  Packed p;
  p.plain = Pattern(size);
  for (size_t off = 0; off < size; off += frame_size) {
    const std::string_view chunk = std::string_view(p.plain).substr(off, frame_size);
    std::string frame(ZSTD_compressBound(chunk.size()), '\0');
    const size_t n = ZSTD_compress(frame.data(), frame.size(), chunk.data(), chunk.size(), 1);
    EXPECT_FALSE(ZSTD_isError(n));
    frame.resize(n);
    Frame f;
    f.compressed_offset = p.bytes.size();
    f.compressed_size = n;
    f.decoded_offset = off;
    f.decoded_size = chunk.size();
    f.checksum = SeekableChecksum({reinterpret_cast<const uint8_t*>(chunk.data()), chunk.size()});
    p.frames.push_back(f);
    p.bytes += frame;
  }
  p.bytes += BuildSeekTable(p.frames, true);
  return p;
}

// The frames overlapping decoded bytes [begin, end): their decoded and compressed bytes.
std::pair<uint64_t, uint64_t> FramesOver(const Packed& p, uint64_t begin, uint64_t end) {
  uint64_t decoded = 0, compressed = 0;
  for (const Frame& f : p.frames) {
    if (f.decoded_offset < end && begin < f.decoded_offset + f.decoded_size) {
      decoded += f.decoded_size;
      compressed += f.compressed_size;
    }
  }
  return {decoded, compressed};
}

struct PackedFixture {
  explicit PackedFixture(const Packed& packed)
      : context(ReadOptions{.cache_bytes = 512 * kMiB}), fake_bytes(packed.bytes) {
    auto object = std::make_unique<FakeObject>(packed.bytes);
    fake = object.get();
    auto remote = std::make_unique<RemoteSource>(
        std::move(object), "http://h/s.zst\n\"etag\"\n" + std::to_string(packed.bytes.size()),
        context, nullptr, std::chrono::seconds(30));
    remote->BeginServing();  // mounted: reads from here on are the reader's
    auto opened = ZstdSource::Open(std::move(remote), context);
    EXPECT_TRUE(opened.ok()) << opened.status().message();
    if (opened.ok()) zstd = std::move(opened).value();
    opening_bytes = fake->bytes_served();  // the seek table
    context.StartWorkers();
  }
  ~PackedFixture() { context.Shutdown(); }

  // Waits until the fetch and decode workers have been idle for a while: no progress over
  // three samples, since under ThreadSanitizer on a loaded machine a queued prefetch can
  // sit for tens of milliseconds before a worker starts it.
  void Settle() {
    uint64_t last = UINT64_MAX;
    int still = 0;
    for (int i = 0; i < 200 && still < 3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      const uint64_t now = context.bytes_decoded.load() + fake->bytes_served();
      still = now == last ? still + 1 : 0;
      last = now;
    }
  }
  // Waits (at most 10 s) until the workers' work makes `done` true; what a test expects
  // the background to do, it waits for rather than guesses the time of.
  template <typename Done>
  bool WaitFor(Done done) {
    for (int i = 0; i < 1000; ++i) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return done();
  }
  uint64_t Fetched() const { return fake->bytes_served() - opening_bytes; }

  ReadContext context;
  std::string fake_bytes;
  FakeObject* fake = nullptr;
  std::unique_ptr<ZstdSource> zstd;
  uint64_t opening_bytes = 0;
};

TEST(RemoteSourceTest, PackedTensorReadFetchesAndDecodesOnlyItsFrames) {
  const Packed packed = Pack(40 * kMiB, 2 * kMiB);
  PackedFixture fx(packed);
  ASSERT_TRUE(fx.zstd);
  // A 5.5 MiB tensor in the middle of the shard, read at once (frames 5 to 8).
  const uint64_t begin = 10 * kMiB + 12345, end = begin + 5591040;
  std::string out(end - begin, '\0');
  ASSERT_TRUE(fx.zstd->ReadAt(begin, {reinterpret_cast<uint8_t*>(out.data()), out.size()}).ok());
  EXPECT_TRUE(out == packed.plain.substr(begin, end - begin));
  fx.Settle();
  const auto [decoded, compressed] = FramesOver(packed, begin, end);
  EXPECT_EQ(fx.context.bytes_decoded.load(), decoded);
  EXPECT_EQ(fx.context.compressed_bytes_read.load(), compressed);
  // Their compressed bytes, rounded out to the remote blocks holding them.
  EXPECT_GE(fx.Fetched(), compressed);
  EXPECT_LE(fx.Fetched(), compressed + 2 * (kBlock - 1));
  EXPECT_EQ(fx.context.remote_bytes_fetched.load() - fx.opening_bytes, fx.Fetched());
}

// A reader walking one tensor in 1 MiB requests, with the readahead a mount gives an open
// file: once sequential it gets one window ahead (the initial one: it stops before it
// has read a whole window past the first), not a window grown per request.
TEST(RemoteSourceTest, PackedSequentialReaderGetsOneWindowAhead) {
  const Packed packed = Pack(64 * kMiB, 2 * kMiB);
  PackedFixture fx(packed);
  ASSERT_TRUE(fx.zstd);
  const uint64_t window = fx.context.options().prefetch.initial_window;
  std::unique_ptr<Readahead> readahead = fx.context.NewReadahead(fx.zstd->Size(), false);
  const uint64_t begin = 10 * kMiB + 12345, end = begin + 5591040;
  std::string out(kMiB, '\0');
  for (uint64_t at = begin; at < end; at += kMiB) {
    const uint64_t n = std::min(kMiB, end - at);
    const ByteRange ahead = readahead->OnRead(at, n);
    EXPECT_LE(ahead.end, at + n + window);
    if (!ahead.empty()) fx.zstd->Prefetch(ahead.begin, ahead.size());
    ASSERT_TRUE(fx.zstd->ReadAt(at, {reinterpret_cast<uint8_t*>(out.data()), n}).ok());
  }
  const uint64_t tensor_frames = FramesOver(packed, begin, end).first;
  EXPECT_TRUE(fx.WaitFor([&] { return fx.context.bytes_decoded.load() > tensor_frames; }))
      << "a sequential reader gets a window ahead";
  fx.Settle();
  const auto [decoded, compressed] = FramesOver(packed, begin, end + window);
  EXPECT_LE(fx.context.bytes_decoded.load(), decoded);
  EXPECT_LE(fx.Fetched(), compressed + 2 * (kBlock - 1));
}

// Work done for a read is charged to the counters current where the read was made, the
// loads it queued on the workers included.
TEST(RemoteSourceTest, PackedReadChargesItsWorkCounters) {
  const Packed packed = Pack(16 * kMiB, 2 * kMiB);
  PackedFixture fx(packed);
  ASSERT_TRUE(fx.zstd);
  WorkCounters counters;
  {
    ScopedWorkCounters charge(&counters);
    std::string out(3 * kMiB, '\0');
    ASSERT_TRUE(fx.zstd->ReadAt(kMiB, {reinterpret_cast<uint8_t*>(out.data()), out.size()}).ok());
  }
  fx.Settle();
  EXPECT_EQ(counters.bytes_decoded.load(), fx.context.bytes_decoded.load());
  EXPECT_EQ(counters.compressed_bytes_read.load(), fx.context.compressed_bytes_read.load());
  EXPECT_EQ(counters.remote_bytes_fetched.load(), fx.Fetched());
  EXPECT_GT(counters.remote_bytes_fetched.load(), 0u);
  EXPECT_EQ(current_work_counters, nullptr);
}

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
  EXPECT_EQ(f.context.remote_bytes_fetched.load(), kBlock + 123);
}

TEST(RemoteSourceTest, OneTensorCostsAtMostItsSizePlusTwoBlocks) {
  Fixture f(40 * kBlock);
  f.context.StartWorkers();
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
  f.context.Shutdown();  // let queued prefetches finish or drop before counting
  EXPECT_LE(f.fake->bytes_served(), length + 2 * kBlock);
  for (const auto& [offset, size] : f.fake->ranges()) {
    EXPECT_GE(offset + size, begin);
    EXPECT_LE(offset, begin + length);
  }
}

// Blocks cut at a shard's tensor edges (SetBlockCuts): a tensor that starts past a header
// fetches exactly its bytes, small tensors share one block, and a remainder under
// kMinBlock joins the tensor's last block rather than make one of its own.
TEST(RemoteSourceTest, BlocksCutAtTensorEdgesFetchOneTensorExactly) {
  const uint64_t t0 = 600, t1 = t0 + 4 * kBlock, t2 = t1 + 4 * kBlock + 1000, t3 = t2 + 1000,
                 t4 = t3 + 2000, size = 20 * kBlock;
  Fixture f(size);
  f.source->SetBlockCuts({t4, size, t0, t1, t1, t2, t2, t3, t3, t4});  // any order
  f.source->BeginServing();
  EXPECT_EQ(f.Read(t0, 4 * kBlock), f.bytes.substr(t0, 4 * kBlock));
  // The header's 600 bytes are under kMinBlock: they join the tensor's first block.
  EXPECT_EQ(f.fake->bytes_served(), t0 + 4 * kBlock);
  // [t1, t2): 4 MiB + 1000 B, the 1000 B remainder in its last block.
  EXPECT_EQ(f.Read(t1, t2 - t1), f.bytes.substr(t1, t2 - t1));
  EXPECT_EQ(f.fake->bytes_served(), t2);
  // Two small tensors and the next one's first MiB: one block from t2.
  EXPECT_EQ(f.Read(t3, 10), f.bytes.substr(t3, 10));
  const std::vector<std::pair<uint64_t, uint64_t>> ranges = f.fake->ranges();
  EXPECT_NE(std::find(ranges.begin(), ranges.end(), std::make_pair(t2, kBlock)), ranges.end());
  EXPECT_EQ(f.Read(0, size), f.bytes);
}

TEST(RemoteSourceTest, PrefetchFetchesBlocksInParallel) {
  Fixture f(16 * kBlock);
  f.fake->delay_us_ = 20'000;
  f.context.StartWorkers();
  f.source->BeginServing();
  EXPECT_EQ(f.Read(0, 16 * kBlock), f.bytes);  // one big read: later blocks fetched ahead
  EXPECT_GE(f.fake->max_in_flight_.load(), 4);
  EXPECT_EQ(f.fake->bytes_served(), 16 * kBlock);
}

TEST(RemoteSourceTest, SequentialReadAtStreamsAhead) {
  Fixture f(32 * kBlock);
  f.fake->delay_us_ = 2'000;
  f.context.StartWorkers();
  f.source->BeginServing();
  for (uint64_t off = 0; off < 32 * kBlock; off += 64 << 10) {
    ASSERT_EQ(f.Read(off, 64 << 10), f.bytes.substr(off, 64 << 10));
  }
  EXPECT_GT(f.context.remote_prefetches.load(), 8u);
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
  // The window ends: the server is asked again.
  f.fake->stalling_ = false;
  ::usleep(static_cast<useconds_t>(
      RemoteSource::TimedOutWindow(std::chrono::milliseconds(1500)).count() * 1000));
  EXPECT_EQ(f.Read(2 * kBlock, 10), f.bytes.substr(2 * kBlock, 10));
  EXPECT_EQ(f.Read(kBlock, 10), f.bytes.substr(kBlock, 10));
}

// (issue 38) The fault whose own request is not the one that timed out: block 1 timed out
// (a readahead request); the fault's request, for block 4, sent after it, fails at once
// too, without asking the server, as does a ReadAt of any block; until the window ends.
TEST(RemoteSourceTest, AnObjectThatTimedOutFailsAtOnceWhateverBlockIsAsked) {
  Fixture f(6 * kBlock, 64u << 20, nullptr, std::chrono::milliseconds(1500));
  f.source->BeginServing();
  f.fake->stall_us_ = 300'000;
  f.fake->stalling_ = true;
  int64_t ms = 0;
  EXPECT_FALSE(TimedLend(*f.source, kBlock, 4096, &ms).ok());
  EXPECT_GE(ms, 290);
  f.fake->stalling_ = false;  // it would answer now, but is not asked
  for (const uint64_t offset : {4 * kBlock, uint64_t{0}, 5 * kBlock + 7}) {
    Status s = TimedLend(*f.source, offset, 4096, &ms);
    EXPECT_EQ(s.errno_value(), EIO) << offset;
    EXPECT_NE(s.message().find("no answer in time"), std::string::npos) << s.message();
    EXPECT_LT(ms, 150) << "an object that just timed out fails at once; offset " << offset;
  }
  std::string out(10, '\0');
  EXPECT_EQ(f.source->ReadAt(3 * kBlock, {reinterpret_cast<uint8_t*>(out.data()), out.size()})
                .errno_value(),
            EIO);
  EXPECT_EQ(f.fake->ranges().size(), 1u) << "the server was asked once";
  ::usleep(static_cast<useconds_t>(
      RemoteSource::TimedOutWindow(std::chrono::milliseconds(1500)).count() * 1000));
  EXPECT_EQ(f.Read(4 * kBlock, 10), f.bytes.substr(4 * kBlock, 10));
  EXPECT_EQ(f.Read(kBlock, 10), f.bytes.substr(kBlock, 10));
}

TEST(RemoteSourceTest, TimedOutWindowFollowsTheTimeoutWithinBounds) {
  using std::chrono::milliseconds;
  EXPECT_EQ(RemoteSource::TimedOutWindow(milliseconds(100)), RemoteSource::kMinTimedOutWindow);
  EXPECT_EQ(RemoteSource::TimedOutWindow(milliseconds(3000)), milliseconds(3000));
  EXPECT_EQ(RemoteSource::TimedOutWindow(milliseconds(30000)), RemoteSource::kMaxTimedOutWindow);
}

// A block fetched after all (its fetch began before the timeout) is served, not failed,
// and shows the object answers again: the block that timed out is asked for again.
TEST(RemoteSourceTest, ABlockFetchedSinceATimeoutEndsTheWindow) {
  Fixture f(4 * kBlock, 64u << 20, nullptr, std::chrono::milliseconds(5000));
  f.context.StartWorkers();
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
  f.fake->stalled_block_ = UINT64_MAX;
  EXPECT_EQ(f.Read(kBlock, 10), f.bytes.substr(kBlock, 10));
  EXPECT_EQ(f.fake->ranges().size(), 3u);
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
  EXPECT_EQ(second.context.disk_cache_bytes.load(), 4 * kBlock + 9 + 108);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ckptfs
