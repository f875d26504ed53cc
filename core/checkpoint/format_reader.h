// What a checkpoint format provides: the FormatReader a format's folder defines
// (core/format/<fmt>/<fmt>_reader.cc) and the table lists (core/format/formats.h), and the
// claims and run records it answers with. The layers below the table (the model rule,
// the views, verify, the run listing) reach a format only through these hooks, by the
// Checkpoint's `format`: no code outside a format's folder names a format.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/cache/read_context.h"
#include "core/checkpoint/checkpoint.h"
#include "core/encoding/stored_range.h"
#include "core/source/source_dir.h"
#include "core/status.h"

namespace ckptfs {

// What a format found in a SourceDir.
struct Claim {
  enum class Rank : uint8_t {
    kNamed = 0,     // a file that names the rest: an index, a state file, a prefix
    kLoneFile = 1,  // one weights file standing alone
    // A checkpoint in a subdirectory that a record of `dir` names: the ZeRO tag an HF
    // Trainer checkpoint's DeepSpeed `latest` names. The model only where the save
    // gathered none at the top: any other claim wins.
    kInside = 2,
  };
  Rank rank = Rank::kLoneFile;
  std::string file;  // what read() starts from (reader-defined: an index, a file, a prefix)
  // Not Ok: this format would be chosen, but cannot tell which files; the refusal.
  Status problem = Status::Ok();
};

// An entry of a run that a format's record makes of files sharing a prefix, neither a
// directory nor a torch file: TF's PREFIX.index with its PREFIX.data-K-of-N, in SOURCE or
// in the subdirectory the record names. Its files are those of that directory whose names
// start with "PREFIX." (core/run/run_listing.h, RunEntry::Kind::kPrefix).
struct RecordEntry {
  std::string name;    // the prefix: a plain name (IsPlainName)
  std::string within;  // the plain path below SOURCE its files lie in ("" for SOURCE)
  // The file that stands for it where the store cannot list (PREFIX.index): its size and
  // time sign the entry.
  std::string key_file;
  // The record names it now: only such an entry may be latest by its step.
  bool named = true;
  // Not named, yet kept on purpose by the writer (TF's keep_checkpoint_every_n_hours):
  // complete all the same. An entry neither named nor kept is a save the record does not
  // name yet: incomplete.
  bool kept = false;
};

// What a format's record in a run directory says (FormatReader::RunRule::record): TF's
// `checkpoint` state file, the `latest` file DeepSpeed's rank 0 writes. Names in it are
// plain names of SOURCE, matched against the run's entries, never resolved here; lines for
// what it names but cannot be used go to the listing's `skipped`.
struct RunRecord {
  std::string title;  // for latest_from and lines: "checkpoint file", "DeepSpeed latest file"
  // The entry it names as latest, "" for none; the line to say when that entry is not a
  // complete one (the run's next rule then decides).
  std::string latest;
  std::string latest_unusable;
  // A line when the record says there is no latest (TF's empty model_checkpoint_path:
  // tf.train.latest_checkpoint raises): no later rule guesses one.
  std::string no_latest;
  // `latest` is a directory its writer fills before writing the record (DeepSpeed: every
  // rank's files, a barrier, then `latest`): a directory of a higher step is a save in
  // progress. A store that cannot list is asked for it by name.
  bool latest_is_dir = false;
  // Not Ok: the record names nothing a run may show (a `latest` of "../secret_tag"): the
  // refusal of a directory that holds nothing else, saying more than "no checkpoint found".
  Status problem = Status::Ok();
  std::vector<RecordEntry> entries;  // those whose files are there (or asked for)
  // Directories below SOURCE the record names entries in (`sub` of `sub/ckpt-3`): parts
  // of those entries, never entries of their own.
  std::vector<std::string> holds;
};

// A tensor a format stores in a type no Dtype names: blocks of `block_elements` elements
// packed into `block_bytes` bytes each (GGUF's quantized ggml types, Q4_0, Q8_0, the
// K-quants...). Its reader gives it as a U8 Tensor over its bytes (shape {bytes}, so every
// byte-level consumer reads it as stored); this says what those bytes hold. Such a tensor
// is in no merged view (SelectModel leaves it out: neither safetensors nor torch has the
// type), only in tensors/ as `leaf.<extension>`, its stored bytes with no header, whose
// xattrs say its type, shape and block size.
struct BlockType {
  std::string_view name;       // "Q4_0": inspect's dtype and user.ckptfs.dtype
  std::string_view extension;  // its tensors/ file's, "q4_0"
  uint32_t block_elements = 0;
  uint32_t block_bytes = 0;
  std::vector<uint64_t> shape;  // in elements, outermost first (numpy's order)
};

// A file a format shows at the mount root besides SOURCE's other files
// (FormatReader::root_files): one of the checkpoint's stored weight files under its own
// name (so the path SOURCE has works on the mount), or a file laid end to end from ranges
// of the stored files and bytes the format makes (a GGUF split set as the one NAME.gguf
// `gguf-split --merge` writes), read through the same extents and cache as every view.
struct RootFile {
  std::string name;               // a plain name
  std::optional<uint32_t> shard;  // set: Checkpoint::shards[*shard] unchanged (no pieces)
  struct Piece {
    StoredRange range;    // stored bytes, when `bytes` is empty
    std::string bytes;    // made bytes (a header, padding), when not empty
    bool tensor = false;  // one tensor's data: a read of its start prefetches the rest
  };
  std::vector<Piece> pieces;
};

struct FormatReader {
  std::string_view name;   // unique; inspect's "format" ("safetensors", "torch")
  std::string_view title;  // the mount's summary line ("torch.save")
  // Names a server is asked for, since it cannot list (HttpDir): this format's usual
  // entry files and the companions it shows. Names learnt from contents are asked for
  // later through SourceDir::Has / open.
  std::span<const std::string_view> probe_names;
  // For "no checkpoint found (...)": the files this format looks for.
  std::string_view looks_for;
  // A regular file SOURCE so named may be this format's (name only; .zst included), and
  // what such names look like, for the refusal of others (".bin, .pt, .pth").
  bool (*accepts_file)(std::string_view name);
  std::string_view file_kinds;
  // What this format finds in `dir` (listing, Has, and small reads such as a state
  // file); nullopt if nothing. With `dir.named` set, only that name (file or prefix) may
  // be claimed. Errors are I/O failures, not "not mine".
  Result<std::optional<Claim>> (*detect)(const SourceDir& dir);
  // Fills shards, index, tensors (sorted, SortTensors), storages, metadata and state of
  // `ckpt` from the claim. `ckpt.source_path`, `remote` and `format` are set already.
  Status (*read)(const SourceDir& dir, const Claim& claim, ReadContext& codec, Checkpoint& ckpt);
  // .ckptfs/metadata.json is {"__metadata__": ...} from the headers' metadata
  // (Checkpoint::metadata, safetensors), not the laid-out state_json of other formats.
  bool metadata_is_header = false;
  // Files of `dir` not to show at the mount root besides those read() used (sorted).
  std::vector<std::string> (*hidden)(const SourceDir& dir, const Checkpoint& ckpt);
  // verify's format-specific checks once every stored byte was read (null: none): each
  // problem found goes to `report` (one line naming the file); an error return ends them.
  Status (*verify)(const Checkpoint& ckpt,
                   const std::function<void(const Status&)>& report) = nullptr;

