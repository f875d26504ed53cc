// VerifyCheckpoint (core/volume/verify.h): every stored byte read once; a sound checkpoint
// gives no report, a damaged zstd frame of a packed shard one report naming the shard, the
// frame's decoded byte range and the tensors it held.
#include "core/format/formats.h"
#include "core/volume/verify.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/pack/pack.h"
#include "core/volume/volume.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

using testing::IndexJson;
using testing::MakeSafetensors;
using testing::MemoryDir;
using testing::TestTensor;

const std::vector<TestTensor> kTensors = {
    {"a.w", Dtype::kF32, {300, 100}}, {"b.w", Dtype::kBF16, {1000}}, {"c", Dtype::kI64, {}}};

Checkpoint Sound() {
  auto ckpt = OpenCheckpointIn(
      MemoryDir({{"s1.safetensors", MakeSafetensors({kTensors[0], kTensors[1]})},
                 {"s2.safetensors", MakeSafetensors({kTensors[2]})},
                 {"model.safetensors.index.json", IndexJson({{"a.w", "s1.safetensors"},
                                                             {"b.w", "s1.safetensors"},
                                                             {"c", "s2.safetensors"}})},
                 {"config.json", "{}"}}),
      testing::TestContext());
  EXPECT_TRUE(ckpt.ok()) << ckpt.status().message();
  return std::move(ckpt).value();
}

TEST(VerifyTest, SoundCheckpointReadsEveryByteAndReportsNothing) {
  const Checkpoint ckpt = Sound();
  std::vector<std::string> reports;
  uint64_t last_done = 0, last_total = 0;
  const VerifyResult result = VerifyCheckpoint(
      ckpt, [&](const Status& s) { reports.push_back(s.message()); },
      [&](uint64_t done, uint64_t total) {
        EXPECT_GE(done, last_done);
        last_done = done;
        last_total = total;
      });
  EXPECT_TRUE(reports.empty()) << reports.front();
  EXPECT_EQ(result.damaged, 0u);
  EXPECT_EQ(result.bytes_read, VerifyTotalBytes(ckpt));
  EXPECT_EQ(last_done, last_total);
  uint64_t files = 0;
  for (const auto* group : {&ckpt.shards, &ckpt.index, &ckpt.others}) {
    for (const StoredFile& f : *group) files += f.source->Size();
  }
  EXPECT_EQ(result.bytes_read, files);
}

TEST(VerifyTest, DamagedFrameIsOneReportNamingShardRangeAndTensors) {
  const std::filesystem::path dest =
      std::filesystem::temp_directory_path() / ("ckptfs-verify-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dest);
  {
    auto source = Volume::FromCheckpoint(Sound(), testing::TestContextPtr());
    PackOptions options;
    options.frame_size = 4096;
    ASSERT_TRUE(PackCheckpoint(source->checkpoint(), dest.string(), options).ok());
  }
  // Flip a byte in the middle of s1's frames (a.w's bytes), away from the first frame (the
  // header, read at open) and the seek table at the end.
  const std::filesystem::path shard = dest / "s1.safetensors.zst";
  const auto size = std::filesystem::file_size(shard);
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(size / 2));
    char c = 0;
    f.get(c);
    f.seekp(static_cast<std::streamoff>(size / 2));
    f.put(static_cast<char>(c ^ 0x5a));
  }
  ReadContext context({.cache_bytes = 1 << 20});
  auto packed = OpenCheckpoint(dest.string(), context);
  ASSERT_TRUE(packed.ok()) << packed.status().message();
  std::vector<std::string> reports;
  const VerifyResult result = VerifyCheckpoint(
      *packed, [&](const Status& s) { reports.push_back(s.message()); }, nullptr);
  std::filesystem::remove_all(dest);
  ASSERT_EQ(result.damaged, reports.size());
  ASSERT_GE(reports.size(), 1u);
  EXPECT_NE(reports[0].find("s1.safetensors"), std::string::npos) << reports[0];
  EXPECT_NE(reports[0].find("; bytes "), std::string::npos) << reports[0];
  EXPECT_NE(reports[0].find("1 tensor: a.w"), std::string::npos) << reports[0];
}

}  // namespace
}  // namespace ckptfs
