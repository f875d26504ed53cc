// The Keras format: keras::Interpret's names and model by Keras's rules on made trees, the
// file-name and superblock rules runs use, and the table entry (core/checkpoint/
// keras_reader.cc) over the real files Keras 1.2 to 3.15 wrote (../shared/fixtures/keras,
// NOTICE.md, manifest.json; skipped when absent): every dataset a tensor at the offset the
// manifest gives, with its dtype and shape.
#include "core/format/keras/keras.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/checkpoint/checkpoint.h"
#include "core/format/formats.h"
#include "core/run/run_listing.h"
#include "test_util.h"
#include "tests/unit/format_samples.h"

namespace ckptfs {
namespace {

// The table's sample of this format (format_samples.h): Keras 3 weights, as
// ModelCheckpoint(save_weights_only=True) leaves them.
const testing::FormatSample kSample("keras", {{"cp.weights.h5", "not parsed by detect"}});

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(CKPTFS_SOURCE_DIR) / ".." / "shared" / "fixtures" / "keras";

h5::Dataset Floats(std::string path, std::vector<uint64_t> shape, uint64_t offset) {
  h5::Dataset d;
  d.path = std::move(path);
  d.type = h5::TypeClass::kFloat;
  d.type_size = 4;
  d.shape = std::move(shape);
  uint64_t n = 1;
  for (uint64_t s : d.shape) n *= s;
  d.offset = offset;
  d.size = n * 4;
  return d;
}

h5::Group Named(std::string path, std::string name) {
  return h5::Group{std::move(path), {h5::Attribute{"name", name}}};
}

const keras::KerasTensor* ByKey(const keras::KerasModel& m, std::string_view key) {
  for (const keras::KerasTensor& t : m.tensors) {
    if (t.key == key) return &t;
  }
  return nullptr;
}

TEST(KerasInterpret, Keras3NamesAreTheGroupsNameElseThePath) {
  h5::File f;
  f.groups = {h5::Group{"", {}}, Named("layers/dense/vars", "d_0"), h5::Group{"layers/x/vars", {}},
              Named("optimizer/vars", "adam"), Named("vars", "sequential")};
  f.datasets = {Floats("layers/dense/vars/0", {4, 4}, 1000),
                Floats("layers/dense/vars/1", {4}, 2000),
                Floats("layers/x/vars/0", {2}, 3000),  // Keras 3.5: no name
                Floats("optimizer/vars/10", {4}, 4000), Floats("optimizer/vars/9", {4}, 5000)};
  auto m = keras::Interpret({f}, {"cp.weights.h5"});
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->layout, keras::Layout::kKeras3);
  EXPECT_EQ(ByKey(*m, "layers/dense/vars/0")->name, "d_0/0");
  EXPECT_EQ(ByKey(*m, "layers/dense/vars/1")->name, "d_0/1");
  EXPECT_EQ(ByKey(*m, "layers/x/vars/0")->name, "layers/x/vars/0");
  EXPECT_TRUE(ByKey(*m, "layers/x/vars/0")->in_model);
  EXPECT_FALSE(ByKey(*m, "optimizer/vars/10")->in_model);
  EXPECT_EQ(ByKey(*m, "optimizer/vars/10")->name, "optimizer/vars/10");
  EXPECT_EQ(m->metadata["names"]["layers/dense/vars"], "d_0");
  EXPECT_EQ(m->metadata["names"]["vars"], "sequential");
}

TEST(KerasInterpret, ANameTwoGroupsShareFallsBackToThePathForBoth) {
  h5::File f;
  f.groups = {Named("layers/a/layers/dense/vars", "dense"),
              Named("layers/b/layers/dense/vars", "dense")};
  f.datasets = {Floats("layers/a/layers/dense/vars/0", {2}, 100),
                Floats("layers/b/layers/dense/vars/0", {2}, 200)};
  auto m = keras::Interpret({f}, {"x.weights.h5"});
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(ByKey(*m, "layers/a/layers/dense/vars/0")->name, "layers/a/layers/dense/vars/0");
  EXPECT_EQ(ByKey(*m, "layers/b/layers/dense/vars/0")->name, "layers/b/layers/dense/vars/0");
}

TEST(KerasInterpret, LegacyNamesAreWeightNamesJoinedFromSplitAttributes) {
  h5::File f;
  f.groups = {
      h5::Group{"", {{"keras_version", "2.4.0"}, {"model_config", R"({"class_name": "Seq"})"}}},
      h5::Group{"model_weights",
                {{"layer_names0", nlohmann::json::array({"dense_1"})},
                 {"layer_names1", nlohmann::json::array({"dense_2", "gone"})}}},
      h5::Group{"model_weights/dense_1", {{"weight_names", nlohmann::json::array({"w:0"})}}},
      h5::Group{"model_weights/dense_2", {{"weight_names", nlohmann::json::array({"w:0"})}}},
      h5::Group{"optimizer_weights", {}}};
  f.datasets = {Floats("model_weights/dense_1/w:0", {2}, 100),
                Floats("model_weights/dense_2/w:0", {2}, 200),
                Floats("model_weights/dense_2/extra", {2}, 300),
                Floats("optimizer_weights/Variable:0", {2}, 400)};
  auto m = keras::Interpret({f}, {"model.h5"});
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->layout, keras::Layout::kLegacy);
  // One weight name in two layers: LAYER/WEIGHT for both.
  EXPECT_EQ(ByKey(*m, "model_weights/dense_1/w:0")->name, "dense_1/w:0");
  EXPECT_EQ(ByKey(*m, "model_weights/dense_2/w:0")->name, "dense_2/w:0");
  EXPECT_EQ(ByKey(*m, "model_weights/dense_2/extra")->name, "model_weights/dense_2/extra");
  EXPECT_FALSE(ByKey(*m, "optimizer_weights/Variable:0")->in_model);
  EXPECT_EQ(m->metadata["keras_version"], "2.4.0");
  EXPECT_EQ(m->metadata["config"]["class_name"], "Seq");
  EXPECT_EQ(m->metadata["layer_names"], nlohmann::json::array({"dense_1", "dense_2", "gone"}));
}

