// Keras checkpoints mounted as a user sees them (issue 27, docs/keras.md): the real files
// Keras wrote (../shared/fixtures/keras, NOTICE.md; skipped when absent), the cases they
// lack written by scripts/make_keras.py as Keras lays them out (bfloat16, sharded stores,
// split layer_names, .keras directories and assets, Keras 3.5 and shared names), runs of
// ModelCheckpoint and KerasTuner files (and one saved into while mounted), bad files,
// --model-key, .zst, HTTP and S3. tests/mount/check_keras.py reads every view (tensors/
// with numpy, model.safetensors by hand, pytorch_model.bin with torch, shards/,
// metadata.json) against the HDF5 files read with h5py.
#include <filesystem>

#include "remote_harness.h"

namespace ckptfs::mount_test {
namespace {

namespace fs = std::filesystem;

const fs::path kKerasFixtures = fs::path(kSourceDir) / ".." / "shared" / "fixtures" / "keras";

// The checkpoints of make_keras.py that are not runs or hostile, by expected.json key and
// the path (under its output) that is mounted.
const std::vector<std::pair<std::string, std::string>> kGenerated = {
    {"bf16", "bf16/bf16.weights.h5"},
    {"dtypes", "dtypes/dtypes.weights.h5"},
    {"sharded", "sharded/model.weights.json"},
    {"legacy_fixed", "legacy_fixed/legacy_fixed.h5"},
    {"legacy_vlen", "legacy_vlen/legacy_vlen.h5"},
    {"legacy_keras1", "legacy_keras1/legacy_keras1.h5"},
    {"keras_dir", "keras_dir"},
    {"keras_zip", "keras_zip/model.keras"},
    {"keras_assets", "keras_assets/lookup.keras"},
    {"keras35", "keras35/keras35.weights.h5"},
    {"shared_name", "shared_name/shared.weights.h5"},
    {"edge_names", "edge_names/edge.weights.h5"},
};

class KerasMountTest : public MountFixture {
 protected:
  // Writes every case of scripts/make_keras.py into scratch/keras once per test, and
  // checks its expected.json against the files (no mount) before anything is mounted.
  std::string Generate() {
    const std::string out = scratch_->Path("keras");
    const ProcessResult r =
        RunProcess({kPython, ScriptPath("scripts/make_keras.py"), out}, kGenerateTimeout);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    if (r.exit_code == 0) {
      EXPECT_TRUE(RunCheck("check_keras.py", {"self-check", out}));
    }
    return out;
  }

  std::string MountFresh(const std::string& source) {
    const std::string mountpoint = scratch_->MakeDir("mnt" + std::to_string(mounts_.size()));
    Mount(source, mountpoint, nullptr, {});
    return mountpoint;
  }

  // The `file` of every entry of the fixtures' manifest.json.
  static std::vector<std::string> FixtureFiles() {
    const ProcessResult r = RunProcess({kPython, "-c",
                                        "import json, sys\n"
                                        "for e in json.load(open(sys.argv[1])): print(e['file'])",
                                        (kKerasFixtures / "manifest.json").string()},
                                       kCheckTimeout);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    std::vector<std::string> files;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty()) files.push_back(line);
    }
    return files;
  }
};

// Every real file (Keras 3 .weights.h5 and .keras, legacy full models and weights, a
// legacy HDF5 named .keras): verify reads it whole, inspect names the format, and every
// view of the mount equals the bytes at the manifest's offsets, named by Keras's rules.
TEST_F(KerasMountTest, FixturesInEveryView) {
  if (!fs::is_directory(kKerasFixtures)) {
    GTEST_SKIP() << kKerasFixtures << " is absent (a user's clone): real Keras fixtures skipped";
  }
  const std::vector<std::string> files = FixtureFiles();
  ASSERT_FALSE(files.empty());
  std::vector<std::string> args = {"fixture", kKerasFixtures.string()};
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    const std::string source = (kKerasFixtures / file).string();
    const ProcessResult verify = Ckptfs({"verify", source}, kVerifyTimeout);
    EXPECT_EQ(verify.exit_code, 0) << verify.Describe();
    const ProcessResult inspect = Ckptfs({"inspect", source}, kCheckTimeout);
    EXPECT_EQ(inspect.exit_code, 0) << inspect.Describe();
    EXPECT_NE(inspect.out.find("keras"), std::string::npos) << inspect.Describe();
    const std::string mnt = MountFresh(source);
    if (HasFatalFailure()) return;
    args.push_back(file + "=" + mnt);
  }
  RunCheck("check_keras.py", args);
}

