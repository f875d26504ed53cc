#include "fs/preflight.h"

#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ckptfs {
namespace {

// mountinfo escapes space, tab, newline and backslash in paths as \ooo.
std::string UnescapeMountField(const std::string& field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size() && field[i + 1] >= '0' && field[i + 1] <= '3') {
      out += static_cast<char>(std::strtol(field.substr(i + 1, 3).c_str(), nullptr, 8));
      i += 3;
    } else {
      out += field[i];
    }
  }
  return out;
}

// realpath(3) of the longest existing prefix of the absolute `path`, with the rest
// appended: where the path leads once symlinks are followed, even if it does not exist.
std::string ResolveExisting(const std::string& path) {
  std::filesystem::path rest;
  std::filesystem::path head = path;
  while (true) {
    char buf[PATH_MAX];
    if (::realpath(head.c_str(), buf) != nullptr) {
      // Not `buf / rest` when rest is empty: that would end in a '/'.
      if (rest.empty()) return buf;
      return (std::filesystem::path(buf) / rest).lexically_normal().string();
    }
    if (!head.has_relative_path()) return path;
    rest = rest.empty() ? head.filename() : head.filename() / rest;
    head = head.parent_path();
  }
}

bool IsSameOrInside(const std::string& path, const std::string& dir) {
  if (path == dir) return true;
  const std::string prefix = dir == "/" ? dir : dir + "/";
  return path.compare(0, prefix.size(), prefix) == 0;
}

enum class MountAnswer { kAnswers, kNotConnected, kNoAnswer };

// statx(2) of `path`, forced to ask the daemon, from a child process: a mount whose daemon hangs
// blocks it, and a child can be killed (a FUSE request waits killably) where this process could not
// get back. kNoAnswer when the child took longer than `timeout`.
MountAnswer ProbeMount(const std::string& path, std::chrono::milliseconds timeout) {
  const pid_t pid = ::fork();
  if (pid < 0) return MountAnswer::kNoAnswer;
  if (pid == 0) {
    // Forced to ask the daemon: stat(2) would answer from the root's cached attributes.
    struct statx stx;
    _exit(::statx(AT_FDCWD, path.c_str(), AT_STATX_FORCE_SYNC, STATX_BASIC_STATS, &stx) != 0 &&
                  errno == ENOTCONN
              ? 0
              : 1);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return MountAnswer::kNoAnswer;
    }
    ::usleep(5000);
  }
  if (!WIFEXITED(status)) return MountAnswer::kNoAnswer;
  return WEXITSTATUS(status) == 0 ? MountAnswer::kNotConnected : MountAnswer::kAnswers;
}

// "/home/alice (owner alice, mode 0700)": a directory as a refusal names it.
std::string DescribeDir(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return dir;
  char mode[8];
  std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
  const passwd* owner = ::getpwuid(st.st_uid);
  return dir + " (owner " + (owner ? std::string(owner->pw_name) : std::to_string(st.st_uid)) +
         ", mode " + mode + ")";
}

// The first directory on the way to the absolute `path` that this process may not search,
// or "" when none is: why opening `path` fails with EACCES.
std::string BlockingDir(const std::string& path) {
  for (size_t slash = 0; slash != std::string::npos; slash = path.find('/', slash + 1)) {
    const std::string dir = slash == 0 ? "/" : path.substr(0, slash);
    if (::access(dir.c_str(), X_OK) != 0 && errno == EACCES) return dir;
  }
  return "";
}

}  // namespace

std::string AbsolutePath(const std::string& path) {
  std::filesystem::path p = path;
  if (p.is_relative()) {
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof(cwd)) != nullptr) p = std::filesystem::path(cwd) / p;
  }
  std::string out = p.lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

std::optional<MountEntry> FindMount(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::optional<MountEntry> found;
  std::string line;
  while (std::getline(in, line)) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
    std::istringstream fields(line);
    std::string id, parent, dev, root, point, field;
    if (!(fields >> id >> parent >> dev >> root >> point)) continue;
    while (fields >> field && field != "-") {
    }
    std::string fstype;
    if (!(fields >> fstype)) continue;
    // Later lines are mounted later: the last match is the one on top.
    if (UnescapeMountField(point) == path) found = MountEntry{path, fstype};
  }
  return found;
}