TEST(KerasInterpret, Bfloat16IsTheMarkedOpaquePair) {
  h5::File f;
  h5::Dataset d;
  d.path = "layers/d/vars/0";
  d.type = h5::TypeClass::kOpaque;
  d.type_size = 2;
  d.shape = {3};
  d.offset = 64;
  d.size = 6;
  d.attributes = {{"dtype", "bfloat16"}};
  f.datasets = {d};
  auto m = keras::Interpret({f}, {"bf.weights.h5"});
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->tensors[0].dtype, Dtype::kBF16);
  f.datasets[0].attributes.clear();
  auto unmarked = keras::Interpret({f}, {"bf.weights.h5"});
  ASSERT_FALSE(unmarked.ok());
  EXPECT_EQ(unmarked.status().message(),
            "bf.weights.h5: dataset layers/d/vars/0 is opaque bytes not marked "
            "dtype=\"bfloat16\"");
}

TEST(KerasInterpret, AChunkedDatasetOrOneInTwoShardsIsRefusedByName) {
  h5::File f;
  f.datasets = {Floats("layers/d/vars/0", {4}, 100)};
  f.datasets[0].problem = "compressed (deflate)";
  auto chunked = keras::Interpret({f}, {"c.weights.h5"});
  ASSERT_FALSE(chunked.ok());
  EXPECT_NE(chunked.status().message().find(
                "c.weights.h5: dataset layers/d/vars/0 cannot be served as it lies (compressed"),
            std::string::npos)
      << chunked.status().message();
  f.datasets[0].problem.clear();
  auto twice = keras::Interpret({f, f}, {"m_00000.weights.h5", "m_00001.weights.h5"});
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().message(),
            "m_00001.weights.h5: dataset layers/d/vars/0 is also in m_00000.weights.h5");
}

TEST(KerasInterpret, ShardedGroupsMergeTheirNames) {
  h5::File a;
  a.groups = {Named("layers/dense/vars", "dense")};
  a.datasets = {Floats("layers/dense/vars/0", {4}, 100)};
  h5::File b;
  b.groups = {h5::Group{"layers/dense/vars", {}}};
  b.datasets = {Floats("layers/dense/vars/1", {4}, 100)};
  auto m = keras::Interpret({a, b}, {"m_00000.weights.h5", "m_00001.weights.h5"});
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(ByKey(*m, "layers/dense/vars/1")->name, "dense/1");
  EXPECT_EQ(ByKey(*m, "layers/dense/vars/1")->part, 1u);
}

