// RunTree: the namespace of a mounted training run (a SOURCE that IsRun, run_listing.h).
//
// What it shows: SOURCE as it is, plus views. Each path of SOURCE names the same file:
//   - every complete, stable entry under its own name as SOURCE has it: a file entry
//     (`last.ckpt`, `model_00100.pt`) is that file, a directory entry (`checkpoint-500/`)
//     its files and folders (one level: ReadFilesOnly), never moved;
//   - SOURCE's other top files and folders (RunListing::top_files: the final model HF
//     Trainer leaves at the top, a TF `checkpoint` file and its prefixes' files, DeepSpeed's
//     `latest`, logs), unchanged;
//   - `latest` and `best` (symlinks) when the listing names them and that entry is shown:
//     to the entry's own name (a file `torch.load` opens, a directory `from_pretrained`
//     reads), or into `views/` for an entry with no path of its own (a TF prefix, `final`);
//   - `views/`: each entry's full views (a Volume: model.safetensors, pytorch_model.bin,
//     tensors/, .ckptfs/), named as the entry, opened on the first lookup or listing inside
//     it, with its own `latest` and `best`; a checkpoint that fails to open is a directory
//     holding one file, `ERROR`, with the one-line reason;
//   - `.ckptfs/stats.json`: the run's counters (entries shown, checkpoints open, the cache).
// A name of SOURCE wins over the run's own nodes (`latest`, `best`, `views`, `.ckptfs`).
// All Volumes share one ReadContext: one byte-bounded cache for the run.
//
// Failures: one entry's failure is that entry's alone. A refusal (a bad format, a file
// linking out of SOURCE) is kept until the entry's signature changes. A failure that may
// pass (IsTransient, core/transient.h: out of descriptors, a timeout, a server error) is
// tried again by the next lookup or listing inside the entry, at most once per backoff
// (1 s, doubling to 30 s), so that a lookup storm does not hammer a server
// that is down; once it opens, the entry is its Volume (the ERROR inode answers NotFound).
//
// Descriptors: an open local checkpoint holds one descriptor per stored file (POSIX: a
// file that is open keeps its bytes). The Volumes the run keeps open together hold at most
// `max_held_files`: before opening another, the least recently used Volumes nobody holds
// are closed (reopened unchanged on their next use). Volumes held by open files are never
// closed, so readers holding more checkpoints than that can still exhaust the limit; an
// open that then fails with EMFILE is transient, tried again. At most 4 entries are
// opened at once.
//
// Inodes: global = (slot << 32) | local. Slot 0 is the run's own nodes (kRootIno, the
// symlinks, views/, .ckptfs); every other slot belongs to one (entry name, signature, and
// whether it is the entry's views or its own files) and is never reused. Inside a slot, local
// inodes are the Volume's Layout inodes (the entry directory is the Layout root, 1) or, for a
// failed entry, 1 (the directory) and 2^32 - 1 (ERROR, which no Layout inode reaches). A checkpoint
// rewritten or deleted is a new slot or none: its old inodes answer NotFound, never another
// checkpoint's bytes. A Volume unused for `idle_close` (nobody holds it: the front end keeps a
// reference per open file) is closed; reopening an unchanged entry builds the same Layout, so the
// same inodes (a Layout whose shape differs makes the slot stale instead).
//
// Live: Relist() applies a new listing. An entry already shown stays while its signature
// holds; a new or changed one is shown once it is complete and its signature was the same
// in a listing at least `stable` earlier (never half-written); one that vanished, became
// incomplete or changed is hidden at once. The first listing shows every complete entry.
// Local sources: StartWatching() runs a thread that re-lists on inotify events (SOURCE and
// its entry directories, debounced), every `relist` as a fallback, and when a new entry
// is due to become stable; it also closes idle Volumes. Remote sources: MaybeRelist() on a
// lookup or listing of the root, at most once per `relist`.
//
// Pipelines (RunListing::pipeline): one model tree, no `views/`: each component entry is
// its views under its name, and the kFiles entry's Volume (SOURCE's top files and folders
// without weights, ReadFilesOnly) is shown in the root itself, its stored files and
// folders the root's children beside the components; no latest or best.
//
// A training run's top files are a kFiles entry too (RunListing::top_files), shown the same
// way; while a changed one waits to be stable, the one shown before stays.
//
// `pin` (--checkpoint latest|best|NAME): the root is that entry's directory instead, and
// follows it (the current latest, best, or the entry of that name) for new lookups.
//
// Thread safety: every method may be called from any thread at once.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/run/run_listing.h"
#include "core/volume/volume.h"

