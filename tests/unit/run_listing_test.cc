// Run discovery (core/run/run_listing.h) over local run directories written by real
// writers: torch.save (via /usr/bin/python3) for training dicts, HF Trainer-shaped
// directories and a Lightning-shaped .ckpt; scripts/make_tf_checkpoint.py for TF prefixes;
// ../shared/fixtures/tf for TF Serving version directories (skipped when absent).
#include "core/run/run_listing.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "core/checkpoint/assembly.h"
#include "core/format/formats.h"
#include "core/source/remote_dir.h"
#include "core/source/s3.h"
#include "core/transient.h"
#include "test_util.h"
#include "tests/unit/descriptors_left.h"

namespace ckptfs {
namespace {

namespace fs = std::filesystem;
using testing::MakeSafetensors;
using testing::TestContext;

class RunListingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("ckptfs_run_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "run");
    run_ = root_ / "run";
  }
  void TearDown() override { fs::remove_all(root_); }

  static void Write(const fs::path& path, const std::string& bytes) {
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << bytes;
  }
  // Runs `script` with /usr/bin/python3 in `run_` (torch.save and friends).
  void Python(const std::string& script) {
    const fs::path file = root_ / "writer.py";
    Write(file, script);
    const std::string cmd =
        "cd '" + run_.string() + "' && /usr/bin/python3 '" + file.string() + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static std::string Weights(const std::string& tag) {
    return MakeSafetensors({{tag + ".weight", Dtype::kF32, {2, 2}}});
  }
  RunListing List() {
    auto dir = OpenSourceDir(run_.string(), TestContext(), {});
    EXPECT_TRUE(dir.ok()) << dir.status().message();
    auto run = ListRun(*dir);
    EXPECT_TRUE(run.ok()) << run.status().message();
    return run.ok() ? std::move(run).value() : RunListing{};
  }
  bool IsRunAt(const fs::path& path) {
    auto dir = OpenSourceDir(path.string(), TestContext(), {});
    EXPECT_TRUE(dir.ok()) << dir.status().message();
    auto run = IsRun(*dir);
    EXPECT_TRUE(run.ok()) << run.status().message();
    return run.ok() && *run;
  }
  // Opens entry `name` of the run as the mount would, returning its tensor names.
  std::vector<std::string> OpenEntry(const RunListing& run, const std::string& name) {
    auto dir = OpenSourceDir(run_.string(), TestContext(), {});
    for (const RunEntry& e : run.entries) {
      if (e.name != name) continue;
      auto sub = EntrySourceDir(*dir, e);
      EXPECT_TRUE(sub.ok()) << sub.status().message();
      if (!sub.ok()) return {};
      auto ckpt = OpenCheckpointIn(*sub, TestContext(), {}, sub->path);
      EXPECT_TRUE(ckpt.ok()) << ckpt.status().message();
      if (!ckpt.ok()) return {};
      std::vector<std::string> names;
      for (const Tensor& t : ckpt->tensors) names.push_back(t.name);
      return names;
    }
    ADD_FAILURE() << name << " is no entry";
    return {};
  }
  static const RunEntry* Entry(const RunListing& run, const std::string& name) {
    for (const RunEntry& e : run.entries) {
      if (e.name == name) return &e;
    }
    return nullptr;
  }
  static std::string Names(const RunListing& run) {
    std::string out;
    for (const RunEntry& e : run.entries) out += (out.empty() ? "" : " ") + e.name;
    return out;
  }
  static std::string Skipped(const RunListing& run) {
    std::string out;
    for (const std::string& s : run.skipped) out += s + "\n";
    return out;
  }

  fs::path root_, run_;
};

// An HF Trainer checkpoint directory as Trainer._save_checkpoint leaves it (torch parts
// written by torch.save in Python; trainer_state.json naming the best so far).
constexpr char kTrainerParts[] = R"PY(
import json, os, sys, torch
def save(step, best):
    d = 'checkpoint-%d' % step
    os.makedirs(d, exist_ok=True)
    torch.save({'state': {0: {'step': torch.tensor(float(step)), 'exp_avg': torch.zeros(2, 2),
                              'exp_avg_sq': torch.zeros(2, 2)}},
                'param_groups': [{'lr': 1e-3, 'betas': (0.9, 0.999), 'params': [0]}]},
               d + '/optimizer.pt')
    torch.save({'last_epoch': step, '_step_count': step}, d + '/scheduler.pt')
    torch.save({'python': 1, 'cpu': torch.ByteTensor(8)}, d + '/rng_state.pth')
    torch.save({'output_dir': 'out'}, d + '/training_args.bin')
    json.dump({'global_step': step, 'best_model_checkpoint': best,
               'log_history': [{'step': step, 'eval_loss': 1.0 / step}]},
              open(d + '/trainer_state.json', 'w'))
)PY";

TEST_F(RunListingTest, HfTrainerRunHasLatestByStepAndBestByTrainerState) {
  for (int step : {500, 1000, 1500}) {
    Write(run_ / ("checkpoint-" + std::to_string(step)) / "model.safetensors",
          Weights("s" + std::to_string(step)));
    Write(run_ / ("checkpoint-" + std::to_string(step)) / "config.json", "{}");
  }
  Python(std::string(kTrainerParts) +
         "save(500, 'out/checkpoint-500')\n"
         "save(1000, 'out/checkpoint-1000')\n"
         "save(1500, '/elsewhere/out/checkpoint-1000')\n");
  // Newest trainer_state.json wins: make checkpoint-1500's the newest for sure.
  const auto later = fs::file_time_type::clock::now() + std::chrono::seconds(5);
  fs::last_write_time(run_ / "checkpoint-1500" / "trainer_state.json", later);
  // Being written: HF renames tmp-checkpoint-N when done; shards without their index.
  Write(run_ / "tmp-checkpoint-2000" / "model.safetensors", Weights("t"));
  Write(run_ / "checkpoint-2500" / "model-00001-of-00002.safetensors", Weights("a"));
  Write(run_ / "checkpoint-2500" / "model-00002-of-00002.safetensors", Weights("b"));
  Write(run_ / "runs" / "events.out.tfevents.1", "not a checkpoint");

  EXPECT_TRUE(IsRunAt(run_));
  EXPECT_FALSE(IsRunAt(run_ / "checkpoint-500"));  // optimizer.pt & co. are its parts
  const RunListing run = List();
  EXPECT_EQ(Names(run),
            "checkpoint-500 checkpoint-1000 checkpoint-1500 checkpoint-2500 "
            "tmp-checkpoint-2000");
  EXPECT_EQ(run.latest, "checkpoint-1500");
  EXPECT_EQ(run.latest_from, "highest step");
  EXPECT_EQ(run.best, "checkpoint-1000");
  EXPECT_EQ(run.best_from, "trainer_state.json");
  const RunEntry* e = Entry(run, "checkpoint-1000");
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->complete) << e->why_incomplete;
  EXPECT_EQ(e->step, 1000u);
  EXPECT_EQ(e->format, "safetensors");
  EXPECT_GT(e->bytes, 0u);
  EXPECT_GT(e->mtime.tv_sec, 0);
  EXPECT_FALSE(Entry(run, "tmp-checkpoint-2000")->complete);
  EXPECT_NE(Entry(run, "tmp-checkpoint-2000")->why_incomplete.find("tmp-checkpoint"),
            std::string::npos);
  EXPECT_FALSE(Entry(run, "checkpoint-2500")->complete);
  EXPECT_NE(Entry(run, "checkpoint-2500")->why_incomplete.find("without its index"),
            std::string::npos);
  EXPECT_NE(Skipped(run).find("runs/: no checkpoint in it"), std::string::npos) << Skipped(run);
  EXPECT_EQ(OpenEntry(run, "checkpoint-1500"), std::vector<std::string>{"s1500.weight"});

  // The signature follows the files: a rewritten file is a new checkpoint.
  const std::string before = Entry(run, "checkpoint-500")->signature;
  Write(run_ / "checkpoint-500" / "config.json", "{\"a\": 1}");
  EXPECT_NE(Entry(List(), "checkpoint-500")->signature, before);
}

TEST_F(RunListingTest, IndexedCheckpointIsCompleteOnlyWithEveryShard) {
  const std::string index = testing::IndexJson({{"a.weight", "model-00001-of-00002.safetensors"},
                                                {"b.weight", "model-00002-of-00002.safetensors"}});
  for (const char* d : {"checkpoint-1", "checkpoint-2"}) {
    Write(run_ / d / "model.safetensors.index.json", index);
    Write(run_ / d / "model-00001-of-00002.safetensors", Weights("a"));
  }
  Write(run_ / "checkpoint-1" / "model-00002-of-00002.safetensors", Weights("b"));
  const RunListing run = List();
  EXPECT_TRUE(Entry(run, "checkpoint-1")->complete);
  EXPECT_FALSE(Entry(run, "checkpoint-2")->complete);
  EXPECT_NE(Entry(run, "checkpoint-2")->why_incomplete.find("model-00002-of-00002.safetensors"),
            std::string::npos);
  // Only complete entries may be latest, whatever their step.
  EXPECT_EQ(run.latest, "checkpoint-1");
  EXPECT_EQ(OpenEntry(run, "checkpoint-1"), (std::vector<std::string>{"a.weight", "b.weight"}));
}

