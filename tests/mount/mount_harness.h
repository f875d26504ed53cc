// Shared harness of the mount tests (every tests/mount/*_test.cc): child processes
// under deadlines, mount bookkeeping from /proc, scratch directories, and the fixture
// that mounts the real ckptfs binary and runs the python checks. The servers of the
// remote tests (nginx, s3rver) are in remote_harness.h.
//
// Two rules keep a broken ckptfs from breaking the machine: every child process runs
// under a deadline (a hung FUSE daemon hangs whoever touches the mount, so the test
// process never touches it directly, only through children), and everything a test
// mounts is unmounted in TearDown, falling back to a lazy `fusermount3 -uz`.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfs::mount_test {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr char kCkptfs[] = CKPTFS_BIN;
constexpr char kSourceDir[] = CKPTFS_SOURCE_DIR;
// Debian's python, which has numpy; a python3 earlier on PATH may not (README, "Set up").
constexpr char kPython[] = "/usr/bin/python3";

constexpr milliseconds kGenerateTimeout = seconds(120);
constexpr milliseconds kCheckTimeout = seconds(120);
constexpr milliseconds kMountTimeout = seconds(30);
// A refusal must come within kRefusalBudget: well under anything that waits (a mount
// timeout, a network retry), yet loose enough for a loaded CI machine, where a refusal
// that takes ~50 ms here once took 1.09 s. kRefusalTimeout only bounds the wait.
constexpr milliseconds kRefusalBudget = seconds(3);
constexpr milliseconds kRefusalTimeout = seconds(5);
// How long a daemon may take to exit after its mount is gone.
constexpr milliseconds kDaemonExitTimeout = seconds(5);
constexpr milliseconds kVerifyTimeout = seconds(120);

// Frame size for the seekable and multi-frame test data: small enough that every
// shard of the mixed checkpoint (about 1 MiB each) has several frames, so reads cross
// frame boundaries.
constexpr char kFrameSize[] = "256K";
constexpr int kFrameBytes = 256 << 10;

// ---------------------------------------------------------------------------
// Child processes

struct ProcessResult {
  std::vector<std::string> argv;
  int exit_code = -1;  // -1 unless the process exited normally
  int term_signal = 0;
  bool timed_out = false;
  // A descendant (say a daemon) still held the stdout/stderr pipes after the process
  // exited; `ckptfs mount ... | cat` would then hang.
  bool left_pipes_open = false;
  milliseconds elapsed{0};
  // Bytes: the peak RSS of the process, or of a child it waited for if larger (wait4's
  // ru_maxrss); 0 if it timed out.
  uint64_t peak_rss = 0;
  std::string out;
  std::string err;

  std::string Describe() const;
};

inline std::string ProcessResult::Describe() const {
  std::ostringstream s;
  s << "`";
  for (size_t i = 0; i < argv.size(); ++i) s << (i ? " " : "") << argv[i];
  s << "` ";
  if (timed_out) {
    s << "timed out and was killed";
  } else if (term_signal != 0) {
    s << "was killed by signal " << term_signal;
  } else {
    s << "exited with " << exit_code;
  }
  s << " after " << elapsed.count() << " ms\n--- stdout ---\n"
    << out << "\n--- stderr ---\n"
    << err << "\n--------------";
  return s.str();
}

// Reads what is available without blocking; returns false once the pipe is at EOF
// (and closes it).
inline bool DrainPipe(int& fd, std::string& sink) {
  char buf[65536];
  while (fd >= 0) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      sink.append(buf, static_cast<size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      return true;
    } else {
      close(fd);
      fd = -1;
    }
  }
  return false;
}

[[noreturn]] inline void ExecChild(std::vector<char*>& args, int out_fd, int err_fd) {
  setpgid(0, 0);  // its own group, so a timeout kills the children it spawned too
  const int null_fd = open("/dev/null", O_RDONLY);
  dup2(null_fd, STDIN_FILENO);
  dup2(out_fd, STDOUT_FILENO);
  dup2(err_fd, STDERR_FILENO);
  execvp(args[0], args.data());
  dprintf(STDERR_FILENO, "exec %s: %s\n", args[0], strerror(errno));
  _exit(127);
}

