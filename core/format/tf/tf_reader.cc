// The TensorFlow entry of the format table: a TensorBundle (PREFIX.index and its
// PREFIX.data-0000K-of-0000N files), found as docs/tensorflow.md says:
//   - SOURCE names a prefix or PREFIX.index: that bundle;
//   - a directory with a `checkpoint` state file: the bundle it names (a stale absolute
//     path is taken by its base name, inside SOURCE);
//   - a SavedModel directory (saved_model.pb beside variables/): variables/variables;
//   - a directory with exactly one *.index: that bundle (ranked as a lone file).
// Each data file is a shard; each numeric tensor one storage over its bytes, a partitioned
// variable one storage made of several stored ranges (Checkpoint::ranges). Strings, the
// object graph and the entries ckptfs does not serve go to state_json. Raw keys are kept in
// the checkpoint's TfState (tf_state.h) for tensors/ paths, the xattr and inspect
// (TensorKeys), and for the model rule, which this entry holds.
//
// Memory: one MetadataBudget (core/encoding/metadata_budget.h) per bundle counts what
// reading it holds: the index bytes, the parsed entries (bundle.h), each tensor's
// Checkpoint entry, each string tensor's bytes while they are decoded, the compact JSON
// text written for metadata.json (held at its size) and the laid-out text the layout makes
// beside it (one copy: the metadata view moves it in). Its stored bytes are the index's
// and each decoded string tensor's; past 32 x those + 64 MiB the checkpoint is refused, one
// line naming the index.
#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/checkpoint/assembly.h"
#include "core/checkpoint/model.h"
#include "core/encoding/metadata_budget.h"
#include "core/format/formats.h"
#include "core/format/tf/bundle.h"
#include "core/format/tf/checkpoint_state.h"
#include "core/format/tf/names.h"
#include "core/format/tf/slices.h"
#include "core/format/tf/sstable.h"
#include "core/format/tf/strings.h"
#include "core/format/tf/tf_run.h"
#include "core/format/tf/tf_state.h"

