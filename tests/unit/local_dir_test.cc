// The source boundary (core/source/local_dir.h) on real directories: symlinks that stay
// inside SOURCE work, ones that leave it are refused by name, special files never block,
// the Hugging Face hub cache layout works; and the modes files and views show.
#include "core/format/formats.h"
#include "core/source/local_dir.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "core/checkpoint/checkpoint.h"
#include "core/layout/layout.h"
#include "core/transient.h"
#include "tests/unit/descriptors_left.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

namespace fs = std::filesystem;
using testing::IndexJson;
using testing::MakeSafetensors;
using testing::TestContext;

// A scratch tree: `src` is SOURCE, `outside` a sibling it must not reach.
class LocalDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "ckptfs-localdir-XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    root_ = fs::canonical(templ).string();
    src_ = root_ + "/src";
    outside_ = root_ + "/outside";
    fs::create_directories(src_);
    fs::create_directories(outside_);
  }
  void TearDown() override { fs::remove_all(root_); }

  static void Write(const std::string& path, const std::string& bytes, mode_t mode = 0644) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << bytes;
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);
  }
  static void Link(const std::string& target, const std::string& link) {
    fs::create_directories(fs::path(link).parent_path());
    ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0) << link;
  }

  std::shared_ptr<const LocalDirectory> OpenSrc(const std::string& path = "") {
    auto dir = LocalDirectory::Open(path.empty() ? src_ : path);
    EXPECT_TRUE(dir.ok()) << dir.status().message();
    return dir.ok() ? *dir : nullptr;
  }

  static std::string ReadAll(const ByteSource& source) {
    std::string out(source.Size(), '\0');
    EXPECT_TRUE(source.ReadAt(0, {reinterpret_cast<uint8_t*>(out.data()), out.size()}).ok());
    return out;
  }

  // A one-shard indexed checkpoint in `dir`: model.safetensors.index.json naming `shard`.
  void WriteIndex(const std::string& dir, const std::string& shard) {
    Write(dir + "/model.safetensors.index.json", IndexJson({{"w", shard}}));
  }
  static std::string Shard() { return MakeSafetensors({{"w", Dtype::kF32, {4}}}); }

  std::string root_, src_, outside_;
};

// The mode of the layout node at `path` (names from the root), or -1 when there is none.
int NodeMode(const Layout& layout, std::initializer_list<const char*> path) {
  uint64_t ino = Layout::kRoot;
  for (const char* name : path) ino = layout.Lookup(ino, name);
  const Node* node = layout.Find(ino);
  return node ? static_cast<int>(node->mode) : -1;
}

TEST_F(LocalDirTest, SymlinksInsideWorkRelativeAndAbsolute) {
  Write(src_ + "/real.json", "real");
  Write(src_ + "/sub/deep.json", "deep");
  Link("real.json", src_ + "/relative.json");
  Link(src_ + "/real.json", src_ + "/absolute.json");
  Link("sub/deep.json", src_ + "/into_sub.json");
  Link("../src/real.json", src_ + "/out_and_back.json");  // leaves, then returns
  auto dir = OpenSrc();
  ASSERT_TRUE(dir);
  for (const char* name : {"relative.json", "absolute.json", "out_and_back.json"}) {
    auto file = dir->OpenFile(name);
    ASSERT_TRUE(file.ok()) << name << ": " << file.status().message();
    EXPECT_EQ(ReadAll(**file), "real");
  }
  auto deep = dir->OpenFile("into_sub.json");
  ASSERT_TRUE(deep.ok()) << deep.status().message();
  EXPECT_EQ(ReadAll(**deep), "deep");
  auto listing = dir->List();
  ASSERT_TRUE(listing.ok());
  EXPECT_EQ(listing->files,
            (std::vector<std::string>{"absolute.json", "into_sub.json", "out_and_back.json",
                                      "real.json", "relative.json"}));
  EXPECT_TRUE(listing->outside.empty());
}

