// ByteSource: the one interface through which ckptfs reads stored bytes.
//
// Contract:
// - Size() is fixed for the life of the object: checkpoints are immutable while mounted.
// - Read(offset, length, sink) is the one read (leveldb's RandomAccessFile::Read shape): a
//   source holding the bytes in memory (a cache, bytes a view keeps) may lend them, when
//   the reader takes lent spans; any other fills the reader's memory. Either way all of
//   [offset, offset + length) or an error: a range past Size() is a Corruption error, a
//   failed or short system read an IoError. Messages name the source. ReadAt is Read
//   into memory the caller has.
// - Fd() optionally exposes a file descriptor whose bytes at the same offsets are this
//   source's, so the FUSE front end can hand it to the kernel (splice) without a copy.
//   Whoever reads through Fd() calls CheckUnchanged() first: a file that was truncated or
//   rewritten since it was opened must give an error, never short or different bytes.
// - Mode() is the permission bits a view of these bytes may show (see LocalFileSource).
// - MTime() is when the stored bytes last changed, as the store says (a local file's
//   mtime, a server's Last-Modified), or {0, 0} if it does not say.
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

// Bytes handed out without a copy: `bytes` stays valid while `keep_alive` lives (a pinned
// cache block; null for bytes that live as long as their source).
struct LentBytes {
  std::span<const uint8_t> bytes;
  std::shared_ptr<const void> keep_alive;
};

// Where ByteSource::Read puts the bytes of one read.
class ReadSink {
 public:
  // Where a source that holds the bytes in memory appends spans covering the read, in
  // order; null when the reader wants its own memory filled.
  std::vector<LentBytes>* const lent;
  // The reader's memory for the whole read, made when first asked for: a source that
  // lends never makes the reader allocate it.
  virtual std::span<uint8_t> Fill() = 0;

 protected:
  explicit ReadSink(std::vector<LentBytes>* lent_to) : lent(lent_to) {}
  ~ReadSink() = default;
};

// For a source whose bytes live as long as it does: lends `held` (a read's bytes) when
// the reader takes lent spans, else copies them into the reader's memory.
void LendOrCopy(std::span<const uint8_t> held, ReadSink& sink);

class ByteSource {
 public:
  virtual ~ByteSource() = default;

  virtual uint64_t Size() const = 0;
  virtual Status Read(uint64_t offset, uint64_t length, ReadSink& sink) const = 0;
  // Read into `out` (its size is the length), nothing lent.
  Status ReadAt(uint64_t offset, std::span<uint8_t> out) const;
  // Name used in error messages: the file name as the user knows it.
  virtual const std::string& Name() const = 0;
  virtual int Fd() const { return -1; }
  virtual Status CheckUnchanged() const { return Status::Ok(); }
  // Permission bits (within 0555: never write, setuid or sticky bits) for a file the mount
  // shows from these bytes, owned by the mounting user. Sources without permissions
  // (remote, in-memory) are readable by everyone.
  virtual uint32_t Mode() const { return 0444; }
  virtual struct timespec MTime() const { return {}; }
  // A hint that [offset, offset + length) will be read soon; sources that fetch or decode
  // may start now. Never required for correctness.
  virtual void Prefetch(uint64_t /*offset*/, uint64_t /*length*/) const {}
  // The checkpoint is open and the mount now serves reads. Sources that read differently
  // while headers are parsed (RemoteSource: exact ranges, then cached blocks) switch here;
  // sources wrapping another pass it on.
  virtual void BeginServing() {}
  // Where the ranges readers will ask for begin and end (a shard's tensors), sorted or not:
  // a source read in blocks (RemoteSource) may cut its blocks there, so that reading one
  // tensor fetches none of its neighbours' bytes. Called before BeginServing, or not at all.
  virtual void SetBlockCuts(std::vector<uint64_t> /*cuts*/) {}
  // Names this version of the bytes for caches kept across mounts (the zip CRC sidecar):
  // equal identities mean equal bytes. Empty when the source cannot tell (in-memory
  // sources, a remote object with no ETag or Last-Modified): nothing is then cached.
  virtual std::string Identity() const { return {}; }
  // How the bytes are stored, for `inspect`: "plain", or a codec's description ("seekable
  // zstd, 256 frames"); and how many bytes that takes in SOURCE (the .zst file's size).
  virtual std::string StorageKind() const { return "plain"; }
  virtual uint64_t StoredSize() const { return Size(); }

