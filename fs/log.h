// Logging for the front end. Core never logs; it returns a Status and fs/ decides.
// Lines go to the terminal (stderr) until the daemon detaches; then to --log-file if
// given, else to syslog with ident "ckptfs" (the journal: journalctl -t ckptfs). Each
// destination has its threshold (SetLogLevels): the terminal's from -q/-v, the daemon
// log's from --log-level. Each call writes one whole line, safe from any thread: control
// characters in the message (a file name holding a newline) are escaped as \xNN.
//
// Lines never vanish: where nothing listens on /dev/log (containers, CI), glibc's syslog()
// drops every line without a word, so the daemon falls back (ChooseDaemonLog): a
// foreground daemon to stderr, a detached one to a file of its own (FallbackLogPath). And
// where syslog answers at mount but goes later, the daemon's lines go to that file from
// then on (LogToDaemonDestination).
#pragma once

#include <sys/types.h>

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
// The socket syslog(3) writes to.
inline constexpr char kSyslogSocket[] = "/dev/log";
// The socket the daemon's syslog lines go to: kSyslogSocket, or $CKPTFS_SYSLOG_SOCKET when
// set (the mount tests' own syslog, which they can take away).
std::string SyslogSocket();
// Whether a syslog daemon listens on `socket_path`: an AF_UNIX datagram socket connects to
// it. glibc's openlog/syslog try the same and silently drop every line when it fails.
bool SyslogReachable(const std::string& socket_path);

// Where the daemon's lines go, decided before it detaches.
enum class DaemonLogKind {
  kLogFile,       // --log-file
  kSyslog,        // syslog answers at kSyslogSocket
  kStderr,        // a foreground daemon (-f, the systemd unit's mode): its stderr is read
  kFallbackFile,  // a detached daemon without syslog: FallbackLogPath
};
struct DaemonLogInputs {
  bool log_file_given = false;
  bool foreground = false;
  bool syslog_reachable = true;
  uid_t uid = 0;
  std::optional<std::string> home;            // $HOME
  std::optional<std::string> xdg_state_home;  // $XDG_STATE_HOME
};
struct DaemonLogChoice {
  DaemonLogKind kind = DaemonLogKind::kSyslog;
  std::string path;  // kFallbackFile: the file; empty when no HOME can name one
};
// Pure: where the daemon logs, given the facts. A given --log-file wins; else a
// foreground daemon logs to stderr; else syslog when it answers; else FallbackLogPath.
DaemonLogChoice ChooseDaemonLog(const DaemonLogInputs& inputs);
// The file a detached daemon logs to without syslog: $XDG_STATE_HOME/ckptfs/ckptfs.log
// when that is set to an absolute path (the XDG base directory rules: a relative one is
// ignored), for root too, since someone set it on purpose (sudo clears it by default);
// else /var/log/ckptfs/ckptfs.log for root and $HOME/.local/state/ckptfs/ckptfs.log for
// others. Empty when none can be named (a user without an absolute HOME).
std::string FallbackLogPath(uid_t uid, const std::optional<std::string>& home,
                            const std::optional<std::string>& xdg_state_home);
// ChooseDaemonLog with this process's facts (no --log-file given): the path of the
// fallback file when there is to be one (possibly empty, see FallbackLogPath), else
// nullopt.
std::optional<std::string> DaemonLogFallback(bool foreground);
// Opens (appends to) the fallback file, as OpenLogFile does the --log-file and for the same
// reason, creating it 0600 and its ckptfs directory (and missing parents) 0700: a log may
// name the files of private checkpoints. `usable` is why the caller found `path` unfit
// (it lies inside the mount point), else Ok. Fails with one line naming the file, after
// which the daemon's lines are lost (DaemonLogDescription says so); the mount proceeds.
Status OpenFallbackLog(const std::string& path, const Status& usable = Status::Ok());

// Switches to the daemon's destination and threshold: the file OpenLogFile opened, else
// syslog, or with `keep_stderr` (a foreground daemon, whose stderr systemd or the user
// reads) stderr when no file was opened. Syslog lines are datagrams to SyslogSocket(); when
// one cannot be delivered, even on a fresh connection (journald stopped or restarted
// without its socket, /dev/log removed, its queue full), the daemon logs to
// FallbackLogPath for the rest of its life, starting with a line saying why; not when that
// file lies inside `mountpoint` (the mount would serve the daemon's own writes).
void LogToDaemonDestination(bool keep_stderr = false, const std::string& mountpoint = "");
// Where LogToDaemonDestination sends lines, for people: "syslog (journalctl -t ckptfs)",
// "stderr", the log file's path, or the fallback file's path with "(no syslog at
// /dev/log)", or "nowhere (...)" when not even the fallback file could be opened.
std::string DaemonLogDescription(bool keep_stderr);
// The one line a detached mount prints on stderr when its lines go to the fallback file
// ("ckptfs: no syslog at /dev/log: the daemon logs to PATH (said once; ...)"), so the user
// knows where to look; empty otherwise. Said once per fallback file, and so per user and
// machine: the first call creates the marker kFallbackNotedFile beside the file, and
// later calls (this process's or another's) find it and return empty. Where the marker
// cannot be created the line is said every time. `mount -v` names the file on every mount.
std::string FallbackLogNotice();
inline constexpr char kFallbackNotedFile[] = "no-syslog-noted";
void LogError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void LogWarn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void LogInfo(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void LogDebug(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace ckptfs
