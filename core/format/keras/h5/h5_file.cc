// h5::Describe's parent half: forks the child that runs libhdf5 (child.cc), serves its
// reads from the source within the limits, takes its answer and validates it. No HDF5
// function is ever called in this process.
#include "core/format/keras/h5/h5_file.h"

#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>
#include <string_view>

#include "core/checked.h"
#include "core/format/keras/h5/protocol.h"

namespace ckptfs::h5 {
namespace {

using internal::Header;
using internal::kHeaderBytes;
using Clock = std::chrono::steady_clock;

std::string Named(const std::string& shown, std::string_view what) {
  std::string m = shown;
  m += ": ";
  m += what;
  return m;
}

Status Corrupt(const std::string& shown, std::string_view what) {
  return Status::Corruption(Named(shown, what));
}

bool PlainPath(const std::string& path) {
  if (path.empty() || path.find('\0') != std::string::npos) return false;
  size_t start = 0;
  while (true) {
    const size_t end = std::min(path.find('/', start), path.size());
    const std::string_view part(path.data() + start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    if (end == path.size()) return true;
    start = end + 1;
  }
}

// The child process: killed and reaped on every path out of Describe, so none outlives it
// and none is left a zombie.
class Child {
 public:
  Child(pid_t pid, int fd) : pid_(pid), fd_(fd) {}
  ~Child() {
    Kill();
    close(fd_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  int fd() const { return fd_; }

  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    Reap();
  }

  // Waits for the child to end (it has closed its socket, or been killed); its wait
  // status, or -1 if it cannot be had (SIGCHLD ignored).
  int Reap() {
    int status = -1;
    while (pid_ > 0 && waitpid(pid_, &status, 0) < 0) {
      if (errno != EINTR) {
        status = -1;
        break;
      }
    }
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_;
  int fd_;
};

enum class Io { kOk, kEof, kTimeout, kError };

int RemainingMs(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, INT32_MAX));
}

Io WaitFor(int fd, short events, Clock::time_point deadline) {
  while (true) {
    struct pollfd p = {fd, events, 0};
    const int ms = RemainingMs(deadline);
    if (ms == 0) return Io::kTimeout;
    const int r = poll(&p, 1, ms);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Io::kError;
    if (r == 0) return Io::kTimeout;
    return Io::kOk;
  }
}

Io Receive(int fd, void* data, size_t n, Clock::time_point deadline) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    if (const Io w = WaitFor(fd, POLLIN, deadline); w != Io::kOk) return w;
    const ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) return Io::kError;
    if (r == 0) return Io::kEof;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Io::kOk;
}

Io SendAll(int fd, const void* data, size_t n, Clock::time_point deadline) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    if (const Io w = WaitFor(fd, POLLOUT, deadline); w != Io::kOk) return w;
    const ssize_t r = send(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) return errno == EPIPE ? Io::kEof : Io::kError;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Io::kOk;
}

Io SendHeader(int fd, const Header& h, Clock::time_point deadline) {
  uint8_t raw[kHeaderBytes];
  internal::EncodeHeader(h, raw);
  return SendAll(fd, raw, sizeof raw, deadline);
}

// Runs the conversation with the child until its answer; every way it can go wrong is a
// Status naming the file.
class Conversation {
 public:
  Conversation(const ByteSource& source, uint64_t base, uint64_t size, const std::string& shown,
               const Limits& limits, Child& child)
      : source_(source),
        base_(base),
        size_(size),
        shown_(shown),
        limits_(limits),
        child_(child),
        deadline_(Clock::now() + limits.timeout) {}