// A file named -0000K-of-0000N is never a checkpoint on its own: save_pretrained writes
// the shards one by one, then the index (issue 22: shard 1 of 2 was shown as a complete
// single-file checkpoint).
TEST_F(RunListingTest, ALoneShardIsASaveInProgress) {
  Write(run_ / "checkpoint-1" / "model.safetensors", Weights("a"));
  Write(run_ / "checkpoint-2" / "config.json", "{}");
  Write(run_ / "checkpoint-2" / "model-00001-of-00002.safetensors", Weights("a"));
  Write(run_ / "checkpoint-3" / "pytorch_model-00001-of-00003.bin.zst", "not read");
  // Shard 1 of 1 is the whole model: nothing is missing.
  Write(run_ / "checkpoint-4" / "model-00001-of-00001.safetensors", Weights("a"));
  RunListing run = List();
  EXPECT_TRUE(Entry(run, "checkpoint-1")->complete);
  EXPECT_FALSE(Entry(run, "checkpoint-2")->complete);
  EXPECT_NE(Entry(run, "checkpoint-2")->why_incomplete.find("model-00001-of-00002.safetensors"),
            std::string::npos)
      << Entry(run, "checkpoint-2")->why_incomplete;
  ASSERT_NE(Entry(run, "checkpoint-3"), nullptr) << Names(run);
  EXPECT_FALSE(Entry(run, "checkpoint-3")->complete);
  EXPECT_TRUE(Entry(run, "checkpoint-4")->complete);
  EXPECT_EQ(run.latest, "checkpoint-4");

  // Every sibling but no index yet: still in progress; then the index: complete.
  std::filesystem::remove_all(run_ / "checkpoint-4");
  Write(run_ / "checkpoint-2" / "model-00002-of-00002.safetensors", Weights("b"));
  run = List();
  EXPECT_FALSE(Entry(run, "checkpoint-2")->complete);
  EXPECT_EQ(run.latest, "checkpoint-1");
  Write(run_ / "checkpoint-2" / "model.safetensors.index.json",
        testing::IndexJson({{"a.weight", "model-00001-of-00002.safetensors"},
                            {"b.weight", "model-00002-of-00002.safetensors"}}));
  run = List();
  EXPECT_TRUE(Entry(run, "checkpoint-2")->complete) << Entry(run, "checkpoint-2")->why_incomplete;
  EXPECT_EQ(run.latest, "checkpoint-2");

  // Mounted on its own, a lone shard is refused, naming it.
  Write(run_ / "lone" / "model-00002-of-00005.safetensors", Weights("a"));
  auto lone = OpenSourceDir((run_ / "lone").string(), TestContext(), {});
  ASSERT_TRUE(lone.ok());
  auto ckpt = OpenCheckpointIn(*lone, TestContext(), {}, lone->path);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_NE(ckpt.status().message().find("model-00002-of-00005.safetensors: shard 2 of 5"),
            std::string::npos)
      << ckpt.status().message();
}

// Trainer._save_checkpoint writes trainer_state.json last: where the run's checkpoints
// have one, a checkpoint-N without it is being written; so is any directory holding
// optimizer.pt, scheduler.pt or rng_state*.pth (only that function writes them) without it.
TEST_F(RunListingTest, TrainerCheckpointIsCompleteOnceTrainerStateIsThere) {
  Write(run_ / "checkpoint-100" / "model.safetensors", Weights("a"));
  Write(run_ / "checkpoint-100" / "trainer_state.json", "{}");
  Write(run_ / "checkpoint-200" / "model.safetensors", Weights("a"));
  Write(run_ / "final" / "model.safetensors", Weights("a"));  // save_model: no state
  RunListing run = List();
  EXPECT_FALSE(Entry(run, "checkpoint-200")->complete);
  EXPECT_NE(Entry(run, "checkpoint-200")->why_incomplete.find("trainer_state.json"),
            std::string::npos);
  EXPECT_TRUE(Entry(run, "final")->complete);
  EXPECT_EQ(run.latest, "checkpoint-100");
  Write(run_ / "checkpoint-200" / "trainer_state.json", "{}");
  run = List();
  EXPECT_TRUE(Entry(run, "checkpoint-200")->complete);
  EXPECT_EQ(run.latest, "checkpoint-200");

  // A run of plain checkpoint-N directories (no Trainer) needs none...
  std::filesystem::remove_all(run_);
  Write(run_ / "checkpoint-1" / "model.safetensors", Weights("a"));
  Write(run_ / "checkpoint-2" / "model.safetensors", Weights("a"));
  run = List();
  EXPECT_TRUE(Entry(run, "checkpoint-2")->complete);
  // ...unless Trainer's parts say a Trainer is writing it.
  Write(run_ / "checkpoint-2" / "optimizer.pt", "not read");
  run = List();
  EXPECT_FALSE(Entry(run, "checkpoint-2")->complete);
  EXPECT_EQ(run.latest, "checkpoint-1");
}

// DeepSpeedEngine.save_checkpoint: all ranks write the tag, then rank 0 writes `latest`; a
// tag of a higher step than `latest` names is being written.
TEST_F(RunListingTest, DeepSpeedTagPastTheLatestFileIsBeingWritten) {
  Write(run_ / "global_step10" / "model.safetensors", Weights("a"));
  Write(run_ / "global_step20" / "model.safetensors", Weights("b"));
  Write(run_ / "latest", "global_step10");
  RunListing run = List();
  EXPECT_TRUE(Entry(run, "global_step10")->complete);
  EXPECT_FALSE(Entry(run, "global_step20")->complete);
  EXPECT_NE(Entry(run, "global_step20")->why_incomplete.find("latest file still names"),
            std::string::npos);
  Write(run_ / "latest", "global_step20");
  run = List();
  EXPECT_TRUE(Entry(run, "global_step20")->complete);
  EXPECT_EQ(run.latest, "global_step20");
}

