// TensorFlow's rules for a run directory (FormatReader::RunRule of the TF entry, read by
// core/run/run_listing.cc): the `checkpoint` state file TF's CheckpointManager and Saver
// keep there is the run's record, and each TensorBundle prefix is an entry of its own.
// Pure functions of the SourceDir; they read the state file and listings, never a bundle.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/format/formats.h"
#include "core/source/source_dir.h"
#include "core/status.h"

namespace ckptfs {

// The record of the `checkpoint` state file of `dir`, nullopt when there is none or it
// cannot be read (then with a line in `skipped`). Its entries are the prefixes it lists
// (all_model_checkpoint_paths, then model_checkpoint_path, each inside SOURCE by
// tf::StatePathInSource; a relative `sub/ckpt-3` in that subdirectory, as
// checkpoint_management.get_checkpoint_state joins it) whose PREFIX.index is there, and
// every other PREFIX.index of `dir`: a prefix TF keeps unlisted, or a save not named yet.
Result<std::optional<RunRecord>> TfRunRecord(const SourceDir& dir,
                                             std::vector<std::string>& skipped);

// Why bundle `prefix` of `dir` (or `variables/variables`, one directory down) is not whole:
// PREFIX.index and every PREFIX.data-K-of-N there, "" when they are. A store that cannot
// list is asked for PREFIX.index only: its data files are known once the index is read.
Result<std::string> TfBundleIncomplete(const SourceDir& dir, const std::string& prefix);

}  // namespace ckptfs
