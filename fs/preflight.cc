#include "fs/preflight.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
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
