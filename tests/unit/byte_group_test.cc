#include "core/codec/byte_group.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zstd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "core/codec/frame_index.h"
#include "core/codec/zstd_source.h"
#include "core/format/formats.h"
#include "core/pack/pack.h"
#include "core/volume/volume.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

using testing::MakeSafetensors;
using testing::MemoryDir;
using testing::TensorBytes;
using testing::TestTensor;

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

TEST(ByteGroupTest, GroupsByBytePositionAndUndoesIt) {
  for (uint8_t e : {uint8_t{2}, uint8_t{4}, uint8_t{8}}) {
    // Counts around the 16-element vector step, and a region that does not start the frame.
    for (size_t n : {2u, 15u, 16u, 17u, 33u, 1000u}) {
      const std::vector<uint8_t> original = RandomBytes(n * e + 7, static_cast<uint32_t>(n + e));
      std::vector<uint8_t> frame = original, scratch;
      const GroupRegion region{3, static_cast<uint32_t>(n * e), e};
      GroupFrame(frame, {&region, 1}, scratch);
      for (size_t k = 0; k < n; ++k) {
        for (size_t b = 0; b < e; ++b) {
          ASSERT_EQ(frame[3 + b * n + k], original[3 + k * e + b]) << int(e) << " " << n;
        }
      }
      EXPECT_EQ(std::vector<uint8_t>(frame.begin(), frame.begin() + 3),
                std::vector<uint8_t>(original.begin(), original.begin() + 3));
      EXPECT_EQ(std::vector<uint8_t>(frame.end() - 4, frame.end()),
                std::vector<uint8_t>(original.end() - 4, original.end()));
      UngroupFrame(frame, {&region, 1}, scratch);
      EXPECT_EQ(frame, original) << int(e) << " " << n;
    }
  }
}

TEST(ByteGroupTest, RegionsKeepWholeElementsOfTheirRun) {
  // F32 run at 10 (20 elements), BF16 run at 90 (5 elements), one-byte run at 100.
  const std::vector<ElementRun> runs = {{10, 80, 4}, {90, 10, 2}, {100, 50, 1}};
  // A frame [0, 64): the F32 run from 10, cut at 64 inside the element at 62.
  EXPECT_EQ(RegionsInFrame(runs, 0, 64), (std::vector<GroupRegion>{{10, 52, 4}}));
  // The next frame [64, 128): the element cut at 64 (62..66) stays as it is.
  EXPECT_EQ(RegionsInFrame(runs, 64, 128),
            (std::vector<GroupRegion>{{66 - 64, 24, 4}, {90 - 64, 10, 2}}));
  // A frame holding a single whole element of a run does not group it.
  EXPECT_TRUE(RegionsInFrame(runs, 85, 93).empty());
  EXPECT_EQ(RegionsInFrame(runs, 85, 95), (std::vector<GroupRegion>{{90 - 85, 4, 2}}));
}

// A seekable shard built by hand: `frames` compressed as they are (grouped bytes, if the
// test wants them), checksums of `originals`, then `record` (raw skippable frame) and the
// table.
std::string BuildShard(const std::vector<std::vector<uint8_t>>& frames,
                       const std::vector<std::vector<uint8_t>>& originals,
                       const std::string& record, bool with_checksums = true) {
  std::string out;
  std::vector<Frame> table;
  for (size_t i = 0; i < frames.size(); ++i) {
    std::string c(ZSTD_compressBound(frames[i].size()), '\0');
    c.resize(ZSTD_compress(c.data(), c.size(), frames[i].data(), frames[i].size(), 3));
    Frame f;
    f.compressed_size = c.size();
    f.decoded_size = frames[i].size();
    f.checksum = SeekableChecksum(originals[i]);
    table.push_back(f);
    out += c;
  }
  if (!record.empty()) {
    Frame f;
    f.compressed_size = record.size();
    f.checksum = SeekableChecksum({});
    table.push_back(f);
    out += record;
  }
  return out + BuildSeekTable(table, with_checksums);
}

Result<std::unique_ptr<ZstdSource>> OpenShard(const std::string& bytes) {
  return ZstdSource::Open(std::make_unique<MemorySource>("s.safetensors.zst", bytes),
                          testing::TestContext());
}

std::string Le32(uint32_t v) {
  std::string out;
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  return out;
}

std::string RawRecord(const std::string& payload) {
  return Le32(kByteGroupMagic) + Le32(static_cast<uint32_t>(payload.size())) + payload;
}

