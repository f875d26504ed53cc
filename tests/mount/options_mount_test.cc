// Safe by default (issue 10): the real binary refuses, in one line and before it mounts
// anything, what would make a mount unsafe or surprising: sizes and timeouts that wrap or
// mean nothing, a mount point that is already a live mount (one whose ckptfs daemon died
// is taken over, issue 38, and the systemd unit's stop works on a busy mount),
// writable mounts, a log file inside the mount point (which used to deadlock the daemon),
// a missing spill directory, a cache directory other users could write to; `ckptfs umount`
// unmounts only ckptfs mounts; relative paths mean the caller's directory; and names with
// control characters never split an error line.
#include <sys/mount.h>
#include <sys/stat.h>

#include "mount_harness.h"

namespace ckptfs::mount_test {
namespace {

constexpr uid_t kNobody = 65534;

class OptionsMountTest : public MountFixture {
 protected:
  void SetUp() override {
    MountFixture::SetUp();
    if (IsSkipped()) return;
    source_ = scratch_->Path("mixed");
    ASSERT_NO_FATAL_FAILURE(Generate(source_));
    mountpoint_ = scratch_->MakeDir("mnt");
    mounts_.push_back(mountpoint_);  // in case a refusal wrongly mounts anyway
  }

  // `ckptfs mount OPTIONS... SOURCE MOUNTPOINT`, expected to be refused naming one of
  // `names`, leaving nothing mounted.
  void ExpectMountRefused(const std::vector<std::string>& options,
                          const std::vector<std::string>& names) {
    std::vector<std::string> argv = {kCkptfs, "mount"};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.insert(argv.end(), {source_, mountpoint_});
    ExpectRefusal(RunProcess(argv, kRefusalTimeout), names);
    EXPECT_FALSE(IsMounted(mountpoint_)) << "a refused mount was left mounted";
  }

  static int MountCount(const std::string& path) {
    const std::vector<std::string> points = MountPoints();
    return static_cast<int>(std::count(points.begin(), points.end(), path));
  }

