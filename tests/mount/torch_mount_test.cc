// Mount tests of PyTorch checkpoints (issue 4): the real ckptfs binary over checkpoints
// written by the real torch.save (scripts/make_torch_checkpoint.py), read by real
// clients in tests/mount/check_torch_*.py: torch.load of the merged pytorch_model.bin
// with and without weights_only, numpy.load of tensors/, an independent safetensors
// reader for model.safetensors, `python3 -m zipfile -t`. The checks take the SOURCE
// files loaded by real torch as the oracle. Also: the merged pytorch_model.bin of
// safetensors sources (CRC fields 0, or computed with --zip-crc), zstd-compressed
// torch shards, and hostile torch files, which must be refused without running any
// of their code.

#include <cctype>
#include <filesystem>

#include "mount_harness.h"

namespace ckptfs::mount_test {
namespace {

// Writes a torch checkpoint of `kind` with scripts/make_torch_checkpoint.py; returns
// "" or what went wrong.
std::string GenerateTorchCheckpoint(const std::string& kind, const std::string& out_dir,
                                    const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {kPython, ScriptPath("scripts/make_torch_checkpoint.py"), kind,
                                   out_dir};
  args.insert(args.end(), extra.begin(), extra.end());
  const ProcessResult r = RunProcess(args, kGenerateTimeout);
  return r.exit_code == 0 ? "" : "generating a torch checkpoint failed: " + r.Describe();
}

class TorchMountTest : public MountFixture {
 protected:
  void GenerateTorch(const std::string& kind, const std::string& out_dir,
                     const std::vector<std::string>& extra = {}) {
    ASSERT_EQ(GenerateTorchCheckpoint(kind, out_dir, extra), "");
  }

  // Mounts `source` on a fresh mount point, logging to a file, and runs every torch
  // check with `expected` as SRC (the source itself, or the plain twin of a compressed
  // one). Returns the mount point, or "" if the mount failed.
  std::string MountAndCheck(const std::string& source, const std::string& expected,
                            const std::vector<std::string>& options = {}) {
    const std::string n = std::to_string(mounts_.size());
    const std::string mountpoint = scratch_->MakeDir("mnt" + n);
    const std::string log = scratch_->Path("daemon" + n + ".log");
    std::vector<std::string> all_options = {"--log-file", log};
    all_options.insert(all_options.end(), options.begin(), options.end());
    SCOPED_TRACE("SOURCE " + source);
    ProcessResult mount;
    Mount(source, mountpoint, &mount, all_options);
    if (!IsMounted(mountpoint)) return "";
    const std::string mount_stderr = scratch_->Path("mount" + n + ".stderr");
    std::ofstream(mount_stderr) << mount.err;
    // pytorch_model.bin: torch.load both ways, zip layout, `python3 -m zipfile -t`.
    RunCheck("check_torch_bin.py", {expected, mountpoint});
    // Root, shards/, model.safetensors, tensors/ (npy, xattrs); a log line (the daemon's
    // or at mount) names every non-contiguous tensor left out.
    RunCheck("check_torch_views.py", {expected, mountpoint, "--log", log, "--log", mount_stderr});
    RunCheck("check_torch_metadata.py", {expected, mountpoint});
    return mountpoint;
  }

  void Inspect(const std::string& source) { RunCheck("check_torch_inspect.py", {kCkptfs, source}); }

