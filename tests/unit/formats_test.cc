// The format table (core/format/formats.h) and the SourceDir seam it walks: every
// entry is complete and distinct, each format claims its own minimal checkpoint and no
// other's, precedence is as documented, names learnt from contents are asked for
// (a server cannot list), and a child directory stays beneath SOURCE.
#include "core/format/formats.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/checkpoint/hf_layout.h"
#include "core/checkpoint/model.h"
#include "core/format/tf/tf_state.h"
#include "core/source/source_dir.h"
#include "tests/unit/format_samples.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

namespace fs = std::filesystem;
using testing::IndexJson;
using testing::MakeSafetensors;
using testing::MemoryDir;
using testing::TestContext;

const std::string kA = MakeSafetensors({{"a", Dtype::kF32, {2}}});

// The entry whose detect claims `dir`, by the table's precedence; "" if none.
std::string Winner(const SourceDir& dir) {
  const FormatReader* winner = nullptr;
  std::optional<Claim> best;
  for (const FormatReader& f : Formats()) {
    auto claim = f.detect(dir);
    EXPECT_TRUE(claim.ok()) << f.name << ": " << claim.status().message();
    if (!claim.ok() || !*claim || (best && (*claim)->rank >= best->rank)) continue;
    winner = &f;
    best = **claim;
  }
  return winner ? std::string(winner->name) : "";
}

TEST(FormatTable, EveryEntryIsCompleteAndDistinct) {
  ASSERT_GE(Formats().size(), 2u);
  std::set<std::string_view> names;
  for (const FormatReader& f : Formats()) {
    SCOPED_TRACE(std::string(f.name));
    EXPECT_FALSE(f.name.empty());
    EXPECT_FALSE(f.title.empty());
    EXPECT_FALSE(f.looks_for.empty());
    // DeepSpeed's tags are directories only: no file SOURCE is one.
    EXPECT_EQ(f.file_kinds.empty(), f.name == "deepspeed");
    EXPECT_TRUE(names.insert(f.name).second) << "names must be unique";
    EXPECT_FALSE(f.probe_names.empty()) << "a server cannot list: probe names are needed";
    ASSERT_NE(f.detect, nullptr);
    ASSERT_NE(f.read, nullptr);
    ASSERT_NE(f.accepts_file, nullptr);
    EXPECT_EQ(FormatNamed(f.name), &f) << "one entry per name";
    auto none = f.detect(MemoryDir({}));
    ASSERT_TRUE(none.ok()) << none.status().message();
    EXPECT_FALSE(none->has_value()) << "an empty directory is no checkpoint";
    auto others_only = f.detect(MemoryDir({{"config.json", "{}"}, {"README.md", "x"}}));
    ASSERT_TRUE(others_only.ok());
    EXPECT_FALSE(others_only->has_value());
  }
}

