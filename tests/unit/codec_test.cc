// Frame indexes (seek table and frame scan), ZstdSource decoding through the cache, and
// pack's output, on in-memory data.
#define ZSTD_STATIC_LINKING_ONLY
#include <gtest/gtest.h>
#include <zstd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <thread>

#include "core/codec/frame_index.h"
#include "core/codec/zstd_source.h"
#include "core/encoding/safetensors.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  // Half random, half runs: compressible but not trivially.
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>(i % 512 < 256 ? rng() : i / 512);
  return out;
}

std::string CompressFrame(std::string_view plain, bool content_size = true) {
  std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_contentSizeFlag, content_size ? 1 : 0);
  std::string out(ZSTD_compressBound(plain.size()), '\0');
  size_t n;
  if (content_size) {
    n = ZSTD_compress2(cctx.get(), out.data(), out.size(), plain.data(), plain.size());
  } else {
    // Streaming with no pledged size: the header cannot carry the content size.
    ZSTD_inBuffer in{plain.data(), plain.size(), 0};
    ZSTD_outBuffer o{out.data(), out.size(), 0};
    n = ZSTD_compressStream2(cctx.get(), &o, &in, ZSTD_e_end);
    EXPECT_EQ(n, 0u);
    n = o.pos;
  }
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

struct Compressed {
  std::string bytes;
  std::vector<Frame> frames;
};

// `plain` cut into frames of `frame_size`, optionally followed by a seek table.
Compressed Frames(const std::string& plain, size_t frame_size, bool seek_table,
                  bool checksums = true) {
  Compressed c;
  for (size_t off = 0; off < plain.size(); off += frame_size) {
    std::string_view chunk = std::string_view(plain).substr(off, frame_size);
    std::string frame = CompressFrame(chunk);
    Frame f;
    f.compressed_offset = c.bytes.size();
    f.compressed_size = frame.size();
    f.decoded_offset = off;
    f.decoded_size = chunk.size();
    f.checksum = SeekableChecksum({reinterpret_cast<const uint8_t*>(chunk.data()), chunk.size()});
    c.frames.push_back(f);
    c.bytes += frame;
  }
  if (seek_table) c.bytes += BuildSeekTable(c.frames, checksums);
  return c;
}

Result<FrameIndex> Index(const std::string& bytes) {
  MemorySource src("x.zst", bytes);
  return ReadFrameIndex(src);
}

const std::string kPlain = RandomBytes(300'000, 7);

TEST(FrameIndex, SeekTableAndScanAgree) {
  auto seekable = Index(Frames(kPlain, 64 << 10, true).bytes);
  auto scanned = Index(Frames(kPlain, 64 << 10, false).bytes);
  ASSERT_TRUE(seekable.ok()) << seekable.status().message();
  ASSERT_TRUE(scanned.ok()) << scanned.status().message();
  EXPECT_TRUE(seekable->seekable);
  EXPECT_FALSE(scanned->seekable);
  ASSERT_EQ(seekable->frames.size(), 5u);
  ASSERT_EQ(scanned->frames.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(seekable->frames[i].compressed_offset, scanned->frames[i].compressed_offset);
    EXPECT_EQ(seekable->frames[i].decoded_size, scanned->frames[i].decoded_size);
  }
  EXPECT_EQ(seekable->decoded_size, kPlain.size());
  EXPECT_EQ(scanned->FrameAt(0), 0u);
  EXPECT_EQ(scanned->FrameAt((64 << 10) - 1), 0u);
  EXPECT_EQ(scanned->FrameAt(64 << 10), 1u);
  EXPECT_EQ(scanned->FrameAt(kPlain.size() - 1), 4u);
}

TEST(FrameIndex, UnknownContentSizeIsCountedOnce) {
  std::string bytes = CompressFrame(std::string_view(kPlain).substr(0, 1000), false) +
                      CompressFrame(std::string_view(kPlain).substr(1000));
  auto index = Index(bytes);
  ASSERT_TRUE(index.ok()) << index.status().message();
  ASSERT_EQ(index->frames.size(), 2u);
  EXPECT_EQ(index->frames[0].decoded_size, 1000u);
  EXPECT_EQ(index->decoded_size, kPlain.size());
}

TEST(FrameIndex, SkippableFramesAreSkipped) {
  const std::string skippable = std::string("\x50\x2a\x4d\x18\x03\x00\x00\x00", 8) + "abc";
  auto index = Index(skippable + CompressFrame(kPlain));
  ASSERT_TRUE(index.ok()) << index.status().message();
  EXPECT_EQ(index->frames.size(), 1u);
  EXPECT_EQ(index->frames[0].compressed_offset, 11u);
}

TEST(FrameIndex, RefusesDamage) {
  Compressed c = Frames(kPlain, 64 << 10, true);
  // Truncated mid-frame, seek table gone: the scan finds the cut frame.
  auto cut = Index(c.bytes.substr(0, c.frames[2].compressed_offset + 10));
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("x.zst: at compressed offset"), std::string::npos)
      << cut.status().message();
  // A seek table whose sizes do not add up to the file.
  std::vector<Frame> lying = c.frames;
  lying[1].compressed_size += 5;
  std::string bytes =
      c.bytes.substr(0, c.frames.back().compressed_offset + c.frames.back().compressed_size);
  auto lie = Index(bytes + BuildSeekTable(lying, true));
  ASSERT_FALSE(lie.ok());
  EXPECT_NE(lie.status().message().find("seek table frames cover"), std::string::npos);
  // Not zstd at all.
  EXPECT_FALSE(Index("definitely not zstd").ok());
  EXPECT_FALSE(Index("").ok());
}

