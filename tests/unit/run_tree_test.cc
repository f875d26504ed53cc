// RunTree (core/run/run_tree.h) over in-memory runs: what the root shows, inodes per slot,
// ERROR directories, the stability rule, idle close and reopen, pinned roots.
#include "core/run/run_tree.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "core/format/formats.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

using namespace std::chrono_literals;
using testing::MakeSafetensors;
using testing::MemoryDir;

// A run held in memory: its listing and each entry's files, changed by the test.
struct FakeRun {
  std::mutex mu;
  RunListing listing;
  std::map<std::string, std::map<std::string, std::string>> files;
  std::map<std::string, Status> failures;  // entries whose next opens fail so
  std::atomic<int> opens{0};

  void Put(const std::string& name, const std::string& signature, bool complete = true,
           std::string tensor = "w", RunEntry::Kind kind = RunEntry::Kind::kDirectory) {
    std::lock_guard<std::mutex> lock(mu);
    std::erase_if(listing.entries, [&](const RunEntry& e) { return e.name == name; });
    RunEntry e;
    e.name = name;
    e.kind = kind;
    e.complete = complete;
    e.signature = signature;
    listing.entries.push_back(e);
    std::sort(listing.entries.begin(), listing.entries.end(),
              [](const RunEntry& a, const RunEntry& b) { return a.name < b.name; });
    // A file entry's one file is itself; a directory entry holds model.safetensors.
    const std::string file = kind == RunEntry::Kind::kFile ? name : "model.safetensors";
    files[name] = {{file, MakeSafetensors({{tensor, Dtype::kF32, {4}}})}};
  }
  void Remove(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu);
    std::erase_if(listing.entries, [&](const RunEntry& e) { return e.name == name; });
    files.erase(name);
  }
  void Corrupt(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu);
    files[name] = {{"model.safetensors", std::string("\x10\0\0\0\0\0\0\0{bad json}", 18)}};
  }

  RunSource Source() {
    RunSource source;
    source.path = "run";
    source.list = [this]() -> Result<RunListing> {
      std::lock_guard<std::mutex> lock(mu);
      return listing;
    };
    source.open = [this](const RunEntry& entry, ReadContext& context) -> Result<Checkpoint> {
      ++opens;
      std::map<std::string, std::string> entry_files;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (auto failure = failures.find(entry.name); failure != failures.end()) {
          return failure->second;
        }
        auto it = files.find(entry.name);
        if (it == files.end()) return Status::NotFound(entry.name + ": gone");
        entry_files = it->second;
      }
      return OpenCheckpointIn(MemoryDir(entry_files), context, {}, "run/" + entry.name);
    };
    source.open_files = [this](const RunEntry& entry, ReadContext& context) -> Result<Checkpoint> {
      std::map<std::string, std::string> entry_files;
      {
        std::lock_guard<std::mutex> lock(mu);
        auto it = files.find(entry.name);
        if (it == files.end()) return Status::NotFound(entry.name + ": gone");
        entry_files = it->second;
      }
      return ReadFilesOnly(MemoryDir(entry_files), {}, context);
    };
    return source;
  }
};

class RunTreeTest : public ::testing::Test {
 protected:
  std::unique_ptr<RunTree> Open(RunTreeOptions options = {}) {
    options.now = [this] { return now_; };
    options.idle_close = 300s;
    auto tree = RunTree::Open(run_.Source(), context_, options);
    EXPECT_TRUE(tree.ok()) << tree.status().message();
    return tree.ok() ? std::move(tree.value()) : nullptr;
  }
  std::vector<std::string> RootNames(RunTree& tree) {
    std::vector<std::string> names;
    auto root = tree.Resolve(RunTree::kRootIno, true);
    for (auto& [name, node] : tree.List(*root)) names.push_back(name);
    return names;
  }
  std::vector<std::string> ViewNames(RunTree& tree) {
    std::vector<std::string> names;
    auto views = tree.Resolve(RunTree::kViewsIno, true);
    if (!views.ok()) return names;
    for (auto& [name, node] : tree.List(*views)) names.push_back(name);
    return names;
  }
  // `name` in views/ (an entry's views, or latest/best there) when the run has views/ and
  // it is there, else at the root.
  RunNode Child(RunTree& tree, const std::string& name) {
    auto views = tree.Resolve(RunTree::kViewsIno, true);
    if (views.ok()) {
      if (auto node = tree.Lookup(*views, name); node.ok()) return *node;
    }
    return RootChild(tree, name);
  }
  RunNode RootChild(RunTree& tree, const std::string& name) {
    auto root = tree.Resolve(RunTree::kRootIno, true);
    auto node = tree.Lookup(*root, name);
    EXPECT_TRUE(node.ok()) << name;
    return node.ok() ? *node : RunNode{};
  }
  // The global inode of `path` inside entry `name`, opening it.
  uint64_t InnerIno(RunTree& tree, const std::string& name, const std::string& file) {
    auto dir = tree.Resolve(Child(tree, name).ino, true);
    EXPECT_TRUE(dir.ok() && dir->kind == RunNode::Kind::kVolume);
    if (!dir.ok() || !dir->volume) return 0;
    const uint64_t local = dir->volume->layout().Lookup(Layout::kRoot, file);
    EXPECT_NE(local, 0u) << file;
    return dir->Global(local);
  }
  void Relist() { ASSERT_TRUE(tree_->Relist().ok()); }