// What the fixtures lack, from make_keras.py: bfloat16 (BF16 in the merged files, a
// one-tensor safetensors in tensors/), every dtype, a vars group spanning two shards,
// layer_names0/1 in fixed- and variable-length strings, Keras 1 names, a .keras directory
// and zip, Keras 3.5 without names and two groups sharing one, names at the rule's edges.
TEST_F(KerasMountTest, GeneratedCheckpointsInEveryView) {
  const std::string out = Generate();
  if (HasFailure()) return;
  std::vector<std::string> args = {"generated", out};
  for (const auto& [key, path] : kGenerated) {
    SCOPED_TRACE(key);
    const ProcessResult verify = Ckptfs({"verify", out + "/" + path}, kVerifyTimeout);
    EXPECT_EQ(verify.exit_code, 0) << verify.Describe();
    const std::string mnt = MountFresh(out + "/" + path);
    if (HasFatalFailure()) return;
    args.push_back(key + "=" + mnt);
  }
  RunCheck("check_keras.py", args);
}

// A sharded store mounts from its directory as from its map, and a .keras directory from
// its model.weights.h5's directory (docs/keras.md: a directory holding one such file).
TEST_F(KerasMountTest, DirectoriesMountAsTheirCheckpoint) {
  const std::string out = Generate();
  if (HasFailure()) return;
  const std::string sharded = MountFresh(out + "/sharded");
  if (HasFatalFailure()) return;
  const std::string bf16 = MountFresh(out + "/bf16");
  if (HasFatalFailure()) return;
  RunCheck("check_keras.py", {"generated", out, "sharded=" + sharded, "bf16=" + bf16});
}

// Runs as ModelCheckpoint and KerasTuner leave them: weights.{epoch:02d}-{val_loss:.2f}
// files (latest is epoch 10), unpadded epochs with mtimes out of order (latest is epoch
// 100), a save still in progress (not listed, not latest), model_{epoch}.keras,
// trial_NNNN/checkpoint.weights.h5. Each entry is a checkpoint directory with every view.
TEST_F(KerasMountTest, RunsShowEntriesAndLatest) {
  const std::string out = Generate();
  if (HasFailure()) return;
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"run_epochs", "weights.10-0.38.weights.h5"},
      {"run_unpadded", "weights.100-0.30.weights.h5"},
      {"run_in_progress", "weights.02-0.50.weights.h5"},
      {"run_keras", "model_3.keras"},
      {"run_legacy", "weights-improvement-12-0.70.hdf5"},
      {"tuner", "trial_0001"},
  };
  for (const auto& [run, latest] : runs) {
    SCOPED_TRACE(run);
    const ProcessResult inspect = Ckptfs({"inspect", out + "/" + run}, kCheckTimeout);
    EXPECT_EQ(inspect.exit_code, 0) << inspect.Describe();
    EXPECT_NE(inspect.out.find("latest   -> " + latest), std::string::npos) << inspect.Describe();
    const std::string mnt = MountFresh(out + "/" + run);
    if (HasFatalFailure()) return;
    RunCheck("check_keras.py", {"run", out, run, mnt});
  }
}

// ModelCheckpoint saving into a mounted run: the file is written in place, so it is
// visible before it is whole; it appears (and becomes latest) once HDF5's recorded end is
// the file's end.
TEST_F(KerasMountTest, LiveRunShowsASaveOnceComplete) {
  const std::string out = Generate();
  if (HasFailure()) return;
  const std::string run = scratch_->Path("live");
  fs::copy(out + "/run_epochs", run);
  const std::string mnt = MountFresh(run);
  if (HasFatalFailure()) return;
  RunCheck("check_keras.py", {"live", out, run, mnt});
}

