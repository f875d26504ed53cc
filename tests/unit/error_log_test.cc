// ErrorLog (core/volume/error_log.h): one record per failed read, the kernel's retries
// folded into it, the last kKept kept; and how a stored file is named.
#include "core/volume/error_log.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace ckptfs {
namespace {

ReadError Error(std::string file, std::string reason) {
  ReadError e;
  e.file = std::move(file);
  e.source = "/data/ckpt/model.safetensors.zst";
  e.reason = std::move(reason);
  return e;
}

TEST(ErrorLogTest, RetriesOfOneReadAreOneRecord) {
  ErrorLog log;
  EXPECT_TRUE(log.Record(Error("tensors/a.npy", "frame 6: corrupt")));
  EXPECT_FALSE(log.Record(Error("tensors/a.npy", "frame 6: corrupt"))) << "the kernel's retry";
  EXPECT_FALSE(log.Record(Error("tensors/a.npy", "frame 6: corrupt")));
  EXPECT_TRUE(log.Record(Error("tensors/a.npy", "frame 7: corrupt"))) << "another reason";
  EXPECT_TRUE(log.Record(Error("model.safetensors", "frame 6: corrupt"))) << "another file";
  EXPECT_FALSE(log.Record(Error("tensors/a.npy", "frame 6: corrupt"))) << "not only the last";
  EXPECT_EQ(log.total(), 3u);
  const std::vector<ReadError> recent = log.Recent();
  ASSERT_EQ(recent.size(), 3u);
  EXPECT_EQ(recent[0].repeats, 3u);
  EXPECT_EQ(recent[1].repeats, 0u);
  EXPECT_EQ(recent[2].file, "model.safetensors");

  const nlohmann::json j = ErrorsJson(log, "run-1/");
  EXPECT_EQ(j["total"], 3);
  ASSERT_EQ(j["recent"].size(), 3u);
  EXPECT_EQ(j["recent"][0]["file"], "run-1/tensors/a.npy");
  EXPECT_EQ(j["recent"][0]["source"], "/data/ckpt/model.safetensors.zst");
  EXPECT_EQ(j["recent"][0]["reason"], "frame 6: corrupt");
  EXPECT_EQ(j["recent"][0]["repeats"], 3);
  EXPECT_EQ(j["recent"][0]["time"].get<std::string>().size(), 20u);  // 2026-01-31T12:00:00Z
}

TEST(ErrorLogTest, KeepsTheLastRecordsAndCountsThemAll) {
  ErrorLog log;
  for (size_t i = 0; i < ErrorLog::kKept + 5; ++i) {
    EXPECT_TRUE(log.Record(Error("f" + std::to_string(i), "r")));
  }
  EXPECT_EQ(log.total(), ErrorLog::kKept + 5);
  const std::vector<ReadError> recent = log.Recent();
  ASSERT_EQ(recent.size(), ErrorLog::kKept);
  EXPECT_EQ(recent.front().file, "f5");
  EXPECT_EQ(recent.back().file, "f" + std::to_string(ErrorLog::kKept + 4));
}

TEST(ErrorLogTest, StoredPathNamesTheFileInSource) {
  EXPECT_EQ(StoredPath("/data/ckpt", "model.safetensors.zst"), "/data/ckpt/model.safetensors.zst");
  EXPECT_EQ(StoredPath("http://h/ckpt/", "a.safetensors"), "http://h/ckpt/a.safetensors");
  EXPECT_EQ(StoredPath("/data/model.safetensors", "model.safetensors"), "/data/model.safetensors");
  EXPECT_EQ(StoredPath("/data/ckpt", ""), "/data/ckpt");
}

}  // namespace
}  // namespace ckptfs
