// Logging for the front end. Core never logs; it returns a Status and fs/ decides.
// Before daemonizing lines go to stderr; the daemon sends them to syslog (journal).
#pragma once

namespace ckptfs {

void LogToSyslog(const char* ident);
void LogError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void LogInfo(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace ckptfs