  FakeRun run_;
  std::shared_ptr<ReadContext> context_ = std::make_shared<ReadContext>(ReadOptions{});
  RunClock::time_point now_ = RunClock::time_point{} + 1000s;
  std::unique_ptr<RunTree> tree_;
};

// (issue 23) A pipeline: the kFiles entry's stored files are the root's own children beside
// the components, with the root as their parent; never its views (an empty
// model.safetensors, tensors/), never a stored file a view hides, no latest or best.
TEST_F(RunTreeTest, PipelineRootShowsTopFilesBesideComponents) {
  run_.Put("unet", "s1");
  run_.Put("vae", "s2");
  RunEntry files;
  files.name = std::string(kPipelineFilesEntry);
  files.kind = RunEntry::Kind::kFiles;
  files.complete = true;
  files.signature = "f1";
  run_.listing.entries.push_back(files);
  run_.listing.pipeline = true;
  const std::map<std::string, std::string> top = {
      {"model_index.json", R"({"unet": ["diffusers", "UNet2DConditionModel"]})"},
      {"README.md", "a pipeline"},
      {"model.safetensors", "a top file named as a view"}};
  RunSource source = run_.Source();
  auto open = source.open;
  source.open = [open, top](const RunEntry& entry, ReadContext& context) -> Result<Checkpoint> {
    if (entry.kind != RunEntry::Kind::kFiles) return open(entry, context);
    return ReadFilesOnly(MemoryDir(top), entry.folders, context);
  };
  auto tree = RunTree::Open(std::move(source), context_, {});
  ASSERT_TRUE(tree.ok()) << tree.status().message();
  RunTree& t = **tree;
  EXPECT_TRUE(t.Pipeline());
  EXPECT_EQ(t.EntryNames(), (std::vector<std::string>{"unet", "vae"}));
  EXPECT_EQ(RootNames(t), (std::vector<std::string>{"unet", "vae", "README.md", "model.safetensors",
                                                    "model_index.json", ".ckptfs"}));
  auto root = t.Resolve(RunTree::kRootIno, true);
  ASSERT_TRUE(root.ok());
  auto index = t.Lookup(*root, "model_index.json");
  ASSERT_TRUE(index.ok());
  ASSERT_EQ(index->kind, RunNode::Kind::kVolume);
  const Node* node = index->volume->layout().Find(index->Local(index->ino));
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->size, top.at("model_index.json").size());
  EXPECT_EQ(index->Global(node->parent), RunTree::kRootIno);  // its ".." is the root
  auto again = t.Resolve(index->ino, false);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->volume, index->volume);
  for (const char* hidden : {"tensors", "shards", ".", "latest", "best", "views"}) {
    EXPECT_FALSE(t.Lookup(*root, hidden).ok()) << hidden;
  }
}

