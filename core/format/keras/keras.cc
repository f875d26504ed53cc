// Keras's HDF5 trees as tensors: see keras.h for the rules, and Keras's
// keras/src/saving/saving_lib.py and keras/src/legacy/saving/legacy_h5_format.py for where
// they come from.
#include "core/format/keras/keras.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "core/checked.h"
#include "core/encoding/ordered_json.h"
#include "core/source/source_dir.h"

namespace ckptfs::keras {
namespace {

constexpr std::string_view kVars = "vars";

const h5::Attribute* FindAttribute(const std::vector<h5::Attribute>& attributes,
                                   std::string_view name) {
  for (const h5::Attribute& a : attributes) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

std::string_view Parent(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? std::string_view() : path.substr(0, slash);
}

std::string_view Leaf(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

bool Under(std::string_view path, std::string_view group) {
  return path.size() > group.size() && path.starts_with(group) && path[group.size()] == '/';
}

// A JSON text attribute (model_config, training_config) as ParseJsonText makes it. A
// value that is not a string came from the HDF5 child's description, already bounded
// (h5::DecodeFile parses it with ParseJson).
Result<nlohmann::ordered_json> JsonOrText(const nlohmann::json& value, const std::string& shown) {
  if (!value.is_string()) return nlohmann::ordered_json::parse(value.dump());
  return ParseJsonText(value.get_ref<const std::string&>(), shown);
}

// The root's attributes Keras writes (save_model_to_hdf5) into metadata.
Status RootMetadata(const h5::Group& root, const h5::Group* weights, const std::string& shown,
                    KerasModel& model) {
  for (std::string_view key : {"keras_version", "backend"}) {
    const h5::Attribute* a = FindAttribute(root.attributes, key);
    if (!a && weights) a = FindAttribute(weights->attributes, key);
    if (a && a->value.is_string()) model.metadata[std::string(key)] = a->value;
  }
  for (std::string_view key : {"model_config", "training_config"}) {
    if (const h5::Attribute* a = FindAttribute(root.attributes, key)) {
      CKPTFS_ASSIGN_OR_RETURN(model.metadata[key == "model_config" ? "config" : "training_config"],
                              JsonOrText(a->value, shown + ": attribute " + std::string(key)));
    }
  }
  return Status::Ok();
}

struct Located {
  const h5::Dataset* dataset;
  uint32_t part;
};

// Every dataset of every part by path; a path in two parts is refused.
Result<std::map<std::string, Located>> DatasetsByPath(const std::vector<h5::File>& parts,
                                                      const std::vector<std::string>& shown) {
  std::map<std::string, Located> by_path;
  for (uint32_t p = 0; p < parts.size(); ++p) {
    for (const h5::Dataset& d : parts[p].datasets) {
      auto [it, added] = by_path.try_emplace(d.path, Located{&d, p});
      if (!added) {
        std::string message = shown[p];
        message += ": dataset ";
        message += d.path;
        message += " is also in ";
        message += shown[it->second.part];
        return Status::Corruption(message);
      }
    }
  }
  return by_path;
}

// Groups of every part by path, their attributes merged (a sharded store writes a vars
// group's `name` in the shard the group was made in).
std::map<std::string, std::vector<h5::Attribute>> GroupsByPath(const std::vector<h5::File>& parts) {
  std::map<std::string, std::vector<h5::Attribute>> groups;
  for (const h5::File& part : parts) {
    for (const h5::Group& g : part.groups) {
      std::vector<h5::Attribute>& attributes = groups[g.path];
      for (const h5::Attribute& a : g.attributes) {
        if (!FindAttribute(attributes, a.name)) attributes.push_back(a);
      }
    }
  }
  return groups;
}

Status Refuse(const std::string& shown, const h5::Dataset& d, std::string_view why) {
  std::string message = shown;
  message += ": dataset ";
  message += d.path;
  message += ' ';
  message += why;
  return Status::Unsupported(message);
}

// Names as the rule in keras.h says; `legacy_names` maps a legacy dataset path to its
// preferred name and layer.
struct Preferred {
  std::string name;
  std::string fallback;  // when `name` is shared
};

}  // namespace

Result<nlohmann::ordered_json> ParseJsonText(std::string_view text, const std::string& shown,
                                             MetadataBudget* budget) {
  Result<nlohmann::ordered_json> parsed = ParseJson<nlohmann::ordered_json>(text, shown, budget);
  if (parsed.ok() || parsed.status().code() != Status::Code::kCorruption) return parsed;
  return nlohmann::ordered_json(std::string(text));
}

Result<Dtype> DatasetDtype(const h5::Dataset& d) {
  switch (d.type) {
    case h5::TypeClass::kFloat:
      if (d.type_size == 2) return Dtype::kF16;
      if (d.type_size == 4) return Dtype::kF32;
      if (d.type_size == 8) return Dtype::kF64;
      break;
    case h5::TypeClass::kInteger:
      switch (d.type_size) {
        case 1:
          return d.is_signed ? Dtype::kI8 : Dtype::kU8;
        case 2:
          return d.is_signed ? Dtype::kI16 : Dtype::kU16;
        case 4:
          return d.is_signed ? Dtype::kI32 : Dtype::kU32;
        case 8:
          return d.is_signed ? Dtype::kI64 : Dtype::kU64;
        default:
          break;
      }
      break;
    case h5::TypeClass::kEnum:
      // h5py's bool: an enum over a 1-byte integer.
      if (d.type_size == 1) return Dtype::kBool;
      break;
    case h5::TypeClass::kOpaque: {
      const h5::Attribute* a = FindAttribute(d.attributes, "dtype");
      if (d.type_size == 2 && a && a->value == "bfloat16") return Dtype::kBF16;
      return Status::Unsupported("is opaque bytes not marked dtype=\"bfloat16\"");
    }
    case h5::TypeClass::kOther:
      break;
  }
  std::string why = "has a type ckptfs serves no tensor of (";
  why += d.problem.empty() ? "size " + std::to_string(d.type_size) : d.problem;
  why += ')';
  return Status::Unsupported(why);
}

Result<std::optional<std::vector<std::string>>> StringListAttribute(
    const std::vector<h5::Attribute>& attributes, std::string_view name, const std::string& shown) {
  std::vector<const nlohmann::json*> pieces;
  if (const h5::Attribute* whole = FindAttribute(attributes, name)) {
    pieces.push_back(&whole->value);
  } else {
    for (size_t i = 0;; ++i) {
      std::string part(name);
      part += std::to_string(i);
      const h5::Attribute* a = FindAttribute(attributes, part);
      if (!a) break;
      pieces.push_back(&a->value);
    }
    if (pieces.empty()) return std::optional<std::vector<std::string>>();
  }
  std::vector<std::string> out;
  for (const nlohmann::json* value : pieces) {
    if (value->is_string()) {
      out.push_back(value->get<std::string>());
      continue;
    }
    if (!value->is_array()) {
      return Status::Corruption(shown + ": attribute " + std::string(name) + " is not strings");
    }
    for (const nlohmann::json& item : *value) {
      if (!item.is_string()) {
        return Status::Corruption(shown + ": attribute " + std::string(name) +
                                  " holds a non-string");
      }
      out.push_back(item.get<std::string>());
    }
  }
  return std::optional<std::vector<std::string>>(std::move(out));
}

Result<KerasModel> Interpret(const std::vector<h5::File>& parts,
                             const std::vector<std::string>& shown) {
  KerasModel model;
  CKPTFS_ASSIGN_OR_RETURN(const auto datasets, DatasetsByPath(parts, shown));
  const auto groups = GroupsByPath(parts);
  const auto root = groups.find("");
  const std::vector<h5::Attribute> none;
  const std::vector<h5::Attribute>& root_attributes = root == groups.end() ? none : root->second;
  const bool has_model_weights = groups.count("model_weights") > 0;
  CKPTFS_ASSIGN_OR_RETURN(const auto root_layers,
                          StringListAttribute(root_attributes, "layer_names", shown[0]));
  const bool legacy = has_model_weights || root_layers.has_value();
  model.layout = legacy ? Layout::kLegacy : Layout::kKeras3;
  const std::string_view optimizer = legacy ? "optimizer_weights" : "optimizer";

  {
    const h5::Group root_group{"", root_attributes};
    const auto weights = groups.find("model_weights");
    const h5::Group weights_group{"model_weights",
                                  weights == groups.end() ? none : weights->second};
    CKPTFS_RETURN_IF_ERROR(
        RootMetadata(root_group, has_model_weights ? &weights_group : nullptr, shown[0], model));
  }

  // Preferred model names by dataset path, with their fallbacks.
  std::map<std::string, Preferred> preferred;
  if (legacy) {
    const std::string top = has_model_weights ? "model_weights" : "";
    const auto top_group = groups.find(top);
    const std::vector<h5::Attribute>& top_attributes =
        top_group == groups.end() ? none : top_group->second;
    CKPTFS_ASSIGN_OR_RETURN(auto layer_names,
                            StringListAttribute(top_attributes, "layer_names", shown[0]));
    if (layer_names) {
      model.metadata["layer_names"] = *layer_names;
      for (const std::string& layer : *layer_names) {
        const std::string layer_path = top.empty() ? layer : top + "/" + layer;
        const auto layer_group = groups.find(layer_path);
        if (layer_group == groups.end()) continue;  // Keras skips it too
        CKPTFS_ASSIGN_OR_RETURN(auto weight_names,
                                StringListAttribute(layer_group->second, "weight_names", shown[0]));
        if (!weight_names) continue;
        for (const std::string& weight : *weight_names) {
          preferred[layer_path + "/" + weight] = Preferred{weight, layer + "/" + weight};
        }
      }
    }
  } else {
    for (const auto& [path, located] : datasets) {
      const std::string_view group = Parent(path);
      if (Leaf(group) != kVars) continue;
      const auto g = groups.find(std::string(group));
      const h5::Attribute* name = g == groups.end() ? nullptr : FindAttribute(g->second, "name");
      if (!name || !name->value.is_string()) continue;
      std::string chosen = name->value.get<std::string>();
      chosen += '/';
      chosen += Leaf(path);
      preferred[path] = Preferred{std::move(chosen), path};
    }
    nlohmann::ordered_json names = nlohmann::ordered_json::object();
    for (const auto& [path, attributes] : groups) {
      const h5::Attribute* name = FindAttribute(attributes, "name");
      if (name && name->value.is_string()) names[path] = name->value;
    }
    if (!names.empty()) model.metadata["names"] = std::move(names);
  }

  // A preferred name two model datasets share falls back for both (nested models reuse
  // layer names; two legacy layers may list one weight name).
  std::map<std::string, int> uses;
  for (const auto& [path, p] : preferred) {
    if (datasets.count(path) && !Under(path, optimizer)) ++uses[p.name];
  }

  for (uint32_t part = 0; part < parts.size(); ++part) {
    for (const h5::Dataset& d : parts[part].datasets) {
      if (!d.problem.empty()) {
        std::string why = "cannot be served as it lies (";
        why += d.problem;
        why += "; Keras writes contiguous, unfiltered datasets, and ckptfs decodes none)";
        return Refuse(shown[part], d, why);
      }
      auto dtype = DatasetDtype(d);
      if (!dtype.ok()) return Refuse(shown[part], d, dtype.status().message());
      KerasTensor t;
      t.key = d.path;
      t.in_model = !Under(d.path, optimizer);
      t.name = d.path;
      if (const auto p = preferred.find(d.path); t.in_model && p != preferred.end()) {
        t.name = uses[p->second.name] > 1 ? p->second.fallback : p->second.name;
      }
      t.dtype = *dtype;
      t.shape = d.shape;
      t.offset = d.offset;
      t.size = d.size;
      t.part = part;
      model.tensors.push_back(std::move(t));
    }
  }

  std::map<std::string_view, const KerasTensor*> by_name;
  for (const KerasTensor& t : model.tensors) {
    auto [it, added] = by_name.try_emplace(t.name, &t);
    if (!added) {
      return Status::Corruption(shown[t.part] + ": datasets " + it->second->key + " and " + t.key +
                                " would both be named \"" + t.name + "\"");
    }
  }
  return model;
}

Result<std::vector<std::string>> ShardFiles(std::string_view json_text, const std::string& shown) {
  CKPTFS_ASSIGN_OR_RETURN(const nlohmann::json map, ParseJson<nlohmann::json>(json_text, shown));
  if (!map.is_object()) {
    return Status::Corruption(shown + ": not a JSON object");
  }
  const auto weight_map = map.find("weight_map");
  if (weight_map == map.end() || !weight_map->is_object()) {
    return Status::Corruption(shown + ": no \"weight_map\" object");
  }
  std::vector<std::string> files;
  std::set<std::string> seen;
  auto add = [&](const nlohmann::json& file) -> Status {
    if (!file.is_string() || !IsPlainName(file.get_ref<const std::string&>())) {
      return Status::Corruption(shown + ": weight_map names " + QuoteJson(file) +
                                ", not a plain file name");
    }
    if (seen.insert(file.get<std::string>()).second) files.push_back(file.get<std::string>());
    return Status::Ok();
  };
  for (const auto& [path, value] : weight_map->items()) {
    if (value.is_array()) {
      for (const nlohmann::json& file : value) CKPTFS_RETURN_IF_ERROR(add(file));
    } else {
      CKPTFS_RETURN_IF_ERROR(add(value));
    }
  }
  if (files.empty()) return Status::Corruption(shown + ": weight_map names no file");
  return files;
}

std::optional<uint64_t> EpochInName(std::string_view name) {
  for (std::string_view suffix : {".weights.h5", ".keras", ".h5", ".hdf5"}) {
    if (name.ends_with(suffix)) {
      name.remove_suffix(suffix.size());
      break;
    }
  }
  std::optional<uint64_t> found;
  size_t integers = 0;
  for (size_t i = 0; i < name.size();) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
    // A metric value: digits with a fraction (0.42) or an exponent (1e-3).
    const bool fraction = end + 1 < name.size() && name[end] == '.' &&
                          std::isdigit(static_cast<unsigned char>(name[end + 1]));
    const bool exponent = end + 1 < name.size() && (name[end] == 'e' || name[end] == 'E') &&
                          (std::isdigit(static_cast<unsigned char>(name[end + 1])) ||
                           name[end + 1] == '-' || name[end + 1] == '+');
    if (fraction || exponent) {
      // Skip the whole value: digits, '.', digits, an exponent.
      end += 1;
      while (end < name.size() &&
             (std::isdigit(static_cast<unsigned char>(name[end])) || name[end] == '.' ||
              name[end] == 'e' || name[end] == 'E' || name[end] == '-' || name[end] == '+')) {
        ++end;
      }
      i = end;
      continue;
    }
    ++integers;
    if (end - i <= 19) {
      uint64_t value = 0;
      bool fits = true;
      for (size_t k = i; k < end; ++k) {
        const auto next = CheckedAdd(CheckedMul(value, 10).value_or(UINT64_MAX),
                                     static_cast<uint64_t>(name[k] - '0'));
        if (!next || *next == UINT64_MAX) fits = false;
        value = next.value_or(0);
      }
      if (fits) found = value;
    }
    i = end;
  }
  if (integers != 1) return std::nullopt;
  return found;
}

std::string SuperblockProblem(std::span<const uint8_t> head, uint64_t file_size) {
  static constexpr uint8_t kSignature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  if (head.size() < 8 || !std::equal(kSignature, kSignature + 8, head.begin())) {
    return "no HDF5 signature at its start";
  }
  if (head.size() < 24) return "shorter than an HDF5 superblock";
  const uint8_t version = head[8];
  if (version > 1) return std::string();  // versions 2 and 3 keep no such promise here
  const uint8_t offsets = head[13];
  if (offsets != 8 && offsets != 4) return std::string();
  // Version 0: base, free-space, end-of-file addresses after 24 bytes; version 1 has 4
  // more bytes (indexed storage K and reserved) before them.
  const size_t base_at = version == 0 ? 24 : 28;
  const size_t eof_at = base_at + 2 * static_cast<size_t>(offsets);
  if (head.size() < eof_at + offsets) return "shorter than an HDF5 superblock";
  auto address = [&](size_t at) {
    uint64_t value = 0;
    for (size_t i = offsets; i-- > 0;) value = (value << 8) | head[at + i];
    return value;
  };
  // The end address counts from the base address (a user block before the superblock).
  const std::optional<uint64_t> end = CheckedAdd(address(base_at), address(eof_at));
  if (!end) return "its HDF5 superblock's end address overflows";
  const uint64_t eof = *end;
  if (eof == file_size) return std::string();
  if (eof < file_size) {
    return "its HDF5 superblock says " + std::to_string(eof) + " bytes of " +
           std::to_string(file_size) + " (still being written?)";
  }
  return "shorter than its HDF5 superblock says (" + std::to_string(eof) + " bytes)";
}

}  // namespace ckptfs::keras
