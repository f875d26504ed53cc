// MountTree: what a mount shows, a training run or a single checkpoint alike, and every
// policy of how it is shown: permission bits, owner, times, the kernel's cache timeouts,
// "." and "..", inode numbers, and which requests are refused with which Status. The
// front end (fs/fuse_ops.cc) only unpacks a request, makes one call here and replies; a
// Status becomes an errno in one place there.
//
// Inodes. A single checkpoint: its Layout's inodes as they are (1 is the root). A run:
// RunTree's global inodes, (slot << 32) | local (core/run/run_tree.h, "Inodes").
//
// Times. A checkpoint node: its sources' time (Layout::MTime); a run node: its listed
// time; the mount's time (when the tree opened) where they give none; now for the live
// files (stats.json, a run's ERROR file), which change or are made on each open.
//
// Timeouts. A checkpoint is immutable for the life of its inodes: the kernel may keep
// names and attributes for kCacheTimeout, except the stats file (0: asked each time). The
// run's own nodes, and a pinned root's children, change: kRunTimeout.
//
// Modes. See Ownership below: one rule, ShownMode, for every node.
//
// Thread safety: every method may be called from any thread at once; an OpenFile and a
// Listing are used by one request at a time.
#pragma once

#include <sys/types.h>
#include <time.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/crc/zip_crc.h"
#include "core/run/run_tree.h"
#include "core/source/remote_options.h"
#include "core/status.h"
#include "core/volume/volume.h"

namespace ckptfs {

// Who owns the files a mount shows and which permission bits they show, from `ckptfs
// mount --uid --gid --umask --file-mode --dir-mode` (mountpoint-s3's names).
//
// The rule. The core layout gives each node a source-derived mode: read and execute bits
// no wider than the SOURCE files it draws from (core/layout/layout.h, "Modes"). The mode
// shown is
//     (source-derived & requested & 0555  |  requested & 0222) & ~umask
// where `requested` is --file-mode or --dir-mode (default 0555: the source-derived mode
// as it is). So read and execute bits are never wider than SOURCE's, whatever is asked,
// and the mount shows no write bit unless asked for one: the mount is read-only (every
// write fails with EROFS whatever the bits say), but a copy keeps the bits, and `cp -r`
// of 0555 directories gives a copy its owner cannot `rm -rf`; `--dir-mode 0755
// --file-mode 0644` gives copies their owner can change and delete.
// --uid / --gid name the owner (default: the mounting user and group); the owner class's
// bits then apply to that user. The kernel checks every access against these values
// (default_permissions), so `--umask 077` leaves the files to their owner alone.
struct Ownership {
  std::optional<uid_t> uid;  // default: the mounting user
  std::optional<gid_t> gid;  // default: the mounting user's group
  uint32_t file_mode = 0555;
  uint32_t dir_mode = 0555;
  uint32_t umask = 0;
};

// The permission bits shown for a node whose source-derived mode is `source_mode`, given
// the requested `mode` (Ownership::file_mode or dir_mode) and `umask` (the rule above).
uint32_t ShownMode(uint32_t source_mode, uint32_t mode, uint32_t umask);

// The attributes of one node, as the kernel is to see them.
struct Attr {
  enum class Kind : uint8_t { kDirectory, kFile, kSymlink };
  Kind kind = Kind::kFile;
  uint64_t ino = 0;
  uint64_t size = 0;
  uint64_t blocks = 0;  // 512-byte units, rounded up (never 0 for a file with bytes)
  uint32_t mode = 0;    // permission bits only, after ShownMode
  uint32_t nlink = 1;
  uint32_t uid = 0;
  uint32_t gid = 0;
  struct timespec mtime = {};  // also its atime and ctime
  double timeout = 0;          // seconds the kernel may keep it (and the name that led here)
};

// One entry of a directory listing; `name` is valid while its Listing lives. "." and ".."
// (`dot`) carry the attributes of the directory, with ".."'s inode.
struct DirEntry {
  const char* name = nullptr;
  Attr attr;
  bool dot = false;
};

// A directory open for listing (MountTree::List): its children as they were when listed.
struct Listing {
  RunNode dir;
  uint64_t ino = 0;
  std::vector<std::pair<std::string, RunNode>> run_children;  // a run directory's
};

// What one open() keeps: the checkpoint it reads (kept open while the file is, whatever
// the run does meanwhile) and the readahead state of this reader, or a snapshot of bytes
// made at open (stats.json, a run's ERROR file).
struct OpenFile {
  std::shared_ptr<Volume> volume;  // null for a snapshot
  uint64_t local = 0;
  std::unique_ptr<Readahead> readahead;
  std::string snapshot;
  // How the kernel may cache it: snapshots are read around the page cache (each open sees
  // a fresh, consistent document); a checkpoint's files keep their cached pages.
  bool direct_io = false;
  bool keep_cache = false;
};

// The statfs figures.
struct FsFigures {
  uint64_t block_size = 4096;
  uint64_t blocks = 0;  // a checkpoint's tensor bytes in block_size units; 0 for a run
  uint64_t files = 0;   // a checkpoint's nodes; a run's entries (not opened to count)
  uint64_t name_max = 255;
};

// A request the mount refuses by what it asks, not a failure: opening a directory
// (EISDIR), listing a file (ENOTDIR), opening a symlink (ELOOP), writing (EROFS), reading
// the link of a non-symlink (EINVAL), an attribute it lacks (ENODATA) or that does not fit
// the caller's buffer (ERANGE). An IoError carrying that errno; IsRefusal tells it apart
// from a failure worth logging.
Status Refusal(const std::string& msg, int err);
bool IsRefusal(const Status& status);

// How OpenMount opens SOURCE and how the mount shows it.
struct MountTreeOptions {
  ReadOptions read_options;
  ZipCrcMode zip_crc = ZipCrcMode::kAuto;
  OpenOptions open;    // remote settings and --model-key
  RunTreeOptions run;  // a run's (run.pin: --checkpoint; refused for a single checkpoint)
  Ownership ownership;
};

class MountTree {
 public:
  static constexpr uint64_t kRootIno = 1;
  static constexpr double kCacheTimeout = 86400.0;
  static constexpr double kRunTimeout = 1.0;

