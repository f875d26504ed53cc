// The Keras entry of the format table: what tf.keras / Keras 3 save during and after
// training, read as one checkpoint without copying a byte at open.
//
//   - NAME.weights.h5: Keras 3's save_weights and ModelCheckpoint(save_weights_only=True),
//     KerasTuner's trial_NNNN/checkpoint.weights.h5 (saving_lib.py, H5IOStore);
//   - NAME.keras: a zip of metadata.json, config.json and model.weights.h5, every member
//     stored (saving_lib.save_model), so the HDF5 file is one extent of the zip; its
//     unzipped directory form (the same three files); a tf.keras 2.x model.save("x.keras")
//     that wrote legacy HDF5 under that name;
//   - NAME.h5 / NAME.hdf5: legacy tf.keras full models and weights-only files
//     (legacy_h5_format.py);
//   - NAME.weights.json with NAME_00000.weights.h5, ...: Keras 3 sharded weights
//     (ShardedH5IOStore).
//
// The HDF5 metadata is read by libhdf5 in a child process over this checkpoint's byte
// sources (h5::Describe, core/format/keras/h5/h5_file.h), so a remote file is fetched where its
// metadata lies; what the tree means (names, dtypes, the model) is keras::Interpret
// (core/format/keras/keras.h). Each dataset is a tensor at its offset in the stored file
// (plus the member's offset in a .keras zip). Keys are HDF5 paths, which tensors/ mirrors;
// names are the model names of keras.h's rule.
#include <zlib.h>

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/checkpoint/assembly.h"
#include "core/encoding/zip.h"
#include "core/format/formats.h"
#include "core/format/keras/h5/h5_file.h"
#include "core/format/keras/keras.h"
#include "core/transient.h"