namespace ckptfs {
namespace {

// The raw keys of `ckpt`, a TF checkpoint being read: its TfState's, made on first use.
std::vector<std::string>& KeysOf(Checkpoint& ckpt) {
  if (!ckpt.format_state) ckpt.format_state = std::make_unique<TfState>();
  return static_cast<TfState&>(*ckpt.format_state).keys;
}

constexpr std::string_view kIndexSuffix = ".index";
constexpr std::string_view kStateFile = "checkpoint";
constexpr std::string_view kSavedModelFiles[] = {"saved_model.pb", "saved_model.pbtxt"};
constexpr std::string_view kSavedModelPrefix = "variables/variables";
// A string tensor larger than this is listed in metadata by size, not decoded.
constexpr uint64_t kMaxStringTensorBytes = 16u << 20;

constexpr std::string_view kProbeNames[] = {kStateFile, kSavedModelFiles[0], kSavedModelFiles[1]};

// "ckpt-3.data-00000-of-00001" and such: a bundle's data file (maybe .zst).
bool IsDataFile(std::string_view name) {
  return StripZst(name).find(".data-") != std::string_view::npos;
}

using MaybeClaim = std::optional<Claim>;

// Whether `dir` holds a TensorFlow 1 V1-format checkpoint at `prefix` (a plain name):
// tf.train.Saver(write_version=V1), the default before TF 1.0 and what session-bundle
// exports (`export`, `export-00000-of-00001` beside `export.meta`) hold. V1 is one table
// per shard, named PREFIX or PREFIX-0000K-of-0000N, with no PREFIX.index.
bool HasV1Checkpoint(const SourceDir& dir, const std::string& prefix) {
  if (dir.Lists(prefix)) return true;
  return std::any_of(dir.files.begin(), dir.files.end(), [&](const std::string& name) {
    return name.rfind(prefix + "-", 0) == 0 &&
           name.find("-of-", prefix.size()) != std::string::npos;
  });
}

// The one line refusing a V1 checkpoint: why, and the way out.
Status V1Refusal(const std::string& shown_prefix) {
  return Status::InvalidArgument(
      shown_prefix +
      ": a TensorFlow 1 checkpoint in the old V1 format (no .index file; "
      "tf.train.Saver(write_version=V1), session-bundle exports): ckptfs reads V2 TensorBundles "
      "(PREFIX.index and PREFIX.data-*); load it in TensorFlow and save it again with "
      "tf.compat.v1.train.Saver() or tf.train.Checkpoint");
}

MaybeClaim NamedClaim(std::string prefix) {
  return Claim{Claim::Rank::kNamed, std::move(prefix), Status::Ok()};
}

// SOURCE named a prefix, or PREFIX.index.
Result<std::optional<Claim>> DetectNamed(const SourceDir& dir) {
  if (EndsWith(dir.named, kIndexSuffix)) {
    return NamedClaim(dir.named.substr(0, dir.named.size() - kIndexSuffix.size()));
  }
  if (dir.Lists(dir.named)) return MaybeClaim();  // a file of another kind
  CKPTFS_ASSIGN_OR_RETURN(const bool has_index, dir.Has(dir.named + std::string(kIndexSuffix)));
  if (!has_index) return MaybeClaim();
  return NamedClaim(dir.named);
}

// The prefix a `checkpoint` state file names; a problem if it cannot be read or names none.
Result<std::optional<Claim>> DetectStateFile(const SourceDir& dir) {
  const std::string shown = JoinShown(dir.path, std::string(kStateFile));
  Result<StoredFile> file = OpenStored(dir, std::string(kStateFile));
  if (!file.ok()) return MaybeClaim();  // not a regular file: not a TF state file
  MaybeClaim claim = NamedClaim("");
  Result<std::string> text = ReadWhole(*file->source, 1u << 20);
  if (!text.ok()) {
    claim->problem = text.status();
    return claim;
  }
  Result<std::string> prefix = tf::LatestCheckpointPrefix(*text, shown);
  if (!prefix.ok()) {
    claim->problem = prefix.status();
    return claim;
  }
  claim->file = std::move(prefix).value();
  return claim;
}

// A SavedModel copied without its graph (saved_model.pb): variables/variables.index.
Result<std::optional<Claim>> DetectVariablesDir(const SourceDir& dir) {
  Result<SourceDir> variables = dir.OpenDir("variables");
  if (!variables.ok()) {
    if (variables.status().code() == Status::Code::kIoError) return variables.status();
    return MaybeClaim();
  }
  CKPTFS_ASSIGN_OR_RETURN(const bool has_index, variables->Has("variables.index"));
  return has_index ? NamedClaim(std::string(kSavedModelPrefix)) : MaybeClaim();
}

Result<std::optional<Claim>> DetectTensorflow(const SourceDir& dir) {
  if (!dir.named.empty()) return DetectNamed(dir);
  CKPTFS_ASSIGN_OR_RETURN(const bool has_state, dir.Has(std::string(kStateFile)));
  if (has_state) {
    CKPTFS_ASSIGN_OR_RETURN(std::optional<Claim> claim, DetectStateFile(dir));
    if (claim) return claim;
  }
  for (std::string_view pb : kSavedModelFiles) {
    CKPTFS_ASSIGN_OR_RETURN(const bool has_pb, dir.Has(std::string(pb)));
    if (has_pb) return NamedClaim(std::string(kSavedModelPrefix));
  }
  std::vector<std::string> indexes;
  for (const std::string& f : dir.files) {
    if (EndsWith(f, kIndexSuffix)) indexes.push_back(f);
  }
  if (indexes.empty()) return DetectVariablesDir(dir);
  // A guess, not a name (no state file says so): ranked as a lone weights file, so a
  // safetensors or torch checkpoint beside a stray .index still wins.
  const std::string prefix = indexes[0].substr(0, indexes[0].size() - kIndexSuffix.size());
  MaybeClaim claim = NamedClaim(prefix);
  claim->rank = Claim::Rank::kLoneFile;
  if (indexes.size() > 1) {
    std::string names;
    for (const std::string& i : indexes) names += (names.empty() ? "" : ", ") + i;
    claim->problem =
        Status::InvalidArgument(JoinShown(dir.path, "") + ": several TensorFlow checkpoints (" +
                                names + "): name one PREFIX, or add a `checkpoint` file");
  }
  return claim;
}

// The directory holding `path`'s last component (OpenDir for each one before it).
Result<SourceDir> DirOf(const SourceDir& dir, const std::string& path, std::string& base) {
  const size_t slash = path.rfind('/');
  base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (slash == std::string::npos) return dir;
  SourceDir at = dir;
  size_t start = 0;
  while (start < slash) {
    const size_t next = path.find('/', start);
    CKPTFS_ASSIGN_OR_RETURN(at, at.OpenDir(path.substr(start, next - start)));
    start = next + 1;
  }
  return at;
}

// Why a non-numeric entry is listed under "skipped" rather than decoded; empty for a
// string tensor that is decoded.
std::string_view SkipReason(const tf::TfTensor& t) {
  switch (t.type.kind) {
    case tf::TfKind::kNumeric:
      return {};
    case tf::TfKind::kString:
      if (t.partitioned()) return "partitioned string tensor";
      return t.where.size > kMaxStringTensorBytes ? "string tensor over 16 MiB" : "";
    case tf::TfKind::kVariant:
      return "variant";
    case tf::TfKind::kResource:
      return "resource";
    case tf::TfKind::kUnsupported:
      return "dtype ckptfs does not serve";
  }
  return {};
}

uint64_t Elements(const tf::TfTensor& t) {
  return std::accumulate(t.shape.begin(), t.shape.end(), uint64_t{1}, std::multiplies<uint64_t>());
}

bool IsObjectGraph(const tf::TfTensor& t) {
  return t.key == tf::kObjectGraphKey && Elements(t) == 1;
}

// The metadata.json text for the entries that are not tensor files: {"tensorflow": {...},
// "strings": {...}, "object_graph": {...}, "skipped": [...]}, the last three only where
// they hold something. Written straight into one string (one pass over the entries per
// member, each in key order), charged to the budget as it grows: no tree of JSON values
// and no second copy of the text.
class MetadataWriter {
 public:
  MetadataWriter(const Checkpoint& ckpt, const tf::TensorBundle& bundle,
                 const std::string& shown_prefix, MetadataBudget& budget)
      : ckpt_(ckpt), bundle_(bundle), shown_prefix_(shown_prefix), budget_(budget) {}

