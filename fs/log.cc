#include "fs/log.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

namespace ckptfs {
namespace {

enum class Destination { kStderr, kSyslog, kFile };
std::atomic<Destination> destination{Destination::kStderr};
std::atomic<int> log_fd{2};
int log_file_fd = -1;  // from OpenLogFile, used once the daemon detaches
std::string log_file_path;
// Why lines do not go where asked (syslog): set when the fallback file was chosen.
std::string fallback_reason;
bool fallback_failed = false;  // not even the fallback file could be opened
LogLevel daemon_threshold = LogLevel::kWarn;
std::atomic<LogLevel> threshold{LogLevel::kWarn};  // the terminal's until the daemon detaches

int SyslogPriority(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return LOG_ERR;
    case LogLevel::kWarn:
      return LOG_WARNING;
    case LogLevel::kInfo:
      return LOG_INFO;
    case LogLevel::kDebug:
      break;
  }
  return LOG_DEBUG;
}

const char* LevelName(LogLevel level) {
  static const char* const kNames[] = {"error", "warn", "info", "debug"};
  return kNames[static_cast<int>(level)];
}

Status OpenAppend(const std::string& what, const std::string& path, mode_t mode);
Status MakeDirs(const std::string& dir, mode_t mode);

// The daemon's syslog: datagrams written here rather than by syslog(3), which drops a
// line without a word when the socket has gone (journald stopped, /dev/log removed) and
// blocks when the reader stops reading. Guarded by syslog_mu.
std::mutex syslog_mu;
int syslog_fd = -1;
std::string syslog_path;      // the socket
std::string syslog_fallback;  // FallbackLogPath, "" when none can be named or it is unusable

int ConnectSyslog(const std::string& socket_path) {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) return -1;
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends one line as syslog(3) would ("<PRI>Mmm dd hh:mm:ss ckptfs[PID]: MESSAGE"), once
// more on a fresh connection if the first send fails (a restarted journald made a new
// socket). Never waits: a reader that stopped reading counts as gone. errno on failure.
bool SendSyslog(LogLevel level, const std::string& message) {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm;
  std::strftime(stamp, sizeof(stamp), "%b %e %H:%M:%S", ::localtime_r(&now, &tm));
  // Appended piece by piece: GCC 12 at -O3 takes `"<" + std::to_string(...)` for an
  // overlapping copy (-Wrestrict, a false positive) and the Release build warns nowhere.
  std::string datagram = "<";
  datagram += std::to_string(LOG_DAEMON | SyslogPriority(level));
  datagram += ">";
  datagram += stamp;
  datagram += " ckptfs[";
  datagram += std::to_string(::getpid());
  datagram += "]: ";
  datagram += message;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (syslog_fd < 0) syslog_fd = ConnectSyslog(syslog_path);
    if (syslog_fd >= 0 &&
        ::send(syslog_fd, datagram.data(), datagram.size(), MSG_NOSIGNAL | MSG_DONTWAIT) >= 0) {
      return true;
    }
    const int err = errno;
    if (syslog_fd >= 0) ::close(syslog_fd);
    syslog_fd = -1;
    errno = err;
  }
  return false;
}

void WriteLine(LogLevel level, const std::string& message);

// The syslog line `message` could not be delivered (`err`): from now on the daemon logs to
// the fallback file, which says why first. Lines are lost only when no such file can be
// opened. Call with syslog_mu held.
void LeaveSyslog(LogLevel level, const std::string& message, int err) {
  const std::string why =
      "syslog at " + syslog_path + " stopped answering (" + std::strerror(err) + ")";
  Status s = syslog_fallback.empty()
                 ? Status::InvalidArgument("no log file to fall back on")
                 : MakeDirs(syslog_fallback.substr(0, syslog_fallback.rfind('/')), 0700);
  if (s.ok()) s = OpenAppend(syslog_fallback, syslog_fallback, 0600);
  if (!s.ok()) return;  // nowhere left to write; syslog is tried again on the next line
  log_fd.store(log_file_fd, std::memory_order_release);
  destination.store(Destination::kFile, std::memory_order_release);
  WriteLine(LogLevel::kWarn, why + ": the daemon logs to " + syslog_fallback + " from now on");
  WriteLine(level, message);
}

