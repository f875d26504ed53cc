// Per-key split checkpoints: the file names (escape.h), the reader (split_reader.cc) over
// in-memory directories, and the pytorch_model/ view every mount shows (layout.cc).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/checkpoint/assembly.h"
#include "core/encoding/torch_file.h"
#include "core/format/formats.h"
#include "core/layout/escape.h"
#include "core/run/run_listing.h"
#include "core/volume/volume.h"
#include "tests/unit/format_samples.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

// The table's sample of this format (format_samples.h): map.pt names the key files; detect
// reads nothing.
const testing::FormatSample kSample("split",
                                    {{"map.pt", "not parsed by detect"}, {"config.json", "{}"}});

using ::testing::HasSubstr;
using testing::MakeSafetensors;
using testing::MakeZip;
using testing::MemoryDir;
using testing::TensorBytes;
using testing::TestTensor;

// --- names ------------------------------------------------------------------------------

TEST(SplitNames, EscapeRule) {
  EXPECT_EQ(SplitKeyFileName("model.layers.0.weight"), "model.layers.0.weight.pt");
  EXPECT_EQ(SplitKeyFileName("a/b%c"), "a%2Fb%25c.pt");
  EXPECT_EQ(SplitKeyFileName("map"), "%6Dap.pt");  // never map.pt
  EXPECT_EQ(SplitKeyFileName("map.x"), "map.x.pt");
  EXPECT_EQ(SplitKeyFileName("%6Dap"), "%256Dap.pt");
  EXPECT_EQ(SplitKeyFileName(".."), "...pt");
  // 252 bytes of stem fit (255 with ".pt"); one more is hashed.
  EXPECT_EQ(SplitKeyFileName(std::string(252, 'k')).size(), 255u);
  const std::string long_key(253, 'k');
  const std::string hashed = SplitKeyFileName(long_key);
  ASSERT_EQ(hashed.size(), kSplitHashedSize);
  EXPECT_EQ(hashed.substr(0, 200), std::string(200, 'k'));
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(Fnv1a64(long_key)));
  EXPECT_EQ(hashed.substr(200), std::string("~") + hex + ".pt");
  // Escapes count toward the length: 100 slashes are 300 bytes of name.
  EXPECT_EQ(SplitKeyFileName(std::string(100, '/')).size(), kSplitHashedSize);
}

TEST(SplitNames, FnvIsFnv1a64) {
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ull);
}

TEST(SplitNames, DecodeInvertsTheRule) {
  for (std::string key : {"w", "a/b%c", "map", "%6Dap", "map.pt", "", "...", "%2F"}) {
    auto decoded = DecodeSplitFileName(SplitKeyFileName(key));
    ASSERT_TRUE(decoded.has_value()) << key;
    EXPECT_EQ(decoded->key, key);
    EXPECT_FALSE(decoded->hashed);
  }
  auto hashed = DecodeSplitFileName(SplitKeyFileName(std::string(300, 'q')));
  ASSERT_TRUE(hashed.has_value());
  EXPECT_TRUE(hashed->hashed);
  EXPECT_EQ(hashed->key, std::string(200, 'q'));
  for (std::string bad :
       {"map.pt", "a%zz.pt", "a%2f.pt", "%6Dapx.pt", "x.bin", "a/b.pt", "pt", "a%.pt", "a%2.pt"}) {
    EXPECT_FALSE(DecodeSplitFileName(bad).has_value()) << bad;
  }
  EXPECT_FALSE(DecodeSplitFileName(std::string(260, 'x') + ".pt").has_value());
}

// --- the reader ---------------------------------------------------------------------------

// Two keys with one file name: a long key, and a short one spelled as its hashed name.
std::pair<std::string, std::string> KeysWithOneFileName() {
  const std::string long_key(260, 'q');
  const std::string name = SplitKeyFileName(long_key);
  return {long_key, name.substr(0, name.size() - 3)};
}