  Result<std::string> Write(const std::string& prefix) {
    nlohmann::ordered_json head = {{"tensorflow",
                                    {{"prefix", prefix},
                                     {"num_shards", bundle_.header.num_shards},
                                     {"producer", bundle_.header.producer},
                                     {"index_blocks", bundle_.index_blocks},
                                     {"snappy_blocks", bundle_.snappy_blocks}}}};
    std::string text = head.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    text.pop_back();  // the closing brace: the other members follow
    CKPTFS_RETURN_IF_ERROR(budget_.Append(out_, text));
    bool any = false;
    for (const tf::TfTensor& t : bundle_.tensors) {
      if (t.type.kind != tf::TfKind::kString || !SkipReason(t).empty() || IsObjectGraph(t)) {
        continue;
      }
      CKPTFS_RETURN_IF_ERROR(budget_.Append(out_, any ? "," : ",\"strings\":{"));
      any = true;
      CKPTFS_RETURN_IF_ERROR(
          WithBytes(t, [&](std::string_view bytes) { return Strings(t, bytes); }));
    }
    if (any) CKPTFS_RETURN_IF_ERROR(budget_.Append(out_, "}"));
    for (const tf::TfTensor& t : bundle_.tensors) {
      if (t.type.kind != tf::TfKind::kString || !SkipReason(t).empty() || !IsObjectGraph(t)) {
        continue;
      }
      CKPTFS_RETURN_IF_ERROR(budget_.Append(out_, ",\"object_graph\":"));
      CKPTFS_RETURN_IF_ERROR(WithBytes(t, [&](std::string_view bytes) { return Graph(t, bytes); }));
    }
    any = false;
    for (const tf::TfTensor& t : bundle_.tensors) {
      const std::string_view why = SkipReason(t);
      if (why.empty()) continue;
      // nlohmann::json's key order (sorted): dtype, key, shape, why.
      CKPTFS_RETURN_IF_ERROR(budget_.Append(
          out_,
          std::string(any ? "," : ",\"skipped\":[") + "{\"dtype\":" + tf::JsonQuoted(t.type.name) +
              ",\"key\":" + tf::JsonQuoted(t.key) + ",\"shape\":" + nlohmann::json(t.shape).dump() +
              ",\"why\":" + tf::JsonQuoted(why) + "}"));
      any = true;
    }
    if (any) CKPTFS_RETURN_IF_ERROR(budget_.Append(out_, "]"));
    CKPTFS_RETURN_IF_ERROR(budget_.Append(out_, "}"));
    // The checkpoint keeps the text for as long as it is mounted: at its size, not with the
    // up to half again that growing it left (charged first, then the larger buffer freed).
    const uint64_t grown = HeapBytes(out_);
    CKPTFS_RETURN_IF_ERROR(budget_.ChargeOrRefuse(out_.size() + 1));
    out_.shrink_to_fit();
    budget_.Release(grown);
    return std::move(out_);
  }

