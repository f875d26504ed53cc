// The DCP entry of the format table (core/format/dcp/dcp_reader.cc) over the real files
// PyTorch 2.11 wrote (../shared/fixtures/dcp, NOTICE.md; skipped when absent): every
// tensor's bytes, gathered from its chunks, equal the whole tensor it was made from; the
// non-tensor values nest as the state dict had them; the model is the `model` sub-tree; a
// directory of DCP checkpoints is a run.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/checkpoint/checkpoint.h"
#include "core/encoding/safetensors.h"
#include "core/format/formats.h"
#include "core/pack/pack.h"
#include "core/run/run_listing.h"
#include "core/source/byte_source.h"
#include "test_util.h"
#include "tests/unit/format_samples.h"

namespace ckptfs {
namespace {

// The table's sample of this format (format_samples.h): .metadata beside a rank's data file.
const testing::FormatSample kSample("dcp",
                                    {{".metadata", "not parsed by detect"}, {"__0_0.distcp", "x"}});

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(CKPTFS_SOURCE_DIR) / ".." / "shared" / "fixtures" / "dcp";

// name -> bytes of every tensor of a safetensors file.
std::map<std::string, std::string> WholeTensors(const fs::path& path) {
  auto source = LocalFileSource::Open(path.string(), path.filename().string());
  EXPECT_TRUE(source.ok()) << source.status().message();
  auto header = ReadSafetensorsHeader(**source);
  EXPECT_TRUE(header.ok()) << header.status().message();
  std::map<std::string, std::string> out;
  for (const TensorEntry& t : header->tensors) {
    std::string bytes(t.end - t.begin, '\0');
    EXPECT_TRUE((*source)
                    ->ReadAt(header->data_start + t.begin,
                             {reinterpret_cast<uint8_t*>(bytes.data()), bytes.size()})
                    .ok());
    out[t.name] = std::move(bytes);
  }
  return out;
}

// The bytes of tensor `t` of `ckpt`, read range by range from its files.
std::string BytesOf(const Checkpoint& ckpt, const Tensor& t) {
  StoredRange one;
  std::string out;
  for (const StoredRange& r : RangesOf(ckpt, t, one)) {
    std::string piece(r.size, '\0');
    const Status read =
        ShardFile(ckpt, r.shard)
            .source->ReadAt(r.offset, {reinterpret_cast<uint8_t*>(piece.data()), piece.size()});
    EXPECT_TRUE(read.ok()) << read.message();
    out += piece;
  }
  return out;
}

class DcpReaderTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DcpReaderTest, EveryTensorEqualsTheWholeTensorItWasMadeFrom) {
  const fs::path source = kFixtures / GetParam();
  if (!fs::is_directory(source)) GTEST_SKIP() << source << " is absent (a user's clone)";
  auto ckpt = OpenCheckpoint(source.string(), testing::TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_EQ(ckpt->format, FormatNamed("dcp"));
  const auto whole = WholeTensors(source / "expected.safetensors");
  ASSERT_EQ(ckpt->tensors.size(), whole.size());
  for (const Tensor& t : ckpt->tensors) {
    SCOPED_TRACE(t.name);
    ASSERT_TRUE(whole.count(t.name));
    EXPECT_EQ(t.size, whole.at(t.name).size());
    EXPECT_TRUE(BytesOf(*ckpt, t) == whole.at(t.name)) << "bytes differ";
  }
  // The model is the `model` sub-tree, as dcp_to_torch_save's {"model": ...}; the
  // Hugging Face form and FSDP's rank files save the model itself.
  const bool bare = GetParam() == "hf_dcp" || GetParam() == "fsdp_rank_files";
  EXPECT_EQ(ckpt->model.key, bare ? "" : "model");
  const auto lines = FormatNamed("dcp")->inspect(*ckpt);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].first, "dcp");
  EXPECT_NE(lines[0].second.find("chunks"), std::string::npos) << lines[0].second;
}

// `ckptfs pack` of each form opens again as the same checkpoint: the format finds its
// files under their .zst names (the Hugging Face form's did not, and pack's own read-back
// refused what it had just written).
TEST_P(DcpReaderTest, APackedCopyReadsTheSame) {
  const fs::path source = kFixtures / GetParam();
  if (!fs::is_directory(source)) GTEST_SKIP() << source << " is absent (a user's clone)";
  auto ckpt = OpenCheckpoint(source.string(), testing::TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  const fs::path dest = fs::temp_directory_path() / ("ckptfs_dcp_pack." + std::to_string(getpid()));
  fs::remove_all(dest);
  PackOptions options;
  options.frame_size = 4096;
  const Status packed = PackCheckpoint(*ckpt, dest.string(), options);
  ASSERT_TRUE(packed.ok()) << packed.message();
  ReadContext context({.cache_bytes = 1 << 20});
  auto again = OpenCheckpoint(dest.string(), context);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->format, FormatNamed("dcp"));
  ASSERT_EQ(again->tensors.size(), ckpt->tensors.size());
  for (size_t i = 0; i < ckpt->tensors.size(); ++i) {
    SCOPED_TRACE(ckpt->tensors[i].name);
    EXPECT_EQ(again->tensors[i].name, ckpt->tensors[i].name);
    EXPECT_TRUE(BytesOf(*again, again->tensors[i]) == BytesOf(*ckpt, ckpt->tensors[i]));
  }
  fs::remove_all(dest);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DcpReaderTest,
                         ::testing::Values("single", "dtensor", "hf_dcp", "fsdp_rank_files"));

