#include "core/format/hf_index.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace ckptfs {

bool IsPlainFileName(std::string_view name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string_view("/\0", 2)) == std::string_view::npos;
}

Result<HfIndex> ParseHfIndex(std::string_view text, const std::string& file) {
  using nlohmann::json;
  json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status::Corruption(file + ": not valid JSON");
  if (!doc.is_object()) return Status::Corruption(file + ": not a JSON object");
  auto map_it = doc.find("weight_map");
  if (map_it == doc.end() || !map_it->is_object()) {
    return Status::Corruption(file + ": missing \"weight_map\" object");
  }
  HfIndex index;
  index.weight_map.reserve(map_it->size());
  for (const auto& [tensor, shard] : map_it->items()) {
    if (!shard.is_string()) {
      return Status::Corruption(file + ": weight_map entry for \"" + tensor + "\" is not a string");
    }
    const std::string& shard_name = shard.get_ref<const std::string&>();
    if (!IsPlainFileName(shard_name)) {
      return Status::Corruption(file + ": shard name \"" + shard_name +
                                "\" is not a plain file name inside the checkpoint directory");
    }
    index.weight_map.emplace_back(tensor, shard_name);
    index.shard_files.push_back(shard_name);
  }
  std::sort(index.shard_files.begin(), index.shard_files.end());
  index.shard_files.erase(std::unique(index.shard_files.begin(), index.shard_files.end()),
                          index.shard_files.end());
  return index;
}

}  // namespace ckptfs
