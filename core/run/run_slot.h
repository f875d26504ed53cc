// The pieces of RunTree that run_tree.cc (slots, opening, listings applied) and
// run_namespace.cc (what each directory lists, inode resolution) share. Internal to
// core/run: the contract is run_tree.h.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "core/run/run_tree.h"

namespace ckptfs::run_nodes {

// Slot 0: the run's own nodes.
inline constexpr uint64_t kLatestIno = 2;
inline constexpr uint64_t kBestIno = 3;
inline constexpr uint64_t kMetaDirIno = 4;
inline constexpr uint64_t kStatsIno = 5;
inline constexpr uint64_t kViewsLatestIno = 7;
inline constexpr uint64_t kViewsBestIno = 8;
// A failed entry's ERROR file: beyond any Layout inode, so that an entry that opens on a
// later try never serves one of its files under the inode the kernel knew as ERROR.
inline constexpr uint64_t kErrorLocal = 0xffffffffu;
inline constexpr uint64_t kLocalMask = 0xffffffffu;
inline constexpr char kMetaDir[] = ".ckptfs";

inline int64_t Ticks(RunClock::time_point t) { return t.time_since_epoch().count(); }

}  // namespace ckptfs::run_nodes

namespace ckptfs {

struct RunTree::Slot {
  Slot(uint32_t slot_id, RunEntry e) : id(slot_id), entry(std::move(e)) {}
  const uint32_t id;
  const RunEntry entry;
  std::atomic<bool> retired{false};
  std::atomic<int64_t> last_used{0};
  std::mutex mu;                   // guards what follows; held while opening
  std::shared_ptr<Volume> volume;  // null: not open yet, closed idle, or failed
  std::string error;               // why it failed to open ("" unless it did)
  bool transient = false;          // `error` may pass: tried again from `retry_at` on
  RunClock::time_point retry_at;
  RunClock::duration backoff{};  // the wait after the last transient failure
  size_t files = 0;              // descriptors `volume` holds (counted in held_files_)
  uint64_t shape = 0;            // of the first Layout (0: never opened)
  bool own_files = false;        // the entry's own files (RunSource::open_files), not views
  bool error_said = false;       // own files: their failure to open was logged
  uint32_t twin = 0;             // a views slot: its own-files slot (0: none)

  uint64_t base() const { return static_cast<uint64_t>(id) << 32; }
};

}  // namespace ckptfs