  // Tensors stored in a type no Dtype names (BlockType above): the type of tensor `i`,
  // nullopt for one whose Dtype is its type. Null: none.
  std::optional<BlockType> (*blocks)(const Checkpoint& ckpt, size_t i) = nullptr;

  // Files at the mount root (RootFile above), in order; each name must not be one the
  // checkpoint's other files or views take. Null: none.
  std::vector<RootFile> (*root_files)(const Checkpoint& ckpt) = nullptr;

  // The keys this format stores tensors under where they are not their names, parallel to
  // ckpt.tensors (TF's raw keys, kept in its Checkpoint::format_state): what TensorKeys
  // (checkpoint.h) returns. Null: the names are the keys.
  std::span<const std::string> (*keys)(const Checkpoint& ckpt) = nullptr;
  // The segments of one of those keys, leaf last: the directories and file of its tensors/
  // path (TF: tf::TfKeyToName's segments). Set with `keys`.
  std::vector<std::string> (*key_segments)(std::string_view key) = nullptr;

  // The model rule (SelectModel, core/checkpoint/model.h): what this format calls a
  // top-level sub-tree (--model-key KEY takes one), which tensors no model holds, and the
  // model when no key is given.
  struct ModelRule {
    // The top-level sub-tree tensor `i` of `ckpt` lies in, "" if none: DottedTopKey (the
    // name up to its first '.') or PickledTopKey (Tensor::top_key_size), model.h, or the
    // format's own (TF splits its raw keys).
    std::string (*top_key)(const Checkpoint& ckpt, size_t i) = nullptr;
    // Tensors no model holds, whatever the key (an object-based TF checkpoint's training
    // state): a test of tensor indices, made once per selection; empty or null: none.
    std::function<bool(size_t)> (*never_model)(const Checkpoint& ckpt) = nullptr;
    // The model when no key is given, on a checkpoint whose every tensor is in_model with
    // `model` whole: may narrow it (TakeModelSubtree, model.h), setting `model.rule`. Null:
    // every tensor, names unchanged.
    void (*by_default)(Checkpoint& ckpt) = nullptr;
  };
  ModelRule model = {};

