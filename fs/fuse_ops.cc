#define FUSE_USE_VERSION 314
#include "fs/fuse_ops.h"

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/source/remote_dir.h"
#include "core/source/remote_source.h"
#include "fs/commands.h"
#include "fs/log.h"

namespace ckptfs {
namespace {

// libfuse splices a reply through a per-thread pipe it grows to a page per reply segment,
// two pages more, and the bytes (fuse_send_data_iov, libfuse 3.14). An unprivileged pipe
// holds at most fs.pipe-max-size, 1 MiB by default (CAP_SYS_RESOURCE lifts that, and root
// in a container rarely has it): a 1 MiB request never fits and every reply was copied
// twice. Requests of at most kSplicedMaxRead (the max_read mount option, which also caps
// the kernel's readahead requests) leave room for kMaxSplicedSegments segments, so plain
// shards splice on a stock kernel. A remote source's bytes are cache blocks in memory,
// written, never spliced: it keeps requests of one 1 MiB block (capped, a fault on a
// stalled server waited for a block queued behind busy workers, then for its fetch).
constexpr unsigned kPipeBytes = 1u << 20;
constexpr unsigned kSplicedMaxRead = kPipeBytes - (32u << 10);
constexpr auto kRemoteMaxRead = static_cast<unsigned>(RemoteSource::kBlockSize);
constexpr size_t kMaxSplicedSegments =
    (kPipeBytes - kSplicedMaxRead - 16 /* fuse_out_header */) / 4096 - 2;
constexpr size_t kMaxReplySegments = 256;  // well under IOV_MAX (1024), header included
constexpr blksize_t kBlockSize = 1 << 20;  // what stat tells readers to read at a time

// What the session serves: the mount tree (core/mount, where every policy lives) and how
// replies may be sent.
struct FsContext {
  std::unique_ptr<MountTree> tree;
  std::string mountpoint;               // as read errors name it
  bool remote = false;                  // SOURCE is a URL: replies come from memory
  bool splice_replies = true;           // see CanSpliceReplies
  unsigned max_read = kSplicedMaxRead;  // bytes a read request asks at most
};

// libfuse splices a reply only through a pipe it can grow to kPipeBytes (kSplicedMaxRead);
// where it cannot (a hard per-user pipe limit), it falls back to a fresh malloc and pread
// per reply, which costs page faults on every read, and the daemon copies instead. Probe
// once, the same way.
bool CanSpliceReplies() {
  int p[2];
  if (::pipe(p) != 0) return false;
  const bool ok = ::fcntl(p[0], F_SETPIPE_SZ, static_cast<int>(kPipeBytes)) >= 0;
  ::close(p[0]);
  ::close(p[1]);
  return ok;
}

MountTree& Tree(fuse_req_t req) { return *static_cast<FsContext*>(fuse_req_userdata(req))->tree; }

OpenFile& Open(fuse_file_info* fi) { return *reinterpret_cast<OpenFile*>(fi->fh); }

// The one place a core Status becomes a FUSE error reply: its errno (EIO when it names
// none). Failures worth a look are logged; a missing name or a refusal (EISDIR, EROFS,
// ENODATA...) is an answer, not a failure.
void ReplyError(fuse_req_t req, const Status& status) {
  if (status.code() != Status::Code::kNotFound && !IsRefusal(status)) {
    LogError("%s", status.message().c_str());
  }
  fuse_reply_err(req, status.errno_value() ? status.errno_value() : EIO);
}

// A failed read's reply. The volume recorded the failure (stats.json "errors"); the first
// of a read's failures, not the kernel's retries of it (core/volume/error_log.h), is one
// log line naming the mount, the file in it, the stored file and why.
void ReplyReadError(fuse_req_t req, const Status& status, const ReadError& error) {
  if (!error.reason.empty()) {
    const auto& ctx = *static_cast<const FsContext*>(fuse_req_userdata(req));
    LogError("read failed: mount %s, file %s, source %s: %s", ctx.mountpoint.c_str(),
             error.file.c_str(), error.source.c_str(), error.reason.c_str());
  }
  fuse_reply_err(req, status.errno_value() ? status.errno_value() : EIO);
}

struct stat ToStat(const Attr& a) {
  struct stat st = {};
  st.st_ino = a.ino;
  st.st_uid = a.uid;
  st.st_gid = a.gid;
  st.st_atim = st.st_mtim = st.st_ctim = a.mtime;
  st.st_blksize = kBlockSize;
  st.st_nlink = a.nlink;
  st.st_size = static_cast<off_t>(a.size);
  st.st_blocks = static_cast<blkcnt_t>(a.blocks);
  const mode_t type = a.kind == Attr::Kind::kDirectory ? S_IFDIR
                      : a.kind == Attr::Kind::kSymlink ? S_IFLNK
                                                       : S_IFREG;
  st.st_mode = type | a.mode;
  return st;
}

fuse_entry_param ToEntry(const Attr& a) {
  fuse_entry_param e = {};
  e.ino = a.ino;
  e.generation = 1;
  e.attr = ToStat(a);
  e.attr_timeout = e.entry_timeout = a.timeout;
  return e;
}

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Result<Attr> a = Tree(req).Lookup(parent, name);
  if (!a.ok()) return ReplyError(req, a.status());
  const fuse_entry_param e = ToEntry(*a);
  fuse_reply_entry(req, &e);
}

void OpGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  Result<Attr> a = Tree(req).GetAttr(ino);
  if (!a.ok()) return ReplyError(req, a.status());
  const struct stat st = ToStat(*a);
  fuse_reply_attr(req, &st, a->timeout);
}

