#include "core/mount/mount_tree.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <span>

#include "core/format/formats.h"
#include "core/layout/layout.h"
#include "core/run/run_listing.h"

namespace ckptfs {
namespace {

// The node of `ino` in a kVolume RunNode, or null.
const Node* LocalNode(const RunNode& n, uint64_t ino) {
  return n.volume ? n.volume->layout().Find(n.Local(ino)) : nullptr;
}

bool IsDirectory(const RunNode& n, const Node* node) {
  return n.volume ? node && node->kind == NodeKind::kDirectory
                  : n.kind == RunNode::Kind::kDirectory;
}

std::string InodeName(uint64_t ino) { return "inode " + std::to_string(ino); }

}  // namespace

Status Refusal(const std::string& msg, int err) { return Status::IoError(msg, err); }

bool IsRefusal(const Status& status) {
  if (status.code() != Status::Code::kIoError) return false;
  switch (status.errno_value()) {
    case EISDIR:
    case ENOTDIR:
    case ELOOP:
    case EROFS:
    case EINVAL:
    case ENODATA:
    case ERANGE:
      return true;
    default:
      return false;
  }
}

uint32_t ShownMode(uint32_t source_mode, uint32_t mode, uint32_t umask) {
  return ((source_mode & mode & 0555) | (mode & 0222)) & ~umask & 0777;
}

MountTree::MountTree(std::shared_ptr<Volume> volume, const Ownership& ownership)
    : volume_(std::move(volume)), ownership_(ownership) {
  ownership_.uid = ownership.uid.value_or(::getuid());
  ownership_.gid = ownership.gid.value_or(::getgid());
  ::clock_gettime(CLOCK_REALTIME, &mount_time_);
}

MountTree::MountTree(std::unique_ptr<RunTree> run, const Ownership& ownership)
    : run_(std::move(run)), ownership_(ownership) {
  ownership_.uid = ownership.uid.value_or(::getuid());
  ownership_.gid = ownership.gid.value_or(::getgid());
  ::clock_gettime(CLOCK_REALTIME, &mount_time_);
}

MountTree::~MountTree() { StopBackground(); }

std::string MountTree::source() const {
  return run_ ? run_->path() : volume_->checkpoint().source_path;
}

// The one resolver: `ino` as a node of a checkpoint's Volume (with its global<->local
// inode mapping: identity for a single checkpoint) or as a node of the run. With
// `open_entry`, a run entry not opened yet is opened (lookups and listings inside it).
Result<RunNode> MountTree::Resolve(uint64_t ino, bool open_entry) {
  if (run_) return run_->Resolve(ino, open_entry);
  if (ino > UINT32_MAX) return Status::NotFound(InodeName(ino) + ": no such file");
  return RunNode::Single(volume_);
}

// When a node last changed (see Times in the header).
struct timespec MountTree::ModifiedAt(const RunNode& n, uint64_t ino, const Node* node) const {
  struct timespec t = node ? n.volume->layout().MTime(n.Local(ino)) : n.mtime;
  if ((node && node->kind == NodeKind::kStats) || (!node && n.kind == RunNode::Kind::kFile)) {
    ::clock_gettime(CLOCK_REALTIME, &t);
  } else if (t.tv_sec == 0 && t.tv_nsec == 0) {
    t = mount_time_;
  }
  return t;
}

double MountTree::TimeoutFor(const RunNode& n, uint64_t ino) const {
  const Node* node = LocalNode(n, ino);
  if (node && node->kind == NodeKind::kStats) return 0.0;
  return !node || n.short_lived ? kRunTimeout : kCacheTimeout;
}

// The attributes of `ino`, resolved as `n`; false if it has no node.
bool MountTree::MakeAttr(const RunNode& n, uint64_t ino, Attr* out) const {
  const Node* node = LocalNode(n, ino);
  if (n.volume && !node) return false;
  Attr a;
  a.ino = ino;
  a.uid = *ownership_.uid;
  a.gid = *ownership_.gid;
  a.mtime = ModifiedAt(n, ino, node);
  a.timeout = TimeoutFor(n, ino);
  const Ownership& own = ownership_;
  if (!node && n.kind == RunNode::Kind::kSymlink) {
    a.kind = Attr::Kind::kSymlink;
    a.mode = 0777;
    a.size = n.text.size();
  } else if (IsDirectory(n, node)) {
    a.kind = Attr::Kind::kDirectory;
    a.mode = ShownMode(node ? node->mode : n.mode, own.dir_mode, own.umask);
    a.nlink = 2;
  } else {
    a.kind = Attr::Kind::kFile;
    a.mode = ShownMode(node ? node->mode : n.mode & 0444, own.file_mode, own.umask);
    const bool stats = node && node->kind == NodeKind::kStats;
    a.size = !node ? n.text.size() : stats ? n.volume->StatsJson().size() : node->size;
    // Never 0 for a file with bytes, which GNU tar (and cp --sparse=auto) would take for a
    // file that is all holes and store as such.
    a.blocks = (a.size + 511) / 512;
  }
  *out = a;
  return true;
}

// Child `name` of directory `dir` (resolved from `parent`), as its own RunNode.
Result<RunNode> MountTree::ChildOf(const RunNode& dir, uint64_t parent, const char* name) {
  if (!dir.volume) {
    if (!run_) return Status::NotFound(name);
    return run_->Lookup(dir, name);
  }
  const uint64_t local = dir.volume->layout().Lookup(dir.Local(parent), name);
  if (local == 0) return Status::NotFound(std::string(name) + ": no such file");
  RunNode child = dir;
  child.ino = dir.Global(local);
  child.short_lived = dir.short_children;
  return child;
}

Result<Attr> MountTree::GetAttr(uint64_t ino) {
  CKPTFS_ASSIGN_OR_RETURN(RunNode n, Resolve(ino, /*open_entry=*/false));
  Attr a;
  if (!MakeAttr(n, ino, &a)) return Status::NotFound(InodeName(ino) + ": no such file");
  return a;
}

Result<Attr> MountTree::Lookup(uint64_t parent, const char* name) {
  CKPTFS_ASSIGN_OR_RETURN(RunNode dir, Resolve(parent, /*open_entry=*/true));
  CKPTFS_ASSIGN_OR_RETURN(RunNode child, ChildOf(dir, parent, name));
  Attr a;
  if (!MakeAttr(child, child.ino, &a))
    return Status::NotFound(std::string(name) + ": no such file");
  return a;
}

Result<Listing> MountTree::List(uint64_t ino, bool* cacheable) {
  CKPTFS_ASSIGN_OR_RETURN(RunNode dir, Resolve(ino, /*open_entry=*/true));
  const Node* node = LocalNode(dir, ino);
  if (dir.volume && !node) return Status::NotFound(InodeName(ino) + ": no such file");
  if (!IsDirectory(dir, node)) return Refusal(InodeName(ino) + ": not a directory", ENOTDIR);
  // A checkpoint's directories never change for their inodes: the kernel may keep their
  // listings across opens. The run's directories, and a pinned root, do change.
  if (cacheable) *cacheable = node && !dir.short_children;
  Listing listing;
  if (!node) listing.run_children = run_->List(dir);
  listing.dir = std::move(dir);
  listing.ino = ino;
  return listing;
}

bool MountTree::EntryAt(const Listing& listing, size_t i, DirEntry* out) {
  const RunNode& dir = listing.dir;
  const uint64_t ino = listing.ino;
  const Node* node = LocalNode(dir, ino);
  std::span<const uint64_t> kids;
  if (node) kids = dir.volume->layout().Children(dir.Local(ino));
  if (i >= (node ? kids.size() : listing.run_children.size()) + 2) return false;
  *out = {};
  if (i < 2) {
    out->name = i == 0 ? "." : "..";
    out->dot = true;
    // A pipeline's top files and an entry's root have the run's directory as "..".
    const uint64_t up = node && node->parent ? dir.Global(node->parent) : dir.parent;
    (void)MakeAttr(dir, ino, &out->attr);
    out->attr.ino = i == 0 || up == 0 ? ino : up;
    return true;
  }
  RunNode child = node ? dir : listing.run_children[i - 2].second;
  if (node) {
    child.ino = dir.Global(kids[i - 2]);
    child.short_lived = dir.short_children;
    out->name = dir.volume->layout().Find(kids[i - 2])->name_data;
  } else {
    out->name = listing.run_children[i - 2].first.c_str();
  }
  (void)MakeAttr(child, child.ino, &out->attr);
  return true;
}

Result<std::unique_ptr<OpenFile>> MountTree::Open(uint64_t ino, int flags) {
  CKPTFS_ASSIGN_OR_RETURN(RunNode n, Resolve(ino, /*open_entry=*/true));
  const Node* node = LocalNode(n, ino);
  if (n.volume && !node) return Status::NotFound(InodeName(ino) + ": no such file");
  if (IsDirectory(n, node)) return Refusal(InodeName(ino) + ": a directory", EISDIR);
  if (!node && n.kind != RunNode::Kind::kFile) {
    return Refusal(InodeName(ino) + ": a symlink", ELOOP);
  }
  if ((flags & O_ACCMODE) != O_RDONLY) {
    return Refusal(InodeName(ino) + ": the mount is read-only", EROFS);
  }
  auto file = std::make_unique<OpenFile>();
  if (!node || node->kind == NodeKind::kStats) {
    file->snapshot = node ? n.volume->StatsJson() : n.text;
    file->direct_io = true;
  } else {
    file->volume = n.volume;
    file->local = n.Local(ino);
    file->readahead = n.volume->NewReadahead(file->local);
    file->keep_cache = true;
  }
  if (n.volume) Stats::Add(n.volume->stats().opens, 1);
  return file;
}

Status MountTree::Read(OpenFile& file, uint64_t offset, uint64_t size, const ReplyLimits& limits,
                       std::vector<uint8_t>& buffer, Gathered* out, ReadError* reported) const {
  if (file.volume) {
    return file.volume->Read(file.local, offset, size, file.readahead.get(), limits, buffer, out,
                             reported);
  }
  const uint64_t start = std::min<uint64_t>(offset, file.snapshot.size());
  const uint64_t length = std::min<uint64_t>(size, file.snapshot.size() - start);
  out->segments.clear();
  if (length > 0) {
    ReplySegment seg;
    seg.data = reinterpret_cast<const uint8_t*>(file.snapshot.data()) + start;
    seg.length = length;
    out->segments.push_back(seg);
  }
  return Status::Ok();
}

Result<std::string> MountTree::Readlink(uint64_t ino) {
  CKPTFS_ASSIGN_OR_RETURN(RunNode n, Resolve(ino, /*open_entry=*/false));
  if (n.volume || n.kind != RunNode::Kind::kSymlink) {
    return Refusal(InodeName(ino) + ": not a symlink", EINVAL);
  }
  return n.text;
}

std::vector<std::pair<std::string, std::string>> MountTree::Xattrs(uint64_t ino) {
  Result<RunNode> n = Resolve(ino, /*open_entry=*/false);
  if (!n.ok() || !n->volume) return {};
  return n->volume->Xattrs(n->Local(ino));
}

namespace {

Result<std::string> Fitting(std::string value, size_t buffer_size, const std::string& what) {
  if (buffer_size != 0 && buffer_size < value.size()) {
    return Refusal(what + ": " + std::to_string(value.size()) + " bytes, buffer of " +
                       std::to_string(buffer_size),
                   ERANGE);
  }
  return value;
}

}  // namespace

Result<std::string> MountTree::Xattr(uint64_t ino, const std::string& name, size_t buffer_size) {
  for (auto& [key, value] : Xattrs(ino)) {
    if (key == name) return Fitting(std::move(value), buffer_size, InodeName(ino) + " " + name);
  }
  return Refusal(InodeName(ino) + ": no attribute " + name, ENODATA);
}

Result<std::string> MountTree::XattrNames(uint64_t ino, size_t buffer_size) {
  std::string names;
  for (const auto& kv : Xattrs(ino)) names.append(kv.first).push_back('\0');
  return Fitting(std::move(names), buffer_size, InodeName(ino) + " attribute names");
}

// A single checkpoint: its tensor bytes and nodes. A run: its checkpoints, not summed
// (that would open every one of them).
FsFigures MountTree::Figures() const {
  FsFigures f;
  if (volume_) {
    f.blocks = (volume_->checkpoint().TotalTensorBytes() + f.block_size - 1) / f.block_size;
    f.files = volume_->layout().node_count();
  } else {
    f.files = run_->EntryNames().size();
  }
  return f;
}

void MountTree::StartBackground(std::function<void(const std::string&)> log,
                                std::function<void(const std::string&)> changed) {
  if (volume_) {
    volume_->context().StartWorkers();
    volume_->StartZipCrcPass(std::move(log));
    return;
  }
  run_->context().StartWorkers();
  run_->StartWatching(std::move(changed));
}

void MountTree::StopBackground() {
  if (run_) run_->StopWatching();
}

Result<std::unique_ptr<MountTree>> OpenMount(const std::string& source,
                                             const MountTreeOptions& options) {
  auto context = std::make_shared<ReadContext>(options.read_options);
  CKPTFS_ASSIGN_OR_RETURN(SourceDir dir, OpenSourceDir(source, *context, options.open.remote));
  CKPTFS_ASSIGN_OR_RETURN(bool is_run, IsRun(dir));
  if (!is_run) {
    if (!options.run.pin.empty()) {
      return Status::InvalidArgument(dir.path + ": --checkpoint " + options.run.pin +
                                     ": SOURCE is not a training run (a directory of checkpoints)");
    }
    CKPTFS_ASSIGN_OR_RETURN(
        std::unique_ptr<Volume> volume,
        Volume::OpenListed(dir, source, context, options.zip_crc, options.open));
    return std::make_unique<MountTree>(std::shared_ptr<Volume>(std::move(volume)),
                                       options.ownership);
  }
  // Local runs are watched with inotify; remote ones listed again on access to the root.
  const std::string watch = dir.remote ? "" : source;
  CKPTFS_ASSIGN_OR_RETURN(
      std::unique_ptr<RunTree> run,
      RunTree::Open(RunSourceOf(std::move(dir), source, context, options.open, watch), context,
                    options.run));
  return std::make_unique<MountTree>(std::move(run), options.ownership);
}

}  // namespace ckptfs