  // `ls DIR` through a child (never from this process: a hung mount would hang it).
  void ExpectListing(const std::string& dir, const std::string& expected) {
    const ProcessResult ls = RunProcess({"env", "LC_ALL=C", "ls", "--", dir}, kCheckTimeout);
    EXPECT_EQ(ls.exit_code, 0) << ls.Describe();
    EXPECT_EQ(ls.out, expected) << ls.Describe();
  }
};

// transformers' layout: pytorch_model.bin.index.json and three shards of a llama-like
// model, config.json and generation_config.json beside them.
TEST_F(TorchMountTest, ShardedWithIndex) {
  const std::string source = scratch_->Path("sharded");
  ASSERT_NO_FATAL_FAILURE(GenerateTorch("sharded", source));
  MountAndCheck(source, source);
  Inspect(source);
}

// A directory holding one pytorch_model.bin, and that file's own path.
TEST_F(TorchMountTest, SingleFileDirectoryAndPath) {
  const std::string dir = scratch_->Path("single");
  ASSERT_NO_FATAL_FAILURE(GenerateTorch("single", dir));
  for (const std::string& source : {dir, dir + "/pytorch_model.bin"}) {
    MountAndCheck(source, source);
    Inspect(source);
  }
}

// torch.save({'epoch': 10, 'loss': 0.25, 'model_state_dict': ..., 'optimizer_state_dict':
// Adam's after one step, ...}): nested names become directories, int keys decimal, and
// the rest goes to .ckptfs/metadata.json. Mounted as a directory and as `train_state.pt`,
// with --model-key '' so that the merged files hold every tensor too (the model view's
// own tests are TrainingDictModelView and below).
TEST_F(TorchMountTest, TrainStateNested) {
  const std::string dir = scratch_->Path("train_state");
  ASSERT_NO_FATAL_FAILURE(GenerateTorch("train_state", dir));
  for (const std::string& source : {dir, dir + "/train_state.pt"}) {
    Inspect(source);
    const std::string mountpoint = MountAndCheck(source, source, {"--model-key", ""});
    if (mountpoint.empty()) continue;
    ExpectListing(mountpoint + "/tensors/model_state_dict/fc", "bias.npy\nweight.npy\n");
    ExpectListing(mountpoint + "/tensors/optimizer_state_dict/state/0",
                  "exp_avg.npy\nexp_avg_sq.npy\nstep.npy\n");
    ExpectListing(mountpoint + "/tensors/ema", "0.npy\n1.npy\n");
  }
}

// The model view (issue 13): a training dict's merged files hold model_state_dict with
// that key stripped, and a fresh TinyNet takes pytorch_model.bin and model.safetensors with
// load_state_dict(strict=True); tensors/ keeps the optimizer state and the EMA. Mounted as
// the directory and as the file; then `-o model_key=ema` (a list: names 0 and 1), inspect
// naming the sub-tree, and an unknown key refused in one line naming the sub-trees.
TEST_F(TorchMountTest, TrainingDictModelView) {
  const std::string dir = scratch_->Path("train_state");
  ASSERT_NO_FATAL_FAILURE(GenerateTorch("train_state", dir));
  const std::string file = dir + "/train_state.pt";
  for (const std::string& source : {dir, file}) {
    SCOPED_TRACE(source);
    const std::string mnt = scratch_->MakeDir("mnt" + std::to_string(mounts_.size()));
    Mount(source, mnt);
    if (!IsMounted(mnt)) return;
    RunCheck("check_model_view.py",
             {file, mnt, "--key", "model_state_dict", "--module", "TinyNet", "--tensor",
              "optimizer_state_dict/state/0/exp_avg.npy", "--tensor", "ema/1.npy"});
  }
  const std::string ema = scratch_->MakeDir("mnt-ema");
  Mount(file, ema, nullptr, {"-o", "model_key=ema"});
  if (!IsMounted(ema)) return;
  RunCheck("check_model_view.py",
           {file, ema, "--key", "ema", "--tensor", "model_state_dict/fc/weight.npy"});

  const ProcessResult text = Ckptfs({"inspect", file}, kCheckTimeout);
  EXPECT_EQ(text.exit_code, 0) << text.Describe();
  EXPECT_NE(text.out.find("\nmodel    model_state_dict (5 of 24 tensors; --model-key to choose)\n"),
            std::string::npos)
      << text.out;
  const ProcessResult json =
      Ckptfs({"inspect", "--json", "--model-key", "ema", file}, kCheckTimeout);
  EXPECT_EQ(json.exit_code, 0) << json.Describe();
  EXPECT_NE(json.out.find("\"key\": \"ema\""), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("\"tensor_count\": 2"), std::string::npos) << json.out;

  const std::string unused = scratch_->MakeDir("mnt-unknown");
  const ProcessResult refused =
      Ckptfs({"mount", "--model-key", "emma", file, unused}, kMountTimeout);
  EXPECT_EQ(refused.exit_code, 2) << refused.Describe();
  EXPECT_EQ(refused.err, "ckptfs: " + file +
                             ": --model-key emma: no sub-tree of that name holds tensors "
                             "(sub-trees that do: ema, extras, model_state_dict, "
                             "optimizer_state_dict; --model-key '' keeps every tensor)\n");
  EXPECT_FALSE(IsMounted(unused));
}

// A Lightning .ckpt written by torch.save with Lightning's real keys: the merged files
// hold state_dict with only `state_dict.` stripped (its `model.` and `head.` stay), and a
// fresh LitNet takes them strict; tensors/ keeps optimizer_states and the callbacks' state.
TEST_F(TorchMountTest, LightningCkptModelView) {
  const std::string dir = scratch_->Path("lightning");
  ASSERT_NO_FATAL_FAILURE(GenerateTorch("lightning", dir));
  const std::string file = dir + "/epoch=3-step=100.ckpt";
  for (const std::string& source : {dir, file}) {
    SCOPED_TRACE(source);
    const std::string mnt = scratch_->MakeDir("mnt" + std::to_string(mounts_.size()));
    Mount(source, mnt);
    if (!IsMounted(mnt)) return;
    RunCheck("check_model_view.py", {file, mnt, "--key", "state_dict", "--module", "LitNet",
                                     "--tensor", "optimizer_states/0/state/0/exp_avg.npy"});
  }
  const ProcessResult text = Ckptfs({"inspect", file}, kCheckTimeout);
  EXPECT_NE(text.out.find("\nmodel    state_dict (7 of "), std::string::npos) << text.Describe();
}

// lm_head.weight is model.embed_tokens.weight (and decoder.norm.weight is
// encoder.norm.weight): both names in every view, and in pytorch_model.bin both share
// one storage (check_torch_bin.py compares data_ptr()s).
TEST_F(TorchMountTest, TiedWeights) {
  const std::string source = scratch_->Path("tied");
  ASSERT_NO_FATAL_FAILURE(GenerateTorch("tied", source));
  MountAndCheck(source, source);
  Inspect(source);
}

// bf16, f16, f32, f64, int64, int32, int16, int8, uint8 and bool with every bit pattern,
// scalars, zero-size tensors and one tensor over 1 MiB.
TEST_F(TorchMountTest, Dtypes) {
  const std::string source = scratch_->Path("dtypes");
  ASSERT_NO_FATAL_FAILURE(GenerateTorch("dtypes", source));
  MountAndCheck(source, source);
  Inspect(source);
}

// Slices at an offset into bigger storages and views sharing one storage are right in
// every view; non-contiguous tensors (transposed, strided, stride 0) are in
// pytorch_model.bin with their exact strides, left out of model.safetensors and
// tensors/ with a log line naming each, and still listed by inspect.
TEST_F(TorchMountTest, StorageOffsetsAndNonContiguous) {
  const std::string source = scratch_->Path("views");
  ASSERT_NO_FATAL_FAILURE(GenerateTorch("views", source));
  MountAndCheck(source, source);
  Inspect(source);
}

// Torch shards stored only as NAME.bin.zst: as the zstd command writes them (one frame)
// and seekable. Every check compares with the plain checkpoint.
TEST_F(TorchMountTest, ZstdCompressedShards) {
  const std::string plain = scratch_->Path("plain");
  ASSERT_NO_FATAL_FAILURE(GenerateTorch("sharded", plain));
  for (const char* compress : {"single", "seekable"}) {
    SCOPED_TRACE(std::string("--compress ") + compress);
    const std::string source = scratch_->Path(std::string("zst-") + compress);
    ASSERT_NO_FATAL_FAILURE(
        GenerateTorch("zst", source, {"--from", plain, "--compress", compress}));
    ASSERT_TRUE(fs::exists(source + "/pytorch_model-00001-of-00003.bin.zst"));
    ASSERT_FALSE(fs::exists(source + "/pytorch_model-00001-of-00003.bin"));
    MountAndCheck(source, plain);
    Inspect(source);
  }
}

// --zip-crc on a torch source changes nothing: the CRCs are the source's already.
TEST_F(TorchMountTest, ZipCrcOptionOnTorchSource) {
  const std::string source = scratch_->Path("tied");
  ASSERT_NO_FATAL_FAILURE(GenerateTorch("tied", source));
  MountAndCheck(source, source, {"--zip-crc"});
}

// The merged pytorch_model.bin of a safetensors source (make_checkpoint.py's mixed
// kind: every dtype, scalars, empty tensors, awkward names), loaded by torch and
// compared with the safetensors shards tensor by tensor. Without --zip-crc its data
// records carry CRC 0; metadata.json is {"__metadata__": {...}}.
TEST_F(TorchMountTest, SafetensorsSourceMergedBin) {
  const std::string source = scratch_->Path("mixed");
  ASSERT_NO_FATAL_FAILURE(Generate(source));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint));
  RunCheck("check_torch_bin.py", {source, mountpoint, "--crc", "zero"});
  RunCheck("check_torch_metadata.py", {source, mountpoint});
  RunCheck("check_root.py", {source, mountpoint});
}