std::string MapFile(const std::vector<std::string>& keys) {
  std::vector<std::string_view> views(keys.begin(), keys.end());
  return MakeZip({{"map/data.pkl", BuildTorchStringListPickle(views)}, {"map/version", "3\n"}});
}

// torch.save(tensor) of `t`, its bytes TensorBytes(t).
std::string KeyFile(const TestTensor& t) {
  const std::string bytes = TensorBytes(t);
  const std::vector<uint64_t> stride = RowMajorStrides(t.shape);
  const TorchPickleEntry entry{"", t.dtype, 0,     bytes.size() / DtypeSize(t.dtype),
                               0,  t.shape, stride};
  return MakeZip(
      {{"k/data.pkl", BuildTorchTensorPickle(entry)}, {"k/data/0", bytes}, {"k/version", "3\n"}});
}

const std::vector<TestTensor> kKeys = {{"z.weight", Dtype::kF32, {2, 3}},
                                       {"a/b%c", Dtype::kBF16, {4}},
                                       {"map", Dtype::kI64, {}},
                                       {std::string(300, 'L'), Dtype::kF16, {2}},
                                       {"empty", Dtype::kF32, {0, 3}}};

std::map<std::string, std::string> SplitFiles(const std::vector<TestTensor>& tensors) {
  std::vector<std::string> keys;
  std::map<std::string, std::string> files;
  for (const TestTensor& t : tensors) {
    keys.push_back(t.name);
    files[SplitKeyFileName(t.name)] = KeyFile(t);
  }
  files["map.pt"] = MapFile(keys);
  return files;
}

Result<Checkpoint> Open(std::map<std::string, std::string> files) {
  return OpenCheckpointIn(MemoryDir(std::move(files)), testing::TestContext());
}

std::string Refusal(std::map<std::string, std::string> files) {
  auto ckpt = Open(std::move(files));
  return ckpt.ok() ? "accepted" : ckpt.status().message();
}

// Every tensor of `ckpt` is the one `tensors` lists, its bytes where the tensor says.
void ExpectTensors(const Checkpoint& ckpt, const std::vector<TestTensor>& tensors) {
  ASSERT_EQ(ckpt.tensors.size(), tensors.size());
  for (const TestTensor& want : tensors) {
    const Tensor* t = FindTensor(ckpt, want.name);
    ASSERT_NE(t, nullptr) << want.name;
    EXPECT_EQ(t->dtype, want.dtype) << want.name;
    EXPECT_EQ(t->shape, want.shape) << want.name;
    std::string bytes(t->size, '\0');
    ASSERT_TRUE(ckpt.shards[t->shard]
                    .source->ReadAt(t->offset, {reinterpret_cast<uint8_t*>(bytes.data()), t->size})
                    .ok());
    EXPECT_EQ(bytes, TensorBytes(want)) << want.name;
  }
}

TEST(SplitReader, ReadsKeysInMapOrder) {
  auto files = SplitFiles(kKeys);
  files["config.json"] = "{}";
  auto ckpt = Open(files);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_EQ(ckpt->format, FormatNamed("split"));
  ExpectTensors(*ckpt, kKeys);
  // Shards follow map.pt, which is the index; config.json is a root file.
  ASSERT_EQ(ckpt->shards.size(), kKeys.size());
  for (size_t i = 0; i < kKeys.size(); ++i) {
    EXPECT_EQ(ckpt->shards[i].name, SplitKeyFileName(kKeys[i].name));
  }
  ASSERT_EQ(ckpt->index.size(), 1u);
  EXPECT_EQ(ckpt->index[0].name, "map.pt");
  ASSERT_EQ(ckpt->others.size(), 1u);
  EXPECT_EQ(ckpt->others[0].name, "config.json");
  EXPECT_EQ(ckpt->model.tensors, kKeys.size());
}