namespace ckptfs {
namespace {

constexpr std::string_view kWeightsMember = "model.weights.h5";
constexpr std::string_view kConfigFile = "config.json";
constexpr std::string_view kMetadataFile = "metadata.json";
constexpr std::string_view kMapSuffix = ".weights.json";
constexpr std::string_view kProbeNames[] = {"model.weights.h5", "model.keras", "model.h5"};
constexpr uint64_t kMaxJsonMember = 64ull << 20;

// Keras's own part of a Checkpoint: each tensor's HDF5 path, parallel to tensors.
struct KerasState final : FormatState {
  std::vector<std::string> keys;
  std::string summary;  // inspect's line
};

std::span<const std::string> KerasKeys(const Checkpoint& ckpt) {
  const auto* state = dynamic_cast<const KerasState*>(ckpt.format_state.get());
  return state ? std::span<const std::string>(state->keys) : std::span<const std::string>();
}

// A file Keras writes whole (name only, .zst included).
bool IsKerasFile(std::string_view name) {
  const std::string_view plain = StripZst(name);
  return EndsWith(plain, ".weights.h5") || EndsWith(plain, ".keras") || EndsWith(plain, ".h5") ||
         EndsWith(plain, ".hdf5");
}

bool IsMapFile(std::string_view name) { return EndsWith(name, kMapSuffix); }

// `base_00003.weights.h5`: a shard a sharded store's map names, never a checkpoint alone.
bool IsShardPart(std::string_view name) {
  std::string_view plain = StripZst(name);
  if (!EndsWith(plain, ".weights.h5")) return false;
  plain.remove_suffix(std::string_view(".weights.h5").size());
  if (plain.size() < 6 || plain[plain.size() - 6] != '_') return false;
  return std::all_of(plain.end() - 5, plain.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The Keras files of `dir` that are checkpoints of their own (one name for x and x.zst).
std::vector<std::string> KerasFiles(const SourceDir& dir) {
  const bool sharded = std::any_of(dir.files.begin(), dir.files.end(), IsMapFile);
  std::vector<std::string> files;
  for (const std::string& f : dir.files) {
    if (!IsKerasFile(f) || (sharded && IsShardPart(f))) continue;
    std::string plain(StripZst(f));
    if (files.empty() || files.back() != plain) files.push_back(std::move(plain));
  }
  return files;
}

Result<std::optional<Claim>> DetectKeras(const SourceDir& dir) {
  if (!dir.named.empty()) {
    if (IsMapFile(dir.named)) return std::optional<Claim>(Claim{Claim::Rank::kNamed, dir.named});
    if (!IsKerasFile(dir.named)) return std::optional<Claim>();
    return std::optional<Claim>(Claim{Claim::Rank::kLoneFile, std::string(StripZst(dir.named))});
  }
  std::vector<std::string> maps;
  for (const std::string& f : dir.files) {
    if (IsMapFile(f)) maps.push_back(f);
  }
  if (maps.size() == 1) return std::optional<Claim>(Claim{Claim::Rank::kNamed, maps[0]});
  if (maps.size() > 1) {
    return std::optional<Claim>(
        Claim{Claim::Rank::kNamed, "",
              Status::InvalidArgument(dir.path + ": several Keras weight maps (" + maps[0] + ", " +
                                      maps[1] + "); cannot tell which is the checkpoint")});
  }
  std::vector<std::string> files = KerasFiles(dir);
  if (files.empty() && dir.probe) {
    for (std::string_view name : kProbeNames) {
      CKPTFS_ASSIGN_OR_RETURN(const bool has, StoredOrAsked(dir, std::string(name)));
      if (has) files.emplace_back(name);
    }
  }
  if (files.empty()) return std::optional<Claim>();
  if (files.size() == 1) return std::optional<Claim>(Claim{Claim::Rank::kLoneFile, files[0]});
  return std::optional<Claim>(
      Claim{Claim::Rank::kLoneFile, "",
            Status::InvalidArgument(dir.path + ": " + std::to_string(files.size()) +
                                    " Keras files (" + files[0] + ", " + files[1] +
                                    ", ...); mount one of them, or the directory as a run")});
}

// A zip member's bytes, stored or deflated (Keras stores every member; zipfile may deflate
// what another tool rewrote), at most kMaxJsonMember.
Result<std::string> ReadMember(const ByteSource& zip, const ZipEntry& e, const std::string& shown) {
  if (e.size > kMaxJsonMember || e.uncompressed_size > kMaxJsonMember) {
    return Status::Corruption(shown + ": " + e.name + " is larger than " +
                              std::to_string(kMaxJsonMember) + " bytes");
  }
  std::string stored(e.size, '\0');
  CKPTFS_RETURN_IF_ERROR(
      zip.ReadAt(e.data_offset, {reinterpret_cast<uint8_t*>(stored.data()), stored.size()}));
  if (e.method == 0) return stored;
  if (e.method != 8) {
    return Status::Unsupported(shown + ": " + e.name + " is compressed with zip method " +
                               std::to_string(e.method));
  }
  std::string out(e.uncompressed_size, '\0');
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return Status::IoError(shown + ": zlib init failed");
  z.next_in = reinterpret_cast<Bytef*>(stored.data());
  z.avail_in = static_cast<uInt>(stored.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&z, Z_FINISH);
  const uint64_t produced = z.total_out;
  inflateEnd(&z);
  if (rc != Z_STREAM_END || produced != out.size()) {
    return Status::Corruption(shown + ": " + e.name + " does not inflate to its stated size");
  }
  return out;
}

// One HDF5 file to describe: [base, base + size) of shard `shard`.
struct Part {
  uint32_t shard = 0;
  uint64_t base = 0;
  uint64_t size = 0;
  std::string shown;
};

// What a .keras zip holds: the weights member's extent, and config/metadata as JSON.
Result<Part> OpenZip(const StoredFile& file, const std::string& shown,
                     nlohmann::ordered_json& metadata, MetadataBudget& budget) {
  CKPTFS_ASSIGN_OR_RETURN(const std::vector<ZipEntry> entries, ReadZipDirectory(*file.source));
  const ZipEntry* weights = nullptr;
  for (const ZipEntry& e : entries) {
    if (e.name == kWeightsMember) {
      weights = &e;
    } else if (e.name == kConfigFile || e.name == kMetadataFile) {
      CKPTFS_ASSIGN_OR_RETURN(const std::string text, ReadMember(*file.source, e, shown));
      budget.AddStored(text.size());
      CKPTFS_ASSIGN_OR_RETURN(metadata[e.name == kConfigFile ? "config" : "metadata"],
                              keras::ParseJsonText(text, shown + ":" + e.name, &budget));
    }
  }
  if (!weights) {
    const bool npz = std::any_of(entries.begin(), entries.end(),
                                 [](const ZipEntry& e) { return e.name == "model.weights.npz"; });
    if (npz) {
      return Status::Unsupported(shown +
                                 ": weights saved as model.weights.npz, not HDF5; "
                                 "ckptfs serves model.weights.h5 only");
    }
    return Status::Corruption(shown + ": no model.weights.h5 in this .keras archive");
  }
  if (weights->method != 0 || weights->size != weights->uncompressed_size) {
    return Status::Unsupported(shown + ": model.weights.h5 is compressed (zip method " +
                               std::to_string(weights->method) +
                               "); Keras stores it, and ckptfs serves only a stored member");
  }
  return Part{0, weights->data_offset, weights->size, shown + ":" + std::string(kWeightsMember)};
}

// The first bytes of a file: a zip's local header signature tells a .keras archive.
Result<bool> IsZip(const ByteSource& source) {
  if (source.Size() < 4) return false;
  std::array<uint8_t, 4> magic{};
  CKPTFS_RETURN_IF_ERROR(source.ReadAt(0, magic));
  return magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4;
}

// A small JSON file of `dir` beside the weights (an unzipped .keras's), if there.
Status AddJsonFile(const SourceDir& dir, std::string_view name, std::string_view key,
                   nlohmann::ordered_json& metadata, MetadataBudget& budget) {
  if (!dir.Lists(std::string(name))) return Status::Ok();
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> file, dir.open(std::string(name)));
  CKPTFS_ASSIGN_OR_RETURN(const std::string text, ReadWhole(*file, kMaxJsonMember));
  budget.AddStored(text.size());
  CKPTFS_ASSIGN_OR_RETURN(
      metadata[std::string(key)],
      keras::ParseJsonText(text, JoinShown(dir.path, std::string(name)), &budget));
  return Status::Ok();
}

// The HDF5 files `claim` stands for, opened into ckpt.shards (and a sharded store's map
// into ckpt.index), with the JSON beside them in `metadata`; returns what kind of save
// they are ("" where only the tree can tell: a bare .h5).
Result<std::string> OpenKerasParts(const SourceDir& dir, const Claim& claim, ReadContext& context,
                                   Checkpoint& ckpt, std::vector<Part>& parts,
                                   nlohmann::ordered_json& metadata, MetadataBudget& budget) {
  if (IsMapFile(claim.file)) {
    CKPTFS_ASSIGN_OR_RETURN(StoredFile map, OpenStored(dir, claim.file));
    CKPTFS_ASSIGN_OR_RETURN(const std::string text, ReadWhole(*map.source, kMaxJsonMember));
    CKPTFS_ASSIGN_OR_RETURN(const std::vector<std::string> names,
                            keras::ShardFiles(text, JoinShown(dir.path, claim.file)));
    ckpt.index.push_back(std::move(map));
    for (const std::string& name : names) {
      CKPTFS_ASSIGN_OR_RETURN(StoredFile shard, OpenWeightFile(dir, name, context));
      const auto no = static_cast<uint32_t>(ckpt.shards.size());
      parts.push_back(Part{no, 0, shard.source->Size(), JoinShown(dir.path, name)});
      ckpt.shards.push_back(std::move(shard));
    }
    return std::string("Keras 3 sharded weights");
  }
  CKPTFS_ASSIGN_OR_RETURN(StoredFile file, OpenWeightFile(dir, claim.file, context));
  const std::string shown = JoinShown(dir.path, claim.file);
  CKPTFS_ASSIGN_OR_RETURN(const bool zip, IsZip(*file.source));
  std::string kind;
  if (zip) {
    CKPTFS_ASSIGN_OR_RETURN(Part part, OpenZip(file, shown, metadata, budget));
    parts.push_back(std::move(part));
    kind = ".keras archive";
  } else {
    parts.push_back(Part{0, 0, file.source->Size(), shown});
    if (claim.file == kWeightsMember) {
      // The unzipped form of a .keras: its config and metadata lie beside it.
      CKPTFS_RETURN_IF_ERROR(AddJsonFile(dir, kConfigFile, "config", metadata, budget));
      CKPTFS_RETURN_IF_ERROR(AddJsonFile(dir, kMetadataFile, "metadata", metadata, budget));
    }
  }
  ckpt.shards.push_back(std::move(file));
  return kind;
}

// Every part's HDF5 tree, each read by its own libhdf5 child, several at once; then what
// Keras's rules make of them together.
Result<keras::KerasModel> DescribeParts(const std::vector<Part>& parts, const Checkpoint& ckpt) {
  std::vector<Result<h5::File>> described(parts.size(), Status::Ok());
  ForEachInParallel(parts.size(), [&](size_t i) {
    const Part& p = parts[i];
    described[i] = h5::Describe(*ckpt.shards[p.shard].source, p.base, p.size, p.shown);
  });
  std::vector<h5::File> files;
  std::vector<std::string> shown;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!described[i].ok()) return described[i].status();
    files.push_back(std::move(described[i]).value());
    shown.push_back(parts[i].shown);
  }
  return keras::Interpret(files, shown);
}

// Storages in shard order, then offset (checkpoint.h), though HDF5 lists datasets in
// name order: reorders ckpt.storages and renumbers the tensors' `storage`.
void PutStoragesInPlace(Checkpoint& ckpt) {
  std::vector<uint32_t> by_place(ckpt.storages.size());
  std::iota(by_place.begin(), by_place.end(), 0u);
  std::sort(by_place.begin(), by_place.end(), [&](uint32_t a, uint32_t b) {
    const Storage& x = ckpt.storages[a];
    const Storage& y = ckpt.storages[b];
    return std::tie(x.shard, x.offset, a) < std::tie(y.shard, y.offset, b);
  });
  std::vector<uint32_t> renumber(by_place.size());
  std::vector<Storage> storages;
  storages.reserve(by_place.size());
  for (uint32_t k = 0; k < by_place.size(); ++k) {
    renumber[by_place[k]] = k;
    storages.push_back(ckpt.storages[by_place[k]]);
  }
  ckpt.storages = std::move(storages);
  for (Tensor& t : ckpt.tensors) t.storage = renumber[t.storage];
}

Status ReadKeras(const SourceDir& dir, const Claim& claim, ReadContext& context, Checkpoint& ckpt) {
  nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
  // The JSON files' trees and metadata.json's text, within 32 times their bytes + 64 MiB.
  MetadataBudget budget(JoinShown(dir.path, claim.file));
  std::vector<Part> parts;
  CKPTFS_ASSIGN_OR_RETURN(std::string kind,
                          OpenKerasParts(dir, claim, context, ckpt, parts, metadata, budget));
  CKPTFS_ASSIGN_OR_RETURN(keras::KerasModel model, DescribeParts(parts, ckpt));
  if (kind.empty()) {
    kind = model.layout == keras::Layout::kLegacy ? "legacy tf.keras HDF5" : "Keras 3 weights";
  }

  // Tensors sorted by name (names are distinct: Interpret checked), keys alongside.
  std::vector<uint32_t> order(model.tensors.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return model.tensors[a].name < model.tensors[b].name; });
  auto state = std::make_unique<KerasState>();
  uint64_t optimizer = 0;
  for (uint32_t i : order) {
    keras::KerasTensor& t = model.tensors[i];
    const Part& p = parts[t.part];
    Storage s;
    s.shard = p.shard;
    s.offset = p.base + t.offset;
    s.size = t.size;
    s.dtype = t.dtype;
    const auto storage = static_cast<uint32_t>(ckpt.storages.size());
    ckpt.storages.push_back(s);
    optimizer += t.in_model ? 0 : 1;
    ckpt.tensors.push_back(Tensor{.name = std::move(t.name),
                                  .dtype = t.dtype,
                                  .shape = std::move(t.shape),
                                  .shard = s.shard,
                                  .offset = s.offset,
                                  .size = s.size,
                                  .storage = storage});
    state->keys.push_back(std::move(t.key));
  }
  PutStoragesInPlace(ckpt);

