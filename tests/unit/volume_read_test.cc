// Volume::Read (core/volume/volume.h), the one call a FUSE read makes, without a mount:
// the bytes of every view whatever the reply limits (descriptors, memory only, one
// segment), the stats it counts, and the prefetch policy over packed shards: a random
// reader decodes only the frames it touches (at most requested + 2 frames) and triggers
// no readahead; a sequential reader does.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/pack/pack.h"
#include "core/volume/volume.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

using testing::IndexJson;
using testing::MakeSafetensors;
using testing::TestTensor;

const std::vector<TestTensor> kTensors = {{"a.w", Dtype::kF32, {400, 100}},
                                          {"b.w", Dtype::kBF16, {20000}},
                                          {"c.w", Dtype::kF32, {300, 100}}};

class VolumeReadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ckptfs-volume-read-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "plain");
    Write("plain/s1.safetensors", MakeSafetensors({kTensors[0], kTensors[1]}));
    Write("plain/s2.safetensors", MakeSafetensors({kTensors[2]}));
    Write("plain/model.safetensors.index.json",
          IndexJson(
              {{"a.w", "s1.safetensors"}, {"b.w", "s1.safetensors"}, {"c.w", "s2.safetensors"}}));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
  }

  std::unique_ptr<Volume> OpenVolume(const std::string& sub, ReadOptions options = {}) {
    auto volume = Volume::Open((dir_ / sub).string(), options);
    EXPECT_TRUE(volume.ok()) << volume.status().message();
    return volume.ok() ? std::move(volume).value() : nullptr;
  }

  // Packs plain/ into packed/ with 4 KiB frames.
  void Pack() {
    auto plain = OpenVolume("plain");
    ASSERT_TRUE(plain);
    PackOptions options;
    options.frame_size = 4096;
    ASSERT_TRUE(PackCheckpoint(plain->checkpoint(), (dir_ / "packed").string(), options).ok());
  }

  static uint64_t Ino(const Volume& volume, const std::vector<std::string>& path) {
    uint64_t ino = Layout::kRoot;
    for (const std::string& part : path) ino = volume.layout().Lookup(ino, part);
    return ino;
  }

  // The bytes of `gathered`, descriptor segments read with pread.
  static std::string Bytes(const Gathered& gathered) {
    std::string out;
    for (const ReplySegment& seg : gathered.segments) {
      if (seg.fd < 0) {
        out.append(reinterpret_cast<const char*>(seg.data), seg.length);
        continue;
      }
      std::string part(seg.length, '\0');
      EXPECT_EQ(::pread(seg.fd, part.data(), part.size(), static_cast<off_t>(seg.offset)),
                static_cast<ssize_t>(seg.length));
      out += part;
    }
    return out;
  }

  // Reads [offset, offset + size) of `ino` through Volume::Read with `limits`.
  static std::string ReadVia(const Volume& volume, uint64_t ino, uint64_t offset, uint64_t size,
                             const ReplyLimits& limits, size_t* segments = nullptr,
                             bool* any_fd = nullptr, Readahead* readahead = nullptr) {
    std::vector<uint8_t> buffer;
    Gathered gathered;
    Status s = volume.Read(ino, offset, size, readahead, limits, buffer, &gathered);
    EXPECT_TRUE(s.ok()) << s.message();
    if (segments) *segments = gathered.segments.size();
    if (any_fd) {
      *any_fd = false;
      for (const ReplySegment& seg : gathered.segments) *any_fd |= seg.fd >= 0;
    }
    return Bytes(gathered);
  }

  // What ReadInto (the copying path) gives: the reference bytes.
  static std::string Reference(const Volume& volume, uint64_t ino) {
    std::vector<ReadPiece> plan;
    EXPECT_TRUE(volume.PlanRead(ino, 0, UINT64_MAX, &plan).ok());
    uint64_t total = 0;
    for (const ReadPiece& p : plan) total += p.length;
    std::string out(total, '\0');
    EXPECT_TRUE(volume.ReadInto(plan, reinterpret_cast<uint8_t*>(out.data())).ok());
    return out;
  }

  std::filesystem::path dir_;
};