  std::string source_;
  std::string mountpoint_;
};

// stoull wrapped "-1" to 2^64-1 (an unbounded cache), and CLI::Range let NaN through.
TEST_F(OptionsMountTest, BadSizesAndTimeoutsAreRefused) {
  const std::vector<std::vector<std::string>> cases = {
      {"--cache-size", "-1"},
      {"--cache-size", "0"},
      {"--cache-size", "99999999999999999999"},
      {"--cache-size", "17179869184G"},
      {"--cache-dir-size", "-1"},
      {"--cache-dir-size", "0"},
      {"--timeout", "nan"},
      {"--timeout", "0"},
      {"--timeout", "-1"},
      {"--timeout", "inf"},
  };
  for (const std::vector<std::string>& options : cases) {
    SCOPED_TRACE(options[0] + " " + options[1]);
    ExpectMountRefused(options, {options[0]});
  }
}

// (issue 22, item 4) `ckptfs mount X X` used to mount, then fail every read with EIO and
// leave X unusable; a mount point inside SOURCE, or SOURCE inside the mount point, too.
// Real paths are compared: a symlink to SOURCE is SOURCE.
TEST_F(OptionsMountTest, MountPointAndSourceHoldingEachOtherAreRefused) {
  const std::string inside = source_ + "/sub";
  fs::create_directories(inside);
  const std::string link = scratch_->Path("link");
  fs::create_directory_symlink(source_, link);
  const std::string outer = scratch_->MakeDir("outer");
  const std::string nested = outer + "/ckpt";
  fs::copy(source_, nested, fs::copy_options::recursive);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {source_, source_}, {source_, inside}, {link, inside}, {link, source_}, {nested, outer}};
  for (const auto& [source, mountpoint] : cases) {
    SCOPED_TRACE(source + " at " + mountpoint);
    mounts_.push_back(mountpoint);  // in case a refusal wrongly mounts anyway
    const ProcessResult r = RunProcess({kCkptfs, "mount", source, mountpoint}, kRefusalTimeout);
    ExpectRefusal(r, {"SOURCE"});
    EXPECT_NE(r.err.find("outside SOURCE"), std::string::npos) << r.Describe();
    EXPECT_FALSE(IsMounted(mountpoint)) << "a refused mount was left mounted";
  }
}

// A non-empty mount point used to be mounted over silently (libfuse 3 allows it); it is
// refused, naming what it holds, unless --allow-non-empty or -o allow_non_empty (the
// spelling an fstab line uses) says so.
TEST_F(OptionsMountTest, NonEmptyMountPointIsRefusedUnlessAllowed) {
  std::ofstream(mountpoint_ + "/notes.txt") << "mine\n";
  const ProcessResult r = RunProcess({kCkptfs, "mount", source_, mountpoint_}, kRefusalTimeout);
  ExpectRefusal(r, {"not empty"});
  EXPECT_NE(r.err.find("notes.txt"), std::string::npos) << r.Describe();
  EXPECT_NE(r.err.find("--allow-non-empty"), std::string::npos) << r.Describe();
  EXPECT_FALSE(IsMounted(mountpoint_));
  // Both spellings mount over it, hiding the file while mounted.
  for (const std::vector<std::string>& argv :
       {std::vector<std::string>{kCkptfs, "mount", "--allow-non-empty", source_, mountpoint_},
        std::vector<std::string>{kCkptfs, source_, mountpoint_, "-o", "ro,allow_non_empty"}}) {
    SCOPED_TRACE(argv[2]);
    const ProcessResult mounted = RunProcess(argv, kMountTimeout);
    ASSERT_EQ(mounted.exit_code, 0) << mounted.Describe();
    EXPECT_TRUE(IsMounted(mountpoint_));
    EXPECT_TRUE(fs::exists(mountpoint_ + "/config.json"));
    EXPECT_FALSE(fs::exists(mountpoint_ + "/notes.txt"));
    const ProcessResult umount = RunProcess({kCkptfs, "umount", mountpoint_}, kMountTimeout);
    ASSERT_EQ(umount.exit_code, 0) << umount.Describe();
  }
  EXPECT_EQ(ReadTextFile(mountpoint_ + "/notes.txt"), "mine\n");
}

// `--checkpoint best` of a run that records no best used to mount an empty directory and
// exit 0; it is refused, naming what the run does record.
TEST_F(OptionsMountTest, CheckpointBestOfARunWithoutOneIsRefused) {
  const std::string run = scratch_->Path("run");
  const ProcessResult made =
      RunProcess({kPython, ScriptPath("tests/mount/make_run.py"), "many", run, "3"}, kMountTimeout);
  ASSERT_EQ(made.exit_code, 0) << made.Describe();
  const ProcessResult r =
      RunProcess({kCkptfs, "mount", "--checkpoint", "best", run, mountpoint_}, kMountTimeout);
  ExpectRefusal(r, {"no best"});
  for (const std::string name : {"latest checkpoint-3", "checkpoint-1, checkpoint-2"}) {
    EXPECT_NE(r.err.find(name), std::string::npos) << name << "; " << r.Describe();
  }
  EXPECT_FALSE(IsMounted(mountpoint_));
  // latest is there to follow.
  ASSERT_NO_FATAL_FAILURE(Mount(run, mountpoint_, nullptr, {"--checkpoint", "latest"}));
  EXPECT_TRUE(fs::exists(mountpoint_ + "/config.json"));
}

// A second mount used to stack silently over the first.
TEST_F(OptionsMountTest, MountOntoALiveMountIsRefused) {
  ASSERT_NO_FATAL_FAILURE(Mount(source_, mountpoint_));
  const ProcessResult again = RunProcess({kCkptfs, "mount", source_, mountpoint_}, kRefusalTimeout);
  ExpectRefusal(again, {"ckptfs umount"});
  EXPECT_NE(again.err.find(mountpoint_), std::string::npos) << again.Describe();
  EXPECT_EQ(MountCount(mountpoint_), 1) << "a second mount was stacked on the first";
}

// A mount whose daemon was killed (kill -9, out of memory) fails every stat with ENOTCONN
// until it is unmounted. It used to be refused ("unmount it first"), so systemd's
// Restart=on-failure could never mount again: `ckptfs mount` now detaches a dead ckptfs
// mount lazily, says so on stderr and in the daemon's log, and serves the same bytes.
TEST_F(OptionsMountTest, MountOntoADeadMountTakesItOver) {
  ASSERT_NO_FATAL_FAILURE(Mount(source_, mountpoint_));
  const std::vector<pid_t> daemons = ProcessesWithArg(mountpoint_);
  ASSERT_EQ(daemons.size(), 1u);
  ASSERT_EQ(kill(daemons[0], SIGKILL), 0);
  ASSERT_TRUE(WaitForNoDaemon(mountpoint_, kDaemonExitTimeout));
  // The kernel aborts the connection once the dying daemon's /dev/fuse is closed, a moment
  // after its /proc entry empties.
  ProcessResult stat;
  const Clock::time_point deadline = Clock::now() + kDaemonExitTimeout;
  do {
    stat = RunProcess({"stat", "--", mountpoint_}, kMountTimeout);
  } while (stat.err.find("not connected") == std::string::npos && Clock::now() < deadline);
  ASSERT_NE(stat.err.find("not connected"), std::string::npos)
      << "expected ENOTCONN; " << stat.Describe();

  const std::string log = scratch_->Path("daemon.log");
  const ProcessResult again =
      RunProcess({kCkptfs, "mount", "--log-file", log, source_, mountpoint_}, kMountTimeout);
  ASSERT_EQ(again.exit_code, 0) << again.Describe();
  const std::string line = mountpoint_ + ": a ckptfs mount whose daemon is gone";
  EXPECT_EQ(LineCount(again.err), 1) << again.Describe();
  EXPECT_NE(again.err.find("ckptfs: " + line), std::string::npos) << again.Describe();
  EXPECT_NE(again.err.find("unmounted it lazily"), std::string::npos) << again.Describe();
  EXPECT_EQ(MountCount(mountpoint_), 1) << "a mount was stacked on the dead one";
  EXPECT_NE(ReadTextFile(log).find(line), std::string::npos) << "daemon log:\n"
                                                             << ReadTextFile(log);
  for (const char* check : {"check_root.py", "check_npy.py"}) {
    EXPECT_TRUE(RunCheck(check, {source_, mountpoint_})) << check;
  }
  const ProcessResult umount = RunProcess({kCkptfs, "umount", mountpoint_}, kMountTimeout);
  EXPECT_EQ(umount.exit_code, 0) << umount.Describe();
  EXPECT_FALSE(IsMounted(mountpoint_));
}

// The systemd unit's ExecStop, as systemd runs it (the unit file's own line, its variables
// filled in), succeeds on a busy mount: a process with a file open there used to fail the
// stop ("busy"), leaving the unit in a failed state with the mount still in place.
TEST_F(OptionsMountTest, UnitStopSucceedsOnABusyMount) {
  std::string exec_stop;
  std::istringstream unit(ReadTextFile(ScriptPath("systemd/ckptfs@.service.in")));
  for (std::string line; std::getline(unit, line);) {
    if (line.rfind("ExecStop=", 0) == 0) exec_stop = line.substr(9);
  }
  ASSERT_FALSE(exec_stop.empty()) << "no ExecStop= in systemd/ckptfs@.service.in";
  if (exec_stop[0] == '-') exec_stop.erase(0, 1);  // systemd's "failure ignored" prefix
  std::vector<std::string> argv;
  std::istringstream words(exec_stop);
  for (std::string word; words >> word;) {
    if (word == "@CMAKE_INSTALL_FULL_BINDIR@/ckptfs") word = kCkptfs;
    if (word == "${CKPTFS_MOUNTPOINT}") word = mountpoint_;
    argv.push_back(word);
  }
  ASSERT_EQ(argv[0], kCkptfs) << exec_stop;

  ASSERT_NO_FATAL_FAILURE(Mount(source_, mountpoint_));
  const int fd = ::open((mountpoint_ + "/config.json").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << strerror(errno);
  const ProcessResult stop = RunProcess(argv, kMountTimeout);
  EXPECT_EQ(stop.exit_code, 0) << "ExecStop=" << exec_stop << ": " << stop.Describe();
  EXPECT_FALSE(IsMounted(mountpoint_));
  ::close(fd);
  EXPECT_TRUE(WaitForNoDaemon(mountpoint_, kDaemonExitTimeout));
}

// The log used to be opened after mounting and before serving: through the mount itself,
// which hung the daemon and then every stat of the mount point.
TEST_F(OptionsMountTest, LogFileInsideTheMountPointIsRefusedAtOnce) {
  for (const std::string& log :
       {mountpoint_ + "/daemon.log", mountpoint_ + "/sub/dir/daemon.log", mountpoint_}) {
    SCOPED_TRACE("--log-file " + log);
    ExpectMountRefused({"--log-file", log}, {"--log-file"});
  }
  EXPECT_TRUE(WaitForNoDaemon(mountpoint_, kDaemonExitTimeout)) << "a daemon was left running";
}

// Relative --log-file and --spill-dir used to resolve against "/", where the daemon moves.
TEST_F(OptionsMountTest, RelativePathsMeanTheCallersDirectory) {
  const std::string packed = scratch_->Path("single");
  ASSERT_NO_FATAL_FAILURE(Generate(packed, {"--compress", "single"}));
  const std::string work = scratch_->MakeDir("work");
  fs::create_directories(work + "/spill");
  const ProcessResult mount =
      RunProcess({"env", "-C", work, kCkptfs, "mount", "--log-file", "daemon.log", "--spill-dir",
                  "spill", packed, mountpoint_},
                 kMountTimeout);
  ASSERT_EQ(mount.exit_code, 0) << mount.Describe();
  ASSERT_TRUE(IsMounted(mountpoint_));
  EXPECT_TRUE(fs::exists(work + "/daemon.log")) << "the log is not in the caller's directory";
  EXPECT_FALSE(fs::exists("/daemon.log"));

  // Reading a whole single-frame shard decodes it once into the spill directory.
  std::string shard;
  for (const fs::directory_entry& e : fs::directory_iterator(packed)) {
    const std::string name = e.path().filename();
    if (name.size() > 16 && name.ends_with(".safetensors.zst")) shard = name;
  }
  ASSERT_FALSE(shard.empty()) << "no .safetensors.zst in " << packed;
  shard.resize(shard.size() - 4);
  const ProcessResult read =
      RunProcess({"cat", "--", mountpoint_ + "/shards/" + shard}, kCheckTimeout);
  EXPECT_EQ(read.exit_code, 0) << read.Describe().substr(0, 2000);
  EXPECT_FALSE(read.out.empty());
}

// A missing spill directory was noticed only on reads, as ENOENT.
TEST_F(OptionsMountTest, MissingSpillDirIsRefusedAtMount) {
  const std::string missing = scratch_->Path("no-such-dir");
  ExpectMountRefused({"--spill-dir", missing}, {missing});
  const std::string file = scratch_->Path("a-file");
  std::ofstream(file) << "x";
  ExpectMountRefused({"--spill-dir", file}, {file});
}

TEST_F(OptionsMountTest, WritableMountOptionsAreRefused) {
  for (const char* o : {"rw", "ro,rw", "allow_other,rw,ro", "r\\w"}) {
    SCOPED_TRACE(std::string("-o ") + o);
    ExpectMountRefused({"-o", o}, {"rw", "r\\w"});
  }
  // Read-only options still mount, and the mount is read-only.
  ASSERT_NO_FATAL_FAILURE(Mount(source_, mountpoint_, nullptr, {"-o", "ro,noatime"}));
  const ProcessResult touch = RunProcess({"touch", mountpoint_ + "/new"}, kMountTimeout);
  EXPECT_NE(touch.exit_code, 0) << touch.Describe();
  EXPECT_NE(touch.err.find("Read-only"), std::string::npos) << touch.Describe();
}

// Another user could plant entries in a directory they own or may write to.
TEST_F(OptionsMountTest, CacheDirOthersMayWriteIsRefused) {
  for (const mode_t mode : {01777, 0777}) {
    const std::string cache = scratch_->MakeDir("cache-" + std::to_string(mode));
    ASSERT_EQ(chmod(cache.c_str(), mode), 0);
    SCOPED_TRACE("--cache-dir of mode " + std::to_string(mode));
    ExpectMountRefused({"--cache-dir", cache}, {cache});
    EXPECT_TRUE(fs::is_empty(cache)) << "a refused cache directory was written to";
  }
  if (geteuid() == 0) {
    const std::string cache = scratch_->MakeDir("cache-nobody");
    ASSERT_EQ(chown(cache.c_str(), kNobody, kNobody), 0);
    ExpectMountRefused({"--cache-dir", cache}, {cache});
    // Said to be shared: accepted (its entries are checked one by one).
    ASSERT_NO_FATAL_FAILURE(
        Mount(source_, mountpoint_, nullptr, {"--cache-dir", cache, "--cache-dir-shared"}));
  }
}

// `ckptfs umount` used to unmount anything it was pointed at (as root, even a tmpfs).
TEST_F(OptionsMountTest, UmountRefusesWhatIsNotACkptfsMount) {
  const ProcessResult plain = RunProcess({kCkptfs, "umount", mountpoint_}, kRefusalTimeout);
  ExpectRefusal(plain, {mountpoint_});

  const std::string tmpfs = scratch_->MakeDir("tmpfs");
  if (::mount("ckptfs-test", tmpfs.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (" << strerror(errno) << ")";
  }
  mounts_.push_back(tmpfs);  // unmounted in TearDown whatever happens
  const ProcessResult r = RunProcess({kCkptfs, "umount", tmpfs}, kRefusalTimeout);
  ExpectRefusal(r, {"tmpfs"});
  EXPECT_TRUE(IsMounted(tmpfs)) << "ckptfs umount unmounted a tmpfs";
  EXPECT_EQ(::umount2(tmpfs.c_str(), 0), 0) << strerror(errno);
}

// A shard name from an index json holding a newline and a terminal escape: the refusal is
// still one line, the bytes shown as \xNN.
TEST_F(OptionsMountTest, ControlCharactersInNamesAreEscaped) {
  const std::string index = source_ + "/model.safetensors.index.json";
  const ProcessResult edit = RunProcess(
      {kPython, "-c",
       "import json,sys; p=sys.argv[1]; d=json.load(open(p)); k=next(iter(d['weight_map']));"
       "d['weight_map'][k]='evil\\n\\x1b[31mname.safetensors'; json.dump(d, open(p, 'w'))",
       index},
      kCheckTimeout);
  ASSERT_EQ(edit.exit_code, 0) << edit.Describe();
  for (const std::string command : {"mount", "inspect", "verify"}) {
    SCOPED_TRACE(command);
    std::vector<std::string> argv = {kCkptfs, command, source_};
    if (command == "mount") argv.push_back(mountpoint_);
    const ProcessResult r = RunProcess(argv, kRefusalTimeout);
    ExpectRefusal(r, {"evil\\x0a\\x1b[31mname.safetensors"});
    EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << "a raw escape reached the terminal";
  }
  EXPECT_FALSE(IsMounted(mountpoint_));
}

}  // namespace
}  // namespace ckptfs::mount_test