namespace ckptfs {

using RunClock = std::chrono::steady_clock;

// How a RunTree reaches its run: production uses RunSourceOf (ListRun, EntrySourceDir,
// OpenCheckpointIn); tests use in-memory listings and checkpoints.
struct RunSource {
  std::function<Result<RunListing>()> list;
  std::function<Result<Checkpoint>(const RunEntry& entry, ReadContext& context)> open;
  // A file or directory entry's own files as SOURCE has them (ReadFilesOnly): what the run
  // shows under the entry's name, beside its views.
  std::function<Result<Checkpoint>(const RunEntry& entry, ReadContext& context)> open_files;
  std::string path;       // SOURCE as shown in messages and stats.json
  std::string watch_dir;  // a local SOURCE directory to watch with inotify; "" for remote
};

// The RunSource of run SOURCE `source`, whose listing `first` (OpenSourceDir) is the
// first one used; later listings open SOURCE again. `watch_dir`: SOURCE's absolute path
// when it is a local directory, else "".
RunSource RunSourceOf(SourceDir first, const std::string& source,
                      std::shared_ptr<ReadContext> shared_context, const OpenOptions& open,
                      std::string watch_dir);

struct RunTreeOptions {
  std::string pin;  // "": the whole run; "latest", "best" or an entry name
  RunClock::duration idle_close = std::chrono::seconds(300);
  RunClock::duration relist = std::chrono::seconds(5);
  RunClock::duration stable = std::chrono::seconds(1);
  // Descriptors the run's open Volumes may hold together (see Descriptors above); 0: half
  // of the soft RLIMIT_NOFILE when the tree opens (the rest is for the session, readers'
  // checkpoints that are held, opens in progress, remote connections).
  size_t max_held_files = 0;
  std::function<RunClock::time_point()> now = [] { return RunClock::now(); };
};

// One node as the front end sees it: a node of an entry's Volume (kVolume, whose Layout
// answers for it and its descendants), or one of the run's own.
struct RunNode {
  enum class Kind : uint8_t { kVolume, kDirectory, kFile, kSymlink };
  Kind kind = Kind::kDirectory;
  uint64_t ino = 0;                // global
  std::shared_ptr<Volume> volume;  // kVolume
  uint64_t base = 0;               // kVolume: global = base | local...
  uint64_t root_ino = 0;           // ...except the Layout root, which is root_ino
  std::string text;                // kFile: its bytes; kSymlink: its target
  struct timespec mtime = {};      // run nodes ({0, 0}: the mount's time)
  uint64_t parent = 0;             // run directories: ".." (0: itself)
  uint32_t mode = 0555;            // run nodes: the most their permission bits show
  // The kernel may keep this node, and names looked up in it, for seconds only (the run
  // changes); a checkpoint's inner nodes are immutable for the life of their slot.
  bool short_lived = false;
  bool short_children = false;

  uint64_t Global(uint64_t local) const { return local == Layout::kRoot ? root_ino : base | local; }
  uint64_t Local(uint64_t global) const {
    return global == root_ino ? Layout::kRoot : global & 0xffffffffu;
  }
  // The whole mount is `volume` (a single checkpoint): identity inodes.
  static RunNode Single(std::shared_ptr<Volume> volume);
};

class RunTree {
 public:
  static constexpr uint64_t kRootIno = 1;
  // `views/`: each entry's views (a training run's, not a pipeline's).
  static constexpr uint64_t kViewsIno = 6;
  static constexpr char kViewsDir[] = "views";

  // Lists the run once (the mount's view at start). A `pin` naming no entry is refused
  // with one line listing the entries.
  static Result<std::unique_ptr<RunTree>> Open(RunSource source,
                                               std::shared_ptr<ReadContext> context,
                                               RunTreeOptions options = {});
  ~RunTree();

  // `ino`, or NotFound (never existed, or its slot was retired). With `open_entry`, an
  // entry directory not open yet is opened first (a lookup or listing inside it), and
  // answers as its Volume root (or as its ERROR directory).
  Result<RunNode> Resolve(uint64_t ino, bool open_entry);
  // Child `name` of run directory `dir` (not kVolume), or NotFound.
  Result<RunNode> Lookup(const RunNode& dir, std::string_view name);
  // Children of run directory `dir` (not kVolume), in order.
  std::vector<std::pair<std::string, RunNode>> List(const RunNode& dir);

  // Lists the run again and applies it (see Live above). Names that appeared or went are
  // passed to the change callback.
  Status Relist();
  // Relist() when the last one is older than `relist` (remote sources, root accesses).
  void MaybeRelist();
  // Closes Volumes nobody holds that were unused for `idle_close`; returns how many.
  size_t CloseIdle();
  // For a local source: the inotify thread (Live above). Call in the serving process.
  // `changed(name)` is told each root name that appeared or went (to invalidate the
  // kernel's entry), and "" when a pinned root may have moved, from that thread.
  void StartWatching(std::function<void(const std::string&)> changed);
  // Ends that thread (before the session it notifies goes). Idempotent.
  void StopWatching();

