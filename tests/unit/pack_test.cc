#include "core/pack/pack.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/codec/zstd_source.h"
#include "core/volume/volume.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

using testing::IndexJson;
using testing::MakeSafetensors;
using testing::MemoryDir;
using testing::TensorBytes;
using testing::TestTensor;

const std::vector<TestTensor> kTensors = {{"a.w", Dtype::kF32, {300, 100}},
                                          {"b.w", Dtype::kBF16, {1000}},
                                          {"c", Dtype::kI64, {}},
                                          {"d", Dtype::kU8, {7}}};

class PackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dest_ = std::filesystem::temp_directory_path() /
            ("ckptfs-pack-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dest_);
    auto ckpt = OpenCheckpointIn(
        MemoryDir({{"s1.safetensors", MakeSafetensors({kTensors[0], kTensors[1]})},
                   {"s2.safetensors", MakeSafetensors({kTensors[2], kTensors[3]})},
                   {"model.safetensors.index.json", IndexJson({{"a.w", "s1.safetensors"},
                                                               {"b.w", "s1.safetensors"},
                                                               {"c", "s2.safetensors"},
                                                               {"d", "s2.safetensors"}})},
                   {"config.json", "{}"}}),
        testing::TestCodec());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    source_ = Volume::FromCheckpoint(std::move(ckpt).value(), testing::TestCodecPtr());
  }
  void TearDown() override { std::filesystem::remove_all(dest_); }

  // Every tensor of the packed checkpoint equals the source's.
  void ExpectSameTensors(const Checkpoint& packed) {
    ASSERT_EQ(packed.tensors.size(), kTensors.size());
    for (const Tensor& t : packed.tensors) {
      auto it = std::find_if(kTensors.begin(), kTensors.end(),
                             [&](const TestTensor& k) { return k.name == t.name; });
      ASSERT_NE(it, kTensors.end());
      std::string bytes(t.size, '\0');
      ASSERT_TRUE(packed.shards[t.shard]
                      .source->ReadAt(t.offset, {reinterpret_cast<uint8_t*>(bytes.data()), t.size})
                      .ok());
      EXPECT_EQ(bytes, TensorBytes(*it)) << t.name;
    }
  }

  std::filesystem::path dest_;
  std::unique_ptr<Volume> source_;
};

TEST_F(PackTest, KeepsShardsAndRoundTrips) {
  PackOptions options;
  options.frame_size = 4096;
  ASSERT_TRUE(PackCheckpoint(source_->checkpoint(), dest_, options).ok());
  EXPECT_TRUE(std::filesystem::exists(dest_ / "s1.safetensors.zst"));
  EXPECT_TRUE(std::filesystem::exists(dest_ / "config.json"));
  EXPECT_TRUE(std::filesystem::exists(dest_ / "model.safetensors.index.json"));
  EXPECT_FALSE(std::filesystem::exists(dest_ / "s1.safetensors"));
  ReadContext codec({.cache_bytes = 1 << 20});
  auto packed = OpenCheckpoint(dest_, codec);
  ASSERT_TRUE(packed.ok()) << packed.status().message();
  const auto* zstd = dynamic_cast<const ZstdSource*>(packed->shards[0].source.get());
  ASSERT_NE(zstd, nullptr);
  EXPECT_TRUE(zstd->index().seekable);
  EXPECT_GT(zstd->index().frames.size(), 20u);  // 120 KB of tensors in 4 KiB frames
  EXPECT_TRUE(zstd->index().frames[0].checksum.has_value());
  ExpectSameTensors(*packed);

  // Packing it again is refused, naming why.
  Status again = PackCheckpoint(*packed, dest_.string() + "-again", options);
  EXPECT_NE(again.message().find("already packed"), std::string::npos) << again.message();
  // So is a destination that holds files.
  EXPECT_NE(PackCheckpoint(source_->checkpoint(), dest_, options).message().find("not empty"),
            std::string::npos);
}