// `ckptfs mount --zip-crc`: the CRCs are computed at mount, so zip testers pass.
TEST_F(TorchMountTest, SafetensorsSourceZipCrc) {
  const std::string source = scratch_->Path("mixed");
  ASSERT_NO_FATAL_FAILURE(Generate(source));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint, nullptr, {"--zip-crc"}));
  RunCheck("check_torch_bin.py", {source, mountpoint, "--crc", "valid"});
  RunCheck("check_torch_metadata.py", {source, mountpoint});
}

// ---------------------------------------------------------------------------
// Issue 23, item 1: a torch.save of what training code saves beyond tensors (a Namespace
// holding a Path and a set, numpy scalars and arrays, the three RNG states, a class of
// the writer's own holding a tensor, complex64), at torch's default protocol 2 and at
// protocol 4. Mounted by file path with --model-key '' (merged views hold every tensor
// under its full name); numpy and torch read tensors/, pytorch_model.bin and
// model.safetensors against the writer's oracle (check_torch_any.py), and
// metadata.json holds the opaque forms.
TEST_F(TorchMountTest, AnyPythonValues) {
  const std::string dir = scratch_->Path("any_values");
  ASSERT_NO_FATAL_FAILURE(GenerateTorch("any_values", dir));
  for (const auto& [file, oracle] : {std::pair{"any_values.pt", "tensors_p2.pt"},
                                     std::pair{"any_values_p4.pt", "tensors_p4.pt"}}) {
    const std::string mountpoint = scratch_->MakeDir(std::string("mnt_") + file);
    ASSERT_NO_FATAL_FAILURE(Mount(dir + "/" + file, mountpoint, nullptr, {"--model-key", ""}));
    RunCheck("check_torch_any.py",
             {mountpoint, dir + "/oracle/" + oracle, dir + "/oracle/metadata.json"});
  }
}

