#include "core/layout/layout.h"

#include <gtest/gtest.h>

#include <set>

#include "core/checkpoint/hf_layout.h"
#include "core/encoding/npy.h"
#include "core/encoding/safetensors.h"
#include "core/format/formats.h"
#include "core/layout/views/views.h"
#include "core/volume/volume.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

using testing::IndexJson;
using testing::MakeSafetensors;
using testing::MemoryDir;
using testing::TensorBytes;
using testing::TestTensor;

const std::vector<TestTensor> kShard1 = {{"model.embed.weight", Dtype::kF32, {3, 5}},
                                         {"model.norm", Dtype::kBF16, {7}},
                                         {"odd", Dtype::kU8, {3}}};
const std::vector<TestTensor> kShard2 = {{"lm_head.weight", Dtype::kF64, {2, 3}},
                                         {"x/y..z", Dtype::kI8, {}},
                                         {"empty", Dtype::kF16, {0, 2}}};

std::map<std::string, std::string> TwoShardFiles() {
  std::vector<std::pair<std::string, std::string>> map;
  for (const auto& t : kShard1) map.emplace_back(t.name, "s1.safetensors");
  for (const auto& t : kShard2) map.emplace_back(t.name, "s2.safetensors");
  return {{"s1.safetensors", MakeSafetensors(kShard1, {{"format", "pt"}})},
          {"s2.safetensors", MakeSafetensors(kShard2)},
          {"model.safetensors.index.json", IndexJson(map)},
          {"config.json", "{\"hidden\": 3}"},
          {"tensors", "a file whose name a view owns"}};
}

class LayoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ckpt = OpenCheckpointIn(MemoryDir(TwoShardFiles()), testing::TestContext());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    volume_ = Volume::FromCheckpoint(std::move(ckpt).value(), testing::TestContextPtr());
  }

  uint64_t Resolve(const std::vector<std::string>& path) const {
    uint64_t ino = Layout::kRoot;
    for (const std::string& part : path) {
      ino = volume_->layout().Lookup(ino, part);
      if (ino == 0) return 0;
    }
    return ino;
  }

  std::string Read(uint64_t ino, uint64_t offset, uint64_t size) const {
    std::vector<ReadPiece> plan;
    Status s = volume_->PlanRead(ino, offset, size, &plan);
    EXPECT_TRUE(s.ok()) << s.message();
    uint64_t total = 0;
    for (const auto& p : plan) total += p.length;
    std::string out(total, '\0');
    s = volume_->ReadInto(plan, reinterpret_cast<uint8_t*>(out.data()));
    EXPECT_TRUE(s.ok()) << s.message();
    return out;
  }

  std::string ReadAll(const std::vector<std::string>& path) const {
    uint64_t ino = Resolve(path);
    EXPECT_NE(ino, 0u);
    return Read(ino, 0, UINT64_MAX);
  }

  std::unique_ptr<Volume> volume_;
};

TEST_F(LayoutTest, RootShowsViewsAndNonWeightFiles) {
  std::vector<std::string> names;
  for (uint64_t ino : volume_->layout().Children(Layout::kRoot)) {
    names.push_back(std::string(volume_->layout().Find(ino)->name()));
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{".ckptfs", "config.json", "model.safetensors",
                                      "pytorch_model", "pytorch_model.bin", "shards", "tensors"}));
  EXPECT_EQ(ReadAll({"config.json"}), "{\"hidden\": 3}");
  EXPECT_EQ(volume_->layout().Find(Resolve({"tensors"}))->kind, NodeKind::kDirectory);
  EXPECT_EQ(volume_->layout().hidden(), std::vector<std::string>{"tensors"});
  EXPECT_EQ(volume_->layout().Find(Resolve({".ckptfs", "stats.json"}))->kind, NodeKind::kStats);
}

