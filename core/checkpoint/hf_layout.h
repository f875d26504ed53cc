// The Hugging Face layout that safetensors and torch.save checkpoints share: a directory
// holding an index json (`*.safetensors.index.json`, `*.bin.index.json`) and the shards
// it names, or a lone weights file. The two readers (safetensors_reader.cc,
// torch_reader.cc) differ only in the HfLayout they pass: which names are theirs and how
// one shard is parsed.
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/checkpoint/assembly.h"
#include "core/checkpoint/format_reader.h"

namespace ckptfs {

struct HfLayout {
  std::string_view index_suffix;     // ".safetensors.index.json"
  std::string_view preferred_index;  // chosen among several indexes ("" : none, refuse)
  std::string_view preferred_file;   // chosen among several lone weight files ("": refuse)
  // "x.safetensors" for "x.safetensors" and "x.safetensors.zst"; "" if not this format's.
  std::string (*weight_name)(std::string_view file);
  ShardParser parse;
};

// Files the HF ecosystem keeps beside the weights (config, tokenizer). A server cannot
// list them, so both HF formats ask for these by name.
inline constexpr std::string_view kHfCompanionFiles[] = {"config.json",
                                                         "generation_config.json",
                                                         "tokenizer.json",
                                                         "tokenizer_config.json",
                                                         "special_tokens_map.json",
                                                         "tokenizer.model",
                                                         "vocab.json",
                                                         "merges.txt",
                                                         "added_tokens.json",
                                                         "preprocessor_config.json"};

// A file HF Trainer saves beside the model (Trainer._save_checkpoint, Trainer._save):
// `optimizer.pt`, `scheduler.pt`, `scaler.pt`, `training_args.bin`, `rng_state.pth` and
// `rng_state_R.pth` (one per process), `.zst` included. Never weights by name, whatever its
// contents (an optimizer holds tensors, rng_state numpy values): discovery, run listings
// and every format's detection show them as plain files. A SOURCE naming one is still read.
bool IsHfTrainerFile(std::string_view name);

// `own` followed by kHfCompanionFiles: an HF format's probe names (FormatReader::probe_names).
template <size_t N>
constexpr std::array<std::string_view, N + std::size(kHfCompanionFiles)> WithHfCompanions(
    const std::array<std::string_view, N>& own) {
  std::array<std::string_view, N + std::size(kHfCompanionFiles)> all{};
  for (size_t i = 0; i < N; ++i) all[i] = own[i];
  for (size_t i = 0; i < std::size(kHfCompanionFiles); ++i) all[N + i] = kHfCompanionFiles[i];
  return all;
}

// K and N of an HF shard name (`model-00001-of-00002.safetensors`, `.zst` included): one
// of the N files PreTrainedModel.save_pretrained writes, in order, before the index that
// joins them. nullopt for any other name (and for K or N of more than 6 digits).
struct HfShardNumber {
  uint32_t k = 0, n = 0;
};
std::optional<HfShardNumber> HfShardOf(std::string_view name);

// The variant of an HF weights or index file's name, as transformers' and diffusers'
// _add_variant write it (save_pretrained(variant="fp16"): the variant before the last
// extension): "fp16" of model.fp16.safetensors, of its shard
// model.fp16-00001-of-00002.safetensors and of its index model.safetensors.index.fp16.json;
// "" for a name without one (model.safetensors, model-00001-of-00002.safetensors).
std::string HfVariantOf(std::string_view file);

// This format's index (Claim::Rank::kNamed; several without the preferred one: a
// problem), else its lone weights file (kLoneFile; several: a problem), else none. A lone
// file that is shard K of N > 1 is a problem too: it is a sharded save in progress (or
// what is left of one), never a checkpoint on its own.
// Variants: files of a variant (HfVariantOf) are left out of that choice where there are
// weights without one, which are the checkpoint; the variant's files are then shown
// unchanged at their paths (HfHidden), where from_pretrained(variant=...) opens them. A
// directory holding only one variant's weights is that variant's checkpoint (its views
// named for it: HfViewNamesOf); several variants and no plain weights: a problem.
std::optional<Claim> DetectHf(const SourceDir& dir, const HfLayout& layout);

// The names of the merged views (model.safetensors, pytorch_model.bin) of HF weights
// stored as `file` (a claimed index or lone weights file, `.zst` included). A merged
// view is named for what it merges: weights saved under a loader's own name keep it,
// with the other format's counterpart beside it, because that loader opens exactly that
// name (peft: adapter_model.safetensors / adapter_model.bin; diffusers:
// diffusion_pytorch_model.safetensors / diffusion_pytorch_model.bin, also when sharded:
// `diffusion_pytorch_model.safetensors.index.json`). Any other stem (model, pytorch_model,
// a generic `weights.safetensors`, a training `last.ckpt`) is a model for transformers:
// model.safetensors / pytorch_model.bin. No alias under the other names: a PEFT adapter
// shown as model.safetensors would load as a (wrong) base model. Weights of a variant are
// named as _add_variant names them: diffusion_pytorch_model.fp16.safetensors / .fp16.bin,
// model.fp16.safetensors / pytorch_model.fp16.bin.
struct HfViewNames {
  std::string safetensors = "model.safetensors";
  std::string torch = "pytorch_model.bin";
};
HfViewNames HfViewNamesOf(std::string_view file);

// Reads the claimed index and its shards, or the claimed lone file, into `ckpt`, and
// names its merged views (HfViewNamesOf).
Status ReadHf(const SourceDir& dir, const Claim& claim, ReadContext& context,
              const HfLayout& layout, Checkpoint& ckpt);

// sentence-transformers' module folders: `modules.json` at the top of `dir` lists the
// pipeline's modules, each with a "path" ("" for the transformer at the top, "1_Pooling",
// "2_Normalize" for folders beside it holding config.json). The files of each listed
// folder join `ckpt.others` as "FOLDER/NAME", shown in that folder at the mount root,
// unchanged (SentenceTransformer reads them there). Only plain, printable folder names
// that `dir` lists as directories, one level deep, at most kMaxModuleFolders folders of
// kMaxModuleFiles files; anything else in modules.json (a path with '/', "..", a folder
// that is missing or links out) is left out with a line to `options.warn`. A modules.json
// that is not a JSON array is no reason to refuse the checkpoint: it is only a file.
inline constexpr size_t kMaxModuleFolders = 64;
inline constexpr size_t kMaxModuleFiles = 256;
Status OpenHfModuleFolders(const SourceDir& dir, const ReadOptions& options, Checkpoint& ckpt);

// Adds folder `folder` of `dir` to `ckpt` as OpenHfModuleFolders does (its files in
// `others` as "FOLDER/NAME", the folder in `folders`); a folder that does not open or holds
// more than kMaxModuleFiles files, and a file the source refuses (a link out of SOURCE, not
// a regular file), are left out with a line to `warn`.
void AddFolderFiles(const SourceDir& dir, const std::string& folder,
                    const std::function<void(const std::string&)>& warn, Checkpoint& ckpt);

// Files not to show: every .safetensors weight file that is not part of the checkpoint (a
// stale or foreign one would only mislead) and the index and shards of another copy of
// the weights (repositories often ship a torch index beside the safetensors one). Other
// torch files (training_args.bin, optimizer.pt) are shown: they are not weights. Files of
// another variant than the checkpoint's (HfVariantOf) are shown, unchanged: they are
// weights a loader asks for by name.
std::vector<std::string> HfHidden(const SourceDir& dir, const Checkpoint& ckpt);

// WeightName of each HF format, for the readers and HfHidden.
std::string SafetensorsWeightName(std::string_view file);
std::string TorchWeightName(std::string_view file);

}  // namespace ckptfs