TEST(DcpReader, ValuesNestAsTheStateDictHadThem) {
  const fs::path source = kFixtures / "single";
  if (!fs::is_directory(source)) GTEST_SKIP() << source << " is absent (a user's clone)";
  auto ckpt = OpenCheckpoint(source.string(), testing::TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  const auto state = nlohmann::json::parse(ckpt->state_json);
  EXPECT_EQ(state["step"], 1234);
  EXPECT_EQ(state["note"], "single-process dcp.save");
  const auto& group = state["optim"]["param_groups"][0];
  EXPECT_EQ(group["lr"], 1e-3);
  EXPECT_EQ(group["betas"], nlohmann::json::array({0.9, 0.95}));
  EXPECT_EQ(group["params"][0], "embed.weight");
}

// FSDP rank files: every rank of the world, each its own W, or one line naming the file.
TEST(DcpReader, FsdpRankFilesMissingOrDisagreeingAreRefused) {
  const fs::path fixture = kFixtures / "fsdp_rank_files";
  if (!fs::is_directory(fixture)) GTEST_SKIP() << fixture << " is absent (a user's clone)";
  const fs::path root = fs::temp_directory_path() / ("ckptfs_fsdp." + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  for (int r : {0, 1, 3}) {
    const std::string name = "model_world_size_4_rank_" + std::to_string(r) + ".pt";
    fs::copy_file(fixture / name, root / name);
  }
  auto missing = OpenCheckpoint(root.string(), testing::TestContext());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("model_world_size_4_rank_2.pt: missing"),
            std::string::npos)
      << missing.status().message();
  // A rank file of another world beside them.
  fs::copy_file(fixture / "model_world_size_4_rank_2.pt", root / "model_world_size_8_rank_2.pt");
  auto other = OpenCheckpoint(root.string(), testing::TestContext());
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("world size 8"), std::string::npos)
      << other.status().message();
  // A rank file whose DTensors lie on a mesh of 4 in a world said to be 2.
  fs::remove_all(root);
  fs::create_directories(root);
  for (int r : {0, 1}) {
    fs::copy_file(fixture / ("model_world_size_4_rank_" + std::to_string(r) + ".pt"),
                  root / ("model_world_size_2_rank_" + std::to_string(r) + ".pt"));
  }
  auto mesh = OpenCheckpoint(root.string(), testing::TestContext());
  ASSERT_FALSE(mesh.ok());
  EXPECT_NE(mesh.status().message().find("mesh of 4 ranks, not the world of 2"), std::string::npos)
      << mesh.status().message();
  fs::remove_all(root);
}

// HuggingFaceStorageWriter pieces that overlap, or whose DCP_SHARDING_INFO nests too deep:
// one line naming the piece's path once (the tiling refusal once said "mem/mem/shard-...").
TEST(DcpReader, HfPieceRefusalsNameThePathOnce) {
  auto piece = [](std::string info) {
    return testing::MakeSafetensors(
        {{"w", Dtype::kF32, {2}}},
        {{"DCP_VERSION", "1.0"}, {"DCP_SHARDING_INFO", std::move(info)}});
  };
  auto overlap =
      OpenCheckpointIn(testing::MemoryDir({{"shard-00001-model-00001-of-00001.safetensors",
                                            piece(R"({"w": {"saved_offsets": [0]}})")},
                                           {"shard-00002-model-00001-of-00001.safetensors",
                                            piece(R"({"w": {"saved_offsets": [1]}})")}}),
                       testing::TestContext());
  ASSERT_FALSE(overlap.ok());
  const std::string& message = overlap.status().message();
  EXPECT_EQ(message.rfind("mem/shard-00001-model-00001-of-00001.safetensors: tensor w: ", 0), 0u)
      << message;
  auto deep = OpenCheckpointIn(
      testing::MemoryDir({{"shard-00001-model-00001-of-00001.safetensors",
                           piece(R"({"w": {"saved_offsets": )" + std::string(100000, '[') +
                                 std::string(100000, ']') + "}}")}}),
      testing::TestContext());
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().message(),
            "mem/shard-00001-model-00001-of-00001.safetensors: DCP_SHARDING_INFO: JSON nested "
            "deeper than 100 levels");
}

// torchtitan saves each step as its own DCP directory (step-N/): a run of them.
TEST(DcpReader, StepDirectoriesAreARun) {
  const fs::path fixture = kFixtures / "dtensor";
  if (!fs::is_directory(fixture)) GTEST_SKIP() << fixture << " is absent (a user's clone)";
  const fs::path root = fs::temp_directory_path() / ("ckptfs_dcp_run." + std::to_string(getpid()));
  fs::remove_all(root);
  for (const char* step : {"step-100", "step-200"}) {
    fs::create_directories(root / step);
    for (const auto& e : fs::directory_iterator(fixture)) {
      if (e.path().filename() != "expected.safetensors") {
        fs::copy_file(e.path(), root / step / e.path().filename());
      }
    }
  }
  fs::create_directories(root / "step-300");  // being written: no .metadata yet
  fs::copy_file(fixture / "__0_0.distcp", root / "step-300" / "__0_0.distcp");
  auto dir = OpenSourceDir(root.string(), testing::TestContext(), {});
  ASSERT_TRUE(dir.ok()) << dir.status().message();
  auto is_run = IsRun(*dir);
  ASSERT_TRUE(is_run.ok()) << is_run.status().message();
  EXPECT_TRUE(*is_run);
  auto run = ListRun(*dir);
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_EQ(run->entries.size(), 2u);
  EXPECT_EQ(run->entries[1].name, "step-200");
  EXPECT_EQ(run->entries[1].step, 200u);
  EXPECT_EQ(run->entries[1].format, "dcp");
  EXPECT_TRUE(run->entries[1].complete) << run->entries[1].why_incomplete;
  EXPECT_EQ(run->latest, "step-200");
  fs::remove_all(root);
}

}  // namespace
}  // namespace ckptfs
