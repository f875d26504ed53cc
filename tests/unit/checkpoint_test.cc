#include "core/checkpoint/checkpoint.h"

#include <gtest/gtest.h>

#include "core/format/formats.h"
#include "tests/unit/format_samples.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

// The table's sample of this format (format_samples.h): one file and a config.
const testing::FormatSample kSample("safetensors",
                                    {{"model.safetensors",
                                      testing::MakeSafetensors({{"a", Dtype::kF32, {2}}})},
                                     {"config.json", "{}"}});

using testing::IndexJson;
using testing::MakeSafetensors;
using testing::MemoryDir;

const std::string kA = MakeSafetensors({{"a", Dtype::kF32, {2}}});
const std::string kB = MakeSafetensors({{"b", Dtype::kI64, {1}}});

Status OpenStatus(std::map<std::string, std::string> files) {
  return OpenCheckpointIn(MemoryDir(std::move(files)), testing::TestContext()).status();
}

void ExpectRefused(std::map<std::string, std::string> files, const std::string& starts_with,
                   const std::string& contains) {
  Status s = OpenStatus(std::move(files));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind(starts_with, 0), 0u) << s.message();
  EXPECT_NE(s.message().find(contains), std::string::npos) << s.message();
}

TEST(Checkpoint, ShardedWithIndex) {
  auto ckpt =
      OpenCheckpointIn(MemoryDir({{"1.safetensors", kA},
                                  {"2.safetensors", kB},
                                  {"stale.safetensors", kA},
                                  {"model.safetensors.index.json",
                                   IndexJson({{"a", "1.safetensors"}, {"b", "2.safetensors"}})},
                                  {"tokenizer.json", "{}"}}),
                       testing::TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  ASSERT_EQ(ckpt->tensors.size(), 2u);
  EXPECT_EQ(ckpt->tensors[1].name, "b");
  EXPECT_EQ(ckpt->shards[ckpt->tensors[1].shard].name, "2.safetensors");
  EXPECT_EQ(ckpt->TotalTensorBytes(), 16u);
  // The stale weight file is not part of the checkpoint and is not shown either.
  ASSERT_EQ(ckpt->others.size(), 1u);
  EXPECT_EQ(ckpt->others[0].name, "tokenizer.json");
}

TEST(Checkpoint, SingleFile) {
  auto ckpt = OpenCheckpointIn(MemoryDir({{"model.safetensors", kA}, {"config.json", "{}"}}),
                               testing::TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_TRUE(ckpt->index.empty());
  EXPECT_EQ(ckpt->tensors.size(), 1u);
}

TEST(Checkpoint, RefusesInconsistentIndexes) {
  const std::string index = "model.safetensors.index.json";
  ExpectRefused({{index, IndexJson({{"a", "1.safetensors"}})}},
                "1.safetensors: ", "shard named in model.safetensors.index.json is missing");
  ExpectRefused({{index, IndexJson({{"a", "../1.safetensors"}})}, {"1.safetensors", kA}}, index,
                "not a plain file name");
  ExpectRefused({{"1.safetensors", kA},
                 {"2.safetensors", kA},
                 {index, IndexJson({{"a", "1.safetensors"}, {"b", "2.safetensors"}})}},
                "2.safetensors: ", "also appears in 1.safetensors");
  ExpectRefused({{"1.safetensors", kA},
                 {index, IndexJson({{"a", "1.safetensors"}, {"zz", "1.safetensors"}})}},
                "1.safetensors: ", "\"zz\" listed in");
  ExpectRefused(
      {{"1.safetensors", MakeSafetensors({{"a", Dtype::kU8, {1}}, {"c", Dtype::kU8, {1}}})},
       {index, IndexJson({{"a", "1.safetensors"}})}},
      "1.safetensors: ", "\"c\" is not listed");
  ExpectRefused({{"1.safetensors", kA},
                 {"2.safetensors", kB},
                 {index, IndexJson({{"a", "2.safetensors"}, {"b", "2.safetensors"}})}},
                "2.safetensors: ", "\"a\" listed in");
  ExpectRefused({{"1.safetensors", kA}, {index, "{\"weight_map\": "}}, index, "not valid JSON");
  ExpectRefused({{"1.safetensors", kA.substr(0, kA.size() - 3)},
                 {index, IndexJson({{"a", "1.safetensors"}})}},
                "1.safetensors: ", "truncated");
}

TEST(Checkpoint, RefusesAmbiguousOrEmptyDirectories) {
  ExpectRefused({{"config.json", "{}"}}, "mem: ", "no checkpoint found");
  ExpectRefused({{"1.safetensors", kA}, {"2.safetensors", kB}},
                "mem: ", "2 weight files (1.safetensors, 2.safetensors, ...) but no index json");
  ExpectRefused({{"a.bin", "x"}, {"b.pt", "y"}}, "mem: ", "2 weight files (a.bin, b.pt");
  ExpectRefused({{"x.safetensors.index.json", "{}"}, {"y.safetensors.index.json", "{}"}},
                "mem: ", "several index files");
}

TEST(Checkpoint, PrefersTheTransformersIndexName) {
  auto ckpt = OpenCheckpointIn(
      MemoryDir({{"1.safetensors", kA},
                 {"model.safetensors.index.json", IndexJson({{"a", "1.safetensors"}})},
                 {"other.safetensors.index.json", "garbage"}}),
      testing::TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_EQ(ckpt->index[0].name, "model.safetensors.index.json");
}

TEST(Checkpoint, LocalPathsThatAreNotCheckpoints) {
  EXPECT_EQ(OpenCheckpoint("/nonexistent/ckpt", testing::TestContext()).status().code(),
            Status::Code::kNotFound);
  EXPECT_EQ(OpenCheckpoint("/etc/hostname", testing::TestContext()).status().code(),
            Status::Code::kInvalidArgument);
}

namespace ckptfs {
namespace {

TEST(Checkpoint, HidesTheOtherCopyOfTheWeights) {
  // A repository shipping safetensors and torch shards: the safetensors copy is mounted
  // and the torch index and shards are not shown as plain files; other files are.
  auto ckpt = OpenCheckpointIn(
      MemoryDir({{"1.safetensors", kA},
                 {"model.safetensors.index.json", IndexJson({{"a", "1.safetensors"}})},
                 {"pytorch_model.bin.index.json", IndexJson({{"a", "pytorch_model-1.bin"}})},
                 {"pytorch_model-1.bin", "torch bytes"},
                 {"training_args.bin", "not weights"}}),
      testing::TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  std::vector<std::string> others;
  for (const StoredFile& f : ckpt->others) others.push_back(f.name);
  EXPECT_EQ(others, std::vector<std::string>{"training_args.bin"});
}

}  // namespace
}  // namespace ckptfs

// metadata.json carries the weights_only verdict beside the pickle's own keys (issue 37):
// after them, alone where there are none, and left out where the pickle has that key.
TEST(Checkpoint, MetadataJsonHoldsTheWeightsOnlyVerdict) {
  Checkpoint ckpt;
  ckpt.format = FormatNamed("torch");
  ckpt.weights_only = WeightsOnlyVerdict{false, {"argparse.Namespace"}, {}};
  const std::string verdict =
      R"("__weights_only__": {
    "loads": false,
    "globals": [
      "argparse.Namespace"
    ],
    "opcodes": []
  })";
  ckpt.state_json = R"({"epoch":3})";
  EXPECT_EQ(MetadataJson(ckpt), "{\n  \"epoch\": 3,\n  " + verdict + "\n}\n");
  EXPECT_EQ(MetadataJsonSize(ckpt), MetadataJson(ckpt).size());
  for (const char* empty : {"", "{}"}) {
    ckpt.state_json = empty;
    EXPECT_EQ(MetadataJson(ckpt), "{\n  " + verdict + "\n}\n");
    EXPECT_EQ(MetadataJsonSize(ckpt), MetadataJson(ckpt).size());
  }
  ckpt.state_json = R"({"__weights_only__":1})";
  EXPECT_EQ(MetadataJson(ckpt), "{\n  \"__weights_only__\": 1\n}\n");
  ckpt.weights_only.reset();
  ckpt.state_json = "";
  EXPECT_EQ(MetadataJson(ckpt), "{}\n");
}

}  // namespace
}  // namespace ckptfs