// The view table is the whole of what a mount adds: each view's root entry, and nothing
// else besides SOURCE's own files; built with the views' plans on a context's workers or
// one after another, the tree and every file's bytes are the same.
TEST_F(LayoutTest, EveryRootEntryIsAViewOrAStoredFile) {
  const Checkpoint& ckpt = volume_->checkpoint();
  std::set<std::string> expected;
  size_t showing = 0;  // views with something to show: a format's root files may be none
  for (const ViewEntry& entry : kViews) {
    const std::string name = entry.make(ckpt)->RootName();
    if (name.empty()) continue;
    expected.insert(name);
    ++showing;
  }
  EXPECT_EQ(expected.size(), showing);  // no two views share a name
  for (const StoredFile& f : ckpt.others) {
    if (!expected.contains(f.name)) expected.insert(f.name);
  }
  std::set<std::string> names;
  for (uint64_t ino : volume_->layout().Children(Layout::kRoot)) {
    names.insert(std::string(volume_->layout().Find(ino)->name()));
  }
  EXPECT_EQ(names, expected);

  ReadContext context(ReadOptions{});
  const Layout serial = Layout::Build(ckpt);
  const Layout parallel = Layout::Build(ckpt, &context);
  ASSERT_EQ(serial.node_count(), parallel.node_count());
  for (uint64_t ino = Layout::kRoot; ino <= serial.node_count(); ++ino) {
    const Node& a = *serial.Find(ino);
    const Node& b = *parallel.Find(ino);
    ASSERT_EQ(a.name(), b.name());
    ASSERT_EQ(a.size, b.size);
    ASSERT_EQ(a.mode, b.mode);
    if (a.kind != NodeKind::kFile) continue;
    // Both layouts' bytes, through their own sources.
    auto bytes = [](const Layout& layout, uint64_t i) {
      std::string out;
      for (const Extent& e : layout.Extents(i, 0, UINT64_MAX)) {
        std::string part(e.length, '\0');
        EXPECT_TRUE(
            layout.Source(e.source)
                .ReadAt(e.source_offset, {reinterpret_cast<uint8_t*>(part.data()), e.length})
                .ok());
        out += part;
      }
      return out;
    };
    EXPECT_EQ(bytes(serial, ino), bytes(parallel, ino)) << a.name();
    EXPECT_EQ(bytes(serial, ino), Read(ino, 0, UINT64_MAX)) << a.name();
  }
}

// The root's names of `files` opened as a checkpoint.
std::vector<std::string> RootNames(const std::map<std::string, std::string>& files) {
  auto ckpt = OpenCheckpointIn(MemoryDir(files), testing::TestContext());
  EXPECT_TRUE(ckpt.ok()) << ckpt.status().message();
  if (!ckpt.ok()) return {};
  auto volume = Volume::FromCheckpoint(std::move(ckpt).value(), testing::TestContextPtr());
  std::vector<std::string> names;
  for (uint64_t ino : volume->layout().Children(Layout::kRoot)) {
    names.push_back(std::string(volume->layout().Find(ino)->name()));
  }
  return names;
}

// (issue 23) A merged view is named for what it merges: weights under a loader's own name
// (peft, diffusers) keep it, lone or sharded, with no model.safetensors alias; any other
// name is a model, shown under transformers' names as before.
TEST(LayoutNames, LoaderNamesAreKept) {
  const std::string kW = MakeSafetensors({{"w", Dtype::kF32, {2}}});
  EXPECT_EQ(RootNames({{"adapter_model.safetensors", kW}, {"adapter_config.json", "{}"}}),
            (std::vector<std::string>{".ckptfs", "adapter_config.json", "adapter_model.bin",
                                      "adapter_model.safetensors", "pytorch_model", "shards",
                                      "tensors"}));
  EXPECT_EQ(RootNames({{"diffusion_pytorch_model.safetensors", kW}}),
            (std::vector<std::string>{".ckptfs", "diffusion_pytorch_model.bin",
                                      "diffusion_pytorch_model.safetensors", "pytorch_model",
                                      "shards", "tensors"}));
  // Sharded: the index's name says what the shards merge into.
  const std::string kV = MakeSafetensors({{"v", Dtype::kF16, {3}}});
  EXPECT_EQ(RootNames({{"diffusion_pytorch_model-00001-of-00002.safetensors", kW},
                       {"diffusion_pytorch_model-00002-of-00002.safetensors", kV},
                       {"diffusion_pytorch_model.safetensors.index.json",
                        IndexJson({{"w", "diffusion_pytorch_model-00001-of-00002.safetensors"},
                                   {"v", "diffusion_pytorch_model-00002-of-00002.safetensors"}})},
                       {"config.json", "{}"}}),
            (std::vector<std::string>{".ckptfs", "config.json", "diffusion_pytorch_model.bin",
                                      "diffusion_pytorch_model.safetensors", "pytorch_model",
                                      "shards", "tensors"}));
  // Generic names are a model, as ever.
  const std::vector<std::string> model = {
      ".ckptfs", "model.safetensors", "pytorch_model", "pytorch_model.bin", "shards", "tensors"};
  EXPECT_EQ(RootNames({{"weights.safetensors", kW}}), model);
  EXPECT_EQ(RootNames({{"model-00001-of-00002.safetensors", kW},
                       {"model-00002-of-00002.safetensors", kV},
                       {"model.safetensors.index.json",
                        IndexJson({{"w", "model-00001-of-00002.safetensors"},
                                   {"v", "model-00002-of-00002.safetensors"}})}}),
            model);
  // A stored file named as one of this checkpoint's views is hidden; another loader's
  // name is only a file.
  auto names = RootNames({{"adapter_model.safetensors", kW}, {"adapter_model.bin", "stale"}});
  EXPECT_EQ(std::count(names.begin(), names.end(), "adapter_model.bin"), 1);
}

