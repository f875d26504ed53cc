// Honest metadata, ownership and modes (issue 11): files show their sources' mtimes, so
// `rsync -a` from a remounted checkpoint copies nothing again; inode numbers stay the same
// across remounts; st_blocks counts the bytes; --uid/--gid/--umask/--file-mode/--dir-mode
// set what other users see (with -o allow_other), never more readable than SOURCE.
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <map>

#include "mount_harness.h"

namespace ckptfs::mount_test {
namespace {

constexpr char kShard1[] = "model-00001-of-00002.safetensors";
constexpr char kShard2[] = "model-00002-of-00002.safetensors";
constexpr time_t kShard1Time = 1609459200;     // 2021-01-01 00:00:00 UTC
constexpr time_t kShard2Time = 1640995200;     // 2022-01-01 00:00:00 UTC
constexpr time_t kConfigTime = 1672531200;     // 2023-01-01 00:00:00 UTC
constexpr time_t kSourceDirTime = 1577836800;  // 2020-01-01 00:00:00 UTC

class MetadataMountTest : public MountFixture {
 protected:
  void SetUp() override {
    MountFixture::SetUp();
    if (IsSkipped()) return;
    source_ = scratch_->Path("llama");
    ASSERT_NO_FATAL_FAILURE(Generate(source_, {"--kind", "llama", "--dtype", "F32"}));
    SetTime(source_ + "/" + kShard1, kShard1Time);
    SetTime(source_ + "/" + kShard2, kShard2Time);
    SetTime(source_ + "/config.json", kConfigTime);
    SetTime(source_, kSourceDirTime);  // last: the writes above touched the directory
    mountpoint_ = scratch_->MakeDir("mnt");
  }