// A zstd bomb: one frame of `blocks` RLE blocks of 128 KiB of zeros, 4 bytes each, whose
// header declares `content_size` (or none). 2M blocks: 8 MiB that decode to 256 GiB.
std::string RleFrame(uint64_t blocks, std::optional<uint64_t> content_size) {
  std::string out = {'\x28', '\xb5', '\x2f', '\xfd'};
  out += content_size ? '\xc0' : '\x00';     // 8-byte content size, or none; a window byte
  out += static_cast<char>((17 - 10) << 3);  // 128 KiB window
  for (int i = 0; content_size && i < 8; ++i) out += static_cast<char>(*content_size >> (8 * i));
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint32_t header = (ZSTD_BLOCKSIZE_MAX << 3) | (1 << 1) | (b + 1 == blocks ? 1 : 0);
    out += {static_cast<char>(header), static_cast<char>(header >> 8),
            static_cast<char>(header >> 16), '\0'};
  }
  return out;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Learning the size of a frame that does not state it is decoding it: an 8 MiB bomb is
// refused after StreamDecodeLimit (1 GiB here), in well under the 16 s its 256 GiB took,
// naming the file.
TEST(FrameIndex, BombWithoutContentSizeIsRefusedQuickly) {
  const std::string bomb = RleFrame(2 << 20, std::nullopt);
  const auto start = std::chrono::steady_clock::now();
  auto index = Index(bomb);
  const double took = SecondsSince(start);
  ASSERT_FALSE(index.ok()) << "a 256 GiB frame was indexed";
  EXPECT_NE(index.status().message().find("x.zst: at compressed offset 0: frames without a "
                                          "content size decode to more than " +
                                          std::to_string(StreamDecodeLimit(bomb.size()))),
            std::string::npos)
      << index.status().message();
  EXPECT_LT(took, 2.0);
  EXPECT_EQ(StreamDecodeLimit(bomb.size()), bomb.size() * kMaxStreamDecodeRatio);
}

// Below the bound nothing changes: a tiny file of zeros without content size decodes
// within kMinStreamDecodeLimit (here 64 MiB from 2 KiB), and frames of real data far
// below the ratio (UnknownContentSizeIsCountedOnce).
TEST(FrameIndex, CompressibleFramesWithinTheBoundAreCounted) {
  const std::string zeros = RleFrame(512, std::nullopt);
  auto index = Index(zeros + zeros);
  ASSERT_TRUE(index.ok()) << index.status().message();
  EXPECT_EQ(index->decoded_size, 2 * 512 * uint64_t{ZSTD_BLOCKSIZE_MAX});
  EXPECT_EQ(StreamDecodeLimit(zeros.size()), kMinStreamDecodeLimit);
  // The budget is the file's, not each frame's: 3 frames of 128 MiB from 12 KiB pass
  // 256 MiB together.
  const std::string big = RleFrame(1024, std::nullopt);
  auto over = Index(big + big + big);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("zstd bomb"), std::string::npos)
      << over.status().message();
}