// (issue 38) Variants, as save_pretrained(variant="fp16") names them: beside plain
// weights, the plain ones are the checkpoint and the variant's files stay at the root,
// unchanged (lone, or shards and index); alone, a variant is the checkpoint, its views
// named for it.
TEST(LayoutNames, VariantsBesideThePlainWeights) {
  EXPECT_EQ(HfVariantOf("diffusion_pytorch_model.fp16.safetensors"), "fp16");
  EXPECT_EQ(HfVariantOf("diffusion_pytorch_model.fp16-00001-of-00002.safetensors"), "fp16");
  EXPECT_EQ(HfVariantOf("diffusion_pytorch_model.safetensors.index.fp16.json"), "fp16");
  EXPECT_EQ(HfVariantOf("model.non_ema.bin.zst"), "non_ema");
  for (const char* plain :
       {"model.safetensors", "model-00001-of-00002.safetensors", "model.safetensors.index.json",
        "pytorch_model.bin.index.json", "weights.v2.safetensors", "config.json"}) {
    EXPECT_EQ(HfVariantOf(plain), "") << plain;
  }
  const std::string kW = MakeSafetensors({{"w", Dtype::kF32, {2}}});
  const std::string kH = MakeSafetensors({{"w", Dtype::kF16, {2}}});
  const std::string kD = "diffusion_pytorch_model";
  EXPECT_EQ(RootNames({{kD + ".safetensors", kW}, {kD + ".fp16.safetensors", kH}}),
            (std::vector<std::string>{".ckptfs", kD + ".bin", kD + ".fp16.safetensors",
                                      kD + ".safetensors", "pytorch_model", "shards", "tensors"}));
  const std::vector<std::string> sharded = {kD + ".fp16-00001-of-00002.safetensors",
                                            kD + ".fp16-00002-of-00002.safetensors",
                                            kD + ".safetensors.index.fp16.json"};
  const std::string index = IndexJson({{"w", sharded[0]}, {"v", sharded[1]}});
  const std::string kV = MakeSafetensors({{"v", Dtype::kF16, {3}}});
  EXPECT_EQ(
      RootNames(
          {{kD + ".safetensors", kW}, {sharded[0], kH}, {sharded[1], kV}, {sharded[2], index}}),
      (std::vector<std::string>{".ckptfs", kD + ".bin", sharded[0], sharded[1], kD + ".safetensors",
                                sharded[2], "pytorch_model", "shards", "tensors"}));
  // A variant alone: its views under its names.
  EXPECT_EQ(RootNames({{sharded[0], kH}, {sharded[1], kV}, {sharded[2], index}}),
            (std::vector<std::string>{".ckptfs", kD + ".fp16.bin", kD + ".fp16.safetensors",
                                      "pytorch_model", "shards", "tensors"}));
  EXPECT_EQ(RootNames({{"model.safetensors", kW}, {"model.fp16.safetensors", kH}}),
            (std::vector<std::string>{".ckptfs", "model.fp16.safetensors", "model.safetensors",
                                      "pytorch_model", "pytorch_model.bin", "shards", "tensors"}));
}

