// Run directories: a SOURCE whose entries are checkpoints (a training run's save dir).
//
// A run's entries, each a checkpoint of any format in the table (core/format/formats.h):
//   - subdirectories that hold a checkpoint (HF Trainer `checkpoint-500/`, any name);
//   - torch files (`*.ckpt`, `*.pt`, `*.pth`, `*.bin`): Lightning's `epoch=3-step=1000.ckpt`
//     and `last.ckpt`, `model_00010.pt`;
//   - TF prefixes that a `checkpoint` state file lists (in SOURCE, or in the subdirectory a
//     relative `sub/ckpt-3` names: RunEntry::within), and those it keeps unlisted.
// The rule (IsRun): a directory with checkpoint subdirectories (the format table claims
// something in them, or they hold `map.pt`), or with two or more torch files that are each
// a checkpoint, or whose TF `checkpoint` file lists two or more prefixes that exist, or
// whose DeepSpeed `latest` file names a tag directory holding a checkpoint, is a run; one holding
// one checkpoint at its top and no checkpoint subdirectories is a checkpoint. Not checkpoints of
// their own: `optimizer.pt`, `scheduler.pt`, `rng_state*.pth`, `training_args.bin`, `scaler.pt`
// (parts of one HF Trainer checkpoint), HF shards
// (`-00001-of-00002.bin`), torch files beside an index json. An HF model at the top of a run
// (config.json beside the weights: Trainer's final model) is entry `final` (Kind::kFinal);
// any other checkpoint at the top is skipped with a line. A directory holding `map.pt`
// is a per-key split checkpoint, never a run. Subdirectories of the top checkpoint are no
// entries: a SavedModel's `variables/`, DeepSpeed's `global_stepN/` beside HF weights.
//
// A sentence-transformers model (`modules.json` at the top beside the transformer's weights)
// whose module folders hold weights too (`2_Dense/model.safetensors`: Dense.save writes
// them there; SentenceTransformer loads each module from its `path`) is one model tree, a
// run of kind pipeline: each such folder is a component entry (kDirectory), and the kFiles
// entry (views = true) is the top checkpoint with its views and its folders without weights
// (`1_Pooling/`), shown at the mount root.
//
// A diffusers pipeline (`model_index.json` at the top: DiffusionPipeline.save_pretrained
// writes it, then each component with its own save_pretrained into a folder of its name;
// from_pretrained reads model_index.json, then loads each component from that folder) is
// a run of kind pipeline (RunListing::pipeline): each subdirectory the format table claims
// is a component entry (kDirectory, `unet/`, `vae/`, `text_encoder/`), and one entry of kind
// kFiles, named ".", stands for SOURCE's top files and its folders without weights
// (`tokenizer/`, `scheduler/`, `feature_extractor/`: RunEntry::folders), shown unchanged at
// the mount root. A pipeline has no latest or best: its components are parts, not saves.
//
// Steps (StepInName), completeness, latest and best: see docs/run-discovery.md. latest:
// DeepSpeed's `latest` file, TF `model_checkpoint_path` (empty: no latest, as TF raises),
// Lightning's newest `last.ckpt`/`last-vN.ckpt`, else the highest step, else the newest; best:
// `best_model_checkpoint` of the `trainer_state.json` in the latest complete checkpoint (the
// one HF Trainer resumes from; SOURCE's own when none has one), else the first
// ModelCheckpoint's `best_model_path` (saved order) in that newest last (or the newest
// .ckpt). docs/runs.md cites each framework's code. Records are
// matched by their last path component against entries, never resolved; only complete
// entries without a `problem` qualify.
//
// Listing is cheap: names, sizes and times, plus the framework records (TF `checkpoint`,
// HF `trainer_state.json`, Lightning callbacks state), never every header. Headers are the
// mount's business, on first use of an entry (RunTree).
//
// Untrusted input: entry names are plain, printable names of SOURCE (no '/', never "." or
// ".."); a symlink that leaves SOURCE, a link loop, a state file naming a path outside
// SOURCE, a record naming an entry that is not there: skipped with a line in `skipped`,
// never followed.
//
// Remote: S3 lists subdirectories as CommonPrefixes; HTTP only with a JSON autoindex
// (core/source/remote_dir.h), else a run needs a TF `checkpoint` file.
//
// Thread safety: pure functions of the SourceDir (which is used by one caller at a time).
#pragma once

#include <time.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/cache/read_context.h"
#include "core/checkpoint/natural_order.h"
#include "core/format/formats.h"
#include "core/source/remote_options.h"
#include "core/source/source_dir.h"
#include "core/status.h"