void OpReadlink(fuse_req_t req, fuse_ino_t ino) {
  Result<std::string> target = Tree(req).Readlink(ino);
  if (!target.ok()) return ReplyError(req, target.status());
  fuse_reply_readlink(req, target->c_str());
}

void OpOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Result<std::unique_ptr<OpenFile>> file = Tree(req).Open(ino, fi->flags);
  if (!file.ok()) return ReplyError(req, file.status());
  fi->direct_io = (*file)->direct_io;
  fi->keep_cache = (*file)->keep_cache;
  fi->fh = reinterpret_cast<uint64_t>(file->release());
  fuse_reply_open(req, fi);
}

void OpRelease(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  delete &Open(fi);
  fuse_reply_err(req, 0);
}

// Replies with the bytes MountTree::Read gathered: plain shards by descriptor in a
// fuse_bufvec (libfuse splices them), cache blocks, headers and snapshots by pointer.
// Nothing is copied here; pinned blocks stay pinned until the reply has been written.
void ReplyGathered(fuse_req_t req, const Volume* volume, const Gathered& gathered) {
  // All in memory (cache blocks, headers): writev them straight into the reply. libfuse's
  // splice path would first copy them into a pipe, a second copy for nothing.
  const bool all_memory = std::none_of(gathered.segments.begin(), gathered.segments.end(),
                                       [](const ReplySegment& seg) { return seg.fd >= 0; });
  if (all_memory) {
    std::vector<iovec> iov(gathered.segments.size());
    for (size_t i = 0; i < iov.size(); ++i) {
      iov[i] = {const_cast<uint8_t*>(gathered.segments[i].data), gathered.segments[i].length};
    }
    fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));
    return;
  }
  // fuse_bufvec ends in a one-element array; allocate room for every segment.
  std::vector<uint8_t> storage(sizeof(fuse_bufvec) +
                               sizeof(fuse_buf) * std::max<size_t>(1, gathered.segments.size()));
  auto* bufv = reinterpret_cast<fuse_bufvec*>(storage.data());
  *bufv = fuse_bufvec{};
  bufv->count = gathered.segments.size();
  for (size_t i = 0; i < gathered.segments.size(); ++i) {
    const ReplySegment& seg = gathered.segments[i];
    fuse_buf& b = bufv->buf[i];
    b = fuse_buf{};
    b.size = seg.length;
    if (seg.fd >= 0) {
      b.flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
      b.fd = seg.fd;
      b.pos = static_cast<off_t>(seg.offset);
    } else {
      b.mem = const_cast<uint8_t*>(seg.data);
    }
  }
  int err = fuse_reply_data(req, bufv, FUSE_BUF_SPLICE_MOVE);
  if (err != 0) {
    if (volume) Stats::Add(volume->stats().read_errors, 1);
    LogError("read reply failed: %s", std::strerror(err < 0 ? -err : err));
  }
}

