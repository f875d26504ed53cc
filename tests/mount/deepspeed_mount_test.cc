// Mount tests of DeepSpeed ZeRO tags (issue 14): the real ckptfs binary over tags written by
// tests/deepspeed/make_deepspeed_checkpoint.py, checked by tests/mount/check_deepspeed.py
// against the generator's ground truth (expected.pt): torch.load of pytorch_model.bin, a hand
// parse of model.safetensors, numpy.load of tensors/optimizer/exp_avg/*.npy, the module as
// saved and .ckptfs/metadata.json; pipelines; a ZeRO-3 tag over HTTP and S3; inspect's
// summary of the tag; verify of a sound tag and of a flipped byte; a tag missing a rank file
// refused in one line.

#include <filesystem>
#include <fstream>

#include "remote_harness.h"

namespace ckptfs::mount_test {
namespace {

namespace fs = std::filesystem;

class DeepSpeedMountTest : public MountFixture {
 protected:
  void SetUp() override {
    MountFixture::SetUp();
    if (IsSkipped()) return;
    if (!HasTorch()) GTEST_SKIP() << "/usr/bin/python3 has no torch: no DeepSpeed files to write";
  }

  // Writes a save directory with the generator; returns its tag directory.
  std::string GenerateDs(const std::string& name, const std::vector<std::string>& args) {
    const std::string out = scratch_->Path(name);
    std::vector<std::string> argv = {
        kPython, ScriptPath("tests/deepspeed/make_deepspeed_checkpoint.py"), out};
    argv.insert(argv.end(), args.begin(), args.end());
    const ProcessResult r = RunProcess(argv, kGenerateTimeout);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    return out + "/" + ReadTextFile(out + "/latest");
  }

