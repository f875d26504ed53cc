// MountTree (core/mount/mount_tree.h) without a mount: the policy the FUSE front end
// replies with. Modes under --file-mode/--dir-mode/--umask, a run's inode numbers and
// "..", the kernel cache timeouts, a run entry's times, missing names, refusals' errnos.
#include "core/mount/mount_tree.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <mutex>

#include "core/format/formats.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

using testing::MakeSafetensors;
using testing::MemoryDir;

std::map<std::string, std::string> OneFile(const std::string& tensor = "w") {
  return {{"model.safetensors", MakeSafetensors({{tensor, Dtype::kF32, {4}}})}};
}

std::unique_ptr<MountTree> SingleTree(const Ownership& ownership = {}) {
  auto ckpt = OpenCheckpointIn(MemoryDir(OneFile()), testing::TestContext(), {}, "ckpt");
  EXPECT_TRUE(ckpt.ok()) << ckpt.status().message();
  if (!ckpt.ok()) return nullptr;
  std::shared_ptr<Volume> volume =
      Volume::FromCheckpoint(std::move(ckpt).value(), testing::TestContextPtr());
  return std::make_unique<MountTree>(volume, ownership);
}

// A run of two entries held in memory: "a" (listed with a time) and "b" (with none).
std::unique_ptr<MountTree> RunTreeOf(const std::string& pin = "") {
  RunListing listing;
  for (const char* name : {"a", "b"}) {
    RunEntry e;
    e.name = name;
    e.complete = true;
    e.signature = std::string("sig-") + name;
    if (e.name == "a") e.mtime = {1234, 5};
    listing.entries.push_back(e);
  }
  listing.latest = "b";
  RunSource source;
  source.path = "run";
  source.list = [listing]() -> Result<RunListing> { return listing; };
  source.open = [](const RunEntry& entry, ReadContext& context) -> Result<Checkpoint> {
    return OpenCheckpointIn(MemoryDir(OneFile()), context, {}, "run/" + entry.name);
  };
  source.open_files = [](const RunEntry&, ReadContext& context) -> Result<Checkpoint> {
    return ReadFilesOnly(MemoryDir(OneFile()), {}, context);
  };
  RunTreeOptions options;
  options.pin = pin;
  auto run = RunTree::Open(std::move(source), testing::TestContextPtr(), options);
  EXPECT_TRUE(run.ok()) << run.status().message();
  if (!run.ok()) return nullptr;
  return std::make_unique<MountTree>(std::move(run).value(), Ownership{});
}

uint64_t InoOf(MountTree& tree, uint64_t parent, const char* name) {
  Result<Attr> a = tree.Lookup(parent, name);
  EXPECT_TRUE(a.ok()) << name << ": " << a.status().message();
  return a.ok() ? a->ino : 0;
}

TEST(MountTreeTest, ModesFollowFileModeDirModeAndUmask) {
  auto plain = SingleTree();
  ASSERT_TRUE(plain);
  const uint64_t file = InoOf(*plain, MountTree::kRootIno, "model.safetensors");
  EXPECT_EQ(plain->GetAttr(MountTree::kRootIno)->mode, 0555u);  // source-derived, as it is
  EXPECT_EQ(plain->GetAttr(file)->mode, 0444u);
  EXPECT_EQ(plain->GetAttr(file)->kind, Attr::Kind::kFile);
  EXPECT_EQ(plain->GetAttr(MountTree::kRootIno)->nlink, 2u);

  Ownership asked;
  asked.uid = 1234;
  asked.gid = 5678;
  asked.file_mode = 0664;
  asked.dir_mode = 0775;
  asked.umask = 0022;
  auto tree = SingleTree(asked);
  ASSERT_TRUE(tree);
  Result<Attr> dir = tree->GetAttr(MountTree::kRootIno);
  Result<Attr> f = tree->GetAttr(file);
  ASSERT_TRUE(dir.ok() && f.ok());
  EXPECT_EQ(dir->mode, 0755u);  // write asked for, less the umask
  EXPECT_EQ(f->mode, 0644u);
  EXPECT_EQ(f->uid, 1234u);
  EXPECT_EQ(f->gid, 5678u);
  EXPECT_EQ(f->blocks, (f->size + 511) / 512);
  EXPECT_GT(f->size, 0u);

  // Read and execute bits are never wider than SOURCE's, whatever is asked.
  Ownership wide;
  wide.file_mode = 0777;
  EXPECT_EQ(SingleTree(wide)->GetAttr(file)->mode, 0666u);
  EXPECT_EQ(ShownMode(0400, 0777, 0), 0622u);
}

