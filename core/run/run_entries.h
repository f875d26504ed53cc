// The pieces of run discovery that run_listing.cc and run_top_files.cc share. Internal to
// core/run: the contract users rely on is run_listing.h.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/checkpoint/formats.h"
#include "core/run/run_listing.h"

namespace ckptfs {

// The claim the format table makes on `dir`, whichever entry wins (nullopt: none); its
// format's name in `format` when given.
Result<std::optional<Claim>> TopClaim(const SourceDir& dir, std::string* format);

// Adds `name`'s listed size and time to `entry` (bytes, newest time, signature).
// `prefix`: the subdirectory `dir` is of the entry ("pytorch_model/"), for the signature.
// A file the store refuses (a link out of SOURCE, a FIFO) signs the entry as refused, for
// its mount to name; only a transient failure (out of descriptors, a timeout) fails.
Status AddListedFile(const SourceDir& dir, const std::string& name, RunEntry& entry,
                     const std::string& prefix = "");

// Where a trainer_state.json is (an entry's name, "" for SOURCE), and its time.
using TrainerStates = std::vector<std::pair<std::string, timespec>>;

// Entry for subdirectory `name` of `dir`, or nullopt (with a line) when it holds none;
// notes its trainer_state.json in `states`.
Result<std::optional<RunEntry>> DirectoryEntry(const SourceDir& dir, const std::string& name,
                                               std::vector<std::string>& skipped,
                                               TrainerStates& states);

// The listing of a diffusers pipeline (run_listing.h).
Result<RunListing> ListPipeline(const SourceDir& dir);
// The listing of a sentence-transformers model whose module folders hold weights
// (run_listing.h); `top` is the format table's claim on `dir` itself.
Result<RunListing> ListModules(const SourceDir& dir);

// Sets run.top_files (run_listing.h) from `dir` and the entries `run` holds.
Status AddTopFiles(const SourceDir& dir, RunListing& run);

}  // namespace ckptfs
