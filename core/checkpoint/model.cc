#include "core/checkpoint/model.h"

#include <algorithm>
#include <vector>

#include "core/format/tf/names.h"

namespace ckptfs {
namespace {

// The top-level sub-tree tensor `i` lies in (see model.h), or "" if it lies in none.
std::string TopKey(const Checkpoint& ckpt, size_t i) {
  const Tensor& t = ckpt.tensors[i];
  switch (ckpt.format) {
    case CheckpointFormat::kTorch:
    case CheckpointFormat::kDeepSpeed:
      return t.name.substr(0, t.top_key_size);
    case CheckpointFormat::kTensorflow: {
      const tf::TfName name = tf::TfKeyToName(ckpt.tensor_keys[i]);
      return name.segments.size() > 1 ? name.segments[0] : std::string();
    }
    case CheckpointFormat::kSafetensors:
    case CheckpointFormat::kSplit: {
      const size_t dot = t.name.find('.');
      return dot == std::string::npos ? std::string() : t.name.substr(0, dot);
    }
  }
  return {};
}

bool IsObjectBasedTf(const Checkpoint& ckpt) {
  return ckpt.format == CheckpointFormat::kTensorflow &&
         std::any_of(ckpt.tensor_keys.begin(), ckpt.tensor_keys.end(),
                     [](const std::string& key) { return tf::IsObjectBasedKey(key); });
}

// Makes sub-tree `key` the model (an object-based TF checkpoint's optimizer slots left
// out); false, and `ckpt` unchanged, if no tensor lies in it.
bool TakeSubtree(Checkpoint& ckpt, const std::string& key, bool dicts_only) {
  const bool tf_objects = IsObjectBasedTf(ckpt);
  std::vector<bool> in(ckpt.tensors.size(), false);
  uint64_t count = 0;
  for (size_t i = 0; i < ckpt.tensors.size(); ++i) {
    const Tensor& t = ckpt.tensors[i];
    // Cheap test first: TopKey splits TF keys.
    if (t.name.size() <= key.size() || t.name.compare(0, key.size(), key) != 0) continue;
    if (dicts_only && !t.top_is_dict) continue;
    if (tf_objects && tf::IsTrainingStateKey(ckpt.tensor_keys[i])) continue;
    if (TopKey(ckpt, i) != key) continue;
    in[i] = true;
    ++count;
  }
  if (count == 0) return false;
  for (size_t i = 0; i < ckpt.tensors.size(); ++i) ckpt.tensors[i].in_model = in[i];
  ckpt.model.key = key;
  ckpt.model.strip = static_cast<uint32_t>(key.size() + 1);
  ckpt.model.tensors = count;
  ckpt.model.whole = false;
  return true;
}

Status UnknownKey(const Checkpoint& ckpt, const std::string& key, const std::string& shown) {
  std::vector<std::string> keys;
  for (size_t i = 0; i < ckpt.tensors.size(); ++i) {
    std::string top = TopKey(ckpt, i);
    if (!top.empty()) keys.push_back(std::move(top));
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::string has = keys.empty() ? "none: every tensor is at the top level" : "";
  constexpr size_t kNamed = 20;
  for (size_t i = 0; i < keys.size() && i < kNamed; ++i) {
    if (i) has += ", ";
    has += keys[i];
  }
  if (keys.size() > kNamed) has += ", ... (" + std::to_string(keys.size() - kNamed) + " more)";
  return Status::InvalidArgument(shown + ": --model-key " + (key.empty() ? "''" : key) +
                                 ": no sub-tree of that name holds tensors (sub-trees that do: " +
                                 has + "; --model-key '' keeps every tensor)");
}

// The TF rule: an object-based checkpoint without its training state.
void DropTrainingState(Checkpoint& ckpt) {
  if (!IsObjectBasedTf(ckpt)) return;
  uint64_t count = 0;
  for (size_t i = 0; i < ckpt.tensors.size(); ++i) {
    ckpt.tensors[i].in_model = !tf::IsTrainingStateKey(ckpt.tensor_keys[i]);
    count += ckpt.tensors[i].in_model ? 1 : 0;
  }
  if (count == ckpt.tensors.size()) return;
  ckpt.model.tensors = count;
  ckpt.model.whole = false;
  ckpt.model.rule = "TensorFlow object checkpoint without optimizer slots and variables";
}

}  // namespace

Status SelectModel(Checkpoint& ckpt, const std::optional<std::string>& model_key,
                   const std::string& shown) {
  ckpt.model = ModelView{};
  ckpt.model.tensors = ckpt.tensors.size();
  for (Tensor& t : ckpt.tensors) t.in_model = true;
  if (model_key) {
    if (model_key->empty()) {
      ckpt.model.rule = "--model-key ''";
    } else if (TakeSubtree(ckpt, *model_key, /*dicts_only=*/false)) {
      ckpt.model.rule = "--model-key";
    } else {
      return UnknownKey(ckpt, *model_key, shown);
    }
    return Status::Ok();
  }
  if (ckpt.format == CheckpointFormat::kTorch) {
    for (std::string_view key : kTorchModelKeys) {
      if (TakeSubtree(ckpt, std::string(key), /*dicts_only=*/true)) {
        ckpt.model.rule = "first of model_state_dict, state_dict, model, module";
        break;
      }
    }
  } else if (ckpt.format == CheckpointFormat::kDeepSpeed) {
    // The consolidated model, under zero_to_fp32's names.
    if (TakeSubtree(ckpt, "model", /*dicts_only=*/true)) ckpt.model.rule = "DeepSpeed: model";
  } else if (ckpt.format == CheckpointFormat::kTensorflow) {
    DropTrainingState(ckpt);
  }
  return Status::Ok();
}

}  // namespace ckptfs
