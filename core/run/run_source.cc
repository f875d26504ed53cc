// RunSourceOf: a RunTree's view of a real run, through run discovery (run_listing.h).
// Apart from run_tree.cc so that RunTree builds and links without the listing code.
#include <chrono>
#include <mutex>

#include "core/checkpoint/hf_layout.h"
#include "core/format/formats.h"
#include "core/run/run_tree.h"

namespace ckptfs {

RunSource RunSourceOf(SourceDir first, const std::string& source,
                      std::shared_ptr<ReadContext> shared_context, const OpenOptions& open,
                      std::string watch_dir) {
  // A SourceDir is a listing made once: each listing of the run opens SOURCE again, and
  // entries are opened through the SourceDir of the listing that showed them. A SourceDir
  // serves one opening at a time, so listings and entry lookups take turns, and so do
  // remote entries' openings (they share the store's client); local ones, each through
  // its own directory, open in parallel.
  //
  // A remote listing's requests, and those of whatever is opened through it, end by one
  // deadline (--timeout after the listing began: HttpOptions::open_deadline). An entry
  // opened later than kFreshFor after its listing (on first use, again after an idle
  // close, or on a try after a timeout) is opened through a listing made for it, so that
  // it has a whole --timeout of its own rather than none.
  using Clock = std::chrono::steady_clock;
  static constexpr auto kFreshFor = std::chrono::seconds(1);
  struct Shared {
    std::mutex mu;
    SourceDir dir;
    Clock::time_point listed_at = Clock::now();
    bool fresh = true;  // `dir` is the listing main just made: use it for the first list
    std::string source;
    std::shared_ptr<ReadContext> context;
    OpenOptions open;
  };
  auto shared = std::make_shared<Shared>();
  shared->dir = std::move(first);
  shared->source = source;
  shared->context = std::move(shared_context);
  shared->open = open;
  RunSource run;
  run.path = shared->dir.path;
  run.watch_dir = std::move(watch_dir);
  run.list = [shared]() -> Result<RunListing> {
    std::lock_guard<std::mutex> lock(shared->mu);
    if (!shared->fresh) {
      const Clock::time_point began = Clock::now();
      CKPTFS_ASSIGN_OR_RETURN(shared->dir,
                              OpenSourceDir(shared->source, *shared->context, shared->open.remote));
      shared->listed_at = began;
    }
    shared->fresh = false;
    return ListRun(shared->dir);
  };
  // The SourceDir of `entry`, through a listing fresh enough for its opening (above);
  // `lock` is released for a local entry, whose openings run in parallel.
  auto entry_dir = [shared](const RunEntry& entry,
                            std::unique_lock<std::mutex>& lock) -> Result<SourceDir> {
    if (shared->dir.remote && Clock::now() - shared->listed_at > kFreshFor) {
      const Clock::time_point began = Clock::now();
      CKPTFS_ASSIGN_OR_RETURN(shared->dir,
                              OpenSourceDir(shared->source, *shared->context, shared->open.remote));
      shared->listed_at = began;
    }
    Result<SourceDir> dir = EntrySourceDir(shared->dir, entry);
    if (!shared->dir.remote) lock.unlock();
    return dir;
  };
  run.open = [shared, entry_dir](const RunEntry& entry,
                                 ReadContext& context) -> Result<Checkpoint> {
    std::unique_lock<std::mutex> lock(shared->mu);
    const bool top = entry.kind == RunEntry::Kind::kFiles;
    const std::string shown = top ? shared->dir.path : shared->dir.path + "/" + entry.name;
    CKPTFS_ASSIGN_OR_RETURN(SourceDir dir, entry_dir(entry, lock));
    if (top && !entry.views) return ReadFilesOnly(dir, entry.folders, context, entry.hidden);
    return OpenCheckpointIn(dir, context, shared->open, shown);
  };
  // An entry's own files as SOURCE has them: a file entry's one file, a directory entry's
  // files and its folders' (one level, as a pipeline's folders: AddFolderFiles).
  run.open_files = [shared, entry_dir](const RunEntry& entry,
                                       ReadContext& context) -> Result<Checkpoint> {
    std::unique_lock<std::mutex> lock(shared->mu);
    CKPTFS_ASSIGN_OR_RETURN(SourceDir dir, entry_dir(entry, lock));
    std::vector<std::string> folders;
    for (const std::string& name : dir.dirs) {
      if (folders.size() == kMaxModuleFolders) break;
      if (IsPlainName(name)) folders.push_back(name);
    }
    return ReadFilesOnly(dir, folders, context);
  };
  return run;
}

}  // namespace ckptfs
