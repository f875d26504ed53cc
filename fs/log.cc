#include "fs/log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace ckptfs {
namespace {

enum class Destination { kStderr, kSyslog, kFile };
std::atomic<Destination> destination{Destination::kStderr};
int log_fd = 2;
int log_file_fd = -1;  // from OpenLogFile, used once the daemon detaches
std::string log_file_path;
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

void VLog(LogLevel level, const char* fmt, va_list args) {
  if (!LogEnabled(level)) return;
  char raw[1024];
  std::vsnprintf(raw, sizeof(raw), fmt, args);
  const std::string message = EscapeControlChars(raw);
  if (destination.load(std::memory_order_relaxed) == Destination::kSyslog) {
    syslog(SyslogPriority(level), "%s", message.c_str());
    return;
  }
  char line[1200];
  int n;
  if (destination.load(std::memory_order_relaxed) == Destination::kFile) {
    char stamp[32];
    std::time_t now = std::time(nullptr);
    std::tm tm;
    std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", ::gmtime_r(&now, &tm));
    n = std::snprintf(line, sizeof(line), "%sZ ckptfs[%d] %s: %s\n", stamp, ::getpid(),
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
  (void)!::write(log_fd, line, length);
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

Status OpenLogFile(const std::string& log_file) {
  // O_NONBLOCK: a FIFO named as the log must not hang the mount; O_NOCTTY: nor a terminal
  // become the daemon's.
  const int fd = ::open(log_file.c_str(),
                        O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0644);
  if (fd < 0) {
    const int err = errno;
    return Status::InvalidArgument("--log-file " + log_file +
                                   ": cannot open the log file: " + std::strerror(err));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument("--log-file " + log_file + ": not a regular file");
  }
  ::fcntl(fd, F_SETFL, O_APPEND);  // blocking again: a full disk must not drop lines
  if (log_file_fd >= 0) ::close(log_file_fd);
  log_file_fd = fd;
  log_file_path = log_file;
  return Status::Ok();
}

void LogToDaemonDestination(bool keep_stderr) {
  threshold = daemon_threshold;
  if (log_file_fd >= 0) {
    log_fd = log_file_fd;
    destination = Destination::kFile;
  } else if (!keep_stderr) {
    openlog("ckptfs", LOG_PID, LOG_DAEMON);
    destination = Destination::kSyslog;
  }
}

std::string DaemonLogDescription(bool keep_stderr) {
  if (log_file_fd >= 0) return log_file_path;
  return keep_stderr ? "stderr" : "syslog (journalctl -t ckptfs)";
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