TEST(LayoutNames, ViewNamesOfEachStoredName) {
  struct Case {
    const char* file;
    const char* safetensors;
    const char* torch;
  };
  for (const Case& c : std::initializer_list<Case>{
           {"adapter_model.safetensors", "adapter_model.safetensors", "adapter_model.bin"},
           {"adapter_model.bin", "adapter_model.safetensors", "adapter_model.bin"},
           {"adapter_model.bin.zst", "adapter_model.safetensors", "adapter_model.bin"},
           {"diffusion_pytorch_model.bin", "diffusion_pytorch_model.safetensors",
            "diffusion_pytorch_model.bin"},
           {"diffusion_pytorch_model.bin.index.json", "diffusion_pytorch_model.safetensors",
            "diffusion_pytorch_model.bin"},
           {"diffusion_pytorch_model.safetensors.index.json", "diffusion_pytorch_model.safetensors",
            "diffusion_pytorch_model.bin"},
           {"pytorch_model.bin", "model.safetensors", "pytorch_model.bin"},
           {"pytorch_model.bin.index.json", "model.safetensors", "pytorch_model.bin"},
           {"model.safetensors", "model.safetensors", "pytorch_model.bin"},
           {"foo.safetensors", "model.safetensors", "pytorch_model.bin"},
           {"last.ckpt", "model.safetensors", "pytorch_model.bin"},
           {"adapter_model.pt", "model.safetensors", "pytorch_model.bin"},
           {"my_adapter_model.safetensors", "model.safetensors", "pytorch_model.bin"}}) {
    const HfViewNames names = HfViewNamesOf(c.file);
    EXPECT_EQ(names.safetensors, c.safetensors) << c.file;
    EXPECT_EQ(names.torch, c.torch) << c.file;
  }
}

