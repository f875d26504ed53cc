// Training runs mounted with the real binary (issue 13; core/run/run_tree.h): an HF
// Trainer-shaped run read with ls, readlink, numpy and torch; a torch.save training loop
// with retention read while it runs; `--checkpoint latest` following new saves; a broken
// checkpoint shown as ERROR; a 200-checkpoint run mounted quickly; entries linking out of
// SOURCE or failing for a while (issue 22); HF Trainer outputs as they are saved (issue 23):
// the final model beside checkpoint-N/ (the real ../shared/fixtures/wild, skipped when
// absent) and Trainer with DeepSpeed. Runs are written by tests/mount/make_run.py and checked
// by tests/mount/check_run.py, check_run_faults.py and check_trainer.py.
#include <filesystem>
#include <fstream>
#include <thread>

#include "remote_harness.h"

namespace ckptfs::mount_test {
namespace {

class RunMountTest : public MountFixture {
 protected:
  void SetUp() override {
    MountFixture::SetUp();
    if (IsSkipped()) return;
    run_ = scratch_->MakeDir("run");
    mountpoint_ = scratch_->MakeDir("mnt");
  }

  void MakeRun(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {kPython, ScriptPath("tests/mount/make_run.py")};
    argv.insert(argv.end(), args.begin(), args.end());
    const ProcessResult r = RunProcess(argv, kGenerateTimeout);
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
  }

  // torch.save training dicts ckpt_0001.pt ... ckpt_000N.pt in the run.
  void SaveTorch(int count) {
    for (int step = 1; step <= count; ++step) {
      char name[32];
      std::snprintf(name, sizeof(name), "ckpt_%04d.pt", step);
      ASSERT_NO_FATAL_FAILURE(MakeRun({"save", run_ + "/" + name, std::to_string(step)}));
    }
  }

  void MakeLive(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {kPython, ScriptPath("tests/mount/check_live_run.py")};
    argv.insert(argv.end(), args.begin(), args.end());
    const ProcessResult r = RunProcess(argv, kGenerateTimeout);
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
  }

  // The daemon never failed a read because a file changed or went (its log says so).
  static void ExpectNoChangeLines(const std::string& log) {
    std::ifstream in(log);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const char* line : {"since mount", "Input/output error"}) {
      EXPECT_EQ(text.find(line), std::string::npos) << text;
    }
  }