TEST(MountTreeTest, RunInodesAreSlottedAndDotDotLeadsUp) {
  auto tree = RunTreeOf();
  ASSERT_TRUE(tree);
  const uint64_t views = InoOf(*tree, MountTree::kRootIno, RunTree::kViewsDir);
  EXPECT_EQ(views, RunTree::kViewsIno);
  const uint64_t a = InoOf(*tree, views, "a");
  const uint64_t b = InoOf(*tree, views, "b");
  EXPECT_NE(a, b);
  EXPECT_NE(a >> 32, 0u);  // an entry's own slot, not the run's (slot 0)
  EXPECT_NE(a >> 32, b >> 32);
  const uint64_t inner = InoOf(*tree, a, "model.safetensors");
  EXPECT_EQ(inner >> 32, a >> 32);
  EXPECT_EQ(tree->GetAttr(inner)->ino, inner);

  Result<Listing> listing = tree->List(a);
  ASSERT_TRUE(listing.ok()) << listing.status().message();
  DirEntry e;
  ASSERT_TRUE(tree->EntryAt(*listing, 0, &e));
  EXPECT_STREQ(e.name, ".");
  EXPECT_TRUE(e.dot);
  EXPECT_EQ(e.attr.ino, a);
  ASSERT_TRUE(tree->EntryAt(*listing, 1, &e));
  EXPECT_STREQ(e.name, "..");
  EXPECT_EQ(e.attr.ino, views);
  bool found = false;
  for (size_t i = 2; tree->EntryAt(*listing, i, &e); ++i) {
    EXPECT_FALSE(e.dot);
    if (std::string(e.name) == "model.safetensors") found = e.attr.ino == inner;
  }
  EXPECT_TRUE(found);

  // The root's ".." is itself.
  Result<Listing> root = tree->List(MountTree::kRootIno);
  ASSERT_TRUE(root.ok());
  ASSERT_TRUE(tree->EntryAt(*root, 1, &e));
  EXPECT_EQ(e.attr.ino, MountTree::kRootIno);
}

TEST(MountTreeTest, StatsFileIsNeverCachedTheRestIs) {
  auto single = SingleTree();
  ASSERT_TRUE(single);
  const uint64_t dot = InoOf(*single, MountTree::kRootIno, ".ckptfs");
  Result<Attr> stats = single->Lookup(dot, "stats.json");
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->timeout, 0.0);
  EXPECT_EQ(single->Lookup(MountTree::kRootIno, "model.safetensors")->timeout,
            MountTree::kCacheTimeout);
  EXPECT_EQ(single->GetAttr(MountTree::kRootIno)->timeout, MountTree::kCacheTimeout);

  auto run = RunTreeOf();
  ASSERT_TRUE(run);
  const uint64_t a = InoOf(*run, InoOf(*run, MountTree::kRootIno, "views"), "a");
  EXPECT_EQ(run->GetAttr(MountTree::kRootIno)->timeout, MountTree::kRunTimeout);
  EXPECT_EQ(run->GetAttr(a)->timeout, MountTree::kRunTimeout);
  EXPECT_EQ(run->Lookup(a, "model.safetensors")->timeout, MountTree::kCacheTimeout);

  // A pinned root follows its target: its children are short-lived too.
  auto pinned = RunTreeOf("latest");
  ASSERT_TRUE(pinned);
  EXPECT_EQ(pinned->Lookup(MountTree::kRootIno, "model.safetensors")->timeout,
            MountTree::kRunTimeout);
}

TEST(MountTreeTest, RunEntryTimesAreListedOrTheMountTime) {
  auto tree = RunTreeOf();
  ASSERT_TRUE(tree);
  Result<Attr> a = tree->Lookup(MountTree::kRootIno, "a");
  Result<Attr> b = tree->Lookup(MountTree::kRootIno, "b");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->mtime.tv_sec, 1234);
  EXPECT_EQ(a->mtime.tv_nsec, 5);
  EXPECT_EQ(b->mtime.tv_sec, tree->mount_time().tv_sec);
  EXPECT_EQ(b->mtime.tv_nsec, tree->mount_time().tv_nsec);
  EXPECT_EQ(tree->GetAttr(MountTree::kRootIno)->mtime.tv_sec, tree->mount_time().tv_sec);
  Result<Attr> latest = tree->Lookup(MountTree::kRootIno, "latest");
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->kind, Attr::Kind::kSymlink);
  EXPECT_EQ(*tree->Readlink(latest->ino), "b");
}

