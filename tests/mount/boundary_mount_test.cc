// Safe by default, through the real binary: nothing outside a local SOURCE is served
// (symlinks that leave it, FIFOs), no file is shown more readable than its source (a
// 0600 file stays unreadable to `nobody` even with -o allow_other), the Hugging Face hub
// cache layout mounts, and a shard replaced under its name keeps serving the bytes mounted.

#include <sys/stat.h>

#include <cstring>

#include "mount_harness.h"

namespace ckptfs::mount_test {
namespace {

// The llama kind: an index and two shards, small enough to make quickly.
constexpr char kShard1[] = "model-00001-of-00002.safetensors";
constexpr char kShard2[] = "model-00002-of-00002.safetensors";

class BoundaryMountTest : public MountFixture {
 protected:
  // A two-shard checkpoint with F32 weights (so tensors/ files are .npy).
  void GenerateLlama(const std::string& dir) {
    ASSERT_NO_FATAL_FAILURE(Generate(dir, {"--kind", "llama", "--dtype", "F32"}));
    ASSERT_TRUE(fs::exists(dir + "/" + kShard1) && fs::exists(dir + "/" + kShard2))
        << "make_checkpoint.py --kind llama no longer writes " << kShard1 << " and " << kShard2;
  }

  // `cat PATH` as user nobody (no groups), under a deadline.
  static ProcessResult CatAsNobody(const std::string& path) {
    return RunProcess(
        {"setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "cat", "--", path},
        kCheckTimeout);
  }
  static ProcessResult Cat(const std::string& path) {
    return RunProcess({"cat", "--", path}, kCheckTimeout);
  }
};

// A file in SOURCE linked to a file outside it (a root-only one, and /etc/shadow) is not
// shown; the mount works and says what it left out.
TEST_F(BoundaryMountTest, NonWeightFileLinkedOutsideIsSkipped) {
  const std::string source = scratch_->Path("src");
  ASSERT_NO_FATAL_FAILURE(GenerateLlama(source));
  const std::string secret = scratch_->Path("secret.txt");
  std::ofstream(secret) << "root only\n";
  ASSERT_EQ(chmod(secret.c_str(), 0600), 0);
  fs::create_symlink(secret, source + "/secret.json");
  fs::create_symlink("/etc/shadow", source + "/shadow.json");
  fs::create_symlink("../secret.txt", source + "/relative.json");
  const std::string mountpoint = scratch_->MakeDir("mnt");
  const std::string log = scratch_->Path("ckptfs.log");
  ProcessResult mount;
  ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint, &mount, {"--log-file", log}));
  const std::string said = mount.err + ReadTextFile(log);
  for (const char* name : {"secret.json", "shadow.json", "relative.json"}) {
    SCOPED_TRACE(name);
    EXPECT_FALSE(Cat(mountpoint + "/" + name).exit_code == 0);
    EXPECT_NE(said.find(std::string(name) + ": symbolic link leads outside"), std::string::npos)
        << "no line about " << name << " on stderr or in the log:\n"
        << said;
  }
  const ProcessResult ls = RunProcess({"ls", "-a", mountpoint}, kCheckTimeout);
  EXPECT_EQ(ls.exit_code, 0) << ls.Describe();
  EXPECT_EQ(ls.out.find("secret"), std::string::npos) << ls.out;
  EXPECT_EQ(ls.out.find("shadow"), std::string::npos) << ls.out;
  const ProcessResult config = Cat(mountpoint + "/config.json");
  EXPECT_EQ(config.exit_code, 0) << config.Describe();
  EXPECT_EQ(config.out, ReadTextFile(source + "/config.json"));
}

// A shard that is a link to a file outside SOURCE: a refusal naming it, exit 2.
TEST_F(BoundaryMountTest, ShardLinkedOutsideIsRefused) {
  const std::string source = scratch_->Path("src");
  ASSERT_NO_FATAL_FAILURE(GenerateLlama(source));
  const std::string away = scratch_->MakeDir("elsewhere") + "/" + kShard2;
  fs::rename(source + "/" + kShard2, away);
  fs::create_symlink(away, source + "/" + kShard2);
  const std::string mountpoint = scratch_->MakeDir("mnt");
  mounts_.push_back(mountpoint);
  const ProcessResult mount = RunProcess({kCkptfs, "mount", source, mountpoint}, kRefusalTimeout);
  ExpectRefusal(mount, {kShard2});
  EXPECT_NE(mount.err.find("outside"), std::string::npos) << mount.Describe();
  EXPECT_FALSE(IsMounted(mountpoint));
  ExpectRefusal(Ckptfs({"inspect", source}, kRefusalTimeout), {kShard2});
  // The shard's own path as SOURCE: bounded by its directory, so refused the same way.
  ExpectRefusal(Ckptfs({"inspect", source + "/" + kShard2}, kRefusalTimeout), {kShard2});
}

// Permission bits survive the mount: with -o allow_other, `nobody` cannot read a 0600
// file, a 0600 shard, or any view drawn from it, while root can; a 0644 checkpoint
// stays readable by everyone.
TEST_F(BoundaryMountTest, OwnerOnlyFilesStayOwnerOnlyWithAllowOther) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to switch to user nobody";
  // nobody must reach the mount points: a world-searchable scratch directory.
  ASSERT_EQ(chmod(scratch_->path().c_str(), 0755), 0);
  const std::string source = scratch_->Path("private");
  ASSERT_NO_FATAL_FAILURE(GenerateLlama(source));
  const std::string open_source = scratch_->Path("public");
  ASSERT_NO_FATAL_FAILURE(GenerateLlama(open_source));
  ASSERT_EQ(chmod((source + "/config.json").c_str(), 0600), 0);
  ASSERT_EQ(chmod((source + "/" + kShard2).c_str(), 0600), 0);
  const std::string private_tensor = TensorFileIn(source, kShard2);
  const std::string public_tensor = TensorFileIn(source, kShard1);
  ASSERT_FALSE(private_tensor.empty());