TEST_F(PackTest, ReshardsBySize) {
  PackOptions options;
  options.frame_size = 64 << 10;
  options.shard_size = 100'000;  // a.w alone is 120,000 bytes: it gets its own shard
  ASSERT_TRUE(PackCheckpoint(source_->checkpoint(), dest_, options).ok());
  ReadContext codec({.cache_bytes = 1 << 20});
  auto packed = OpenCheckpoint(dest_, codec);
  ASSERT_TRUE(packed.ok()) << packed.status().message();
  // Aligned order is c (8 bytes), a.w (120,000), b.w, d: a.w cannot join c, and b.w
  // cannot join a.w.
  ASSERT_EQ(packed->shards.size(), 3u);
  EXPECT_EQ(packed->shards[0].name, "model-00001-of-00003.safetensors");
  for (const Tensor& t : packed->tensors) {
    if (t.name == "a.w") {
      EXPECT_EQ(packed->shards[t.shard].name, "model-00002-of-00003.safetensors");
    }
  }
  ExpectSameTensors(*packed);
}

// What a killed pack leaves: finished files beside a NAME.part (garbage here). A rerun
// removes the .part, replaces the finished files, and reports what it wrote.
TEST_F(PackTest, RerunReplacesTheLeftoversOfAnInterruptedPack) {
  std::filesystem::create_directories(dest_);
  std::ofstream(dest_ / "s1.safetensors.zst") << "not zstd";
  std::ofstream(dest_ / "s2.safetensors.zst.part") << "half";
  PackOptions options;
  options.frame_size = 4096;
  PackSummary summary;
  Status s = PackCheckpoint(source_->checkpoint(), dest_, options, &summary);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_FALSE(std::filesystem::exists(dest_ / "s2.safetensors.zst.part"));
  EXPECT_EQ(summary.shards, 2u);
  EXPECT_EQ(summary.decoded_bytes, source_->checkpoint().shards[0].source->Size() +
                                       source_->checkpoint().shards[1].source->Size());
  EXPECT_EQ(summary.compressed_bytes, std::filesystem::file_size(dest_ / "s1.safetensors.zst") +
                                          std::filesystem::file_size(dest_ / "s2.safetensors.zst"));
  ReadContext codec({.cache_bytes = 1 << 20});
  auto packed = OpenCheckpoint(dest_, codec);
  ASSERT_TRUE(packed.ok()) << packed.status().message();
  ExpectSameTensors(*packed);

  // Finished now: replaced only with force.
  EXPECT_NE(PackCheckpoint(source_->checkpoint(), dest_, options).message().find("--force"),
            std::string::npos);
  options.force = true;
  EXPECT_TRUE(PackCheckpoint(source_->checkpoint(), dest_, options).ok());
}

// Whatever pack would not write stays, and makes DEST refused, force or not: a .part of
// another name, a directory where a shard goes, a symlink.
TEST_F(PackTest, NeverTouchesWhatItDoesNotWrite) {
  PackOptions options;
  options.frame_size = 4096;
  options.force = true;
  for (const char* name : {"notes.txt.part", "s1.safetensors.zst", "config.json"}) {
    SCOPED_TRACE(name);
    std::filesystem::remove_all(dest_);
    std::filesystem::create_directories(dest_);
    std::ofstream(dest_ / "s2.safetensors.zst.part") << "half";
    if (std::string(name) == "s1.safetensors.zst") {
      std::filesystem::create_directories(dest_ / name);
    } else if (std::string(name) == "config.json") {
      std::filesystem::create_symlink("/etc/hostname", dest_ / name);
    } else {
      std::ofstream(dest_ / name) << "mine";
    }
    Status s = PackCheckpoint(source_->checkpoint(), dest_, options);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.message();
    EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
    EXPECT_TRUE(std::filesystem::exists(dest_ / "s2.safetensors.zst.part"));
  }
}

TEST_F(PackTest, RefusesBadOptions) {
  PackOptions options;
  options.frame_size = 0;
  EXPECT_EQ(PackCheckpoint(source_->checkpoint(), dest_, options).code(),
            Status::Code::kInvalidArgument);
  options.frame_size = 4096;
  options.level = 99;
  EXPECT_EQ(PackCheckpoint(source_->checkpoint(), dest_, options).code(),
            Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace ckptfs