void OpRead(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  const FsContext& ctx = *static_cast<FsContext*>(fuse_req_userdata(req));
  OpenFile& file = Open(fi);
  // Per worker thread, so its pages stay mapped across replies.
  thread_local std::vector<uint8_t> copy_buffer;
  Gathered gathered;
  ReadError error;
  Status s = ctx.tree->Read(file, static_cast<uint64_t>(off), size,
                            {.descriptors = ctx.splice_replies,
                             .max_segments = kMaxReplySegments,
                             .max_descriptor_segments = kMaxSplicedSegments},
                            copy_buffer, &gathered, &error);
  if (!s.ok()) return ReplyReadError(req, s, error);
  // Once the reply is sent the reader may close the file and its release free `file`: what
  // is counted after the reply holds the volume itself.
  const std::shared_ptr<Volume> volume = file.volume;
  const auto started = std::chrono::steady_clock::now();
  ReplyGathered(req, volume.get(), gathered);
  if (volume) {
    Stats::Add(volume->stats().reply_ns,
               static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                         std::chrono::steady_clock::now() - started)
                                         .count()));
  }
}

// Lists a directory; with `plus` each entry also carries its attributes (READDIRPLUS), so
// `ls -l`, `find` and os.walk over 100k tensors do not pay one LOOKUP round trip per file.
// Offsets: 0 and 1 are "." and "..", 2 + i is child i; each entry carries the next offset.
void ReplyDirectory(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus) {
  MountTree& tree = Tree(req);
  Result<Listing> listing = tree.List(ino);
  if (!listing.ok()) return ReplyError(req, listing.status());
  // Not zero-filled: the kernel may offer a 1 MiB buffer for a one-entry directory.
  std::unique_ptr<char[]> buf(new char[size]);
  size_t used = 0;
  DirEntry entry;
  for (auto i = static_cast<size_t>(off); tree.EntryAt(*listing, i, &entry); ++i) {
    fuse_entry_param e = ToEntry(entry.attr);
    // "." and ".." must not be looked up by the kernel: ino 0 tells it so.
    if (entry.dot) e.ino = 0, e.generation = 0, e.attr_timeout = e.entry_timeout = 0;
    const auto next = static_cast<off_t>(i + 1);
    const size_t need =
        plus ? fuse_add_direntry_plus(req, buf.get() + used, size - used, entry.name, &e, next)
             : fuse_add_direntry(req, buf.get() + used, size - used, entry.name, &e.attr, next);
    if (need > size - used) break;
    used += need;
  }
  fuse_reply_buf(req, buf.get(), used);
}

void OpOpendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  bool cacheable = false;
  Result<Listing> listing = Tree(req).List(ino, &cacheable);
  if (!listing.ok()) return ReplyError(req, listing.status());
  fi->cache_readdir = fi->keep_cache = cacheable;
  fuse_reply_open(req, fi);
}

void OpReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  ReplyDirectory(req, ino, size, off, /*plus=*/false);
}

void OpReaddirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  ReplyDirectory(req, ino, size, off, /*plus=*/true);
}

