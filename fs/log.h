// Logging for the front end. Core never logs; it returns a Status and fs/ decides.
// Lines go to stderr until the daemon detaches; then to --log-file if given, else to
// syslog (the journal). Each call writes one whole line, safe from any thread: control
// characters in the message (a file name holding a newline) are escaped as \xNN.
#pragma once

#include <string>

#include "core/status.h"

namespace ckptfs {

// Opens (creates, appends to) the --log-file the daemon will log to, before anything is
// mounted: a log inside the mount point would otherwise be opened through the mount
// before it serves, and hang. Lines still go to stderr until LogToDaemonDestination.
// Fails with one line naming the file.
Status OpenLogFile(const std::string& log_file);
// Switches to the daemon's destination: the file OpenLogFile opened, else syslog.
void LogToDaemonDestination();
void LogError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void LogInfo(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace ckptfs