  const std::string mountpoint = scratch_->MakeDir("mnt_private");
  ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint, nullptr, {"-o", "allow_other"}));
  for (const std::string& file :
       {std::string("config.json"), "shards/" + std::string(kShard2),
        std::string("model.safetensors"), std::string("pytorch_model.bin"), private_tensor}) {
    SCOPED_TRACE(file);
    const ProcessResult nobody = CatAsNobody(mountpoint + "/" + file);
    EXPECT_NE(nobody.exit_code, 0) << nobody.Describe();
    EXPECT_NE(nobody.err.find("Permission denied"), std::string::npos) << nobody.Describe();
    EXPECT_EQ(Cat(mountpoint + "/" + file).exit_code, 0) << "root reads " << file;
  }
  // What draws only from readable files stays readable.
  for (const std::string& file :
       {"shards/" + std::string(kShard1), public_tensor, std::string("tokenizer.json")}) {
    SCOPED_TRACE(file);
    const ProcessResult nobody = CatAsNobody(mountpoint + "/" + file);
    EXPECT_EQ(nobody.exit_code, 0) << nobody.Describe();
  }

  const std::string open_mountpoint = scratch_->MakeDir("mnt_public");
  ASSERT_NO_FATAL_FAILURE(Mount(open_source, open_mountpoint, nullptr, {"-o", "allow_other"}));
  for (const std::string& file : {std::string("config.json"), "shards/" + std::string(kShard2),
                                  std::string("model.safetensors"), private_tensor}) {
    SCOPED_TRACE(file);
    const ProcessResult nobody = CatAsNobody(open_mountpoint + "/" + file);
    EXPECT_EQ(nobody.exit_code, 0) << nobody.Describe();
  }
}

