#include "fs/log.h"

#include <fcntl.h>
#include <syslog.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <ctime>

namespace ckptfs {
namespace {

enum class Destination { kStderr, kSyslog, kFile };
std::atomic<Destination> destination{Destination::kStderr};
int log_fd = 2;

void VLog(int priority, const char* fmt, va_list args) {
  if (destination.load(std::memory_order_relaxed) == Destination::kSyslog) {
    vsyslog(priority, fmt, args);
    return;
  }
  char message[1024];
  std::vsnprintf(message, sizeof(message), fmt, args);
  char line[1200];
  int n;
  if (destination.load(std::memory_order_relaxed) == Destination::kFile) {
    char stamp[32];
    std::time_t now = std::time(nullptr);
    std::tm tm;
    std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", ::gmtime_r(&now, &tm));
    n = std::snprintf(line, sizeof(line), "%sZ ckptfs[%d] %s: %s\n", stamp, ::getpid(),
                      priority == LOG_ERR ? "error" : "info", message);
  } else {
    n = std::snprintf(line, sizeof(line), "ckptfs: %s\n", message);
  }
  // One write(2) per line: lines from worker threads never interleave.
  if (n > 0) (void)!::write(log_fd, line, std::min(static_cast<size_t>(n), sizeof(line) - 1));
}

}  // namespace

bool LogToDaemonDestination(const std::string& log_file) {
  if (log_file.empty()) {
    openlog("ckptfs", LOG_PID, LOG_DAEMON);
    destination = Destination::kSyslog;
    return true;
  }
  int fd = ::open(log_file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  log_fd = fd;
  destination = Destination::kFile;
  return true;
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