  Result<File> Run() {
    while (true) {
      uint8_t raw[kHeaderBytes];
      const Io io = Receive(child_.fd(), raw, sizeof raw, deadline_);
      if (io != Io::kOk) return Failed(io);
      const Header h = internal::DecodeHeader(raw);
      switch (h.type) {
        case internal::kRead:
          CKPTFS_RETURN_IF_ERROR(ServeRead(h.a, h.b));
          break;
        case internal::kResult:
          return Answer(h.a);
        case internal::kError:
          return ChildError(h.a, h.b);
        default:
          child_.Kill();
          return Corrupt(shown_, "the HDF5 reader sent a malformed message");
      }
    }
  }

 private:
  Status Failed(Io io) {
    if (io == Io::kTimeout) {
      child_.Kill();
      std::string m = "the HDF5 library took longer than ";
      m += std::to_string(limits_.timeout.count());
      m += " ms on it";
      return Corrupt(shown_, m);
    }
    if (io == Io::kEof) {
      const int status = child_.Reap();
      if (status != -1 && WIFSIGNALED(status)) {
        const int sig = WTERMSIG(status);
        const char* abbrev = sigabbrev_np(sig);
        std::string m = "the HDF5 library failed on it (killed by ";
        if (abbrev != nullptr) {
          m += "SIG";
          m += abbrev;
        } else {
          m += "signal ";
          m += std::to_string(sig);
        }
        m += ")";
        return Corrupt(shown_, m);
      }
      std::string m = "the HDF5 reader ended without an answer";
      if (status != -1 && WIFEXITED(status)) {
        m += " (exit status ";
        m += std::to_string(WEXITSTATUS(status));
        m += ")";
      }
      return Corrupt(shown_, m);
    }
    child_.Kill();
    return Status::IoError(Named(shown_, "talking to the HDF5 reader failed"));
  }

  Status ServeRead(uint64_t offset, uint64_t length) {
    if (!RangeWithin(offset, length, size_)) {
      child_.Kill();
      return Corrupt(shown_, "the HDF5 reader asked for bytes outside the file");
    }
    read_ = SaturatingAdd(read_, length);
    if (read_ > limits_.read_bytes) {
      SendHeader(child_.fd(), {internal::kFail, 0, 0}, deadline_);
      child_.Kill();
      std::string m = "its HDF5 metadata takes more than ";
      m += std::to_string(limits_.read_bytes);
      m += " bytes to read";
      return Status::Unsupported(Named(shown_, m));
    }
    buffer_.resize(length);
    const Status s = source_.ReadAt(base_ + offset, std::span<uint8_t>(buffer_));
    if (!s.ok()) {
      child_.Kill();
      return s;
    }
    Io io = SendHeader(child_.fd(), {internal::kData, length, 0}, deadline_);
    if (io == Io::kOk) io = SendAll(child_.fd(), buffer_.data(), buffer_.size(), deadline_);
    if (io != Io::kOk) return Failed(io);
    return Status::Ok();
  }

  // The child's final message, then its end (it exits after sending).
  Result<std::string> Body(uint64_t length, uint64_t max) {
    if (length > max) {
      child_.Kill();
      return Corrupt(shown_, "the HDF5 reader sent a message too large");
    }
    std::string text(length, '\0');
    const Io io = Receive(child_.fd(), text.data(), text.size(), deadline_);
    if (io != Io::kOk) return Failed(io);
    child_.Kill();  // it has said all it may say
    return text;
  }

  Result<File> Answer(uint64_t length) {
    CKPTFS_ASSIGN_OR_RETURN(const std::string text, Body(length, internal::kMaxResultBytes));
    CKPTFS_ASSIGN_OR_RETURN(File file, internal::DecodeFile(text, shown_));
    CKPTFS_RETURN_IF_ERROR(ValidateFile(file, size_, shown_, limits_));
    return file;
  }

  Status ChildError(uint64_t length, uint64_t code) {
    CKPTFS_ASSIGN_OR_RETURN(std::string reason, Body(length, internal::kMaxErrorBytes));
    std::replace(reason.begin(), reason.end(), '\n', ' ');
    if (code == static_cast<uint64_t>(Status::Code::kUnsupported)) {
      return Status::Unsupported(Named(shown_, reason));
    }
    return Corrupt(shown_, reason);
  }