TEST_F(RunTreeTest, RootShowsCompleteEntriesAndSymlinks) {
  run_.Put("checkpoint-500", "s1");
  run_.Put("checkpoint-1000", "s2");
  run_.Put("checkpoint-1500", "s3", /*complete=*/false);
  run_.listing.latest = "checkpoint-1000";
  run_.listing.best = "checkpoint-500";
  tree_ = Open();
  EXPECT_EQ(RootNames(*tree_), (std::vector<std::string>{"checkpoint-1000", "checkpoint-500",
                                                         "latest", "best", "views", ".ckptfs"}));
  EXPECT_EQ(ViewNames(*tree_),
            (std::vector<std::string>{"checkpoint-1000", "checkpoint-500", "latest", "best"}));
  RunNode latest = Child(*tree_, "latest");
  EXPECT_EQ(latest.kind, RunNode::Kind::kSymlink);
  EXPECT_EQ(latest.text, "checkpoint-1000");
  EXPECT_EQ(Child(*tree_, "best").text, "checkpoint-500");
  EXPECT_TRUE(Child(*tree_, "latest").short_lived);
  // Headers are read on the first use of an entry, and for the two that latest and best
  // name (checked valid): never every entry's.
  EXPECT_EQ(run_.opens, 2);
  EXPECT_FALSE(tree_->Lookup(*tree_->Resolve(1, true), "checkpoint-1500").ok());
}

// latest and best name valid checkpoints only: a complete one that fails to open (its ERROR
// directory is still shown) hands latest to the highest valid step, and best to nobody.
TEST_F(RunTreeTest, LatestAndBestSkipACheckpointThatFailsToOpen) {
  run_.Put("checkpoint-1", "s1");
  run_.Put("checkpoint-2", "s2");
  run_.Put("checkpoint-3", "s3");
  run_.Corrupt("checkpoint-3");
  for (RunEntry& e : run_.listing.entries) e.step = std::stoull(e.name.substr(11));
  run_.listing.latest = "checkpoint-3";
  run_.listing.best = "checkpoint-3";
  tree_ = Open();
  EXPECT_EQ(tree_->Latest(), "checkpoint-2");
  EXPECT_EQ(tree_->Best(), "");
  EXPECT_EQ(RootNames(*tree_),
            (std::vector<std::string>{"checkpoint-1", "checkpoint-2", "checkpoint-3", "latest",
                                      "views", ".ckptfs"}));
  Relist();  // the listing still names it: latest stays where it is
  EXPECT_EQ(tree_->Latest(), "checkpoint-2");
  // Rewritten whole: a new slot, opened and valid once stable, so latest again.
  run_.Put("checkpoint-3", "s3-fixed");
  run_.listing.entries.back().step = 3;
  Relist();
  now_ += 2s;
  Relist();
  EXPECT_EQ(tree_->Latest(), "checkpoint-3");
}

TEST_F(RunTreeTest, EntryNamedLatestWinsOverTheSymlink) {
  run_.Put("latest", "s1");
  run_.Put("x", "s2");
  run_.listing.latest = "x";
  tree_ = Open();
  EXPECT_EQ(RootNames(*tree_), (std::vector<std::string>{"latest", "x", "views", ".ckptfs"}));
  EXPECT_NE(Child(*tree_, "latest").kind, RunNode::Kind::kSymlink);
}

// (issue 38) The root is SOURCE as it is: a file entry is its one file (SOURCE's bytes, a
// file torch.load opens), a directory entry its own files (no views among them), `latest`
// names the entry's own path; each entry's views are in views/, with their own latest.
TEST_F(RunTreeTest, RootShowsEachEntryAsSourceHasItAndItsViewsInViews) {
  run_.Put("checkpoint-1", "s1");
  run_.Put("w.safetensors", "s2", true, "w", RunEntry::Kind::kFile);
  run_.listing.latest = "w.safetensors";
  tree_ = Open();
  EXPECT_EQ(RootNames(*tree_), (std::vector<std::string>{"checkpoint-1", "w.safetensors", "latest",
                                                         "views", ".ckptfs"}));
  EXPECT_EQ(ViewNames(*tree_),
            (std::vector<std::string>{"checkpoint-1", "w.safetensors", "latest"}));
  EXPECT_EQ(RootChild(*tree_, "latest").text, "w.safetensors");
  EXPECT_EQ(Child(*tree_, "latest").text, "w.safetensors");
  // The file entry at the root: SOURCE's one file, under an inode of its own slot.
  const RunNode file = RootChild(*tree_, "w.safetensors");
  ASSERT_EQ(file.kind, RunNode::Kind::kVolume);
  const Node* node = file.volume->layout().Find(file.Local(file.ino));
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->kind, NodeKind::kFile);
  EXPECT_EQ(node->size, run_.files["w.safetensors"]["w.safetensors"].size());
  auto again = tree_->Resolve(file.ino, false);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->Local(again->ino), file.Local(file.ino));
  // Its views are a directory in views/.
  EXPECT_NE(InnerIno(*tree_, "w.safetensors", "tensors"), 0u);
  // The directory entry at the root: its files, no views.
  auto dir = tree_->Resolve(RootChild(*tree_, "checkpoint-1").ino, true);
  ASSERT_TRUE(dir.ok());
  ASSERT_EQ(dir->kind, RunNode::Kind::kVolume);
  EXPECT_NE(dir->volume->layout().Lookup(Layout::kRoot, "model.safetensors"), 0u);
  EXPECT_EQ(dir->volume->layout().Lookup(Layout::kRoot, "tensors"), 0u);
  EXPECT_NE(dir->volume, Child(*tree_, "checkpoint-1").volume);
}