  // The tree of a single checkpoint, or of a run.
  MountTree(std::shared_ptr<Volume> volume, const Ownership& ownership);
  MountTree(std::unique_ptr<RunTree> run, const Ownership& ownership);
  ~MountTree();

  // Attributes of `ino`; NotFound when it has none (never existed, or a retired slot).
  Result<Attr> GetAttr(uint64_t ino);
  // Child `name` of directory `parent`, opening a run entry first; NotFound when none.
  Result<Attr> Lookup(uint64_t parent, const char* name);
  // Opens directory `ino` for listing: NotFound, or Refused (ENOTDIR) for a non-directory.
  // `cacheable` (out): its listing never changes for this inode (the kernel may keep it).
  Result<Listing> List(uint64_t ino, bool* cacheable = nullptr);
  // Entry `i` of `listing`: "." and ".." first, then the children in order. False past
  // the end.
  bool EntryAt(const Listing& listing, size_t i, DirEntry* out);
  // Opens file `ino` with open(2) `flags`: NotFound, Refused EISDIR (a directory), ELOOP
  // (a symlink), EROFS (opened for writing).
  Result<std::unique_ptr<OpenFile>> Open(uint64_t ino, int flags);
  // Reads [offset, offset + size) of `file` into `out` (Volume::Read's segments, or one
  // segment of the snapshot; clipped at its end). Errors as Volume::Read's, recorded in
  // the volume's stats.json and, when new, copied to `*reported` for the caller to log
  // (Volume::Read; a run's file paths are inside their checkpoint).
  Status Read(OpenFile& file, uint64_t offset, uint64_t size, const ReplyLimits& limits,
              std::vector<uint8_t>& buffer, Gathered* out, ReadError* reported = nullptr) const;
  // The target of symlink `ino`: NotFound, or Refused EINVAL for a node that is none.
  Result<std::string> Readlink(uint64_t ino);
  // Extended attributes of `ino` (none for the run's own nodes or a missing inode).
  std::vector<std::pair<std::string, std::string>> Xattrs(uint64_t ino);
  // The value of attribute `name` of `ino` for a buffer of `buffer_size` bytes (0: only
  // asking its size): Refused ENODATA when it has none, ERANGE when it does not fit.
  Result<std::string> Xattr(uint64_t ino, const std::string& name, size_t buffer_size);
  // The names of `ino`'s attributes, each ending in '\0', sized as Xattr's value.
  Result<std::string> XattrNames(uint64_t ino, size_t buffer_size);
  FsFigures Figures() const;

  // The mount's time (when the tree was made): the time of nodes that give none.
  const struct timespec& mount_time() const { return mount_time_; }
  // One of the two is set: a single checkpoint's Volume, or the run.
  Volume* volume() const { return volume_.get(); }
  RunTree* run() const { return run_.get(); }
  // Where SOURCE is, as messages name it.
  std::string source() const;

  // Starts what serves in the background, in the serving process (threads do not survive
  // fork): decode workers; a checkpoint's CRC pass (`log` gets its line); a run's watcher,
  // telling `changed` each root name that appeared or went ("" when the root itself may
  // have changed: a pinned root moved).
  void StartBackground(std::function<void(const std::string&)> log,
                       std::function<void(const std::string&)> changed);
  // Ends the run's watcher, before the session it notifies goes. Idempotent.
  void StopBackground();

 private:
  Result<RunNode> Resolve(uint64_t ino, bool open_entry);
  Result<RunNode> ChildOf(const RunNode& dir, uint64_t parent, const char* name);
  bool MakeAttr(const RunNode& n, uint64_t ino, Attr* out) const;
  struct timespec ModifiedAt(const RunNode& n, uint64_t ino, const Node* node) const;
  double TimeoutFor(const RunNode& n, uint64_t ino) const;

  std::shared_ptr<Volume> volume_;
  std::unique_ptr<RunTree> run_;
  Ownership ownership_;  // uid and gid resolved
  struct timespec mount_time_ = {};
};

// SOURCE listed once (OpenSourceDir), then opened as a run if it is one (IsRun,
// core/run/run_listing.h) or as one checkpoint from the same listing. `--checkpoint`
// (options.run.pin) on a single checkpoint is refused (InvalidArgument naming SOURCE).
Result<std::unique_ptr<MountTree>> OpenMount(const std::string& source,
                                             const MountTreeOptions& options);

}  // namespace ckptfs
