#include "core/checkpoint/model.h"

#include <algorithm>
#include <vector>

#include "core/checkpoint/format_reader.h"

namespace ckptfs {

std::string DottedTopKey(const Checkpoint& ckpt, size_t i) {
  const std::string& name = ckpt.tensors[i].name;
  const size_t dot = name.find('.');
  return dot == std::string::npos ? std::string() : name.substr(0, dot);
}

std::string PickledTopKey(const Checkpoint& ckpt, size_t i) {
  const Tensor& t = ckpt.tensors[i];
  return t.name.substr(0, t.top_key_size);
}

namespace {

// The top-level sub-tree tensor `i` lies in (see model.h), or "" if it lies in none.
std::string TopKey(const Checkpoint& ckpt, size_t i) {
  const auto top_key = FormatOf(ckpt).model.top_key;
  return top_key ? top_key(ckpt, i) : DottedTopKey(ckpt, i);
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

// Tensors of a type no Dtype names (BlockType, format_reader.h) are in no merged view,
// whatever the key: neither safetensors nor torch has the type, and their bytes as U8
// would be a tensor of another shape under the model's name.
void LeaveOutBlocks(Checkpoint& ckpt) {
  if (!FormatOf(ckpt).blocks) return;
  uint64_t left_out = 0;
  for (size_t i = 0; i < ckpt.tensors.size(); ++i) {
    Tensor& t = ckpt.tensors[i];
    if (!t.in_model || !BlocksOf(ckpt, i)) continue;
    t.in_model = false;
    ++left_out;
  }
  if (left_out == 0) return;
  ckpt.model.tensors -= left_out;
  if (ckpt.model.whole) ckpt.model.rule = std::string(kBlocksLeftOutRule);
  ckpt.model.whole = false;
}

}  // namespace

bool TakeModelSubtree(Checkpoint& ckpt, const std::string& key, bool dicts_only) {
  const auto never_model_of = FormatOf(ckpt).model.never_model;
  const std::function<bool(size_t)> never_model =
      never_model_of ? never_model_of(ckpt) : std::function<bool(size_t)>();
  std::vector<bool> in(ckpt.tensors.size(), false);
  uint64_t count = 0;
  for (size_t i = 0; i < ckpt.tensors.size(); ++i) {
    const Tensor& t = ckpt.tensors[i];
    // Cheap tests first: TopKey may split a raw key.
    if (t.name.size() <= key.size() || t.name.compare(0, key.size(), key) != 0) continue;
    if (dicts_only && !t.top_is_dict) continue;
    if (never_model && never_model(i)) continue;
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

Status SelectModel(Checkpoint& ckpt, const std::optional<std::string>& model_key,
                   const std::string& shown) {
  ckpt.model = ModelView{};
  ckpt.model.tensors = ckpt.tensors.size();
  for (Tensor& t : ckpt.tensors) t.in_model = true;
  if (model_key) {
    if (model_key->empty()) {
      ckpt.model.rule = "--model-key ''";
    } else if (TakeModelSubtree(ckpt, *model_key, /*dicts_only=*/false)) {
      ckpt.model.rule = "--model-key";
    } else {
      return UnknownKey(ckpt, *model_key, shown);
    }
    LeaveOutBlocks(ckpt);
    return Status::Ok();
  }
  if (const auto by_default = FormatOf(ckpt).model.by_default) by_default(ckpt);
  LeaveOutBlocks(ckpt);
  return Status::Ok();
}

}  // namespace ckptfs