// (issue 25) What only one format knows is its entry's: the model rule, the keys it stores
// tensors under, inspect's lines. Shared code asks the entry of the checkpoint's format.
TEST(FormatTable, ModelRuleKeysAndInspectLinesAreTheEntrys) {
  auto checkpoint = [](const FormatReader& format) {
    Checkpoint ckpt;
    ckpt.format = &format;
    // A torch container `model` (a dict) holding one tensor, and one tensor at the top.
    ckpt.tensors.resize(2);
    ckpt.tensors[0].name = "model.w";
    ckpt.tensors[0].top_is_dict = true;
    ckpt.tensors[0].top_key_size = 5;
    ckpt.tensors[1].name = "step";
    auto tf = std::make_unique<TfState>();
    tf->keys = {"model/w", "step"};
    ckpt.format_state = std::move(tf);
    ckpt.state_json = R"({"zero": {"stage": 2, "dp_world_size": 2}})";
    return ckpt;
  };
  for (const FormatReader& f : Formats()) {
    SCOPED_TRACE(std::string(f.name));
    ASSERT_NE(f.model.top_key, nullptr) << "every entry says what its sub-trees are";
    Checkpoint ckpt = checkpoint(f);
    // Keras names (`dense/0`, `dense_1/kernel:0`) hold no sub-tree a key could cut.
    EXPECT_EQ(f.model.top_key(ckpt, 0), f.name == "keras" ? "" : "model");
    EXPECT_EQ(f.model.top_key(ckpt, 1), "");
    // Without a key, the entry's rule: DeepSpeed's consolidated `model`, torch's and DCP's
    // first of kTorchModelKeys; every other format keeps every tensor.
    ASSERT_TRUE(SelectModel(ckpt, std::nullopt, "SRC").ok());
    const bool narrows = f.name == "torch" || f.name == "deepspeed" || f.name == "dcp";
    EXPECT_EQ(ckpt.model.whole, !narrows);
    EXPECT_EQ(ckpt.model.key, narrows ? "model" : "");
    EXPECT_EQ(ckpt.tensors[1].in_model, !narrows);
    // Only TF stores tensors under keys that are not their names.
    EXPECT_EQ(TensorKeys(ckpt).size(), f.name == "tensorflow" ? 2u : 0u);
    // Only DeepSpeed has an inspect line of its own: its ZeRO summary.
    const auto lines = f.inspect ? f.inspect(ckpt) : decltype(f.inspect(ckpt))();
    if (f.name == "deepspeed") {
      ASSERT_EQ(lines.size(), 1u);
      EXPECT_EQ(lines[0].first, "zero");
      EXPECT_NE(lines[0].second.find("stage 2"), std::string::npos) << lines[0].second;
    } else {
      EXPECT_TRUE(lines.empty());
    }
  }
}

// (issue 25) How a run sees a format's checkpoints is the entry's too: DeepSpeed's tag
// directories inside another checkpoint, rank files that are one checkpoint, and the
// folders (split's key files, a ZeRO tag) a run entry's signature covers.
TEST(FormatTable, RunRulesAreTheEntrys) {
  const FormatReader* deepspeed = FormatNamed("deepspeed");
  ASSERT_NE(deepspeed, nullptr);
  EXPECT_EQ(FormatNamed("no such format"), nullptr);
  ASSERT_NE(deepspeed->run.nested_dir, nullptr);
  EXPECT_TRUE(deepspeed->run.nested_dir("global_step1000"));
  for (std::string_view not_tag : {"global_step", "global_step1a", "xglobal_step1", "step1"}) {
    EXPECT_FALSE(deepspeed->run.nested_dir(not_tag)) << not_tag;
  }
  for (const FormatReader& f : Formats()) {
    SCOPED_TRACE(std::string(f.name));
    EXPECT_EQ(f.run.nested_dir != nullptr, f.name == "deepspeed");
    EXPECT_EQ(f.run.torch_files_are_one, f.name == "deepspeed" || f.name == "dcp");
    EXPECT_EQ(f.run.signs_claimed_folder, f.name == "deepspeed" || f.name == "split");
    // The records a run keeps (TF's state file, DeepSpeed's `latest`) are read by their
    // format's entry; HF Trainer's final model is safetensors or torch weights.
    EXPECT_EQ(f.run.record != nullptr, f.name == "tensorflow" || f.name == "deepspeed");
    EXPECT_EQ(f.run.claim_is_record, f.name == "tensorflow");
    // Keras's ModelCheckpoint files are entries of their own, with epochs in their names.
    EXPECT_EQ(f.run.entry_file != nullptr, f.name == "keras");
    EXPECT_EQ(f.run.step != nullptr, f.name == "keras");
    EXPECT_EQ(f.run.final_model, f.name == "safetensors" || f.name == "torch");
  }
  // The records, read from a directory: DeepSpeed's names its tag as latest, a directory
  // written before it; TF's names its prefixes, each an entry made of its files.
  std::vector<std::string> skipped;
  auto ds = deepspeed->run.record(
      MemoryDir({{"latest", "global_step20\n"}, {"zero_to_fp32.py", "x"}}), skipped);
  ASSERT_TRUE(ds.ok()) << ds.status().message();
  ASSERT_TRUE(ds->has_value());
  EXPECT_EQ((*ds)->latest, "global_step20");
  EXPECT_TRUE((*ds)->latest_is_dir);
  EXPECT_TRUE((*ds)->entries.empty());
  auto bad = deepspeed->run.record(MemoryDir({{"latest", "../secret_tag"}}), skipped);
  ASSERT_TRUE(bad.ok());
  ASSERT_TRUE(bad->has_value());
  EXPECT_FALSE((*bad)->problem.ok()) << "a tag that is no plain name refuses";
  EXPECT_EQ((*bad)->latest, "");
  const FormatReader& tf = *FormatNamed("tensorflow");
  auto state = tf.run.record(
      MemoryDir({{"checkpoint",
                  "model_checkpoint_path: \"ckpt-2\"\nall_model_checkpoint_paths: \"ckpt-1\"\n"
                  "all_model_checkpoint_paths: \"ckpt-2\"\n"},
                 {"ckpt-1.index", "x"},
                 {"ckpt-2.index", "x"},
                 {"ckpt-3.index", "x"}}),
      skipped);
  ASSERT_TRUE(state.ok()) << state.status().message();
  ASSERT_TRUE(state->has_value());
  EXPECT_EQ((*state)->latest, "ckpt-2");
  ASSERT_EQ((*state)->entries.size(), 3u);
  EXPECT_EQ((*state)->entries[2].name, "ckpt-3");
  EXPECT_FALSE((*state)->entries[2].named) << "a prefix the state file does not name yet";
  EXPECT_EQ((*state)->entries[0].key_file, "ckpt-1.index");
  EXPECT_TRUE(skipped.size() == 1) << "only the bad tag was said";
}

