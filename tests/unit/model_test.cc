// The model view (core/checkpoint/model.h): which tensors the merged model.safetensors and
// pytorch_model.bin hold, per format, and --model-key. torch files are written here as
// torch.save writes them (a zip of a protocol-2 pickle and one record per storage), so
// the rule is tested on the pickle's structure, the way a user's file reaches it.
#include "core/checkpoint/model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "core/encoding/safetensors.h"
#include "core/encoding/torch_file.h"
#include "core/encoding/zip.h"
#include "core/format/formats.h"
#include "core/format/tf/names.h"
#include "core/format/tf/tf_state.h"
#include "core/volume/volume.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::MakeZip;

// A protocol-2 pickle of nested dicts and lists of 1-D f32 tensors, and the zip torch.save
// would make of it: each tensor its own storage record of `numel` floats.
class TorchSave {
 public:
  TorchSave() { pickle_ = "\x80\x02"; }
  TorchSave& Dict() { return Op("}("); }  // EMPTY_DICT MARK ... SETITEMS
  TorchSave& EndDict() { return Op("u"); }
  TorchSave& List() { return Op("]("); }  // EMPTY_LIST MARK ... APPENDS
  TorchSave& EndList() { return Op("e"); }
  TorchSave& Key(const std::string& s) {
    pickle_ += 'X';
    const auto n = static_cast<uint32_t>(s.size());
    for (int i = 0; i < 4; ++i) pickle_ += static_cast<char>((n >> (8 * i)) & 0xff);
    pickle_ += s;
    return *this;
  }
  TorchSave& Int(uint8_t v) {
    pickle_ += 'K';
    pickle_ += static_cast<char>(v);
    return *this;
  }
  // A tensor of `numel` floats, each byte of its storage the record's number.
  TorchSave& Tensor(uint8_t numel) {
    const std::string key = std::to_string(records_.size());
    Op("ctorch._utils\n_rebuild_tensor_v2\n((");
    Key("storage").Op("ctorch\nFloatStorage\n").Key(key).Key("cpu").Int(numel).Op("tQ");
    Int(0).Op("(").Int(numel).Op("t(").Int(1).Op("t\x89");
    Op("ccollections\nOrderedDict\n)RtR");
    records_.emplace_back("archive/data/" + key,
                          std::string(4u * numel, static_cast<char>(records_.size() + 1)));
    return *this;
  }
  std::string Zip() const {
    std::vector<std::pair<std::string, std::string>> all = {{"archive/data.pkl", pickle_ + "."}};
    all.insert(all.end(), records_.begin(), records_.end());
    all.emplace_back("archive/version", "3\n");
    return MakeZip(all);
  }

 private:
  TorchSave& Op(std::string_view ops) {
    pickle_ += ops;
    return *this;
  }
  std::string pickle_;
  std::vector<std::pair<std::string, std::string>> records_;
};

// torch.save({"epoch": 3, "model_state_dict": {"fc.weight", "fc.bias"},
//             "optimizer_state_dict": {"state": {0: {"exp_avg", "exp_avg_sq"}}},
//             "ema": {"fc.weight", "fc.bias"}, "ema_list": [t, t]}).
std::string TrainingDict() {
  TorchSave s;
  s.Dict().Key("epoch").Int(3);
  s.Key("model_state_dict").Dict().Key("fc.weight").Tensor(4).Key("fc.bias").Tensor(2).EndDict();
  s.Key("optimizer_state_dict").Dict().Key("state").Dict().Int(0).Dict();
  s.Key("exp_avg").Tensor(4).Key("exp_avg_sq").Tensor(4).EndDict().EndDict().EndDict();
  s.Key("ema").Dict().Key("fc.weight").Tensor(4).Key("fc.bias").Tensor(2).EndDict();
  s.Key("ema_list").List().Tensor(1).Tensor(1).EndList();
  return s.EndDict().Zip();
}

// A Lightning .ckpt: the LightningModule's state dict (its submodule `model` and a
// `head`) under state_dict, Adam's state under optimizer_states.
std::string LightningCkpt() {
  TorchSave s;
  s.Dict().Key("epoch").Int(3).Key("global_step").Int(100);
  s.Key("pytorch-lightning_version").Key("1.9.0");
  s.Key("state_dict").Dict().Key("model.encoder.weight").Tensor(4).Key("head.weight").Tensor(2);
  s.EndDict();
  s.Key("loops").Dict().EndDict().Key("callbacks").Dict().EndDict();
  s.Key("optimizer_states").List().Dict().Key("state").Dict().Int(0).Dict();
  s.Key("exp_avg").Tensor(4).EndDict().EndDict().EndDict().EndList();
  s.Key("lr_schedulers").List().EndList();
  return s.EndDict().Zip();
}