 private:
  std::string What(const tf::TfTensor& t) const {
    return tf::DataFileName(shown_prefix_, t.where.shard_id, bundle_.header.num_shards) + ": \"" +
           t.key + "\"";
  }

  // Calls fn with a string tensor's stored bytes. They are stored metadata: they raise the
  // limit, and are held (charged) only while fn runs.
  Status WithBytes(const tf::TfTensor& t, const std::function<Status(std::string_view)>& fn) {
    budget_.AddStored(t.where.size);
    CKPTFS_RETURN_IF_ERROR(budget_.ChargeOrRefuse(t.where.size));
    std::string bytes(t.where.size, '\0');
    Status s = ckpt_.shards[t.where.shard_id].source->ReadAt(
        t.where.offset, {reinterpret_cast<uint8_t*>(bytes.data()), bytes.size()});
    if (s.ok()) s = fn(bytes);
    budget_.Release(t.where.size);
    return s;
  }

  Status Graph(const tf::TfTensor& t, std::string_view bytes) {
    std::string_view graph;
    CKPTFS_RETURN_IF_ERROR(
        tf::WalkStringTensor(bytes, 1, t.where, What(t), [&](std::string_view s) {
          graph = s;
          return Status::Ok();
        }));
    return tf::AppendObjectGraphJson(graph, What(t), budget_, out_);
  }

  // "key":{"shape":[...],"value":...}: a scalar's value is its string, else a list.
  Status Strings(const tf::TfTensor& t, std::string_view bytes) {
    const bool scalar = t.shape.empty();
    CKPTFS_RETURN_IF_ERROR(budget_.Append(
        out_, tf::JsonQuoted(t.key) + ":{\"shape\":" + nlohmann::json(t.shape).dump() +
                  ",\"value\":" + (scalar ? "" : "[")));
    bool first = true;
    CKPTFS_RETURN_IF_ERROR(
        tf::WalkStringTensor(bytes, Elements(t), t.where, What(t), [&](std::string_view s) {
          std::string quoted = first ? "" : ",";
          quoted += tf::JsonQuoted(s);
          first = false;
          return budget_.Append(out_, quoted);
        }));
    return budget_.Append(out_, scalar ? "}" : "]}");
  }

