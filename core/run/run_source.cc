// RunSourceOf: a RunTree's view of a real run, through run discovery (run_listing.h).
// Apart from run_tree.cc so that RunTree builds and links without the listing code.
#include <mutex>

#include "core/checkpoint/formats.h"
#include "core/run/run_tree.h"

namespace ckptfs {

RunSource RunSourceOf(SourceDir dir, std::string local_dir) {
  // A SourceDir serves one opening at a time: listings and entry lookups take turns, and
  // so do remote entries' openings (they share the store's client); local ones, each
  // through its own directory, open in parallel.
  struct Shared {
    SourceDir dir;
    std::mutex mu;
  };
  auto shared = std::make_shared<Shared>();
  shared->dir = std::move(dir);
  RunSource source;
  source.path = shared->dir.path;
  source.watch_dir = std::move(local_dir);
  source.list = [shared] {
    std::lock_guard<std::mutex> lock(shared->mu);
    return ListRun(shared->dir);
  };
  source.open = [shared](const RunEntry& entry, CodecContext& codec) -> Result<Checkpoint> {
    std::unique_lock<std::mutex> lock(shared->mu);
    CKPTFS_ASSIGN_OR_RETURN(SourceDir entry_dir, EntrySourceDir(shared->dir, entry));
    if (!shared->dir.remote) lock.unlock();
    return ReadCheckpoint(entry_dir, codec, shared->dir.path + "/" + entry.name);
  };
  return source;
}

}  // namespace ckptfs