std::string Region(uint32_t offset, uint32_t length, uint8_t e) {
  return Le32(offset) + Le32(length) + std::string(1, static_cast<char>(e));
}

class HostileRecordTest : public ::testing::Test {
 protected:
  // Two frames of 4096 bytes; frame 1 grouped as BF16 over [96, 4096).
  void SetUp() override {
    originals_ = {RandomBytes(4096, 1), RandomBytes(4096, 2)};
    grouped_ = originals_;
    std::vector<uint8_t> scratch;
    const GroupRegion r{96, 4000, 2};
    GroupFrame(grouped_[1], {&r, 1}, scratch);
  }
  // Opens the shard with `payload` as its record; returns the open's message ("" if ok).
  std::string OpenWith(const std::string& payload) {
    auto src = OpenShard(BuildShard(grouped_, originals_, RawRecord(payload)));
    return src.ok() ? "" : src.status().message();
  }
  std::vector<std::vector<uint8_t>> originals_, grouped_;
};

TEST_F(HostileRecordTest, TheSoundRecordReadsTheOriginalBytes) {
  auto src =
      OpenShard(BuildShard(grouped_, originals_,
                           RawRecord(Le32(1) + Le32(1) + Le32(1) + Le32(1) + Region(96, 4000, 2))));
  ASSERT_TRUE(src.ok()) << src.status().message();
  EXPECT_EQ((*src)->Size(), 8192u);
  EXPECT_EQ((*src)->index().frames.size(), 2u);
  std::vector<uint8_t> out(8192);
  ASSERT_TRUE((*src)->ReadAt(0, out).ok());
  EXPECT_TRUE(std::equal(originals_[0].begin(), originals_[0].end(), out.begin()));
  EXPECT_TRUE(std::equal(originals_[1].begin(), originals_[1].end(), out.begin() + 4096));
  EXPECT_EQ((*src)->VerifyAll([](const Status&, size_t) {}), 0u);
}

TEST_F(HostileRecordTest, RefusesEachBrokenRecordNamingShardAndFrame) {
  const std::string head = Le32(1) + Le32(1);  // version 1, one grouped frame
  struct Case {
    std::string payload, expect;
  } cases[] = {
      {head + Le32(2) + Le32(1) + Region(0, 16, 2), "frame 2: no such frame"},
      {head + Le32(1) + Le32(1) + Region(96, 4002, 2), "frame 1: region 0"},
      {head + Le32(1) + Le32(1) + Region(4000, 200, 2), "ends past the frame's 4096 bytes"},
      {head + Le32(1) + Le32(2) + Region(96, 100, 2) + Region(190, 100, 2),
       "overlaps the region before"},
      {head + Le32(1) + Le32(1) + Region(96, 300, 3), "element size is not 2, 4 or 8"},
      {head + Le32(1) + Le32(1) + Region(96, 300, 16), "element size is not 2, 4 or 8"},
      {head + Le32(1) + Le32(1) + Region(96, 302, 4), "not a positive multiple"},
      {head + Le32(1) + Le32(1) + Region(96, 0, 4), "not a positive multiple"},
      {Le32(1) + Le32(2) + Le32(1) + Le32(1) + Region(96, 8, 2) + Le32(1) + Le32(1) +
           Region(96, 8, 2),
       "listed twice or out of order"},
      {head + Le32(1) + Le32(1) + Region(96, 4000, 2) + "x", "1 bytes after the last frame"},
      {head + Le32(1) + Le32(2) + Region(96, 4000, 2), "more than the record holds"},
      {Le32(2) + Le32(1), "unknown version 2"},
      {Le32(1), "truncated"},
      {Le32(1) + Le32(3) + Le32(0) + Le32(1) + Region(0, 2, 2), "lists 3 grouped frames"},
  };
  for (const Case& c : cases) {
    const std::string message = OpenWith(c.payload);
    EXPECT_NE(message.find("s.safetensors.zst: byte-group record: "), std::string::npos) << message;
    EXPECT_NE(message.find(c.expect), std::string::npos) << message << " | wanted " << c.expect;
  }
}