  ReadContext& context() const { return *context_; }
  const std::string& path() const { return source_.path; }
  // Names shown at the root now, in order, and the latest and best ("" when none).
  std::vector<std::string> EntryNames() const;
  // Whether the run is a diffusers pipeline (its top files shown at the root).
  bool Pipeline() const;
  std::string Latest() const;
  std::string Best() const;
  const std::string& pin() const { return options_.pin; }
  // What the last listing left out, one line each.
  std::vector<std::string> Skipped() const;
  // Views' Volumes open now (an entry's own files and the top files are not counted), and
  // the descriptors every open Volume holds (local stored files).
  size_t OpenVolumes() const;
  size_t HeldFiles() const { return held_files_.load(); }
  size_t max_held_files() const { return options_.max_held_files; }
  // The root's .ckptfs/stats.json.
  std::string StatsJson() const;

 private:
  struct Slot;
  struct Candidate {
    std::string signature;
    RunClock::time_point first_seen;
  };

  RunTree(RunSource source, std::shared_ptr<ReadContext> context, RunTreeOptions options);

  // Applies `listing`; returns root names that appeared or went. `initial`: trust it.
  std::vector<std::string> Apply(const RunListing& listing, bool initial);
  std::shared_ptr<Slot> SlotOf(uint64_t slot_id) const;
  std::shared_ptr<Slot> Shown(const std::string& name) const;
  // The slot the pinned root shows now, or null.
  std::shared_ptr<Slot> PinnedSlot() const;
  // Opens `slot`'s Volume unless open, or failed for good, or failed for a while and not
  // due again; returns its node (root, or ERROR dir).
  RunNode OpenEntry(Slot& slot, uint64_t root_ino);
  // OpenEntry's work, with slot.mu held.
  void OpenLocked(Slot& slot);
  // Takes `slot`'s Volume out of it (to be closed by the caller, outside slot.mu), with
  // its descriptors. Call with slot.mu held.
  std::shared_ptr<Volume> TakeVolume(Slot& slot);
  // Closes least recently used Volumes nobody holds, other than `opening`'s, until the
  // held descriptors are under max_held_files. Call with opening.mu held.
  void MakeRoom(const Slot& opening);
  RunNode EntryDir(const Slot& slot, uint64_t root_ino) const;
  // The root's node for a shown file entry's own file (opened), or nullopt when it fails
  // to open (said in the log, once per slot).
  std::optional<RunNode> OwnNode(Slot& own);
  // Target of `latest` or `best` naming `entry`, from the directory `views` or the root.
  std::string PointerTarget(const std::string& entry, bool in_views) const;
  // Shown slots, views and own files. Call without mu_.
  std::vector<std::shared_ptr<Slot>> ShownSlots() const;
  std::vector<std::pair<std::string, RunNode>> ListViews();
  // A pipeline's top files and folders without weights (the kFiles entry), appended to the
  // root's children `out` unless `names` (the entries') has the name; adds theirs.
  void ListTopFiles(std::set<std::string>& names,
                    std::vector<std::pair<std::string, RunNode>>& out);
  RunNode RootNode() const;
  // `latest` and `best` name valid checkpoints only: opens the ones they name, and when
  // one fails, moves latest to the shown entry of highest step that opens (best: none).
  // Returns the names that changed. Call without mu_, after Apply.
  std::vector<std::string> CheckPointers();
  void WatchLoop();
  void Notify(const std::vector<std::string>& names);

  RunSource source_;
  std::shared_ptr<ReadContext> context_;
  RunTreeOptions options_;
  struct timespec started_ = {};

  mutable std::mutex mu_;                        // guards what follows
  std::vector<std::shared_ptr<Slot>> slots_;     // by id; [0] unused
  std::vector<std::string> order_;               // shown names, listing order
  std::map<std::string, uint32_t> shown_;        // name -> slot id
  std::map<std::string, Candidate> candidates_;  // complete, not yet stable
  std::string latest_, best_;
  bool pipeline_ = false;      // a diffusers pipeline (set by Open, then constant)
  uint32_t files_slot_ = 0;    // the kFiles entry (0: none)
  std::set<uint32_t> failed_;  // slots whose checkpoint failed to open (CheckPointers)
  RunClock::time_point last_list_;
  std::vector<std::string> skipped_;

  std::atomic<size_t> held_files_{0};  // by the Volumes slots hold
  std::mutex opening_mu_;              // guards opening_
  std::condition_variable opening_cv_;
  int opening_ = 0;  // entries being opened now (at most kMaxOpening)

  std::mutex relist_mu_;  // one Relist at a time
  std::function<void(const std::string&)> changed_;
  std::thread watcher_;
  int inotify_fd_ = -1;
  int stop_fd_ = -1;  // eventfd: ends the watcher
};

}  // namespace ckptfs
