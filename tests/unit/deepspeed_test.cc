// DeepSpeed ZeRO tags (core/format/deepspeed/zero.h, core/format/deepspeed/deepspeed_reader.cc)
// over files from tests/deepspeed/make_deepspeed_checkpoint.py: every configuration of
// tests/unit/deepspeed_cases.py (stages 1-3, 1-4 ranks, bf16/fp16, round-robin, sub-groups,
// frozen, tied, exclude_frozen, two groups, dirty padding, ZeroStageEnum by getattr) opened
// through the format table, each tensor's bytes read through the Checkpoint's ranges and
// compared with the generator's ground truth (expected.pt, dumped raw by the helper); then
// each refusal.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "core/checkpoint/assembly.h"
#include "core/checkpoint/checkpoint.h"
#include "core/format/deepspeed/zero.h"
#include "core/format/formats.h"
#include "test_util.h"
#include "tests/unit/format_samples.h"

namespace ckptfs {
namespace {

// The table's sample of this format (format_samples.h): a ZeRO tag, its model states file
// naming the rest (detect reads nothing).
const testing::FormatSample kSample("deepspeed",
                                    {{"mp_rank_00_model_states.pt", "not parsed by detect"},
                                     {"bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt", "x"}});

namespace fs = std::filesystem;

const std::string kCases = CKPTFS_SOURCE_DIR "/tests/unit/deepspeed_cases.py";

// The helper's output, written once per test binary; empty when torch is missing.
const fs::path& Root() {
  static const fs::path root = [] {
    const fs::path dir =
        fs::temp_directory_path() / ("ckptfs-deepspeed-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    const std::string cmd = "/usr/bin/python3 " + kCases + " " + dir.string();
    const int rc = std::system(cmd.c_str());
    if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) return fs::path();
    EXPECT_EQ(rc, 0) << cmd;
    return dir;
  }();
  return root;
}

struct Cleanup {
  ~Cleanup() {
    std::error_code ec;
    if (!Root().empty()) fs::remove_all(Root(), ec);
  }
};

#define REQUIRE_CASES()                                                                    \
  if (Root().empty()) GTEST_SKIP() << "/usr/bin/python3 has no torch: no DeepSpeed files"; \
  static Cleanup cleanup

std::string ReadFile(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

fs::path Tag(const std::string& c) { return Root() / c / ReadFile(Root() / c / "tag"); }

Result<Checkpoint> Open(const fs::path& tag) {
  return OpenCheckpoint(tag.string(), testing::TestContext());
}

// The bytes tensor `t` has, read through its ranges.
std::string BytesOf(const Checkpoint& ckpt, const Tensor& t) {
  std::string out;
  StoredRange one;
  for (const StoredRange& r : RangesOf(ckpt, t, one)) {
    std::string buf(r.size, '\0');
    EXPECT_TRUE(ckpt.shards[r.shard]
                    .source->ReadAt(r.offset, {reinterpret_cast<uint8_t*>(buf.data()), buf.size()})
                    .ok());
    out += buf;
  }
  return out;
}

std::string Refusal(const fs::path& tag) {
  Result<Checkpoint> ckpt = Open(tag);
  EXPECT_FALSE(ckpt.ok()) << tag;
  if (ckpt.ok()) return "";
  EXPECT_EQ(ckpt.status().message().find('\n'), std::string::npos);
  return ckpt.status().message();
}

const char* const kMatrix[] = {"s1_r1_bf16",
                               "s1_r3_fp16",
                               "s1_r4_rr_groups",
                               "s2_r2_bf16",
                               "s2_r2_fp16_frozen_tied",
                               "s2_r3_rr_dirty",
                               "s2_r4_groups_frozen",
                               "s2_r2_exclude_frozen",
                               "s2_r1_getattr",
                               "s3_r1_bf16",
                               "s3_r2_fp16_tied",
                               "s3_r3_subgroups_dirty",
                               "s3_r4_frozen_groups",
                               "s3_r2_getattr_frozen",
                               "s2_r2_bf16_step3",
                               "s3_r2_bf16",
                               "pipe_r2_bf16",
                               "pipe_r3_fp16_tp2",
                               "pipe0_r2_fp16",
                               "pipe0_r1_bf16_noaxis",
                               "pipe0_r2_bf16_tp2"};

TEST(DeepSpeedZero, EveryConfigurationMatchesTheGroundTruth) {
  REQUIRE_CASES();
  for (const char* c : kMatrix) {
    SCOPED_TRACE(c);
    Result<Checkpoint> ckpt = Open(Tag(c));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    EXPECT_EQ(ckpt->format, FormatNamed("deepspeed"));
    // Pipelines with tensor parallelism keep each TP rank a sub-tree: no one model.
    const bool tp = std::string_view(c).find("tp2") != std::string_view::npos;
    EXPECT_EQ(ckpt->model.key, tp ? "" : "model");
    const auto manifest = nlohmann::json::parse(ReadFile(Root() / c / "raw" / "manifest.json"));
    std::set<std::string> want_names;
    size_t model_tensors = 0;
    for (const auto& entry : manifest) {
      const std::string name = entry[0].get<std::string>();
      SCOPED_TRACE(name);
      want_names.insert(name);
      model_tensors += name.rfind("model.", 0) == 0 ? 1 : 0;
      const Tensor* t = FindTensor(*ckpt, name);
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(DtypeName(t->dtype), entry[1].get<std::string>());
      EXPECT_EQ(t->shape, entry[2].get<std::vector<uint64_t>>());
      EXPECT_TRUE(t->contiguous());
      const std::string want =
          ReadFile(Root() / c / "raw" / (std::to_string(entry[3].get<int>()) + ".bin"));
      EXPECT_EQ(t->size, want.size());
      EXPECT_TRUE(BytesOf(*ckpt, *t) == want) << "bytes differ";
    }
    // Nothing more in the model, the module or the moments than the ground truth has.
    for (const Tensor& t : ckpt->tensors) {
      const bool ours = t.name.rfind("model", 0) == 0 || t.name.rfind("optimizer.", 0) == 0 ||
                        t.name.rfind("module.", 0) == 0;
      if (ours) {
        EXPECT_TRUE(want_names.count(t.name)) << "unexpected " << t.name;
      }
    }
    if (!tp) {
      EXPECT_EQ(ckpt->model.tensors, model_tensors);
    }
    // Zero-copy: every range lies in a rank file; a trainable param of several ranks has
    // one range per rank it spans (stage 3: per rank holding a part of it).
    for (const StoredRange& r : ckpt->ranges) {
      EXPECT_LE(r.offset + r.size, ckpt->shards[r.shard].source->Size());
    }
  }
}

// Tied parameters (and their moments) are the owner's storage under a second name.
TEST(DeepSpeedZero, TiedParamsShareTheOwnersStorage) {
  REQUIRE_CASES();
  for (const char* c : {"s2_r2_fp16_frozen_tied", "s3_r2_fp16_tied"}) {
    SCOPED_TRACE(c);
    Result<Checkpoint> ckpt = Open(Tag(c));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    for (const char* prefix : {"model.", "optimizer.exp_avg.", "optimizer.exp_avg_sq."}) {
      const Tensor* alias = FindTensor(*ckpt, std::string(prefix) + "head.weight");
      const Tensor* owner = FindTensor(*ckpt, std::string(prefix) + "embed.weight");
      ASSERT_TRUE(alias && owner) << prefix;
      EXPECT_EQ(alias->storage, owner->storage) << prefix;
    }
  }
}

// Stage 3 over 4 ranks: a param is one range per rank (merged when ranks' chunks touch).
TEST(DeepSpeedZero, Stage3ParamIsAChunkOfEveryRank) {
  REQUIRE_CASES();
  Result<Checkpoint> ckpt = Open(Tag("s3_r4_frozen_groups"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  const Tensor* t = FindTensor(*ckpt, "model.fc1.weight");
  ASSERT_NE(t, nullptr);
  StoredRange one;
  std::set<uint32_t> shards;
  for (const StoredRange& r : RangesOf(*ckpt, *t, one)) shards.insert(r.shard);
  EXPECT_EQ(shards.size(), 4u);
  EXPECT_EQ(ckpt->storages[t->storage].range_count, 4u);
}

// .ckptfs/metadata.json: the model states' values, DeepSpeed's objects as data, and "zero".
TEST(DeepSpeedZero, StateHoldsConfigScalerAndClientState) {
  REQUIRE_CASES();
  Result<Checkpoint> ckpt = Open(Tag("s1_r3_fp16"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  const auto state = nlohmann::json::parse(ckpt->state_json);
  EXPECT_EQ(state["global_steps"], 2);
  EXPECT_EQ(state["ds_version"], "0.19.0");
  EXPECT_EQ(state["ds_config"]["zero_optimization"]["stage"], 1);
  // argparse.Namespace and numpy's array in the opaque form of docs/formats.md.
  EXPECT_EQ(state["args"]["__object__"], "argparse.Namespace");
  EXPECT_EQ(state["args"]["state"]["model"], "tiny");
  EXPECT_EQ(state["rng_state"]["numpy"][1]["__object__"], "numpy.ndarray");
  EXPECT_EQ(state["rng_state"]["numpy"][1]["shape"], nlohmann::json::array({624}));
  EXPECT_EQ(state["sparse_tensor_module_names"], nlohmann::json::array());  // a set
  EXPECT_EQ(state["zero"]["stage"], 1);
  EXPECT_EQ(state["zero"]["dp_world_size"], 3);
  EXPECT_EQ(state["zero"]["master_dtype"], "F32");
  EXPECT_EQ(state["zero"]["loss_scaler"]["state"]["cur_scale"], 65536.0);  // DynamicLossScaler
  EXPECT_EQ(state["zero"]["rank_files"].size(), 4u);
  // By getattr, the stage still reads as a number.
  Result<Checkpoint> by_name = Open(Tag("s3_r2_getattr_frozen"));
  ASSERT_TRUE(by_name.ok()) << by_name.status().message();
  EXPECT_EQ(nlohmann::json::parse(by_name->state_json)["zero"]["stage"], 3);
}

// (issue 23) Frozen params keep the dtype they were saved in, as zero_to_fp32 keeps them
// (_zero2_merge_frozen_params / _zero3_merge_frozen_params take the fragments as they are;
// only buffers are cast, by .float()): bf16 in a bf16 run, fp16 in an fp16 one, and at
// stage 2 the very bytes of the module's copy.
TEST(DeepSpeedZero, FrozenParamsKeepTheirSavedDtype) {
  REQUIRE_CASES();
  const std::pair<const char*, const char*> kCasesAndDtypes[] = {{"s2_r4_groups_frozen", "BF16"},
                                                                 {"s3_r2_getattr_frozen", "BF16"},
                                                                 {"s2_r2_fp16_frozen_tied", "F16"}};
  for (auto [c, dtype] : kCasesAndDtypes) {
    SCOPED_TRACE(c);
    Result<Checkpoint> ckpt = Open(Tag(c));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    for (const char* name : {"frozen_proj.weight", "frozen_proj.bias"}) {
      const Tensor* frozen = FindTensor(*ckpt, std::string("model.") + name);
      ASSERT_NE(frozen, nullptr) << name;
      EXPECT_EQ(DtypeName(frozen->dtype), dtype) << name;
      if (const Tensor* module = FindTensor(*ckpt, std::string("module.") + name)) {
        EXPECT_EQ(module->dtype, frozen->dtype);
        EXPECT_TRUE(BytesOf(*ckpt, *frozen) == BytesOf(*ckpt, *module)) << name;
      }
    }
    // A trainable param is the fp32 master, whatever the run's dtype.
    const Tensor* trained = FindTensor(*ckpt, "model.fc1.weight");
    ASSERT_NE(trained, nullptr);
    EXPECT_EQ(DtypeName(trained->dtype), "F32");
  }
}

// `latest` stripped as Python's str.strip(): ASCII and Unicode White_Space at both ends,
// nothing else (a zero-width space is no whitespace; a broken UTF-8 tail is kept).
TEST(DeepSpeedLatest, StripsAsPythonStrStrip) {
  EXPECT_EQ(deepspeed::StripLatest("global_step7\n"), "global_step7");
  EXPECT_EQ(deepspeed::StripLatest(" global_step7 \n"), "global_step7");
  EXPECT_EQ(deepspeed::StripLatest("global_step7\r\n"), "global_step7");
  EXPECT_EQ(deepspeed::StripLatest("\t\v\f\x1c\x1d\x1e\x1fglobal_step7"), "global_step7");
  EXPECT_EQ(deepspeed::StripLatest("\u0085\u00a0\u1680global_step7\u2000\u200a\u2028\u2029"
                                   "\u202f\u205f\u3000"),
            "global_step7");
  EXPECT_EQ(deepspeed::StripLatest("global step7"), "global step7");
  EXPECT_EQ(deepspeed::StripLatest("global_step7\u200b"), "global_step7\u200b");
  EXPECT_EQ(deepspeed::StripLatest("global_step7\xc2"), "global_step7\xc2");
  EXPECT_EQ(deepspeed::StripLatest(" \n\u3000"), "");
  EXPECT_EQ(deepspeed::StripLatest(""), "");
}

// A copy of a case's tag directory to damage.
fs::path CopyTag(const std::string& c, const std::string& as) {
  const fs::path dst = Root() / "damaged" / as;
  fs::remove_all(dst);
  fs::create_directories(dst.parent_path());
  fs::copy(Tag(c), dst, fs::copy_options::recursive);
  return dst;
}

// (issue 23) A pipeline tag saved without optimizer state: mp_rank_00_model_states.pt with
// module, param_shapes and shared_params None, no optimizer files, the layer files the only
// weights. The model is the layers, "<layer>.<key>" as PipelineModule's state_dict names
// them; no fp32 masters, no moments. The matrix above checks every byte.
TEST(DeepSpeedPipeline, WithoutOptimizerStateTheLayersAreTheModel) {
  REQUIRE_CASES();
  for (const char* c : {"pipe0_r2_fp16", "pipe0_r1_bf16_noaxis"}) {
    SCOPED_TRACE(c);
    Result<Checkpoint> ckpt = Open(Tag(c));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    EXPECT_EQ(ckpt->model.key, "model");
    EXPECT_EQ(ckpt->model.tensors, 9u);  // layer 0's weight; 1, 3, 4, 6: weight and bias
    for (const Tensor& t : ckpt->tensors) {
      EXPECT_NE(t.name.rfind("model_fp32.", 0), 0u) << t.name;
      EXPECT_NE(t.name.rfind("optimizer.", 0), 0u) << t.name;
    }
    const Tensor* w = FindTensor(*ckpt, "model.1.weight");
    ASSERT_NE(w, nullptr);
    const bool axis = std::string_view(c).find("noaxis") == std::string_view::npos;
    EXPECT_EQ(ckpt->shards[w->shard].name,
              axis ? "layer_01-model_00-model_states.pt" : "layer_01-model_states.pt");
    const auto state = nlohmann::json::parse(ckpt->state_json);
    EXPECT_TRUE(state["module"].is_null());
    EXPECT_TRUE(state["param_shapes"].is_null());
    EXPECT_EQ(state["pipeline"]["layer_files"], 6);
    EXPECT_EQ(state["pipeline"]["fp32_masters"], "none saved");
    EXPECT_EQ(state["zero"]["stage"], 0);
  }
}

// Two files for one layer and TP rank, or a layer file of a TP rank the tag does not have,
// would give two tensors one merged name: refused naming the file, never one of them served.
TEST(DeepSpeedPipeline, LayerFilesOfAnotherLayoutAreRefused) {
  REQUIRE_CASES();
  const fs::path twice = CopyTag("pipe0_r2_fp16", "pipe-twice");
  fs::copy_file(twice / "layer_01-model_00-model_states.pt", twice / "layer_01-model_states.pt");
  EXPECT_EQ(Refusal(twice),
            "layer_01-model_states.pt: layer 1 of tensor-parallel rank 0 is saved in "
            "layer_01-model_00-model_states.pt too");
  const fs::path rank1 = CopyTag("pipe0_r2_fp16", "pipe-rank1");
  fs::copy_file(Tag("pipe0_r2_bf16_tp2") / "layer_03-model_01-model_states.pt",
                rank1 / "layer_03-model_01-model_states.pt");
  EXPECT_EQ(Refusal(rank1),
            "layer_03-model_01-model_states.pt: tensor-parallel rank 1 but "
            "mp_rank_00_model_states.pt says mp_world_size 1: layer files of another "
            "model-parallel layout");
  // No layer files at all: nothing holds the weights.
  const fs::path none = CopyTag("pipe0_r2_fp16", "pipe-none");
  for (const auto& e : fs::directory_iterator(none)) {
    if (e.path().filename().string().rfind("layer_", 0) == 0) fs::remove(e.path());
  }
  EXPECT_NE(Refusal(none).find("mp_rank_00_model_states.pt: module and param_shapes are None and "
                               "the tag lists no layer files"),
            std::string::npos)
      << Refusal(none);
}

// A rank file given as SOURCE is not a torch checkpoint of its own: its tag is.
TEST(DeepSpeedZero, RankFileAsSourceNamesItsTag) {
  REQUIRE_CASES();
  for (const char* file :
       {"mp_rank_00_model_states.pt", "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"}) {
    EXPECT_EQ(Refusal(Tag("s2_r2_bf16") / file),
              std::string(file) +
                  ": a DeepSpeed rank file; mount the tag directory that holds it "
                  "(global_stepN/)");
  }
}

TEST(DeepSpeedZero, MissingRankFileIsRefusedByName) {
  REQUIRE_CASES();
  const fs::path s2 = CopyTag("s2_r2_bf16", "missing2");
  fs::remove(s2 / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt");
  EXPECT_NE(Refusal(s2).find("bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt: missing"),
            std::string::npos)
      << Refusal(s2);
  const fs::path s3 = CopyTag("s3_r2_bf16", "missing3");
  fs::remove(s3 / "zero_pp_rank_1_mp_rank_00_model_states.pt");
  EXPECT_NE(Refusal(s3).find("zero_pp_rank_1_mp_rank_00_model_states.pt: missing"),
            std::string::npos)
      << Refusal(s3);
}

TEST(DeepSpeedZero, RankFilesOfDifferentTagsAreRefused) {
  REQUIRE_CASES();
  const fs::path s2 = CopyTag("s2_r2_bf16", "tags2");
  fs::copy_file(Tag("s2_r2_bf16_step3") / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt",
                s2 / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt",
                fs::copy_options::overwrite_existing);
  EXPECT_NE(Refusal(s2).find("bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt: its optimizer step "
                             "differs from"),
            std::string::npos)
      << Refusal(s2);
  const fs::path s3 = CopyTag("s3_r2_bf16", "tags3");
  fs::copy_file(Tag("s3_r2_bf16_step3") / "zero_pp_rank_1_mp_rank_00_model_states.pt",
                s3 / "zero_pp_rank_1_mp_rank_00_model_states.pt",
                fs::copy_options::overwrite_existing);
  EXPECT_NE(Refusal(s3).find("zero_pp_rank_1_mp_rank_00_model_states.pt: global_steps 3 but"),
            std::string::npos)
      << Refusal(s3);
}

TEST(DeepSpeedZero, RankFilesOfDifferentWorldSizesAreRefused) {
  REQUIRE_CASES();
  // A rank the world size does not have.
  const fs::path extra = CopyTag("s2_r2_bf16", "extra");
  fs::copy_file(Tag("s2_r4_groups_frozen") / "bf16_zero_pp_rank_3_mp_rank_00_optim_states.pt",
                extra / "bf16_zero_pp_rank_3_mp_rank_00_optim_states.pt");
  EXPECT_NE(Refusal(extra).find("bf16_zero_pp_rank_3_mp_rank_00_optim_states.pt: rank 3 (mp rank "
                                "0) but mp_rank_00_model_states.pt says dp_world_size 2"),
            std::string::npos)
      << Refusal(extra);
  // A rank file of a 4-rank run in a 2-rank tag.
  const fs::path mixed = CopyTag("s2_r2_bf16", "mixed");
  fs::copy_file(Tag("s2_r4_groups_frozen") / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt",
                mixed / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt",
                fs::copy_options::overwrite_existing);
  EXPECT_NE(Refusal(mixed).find("bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt: zero_stage 2, "
                                "partition_count 4"),
            std::string::npos)
      << Refusal(mixed);
}

TEST(DeepSpeedZero, PartitionsThatDoNotAddUpAreRefused) {
  REQUIRE_CASES();
  EXPECT_EQ(Refusal(Root() / "short" / "global_step2"),
            "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt: param group 0: params hold 3856 "
            "elements but the partitions 3857 (3 padding left out): partition sizes do not add up");
  EXPECT_EQ(Refusal(Root() / "past" / "global_step2"),
            "mp_rank_00_model_states.pt: param \"fc1.bias\" (elements 1872 to 101872) lies past "
            "flat group 0 of 3857 elements");
}

// The generator's --break kinds, stages 2 and 3: each one line naming the last rank's file
// (or the model states file that lists the param past its group).
TEST(DeepSpeedZero, GeneratorBreaksAreEachRefused) {
  REQUIRE_CASES();
  const std::pair<const char*, const char*> kBreaks[] = {
      {"missing-rank", "bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt: missing"},
      {"mixed-world", "bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt: zero_stage "},
      {"mixed-tag", "bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt: its optimizer step differs"},
      {"short-partition", "bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt: "},
      {"param-past-group", "model_states.pt: param \"ghost.weight\""}};
  for (auto [kind, text] : kBreaks) {
    for (const char* stage : {"2", "3"}) {
      const std::string c = std::string("break-") + kind + "-s" + stage;
      SCOPED_TRACE(c);
      const std::string refusal = Refusal(Tag(c));
      EXPECT_NE(refusal.find(text), std::string::npos) << refusal;
      if (std::string_view(kind) == "short-partition") {
        EXPECT_NE(refusal.find("partitions of unequal sizes"), std::string::npos) << refusal;
      }
      if (std::string_view(kind) == "param-past-group") {
        EXPECT_NE(refusal.find("lies past"), std::string::npos) << refusal;
      }
    }
  }
}

TEST(DeepSpeedZero, LegacyFilesAndOtherGlobalsAreRefused) {
  REQUIRE_CASES();
  EXPECT_EQ(Refusal(Tag("legacy")),
            "mp_rank_00_model_states.pt: a legacy (non-zip) torch file; DeepSpeed writes these "
            "with checkpoint_serialization: false");
  const std::string hostile = Refusal(Tag("hostile"));
  EXPECT_NE(hostile.find("mp_rank_00_model_states.pt: data.pkl: global posix.system is not "
                         "allowed"),
            std::string::npos)
      << hostile;
  EXPECT_FALSE(fs::exists(Root() / "hostile" / "hostile_marker")) << "the pickle ran";
}

}  // namespace
}  // namespace ckptfs
