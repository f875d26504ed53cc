// The Hugging Face sharded-checkpoint index (`*.safetensors.index.json`):
//   {"metadata": {...}, "weight_map": {"tensor.name": "model-00001-of-00002.safetensors"}}
// Parsed strictly: the weight map must be an object of strings, and every shard name must
// be a plain file name (no '/', not "." or "..", no NUL) so an index can never point
// outside the checkpoint directory.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace ckptfs {

struct HfIndex {
  std::vector<std::pair<std::string, std::string>> weight_map;  // tensor -> shard file
  std::vector<std::string> shard_files;                         // distinct shard names, sorted
};

Result<HfIndex> ParseHfIndex(std::string_view text, const std::string& file_name);

// True if `name` is a plain file name that stays inside its directory.
bool IsPlainFileName(std::string_view name);

}  // namespace ckptfs