// Writes one line to the log file or stderr, as the destination says.
void WriteLine(LogLevel level, const std::string& message) {
  char line[1200];
  int n;
  if (destination.load(std::memory_order_acquire) == Destination::kFile) {
    char stamp[32];
    std::time_t now = std::time(nullptr);
    std::tm tm;
    std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", ::gmtime_r(&now, &tm));
    n = std::snprintf(line, sizeof(line), "%sZ ckptfs[%d]: %s: %s\n", stamp, ::getpid(),
                      LevelName(level), message.c_str());
  } else {
    n = std::snprintf(line, sizeof(line), "ckptfs: %s\n", message.c_str());
  }
  if (n <= 0) return;
  size_t length = static_cast<size_t>(n);
  if (length >= sizeof(line)) {  // cut short, but still one whole line
    length = sizeof(line) - 1;
    line[length - 1] = '\n';
  }
  // One write(2) per line: lines from worker threads never interleave.
  (void)!::write(log_fd.load(std::memory_order_acquire), line, length);
}

void VLog(LogLevel level, const char* fmt, va_list args) {
  if (!LogEnabled(level)) return;
  char raw[1024];
  std::vsnprintf(raw, sizeof(raw), fmt, args);
  const std::string message = EscapeControlChars(raw);
  if (destination.load(std::memory_order_acquire) == Destination::kSyslog) {
    std::lock_guard<std::mutex> lock(syslog_mu);
    // Another thread may have left syslog meanwhile.
    if (destination.load(std::memory_order_acquire) == Destination::kSyslog) {
      if (!SendSyslog(level, message)) LeaveSyslog(level, message, errno);
      return;
    }
  }
  WriteLine(level, message);
}

}  // namespace

std::optional<LogLevel> ParseLogLevel(const std::string& name) {
  for (LogLevel level : {LogLevel::kError, LogLevel::kWarn, LogLevel::kInfo, LogLevel::kDebug}) {
    if (name == LevelName(level)) return level;
  }
  return std::nullopt;
}

void SetLogLevels(LogLevel terminal, LogLevel daemon_log) {
  threshold = terminal;
  daemon_threshold = daemon_log;
}

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) <= static_cast<int>(threshold.load(std::memory_order_relaxed));
}

namespace {

std::optional<std::string> Env(const char* name) {
  const char* value = ::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

// Opens `path` to append to, created with `mode`: one line naming `what` on failure.
Status OpenAppend(const std::string& what, const std::string& path, mode_t mode) {
  // O_NONBLOCK: a FIFO named as the log must not hang the mount; O_NOCTTY: nor a terminal
  // become the daemon's.
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, mode);
  if (fd < 0) {
    const int err = errno;
    return Status::InvalidArgument(what + ": cannot open the log file: " + std::strerror(err));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(what + ": not a regular file");
  }
  ::fcntl(fd, F_SETFL, O_APPEND);  // blocking again: a full disk must not drop lines
  if (log_file_fd >= 0) ::close(log_file_fd);
  log_file_fd = fd;
  log_file_path = path;
  return Status::Ok();
}

// mkdir -p with `mode` for each directory it creates; existing ones are left as they are.
Status MakeDirs(const std::string& dir, mode_t mode) {
  for (size_t slash = dir.find('/', 1);; slash = dir.find('/', slash + 1)) {
    const std::string prefix = dir.substr(0, slash);
    if (::mkdir(prefix.c_str(), mode) != 0 && errno != EEXIST) {
      const int err = errno;
      return Status::IoError(prefix + ": cannot create the log directory: " + std::strerror(err),
                             err);
    }
    if (slash == std::string::npos) return Status::Ok();
  }
}

}  // namespace

std::string SyslogSocket() {
  const std::optional<std::string> path = Env("CKPTFS_SYSLOG_SOCKET");
  return path && !path->empty() ? *path : kSyslogSocket;
}

Status OpenLogFile(const std::string& log_file) {
  return OpenAppend("--log-file " + log_file, log_file, 0644);
}

bool SyslogReachable(const std::string& socket_path) {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) return false;
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

std::string FallbackLogPath(uid_t uid, const std::optional<std::string>& home,
                            const std::optional<std::string>& xdg_state_home) {
  if (xdg_state_home && !xdg_state_home->empty() && (*xdg_state_home)[0] == '/') {
    return *xdg_state_home + "/ckptfs/ckptfs.log";
  }
  if (uid == 0) return "/var/log/ckptfs/ckptfs.log";
  if (home && !home->empty() && (*home)[0] == '/') return *home + "/.local/state/ckptfs/ckptfs.log";
  return "";
}