TEST(MountTreeTest, MissingNamesAreNotFound) {
  auto single = SingleTree();
  auto run = RunTreeOf();
  ASSERT_TRUE(single && run);
  for (MountTree* tree : {single.get(), run.get()}) {
    Result<Attr> missing = tree->Lookup(MountTree::kRootIno, "no-such-name");
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
    EXPECT_EQ(missing.status().errno_value(), ENOENT);
    EXPECT_EQ(tree->GetAttr(uint64_t{1} << 40).status().errno_value(), ENOENT);
  }
  EXPECT_EQ(single->GetAttr(999999).status().errno_value(), ENOENT);
  const uint64_t a = InoOf(*run, MountTree::kRootIno, "a");
  EXPECT_EQ(run->Lookup(a, "no-such-file").status().errno_value(), ENOENT);
}

TEST(MountTreeTest, RefusalsCarryTheirErrno) {
  auto single = SingleTree();
  auto run = RunTreeOf();
  ASSERT_TRUE(single && run);
  const uint64_t file = InoOf(*single, MountTree::kRootIno, "model.safetensors");
  auto errno_of = [](const Status& s) {
    EXPECT_TRUE(IsRefusal(s)) << s.message();
    return s.errno_value();
  };
  EXPECT_EQ(errno_of(single->Open(MountTree::kRootIno, O_RDONLY).status()), EISDIR);
  EXPECT_EQ(errno_of(single->Open(file, O_RDWR).status()), EROFS);
  EXPECT_EQ(errno_of(single->Open(file, O_WRONLY).status()), EROFS);
  EXPECT_EQ(errno_of(single->List(file).status()), ENOTDIR);
  EXPECT_EQ(errno_of(single->Readlink(file).status()), EINVAL);
  EXPECT_EQ(errno_of(single->Xattr(file, "user.none", 0).status()), ENODATA);
  const uint64_t latest = InoOf(*run, MountTree::kRootIno, "latest");
  EXPECT_EQ(errno_of(run->Open(latest, O_RDONLY).status()), ELOOP);
  EXPECT_FALSE(IsRefusal(Status::IoError("disk", EIO)));
  EXPECT_FALSE(IsRefusal(Status::NotFound("x")));

  // A tensor file's attributes: whole for a buffer that fits, ERANGE for one that does not.
  const uint64_t tensors = InoOf(*single, MountTree::kRootIno, "tensors");
  Result<Listing> listing = single->List(tensors);
  ASSERT_TRUE(listing.ok());
  DirEntry e;
  ASSERT_TRUE(single->EntryAt(*listing, 2, &e));
  const auto xattrs = single->Xattrs(e.attr.ino);
  ASSERT_FALSE(xattrs.empty());
  const auto& [name, value] = xattrs.front();
  EXPECT_EQ(*single->Xattr(e.attr.ino, name, 0), value);
  EXPECT_EQ(*single->Xattr(e.attr.ino, name, value.size()), value);
  if (value.size() > 1) {
    EXPECT_EQ(errno_of(single->Xattr(e.attr.ino, name, 1).status()), ERANGE);
  }
  EXPECT_EQ(errno_of(single->XattrNames(e.attr.ino, 1).status()), ERANGE);
}

TEST(MountTreeTest, OpenReadsFilesAndSnapshots) {
  auto single = SingleTree();
  ASSERT_TRUE(single);
  const uint64_t file = InoOf(*single, MountTree::kRootIno, "model.safetensors");
  Result<std::unique_ptr<OpenFile>> open = single->Open(file, O_RDONLY);
  ASSERT_TRUE(open.ok()) << open.status().message();
  EXPECT_TRUE((*open)->keep_cache);
  EXPECT_FALSE((*open)->direct_io);
  std::vector<uint8_t> buffer;
  Gathered gathered;
  ASSERT_TRUE(single->Read(**open, 0, 8, {.descriptors = false}, buffer, &gathered).ok());
  std::string got;
  for (const ReplySegment& seg : gathered.segments) {
    got.append(reinterpret_cast<const char*>(seg.data), seg.length);
  }
  EXPECT_EQ(got, OneFile()["model.safetensors"].substr(0, 8));

  const uint64_t dot = InoOf(*single, MountTree::kRootIno, ".ckptfs");
  const uint64_t stats = InoOf(*single, dot, "stats.json");
  Result<std::unique_ptr<OpenFile>> snap = single->Open(stats, O_RDONLY);
  ASSERT_TRUE(snap.ok());
  EXPECT_TRUE((*snap)->direct_io);
  Gathered whole;
  ASSERT_TRUE(single->Read(**snap, 0, 1 << 20, {}, buffer, &whole).ok());
  ASSERT_EQ(whole.segments.size(), 1u);
  EXPECT_EQ(
      std::string(reinterpret_cast<const char*>(whole.segments[0].data), whole.segments[0].length),
      (*snap)->snapshot);
  Gathered past;
  ASSERT_TRUE(single->Read(**snap, 1 << 20, 10, {}, buffer, &past).ok());
  EXPECT_TRUE(past.segments.empty());
}

}  // namespace
}  // namespace ckptfs