TEST_F(RunTreeTest, InodesAreSlotShiftedAndSurviveIdleClose) {
  run_.Put("a", "s1");
  run_.Put("b", "s2");
  tree_ = Open();
  const uint64_t a_file = InnerIno(*tree_, "a", "model.safetensors");
  const uint64_t b_file = InnerIno(*tree_, "b", "model.safetensors");
  EXPECT_NE(a_file >> 32, 0u);
  EXPECT_NE(a_file >> 32, b_file >> 32);
  EXPECT_EQ(tree_->OpenVolumes(), 2u);
  auto held = tree_->Resolve(a_file, false);  // an open file holds its Volume
  ASSERT_TRUE(held.ok());
  now_ += 301s;
  EXPECT_EQ(tree_->CloseIdle(), 1u);  // b; a is held
  EXPECT_EQ(tree_->OpenVolumes(), 1u);
  held = Status::NotFound("released");
  EXPECT_EQ(tree_->CloseIdle(), 1u);
  EXPECT_EQ(tree_->OpenVolumes(), 0u);
  // Reopened on use, with the same inodes.
  const int opens = run_.opens;
  auto again = tree_->Resolve(b_file, false);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(run_.opens, opens + 1);
  const Node* node = again->volume->layout().Find(again->Local(b_file));
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->name(), "model.safetensors");
  EXPECT_EQ(InnerIno(*tree_, "b", "model.safetensors"), b_file);
}

TEST_F(RunTreeTest, ClosingOneCheckpointKeepsTheSharedContextRunning) {
  run_.Put("a", "s1");
  run_.Put("b", "s2");
  tree_ = Open();
  context_->StartWorkers();
  InnerIno(*tree_, "a", "model.safetensors");
  InnerIno(*tree_, "b", "model.safetensors");
  now_ += 301s;
  EXPECT_EQ(tree_->CloseIdle(), 2u);
  std::promise<void> ran;
  ASSERT_TRUE(context_->TrySubmit(ReadContext::Workers::kDecode, [&ran] { ran.set_value(); }));
  EXPECT_EQ(ran.get_future().wait_for(10s), std::future_status::ready);
}

TEST_F(RunTreeTest, ARewrittenOrDeletedCheckpointNeverReusesItsInodes) {
  run_.Put("a", "s1", true, "old");
  tree_ = Open();
  const uint64_t old_file = InnerIno(*tree_, "a", "model.safetensors");
  auto open_file = tree_->Resolve(old_file, false);  // a reader keeps it open
  ASSERT_TRUE(open_file.ok());
  run_.Put("a", "s2", true, "new");
  Relist();  // changed: hidden at once, shown again once stable
  EXPECT_FALSE(tree_->Resolve(old_file, false).ok());
  EXPECT_EQ(RootNames(*tree_), (std::vector<std::string>{"views", ".ckptfs"}));
  EXPECT_EQ(ViewNames(*tree_), std::vector<std::string>{});
  now_ += 2s;
  Relist();
  const uint64_t new_file = InnerIno(*tree_, "a", "model.safetensors");
  EXPECT_GT(new_file >> 32, old_file >> 32);
  EXPECT_FALSE(tree_->Resolve(old_file, false).ok());
  // The open file still reads the old checkpoint's bytes.
  EXPECT_EQ(open_file->volume->checkpoint().tensors[0].name, "old");
  // Deleted, then back with the very same signature: a new slot all the same.
  run_.Remove("a");
  Relist();
  EXPECT_FALSE(tree_->Resolve(new_file, false).ok());
  run_.Put("a", "s2", true, "new");
  Relist();
  now_ += 2s;
  Relist();
  EXPECT_GT(InnerIno(*tree_, "a", "model.safetensors") >> 32, new_file >> 32);
}