DaemonLogChoice ChooseDaemonLog(const DaemonLogInputs& in) {
  if (in.log_file_given) return {DaemonLogKind::kLogFile, ""};
  if (in.foreground) return {DaemonLogKind::kStderr, ""};
  if (in.syslog_reachable) return {DaemonLogKind::kSyslog, ""};
  return {DaemonLogKind::kFallbackFile, FallbackLogPath(in.uid, in.home, in.xdg_state_home)};
}

std::optional<std::string> DaemonLogFallback(bool foreground) {
  DaemonLogInputs in;
  in.foreground = foreground;
  // Probed only where it matters: a foreground daemon never uses syslog.
  in.syslog_reachable = foreground || SyslogReachable(SyslogSocket());
  in.uid = ::getuid();
  in.home = Env("HOME");
  in.xdg_state_home = Env("XDG_STATE_HOME");
  const DaemonLogChoice choice = ChooseDaemonLog(in);
  if (choice.kind != DaemonLogKind::kFallbackFile) return std::nullopt;
  return choice.path;
}

Status OpenFallbackLog(const std::string& path, const Status& usable) {
  fallback_reason = "no syslog at " + SyslogSocket();
  fallback_failed = true;
  if (path.empty()) {
    return Status::InvalidArgument(fallback_reason +
                                   ", and no HOME to keep a log file in: daemon log lines are "
                                   "lost (use --log-file)");
  }
  const size_t slash = path.rfind('/');
  Status s = usable;
  if (s.ok()) s = MakeDirs(path.substr(0, slash), 0700);
  if (s.ok()) s = OpenAppend(path, path, 0600);
  if (!s.ok()) {
    return Status::InvalidArgument(fallback_reason + ", and " + s.message() +
                                   ": daemon log lines are lost (use --log-file)");
  }
  fallback_failed = false;
  return Status::Ok();
}

void LogToDaemonDestination(bool keep_stderr, const std::string& mountpoint) {
  threshold = daemon_threshold;
  if (log_file_fd >= 0) {
    log_fd = log_file_fd;
    destination = Destination::kFile;
  } else if (!keep_stderr) {
    // Where the fallback file could not be opened at mount, syslog drops the lines; the
    // user was told so (OpenFallbackLog's line) before the daemon detached. Where syslog
    // answered then and goes later, the lines go to the fallback file (LeaveSyslog), unless
    // it lies in this mount, which would serve the daemon's own writes.
    std::lock_guard<std::mutex> lock(syslog_mu);
    syslog_path = SyslogSocket();
    syslog_fallback = FallbackLogPath(::getuid(), Env("HOME"), Env("XDG_STATE_HOME"));
    if (!mountpoint.empty() &&
        (syslog_fallback == mountpoint || syslog_fallback.starts_with(mountpoint + "/"))) {
      syslog_fallback.clear();
    }
    syslog_fd = ConnectSyslog(syslog_path);
    destination = Destination::kSyslog;
  }
}

std::string DaemonLogDescription(bool keep_stderr) {
  if (log_file_fd >= 0) {
    return fallback_reason.empty() ? log_file_path : log_file_path + " (" + fallback_reason + ")";
  }
  if (keep_stderr) return "stderr";
  if (fallback_failed) return "nowhere (" + fallback_reason + ", and no log file could be opened)";
  return "syslog (journalctl -t ckptfs)";
}

std::string FallbackLogNotice() {
  if (log_file_fd < 0 || fallback_reason.empty()) return "";
  // A container without syslog stays one: the same line on every mount would be noise.
  const std::string marker =
      log_file_path.substr(0, log_file_path.rfind('/') + 1) + kFallbackNotedFile;
  const int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0 && errno == EEXIST) return "";
  if (fd >= 0) ::close(fd);
  return "ckptfs: " + fallback_reason + ": the daemon logs to " +
         EscapeControlChars(log_file_path) + " (said once; mount -v names it every time)";
}

void LogError(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  VLog(LogLevel::kError, fmt, args);
  va_end(args);
}

void LogWarn(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  VLog(LogLevel::kWarn, fmt, args);
  va_end(args);
}

void LogInfo(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  VLog(LogLevel::kInfo, fmt, args);
  va_end(args);
}

void LogDebug(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  VLog(LogLevel::kDebug, fmt, args);
  va_end(args);
}

}  // namespace ckptfs