// A weights-only HF BART-like state dict: flat keys that read like nested ones.
std::string FlatStateDict() {
  TorchSave s;
  s.Dict().Key("model.encoder.layers.0.weight").Tensor(4).Key("model.decoder.weight").Tensor(2);
  return s.Key("lm_head.weight").Tensor(2).EndDict().Zip();
}

struct Opened {
  std::unique_ptr<Volume> volume;
  Status status = Status::Ok();
};

Opened Open(const std::string& file, const std::string& name,
            std::optional<std::string> model_key = std::nullopt) {
  auto context = std::make_shared<ReadContext>(ReadOptions{});
  auto ckpt = OpenCheckpointIn(testing::MemoryDir({{name, file}}), *context,
                               OpenOptions({}, std::move(model_key)), "SRC/" + name);
  if (!ckpt.ok()) return {nullptr, ckpt.status()};
  return {Volume::FromCheckpoint(std::move(ckpt).value(), context), Status::Ok()};
}

std::string ReadWholeFile(const Volume& volume, const std::string& name) {
  const uint64_t ino = volume.layout().Lookup(Layout::kRoot, name);
  const uint64_t size = volume.layout().Find(ino)->size;
  std::vector<ReadPiece> plan;
  std::string bytes(size, '\0');
  if (!volume.PlanRead(ino, 0, size, &plan).ok() ||
      !volume.ReadInto(plan, reinterpret_cast<uint8_t*>(bytes.data())).ok()) {
    return "read failed";
  }
  return bytes;
}

// The tensor names of the merged model.safetensors and pytorch_model.bin, each sorted,
// read back through their own parsers; they must agree.
std::vector<std::string> MergedNames(const Volume& volume) {
  MemorySource st("model.safetensors", ReadWholeFile(volume, "model.safetensors"));
  auto header = ReadSafetensorsHeader(st);
  EXPECT_TRUE(header.ok()) << header.status().message();
  std::vector<std::string> names;
  if (header.ok()) {
    for (const TensorEntry& e : header->tensors) names.push_back(e.name);
  }
  std::sort(names.begin(), names.end());
  MemorySource bin("pytorch_model.bin", ReadWholeFile(volume, "pytorch_model.bin"));
  auto file = ReadTorchFile(bin);
  EXPECT_TRUE(file.ok()) << file.status().message();
  std::vector<std::string> bin_names;
  if (file.ok()) {
    for (const TorchTensor& t : file->tensors) bin_names.push_back(t.name);
  }
  std::sort(bin_names.begin(), bin_names.end());
  EXPECT_EQ(names, bin_names) << "model.safetensors and pytorch_model.bin disagree";
  return names;
}

// The bytes model.safetensors holds for `name`.
std::string MergedBytes(const Volume& volume, const std::string& name) {
  const std::string bytes = ReadWholeFile(volume, "model.safetensors");
  MemorySource st("model.safetensors", bytes);
  auto header = ReadSafetensorsHeader(st);
  if (!header.ok()) return "bad header";
  for (const TensorEntry& e : header->tensors) {
    if (e.name == name) return bytes.substr(header->data_start + e.begin, e.end - e.begin);
  }
  return "absent";
}

bool HasTensorFile(const Volume& volume, const std::vector<std::string>& path) {
  const Layout& layout = volume.layout();
  uint64_t ino = layout.Lookup(Layout::kRoot, "tensors");
  for (const std::string& part : path) ino = ino ? layout.Lookup(ino, part) : 0;
  return ino != 0;
}

TEST(ModelView, TrainingDictTakesModelStateDictWithItsPrefixStripped) {
  Opened o = Open(TrainingDict(), "train_state.pt");
  ASSERT_TRUE(o.status.ok()) << o.status.message();
  const Checkpoint& ckpt = o.volume->checkpoint();
  EXPECT_EQ(ckpt.model.key, "model_state_dict");
  EXPECT_FALSE(ckpt.model.whole);
  EXPECT_EQ(ckpt.model.tensors, 2u);
  EXPECT_EQ(ckpt.tensors.size(), 8u);
  EXPECT_THAT(MergedNames(*o.volume), ElementsAre("fc.bias", "fc.weight"));
  // The model's own bytes (records 1 and 2), not the EMA's of the same names.
  EXPECT_EQ(MergedBytes(*o.volume, "fc.weight"), std::string(16, '\1'));
  EXPECT_EQ(MergedBytes(*o.volume, "fc.bias"), std::string(8, '\2'));
  // tensors/ keeps everything.
  EXPECT_TRUE(HasTensorFile(*o.volume, {"optimizer_state_dict", "state", "0", "exp_avg.npy"}));
  EXPECT_TRUE(HasTensorFile(*o.volume, {"model_state_dict", "fc", "weight.npy"}));
  EXPECT_TRUE(HasTensorFile(*o.volume, {"ema_list", "1.npy"}));
}