// Runs argv (PATH is searched) with stdin from /dev/null, capturing its output, and
// kills its process group if it outlives `timeout`. Once the process exits, output
// is read for at most a short grace period: a daemon it left behind may hold the
// pipes forever.
inline ProcessResult RunProcess(std::vector<std::string> argv, milliseconds timeout) {
  constexpr milliseconds kPipeGrace = seconds(2);
  ProcessResult r;
  r.argv = argv;
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("pipe2: ") + strerror(errno));
  }
  const Clock::time_point start = Clock::now();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + strerror(errno));
  if (pid == 0) ExecChild(args, out_pipe[1], err_pipe[1]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  for (pollfd& p : fds) fcntl(p.fd, F_SETFL, O_NONBLOCK);

  int status = 0;
  bool exited = false;
  Clock::time_point exited_at;
  struct rusage usage = {};
  while (true) {
    if (!exited && wait4(pid, &status, WNOHANG, &usage) == pid) {
      exited = true;
      r.peak_rss = static_cast<uint64_t>(usage.ru_maxrss) << 10;
      exited_at = Clock::now();
      r.elapsed = std::chrono::duration_cast<milliseconds>(exited_at - start);
    }
    const bool out_open = DrainPipe(fds[0].fd, r.out);
    const bool err_open = DrainPipe(fds[1].fd, r.err);
    if (exited && !out_open && !err_open) break;
    if (exited && Clock::now() - exited_at > kPipeGrace) {
      r.left_pipes_open = true;
      break;
    }
    if (!exited && Clock::now() - start > timeout) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      r.timed_out = true;
      r.elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
      break;
    }
    poll(fds, 2, 10);  // also the exit-polling interval: keeps `elapsed` within ~10 ms
  }
  for (pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  if (!r.timed_out && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (!r.timed_out && WIFSIGNALED(status)) r.term_signal = WTERMSIG(status);
  return r;
}

// A ckptfs subcommand that is not mount, under a deadline.
inline ProcessResult Ckptfs(std::vector<std::string> args, milliseconds timeout) {
  args.insert(args.begin(), kCkptfs);
  return RunProcess(args, timeout);
}

inline int LineCount(const std::string& text) {
  const auto newlines = static_cast<int>(std::count(text.begin(), text.end(), '\n'));
  return newlines + (!text.empty() && text.back() != '\n' ? 1 : 0);
}

// ---------------------------------------------------------------------------
// Mounts and processes, learnt from /proc so a hung mount is never touched

// /proc/mounts escapes space, tab, newline and backslash as \ooo.
inline std::string UnescapeMountField(std::string_view field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      out += static_cast<char>(std::stoi(std::string(field.substr(i + 1, 3)), nullptr, 8));
      i += 3;
    } else {
      out += field[i];
    }
  }
  return out;
}

inline std::vector<std::string> MountPoints() {
  std::vector<std::string> points;
  std::ifstream mounts("/proc/mounts");
  std::string device, point, rest;
  while (mounts >> device >> point && std::getline(mounts, rest)) {
    points.push_back(UnescapeMountField(point));
  }
  return points;
}

inline bool IsMounted(const std::string& path) {
  const std::vector<std::string> points = MountPoints();
  return std::find(points.begin(), points.end(), path) != points.end();
}

// Processes with `arg` among their arguments: a ckptfs daemon serving `arg` as its
// mount point.
inline std::vector<pid_t> ProcessesWithArg(const std::string& arg) {
  std::vector<pid_t> pids;
  for (const fs::directory_entry& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmdline(entry.path() / "cmdline");
    std::string a;
    while (std::getline(cmdline, a, '\0')) {
      if (a == arg) {
        pids.push_back(std::stoi(name));
        break;
      }
    }
  }
  return pids;
}

// Polls until no process names `mountpoint` or the timeout passes.
inline bool WaitForNoDaemon(const std::string& mountpoint, milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  while (!ProcessesWithArg(mountpoint).empty()) {
    if (Clock::now() > deadline) return false;
    usleep(20000);
  }
  return true;
}

// Takes a mount down however it can: ckptfs's own command, then a lazy unmount that
// succeeds even while the mount is busy or its daemon hung. Returns whether it is gone.
// The one daemon serving `mountpoint`, or -1.
inline pid_t DaemonOf(const std::string& mountpoint) {
  const std::vector<pid_t> pids = ProcessesWithArg(mountpoint);
  return pids.size() == 1 ? pids[0] : -1;
}

