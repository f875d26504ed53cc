// The model view: which tensors of a checkpoint are "the model" that the merged files
// (model.safetensors, pytorch_model.bin) hold, and under which names. tensors/ and
// .ckptfs/metadata.json show everything whatever the model is.
//
// The rule, per format, when no key is given, is the format's table entry's
// (FormatReader::ModelRule, core/format/formats.h); today's rules:
//   - torch.save: if the pickled root is a dict, the first of `model_state_dict`,
//     `state_dict`, `model`, `module` whose value is a dict holding tensors is the model,
//     and that one key and its '.' are cut from its tensors' names, so
//     `model.load_state_dict(...)` takes them as they are. One key only: a Lightning
//     `.ckpt`'s `state_dict.model.encoder.weight` becomes `model.encoder.weight`. The
//     choice is made on the pickle's structure, never on dotted names: a flat state dict
//     whose keys read `model.encoder.layers.0.weight` has no sub-tree and stays whole.
//     Otherwise (a weights-only state dict, a root with none of those keys) every tensor.
//   - TensorFlow object-based checkpoints (keys with `.ATTRIBUTES`): every tensor but the
//     training state (tf::IsTrainingStateKey: optimizer slots, `save_counter`, the
//     optimizer's own variables such as `optimizer/iter`); names unchanged. TF1
//     name-based checkpoints: every tensor.
//   - DeepSpeed ZeRO tags: `model`, the consolidated model (core/format/deepspeed/zero.h).
//   - safetensors and per-key split checkpoints: every tensor.
// Whatever the rule or key, a tensor of a type no Dtype names (BlockType, format_reader.h:
// GGUF's quantized tensors) is in no merged view; leaving any out sets the rule
// kBlocksLeftOutRule where the model was every tensor.
// A key (`--model-key`, OpenOptions::model_key, checkpoint.h) overrides the rule: "" keeps every
// tensor with its name unchanged; KEY takes the top-level sub-tree KEY, with `KEY.` cut
// from the names. A top-level sub-tree is, for torch, a container (dict or list) that is a
// value of the root dict; for TF, the keys whose first segment is KEY; for safetensors and split,
// the names that start `KEY.`. A KEY that names no sub-tree holding tensors is refused
// (InvalidArgument) with a line naming SOURCE and the sub-trees there are.
//
// Thread safety: SelectModel changes the Checkpoint (before it is shared); ModelName is
// a pure function.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/checkpoint/checkpoint.h"
#include "core/status.h"

namespace ckptfs {

// The model's rule when tensors of block types were left out of every tensor.
inline constexpr std::string_view kBlocksLeftOutRule =
    "every tensor of a type safetensors has (quantized ones are in tensors/ only)";

// The torch rule's keys, in order of preference.
inline constexpr std::string_view kTorchModelKeys[] = {"model_state_dict", "state_dict", "model",
                                                       "module"};

// Chooses the model of `ckpt` (its tensors sorted, its format_state filled): sets
// `ckpt.model` and every tensor's `in_model`. `shown` names SOURCE in the refusal.
Status SelectModel(Checkpoint& ckpt, const std::optional<std::string>& model_key,
                   const std::string& shown);

// Makes top-level sub-tree `key` (dicts only: a torch container that is a dict) the model,
// leaving out the tensors the format's rule never holds: sets `ckpt.model` (all but its
// rule) and every tensor's `in_model`. False, and `ckpt` unchanged, if no tensor lies in
// it. For the formats' default rules (FormatReader::ModelRule::by_default).
bool TakeModelSubtree(Checkpoint& ckpt, const std::string& key, bool dicts_only);

// The two ways a format names its top-level sub-trees (FormatReader::ModelRule::top_key):
// the name up to its first '.' (safetensors, split), or the root key a pickle's container
// hangs from (Tensor::top_key_size: torch, DeepSpeed).
std::string DottedTopKey(const Checkpoint& ckpt, size_t i);
std::string PickledTopKey(const Checkpoint& ckpt, size_t i);

// The name model tensor `t` has in the merged views: its name without ckpt.model.strip.
inline std::string_view ModelName(const Checkpoint& ckpt, const Tensor& t) {
  return std::string_view(t.name).substr(ckpt.model.strip);
}

}  // namespace ckptfs
