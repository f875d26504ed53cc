// The format table: the one place discovery learns which checkpoint formats exist. A
// SOURCE of any kind (local directory, file path, prefix, HTTP or S3 URL) becomes a
// SourceDir (core/source/source_dir.h), and the table decides what it holds:
//
//   | name        | claims (rank)                                  | folder               |
//   |-------------|------------------------------------------------|----------------------|
//   | safetensors | *.safetensors.index.json (named), *.safetensors | safetensors/         |
//   |             | (lone file)                                     |                      |
//   | torch       | *.bin.index.json (named), *.bin/.pt/.pth/.ckpt   | torch/               |
//   | tensorflow  | `checkpoint` state file, SavedModel, PREFIX or  | tf/                  |
//   |             | PREFIX.index (named); a lone *.index (lone)     |                      |
//   | split       | map.pt, or pytorch_model/map.pt (named)         | split/               |
//   | deepspeed   | a ZeRO tag dir's mp_rank_00_model_states.pt or   | deepspeed/           |
//   |             | zero_pp_rank_0_mp_rank_00_model_states.pt (named)|                      |
//   |             | ; an HF Trainer checkpoint's tag that `latest`   |                      |
//   |             | names (inside)                                   |                      |
//   | dcp         | .metadata, shard-*-model-*-of-*.safetensors,     | dcp/                 |
//   |             | model_world_size_W_rank_R.pt (named)             |                      |
//   | keras       | NAME.weights.json (named); *.weights.h5, *.keras,| keras/               |
//   |             | *.h5, *.hdf5 (lone)                              |                      |
//
// Precedence: every entry's detect is asked, in table order. A claim on a file that names
// the rest of a checkpoint (an index, a state file, a prefix: Rank::kNamed) beats a claim
// on a lone weights file (kLoneFile); among equal ranks the earlier entry wins. So a
// safetensors index wins over a torch index beside it, any index over a lone file, and a
// lone .safetensors over a lone .bin, and any weights at the top over a ZeRO tag inside
// (kInside: Trainer gathered the model, stage3_gather_16bit_weights_on_model_save). The
// first kNamed claim ends the walk. A winning
// claim that carries a problem (several indexes, several lone files) is the refusal.
//
// Adding a format: a folder core/format/<fmt>/ holding its parsers and <fmt>_reader.cc,
// which defines its FormatReader (core/checkpoint/format_reader.h: its detect and read,
// and the hooks for what only it knows: its model rule, the keys it stores tensors under,
// inspect's lines, verify's checks, its run rule), and one line in Formats()
// (formats.cc). The entry is the format's identity (Checkpoint::format points at it).
// The build finds the folder's files; nothing else in discovery, the views, the run
// listing or fs/ names a format. CONTRIBUTING.md has the recipe and its tests.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/cache/read_context.h"
#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/format_reader.h"
#include "core/source/remote_options.h"
#include "core/source/source_dir.h"
#include "core/status.h"

namespace ckptfs {

// The two ways to open a checkpoint. Both walk the format table (formats.h) over a
// listing, read what wins, refuse it if a name breaks the rule for names
// (TensorNameProblem, core/encoding/names.h), choose its model view (SelectModel, with
// `options.model_key`) and, for a directory, read the other files.

// SOURCE by its path or URL: a local directory, or the directory of a file path, in which
// case only that file is used. Local files are opened through a LocalDirectory
// (core/source/local_dir.h): only regular files inside SOURCE (the file's directory for a
// file path) are served; a shard that is not one is refused, another file left out with
// a line to `context.options().warn`. An http(s):// or s3:// SOURCE is read through
// RemoteSources (see SourceDir::remote) with `options.remote`, sharing its cache_dir when
// one is given. `listed`: SOURCE's listing as OpenSourceDir (formats.h) made it, if the
// caller has one (a mount that first asked whether SOURCE is a run lists it once). A local
// directory's own mtime becomes Checkpoint::dir_mtime.
Result<Checkpoint> OpenCheckpoint(const std::string& source_path, ReadContext& context,
                                  const OpenOptions& options = {},
                                  const SourceDir* listed = nullptr);

// The checkpoint in listing `dir` (a run's entry, an in-memory listing): the index if there
// is one (preferring model.safetensors.index.json among several), else its only
// .safetensors file... as the table decides. `shown` names SOURCE in refusals that concern
// it as a whole ("": dir.path).
Result<Checkpoint> OpenCheckpointIn(const SourceDir& dir, ReadContext& context,
                                    const OpenOptions& options = {}, const std::string& shown = "");

// The table, in precedence order.
std::span<const FormatReader> Formats();

// The entry named `name` (FormatReader::name, RunEntry::format), or null.
const FormatReader* FormatNamed(std::string_view name);

// Every entry's probe_names, in table order, each once.
std::vector<std::string> ProbeNames();

// True if some entry accepts a file SOURCE named `name`.
bool AnyFormatAcceptsFile(std::string_view name);

// The refusal of a regular file SOURCE no entry accepts (accepts_file).
Status NotACheckpointFile(const std::string& shown);

// The SourceDir of a SOURCE path or URL (a local directory, a file path, an http(s):// or
// s3:// URL), as discovery sees it, probed with this table's names; the same listing
// OpenCheckpoint starts from.
Result<SourceDir> OpenSourceDir(const std::string& source, ReadContext& context,
                                const RemoteOptions& remote);

// The files of `dir` without any checkpoint: every file at its top but `hidden` (sorted),
// and the files of each of `folders` (AddFolderFiles, hf_layout.h), as `others` of a
// files_only Checkpoint (no tensors, no views), shown unchanged and read on use (a
// diffusers pipeline's model_index.json, tokenizer/, scheduler/; a run's top files and each
// checkpoint's own files: core/run/run_listing.h). A file the source refuses is left out
// with a line to context.options().warn.
Result<Checkpoint> ReadFilesOnly(const SourceDir& dir, const std::vector<std::string>& folders,
                                 ReadContext& context, const std::vector<std::string>& hidden = {});

}  // namespace ckptfs
