// DeepSpeed save directories as runs (issue 14, item 1), with the real binary: a save dir
// holding `latest` and two tags written by tests/deepspeed/make_deepspeed_checkpoint.py,
// mounted locally, over HTTP from an nginx that cannot list (the `latest` file names the tag)
// and from s3rver (CommonPrefixes). Each tag's views are checked by check_deepspeed.py against
// the generator's ground truth; `latest` follows the `latest` file, and a tag missing a rank
// file shows its ERROR file while `latest` falls back to the highest valid step.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "remote_harness.h"

namespace ckptfs::mount_test {
namespace {

namespace fs = std::filesystem;

class DeepSpeedRunTest : public MountFixture {
 protected:
  void SetUp() override {
    MountFixture::SetUp();
    if (IsSkipped()) return;
    if (!HasTorch()) GTEST_SKIP() << "/usr/bin/python3 has no torch: no DeepSpeed files to write";
    mountpoint_ = scratch_->MakeDir("mnt");
  }

  void Generate(const std::string& out, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {
        kPython, ScriptPath("tests/deepspeed/make_deepspeed_checkpoint.py"), out};
    argv.insert(argv.end(), args.begin(), args.end());
    const ProcessResult r = RunProcess(argv, kGenerateTimeout);
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
  }

  // The save dir `where`/ds as DeepSpeed leaves it (`latest`, zero_to_fp32.py and the tags):
  // global_step20 (ZeRO-3, 2 ranks, tied and frozen params), the newest, and global_step10
  // (ZeRO-2, 2 ranks). Each tag's ground truth (expected.pt) stays in newer_ or older_: a
  // torch file at the top of the save dir would make it a checkpoint of its own.
  std::string MakeSaveDir(const std::string& where) {
    const std::string dir = where + "/ds";
    older_ = scratch_->Path("older");
    newer_ = scratch_->Path("newer");
    Generate(older_, {"--stage", "2", "--ranks", "2", "--step", "10", "--seed", "1"});
    Generate(newer_, {"--stage", "3", "--ranks", "2", "--step", "20", "--tied", "--frozen"});
    fs::create_directories(dir);
    fs::rename(older_ + "/global_step10", dir + "/global_step10");
    fs::rename(newer_ + "/global_step20", dir + "/global_step20");
    fs::rename(newer_ + "/latest", dir + "/latest");
    fs::rename(newer_ + "/zero_to_fp32.py", dir + "/zero_to_fp32.py");
    EXPECT_EQ(ReadTextFile(dir + "/latest"), "global_step20");
    return dir;
  }

  static void WriteLatest(const std::string& dir, const std::string& tag) {
    const std::string tmp = dir + "/latest.tmp";
    std::ofstream(tmp) << tag;
    fs::rename(tmp, dir + "/latest");
  }