  // inspect's lines of what only this format knows (DeepSpeed: its ZeRO stage and world
  // sizes), each {label, text}: the table's `label` line and the JSON's "label" key. Null:
  // none.
  std::vector<std::pair<std::string, std::string>> (*inspect)(const Checkpoint& ckpt) = nullptr;

  // How a run directory (core/run/run_listing.h) sees this format's checkpoints.
  struct RunRule {
    // Subdirectories this format writes inside another format's checkpoint directory:
    // parts of that checkpoint, not entries of a run (DeepSpeed's `global_stepN/` in an HF
    // Trainer checkpoint). Null: none.
    bool (*nested_dir)(std::string_view name) = nullptr;
    // Its claim's folder holds the checkpoint's own files (split's key files, a Trainer
    // checkpoint's ZeRO tag): a run entry's signature covers them, so a rewritten one is a
    // new checkpoint.
    bool signs_claimed_folder = false;
    // The torch files of a directory it claims are one checkpoint (DeepSpeed's rank
    // files), never several torch entries of a run.
    bool torch_files_are_one = false;
    // Its claim on a run's top directory is the run's record (TF's state file, naming one
    // of the run's prefixes), not a checkpoint at the top.
    bool claim_is_record = false;
    // A checkpoint of it at the top of a run, beside config.json, is the final model HF
    // Trainer.save_model leaves there: entry `final` (docs/runs.md, "The final model").
    bool final_model = false;
    // The record this format keeps in a run directory `dir`, read from it (small files
    // only); nullopt when there is none. Lines for what cannot be used go to `skipped`;
    // errors are failures that may pass (core/transient.h), never "not mine".
    Result<std::optional<RunRecord>> (*record)(const SourceDir& dir,
                                               std::vector<std::string>& skipped) = nullptr;
    // Why the checkpoint `file` of `dir` names (its claim's file, or a record entry's
    // name) is not whole yet, "" when it is, where this format knows better than the
    // listing's own rule (a torch zip's end record, an index's shards): a TF bundle's
    // PREFIX.index and every data file. Errors: failures that may pass.
    Result<std::string> (*incomplete)(const SourceDir& dir, const std::string& file) = nullptr;
    // A file of a run directory that is a checkpoint of its own, an entry by itself
    // (Keras's ModelCheckpoint files: `weights.05-0.42.weights.h5`, `model_3.keras`), as
    // loose torch files are. Null: none but torch's.
    bool (*entry_file)(std::string_view name) = nullptr;
    // The step such a file's or directory's name carries where this format's writer
    // names them its own way (Keras's `{epoch:02d}-{val_loss:.2f}`); null: StepInName.
    std::optional<uint64_t> (*step)(const std::string& name) = nullptr;
  };
  RunRule run = {};
};

// The entry `ckpt` was read by; a checkpoint no format read (a files_only one, or one
// built in memory) gets an entry with no hooks, named "".
const FormatReader& FormatOf(const Checkpoint& ckpt);

// FormatOf(ckpt).blocks(ckpt, i), or nullopt where the format has no such tensors.
std::optional<BlockType> BlocksOf(const Checkpoint& ckpt, size_t i);

// Tensor `i`'s type and shape as people read them (inspect, the user.ckptfs.* xattrs): its
// Dtype's name and shape, or for a tensor of a block type (a GGUF Q4_0 one) that type's
// name and its shape in elements.
struct TypeShown {
  std::string dtype;
  std::vector<uint64_t> shape;
};
TypeShown TypeOf(const Checkpoint& ckpt, size_t i);

}  // namespace ckptfs