// Issue 38: a dict keyed by enum members (an Enum, an IntEnum, a str-mixin Enum, nested;
// pickled by name as this Python does, getattr(Phase, 'TRAIN'), and by value as others
// do, Phase(1)) is read, never run: each key is named as docs/formats.md says
// (Phase.TRAIN, ByValue(1)), and torch and numpy read pytorch_model.bin and tensors/
// (check_enum_keys.py); inspect reads it too.
TEST_F(TorchMountTest, EnumKeys) {
  const std::string dir = scratch_->MakeDir("enum_keys");
  const ProcessResult write = RunProcess(
      {kPython, ScriptPath("tests/mount/check_enum_keys.py"), "write", dir}, kGenerateTimeout);
  ASSERT_EQ(write.exit_code, 0) << write.Describe();
  const ProcessResult inspect = Ckptfs({"inspect", dir}, kGenerateTimeout);
  EXPECT_EQ(inspect.exit_code, 0) << inspect.Describe();
  const std::string mountpoint = scratch_->MakeDir("mnt_enum_keys");
  ASSERT_NO_FATAL_FAILURE(Mount(dir, mountpoint, nullptr, {"--model-key", ""}));
  RunCheck("check_enum_keys.py", {"check", dir, mountpoint});
}

// Issue 37: the verdict on the source and the guarantee on what ckptfs writes. The
// any_values files (argparse.Namespace, a __main__ class, numpy scalars; protocol 2 and
// 4) are served, their merged pytorch_model.bin loads with torch.load(weights_only=True),
// and metadata.json, inspect and inspect --json say torch would refuse the source, as
// torch.load(SOURCE, weights_only=True) does; a plain state dict would load.
TEST_F(TorchMountTest, WeightsOnlyVerdict) {
  const std::string dir = scratch_->Path("any_values");
  ASSERT_NO_FATAL_FAILURE(GenerateTorch("any_values", dir));
  const std::string single = scratch_->Path("single");
  ASSERT_NO_FATAL_FAILURE(GenerateTorch("single", single));
  const std::vector<std::string> refused = {"argparse.Namespace", "__main__.Holder",
                                            "pathlib.PosixPath"};
  for (const std::string file : {"any_values.pt", "any_values_p4.pt"}) {
    SCOPED_TRACE(file);
    const std::string mountpoint = scratch_->MakeDir("mnt_" + file);
    ASSERT_NO_FATAL_FAILURE(Mount(dir + "/" + file, mountpoint, nullptr, {"--model-key", ""}));
    std::vector<std::string> args = {kCkptfs, dir + "/" + file, mountpoint, "refuses"};
    args.insert(args.end(), refused.begin(), refused.end());
    RunCheck("check_weights_only.py", args);
  }
  const std::string mountpoint = scratch_->MakeDir("mnt_single");
  ASSERT_NO_FATAL_FAILURE(Mount(single + "/pytorch_model.bin", mountpoint));
  RunCheck("check_weights_only.py", {kCkptfs, single + "/pytorch_model.bin", mountpoint, "loads"});
}