// (issue 22) A file in a directory others cannot search (0700 in SOURCE) is no more
// readable through the mount than there: every view drawn from it shows no group or
// other bits, `nobody` gets EACCES even with -o allow_other, and the directories holding
// only such files are the owner's too. A run's checkpoint directory that is 0700 alike.
TEST_F(BoundaryMountTest, FilesInAnOwnerOnlyDirectoryStayOwnerOnly) {
  // nobody must reach the mount points: a world-searchable scratch directory.
  ASSERT_EQ(chmod(scratch_->path().c_str(), 0755), 0);
  const std::string source = scratch_->Path("src");
  ASSERT_NO_FATAL_FAILURE(GenerateLlama(source));
  const std::string tensor = TensorFileIn(source, kShard1);
  ASSERT_FALSE(tensor.empty());
  // Every file lives in vault/files/, linked from SOURCE: the directories of the real
  // path count (vault/ holds no files itself, so SOURCE is no run of it).
  const std::string vault = source + "/vault";
  ASSERT_TRUE(fs::create_directories(vault + "/files"));
  for (const fs::directory_entry& e : fs::directory_iterator(source)) {
    if (!e.is_regular_file()) continue;
    const std::string name = e.path().filename().string();
    fs::rename(e.path(), vault + "/files/" + name);
    fs::create_symlink("vault/files/" + name, source + "/" + name);
  }
  ASSERT_EQ(chmod(vault.c_str(), 0700), 0);
  const std::vector<std::string> files = {"config.json",
                                          "model.safetensors",
                                          "pytorch_model.bin",
                                          "pytorch_model/map.pt",
                                          tensor,
                                          "shards/" + std::string(kShard1),
                                          "shards/model.safetensors.index.json"};
  const auto mode_of = [](const std::string& path) {
    struct stat st;
    EXPECT_EQ(stat(path.c_str(), &st), 0) << path << ": " << std::strerror(errno);
    return st.st_mode & 07777;
  };
  const std::string mountpoint = scratch_->MakeDir("mnt_vault");
  ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint, nullptr, {"-o", "allow_other"}));
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    EXPECT_EQ(mode_of(mountpoint + "/" + file) & 077, 0u);
    EXPECT_EQ(Cat(mountpoint + "/" + file).exit_code, 0) << "root reads " << file;
    if (getuid() == 0) {
      const ProcessResult nobody = CatAsNobody(mountpoint + "/" + file);
      EXPECT_NE(nobody.exit_code, 0) << nobody.Describe();
      EXPECT_NE(nobody.err.find("Permission denied"), std::string::npos) << nobody.Describe();
    }
  }
  for (const char* dir : {"", "/tensors", "/shards", "/pytorch_model"}) {
    SCOPED_TRACE(dir);
    EXPECT_EQ(mode_of(mountpoint + dir) & 077, 0u);
  }

  // vault/ searchable by all (0711, no listing needed): the same files are everyone's.
  ASSERT_EQ(chmod(vault.c_str(), 0711), 0);
  const std::string open_mountpoint = scratch_->MakeDir("mnt_open");
  ASSERT_NO_FATAL_FAILURE(Mount(source, open_mountpoint, nullptr, {"-o", "allow_other"}));
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    EXPECT_EQ(mode_of(open_mountpoint + "/" + file) & 044, 044u);
    if (getuid() == 0) {
      EXPECT_EQ(CatAsNobody(open_mountpoint + "/" + file).exit_code, 0);
    }
  }

  // A run whose checkpoint-1/ is 0700: its files show the owner's bits only, checkpoint-2/
  // (0755) stays readable; checkpoint-1/ itself shows 0500 from the start.
  const std::string run = scratch_->Path("run");
  ASSERT_NO_FATAL_FAILURE(GenerateLlama(run + "/checkpoint-1"));
  ASSERT_NO_FATAL_FAILURE(GenerateLlama(run + "/checkpoint-2"));
  ASSERT_EQ(chmod((run + "/checkpoint-1").c_str(), 0700), 0);
  const std::string run_mountpoint = scratch_->MakeDir("mnt_run");
  ASSERT_NO_FATAL_FAILURE(Mount(run, run_mountpoint, nullptr, {"-o", "allow_other"}));
  // Before anything inside is looked up (the entry not opened yet), the directory itself
  // is no more open than in SOURCE.
  EXPECT_EQ(mode_of(run_mountpoint + "/checkpoint-1") & 077, 0u);
  EXPECT_EQ(mode_of(run_mountpoint + "/checkpoint-2") & 055, 055u);
  // The entry's own files (SOURCE's, at their paths) and its views (views/NAME/) alike.
  const std::vector<std::string> checked = {
      "checkpoint-N/config.json", "checkpoint-N/" + std::string(kShard1),
      "views/checkpoint-N/model.safetensors", "views/checkpoint-N/config.json"};
  for (const std::string& file : checked) {
    SCOPED_TRACE(file);
    const size_t n = file.find("-N/");
    const std::string closed = run_mountpoint + "/" + std::string(file).replace(n, 2, "-1");
    const std::string open = run_mountpoint + "/" + std::string(file).replace(n, 2, "-2");
    EXPECT_EQ(mode_of(closed) & 077, 0u);
    EXPECT_EQ(mode_of(open) & 044, 044u);
    if (getuid() == 0) {
      EXPECT_NE(CatAsNobody(closed).exit_code, 0);
      EXPECT_EQ(CatAsNobody(open).exit_code, 0);
    }
  }
}