TEST_F(RunListingTest, TorchTrainingFilesAreARunAndATruncatedOneIsIncomplete) {
  Python(R"PY(
import torch
for step in (10, 20, 30):
    model = {'fc.weight': torch.full((3, 2), float(step)), 'fc.bias': torch.zeros(3)}
    torch.save({'epoch': step, 'model_state_dict': model,
                'optimizer_state_dict': {'state': {0: {'exp_avg': torch.zeros(3, 2)}},
                                         'param_groups': [{'lr': 0.1, 'params': [0, 1]}]}},
               'model_%05d.pt' % step)
data = open('model_00030.pt', 'rb').read()
open('model_00030.pt', 'wb').write(data[:len(data) // 2])   # killed mid-save
)PY");
  EXPECT_TRUE(IsRunAt(run_));
  const RunListing run = List();
  EXPECT_EQ(Names(run), "model_00010.pt model_00020.pt model_00030.pt");
  EXPECT_EQ(Entry(run, "model_00010.pt")->kind, RunEntry::Kind::kFile);
  EXPECT_EQ(Entry(run, "model_00020.pt")->step, 20u);
  EXPECT_FALSE(Entry(run, "model_00030.pt")->complete);
  EXPECT_NE(Entry(run, "model_00030.pt")->why_incomplete.find("zip end record"), std::string::npos);
  EXPECT_EQ(run.latest, "model_00020.pt");
  EXPECT_EQ(run.best, "");
  const std::vector<std::string> names = OpenEntry(run, "model_00020.pt");
  EXPECT_NE(std::find(names.begin(), names.end(), "model_state_dict.fc.weight"), names.end());
  // One torch file beside its HF Trainer parts is one checkpoint, not a run.
  fs::remove(run_ / "model_00010.pt");
  fs::remove(run_ / "model_00030.pt");
  for (const char* part :
       {"optimizer.pt", "scheduler.pt", "rng_state_0.pth", "training_args.bin", "scaler.pt"}) {
    fs::copy_file(run_ / "model_00020.pt", run_ / part);
  }
  EXPECT_FALSE(IsRunAt(run_));
}

TEST_F(RunListingTest, LightningRunHasLastAsLatestAndBestFromModelCheckpoint) {
  Python(R"PY(
import torch
def save(name, epoch, step, best):
    torch.save({
        'epoch': epoch, 'global_step': step, 'pytorch-lightning_version': '2.1.0',
        'state_dict': {'model.encoder.weight': torch.full((2, 2), float(step))},
        'loops': {'fit_loop': {'epoch_progress': {'current': {'completed': epoch}}}},
        'callbacks': {
            "ModelCheckpoint{'monitor': 'val_loss', 'mode': 'min', 'every_n_train_steps': 0,"
            " 'every_n_epochs': 1, 'train_time_interval': None}": {
                'monitor': 'val_loss', 'best_model_score': torch.tensor(0.25),
                'best_model_path': best, 'current_score': torch.tensor(0.5),
                'dirpath': '/data/lightning_logs/version_0/checkpoints',
                'best_k_models': {best: torch.tensor(0.25)}, 'kth_best_model_path': best,
                'last_model_path': '/data/lightning_logs/version_0/checkpoints/last.ckpt'}},
        'optimizer_states': [{'state': {0: {'step': torch.tensor(float(step)),
                                            'exp_avg': torch.zeros(2, 2)}},
                              'param_groups': [{'lr': 0.001, 'params': [0]}]}],
        'lr_schedulers': [],
    }, name)
best = '/data/lightning_logs/version_0/checkpoints/epoch=0-step=100.ckpt'
save('epoch=0-step=100.ckpt', 0, 100, best)
save('epoch=1-step=200.ckpt', 1, 200, best)
save('last.ckpt', 1, 200, best)
)PY");
  EXPECT_TRUE(IsRunAt(run_));
  const RunListing run = List();
  EXPECT_EQ(Names(run), "epoch=0-step=100.ckpt epoch=1-step=200.ckpt last.ckpt");
  EXPECT_EQ(Entry(run, "epoch=1-step=200.ckpt")->step, 200u);
  EXPECT_EQ(Entry(run, "last.ckpt")->step, std::nullopt);
  EXPECT_EQ(run.latest, "last.ckpt");
  EXPECT_EQ(run.latest_from, "last.ckpt");
  EXPECT_EQ(run.best, "epoch=0-step=100.ckpt");
  EXPECT_EQ(run.best_from, "ModelCheckpoint best_model_path");
  const std::vector<std::string> names = OpenEntry(run, "epoch=0-step=100.ckpt");
  EXPECT_NE(std::find(names.begin(), names.end(), "state_dict.model.encoder.weight"), names.end());
  // Without last.ckpt: latest by step, best from the newest .ckpt's callbacks state.
  fs::remove(run_ / "last.ckpt");
  fs::last_write_time(run_ / "epoch=1-step=200.ckpt",
                      fs::file_time_type::clock::now() + std::chrono::seconds(5));
  const RunListing without = List();
  EXPECT_EQ(without.latest, "epoch=1-step=200.ckpt");
  EXPECT_EQ(without.latest_from, "highest step");
  EXPECT_EQ(without.best, "epoch=0-step=100.ckpt");
}

// A Lightning checkpoint as ModelCheckpoint saves it, with the callbacks state of several
// ModelCheckpoint callbacks in the order given (each a (monitor, best file name) pair).
constexpr char kLightningWriter[] = R"PY(
import torch
def save(name, step, callbacks):
    state = {}
    for monitor, best in callbacks:
        key = ("ModelCheckpoint{'monitor': '%s', 'mode': 'min', 'every_n_train_steps': 0,"
               " 'every_n_epochs': 1, 'train_time_interval': None}" % monitor)
        path = '/data/lightning_logs/version_0/checkpoints/' + best if best else ''
        state[key] = {'monitor': monitor, 'best_model_score': torch.tensor(0.25),
                      'best_model_path': path, 'dirpath': '/data/lightning_logs/version_0/checkpoints',
                      'best_k_models': {path: torch.tensor(0.25)}, 'kth_best_model_path': path}
    torch.save({'epoch': 0, 'global_step': step, 'pytorch-lightning_version': '2.1.0',
                'state_dict': {'model.w': torch.full((2, 2), float(step))},
                'callbacks': state, 'optimizer_states': [], 'lr_schedulers': []}, name)
)PY";

// A second fit() into the same dirpath writes last-v1.ckpt beside last.ckpt
// (ModelCheckpoint._save_last_checkpoint's version counter): the highest version is the
// newest last, and best comes from ITS callbacks state, from the first ModelCheckpoint saved
// there, although a later one's key sorts first ('train_loss' < 'val_loss').
TEST_F(RunListingTest, LightningLastVersionIsLatestAndFirstModelCheckpointIsBest) {
  Python(std::string(kLightningWriter) + R"PY(
save('epoch=0-step=10.ckpt', 10, [('val_loss', 'epoch=0-step=10.ckpt')])
save('epoch=0-step=20.ckpt', 20, [('val_loss', 'epoch=0-step=10.ckpt')])
save('last.ckpt', 20, [('val_loss', 'epoch=0-step=10.ckpt')])
save('epoch=0-step=30.ckpt', 30, [('val_loss', 'epoch=0-step=30.ckpt'),
                                  ('train_loss', 'epoch=0-step=20.ckpt')])
save('last-v1.ckpt', 30, [('val_loss', 'epoch=0-step=30.ckpt'),
                          ('train_loss', 'epoch=0-step=20.ckpt')])
)PY");
  // last.ckpt written last of all (a copy, a sync): versions decide, never times.
  fs::last_write_time(run_ / "last.ckpt",
                      fs::file_time_type::clock::now() + std::chrono::seconds(5));
  const RunListing run = List();
  EXPECT_EQ(Entry(run, "last-v1.ckpt")->step, std::nullopt);
  EXPECT_EQ(run.latest, "last-v1.ckpt");
  EXPECT_EQ(run.latest_from, "last.ckpt");
  EXPECT_EQ(run.best, "epoch=0-step=30.ckpt") << Skipped(run);
  EXPECT_EQ(run.best_from, "ModelCheckpoint best_model_path");
  // A third fit(): last-v2 beats last-v1 (and last-v10 beats last-v2: numbers, not names).
  Python(std::string(kLightningWriter) + R"PY(
save('last-v2.ckpt', 30, [('train_loss', 'epoch=0-step=20.ckpt'),
                          ('val_loss', 'epoch=0-step=30.ckpt')])
)PY");
  const RunListing third = List();
  EXPECT_EQ(third.latest, "last-v2.ckpt");
  EXPECT_EQ(third.best, "epoch=0-step=20.ckpt");
  fs::rename(run_ / "last-v2.ckpt", run_ / "last-v10.ckpt");
  fs::copy_file(run_ / "last-v1.ckpt", run_ / "last-v9.ckpt");
  EXPECT_EQ(List().latest, "last-v10.ckpt");
  // The first ModelCheckpoint has no best yet: no best, never a later callback's.
  Python(std::string(kLightningWriter) + R"PY(
save('last-v11.ckpt', 30, [('val_loss', ''), ('train_loss', 'epoch=0-step=20.ckpt')])
)PY");
  const RunListing fresh = List();
  EXPECT_EQ(fresh.latest, "last-v11.ckpt");
  EXPECT_EQ(fresh.best, "");
}

// Files named by a metric only (ModelCheckpoint(filename="{epoch}-{val_loss:.2f}",
// auto_insert_metric_name=...) with no step) are ordered by time, not by the metric's digits.
TEST_F(RunListingTest, MetricNamedFilesAreOrderedByTime) {
  Python(std::string(kLightningWriter) + R"PY(
save('epoch-val_loss=0.50.ckpt', 10, [('val_loss', 'epoch-val_loss=0.50.ckpt')])
save('epoch-val_loss=0.25.ckpt', 20, [('val_loss', 'epoch-val_loss=0.25.ckpt')])
)PY");
  const auto now = fs::file_time_type::clock::now();
  fs::last_write_time(run_ / "epoch-val_loss=0.50.ckpt", now - std::chrono::seconds(60));
  fs::last_write_time(run_ / "epoch-val_loss=0.25.ckpt", now);
  const RunListing run = List();
  EXPECT_EQ(Entry(run, "epoch-val_loss=0.50.ckpt")->step, std::nullopt);
  EXPECT_EQ(run.latest, "epoch-val_loss=0.25.ckpt");
  EXPECT_EQ(run.latest_from, "newest");
  EXPECT_EQ(run.best, "epoch-val_loss=0.25.ckpt");
}

// The Lightning run written by Lightning itself (../shared/fixtures/wild, NOTICE.md): its
// hyper_parameters hold an argparse.Namespace, read as an opaque value (issue 23, item 1), so
// every .ckpt is an entry and the callbacks state of last.ckpt names the best.
TEST_F(RunListingTest, RealLightningRunBestIsTheCallbacksBest) {
  const fs::path wild = fs::path(CKPTFS_SOURCE_DIR) / ".." / "shared" / "fixtures" / "wild";
  if (!fs::exists(wild / "lightning_run")) GTEST_SKIP() << "../shared/fixtures/wild is absent";
  std::ifstream in(wild / "lightning_best.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string key = "\"best_model_path\": \"";
  const size_t at = text.find(key);
  ASSERT_NE(at, std::string::npos) << text;
  const std::string best =
      text.substr(at + key.size(), text.find('"', at + key.size()) - at - key.size());
  run_ = wild / "lightning_run";
  const RunListing run = List();
  EXPECT_EQ(run.latest, "last.ckpt");
  EXPECT_EQ(Names(run), "epoch=2-step=12.ckpt epoch=3-step=16.ckpt last.ckpt");
  EXPECT_EQ(Skipped(run), "");
  for (const RunEntry& e : run.entries)
    EXPECT_TRUE(e.complete) << e.name << ": " << e.why_incomplete;
  EXPECT_EQ(run.best, fs::path(best).filename().string()) << Skipped(run);
  // The best file's own state names it too: matched by file name, as written on the
  // training machine.
  EXPECT_EQ(run.best_from, "ModelCheckpoint best_model_path");
}

TEST_F(RunListingTest, CompressedEntriesAreCompleteAndOpen) {
  for (const char* d : {"checkpoint-1", "checkpoint-2"}) {
    Write(run_ / d / "model.safetensors", Weights(d));
    const std::string cmd = "zstd -q --rm '" + (run_ / d / "model.safetensors").string() + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  const RunListing run = List();
  EXPECT_EQ(Names(run), "checkpoint-1 checkpoint-2");
  EXPECT_TRUE(Entry(run, "checkpoint-2")->complete) << Entry(run, "checkpoint-2")->why_incomplete;
  EXPECT_EQ(run.latest, "checkpoint-2");
  EXPECT_EQ(OpenEntry(run, "checkpoint-2"), std::vector<std::string>{"checkpoint-2.weight"});
}

TEST_F(RunListingTest, PerKeySplitCheckpointIsNotARun) {
  Python(R"PY(
import torch
torch.save({'a': 'a.pt', 'b': 'b.pt'}, 'map.pt')
torch.save(torch.zeros(2), 'a.pt')
torch.save(torch.ones(2), 'b.pt')
)PY");
  EXPECT_FALSE(IsRunAt(run_));
  // ... but a run may hold split checkpoints as its entries.
  fs::create_directories(root_ / "outer");
  fs::rename(run_, root_ / "outer" / "step_5");
  run_ = root_ / "outer";
  EXPECT_TRUE(IsRunAt(run_));
  EXPECT_EQ(Names(List()), "step_5");
}

// Copies the bundle `from`/ckpt-3 as `to`/NAME.
void CopyBundle(const fs::path& from, const fs::path& to, const std::string& name) {
  for (const auto& f : fs::directory_iterator(from)) {
    const std::string file = f.path().filename().string();
    if (file.rfind("ckpt-3.", 0) != 0) continue;
    fs::copy_file(f.path(), to / (name + file.substr(6)), fs::copy_options::overwrite_existing);
  }
}

TEST_F(RunListingTest, TfPrefixesListedInTheStateFileAreARun) {
  const fs::path written = root_ / "tf";
  const std::string cmd = "/usr/bin/python3 " CKPTFS_SOURCE_DIR
                          "/scripts/make_tf_checkpoint.py standard " +
                          written.string() + " >/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  // One prefix: a checkpoint, as today.
  CopyBundle(written, run_, "ckpt-1");
  Write(run_ / "checkpoint",
        "model_checkpoint_path: \"ckpt-1\"\nall_model_checkpoint_paths: \"ckpt-1\"\n");
  EXPECT_FALSE(IsRunAt(run_));
  CopyBundle(written, run_, "ckpt-2");
  CopyBundle(written, run_, "ckpt-3");
  fs::remove(run_ / "ckpt-3.data-00001-of-00002");  // still being written
  CopyBundle(written, run_, "ckpt-4");              // not yet named by the state file
  // TF1 wrote absolute paths; the record names ckpt-2 even though ckpt-3 has a higher step.
  Write(run_ / "checkpoint",
        "model_checkpoint_path: \"/old/machine/train/ckpt-2\"\n"
        "all_model_checkpoint_paths: \"/old/machine/train/ckpt-1\"\n"
        "all_model_checkpoint_paths: \"ckpt-2\"\n"
        "all_model_checkpoint_paths: \"ckpt-3\"\n");
  EXPECT_TRUE(IsRunAt(run_));
  const RunListing run = List();
  EXPECT_EQ(Names(run), "ckpt-1 ckpt-2 ckpt-3 ckpt-4");
  EXPECT_EQ(Entry(run, "ckpt-2")->kind, RunEntry::Kind::kPrefix);
  EXPECT_TRUE(Entry(run, "ckpt-1")->complete) << Entry(run, "ckpt-1")->why_incomplete;
  EXPECT_FALSE(Entry(run, "ckpt-3")->complete);
  EXPECT_NE(Entry(run, "ckpt-3")->why_incomplete.find("data file 1 of 2"), std::string::npos);
  EXPECT_FALSE(Entry(run, "ckpt-4")->complete);
  EXPECT_EQ(run.latest, "ckpt-2");
  EXPECT_EQ(run.latest_from, "checkpoint file");
  EXPECT_FALSE(OpenEntry(run, "ckpt-1").empty());
}

// CheckpointManager(keep_checkpoint_every_n_hours=...) drops a kept checkpoint from
// all_model_checkpoint_paths and leaves its files: an entry of the run, never latest. A
// prefix past the listed steps is a save the state file does not name yet.
TEST_F(RunListingTest, TfKeptButUnlistedPrefixesAreEntriesNeverLatest) {
  const fs::path written = root_ / "tf";
  const std::string cmd = "/usr/bin/python3 " CKPTFS_SOURCE_DIR
                          "/scripts/make_tf_checkpoint.py standard " +
                          written.string() + " >/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  for (const char* p : {"ckpt-1", "ckpt-2", "ckpt-5", "ckpt-6", "ckpt-7"}) {
    CopyBundle(written, run_, p);
  }
  Write(run_ / "checkpoint",
        "model_checkpoint_path: \"ckpt-6\"\n"
        "all_model_checkpoint_paths: \"ckpt-5\"\n"
        "all_model_checkpoint_paths: \"ckpt-6\"\n");
  const RunListing run = List();
  EXPECT_EQ(Names(run), "ckpt-1 ckpt-2 ckpt-5 ckpt-6 ckpt-7");
  EXPECT_TRUE(Entry(run, "ckpt-1")->complete) << Entry(run, "ckpt-1")->why_incomplete;
  EXPECT_TRUE(Entry(run, "ckpt-2")->complete) << Entry(run, "ckpt-2")->why_incomplete;
  EXPECT_FALSE(Entry(run, "ckpt-7")->complete);
  EXPECT_EQ(run.latest, "ckpt-6");
  EXPECT_FALSE(OpenEntry(run, "ckpt-1").empty());
  // The listed latest gone: the highest listed step, never a kept one nor an unnamed save.
  for (const auto& f : fs::directory_iterator(run_)) {
    if (f.path().filename().string().starts_with("ckpt-6.")) fs::remove(f.path());
  }
  Write(run_ / "checkpoint",
        "model_checkpoint_path: \"ckpt-6\"\n"
        "all_model_checkpoint_paths: \"ckpt-5\"\n"
        "all_model_checkpoint_paths: \"ckpt-6\"\n");
  EXPECT_EQ(List().latest, "ckpt-5");
}

// `model_checkpoint_path: "sub/ckpt-3"` is joined to the state file's directory, as
// checkpoint_management.get_checkpoint_state does: the prefix in sub/ is an entry (by its own
// name) and latest; a subdirectory linking out of SOURCE, or `..`, never is.
TEST_F(RunListingTest, TfStatePathInASubdirectoryIsJoinedInsideSource) {
  const fs::path written = root_ / "tf";
  const std::string cmd = "/usr/bin/python3 " CKPTFS_SOURCE_DIR
                          "/scripts/make_tf_checkpoint.py standard " +
                          written.string() + " >/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  CopyBundle(written, run_, "ckpt-1");
  CopyBundle(written, run_, "ckpt-2");
  fs::create_directories(run_ / "sub");
  CopyBundle(written, run_ / "sub", "ckpt-3");
  const std::string state =
      "model_checkpoint_path: \"sub/ckpt-3\"\n"
      "all_model_checkpoint_paths: \"ckpt-1\"\n"
      "all_model_checkpoint_paths: \"ckpt-2\"\n"
      "all_model_checkpoint_paths: \"sub/ckpt-3\"\n";
  Write(run_ / "checkpoint", state);
  EXPECT_TRUE(IsRunAt(run_));
  const RunListing run = List();
  EXPECT_EQ(Names(run), "ckpt-1 ckpt-2 ckpt-3") << Skipped(run);
  ASSERT_NE(Entry(run, "ckpt-3"), nullptr);
  EXPECT_EQ(Entry(run, "ckpt-3")->within, "sub");
  EXPECT_TRUE(Entry(run, "ckpt-3")->complete) << Entry(run, "ckpt-3")->why_incomplete;
  EXPECT_EQ(run.latest, "ckpt-3");
  EXPECT_EQ(run.latest_from, "checkpoint file");
  EXPECT_FALSE(OpenEntry(run, "ckpt-3").empty());
  // sub/ linking out of SOURCE: never followed, no entry, latest not guessed from it.
  fs::create_directories(root_ / "outside");
  CopyBundle(written, root_ / "outside", "ckpt-3");
  fs::remove_all(run_ / "sub");
  fs::create_directory_symlink(root_ / "outside", run_ / "sub");
  const RunListing out = List();
  EXPECT_EQ(Names(out), "ckpt-1 ckpt-2") << Skipped(out);
  EXPECT_NE(out.latest, "ckpt-3");
  EXPECT_NE(Skipped(out).find("sub/ckpt-3"), std::string::npos) << Skipped(out);
  // `..` leaves no directory to join: the name beside the state file, as before.
  fs::remove(run_ / "sub");
  Write(run_ / "checkpoint",
        "model_checkpoint_path: \"../run/ckpt-2\"\n"
        "all_model_checkpoint_paths: \"ckpt-1\"\n"
        "all_model_checkpoint_paths: \"../run/ckpt-2\"\n");
  const RunListing up = List();
  EXPECT_EQ(up.latest, "ckpt-2");
  EXPECT_EQ(Entry(up, "ckpt-2")->within, "");
}

// Keras Tuner's layout: weights saved with the prefix `checkpoint` beside the state file of
// that name; tf.train.latest_checkpoint(DIR) returns DIR/checkpoint, which opens the prefix.
TEST_F(RunListingTest, TfPrefixNamedCheckpointOpensByTheLatestCheckpointPath) {
  const fs::path written = root_ / "tf";
  const std::string cmd = "/usr/bin/python3 " CKPTFS_SOURCE_DIR
                          "/scripts/make_tf_checkpoint.py standard " +
                          written.string() + " >/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const fs::path trial = root_ / "trial_00";
  fs::create_directories(trial);
  // Without its index beside it, the state file is no checkpoint.
  Write(trial / "checkpoint",
        "model_checkpoint_path: \"checkpoint\"\nall_model_checkpoint_paths: \"checkpoint\"\n");
  EXPECT_FALSE(OpenSourceDir((trial / "checkpoint").string(), TestContext(), {}).ok());
  CopyBundle(written, trial, "checkpoint");
  auto dir = OpenSourceDir((trial / "checkpoint").string(), TestContext(), {});
  ASSERT_TRUE(dir.ok()) << dir.status().message();
  EXPECT_EQ(dir->named, "checkpoint");
  auto ckpt = OpenCheckpointIn(*dir, TestContext(), {}, dir->path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  auto whole = OpenCheckpointIn(*OpenSourceDir(trial.string(), TestContext(), {}), TestContext(),
                                {}, trial.string());
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  EXPECT_EQ(ckpt->tensors.size(), whole->tensors.size());
  EXPECT_FALSE(ckpt->tensors.empty());
}

// tf.train.latest_checkpoint raises on a state file with an empty model_checkpoint_path
// (get_checkpoint_state: "Invalid checkpoint state"): no latest, not a guess by step.
TEST_F(RunListingTest, TfEmptyModelCheckpointPathGivesNoLatest) {
  const fs::path written = root_ / "tf";
  const std::string cmd = "/usr/bin/python3 " CKPTFS_SOURCE_DIR
                          "/scripts/make_tf_checkpoint.py standard " +
                          written.string() + " >/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  CopyBundle(written, run_, "ckpt-1");
  CopyBundle(written, run_, "ckpt-2");
  Write(run_ / "checkpoint",
        "model_checkpoint_path: \"\"\n"
        "all_model_checkpoint_paths: \"ckpt-1\"\n"
        "all_model_checkpoint_paths: \"ckpt-2\"\n");
  const RunListing run = List();
  EXPECT_EQ(Names(run), "ckpt-1 ckpt-2");
  EXPECT_TRUE(Entry(run, "ckpt-2")->complete);
  EXPECT_EQ(run.latest, "");
  EXPECT_NE(Skipped(run).find("model_checkpoint_path is empty"), std::string::npos) << Skipped(run);
}

// TF writes the latest path in both fields: a path that is no prefix of the run gives one
// "skipped" line, not two.
TEST_F(RunListingTest, TfRefusedPathIsSkippedOnce) {
  const fs::path written = root_ / "tf";
  const std::string cmd = "/usr/bin/python3 " CKPTFS_SOURCE_DIR
                          "/scripts/make_tf_checkpoint.py standard " +
                          written.string() + " >/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  CopyBundle(written, run_, "ckpt-1");
  CopyBundle(written, run_, "ckpt-2");
  Write(run_ / "checkpoint",
        "model_checkpoint_path: \"bad\\001name\"\n"
        "all_model_checkpoint_paths: \"ckpt-1\"\n"
        "all_model_checkpoint_paths: \"bad\\001name\"\n");
  const RunListing run = List();
  const std::string skipped = Skipped(run);
  const std::string line = "is not a prefix in";
  const size_t first = skipped.find(line);
  ASSERT_NE(first, std::string::npos) << skipped;
  EXPECT_EQ(skipped.find(line, first + 1), std::string::npos) << skipped;
}

// A DeepSpeed save dir: rank 0 writes the tag into `latest` (no newline) before the other
// ranks finish, so the record wins only when the tag it names is complete.
TEST_F(RunListingTest, DeepSpeedLatestFileNamesTheTag) {
  Write(run_ / "global_step10" / "model.safetensors", Weights("a"));
  Write(run_ / "global_step20" / "model.safetensors", Weights("b"));
  Write(run_ / "latest", "global_step10");
  EXPECT_TRUE(IsRunAt(run_));
  RunListing run = List();
  EXPECT_EQ(Names(run), "global_step10 global_step20");  // the record is no entry
  EXPECT_EQ(run.latest, "global_step10");
  EXPECT_EQ(run.latest_from, "DeepSpeed latest file");

  // Naming a tag that is not there (yet): the next rule, with a line.
  Write(run_ / "latest", "global_step30\n");
  run = List();
  EXPECT_EQ(run.latest, "global_step20");
  EXPECT_EQ(run.latest_from, "highest step");
  EXPECT_NE(Skipped(run).find("tag \"global_step30\" is no complete entry"), std::string::npos)
      << Skipped(run);

  // (issue 22) A tag is a plain name: a path is refused with a line naming the file,
  // never reduced to its last component (which would name another directory of SOURCE).
  for (const char* hostile : {"../../etc/global_step10", "../global_step10", "..", ".",
                              "global_step10/", "./global_step10"}) {
    SCOPED_TRACE(hostile);
    Write(run_ / "latest", hostile);
    run = List();
    EXPECT_EQ(run.latest, "global_step20");
    EXPECT_EQ(run.latest_from, "highest step");
    EXPECT_NE(Skipped(run).find("latest: \"" + std::string(hostile) + "\" names no tag of"),
              std::string::npos)
        << Skipped(run);
  }
  // A save dir with nothing but such a `latest`: refused in one line naming it, and the
  // directory it would name is never looked at.
  const fs::path lone = root_ / "lone";
  Write(lone / "latest", "../global_step10");
  fs::create_directories(root_ / "global_step10");
  fs::copy(run_ / "global_step10", root_ / "global_step10", fs::copy_options::recursive);
  auto dir = OpenSourceDir(lone.string(), TestContext(), {});
  ASSERT_TRUE(dir.ok()) << dir.status().message();
  auto is_run = IsRun(*dir);
  ASSERT_FALSE(is_run.ok());
  EXPECT_EQ(is_run.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(is_run.status().message().find("latest: \"../global_step10\" names no tag"),
            std::string::npos)
      << is_run.status().message();
}

// (issue 23) `latest` is read as DeepSpeed reads it, `fd.read().strip()` (load_checkpoint,
// zero_to_fp32's get_fp32_state_dict_from_zero_checkpoint): every whitespace Python's
// str.strip() drops goes at either end, what is inside stays.
TEST_F(RunListingTest, DeepSpeedLatestFileIsStrippedAsPythonStrips) {
  Write(run_ / "global_step10" / "model.safetensors", Weights("a"));
  Write(run_ / "global_step20" / "model.safetensors", Weights("b"));
  for (const char* text : {"global_step10\n", "global_step10 \n", "global_step10\r\n",
                           " global_step10", "\tglobal_step10\t\n", "\n\nglobal_step10\n\n",
                           "global_step10\v\f\x1c\x1f", "\u00a0global_step10\u3000\u2028"}) {
    SCOPED_TRACE(::testing::PrintToString(std::string(text)));
    Write(run_ / "latest", text);
    const RunListing run = List();
    EXPECT_EQ(run.latest, "global_step10");
    EXPECT_EQ(run.latest_from, "DeepSpeed latest file");
  }
  // Not whitespace to Python (U+200B, a zero-width space) or inside the tag: no such tag, so
  // the next rule, with a line.
  for (const char* text : {"global_step10\u200b", "global_step 10"}) {
    SCOPED_TRACE(::testing::PrintToString(std::string(text)));
    Write(run_ / "latest", text);
    const RunListing run = List();
    EXPECT_EQ(run.latest, "global_step20");
    EXPECT_EQ(run.latest_from, "highest step");
  }
}

// (issue 23) HF Trainer with DeepSpeed, written as Trainer saves (tests/mount/make_run.py
// trainer-deepspeed): checkpoint-10 holds only the ZeRO tag `latest` names, checkpoint-20 the
// gathered model.safetensors too. Each is one checkpoint; Trainer's files are plain files.
TEST_F(RunListingTest, TrainerWithDeepSpeedCheckpointsAreOneCheckpointEach) {
  for (const char* args : {"10 10", "20 10 --gathered"}) {
    const std::string cmd =
        "/usr/bin/python3 " CKPTFS_SOURCE_DIR "/tests/mount/make_run.py trainer-deepspeed '" +
        run_.string() + "' '" + (root_ / "truth").string() + "' " + args + " >/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  EXPECT_FALSE(IsRunAt(run_ / "checkpoint-10"));  // its `latest` names its own tag
  auto open = [&](const char* name) {
    auto dir = OpenSourceDir((run_ / name).string(), TestContext(), {});
    EXPECT_TRUE(dir.ok()) << dir.status().message();
    return OpenCheckpointIn(*dir, TestContext(), {}, dir->path);
  };
  auto zero = open("checkpoint-10");
  ASSERT_TRUE(zero.ok()) << zero.status().message();
  EXPECT_EQ(zero->format, FormatNamed("deepspeed"));
  EXPECT_NE(FindTensor(*zero, "model.embed.weight"), nullptr);
  std::string others;
  for (const StoredFile& f : zero->others) others += f.stored_name + " ";
  EXPECT_EQ(others,
            "config.json latest merges.txt rng_state_0.pth rng_state_1.pth scheduler.pt "
            "special_tokens_map.json tokenizer.json tokenizer_config.json trainer_state.json "
            "training_args.bin vocab.json zero_to_fp32.py ");
  auto gathered = open("checkpoint-20");
  ASSERT_TRUE(gathered.ok()) << gathered.status().message();
  EXPECT_EQ(gathered->format, FormatNamed("safetensors"));

  const RunListing run = List();
  EXPECT_EQ(Names(run), "checkpoint-10 checkpoint-20");
  for (const RunEntry& e : run.entries) {
    EXPECT_TRUE(e.complete) << e.name << ": " << e.why_incomplete;
    EXPECT_EQ(e.problem, "") << e.name;
  }
  EXPECT_EQ(Entry(run, "checkpoint-10")->format, "deepspeed");
  // The tag's rank files are the checkpoint: in its size and signature.
  EXPECT_GT(Entry(run, "checkpoint-10")->bytes, 60u << 10);
  EXPECT_EQ(run.latest, "checkpoint-20");
  EXPECT_EQ(run.best, "checkpoint-10");

  // A DeepSpeed save dir of several tags stays a run, even with an HF config.json beside.
  const fs::path save_dir = root_ / "save_dir";
  fs::create_directories(save_dir);
  fs::copy(run_ / "checkpoint-10" / "global_step10", save_dir / "global_step10");
  fs::copy(run_ / "checkpoint-20" / "global_step20", save_dir / "global_step20");
  Write(save_dir / "latest", "global_step20");
  Write(save_dir / "config.json", "{}");
  EXPECT_TRUE(IsRunAt(save_dir));

  // Trainer's files alone are no weights: never "N weight files but no index json".
  fs::remove_all(run_ / "checkpoint-10" / "global_step10");
  auto none = open("checkpoint-10");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no checkpoint found"), std::string::npos)
      << none.status().message();
}

// (issue 23) best comes from the checkpoint Trainer resumes from (the latest complete one),
// whatever the files' times: a synced copy has arbitrary ones.
TEST_F(RunListingTest, TrainerBestComesFromTheLatestCheckpointNotTheNewestFile) {
  for (int step : {500, 1000, 1500}) {
    const fs::path d = run_ / ("checkpoint-" + std::to_string(step));
    Write(d / "model.safetensors", Weights("s" + std::to_string(step)));
    Write(d / "config.json", "{}");
    Write(d / "trainer_state.json", "{\"global_step\": " + std::to_string(step) +
                                        ", \"best_model_checkpoint\": \"out/checkpoint-" +
                                        std::to_string(step == 1500 ? 1000 : step) + "\"}");
  }
  const auto later = fs::file_time_type::clock::now() + std::chrono::seconds(60);
  fs::last_write_time(run_ / "checkpoint-500" / "trainer_state.json", later);
  RunListing run = List();
  EXPECT_EQ(run.latest, "checkpoint-1500");
  EXPECT_EQ(run.best, "checkpoint-1000");
  EXPECT_EQ(run.best_from, "trainer_state.json");
  // The latest being written (no trainer_state.json yet, Trainer's parts there): the one
  // before it is what Trainer resumes from.
  fs::remove(run_ / "checkpoint-1500" / "trainer_state.json");
  Write(run_ / "checkpoint-1500" / "scheduler.pt", "x");
  run = List();
  EXPECT_EQ(run.latest, "checkpoint-1000");
  EXPECT_EQ(run.best, "checkpoint-1000");
}

// (issue 23) Trainer.save_model's final model at the top of output_dir is entry `final`,
// never latest; a checkpoint at the top without config.json is still skipped with a line.
TEST_F(RunListingTest, TrainerFinalModelIsAnEntryOfItsOwn) {
  for (const char* d : {"checkpoint-1", "checkpoint-2"}) {
    Write(run_ / d / "model.safetensors", Weights(d));
    Write(run_ / d / "config.json", "{}");
  }
  Write(run_ / "model.safetensors", Weights("final"));
  RunListing run = List();
  EXPECT_EQ(Names(run), "checkpoint-1 checkpoint-2");
  EXPECT_NE(Skipped(run).find("a checkpoint at the top of the run"), std::string::npos);

  Write(run_ / "config.json", "{}");
  Write(run_ / "training_args.bin", "not weights");
  run = List();
  EXPECT_EQ(Names(run), "checkpoint-1 checkpoint-2 final");
  const RunEntry* final_model = Entry(run, "final");
  ASSERT_NE(final_model, nullptr);
  EXPECT_EQ(final_model->kind, RunEntry::Kind::kFinal);
  EXPECT_TRUE(final_model->complete) << final_model->why_incomplete;
  EXPECT_EQ(final_model->format, "safetensors");
  EXPECT_EQ(run.latest, "checkpoint-2");
  EXPECT_EQ(OpenEntry(run, "final"), std::vector<std::string>{"final.weight"});
  EXPECT_EQ(Skipped(run), "");

  // A SOURCE entry named `final` wins; the final model is then left out with a line.
  Write(run_ / "final" / "model.safetensors", Weights("x"));
  run = List();
  EXPECT_EQ(Entry(run, "final")->kind, RunEntry::Kind::kDirectory);
  EXPECT_NE(Skipped(run).find("SOURCE has an entry named final"), std::string::npos)
      << Skipped(run);
}

// (issue 23) A diffusers pipeline (DiffusionPipeline.save_pretrained: model_index.json,
// then each component in the folder of its name) is a run of kind pipeline: each folder
// with weights is a component entry (unet's shards with their index included), everything
// else is the one kFiles entry (top files, folders without weights), and there is no
// latest or best.
TEST_F(RunListingTest, DiffusersPipelineListsComponentsAndItsFiles) {
  Write(run_ / "model_index.json", R"({"_class_name": "StableDiffusionPipeline"})");
  Write(run_ / "README.md", "a pipeline");
  const std::string unet = Weights("conv");
  Write(run_ / "unet" / "diffusion_pytorch_model-00001-of-00001.safetensors", unet);
  Write(run_ / "unet" / "diffusion_pytorch_model.safetensors.index.json",
        R"({"metadata": {}, "weight_map": {"conv.weight":
            "diffusion_pytorch_model-00001-of-00001.safetensors"}})");
  Write(run_ / "unet" / "config.json", "{}");
  Write(run_ / "vae" / "diffusion_pytorch_model.safetensors", Weights("vae"));
  Write(run_ / "text_encoder" / "model.safetensors", Weights("te"));
  Write(run_ / "tokenizer" / "vocab.json", "{}");
  Write(run_ / "tokenizer" / "merges.txt", "#version: 0.2\n");
  Write(run_ / "scheduler" / "scheduler_config.json", "{}");
  Write(run_ / "tensors" / "x.txt", "named as a view");
  EXPECT_TRUE(IsRunAt(run_));
  RunListing run = List();
  EXPECT_TRUE(run.pipeline);
  EXPECT_EQ(Names(run), "text_encoder unet vae .");
  EXPECT_EQ(run.latest, "");
  EXPECT_EQ(run.best, "");
  for (const char* name : {"text_encoder", "unet", "vae"}) {
    EXPECT_EQ(Entry(run, name)->kind, RunEntry::Kind::kDirectory) << name;
    EXPECT_TRUE(Entry(run, name)->complete) << name << ": " << Entry(run, name)->why_incomplete;
  }
  EXPECT_EQ(OpenEntry(run, "unet"), std::vector<std::string>{"conv.weight"});
  const RunEntry* files = Entry(run, ".");
  ASSERT_NE(files, nullptr);
  EXPECT_EQ(files->kind, RunEntry::Kind::kFiles);
  EXPECT_TRUE(files->complete);
  // A folder named as a view is SOURCE's folder like any other: a files-only Layout has
  // no views to meet it (issue 38).
  EXPECT_EQ(files->folders, (std::vector<std::string>{"scheduler", "tensors", "tokenizer"}));

  // The files entry opens as the files alone, read on use, folders one level deep.
  auto dir = OpenSourceDir(run_.string(), TestContext(), {});
  ASSERT_TRUE(dir.ok());
  auto home = EntrySourceDir(*dir, *files);
  ASSERT_TRUE(home.ok()) << home.status().message();
  auto ckpt = ReadFilesOnly(*home, files->folders, TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_TRUE(ckpt->tensors.empty());
  std::vector<std::string> shown;
  for (const StoredFile& f : ckpt->others) shown.push_back(f.name);
  std::sort(shown.begin(), shown.end());
  EXPECT_EQ(shown, (std::vector<std::string>{"README.md", "model_index.json",
                                             "scheduler/scheduler_config.json", "tensors/x.txt",
                                             "tokenizer/merges.txt", "tokenizer/vocab.json"}));

  // A rewritten tokenizer file is a new signature: the mount never mixes its bytes.
  const std::string before = files->signature;
  Write(run_ / "tokenizer" / "vocab.json", R"({"a": 0})");
  run = List();
  EXPECT_NE(Entry(run, ".")->signature, before);

  // Without model_index.json the same folders are a run of checkpoints, as before.
  fs::remove(run_ / "model_index.json");
  run = List();
  EXPECT_FALSE(run.pipeline);
  EXPECT_EQ(Entry(run, "."), nullptr);
  EXPECT_FALSE(run.latest.empty());
}

// The real output of transformers' Trainer (../shared/fixtures/wild, NOTICE.md).
TEST_F(RunListingTest, RealTrainerOutputDirShowsItsFinalModel) {
  const fs::path out =
      fs::path(CKPTFS_SOURCE_DIR) / ".." / "shared" / "fixtures" / "wild" / "hf_trainer_output";
  if (!fs::exists(out)) GTEST_SKIP() << out << " is absent (../shared/fixtures)";
  fs::remove_all(run_);
  fs::copy(out, run_, fs::copy_options::recursive);
  const RunListing run = List();
  EXPECT_EQ(Names(run), "checkpoint-4 checkpoint-12 final");
  EXPECT_EQ(run.latest, "checkpoint-12");
  EXPECT_EQ(run.best, "checkpoint-4");
  EXPECT_EQ(Skipped(run), "");
  EXPECT_FALSE(OpenEntry(run, "final").empty());
}

const fs::path kFixtures = fs::path(CKPTFS_SOURCE_DIR) / ".." / "shared" / "fixtures" / "tf";

TEST_F(RunListingTest, TfServingVersionDirectoriesAreARun) {
  const fs::path versions = kFixtures /
                            "tensorflow-serving/tensorflow_serving/servables/tensorflow/testdata/"
                            "saved_model_half_plus_two_2_versions";
  if (!fs::exists(versions)) GTEST_SKIP() << "no " << versions << ": real TF fixtures absent";
  run_ = versions;
  EXPECT_TRUE(IsRunAt(run_));
  EXPECT_FALSE(IsRunAt(run_ / "00000123"));  // its variables/ is part of it
  const RunListing run = List();
  EXPECT_EQ(Names(run), "00000123 00000124");
  EXPECT_EQ(Entry(run, "00000124")->step, 124u);
  EXPECT_EQ(Entry(run, "00000124")->format, "tensorflow");
  EXPECT_TRUE(Entry(run, "00000124")->complete) << Entry(run, "00000124")->why_incomplete;
  EXPECT_EQ(run.latest, "00000124");
  EXPECT_FALSE(OpenEntry(run, "00000124").empty());
}

TEST_F(RunListingTest, RecordsAndLinksLeavingSourceAreSkippedNeverFollowed) {
  // Outside SOURCE: a checkpoint that must never be listed or opened.
  Write(root_ / "secret" / "model.safetensors", Weights("secret"));
  Write(root_ / "secret.pt", "PK not really");
  fs::create_directory_symlink(root_ / "secret", run_ / "checkpoint-9000");
  fs::create_symlink(root_ / "secret.pt", run_ / "model_09000.pt");
  for (const char* d : {"checkpoint-1", "checkpoint-2"}) {
    Write(run_ / d / "model.safetensors", Weights(d));
  }
  Write(run_ / "bad\nname-3" / "model.safetensors", Weights("x"));
  // Link loops (a `latest` pointing at itself) and dangling links.
  fs::create_symlink("latest", run_ / "latest");
  fs::create_symlink("checkpoint-404", run_ / "best");
  // A link inside SOURCE is served like the directory it names.
  fs::create_directory_symlink("checkpoint-2", run_ / "checkpoint-3");
  // Records naming paths outside SOURCE.
  Write(run_ / "trainer_state.json", R"({"best_model_checkpoint": "../../etc"})");
  Write(run_ / "checkpoint",
        "model_checkpoint_path: \"../secret\"\n"
        "all_model_checkpoint_paths: \"/etc/passwd\"\n");
  const RunListing run = List();
  EXPECT_EQ(Names(run), "checkpoint-1 checkpoint-2 checkpoint-3");
  const std::string skipped = Skipped(run);
  EXPECT_NE(skipped.find("checkpoint-9000: symbolic link leads outside"), std::string::npos)
      << skipped;
  EXPECT_NE(skipped.find("model_09000.pt: symbolic link leads outside"), std::string::npos)
      << skipped;
  EXPECT_NE(skipped.find("bad\\x0aname-3"), std::string::npos) << skipped;
  EXPECT_NE(skipped.find("latest: too many levels of symbolic links"), std::string::npos)
      << skipped;
  EXPECT_NE(skipped.find("best: no such file"), std::string::npos) << skipped;
  EXPECT_NE(skipped.find("best \"../../etc\" is no entry"), std::string::npos) << skipped;
  EXPECT_NE(skipped.find("latest \"../secret\" is no complete entry"), std::string::npos)
      << skipped;
  EXPECT_EQ(run.best, "");
  EXPECT_EQ(run.latest, "checkpoint-3");
  EXPECT_EQ(run.latest_from, "highest step");
  // An entry named by a record by its last component only.
  Write(run_ / "trainer_state.json", R"({"best_model_checkpoint": "../../checkpoint-1"})");
  EXPECT_EQ(List().best, "checkpoint-1");
  // Entries are plain names: EntrySourceDir refuses anything else.
  auto dir = OpenSourceDir(run_.string(), TestContext(), {});
  ASSERT_TRUE(dir.ok());
  RunEntry tricky;
  tricky.name = "../secret";
  EXPECT_FALSE(EntrySourceDir(*dir, tricky).ok());
}

// One entry whose files link outside SOURCE is that entry's problem, never the run's: a
// weight file out is shown complete (the mount's ERROR says why), a non-weight file out is
// signed but left to the mount (which skips it with a line), an index out likewise.
TEST_F(RunListingTest, EntryWithFilesLinkingOutsideIsThatEntrysProblemOnly) {
  Write(root_ / "secret" / "config.json", "{\"secret\": 1}");
  Write(root_ / "secret" / "model.safetensors", Weights("secret"));
  Write(root_ / "secret" / "model.safetensors.index.json",
        testing::IndexJson({{"a.weight", "model-00001-of-00001.safetensors"}}));
  for (const char* d : {"checkpoint-1", "checkpoint-2", "checkpoint-3", "checkpoint-4"}) {
    Write(run_ / d / "config.json", "{}");
  }
  Write(run_ / "checkpoint-1" / "model.safetensors", Weights("one"));
  // checkpoint-2: its config.json links out; its weights are its own.
  Write(run_ / "checkpoint-2" / "model.safetensors", Weights("two"));
  fs::remove(run_ / "checkpoint-2" / "config.json");
  fs::create_symlink(root_ / "secret" / "config.json", run_ / "checkpoint-2" / "config.json");
  // checkpoint-3: its weights link out.
  fs::create_symlink(root_ / "secret" / "model.safetensors",
                     run_ / "checkpoint-3" / "model.safetensors");
  // checkpoint-4: its index links out, its shard is its own.
  Write(run_ / "checkpoint-4" / "model-00001-of-00001.safetensors", Weights("a"));
  fs::create_symlink(root_ / "secret" / "model.safetensors.index.json",
                     run_ / "checkpoint-4" / "model.safetensors.index.json");
  // A torch file entry linking out is left out of the run, as before.
  Write(root_ / "secret.pt", "PK not really");
  fs::create_symlink(root_ / "secret.pt", run_ / "model_00005.pt");

  EXPECT_TRUE(IsRunAt(run_));
  const RunListing run = List();
  EXPECT_EQ(Names(run), "checkpoint-1 checkpoint-2 checkpoint-3 checkpoint-4");
  for (const RunEntry& e : run.entries) {
    EXPECT_TRUE(e.complete) << e.name << ": " << e.why_incomplete;
  }
  EXPECT_EQ(run.latest, "checkpoint-4");  // the mount moves it off an entry that fails
  EXPECT_NE(Skipped(run).find("model_00005.pt: symbolic link leads outside"), std::string::npos)
      << Skipped(run);
  // The entries open as the mount opens them: checkpoint-2 without its config.json,
  // checkpoint-3 and -4 refused naming the link, nothing read from outside.
  EXPECT_EQ(OpenEntry(run, "checkpoint-2"), std::vector<std::string>{"two.weight"});
  auto dir = OpenSourceDir(run_.string(), TestContext(), {});
  ASSERT_TRUE(dir.ok());
  for (const char* name : {"checkpoint-3", "checkpoint-4"}) {
    auto sub = EntrySourceDir(*dir, *Entry(run, name));
    ASSERT_TRUE(sub.ok()) << sub.status().message();
    auto ckpt = OpenCheckpointIn(*sub, TestContext(), {}, sub->path);
    ASSERT_FALSE(ckpt.ok()) << name;
    EXPECT_NE(ckpt.status().message().find("leads outside"), std::string::npos)
        << ckpt.status().message();
  }
  // A link that appears later changes the entry's signature: a new checkpoint.
  const std::string before = Entry(run, "checkpoint-1")->signature;
  fs::create_symlink(root_ / "secret" / "config.json", run_ / "checkpoint-1" / "extra.json");
  EXPECT_NE(Entry(List(), "checkpoint-1")->signature, before);
}

// A listing that runs out of descriptors fails as a whole (the mount keeps what it shows
// and lists again), never drops or hides entries whose files it could not open.
TEST_F(RunListingTest, ListingOutOfDescriptorsFailsNeverDropsEntries) {
  for (const char* d : {"checkpoint-1", "checkpoint-2", "checkpoint-3"}) {
    Write(run_ / d / "model.safetensors", Weights(d));
    Write(run_ / d / "config.json", "{}");
  }
  auto dir = OpenSourceDir(run_.string(), TestContext(), {});
  ASSERT_TRUE(dir.ok());
  for (int free = 0; free <= 6; ++free) {
    Result<RunListing> run = Status::Ok();
    {
      testing::DescriptorsLeft left(free);
      run = ListRun(*dir);
    }
    if (!run.ok()) {
      EXPECT_TRUE(IsTransient(run.status())) << free << " left: " << run.status().message();
      continue;
    }
    EXPECT_EQ(Names(*run), "checkpoint-1 checkpoint-2 checkpoint-3") << free << " left";
    for (const RunEntry& e : run->entries) {
      EXPECT_TRUE(e.complete) << free << " left: " << e.name << ": " << e.why_incomplete;
    }
  }
}

TEST_F(RunListingTest, EntriesNamedLatestAndBestAreEntries) {
  Write(run_ / "latest" / "model.safetensors", Weights("l"));
  Write(run_ / "best" / "model.safetensors", Weights("b"));
  const RunListing run = List();
  EXPECT_EQ(Names(run), "best latest");
  EXPECT_FALSE(run.latest.empty());  // newest, no step in either name
  EXPECT_EQ(run.latest_from, "newest");
}

TEST_F(RunListingTest, TwoHundredEntriesListQuickly) {
  for (int i = 1; i <= 200; ++i) {
    const fs::path d = run_ / ("checkpoint-" + std::to_string(i * 100));
    Write(d / "model.safetensors", Weights("w"));
    Write(d / "config.json", "{}");
    Write(d / "trainer_state.json", R"({"best_model_checkpoint": "out/checkpoint-5000"})");
  }
  const auto start = std::chrono::steady_clock::now();
  auto dir = OpenSourceDir(run_.string(), TestContext(), {});
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(*IsRun(*dir));
  auto run = ListRun(*dir);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->entries.size(), 200u);
  EXPECT_EQ(run->latest, "checkpoint-20000");
  EXPECT_EQ(run->best, "checkpoint-5000");
  std::cout << "200-entry local run: IsRun + ListRun in " << seconds * 1000 << " ms\n";
}

TEST(RunStepTest, StepsComeFromTheName) {
  EXPECT_EQ(StepInName("checkpoint-1500"), 1500u);
  EXPECT_EQ(StepInName("epoch=3-step=1000.ckpt"), 1000u);
  EXPECT_EQ(StepInName("global_step1000"), 1000u);
  EXPECT_EQ(StepInName("ckpt-3"), 3u);
  EXPECT_EQ(StepInName("model_00010.pt"), 10u);
  EXPECT_EQ(StepInName("model_00010.pt.zst"), 10u);
  EXPECT_EQ(StepInName("00000123"), 123u);
  EXPECT_EQ(StepInName("step_0"), 0u);
  EXPECT_EQ(StepInName("last.ckpt"), std::nullopt);
  EXPECT_EQ(StepInName("best"), std::nullopt);
  EXPECT_EQ(StepInName("ckpt-99999999999999999999999"), std::nullopt);
}

// A number is a step only where the name says so: `epoch=N` stands in when there is no
// step; a Lightning name of metrics only, and Lightning's `-vN` version counter, carry none.
TEST(RunStepTest, MetricsAndVersionsAreNoSteps) {
  EXPECT_EQ(StepInName("epoch=2-val_loss=0.25.ckpt"), 2u);
  EXPECT_EQ(StepInName("epoch=2-step=40-val_loss=0.25.ckpt"), 40u);
  EXPECT_EQ(StepInName("epoch-val_loss=0.25.ckpt"), std::nullopt);
  EXPECT_EQ(StepInName("val_loss=0.50.ckpt"), std::nullopt);
  EXPECT_EQ(StepInName("last-v1.ckpt"), std::nullopt);
  EXPECT_EQ(StepInName("last-v12.ckpt.zst"), std::nullopt);
  EXPECT_EQ(StepInName("epoch=0-step=100-v1.ckpt"), 100u);
  // Names that say which number is the step, beside others.
  EXPECT_EQ(StepInName("bert2-checkpoint-100"), 100u);
  EXPECT_EQ(StepInName("model.ckpt-1000"), 1000u);
  EXPECT_EQ(StepInName("epoch_3_loss_0.25.pt"), 3u);
  // A metric's or a model's digits beside no named step are no step.
  EXPECT_EQ(StepInName("model_loss0.123.pt"), std::nullopt);
  EXPECT_EQ(StepInName("weights.05-0.43.pt"), std::nullopt);
  EXPECT_EQ(StepInName("llama2-7b.bin"), std::nullopt);
}

// Files whose names hold a metric's digits but no step are ordered by time: the newest is
// latest even where its metric's digits are the smaller number.
TEST_F(RunListingTest, MetricDigitsWithoutKeyValueAreOrderedByTime) {
  Python(R"PY(
import torch
for name, v in (('model_loss0.900.pt', 1.0), ('model_loss0.125.pt', 2.0)):
    torch.save({'w': torch.full((2,), v)}, name)
)PY");
  const auto now = fs::file_time_type::clock::now();
  fs::last_write_time(run_ / "model_loss0.900.pt", now - std::chrono::seconds(60));
  fs::last_write_time(run_ / "model_loss0.125.pt", now);
  const RunListing run = List();
  EXPECT_EQ(Entry(run, "model_loss0.900.pt")->step, std::nullopt);
  EXPECT_EQ(run.latest, "model_loss0.125.pt");
  EXPECT_EQ(run.latest_from, "newest");
}

// Remote listings of subdirectories: S3 CommonPrefixes, nginx's JSON autoindex.
TEST(RemoteListingTest, S3CommonPrefixesAreSubdirectories) {
  auto page = ParseListObjectsV2(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult>"
      "<IsTruncated>false</IsTruncated>"
      "<Contents><Key>run/trainer_state.json</Key><Size>10</Size></Contents>"
      "<CommonPrefixes><Prefix>run/checkpoint-500/</Prefix></CommonPrefixes>"
      "<CommonPrefixes><Prefix>run/..%2F/</Prefix></CommonPrefixes>"
      "<CommonPrefixes><Prefix>run/checkpoint-1000/</Prefix></CommonPrefixes>"
      "</ListBucketResult>",
      "s3://b/run/");
  ASSERT_TRUE(page.ok()) << page.status().message();
  EXPECT_EQ(page->objects.size(), 1u);
  EXPECT_EQ(S3SubdirectoryNames("run/", page->prefixes),
            (std::vector<std::string>{"checkpoint-1000", "checkpoint-500"}));
  EXPECT_FALSE(ParseListObjectsV2("<ListBucketResult><IsTruncated>false</IsTruncated>"
                                  "<CommonPrefixes></CommonPrefixes></ListBucketResult>",
                                  "s3://b/run/")
                   .ok());
}

TEST(RemoteListingTest, AutoindexJsonGivesFilesDirsSizesAndTimes) {
  auto listing = ParseAutoindexJson(R"([
    {"name":"checkpoint-500", "type":"directory", "mtime":"Mon, 23 Nov 2026 19:00:00 GMT"},
    {"name":"model_00010.pt", "type":"file", "mtime":"Thu, 01 Jan 1970 00:00:10 GMT", "size":123},
    {"name":"..", "type":"directory"},
    {"name":"a\nb", "type":"file", "size":1},
    {"name":"sock", "type":"other"}
  ])");
  ASSERT_TRUE(listing.has_value());
  EXPECT_EQ(listing->dirs, std::vector<std::string>{"checkpoint-500"});
  EXPECT_EQ(listing->files, std::vector<std::string>{"model_00010.pt"});
  EXPECT_EQ(listing->info["model_00010.pt"].size, 123u);
  EXPECT_EQ(listing->info["model_00010.pt"].mtime.tv_sec, 10);
  EXPECT_EQ(listing->info["checkpoint-500"].mtime.tv_sec, 1795460400);
  EXPECT_FALSE(ParseAutoindexJson("<html>Index of /</html>").has_value());
  EXPECT_FALSE(ParseAutoindexJson(R"({"name":"x"})").has_value());
  EXPECT_FALSE(ParseAutoindexJson(R"([{"name":1,"type":"file"}])").has_value());
}

// A lying server lists a name twice, or as a file and a directory: the first entry stands,
// so the mount never shows a name twice nor as both (found by the http_list fuzz target).
TEST(RemoteListingTest, AutoindexJsonNameListedTwiceKeepsTheFirst) {
  auto listing = ParseAutoindexJson(R"([
    {"name":"x", "type":"file", "size":1},
    {"name":"x", "type":"directory"},
    {"name":"x", "type":"file", "size":2},
    {"name":"d", "type":"directory"},
    {"name":"d", "type":"directory"}
  ])");
  ASSERT_TRUE(listing.has_value());
  EXPECT_EQ(listing->files, std::vector<std::string>{"x"});
  EXPECT_EQ(listing->dirs, std::vector<std::string>{"d"});
  EXPECT_EQ(listing->info["x"].size, 1u);
}

}  // namespace
}  // namespace ckptfs