// A value, or with `size` 0 only its size.
void ReplyXattr(fuse_req_t req, const Result<std::string>& value, size_t size) {
  if (!value.ok()) return ReplyError(req, value.status());
  if (size == 0) return (void)fuse_reply_xattr(req, value->size());
  fuse_reply_buf(req, value->data(), value->size());
}

void OpGetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  ReplyXattr(req, Tree(req).Xattr(ino, name, size), size);
}

void OpListxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  ReplyXattr(req, Tree(req).XattrNames(ino, size), size);
}

void OpStatfs(fuse_req_t req, fuse_ino_t) {
  const FsFigures f = Tree(req).Figures();
  struct statvfs sv = {};
  sv.f_bsize = sv.f_frsize = f.block_size;
  sv.f_blocks = f.blocks;
  sv.f_files = f.files;
  sv.f_namemax = f.name_max;
  fuse_reply_statfs(req, &sv);
}

void OpInit(void* userdata, fuse_conn_info* conn) {
  const unsigned max_read = static_cast<FsContext*>(userdata)->max_read;
  // Splice moves shard pages from the page cache to the kernel without a userspace copy.
  conn->want |= conn->capable & (FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
  // Always READDIRPLUS: entries carry their attributes and timeouts (long for a
  // checkpoint's nodes, short for a run's), so attributes sent once stay valid.
  if (conn->capable & FUSE_CAP_READDIRPLUS) {
    conn->want |= FUSE_CAP_READDIRPLUS;
    conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
  }
  conn->max_readahead = max_read;
  conn->max_read = max_read;  // libfuse wants init to repeat the max_read mount option
}

const fuse_lowlevel_ops kOps = [] {
  fuse_lowlevel_ops ops = {};
  ops.init = OpInit;
  ops.lookup = OpLookup;
  ops.getattr = OpGetattr;
  ops.readlink = OpReadlink;
  ops.open = OpOpen;
  ops.release = OpRelease;
  ops.read = OpRead;
  ops.opendir = OpOpendir;
  ops.readdir = OpReaddir;
  ops.readdirplus = OpReaddirplus;
  ops.getxattr = OpGetxattr;
  ops.listxattr = OpListxattr;
  ops.statfs = OpStatfs;
  return ops;
}();
}  // namespace
}  // namespace ckptfs