// A size field of /proc/PID/status ("VmRSS:", "VmHWM:") in bytes; 0 if unreadable.
inline uint64_t ProcStatusBytes(pid_t pid, std::string_view field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field, 0) == 0) return std::stoull(line.substr(field.size())) << 10;
  }
  return 0;
}

inline bool ForceUnmount(const std::string& mountpoint) {
  const std::vector<std::vector<std::string>> attempts = {
      {kCkptfs, "umount", mountpoint},
      {"fusermount3", "-uz", mountpoint},
      {"umount", "-l", mountpoint},
  };
  for (const std::vector<std::string>& attempt : attempts) {
    if (!IsMounted(mountpoint)) return true;
    RunProcess(attempt, kMountTimeout);
  }
  return !IsMounted(mountpoint);
}

// Whether a syslog daemon answers on /dev/log: fs/log.cc's probe, repeated here since the
// mount tests run the binary and link none of it. Where none does, a detached daemon logs
// to a file of its own and a mount says so in one line (LogNotice).
inline bool SyslogAnswers() {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, "/dev/log");
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool ok = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

// "" if /dev/fuse can be opened, else why not.
inline std::string FuseUnavailableReason() {
  const int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fd < 0) return strerror(errno);
  close(fd);
  return "";
}

// ---------------------------------------------------------------------------
// Scratch directories

// A fresh directory under $TMPDIR, removed with its contents on destruction, after
// unmounting anything still mounted inside it (removal must never walk into a mount).
class TempDir {
 public:
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "ckptfs_mount_test.XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr) {
      throw std::runtime_error("mkdtemp " + templ + ": " + strerror(errno));
    }
    // Canonical, so it matches /proc/mounts; resolved now, before anything is mounted.
    path_ = fs::canonical(templ).string();
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    bool clean = true;
    for (const std::string& point : MountPoints()) {
      if (point.rfind(path_ + "/", 0) == 0) clean = ForceUnmount(point) && clean;
    }
    std::error_code ignored;
    if (clean) fs::remove_all(path_, ignored);
  }

  const std::string& path() const { return path_; }
  std::string Path(const std::string& name) const { return path_ + "/" + name; }
  std::string MakeDir(const std::string& name) const {
    fs::create_directories(Path(name));
    return Path(name);
  }

 private:
  std::string path_;
};

// Whether /usr/bin/python3 has torch (the writers of torch and DeepSpeed test files need it).
inline bool HasTorch() {
  return std::system("/usr/bin/python3 -c 'import torch' 2>/dev/null") == 0;
}

inline std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline std::string ScriptPath(const std::string& relative) {
  return std::string(kSourceDir) + "/" + relative;
}

// Writes a checkpoint with scripts/make_checkpoint.py; returns "" or what went wrong.
inline std::string GenerateCheckpoint(const std::string& out_dir, std::vector<std::string> args) {
  args.insert(args.begin(), {kPython, ScriptPath("scripts/make_checkpoint.py"), out_dir});
  const ProcessResult r = RunProcess(args, kGenerateTimeout);
  return r.exit_code == 0 ? "" : "generating a checkpoint failed: " + r.Describe();
}

// docs/formats.md ("Bad input"): a refusal exits 2 with one line on stderr naming the file and the
// problem. Refusals here need only headers (or nothing) read, so they must be quick.
inline void ExpectRefusal(const ProcessResult& r, const std::vector<std::string>& names_any_of) {
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_LE(r.elapsed, kRefusalBudget) << r.Describe();
  EXPECT_EQ(LineCount(r.err), 1) << "expected one line on stderr; " << r.Describe();
  if (names_any_of.empty()) return;
  const bool named = std::any_of(names_any_of.begin(), names_any_of.end(),
                                 [&](auto& name) { return r.err.find(name) != std::string::npos; });
  std::string wanted;
  for (const std::string& name : names_any_of) wanted += (wanted.empty() ? "" : " or ") + name;
  EXPECT_TRUE(named) << "stderr should name " << wanted << "; " << r.Describe();
}

// ---------------------------------------------------------------------------
// Fixtures