  // metadata.json: what the file says of itself (a .keras's metadata.json version), then
  // what the tree says (a legacy root's keras_version wins), then the JSON files.
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  out["format"] = kind;
  if (metadata.contains("metadata") && metadata["metadata"].is_object() &&
      metadata["metadata"].contains("keras_version")) {
    out["keras_version"] = metadata["metadata"]["keras_version"];
  }
  for (auto& [key, value] : model.metadata.items()) out[key] = value;
  for (auto& [key, value] : metadata.items()) out[key] = value;
  ckpt.state_json = out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  // The compact text is held with the checkpoint; metadata.json is laid out from it.
  CKPTFS_RETURN_IF_ERROR(budget.ChargeOrRefuse(ckpt.state_json.size()));

  state->summary = kind + ", " + std::to_string(ckpt.tensors.size()) + " datasets (" +
                   std::to_string(ckpt.tensors.size() - optimizer) + " model, " +
                   std::to_string(optimizer) + " optimizer)";
  if (const auto version = out.find("keras_version");
      version != out.end() && version->is_string()) {
    state->summary += ", keras_version ";
    state->summary += version->get<std::string>();
  }
  ckpt.format_state = std::move(state);
  ckpt.metadata = {{"format", "pt"}};
  return Status::Ok();
}