namespace ckptfs {
namespace {

// libfuse splits -o values on commas; a literal comma in a path must be escaped.
std::string EscapeOptionValue(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == ',' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// Big sequential reads want 1 MiB requests, but the kernel limits FUSE readahead to the
// bdi's read_ahead_kb (128 KiB by default). Raise it for this mount when we may (root), to
// 4 requests' worth, not 1. A loader's mmap (safetensors, torch.load(mmap=True), numpy)
// faults pages in through read-around, a window of read_ahead_kb centred on the fault,
// half of it already cached by the fault before: at one request's worth each fault waited
// for half a request; at four it asks for two whole requests the daemon's threads serve at
// once. Measured (docs/benchmarks.md, "Where the
// time goes"): mmap through the mount 1.5-1.8x faster, cat unchanged; 8 and 16 MiB slow
// cat down (more bytes in flight than the daemon turns around in time).
constexpr uint64_t kReadaheadRequests = 4;

void RaiseReadahead(dev_t dev, unsigned max_read) {
  std::string path = "/sys/class/bdi/" + std::to_string(major(dev)) + ":" +
                     std::to_string(minor(dev)) + "/read_ahead_kb";
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  const std::string kb = std::to_string(kReadaheadRequests * max_read / 1024);
  if (::write(fd, kb.data(), kb.size()) < 0) LogWarn("cannot raise %s", path.c_str());
  ::close(fd);
}

// Tells systemd (Type=notify) that the mount answers: READY=1 on $NOTIFY_SOCKET, the
// protocol of sd_notify(3), written here since it is one datagram. A name starting with
// '@' is in the abstract namespace. Without the variable (not run by systemd), nothing.
void NotifySystemdReady() {
  const char* socket_path = ::getenv("NOTIFY_SOCKET");
  if (!socket_path || !*socket_path) return;
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  const size_t n = std::strlen(socket_path);
  if (n >= sizeof(addr.sun_path)) return;
  std::memcpy(addr.sun_path, socket_path, n);
  if (addr.sun_path[0] == '@') addr.sun_path[0] = '\0';
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  const std::string msg = "READY=1\nMAINPID=" + std::to_string(::getpid()) + "\n";
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + n);
  if (::sendto(fd, msg.data(), msg.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&addr), len) <
      0) {
    LogError("cannot notify systemd on %s: %s", socket_path, std::strerror(errno));
  }
  ::close(fd);
}

// Runs in the daemon once the session loop is about to start: the first stat() of the
// mount point is answered by that loop, so when it returns the mount works.
void SignalReady(const std::string& mountpoint, unsigned max_read, int ready_fd) {
  struct stat st;
  std::string msg = "ok\n";
  if (::stat(mountpoint.c_str(), &st) != 0) {
    msg = mountpoint + ": mounted but does not answer: " + std::strerror(errno) + "\n";
  } else {
    RaiseReadahead(st.st_dev, max_read);
    NotifySystemdReady();
  }
  if (ready_fd >= 0) {
    (void)!::write(ready_fd, msg.data(), msg.size());
    ::close(ready_fd);
  }
}

void RedirectStdioToDevNull() {
  int fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (fd < 0) return;
  for (int target : {0, 1, 2}) ::dup2(fd, target);
  if (fd > 2) ::close(fd);
}

// What the views leave out or shadow, to the daemon's log (the terminal sees them in the
// -v summary only): a successful mount prints nothing.
void LogLayoutNotes(const FsContext& ctx) {
  if (!ctx.tree->volume()) return;
  for (const std::string& line : LayoutNotes(*ctx.tree->volume())) LogWarn("%s", line.c_str());
}

// The daemon log's last line (info): what this mount served, from the counters of
// stats.json (a single checkpoint's; a run's are per checkpoint and not summed here).
void LogUnmounted(const FsContext& ctx, const std::string& mountpoint) {
  if (!LogEnabled(LogLevel::kInfo)) return;
  if (!ctx.tree->volume()) {
    LogInfo("unmounted %s", mountpoint.c_str());
    return;
  }
  const Stats& stats = ctx.tree->volume()->stats();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stats.started).count();
  LogInfo("unmounted %s after %.0f s: %llu opens, %llu reads, %llu bytes served, %llu read errors",
          mountpoint.c_str(), seconds, static_cast<unsigned long long>(stats.opens.load()),
          static_cast<unsigned long long>(stats.reads.load()),
          static_cast<unsigned long long>(stats.bytes_read.load()),
          static_cast<unsigned long long>(stats.read_errors.load()));
}

// Starts what serves in the background, in the serving process (threads do not survive
// fork): decode workers, the CRC pass of a single checkpoint, a run's watcher. The
// watcher tells the kernel when a root name appears or goes, so `ls` sees it at once.
void StartBackground(FsContext& ctx, fuse_session* se) {
  ctx.tree->StartBackground(
      [](const std::string& line) { LogInfo("%s", line.c_str()); },
      [se](const std::string& name) {
        if (name.empty()) {
          fuse_lowlevel_notify_inval_inode(se, MountTree::kRootIno, 0, 0);
        } else {
          // The name is at the root and in views/ (a run's).
          for (const uint64_t dir : {MountTree::kRootIno, RunTree::kViewsIno}) {
            fuse_lowlevel_notify_inval_entry(se, dir, name.c_str(), name.size());
          }
        }
      });
}