// Skips without /dev/fuse, gives each test a scratch directory, and unmounts whatever
// the test mounted, pass or fail.
// The tensors/ path (below a mount) of the first tensor, by name, that the index of the
// safetensors checkpoint `source` puts in `shard`.
inline std::string TensorFileIn(const std::string& source, const std::string& shard) {
  const ProcessResult r = RunProcess(
      {kPython, "-c",
       "import json, sys\n"
       "m = json.load(open(sys.argv[1]))['weight_map']\n"
       "print('tensors/' + '/'.join(sorted(n for n, s in m.items() if s == sys.argv[2])[0]"
       ".split('.')) + '.npy')",
       source + "/model.safetensors.index.json", shard},
      kCheckTimeout);
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  std::string path = r.out;
  while (!path.empty() && path.back() == '\n') path.pop_back();
  return path;
}

class MountFixture : public testing::Test {
 protected:
  void SetUp() override {
    const std::string fuse_error = FuseUnavailableReason();
    if (!fuse_error.empty()) {
      GTEST_SKIP() << "/dev/fuse cannot be opened (" << fuse_error << "): mount tests need FUSE";
    }
    scratch_ = std::make_unique<TempDir>();
    // Sidecars of zip CRCs (core/crc) go under XDG_CACHE_HOME: in the scratch directory,
    // so no test leaves files in the machine's ~/.cache or /var/cache.
    ::setenv("XDG_CACHE_HOME", scratch_->MakeDir("xdg-cache").c_str(), 1);
    // Likewise the daemon's log where no syslog answers (fs/log.h): not /var/log/ckptfs.
    ::setenv("XDG_STATE_HOME", scratch_->MakeDir("xdg-state").c_str(), 1);
  }

  // What a test's first quiet detached mount (no -v, -q or --log-file) prints: nothing,
  // or where no syslog answers the one line naming the daemon's fallback log file (said
  // once per XDG_STATE_HOME, which is the test's own; later mounts print nothing).
  std::string LogNotice() const {
    if (SyslogAnswers()) return "";
    return "ckptfs: no syslog at /dev/log: the daemon logs to " + scratch_->Path("xdg-state") +
           "/ckptfs/ckptfs.log (said once; mount -v names it every time)\n";
  }

  void TearDown() override {
    for (const std::string& mountpoint : mounts_) {
      EXPECT_TRUE(ForceUnmount(mountpoint)) << mountpoint << " could not be unmounted";
    }
    scratch_.reset();
  }

  void Generate(const std::string& out_dir, const std::vector<std::string>& args = {}) {
    const std::string error = GenerateCheckpoint(out_dir, args);
    ASSERT_EQ(error, "");
  }

  // Mounts source on mountpoint and fails the test unless ckptfs reports success and
  // the mount is listed in /proc/mounts.
  void Mount(const std::string& source, const std::string& mountpoint,
             ProcessResult* result = nullptr, const std::vector<std::string>& options = {}) {
    mounts_.push_back(mountpoint);  // registered first: even a "failed" mount is cleaned
    std::vector<std::string> argv = {kCkptfs, "mount"};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.insert(argv.end(), {source, mountpoint});
    const ProcessResult r = RunProcess(argv, kMountTimeout);
    if (result != nullptr) *result = r;
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
    ASSERT_TRUE(IsMounted(mountpoint))
        << "ckptfs mount exited 0 but " << mountpoint << " is not in /proc/mounts";
  }

  // Runs tests/mount/<script> and fails the test unless it exits 0. Its one-line
  // summary (or its list of mismatches) goes to the test log either way. Returns
  // whether it passed.
  bool RunCheck(const std::string& script, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {kPython, ScriptPath("tests/mount/" + script)};
    argv.insert(argv.end(), args.begin(), args.end());
    const ProcessResult r = RunProcess(argv, kCheckTimeout);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    if (r.exit_code == 0) std::cout << r.out;
    return r.exit_code == 0;
  }

  std::unique_ptr<TempDir> scratch_;
  std::vector<std::string> mounts_;
};

// A gtest parameter name from a case's `name` field: test names allow only [A-Za-z0-9_],
// and case names use '-'.
template <typename Case>
std::string CaseName(const testing::TestParamInfo<Case>& param) {
  std::string name = param.param.name;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

// The checks every mounted checkpoint must pass; each takes SRC MNT.
const char* const kMountChecks[] = {
    "check_root.py",   "check_npy.py",    "check_names.py",        "check_xattrs.py",
    "check_merged.py", "check_shards.py", "check_random_reads.py",
};

}  // namespace ckptfs::mount_test
