// Where the daemon's lines go (fs/log.h): the choice as a pure function over its facts
// (syslog reachable or not, foreground or detached, root or a user, XDG_STATE_HOME set or
// not), the probe of the syslog socket, and the fallback file's creation.
#include "fs/log.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

namespace ckptfs {
namespace {

namespace fs = std::filesystem;

// A fresh directory, removed with everything in it when the test ends.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "log_test.XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

DaemonLogChoice Choose(bool foreground, bool syslog, uid_t uid,
                       std::optional<std::string> xdg_state_home,
                       std::optional<std::string> home = "/home/ann") {
  DaemonLogInputs in;
  in.foreground = foreground;
  in.syslog_reachable = syslog;
  in.uid = uid;
  in.home = std::move(home);
  in.xdg_state_home = std::move(xdg_state_home);
  return ChooseDaemonLog(in);
}

TEST(DaemonLogTest, SyslogWhenReachableStderrInTheForegroundElseAFile) {
  for (uid_t uid : {0u, 1000u}) {
    for (const std::optional<std::string>& xdg :
         {std::optional<std::string>(), std::optional<std::string>("/srv/state")}) {
      // A foreground daemon (-f, systemd's mode) logs to stderr, syslog or not.
      EXPECT_EQ(Choose(true, true, uid, xdg).kind, DaemonLogKind::kStderr);
      EXPECT_EQ(Choose(true, false, uid, xdg).kind, DaemonLogKind::kStderr);
      // A detached one to syslog where it answers...
      EXPECT_EQ(Choose(false, true, uid, xdg).kind, DaemonLogKind::kSyslog);
      // ...and to a file of its own where it does not.
      EXPECT_EQ(Choose(false, false, uid, xdg).kind, DaemonLogKind::kFallbackFile);
    }
  }
  DaemonLogInputs with_file;
  with_file.log_file_given = true;
  with_file.syslog_reachable = false;
  EXPECT_EQ(ChooseDaemonLog(with_file).kind, DaemonLogKind::kLogFile);
  with_file.foreground = true;
  EXPECT_EQ(ChooseDaemonLog(with_file).kind, DaemonLogKind::kLogFile);
}

TEST(DaemonLogTest, FallbackPathForRootAndUsers) {
  EXPECT_EQ(Choose(false, false, 1000, std::nullopt).path,
            "/home/ann/.local/state/ckptfs/ckptfs.log");
  EXPECT_EQ(Choose(false, false, 0, std::nullopt).path, "/var/log/ckptfs/ckptfs.log");
  // A set XDG_STATE_HOME is honoured for root too; a relative or empty one is ignored, as
  // the XDG base directory rules say.
  EXPECT_EQ(Choose(false, false, 1000, "/srv/state").path, "/srv/state/ckptfs/ckptfs.log");
  EXPECT_EQ(Choose(false, false, 0, "/srv/state").path, "/srv/state/ckptfs/ckptfs.log");
  EXPECT_EQ(Choose(false, false, 1000, "state").path, "/home/ann/.local/state/ckptfs/ckptfs.log");
  EXPECT_EQ(Choose(false, false, 0, "").path, "/var/log/ckptfs/ckptfs.log");
  // A user without a usable HOME: no file can be named.
  EXPECT_EQ(Choose(false, false, 1000, std::nullopt, std::nullopt).path, "");
  EXPECT_EQ(Choose(false, false, 1000, std::nullopt, "relative").path, "");
}

TEST(DaemonLogTest, SyslogReachableOnlyWhereADatagramSocketListens) {
  TempDir dir;
  EXPECT_FALSE(SyslogReachable(dir.Sub("missing")));
  std::ofstream(dir.Sub("plain")) << "not a socket";
  EXPECT_FALSE(SyslogReachable(dir.Sub("plain")));
  EXPECT_FALSE(SyslogReachable(std::string(200, 'x')));  // longer than sun_path

  const std::string path = dir.Sub("log");
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, path.data(), path.size());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
      << std::strerror(errno);
  EXPECT_TRUE(SyslogReachable(path));
  ::close(fd);
  EXPECT_FALSE(SyslogReachable(path));  // the socket file stays, nobody listens
}

// Failure first (the module keeps the file it opened): one line naming the file, and the
// description says the lines are lost; then a file and its directories are created private.
TEST(DaemonLogTest, FallbackFileIsCreatedPrivateOrTheFailureSaysSo) {
  TempDir dir;
  std::ofstream(dir.Sub("file")) << "";
  const Status bad = OpenFallbackLog(dir.Sub("file") + "/ckptfs/ckptfs.log");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.message().find('\n'), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find("no syslog at /dev/log"), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find(dir.Sub("file")), std::string::npos) << bad.message();
  EXPECT_NE(DaemonLogDescription(false).find("nowhere"), std::string::npos);
  EXPECT_EQ(FallbackLogNotice(), "");
  EXPECT_FALSE(OpenFallbackLog("").ok());
  EXPECT_FALSE(OpenFallbackLog(dir.Sub("unused.log"), Status::InvalidArgument("inside")).ok());
  EXPECT_FALSE(fs::exists(dir.Sub("unused.log")));

  const std::string path = dir.Sub("state/ckptfs/ckptfs.log");
  ASSERT_TRUE(OpenFallbackLog(path).ok());
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(dir.Sub("state/ckptfs").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(DaemonLogDescription(false), path + " (no syslog at /dev/log)");
  EXPECT_EQ(FallbackLogNotice(), "ckptfs: no syslog at /dev/log: the daemon logs to " + path +
                                     " (said once; mount -v names it every time)");
  // Once per file (per user and machine): the marker beside it remembers.
  EXPECT_TRUE(fs::exists(dir.Sub("state/ckptfs/") + kFallbackNotedFile));
  EXPECT_EQ(FallbackLogNotice(), "");
}

}  // namespace
}  // namespace ckptfs