TEST_F(LocalDirTest, SymlinksOutsideAreRefusedByName) {
  Write(outside_ + "/secret", "secret", 0600);
  Link(outside_ + "/secret", src_ + "/absolute.json");
  Link("../outside/secret", src_ + "/relative.json");
  Link("/etc/passwd", src_ + "/system.json");
  auto dir = OpenSrc();
  ASSERT_TRUE(dir);
  for (const char* name : {"absolute.json", "relative.json", "system.json"}) {
    auto file = dir->OpenFile(name);
    ASSERT_FALSE(file.ok()) << name;
    EXPECT_EQ(file.status().code(), Status::Code::kInvalidArgument);
    EXPECT_EQ(file.status().message().rfind(std::string(name) + ": symbolic link leads outside", 0),
              0u)
        << file.status().message();
  }
  auto listing = dir->List();
  ASSERT_TRUE(listing.ok());
  EXPECT_TRUE(listing->files.empty());
  EXPECT_EQ(listing->outside,
            (std::vector<std::string>{"absolute.json", "relative.json", "system.json"}));
}

TEST_F(LocalDirTest, DotDotChainsThatEscapeAreRefused) {
  Write(outside_ + "/secret", "secret");
  // a -> sub/b -> ../c -> sub/../../outside/secret: every link is relative and the first
  // two stay inside; the last one climbs out.
  Link("sub/b", src_ + "/a.json");
  Link("../c", src_ + "/sub/b");
  Link("sub/../../outside/secret", src_ + "/c");
  Link("sub/../../src/../outside/secret", src_ + "/zigzag.json");
  auto dir = OpenSrc();
  ASSERT_TRUE(dir);
  for (const char* name : {"a.json", "c", "zigzag.json"}) {
    auto file = dir->OpenFile(name);
    ASSERT_FALSE(file.ok()) << name;
    EXPECT_NE(file.status().message().find("leads outside"), std::string::npos)
        << file.status().message();
  }
  Link("/proc/self/root/etc/passwd", src_ + "/magic.json");
  EXPECT_FALSE(dir->OpenFile("magic.json").ok());
  EXPECT_FALSE(dir->OpenFile("../outside/secret").ok());  // names are names, not paths
  EXPECT_FALSE(dir->OpenFile("sub/b").ok());
}

TEST_F(LocalDirTest, DirectorySymlinks) {
  Write(outside_ + "/secret", "secret");
  Write(src_ + "/sub/inner.json", "inner");
  Link(outside_, src_ + "/away");  // a directory link leaving SOURCE
  Link("away/secret", src_ + "/through_away.json");
  Link("sub", src_ + "/here");  // a directory link inside
  Link("here/inner.json", src_ + "/through_here.json");
  auto dir = OpenSrc();
  ASSERT_TRUE(dir);
  auto away = dir->OpenFile("through_away.json");
  ASSERT_FALSE(away.ok());
  EXPECT_NE(away.status().message().find("leads outside"), std::string::npos);
  auto here = dir->OpenFile("through_here.json");
  ASSERT_TRUE(here.ok()) << here.status().message();
  EXPECT_EQ(ReadAll(**here), "inner");
  // Directories themselves are not files of a checkpoint, inside or out.
  EXPECT_FALSE(dir->OpenFile("here").ok());
  auto listing = dir->List();
  ASSERT_TRUE(listing.ok());
  EXPECT_EQ(listing->files, std::vector<std::string>{"through_here.json"});
  EXPECT_EQ(listing->outside, std::vector<std::string>{"through_away.json"});

  // SOURCE itself may be a link: the boundary is the directory it leads to.
  Link(src_, root_ + "/src_link");
  auto via_link = OpenSrc(root_ + "/src_link");
  ASSERT_TRUE(via_link);
  EXPECT_TRUE(via_link->OpenFile("through_here.json").ok());
  EXPECT_FALSE(via_link->OpenFile("through_away.json").ok());
}