// The same for files real libraries wrote (../shared/fixtures/wild, skipped when absent):
// train_state_wild.pt (numpy 2's numpy._core paths, a __main__ class, complex64, bf16)
// and HF Trainer's own rng_state.pth, both pickled at protocol 2, so their numpy arrays
// (metrics.hist, np.random.get_state()'s uint32 key) are served from bytes decoded at
// open. The oracle is SOURCE loaded by real torch (weights_only=False) with stand-ins for
// classes this process lacks (make_any_oracle.py): every numeric numpy array is a tensor.
TEST_F(TorchMountTest, AnyPythonValuesWrittenByLibraries) {
  const std::string wild = std::string(kSourceDir) + "/../shared/fixtures/wild";
  if (!std::filesystem::exists(wild + "/train_state_wild.pt")) {
    GTEST_SKIP() << wild << " is absent (../shared/fixtures)";
  }
  int n = 0;
  for (const std::string& source :
       {wild + "/train_state_wild.pt", wild + "/hf_trainer_output/checkpoint-12/rng_state.pth"}) {
    SCOPED_TRACE(source);
    const std::string oracle = scratch_->Path("oracle" + std::to_string(n) + ".pt");
    const ProcessResult made = RunProcess(
        {kPython, ScriptPath("tests/mount/make_any_oracle.py"), source, oracle}, kGenerateTimeout);
    ASSERT_EQ(made.exit_code, 0) << made.Describe();
    const std::string mountpoint = scratch_->MakeDir("mnt_wild" + std::to_string(n++));
    ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint, nullptr, {"--model-key", ""}));
    RunCheck("check_torch_any.py", {mountpoint, oracle});
    if (n == 2) {  // rng_state.pth: the key array itself, a tensor now
      EXPECT_TRUE(std::filesystem::exists(mountpoint + "/tensors/numpy/1.npy"));
    }
  }
}

// Hostile torch files (make_torch_checkpoint.py hostile, one source directory per
// case): `ckptfs mount` and `ckptfs inspect` exit 2 within the refusal budget with one
// line on stderr naming the file and the reason, nothing is mounted, and no code in
// the file runs: a payload that would create a marker file leaves none. The payload is
// then shown to be live (python's own pickle does create the marker).

struct TorchHostileCase {
  const char* name;
  const char* offender;              // the file the refusal must name
  std::vector<std::string> reasons;  // it must also contain one of these (any case)
  bool has_payload;                  // the pickle tries to create markers/<name>
};

void PrintTo(const TorchHostileCase& c, std::ostream* os) { *os << c.name; }

constexpr char kBin[] = "pytorch_model.bin";
const std::vector<std::string> kOsSystem = {"os.system", "os system"};
const std::vector<std::string> kOutOfStorage = {"fc.weight", "out of bounds", "out of range",
                                                "outside",   "exceeds",       "past the end",
                                                "beyond",    "larger than"};

// Mirrors HOSTILE_CASES in make_torch_checkpoint.py, which also writes them to cases.json.
const TorchHostileCase kTorchHostileCases[] = {
    {"global-os-system", kBin, kOsSystem, true},
    {"global-posix-system", kBin, {"posix.system", "posix system"}, true},
    {"global-builtins-eval", kBin, {"builtins.eval", "builtins eval"}, true},
    {"stack-global-os-system", kBin, kOsSystem, true},
    {"global-as-storage-type", kBin, kOsSystem, true},
    // A torch function outside the weights_only list: torch.load of bytes, unrestricted.
    {"torch-load-from-bytes", kBin, {"torch.storage._load_from_bytes", "_load_from_bytes"}, true},
    {"shard-os-system", "pytorch_model-00002-of-00002.bin", kOsSystem, true},
    {"truncated-zip",
     kBin,
     {"truncat", "central directory", "not a zip", "not a valid zip", "end of file", "eocd"},
     false},
    {"missing-storage", kBin, {"data/1", "missing", "not found", "no record", "no such"}, false},
    {"short-storage-record", kBin, {"data/0", "size", "bytes", "short", "storage"}, false},
    {"size-past-storage", kBin, kOutOfStorage, false},
    {"stride-past-storage", kBin, kOutOfStorage, false},
    {"offset-past-storage", kBin, kOutOfStorage, false},
    {"negative-size",
     kBin,
     {"fc.weight", "out of bounds", "out of range", "outside", "exceeds", "past the end", "beyond",
      "larger than", "negative"},
     false},
    {"legacy-format",
     kBin,
     {"legacy", "1.6", "zip", "_use_new_zipfile_serialization", "tar"},
     false},
    {"deflated-record", kBin, {"compress", "deflate", "stored", "method"}, false},
};

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