  // `latest` of the mount once it reads `want` (re-listed by inotify or on access), or what
  // it read last after `seconds`.
  std::string LatestOnceItIs(const std::string& want, int seconds = 15) {
    std::string got;
    for (int i = 0; i < seconds * 10; ++i) {
      std::error_code ec;
      got = fs::read_symlink(mountpoint_ + "/views/latest", ec).string();
      if (got == want) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return got;
  }

  std::string mountpoint_, older_, newer_;
};

TEST_F(DeepSpeedRunTest, SaveDirIsARunAndLatestFollowsItsLatestFile) {
  const std::string dir = MakeSaveDir(scratch_->Path("local"));
  if (HasFatalFailure()) return;
  ProcessResult mounted;
  ASSERT_NO_FATAL_FAILURE(Mount(dir, mountpoint_, &mounted, {"-v"}));
  EXPECT_NE(mounted.out.find("2 checkpoint(s), latest global_step20"), std::string::npos)
      << mounted.out;
  EXPECT_EQ(LatestOnceItIs("global_step20"), "global_step20");
  // SOURCE's own `latest` file is at its path (it wins over the run's symlink), as
  // DeepSpeedEngine.load_checkpoint reads it; the tag's rank files are at theirs.
  EXPECT_EQ(ReadTextFile(mountpoint_ + "/latest"), "global_step20");
  EXPECT_TRUE(fs::is_regular_file(mountpoint_ + "/global_step10/mp_rank_00_model_states.pt"));
  RunCheck("check_deepspeed.py", {newer_, mountpoint_ + "/views/latest"});
  RunCheck("check_deepspeed.py", {older_, mountpoint_ + "/views/global_step10"});
  // The record wins over the highest step, and moves while mounted.
  WriteLatest(dir, "global_step10");
  EXPECT_EQ(LatestOnceItIs("global_step10"), "global_step10");
  const ProcessResult inspect = Ckptfs({"inspect", dir}, kCheckTimeout);
  EXPECT_EQ(inspect.exit_code, 0) << inspect.Describe();
  EXPECT_NE(inspect.out.find("by DeepSpeed latest file"), std::string::npos) << inspect.out;
}

// (issue 23) `latest` as an editor or another tool leaves it (" global_step10\t\r\n"):
// DeepSpeed reads `fd.read().strip()`, so the record names global_step10, not the highest
// step; the model it names loads through the link.
TEST_F(DeepSpeedRunTest, LatestFileIsStrippedAsDeepSpeedStripsIt) {
  const std::string dir = MakeSaveDir(scratch_->Path("local"));
  if (HasFatalFailure()) return;
  WriteLatest(dir, " global_step10\t\r\n");
  ProcessResult mounted;
  ASSERT_NO_FATAL_FAILURE(Mount(dir, mountpoint_, &mounted, {"-v"}));
  // global_step20, past the tag `latest` names, counts as still being written.
  EXPECT_NE(mounted.out.find("checkpoint(s), latest global_step10,"), std::string::npos)
      << mounted.out;
  EXPECT_EQ(LatestOnceItIs("global_step10"), "global_step10");
  RunCheck("check_deepspeed.py", {older_, mountpoint_ + "/views/latest"});
}

TEST_F(DeepSpeedRunTest, TagMissingARankFileShowsErrorAndLatestFallsBack) {
  const std::string dir = MakeSaveDir(scratch_->Path("local"));
  if (HasFatalFailure()) return;
  // Rank 0 wrote `latest` and its files; rank 1 has not finished.
  std::string removed;
  for (const auto& f : fs::directory_iterator(dir + "/global_step20")) {
    const std::string name = f.path().filename().string();
    if (name.find("zero_pp_rank_1_") != std::string::npos &&
        name.find("optim_states") != std::string::npos) {
      removed = name;
      fs::remove(f.path());
    }
  }
  ASSERT_FALSE(removed.empty());
  ASSERT_NO_FATAL_FAILURE(Mount(dir, mountpoint_));
  EXPECT_EQ(LatestOnceItIs("global_step10"), "global_step10");
  const std::string error = ReadTextFile(mountpoint_ + "/views/global_step20/ERROR");
  EXPECT_NE(error.find(removed), std::string::npos) << error;
  EXPECT_EQ(std::count(error.begin(), error.end(), '\n'), 1) << error;
  RunCheck("check_deepspeed.py", {older_, mountpoint_ + "/views/latest"});
  const ProcessResult inspect = Ckptfs({"inspect", dir}, kCheckTimeout);
  EXPECT_NE(inspect.out.find(removed), std::string::npos) << inspect.out;
}

TEST_F(DeepSpeedRunTest, SaveDirOverHttpWithoutAListing) {
  const std::string unavailable = NginxServer::UnavailableReason();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  const std::string www = scratch_->MakeDir("www");
  const std::string dir = MakeSaveDir(www);
  if (HasFatalFailure()) return;
  NginxServer server(www, scratch_->Path("nginx"));
  ASSERT_EQ(server.Start(), "");
  // No autoindex: the `latest` file names the one tag shown.
  ASSERT_NO_FATAL_FAILURE(Mount(server.Url("ds/"), mountpoint_));
  EXPECT_EQ(LatestOnceItIs("global_step20"), "global_step20");
  RunCheck("check_deepspeed.py", {newer_, mountpoint_ + "/views/latest"});
  // A tag URL is a checkpoint of its own; its rank files' names come from the model states.
  const std::string tag_mnt = scratch_->MakeDir("tagmnt");
  ASSERT_NO_FATAL_FAILURE(Mount(server.Url("ds/global_step10/"), tag_mnt));
  RunCheck("check_deepspeed.py", {older_, tag_mnt});
  for (const std::string& m : mounts_) EXPECT_TRUE(ForceUnmount(m));
}

TEST_F(DeepSpeedRunTest, SaveDirOverS3) {
  const std::string unavailable = S3Server::UnavailableReason();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  const std::string dir = MakeSaveDir(scratch_->Path("local"));
  if (HasFatalFailure()) return;
  ScopedEnv env;
  S3Server server(scratch_->Path("s3"));
  server.SetClientEnv(env);
  ASSERT_EQ(server.Start(), "");
  ASSERT_EQ(server.Upload(dir, "ds/"), "");  // latest (and the generator's other files)
  for (const char* tag : {"global_step10", "global_step20"}) {
    ASSERT_EQ(server.Upload(dir + "/" + tag, std::string("ds/") + tag + "/"), "");
  }
  ASSERT_NO_FATAL_FAILURE(
      Mount(S3Server::Url("ds/"), mountpoint_, nullptr, server.ClientOptions()));
  EXPECT_EQ(LatestOnceItIs("global_step20"), "global_step20");
  RunCheck("check_deepspeed.py", {newer_, mountpoint_ + "/views/latest"});
  RunCheck("check_deepspeed.py", {older_, mountpoint_ + "/views/global_step10"});
  for (const std::string& m : mounts_) EXPECT_TRUE(ForceUnmount(m));
}

}  // namespace
}  // namespace ckptfs::mount_test