// Bad files (expected.json's "hostile": each file with what its one line must name): a
// .keras whose weights are deflated, missing or npz; a truncated file; chunked+gzip and
// big-endian datasets; soft and external links; sharded maps naming ../ or holding a
// dataset twice. Refused at mount (exit 2, one line naming the file and the member or
// dataset, quickly), or, should one mount, failing the read: never a hang.
TEST_F(KerasMountTest, HostileFilesFailInOneLine) {
  const std::string out = Generate();
  if (HasFailure()) return;
  const ProcessResult list = RunProcess({kPython, "-c",
                                         "import json, sys\n"
                                         "for f, names in json.load(open(sys.argv[1]))"
                                         "['hostile'].items(): print('\\t'.join([f] + names))",
                                         out + "/expected.json"},
                                        kCheckTimeout);
  ASSERT_EQ(list.exit_code, 0) << list.Describe();
  std::istringstream lines(list.out);
  int cases = 0;
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> fields;
    std::istringstream split(line);
    for (std::string field; std::getline(split, field, '\t');) fields.push_back(field);
    ASSERT_GE(fields.size(), 2u) << line;
    SCOPED_TRACE(fields[0]);
    ++cases;
    const std::string source = out + "/" + fields[0];
    const std::string mountpoint = scratch_->MakeDir("refused" + std::to_string(cases));
    mounts_.push_back(mountpoint);  // in case ckptfs mounts it after all
    const ProcessResult mount = RunProcess({kCkptfs, "mount", source, mountpoint}, kMountTimeout);
    if (mount.exit_code == 0) {
      // Mounted: then reading the tensors must fail (EIO), within the harness's bound.
      const ProcessResult read =
          RunProcess({"sh", "-c", "cat \"$1\"/model.safetensors \"$1\"/tensors/*/*/*/* >/dev/null",
                      "sh", mountpoint},
                     kCheckTimeout);
      EXPECT_FALSE(read.timed_out) << read.Describe();
      EXPECT_NE(read.exit_code, 0) << "a bad file mounted and read whole; " << read.Describe();
      continue;
    }
    for (const ProcessResult& r :
         {mount, RunProcess({kCkptfs, "inspect", source}, kRefusalTimeout)}) {
      ExpectRefusal(r, {fields[1]});
      for (size_t i = 2; i < fields.size(); ++i) {
        EXPECT_NE(r.err.find(fields[i]), std::string::npos)
            << "stderr should name " << fields[i] << "; " << r.Describe();
      }
    }
    EXPECT_FALSE(IsMounted(mountpoint)) << "a refused checkpoint was left mounted";
  }
  EXPECT_GE(cases, 10);
}

// A run whose model_2.keras has a config.json nested 100,000 deep, which once crashed the
// daemon (a recursive copy of the parsed JSON overflowed the stack) and took every entry of
// the run with it: that entry is a directory holding ERROR with the reason, and
// model_1.keras, read after it, still reads whole.
TEST_F(KerasMountTest, ADeepConfigIsOneEntrysErrorNotTheDaemonsCrash) {
  const std::string out = Generate();
  if (HasFailure()) return;
  const std::string mnt = MountFresh(out + "/run_deep");
  if (HasFatalFailure()) return;
  const ProcessResult error =
      RunProcess({"cat", mnt + "/views/model_2.keras/ERROR"}, kCheckTimeout);
  EXPECT_EQ(error.exit_code, 0) << error.Describe();
  EXPECT_NE(error.out.find("model_2.keras:config.json: JSON nested deeper than 100 levels"),
            std::string::npos)
      << error.Describe();
  const ProcessResult good = RunProcess(
      {"sh", "-c", "cat \"$1\"/views/model_1.keras/model.safetensors | wc -c", "sh", mnt},
      kCheckTimeout);
  EXPECT_EQ(good.exit_code, 0) << good.Describe();
  EXPECT_GT(std::stoull(good.out.empty() ? "0" : good.out), 1000u) << good.Describe();
}