std::string MountTablePath(const std::string& path) {
  std::string mountpoint = AbsolutePath(path);
  if (mountpoint == "/") return mountpoint;
  char parent[PATH_MAX];
  const size_t slash = mountpoint.rfind('/');
  if (::realpath(slash == 0 ? "/" : mountpoint.substr(0, slash).c_str(), parent) != nullptr) {
    mountpoint = (std::string(parent) == "/" ? "" : std::string(parent)) + mountpoint.substr(slash);
  }
  return mountpoint;
}

int RunFusermount(const std::string& mountpoint, bool lazy, std::string* err) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return 127;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 2);
    if (lazy) {
      ::execlp("fusermount3", "fusermount3", "-u", "-z", "--", mountpoint.c_str(),
               static_cast<char*>(nullptr));
    } else {
      ::execlp("fusermount3", "fusermount3", "-u", "--", mountpoint.c_str(),
               static_cast<char*>(nullptr));
    }
    _exit(127);
  }
  ::close(fds[1]);
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) != 0;) {
    if (n > 0 && err->size() < 4096) err->append(buf, static_cast<size_t>(n));
    if (n < 0 && errno != EINTR) break;
  }
  ::close(fds[0]);
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 1;
  return WEXITSTATUS(status);
}

Result<std::optional<std::string>> DetachDeadMount(const std::string& path) {
  const std::string mountpoint = MountTablePath(path);
  const std::optional<MountEntry> mount = FindMount(mountpoint);
  // Only our own: a lazy unmount of someone else's file system is never ours to do.
  if (!mount || mount->fstype != "fuse.ckptfs") return std::optional<std::string>();
  // Long enough for a loaded machine's live daemon to answer; a dead one answers at once.
  constexpr std::chrono::milliseconds kProbeTimeout{1000};
  if (ProbeMount(mountpoint, kProbeTimeout) != MountAnswer::kNotConnected) {
    return std::optional<std::string>();
  }
  int error = 0;
  std::string err;
  if (::geteuid() == 0) {
    if (::umount2(mountpoint.c_str(), MNT_DETACH) != 0) error = errno;
  } else if (RunFusermount(mountpoint, /*lazy=*/true, &err) != 0) {
    error = EPERM;
  }
  if (error != 0 && FindMount(mountpoint)) {
    while (!err.empty() && err.back() == '\n') err.pop_back();
    return Status::IoError(mountpoint +
                           ": a ckptfs mount whose daemon is gone, and it cannot be detached (" +
                           (err.empty() ? std::string(std::strerror(error)) : err) +
                           "); unmount it as its owner (ckptfs umount -z " + mountpoint + ")");
  }
  return std::optional<std::string>(
      mountpoint +
      ": a ckptfs mount whose daemon is gone (Transport endpoint is not connected): "
      "unmounted it lazily to mount again");
}

Result<std::string> CheckMountPoint(const std::string& path) {
  const std::string absolute = AbsolutePath(path);
  // From the mount table first: stat() of a mount whose daemon hangs would hang too.
  auto refuse_mounted = [](const std::string& where, const std::string& fstype) {
    return Status::InvalidArgument(where + ": already a mount point (" + fstype +
                                   "); unmount it first (ckptfs umount " + where + ")");
  };
  if (auto mounted = FindMount(absolute)) return refuse_mounted(absolute, mounted->fstype);
  struct stat st;
  if (::stat(absolute.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOTCONN) {
      return Status::InvalidArgument(absolute +
                                     ": a FUSE mount whose daemon is gone; unmount it first "
                                     "(ckptfs umount " +
                                     absolute + ")");
    }
    if (err == EACCES) {
      if (const std::string blocking = BlockingDir(absolute); !blocking.empty()) {
        return Status::InvalidArgument(absolute + ": mount point: permission denied: " +
                                       DescribeDir(blocking) + " does not let you in");
      }
    }
    return Status::InvalidArgument(absolute + ": mount point: " + std::strerror(err));
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(absolute + ": mount point is not a directory");
  }
  char buf[PATH_MAX];
  if (::realpath(absolute.c_str(), buf) == nullptr) {
    return Status::InvalidArgument(absolute + ": mount point: " + std::strerror(errno));
  }
  const std::string canonical = buf;
  if (auto mounted = FindMount(canonical)) return refuse_mounted(canonical, mounted->fstype);
  return canonical;
}