// An index naming a shard that is a FIFO: mount, inspect and verify each refuse at once,
// naming it, instead of waiting for a writer forever.
TEST_F(BoundaryMountTest, FifoShardIsRefusedWithoutBlocking) {
  const std::string source = scratch_->Path("src");
  ASSERT_NO_FATAL_FAILURE(GenerateLlama(source));
  const std::string shard = source + "/" + kShard2;
  fs::remove(shard);
  ASSERT_EQ(mkfifo(shard.c_str(), 0644), 0);
  const std::string mountpoint = scratch_->MakeDir("mnt");
  mounts_.push_back(mountpoint);
  const ProcessResult mount = RunProcess({kCkptfs, "mount", source, mountpoint}, kRefusalTimeout);
  ExpectRefusal(mount, {kShard2});
  EXPECT_FALSE(IsMounted(mountpoint));
  ExpectRefusal(Ckptfs({"inspect", source}, kRefusalTimeout), {kShard2});
  ExpectRefusal(Ckptfs({"verify", source}, kRefusalTimeout), {kShard2});
}

// A Hugging Face hub cache snapshot links every file to ../../blobs/HASH: it mounts and
// serves the bytes of the blobs.
TEST_F(BoundaryMountTest, HubCacheSnapshotMounts) {
  const std::string plain = scratch_->Path("plain");
  ASSERT_NO_FATAL_FAILURE(GenerateLlama(plain));
  const std::string repo = scratch_->Path("hub/models--org--llama");
  const std::string snapshot = repo + "/snapshots/0123456789abcdef";
  fs::create_directories(repo + "/blobs");
  fs::create_directories(snapshot);
  int n = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(plain)) {
    const std::string blob = "blob" + std::to_string(n++);  // the hub names them by hash
    fs::copy_file(e.path(), repo + "/blobs/" + blob);
    fs::create_symlink("../../blobs/" + blob, snapshot + "/" + e.path().filename().string());
  }
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(snapshot, mountpoint));
  for (const char* check : {"check_root.py", "check_merged.py", "check_shards.py"}) {
    RunCheck(check, {plain, mountpoint});
  }
  const ProcessResult config = Cat(mountpoint + "/config.json");
  EXPECT_EQ(config.out, ReadTextFile(plain + "/config.json"));
}