TEST(ModelView, FlatKeysThatReadNestedStayWhole) {
  Opened o = Open(FlatStateDict(), "pytorch_model.bin");
  ASSERT_TRUE(o.status.ok()) << o.status.message();
  EXPECT_TRUE(o.volume->checkpoint().model.whole);
  EXPECT_EQ(o.volume->checkpoint().model.strip, 0u);
  EXPECT_THAT(MergedNames(*o.volume), ElementsAre("lm_head.weight", "model.decoder.weight",
                                                  "model.encoder.layers.0.weight"));
}

TEST(ModelView, LightningStripsStateDictOnly) {
  Opened o = Open(LightningCkpt(), "epoch=3-step=100.ckpt");
  ASSERT_TRUE(o.status.ok()) << o.status.message();
  EXPECT_EQ(o.volume->checkpoint().model.key, "state_dict");
  EXPECT_THAT(MergedNames(*o.volume), ElementsAre("head.weight", "model.encoder.weight"));
  EXPECT_TRUE(HasTensorFile(*o.volume, {"optimizer_states", "0", "state", "0", "exp_avg.npy"}));
}

TEST(ModelView, KeysArePreferredInOrderAndMustBeDictsOfTensors) {
  TorchSave s;
  // `model` is a tensor itself (no sub-tree), `state_dict` a dict without tensors, so
  // `module` wins although `model` comes first in the rule.
  s.Dict().Key("model").Tensor(1).Key("state_dict").Dict().Key("lr").Int(1).EndDict();
  s.Key("module").Dict().Key("w").Tensor(2).EndDict();
  s.Key("model_state_dict").List().Tensor(1).EndList();  // a list, not a dict
  Opened o = Open(s.EndDict().Zip(), "m.pt");
  ASSERT_TRUE(o.status.ok()) << o.status.message();
  EXPECT_EQ(o.volume->checkpoint().model.key, "module");
  EXPECT_THAT(MergedNames(*o.volume), ElementsAre("w"));

  TorchSave both;
  both.Dict().Key("model").Dict().Key("a").Tensor(1).EndDict();
  both.Key("state_dict").Dict().Key("b").Tensor(1).EndDict();
  Opened o2 = Open(both.EndDict().Zip(), "m.pt");
  ASSERT_TRUE(o2.status.ok()) << o2.status.message();
  EXPECT_THAT(MergedNames(*o2.volume), ElementsAre("b"));  // state_dict before model
}

TEST(ModelView, ModelKeyChoosesAnotherSubtree) {
  Opened ema = Open(TrainingDict(), "train_state.pt", "ema");
  ASSERT_TRUE(ema.status.ok()) << ema.status.message();
  EXPECT_THAT(MergedNames(*ema.volume), ElementsAre("fc.bias", "fc.weight"));
  EXPECT_EQ(MergedBytes(*ema.volume, "fc.weight"), std::string(16, '\5'));
  EXPECT_EQ(ema.volume->checkpoint().model.rule, "--model-key");

  // Any container: a list's items are numbered.
  Opened list = Open(TrainingDict(), "train_state.pt", "ema_list");
  ASSERT_TRUE(list.status.ok()) << list.status.message();
  EXPECT_THAT(MergedNames(*list.volume), ElementsAre("0", "1"));

  // A flat state dict has no sub-tree, even where a dotted name suggests one.
  Opened flat = Open(FlatStateDict(), "pytorch_model.bin", "model");
  ASSERT_FALSE(flat.status.ok());
  EXPECT_THAT(flat.status.message(), HasSubstr("none: every tensor is at the top level"));
}

TEST(ModelView, EmptyModelKeyKeepsEverything) {
  Opened o = Open(TrainingDict(), "train_state.pt", "");
  ASSERT_TRUE(o.status.ok()) << o.status.message();
  EXPECT_TRUE(o.volume->checkpoint().model.whole);
  const std::vector<std::string> names = MergedNames(*o.volume);
  EXPECT_EQ(names.size(), 8u);
  EXPECT_THAT(names, ::testing::Contains("optimizer_state_dict.state.0.exp_avg"));
  EXPECT_THAT(names, ::testing::Contains("model_state_dict.fc.weight"));
}

