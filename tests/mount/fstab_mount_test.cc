// At home in fstab (issue 11): the FUSE calling convention `ckptfs SOURCE MOUNTPOINT -o
// OPTS`, every long option also an -o option, an fstab line of type fuse.ckptfs mounted by
// mount(8) against the binary `cmake --install` puts in /usr/local/bin, and quiet success:
// a plain mount prints nothing, -v says what was mounted, the daemon log takes the rest.
#include "mount_harness.h"

namespace ckptfs::mount_test {
namespace {

constexpr char kCmake[] = CKPTFS_CMAKE;
constexpr char kBuildDir[] = CKPTFS_BUILD_DIR;

class FstabMountTest : public MountFixture {
 protected:
  void SetUp() override {
    MountFixture::SetUp();
    if (IsSkipped()) return;
    source_ = scratch_->Path("ckpt");
    ASSERT_NO_FATAL_FAILURE(Generate(source_));
    mountpoint_ = scratch_->MakeDir("mnt");
  }

  // /.ckptfs/stats.json's cache capacity, read by a child (never by this process).
  std::string CacheCapacity() {
    const ProcessResult r = RunProcess(
        {kPython, "-c",
         "import json,sys; print(json.load(open(sys.argv[1]))['cache']['capacity_bytes'])",
         mountpoint_ + "/.ckptfs/stats.json"},
        kCheckTimeout);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    return r.out;
  }

