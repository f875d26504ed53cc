// The daemon's lines never vanish (issue 24, item 3), through the real binary: where
// nothing listens on /dev/log a detached mount logs to its fallback file and says so (one
// line, or the -v summary's "log" line), its info lines record the mount and the unmount,
// and a clean `mount -f` prints nothing at all.
#include <sys/stat.h>

#include <future>
#include <regex>

#include "mount_harness.h"

namespace ckptfs::mount_test {
namespace {

// Polls (bounded) until `path` holds `text`; returns the file's text either way.
std::string WaitForText(const std::string& path, const std::string& text, milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  std::string content = ReadTextFile(path);
  while (content.find(text) == std::string::npos && Clock::now() < deadline) {
    usleep(20000);
    content = ReadTextFile(path);
  }
  return content;
}

class LogMountTest : public MountFixture {
 protected:
  void SetUp() override {
    MountFixture::SetUp();
    if (IsSkipped()) return;
    source_ = scratch_->Path("bench");
    ASSERT_NO_FATAL_FAILURE(Generate(source_, {"--kind", "bench", "--total-bytes", "4M"}));
    mountpoint_ = scratch_->MakeDir("mnt");
  }

  std::string source_;
  std::string mountpoint_;
};

TEST_F(LogMountTest, WithoutSyslogADetachedMountLogsToItsFallbackFile) {
  if (SyslogAnswers()) GTEST_SKIP() << "syslog answers on /dev/log: no fallback to test";
  const std::string state = scratch_->Path("xdg-state");  // the harness's XDG_STATE_HOME
  const std::string log = state + "/ckptfs/ckptfs.log";

  ProcessResult r;
  ASSERT_NO_FATAL_FAILURE(Mount(source_, mountpoint_, &r, {"--log-level", "info"}));
  EXPECT_EQ(r.out, "") << r.Describe();
  EXPECT_EQ(r.err, LogNotice()) << r.Describe();
  EXPECT_NE(r.err.find(log), std::string::npos) << r.Describe();
  struct stat st;
  ASSERT_EQ(::stat(log.c_str(), &st), 0) << log << ": " << strerror(errno);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((state + "/ckptfs").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // Lines as syslog would have them: a timestamp, ckptfs[pid]: and the level.
  const std::string mounted = WaitForText(log, "mounted ", kMountTimeout);
  std::smatch m;
  EXPECT_TRUE(std::regex_search(
      mounted, m,
      std::regex(R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ckptfs\[\d+\]: info: mounted )" + source_ +
                 " at " + mountpoint_ + R"(: safetensors, 8 shard\(s\).*; cache 512\.0 MiB)")))
      << mounted;
  const std::string data = ReadTextFile(mountpoint_ + "/model.safetensors");
  EXPECT_FALSE(data.empty());

  const ProcessResult umount = Ckptfs({"umount", mountpoint_}, kMountTimeout);
  ASSERT_EQ(umount.exit_code, 0) << umount.Describe();
  const std::string unmounted = WaitForText(log, "unmounted ", kMountTimeout);
  EXPECT_TRUE(
      std::regex_search(unmounted, std::regex("ckptfs\\[\\d+\\]: info: unmounted " + mountpoint_ +
                                              R"( after \d+ s: [1-9]\d* opens, [1-9]\d* reads, )"
                                              R"([1-9]\d* bytes served, 0 read errors\n)")))
      << unmounted;

  // -v names the file in its "log" line, and no second line says it again.
  ASSERT_NO_FATAL_FAILURE(Mount(source_, mountpoint_, &r, {"-v"}));
  EXPECT_NE(r.out.find("  log      " + log + " (no syslog at /dev/log) (level warn)\n"),
            std::string::npos)
      << r.Describe();
  EXPECT_EQ(r.err, "") << r.Describe();
  ASSERT_TRUE(ForceUnmount(mountpoint_));
  ASSERT_TRUE(WaitForNoDaemon(mountpoint_, kMountTimeout));
  // At the default level (warn) a clean mount and unmount log nothing.
  EXPECT_EQ(ReadTextFile(log), unmounted);

  // The line is said once per user and machine (it used to come with every mount): a
  // second plain mount prints nothing, and -v still names the file (above).
  const ProcessResult second = RunProcess({kCkptfs, "mount", source_, mountpoint_}, kMountTimeout);
  EXPECT_EQ(second.exit_code, 0) << second.Describe();
  EXPECT_EQ(second.out + second.err, "") << second.Describe();
  ASSERT_TRUE(ForceUnmount(mountpoint_));
  ASSERT_TRUE(WaitForNoDaemon(mountpoint_, kMountTimeout));

  // -q: not even the line naming the file.
  const ProcessResult quiet =
      RunProcess({kCkptfs, "mount", "-q", source_, mountpoint_}, kMountTimeout);
  EXPECT_EQ(quiet.exit_code, 0) << quiet.Describe();
  EXPECT_EQ(quiet.out + quiet.err, "") << quiet.Describe();
}

// A foreground mount (the systemd unit's mode) of a clean checkpoint, read and unmounted,
// prints nothing: notes such as "replies are copied, not spliced" go to the log at info.
TEST_F(LogMountTest, ForegroundMountPrintsNothing) {
  mounts_.push_back(mountpoint_);
  auto serving = std::async(std::launch::async, [&] {
    return RunProcess({kCkptfs, "mount", "-f", source_, mountpoint_}, kMountTimeout * 2);
  });
  // Unmounts before `serving` is waited for, however the test ends.
  struct Unmount {
    std::string mountpoint;
    ~Unmount() { ForceUnmount(mountpoint); }
  } unmount{mountpoint_};
  const Clock::time_point deadline = Clock::now() + kMountTimeout;
  while (!IsMounted(mountpoint_) && Clock::now() < deadline &&
         serving.wait_for(milliseconds(20)) == std::future_status::timeout) {
  }
  ASSERT_TRUE(IsMounted(mountpoint_));
  EXPECT_FALSE(ReadTextFile(mountpoint_ + "/model.safetensors").empty());
  ASSERT_TRUE(ForceUnmount(mountpoint_));
  const ProcessResult r = serving.get();
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(r.out, "") << r.Describe();
  EXPECT_EQ(r.err, "") << r.Describe();
}

}  // namespace
}  // namespace ckptfs::mount_test