TEST_F(LocalDirTest, FifoIsRefusedWithoutBlocking) {
  const std::string fifo = src_ + "/model-00001-of-00001.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  Link("model-00001-of-00001.safetensors", src_ + "/via_link.safetensors");
  auto dir = OpenSrc();
  ASSERT_TRUE(dir);
  for (const char* name : {"model-00001-of-00001.safetensors", "via_link.safetensors"}) {
    // On a thread: if the open blocked, a writer opening the FIFO releases it.
    std::promise<Status> opened;
    std::future<Status> result = opened.get_future();
    std::thread([&dir, &opened, name] { opened.set_value(dir->OpenFile(name).status()); }).detach();
    if (result.wait_for(std::chrono::seconds(2)) != std::future_status::ready) {
      ADD_FAILURE() << name << ": opening a FIFO blocked";
      const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      result.wait();
      if (writer >= 0) ::close(writer);
      continue;
    }
    const Status s = result.get();
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    EXPECT_EQ(s.message().rfind(std::string(name) + ": a FIFO", 0), 0u) << s.message();
  }
  auto listing = dir->List();
  ASSERT_TRUE(listing.ok());
  EXPECT_TRUE(listing->files.empty());

  // LocalFileSource::Open, for paths the caller trusts, opens with O_NONBLOCK too (run
  // last: if it blocked, the test would hang here).
  const auto start = std::chrono::steady_clock::now();
  auto direct = LocalFileSource::Open(fifo, "fifo");
  EXPECT_FALSE(direct.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));

  // Through OpenCheckpoint: an index naming the FIFO is a refusal naming it.
  WriteIndex(src_, "model-00001-of-00001.safetensors");
  auto ckpt = OpenCheckpoint(src_, TestContext());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(ckpt.status().message().find("model-00001-of-00001.safetensors: a FIFO"),
            std::string::npos)
      << ckpt.status().message();
}

// A shard stored compressed is looked for as NAME.zst: a FIFO there is refused as a FIFO,
// as under its plain name, never as a missing shard.
TEST_F(LocalDirTest, FifoZstShardIsRefusedAsAFifo) {
  const std::string fifo = src_ + "/model-00001-of-00001.safetensors.zst";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  WriteIndex(src_, "model-00001-of-00001.safetensors");
  const auto start = std::chrono::steady_clock::now();
  auto ckpt = OpenCheckpoint(src_, TestContext());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(
      ckpt.status().message().find("model-00001-of-00001.safetensors.zst: a FIFO, not served"),
      std::string::npos)
      << ckpt.status().message();
  EXPECT_EQ(ckpt.status().message().find("missing"), std::string::npos) << ckpt.status().message();
  // A shard that is simply absent is still missing.
  ASSERT_EQ(::unlink(fifo.c_str()), 0);
  auto absent = OpenCheckpoint(src_, TestContext());
  ASSERT_FALSE(absent.ok());
  EXPECT_NE(absent.status().message().find("is missing"), std::string::npos)
      << absent.status().message();
}

TEST_F(LocalDirTest, HubCacheSnapshotLinksIntoItsBlobs) {
  // ~/.cache/huggingface/hub/models--org--name/{blobs,snapshots/REV}
  const std::string repo = root_ + "/hub/models--org--name";
  const std::string snapshot = repo + "/snapshots/0123abcd";
  Write(repo + "/blobs/aaaa", Shard());
  Write(repo + "/blobs/bbbb", "{\"model_type\": \"test\"}");
  Write(root_ + "/hub/models--org--other/blobs/cccc", "other repo");
  Link("../../blobs/aaaa", snapshot + "/model.safetensors");
  Link("../../blobs/bbbb", snapshot + "/config.json");
  Link("../../../models--org--other/blobs/cccc", snapshot + "/other.json");
  Link("../../refs_or_anything", snapshot + "/dangling.json");
  Write(repo + "/refs/main", "0123abcd");
  Link("../../refs/main", snapshot + "/refs.json");
  auto dir = OpenSrc(snapshot);
  ASSERT_TRUE(dir);
  auto config = dir->OpenFile("config.json");
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(ReadAll(**config), "{\"model_type\": \"test\"}");
  EXPECT_FALSE(dir->OpenFile("other.json").ok());  // another repo's blobs
  EXPECT_FALSE(dir->OpenFile("refs.json").ok());   // the repo, but not its blobs
  auto listing = dir->List();
  ASSERT_TRUE(listing.ok());
  EXPECT_EQ(listing->files, (std::vector<std::string>{"config.json", "model.safetensors"}));

  std::vector<std::string> warnings;
  ReadContext context(
      ReadOptions{.warn = [&](const std::string& line) { warnings.push_back(line); }});
  auto ckpt = OpenCheckpoint(snapshot, context);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_EQ(ckpt->tensors.size(), 1u);
  ASSERT_EQ(ckpt->others.size(), 1u);
  EXPECT_EQ(ckpt->others[0].name, "config.json");
  EXPECT_EQ(warnings.size(), 2u);  // other.json and refs.json, each on a line

  // The same layout outside a hub cache is just a link leaving SOURCE.
  const std::string plain = root_ + "/not-a-hub/snapshots/rev";
  Write(root_ + "/not-a-hub/blobs/aaaa", "x");
  Link("../../blobs/aaaa", plain + "/config.json");
  auto plain_dir = OpenSrc(plain);
  ASSERT_TRUE(plain_dir);
  EXPECT_FALSE(plain_dir->OpenFile("config.json").ok());
}