TEST_F(HostileRecordTest, ARecordThatLiesFailsTheChecksumOnRead) {
  // Frame 0 was never grouped, and frame 1 was grouped as BF16, not F32: both records parse,
  // and each such frame reads as EIO, never as other bytes.
  for (const std::string& payload : {Le32(1) + Le32(2) + Le32(0) + Le32(1) + Region(0, 4096, 2) +
                                         Le32(1) + Le32(1) + Region(96, 4000, 2),
                                     Le32(1) + Le32(1) + Le32(1) + Le32(1) + Region(96, 4000, 4)}) {
    auto src = OpenShard(BuildShard(grouped_, originals_, RawRecord(payload)));
    ASSERT_TRUE(src.ok()) << src.status().message();
    std::vector<uint8_t> out(8192);
    Status s = (*src)->ReadAt(0, out);
    EXPECT_EQ(s.code(), Status::Code::kCorruption);
    EXPECT_NE(s.message().find("checksum mismatch after un-grouping"), std::string::npos)
        << s.message();
    EXPECT_EQ((*src)->VerifyAll([](const Status&, size_t) {}), 1u);
  }
  // A record in a shard without a seek table cannot be matched to its frames.
  std::string c(ZSTD_compressBound(4096), '\0');
  c.resize(ZSTD_compress(c.data(), c.size(), grouped_[1].data(), 4096, 3));
  auto bare = OpenShard(c + RawRecord(Le32(1) + Le32(1) + Le32(0) + Le32(1) + Region(96, 8, 2)));
  ASSERT_FALSE(bare.ok());
  EXPECT_NE(bare.status().message().find("byte-group record in a shard without a seek table"),
            std::string::npos)
      << bare.status().message();
  // The record's own header must match its seek table entry.
  std::string record = RawRecord(Le32(1) + Le32(1) + Le32(1) + Le32(1) + Region(96, 4000, 2));
  record[4] = static_cast<char>(record[4] + 1);
  auto mismatched = OpenShard(BuildShard(grouped_, originals_, record));
  ASSERT_FALSE(mismatched.ok());
  EXPECT_NE(mismatched.status().message().find("does not match its seek table entry"),
            std::string::npos)
      << mismatched.status().message();
}

TEST_F(HostileRecordTest, RefusesAGroupedFrameWithoutAChecksum) {
  // Without checksums a record that lies (BF16 recorded where F32 was grouped) could not be
  // caught on read: the open refuses it, naming the shard and the frame.
  for (const uint8_t element : {uint8_t{2}, uint8_t{4}}) {
    auto src = OpenShard(
        BuildShard(grouped_, originals_,
                   RawRecord(Le32(1) + Le32(1) + Le32(1) + Le32(1) + Region(96, 4000, element)),
                   /*with_checksums=*/false));
    ASSERT_FALSE(src.ok());
    EXPECT_EQ(src.status().code(), Status::Code::kCorruption);
    EXPECT_NE(src.status().message().find("s.safetensors.zst: byte-group record: frame 1: "
                                          "grouped, but the seek table has no checksums"),
              std::string::npos)
        << src.status().message();
  }
  // The same shard without a record, and so nothing grouped, needs no checksums.
  auto plain = OpenShard(BuildShard(originals_, originals_, "", /*with_checksums=*/false));
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  std::vector<uint8_t> out(8192);
  ASSERT_TRUE((*plain)->ReadAt(0, out).ok());
  EXPECT_TRUE(std::equal(originals_[1].begin(), originals_[1].end(), out.begin() + 4096));
}

TEST_F(HostileRecordTest, RefusesAGroupedFrameTheStreamPathWouldDecode) {
  auto src = ZstdSource::Open(
      std::make_unique<MemorySource>(
          "s.safetensors.zst",
          BuildShard(grouped_, originals_,
                     RawRecord(Le32(1) + Le32(1) + Le32(1) + Le32(1) + Region(96, 4000, 2)))),
      *std::make_shared<ReadContext>(ReadOptions{.cache_bytes = 8192}));
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("frame 1 is byte-grouped"), std::string::npos)
      << src.status().message();
}

// Every dtype of more than one byte, with one-byte ones between them.
const std::vector<TestTensor> kAllDtypes = {
    {"bf16", Dtype::kBF16, {301}}, {"f16", Dtype::kF16, {257}},  {"f32", Dtype::kF32, {99, 3}},
    {"f64", Dtype::kF64, {130}},   {"i16", Dtype::kI16, {77}},   {"u16", Dtype::kU16, {65}},
    {"i32", Dtype::kI32, {501}},   {"u32", Dtype::kU32, {33}},   {"i64", Dtype::kI64, {129}},
    {"u64", Dtype::kU64, {17}},    {"u8", Dtype::kU8, {13}},     {"i8", Dtype::kI8, {9}},
    {"bool", Dtype::kBool, {5}},   {"f8", Dtype::kF8E4M3, {11}},
};

class BytePackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dest_ = std::filesystem::temp_directory_path() /
            ("ckptfs-bytegroup-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dest_);
    original_ = MakeSafetensors(kAllDtypes);
    auto ckpt =
        OpenCheckpointIn(MemoryDir({{"model.safetensors", original_}}), testing::TestContext());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    source_ = Volume::FromCheckpoint(std::move(ckpt).value(), testing::TestContextPtr());
  }
  void TearDown() override { std::filesystem::remove_all(dest_); }

  // Packs with `options` and checks that the mount-side decode gives back every byte.
  void PackAndCompare(PackOptions options, size_t min_grouped_frames) {
    options.byte_group = true;
    ASSERT_TRUE(PackCheckpoint(source_->checkpoint(), dest_, options).ok());
    ReadContext context({.cache_bytes = 1 << 20});
    auto packed = OpenCheckpoint(dest_, context);
    ASSERT_TRUE(packed.ok()) << packed.status().message();
    const auto& zstd = dynamic_cast<const ZstdSource&>(*packed->shards[0].source);
    size_t grouped = 0;
    for (const Frame& f : zstd.index().frames) grouped += f.region_count > 0;
    EXPECT_GE(grouped, min_grouped_frames);
    std::string whole(zstd.Size(), '\0');
    ASSERT_TRUE(zstd.ReadAt(0, {reinterpret_cast<uint8_t*>(whole.data()), whole.size()}).ok());
    if (!options.shard_size) {
      EXPECT_EQ(whole, original_);
    }
    for (const Tensor& t : packed->tensors) {
      const TestTensor& k = *std::find_if(kAllDtypes.begin(), kAllDtypes.end(),
                                          [&](const TestTensor& x) { return x.name == t.name; });
      EXPECT_EQ(whole.substr(t.offset, t.size), TensorBytes(k)) << t.name;
    }
    EXPECT_EQ(zstd.VerifyAll([](const Status& s, size_t) { ADD_FAILURE() << s.message(); }), 0u);

    // What plain zstd decodes is the grouped bytes: the same size, other bytes, and the
    // safetensors header (never grouped) as it was.
    std::ifstream in(dest_ / (packed->shards[0].name + ".zst"), std::ios::binary);
    const std::string stored((std::istreambuf_iterator<char>(in)), {});
    std::string all;
    for (const Frame& f : zstd.index().frames) {
      std::string part(f.decoded_size, '\0');
      ASSERT_EQ(ZSTD_decompress(part.data(), part.size(), stored.data() + f.compressed_offset,
                                f.compressed_size),
                f.decoded_size);
      all += part;
    }
    EXPECT_EQ(all.size(), whole.size());
    EXPECT_NE(all, whole);
    const size_t header = 8 + *reinterpret_cast<const uint64_t*>(whole.data());
    EXPECT_EQ(all.substr(0, header), whole.substr(0, header));
  }

  std::filesystem::path dest_;
  std::string original_;
  std::unique_ptr<Volume> source_;
};

TEST_F(BytePackTest, FramesThatCutElementsRoundTrip) {
  // 1000-byte frames: not a multiple of 8, so frame boundaries cut elements of every size.
  PackOptions options;
  options.frame_size = 1000;
  PackAndCompare(options, 8);
}

TEST_F(BytePackTest, OneFrameHoldingTheHeaderAndEveryTensor) {
  PackOptions options;
  options.frame_size = 1 << 20;
  PackAndCompare(options, 1);
}

TEST_F(BytePackTest, ReshardedRoundTrip) {
  PackOptions options;
  options.frame_size = 777;
  options.shard_size = 1 << 20;
  PackAndCompare(options, 8);
}

TEST_F(BytePackTest, WithoutTheOptionNothingIsGroupedOrRecorded) {
  PackOptions options;
  options.frame_size = 1000;
  ASSERT_TRUE(PackCheckpoint(source_->checkpoint(), dest_, options).ok());
  ReadContext context({.cache_bytes = 1 << 20});
  auto packed = OpenCheckpoint(dest_, context);
  ASSERT_TRUE(packed.ok()) << packed.status().message();
  const auto& zstd = dynamic_cast<const ZstdSource&>(*packed->shards[0].source);
  EXPECT_FALSE(zstd.index().grouped());
  EXPECT_EQ(zstd.index().record_size, 0u);
}

}  // namespace
}  // namespace ckptfs
