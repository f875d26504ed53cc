// Logging for the front end. Core never logs; it returns a Status and fs/ decides.
// Lines go to the terminal (stderr) until the daemon detaches; then to --log-file if
// given, else to syslog with ident "ckptfs" (the journal: journalctl -t ckptfs). Each
// destination has its threshold (SetLogLevels): the terminal's from -q/-v, the daemon
// log's from --log-level. Each call writes one whole line, safe from any thread: control
// characters in the message (a file name holding a newline) are escaped as \xNN.
#pragma once

#include <optional>
#include <string>

#include "core/status.h"

namespace ckptfs {

// Lines of a level are written where the threshold is that level or above.
enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// "error", "warn", "info", "debug"; nullopt for anything else.
std::optional<LogLevel> ParseLogLevel(const std::string& name);
// Thresholds of the terminal (before the daemon detaches; default kWarn) and of the daemon
// log (default kWarn). Set once, before any thread logs.
void SetLogLevels(LogLevel terminal, LogLevel daemon_log);
// Whether a line of `level` would be written now.
bool LogEnabled(LogLevel level);

// Opens (creates, appends to) the --log-file the daemon will log to, before anything is
// mounted: a log inside the mount point would otherwise be opened through the mount
// before it serves, and hang. Lines still go to stderr until LogToDaemonDestination.
// Fails with one line naming the file.
Status OpenLogFile(const std::string& log_file);
// Switches to the daemon's destination and threshold: the file OpenLogFile opened, else
// syslog, or with `keep_stderr` (a foreground daemon, whose stderr systemd or the user
// reads) stderr when no file was opened.
void LogToDaemonDestination(bool keep_stderr = false);
// Where LogToDaemonDestination sends lines, for people: "syslog (journalctl -t ckptfs)",
// "stderr" or the log file's path.
std::string DaemonLogDescription(bool keep_stderr);
void LogError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void LogWarn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void LogInfo(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void LogDebug(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace ckptfs
