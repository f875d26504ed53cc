// ByteSource: the one interface through which ckptfs reads stored bytes.
//
// Contract:
// - Size() is fixed for the life of the object: checkpoints are immutable while mounted.
// - ReadAt(offset, out) fills all of `out` or fails; a range past Size() is a Corruption
//   error, a failed or short system read an IoError. Messages name the source.
// - Fd() optionally exposes a file descriptor whose bytes at the same offsets are this
//   source's, so the FUSE front end can hand it to the kernel (splice) without a copy.
//   Whoever reads through Fd() calls CheckUnchanged() first: a file that was truncated or
//   rewritten since it was opened must give an error, never short or different bytes.
// - Every method is thread-safe: many FUSE worker threads read one source at once.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ckptfs {

// Bytes a source lends without copying; `bytes` stays valid while `keep_alive` lives.
struct LentBytes {
  std::span<const uint8_t> bytes;
  std::shared_ptr<const void> keep_alive;
};

class ByteSource {
 public:
  virtual ~ByteSource() = default;

  virtual uint64_t Size() const = 0;
  virtual Status ReadAt(uint64_t offset, std::span<uint8_t> out) const = 0;
  // Name used in error messages: the file name as the user knows it.
  virtual const std::string& Name() const = 0;
  virtual int Fd() const { return -1; }
  virtual Status CheckUnchanged() const { return Status::Ok(); }
  // Whether Lend works: sources that hold decoded bytes in memory (a cache) lend them,
  // so a reply can be sent from there without a copy into a buffer first.
  virtual bool CanLend() const { return false; }
  // Appends spans covering [offset, offset + length), in order. Same errors as ReadAt.
  virtual Status Lend(uint64_t offset, uint64_t length, std::vector<LentBytes>* out) const;
  // A hint that [offset, offset + length) will be read soon; sources that fetch or decode
  // may start now. Never required for correctness.
  virtual void Prefetch(uint64_t /*offset*/, uint64_t /*length*/) const {}
  // The checkpoint is open and the mount now serves reads. Sources that read differently
  // while headers are parsed (RemoteSource: exact ranges, then cached blocks) switch here;
  // sources wrapping another pass it on.
  virtual void BeginServing() {}

 protected:
  // Checks [offset, offset+len) lies within Size(); shared by implementations.
  Status CheckRange(uint64_t offset, uint64_t len) const;
};

// A regular file on local disk, read with pread(2). The descriptor stays open for the
// life of the object so the file cannot vanish under a mount.
class LocalFileSource final : public ByteSource {
 public:
  // Opens `path`; `name` is how errors refer to it. Fails if it is not a regular file.
  static Result<std::unique_ptr<LocalFileSource>> Open(const std::string& path, std::string name);
  ~LocalFileSource() override;

  uint64_t Size() const override { return size_; }
  Status ReadAt(uint64_t offset, std::span<uint8_t> out) const override;
  const std::string& Name() const override { return name_; }
  int Fd() const override { return fd_; }
  // Compares size and modification time with those seen at Open (one fstat).
  Status CheckUnchanged() const override;
  // Asks the kernel to start reading the range into the page cache (POSIX_FADV_WILLNEED)
  // and returns at once, so the disk works while the reader is still busy with what it
  // has: a cold sequential read then overlaps disk and FUSE instead of alternating.
  void Prefetch(uint64_t offset, uint64_t length) const override;

 private:
  LocalFileSource(int fd, uint64_t size, struct timespec mtime, std::string name)
      : fd_(fd), size_(size), mtime_(mtime), name_(std::move(name)) {}

  int fd_;
  uint64_t size_;
  struct timespec mtime_;
  std::string name_;
};

// Bytes held in memory: for tests and for small synthesized files.
class MemorySource final : public ByteSource {
 public:
  MemorySource(std::string name, std::string bytes)
      : name_(std::move(name)), bytes_(std::move(bytes)) {}

  uint64_t Size() const override { return bytes_.size(); }
  Status ReadAt(uint64_t offset, std::span<uint8_t> out) const override;
  const std::string& Name() const override { return name_; }

 private:
  std::string name_;
  std::string bytes_;
};

// Wraps another source and injects faults, as a test double for failing disks and
// networks: fail the Nth read (0-based, counted across threads), pretend the file ends
// early (reads beyond `readable_bytes` fail as a short read would), or delay every read.
class FaultySource final : public ByteSource {
 public:
  struct Faults {
    int64_t fail_read_number = -1;  // -1: never
    uint64_t readable_bytes = UINT64_MAX;
    uint32_t delay_us = 0;
  };
  FaultySource(std::shared_ptr<const ByteSource> base, Faults faults)
      : base_(std::move(base)), faults_(faults) {}

  uint64_t Size() const override { return base_->Size(); }
  Status ReadAt(uint64_t offset, std::span<uint8_t> out) const override;
  const std::string& Name() const override { return base_->Name(); }
  int64_t reads() const { return reads_; }

 private:
  std::shared_ptr<const ByteSource> base_;
  Faults faults_;
  mutable std::atomic<int64_t> reads_{0};
};

}  // namespace ckptfs