TEST(FormatTable, EachFormatClaimsItsOwnCheckpointAndNoOther) {
  // Each format's own test file registers its sample (format_samples.h).
  const auto& minimal = testing::FormatSamples();
  for (const FormatReader& f : Formats()) {
    ASSERT_TRUE(minimal.count(std::string(f.name))) << "add a minimal " << f.name << " checkpoint";
  }
  for (const auto& [format, files] : minimal) {
    SCOPED_TRACE(format);
    const SourceDir dir = MemoryDir(files);
    for (const FormatReader& f : Formats()) {
      auto claim = f.detect(dir);
      ASSERT_TRUE(claim.ok()) << claim.status().message();
      EXPECT_EQ(claim->has_value(), f.name == format) << f.name;
    }
    EXPECT_EQ(Winner(dir), format);
  }
  // A minimal safetensors checkpoint opens through the table as that format.
  auto ckpt = OpenCheckpointIn(MemoryDir(minimal.at("safetensors")), TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_EQ(FormatOf(*ckpt).name, "safetensors");
  EXPECT_EQ(ckpt->tensors.size(), 1u);
}

TEST(FormatTable, PrecedenceIndexBeatsLoneFileThenTableOrder) {
  const std::string st_index = IndexJson({{"a", "1.safetensors"}});
  const std::string pt_index = IndexJson({{"a", "1.bin"}});
  // Any index beats a lone weights file, whatever the format.
  EXPECT_EQ(
      Winner(MemoryDir(
          {{"pytorch_model.bin.index.json", pt_index}, {"1.bin", "x"}, {"model.safetensors", kA}})),
      "torch");
  // Between two indexes, or two lone files, the earlier entry.
  EXPECT_EQ(Winner(MemoryDir({{"pytorch_model.bin.index.json", pt_index},
                              {"model.safetensors.index.json", st_index}})),
            "safetensors");
  EXPECT_EQ(Winner(MemoryDir({{"pytorch_model.bin", "x"}, {"model.safetensors", kA}})),
            "safetensors");
  // An ambiguity is refused only when its format would win.
  auto ambiguous_loser = OpenCheckpointIn(
      MemoryDir({{"1.safetensors", kA},
                 {"model.safetensors.index.json", IndexJson({{"a", "1.safetensors"}})},
                 {"a.bin", "x"},
                 {"b.bin", "y"}}),
      TestContext());
  EXPECT_TRUE(ambiguous_loser.ok()) << ambiguous_loser.status().message();
  auto ambiguous_winner = OpenCheckpointIn(
      MemoryDir({{"1.safetensors", kA}, {"2.safetensors", kA}, {"pytorch_model.bin", "x"}}),
      TestContext());
  ASSERT_FALSE(ambiguous_winner.ok());
  EXPECT_NE(ambiguous_winner.status().message().find("2 weight files"), std::string::npos);
}

// (issue 23) HF Trainer's own files are never weights, whatever their contents: a Trainer
// checkpoint whose model is elsewhere (a ZeRO tag) is not "N weight files but no index json",
// and a lone model file beside them is the checkpoint.
TEST(FormatTable, TrainerFilesAreNeverWeights) {
  std::map<std::string, std::string> trainer = {
      {"rng_state.pth", "x"},       {"rng_state_1.pth", "x"}, {"training_args.bin", "x"},
      {"scheduler.pt", "x"},        {"optimizer.pt", "x"},    {"scaler.pt", "x"},
      {"rng_state_0.pth.zst", "x"}, {"config.json", "{}"}};
  EXPECT_EQ(Winner(MemoryDir(trainer)), "");
  trainer["model.pt"] = "x";
  auto claim = FormatNamed("torch")->detect(MemoryDir(trainer));
  ASSERT_TRUE(claim.ok() && *claim) << claim.status().message();
  EXPECT_TRUE((*claim)->problem.ok()) << (*claim)->problem.message();
  EXPECT_EQ((*claim)->file, "model.pt");
  // A SOURCE naming one of them asked for it: read as any torch.save file.
  SourceDir named = MemoryDir({{"optimizer.pt.zst", "x"}});
  named.named = "optimizer.pt.zst";
  claim = FormatNamed("torch")->detect(named);
  ASSERT_TRUE(claim.ok() && *claim) << claim.status().message();
  EXPECT_EQ((*claim)->file, "optimizer.pt");
  for (const char* name : {"rng_state.pth", "rng_state_3.pth", "training_args.bin", "scaler.pt.zst",
                           "optimizer.pt", "scheduler.pt"}) {
    EXPECT_TRUE(IsHfTrainerFile(name)) << name;
  }
  for (const char* name : {"pytorch_model.bin", "model.pt", "rng.pth", "optimizer_0.pt"}) {
    EXPECT_FALSE(IsHfTrainerFile(name)) << name;
  }
}

TEST(FormatTable, ProbeNamesAreEveryEntrysOnce) {
  const std::vector<std::string> probes = ProbeNames();
  EXPECT_EQ(std::set<std::string>(probes.begin(), probes.end()).size(), probes.size());
  for (const FormatReader& f : Formats()) {
    for (std::string_view name : f.probe_names) {
      EXPECT_NE(std::find(probes.begin(), probes.end(), name), probes.end()) << name;
    }
  }
  for (const char* name : {"model.safetensors.index.json", "pytorch_model.bin.index.json",
                           "model.safetensors", "pytorch_model.bin.zst", "config.json"}) {
    EXPECT_NE(std::find(probes.begin(), probes.end(), name), probes.end()) << name;
  }
}

TEST(FormatTable, NoClaimNamesWhatEachFormatLooksFor) {
  auto none = OpenCheckpointIn(MemoryDir({{"config.json", "{}"}}), TestContext());
  ASSERT_FALSE(none.ok());
  for (const FormatReader& f : Formats()) {
    EXPECT_NE(none.status().message().find(f.looks_for), std::string::npos) << f.name;
  }
}

// A directory that cannot list (a server): only the index is known; the shards it names,
// one stored as NAME.zst, are found by asking.
TEST(SourceDirSeam, NamesLearntFromAnIndexAreAskedFor) {
  std::map<std::string, std::string> stored = {
      {"model.safetensors.index.json", IndexJson({{"a", "1.safetensors"}, {"b", "2.safetensors"}})},
      {"1.safetensors", kA},
      {"2.safetensors", MakeSafetensors({{"b", Dtype::kU8, {3}}})}};
  SourceDir dir = MemoryDir(stored);
  dir.files = {"model.safetensors.index.json"};
  auto asked = std::make_shared<std::vector<std::string>>();
  dir.probe = [stored, asked](const std::string& name) -> Result<bool> {
    asked->push_back(name);
    return stored.count(name) > 0;
  };
  auto ckpt = OpenCheckpointIn(dir, TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  ASSERT_EQ(ckpt->shards.size(), 2u);
  EXPECT_EQ(ckpt->tensors.size(), 2u);
  EXPECT_NE(std::find(asked->begin(), asked->end(), "2.safetensors"), asked->end());
  // A shard the store does not have is missing, named with the index that names it.
  stored.erase("2.safetensors");
  SourceDir gone = MemoryDir(stored);
  gone.files = {"model.safetensors.index.json"};
  gone.probe = [stored](const std::string& name) -> Result<bool> { return stored.count(name) > 0; };
  auto missing = OpenCheckpointIn(gone, TestContext());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(),
            "2.safetensors: shard named in model.safetensors.index.json is missing");
}

class LocalSeamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "ckptfs-seam-XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    root_ = fs::canonical(templ).string();
    fs::create_directories(root_ + "/src/variables");
    fs::create_directories(root_ + "/outside");
    Write(root_ + "/src/saved_model.pb", "pb");
    Write(root_ + "/src/variables/variables.index", "index");
    Write(root_ + "/outside/secret", "secret");
  }
  void TearDown() override { fs::remove_all(root_); }
  static void Write(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
  }
  std::string root_;
};

