// Frame indexes (seek table and frame scan), ZstdSource decoding through the cache, and
// pack's output, on in-memory data.
#define ZSTD_STATIC_LINKING_ONLY
#include <gtest/gtest.h>
#include <zstd.h>

#include <random>

#include "core/codec/frame_index.h"
#include "core/codec/zstd_source.h"
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

class ZstdSourceTest : public ::testing::Test {
 protected:
  std::unique_ptr<ZstdSource> Open(const std::string& bytes, CodecContext& codec) {
    auto src = ZstdSource::Open(std::make_unique<MemorySource>("s.safetensors.zst", bytes), codec);
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
  CodecContext codec({.cache_bytes = 1 << 20});
  auto src = Open(Frames(kPlain, 64 << 10, true).bytes, codec);
  ASSERT_TRUE(src);
  EXPECT_EQ(src->Size(), kPlain.size());
  EXPECT_EQ(Read(*src, 70'000, 10), kPlain.substr(70'000, 10));
  EXPECT_EQ(codec.frames_decoded.load(), 1u);  // only frame 1
  EXPECT_EQ(Read(*src, 70'010, 100), kPlain.substr(70'010, 100));
  EXPECT_EQ(codec.frames_decoded.load(), 1u);  // a cache hit
  for (uint64_t off : {0ul, 65'535ul, 131'000ul, 299'990ul}) {
    const size_t n = std::min<size_t>(70'000, kPlain.size() - off);
    EXPECT_EQ(Read(*src, off, n), kPlain.substr(off, n)) << off;
  }
  Status past;
  Read(*src, kPlain.size() - 5, 10, &past);
  EXPECT_FALSE(past.ok());
}

TEST_F(ZstdSourceTest, CacheSmallerThanAFrameStillReads) {
  CodecContext codec({.cache_bytes = 1000});
  auto src = Open(Frames(kPlain, 64 << 10, false).bytes, codec);
  ASSERT_TRUE(src);
  EXPECT_EQ(Read(*src, 0, kPlain.size()), kPlain);
  EXPECT_LE(codec.cache().counters().charged_bytes, 64u << 10);
}

TEST_F(ZstdSourceTest, CorruptFrameIsAnErrorNamingShardAndFrame) {
  CodecContext codec({.cache_bytes = 1 << 20});
  Compressed c = Frames(kPlain, 64 << 10, true);
  c.bytes[c.frames[2].compressed_offset + c.frames[2].compressed_size / 2] ^= 0x5a;
  auto src = Open(c.bytes, codec);
  ASSERT_TRUE(src);
  Status s;
  Read(*src, c.frames[2].decoded_offset + 5, 10, &s);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find("s.safetensors.zst: frame 2 at compressed offset"), std::string::npos)
      << s.message();
  // Other frames still read.
  EXPECT_EQ(Read(*src, 0, 100), kPlain.substr(0, 100));
  size_t reported = src->VerifyAll([](const Status&) {});
  EXPECT_EQ(reported, 1u);
}

TEST_F(ZstdSourceTest, ChecksumMismatchIsCaught) {
  CodecContext codec({.cache_bytes = 1 << 20});
  Compressed c = Frames(kPlain, 64 << 10, false);
  std::vector<Frame> frames = c.frames;
  frames[0].checksum = *frames[0].checksum ^ 1;
  auto src = Open(c.bytes + BuildSeekTable(frames, true), codec);
  ASSERT_TRUE(src);
  Status s;
  Read(*src, 0, 10, &s);
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.message();
}

TEST_F(ZstdSourceTest, SeekTableSpanningTwoFramesIsRefusedOnRead) {
  CodecContext codec({.cache_bytes = 1 << 20});
  Compressed c = Frames(kPlain, 64 << 10, false);
  // Frames 0 and 1 described as one: sizes add up, but the bytes are two frames.
  std::vector<Frame> merged(c.frames.begin() + 1, c.frames.end());
  merged[0].compressed_size += c.frames[0].compressed_size;
  merged[0].decoded_size += c.frames[0].decoded_size;
  merged[0].checksum.reset();
  auto src = Open(c.bytes + BuildSeekTable(merged, false), codec);
  ASSERT_TRUE(src);
  Status s;
  Read(*src, 0, 10, &s);
  EXPECT_NE(s.message().find("not exactly one zstd frame"), std::string::npos) << s.message();
}

TEST_F(ZstdSourceTest, LargeSingleFrameIsSpilledOnceAndPrefixReadWithoutIt) {
  const std::string big = RandomBytes(kMaxCachedFrame + 4096, 3);
  CodecContext codec({.cache_bytes = 1 << 20, .spill_dir = "/tmp"});
  auto src = Open(CompressFrame(big), codec);
  ASSERT_TRUE(src);
  EXPECT_TRUE(src->decodes_whole());
  EXPECT_EQ(Read(*src, 0, 64), big.substr(0, 64));  // the prefix path, as at mount
  EXPECT_EQ(src->Fd(), -1);
  EXPECT_EQ(Read(*src, big.size() - 100, 100), big.substr(big.size() - 100));
  EXPECT_GE(src->Fd(), 0);  // spilled once, then served from the spill file
  EXPECT_EQ(Read(*src, 1'000'000, 10), big.substr(1'000'000, 10));
  EXPECT_EQ(codec.bytes_decoded.load(), big.size());
}

}  // namespace
}  // namespace ckptfs
