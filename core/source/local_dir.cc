#include "core/source/local_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/transient.h"

namespace ckptfs {
namespace {

constexpr const char* kHubRepoPrefixes[] = {"models--", "datasets--", "spaces--"};

// Closes a descriptor on every path out of a scope.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

std::string ProcFdPath(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

// The real path of what `fd` refers to, as the kernel resolved it.
Result<std::string> RealPathOf(int fd) {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink(ProcFdPath(fd).c_str(), buf, sizeof buf);
  if (n < 0 || static_cast<size_t>(n) >= sizeof buf) {
    const int err = n < 0 ? errno : ENAMETOOLONG;
    return Status::IoError("cannot read " + ProcFdPath(fd) + ": " + std::strerror(err), err);
  }
  return std::string(buf, static_cast<size_t>(n));
}

std::string_view BaseName(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string_view DirName(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos || slash == 0 ? std::string_view("/")
                                                       : path.substr(0, slash);
}

// For `.../models--ORG--NAME/snapshots/REV`, the real path of `.../models--ORG--NAME/blobs`.
std::string HubBlobsFor(const std::string& real) {
  const std::string_view snapshots = DirName(real);
  if (BaseName(snapshots) != "snapshots") return "";
  const std::string_view repo = DirName(snapshots);
  const std::string_view repo_name = BaseName(repo);
  const bool hub = std::any_of(std::begin(kHubRepoPrefixes), std::end(kHubRepoPrefixes),
                               [&](const char* p) { return repo_name.starts_with(p); });
  if (!hub) return "";
  // The repo's own blobs/ directory only (`real` has no links, so neither has `repo`): a
  // blobs/ that is itself a link, to `/` or another repo, would let whatever it points
  // at count as inside SOURCE.
  const std::string blobs = std::string(repo) + "/blobs";
  struct stat st;
  if (::lstat(blobs.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return "";
  char buf[PATH_MAX];
  if (::realpath(blobs.c_str(), buf) == nullptr || blobs != buf) return "";
  return blobs;
}

// The permission bits the directories from `top` down to `dir` (real paths, `dir` at or
// beneath `top`, both included) let a file beneath them show, as the kernel would allow a
// path through them: group and other keep r-x only if every one of these directories
// lets that class search it (x). A directory of another group lets the mount's group
// only what it lets others, as LocalFileSource::Mode counts a file's group. The owner
// class, the mounting user, got there: always r-x. A directory that cannot be stat'ed
// leaves the owner only.
uint32_t ReachThrough(const std::string& top, std::string_view dir) {
  uint32_t reach = 0555;
  std::string at = top;
  std::string_view rest = dir.substr(std::min(top.size(), dir.size()));
  while (true) {
    struct stat st;
    if (::lstat(at.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return 0500;
    const bool other = (st.st_mode & S_IXOTH) != 0;
    const bool group = (st.st_mode & S_IXGRP) != 0 && (st.st_gid == ::getgid() || other);
    if (!other) reach &= ~05u;
    if (!group) reach &= ~050u;
    while (!rest.empty() && rest.front() == '/') rest.remove_prefix(1);
    if (rest.empty()) return reach;
    const size_t slash = rest.find('/');
    const std::string_view component = rest.substr(0, slash);
    if (!at.ends_with('/')) at += '/';
    at += component;
    rest.remove_prefix(component.size());
  }
}

const char* TypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

// Whether real path `real` lies beneath directory `dir` (never when `dir` is empty).
bool Under(const std::string& real, const std::string& dir) {
  if (dir.empty()) return false;
  if (dir == "/") return true;
  return real.size() > dir.size() && real.compare(0, dir.size(), dir) == 0 &&
         real[dir.size()] == '/';
}

bool IsPlainName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string_view("/\0", 2)) == std::string::npos;
}

}  // namespace

Result<std::shared_ptr<const LocalDirectory>> LocalDirectory::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound(path + ": no such file or directory");
    if (err == ENOTDIR) return Status::InvalidArgument(path + ": not a directory");
    return Status::IoError(path + ": cannot open directory: " + std::strerror(err), err);
  }
  FdCloser closer(fd);
  auto real = RealPathOf(fd);
  if (!real.ok()) return Status::IoError(path + ": " + real.status().message());
  std::string blobs = HubBlobsFor(*real);
  std::string boundary = *real;
  return std::shared_ptr<const LocalDirectory>(new LocalDirectory(
      closer.release(), path, std::move(real).value(), std::move(boundary), std::move(blobs)));
}

LocalDirectory::~LocalDirectory() { ::close(fd_); }

bool LocalDirectory::Inside(const std::string& real) const {
  return Under(real, boundary_) || Under(real, blobs_);
}

uint32_t LocalDirectory::Reach(const std::string& real) const {
  for (const std::string* top : {&boundary_, &blobs_}) {
    if (!top->empty() && Under(real, *top)) return ReachThrough(*top, DirName(real));
  }
  return 0500u;
}

uint32_t LocalDirectory::DirectoryReach() const {
  for (const std::string* top : {&boundary_, &blobs_}) {
    if (!top->empty() && (real_ == *top || Under(real_, *top))) return ReachThrough(*top, real_);
  }
  return 0500u;
}

Status LocalDirectory::Resolve(const std::string& name, Resolved* out) const {
  if (!IsPlainName(name)) return Status::InvalidArgument(name + ": not a file name in " + path_);
  // O_PATH resolves without opening the file for I/O: a FIFO cannot block and a device
  // driver never sees an open.
  open_how how = {};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  int f = static_cast<int>(::syscall(SYS_openat2, fd_, name.c_str(), &how, sizeof how));
  out->inside = f >= 0;
  if (f < 0) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound(name + ": no such file");
    // ELOOP here is also a /proc magic link (RESOLVE_NO_MAGICLINKS): never inside SOURCE.
    if (err == ELOOP) {
      return Status::InvalidArgument(name + ": too many levels of symbolic links, or a /proc link");
    }
    // EXDEV: an absolute link or a `..` left the directory on the way; ENOSYS: a
    // kernel before 5.6; EAGAIN: a rename raced. Resolve freely, then check where it led.
    if (err != EXDEV && err != ENOSYS && err != EAGAIN) {
      return Status::IoError(name + ": cannot open: " + std::strerror(err), err);
    }
    f = ::openat(fd_, name.c_str(), O_PATH | O_CLOEXEC);
    if (f < 0) {
      const int err2 = errno;
      if (err2 == ENOENT) return Status::NotFound(name + ": no such file (a dangling link)");
      if (err2 == ELOOP) {
        return Status::InvalidArgument(name + ": too many levels of symbolic links");
      }
      return Status::IoError(name + ": cannot open: " + std::strerror(err2), err2);
    }
  }
  FdCloser closer(f);
  if (!out->inside) {
    auto where = RealPathOf(f);
    if (!where.ok()) return Status::IoError(name + ": " + where.status().message());
    out->inside = Inside(*where);
    out->real = std::move(where).value();
  }
  struct stat st;
  if (::fstat(f, &st) != 0) {
    const int err = errno;
    return Status::IoError(name + ": cannot stat: " + std::strerror(err), err);
  }
  out->type = st.st_mode & S_IFMT;
  out->fd = closer.release();
  return Status::Ok();
}

Result<LocalDirectory::Listing> LocalDirectory::List() const {
  const int list_fd = ::openat(fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = list_fd < 0 ? nullptr : ::fdopendir(list_fd);
  if (!d) {
    const int err = errno;
    if (list_fd >= 0) ::close(list_fd);
    return Status::IoError(path_ + ": cannot list directory: " + std::strerror(err), err);
  }
  Listing listing;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    Resolved r;
    // An entry that cannot be resolved (dangling link, loop) is not part of a checkpoint;
    // a run's listing says why it left it out. One that could not be resolved *now* (out
    // of descriptors: EMFILE, ENFILE; out of memory) may well be there: the listing fails,
    // rather than tell its caller the file is missing.
    if (Status resolved = Resolve(name, &r); !resolved.ok()) {
      if (IsTransient(resolved)) {
        ::closedir(d);
        return Status::IoError(path_ + ": cannot list directory: " + resolved.message(),
                               resolved.errno_value());
      }
      listing.unresolved.push_back(resolved.message());
      continue;
    }
    ::close(r.fd);
    if (S_ISREG(r.type)) (r.inside ? listing.files : listing.outside).push_back(name);
    if (S_ISDIR(r.type)) (r.inside ? listing.dirs : listing.outside_dirs).push_back(name);
  }
  ::closedir(d);
  std::sort(listing.files.begin(), listing.files.end());
  std::sort(listing.outside.begin(), listing.outside.end());
  std::sort(listing.dirs.begin(), listing.dirs.end());
  std::sort(listing.outside_dirs.begin(), listing.outside_dirs.end());
  return listing;
}

Status LocalDirectory::LeadsOutside(const std::string& name, const Resolved& r) const {
  return Status::InvalidArgument(name + ": symbolic link leads outside " + path_ + " (to " +
                                 r.real + "), not served");
}

Result<struct stat> LocalDirectory::Stat(const std::string& name) const {
  Resolved r;
  CKPTFS_RETURN_IF_ERROR(Resolve(name, &r));
  FdCloser closer(r.fd);
  if (!r.inside) return LeadsOutside(name, r);
  struct stat st;
  if (::fstat(r.fd, &st) != 0) {
    const int err = errno;
    return Status::IoError(name + ": cannot stat: " + std::strerror(err), err);
  }
  return st;
}

Result<std::shared_ptr<const LocalDirectory>> LocalDirectory::OpenSubdirectory(
    const std::string& name) const {
  Resolved r;
  CKPTFS_RETURN_IF_ERROR(Resolve(name, &r));
  FdCloser closer(r.fd);
  if (!r.inside) return LeadsOutside(name, r);
  if (!S_ISDIR(r.type)) {
    return Status::InvalidArgument(name + ": " + TypeName(r.type) + ", not a directory");
  }
  auto real = RealPathOf(r.fd);
  if (!real.ok()) return Status::IoError(name + ": " + real.status().message());
  return std::shared_ptr<const LocalDirectory>(
      new LocalDirectory(closer.release(), path_ + (path_.ends_with('/') ? "" : "/") + name,
                         std::move(real).value(), boundary_, blobs_));
}

Result<std::unique_ptr<LocalFileSource>> LocalDirectory::OpenFile(const std::string& name) const {
  Resolved r;
  CKPTFS_RETURN_IF_ERROR(Resolve(name, &r));
  FdCloser closer(r.fd);
  const int path_fd = r.fd;
  if (!r.inside) return LeadsOutside(name, r);
  if (!S_ISREG(r.type)) {
    return Status::InvalidArgument(name + ": " + TypeName(r.type) + ", not served");
  }
  // Who may read it is decided by the directories of its real path (a link's target's,
  // a hub blob's), from SOURCE's or the blobs/ directory down.
  auto real = r.real.empty() ? RealPathOf(path_fd) : Result<std::string>(r.real);
  if (!real.ok()) return Status::IoError(name + ": " + real.status().message());
  const uint32_t reach = Reach(*real);
  // Reopening the O_PATH descriptor opens exactly the inode just checked.
  const int fd = ::open(ProcFdPath(path_fd).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    return Status::IoError(name + ": cannot open: " + std::strerror(err), err);
  }
  // The path is for Identity() (caches kept across mounts) only: reads check the held
  // descriptor, so the file keeps serving its bytes whatever later happens to the name.
  return LocalFileSource::Adopt(fd, real_ + (real_ == "/" ? "" : "/") + name, name, reach);
}

}  // namespace ckptfs