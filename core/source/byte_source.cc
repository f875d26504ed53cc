#include "core/source/byte_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "core/checked.h"

namespace ckptfs {

Status ByteSource::CheckRange(uint64_t offset, uint64_t len) const {
  const uint64_t size = Size();
  if (!RangeWithin(offset, len, size)) {
    return Status::Corruption(Name() + ": read of " + std::to_string(len) + " bytes at offset " +
                              std::to_string(offset) + " past end of file (" +
                              std::to_string(size) + " bytes)");
  }
  return Status::Ok();
}

namespace {

// Memory the reader already has.
class SpanSink final : public ReadSink {
 public:
  explicit SpanSink(std::span<uint8_t> out) : ReadSink(nullptr), out_(out) {}
  std::span<uint8_t> Fill() override { return out_; }

 private:
  std::span<uint8_t> out_;
};

}  // namespace

void LendOrCopy(std::span<const uint8_t> held, ReadSink& sink) {
  if (sink.lent) {
    sink.lent->push_back({held, nullptr});
  } else if (!held.empty()) {
    std::memcpy(sink.Fill().data(), held.data(), held.size());
  }
}

Status ByteSource::ReadAt(uint64_t offset, std::span<uint8_t> out) const {
  SpanSink sink(out);
  return Read(offset, out.size(), sink);
}

Result<std::unique_ptr<LocalFileSource>> LocalFileSource::Open(const std::string& path,
                                                               std::string name) {
  // O_NONBLOCK: opening a FIFO read-only would otherwise wait for a writer, forever.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return Status::NotFound(name + ": no such file");
    return Status::IoError(name + ": cannot open: " + std::strerror(err), err);
  }
  std::error_code ec;
  std::string absolute = std::filesystem::absolute(path, ec).string();
  return Adopt(fd, ec ? path : absolute, std::move(name));
}

Result<std::unique_ptr<LocalFileSource>> LocalFileSource::Adopt(int fd, std::string path,
                                                                std::string name, uint32_t reach) {
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(name + ": not a regular file");
  }
  // O_NONBLOCK only kept the open from blocking on a FIFO. On a regular file some kernels
  // and filesystems turn it into "fail with EAGAIN rather than wait for the disk", which
  // a cold read under memory pressure would report as an error.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0 && (flags & O_NONBLOCK)) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  // Checkpoint readers mostly stream: ask for the larger sequential readahead window.
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return std::unique_ptr<LocalFileSource>(
      new LocalFileSource(fd, st, reach, std::move(path), std::move(name)));
}

namespace {

// See LocalFileSource::Mode in the header.
uint32_t SourceDerivedMode(const struct stat& st, uint32_t reach) {
  const uint32_t other = st.st_mode & 05;
  uint32_t group = (st.st_mode >> 3) & 05;
  if (st.st_gid != ::getgid()) group &= other;
  // The owner class is the mounting user, who reached the file: `reach` never narrows it.
  return (0400 | (st.st_mode & 0100) | group << 3 | other) & (reach | 0500);
}

}  // namespace

LocalFileSource::LocalFileSource(int fd, const struct stat& st, uint32_t reach, std::string path,
                                 std::string name)
    : fd_(fd),
      size_(static_cast<uint64_t>(st.st_size)),
      mtime_(st.st_mtim),
      dev_(st.st_dev),
      ino_(st.st_ino),
      mode_(SourceDerivedMode(st, reach)),
      path_(std::move(path)),
      name_(std::move(name)) {}

uint32_t LocalFileSource::Mode() const { return mode_; }

LocalFileSource::~LocalFileSource() { ::close(fd_); }

void LocalFileSource::Prefetch(uint64_t offset, uint64_t length) const {
  // The kernel allocates and submits the whole range before returning; a bounded range
  // keeps that short, and the reader's next windows ask for the rest.
  constexpr uint64_t kMaxAdvice = 32u << 20;
  if (offset >= size_) return;
  const uint64_t n = std::min({length, size_ - offset, kMaxAdvice});
  ::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(n), POSIX_FADV_WILLNEED);
}

std::string LocalFileSource::Identity() const {
  const int64_t mtime_ns = static_cast<int64_t>(mtime_.tv_sec) * 1000000000 + mtime_.tv_nsec;
  return "file\n" + path_ + "\n" + std::to_string(size_) + "\n" + std::to_string(mtime_ns) + "\n" +
         std::to_string(dev_) + "\n" + std::to_string(ino_);
}

Status LocalFileSource::CheckUnchanged() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    return Status::IoError(name_ + ": cannot stat: " + std::strerror(errno), errno);
  }
  if (static_cast<uint64_t>(st.st_size) != size_) {
    return Status::IoError(name_ + ": file changed since mount (size " +
                           std::to_string(st.st_size) + ", was " + std::to_string(size_) + ")");
  }
  if (st.st_mtim.tv_sec != mtime_.tv_sec || st.st_mtim.tv_nsec != mtime_.tv_nsec) {
    return Status::IoError(name_ + ": file modified since mount");
  }
  return Status::Ok();
}

Status LocalFileSource::Read(uint64_t offset, uint64_t length, ReadSink& sink) const {
  CKPTFS_RETURN_IF_ERROR(CheckRange(offset, length));
  const std::span<uint8_t> out = sink.Fill();
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n =
        ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      return Status::IoError(name_ + ": read at offset " + std::to_string(offset + done) +
                                 " failed: " + std::strerror(err),
                             err);
    }
    // The file shrank after mount: report it rather than return stale or zero bytes.
    if (n == 0) {
      return Status::IoError(name_ + ": file truncated since mount (short read at offset " +
                             std::to_string(offset + done) + ")");
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status MemorySource::Read(uint64_t offset, uint64_t length, ReadSink& sink) const {
  CKPTFS_RETURN_IF_ERROR(CheckRange(offset, length));
  if (length > 0) std::memcpy(sink.Fill().data(), bytes_.data() + offset, length);
  return Status::Ok();
}

Status FaultySource::Read(uint64_t offset, uint64_t length, ReadSink& sink) const {
  const int64_t n = reads_.fetch_add(1);
  if (faults_.delay_us > 0)
    std::this_thread::sleep_for(std::chrono::microseconds(faults_.delay_us));
  if (n == faults_.fail_read_number) {
    return Status::IoError(Name() + ": injected failure of read #" + std::to_string(n));
  }
  if (!RangeWithin(offset, length, faults_.readable_bytes)) {
    return Status::IoError(Name() + ": injected short read at offset " + std::to_string(offset));
  }
  return base_->ReadAt(offset, sink.Fill());  // never lends, as a disk would not
}

}  // namespace ckptfs
