// Per-key split checkpoints (docs/split.md): the real ckptfs binary over split directories
// written by the real torch.save (tests/mount/make_split.py), and the pytorch_model/ view
// of every mount, read by torch.load with and without weights_only in
// tests/mount/check_split.py. The oracle is always torch.load of the SOURCE files.

#include "remote_harness.h"

namespace ckptfs::mount_test {
namespace {

class SplitMountTest : public MountFixture {
 protected:
  void SetUp() override {
    MountFixture::SetUp();
    if (IsSkipped()) return;
    gen_ = scratch_->Path("gen");
    const ProcessResult r =
        RunProcess({kPython, ScriptPath("tests/mount/make_split.py"), gen_}, kGenerateTimeout);
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
  }

  // Mounts `source` on a fresh mount point; "" if that failed.
  std::string MountFresh(const std::string& source) {
    const std::string mnt = scratch_->MakeDir("mnt" + std::to_string(mounts_.size()));
    Mount(source, mnt);
    return IsMounted(mnt) ? mnt : "";
  }

  std::string gen_;
};

// An HF model directory (config.json beside pytorch_model/), the split directory itself,
// its map.pt, and what `ckptfs pack` makes of it: each mounts to the same tensors, in
// every view.
TEST_F(SplitMountTest, SplitSourceInEveryForm) {
  const std::string model = gen_ + "/model";
  for (const std::string& source :
       {model, model + "/pytorch_model", model + "/pytorch_model/map.pt"}) {
    SCOPED_TRACE(source);
    const std::string mnt = MountFresh(source);
    if (mnt.empty()) continue;
    RunCheck("check_split.py", {model, mnt, "--split"});
  }
  // ckptfs pack writes it as a split directory of NAME.pt.zst files beside map.pt.
  const std::string packed = scratch_->Path("packed");
  const ProcessResult pack = Ckptfs({"pack", model, packed}, kCheckTimeout);
  ASSERT_EQ(pack.exit_code, 0) << pack.Describe();
  const std::string packed_mnt = MountFresh(packed);
  if (!packed_mnt.empty()) RunCheck("check_split.py", {model, packed_mnt, "--split"});
  // The model directory's other files are at the root.
  const std::string mnt = scratch_->Path("mnt0");
  EXPECT_EQ(ReadTextFile(mnt + "/config.json"), ReadTextFile(model + "/config.json"));
  // inspect names the format and the index.
  const ProcessResult inspect = Ckptfs({"inspect", model}, kCheckTimeout);
  EXPECT_EQ(inspect.exit_code, 0) << inspect.Describe();
  EXPECT_NE(inspect.out.find("format   split\nindex    map.pt\nshards   12\n"), std::string::npos)
      << inspect.out;
}

// A training run whose checkpoint-N/ directories each hold config.json and pytorch_model/:
// every one is an entry (never a run of "pytorch_model"), latest the highest step.
TEST_F(SplitMountTest, RunOfSplitCheckpoints) {
  const std::string run = scratch_->Path("run");
  for (const char* step : {"checkpoint-100", "checkpoint-200"}) {
    fs::create_directories(run + "/" + step);
    fs::copy(gen_ + "/model", run + "/" + step, fs::copy_options::recursive);
  }
  const std::string mnt = MountFresh(run);
  if (mnt.empty()) return;
  RunCheck("check_split.py", {gen_ + "/model", mnt + "/views/latest", "--split"});
  RunCheck("check_split.py", {gen_ + "/model", mnt + "/views/checkpoint-100", "--split"});
  const ProcessResult inspect = Ckptfs({"inspect", run}, kCheckTimeout);
  EXPECT_EQ(inspect.exit_code, 0) << inspect.Describe();
  EXPECT_NE(inspect.out.find("latest   -> checkpoint-200"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("split"), std::string::npos) << inspect.out;
}

// A torch.save'd state dict and a safetensors checkpoint get the view too; the torch one
// lists its keys in the pickle's order (12 storages: torch.save's record order differs).
TEST_F(SplitMountTest, EveryMountShowsTheView) {
  const std::string torch_source = gen_ + "/torch";
  std::string mnt = MountFresh(torch_source);
  if (!mnt.empty()) RunCheck("check_split.py", {torch_source, mnt, "--ordered"});
  const std::string st_source = scratch_->Path("mixed");
  ASSERT_NO_FATAL_FAILURE(Generate(st_source));
  mnt = MountFresh(st_source);
  if (!mnt.empty()) RunCheck("check_split.py", {st_source, mnt});
}

// Broken split directories are refused in one line naming the file.
TEST_F(SplitMountTest, RefusalsNameTheFile) {
  const std::string split = gen_ + "/model/pytorch_model";
  const std::string unused = scratch_->MakeDir("unused");
  // A key file missing.
  ASSERT_EQ(std::rename((split + "/pos_ids.pt").c_str(), (gen_ + "/pos_ids.pt").c_str()), 0);
  ProcessResult r = Ckptfs({"mount", split, unused}, kMountTimeout);
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_EQ(LineCount(r.err), 1) << r.Describe();
  EXPECT_NE(r.err.find("pos_ids.pt: shard named in " + split + "/map.pt is missing"),
            std::string::npos)
      << r.Describe();
  // A key file map.pt does not list.
  ASSERT_EQ(std::rename((gen_ + "/pos_ids.pt").c_str(), (split + "/extra.pt").c_str()), 0);
  r = Ckptfs({"mount", split, unused}, kMountTimeout);
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_NE(r.err.find(split + "/extra.pt: is the file of key \"extra\""), std::string::npos)
      << r.Describe();
  EXPECT_FALSE(IsMounted(unused));
}

// Over HTTP (nginx, no listing): names come from map.pt, each key file asked for. No key
// holds '/': remote sources refuse names that do once percent-decoded (docs/split.md).
TEST_F(SplitMountTest, OverHttp) {
  const std::string unavailable = NginxServer::UnavailableReason();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  gen_ = scratch_->Path("gen-remote");
  const ProcessResult r = RunProcess(
      {kPython, ScriptPath("tests/mount/make_split.py"), gen_, "--no-slash"}, kGenerateTimeout);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  NginxServer server(gen_, scratch_->Path("nginx"));
  ASSERT_EQ(server.Start(), "");
  for (const char* path : {"model/pytorch_model/", "model/"}) {
    SCOPED_TRACE(path);
    const std::string mnt = MountFresh(server.Url(path));
    if (mnt.empty()) continue;
    RunCheck("check_split.py", {gen_ + "/model", mnt, "--split"});
    ASSERT_TRUE(ForceUnmount(mnt));  // before the server stops
  }
}

}  // namespace
}  // namespace ckptfs::mount_test
