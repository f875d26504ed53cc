// `ckptfs inspect RUN` with the real binary over a training run written by torch.save:
// locally, over HTTP from nginx with a JSON autoindex (and without one: not a run), and
// over S3 from s3rver (CommonPrefixes of a delimiter=/ listing). Each run has three
// HF Trainer-shaped checkpoint directories; trainer_state.json names the best.

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "remote_harness.h"

namespace ckptfs::mount_test {
namespace {

// No FUSE needed: inspect only reads. Servers start in the tests that use them.
class RunInspectTest : public testing::Test {
 protected:
  void SetUp() override {
    scratch_ = std::make_unique<TempDir>();
    run_ = scratch_->MakeDir("www/run");
    const ProcessResult r = RunProcess({kPython, "-c", R"PY(
import json, os, sys, torch
os.chdir(sys.argv[1])
for step in (100, 200, 300):
    d = 'checkpoint-%d' % step
    os.makedirs(d)
    torch.save({'fc.weight': torch.full((4, 4), float(step))}, d + '/pytorch_model.bin')
    torch.save({'state': {}, 'param_groups': []}, d + '/optimizer.pt')
    json.dump({'global_step': step, 'best_model_checkpoint': 'out/checkpoint-200'},
              open(d + '/trainer_state.json', 'w'))
os.makedirs('runs')
open('runs/events.out.tfevents.1', 'w').write('tensorboard')
)PY",
                                        run_},
                                       seconds(60));
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
  }