// (issue 22) A snapshot whose repo's blobs/ is itself a link to `/`: the hub exception
// covers the repo's own blobs/ directory only, so a file outside is never served as
// config.json (it is skipped with a line), while the weights, real blobs, still mount.
TEST_F(BoundaryMountTest, HubBlobsLinkedToRootServesNothingOutside) {
  const std::string plain = scratch_->Path("plain");
  ASSERT_NO_FATAL_FAILURE(GenerateLlama(plain));
  const std::string secret = scratch_->Path("secret.json");
  std::ofstream(secret) << "{\"secret\": \"outside SOURCE\"}\n";
  const std::string repo = scratch_->Path("hub/models--org--llama");
  const std::string snapshot = repo + "/snapshots/0123456789abcdef";
  fs::create_directories(snapshot);
  fs::create_directory_symlink("/", repo + "/blobs");
  int n = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(plain)) {
    const std::string name = e.path().filename().string();
    if (name == "config.json") continue;
    fs::copy_file(e.path(), snapshot + "/" + "blob" + std::to_string(n));
    fs::create_symlink("blob" + std::to_string(n++), snapshot + "/" + name);
  }
  fs::create_symlink("../../blobs" + secret, snapshot + "/config.json");
  const std::string mountpoint = scratch_->MakeDir("mnt");
  const std::string log = scratch_->Path("ckptfs.log");
  ProcessResult mount;
  ASSERT_NO_FATAL_FAILURE(Mount(snapshot, mountpoint, &mount, {"--log-file", log}));
  EXPECT_NE(Cat(mountpoint + "/config.json").exit_code, 0);
  EXPECT_FALSE(fs::exists(mountpoint + "/config.json"));
  const std::string said = mount.err + ReadTextFile(log);
  EXPECT_NE(said.find("config.json: symbolic link leads outside"), std::string::npos) << said;
  const ProcessResult merged = Cat(mountpoint + "/model.safetensors");
  EXPECT_EQ(merged.exit_code, 0) << merged.Describe();
}

// A shard replaced under its name by another file of the same size and mtime (a new inode
// renamed over it, as training's save-then-rename does): ckptfs holds the file it opened,
// and keeps serving exactly those bytes, as an open file does in POSIX (issue 22: EIO here
// broke every reader of a live run). Only a change in place of the held file gives EIO
// (MountTest.ShardChangedAfterMountGivesEio). Remount to see the new file.
TEST_F(BoundaryMountTest, ShardReplacedUnderItsNameKeepsServingTheBytesItOpened) {
  const std::string source = scratch_->Path("src");
  ASSERT_NO_FATAL_FAILURE(GenerateLlama(source));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint));
  const std::string shard = source + "/" + kShard2;
  const std::string original = ReadTextFile(shard);
  const std::string fresh = source + "/.fresh";
  std::string changed = original;
  for (size_t i = changed.size() / 2; i < changed.size(); i += 4096) changed[i] ^= 0x5a;
  std::ofstream(fresh, std::ios::binary) << changed;
  const ProcessResult touch = RunProcess({"touch", "-r", shard, fresh}, kCheckTimeout);
  ASSERT_EQ(touch.exit_code, 0) << touch.Describe();
  fs::rename(fresh, shard);

  const ProcessResult replaced = Cat(mountpoint + "/shards/" + kShard2);
  EXPECT_EQ(replaced.exit_code, 0) << replaced.Describe();
  EXPECT_TRUE(replaced.out == original) << "the replaced shard did not serve the bytes it opened";
  fs::remove(shard);  // and deleted: still the same bytes
  const ProcessResult deleted = Cat(mountpoint + "/shards/" + kShard2);
  EXPECT_EQ(deleted.exit_code, 0) << deleted.Describe();
  EXPECT_TRUE(deleted.out == original) << "the deleted shard did not serve the bytes it opened";
}

}  // namespace
}  // namespace ckptfs::mount_test