class ZstdSourceTest : public ::testing::Test {
 protected:
  std::unique_ptr<ZstdSource> Open(const std::string& bytes, ReadContext& context) {
    auto src = ZstdSource::Open(std::make_unique<MemorySource>("s.safetensors.zst", bytes), context,
                                8 + kMaxSafetensorsHeader);
    EXPECT_TRUE(src.ok()) << src.status().message();
    return src.ok() ? std::move(src).value() : nullptr;
  }
  std::string Read(const ZstdSource& src, uint64_t offset, size_t n, Status* status = nullptr) {
    std::string out(n, '\0');
    Status s = src.ReadAt(offset, {reinterpret_cast<uint8_t*>(out.data()), n});
    if (status)
      *status = s;
    else
      EXPECT_TRUE(s.ok()) << s.message();
    return out;
  }
};

TEST_F(ZstdSourceTest, ReadsAnyWindowAndDecodesOnlyTouchedFrames) {
  ReadContext context({.cache_bytes = 1 << 20});
  auto src = Open(Frames(kPlain, 64 << 10, true).bytes, context);
  ASSERT_TRUE(src);
  EXPECT_EQ(src->Size(), kPlain.size());
  EXPECT_EQ(Read(*src, 70'000, 10), kPlain.substr(70'000, 10));
  EXPECT_EQ(context.frames_decoded.load(), 1u);  // only frame 1
  EXPECT_EQ(Read(*src, 70'010, 100), kPlain.substr(70'010, 100));
  EXPECT_EQ(context.frames_decoded.load(), 1u);  // a cache hit
  for (uint64_t off : {0ul, 65'535ul, 131'000ul, 299'990ul}) {
    const size_t n = std::min<size_t>(70'000, kPlain.size() - off);
    EXPECT_EQ(Read(*src, off, n), kPlain.substr(off, n)) << off;
  }
  Status past;
  Read(*src, kPlain.size() - 5, 10, &past);
  EXPECT_FALSE(past.ok());
}

TEST_F(ZstdSourceTest, CacheSmallerThanAFrameStillReads) {
  ReadContext context({.cache_bytes = 1000});
  auto src = Open(Frames(kPlain, 64 << 10, false).bytes, context);
  ASSERT_TRUE(src);
  EXPECT_EQ(Read(*src, 0, kPlain.size()), kPlain);
  EXPECT_LE(context.cache().counters().charged_bytes, 64u << 10);
}

TEST_F(ZstdSourceTest, CorruptFrameIsAnErrorNamingShardAndFrame) {
  ReadContext context({.cache_bytes = 1 << 20});
  Compressed c = Frames(kPlain, 64 << 10, true);
  c.bytes[c.frames[2].compressed_offset + c.frames[2].compressed_size / 2] ^= 0x5a;
  auto src = Open(c.bytes, context);
  ASSERT_TRUE(src);
  Status s;
  Read(*src, c.frames[2].decoded_offset + 5, 10, &s);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find("s.safetensors.zst: frame 2 at compressed offset"), std::string::npos)
      << s.message();
  // Other frames still read.
  EXPECT_EQ(Read(*src, 0, 100), kPlain.substr(0, 100));
  size_t reported = src->VerifyAll([](const Status&, size_t) {});
  EXPECT_EQ(reported, 1u);
}

TEST_F(ZstdSourceTest, ChecksumMismatchIsCaught) {
  ReadContext context({.cache_bytes = 1 << 20});
  Compressed c = Frames(kPlain, 64 << 10, false);
  std::vector<Frame> frames = c.frames;
  frames[0].checksum = *frames[0].checksum ^ 1;
  auto src = Open(c.bytes + BuildSeekTable(frames, true), context);
  ASSERT_TRUE(src);
  Status s;
  Read(*src, 0, 10, &s);
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.message();
}

TEST_F(ZstdSourceTest, SeekTableSpanningTwoFramesIsRefusedOnRead) {
  ReadContext context({.cache_bytes = 1 << 20});
  Compressed c = Frames(kPlain, 64 << 10, false);
  // Frames 0 and 1 described as one: sizes add up, but the bytes are two frames.
  std::vector<Frame> merged(c.frames.begin() + 1, c.frames.end());
  merged[0].compressed_size += c.frames[0].compressed_size;
  merged[0].decoded_size += c.frames[0].decoded_size;
  merged[0].checksum.reset();
  auto src = Open(c.bytes + BuildSeekTable(merged, false), context);
  ASSERT_TRUE(src);
  Status s;
  Read(*src, 0, 10, &s);
  EXPECT_NE(s.message().find("not exactly one zstd frame"), std::string::npos) << s.message();
}

TEST_F(ZstdSourceTest, LargeSingleFrameIsSpilledOnceAndPrefixReadWithoutIt) {
  const std::string big = RandomBytes(kMaxCachedFrame + 4096, 3);
  ReadContext context({.cache_bytes = 1 << 20, .spill_dir = "/tmp"});
  auto src = Open(CompressFrame(big), context);
  ASSERT_TRUE(src);
  EXPECT_TRUE(src->decodes_whole());
  EXPECT_EQ(Read(*src, 0, 64), big.substr(0, 64));  // the prefix path, as at mount
  EXPECT_EQ(src->Fd(), -1);
  EXPECT_EQ(Read(*src, big.size() - 100, 100), big.substr(big.size() - 100));
  EXPECT_GE(src->Fd(), 0);  // spilled once, then served from the spill file
  EXPECT_EQ(Read(*src, 1'000'000, 10), big.substr(1'000'000, 10));
  EXPECT_EQ(context.bytes_decoded.load(), big.size());
}

// A single frame that declares 256 GiB in 8 MiB is indexed without decoding (its size is
// stated, block headers are walked through one buffer), its prefix reads as at mount, but
// decoding it whole (what reading its end, a zip directory, takes) is refused at once
// rather than writing 256 GiB to the spill directory.
TEST_F(ZstdSourceTest, DecodingABombWholeIsRefused) {
  const uint64_t blocks = 2 << 20;
  const std::string bomb = RleFrame(blocks, blocks * ZSTD_BLOCKSIZE_MAX);
  ReadContext context({.cache_bytes = 1 << 20, .spill_dir = "/tmp"});
  const auto start = std::chrono::steady_clock::now();
  auto src = Open(bomb, context);
  ASSERT_TRUE(src);
  EXPECT_TRUE(src->decodes_whole());
  EXPECT_EQ(Read(*src, 0, 8), std::string(8, '\0'));
  Status s;
  Read(*src, src->Size() - 22, 22, &s);
  EXPECT_LT(SecondsSince(start), 2.0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("s.safetensors.zst: decoding this shard whole would give " +
                             std::to_string(src->Size()) + " bytes"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(src->Fd(), -1);
}

// A shard that can be "rewritten in place" under a mounted source: after `changed` is set
// (or once `change_after_reads` reads went by, a rewrite during a frame's read), reads
// return other bytes of the same size and CheckUnchanged fails, as LocalFileSource's
// fstat check would.
class ChangingSource final : public ByteSource {
 public:
  ChangingSource(std::string old_bytes, std::string new_bytes)
      : old_(std::move(old_bytes)), new_(std::move(new_bytes)) {}
  uint64_t Size() const override { return old_.size(); }
  Status Read(uint64_t offset, uint64_t length, ReadSink& sink) const override {
    CKPTFS_RETURN_IF_ERROR(CheckRange(offset, length));
    const std::span<uint8_t> out = sink.Fill();
    if (reads.fetch_add(1) + 1 == change_after_reads) changed = true;
    std::memcpy(out.data(), (changed ? new_ : old_).data() + offset, out.size());
    return Status::Ok();
  }
  const std::string& Name() const override { return name_; }
  Status CheckUnchanged() const override {
    return changed ? Status::IoError(name_ + ": file modified since mount") : Status::Ok();
  }
  mutable std::atomic<bool> changed{false};
  mutable std::atomic<int64_t> reads{0};
  int64_t change_after_reads = -1;

 private:
  std::string name_ = "c.safetensors.zst";
  std::string old_, new_;
};

// The same shard content with its second half different, compressed the same way; padded
// to the same size, as an in-place rewrite of a same-size file would be.
std::pair<std::string, std::string> TwoVersions(const std::string& plain, size_t frame_size,
                                                bool seek_table, bool checksums) {
  std::string other = plain;
  for (size_t i = other.size() / 2; i < other.size(); ++i) other[i] = static_cast<char>(~other[i]);
  std::string a = Frames(plain, frame_size, seek_table, checksums).bytes;
  std::string b = Frames(other, frame_size, seek_table, checksums).bytes;
  b.resize(a.size(), '\0');
  return {a, b};
}

TEST_F(ZstdSourceTest, ShardChangedAfterMountGivesErrorsNotBytes) {
  for (bool seek_table : {false, true}) {
    SCOPED_TRACE(seek_table ? "seekable without checksums" : "multi-frame");
    ReadContext context({.cache_bytes = 8 << 20});
    auto [a, b] = TwoVersions(kPlain, 64 << 10, seek_table, false);
    auto changing = std::make_unique<ChangingSource>(a, b);
    ChangingSource* shard = changing.get();
    auto opened = ZstdSource::Open(std::move(changing), context);
    ASSERT_TRUE(opened.ok()) << opened.status().message();
    auto& src = **opened;
    EXPECT_EQ(Read(src, 0, 100), kPlain.substr(0, 100));
    shard->changed = true;
    Status s;
    Read(src, kPlain.size() - 100, 100, &s);
    EXPECT_EQ(s.code(), Status::Code::kIoError) << s.message();
    EXPECT_EQ(s.errno_value(), EIO);
    EXPECT_NE(s.message().find("modified since mount"), std::string::npos) << s.message();
    // Nothing of the new file was cached: the same read fails again.
    Read(src, kPlain.size() - 100, 100, &s);
    EXPECT_FALSE(s.ok());
    std::vector<LentBytes> lent;
    EXPECT_FALSE(testing::Lend(src, kPlain.size() - 100, 100, &lent).ok());
    // Frame 0, cached before the change, is not served either.
    Read(src, 0, 100, &s);
    EXPECT_EQ(s.code(), Status::Code::kIoError) << s.message();
  }
}

TEST_F(ZstdSourceTest, ShardChangedDuringAFramesReadIsCaught) {
  // 600 KiB frames compress to more than one of DecodeFrame's 256 KiB reads: the rewrite
  // lands between the first and second read of frame 0, and the frame mixes versions.
  const std::string plain = RandomBytes(1200 << 10, 11);
  ReadContext context({.cache_bytes = 16 << 20});
  auto [a, b] = TwoVersions(plain, 600 << 10, false, false);
  auto changing = std::make_unique<ChangingSource>(a, b);
  ChangingSource* shard = changing.get();
  auto opened = ZstdSource::Open(std::move(changing), context);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  shard->change_after_reads = shard->reads.load() + 2;
  Status s;
  Read(**opened, 0, plain.size(), &s);
  EXPECT_EQ(s.code(), Status::Code::kIoError) << s.message();
  EXPECT_EQ(context.cache().counters().entries, 0u);
}

TEST_F(ZstdSourceTest, SpilledShardChangedAfterMountGivesErrors) {
  const std::string big = RandomBytes(2 << 20, 5);
  ReadContext context({.cache_bytes = 1 << 20, .spill_dir = "/tmp"});
  std::string other = big;
  other.back() = static_cast<char>(~other.back());
  std::string a = CompressFrame(big), b = CompressFrame(other);
  b.resize(a.size(), '\0');
  auto changing = std::make_unique<ChangingSource>(a, b);
  ChangingSource* shard = changing.get();
  auto opened = ZstdSource::Open(std::move(changing), context);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  auto& src = **opened;
  ASSERT_TRUE(src.decodes_whole());
  EXPECT_EQ(Read(src, 1 << 20, 100), big.substr(1 << 20, 100));
  EXPECT_GE(src.Fd(), 0);
  shard->changed = true;
  Status s;
  Read(src, 1 << 20, 100, &s);  // served from the spill file: still checked
  EXPECT_EQ(s.code(), Status::Code::kIoError) << s.message();
  EXPECT_FALSE(src.CheckUnchanged().ok());  // what the splice path asks first
}

TEST_F(ZstdSourceTest, FramesLargerThanAQuarterOfTheCacheAreSpilled) {
  // 4 MiB frames under a 1 MiB cache (pack's frames under --cache-size 1M): nothing of
  // them is charged to the cache, and readers in parallel stay within it.
  const std::string plain = RandomBytes(16 << 20, 9);
  Compressed c = Frames(plain, 4 << 20, true);
  ReadContext context({.cache_bytes = 1 << 20, .spill_dir = "/tmp"});
  auto src = Open(c.bytes, context);
  ASSERT_TRUE(src);
  EXPECT_TRUE(src->decodes_whole());
  std::vector<std::thread> readers;
  std::atomic<int> bad{0};
  for (int t = 0; t < 8; ++t) {
    readers.emplace_back([&, t] {
      const uint64_t off = (static_cast<uint64_t>(t) * 2'000'003) % (plain.size() - 70'000);
      std::string out(70'000, '\0');
      Status s = src->ReadAt(off, {reinterpret_cast<uint8_t*>(out.data()), out.size()});
      if (!s.ok() || out != plain.substr(off, out.size())) bad.fetch_add(1);
    });
  }
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(context.cache().counters().peak_charged_bytes, 0u);
  EXPECT_EQ(context.bytes_decoded.load(), plain.size());  // decoded once, to the spill file
}

TEST_F(ZstdSourceTest, SpillDecodeChecksSeekTableChecksums) {
  const std::string plain = RandomBytes(2 << 20, 13);
  Compressed c = Frames(plain, 1 << 20, false);
  std::vector<Frame> frames = c.frames;
  frames[1].checksum = *frames[1].checksum ^ 1;
  ReadContext context({.cache_bytes = 1 << 20, .spill_dir = "/tmp"});
  auto src = Open(c.bytes + BuildSeekTable(frames, true), context);
  ASSERT_TRUE(src);
  ASSERT_TRUE(src->decodes_whole());
  Status s;
  Read(*src, 1 << 20, 10, &s);
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.message();
}

TEST_F(ZstdSourceTest, ManyReadersOfCachedFramesStayWithinTheCache) {
  // 256 KiB frames (a quarter of the cache: cached) read by 16 threads at once.
  const std::string plain = RandomBytes(8 << 20, 21);
  ReadContext context({.cache_bytes = 1 << 20});
  auto src = Open(Frames(plain, 256 << 10, true).bytes, context);
  ASSERT_TRUE(src);
  ASSERT_FALSE(src->decodes_whole());
  std::vector<std::thread> readers;
  std::atomic<int> bad{0};
  for (int t = 0; t < 16; ++t) {
    readers.emplace_back([&, t] {
      for (uint64_t off = static_cast<uint64_t>(t) * 300'000; off + 100'000 < plain.size();
           off += 1'700'000) {
        std::string out(100'000, '\0');
        Status s = src->ReadAt(off, {reinterpret_cast<uint8_t*>(out.data()), out.size()});
        if (!s.ok() || out != plain.substr(off, out.size())) bad.fetch_add(1);
      }
    });
  }
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0);
  const BlockCache::Counters counters = context.cache().counters();
  EXPECT_LE(counters.peak_charged_bytes, 1u << 20);
  EXPECT_EQ(counters.overdrafts, 0u);
}

}  // namespace
}  // namespace ckptfs