// --model-key '' puts the optimizer in the merged files under its HDF5 paths; any other
// key is refused in one line (Keras names hold no sub-trees). NAME.zst of a .weights.h5, a
// .keras and a legacy .h5 is the same checkpoint, decoded on read.
TEST_F(KerasMountTest, ModelKeyAndZstd) {
  const std::string out = Generate();
  if (HasFailure()) return;
  const std::string every = scratch_->MakeDir("mnt-every");
  ASSERT_NO_FATAL_FAILURE(
      Mount(out + "/bf16/bf16.weights.h5", every, nullptr, {"--model-key", ""}));
  RunCheck("check_keras.py", {"generated-every-tensor", out, "bf16=" + every});
  const std::string refused = scratch_->MakeDir("mnt-key");
  mounts_.push_back(refused);
  ExpectRefusal(RunProcess({kCkptfs, "mount", "--model-key", "optimizer",
                            out + "/bf16/bf16.weights.h5", refused},
                           kRefusalTimeout),
                {"bf16.weights.h5"});
  EXPECT_FALSE(IsMounted(refused));

  if (::access("/usr/bin/zstd", X_OK) != 0) GTEST_SKIP() << "/usr/bin/zstd missing";
  std::vector<std::string> args = {"generated", out};
  for (const auto& [key, path] : std::vector<std::pair<std::string, std::string>>{
           {"bf16", "bf16/bf16.weights.h5"},
           {"keras_zip", "keras_zip/model.keras"},
           {"legacy_keras1", "legacy_keras1/legacy_keras1.h5"}}) {
    SCOPED_TRACE(key);
    const std::string packed =
        scratch_->MakeDir("zst-" + key) + "/" + fs::path(path).filename().string();
    fs::copy_file(out + "/" + path, packed);
    const ProcessResult zstd = RunProcess({"zstd", "-q", "--rm", packed}, kGenerateTimeout);
    ASSERT_EQ(zstd.exit_code, 0) << zstd.Describe();
    const std::string mnt = MountFresh(packed + ".zst");
    if (HasFatalFailure()) return;
    args.push_back(key + "=" + mnt);
  }
  RunCheck("check_keras.py", args);
}

// Over HTTP (nginx) and S3 (s3rver): a .weights.h5, a .keras zip, a legacy .h5 and a
// sharded store (its map asked for by name, then the shards it names), byte for byte as
// local; over S3 also a run (listed with delimiter=/). Each part skips without its server.
TEST_F(KerasMountTest, OverHttpAndS3) {
  const std::string out = Generate();
  if (HasFailure()) return;
  const std::string www = scratch_->MakeDir("www");
  fs::copy(out + "/sharded", www + "/sharded");
  for (const char* file :
       {"bf16/bf16.weights.h5", "keras_zip/model.keras", "legacy_vlen/legacy_vlen.h5"}) {
    fs::copy_file(out + "/" + file, www + "/" + fs::path(file).filename().string());
  }
  const std::vector<std::pair<std::string, std::string>> files = {
      {"bf16", "bf16.weights.h5"},
      {"keras_zip", "model.keras"},
      {"legacy_vlen", "legacy_vlen.h5"},
      {"sharded", "sharded/model.weights.json"}};

  if (const std::string unavailable = NginxServer::UnavailableReason(); unavailable.empty()) {
    NginxServer server(www, scratch_->Path("nginx"));
    ASSERT_EQ(server.Start(), "");
    std::vector<std::string> args = {"generated", out};
    for (const auto& [key, url] : files) {
      const std::string mountpoint = scratch_->MakeDir("mnt-http-" + key);
      ASSERT_NO_FATAL_FAILURE(Mount(server.Url(url), mountpoint, nullptr, {}));
      args.push_back(key + "=" + mountpoint);
    }
    RunCheck("check_keras.py", args);
    for (size_t i = 2; i < args.size(); ++i) {  // before the server stops
      EXPECT_TRUE(ForceUnmount(args[i].substr(args[i].find('=') + 1)));
    }
  } else {
    std::printf("skipped HTTP: %s\n", unavailable.c_str());
  }

  if (const std::string unavailable = S3Server::UnavailableReason(); unavailable.empty()) {
    ScopedEnv env;
    S3Server server(scratch_->Path("s3"));
    server.SetClientEnv(env);
    ASSERT_EQ(server.Start(), "");
    ASSERT_EQ(server.Upload(www, "keras/"), "");
    ASSERT_EQ(server.Upload(www + "/sharded", "keras/sharded/"), "");
    ASSERT_EQ(server.Upload(out + "/run_epochs", "run_epochs/"), "");
    std::vector<std::string> args = {"generated", out};
    for (const auto& [key, path] : files) {
      const std::string mountpoint = scratch_->MakeDir("mnt-s3-" + key);
      ASSERT_NO_FATAL_FAILURE(
          Mount(S3Server::Url("keras/" + path), mountpoint, nullptr, server.ClientOptions()));
      args.push_back(key + "=" + mountpoint);
    }
    RunCheck("check_keras.py", args);
    const std::string run = scratch_->MakeDir("mnt-s3-run");
    ASSERT_NO_FATAL_FAILURE(
        Mount(S3Server::Url("run_epochs/"), run, nullptr, server.ClientOptions()));
    RunCheck("check_keras.py", {"run", out, "run_epochs", run});
    args.push_back("run=" + run);
    for (size_t i = 2; i < args.size(); ++i) {  // before the server stops
      EXPECT_TRUE(ForceUnmount(args[i].substr(args[i].find('=') + 1)));
    }
  } else {
    std::printf("skipped S3: %s\n", unavailable.c_str());
  }
}