TEST(SplitReader, KeyFileMayHoldAWiderStorage) {
  // torch.save(big[1]) saves all of big's storage; the tensor is a slice of the record.
  const std::vector<uint64_t> shape{3}, stride{1};
  const std::string storage(6 * 4, '\7');
  auto files = SplitFiles({});
  files["map.pt"] = MapFile({"row"});
  files["row.pt"] =
      MakeZip({{"k/data.pkl", BuildTorchTensorPickle({"", Dtype::kF32, 0, 6, 3, shape, stride})},
               {"k/data/0", storage}});
  auto ckpt = Open(files);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  ASSERT_EQ(ckpt->tensors.size(), 1u);
  EXPECT_EQ(ckpt->tensors[0].size, 12u);
  EXPECT_EQ(ckpt->tensors[0].offset, ckpt->storages[0].offset + 12);
}

TEST(SplitReader, ParentDirectoryHoldingPytorchModel) {
  // An HF model directory: config.json beside pytorch_model/.
  SourceDir dir = MemoryDir({{"config.json", "{}"}});
  dir.dirs = {"pytorch_model"};
  dir.open_dir = [](const std::string& name) -> Result<SourceDir> {
    if (name != "pytorch_model") return Status::NotFound(name);
    SourceDir sub = MemoryDir(SplitFiles(kKeys));
    sub.path = "mem/pytorch_model";
    return sub;
  };
  auto ckpt = OpenCheckpointIn(dir, testing::TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_EQ(ckpt->format, FormatNamed("split"));
  ExpectTensors(*ckpt, kKeys);
  ASSERT_EQ(ckpt->others.size(), 1u);
  EXPECT_EQ(ckpt->others[0].name, "config.json");
}

TEST(SplitReader, WinsOverItsOwnPtFiles) {
  // Many .pt files and no index would be the torch entry's refusal; map.pt names them.
  auto files = SplitFiles({{"a", Dtype::kF32, {1}}, {"b", Dtype::kF32, {1}}});
  auto ckpt = Open(files);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_EQ(ckpt->format, FormatNamed("split"));
}

TEST(SplitReader, Refusals) {
  const std::vector<TestTensor> two = {{"a", Dtype::kF32, {2}}, {"b", Dtype::kF32, {1}}};
  auto files = SplitFiles(two);

  auto not_list = files;
  not_list["map.pt"] = KeyFile(two[0]);
  EXPECT_THAT(Refusal(not_list), HasSubstr("map.pt: not a list of key names"));

  auto twice = files;
  twice["map.pt"] = MapFile({"a", "b", "a"});
  EXPECT_THAT(Refusal(twice), HasSubstr("key \"a\" is listed twice"));

  auto missing = files;
  missing.erase("b.pt");
  EXPECT_THAT(Refusal(missing), HasSubstr("b.pt: shard named in mem/map.pt is missing"));

  auto not_tensor = files;
  const std::vector<uint64_t> shape{1}, stride{1};
  const TorchPickleEntry entry{"b", Dtype::kF32, 0, 1, 0, shape, stride};
  not_tensor["b.pt"] =
      MakeZip({{"k/data.pkl", BuildTorchPickle({&entry, 1})}, {"k/data/0", std::string(4, '\0')}});
  EXPECT_THAT(Refusal(not_tensor), HasSubstr("b.pt: not a bare tensor"));

  auto stray = files;
  stray["c.pt"] = KeyFile(two[0]);
  EXPECT_THAT(Refusal(stray), HasSubstr("c.pt: is the file of key \"c\", which mem/map.pt does"));

  // (issue 23) HF Trainer's own files beside the keys are plain files, never stray keys.
  auto trainer = files;
  trainer["optimizer.pt"] = KeyFile(two[0]);
  trainer["scheduler.pt"] = KeyFile(two[0]);
  trainer["scaler.pt"] = KeyFile(two[0]);
  auto with_trainer = OpenCheckpointIn(MemoryDir(trainer), testing::TestContext());
  EXPECT_TRUE(with_trainer.ok()) << with_trainer.status().message();

  auto bad_escape = files;
  bad_escape["a%zz.pt"] = KeyFile(two[0]);
  EXPECT_THAT(Refusal(bad_escape), HasSubstr("a%zz.pt: is no key's file name"));

  auto nul = files;
  nul["map.pt"] = MapFile({"a", std::string("b\0c", 3)});
  EXPECT_THAT(Refusal(nul),
              HasSubstr("map.pt: key \"b\\x00c\": it holds a NUL byte (names become paths)"));

  // A list holding something else than str.
  auto ints = files;
  ints["map.pt"] = MakeZip({{"m/data.pkl", std::string("\x80\x02]q\x00(K\x01"
                                                       "e.",
                                                       10)}});
  EXPECT_THAT(Refusal(ints), HasSubstr("item 0 of the list is not a str"));

  // A 217-byte key written as another key's hashed name takes that key's file name.
  auto meet = files;
  const auto [long_key, look_alike] = KeysWithOneFileName();
  meet["map.pt"] = MapFile({long_key, look_alike});
  meet[SplitKeyFileName(long_key)] = KeyFile(two[0]);
  EXPECT_THAT(Refusal(meet), HasSubstr("both have the file name " + SplitKeyFileName(long_key)));

  EXPECT_EQ(Refusal(files), "accepted");
}

TEST(SplitReader, RunEntriesHoldingPytorchModel) {
  // checkpoint-N/ of an HF run, each config.json beside pytorch_model/: the run lists them
  // complete, and one of them alone is a checkpoint, not a run of one "pytorch_model".
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("ckptfs_split_" + std::to_string(getpid()));
  fs::remove_all(root);
  for (const char* step : {"checkpoint-100", "checkpoint-200"}) {
    fs::create_directories(root / step / "pytorch_model");
    std::ofstream(root / step / "config.json") << "{}";
    for (const auto& [name, bytes] : SplitFiles(kKeys)) {
      std::ofstream(root / step / "pytorch_model" / name, std::ios::binary) << bytes;
    }
  }
  auto run_dir = OpenSourceDir(root.string(), testing::TestContext(), {});
  ASSERT_TRUE(run_dir.ok()) << run_dir.status().message();
  auto is_run = IsRun(*run_dir);
  ASSERT_TRUE(is_run.ok());
  EXPECT_TRUE(*is_run);
  auto run = ListRun(*run_dir);
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_EQ(run->entries.size(), 2u);
  for (const RunEntry& e : run->entries) {
    EXPECT_TRUE(e.complete) << e.name << ": " << e.why_incomplete;
    EXPECT_EQ(e.format, "split") << e.name;
    EXPECT_EQ(e.problem, "") << e.name;
  }
  EXPECT_EQ(run->latest, "checkpoint-200");
  // Its size and signature count the key files too.
  uint64_t bytes = 2;  // config.json
  for (const auto& [name, file] : SplitFiles(kKeys)) bytes += file.size();
  EXPECT_EQ(run->entries[0].bytes, bytes);
  EXPECT_NE(run->entries[0].signature.find("pytorch_model/map.pt:"), std::string::npos);
  auto one = OpenSourceDir((root / "checkpoint-100").string(), testing::TestContext(), {});
  ASSERT_TRUE(one.ok());
  is_run = IsRun(*one);
  ASSERT_TRUE(is_run.ok());
  EXPECT_FALSE(*is_run);
  // A truncated map.pt makes its entry incomplete, named.
  fs::resize_file(root / "checkpoint-200" / "pytorch_model" / "map.pt", 40);
  run_dir = OpenSourceDir(root.string(), testing::TestContext(), {});
  ASSERT_TRUE(run_dir.ok());
  run = ListRun(*run_dir);
  ASSERT_TRUE(run.ok());
  ASSERT_EQ(run->entries.size(), 2u);
  EXPECT_FALSE(run->entries[1].complete);
  EXPECT_THAT(run->entries[1].why_incomplete, HasSubstr("pytorch_model/map.pt: "));
  fs::remove_all(root);
}

// --- the pytorch_model/ view --------------------------------------------------------------

std::string ReadWhole(const Volume& volume, uint64_t ino) {
  std::vector<ReadPiece> plan;
  const uint64_t size = volume.layout().Find(ino)->size;
  EXPECT_TRUE(volume.PlanRead(ino, 0, size, &plan).ok());
  std::string out(size, '\0');
  EXPECT_TRUE(volume.ReadInto(plan, reinterpret_cast<uint8_t*>(out.data())).ok());
  return out;
}

// pytorch_model/'s files of `volume` (name -> bytes), read as FUSE would.
std::map<std::string, std::string> ViewFiles(const Volume& volume) {
  const Layout& layout = volume.layout();
  const uint64_t dir = layout.Lookup(Layout::kRoot, "pytorch_model");
  EXPECT_NE(dir, 0u);
  std::map<std::string, std::string> out;
  for (uint64_t ino : layout.Children(dir)) {
    out[std::string(layout.Find(ino)->name())] = ReadWhole(volume, ino);
  }
  return out;
}

const std::vector<TestTensor> kModel = {{"model.embed.weight", Dtype::kF32, {3, 5}},
                                        {"model.norm", Dtype::kBF16, {7}},
                                        {"odd", Dtype::kU16, {3}},  // no torch 1.13 type
                                        {"x/y..z", Dtype::kI8, {}},
                                        {"map", Dtype::kF64, {2}},
                                        {"empty", Dtype::kF16, {0, 2}},
                                        {std::string(260, 'n'), Dtype::kU8, {5}}};

TEST(SplitView, EveryMountShowsItAndItReadsBackAsASplitCheckpoint) {
  auto ckpt = Open({{"model.safetensors", MakeSafetensors(kModel)},
                    {"pytorch_model", "a SOURCE file whose name the view owns"}});
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  auto volume = Volume::FromCheckpoint(std::move(ckpt).value(), testing::TestContextPtr());
  EXPECT_EQ(volume->layout().hidden(), std::vector<std::string>{"pytorch_model"});
  EXPECT_THAT(volume->layout().notes(),
              ::testing::Contains(HasSubstr("\"odd\" (U16) is not in pytorch_model.bin or "
                                            "pytorch_model/")));
  std::map<std::string, std::string> view = ViewFiles(*volume);
  EXPECT_EQ(view.size(), kModel.size());  // map.pt, and every tensor but "odd"
  EXPECT_TRUE(view.count("map.pt"));
  EXPECT_TRUE(view.count("x%2Fy..z.pt"));
  EXPECT_TRUE(view.count("%6Dap.pt"));
  EXPECT_TRUE(view.count(SplitKeyFileName(std::string(260, 'n'))));

  // map.pt lists the keys in stored order: the safetensors file's data order.
  MemorySource map("map.pt", view["map.pt"]);
  auto keys = ReadTorchStringList(map);
  ASSERT_TRUE(keys.ok()) << keys.status().message();
  std::vector<std::string> want;
  for (const TestTensor& t : kModel) {
    if (t.name != "odd") want.push_back(t.name);
  }
  EXPECT_EQ(*keys, want);

  // Each key file is torch.save(tensor) whose one record is the tensor's bytes.
  for (const auto& [name, bytes] : view) {
    if (name == "map.pt") continue;
    MemorySource source(name, bytes);
    auto file = ReadTorchFile(source);
    ASSERT_TRUE(file.ok()) << name << ": " << file.status().message();
    EXPECT_TRUE(file->root_is_tensor) << name;
    ASSERT_EQ(file->storages.size(), 1u);
  }

  // The view is itself a split checkpoint: reading it back gives the same tensors.
  std::vector<TestTensor> torch_typed;
  for (const TestTensor& t : kModel) {
    if (t.name != "odd") torch_typed.push_back(t);
  }
  auto back = Open(view);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->format, FormatNamed("split"));
  ExpectTensors(*back, torch_typed);
}