  const Checkpoint& ckpt_;
  const tf::TensorBundle& bundle_;
  const std::string& shown_prefix_;
  MetadataBudget& budget_;
  std::string out_;
};

// What a tensor's Checkpoint entry holds: the Tensor, its Storage and key slot (each twice:
// the vectors grow by doubling, and SortByName builds them again), name, key and shape.
uint64_t CheckpointTensorBytes(const tf::TfTensor& t, const std::string& name) {
  return 2 * (sizeof(Tensor) + sizeof(Storage) + sizeof(std::string)) + name.size() + 1 +
         t.key.size() + 1 + t.shape.size() * sizeof(uint64_t);
}

// One numeric tensor as a storage (one range, or Checkpoint::ranges) and a tensor over it.
Status AddNumeric(const tf::TfTensor& t, const std::string& index_name, Checkpoint& ckpt,
                  std::string name) {
  const Dtype dtype = *t.type.dtype;
  CKPTFS_ASSIGN_OR_RETURN(std::vector<tf::TfRun> runs,
                          tf::TensorRuns(t, DtypeSize(dtype), index_name));
  Storage s;
  s.dtype = dtype;
  if (!runs.empty()) {
    s.shard = runs[0].shard_id;
    s.offset = runs[0].offset;
  }
  for (const tf::TfRun& r : runs) s.size += r.length;
  if (runs.size() > 1) {
    s.first_range = static_cast<uint32_t>(ckpt.ranges.size());
    s.range_count = static_cast<uint32_t>(runs.size());
    for (const tf::TfRun& r : runs) ckpt.ranges.push_back({r.shard_id, r.offset, r.length});
  }
  const auto storage = static_cast<uint32_t>(ckpt.storages.size());
  ckpt.storages.push_back(s);
  ckpt.tensors.push_back(Tensor{.name = std::move(name),
                                .dtype = dtype,
                                .shape = t.shape,
                                .shard = s.shard,
                                .offset = s.offset,
                                .size = s.size,
                                .storage = storage});
  KeysOf(ckpt).push_back(t.key);
  return Status::Ok();
}

// Sorts tensors (and their keys) by name; two keys with one name are refused, naming both.
Status SortByName(const std::string& index_name, Checkpoint& ckpt) {
  std::vector<std::string>& tensor_keys = KeysOf(ckpt);
  std::vector<uint32_t> order(ckpt.tensors.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return ckpt.tensors[a].name < ckpt.tensors[b].name; });
  for (size_t i = 1; i < order.size(); ++i) {
    if (ckpt.tensors[order[i]].name != ckpt.tensors[order[i - 1]].name) continue;
    return Status::Corruption(index_name + ": keys \"" + tensor_keys[order[i - 1]] + "\" and \"" +
                              tensor_keys[order[i]] + "\" both map to tensor name \"" +
                              ckpt.tensors[order[i]].name + "\"");
  }
  std::vector<Tensor> tensors;
  std::vector<std::string> keys;
  tensors.reserve(order.size());
  keys.reserve(order.size());
  for (uint32_t i : order) {
    tensors.push_back(std::move(ckpt.tensors[i]));
    keys.push_back(std::move(tensor_keys[i]));
  }
  ckpt.tensors = std::move(tensors);
  tensor_keys = std::move(keys);
  return Status::Ok();
}

// Opens the bundle's data files in shard order; a missing one is refused by DataFileSizes.
Status OpenDataFiles(const SourceDir& dir, const tf::TensorBundle& bundle, const std::string& base,
                     const std::string& shown_prefix, ReadContext& context, Checkpoint& ckpt) {
  const auto n = static_cast<uint32_t>(bundle.header.num_shards);
  std::vector<std::optional<StoredFile>> files(n);
  Status error = Status::Ok();
  auto size_of = [&](const std::string& name) -> std::optional<uint64_t> {
    uint32_t k = 0;
    while (k < n && tf::DataFileName(shown_prefix, k, n) != name) ++k;
    if (k == n || !error.ok()) return std::nullopt;
    Result<StoredFile> f = OpenWeightFile(dir, tf::DataFileName(base, k, n), context);
    if (!f.ok()) {
      if (f.status().code() != Status::Code::kNotFound) error = f.status();
      return std::nullopt;
    }
    files[k] = std::move(f).value();
    return files[k]->source->Size();
  };
  Result<std::vector<uint64_t>> sizes = tf::DataFileSizes(bundle, shown_prefix, size_of);
  CKPTFS_RETURN_IF_ERROR(error);
  CKPTFS_RETURN_IF_ERROR(sizes.status());
  CKPTFS_RETURN_IF_ERROR(tf::CheckDataFileExtents(bundle, *sizes, shown_prefix));
  for (auto& f : files) ckpt.shards.push_back(std::move(*f));
  return Status::Ok();
}

Status ReadTensorflow(const SourceDir& source, const Claim& claim, ReadContext& context,
                      Checkpoint& ckpt) {
  std::string base;
  CKPTFS_ASSIGN_OR_RETURN(SourceDir dir, DirOf(source, claim.file, base));
  const std::string shown_prefix = JoinShown(source.path, claim.file);
  const std::string index_name = shown_prefix + std::string(kIndexSuffix);
  Result<StoredFile> index = OpenStored(dir, base + std::string(kIndexSuffix));
  if (!index.ok()) {
    if (index.status().code() != Status::Code::kNotFound) return index.status();
    if (HasV1Checkpoint(dir, base)) return V1Refusal(shown_prefix);
    return Status::NotFound(index_name + ": missing (the TensorFlow checkpoint's index)");
  }
  CKPTFS_ASSIGN_OR_RETURN(std::string bytes, ReadWhole(*index->source));
  MetadataBudget budget(index_name);
  budget.AddStored(bytes.size());
  CKPTFS_RETURN_IF_ERROR(budget.ChargeOrRefuse(bytes.size()));
  CKPTFS_ASSIGN_OR_RETURN(tf::TensorBundle bundle,
                          tf::ParseTensorBundle(bytes, index_name, budget));
  CKPTFS_RETURN_IF_ERROR(OpenDataFiles(dir, bundle, base, shown_prefix, context, ckpt));
  ckpt.index.push_back(std::move(index).value());

  for (const tf::TfTensor& t : bundle.tensors) {
    if (t.type.kind != tf::TfKind::kNumeric) continue;  // metadata.json's, below
    std::string name = tf::TfKeyToName(t.key).dotted;
    CKPTFS_RETURN_IF_ERROR(budget.ChargeOrRefuse(CheckpointTensorBytes(t, name)));
    CKPTFS_RETURN_IF_ERROR(AddNumeric(t, index_name, ckpt, std::move(name)));
  }
  CKPTFS_RETURN_IF_ERROR(SortByName(index_name, ckpt));
  ckpt.ranges.shrink_to_fit();
  CKPTFS_ASSIGN_OR_RETURN(ckpt.state_json,
                          MetadataWriter(ckpt, bundle, shown_prefix, budget).Write(claim.file));
  // The layout keeps metadata.json laid out (MetadataJson, moved in, never copied), made
  // while state_json is held (the Volume frees state_json only then): charged too.
  CKPTFS_RETURN_IF_ERROR(budget.ChargeOrRefuse(MetadataJsonSize(ckpt)));
  // The merged safetensors says where its tensors come from (transformers reads "format").
  ckpt.metadata = {{"format", "tf"}};
  return Status::Ok();
}

// Every other bundle's files: another checkpoint's weights would only mislead.
std::vector<std::string> TfHidden(const SourceDir& dir, const Checkpoint&) {
  std::vector<std::string> hidden;
  for (const std::string& f : dir.files) {
    if (EndsWith(f, kIndexSuffix) || IsDataFile(f)) hidden.push_back(f);
  }
  return hidden;
}

// verify: every index block's checksum, then every stored tensor piece's CRC32C.
Status VerifyTensorflow(const Checkpoint& ckpt, const std::function<void(const Status&)>& report) {
  if (ckpt.index.empty()) return Status::Ok();
  const StoredFile& index = ckpt.index[0];
  CKPTFS_ASSIGN_OR_RETURN(std::string bytes, ReadWhole(*index.source));
  for (const std::string& problem : tf::CheckSstableBlocks(bytes, index.name)) {
    report(Status::Corruption(problem));
  }
  Result<tf::TensorBundle> bundle = tf::ParseTensorBundle(bytes, index.name);
  if (!bundle.ok()) return Status::Ok();  // the block walk said what is wrong
  std::string buf;
  auto check = [&](const tf::TfTensor& t, const tf::TfLocation& where) -> Status {
    if (!where.has_crc32c || where.shard_id >= ckpt.shards.size()) return Status::Ok();
    const StoredFile& shard = ckpt.shards[where.shard_id];
    buf.resize(where.size);
    CKPTFS_RETURN_IF_ERROR(
        shard.source->ReadAt(where.offset, {reinterpret_cast<uint8_t*>(buf.data()), buf.size()}));
    if (t.type.kind == tf::TfKind::kString) {
      const uint64_t elements =
          std::accumulate(t.shape.begin(), t.shape.end(), uint64_t{1}, std::multiplies<uint64_t>());
      Status s = tf::WalkStringTensor(buf, elements, where, shard.name + ": \"" + t.key + "\"",
                                      [](std::string_view) { return Status::Ok(); });
      if (!s.ok()) report(s);
    } else if (!tf::TensorCrcMatches(where, buf)) {
      report(Status::Corruption(shard.name + ": \"" + t.key + "\" at offset " +
                                std::to_string(where.offset) + " (" + std::to_string(where.size) +
                                " bytes): CRC32C does not match the index"));
    }
    return Status::Ok();
  };
  for (const tf::TfTensor& t : bundle->tensors) {
    if (t.type.kind != tf::TfKind::kNumeric && t.type.kind != tf::TfKind::kString) continue;
    if (!t.partitioned()) CKPTFS_RETURN_IF_ERROR(check(t, t.where));
    for (const tf::TfSlicePiece& piece : t.slices) CKPTFS_RETURN_IF_ERROR(check(t, piece.where));
  }
  return Status::Ok();
}

std::span<const std::string> TfKeys(const Checkpoint& ckpt) {
  if (!ckpt.format_state) return {};
  return static_cast<const TfState&>(*ckpt.format_state).keys;
}

// The model rule (model.h): a sub-tree is the keys whose first segment is KEY; an
// object-based checkpoint's (keys with `.ATTRIBUTES`) training state is never the model.
std::string TfTopKey(const Checkpoint& ckpt, size_t i) {
  const tf::TfName name = tf::TfKeyToName(TfKeys(ckpt)[i]);
  return name.segments.size() > 1 ? name.segments[0] : std::string();
}

bool IsObjectBasedTf(const Checkpoint& ckpt) {
  const std::span<const std::string> keys = TfKeys(ckpt);
  return std::any_of(keys.begin(), keys.end(),
                     [](const std::string& key) { return tf::IsObjectBasedKey(key); });
}

std::function<bool(size_t)> TfTrainingState(const Checkpoint& ckpt) {
  if (!IsObjectBasedTf(ckpt)) return {};
  return [keys = TfKeys(ckpt)](size_t i) { return tf::IsTrainingStateKey(keys[i]); };
}

// With no key: an object-based checkpoint without its training state.
void DropTrainingState(Checkpoint& ckpt) {
  const std::function<bool(size_t)> training_state = TfTrainingState(ckpt);
  if (!training_state) return;
  uint64_t count = 0;
  for (size_t i = 0; i < ckpt.tensors.size(); ++i) {
    ckpt.tensors[i].in_model = !training_state(i);
    count += ckpt.tensors[i].in_model ? 1 : 0;
  }
  if (count == ckpt.tensors.size()) return;
  ckpt.model.tensors = count;
  ckpt.model.whole = false;
  ckpt.model.rule = "TensorFlow object checkpoint without optimizer slots and variables";
}

}  // namespace

FormatReader TensorflowFormat() {
  return FormatReader{
      .name = "tensorflow",
      .title = "tensorflow",
      .probe_names = kProbeNames,
      .looks_for = "a TensorFlow `checkpoint` file, PREFIX.index, saved_model.pb",
      .accepts_file = [](std::string_view name) { return EndsWith(name, kIndexSuffix); },
      .file_kinds = ".index",
      .detect = &DetectTensorflow,
      .read = &ReadTensorflow,
      .hidden = &TfHidden,
      .verify = &VerifyTensorflow,
      .keys = &TfKeys,
      .key_segments = [](std::string_view key) { return tf::TfKeyToName(key).segments; },
      .model = {.top_key = &TfTopKey,
                .never_model = &TfTrainingState,
                .by_default = &DropTrainingState},
      .run = {.claim_is_record = true, .record = &TfRunRecord, .incomplete = &TfBundleIncomplete},
  };
}

}  // namespace ckptfs