  std::string source_;
  std::string mountpoint_;
};

// What mount.fuse3 runs for fstab type fuse.ckptfs: no subcommand, options after the paths,
// mount(8)'s rw and nofail among ours and FUSE's.
TEST_F(FstabMountTest, FuseCallingConvention) {
  mounts_.push_back(mountpoint_);
  const std::string cache = scratch_->Path("cache");
  const ProcessResult r = RunProcess({kCkptfs, source_, mountpoint_, "-o",
                                      "rw,nofail,cache_size=64M,timeout=10,cache_dir=" + cache +
                                          ",cache_dir_size=1G,allow_other,dev,suid"},
                                     kMountTimeout);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(r.out + r.err, LogNotice()) << r.Describe();
  ASSERT_TRUE(IsMounted(mountpoint_));
  EXPECT_EQ(CacheCapacity(), std::to_string(64 << 20) + "\n");
  const ProcessResult touch = RunProcess({"touch", mountpoint_ + "/new"}, kMountTimeout);
  EXPECT_NE(touch.exit_code, 0) << "the mount is writable; " << touch.Describe();
  ASSERT_TRUE(ForceUnmount(mountpoint_));

  // The long spelling after the paths works too; a mistyped subcommand is still one line.
  ASSERT_EQ(
      RunProcess({kCkptfs, source_, mountpoint_, "--cache-size", "32M"}, kMountTimeout).exit_code,
      0);
  EXPECT_EQ(CacheCapacity(), std::to_string(32 << 20) + "\n");
  ExpectRefusal(RunProcess({kCkptfs, "inpsect", source_}, kRefusalTimeout), {"inpsect"});
}

// `-o cache_size=` on the `ckptfs mount` command line, and its refusals in one line.
TEST_F(FstabMountTest, LongOptionsAsDashO) {
  ASSERT_NO_FATAL_FAILURE(
      Mount(source_, mountpoint_, nullptr, {"-o", "cache_size=48M,noatime,x-systemd.idle"}));
  EXPECT_EQ(CacheCapacity(), std::to_string(48 << 20) + "\n");
  ASSERT_TRUE(ForceUnmount(mountpoint_));
  for (const char* o : {"cache_size", "cache_size=-1", "log_level=loud"}) {
    SCOPED_TRACE(o);
    ExpectRefusal(RunProcess({kCkptfs, "mount", "-o", o, source_, mountpoint_}, kRefusalTimeout),
                  {"cache_size", "cache-size", "log-level"});
    EXPECT_FALSE(IsMounted(mountpoint_));
  }
}

// An fstab line with an option neither ckptfs nor libfuse takes: one line naming it (and
// the option a typo meant), exit 2, nothing mounted; not libfuse's two lines listing every
// option with exit 1.
TEST_F(FstabMountTest, UnknownOptionIsOneLineNamingIt) {
  const ProcessResult typo =
      RunProcess({kCkptfs, source_, mountpoint_, "-o", "rw,nofail,allow_other,cache_sise=64M"},
                 kRefusalTimeout);
  ExpectRefusal(typo, {"-o cache_sise=64M"});
  EXPECT_NE(typo.err.find("did you mean -o cache_size?"), std::string::npos) << typo.Describe();
  EXPECT_EQ(typo.err.find("allow_other"), std::string::npos) << typo.Describe();
  const ProcessResult unknown =
      RunProcess({kCkptfs, "mount", "-o", "frobnicate", source_, mountpoint_}, kRefusalTimeout);
  ExpectRefusal(unknown, {"-o frobnicate"});
  EXPECT_FALSE(IsMounted(mountpoint_));
}

// The documented fstab line, mounted by mount(8) as at boot: no PATH (mount(8) drops it),
// the binary where `cmake --install` with the default prefix puts it. The install is
// staged (DESTDIR) and laid over /usr/local/bin in a private mount namespace, so the
// machine's /usr/local is never touched; the mount lives and dies in that namespace.
TEST_F(FstabMountTest, FstabLineMountsAfterInstall) {
  const std::string stage = scratch_->Path("stage");
  const ProcessResult install = RunProcess(
      {"env", "DESTDIR=" + stage, kCmake, "--install", kBuildDir, "--prefix", "/usr/local"},
      kCheckTimeout);
  ASSERT_EQ(install.exit_code, 0) << install.Describe();
  ASSERT_TRUE(fs::exists(stage + "/usr/local/bin/ckptfs")) << install.Describe();

  const std::string fstab = scratch_->Path("fstab");
  std::ofstream(fstab) << "# a temporary fstab\n"
                       << source_ << " " << mountpoint_
                       << " fuse.ckptfs ro,cache_size=64M,allow_other,nofail,_netdev 0 0\n";
  const std::string script =
      "set -e\n"
      "mount -t overlay overlay -o lowerdir=\"$1/usr/local/bin:/usr/local/bin\" /usr/local/bin\n"
      // The harness's XDG_CACHE_HOME keeps the zip CRC sidecar in the scratch directory,
      // its XDG_STATE_HOME the daemon's log where no syslog answers.
      "env -i XDG_CACHE_HOME=\"$XDG_CACHE_HOME\" XDG_STATE_HOME=\"$XDG_STATE_HOME\" "
      "/usr/bin/mount -T \"$2\" \"$3\" 2>&1\n"
      "trap 'umount -l \"$3\" 2>/dev/null || true' EXIT\n"
      "echo mounted\n"
      "awk -v m=\"$3\" '$2 == m { print $3, $4 }' /proc/self/mounts\n"
      "cmp \"$4/config.json\" \"$3/config.json\"\n"
      "/usr/bin/python3 -c 'import json,sys; "
      "print(\"capacity\", json.load(open(sys.argv[1]))[\"cache\"][\"capacity_bytes\"])' "
      "\"$3/.ckptfs/stats.json\"\n"
      "umount \"$3\"\n"
      "echo unmounted\n";
  const ProcessResult r = RunProcess({"unshare", "-m", "--propagation", "private", "sh", "-c",
                                      script, "sh", stage, fstab, mountpoint_, source_},
                                     kCheckTimeout);
  // The daemon lives in the namespace: if the script failed half-way, end it.
  for (pid_t pid : ProcessesWithArg(mountpoint_)) kill(pid, SIGTERM);
  EXPECT_TRUE(WaitForNoDaemon(mountpoint_, kDaemonExitTimeout));
  if (r.exit_code != 0 && r.err.find("overlay") != std::string::npos) {
    GTEST_SKIP() << "cannot lay the staged install over /usr/local/bin: " << r.Describe();
  }
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  // mount(8) printed nothing (but where the daemon logs without syslog): quiet success.
  EXPECT_EQ(r.out.substr(0, r.out.find("mounted\n")), LogNotice()) << r.Describe();
  EXPECT_NE(r.out.find("fuse.ckptfs ro,"), std::string::npos) << r.Describe();
  EXPECT_NE(r.out.find("allow_other"), std::string::npos) << r.Describe();
  EXPECT_NE(r.out.find("capacity " + std::to_string(64 << 20)), std::string::npos) << r.Describe();
  EXPECT_NE(r.out.find("unmounted"), std::string::npos) << r.Describe();
}

// A successful mount prints nothing; -v prints what was mounted; the layout notes the
// default checkpoint has (tensors PyTorch 1.13 cannot hold) go to the daemon log, which
// --log-level filters.
TEST_F(FstabMountTest, QuietSuccessVerboseSummaryAndLogLevel) {
  const std::string log = scratch_->Path("daemon.log");
  ProcessResult r;
  ASSERT_NO_FATAL_FAILURE(Mount(source_, mountpoint_, &r, {"--log-file", log}));
  EXPECT_EQ(r.out, "") << r.Describe();
  EXPECT_EQ(r.err, "") << r.Describe();
  ASSERT_TRUE(ForceUnmount(mountpoint_));
  const std::string notes = ReadTextFile(log);
  EXPECT_NE(notes.find(" warn: tensor \""), std::string::npos) << notes;

  ASSERT_NO_FATAL_FAILURE(
      Mount(source_, mountpoint_, &r, {"-v", "--log-file", log, "--log-level", "error"}));
  EXPECT_EQ(r.err, "") << r.Describe();
  for (const std::string& expected : std::vector<std::string>{
           "mounted " + source_ + " at " + mountpoint_, "safetensors, 8 shard(s)",
           "model.safetensors pytorch_model/ pytorch_model.bin shards/ tensors/",
           "512.0 MiB in memory", "log      " + log, "note     tensor \""}) {
    EXPECT_NE(r.out.find(expected), std::string::npos) << expected << "\n" << r.Describe();
  }
  ASSERT_TRUE(ForceUnmount(mountpoint_));
  EXPECT_EQ(ReadTextFile(log), notes) << "--log-level error let warnings through";

  const ProcessResult quiet =
      RunProcess({kCkptfs, "mount", "-q", source_, mountpoint_}, kMountTimeout);
  EXPECT_EQ(quiet.exit_code, 0) << quiet.Describe();
  EXPECT_EQ(quiet.out + quiet.err, "") << quiet.Describe();
}

}  // namespace
}  // namespace ckptfs::mount_test