TEST(SplitView, KeyFilesAreZeroCopyAndMadePerRead) {
  auto ckpt = Open({{"model.safetensors", MakeSafetensors(kModel)}});
  ASSERT_TRUE(ckpt.ok());
  auto volume = Volume::FromCheckpoint(std::move(ckpt).value(), testing::TestContextPtr());
  const Layout& layout = volume->layout();
  const uint64_t dir = layout.Lookup(Layout::kRoot, "pytorch_model");
  const uint64_t ino = layout.Lookup(dir, "model.embed.weight.pt");
  ASSERT_NE(ino, 0u);
  const Node& node = *layout.Find(ino);
  EXPECT_EQ(node.count, 0u);  // no extents kept
  EXPECT_GE(node.tensor, 0);  // xattrs, mtime: the tensor's
  uint64_t stored = 0, stored_bytes = 0;
  for (const Extent& e : layout.Extents(ino, 0, UINT64_MAX)) {
    if (layout.Stored(e.source)) {
      ++stored;
      stored_bytes += e.length;
    }
  }
  EXPECT_EQ(stored, 1u);
  EXPECT_EQ(stored_bytes, 3u * 5 * 4);
  // Any window reads the same bytes as the whole file.
  const std::string whole = ReadWhole(*volume, ino);
  for (uint64_t off = 0; off < whole.size(); off += 37) {
    std::vector<ReadPiece> plan;
    ASSERT_TRUE(volume->PlanRead(ino, off, 50, &plan).ok());
    uint64_t n = 0;
    for (const ReadPiece& p : plan) n += p.length;
    std::string part(n, '\0');
    ASSERT_TRUE(volume->ReadInto(plan, reinterpret_cast<uint8_t*>(part.data())).ok());
    EXPECT_EQ(part, whole.substr(off, 50)) << off;
  }
}