TEST_F(VolumeReadTest, EveryReplyShapeGivesTheSameBytes) {
  auto volume = OpenVolume("plain");
  ASSERT_TRUE(volume);
  const uint64_t merged = Ino(*volume, {"model.safetensors"});
  ASSERT_NE(merged, 0u);
  const std::string want = Reference(*volume, merged);
  ASSERT_GT(want.size(), 100'000u);
  size_t segments = 0;
  bool any_fd = false;
  // Plain shards go out by descriptor, the generated header from memory.
  EXPECT_EQ(ReadVia(*volume, merged, 0, want.size(), {}, &segments, &any_fd), want);
  EXPECT_TRUE(any_fd);
  // The header's three pieces, then a.w, c.w and b.w (the merged order) by descriptor.
  EXPECT_EQ(segments, 6u);
  // More descriptor segments than the front end's pipe holds: one copied segment.
  EXPECT_EQ(
      ReadVia(*volume, merged, 0, want.size(), {.max_descriptor_segments = 2}, &segments, &any_fd),
      want);
  EXPECT_EQ(segments, 1u);
  EXPECT_FALSE(any_fd);
  // That bound is the pipe's: a reply of memory only is written, not spliced.
  EXPECT_EQ(ReadVia(*volume, merged, 0, want.size(),
                    {.descriptors = false, .max_descriptor_segments = 1}, &segments, &any_fd),
            want);
  EXPECT_FALSE(any_fd);
  // A front end that cannot splice gets memory only.
  EXPECT_EQ(ReadVia(*volume, merged, 0, want.size(), {.descriptors = false}, &segments, &any_fd),
            want);
  EXPECT_FALSE(any_fd);
  // Too many segments for one reply: one copied segment.
  EXPECT_EQ(ReadVia(*volume, merged, 0, want.size(), {.max_segments = 1}, &segments, &any_fd),
            want);
  EXPECT_EQ(segments, 1u);
  EXPECT_FALSE(any_fd);
  // Windows across the header and shard boundary, and past the end.
  for (uint64_t off : {0ul, 7ul, 100ul, 80'000ul, want.size() - 3}) {
    EXPECT_EQ(ReadVia(*volume, merged, off, 50'000, {.descriptors = false}),
              want.substr(off, 50'000))
        << off;
  }
  EXPECT_EQ(ReadVia(*volume, merged, want.size() + 10, 100, {}), "");
  // Every other file of the mount too: tensor files, the legacy pytorch_model.bin.
  for (const std::vector<std::string>& path :
       {std::vector<std::string>{"tensors", "a", "w.npy"}, {"pytorch_model.bin"}}) {
    const uint64_t ino = Ino(*volume, path);
    ASSERT_NE(ino, 0u) << path.back();
    const std::string bytes = Reference(*volume, ino);
    EXPECT_EQ(ReadVia(*volume, ino, 0, bytes.size(), {}), bytes) << path.back();
  }
}

// Tensors that follow each other in a shard and in the merged file go out as one range of
// the shard's descriptor: one splice, one segment of the pipe's few (fs/fuse_ops.cc).
TEST_F(VolumeReadTest, TensorsThatFollowEachOtherAreOneRange) {
  std::filesystem::create_directories(dir_ / "one");
  Write("one/model.safetensors",
        MakeSafetensors({{"x.w", Dtype::kF32, {300, 100}}, {"y.w", Dtype::kF32, {200, 100}}}));
  auto volume = OpenVolume("one");
  ASSERT_TRUE(volume);
  const uint64_t merged = Ino(*volume, {"model.safetensors"});
  const std::string want = Reference(*volume, merged);
  std::vector<uint8_t> buffer;
  Gathered gathered;
  ASSERT_TRUE(volume->Read(merged, 0, want.size(), nullptr, {}, buffer, &gathered).ok());
  std::vector<ReplySegment> ranges;
  for (const ReplySegment& seg : gathered.segments) {
    if (seg.fd >= 0) ranges.push_back(seg);
  }
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0].length, (300u + 200u) * 100u * 4u);
  EXPECT_EQ(Bytes(gathered), want);
}

TEST_F(VolumeReadTest, CountsReadsAndRefusesWhatIsNotAFile) {
  auto volume = OpenVolume("plain");
  ASSERT_TRUE(volume);
  const uint64_t merged = Ino(*volume, {"model.safetensors"});
  const uint64_t before = volume->stats().reads.load();
  EXPECT_EQ(ReadVia(*volume, merged, 0, 1000, {}).size(), 1000u);
  EXPECT_EQ(volume->stats().reads.load(), before + 1);
  EXPECT_GE(volume->stats().bytes_read.load(), 1000u);
  std::vector<uint8_t> buffer;
  Gathered gathered;
  EXPECT_EQ(volume->Read(1'000'000, 0, 10, nullptr, {}, buffer, &gathered).code(),
            Status::Code::kNotFound);
  EXPECT_EQ(volume->Read(Layout::kRoot, 0, 10, nullptr, {}, buffer, &gathered).code(),
            Status::Code::kInvalidArgument);
}

// stats.json's "requests": the sizes the kernel asked, the time spent gathering, and how
// each byte reached the reply (docs/benchmarks.md reads them to say where time goes).
TEST_F(VolumeReadTest, SaysHowEachReplysBytesTravel) {
  auto volume = OpenVolume("plain");
  ASSERT_TRUE(volume);
  const uint64_t merged = Ino(*volume, {"model.safetensors"});
  const Stats& stats = volume->stats();
  // A spliced read: shard bytes by descriptor, the generated header from memory (lent, or
  // made in the buffer: copied).
  const std::string whole = ReadVia(*volume, merged, 0, 1u << 20, {});
  EXPECT_EQ(stats.reads_by_size[Stats::SizeClass(1u << 20)].load(), 1u);
  EXPECT_EQ(stats.bytes_by_descriptor.load() + stats.bytes_lent.load() + stats.bytes_copied.load(),
            whole.size());
  EXPECT_GT(stats.bytes_by_descriptor.load(), whole.size() / 2);
  const uint64_t copied_before = stats.bytes_copied.load();
  // A front end that cannot splice: the daemon copies the shard bytes.
  EXPECT_EQ(ReadVia(*volume, merged, 100, 3000, {.descriptors = false}).size(), 3000u);
  EXPECT_EQ(stats.reads_by_size[0].load(), 1u);
  EXPECT_GE(stats.bytes_copied.load(), copied_before + 2000);
  EXPECT_EQ(stats.bytes_copied.load() + stats.bytes_by_descriptor.load() + stats.bytes_lent.load(),
            whole.size() + 3000);
  EXPECT_GT(stats.gather_ns.load(), 0u);
  const nlohmann::json j = nlohmann::json::parse(volume->StatsJson());
  EXPECT_EQ(j["requests"]["by_size"]["4K"], 1);
  EXPECT_EQ(j["requests"]["by_size"]["1M"], 1);
  EXPECT_EQ(j["requests"]["bytes_copied"], stats.bytes_copied.load());
  EXPECT_TRUE(j["requests"]["gather_seconds"].is_number());
}

TEST_F(VolumeReadTest, RandomReaderDecodesOnlyItsFramesAndTriggersNoReadahead) {
  Pack();
  // A stream continues within `slack` of where it expects the next read (1 MiB by default,
  // one FUSE request): scaled down with the file, so that reads 8 KiB apart are seeks.
  const ReadOptions options = {.cache_bytes = 8 << 20, .prefetch = {.slack = 1024}};
  auto volume = OpenVolume("packed", options);
  ASSERT_TRUE(volume);
  // One tensor's file: every read below starts inside the tensor (a read that starts a
  // tensor prefetches the rest of it, by design).
  const std::vector<std::string> path = {"tensors", "a", "w.npy"};
  const std::string want = Reference(*volume, Ino(*volume, path));  // decodes it all
  auto fresh = OpenVolume("packed", options);
  ASSERT_TRUE(fresh);
  const uint64_t ino = Ino(*fresh, path);
  fresh->context().StartWorkers();
  ReadContext& context = fresh->context();
  auto readahead = fresh->NewReadahead(ino);
  // 1 KiB reads at shuffled offsets 8 KiB apart, each inside a frame or across two.
  std::vector<uint64_t> offsets;
  for (uint64_t off = 1000; off + 1024 <= want.size(); off += 8192) offsets.push_back(off);
  std::shuffle(offsets.begin(), offsets.end(), std::mt19937(7));
  ASSERT_GE(offsets.size(), 15u);
  for (const uint64_t off : offsets) {
    const uint64_t decoded_before = context.bytes_decoded.load();
    EXPECT_EQ(ReadVia(*fresh, ino, off, 1024, {}, nullptr, nullptr, readahead.get()),
              want.substr(off, 1024))
        << off;
    EXPECT_LE(context.bytes_decoded.load() - decoded_before, 1024u + 2 * 4096) << off;
  }
  fresh->context().Shutdown();
  EXPECT_EQ(context.prefetches.load(), 0u);
}

TEST_F(VolumeReadTest, SequentialReaderDecodesAheadOnTheWorkers) {
  Pack();
  auto volume = OpenVolume("packed", {.cache_bytes = 8 << 20});
  ASSERT_TRUE(volume);
  const uint64_t merged = Ino(*volume, {"model.safetensors"});
  const std::string want = Reference(*volume, merged);
  auto fresh = OpenVolume("packed", {.cache_bytes = 8 << 20});
  ASSERT_TRUE(fresh);
  fresh->context().StartWorkers();
  auto readahead = fresh->NewReadahead(merged);
  std::string got;
  for (uint64_t off = 0; off < want.size(); off += 8192) {
    got += ReadVia(*fresh, merged, off, 8192, {}, nullptr, nullptr, readahead.get());
  }
  fresh->context().Shutdown();
  EXPECT_EQ(got, want);
  EXPECT_GT(fresh->context().prefetches.load(), 0u);
}

}  // namespace
}  // namespace ckptfs