// Mounts and runs the session loop in this process. Failures before the loop starts are
// reported on `ready_fd` (the waiting parent) or stderr in the foreground.
int Serve(FsContext& ctx, const std::string& source, const MountOptions& options, int ready_fd) {
  auto fail = [&](const std::string& msg) {
    if (ready_fd >= 0) {
      (void)!::write(ready_fd, msg.data(), msg.size());
      ::close(ready_fd);
    } else {
      std::fprintf(stderr, "ckptfs: %s\n", EscapeControlChars(msg).c_str());
    }
    return 1;
  };
  std::string opts = "ro,default_permissions,max_read=" + std::to_string(ctx.max_read) +
                     ",fsname=" + EscapeOptionValue(source) + ",subtype=ckptfs";
  for (const std::string& o : options.fuse_options) opts += "," + o;
  opts += ",ro";  // last, so that no -o option before it can make the mount writable
  std::vector<std::string> argv_storage = {"ckptfs", "-o", opts};
  if (options.debug) argv_storage.push_back("-d");
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());

  fuse_session* se = fuse_session_new(&args, &kOps, sizeof(kOps), &ctx);
  if (!se) return fail(options.mountpoint + ": invalid mount options: " + opts);
  if (fuse_set_signal_handlers(se) != 0) {
    fuse_session_destroy(se);
    return fail("cannot install signal handlers");
  }
  if (fuse_session_mount(se, options.mountpoint.c_str()) != 0) {
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return fail(options.mountpoint + ": mount failed (see the fuse message above, or run with -f)");
  }
  // The log file was opened before the mount (OpenLogFile): opening it now could reach
  // into this very mount, which does not serve yet.
  LogToDaemonDestination(/*keep_stderr=*/ready_fd < 0, options.mountpoint);
  if (ready_fd >= 0) {
    RedirectStdioToDevNull();
  } else {
    std::fputs(options.summary.c_str(), stdout);
    std::fflush(stdout);
  }
  LogInfo("%s", options.log_line.c_str());
  for (const std::string& line : options.warnings) LogWarn("%s", line.c_str());
  LogLayoutNotes(ctx);
  // A fact of the data path, not a failure, and nothing a plain user can change: info in
  // the daemon's log (a foreground daemon's is the terminal, which must stay quiet on a
  // clean mount) and stats.json say it.
  if (!ctx.splice_replies && !ctx.remote) {
    if (ctx.max_read > kSplicedMaxRead) {
      LogInfo(
          "replies are copied, not spliced: -o max_read=%u is more than a 1 MiB pipe holds "
          "(%u)",
          ctx.max_read, kSplicedMaxRead);
    } else {
      LogInfo(
          "replies are copied, not spliced: a pipe cannot grow to 1 MiB here "
          "(fs.pipe-max-size below its default, or the user's pipe limit)");
    }
  }
  StartBackground(ctx, se);
  std::thread ready(SignalReady, options.mountpoint, ctx.max_read, ready_fd);
  fuse_loop_config* config = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(config, 16);
  int rc = fuse_session_loop_mt(se, config);
  fuse_loop_cfg_destroy(config);
  ctx.tree->StopBackground();  // a run's watcher notifies this session
  fuse_session_unmount(se);
  ready.join();
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  LogUnmounted(ctx, options.mountpoint);
  // libfuse's signal handlers end the loop with the signal number as its result: a stop
  // asked for by SIGTERM, SIGINT or SIGHUP, after the clean unmount above, is success
  // (so `systemctl stop` leaves the unit inactive, not failed).
  return rc == 0 || rc == SIGTERM || rc == SIGINT || rc == SIGHUP ? 0 : 1;
}

