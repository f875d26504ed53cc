#include "core/checkpoint/hf_layout.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>

#include "core/encoding/hf_index.h"

namespace ckptfs {
namespace {

constexpr std::string_view kSafetensorsIndexSuffix = ".safetensors.index.json";
constexpr std::string_view kTorchIndexSuffix = ".bin.index.json";

// Whether `file` is an index of `layout`: X.safetensors.index.json, or a variant's,
// X.safetensors.index.VARIANT.json.
bool IsIndexOf(std::string_view file, const HfLayout& layout) {
  if (EndsWith(file, layout.index_suffix)) return true;
  const std::string_view stem = layout.index_suffix.substr(0, layout.index_suffix.size() - 5);
  const size_t at = file.rfind(stem);  // ".safetensors.index"
  return at != std::string_view::npos && file.size() > at + stem.size() + 1 &&
         file[at + stem.size()] == '.' && EndsWith(file, ".json") && !HfVariantOf(file).empty();
}

// The weight files of `dir` an index of `layout` may list: distinct names without .zst,
// sorted.
std::vector<std::string> LikelyShards(const SourceDir& dir, const HfLayout& layout) {
  std::vector<std::string> names;
  for (const std::string& f : dir.files) {
    std::string name = layout.weight_name(f);
    if (!name.empty()) names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

// Every stored tensor must be in the index, under the shard that stores it, and every
// index entry must be stored. Both lists are walked in name order (an index is usually
// written sorted, so sorting it is a check), which costs a fraction of a hash map's
// lookups at a million tensors. The errors are those of a lookup per tensor: the first
// tensor in name order that is unlisted or listed elsewhere (the first listing of a name
// counts), then the first entry in index order that no shard stores.
Status CheckAgainstIndex(const Checkpoint& ckpt, const HfIndex& index, const std::string& file) {
  const auto& map = index.weight_map;
  std::vector<uint32_t> order(map.size());
  std::iota(order.begin(), order.end(), 0u);
  auto by_name = [&](uint32_t a, uint32_t b) { return map[a].first < map[b].first; };
  if (!std::is_sorted(order.begin(), order.end(), by_name)) {
    std::stable_sort(order.begin(), order.end(), by_name);
  }
  size_t next = 0;  // into order
  bool missing = false;
  for (const Tensor& t : ckpt.tensors) {
    for (; next < order.size() && map[order[next]].first < t.name; ++next) missing = true;
    const std::string& shard = ShardFile(ckpt, t.shard).name;
    if (next == order.size() || map[order[next]].first != t.name) {
      return Status::Corruption(shard + ": tensor \"" + t.name + "\" is not listed in " + file);
    }
    if (map[order[next]].second != shard) {
      return Status::Corruption(file + ": tensor \"" + t.name + "\" is listed in " +
                                map[order[next]].second + " but stored in " + shard);
    }
    while (next < order.size() && map[order[next]].first == t.name) ++next;
  }
  if (!missing && next == order.size()) return Status::Ok();
  for (const auto& [tensor, shard] : map) {
    if (!FindTensor(ckpt, tensor)) {
      return Status::Corruption(shard + ": tensor \"" + tensor + "\" listed in " + file +
                                " is missing from the shard");
    }
  }
  return Status::Ok();
}

// The files of another copy of the weights: an index that is not ours, and the shards it
// names. Best effort: an unreadable index hides only itself.
std::vector<std::string> AlternativeCopy(const SourceDir& dir, const Checkpoint& ckpt) {
  std::vector<std::string> names;
  for (const std::string& f : dir.files) {
    const bool ours = !ckpt.index.empty() && ckpt.index[0].stored_name == f;
    if (ours || !(EndsWith(f, kSafetensorsIndexSuffix) || EndsWith(f, kTorchIndexSuffix))) {
      continue;
    }
    names.push_back(f);
    auto source = dir.open(f);
    if (!source.ok()) continue;
    auto text = ReadWhole(**source);
    auto index = text.ok() ? ParseHfIndex(*text, f) : Result<HfIndex>(text.status());
    if (!index.ok()) continue;
    for (const std::string& shard : index->shard_files) {
      names.push_back(shard);
      names.push_back(shard + std::string(kZstdSuffix));
    }
  }
  return names;
}

Status ReadIndexed(const SourceDir& dir, const std::string& index_name, ReadContext& context,
                   const HfLayout& layout, Checkpoint& ckpt) {
  // Remote files are read only once the index names them: a request each, and a
  // listing may hold stale shards.
  std::optional<EarlyShards> early;
  if (!dir.remote) early.emplace(dir, LikelyShards(dir, layout), context, layout.parse);
  CKPTFS_ASSIGN_OR_RETURN(StoredFile index_file, OpenStored(dir, index_name));
  CKPTFS_ASSIGN_OR_RETURN(std::string text, ReadWhole(*index_file.source));
  CKPTFS_ASSIGN_OR_RETURN(HfIndex index, ParseHfIndex(text, index_name));
  std::string().swap(text);
  ckpt.index.push_back(std::move(index_file));
  CKPTFS_RETURN_IF_ERROR(OpenShards(dir, index.shard_files, index_name, context, layout.parse, ckpt,
                                    early ? &early->Wait() : nullptr));
  early.reset();
  return CheckAgainstIndex(ckpt, index, index_name);
}

}  // namespace

bool IsHfTrainerFile(std::string_view name) {
  name = StripZst(name);
  if (name.starts_with("rng_state") && EndsWith(name, ".pth")) return true;
  return name == "optimizer.pt" || name == "scheduler.pt" || name == "scaler.pt" ||
         name == "training_args.bin";
}

std::string SafetensorsWeightName(std::string_view file) {
  std::string_view name = StripZst(file);
  return EndsWith(name, ".safetensors") ? std::string(name) : std::string();
}

std::string TorchWeightName(std::string_view file) {
  std::string_view name = StripZst(file);
  for (std::string_view suffix : {".bin", ".pt", ".pth", ".ckpt"}) {
    if (EndsWith(name, suffix)) return std::string(name);
  }
  return std::string();
}

std::optional<HfShardNumber> HfShardOf(std::string_view name) {
  name = StripZst(name);
  const size_t of = name.rfind("-of-");
  if (of == std::string_view::npos) return std::nullopt;
  auto digits = [](std::string_view s) {
    return !s.empty() && s.size() <= 6 &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  const size_t k_at = name.rfind('-', of == 0 ? 0 : of - 1);
  const size_t dot = name.find('.', of + 4);
  if (k_at == std::string_view::npos || k_at >= of || dot == std::string_view::npos) {
    return std::nullopt;
  }
  const std::string_view k = name.substr(k_at + 1, of - k_at - 1);
  const std::string_view n = name.substr(of + 4, dot - of - 4);
  if (!digits(k) || !digits(n)) return std::nullopt;
  return HfShardNumber{static_cast<uint32_t>(std::stoul(std::string(k))),
                       static_cast<uint32_t>(std::stoul(std::string(n)))};
}

std::string HfVariantOf(std::string_view file) {
  // Only after the stems save_pretrained writes: a name with a dot of its own
  // (weights.v2.safetensors, last.epoch3.ckpt) is not a variant of anything.
  constexpr std::string_view kStems[] = {"model", "pytorch_model", "diffusion_pytorch_model",
                                         "adapter_model"};
  const std::string_view name = StripZst(file);
  const size_t first = name.find('.');
  if (first == std::string_view::npos ||
      std::find(std::begin(kStems), std::end(kStems), name.substr(0, first)) == std::end(kStems)) {
    return "";
  }
  std::string_view rest = name.substr(first + 1);  // fp16.safetensors, safetensors.index.json
  for (std::string_view index :
       {std::string_view("safetensors.index."), std::string_view("bin.index.")}) {
    if (rest.starts_with(index)) {  // safetensors.index.fp16.json; "" for .index.json
      rest.remove_prefix(index.size());
      const bool variant =
          rest.size() > 5 && EndsWith(rest, ".json") && rest.find('.') == rest.size() - 5;
      return variant ? std::string(rest.substr(0, rest.size() - 5)) : "";
    }
  }
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos) return "";    // model.safetensors
  std::string_view variant = rest.substr(0, dot);  // fp16, or fp16-00001-of-00002
  if (HfShardOf(name)) variant = variant.substr(0, variant.rfind('-', variant.rfind("-of-") - 1));
  return std::string(variant);
}

std::optional<Claim> DetectHf(const SourceDir& dir, const HfLayout& layout) {
  // The plain weights and indexes, else those of the one variant there is.
  std::vector<std::string> plain, variant, variants;
  for (const std::string& f : dir.files) {
    if (!IsIndexOf(f, layout) && layout.weight_name(f).empty()) continue;
    std::string v = HfVariantOf(f);
    (v.empty() ? plain : variant).push_back(f);
    if (!v.empty() && std::find(variants.begin(), variants.end(), v) == variants.end()) {
      variants.push_back(std::move(v));
    }
  }
  if (plain.empty() && variants.size() > 1) {
    return Claim{Claim::Rank::kLoneFile, "",
                 Status::InvalidArgument(dir.path + ": weights of several variants (" +
                                         variants[0] + ", " + variants[1] +
                                         ") and none without a variant; mount a folder "
                                         "holding one")};
  }
  const std::vector<std::string>& files = plain.empty() ? variant : plain;
  std::vector<std::string> indexes;
  for (const std::string& f : files) {
    if (IsIndexOf(f, layout)) indexes.push_back(f);
  }
  if (indexes.size() == 1) return Claim{Claim::Rank::kNamed, indexes[0]};
  if (indexes.size() > 1) {
    if (!layout.preferred_index.empty() &&
        std::find(indexes.begin(), indexes.end(), layout.preferred_index) != indexes.end()) {
      return Claim{Claim::Rank::kNamed, std::string(layout.preferred_index)};
    }
    return Claim{Claim::Rank::kNamed, "",
                 Status::InvalidArgument(dir.path + ": several index files (" + indexes[0] + ", " +
                                         indexes[1] + "); cannot tell which is the checkpoint")};
  }
  // Without an index, the one weights file (files are sorted: x and x.zst are adjacent).
  std::vector<std::string> weights;
  for (const std::string& f : files) {
    std::string weight = layout.weight_name(f);
    if (!weight.empty() && (weights.empty() || weights.back() != weight)) {
      weights.push_back(std::move(weight));
    }
  }
  if (weights.empty()) return std::nullopt;
  if (weights.size() == 1) {
    // save_pretrained writes shard 1, then the others (big ones take seconds each), then
    // the index: shard 1 alone is a save in progress, not a model missing most tensors.
    const std::optional<HfShardNumber> shard = HfShardOf(weights[0]);
    if (!shard || shard->n <= 1) return Claim{Claim::Rank::kLoneFile, weights[0]};
    return Claim{Claim::Rank::kLoneFile, "",
                 Status::InvalidArgument(
                     JoinShown(dir.path, weights[0]) + ": shard " + std::to_string(shard->k) +
                     " of " + std::to_string(shard->n) + " without its siblings and index json")};
  }
  if (!layout.preferred_file.empty() &&
      std::binary_search(weights.begin(), weights.end(), layout.preferred_file)) {
    return Claim{Claim::Rank::kLoneFile, std::string(layout.preferred_file)};
  }
  return Claim{Claim::Rank::kLoneFile, "",
               Status::InvalidArgument(dir.path + ": " + std::to_string(weights.size()) +
                                       " weight files (" + weights[0] + ", " + weights[1] +
                                       ", ...) but no index json to join them")};
}

HfViewNames HfViewNamesOf(std::string_view file) {
  // Loaders that open their own file name, not transformers' (peft's
  // SAFETENSORS_WEIGHTS_NAME / WEIGHTS_NAME, diffusers' SAFETENSORS_WEIGHTS_NAME /
  // WEIGHTS_NAME): the stem is the same for both formats.
  constexpr std::string_view kLoaderStems[] = {"adapter_model", "diffusion_pytorch_model"};
  const std::string variant = HfVariantOf(file);
  std::string_view name = StripZst(file);
  if (!variant.empty()) name = name.substr(0, name.find('.'));  // the stem, as HfVariantOf
  for (std::string_view suffix : {kSafetensorsIndexSuffix, kTorchIndexSuffix,
                                  std::string_view(".safetensors"), std::string_view(".bin")}) {
    if (EndsWith(name, suffix)) {
      name.remove_suffix(suffix.size());
      break;
    }
  }
  const std::string dot_variant = variant.empty() ? "" : "." + variant;
  HfViewNames names{"model" + dot_variant + ".safetensors", "pytorch_model" + dot_variant + ".bin"};
  for (std::string_view stem : kLoaderStems) {
    if (name == stem) {
      names.safetensors = std::string(stem) + dot_variant + ".safetensors";
      names.torch = std::string(stem) + dot_variant + ".bin";
    }
  }
  return names;
}

Status ReadHf(const SourceDir& dir, const Claim& claim, ReadContext& context,
              const HfLayout& layout, Checkpoint& ckpt) {
  HfViewNames names = HfViewNamesOf(claim.file);
  ckpt.safetensors_view = std::move(names.safetensors);
  ckpt.torch_view = std::move(names.torch);
  if (IsIndexOf(claim.file, layout)) {
    return ReadIndexed(dir, claim.file, context, layout, ckpt);
  }
  return OpenShards(dir, {claim.file}, dir.path, context, layout.parse, ckpt);
}

Status OpenHfModuleFolders(const SourceDir& dir, const ReadOptions& options, Checkpoint& ckpt) {
  constexpr std::string_view kModules = "modules.json";
  const auto stored = std::find_if(ckpt.others.begin(), ckpt.others.end(),
                                   [&](const StoredFile& f) { return f.name == kModules; });
  if (stored == ckpt.others.end()) return Status::Ok();
  auto warn = [&](const std::string& line) {
    if (options.warn) options.warn(JoinShown(dir.path, std::string(kModules)) + ": " + line);
  };
  // Its decoded bytes (it may be stored as modules.json.zst). Too big is no reason to
  // refuse the checkpoint; an I/O error is.
  auto text = ReadWhole(*stored->source, 1 << 20);
  if (!text.ok() && text.status().code() == Status::Code::kCorruption) {
    warn(text.status().message() + "; module folders not shown");
    return Status::Ok();
  }
  CKPTFS_RETURN_IF_ERROR(text.status());
  // Values deeper than a module's fields are dropped as parsed: a hostile nesting
  // never becomes a deep tree (the parser itself keeps its stack on the heap).
  const nlohmann::json modules = nlohmann::json::parse(
      *text, [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) { return depth <= 3; },
      /*allow_exceptions=*/false);
  if (!modules.is_array()) {
    warn("not a JSON array of modules; module folders not shown");
    return Status::Ok();
  }
  std::vector<std::string> folders;
  for (const nlohmann::json& module : modules) {
    const auto path = module.is_object() ? module.find("path") : module.end();
    if (!module.is_object() || path == module.end() || !path->is_string()) continue;
    const std::string& name = path->get_ref<const std::string&>();
    if (name.empty()) continue;  // the transformer at the top: the checkpoint itself
    const bool plain = name != "." && name != ".." && name.size() <= 255 &&
                       std::all_of(name.begin(), name.end(), [](char c) {
                         return c != '/' && static_cast<unsigned char>(c) >= 0x20 && c != 0x7f;
                       });
    if (!plain || std::find(dir.dirs.begin(), dir.dirs.end(), name) == dir.dirs.end()) {
      warn("module path \"" + EscapeControlChars(name) + "\" is not a folder beside it; not shown");
      continue;
    }
    if (std::find(folders.begin(), folders.end(), name) == folders.end()) folders.push_back(name);
  }
  if (folders.size() > kMaxModuleFolders) {
    warn(std::to_string(folders.size()) + " module folders; the first " +
         std::to_string(kMaxModuleFolders) + " shown");
    folders.resize(kMaxModuleFolders);
  }
  for (const std::string& folder : folders) AddFolderFiles(dir, folder, warn, ckpt);
  return Status::Ok();
}

void AddFolderFiles(const SourceDir& dir, const std::string& folder,
                    const std::function<void(const std::string&)>& warn, Checkpoint& ckpt) {
  auto sub = dir.OpenDir(folder);
  if (!sub.ok()) {
    warn(sub.status().message() + "; not shown");
    return;
  }
  if (sub->files.size() > kMaxModuleFiles) {
    warn(folder + "/: " + std::to_string(sub->files.size()) + " files; not shown");
    return;
  }
  ckpt.folders.push_back(folder);
  for (const std::string& name : sub->files) {
    // Opened as any stored file: a regular file beneath SOURCE, read on use.
    auto file = OpenStored(*sub, name);
    if (!file.ok()) {
      warn(folder + "/" + name + ": " + file.status().message() + "; not shown");
      continue;
    }
    file->name = folder + "/" + file->name;
    file->stored_name = folder + "/" + file->stored_name;
    ckpt.others.push_back(std::move(file).value());
  }
}

std::vector<std::string> HfHidden(const SourceDir& dir, const Checkpoint& ckpt) {
  std::vector<std::string> names = AlternativeCopy(dir, ckpt);
  const std::string own = ckpt.shards.empty() ? "" : HfVariantOf(ckpt.shards[0].stored_name);
  for (const std::string& f : dir.files) {
    if (!SafetensorsWeightName(f).empty() && HfVariantOf(f) == own) names.push_back(f);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace ckptfs