TEST_F(LocalSeamTest, ChildDirectoryStaysBeneathSource) {
  auto root = LocalDirectory::Open(root_ + "/src");
  ASSERT_TRUE(root.ok());
  auto dir = ListLocalDir(*root);
  ASSERT_TRUE(dir.ok()) << dir.status().message();
  EXPECT_EQ(dir->files, std::vector<std::string>{"saved_model.pb"});
  auto variables = dir->OpenDir("variables");
  ASSERT_TRUE(variables.ok()) << variables.status().message();
  EXPECT_EQ(variables->files, std::vector<std::string>{"variables.index"});
  auto index = variables->open("variables.index");
  ASSERT_TRUE(index.ok());
  EXPECT_EQ((*index)->Size(), 5u);
  // A link from the child to a file of SOURCE is inside; one out of SOURCE is not.
  fs::create_symlink("../saved_model.pb", root_ + "/src/variables/up");
  fs::create_symlink(root_ + "/outside/secret", root_ + "/src/variables/out");
  fs::create_directory_symlink(root_ + "/outside", root_ + "/src/away");
  EXPECT_TRUE(variables->open("up").ok());
  auto out = variables->open("out");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("outside"), std::string::npos);
  auto away = dir->OpenDir("away");
  ASSERT_FALSE(away.ok());
  EXPECT_NE(away.status().message().find("away: symbolic link leads outside"), std::string::npos);
  auto file = dir->OpenDir("saved_model.pb");
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("not a directory"), std::string::npos);
  EXPECT_FALSE(dir->OpenDir("..").ok());
  EXPECT_FALSE(dir->OpenDir("nothing").ok());
}