// The optimizer's datasets are no model's (keras.h).
bool IsOptimizerKey(std::string_view key) {
  return key.starts_with("optimizer/") || key.starts_with("optimizer_weights/");
}

std::function<bool(size_t)> KerasOptimizer(const Checkpoint& ckpt) {
  if (KerasKeys(ckpt).size() != ckpt.tensors.size()) return {};
  return [keys = KerasKeys(ckpt)](size_t i) { return IsOptimizerKey(keys[i]); };
}

// With no key: every dataset but the optimizer's, named by keras.h's rule.
void KerasModelOnly(Checkpoint& ckpt) {
  const std::span<const std::string> keys = KerasKeys(ckpt);
  if (keys.size() != ckpt.tensors.size()) return;
  uint64_t count = 0;
  for (size_t i = 0; i < ckpt.tensors.size(); ++i) {
    ckpt.tensors[i].in_model = !IsOptimizerKey(keys[i]);
    count += ckpt.tensors[i].in_model ? 1 : 0;
  }
  if (count == ckpt.tensors.size()) return;
  ckpt.model.tensors = count;
  ckpt.model.whole = false;
  ckpt.model.rule = "Keras: every dataset but the optimizer's";
}

// Keras names hold no sub-trees a key could cut (`dense/0`, `dense_1/kernel:0`): --model-key
// '' alone applies (every dataset, the optimizer's too).
std::string NoTopKey(const Checkpoint&, size_t) { return std::string(); }