TEST(KerasNames, EpochInModelCheckpointNames) {
  EXPECT_EQ(keras::EpochInName("weights.10-0.38.weights.h5"), 10u);
  EXPECT_EQ(keras::EpochInName("weights.02-0.41.weights.h5"), 2u);
  EXPECT_EQ(keras::EpochInName("model_3.keras"), 3u);
  EXPECT_EQ(keras::EpochInName("ckpt-e07-loss1e-3.h5"), 7u);
  EXPECT_EQ(keras::EpochInName("trial_0074"), 74u);
  EXPECT_EQ(keras::EpochInName("best.weights.h5"), std::nullopt);
  EXPECT_EQ(keras::EpochInName("weights.0.41.weights.h5"), std::nullopt);
  EXPECT_EQ(keras::EpochInName("run_2024-05-01.keras"), std::nullopt);
  EXPECT_EQ(keras::EpochInName("e99999999999999999999999.keras"), std::nullopt);
}

TEST(KerasNames, ShardFilesArePlainNamesEachOnce) {
  auto files = keras::ShardFiles(
      R"({"metadata": {"total_size": 10}, "weight_map": {"/layers/dense/vars": ["m_00000.weights.h5", "m_00001.weights.h5"], "/vars": "m_00000.weights.h5"}})",
      "m.weights.json");
  ASSERT_TRUE(files.ok()) << files.status().message();
  EXPECT_EQ(*files, (std::vector<std::string>{"m_00000.weights.h5", "m_00001.weights.h5"}));
  auto out = keras::ShardFiles(R"({"weight_map": {"/vars": "../secret.h5"}})", "m.weights.json");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(),
            "m.weights.json: weight_map names \"../secret.h5\", not a plain file name");
  EXPECT_FALSE(keras::ShardFiles("[]", "m.weights.json").ok());
}

TEST(KerasNames, SuperblockEndTellsASaveInProgress) {
  std::vector<uint8_t> head(64, 0);
  const uint8_t sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  std::copy(sig, sig + 8, head.begin());
  head[13] = 8;  // size of offsets
  head[40] = 0x00;
  head[41] = 0x08;  // end of file address 2048
  EXPECT_EQ(keras::SuperblockProblem(head, 2048), "");
  EXPECT_NE(keras::SuperblockProblem(head, 850152).find("still being written"), std::string::npos);
  EXPECT_NE(keras::SuperblockProblem(head, 1000).find("shorter than"), std::string::npos);
  head[1] = 'X';
  EXPECT_EQ(keras::SuperblockProblem(head, 2048), "no HDF5 signature at its start");
}

Dtype ManifestDtype(const std::string& numpy) {
  if (numpy == "<f4") return Dtype::kF32;
  if (numpy == "<i8") return Dtype::kI64;
  ADD_FAILURE() << "no dtype for " << numpy;
  return Dtype::kU8;
}

nlohmann::json Manifest() {
  std::ifstream in(kFixtures / "manifest.json");
  return nlohmann::json::parse(in);
}

// Every fixture: each dataset is a tensor keyed by its path, at the manifest's offset.
TEST(KerasReader, EveryFixtureDatasetIsATensorAtItsOffset) {
  if (!fs::exists(kFixtures / "manifest.json")) {
    GTEST_SKIP() << kFixtures << " is absent (a user's clone)";
  }
  for (const nlohmann::json& entry : Manifest()) {
    const std::string file = entry["file"];
    SCOPED_TRACE(file);
    auto ckpt = OpenCheckpoint((kFixtures / file).string(), testing::TestContext());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    EXPECT_EQ(ckpt->format, FormatNamed("keras"));
    const std::span<const std::string> keys = TensorKeys(*ckpt);
    ASSERT_EQ(keys.size(), ckpt->tensors.size());
    ASSERT_EQ(ckpt->tensors.size(), entry["datasets"].size());
    for (const nlohmann::json& d : entry["datasets"]) {
      const std::string path = d["name"];
      SCOPED_TRACE(path);
      const auto at = std::find(keys.begin(), keys.end(), path);
      ASSERT_NE(at, keys.end());
      const Tensor& t = ckpt->tensors[static_cast<size_t>(at - keys.begin())];
      EXPECT_EQ(t.offset, d["offset_in_file"].get<uint64_t>());
      EXPECT_EQ(t.size, d["nbytes"].get<uint64_t>());
      EXPECT_EQ(t.shape, d["shape"].get<std::vector<uint64_t>>());
      EXPECT_EQ(t.dtype, ManifestDtype(d["dtype"]));
      EXPECT_EQ(t.in_model,
                !path.starts_with("optimizer/") && !path.starts_with("optimizer_weights/"));
    }
    const auto lines = FormatNamed("keras")->inspect(*ckpt);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0].first, "keras");
  }
}

