#include "fs/log.h"

#include <syslog.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>

namespace ckptfs {
namespace {

std::atomic<bool> use_syslog{false};

void VLog(int priority, const char* fmt, va_list args) {
  if (use_syslog.load(std::memory_order_relaxed)) {
    vsyslog(priority, fmt, args);
    return;
  }
  // One fprintf per line so lines from worker threads do not interleave.
  char line[1024];
  std::vsnprintf(line, sizeof(line), fmt, args);
  std::fprintf(stderr, "ckptfs: %s\n", line);
}

}  // namespace

void LogToSyslog(const char* ident) {
  openlog(ident, LOG_PID, LOG_DAEMON);
  use_syslog = true;
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