  const ByteSource& source_;
  const uint64_t base_;
  const uint64_t size_;
  const std::string& shown_;
  const Limits& limits_;
  Child& child_;
  const Clock::time_point deadline_;
  uint64_t read_ = 0;
  std::vector<uint8_t> buffer_;
};

}  // namespace

Result<File> Describe(const ByteSource& source, uint64_t base, uint64_t size,
                      const std::string& shown, const Limits& limits) {
  if (!CheckedAdd(base, size) || !RangeWithin(base, size, source.Size())) {
    return Status::InvalidArgument(Named(shown, "HDF5 range lies outside its source"));
  }
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0) {
    return Status::IoError(Named(shown, "socketpair for the HDF5 reader failed"), errno);
  }
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(fds[0]);
    close(fds[1]);
    return Status::IoError(Named(shown, "fork for the HDF5 reader failed"), err);
  }
  if (pid == 0) internal::RunChild(fds[1], size, limits);
  close(fds[1]);
  Child child(pid, fds[0]);
  Conversation conversation(source, base, size, shown, limits, child);
  return conversation.Run();
}

Status ValidateFile(const File& file, uint64_t size, const std::string& shown,
                    const Limits& limits) {
  if (file.groups.size() + file.datasets.size() > limits.objects + 1) {  // + the root
    return Status::Unsupported(Named(shown, "more HDF5 objects than the limit"));
  }
  std::set<std::string_view> paths;
  for (size_t i = 0; i < file.groups.size(); ++i) {
    const std::string& path = file.groups[i].path;
    if (path.empty() ? i != 0 : !PlainPath(path)) {
      return Corrupt(shown, "HDF5 group with a malformed path");
    }
    if (!paths.insert(path).second) return Corrupt(shown, "HDF5 path " + path + " twice");
  }
  struct Extent {
    uint64_t offset, size;
    const std::string* path;
  };
  std::vector<Extent> extents;
  for (const Dataset& d : file.datasets) {
    if (!PlainPath(d.path)) return Corrupt(shown, "HDF5 dataset with a malformed path");
    if (!paths.insert(d.path).second) return Corrupt(shown, "HDF5 path " + d.path + " twice");
    if (d.shape.size() > limits.rank) {
      return Status::Unsupported(Named(shown, "dataset " + d.path + " has too many dimensions"));
    }
    const std::optional<uint64_t> bytes = CheckedProduct(d.shape, d.type_size);
    if (!bytes || *bytes != d.size) {
      return Corrupt(shown, "dataset " + d.path + ": size differs from shape x type size");
    }
    if (!d.problem.empty()) continue;
    if (d.type == TypeClass::kOther || d.type_size == 0) {
      return Corrupt(shown, "dataset " + d.path + " has no plain type but no problem");
    }
    if (!RangeWithin(d.offset, d.size, size)) {
      std::string m = "dataset ";
      m += d.path;
      m += " at offset ";
      m += std::to_string(d.offset);
      m += " (";
      m += std::to_string(d.size);
      m += " bytes) runs past the end of the file (";
      m += std::to_string(size);
      m += " bytes)";
      return Corrupt(shown, m);
    }
    if (d.size > 0) extents.push_back({d.offset, d.size, &d.path});
  }
  std::sort(extents.begin(), extents.end(),
            [](const Extent& a, const Extent& b) { return a.offset < b.offset; });
  for (size_t i = 1; i < extents.size(); ++i) {
    const Extent& a = extents[i - 1];
    const Extent& b = extents[i];
    if (b.offset - a.offset < a.size) {
      std::string m = "datasets ";
      m += *a.path;
      m += " and ";
      m += *b.path;
      m += " overlap";
      return Corrupt(shown, m);
    }
  }
  return Status::Ok();
}

}  // namespace ckptfs::h5