TEST(KerasReader, NamesFollowTheRule) {
  const fs::path cp = kFixtures / "BigPauli-deep-learning-challenge/training/cp.weights.h5";
  const fs::path legacy = kFixtures / "BigPauli-deep-learning-challenge/AlphabetSoupCharity.h5";
  if (!fs::exists(cp)) GTEST_SKIP() << kFixtures << " is absent (a user's clone)";
  auto k3 = OpenCheckpoint(cp.string(), testing::TestContext());
  ASSERT_TRUE(k3.ok()) << k3.status().message();
  std::vector<std::string> model;
  for (const Tensor& t : k3->tensors) {
    if (t.in_model) model.push_back(t.name);
  }
  EXPECT_EQ(model, (std::vector<std::string>{"dense/0", "dense/1", "dense_1/0", "dense_1/1",
                                             "dense_2/0", "dense_2/1"}));
  EXPECT_EQ(k3->model.tensors, 6u);
  auto old = OpenCheckpoint(legacy.string(), testing::TestContext());
  ASSERT_TRUE(old.ok()) << old.status().message();
  EXPECT_NE(std::find_if(old->tensors.begin(), old->tensors.end(),
                         [](const Tensor& t) { return t.name == "sequential/dense/kernel"; }),
            old->tensors.end());
  const auto state = nlohmann::json::parse(old->state_json);
  EXPECT_EQ(state["keras_version"], "3.6.0");
  EXPECT_EQ(state["config"]["class_name"], "Sequential");
}

// ModelCheckpoint's files are a run, latest by the epoch in their names; one being written
// (its superblock's end short of the file) is no latest.
TEST(KerasReader, ModelCheckpointFilesAreARunLatestByEpoch) {
  const fs::path cp = kFixtures / "BigPauli-deep-learning-challenge/training/cp.weights.h5";
  if (!fs::exists(cp)) GTEST_SKIP() << kFixtures << " is absent (a user's clone)";
  const fs::path root =
      fs::temp_directory_path() / ("ckptfs_keras_run." + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  for (const char* name :
       {"weights.02-0.41.weights.h5", "weights.10-0.38.weights.h5", "weights.09-0.39.weights.h5"}) {
    fs::copy_file(cp, root / name);
  }
  auto dir = OpenSourceDir(root.string(), testing::TestContext(), {});
  ASSERT_TRUE(dir.ok()) << dir.status().message();
  auto run = ListRun(*dir);
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_EQ(run->entries.size(), 3u);
  EXPECT_EQ(run->latest, "weights.10-0.38.weights.h5");
  EXPECT_EQ(run->entries[0].format, "keras");
  // A save in progress: the superblock still says the file ends at 2048.
  {
    std::ifstream in(cp, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    bytes[40] = 0x00;
    bytes[41] = 0x08;
    for (int i = 42; i < 48; ++i) bytes[static_cast<size_t>(i)] = 0;
    std::ofstream(root / "weights.11-0.37.weights.h5", std::ios::binary) << bytes;
  }
  auto dir2 = OpenSourceDir(root.string(), testing::TestContext(), {});
  ASSERT_TRUE(dir2.ok());
  auto run2 = ListRun(*dir2);
  ASSERT_TRUE(run2.ok()) << run2.status().message();
  EXPECT_EQ(run2->latest, "weights.10-0.38.weights.h5");
  fs::remove_all(root);
}

}  // namespace
}  // namespace ckptfs