TEST_F(LocalDirTest, ShardOutsideFailsTheCheckpointOtherFilesAreSkipped) {
  Write(outside_ + "/shard.safetensors", Shard());
  Write(outside_ + "/secret", "secret", 0600);
  Write(src_ + "/config.json", "{}");
  Link("/etc/passwd", src_ + "/tokenizer.json");
  Link(outside_ + "/secret", src_ + "/secret.txt");
  WriteIndex(src_, "model-00001-of-00001.safetensors");
  Write(src_ + "/model-00001-of-00001.safetensors", Shard());

  std::vector<std::string> warnings;
  ReadContext context(
      ReadOptions{.warn = [&](const std::string& line) { warnings.push_back(line); }});
  auto ckpt = OpenCheckpoint(src_, context);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  ASSERT_EQ(ckpt->others.size(), 1u);
  EXPECT_EQ(ckpt->others[0].name, "config.json");
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_EQ(warnings[0].rfind("secret.txt: symbolic link leads outside", 0), 0u) << warnings[0];
  EXPECT_EQ(warnings[1].rfind("tokenizer.json: symbolic link leads outside", 0), 0u);

  // The shard itself a link out of SOURCE: a refusal naming it.
  fs::remove(src_ + "/model-00001-of-00001.safetensors");
  Link(outside_ + "/shard.safetensors", src_ + "/model-00001-of-00001.safetensors");
  auto refused = OpenCheckpoint(src_, context);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(refused.status().message().rfind(
                "model-00001-of-00001.safetensors: symbolic link leads outside", 0),
            0u)
      << refused.status().message();

  // A single-file SOURCE is bounded by its directory.
  Link(outside_ + "/shard.safetensors", src_ + "/single.safetensors");
  auto single = OpenCheckpoint(src_ + "/single.safetensors", context);
  ASSERT_FALSE(single.ok());
  EXPECT_NE(single.status().message().find("single.safetensors: symbolic link leads outside"),
            std::string::npos);
  Write(src_ + "/inside.safetensors", Shard());
  Link("inside.safetensors", src_ + "/alias.safetensors");
  EXPECT_TRUE(OpenCheckpoint(src_ + "/alias.safetensors", context).ok());
}

// Out of descriptors, a listing fails with EMFILE (to be tried again), never lists the
// directory as if the names it could not resolve were missing or dangling.
TEST_F(LocalDirTest, ListingOutOfDescriptorsFailsNeverDropsNames) {
  for (const char* name : {"a.safetensors", "b.json", "c.txt"}) Write(src_ + "/" + name, "x");
  fs::create_directories(src_ + "/sub");
  auto dir = OpenSrc();
  ASSERT_NE(dir, nullptr);
  for (int free = 0; free <= 3; ++free) {
    Result<LocalDirectory::Listing> listing = Status::Ok();
    Result<std::unique_ptr<LocalFileSource>> file = Status::Ok();
    {
      testing::DescriptorsLeft left(free);
      listing = dir->List();
      file = dir->OpenFile("a.safetensors");
    }
    if (listing.ok()) {
      EXPECT_EQ(listing->files, (std::vector<std::string>{"a.safetensors", "b.json", "c.txt"}))
          << free << " left";
      EXPECT_EQ(listing->dirs, std::vector<std::string>{"sub"});
      EXPECT_TRUE(listing->unresolved.empty()) << listing->unresolved[0];
    } else {
      EXPECT_TRUE(IsTransient(listing.status())) << listing.status().message();
      EXPECT_EQ(listing.status().errno_value(), EMFILE) << listing.status().message();
    }
    if (!file.ok()) {
      EXPECT_NE(file.status().code(), Status::Code::kNotFound) << file.status().message();
      EXPECT_EQ(file.status().errno_value(), EMFILE) << file.status().message();
    }
  }
  // With descriptors back, the same directory lists whole.
  auto again = dir->List();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->files.size(), 3u);
}