TEST(SplitView, KeysMeetingOnAFileNameKeepTheFirst) {
  const auto [long_key, look_alike] = KeysWithOneFileName();
  ASSERT_EQ(SplitKeyFileName(long_key), SplitKeyFileName(look_alike));
  // The look-alike is stored first: it keeps the file, the long key is left out of the
  // directory and of map.pt, with a note.
  auto ckpt =
      Open({{"model.safetensors",
             MakeSafetensors({{look_alike, Dtype::kF32, {2}}, {long_key, Dtype::kF32, {3}}})}});
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  auto volume = Volume::FromCheckpoint(std::move(ckpt).value(), testing::TestContextPtr());
  EXPECT_THAT(volume->layout().notes(),
              ::testing::Contains(HasSubstr("is not in pytorch_model/: its file")));
  std::map<std::string, std::string> view = ViewFiles(*volume);
  ASSERT_EQ(view.size(), 2u);
  MemorySource map("map.pt", view["map.pt"]);
  auto keys = ReadTorchStringList(map);
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(*keys, std::vector<std::string>{look_alike});
  MemorySource file("f", view[SplitKeyFileName(look_alike)]);
  auto tensor = ReadTorchFile(file);
  ASSERT_TRUE(tensor.ok());
  EXPECT_EQ(tensor->tensors[0].shape, std::vector<uint64_t>{2});
}

TEST(SplitView, StoredOrderOfATorchSource) {
  // Two views of one storage, "z" at its start and "a" after: map.pt follows the bytes
  // (what the pickle and the merged .bin do), not names.
  const std::vector<uint64_t> s2{2}, st{1};
  std::vector<TorchPickleEntry> entries{{"z", Dtype::kF32, 0, 4, 0, s2, st},
                                        {"a", Dtype::kF32, 0, 4, 2, s2, st}};
  auto ckpt = Open({{"ckpt.pt", MakeZip({{"archive/data.pkl", BuildTorchPickle(entries)},
                                         {"archive/data/0", std::string(16, '\3')}})}});
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  auto volume = Volume::FromCheckpoint(std::move(ckpt).value(), testing::TestContextPtr());
  std::map<std::string, std::string> view = ViewFiles(*volume);
  MemorySource map("map.pt", view["map.pt"]);
  auto keys = ReadTorchStringList(map);
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(*keys, (std::vector<std::string>{"z", "a"}));
  EXPECT_EQ(view.size(), 3u);
}

}  // namespace
}  // namespace ckptfs