TEST_F(RunTreeTest, ANewEntryIsShownOnlyOnceTwoListingsAgree) {
  run_.Put("a", "s1");
  run_.listing.latest = "a";
  tree_ = Open();
  run_.Put("b", "partial-1");
  run_.listing.latest = "b";
  Relist();
  EXPECT_EQ(tree_->EntryNames(), (std::vector<std::string>{"a"}));
  EXPECT_EQ(tree_->Latest(), "a");  // latest names shown entries only
  now_ += 2s;
  run_.Put("b", "partial-2");  // still growing: the clock starts again
  Relist();
  EXPECT_EQ(tree_->EntryNames(), (std::vector<std::string>{"a"}));
  now_ += 500ms;
  Relist();
  EXPECT_EQ(tree_->EntryNames(), (std::vector<std::string>{"a"}));
  now_ += 600ms;
  Relist();
  EXPECT_EQ(tree_->EntryNames(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(tree_->Latest(), "b");
  EXPECT_EQ(Child(*tree_, "latest").text, "b");
}

TEST_F(RunTreeTest, AFailedCheckpointIsAnErrorDirectoryRetriedWhenItChanges) {
  run_.Put("good", "s1");
  run_.Put("bad", "s1");
  run_.Corrupt("bad");
  tree_ = Open();
  auto dir = tree_->Resolve(Child(*tree_, "bad").ino, true);
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->kind, RunNode::Kind::kDirectory);
  auto kids = tree_->List(*dir);
  ASSERT_EQ(kids.size(), 1u);
  EXPECT_EQ(kids[0].first, "ERROR");
  const std::string& text = kids[0].second.text;
  EXPECT_EQ(text.rfind("bad", 0), 0u) << text;
  EXPECT_NE(text.find("header length"), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_EQ(text.back(), '\n');
  EXPECT_TRUE(tree_->Resolve(kids[0].second.ino, false).ok());
  // The good one is unaffected; the bad one, fixed (new signature), opens.
  EXPECT_NE(InnerIno(*tree_, "good", "model.safetensors"), 0u);
  run_.Put("bad", "s2");
  Relist();
  now_ += 2s;
  Relist();
  EXPECT_NE(InnerIno(*tree_, "bad", "model.safetensors"), 0u);
  EXPECT_FALSE(tree_->Resolve(kids[0].second.ino, false).ok());
}

// The text of entry `name`'s ERROR file, or "" when it opens.
std::string ErrorText(RunTree& tree, const RunNode& entry) {
  auto dir = tree.Resolve(entry.ino, true);
  if (!dir.ok() || dir->kind == RunNode::Kind::kVolume) return "";
  auto kids = tree.List(*dir);
  return kids.size() == 1 && kids[0].first == "ERROR" ? kids[0].second.text : "?";
}

TEST_F(RunTreeTest, ATransientFailureIsTriedAgainAfterABackoffARefusalIsNot) {
  run_.Put("flaky", "s1");
  run_.Put("outside", "s1");
  run_.failures["flaky"] =
      Status::IoError("flaky/model.safetensors: cannot open: Too many open files", EMFILE);
  run_.failures["outside"] = Status::InvalidArgument(
      "config.json: symbolic link leads outside run/outside (to /etc/passwd), not served");
  tree_ = Open();
  const RunNode flaky = Child(*tree_, "flaky");
  const RunNode outside = Child(*tree_, "outside");
  std::string text = ErrorText(*tree_, flaky);
  EXPECT_NE(text.find("Too many open files"), std::string::npos) << text;
  EXPECT_NE(text.find("tried again"), std::string::npos) << text;
  const uint64_t error_ino = tree_->List(*tree_->Resolve(flaky.ino, true))[0].second.ino;
  EXPECT_NE(ErrorText(*tree_, outside).find("leads outside"), std::string::npos);
  const int opens = run_.opens;

  // A lookup storm within the backoff opens nothing.
  for (int i = 0; i < 50; ++i) (void)ErrorText(*tree_, flaky);
  EXPECT_EQ(run_.opens, opens);
  // It fails again when due: the next wait is twice as long.
  now_ += 1s;
  EXPECT_NE(ErrorText(*tree_, flaky), "");
  EXPECT_EQ(run_.opens, opens + 1);
  run_.failures.erase("flaky");
  now_ += 1s;
  EXPECT_NE(ErrorText(*tree_, flaky), "");
  EXPECT_EQ(run_.opens, opens + 1);
  now_ += 1s;
  EXPECT_EQ(ErrorText(*tree_, flaky), "");  // the descriptors are back: it opens
  EXPECT_EQ(run_.opens, opens + 2);
  EXPECT_NE(InnerIno(*tree_, "flaky", "model.safetensors"), 0u);
  // The ERROR inode the kernel may still hold names nothing now, never one of its files.
  EXPECT_FALSE(tree_->Resolve(error_ino, false).ok());

  // The refusal is kept however long, until the entry changes.
  run_.failures.erase("outside");
  now_ += 600s;
  EXPECT_NE(ErrorText(*tree_, outside), "");
  EXPECT_EQ(run_.opens, opens + 2);
  run_.Put("outside", "s2");
  Relist();
  now_ += 2s;
  Relist();
  EXPECT_NE(InnerIno(*tree_, "outside", "model.safetensors"), 0u);
}

TEST_F(RunTreeTest, LatestThatFailedForAWhileComesBackOnceItOpens) {
  run_.Put("step-1", "s1");
  run_.Put("step-2", "s1");
  run_.listing.latest = "step-2";
  run_.failures["step-2"] = Status::IoError("step-2/model.safetensors: no answer in time");
  tree_ = Open();
  EXPECT_EQ(tree_->Latest(), "step-1");
  run_.failures.erase("step-2");
  now_ += 2s;
  Relist();  // tries it again
  Relist();  // and may pick it
  EXPECT_EQ(tree_->Latest(), "step-2");
  EXPECT_NE(InnerIno(*tree_, "step-2", "model.safetensors"), 0u);
}

TEST_F(RunTreeTest, OpenCheckpointsHoldAtMostTheDescriptorBound) {
  for (int i = 0; i < 12; ++i) run_.Put("step-" + std::to_string(i), "s");
  RunTreeOptions options;
  options.max_held_files = 3;
  tree_ = Open(options);
  // A reader holds step-0's file open: its Volume is never closed to make room.
  const uint64_t held_file = InnerIno(*tree_, "step-0", "model.safetensors");
  auto held = tree_->Resolve(held_file, false);
  ASSERT_TRUE(held.ok() && held->volume);
  for (int i = 1; i < 12; ++i) {
    now_ += 1s;
    EXPECT_NE(InnerIno(*tree_, "step-" + std::to_string(i), "model.safetensors"), 0u) << i;
    EXPECT_LE(tree_->HeldFiles(), 3u) << i;
    EXPECT_LE(tree_->OpenVolumes(), 3u) << i;
  }
  auto still = tree_->Resolve(held_file, false);
  ASSERT_TRUE(still.ok());
  EXPECT_EQ(still->volume, held->volume);
  // A closed one reopens, with the same inodes, when used again.
  const int opens = run_.opens;
  EXPECT_NE(InnerIno(*tree_, "step-1", "model.safetensors"), 0u);
  EXPECT_EQ(run_.opens, opens + 1);
  EXPECT_LE(tree_->HeldFiles(), 3u);
}

TEST_F(RunTreeTest, PinnedLatestFollowsTheRunForNewLookups) {
  run_.Put("step-1", "s1", true, "one");
  run_.listing.latest = "step-1";
  RunTreeOptions options;
  options.pin = "latest";
  tree_ = Open(options);
  auto root = tree_->Resolve(RunTree::kRootIno, true);
  ASSERT_TRUE(root.ok());
  ASSERT_EQ(root->kind, RunNode::Kind::kVolume);
  EXPECT_EQ(root->Global(Layout::kRoot), RunTree::kRootIno);
  EXPECT_TRUE(root->short_children);
  std::shared_ptr<Volume> first = root->volume;
  run_.Put("step-2", "s2", true, "two");
  run_.listing.latest = "step-2";
  Relist();
  now_ += 2s;
  Relist();
  root = tree_->Resolve(RunTree::kRootIno, true);
  ASSERT_TRUE(root.ok() && root->volume);
  EXPECT_EQ(root->volume->checkpoint().tensors[0].name, "two");
  EXPECT_EQ(first->checkpoint().tensors[0].name, "one");  // what was open stays
  EXPECT_FALSE(tree_->Resolve(2, false).ok());            // no run symlinks under a pinned root
}

TEST_F(RunTreeTest, APinNamingNoEntryIsRefusedListingTheEntries) {
  run_.Put("checkpoint-1", "s1");
  run_.Put("checkpoint-2", "s1", /*complete=*/false);
  RunTreeOptions options;
  options.pin = "checkpoint-9";
  options.now = [this] { return now_; };
  auto tree = RunTree::Open(run_.Source(), context_, options);
  ASSERT_FALSE(tree.ok());
  const std::string& msg = tree.status().message();
  EXPECT_NE(msg.find("checkpoint-9"), std::string::npos) << msg;
  EXPECT_NE(msg.find("entries: checkpoint-1)"), std::string::npos) << msg;
}

TEST_F(RunTreeTest, RootStatsAreSmallJson) {
  run_.Put("a", "s1");
  run_.listing.latest = "a";
  tree_ = Open();
  InnerIno(*tree_, "a", "model.safetensors");
  const std::string stats = tree_->StatsJson();
  EXPECT_NE(stats.find("\"checkpoints\": 1"), std::string::npos) << stats;
  EXPECT_NE(stats.find("\"checkpoints_open\": 1"), std::string::npos) << stats;
  EXPECT_LT(stats.size(), 1024u);
}

// Readers walk the run (root listing, lookups, entries opened, inner files resolved) while
// a writer saves, rewrites and deletes checkpoints, relists and closes idle ones: run under
// ThreadSanitizer by scripts/test.sh. Every resolved file belongs to the checkpoint its
// entry held when it was resolved: a tensor named after the entry and its generation.
TEST_F(RunTreeTest, ReadersAndRelistsRaceSafely) {
  std::atomic<int64_t> clock_ms{1'000'000};
  for (int i = 0; i < 4; ++i)
    run_.Put("c" + std::to_string(i), "g0", true, "c" + std::to_string(i) + "_0");
  RunTreeOptions options;
  options.now = [&] { return RunClock::time_point{} + std::chrono::milliseconds(clock_ms.load()); };
  options.idle_close = 1ms;
  auto opened = RunTree::Open(run_.Source(), context_, options);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  RunTree& tree = **opened;
  std::atomic<bool> stop{false};
  std::atomic<int> files_seen{0}, mismatches{0};
  auto reader = [&] {
    while (!stop) {
      auto views = tree.Resolve(RunTree::kViewsIno, true);
      if (!views.ok()) continue;
      for (auto& [name, node] : tree.List(*views)) {
        if (name.empty() || name[0] != 'c') continue;
        auto dir = tree.Resolve(node.ino, true);
        if (!dir.ok() || dir->kind != RunNode::Kind::kVolume || !dir->volume) continue;
        const Checkpoint& ckpt = dir->volume->checkpoint();
        if (ckpt.tensors.empty() || ckpt.tensors[0].name.rfind(name + "_", 0) != 0) ++mismatches;
        const uint64_t local = dir->volume->layout().Lookup(Layout::kRoot, "model.safetensors");
        if (local != 0 && tree.Resolve(dir->Global(local), false).ok()) ++files_seen;
      }
    }
  };
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; ++i) readers.emplace_back(reader);
  for (int gen = 1; gen <= 40; ++gen) {
    const std::string name = "c" + std::to_string(gen % 6);
    if (gen % 5 == 0) {
      run_.Remove(name);
    } else {
      run_.Put(name, "g" + std::to_string(gen), true, name + "_" + std::to_string(gen));
    }
    ASSERT_TRUE(tree.Relist().ok());
    clock_ms += 1500;  // past the stability window: the next listing shows it
    ASSERT_TRUE(tree.Relist().ok());
    tree.CloseIdle();
    std::this_thread::sleep_for(2ms);
  }
  stop = true;
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_GT(files_seen.load(), 0);
}

// Saves in progress over a real run directory (run discovery, then RunTree), written one
// file at a time in each writer's own order with more than `stable` between files, as big
// saves take: the entry appears only once its last file is there, and `latest` only ever
// moves forward (issue 22: shard 1 of 2 was shown as a whole checkpoint, latest moved to
// it and back).
class RunTreeSaveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ckptfs_runtree_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Write(const std::string& rel, const std::string& bytes) {
    const std::filesystem::path path = dir_ / rel;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << bytes;
  }
  static std::string Weights(const std::string& name) {
    return MakeSafetensors({{name, Dtype::kF32, {2}}});
  }
  void Open() {
    auto first = OpenSourceDir(dir_.string(), *context_, {});
    ASSERT_TRUE(first.ok()) << first.status().message();
    RunTreeOptions options;
    options.now = [this] { return now_; };
    auto tree = RunTree::Open(
        RunSourceOf(std::move(first).value(), dir_.string(), context_, {}, ""), context_, options);
    ASSERT_TRUE(tree.ok()) << tree.status().message();
    tree_ = std::move(tree).value();
  }
  // Writes `files` in order, listing twice (more than `stable` apart) after each: `entry`
  // must stay hidden until the last file, and latest may never move back.
  void SaveSlowly(const std::string& entry,
                  const std::vector<std::pair<std::string, std::string>>& files) {
    for (size_t i = 0; i < files.size(); ++i) {
      Write(entry + "/" + files[i].first, files[i].second);
      for (int round = 0; round < 2; ++round) {
        now_ += 2s;
        ASSERT_TRUE(tree_->Relist().ok());
        const std::vector<std::string> names = tree_->EntryNames();
        const bool shown = std::find(names.begin(), names.end(), entry) != names.end();
        const bool last = i + 1 == files.size();
        EXPECT_EQ(shown, last && round == 1)
            << entry << " after " << files[i].first << " (listing " << round << ")";
        const std::string latest = tree_->Latest();
        const std::optional<uint64_t> step = StepInName(latest);
        ASSERT_TRUE(step) << "latest: " << latest;
        EXPECT_GE(*step, latest_step_)
            << "latest moved back to " << latest << " after " << entry << "/" << files[i].first;
        latest_step_ = *step;
      }
    }
    EXPECT_EQ(tree_->Latest(), entry);
  }

  std::filesystem::path dir_;
  std::shared_ptr<ReadContext> context_ = std::make_shared<ReadContext>(ReadOptions{});
  RunClock::time_point now_ = RunClock::time_point{} + 1000s;
  std::unique_ptr<RunTree> tree_;
  uint64_t latest_step_ = 0;
};

