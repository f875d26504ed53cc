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

void VLog(int priority, const char* fmt, va_list args) {
  char raw[1024];
  std::vsnprintf(raw, sizeof(raw), fmt, args);
  const std::string message = EscapeControlChars(raw);
  if (destination.load(std::memory_order_relaxed) == Destination::kSyslog) {
    syslog(priority, "%s", message.c_str());
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
                      priority == LOG_ERR ? "error" : "info", message.c_str());
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
  return Status::Ok();
}

void LogToDaemonDestination() {
  if (log_file_fd < 0) {
    openlog("ckptfs", LOG_PID, LOG_DAEMON);
    destination = Destination::kSyslog;
    return;
  }
  log_fd = log_file_fd;
  destination = Destination::kFile;
}

void LogError(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  VLog(LOG_ERR, fmt, args);
  va_end(args);
}

void LogInfo(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  VLog(LOG_INFO, fmt, args);
  va_end(args);
}

}  // namespace ckptfs