// Whatever happens to the path, an open file keeps reading the bytes it opened (issue 22:
// retention deleted a checkpoint a reader had open and its reads failed): deleted, renamed
// away, replaced by a new file of the same name (even one with the same size and mtime).
TEST_F(LocalDirTest, OpenFileKeepsItsBytesWhateverHappensToThePath) {
  const std::string path = src_ + "/shard.safetensors";
  Write(path, "0123456789");
  auto dir = OpenSrc();
  ASSERT_TRUE(dir);
  auto file = dir->OpenFile("shard.safetensors");
  ASSERT_TRUE(file.ok());
  auto expect_old_bytes = [&](const char* after) {
    SCOPED_TRACE(after);
    EXPECT_TRUE((*file)->CheckUnchanged().ok()) << (*file)->CheckUnchanged().message();
    std::string got(10, '\0');
    ASSERT_TRUE((*file)->ReadAt(0, {reinterpret_cast<uint8_t*>(got.data()), got.size()}).ok());
    EXPECT_EQ(got, "0123456789");
  };
  expect_old_bytes("opened");
  // A new file with the same size and mtime renamed over the old one (cp -p; mv).
  Write(src_ + "/new", "abcdefghij");
  struct stat old_st;
  ASSERT_EQ(::stat(path.c_str(), &old_st), 0);
  const struct timespec times[2] = {old_st.st_atim, old_st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, (src_ + "/new").c_str(), times, 0), 0);
  ASSERT_EQ(::rename((src_ + "/new").c_str(), path.c_str()), 0);
  expect_old_bytes("replaced by rename");
  ASSERT_EQ(::unlink(path.c_str()), 0);
  expect_old_bytes("deleted");

  // Renamed away, then deleted: the held descriptor still reads.
  Write(src_ + "/other.safetensors", "0123456789");
  file = dir->OpenFile("other.safetensors");
  ASSERT_TRUE(file.ok());
  ASSERT_EQ(::rename((src_ + "/other.safetensors").c_str(), (src_ + "/moved").c_str()), 0);
  expect_old_bytes("renamed away");
  ASSERT_EQ(::unlink((src_ + "/moved").c_str()), 0);
  expect_old_bytes("renamed away, then deleted");
}

// The very bytes being served changed in place: EIO naming the file, never other bytes.
TEST_F(LocalDirTest, RewriteInPlaceOfTheOpenFileFails) {
  const std::string path = src_ + "/shard.safetensors";
  Write(path, "0123456789");
  auto dir = OpenSrc();
  ASSERT_TRUE(dir);
  auto file = dir->OpenFile("shard.safetensors");
  ASSERT_TRUE(file.ok());
  // Same size, new mtime (a writer opening it O_WRONLY without O_TRUNC).
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  {
    std::fstream out(path, std::ios::in | std::ios::out | std::ios::binary);
    out << "abcdefghij";
  }
  const struct timespec later[2] = {st.st_atim, {st.st_mtim.tv_sec + 1, st.st_mtim.tv_nsec}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), later, 0), 0);
  Status s = (*file)->CheckUnchanged();
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_EQ(s.message(), "shard.safetensors: file modified since mount");
  // Truncated, then deleted: still the change in place that counts.
  ASSERT_EQ(::truncate(path.c_str(), 4), 0);
  ASSERT_EQ(::unlink(path.c_str()), 0);
  s = (*file)->CheckUnchanged();
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_EQ(s.message(), "shard.safetensors: file changed since mount (size 4, was 10)");
}