 protected:
  // Checks [offset, offset+len) lies within Size(); shared by implementations.
  Status CheckRange(uint64_t offset, uint64_t len) const;
};

// A regular file on local disk, read with pread(2). The descriptor stays open for the
// life of the object so the file cannot vanish under a mount. Files of a checkpoint
// directory are opened through LocalDirectory (core/source/local_dir.h), which keeps
// them inside SOURCE; Open is for a path the caller has already decided to trust.
class LocalFileSource final : public ByteSource {
 public:
  // Opens `path` (O_NONBLOCK, so a FIFO cannot block); `name` is how errors refer to it.
  // Fails if it is not a regular file.
  static Result<std::unique_ptr<LocalFileSource>> Open(const std::string& path, std::string name);
  // Takes ownership of `fd`, an open regular file (O_NONBLOCK is cleared), which `path`
  // (absolute) named when it was opened; `path` goes into Identity() only, never into a
  // later check. `reach`: the most the directories on the way to the file let each class
  // do (LocalDirectory works it out from their search bits); Mode() never shows more.
  // Closes `fd` on failure.
  static Result<std::unique_ptr<LocalFileSource>> Adopt(int fd, std::string path, std::string name,
                                                        uint32_t reach = 0555);
  ~LocalFileSource() override;

  uint64_t Size() const override { return size_; }
  Status Read(uint64_t offset, uint64_t length, ReadSink& sink) const override;
  const std::string& Name() const override { return name_; }
  int Fd() const override { return fd_; }
  // Compares the size and modification time of the held descriptor (one fstat) with those
  // seen at Open: a change means the very bytes this source serves were rewritten or
  // truncated in place. What happens to the path does not matter: a file deleted,
  // renamed, or replaced by a new file of the same name (training's retention and its
  // save-then-rename) still reads, through the descriptor, the bytes it opened, as an
  // open file does in POSIX. ctime is not compared: it changes on rename, unlink, link
  // and chmod of the open inode too (seen on ext4), so it would fail exactly the reads
  // this rule keeps. A rewrite in place that restores size and mtime (touch -r) is
  // therefore not seen; nothing short of rereading the bytes could see it.
  Status CheckUnchanged() const override;
  // The source's read and execute bits as the mount shows them, owned by this process's
  // user and group (what the FUSE front end reports): the owner class always reads (the
  // mounting user opened the file); the group class keeps its bits only if the file's
  // group is this process's group, else only those others have too; the other class
  // keeps its bits; then each class keeps them only where `reach` (Adopt) does, so a
  // class that cannot search a directory on the way in SOURCE reads nothing through the
  // mount either. So no one reads through the mount a file they could not read in SOURCE.
  uint32_t Mode() const override;
  // The mtime seen at open (CheckUnchanged fails a read once it differs).
  struct timespec MTime() const override {
    return mtime_;
  }
  // Asks the kernel to start reading the range into the page cache (POSIX_FADV_WILLNEED)
  // and returns at once, so the disk works while the reader is still busy with what it
  // has: a cold sequential read then overlaps disk and FUSE instead of alternating.
  void Prefetch(uint64_t offset, uint64_t length) const override;
  // "file", the path, size, mtime in ns, device and inode as seen at open, one a line: a
  // rewrite in place, a new file renamed over it or a copy elsewhere all change it.
  std::string Identity() const override;

 private:
  LocalFileSource(int fd, const struct stat& st, uint32_t reach, std::string path,
                  std::string name);

  int fd_;
  uint64_t size_;
  struct timespec mtime_;
  dev_t dev_;
  ino_t ino_;
  uint32_t mode_;  // Mode(), fixed at open
  std::string path_;
  std::string name_;
};

// Bytes held in memory: for tests and for small made files. Never lends (it stands in
// for stored files in tests).
class MemorySource final : public ByteSource {
 public:
  MemorySource(std::string name, std::string bytes)
      : name_(std::move(name)), bytes_(std::move(bytes)) {}

  uint64_t Size() const override { return bytes_.size(); }
  Status Read(uint64_t offset, uint64_t length, ReadSink& sink) const override;
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
  Status Read(uint64_t offset, uint64_t length, ReadSink& sink) const override;
  const std::string& Name() const override { return base_->Name(); }
  int64_t reads() const { return reads_; }

 private:
  std::shared_ptr<const ByteSource> base_;
  Faults faults_;
  mutable std::atomic<int64_t> reads_{0};
};

}  // namespace ckptfs