// PreTrainedModel.save_pretrained: config.json, shard 1, shard 2, then the index.
TEST_F(RunTreeSaveTest, ShardedSaveIsShownOnlyWithItsIndexAndLatestNeverMovesBack) {
  Write("checkpoint-1/config.json", "{}");
  Write("checkpoint-1/model.safetensors", Weights("a"));
  Write("checkpoint-2/config.json", "{}");
  Write("checkpoint-2/model.safetensors", Weights("a"));
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_EQ(tree_->Latest(), "checkpoint-2");
  latest_step_ = 2;
  SaveSlowly("checkpoint-3", {{"config.json", "{}"},
                              {"model-00001-of-00002.safetensors", Weights("a")},
                              {"model-00002-of-00002.safetensors", Weights("b")},
                              {"model.safetensors.index.json",
                               testing::IndexJson({{"a", "model-00001-of-00002.safetensors"},
                                                   {"b", "model-00002-of-00002.safetensors"}})}});
}

// Trainer._save_checkpoint: the model, optimizer, scheduler, RNG state, then
// trainer_state.json, which the run's other checkpoints have.
TEST_F(RunTreeSaveTest, TrainerCheckpointIsShownOnceTrainerStateIsThere) {
  for (const char* d : {"checkpoint-100", "checkpoint-200"}) {
    Write(std::string(d) + "/config.json", "{}");
    Write(std::string(d) + "/model.safetensors", Weights("a"));
    Write(std::string(d) + "/trainer_state.json", "{\"global_step\": 1}");
  }
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_EQ(tree_->Latest(), "checkpoint-200");
  latest_step_ = 200;
  SaveSlowly("checkpoint-300", {{"config.json", "{}"},
                                {"model.safetensors", Weights("a")},
                                {"optimizer.pt", "not read by the listing"},
                                {"scheduler.pt", "not read by the listing"},
                                {"rng_state.pth", "not read by the listing"},
                                {"trainer_state.json", "{\"global_step\": 300}"}});
}

}  // namespace
}  // namespace ckptfs