// Over HTTP only the metadata is fetched at mount: libhdf5's reads, answered by range
// requests of exactly what it asks, not the file (192 MiB here); a tensor then fetches
// its bytes, not its neighbours'.
TEST_F(KerasMountTest, RemoteMountFetchesTheMetadataNotTheFile) {
  if (const std::string unavailable = NginxServer::UnavailableReason(); !unavailable.empty()) {
    GTEST_SKIP() << unavailable;
  }
  const std::string www = scratch_->MakeDir("www");
  const ProcessResult made = RunProcess(
      {kPython, ScriptPath("scripts/make_keras.py"), "--big", "256M", www}, kGenerateTimeout);
  ASSERT_EQ(made.exit_code, 0) << made.Describe();
  NginxServer server(www, scratch_->Path("nginx"));
  ASSERT_EQ(server.Start(), "");
  for (const char* file : {"big.weights.h5", "big.keras"}) {
    SCOPED_TRACE(file);
    const std::string mountpoint = scratch_->MakeDir(std::string("mnt-big-") + file);
    ASSERT_NO_FATAL_FAILURE(Mount(server.Url(file), mountpoint, nullptr, {}));
    // Read by a child, never by this process: stats at mount, one 16 KiB bias, stats.
    const ProcessResult r =
        RunProcess({kPython, "-c",
                    "import json, sys\n"
                    "def fetched():\n"
                    "    s = json.load(open(sys.argv[1] + '/.ckptfs/stats.json'))['remote']\n"
                    "    return s['bytes_fetched'], s['requests']\n"
                    "at_mount, requests = fetched()\n"
                    "bias = open(sys.argv[1] + '/tensors/layers/dense/vars/1.npy', 'rb').read()\n"
                    "print(at_mount, requests, len(bias), fetched()[0] - at_mount)",
                    mountpoint},
                   kCheckTimeout);
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
    uint64_t at_mount = ~0ull, requests = 0, bias = 0, for_bias = ~0ull;
    std::istringstream(r.out) >> at_mount >> requests >> bias >> for_bias;
    std::printf("%s: %llu bytes in %llu requests at mount; %llu for a 16 KiB tensor\n", file,
                static_cast<unsigned long long>(at_mount),
                static_cast<unsigned long long>(requests),
                static_cast<unsigned long long>(for_bias));
    EXPECT_LT(at_mount, 1u << 20) << "the mount fetched more than the metadata";
    EXPECT_GE(bias, 4096u * 4);
    EXPECT_LT(for_bias, 16u << 20) << "a tensor fetched more than a block around it";
    EXPECT_TRUE(ForceUnmount(mountpoint));
  }
}

}  // namespace
}  // namespace ckptfs::mount_test