TEST_F(LocalDirTest, ModesFollowTheSources) {
  Write(src_ + "/model.safetensors.index.json",
        IndexJson({{"w", "a.safetensors"}, {"v", "b.safetensors"}}));
  Write(src_ + "/a.safetensors", MakeSafetensors({{"w", Dtype::kF32, {4}}}), 0644);
  Write(src_ + "/b.safetensors", MakeSafetensors({{"v", Dtype::kF32, {4}}}), 0600);
  Write(src_ + "/config.json", "{}", 0640);
  Write(src_ + "/run.sh", "", 0755);  // empty: its mode still counts
  ASSERT_EQ(::chown((src_ + "/config.json").c_str(), -1, ::getgid()), 0);
  auto ckpt = OpenCheckpoint(src_, TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  Layout layout = Layout::Build(*ckpt);
  auto mode_of = [&](std::initializer_list<const char*> path) { return NodeMode(layout, path); };
  EXPECT_EQ(mode_of({"config.json"}), 0440);
  EXPECT_EQ(mode_of({"run.sh"}), 0555);
  EXPECT_EQ(mode_of({"shards", "a.safetensors"}), 0444);
  EXPECT_EQ(mode_of({"shards", "b.safetensors"}), 0400);
  EXPECT_EQ(mode_of({"shards", "model.safetensors.index.json"}), 0444);
  EXPECT_EQ(mode_of({"tensors", "w.npy"}), 0444);
  EXPECT_EQ(mode_of({"tensors", "v.npy"}), 0400);
  EXPECT_EQ(mode_of({"model.safetensors"}), 0400);
  EXPECT_EQ(mode_of({"pytorch_model.bin"}), 0400);
  EXPECT_EQ(mode_of({".ckptfs", "metadata.json"}), 0400);
  EXPECT_EQ(mode_of({".ckptfs", "stats.json"}), 0400);
  // Directories: listable by each class that reads something inside.
  EXPECT_EQ(mode_of({}), 0555);
  EXPECT_EQ(mode_of({"tensors"}), 0555);
  EXPECT_EQ(mode_of({"shards"}), 0555);
  EXPECT_EQ(mode_of({".ckptfs"}), 0500);

  // A group-readable file of another group shows no group bits: the mount's files
  // belong to the mounting user's group.
  Write(src_ + "/other_group.json", "{}", 0640);
  if (::getuid() == 0 && ::chown((src_ + "/other_group.json").c_str(), -1, ::getgid() + 1) == 0) {
    auto file = OpenSrc()->OpenFile("other_group.json");
    ASSERT_TRUE(file.ok());
    EXPECT_EQ((*file)->Mode(), 0400u);
  }
}

// (issue 22) A file in a directory others cannot search is no more readable through the
// mount than in SOURCE: every view of it drops the group and other bits the directories
// on the way (of its real path, from SOURCE's root down) do not let through.
TEST_F(LocalDirTest, ModesCountTheDirectoriesOnTheWay) {
  const auto mode_of = [](const std::shared_ptr<const LocalDirectory>& dir,
                          const std::string& name) {
    auto file = dir->OpenFile(name);
    EXPECT_TRUE(file.ok()) << file.status().message();
    return file.ok() ? static_cast<int>((*file)->Mode()) : -1;
  };
  Write(src_ + "/open.json", "{}", 0644);
  Write(src_ + "/private/secret.json", "{}", 0644);
  Write(src_ + "/searchable/x.json", "{}", 0644);
  Write(src_ + "/group/y.json", "{}", 0644);
  Write(src_ + "/a/b/deep.json", "{}", 0644);
  ASSERT_EQ(::chmod((src_ + "/private").c_str(), 0700), 0);
  ASSERT_EQ(::chmod((src_ + "/searchable").c_str(), 0711), 0);  // x is all a path needs
  ASSERT_EQ(::chmod((src_ + "/group").c_str(), 0710), 0);
  ASSERT_EQ(::chown((src_ + "/group").c_str(), -1, ::getgid()), 0);
  ASSERT_EQ(::chmod((src_ + "/a").c_str(), 0750), 0);  // one level up closes it too
  Link("private/secret.json", src_ + "/linked.json");  // the target's directories count
  auto src = OpenSrc();
  ASSERT_TRUE(src);
  EXPECT_EQ(mode_of(src, "open.json"), 0444);
  EXPECT_EQ(mode_of(src, "linked.json"), 0400);
  auto sub = [&](const std::string& name) {
    auto dir = src->OpenSubdirectory(name);
    EXPECT_TRUE(dir.ok()) << dir.status().message();
    return dir.ok() ? *dir : nullptr;
  };
  EXPECT_EQ(mode_of(sub("private"), "secret.json"), 0400);
  EXPECT_EQ(mode_of(sub("searchable"), "x.json"), 0444);
  EXPECT_EQ(mode_of(sub("group"), "y.json"), 0440);
  auto a = sub("a");
  ASSERT_TRUE(a);
  auto b = a->OpenSubdirectory("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(mode_of(*b, "deep.json"), 0440);
  // A directory of another group lets the mount's group through only as it lets others.
  if (::getuid() == 0 && ::chown((src_ + "/group").c_str(), -1, ::getgid() + 1) == 0) {
    EXPECT_EQ(mode_of(sub("group"), "y.json"), 0400);
  }

  // SOURCE's own directory counts: a checkpoint in a 0700 directory shows every view as
  // its owner's only, and its directories r-x for the owner only.
  const std::string ckpt_dir = src_ + "/ckpt";
  Write(ckpt_dir + "/model.safetensors.index.json",
        IndexJson({{"w", "a.safetensors"}, {"v", "b.safetensors"}}));
  Write(ckpt_dir + "/a.safetensors", MakeSafetensors({{"w", Dtype::kF32, {4}}}), 0644);
  Write(ckpt_dir + "/b.safetensors", MakeSafetensors({{"v", Dtype::kF32, {4}}}), 0644);
  Write(ckpt_dir + "/config.json", "{}", 0644);
  ASSERT_EQ(::chmod(ckpt_dir.c_str(), 0700), 0);
  auto ckpt = OpenCheckpoint(ckpt_dir, TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  Layout layout = Layout::Build(*ckpt);
  for (auto path : {std::initializer_list<const char*>{"config.json"},
                    {"model.safetensors"},
                    {"pytorch_model.bin"},
                    {"pytorch_model", "map.pt"},
                    {"tensors", "w.npy"},
                    {"shards", "a.safetensors"},
                    {"shards", "model.safetensors.index.json"}}) {
    SCOPED_TRACE(*path.begin());
    EXPECT_EQ(NodeMode(layout, path), 0400);
  }
  EXPECT_EQ(NodeMode(layout, {}), 0500);
  EXPECT_EQ(NodeMode(layout, {"tensors"}), 0500);
  EXPECT_EQ(NodeMode(layout, {"shards"}), 0500);
  // Opened again once others may search it, the same files show their own bits.
  ASSERT_EQ(::chmod(ckpt_dir.c_str(), 0755), 0);
  auto open = OpenCheckpoint(ckpt_dir, TestContext());
  ASSERT_TRUE(open.ok());
  EXPECT_EQ(Layout::Build(*open).Find(Layout::kRoot)->mode, 0555);
}

// (issue 22) The hub exception is the repo's own blobs/ directory: a blobs/ that is a
// link (to `/`, or to another repo's blobs) makes nothing outside count as inside; the
// directories on a blob's way are blobs/ itself.
TEST_F(LocalDirTest, HubBlobsThatAreALinkGetNoException) {
  Write(outside_ + "/config.json", "{\"secret\": 1}");
  for (const std::string& target : {std::string("/"), outside_}) {
    SCOPED_TRACE(target);
    const std::string repo = root_ + "/hub" + std::to_string(target.size()) + "/models--org--name";
    const std::string snapshot = repo + "/snapshots/rev";
    fs::create_directories(repo);
    Link(target, repo + "/blobs");
    const std::string relative = target == "/" ? fs::path(outside_).relative_path().string() : "";
    Link("../../blobs/" + (relative.empty() ? "" : relative + "/") + "config.json",
         snapshot + "/config.json");
    auto dir = OpenSrc(snapshot);
    ASSERT_TRUE(dir);
    auto config = dir->OpenFile("config.json");
    ASSERT_FALSE(config.ok());
    EXPECT_EQ(config.status().code(), Status::Code::kInvalidArgument);
    EXPECT_NE(config.status().message().find("leads outside"), std::string::npos)
        << config.status().message();
  }

  // A real blobs/ that only its owner may search: its blobs are the owner's only.
  const std::string repo = root_ + "/hub/models--org--private";
  Write(repo + "/blobs/aaaa", "{}", 0644);
  Link("../../blobs/aaaa", repo + "/snapshots/rev/config.json");
  ASSERT_EQ(::chmod((repo + "/blobs").c_str(), 0700), 0);
  auto dir = OpenSrc(repo + "/snapshots/rev");
  ASSERT_TRUE(dir);
  auto config = dir->OpenFile("config.json");
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ((*config)->Mode(), 0400u);
  ASSERT_EQ(::chmod((repo + "/blobs").c_str(), 0755), 0);
  config = OpenSrc(repo + "/snapshots/rev")->OpenFile("config.json");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ((*config)->Mode(), 0444u);
}

}  // namespace
}  // namespace ckptfs