TEST(ModelView, UnknownModelKeyIsOneLineNamingSourceAndTheSubtrees) {
  Opened o = Open(TrainingDict(), "train_state.pt", "emma");
  ASSERT_FALSE(o.status.ok());
  EXPECT_EQ(o.status.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(o.status.message(),
            "SRC/train_state.pt: --model-key emma: no sub-tree of that name holds tensors "
            "(sub-trees that do: ema, ema_list, model_state_dict, optimizer_state_dict; "
            "--model-key '' keeps every tensor)");
}

TEST(ModelView, SafetensorsIsWholeUnlessAKeyIsGiven) {
  const std::string file = testing::MakeSafetensors(
      {{"model.a", Dtype::kF32, {2}}, {"ema.a", Dtype::kF32, {2}}, {"step", Dtype::kI64, {}}});
  Opened whole = Open(file, "model.safetensors");
  ASSERT_TRUE(whole.status.ok()) << whole.status.message();
  EXPECT_THAT(MergedNames(*whole.volume), ElementsAre("ema.a", "model.a", "step"));
  Opened ema = Open(file, "model.safetensors", "ema");
  ASSERT_TRUE(ema.status.ok()) << ema.status.message();
  EXPECT_THAT(MergedNames(*ema.volume), ElementsAre("a"));
  Opened none = Open(file, "model.safetensors", "x");
  ASSERT_FALSE(none.status.ok());
  EXPECT_THAT(none.status.message(), HasSubstr("sub-trees that do: ema, model;"));
}

// TF's rule on a Checkpoint as the TF reader fills it (names from keys, keys kept).
Checkpoint TfCheckpoint(const std::vector<std::string>& keys) {
  Checkpoint ckpt;
  ckpt.format = FormatNamed("tensorflow");
  auto state = std::make_unique<TfState>();
  for (const std::string& key : keys) {
    Tensor t{.name = tf::TfKeyToName(key).dotted, .dtype = Dtype::kF32, .shape = {1}, .size = 4};
    ckpt.tensors.push_back(t);
    state->keys.push_back(key);
  }
  ckpt.format_state = std::move(state);
  return ckpt;
}

std::vector<std::string> InModel(const Checkpoint& ckpt) {
  std::vector<std::string> names;
  for (const Tensor& t : ckpt.tensors) {
    if (t.in_model) names.emplace_back(ModelName(ckpt, t));
  }
  return names;
}

TEST(ModelView, TfObjectCheckpointLeavesOutTrainingState) {
  Checkpoint ckpt = TfCheckpoint({
      "model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE",
      "model/dense/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE",
      "model/dense/bias/.ATTRIBUTES/VARIABLE_VALUE",
      "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE",
      "optimizer/learning_rate/.ATTRIBUTES/VARIABLE_VALUE",
      "save_counter/.ATTRIBUTES/VARIABLE_VALUE",
      "step/.ATTRIBUTES/VARIABLE_VALUE",
  });
  ASSERT_TRUE(SelectModel(ckpt, std::nullopt, "SRC").ok());
  EXPECT_THAT(InModel(ckpt), ElementsAre("model.dense.kernel", "model.dense.bias", "step"));
  EXPECT_FALSE(ckpt.model.whole);
  EXPECT_EQ(ckpt.model.tensors, 3u);

  ASSERT_TRUE(SelectModel(ckpt, std::string("model"), "SRC").ok());
  EXPECT_THAT(InModel(ckpt), ElementsAre("dense.kernel", "dense.bias"));  // slot still out

  ASSERT_TRUE(SelectModel(ckpt, std::string(), "SRC").ok());
  EXPECT_EQ(InModel(ckpt).size(), 7u);

  const Status unknown = SelectModel(ckpt, std::string("net"), "SRC");
  EXPECT_THAT(unknown.message(), HasSubstr("SRC: --model-key net: no sub-tree"));
  EXPECT_THAT(unknown.message(), HasSubstr("(sub-trees that do: model, optimizer;"));
}

TEST(ModelView, TfNameBasedCheckpointIsWhole) {
  Checkpoint ckpt = TfCheckpoint({"dense/kernel", "dense/kernel/Adam", "global_step"});
  ASSERT_TRUE(SelectModel(ckpt, std::nullopt, "SRC").ok());
  EXPECT_TRUE(ckpt.model.whole);
  EXPECT_EQ(InModel(ckpt).size(), 3u);
}

TEST(ModelView, TfKeyRules) {
  EXPECT_TRUE(tf::IsObjectBasedKey("a/.ATTRIBUTES/VARIABLE_VALUE"));
  EXPECT_FALSE(tf::IsObjectBasedKey("a/b"));
  EXPECT_FALSE(tf::IsObjectBasedKey("a/x.ATTRIBUTES"));
  EXPECT_TRUE(tf::IsTrainingStateKey("optimizer"));
  EXPECT_TRUE(tf::IsTrainingStateKey("save_counter/.ATTRIBUTES/VARIABLE_VALUE"));
  EXPECT_TRUE(tf::IsTrainingStateKey("m/k/.OPTIMIZER_SLOT/opt/v/.ATTRIBUTES/VARIABLE_VALUE"));
  EXPECT_FALSE(tf::IsTrainingStateKey("optimizer_like/x"));
  EXPECT_FALSE(tf::IsTrainingStateKey("model/optimizer/x"));
}

}  // namespace
}  // namespace ckptfs