// Waits (bounded) for the daemon's first line: "ok" or why it failed.
int AwaitDaemon(int fd, pid_t child) {
  std::string msg;
  char buf[512];
  constexpr int kTimeoutMs = 60'000;
  while (true) {
    pollfd p = {fd, POLLIN, 0};
    int n = ::poll(&p, 1, kTimeoutMs);
    if (n == 0) {
      std::fprintf(stderr, "ckptfs: mount did not answer within %d s\n", kTimeoutMs / 1000);
      ::kill(child, SIGTERM);
      return 1;
    }
    if (n < 0 && errno == EINTR) continue;
    ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r <= 0) break;
    msg.append(buf, static_cast<size_t>(r));
  }
  if (msg == "ok\n") return 0;
  if (msg.empty()) msg = "the mount daemon exited before the mount answered";
  if (msg.back() == '\n') msg.pop_back();
  std::fprintf(stderr, "ckptfs: %s\n", EscapeControlChars(msg).c_str());
  return 1;
}

// Serves `ctx`'s tree (a checkpoint or a run) at options.mountpoint, in a daemon unless in the
// foreground.
int MountContext(FsContext& ctx, const std::string& source, const MountOptions& options) {
  // The mount point was checked before the checkpoint was opened (CheckMountPoint).
  ctx.remote = IsUrl(source);
  ctx.max_read = ctx.remote ? kRemoteMaxRead : kSplicedMaxRead;
  // `-o max_read=N` is the user's to set (the last one counts, as libfuse reads them); replies
  // of more than kSplicedMaxRead would not fit the pipe, so those are copied.
  for (const std::string& option : options.fuse_options) {
    unsigned value = 0;
    if (std::sscanf(option.c_str(), "max_read=%u", &value) == 1 && value > 0) {
      ctx.max_read = value;
    }
  }
  ctx.splice_replies = !ctx.remote && ctx.max_read <= kSplicedMaxRead && CanSpliceReplies();
  if (ctx.tree->volume()) ctx.tree->volume()->stats().replies_spliced = ctx.splice_replies;
  if (options.foreground) return Serve(ctx, source, options, -1);

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    std::perror("ckptfs: pipe");
    return 1;
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("ckptfs: fork");
    return 1;
  }
  if (pid == 0) {
    ::close(fds[0]);
    ::setsid();
    if (::chdir("/") != 0) _exit(1);
    _exit(Serve(ctx, source, options, fds[1]));
  }
  ::close(fds[1]);
  int rc = AwaitDaemon(fds[0], pid);
  ::close(fds[0]);
  if (rc == 0) {
    std::fputs(options.summary.c_str(), stdout);
    if (!options.notice.empty()) std::fprintf(stderr, "%s\n", options.notice.c_str());
  }
  // The daemon owns the mount now. Exit without destructors: freeing this copy's hundreds
  // of thousands of nodes would only delay the moment `ckptfs mount` returns.
  std::fflush(nullptr);
  _exit(rc);
}

}  // namespace

int MountAndServe(std::unique_ptr<MountTree> tree, const MountOptions& options) {
  FsContext ctx;
  const std::string source = tree->source();
  ctx.tree = std::move(tree);
  ctx.mountpoint = options.mountpoint;
  return MountContext(ctx, source, options);
}

std::optional<std::string> FirstUnknownFuseOption(const std::vector<std::string>& options) {
  static const fuse_lowlevel_ops kNoOps{};
  for (const std::string& option : options) {
    std::string item = option;
    std::string name = "ckptfs", dash_o = "-o";
    char* argv[] = {name.data(), dash_o.data(), item.data()};
    fuse_args args = FUSE_ARGS_INIT(3, argv);
    std::fflush(stderr);
    const int saved = ::dup(2);
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (saved >= 0 && null >= 0) ::dup2(null, 2);
    fuse_session* se = fuse_session_new(&args, &kNoOps, sizeof(kNoOps), nullptr);
    if (saved >= 0) {
      ::dup2(saved, 2);
      ::close(saved);
    }
    if (null >= 0) ::close(null);
    fuse_opt_free_args(&args);
    if (se == nullptr) return option;
    fuse_session_destroy(se);
  }
  return std::nullopt;
}

}  // namespace ckptfs