// (issue 23) sentence-transformers: the folders modules.json lists beside the transformer
// at the top are shown with their files; a path that is not a plain folder beside it, or
// that a view owns, is not.
TEST(LayoutNames, ModuleFoldersOfModulesJsonAreShown) {
  const std::string kW = MakeSafetensors({{"w", Dtype::kF32, {2}}});
  SourceDir dir = MemoryDir(
      {{"model.safetensors", kW},
       {"config.json", "{}"},
       {"modules.json",
        R"([{"idx": 0, "path": ""}, {"idx": 1, "path": "1_Pooling"}, {"path": "2_Normalize"},
            {"path": "../up"}, {"path": "a/b"}, {"path": "missing"}, {"path": "tensors"},
            {"path": 3}, "x"])"}});
  dir.dirs = {"1_Pooling", "2_Normalize", "a", "stray", "tensors"};
  dir.open_dir = [](const std::string& name) -> Result<SourceDir> {
    if (name == "1_Pooling") return MemoryDir({{"config.json", "{\"pooling_mode\": 1}"}});
    if (name == "tensors") return MemoryDir({{"x.npy", "not a view"}});
    return MemoryDir({});
  };
  std::vector<std::string> warnings;
  auto context = std::make_shared<ReadContext>(
      ReadOptions{.warn = [&warnings](const std::string& line) { warnings.push_back(line); }});
  auto ckpt = OpenCheckpointIn(dir, *context);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  auto volume = Volume::FromCheckpoint(std::move(ckpt).value(), context);
  const Layout& layout = volume->layout();
  std::vector<std::string> names;
  for (uint64_t ino : layout.Children(Layout::kRoot)) {
    names.push_back(std::string(layout.Find(ino)->name()));
  }
  EXPECT_EQ(names, (std::vector<std::string>{".ckptfs", "1_Pooling", "2_Normalize", "config.json",
                                             "model.safetensors", "modules.json", "pytorch_model",
                                             "pytorch_model.bin", "shards", "tensors"}));
  const uint64_t config = layout.Lookup(layout.Lookup(Layout::kRoot, "1_Pooling"), "config.json");
  ASSERT_NE(config, 0u);
  EXPECT_EQ(layout.Find(config)->size, std::string("{\"pooling_mode\": 1}").size());
  EXPECT_EQ(layout.Lookup(layout.Lookup(Layout::kRoot, "tensors"), "x.npy"), 0u);
  EXPECT_EQ(layout.hidden(), std::vector<std::string>{"tensors/x.npy"});
  // Each path left out is said once; the empty folder is shown, as saved.
  EXPECT_EQ(warnings.size(), 3u);
  for (const std::string& line : warnings) {
    EXPECT_NE(line.find("modules.json"), std::string::npos) << line;
  }
  // A modules.json that is no array is only a file.
  auto plain = OpenCheckpointIn(MemoryDir({{"model.safetensors", kW}, {"modules.json", "{"}}),
                                testing::TestContext());
  EXPECT_TRUE(plain.ok()) << plain.status().message();
}

TEST_F(LayoutTest, ShardsAreUnchanged) {
  auto files = TwoShardFiles();
  EXPECT_EQ(ReadAll({"shards", "s1.safetensors"}), files["s1.safetensors"]);
  EXPECT_EQ(ReadAll({"shards", "s2.safetensors"}), files["s2.safetensors"]);
  EXPECT_EQ(ReadAll({"shards", "model.safetensors.index.json"}),
            files["model.safetensors.index.json"]);
  EXPECT_EQ(Resolve({"shards", "config.json"}), 0u);
}

TEST_F(LayoutTest, MergedFileIsValidAlignedAndComplete) {
  std::string merged = ReadAll({"model.safetensors"});
  MemorySource src("merged", merged);
  auto header = ReadSafetensorsHeader(src);
  ASSERT_TRUE(header.ok()) << header.status().message();
  EXPECT_EQ(header->data_start % 8, 0u);
  EXPECT_EQ(header->tensors.size(), kShard1.size() + kShard2.size());
  ASSERT_EQ(header->metadata.size(), 1u);
  EXPECT_EQ(header->metadata[0], (std::pair<std::string, std::string>{"format", "pt"}));
  for (const auto* shard : {&kShard1, &kShard2}) {
    for (const TestTensor& t : *shard) {
      auto it = std::find_if(header->tensors.begin(), header->tensors.end(),
                             [&](const TensorEntry& e) { return e.name == t.name; });
      ASSERT_NE(it, header->tensors.end()) << t.name;
      EXPECT_EQ(it->dtype, t.dtype);
      EXPECT_EQ(it->shape, t.shape);
      EXPECT_EQ((header->data_start + it->begin) % DtypeSize(t.dtype), 0u) << t.name;
      EXPECT_EQ(merged.substr(header->data_start + it->begin, it->end - it->begin), TensorBytes(t));
    }
  }
}

TEST_F(LayoutTest, PerTensorFiles) {
  const TestTensor& f32 = kShard1[0];
  std::string npy = ReadAll({"tensors", "model", "embed", "weight.npy"});
  std::string header = BuildNpyHeader(f32.dtype, f32.shape);
  EXPECT_EQ(npy, header + TensorBytes(f32));

  // numpy has no bfloat16: a one-tensor safetensors instead.
  std::string st = ReadAll({"tensors", "model", "norm.safetensors"});
  MemorySource src("norm", st);
  auto parsed = ReadSafetensorsHeader(src);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  ASSERT_EQ(parsed->tensors.size(), 1u);
  EXPECT_EQ(st.substr(parsed->data_start), TensorBytes(kShard1[1]));

  // "x/y..z": '/' escaped, empty component becomes "%".
  EXPECT_NE(Resolve({"tensors", "x%2Fy", "%", "z.npy"}), 0u);
  EXPECT_EQ(ReadAll({"tensors", "empty.npy"}).size(),
            BuildNpyHeader(Dtype::kF16, std::vector<uint64_t>{0, 2}).size());
}

TEST_F(LayoutTest, XattrsDescribeTensors) {
  auto attrs = volume_->Xattrs(Resolve({"tensors", "lm_head", "weight.npy"}));
  ASSERT_EQ(attrs.size(), 3u);
  EXPECT_EQ(attrs[0].second, "F64");
  EXPECT_EQ(attrs[1].second, "[2,3]");
  EXPECT_EQ(attrs[2].second, "lm_head.weight");
  EXPECT_TRUE(volume_->Xattrs(Resolve({"model.safetensors"})).empty());
}

TEST_F(LayoutTest, EveryWindowMatchesTheWholeFile) {
  uint64_t ino = Resolve({"model.safetensors"});
  std::string whole = Read(ino, 0, UINT64_MAX);
  for (uint64_t size : {1u, 7u, 64u, 300u}) {
    for (uint64_t off = 0; off < whole.size(); off += 3) {
      ASSERT_EQ(Read(ino, off, size), whole.substr(off, size)) << off << "+" << size;
    }
  }
  EXPECT_EQ(Read(ino, whole.size(), 10), "");
  EXPECT_EQ(Read(ino, whole.size() + 100, 10), "");
}

// The merged header's entries are made per read, in chunks of 1024 tensors or 1 MiB of
// entries: the whole file and windows across chunk edges are still the bytes
// BuildSafetensorsHeader writes, for short names (chunks closed by count) and long ones
// (closed by bytes, as a hostile header's would be).
class LayoutHeaderChunks : public ::testing::TestWithParam<size_t> {};

TEST_P(LayoutHeaderChunks, MergedHeaderIsBuildSafetensorsHeader) {
  const size_t name_padding = GetParam();
  const int count = name_padding ? 40 : 2500;
  std::vector<TestTensor> tensors;
  for (int i = 0; i < count; ++i) {
    tensors.push_back({"layer." + std::to_string(i) + std::string(name_padding, 'x') + ".w",
                       i % 3 ? Dtype::kF32 : Dtype::kF16,
                       {static_cast<uint64_t>(i % 4)}});
  }
  auto ckpt = OpenCheckpointIn(
      MemoryDir({{"model.safetensors", MakeSafetensors(tensors, {{"format", "pt"}})}}),
      testing::TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  std::vector<TensorEntry> entries;
  uint64_t offset = 0;
  for (uint32_t i : AlignedOrder(*ckpt)) {
    const Tensor& t = ckpt->tensors[i];
    entries.push_back({t.name, t.dtype, t.shape, offset, offset + t.size});
    offset += t.size;
  }
  const std::string expected = BuildSafetensorsHeader(entries, ckpt->metadata);
  auto volume = Volume::FromCheckpoint(std::move(ckpt).value(), testing::TestContextPtr());
  const uint64_t ino = volume->layout().Lookup(Layout::kRoot, "model.safetensors");
  auto read = [&](uint64_t off, uint64_t size) {
    std::vector<ReadPiece> plan;
    EXPECT_TRUE(volume->PlanRead(ino, off, size, &plan).ok());
    uint64_t total = 0;
    for (const auto& p : plan) total += p.length;
    std::string out(total, '\0');
    EXPECT_TRUE(volume->ReadInto(plan, reinterpret_cast<uint8_t*>(out.data())).ok());
    return out;
  };
  ASSERT_EQ(read(0, expected.size()), expected);
  const uint64_t step = name_padding ? 99991 : 997;
  for (uint64_t off = 0; off < expected.size(); off += step) {
    const uint64_t size = std::min<uint64_t>(4099, expected.size() - off);  // header only
    ASSERT_EQ(read(off, size), expected.substr(off, size)) << off;
  }
}

INSTANTIATE_TEST_SUITE_P(Names, LayoutHeaderChunks,
                         ::testing::Values(size_t{0}, size_t{200} << 10));

TEST_F(LayoutTest, LookupMissesAndBadInodes) {
  EXPECT_EQ(Resolve({"nope"}), 0u);
  EXPECT_EQ(Resolve({"tensors", "model", "embed", "weight"}), 0u);
  EXPECT_EQ(volume_->layout().Find(0), nullptr);
  EXPECT_EQ(volume_->layout().Find(1'000'000), nullptr);
  std::vector<ReadPiece> plan;
  EXPECT_EQ(volume_->PlanRead(1'000'000, 0, 1, &plan).code(), Status::Code::kNotFound);
  EXPECT_EQ(volume_->PlanRead(Layout::kRoot, 0, 1, &plan).code(), Status::Code::kInvalidArgument);
}

// Times come from the sources: stored files their own, per-tensor files their shard's,
// whole-checkpoint files the newest shard's, directories SOURCE's (else the newest file's).
// No per-node field holds them, so a million-tensor mount stays within memory_test's bounds.
TEST(LayoutTimes, FilesShowTheirSourcesTimes) {
  auto opened = OpenCheckpointIn(MemoryDir(TwoShardFiles()), testing::TestContext());
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  Checkpoint ckpt = std::move(opened).value();
  ASSERT_EQ(ckpt.shards.size(), 2u);
  ckpt.shards[0].mtime = {1000, 1};
  ckpt.shards[1].mtime = {3000, 3};
  ckpt.index.at(0).mtime = {500, 0};
  for (StoredFile& f : ckpt.others) f.mtime = {f.name == "config.json" ? 4000 : 10, 4};
  auto layout = Layout::Build(ckpt);
  auto find = [&layout](const std::vector<std::string>& path) {
    uint64_t ino = Layout::kRoot;
    for (const std::string& part : path) ino = layout.Lookup(ino, part);
    EXPECT_NE(ino, 0u);
    return layout.MTime(ino);
  };
  auto seconds = [&](const std::vector<std::string>& path) { return find(path).tv_sec; };
  EXPECT_EQ(seconds({"shards", "s1.safetensors"}), 1000);
  EXPECT_EQ(find({"shards", "s1.safetensors"}).tv_nsec, 1);
  EXPECT_EQ(seconds({"shards", "s2.safetensors"}), 3000);
  EXPECT_EQ(seconds({"shards", "model.safetensors.index.json"}), 500);
  EXPECT_EQ(seconds({"config.json"}), 4000);
  EXPECT_EQ(seconds({"tensors", "model", "embed", "weight.npy"}), 1000);
  EXPECT_EQ(seconds({"tensors", "lm_head", "weight.npy"}), 3000);
  for (const char* whole : {"model.safetensors", "pytorch_model.bin"}) {
    EXPECT_EQ(seconds({whole}), 3000) << whole;
  }
  EXPECT_EQ(seconds({".ckptfs", "metadata.json"}), 3000);
  // No directory time given (a URL): the newest stored file's.
  EXPECT_EQ(seconds({}), 4000);
  EXPECT_EQ(seconds({"tensors", "model"}), 4000);
  ckpt.dir_mtime = {2000, 0};
  EXPECT_EQ(Layout::Build(ckpt).MTime(Layout::kRoot).tv_sec, 2000);
  EXPECT_EQ(layout.MTime(1'000'000).tv_sec, 0);
}

TEST(LayoutFaults, ReadErrorsSurfaceAsStatus) {
  auto files = TwoShardFiles();
  SourceDir dir = MemoryDir(files);
  auto open_memory = dir.open;
  dir.open = [open_memory](const std::string& name) -> Result<std::unique_ptr<ByteSource>> {
    CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> src, open_memory(name));
    if (name != "s1.safetensors") return src;
    // Reads 0 and 1 fetch the header at open; the first data read fails.
    return std::unique_ptr<ByteSource>(new FaultySource(std::move(src), {.fail_read_number = 2}));
  };
  auto ckpt = OpenCheckpointIn(dir, testing::TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  auto volume = Volume::FromCheckpoint(std::move(ckpt).value(), testing::TestContextPtr());
  uint64_t ino = volume->layout().Lookup(Layout::kRoot, "model.safetensors");
  std::vector<ReadPiece> plan;
  ASSERT_TRUE(volume->PlanRead(ino, 0, UINT64_MAX, &plan).ok());
  std::string out(volume->layout().Find(ino)->size, '\0');
  Status s = volume->ReadInto(plan, reinterpret_cast<uint8_t*>(out.data()));
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_NE(s.message().find("s1.safetensors"), std::string::npos);
  EXPECT_EQ(volume->stats().read_errors.load(), 1u);
  // The next read succeeds: one failure does not poison the volume.
  EXPECT_TRUE(volume->ReadInto(plan, reinterpret_cast<uint8_t*>(out.data())).ok());
}

}  // namespace
}  // namespace ckptfs