Status CheckFuseOptions(const std::vector<std::string>& options) {
  for (const std::string& option : options) {
    // libfuse drops a backslash and keeps the character after it: "r\w" means "rw".
    std::string plain;
    for (char c : option) {
      if (c != '\\') plain += c;
    }
    if (plain == "rw") {
      return Status::InvalidArgument("-o rw: ckptfs mounts are read-only");
    }
    if (!option.empty() && option.back() == '\\') {
      return Status::InvalidArgument("-o " + option +
                                     ": ends in a backslash, which would join it to the next "
                                     "option");
    }
  }
  return Status::Ok();
}

Status CheckOutsideMount(const std::string& option, const std::string& path,
                         const std::string& mountpoint) {
  if (IsSameOrInside(ResolveExisting(path), mountpoint)) {
    return Status::InvalidArgument(option + " " + path + ": inside the mount point " + mountpoint +
                                   "; choose a path outside it");
  }
  return Status::Ok();
}

Status CheckSourceOutsideMount(const std::string& source, const std::string& mountpoint) {
  const std::string real = ResolveExisting(source);
  if (real == mountpoint) {
    return Status::InvalidArgument(source + ": SOURCE is the mount point too; the mount would " +
                                   "hide the checkpoint it serves; mount it on an empty " +
                                   "directory outside SOURCE");
  }
  if (IsSameOrInside(mountpoint, real)) {
    return Status::InvalidArgument(mountpoint + ": mount point inside SOURCE " + source +
                                   "; the mount would show up inside the checkpoint it serves; " +
                                   "choose a mount point outside SOURCE");
  }
  if (IsSameOrInside(real, mountpoint)) {
    return Status::InvalidArgument(source + ": SOURCE inside the mount point " + mountpoint +
                                   "; the mount would hide the checkpoint it serves; choose a "
                                   "mount point outside SOURCE");
  }
  return Status::Ok();
}

Status CheckEmptyMountPoint(const std::string& mountpoint, bool allow_non_empty) {
  if (allow_non_empty) return Status::Ok();
  std::error_code ec;
  std::filesystem::directory_iterator it(mountpoint, ec);
  if (ec) return Status::Ok();
  // A few names say what it is; a huge directory is not read through for them.
  constexpr int kNamed = 3;
  std::string names;
  int count = 0;
  for (; it != std::filesystem::directory_iterator() && !ec && count <= kNamed;
       it.increment(ec), ++count) {
    if (count < kNamed) names += (names.empty() ? "" : ", ") + it->path().filename().string();
  }
  if (count == 0) return Status::Ok();
  return Status::InvalidArgument(mountpoint + ": mount point not empty (holds " + names +
                                 (count > kNamed ? ", ..." : "") +
                                 "); the mount would hide it; use an empty directory, or "
                                 "--allow-non-empty (-o allow_non_empty) to mount over it");
}

Status CheckSourceReachable(const std::string& source) {
  if (::access(source.c_str(), F_OK) == 0 || errno != EACCES) return Status::Ok();
  const std::string blocking = BlockingDir(source);
  if (blocking.empty()) return Status::Ok();
  return Status::InvalidArgument(source + ": permission denied: " + DescribeDir(blocking) +
                                 " does not let you in (no search permission); ask its owner, "
                                 "or copy SOURCE where you may read it");
}

Status CheckWritableDir(const std::string& option, const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    return Status::InvalidArgument(option + " " + dir + ": " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(option + " " + dir + ": not a directory");
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return Status::InvalidArgument(option + " " + dir + ": not writable: " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace ckptfs
