// Logging for the front end. Core never logs; it returns a Status and fs/ decides.
// Lines go to stderr until the daemon detaches; then to --log-file if given, else to
// syslog (the journal). Each call writes one whole line, safe from any thread.
#pragma once

#include <string>

namespace ckptfs {

// Switches to the daemon's destination. Returns false (and keeps stderr) if `log_file`
// is given but cannot be opened.
bool LogToDaemonDestination(const std::string& log_file);
void LogError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void LogInfo(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace ckptfs
