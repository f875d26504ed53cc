// The pieces of run discovery that run_listing.cc, run_best.cc and run_top_files.cc share.
// Internal to core/run: the contract users rely on is run_listing.h.
#pragma once

#include <time.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/format/formats.h"
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

// latest and best from the frameworks' records (run_best.cc); the rest of the rules are
// run_listing.cc's.

inline constexpr std::string_view kTrainerState = "trainer_state.json";
// A trainer_state.json larger than this is no record (Trainer's hold a line per log step).
inline constexpr uint64_t kMaxTrainerStateBytes = 16u << 20;

// The last path component of a record's path: matched against entries, never resolved.
std::string LastComponent(std::string path);
// Which "last" save Lightning's ModelCheckpoint made of `name`: 0 for `last.ckpt`, N for
// `last-vN.ckpt` (a later fit() into the same dirpath: _save_last_checkpoint's version
// counter starts at STARTING_VERSION = 1 and joins CHECKPOINT_JOIN_CHAR + "v" + N while the
// name exists), nullopt for any other name. The highest is the newest "last".
std::optional<uint64_t> LightningLastVersion(std::string_view name);
// `a` is after `b`.
bool Later(const timespec& a, const timespec& b);
// A record that cannot be read leaves latest or best to the next rule, with a line: Ok.
Status Skip(std::vector<std::string>& skipped, const Status& why);

// The entry named `name`, or null.
const RunEntry* Find(const RunListing& run, const std::string& name);
// An entry that is there, complete, and without a problem.
bool Usable(const RunEntry* e);
// run.best from HF Trainer's trainer_state.json (see run_best.cc).
Status BestFromTrainerState(const SourceDir& dir, TrainerStates states, RunListing& run);
// run.best from Lightning's ModelCheckpoint state in the checkpoint it resumes from.
Status BestFromLightning(const SourceDir& dir, RunListing& run);
// The entry Lightning resumes from (the newest "last" save), or null.
const RunEntry* LightningResumeEntry(const RunListing& run);

}  // namespace ckptfs
