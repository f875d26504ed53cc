// The per-key split entry of the format table (docs/split.md): a directory holding map.pt
// (torch.save of the list of keys, in order) and one torch.save(tensor) file per key,
// named by SplitKeyFileName (core/encoding/names.h). SOURCE is
//   - that directory, or its map.pt (Rank::kNamed: map.pt names the rest);
//   - a directory holding it as pytorch_model/ (an HF model directory: config.json beside
//     pytorch_model/map.pt); its files are the mount's root files.
// Each key file is a shard, in map.pt order (so the stored order is the keys' order), its
// one tensor viewing its one storage; map.pt is the index (both shown under shards/).
// Strict: map.pt must be a list of str, no key twice or with a NUL, every key's file
// there and a bare tensor, and no other .pt file beside them (a stale or foreign key file
// would only mislead).
#include <algorithm>
#include <unordered_set>

#include "core/checkpoint/assembly.h"
#include "core/checkpoint/hf_layout.h"
#include "core/checkpoint/model.h"
#include "core/encoding/names.h"
#include "core/encoding/torch_file.h"
#include "core/format/formats.h"

namespace ckptfs {
namespace {

constexpr std::string_view kSplitDir = "pytorch_model";
constexpr std::string_view kProbeNames[] = {kSplitMapFile};

using MaybeClaim = std::optional<Claim>;

MaybeClaim Named(std::string file) { return Claim{Claim::Rank::kNamed, std::move(file)}; }

Result<std::optional<Claim>> DetectSplit(const SourceDir& dir) {
  const std::string map(kSplitMapFile);
  if (!dir.named.empty()) return dir.named == map ? Named(map) : MaybeClaim();
  CKPTFS_ASSIGN_OR_RETURN(const bool has_map, dir.Has(map));
  if (has_map) return Named(map);
  // Listings name subdirectories; a server that lists nothing is asked.
  const bool listed = std::binary_search(dir.dirs.begin(), dir.dirs.end(), kSplitDir);
  if (!listed && !(dir.remote && dir.dirs.empty())) return MaybeClaim();
  Result<SourceDir> sub = dir.OpenDir(std::string(kSplitDir));
  if (!sub.ok()) {
    if (sub.status().code() == Status::Code::kIoError) return sub.status();
    return MaybeClaim();
  }
  CKPTFS_ASSIGN_OR_RETURN(const bool sub_has_map, sub->Has(map));
  return sub_has_map ? Named(std::string(kSplitDir) + "/" + map) : MaybeClaim();
}

// One key file: its root must be a tensor. The tensor is named after the file (distinct
// per shard) until ReadSplit gives it its key.
Result<ShardContents> ParseKeyFile(const StoredFile& shard, uint32_t shard_no) {
  CKPTFS_ASSIGN_OR_RETURN(TorchFile file, ReadTorchFile(*shard.source));
  if (!file.root_is_tensor) {
    return Status::Corruption(shard.source->Name() +
                              ": not a bare tensor (a split checkpoint's key file is "
                              "torch.save(tensor))");
  }
  ShardContents out = FromTorchFile(file, shard_no);
  out.tensors[0].name = shard.name;
  return out;
}

// map.pt's keys, checked, and the file name of each.
Status CheckKeys(const std::vector<std::string>& keys, const std::string& shown,
                 std::vector<std::string>& names) {
  std::unordered_set<std::string_view> seen_keys, seen_names;
  names.reserve(keys.size());
  for (const std::string& key : keys) {
    if (const std::string problem = TensorNameProblem(key); !problem.empty()) {
      return Status::Corruption(shown + ": key \"" + key.substr(0, 200) + "\": " + problem +
                                " (names become paths)");
    }
    if (!seen_keys.insert(key).second) {
      return Status::Corruption(shown + ": key \"" + key + "\" is listed twice");
    }
    names.push_back(SplitKeyFileName(key));
  }
  for (size_t i = 0; i < names.size(); ++i) {
    if (!seen_names.insert(names[i]).second) {
      const size_t j =
          static_cast<size_t>(std::find(names.begin(), names.end(), names[i]) - names.begin());
      return Status::Corruption(shown + ": keys \"" + keys[j] + "\" and \"" + keys[i] +
                                "\" both have the file name " + names[i]);
    }
  }
  return Status::Ok();
}

// A .pt file beside map.pt that no key names.
Status CheckNoStrayFiles(const SourceDir& keys_dir, const std::vector<std::string>& sorted_names,
                         const std::string& map_shown) {
  for (const std::string& f : keys_dir.files) {
    const std::string_view plain = StripZst(f);
    // Trainer's own files (optimizer.pt, scheduler.pt) beside the keys are no key files.
    if (plain == kSplitMapFile || !EndsWith(plain, ".pt") ||
        std::binary_search(sorted_names.begin(), sorted_names.end(), plain) ||
        IsHfTrainerFile(plain)) {
      continue;
    }
    const std::optional<SplitName> decoded = DecodeSplitFileName(plain);
    std::string why =
        !decoded ? "is no key's file name (see docs/split.md)"
        : decoded->hashed
            ? "is the file of a long key " + map_shown + " does not list"
            : "is the file of key \"" + decoded->key + "\", which " + map_shown + " does not list";
    return Status::Corruption(JoinShown(keys_dir.path, f) + ": " + why);
  }
  return Status::Ok();
}

Status ReadSplit(const SourceDir& dir, const Claim& claim, ReadContext& context, Checkpoint& ckpt) {
  std::optional<SourceDir> sub;
  if (claim.file != kSplitMapFile) {
    CKPTFS_ASSIGN_OR_RETURN(sub, dir.OpenDir(std::string(kSplitDir)));
  }
  const SourceDir& keys_dir = sub ? *sub : dir;
  const std::string map(kSplitMapFile);
  const std::string map_shown = JoinShown(keys_dir.path, map);
  CKPTFS_ASSIGN_OR_RETURN(StoredFile map_file, OpenStored(keys_dir, map));
  CKPTFS_ASSIGN_OR_RETURN(std::vector<std::string> keys, ReadTorchStringList(*map_file.source));
  std::vector<std::string> names;
  CKPTFS_RETURN_IF_ERROR(CheckKeys(keys, map_shown, names));
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  if (keys_dir.named.empty()) {
    CKPTFS_RETURN_IF_ERROR(CheckNoStrayFiles(keys_dir, sorted, map_shown));
  }
  ckpt.index.push_back(std::move(map_file));
  // A file per key: opened and parsed on worker threads (a request each, when remote).
  EarlyShards early(keys_dir, std::move(sorted), context, &ParseKeyFile);
  CKPTFS_RETURN_IF_ERROR(
      OpenShards(keys_dir, names, map_shown, context, &ParseKeyFile, ckpt, &early.Wait()));
  for (Tensor& t : ckpt.tensors) t.name = std::move(keys[t.shard]);
  CKPTFS_RETURN_IF_ERROR(SortTensors(ckpt));
  // A safetensors conversion of torch weights: what transformers' loader looks for.
  ckpt.metadata = {{"format", "pt"}};
  return Status::Ok();
}

}  // namespace

FormatReader SplitFormat() {
  return FormatReader{
      .name = "split",
      .title = "per-key split torch.save",
      .probe_names = kProbeNames,
      .looks_for = "map.pt or pytorch_model/map.pt with a .pt file per key",
      .accepts_file = [](std::string_view name) { return name == kSplitMapFile; },
      .file_kinds = "map.pt",
      .detect = &DetectSplit,
      .read = &ReadSplit,
      .hidden = nullptr,
      .model = {.top_key = &DottedTopKey},
      .run = {.signs_claimed_folder = true},
  };
}

}  // namespace ckptfs