// A path SOURCE that is no file reaches the table with `named` set; with no format
// claiming it, the refusal is the usual one.
TEST_F(LocalSeamTest, PathThatIsNoFileGoesThroughTheTable) {
  auto missing = OpenCheckpoint(root_ + "/src/ckpt-3", TestContext());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
  EXPECT_EQ(missing.status().message(), root_ + "/src/ckpt-3: no such file or directory");
  auto no_dir = OpenCheckpoint(root_ + "/nowhere/ckpt-3", TestContext());
  ASSERT_FALSE(no_dir.ok());
  EXPECT_EQ(no_dir.status().message(), root_ + "/nowhere/ckpt-3: no such file or directory");
  auto not_weights = OpenCheckpoint(root_ + "/src/saved_model.pb", TestContext());
  ASSERT_FALSE(not_weights.ok());
  EXPECT_NE(not_weights.status().message().find("saved_model.pb: not a .safetensors, .bin"),
            std::string::npos);
  // A named lone file beside others is that file alone.
  Write(root_ + "/src/model.safetensors", kA);
  auto single = OpenCheckpoint(root_ + "/src/model.safetensors", TestContext());
  ASSERT_TRUE(single.ok()) << single.status().message();
  EXPECT_TRUE(single->others.empty());
  EXPECT_EQ(single->shards.size(), 1u);
}

}  // namespace
}  // namespace ckptfs