class TorchHostileTest : public MountFixture, public testing::WithParamInterface<TorchHostileCase> {
 protected:
  // Every case, written once.
  static void SetUpTestSuite() {
    suite_dir_ = new TempDir();
    suite_error_ = new std::string(GenerateTorchCheckpoint("hostile", suite_dir_->Path("hostile")));
  }

  static void TearDownTestSuite() {
    delete suite_dir_;
    delete suite_error_;
  }

  void SetUp() override {
    MountFixture::SetUp();
    if (IsSkipped()) return;
    ASSERT_EQ(*suite_error_, "");
    root_ = suite_dir_->Path("hostile");
    source_ = root_ + "/" + GetParam().name;
    marker_ = root_ + "/markers/" + GetParam().name;
    ASSERT_TRUE(fs::is_directory(source_)) << source_ << " was not generated";
    ASSERT_TRUE(fs::is_directory(root_ + "/markers")) << "a payload could not create its marker";
    const std::string cases = ReadTextFile(root_ + "/cases.json");
    ASSERT_NE(cases.find(std::string("\"") + GetParam().name + "\""), std::string::npos)
        << "cases.json does not list " << GetParam().name << ":\n"
        << cases;
  }

  void ExpectRefusedForTheReason(const ProcessResult& r) {
    ExpectRefusal(r, {GetParam().offender});
    const std::string err = Lower(r.err);
    const bool reason =
        std::any_of(GetParam().reasons.begin(), GetParam().reasons.end(),
                    [&](const std::string& w) { return err.find(Lower(w)) != std::string::npos; });
    std::string wanted;
    for (const std::string& w : GetParam().reasons) wanted += (wanted.empty() ? "" : " | ") + w;
    EXPECT_TRUE(reason) << "the refusal should give the reason (one of: " << wanted << "); "
                        << r.Describe();
  }

  static TempDir* suite_dir_;
  static std::string* suite_error_;
  std::string root_;
  std::string source_;
  std::string marker_;
};

TempDir* TorchHostileTest::suite_dir_ = nullptr;
std::string* TorchHostileTest::suite_error_ = nullptr;

TEST_P(TorchHostileTest, RefusedWithoutRunningCode) {
  const std::string mountpoint = scratch_->MakeDir("mnt");
  mounts_.push_back(mountpoint);  // in case ckptfs wrongly mounts it anyway
  {
    SCOPED_TRACE("ckptfs mount");
    ExpectRefusedForTheReason(RunProcess({kCkptfs, "mount", source_, mountpoint}, kRefusalTimeout));
    EXPECT_FALSE(IsMounted(mountpoint)) << "a refused checkpoint was left mounted";
    EXPECT_TRUE(WaitForNoDaemon(mountpoint, kDaemonExitTimeout)) << "a daemon was left running";
  }
  {
    SCOPED_TRACE("ckptfs inspect");
    ExpectRefusedForTheReason(RunProcess({kCkptfs, "inspect", source_}, kRefusalTimeout));
  }
  if (!GetParam().has_payload) return;
  EXPECT_FALSE(fs::exists(marker_)) << "ckptfs ran the pickle's payload: it created " << marker_;
  std::error_code ignored;
  fs::remove(marker_, ignored);
  // The control: the same pickle unpickled by python does run the payload.
  RunCheck("check_torch_payload.py", {source_ + "/" + GetParam().offender, marker_});
}

INSTANTIATE_TEST_SUITE_P(Torch, TorchHostileTest, testing::ValuesIn(kTorchHostileCases),
                         CaseName<TorchHostileCase>);

}  // namespace
}  // namespace ckptfs::mount_test