  std::string run_, mountpoint_;
};

TEST_F(RunMountTest, HfTrainerRunShowsCheckpointsLatestBestAndError) {
  ASSERT_NO_FATAL_FAILURE(MakeRun({"hf", run_, "3", "--bad", "checkpoint-broken"}));
  ProcessResult mounted;
  ASSERT_NO_FATAL_FAILURE(Mount(run_, mountpoint_, &mounted, {"-v"}));
  EXPECT_NE(mounted.out.find("4 checkpoint(s), latest checkpoint-300, best checkpoint-200"),
            std::string::npos)
      << mounted.out;
  const ProcessResult ls = RunProcess({"ls", mountpoint_}, kCheckTimeout);
  EXPECT_EQ(
      ls.out,
      "best\ncheckpoint-100\ncheckpoint-200\ncheckpoint-300\ncheckpoint-broken\nlatest\nviews\n");
  const ProcessResult link = RunProcess({"readlink", mountpoint_ + "/latest"}, kCheckTimeout);
  EXPECT_EQ(link.out, "checkpoint-300\n");
  RunCheck("check_run.py", {"hf", mountpoint_});
}

// A Lightning dirpath after a second fit() (make_run.py lightning): last-v1.ckpt is the
// newest last, and best is the first ModelCheckpoint's best_model_path in its callbacks
// state (saved order, not key order; last.ckpt, newer by time, names another).
TEST_F(RunMountTest, LightningLastVersionIsLatestAndFirstModelCheckpointIsBest) {
  if (!HasTorch()) GTEST_SKIP() << "/usr/bin/python3 has no torch";
  ASSERT_NO_FATAL_FAILURE(MakeRun({"lightning", run_}));
  ProcessResult mounted;
  ASSERT_NO_FATAL_FAILURE(Mount(run_, mountpoint_, &mounted, {"-v"}));
  EXPECT_NE(mounted.out.find("5 checkpoint(s), latest last-v1.ckpt, best epoch=0-step=10.ckpt"),
            std::string::npos)
      << mounted.out;
  RunCheck("check_run.py", {"lightning", mountpoint_});
}

// The run Lightning itself wrote (../shared/fixtures/wild, NOTICE.md): hyper_parameters hold
// an argparse.Namespace (an opaque value, item 1), best_model_path is the training machine's
// absolute path. Mounted, latest is last.ckpt and best the callbacks state's file.
TEST_F(RunMountTest, RealLightningRunLatestLastAndBestFromTheCallbacksState) {
  const std::string wild = std::string(kSourceDir) + "/../shared/fixtures/wild";
  if (!std::filesystem::exists(wild + "/lightning_run")) {
    GTEST_SKIP() << wild << " is absent (../shared/fixtures)";
  }
  if (!HasTorch()) GTEST_SKIP() << "/usr/bin/python3 has no torch";
  ProcessResult mounted;
  ASSERT_NO_FATAL_FAILURE(Mount(wild + "/lightning_run", mountpoint_, &mounted, {"-v"}));
  EXPECT_NE(mounted.out.find("3 checkpoint(s), latest last.ckpt, best epoch=3-step=16.ckpt"),
            std::string::npos)
      << mounted.out;
  RunCheck("check_run.py", {"wild-lightning", wild + "/lightning_run", mountpoint_});
}

// A real Trainer output dir (trainer.save_model after training): the final model stays at
// the root where SOURCE has it (from_pretrained(MNT) loads it), its views are views/final.
TEST_F(RunMountTest, TrainerOutputDirFinalModelLoadsWhileLatestIsTheNewestCheckpoint) {
  const std::string wild = std::string(kSourceDir) + "/../shared/fixtures/wild";
  if (!std::filesystem::exists(wild + "/hf_trainer_output")) {
    GTEST_SKIP() << wild << " is absent (../shared/fixtures)";
  }
  if (!HasTorch()) GTEST_SKIP() << "/usr/bin/python3 has no torch";
  ProcessResult mounted;
  ASSERT_NO_FATAL_FAILURE(Mount(wild + "/hf_trainer_output", mountpoint_, &mounted, {"-v"}));
  const ProcessResult ls = RunProcess({"ls", mountpoint_}, kCheckTimeout);
  EXPECT_EQ(ls.out,
            "best\ncheckpoint-12\ncheckpoint-4\nconfig.json\ngeneration_config.json\nlatest\n"
            "model.safetensors\ntraining_args.bin\nviews\n");
  RunCheck("check_trainer.py",
           {"final", wild + "/hf_trainer_output", wild + "/hf_final_state_dict.pt", mountpoint_});
}

// (issue 38) A mount never takes away a path of SOURCE: a Lightning dirpath's .ckpt files
// stay files (torch.load and ckpt_path= open them), `latest` is a file torch.load opens,
// other files and folders are where SOURCE has them, and each checkpoint's views are in
// views/.
TEST_F(RunMountTest, EveryPathOfSourceWorksInTheMountSingleFileCheckpoints) {
  if (!HasTorch()) GTEST_SKIP() << "/usr/bin/python3 has no torch";
  ASSERT_NO_FATAL_FAILURE(MakeRun({"lightning", run_}));
  std::ofstream(run_ + "/notes.txt") << "not a checkpoint\n";
  std::filesystem::create_directories(run_ + "/lightning_logs/version_0");
  std::ofstream(run_ + "/lightning_logs/hparams.yaml") << "lr: 0.1\n";
  ASSERT_NO_FATAL_FAILURE(Mount(run_, mountpoint_));
  EXPECT_TRUE(std::filesystem::is_regular_file(mountpoint_ + "/last.ckpt"));
  EXPECT_TRUE(std::filesystem::is_directory(mountpoint_ + "/views/last.ckpt"));
  RunCheck("check_source_paths.py", {run_, mountpoint_, "--torch-latest"});
}

// (issue 38) An HF Trainer output dir of sharded checkpoints: each checkpoint-N/ keeps its
// shards and index where SOURCE has them (no merged file beside them to load twice), the
// final model stays at the root for from_pretrained(MNT), and the merged views are in
// views/NAME/ (views/final for the final model).
TEST_F(RunMountTest, EveryPathOfSourceWorksInTheMountShardedTrainerOutput) {
  ASSERT_NO_FATAL_FAILURE(MakeRun({"hf-sharded", run_, "2"}));
  ASSERT_NO_FATAL_FAILURE(Mount(run_, mountpoint_));
  RunCheck("check_source_paths.py", {run_, mountpoint_});
  namespace fs = std::filesystem;
  EXPECT_FALSE(fs::exists(mountpoint_ + "/checkpoint-200/model.safetensors"));
  EXPECT_FALSE(fs::exists(mountpoint_ + "/model.safetensors"));
  EXPECT_EQ(fs::read_symlink(mountpoint_ + "/latest"), "checkpoint-200");
  for (const char* views : {"/views/latest", "/views/checkpoint-100", "/views/final"}) {
    EXPECT_TRUE(fs::is_regular_file(mountpoint_ + views + "/model.safetensors")) << views;
    EXPECT_TRUE(
        fs::is_regular_file(mountpoint_ + views + "/shards/model-00002-of-00002.safetensors"))
        << views;
  }
}

// HF Trainer with DeepSpeed (make_run.py trainer-deepspeed): each checkpoint-N/ is one
// checkpoint, its model the gathered model.safetensors or else the ZeRO tag `latest` names.
TEST_F(RunMountTest, TrainerWithDeepSpeedCheckpointsMountAsOneCheckpointEach) {
  if (!HasTorch()) GTEST_SKIP() << "/usr/bin/python3 has no torch";
  const std::string truth10 = scratch_->Path("truth10"), truth20 = scratch_->Path("truth20");
  ASSERT_NO_FATAL_FAILURE(MakeRun({"trainer-deepspeed", run_, truth10, "10", "10"}));
  ASSERT_NO_FATAL_FAILURE(MakeRun({"trainer-deepspeed", run_, truth20, "20", "10", "--gathered"}));
  ProcessResult mounted;
  ASSERT_NO_FATAL_FAILURE(Mount(run_, mountpoint_, &mounted, {"-v"}));
  EXPECT_NE(mounted.out.find("2 checkpoint(s), latest checkpoint-20, best checkpoint-10"),
            std::string::npos)
      << mounted.out;
  RunCheck("check_trainer.py", {"deepspeed", run_, mountpoint_});
  RunCheck("check_deepspeed.py", {truth10, mountpoint_ + "/views/checkpoint-10"});
  // One checkpoint mounted alone: the same views.
  const std::string one = scratch_->MakeDir("one");
  ASSERT_NO_FATAL_FAILURE(Mount(run_ + "/checkpoint-10", one));
  RunCheck("check_deepspeed.py", {truth10, one});
}

TEST_F(RunMountTest, ErrorFileIsOneLineAndTheRestOfTheRunServes) {
  ASSERT_NO_FATAL_FAILURE(MakeRun({"hf", run_, "2", "--bad", "checkpoint-broken"}));
  ASSERT_NO_FATAL_FAILURE(Mount(run_, mountpoint_));
  const ProcessResult error =
      RunProcess({"cat", mountpoint_ + "/views/checkpoint-broken/ERROR"}, kCheckTimeout);
  ASSERT_EQ(error.exit_code, 0) << error.Describe();
  EXPECT_EQ(LineCount(error.out), 1) << error.out;
  EXPECT_NE(error.out.find("checkpoint-broken"), std::string::npos) << error.out;
  EXPECT_NE(error.out.find("model.safetensors"), std::string::npos) << error.out;
  const ProcessResult good = RunProcess(
      {"cmp", run_ + "/checkpoint-100/config.json", mountpoint_ + "/checkpoint-100/config.json"},
      kCheckTimeout);
  EXPECT_EQ(good.exit_code, 0) << good.Describe();
}

TEST_F(RunMountTest, UnusedCheckpointsCloseAndReopenWithTheSameInodes) {
  ASSERT_NO_FATAL_FAILURE(MakeRun({"hf", run_, "3"}));
  ASSERT_NO_FATAL_FAILURE(Mount(run_, mountpoint_, nullptr, {"--idle-close", "1"}));
  RunCheck("check_run.py", {"idle", mountpoint_});
}

TEST_F(RunMountTest, TrainingLoopSavingAndDeletingWhileReadersRead) {
  ASSERT_NO_FATAL_FAILURE(SaveTorch(2));
  ASSERT_NO_FATAL_FAILURE(Mount(run_, mountpoint_));
  RunCheck("check_run.py", {"live", run_, mountpoint_, "12"});
}

// Retention never breaks a reader (issue 22): a torch.save loop (model_NNNNN.pt every 0.4 s,
// the newest 3 kept), then an HF loop (checkpoint-N/ pruned with rmtree), each for 30 s
// while two mmap and two read() readers read
// latest/model.safetensors slowly: no SIGBUS, no EIO, every read one step's model, latest
// only forward (tests/mount/check_live_run.py).
TEST_F(RunMountTest, RetentionNeverBreaksOpenFilesTorchSaves) {
  ASSERT_NO_FATAL_FAILURE(MakeLive({"seed", "torch", run_}));
  const std::string log = scratch_->Path("daemon.log");
  ASSERT_NO_FATAL_FAILURE(Mount(run_, mountpoint_, nullptr, {"--log-file", log}));
  RunCheck("check_live_run.py", {"retention", "torch", run_, mountpoint_, "30"});
  ExpectNoChangeLines(log);
}

TEST_F(RunMountTest, RetentionNeverBreaksOpenFilesHfDirectories) {
  ASSERT_NO_FATAL_FAILURE(MakeLive({"seed", "hf", run_}));
  const std::string log = scratch_->Path("daemon.log");
  ASSERT_NO_FATAL_FAILURE(Mount(run_, mountpoint_, nullptr, {"--log-file", log}));
  RunCheck("check_live_run.py", {"retention", "hf", run_, mountpoint_, "30"});
  ExpectNoChangeLines(log);
}

// Saves that pause between files (HF save_pretrained's shards then index, Trainer's parts
// then trainer_state.json, a torch.save file half written): never shown early, and latest
// never moves back.
TEST_F(RunMountTest, SavesInProgressAreNeverShown) {
  ASSERT_NO_FATAL_FAILURE(MakeLive({"seed", "hf", run_}));
  ASSERT_NO_FATAL_FAILURE(Mount(run_, mountpoint_));
  RunCheck("check_live_run.py", {"slowsave", run_, mountpoint_});
}

TEST_F(RunMountTest, PinnedLatestFollowsNewSavesWhileOpenFilesKeepTheirBytes) {
  ASSERT_NO_FATAL_FAILURE(SaveTorch(2));
  ProcessResult mounted;
  ASSERT_NO_FATAL_FAILURE(Mount(run_, mountpoint_, &mounted, {"-v", "--checkpoint", "latest"}));
  EXPECT_NE(mounted.out.find("checkpoint latest (follows the run)"), std::string::npos)
      << mounted.out;
  RunCheck("check_run.py", {"pin", run_, mountpoint_});
}

TEST_F(RunMountTest, CheckpointNamingNoEntryIsRefusedListingEntries) {
  ASSERT_NO_FATAL_FAILURE(SaveTorch(2));
  mounts_.push_back(mountpoint_);
  const ProcessResult r = RunProcess(
      {kCkptfs, "mount", "-o", "checkpoint=ckpt_0009.pt", run_, mountpoint_}, kRefusalTimeout);
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_EQ(LineCount(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("entries: ckpt_0001.pt, ckpt_0002.pt"), std::string::npos) << r.err;
  EXPECT_FALSE(IsMounted(mountpoint_));
}

TEST_F(RunMountTest, TwoHundredCheckpointRunMountsQuickly) {
  ASSERT_NO_FATAL_FAILURE(MakeRun({"many", run_, "200"}));
  const auto start = Clock::now();
  ASSERT_NO_FATAL_FAILURE(Mount(run_, mountpoint_));
  const ProcessResult ls = RunProcess({"ls", mountpoint_}, kCheckTimeout);
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(LineCount(ls.out), 202) << ls.out;  // and latest, views
  std::cout << "200-checkpoint run: mount + ls in " << took << " s\n";
  EXPECT_LT(took, 10.0);  // the budget is 1 s; this machine is shared, so only a bound
  const ProcessResult one =
      RunProcess({"cat", mountpoint_ + "/checkpoint-137/config.json"}, kCheckTimeout);
  EXPECT_NE(one.out.find("\"step\": 137"), std::string::npos) << one.Describe();
}

// Issue 22: one entry linking out of SOURCE is that entry's ERROR (or, a non-weight file,
// left out of it), never the whole run's refusal; `inspect` lists the run too.
TEST_F(RunMountTest, EntriesLinkingOutsideSourceAreTheirOwnErrorTheRunMounts) {
  ASSERT_NO_FATAL_FAILURE(MakeRun({"hf", run_, "3"}));
  const std::string outside = scratch_->MakeDir("outside");
  RunCheck("check_run_faults.py",
           {"add-outside", run_, outside, "checkpoint-400", "400", "weights"});
  RunCheck("check_run_faults.py",
           {"add-outside", run_, outside, "checkpoint-250", "250", "config"});
  const ProcessResult inspect = RunProcess({kCkptfs, "inspect", run_}, kCheckTimeout);
  EXPECT_EQ(inspect.exit_code, 0) << inspect.Describe();
  EXPECT_NE(inspect.out.find("checkpoint-400"), std::string::npos) << inspect.out;
  ASSERT_NO_FATAL_FAILURE(Mount(run_, mountpoint_));
  RunCheck("check_run_faults.py", {"outside", mountpoint_});
}

TEST_F(RunMountTest, LiveRunKeepsFollowingAfterAnEntryLinkingOutsideAppears) {
  ASSERT_NO_FATAL_FAILURE(MakeRun({"hf", run_, "2"}));
  ASSERT_NO_FATAL_FAILURE(Mount(run_, mountpoint_));
  RunCheck("check_run_faults.py", {"follows", run_, mountpoint_, scratch_->MakeDir("outside")});
}

// A 4 s server stall (nginx stopped with SIGSTOP: connections are accepted, never
// answered) while an entry is first opened: it shows ERROR by timeout, and serves once
// the server is back, without any change to its files.
TEST_F(RunMountTest, HttpEntryThatTimedOutServesOnceTheServerIsBack) {
  const std::string unavailable = NginxServer::UnavailableReason();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  const std::string www = scratch_->MakeDir("www");
  ASSERT_NO_FATAL_FAILURE(MakeRun({"hf", www + "/run", "3"}));
  const std::string state = scratch_->Path("nginx");
  NginxServer server(www, state);
  ASSERT_EQ(server.Start(), "");
  ASSERT_EQ(server.Reload("location / { autoindex on; autoindex_format json; }"), "");
  ASSERT_NO_FATAL_FAILURE(
      Mount(server.Url("run/"), mountpoint_, nullptr, {"--relist", "1", "--timeout", "1"}));
  const pid_t nginx = static_cast<pid_t>(std::stol(ReadTextFile(state + "/nginx.pid")));
  ASSERT_GT(nginx, 1);
  struct Resume {  // the server runs again whatever the test does
    pid_t pid;
    ~Resume() { ::kill(pid, SIGCONT); }
  } resume{nginx};
  ASSERT_EQ(::kill(nginx, SIGSTOP), 0);
  const auto stalled = std::chrono::steady_clock::now();
  RunCheck("check_run_faults.py", {"error", mountpoint_, "checkpoint-100", "tried again"});
  std::this_thread::sleep_until(stalled + std::chrono::seconds(4));
  ASSERT_EQ(::kill(nginx, SIGCONT), 0);
  RunCheck("check_run_faults.py", {"recovers", mountpoint_, "checkpoint-100", "100"});
  RunCheck("check_run.py", {"remote", www + "/run", mountpoint_, "--no-save"});
}

TEST_F(RunMountTest, HttpRunFromNginxJsonAutoindexIsListedAgainOnAccess) {
  const std::string unavailable = NginxServer::UnavailableReason();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  const std::string www = scratch_->MakeDir("www");
  const std::string run = www + "/run";
  ASSERT_NO_FATAL_FAILURE(MakeRun({"hf", run, "3"}));
  NginxServer server(www, scratch_->Path("nginx"));
  ASSERT_EQ(server.Start(), "");
  ASSERT_EQ(server.Reload("location / { autoindex on; autoindex_format json; }"), "");
  ProcessResult mounted;
  ASSERT_NO_FATAL_FAILURE(
      Mount(server.Url("run/"), mountpoint_, &mounted, {"-v", "--relist", "1"}));
  EXPECT_NE(mounted.out.find("3 checkpoint(s), latest checkpoint-300, best checkpoint-200"),
            std::string::npos)
      << mounted.out;
  RunCheck("check_run.py", {"remote", run, mountpoint_});
}

TEST_F(RunMountTest, S3RunFromCommonPrefixesIsListedAgainOnAccess) {
  const std::string unavailable = S3Server::UnavailableReason();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  ASSERT_NO_FATAL_FAILURE(MakeRun({"hf", run_, "3"}));
  ScopedEnv env;
  S3Server server(scratch_->Path("s3"));
  server.SetClientEnv(env);
  ASSERT_EQ(server.Start(), "");
  for (const char* name : {"checkpoint-100", "checkpoint-200", "checkpoint-300"}) {
    ASSERT_EQ(server.Upload(run_ + "/" + name, std::string("run/") + name + "/"), "");
  }
  ASSERT_NO_FATAL_FAILURE(Mount(S3Server::Url("run/"), mountpoint_, nullptr,
                                Concat(server.ClientOptions(), {"--relist", "1"})));
  RunCheck("check_run.py", {"remote", run_, mountpoint_, "--no-save"});
  const std::string staged = scratch_->MakeDir("staged");
  ASSERT_NO_FATAL_FAILURE(MakeRun({"hf", staged, "4"}));
  ASSERT_EQ(server.Upload(staged + "/checkpoint-400", "run/checkpoint-400/"), "");
  RunCheck("check_run.py", {"latest", mountpoint_, "checkpoint-400", "400"});
}

}  // namespace
}  // namespace ckptfs::mount_test