  // Checks the text of `inspect SOURCE` for the run written in SetUp.
  static void ExpectRunListed(const std::vector<std::string>& argv) {
    const ProcessResult r = RunProcess(argv, seconds(60));
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
    std::cout << r.out;
    EXPECT_NE(r.out.find("run: 3 checkpoints (rule: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("latest   -> checkpoint-300 (by highest step)"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("best     -> checkpoint-200 (by trainer_state.json)"), std::string::npos)
        << r.out;
    for (const char* name : {"checkpoint-100", "checkpoint-200", "checkpoint-300"}) {
      const size_t line = r.out.find("\n" + std::string(name) + " ");
      ASSERT_NE(line, std::string::npos) << name << " not listed:\n" << r.out;
      const std::string text = r.out.substr(line + 1, r.out.find('\n', line + 1) - line - 1);
      EXPECT_NE(text.find("torch"), std::string::npos) << text;
      EXPECT_NE(text.find("complete"), std::string::npos) << text;
    }
  }

  std::unique_ptr<TempDir> scratch_;
  std::string run_;
};

TEST_F(RunInspectTest, LocalRunTextAndJson) {
  ExpectRunListed({kCkptfs, "inspect", run_});
  const ProcessResult r = RunProcess({kCkptfs, "inspect", "--json", run_}, seconds(60));
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  const ProcessResult check = RunProcess(
      {kPython, "-c",
       "import json, sys; j = json.loads(sys.argv[1]);"
       "assert j['run'] and j['latest'] == 'checkpoint-300' and j['best'] == 'checkpoint-200', j;"
       "assert [e['name'] for e in j['entries']] == "
       "['checkpoint-100', 'checkpoint-200', 'checkpoint-300'], j;"
       "assert all(e['complete'] and e['step'] and e['bytes'] > 0 for e in j['entries']), j;"
       "assert any('runs/' in s for s in j['skipped']), j",
       r.out},
      seconds(30));
  EXPECT_EQ(check.exit_code, 0) << check.Describe();
  // One of its checkpoints is inspected as a checkpoint, as before.
  const ProcessResult one = RunProcess({kCkptfs, "inspect", run_ + "/checkpoint-100"}, seconds(60));
  EXPECT_EQ(one.exit_code, 0) << one.Describe();
  EXPECT_NE(one.out.find("fc.weight"), std::string::npos) << one.out;
}

// A complete checkpoint whose header is broken: inspect opens it as the mount would and
// says why, where the mount shows its ERROR file; the others stay plain `complete`.
// pack and verify take one checkpoint: on a run they say which to take, in one line, exit
// 2 (a usage error), and write nothing; on the entry they name, they work.
TEST_F(RunInspectTest, PackAndVerifyOfARunNameTheCheckpointToTake) {
  const std::string dest = scratch_->Path("packed");
  for (const std::vector<std::string>& argv :
       {std::vector<std::string>{kCkptfs, "verify", run_},
        std::vector<std::string>{kCkptfs, "pack", run_, dest}}) {
    const ProcessResult r = RunProcess(argv, seconds(60));
    EXPECT_EQ(r.exit_code, 2) << r.Describe();
    const std::string verb = argv[1];
    EXPECT_EQ(r.err, "ckptfs: " + run_ + " is a training run (3 checkpoints); " + verb +
                         " one: " + run_ + "/checkpoint-300\n")
        << r.Describe();
  }
  EXPECT_FALSE(std::filesystem::exists(dest)) << "pack of a run wrote " << dest;
  const ProcessResult one = RunProcess({kCkptfs, "verify", run_ + "/checkpoint-300"}, seconds(60));
  EXPECT_EQ(one.exit_code, 0) << one.Describe();
}

TEST_F(RunInspectTest, InvalidCheckpointIsNamedWithItsReason) {
  ASSERT_EQ(::mkdir((run_ + "/checkpoint-400").c_str(), 0755), 0);
  {
    std::ofstream bad(run_ + "/checkpoint-400/model.safetensors", std::ios::binary);
    // Whole (the header is as long as it says), but not JSON.
    bad << std::string("\x10\0\0\0\0\0\0\0{bad json}      ", 24);
  }
  // Written last by the Trainer, as in the run's other checkpoints: without it the entry
  // is a save in progress, not an invalid checkpoint.
  std::ofstream(run_ + "/checkpoint-400/trainer_state.json") << "{\"global_step\": 400}";
  const ProcessResult r = RunProcess({kCkptfs, "inspect", run_}, seconds(60));
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  const size_t line = r.out.find("\ncheckpoint-400 ");
  ASSERT_NE(line, std::string::npos) << r.out;
  const std::string text = r.out.substr(line + 1, r.out.find('\n', line + 1) - line - 1);
  EXPECT_NE(text.find("complete, invalid: model.safetensors: "), std::string::npos) << text;
  EXPECT_EQ(r.out.find("invalid", r.out.find("\ncheckpoint-100 ")), line + 1 + text.find("invalid"))
      << "only checkpoint-400 is invalid:\n"
      << r.out;
  // latest never names it, although its step is the highest: as in a mount.
  EXPECT_NE(r.out.find("latest   -> checkpoint-300 (by highest valid step; checkpoint-400 fails "
                       "to open)"),
            std::string::npos)
      << r.out;
}

TEST_F(RunInspectTest, HttpRunFromNginxJsonAutoindex) {
  const std::string unavailable = NginxServer::UnavailableReason();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  NginxServer server(scratch_->Path("www"), scratch_->Path("nginx"));
  ASSERT_EQ(server.Start(), "");
  // Without a listing a server cannot show a run's directories: not a run, said so.
  const ProcessResult plain = RunProcess({kCkptfs, "inspect", server.Url("run/")}, seconds(60));
  EXPECT_EQ(plain.exit_code, 2) << plain.Describe();
  EXPECT_NE(plain.err.find("no checkpoint found"), std::string::npos) << plain.Describe();
  ASSERT_EQ(server.Reload("location / { autoindex on; autoindex_format json; }"), "");
  ExpectRunListed({kCkptfs, "inspect", server.Url("run/")});
}

// A TF run needs no listing: the `checkpoint` state file names its prefixes, and each
// PREFIX.index is asked for by name.
TEST_F(RunInspectTest, HttpTfRunFromTheCheckpointFileAlone) {
  const std::string unavailable = NginxServer::UnavailableReason();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  const std::string written = scratch_->Path("tf");
  const ProcessResult w = RunProcess(
      {kPython, ScriptPath("scripts/make_tf_checkpoint.py"), "standard", written}, seconds(60));
  ASSERT_EQ(w.exit_code, 0) << w.Describe();
  const std::string tf_run = scratch_->MakeDir("www/tfrun");
  for (const char* prefix : {"ckpt-1", "ckpt-2", "ckpt-3"}) {
    for (const fs::directory_entry& e : fs::directory_iterator(written)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("ckpt-3.", 0) != 0) continue;
      fs::copy_file(e.path(), tf_run + "/" + prefix + name.substr(6));
    }
  }
  std::ofstream(tf_run + "/checkpoint") << "model_checkpoint_path: \"ckpt-2\"\n"
                                           "all_model_checkpoint_paths: \"ckpt-1\"\n"
                                           "all_model_checkpoint_paths: \"ckpt-2\"\n"
                                           "all_model_checkpoint_paths: \"ckpt-3\"\n";
  NginxServer server(scratch_->Path("www"), scratch_->Path("nginx"));
  ASSERT_EQ(server.Start(), "");
  const ProcessResult r = RunProcess({kCkptfs, "inspect", server.Url("tfrun/")}, seconds(60));
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  std::cout << r.out;
  EXPECT_NE(r.out.find("here 3 TF prefixes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("latest   -> ckpt-2 (by checkpoint file)"), std::string::npos) << r.out;
  for (const char* prefix : {"ckpt-1 ", "ckpt-2 ", "ckpt-3 "}) {
    const size_t line = r.out.find(std::string("\n") + prefix);
    ASSERT_NE(line, std::string::npos) << prefix << "not listed:\n" << r.out;
    const std::string text = r.out.substr(line + 1, r.out.find('\n', line + 1) - line - 1);
    EXPECT_NE(text.find("tensorflow"), std::string::npos) << text;
    EXPECT_NE(text.find("  complete"), std::string::npos) << text;
  }
}

// The TF state file as TF writes it, latest in both fields: `sub/ckpt-3` joined to the
// state file's directory is latest; a path that is no prefix (a control character) is
// printed once in `skipped`, not once per field.
TEST_F(RunInspectTest, LocalTfRunJoinsSubdirectoryAndSkipsOnce) {
  const std::string written = scratch_->Path("tf");
  const ProcessResult w = RunProcess(
      {kPython, ScriptPath("scripts/make_tf_checkpoint.py"), "standard", written}, seconds(60));
  ASSERT_EQ(w.exit_code, 0) << w.Describe();
  const std::string tf_run = scratch_->MakeDir("tfrun");
  fs::create_directories(tf_run + "/sub");
  for (const char* prefix : {"ckpt-1", "ckpt-2", "sub/ckpt-3"}) {
    for (const fs::directory_entry& e : fs::directory_iterator(written)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("ckpt-3.", 0) != 0) continue;
      fs::copy_file(e.path(), tf_run + "/" + prefix + name.substr(6));
    }
  }
  std::ofstream(tf_run + "/checkpoint") << "model_checkpoint_path: \"sub/ckpt-3\"\n"
                                           "all_model_checkpoint_paths: \"ckpt-1\"\n"
                                           "all_model_checkpoint_paths: \"bad\\001\"\n"
                                           "all_model_checkpoint_paths: \"ckpt-2\"\n"
                                           "all_model_checkpoint_paths: \"bad\\001\"\n"
                                           "all_model_checkpoint_paths: \"sub/ckpt-3\"\n";
  const ProcessResult r = RunProcess({kCkptfs, "inspect", tf_run}, seconds(60));
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_NE(r.out.find("latest   -> ckpt-3 (by checkpoint file)"), std::string::npos) << r.out;
  const size_t skipped = r.out.find("skipped  ");
  ASSERT_NE(skipped, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("skipped  ", skipped + 1), std::string::npos) << r.out;
}

TEST_F(RunInspectTest, S3RunFromCommonPrefixes) {
  const std::string unavailable = S3Server::UnavailableReason();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  ScopedEnv env;
  S3Server server(scratch_->Path("s3"));
  server.SetClientEnv(env);
  ASSERT_EQ(server.Start(), "");
  for (const char* name : {"checkpoint-100", "checkpoint-200", "checkpoint-300", "runs"}) {
    ASSERT_EQ(server.Upload(run_ + "/" + name, std::string("run/") + name + "/"), "");
  }
  ExpectRunListed(
      Concat({kCkptfs, "inspect"}, Concat(server.ClientOptions(), {S3Server::Url("run/")})));
}

}  // namespace
}  // namespace ckptfs::mount_test