namespace ckptfs {

struct RunEntry {
  // kFinal: the final model HF Trainer.save_model leaves at the top of its output dir
  // (config.json and the weights beside checkpoint-N/), shown as entry `final`: SOURCE's
  // own files, never latest (docs/runs.md, "The final model").
  // kFiles: a pipeline's top files and folders without weights, shown unchanged at the
  // mount root (name "."; never a directory of its own, never latest).
  // kPrefix: files sharing a prefix that a format's record makes an entry (RecordEntry,
  // core/format/formats.h: a TF bundle's PREFIX.index and data files).
  enum class Kind : uint8_t { kDirectory, kFile, kPrefix, kFinal, kFiles };
  std::string name;  // as in SOURCE: a directory, a file, or a TF prefix (no file itself)
  Kind kind = Kind::kDirectory;
  // kPrefix only: the subdirectory of SOURCE its files lie in, "" for SOURCE itself
  // (RecordEntry::within: a TF state file's `model_checkpoint_path: "sub/ckpt-3"`; plain
  // names only, opened one by one, so it stays inside SOURCE).
  std::string within;
  // kFiles only: SOURCE's subdirectories without weights, shown with their files (plain
  // names, one level deep, at most kMaxModuleFolders of kMaxModuleFiles files).
  std::vector<std::string> folders;
  // kFiles only: the top is a checkpoint shown with its views (a sentence-transformers
  // model whose module folders hold weights: the transformer at the top, OpenCheckpointIn),
  // not SOURCE's files alone (ReadFilesOnly).
  bool views = false;
  // kFiles only: top files shown elsewhere (a run's file entries, each under its own name
  // once complete), sorted.
  std::vector<std::string> hidden;
  std::optional<uint64_t> step;  // the step number its name carries, if any
  // All its files are there and whole (an HF dir with its index and every shard; a torch
  // zip whose end record is valid; a TF prefix the `checkpoint` file names). An incomplete
  // entry is not shown by a mount, and `why_incomplete` says why (for inspect).
  bool complete = false;
  std::string why_incomplete;
  // Complete, but the format table refuses it (several weight files and no index...): the
  // mount shows its ERROR file. Never latest or best.
  std::string problem;
  // The permission bits its directory may show before it is opened (SourceDir::reach of a
  // directory entry: an entry others cannot enter in SOURCE is not shown open to them).
  uint32_t mode = 0555;
  std::string format;          // the format table's name when the listing tells, else ""
  uint64_t bytes = 0;          // its files' sizes as listed (0: unknown)
  struct timespec mtime = {};  // its newest file's ({0, 0}: unknown)
  // Changes whenever any of its files changes (names, sizes, mtimes, ETags): a mount that
  // sees a new signature treats the entry as a new checkpoint, never mixing their bytes.
  std::string signature;
};

struct RunListing {
  std::vector<RunEntry> entries;  // in natural name order (core/checkpoint/natural_order.h)
  // Names of complete entries, or "" when none qualifies; `*_from` says by what record
  // ("checkpoint file", "last.ckpt", "highest step", "newest", "trainer_state.json",
  // "ModelCheckpoint best_model_path").
  std::string latest, latest_from;
  std::string best, best_from;
  std::vector<std::string> skipped;  // one line each, naming what was left out and why
  // A diffusers pipeline (model_index.json at the top): components and a kFiles entry, no
  // latest or best.
  bool pipeline = false;
  // The pipeline is a sentence-transformers model's modules (modules.json), not diffusers'.
  bool modules = false;
  // A run's SOURCE as it is (not a pipeline's, whose kFiles entry is among `entries`): a
  // kFiles entry named "." of every top file that is no file entry (the final model's files,
  // a TF `checkpoint` state file and prefixes, DeepSpeed's `latest`, logs) and every folder
  // that is no directory entry, so that each path of SOURCE names the same file in the mount.
  std::optional<RunEntry> top_files;
};

// The file that makes a directory a diffusers pipeline.
inline constexpr std::string_view kPipelineIndex = "model_index.json";
// The file that lists a sentence-transformers model's modules.
inline constexpr std::string_view kModulesIndex = "modules.json";
// The name of a pipeline's kFiles entry.
inline constexpr std::string_view kPipelineFilesEntry = ".";

// Whether `dir` is a run by the rule above (not a checkpoint itself). InvalidArgument,
// naming the file, when `dir` holds no checkpoint and nothing else makes it a run but a
// DeepSpeed `latest` file that names no tag (`../secret_tag`): never asked for.
Result<bool> IsRun(const SourceDir& dir);

// The entries of run `dir`, with `latest` and `best`.
Result<RunListing> ListRun(const SourceDir& dir);

// The SourceDir that holds entry `entry` of run `dir` (for OpenCheckpointIn,
// core/format/formats.h): the subdirectory, or `dir` with `named` set to the file or prefix; for
// kFiles, `dir` itself (read with ReadFilesOnly, hf_layout.h).
Result<SourceDir> EntrySourceDir(const SourceDir& dir, const RunEntry& entry);

}  // namespace ckptfs