  std::string MountFresh(const std::string& source) {
    const std::string mountpoint = scratch_->MakeDir("mnt" + std::to_string(mounts_.size()));
    Mount(source, mountpoint);
    return mountpoint;
  }
};

struct DsCase {
  std::string name;
  std::vector<std::string> args;
};

class DeepSpeedViews : public DeepSpeedMountTest, public testing::WithParamInterface<DsCase> {};

// Every view against the ground truth, bit for bit.
TEST_P(DeepSpeedViews, EveryViewMatchesZeroToFp32) {
  const std::string tag = GenerateDs(GetParam().name, GetParam().args);
  if (HasFailure()) return;
  const std::string mnt = MountFresh(tag);
  if (HasFatalFailure()) return;
  RunCheck("check_deepspeed.py", {scratch_->Path(GetParam().name), mnt});
}

INSTANTIATE_TEST_SUITE_P(
    Configurations, DeepSpeedViews,
    testing::Values(
        DsCase{
            "s1-r4-rr-fp16",
            {"--stage", "1", "--ranks", "4", "--round-robin", "--dtype", "fp16", "--groups", "2"}},
        DsCase{"s2-r3-frozen-tied",
               {"--stage", "2", "--ranks", "3", "--frozen", "--tied", "--dirty-padding"}},
        DsCase{"pipeline-r2", {"--pipeline", "--stage", "1", "--ranks", "2"}},
        DsCase{"pipeline-r2-tp2", {"--pipeline", "--stage", "1", "--ranks", "2", "--tp", "2"}},
        // (issue 23) Saved without optimizer state: the layer files are all there is.
        DsCase{"pipeline0-r2-fp16",
               {"--pipeline", "--stage", "0", "--ranks", "2", "--dtype", "fp16"}},
        DsCase{"pipeline0-noaxis",
               {"--pipeline", "--stage", "0", "--ranks", "1", "--no-model-axis"}},
        DsCase{"s3-r4-subgroups",
               {"--stage", "3", "--ranks", "4", "--sub-group-size", "300", "--frozen", "--tied",
                "--enum-getattr"}}),
    CaseName<DsCase>);

// inspect says what the tag is; a missing rank file is one line naming it, for mount too.
TEST_F(DeepSpeedMountTest, InspectAndMissingRankFile) {
  const std::string tag = GenerateDs("s2", {"--stage", "2", "--ranks", "2"});
  if (HasFailure()) return;
  const ProcessResult text = Ckptfs({"inspect", tag}, kCheckTimeout);
  EXPECT_EQ(text.exit_code, 0) << text.Describe();
  EXPECT_NE(text.out.find("format   deepspeed\n"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("zero     stage 2, dp_world_size 2, mp_world_size 1, bf16, master "
                          "weights F32, 3 rank files, complete\n"),
            std::string::npos)
      << text.out;
  const ProcessResult verify = Ckptfs({"verify", tag}, kVerifyTimeout);
  EXPECT_EQ(verify.exit_code, 0) << verify.Describe();
  // A flipped byte in a storage record (past data.pkl, before the zip directory): one line.
  const std::string rank0 = tag + "/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt";
  {
    std::fstream f(rank0, std::ios::in | std::ios::out | std::ios::binary);
    const auto at = static_cast<std::streamoff>(fs::file_size(rank0) * 6 / 10);
    f.seekg(at);
    char c = 0;
    f.get(c);
    f.seekp(at);
    f.put(static_cast<char>(c ^ 0x40));
  }
  const ProcessResult bad = Ckptfs({"verify", tag}, kVerifyTimeout);
  EXPECT_EQ(bad.exit_code, 2) << bad.Describe();
  EXPECT_EQ(LineCount(bad.err), 1) << bad.Describe();
  EXPECT_NE(bad.err.find("bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt: record "),
            std::string::npos)
      << bad.Describe();

  fs::remove(tag + "/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt");
  const ProcessResult r = Ckptfs({"inspect", tag}, kRefusalTimeout);
  ExpectRefusal(r, {"bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"});
  EXPECT_NE(r.err.find("missing"), std::string::npos) << r.Describe();
  const std::string mnt = scratch_->MakeDir("refused");
  const ProcessResult m = Ckptfs({"mount", tag, mnt}, kRefusalTimeout);
  ExpectRefusal(m, {"bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"});
  EXPECT_FALSE(IsMounted(mnt));
}

// Over HTTP (a server cannot list: the model states file is a probe name, the other rank
// files are asked for by the names the world size gives) and S3, a ZeRO-3 tag.
TEST_F(DeepSpeedMountTest, OverHttpAndS3) {
  const std::string tag = GenerateDs("s3", {"--stage", "3", "--ranks", "3", "--dtype", "fp16",
                                            "--sub-group-size", "300", "--frozen"});
  if (HasFailure()) return;
  const std::string expected = scratch_->Path("s3");
  if (const std::string unavailable = NginxServer::UnavailableReason(); unavailable.empty()) {
    const std::string www = scratch_->MakeDir("www");
    fs::copy(tag, www + "/tag");
    NginxServer server(www, scratch_->Path("nginx"));
    ASSERT_EQ(server.Start(), "");
    const std::string mnt = scratch_->MakeDir("http");
    ASSERT_NO_FATAL_FAILURE(Mount(server.Url("tag/"), mnt));
    RunCheck("check_deepspeed.py", {expected, mnt});
    for (const std::string& m : mounts_) EXPECT_TRUE(ForceUnmount(m));  // before the server stops
  } else {
    std::cout << "HTTP part skipped: " << unavailable << "\n";
  }
  if (const std::string unavailable = S3Server::UnavailableReason(); unavailable.empty()) {
    ScopedEnv env;
    S3Server server(scratch_->Path("s3server"));
    server.SetClientEnv(env);
    ASSERT_EQ(server.Start(), "");
    ASSERT_EQ(server.Upload(tag, "tag/"), "");
    const std::string mnt = scratch_->MakeDir("s3mnt");
    ASSERT_NO_FATAL_FAILURE(Mount(S3Server::Url("tag/"), mnt, nullptr, server.ClientOptions()));
    RunCheck("check_deepspeed.py", {expected, mnt});
    EXPECT_TRUE(ForceUnmount(mnt));
  } else {
    std::cout << "S3 part skipped: " << unavailable << "\n";
  }
}

}  // namespace
}  // namespace ckptfs::mount_test