  static void SetTime(const std::string& path, time_t seconds) {
    const struct timespec times[2] = {{seconds, 0}, {seconds, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path << ": " << strerror(errno);
  }

  // `stat -c FORMAT PATH` in a child (a hung mount must never hang the test), trimmed.
  static std::string Stat(const std::string& format, const std::string& path,
                          const std::vector<std::string>& as_user = {}) {
    std::vector<std::string> argv = as_user;
    argv.insert(argv.end(), {"stat", "-c", format, "--", path});
    const ProcessResult r = RunProcess(argv, kCheckTimeout);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    std::string out = r.out;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }

  // "INODE MTIME PATH" of everything in the mount but the live stats file, sorted.
  std::string InodesAndTimes() const {
    const ProcessResult r = RunProcess(
        {"sh", "-c", "find \"$1\" -printf '%i %T@ %P\\n' | grep -v ' .ckptfs/stats.json$' | sort",
         "sh", mountpoint_},
        kCheckTimeout);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    return r.out;
  }

  void Unmount() {
    const ProcessResult r = Ckptfs({"umount", mountpoint_}, kMountTimeout);
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
    ASSERT_TRUE(WaitForNoDaemon(mountpoint_, kDaemonExitTimeout));
  }

  std::string source_;
  std::string mountpoint_;
};

TEST_F(MetadataMountTest, FilesShowTheirSourcesTimes) {
  ASSERT_NO_FATAL_FAILURE(Mount(source_, mountpoint_));
  const std::string m = mountpoint_ + "/";
  EXPECT_EQ(Stat("%Y", m + "shards/" + kShard1), std::to_string(kShard1Time));
  EXPECT_EQ(Stat("%Y", m + "shards/" + kShard2), std::to_string(kShard2Time));
  EXPECT_EQ(Stat("%Y", m + "config.json"), std::to_string(kConfigTime));
  EXPECT_EQ(Stat("%Y", m + "shards/" + kShard1), Stat("%Y", source_ + "/" + kShard1));
  // Views: the newest of what they draw from.
  for (const char* view : {"model.safetensors", "pytorch_model.bin", ".ckptfs/metadata.json"}) {
    EXPECT_EQ(Stat("%Y %X", m + view),
              std::to_string(kShard2Time) + " " + std::to_string(kShard2Time))
        << view << ": mtime and atime";
  }
  EXPECT_EQ(Stat("%Y", m + TensorFileIn(source_, kShard1)), std::to_string(kShard1Time));
  EXPECT_EQ(Stat("%Y", m + TensorFileIn(source_, kShard2)), std::to_string(kShard2Time));
  for (const char* dir : {"", "tensors", "shards"}) {
    EXPECT_EQ(Stat("%Y", m + dir), std::to_string(kSourceDirTime)) << "directory /" << dir;
  }
  // 512-byte blocks, rounded up: GNU tar takes st_blocks == 0 for an all-hole file.
  const std::vector<std::string> size_blocks = [&] {
    std::istringstream in(Stat("%s %b %B", m + "config.json"));
    std::vector<std::string> v(3);
    in >> v[0] >> v[1] >> v[2];
    return v;
  }();
  EXPECT_EQ(size_blocks[2], "512");
  EXPECT_EQ(std::stoull(size_blocks[1]), (std::stoull(size_blocks[0]) + 511) / 512);
  EXPECT_GT(std::stoull(size_blocks[1]), 0u);
}

// What a user who backs up a mount sees: the second `rsync -a` after a remount transfers
// nothing, and every inode number and time is as before.
TEST_F(MetadataMountTest, RsyncAfterARemountCopiesNothing) {
  if (RunProcess({"rsync", "--version"}, kCheckTimeout).exit_code != 0) {
    GTEST_SKIP() << "rsync is not installed (apt-get install rsync)";
  }
  const std::string copy = scratch_->MakeDir("copy");
  // The stats file is live: its bytes change with every read, so it is not a file to sync.
  const std::vector<std::string> rsync = {
      "rsync",           "-a",      "--itemize-changes", "--exclude=/.ckptfs/stats.json",
      mountpoint_ + "/", copy + "/"};
  ASSERT_NO_FATAL_FAILURE(Mount(source_, mountpoint_));
  const ProcessResult first = RunProcess(rsync, kCheckTimeout);
  ASSERT_EQ(first.exit_code, 0) << first.Describe();
  EXPECT_NE(first.out.find(">f+++++++++ model.safetensors"), std::string::npos) << first.out;
  const std::string before = InodesAndTimes();
  ASSERT_NO_FATAL_FAILURE(Unmount());
  sleep(1);  // a mount-time clock would now show another second

  ASSERT_NO_FATAL_FAILURE(Mount(source_, mountpoint_));
  const ProcessResult second = RunProcess(rsync, kCheckTimeout);
  ASSERT_EQ(second.exit_code, 0) << second.Describe();
  EXPECT_EQ(second.out, "") << "rsync transferred or touched these after a remount";
  EXPECT_EQ(InodesAndTimes(), before) << "inode numbers or times changed across a remount";
  EXPECT_GT(LineCount(before), 20);
}

class OwnershipMountTest : public MetadataMountTest {
 protected:
  void SetUp() override {
    MetadataMountTest::SetUp();
    if (IsSkipped()) return;
    if (getuid() != 0) GTEST_SKIP() << "needs root to act as user nobody";
    // nobody must reach the mount point: a world-searchable scratch directory.
    ASSERT_EQ(chmod(scratch_->path().c_str(), 0755), 0);
  }

  // argv prefix: run as nobody, with nobody's groups.
  static std::vector<std::string> AsNobody() { return {"runuser", "-u", "nobody", "--"}; }

  ProcessResult RunAsNobody(std::vector<std::string> argv) const {
    std::vector<std::string> full = AsNobody();
    full.insert(full.end(), argv.begin(), argv.end());
    return RunProcess(full, kCheckTimeout);
  }
};

// --uid/--gid make nobody the owner; with --dir-mode 0755 --file-mode 0644 the copy nobody
// makes with `cp -r` is one nobody can delete, and writes through the mount still fail.
TEST_F(OwnershipMountTest, OwnerOptionsGiveCopiesTheUserCanDelete) {
  ASSERT_NO_FATAL_FAILURE(Mount(source_, mountpoint_, nullptr,
                                {"-o", "allow_other", "--uid", "65534", "--gid", "nogroup",
                                 "--dir-mode", "0755", "--file-mode", "0644"}));
  const std::string config = mountpoint_ + "/config.json";
  EXPECT_EQ(Stat("%u:%g %a", config, AsNobody()), "65534:65534 644");
  EXPECT_EQ(Stat("%a", mountpoint_ + "/tensors", AsNobody()), "755");
  EXPECT_EQ(RunAsNobody({"test", "-O", config}).exit_code, 0) << "nobody is not the owner";

  const ProcessResult write = RunAsNobody({"sh", "-c", "echo x >> \"$1\"", "sh", config});
  EXPECT_NE(write.exit_code, 0) << write.Describe();
  EXPECT_NE(write.err.find("Read-only file system"), std::string::npos) << write.Describe();

  const std::string home = scratch_->MakeDir("home");
  ASSERT_EQ(chown(home.c_str(), 65534, 65534), 0);
  const ProcessResult cp = RunAsNobody({"cp", "-r", "--", mountpoint_, home + "/copy"});
  ASSERT_EQ(cp.exit_code, 0) << cp.Describe();
  EXPECT_EQ(Stat("%a", home + "/copy/tensors"), "755");
  const ProcessResult rm = RunAsNobody({"rm", "-rf", "--", home + "/copy"});
  EXPECT_EQ(rm.exit_code, 0) << rm.Describe();
  EXPECT_FALSE(fs::exists(home + "/copy")) << "nobody could not delete its own copy";
}

// --umask 077 leaves files to their owner: nobody is refused unless it is the owner.
TEST_F(OwnershipMountTest, UmaskHidesFilesFromOthersButNotTheOwner) {
  ASSERT_NO_FATAL_FAILURE(
      Mount(source_, mountpoint_, nullptr, {"-o", "allow_other", "--umask", "077"}));
  const ProcessResult refused = RunAsNobody({"cat", "--", mountpoint_ + "/config.json"});
  EXPECT_NE(refused.exit_code, 0) << refused.Describe();
  EXPECT_NE(refused.err.find("Permission denied"), std::string::npos) << refused.Describe();
  EXPECT_EQ(Stat("%a", mountpoint_ + "/config.json"), "400");
  EXPECT_EQ(Stat("%a", mountpoint_), "500");

  const std::string owned = scratch_->MakeDir("mnt_owned");
  ASSERT_NO_FATAL_FAILURE(
      Mount(source_, owned, nullptr, {"-o", "allow_other", "--umask", "077", "--uid", "nobody"}));
  const ProcessResult read = RunAsNobody({"cat", "--", owned + "/config.json"});
  EXPECT_EQ(read.exit_code, 0) << read.Describe();
  EXPECT_EQ(read.out, ReadTextFile(source_ + "/config.json"));
}

// --file-mode narrows; it never widens what SOURCE allows (a 0600 source file stays 0400).
TEST_F(OwnershipMountTest, FileModeNarrowsButNeverWidensTheSource) {
  ASSERT_EQ(chmod((source_ + "/tokenizer.json").c_str(), 0600), 0);
  ASSERT_NO_FATAL_FAILURE(
      Mount(source_, mountpoint_, nullptr, {"-o", "allow_other", "--file-mode", "0440"}));
  EXPECT_EQ(Stat("%a", mountpoint_ + "/config.json"), "440");
  EXPECT_EQ(Stat("%a", mountpoint_ + "/model.safetensors"), "440");
  EXPECT_EQ(Stat("%a", mountpoint_ + "/tokenizer.json"), "400");
  EXPECT_EQ(Stat("%a", mountpoint_ + "/tensors"), "555");
  const ProcessResult refused = RunAsNobody({"cat", "--", mountpoint_ + "/config.json"});
  EXPECT_NE(refused.err.find("Permission denied"), std::string::npos) << refused.Describe();
}

TEST_F(MetadataMountTest, MalformedOwnershipOptionsAreRefused) {
  const std::vector<std::vector<std::string>> cases = {
      {"--umask", "99"},      {"--umask", "-1"},           {"--file-mode", "1777"},
      {"--dir-mode", "rwx"},  {"--uid", "no-such-user-x"}, {"--gid", "4294967295"},
      {"--file-mode", "0o8"},
  };
  mounts_.push_back(mountpoint_);  // in case a refusal wrongly mounts anyway
  for (const std::vector<std::string>& options : cases) {
    SCOPED_TRACE(options[0] + " " + options[1]);
    std::vector<std::string> argv = {kCkptfs, "mount"};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.insert(argv.end(), {source_, mountpoint_});
    const ProcessResult r = RunProcess(argv, kRefusalTimeout);
    ExpectRefusal(r, {options[0]});
    EXPECT_FALSE(IsMounted(mountpoint_)) << "a refused mount was left mounted";
  }
}

}  // namespace
}  // namespace ckptfs::mount_test