std::vector<std::pair<std::string, std::string>> KerasInspect(const Checkpoint& ckpt) {
  const auto* state = dynamic_cast<const KerasState*>(ckpt.format_state.get());
  if (!state) return {};
  return {{"keras", state->summary}};
}

std::vector<std::string> KerasHidden(const SourceDir&, const Checkpoint&) { return {}; }

std::vector<std::string> KeySegments(std::string_view key) {
  std::vector<std::string> segments;
  size_t start = 0;
  for (;;) {
    const size_t slash = key.find('/', start);
    segments.emplace_back(key.substr(start, slash - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return segments;
}

// A run's loose Keras files (ModelCheckpoint's `weights.{epoch:02d}-{val_loss:.2f}.weights.h5`,
// `model_{epoch}.keras`) are entries, each a checkpoint; sharded parts are not.
bool KerasEntryFile(std::string_view name) { return IsKerasFile(name) && !IsShardPart(name); }

std::optional<uint64_t> KerasStep(const std::string& name) { return keras::EpochInName(name); }

// Whole once written: ModelCheckpoint writes in place (h5py.File(path, "w"), zipfile), so a
// save in progress is visible. An HDF5 file's superblock records its end at close; a .keras
// zip's end record comes last.
Result<std::string> KerasIncomplete(const SourceDir& dir, const std::string& file) {
  if (EndsWith(file, kZstdSuffix) || !IsKerasFile(file) || !dir.Lists(file)) return std::string();
  auto opened = dir.open(file);
  if (!opened.ok()) {
    if (IsTransient(opened.status())) return opened.status();
    return std::string();
  }
  const ByteSource& source = **opened;
  CKPTFS_ASSIGN_OR_RETURN(const bool zip, IsZip(source));
  if (zip) {
    auto entries = ReadZipDirectory(source);
    return entries.ok() ? std::string()
                        : std::string("no whole zip directory (still being written?)");
  }
  std::array<uint8_t, 64> head{};
  const uint64_t n = std::min<uint64_t>(head.size(), source.Size());
  CKPTFS_RETURN_IF_ERROR(source.ReadAt(0, std::span<uint8_t>(head.data(), n)));
  return keras::SuperblockProblem(std::span<const uint8_t>(head.data(), n), source.Size());
}

}  // namespace

FormatReader KerasFormat() {
  return FormatReader{
      .name = "keras",
      .title = "Keras",
      .probe_names = kProbeNames,
      .looks_for = "*.weights.h5, *.keras, *.h5, *.weights.json",
      .accepts_file = [](std::string_view name) { return IsKerasFile(name) || IsMapFile(name); },
      .file_kinds = ".weights.h5, .keras, .h5, .weights.json",
      .detect = &DetectKeras,
      .read = &ReadKeras,
      .hidden = &KerasHidden,
      .keys = &KerasKeys,
      .key_segments = &KeySegments,
      .model = {.top_key = &NoTopKey,
                .never_model = &KerasOptimizer,
                .by_default = &KerasModelOnly},
      .inspect = &KerasInspect,
      .run = {.incomplete = &KerasIncomplete, .entry_file = &KerasEntryFile, .step = &KerasStep},
  };
}

}  // namespace ckptfs
