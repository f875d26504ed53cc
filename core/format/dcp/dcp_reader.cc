// The DCP entry of the format table: a PyTorch distributed checkpoint
// (torch.distributed.checkpoint: FSDP2, torchtitan, Megatron-Core's torch_dist, NeMo 2), a
// directory of `.metadata` and the `__R_K.distcp` files it names, read as one model.
//
// `.metadata` (dcp::ParseMetadata, core/format/dcp/metadata.h) lists every tensor's
// chunks, the boxes the ranks saved, and where each item's bytes lie. FileSystemWriter's
// _write_item writes each item as a torch.save of it at that range of a .distcp file: a
// tensor chunk is a torch.save zip holding that one tensor, whose record is the chunk's
// row-major bytes; a non-tensor value (`step`, a string, an optimizer's param_groups
// entry) is a torch.save of the value. So a tensor is whole as a tiling of its chunks'
// records (dcp::TileTensor): chunks split along dimension 0 only (FSDP's Shard(0)) are
// ranges end to end, like any multi-range storage; a split along an inner dimension (tensor
// parallel's Shard(1), a 2-D mesh) is one GatherSource (core/source/gather_source.h) in
// `Checkpoint::decoded`, whose description grows with the chunks, not the rows. Nothing is
// copied at open; a read copies only what it asks for.
//
// Names are DCP's flattened fqns ("model.layers.0.attn.qkv.weight"); the nested keys each
// came from (planner_data) give the top-level sub-tree for the model rule (the `model` of a
// training state, as for torch files) and nest the non-tensor values in metadata.json as
// dcp_to_torch_save would rebuild them. The model rule and the inspect line are this
// entry's; a run's `step-N/` directories are found through the table like any checkpoint.
//
// The writer writes `.metadata` last (FileSystemWriter.finish, after every rank's files):
// a directory without it is no DCP checkpoint yet.
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "core/checked.h"
#include "core/checkpoint/assembly.h"
#include "core/checkpoint/model.h"
#include "core/encoding/ordered_json.h"
#include "core/encoding/safetensors.h"
#include "core/encoding/shape.h"
#include "core/encoding/torch_file.h"
#include "core/format/dcp/metadata.h"
#include "core/format/dcp/tiling.h"
#include "core/format/formats.h"
#include "core/source/gather_source.h"

namespace ckptfs {
namespace {

constexpr std::string_view kMetadataFile = ".metadata";
constexpr std::string_view kDataSuffix = ".distcp";
constexpr std::string_view kProbeNames[] = {kMetadataFile};

// What inspect says of a DCP checkpoint: filled by ReadDcp, read by DcpInspect.
struct DcpState final : FormatState {
  std::string summary;
};

bool IsDataFile(std::string_view name) { return EndsWith(StripZst(name), kDataSuffix); }

// `model_world_size_4_rank_1.pt`: rank 1's torch.save of its FSDP state dict, whose values
// are DTensors (verl's FSDPCheckpointManager names them so); W and R, or nullopt.
std::optional<std::pair<uint64_t, uint64_t>> FsdpRankFile(std::string_view name) {
  static const std::regex kRank(R"(model_world_size_(\d{1,6})_rank_(\d{1,6})\.pt)");
  const std::string plain(StripZst(name));
  std::smatch m;
  if (!std::regex_match(plain, m, kRank)) return std::nullopt;
  return std::make_pair(std::stoull(m[1]), std::stoull(m[2]));
}

// `shard-00001-model-00002-of-00003.safetensors`: rank 1's piece of output file 2 of 3
// (_hf_utils.py: SHARDED_FILE_NAME, written by HuggingFaceStorageWriter with
// save_distributed=True).
bool IsHfShardName(std::string_view name) {
  static const std::regex kShard(R"(shard-\d+-model-\d+-of-\d+\.safetensors)");
  const std::string plain(StripZst(name));
  return std::regex_match(plain, kShard);
}

// `.metadata` beside data files; where the store cannot list (HTTP without an autoindex)
// `.metadata` alone, which read() then checks. A name as common as `.metadata` (an IDE's
// folder) is no claim without a .distcp file when the store can tell.
Result<std::optional<Claim>> DetectDcp(const SourceDir& dir) {
  const std::string name(kMetadataFile);
  if (!dir.named.empty() && StripZst(dir.named) != kMetadataFile) return std::optional<Claim>();
  CKPTFS_ASSIGN_OR_RETURN(const bool has, StoredOrAsked(dir, name));
  if (has) {
    const bool data = std::any_of(dir.files.begin(), dir.files.end(), IsDataFile);
    if (!data && !dir.probe) return std::optional<Claim>();
    return std::optional<Claim>(Claim{Claim::Rank::kNamed, name});
  }
  // The Hugging Face form: its shards' names say what they are (an index beside them is
  // the consolidated model, which the safetensors entry claims first).
  if (!dir.named.empty()) return std::optional<Claim>();
  for (const std::string& f : dir.files) {
    if (IsHfShardName(f) || FsdpRankFile(f)) {
      return std::optional<Claim>(Claim{Claim::Rank::kNamed, f});
    }
  }
  return std::optional<Claim>();
}

// The bytes of one item: `length` bytes at `offset` of `file`, as their own source.
Result<std::unique_ptr<GatherSource>> ItemBytes(const StoredFile& file, const dcp::StorageInfo& at,
                                                const std::string& what) {
  const std::optional<uint64_t> end = CheckedAdd(at.offset, at.length);
  if (!end || *end > file.source->Size()) {
    return Status::Corruption(file.name + ": " + what + " is said to lie at bytes " +
                              std::to_string(at.offset) + "+" + std::to_string(at.length) +
                              ", past the file's end (" + std::to_string(file.source->Size()) +
                              " bytes)");
  }
  return GatherSource::Make(
      file.name + " (" + what + ")",
      {GatherGroup{1, {GatherRun{file.source.get(), at.offset, 0, at.length}}}});
}

// Where a tensor chunk's row-major bytes lie in its file: the one tensor its torch.save
// holds, checked against what .metadata says of the chunk.
struct PlacedChunk {
  uint32_t shard = 0;
  uint64_t offset = 0;  // in the file
};

Result<PlacedChunk> PlaceChunk(const StoredFile& file, uint32_t shard, const dcp::TensorItem& t,
                               const dcp::Chunk& c) {
  const std::string what = t.fqn + " chunk at " + ShapeText(c.offsets);
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<GatherSource> item, ItemBytes(file, c.storage, what));
  CKPTFS_ASSIGN_OR_RETURN(TorchFile saved, ReadTorchFile(*item));
  const std::string bad = file.name + ": " + what + " (bytes " + std::to_string(c.storage.offset) +
                          "+" + std::to_string(c.storage.length) + ")";
  if (!saved.root_is_tensor || saved.tensors.size() != 1) {
    return Status::Corruption(bad + " is not one saved tensor");
  }
  const TorchTensor& tensor = saved.tensors[0];
  const TorchStorage& storage = saved.storages[tensor.storage];
  if (storage.dtype != t.dtype) {
    return Status::Corruption(bad + " holds " + std::string(DtypeName(storage.dtype)) +
                              ", .metadata says " + std::string(DtypeName(t.dtype)));
  }
  if (tensor.shape != c.sizes) {
    return Status::Corruption(bad + " has shape " + ShapeText(tensor.shape) + ", .metadata says " +
                              ShapeText(c.sizes));
  }
  if (storage.decoded || !IsRowMajor(tensor.shape, tensor.stride)) {
    return Status::Corruption(bad + " is not a row-major tensor");
  }
  // The interpreter checked that the view lies inside its storage record, and the record
  // inside the item (its source ends there).
  return PlacedChunk{
      shard, c.storage.offset + storage.data_offset + tensor.storage_offset * DtypeSize(t.dtype)};
}

// Opens each of `names` in `dir` and parses it with `parse`, several at once: `files` and
// `parsed` in the order of `names`, or the first error in that order.
template <typename Parsed, typename Parse>
Status OpenAndParse(const SourceDir& dir, const std::vector<std::string>& names,
                    ReadContext& context, Parse parse, std::vector<StoredFile>& files,
                    std::vector<Parsed>& parsed) {
  files.resize(names.size());
  parsed.resize(names.size());
  std::vector<Status> errors(names.size());
  ForEachInParallel(names.size(), [&](size_t i) {
    Result<StoredFile> f = OpenWeightFile(dir, names[i], context);
    if (!f.ok()) {
      errors[i] = f.status();
      return;
    }
    auto p = parse(*f->source);
    if (!p.ok()) {
      errors[i] = p.status();
      return;
    }
    files[i] = std::move(f).value();
    parsed[i] = std::move(p).value();
  });
  for (const Status& e : errors) CKPTFS_RETURN_IF_ERROR(e);
  return Status::Ok();
}

// One chunk of a tensor: its box and where its row-major bytes lie.
struct ChunkAt {
  dcp::ChunkBox box;
  PlacedChunk where;
};

// What inspect's line says: counted while the tensors are added.
struct Summary {
  uint64_t tensors = 0, chunks = 0, bytes = 0, values = 0;
  std::map<std::string, size_t> splits;  // SplitOf -> tensors
};

// How a tensor of `shape` is split by `chunks`, for inspect: "whole", "dim 0", "dims 0,1".
std::string SplitOf(std::span<const uint64_t> shape, std::span<const ChunkAt> chunks) {
  if (chunks.size() <= 1) return "whole";
  std::string dims;
  for (size_t d = 0; d < shape.size(); ++d) {
    const bool split = std::any_of(chunks.begin(), chunks.end(),
                                   [&](const ChunkAt& c) { return c.box.sizes[d] != shape[d]; });
    if (!split) continue;
    if (!dims.empty()) dims += ',';  // piece by piece: GCC 12 -O3 -Wrestrict
    dims += std::to_string(d);
  }
  return (dims.find(',') == std::string::npos ? "dim " : "dims ") + dims;
}

// Adds the storage of a tensor whole from its `chunks` (dcp::TileTensor) and returns the
// tensor over it, not yet added: plain ranges where the tiling is (chunks along dimension 0),
// else one GatherSource in ckpt.decoded. `what` names the file and tensor for refusals.
Result<Tensor> AddWholeTensor(Checkpoint& ckpt, const std::string& name, Dtype dtype,
                              const std::vector<uint64_t>& shape, std::span<const ChunkAt> chunks,
                              const std::string& what, Summary& summary) {
  std::vector<dcp::ChunkBox> boxes;
  for (const ChunkAt& c : chunks) boxes.push_back(c.box);
  CKPTFS_ASSIGN_OR_RETURN(dcp::Tiling tiling,
                          dcp::TileTensor(shape, DtypeSize(dtype), boxes, what));
  Storage s{.shard = chunks.empty() ? 0 : chunks[0].where.shard,
            .offset = chunks.empty() ? 0 : chunks[0].where.offset,
            .size = tiling.bytes,
            .dtype = dtype};
  if (tiling.plain()) {
    std::vector<StoredRange> ranges;
    for (const dcp::TileGroup& g : tiling.groups) {
      for (const dcp::TileRun& r : g.runs) {
        if (r.length == 0) continue;
        const PlacedChunk& at = chunks[r.chunk].where;
        ranges.push_back({at.shard, at.offset + r.chunk_offset, r.length});
      }
    }
    if (!ranges.empty()) {
      s.shard = ranges[0].shard;
      s.offset = ranges[0].offset;
    }
    if (ranges.size() > 1) {
      s.first_range = static_cast<uint32_t>(ckpt.ranges.size());
      s.range_count = static_cast<uint32_t>(ranges.size());
      ckpt.ranges.insert(ckpt.ranges.end(), ranges.begin(), ranges.end());
    }
  } else {
    std::vector<GatherGroup> groups;
    for (const dcp::TileGroup& g : tiling.groups) {
      GatherGroup group{g.count, {}};
      for (const dcp::TileRun& r : g.runs) {
        const PlacedChunk& at = chunks[r.chunk].where;
        group.runs.push_back(
            {ckpt.shards[at.shard].source.get(), at.offset + r.chunk_offset, r.stride, r.length});
      }
      groups.push_back(std::move(group));
    }
    CKPTFS_ASSIGN_OR_RETURN(
        std::unique_ptr<GatherSource> gathered,
        GatherSource::Make(name + " (gathered from its chunks)", std::move(groups)));
    const uint32_t mode = gathered->Mode();
    const struct timespec mtime = gathered->MTime();
    s.shard = static_cast<uint32_t>(ckpt.shards.size() + ckpt.decoded.size());
    s.offset = 0;
    ckpt.decoded.push_back(
        StoredFile{gathered->Name(), gathered->Name(), std::move(gathered), mode, mtime});
  }
  ++summary.splits[SplitOf(shape, chunks)];
  ++summary.tensors;
  summary.chunks += chunks.size();
  summary.bytes += tiling.bytes;
  ckpt.storages.push_back(s);
  return Tensor{.name = name,
                .dtype = dtype,
                .shape = shape,
                .shard = s.shard,
                .offset = s.offset,
                .size = s.size,
                .storage = static_cast<uint32_t>(ckpt.storages.size() - 1)};
}

// inspect's line, kept as the checkpoint's DcpState; the tensors sorted.
void Finish(const Summary& summary, size_t files, Checkpoint& ckpt) {
  std::string split_text;
  for (const auto& [how, count] : summary.splits) {
    if (!split_text.empty()) split_text += ", ";
    split_text += std::to_string(count);
    split_text += ' ';
    split_text += how;
  }
  auto state = std::make_unique<DcpState>();
  state->summary = std::to_string(files) + " files, " + std::to_string(summary.tensors) +
                   " tensors in " + std::to_string(summary.chunks) + " chunks (" +
                   (split_text.empty() ? std::string("none") : split_text) + "), " +
                   std::to_string(summary.values) + " values, " + std::to_string(summary.bytes) +
                   " tensor bytes";
  ckpt.format_state = std::move(state);
  ckpt.ranges.shrink_to_fit();
}

// Sets `value` at `path` of `root` (dict keys, list indices), making the containers. A list
// holds no more items than the checkpoint has values (`max_items`): a larger index, which
// would make a list of nulls that long, is a dict key instead.
void SetAtPath(nlohmann::ordered_json& root, const std::vector<dcp::PathKey>& path,
               nlohmann::ordered_json value, size_t max_items) {
  nlohmann::ordered_json* at = &root;
  for (const dcp::PathKey& key : path) {
    const bool small = key.key.size() <= 9 && std::stoull("0" + key.key) < max_items;
    if (key.index && small && (at->is_null() || at->is_array())) {
      const size_t i = std::stoull(key.key);
      if (at->is_null()) *at = nlohmann::ordered_json::array();
      while (at->size() <= i) at->push_back(nullptr);
      at = &(*at)[i];
    } else {
      if (!at->is_object()) *at = nlohmann::ordered_json::object();
      at = &(*at)[key.key];
    }
  }
  *at = std::move(value);
}

Status ReadDcp(const SourceDir& dir, const Claim& claim, ReadContext& context, Checkpoint& ckpt) {
  CKPTFS_ASSIGN_OR_RETURN(StoredFile meta_file, OpenWeightFile(dir, claim.file, context));
  CKPTFS_ASSIGN_OR_RETURN(const std::string meta_bytes, ReadWhole(*meta_file.source));
  const std::string shown = JoinShown(dir.path, claim.file);
  CKPTFS_ASSIGN_OR_RETURN(dcp::Metadata meta, dcp::ParseMetadata(meta_bytes, shown));
  // A transform (StorageWriter extensions: compression, checksums) changes what an item's
  // bytes are; ckptfs applies none, so such an item is refused by its transform's name.
  auto transformed = [&](const std::string& fqn, const dcp::StorageInfo& at) {
    return at.transforms.empty()
               ? Status::Ok()
               : Status::Unsupported(shown + ": " + fqn + " is stored with transform " +
                                     at.transforms.front() + ", which ckptfs does not apply");
  };
  for (const dcp::TensorItem& t : meta.tensors) {
    for (const dcp::Chunk& c : t.chunks) CKPTFS_RETURN_IF_ERROR(transformed(t.fqn, c.storage));
  }
  for (const dcp::BytesItem& b : meta.bytes) CKPTFS_RETURN_IF_ERROR(transformed(b.fqn, b.storage));

  // The data files, each once, in name order (shards/).
  std::set<std::string> names;
  for (const dcp::TensorItem& t : meta.tensors) {
    for (const dcp::Chunk& c : t.chunks) names.insert(c.storage.relative_path);
  }
  for (const dcp::BytesItem& b : meta.bytes) names.insert(b.storage.relative_path);
  const std::vector<std::string> files(names.begin(), names.end());
  std::vector<StoredFile> opened(files.size());
  std::vector<Status> errors(files.size());
  ForEachInParallel(files.size(), [&](size_t i) {
    Result<StoredFile> f = OpenWeightFile(dir, files[i], context);
    if (f.ok()) {
      opened[i] = std::move(f).value();
    } else {
      errors[i] = f.status();
    }
  });
  std::map<std::string, uint32_t> shard_of;
  for (size_t i = 0; i < files.size(); ++i) {
    if (!errors[i].ok() && errors[i].code() == Status::Code::kNotFound) {
      return Status::NotFound(JoinShown(dir.path, files[i]) + ": missing (" + claim.file +
                              " names it)");
    }
    CKPTFS_RETURN_IF_ERROR(errors[i]);
    shard_of[files[i]] = static_cast<uint32_t>(ckpt.shards.size());
    ckpt.shards.push_back(std::move(opened[i]));
  }

  // Every chunk's record, read in parallel: a torch.save zip each.
  struct Job {
    size_t tensor, chunk;
  };
  std::vector<Job> jobs;
  for (size_t t = 0; t < meta.tensors.size(); ++t) {
    for (size_t c = 0; c < meta.tensors[t].chunks.size(); ++c) jobs.push_back({t, c});
  }
  std::vector<Result<PlacedChunk>> placed(jobs.size(), PlacedChunk{});
  ForEachInParallel(jobs.size(), [&](size_t j) {
    const dcp::TensorItem& t = meta.tensors[jobs[j].tensor];
    const dcp::Chunk& c = t.chunks[jobs[j].chunk];
    const uint32_t shard = shard_of.at(c.storage.relative_path);
    placed[j] = PlaceChunk(ckpt.shards[shard], shard, t, c);
  });
  for (const auto& p : placed) CKPTFS_RETURN_IF_ERROR(p.status());

  std::map<std::string, const std::vector<dcp::PathKey>*> path_of;
  for (const auto& [fqn, path] : meta.paths) path_of[fqn] = &path;

  size_t job = 0;
  Summary summary;
  for (const dcp::TensorItem& t : meta.tensors) {
    std::vector<ChunkAt> chunks;
    for (const dcp::Chunk& c : t.chunks) chunks.push_back({{c.offsets, c.sizes}, *placed[job++]});
    CKPTFS_ASSIGN_OR_RETURN(Tensor tensor, AddWholeTensor(ckpt, t.fqn, t.dtype, t.size, chunks,
                                                          shown + ": tensor " + t.fqn, summary));
    if (auto p = path_of.find(t.fqn); p != path_of.end() && p->second->size() > 1) {
      // The first key is the sub-tree (`model`), if the name starts with it.
      const std::string& top = p->second->front().key;
      if (t.fqn.size() > top.size() && t.fqn.compare(0, top.size(), top) == 0 &&
          t.fqn[top.size()] == '.') {
        tensor.top_key_size = static_cast<uint32_t>(top.size());
        tensor.top_is_dict = !p->second->front().index;
      }
    }
    ckpt.tensors.push_back(std::move(tensor));
  }

  // The non-tensor values, each a torch.save of the value, nested by their paths.
  nlohmann::ordered_json state = nlohmann::ordered_json::object();
  for (const dcp::BytesItem& b : meta.bytes) {
    const StoredFile& file = ckpt.shards[shard_of.at(b.storage.relative_path)];
    CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<GatherSource> item,
                            ItemBytes(file, b.storage, "value " + b.fqn));
    CKPTFS_ASSIGN_OR_RETURN(TorchFile saved, ReadTorchFile(*item));
    if (!saved.tensors.empty()) {
      return Status::Unsupported(file.name + ": value " + b.fqn +
                                 " holds tensors inside a non-tensor value");
    }
    nlohmann::ordered_json value =
        saved.state_json.empty() ? nlohmann::ordered_json()
                                 : nlohmann::ordered_json::parse(saved.state_json, nullptr, false);
    auto p = path_of.find(b.fqn);
    if (p != path_of.end() && !p->second->empty()) {
      SetAtPath(state, *p->second, std::move(value), meta.bytes.size() + meta.tensors.size());
    } else {
      state[b.fqn] = std::move(value);
    }
  }
  if (!state.empty())
    ckpt.state_json = state.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  ckpt.index.push_back(std::move(meta_file));
  ckpt.metadata = {{"format", "pt"}};

  summary.values = meta.bytes.size();
  Finish(summary, files.size(), ckpt);
  return SortTensors(ckpt);
}

// The Hugging Face form of DCP: each rank's pieces as safetensors files whose __metadata__
// DCP_SHARDING_INFO gives each tensor's saved_offsets in the whole tensor
// (HuggingFaceStorageWriter). _consolidate_hf_safetensors would copy them into
// model-0000K-of-0000N.safetensors, each tensor's size the largest offset + size of its
// pieces along each dimension; this is that model, with nothing written.
Status ReadHfDcp(const SourceDir& dir, ReadContext& context, Checkpoint& ckpt) {
  // x.safetensors and x.safetensors.zst are one file: OpenWeightFile takes the plain one
  // where both are (a packed source has only the .zst).
  std::set<std::string> unique;
  for (const std::string& f : dir.files) {
    if (IsHfShardName(f)) unique.insert(std::string(StripZst(f)));
  }
  const std::vector<std::string> files(unique.begin(), unique.end());
  std::vector<StoredFile> opened;
  std::vector<SafetensorsHeader> headers;
  CKPTFS_RETURN_IF_ERROR(OpenAndParse(
      dir, files, context, [](const ByteSource& b) { return ReadSafetensorsHeader(b); }, opened,
      headers));

  struct Pieces {
    Dtype dtype;
    std::vector<ChunkAt> chunks;
    std::string first_file;
  };
  std::map<std::string, Pieces> tensors;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string shown = JoinShown(dir.path, opened[i].name);
    const auto info_text =
        std::find_if(headers[i].metadata.begin(), headers[i].metadata.end(),
                     [](const auto& kv) { return kv.first == "DCP_SHARDING_INFO"; });
    if (info_text == headers[i].metadata.end()) {
      return Status::Corruption(shown +
                                ": no DCP_SHARDING_INFO in its __metadata__ (not a "
                                "piece HuggingFaceStorageWriter wrote)");
    }
    CKPTFS_ASSIGN_OR_RETURN(
        const nlohmann::json info,
        ParseJson<nlohmann::json>(info_text->second, shown + ": DCP_SHARDING_INFO"));
    if (!info.is_object())
      return Status::Corruption(shown + ": DCP_SHARDING_INFO is not a JSON object");
    const auto shard = static_cast<uint32_t>(ckpt.shards.size());
    for (const TensorEntry& t : headers[i].tensors) {
      const auto entry = info.find(t.name);
      const nlohmann::json* offsets =
          entry != info.end() && entry->is_object() && entry->contains("saved_offsets")
              ? &(*entry)["saved_offsets"]
              : nullptr;
      if (!offsets || !offsets->is_array() || offsets->size() != t.shape.size() ||
          !std::all_of(offsets->begin(), offsets->end(),
                       [](const nlohmann::json& v) { return v.is_number_unsigned(); })) {
        return Status::Corruption(shown + ": tensor " + t.name +
                                  " has no saved_offsets of its rank in DCP_SHARDING_INFO");
      }
      ChunkAt chunk{{offsets->get<std::vector<uint64_t>>(), t.shape},
                    {shard, headers[i].data_start + t.begin}};
      auto [it, added] = tensors.try_emplace(t.name, Pieces{t.dtype, {}, shown});
      if (it->second.dtype != t.dtype) {
        return Status::Corruption(
            shown + ": tensor " + t.name + " is " + std::string(DtypeName(t.dtype)) + ", but " +
            std::string(DtypeName(it->second.dtype)) + " in " + it->second.first_file);
      }
      it->second.chunks.push_back(std::move(chunk));
    }
    ckpt.shards.push_back(std::move(opened[i]));
  }
  Summary summary;
  for (auto& [name, pieces] : tensors) {
    const std::string what = pieces.first_file + ": tensor " + name;
    std::vector<uint64_t> shape(pieces.chunks[0].box.sizes.size(), 0);
    for (const ChunkAt& c : pieces.chunks) {
      if (c.box.sizes.size() != shape.size()) {
        return Status::Corruption(what + ": its pieces differ in rank");
      }
      for (size_t d = 0; d < shape.size(); ++d) {
        const std::optional<uint64_t> end = CheckedAdd(c.box.offsets[d], c.box.sizes[d]);
        if (!end) return Status::Corruption(what + ": saved_offsets overflow");
        shape[d] = std::max(shape[d], *end);
      }
    }
    CKPTFS_ASSIGN_OR_RETURN(Tensor tensor, AddWholeTensor(ckpt, name, pieces.dtype, shape,
                                                          pieces.chunks, what, summary));
    ckpt.tensors.push_back(std::move(tensor));
  }
  ckpt.metadata = {{"format", "pt"}};
  Finish(summary, files.size(), ckpt);
  return SortTensors(ckpt);
}

// FSDP per-rank files (model_world_size_W_rank_R.pt): each rank's torch.save of its state
// dict, every DTensor read as its local tensor with its box in the whole (TorchTensor::piece,
// from the placements it records: core/encoding/torch_file.h). The whole tensor is the tiling of
// the W ranks' boxes, a replicated box taken once; a plain tensor is every rank's whole copy,
// rank 0's taken. Every rank 0..W-1 must be there, each file's W the same, and each DTensor's
// mesh W ranks large: else one line naming the file.
Status ReadFsdpRanks(const SourceDir& dir, const Claim& claim, ReadContext& context,
                     Checkpoint& ckpt) {
  const uint64_t world = FsdpRankFile(claim.file)->first;
  std::vector<std::string> files(world);
  for (const std::string& f : dir.files) {
    const auto wr = FsdpRankFile(f);
    if (!wr) continue;
    if (wr->first != world) {
      return Status::Corruption(JoinShown(dir.path, f) + ": world size " +
                                std::to_string(wr->first) + ", but " + claim.file + " says " +
                                std::to_string(world));
    }
    if (wr->second >= world) {
      return Status::Corruption(JoinShown(dir.path, f) + ": rank " + std::to_string(wr->second) +
                                " of a world of " + std::to_string(world));
    }
    // x.pt and x.pt.zst are one file: OpenWeightFile takes the plain one where both are.
    files[wr->second] = std::string(StripZst(f));
  }
  for (uint64_t r = 0; r < world; ++r) {
    if (files[r].empty()) {
      return Status::NotFound(JoinShown(dir.path, "model_world_size_" + std::to_string(world) +
                                                      "_rank_" + std::to_string(r) + ".pt") +
                              ": missing (every rank of the world saves its own)");
    }
  }
  std::vector<StoredFile> opened;
  std::vector<TorchFile> saved;
  CKPTFS_RETURN_IF_ERROR(OpenAndParse(
      dir, files, context, [](const ByteSource& b) { return ReadTorchFile(b); }, opened, saved));
  for (auto& f : opened) ckpt.shards.push_back(std::move(f));

  struct Pieces {
    Dtype dtype;
    std::vector<uint64_t> shape;
    std::vector<ChunkAt> chunks;
    uint32_t top_key_size = 0;
    bool top_is_dict = false;
  };
  std::map<std::string, Pieces> tensors;
  for (uint32_t r = 0; r < world; ++r) {
    const std::string shown = JoinShown(dir.path, ckpt.shards[r].name);
    for (const TorchTensor& t : saved[r].tensors) {
      const TorchStorage& storage = saved[r].storages[t.storage];
      if (storage.decoded || !IsRowMajor(t.shape, t.stride)) {
        return Status::Corruption(shown + ": tensor " + t.name + " is not a row-major tensor");
      }
      const PlacedChunk at{r, storage.data_offset + t.storage_offset * DtypeSize(storage.dtype)};
      dcp::ChunkBox box{std::vector<uint64_t>(t.shape.size(), 0), t.shape};
      std::vector<uint64_t> shape = t.shape;
      if (t.piece) {
        std::optional<uint64_t> mesh = 1;
        for (uint64_t m : t.piece->mesh_shape) mesh = mesh ? CheckedMul(*mesh, m) : mesh;
        if (mesh != world) {
          return Status::Corruption(shown + ": tensor " + t.name + " lies on a mesh of " +
                                    (mesh ? std::to_string(*mesh) : std::string("too many")) +
                                    " ranks, not the world of " + std::to_string(world));
        }
        if (t.piece->rank && *t.piece->rank != r) {
          return Status::Corruption(shown + ": tensor " + t.name + " was saved by rank " +
                                    std::to_string(*t.piece->rank));
        }
        box = {t.piece->offset, t.piece->size};
        shape = t.piece->global_shape;
      } else if (r > 0) {
        continue;  // a plain tensor: every rank's copy is whole; rank 0's is shown
      }
      auto [it, added] = tensors.try_emplace(
          t.name, Pieces{storage.dtype, shape, {}, t.top_key_size, t.top_is_dict});
      if (it->second.dtype != storage.dtype || it->second.shape != shape) {
        return Status::Corruption(shown + ": tensor " + t.name + " is " +
                                  std::string(DtypeName(storage.dtype)) + " " + ShapeText(shape) +
                                  ", but " + std::string(DtypeName(it->second.dtype)) + " " +
                                  ShapeText(it->second.shape) + " in " + ckpt.shards[0].name);
      }
      // A box another rank holds too (a Replicate() mesh dimension) is the same bytes.
      const bool seen =
          std::any_of(it->second.chunks.begin(), it->second.chunks.end(), [&](const ChunkAt& c) {
            return c.box.offsets == box.offsets && c.box.sizes == box.sizes;
          });
      if (!seen) it->second.chunks.push_back({std::move(box), at});
    }
  }
  Summary summary;
  for (auto& [name, pieces] : tensors) {
    const std::string what = JoinShown(dir.path, ckpt.shards[0].name) + ": tensor " + name;
    CKPTFS_ASSIGN_OR_RETURN(Tensor tensor, AddWholeTensor(ckpt, name, pieces.dtype, pieces.shape,
                                                          pieces.chunks, what, summary));
    tensor.top_key_size = pieces.top_key_size;
    tensor.top_is_dict = pieces.top_is_dict;
    ckpt.tensors.push_back(std::move(tensor));
  }
  ckpt.state_json = std::move(saved[0].state_json);
  ckpt.metadata = {{"format", "pt"}};
  Finish(summary, world, ckpt);
  return SortTensors(ckpt);
}

Status ReadDcpOrHf(const SourceDir& dir, const Claim& claim, ReadContext& context,
                   Checkpoint& ckpt) {
  if (IsHfShardName(claim.file)) return ReadHfDcp(dir, context, ckpt);
  if (FsdpRankFile(claim.file)) return ReadFsdpRanks(dir, claim, context, ckpt);
  return ReadDcp(dir, claim, context, ckpt);
}

// With no key: as for torch files, the first of kTorchModelKeys whose value is a dict
// holding tensors (torchtitan and FSDP2 save {"model": ..., "optimizer": ...}).
void DcpModel(Checkpoint& ckpt) {
  for (std::string_view key : kTorchModelKeys) {
    if (TakeModelSubtree(ckpt, std::string(key), /*dicts_only=*/true)) {
      ckpt.model.rule = "first of model_state_dict, state_dict, model, module";
      return;
    }
  }
}

std::vector<std::pair<std::string, std::string>> DcpInspect(const Checkpoint& ckpt) {
  const auto* state = dynamic_cast<const DcpState*>(ckpt.format_state.get());
  if (!state) return {};
  return {{"dcp", state->summary}};
}

// The data files and .metadata are the checkpoint's; nothing else of `dir` is hidden.
std::vector<std::string> DcpHidden(const SourceDir& dir, const Checkpoint&) {
  std::vector<std::string> hidden;
  for (const std::string& f : dir.files) {
    if (IsDataFile(f) || IsHfShardName(f)) hidden.push_back(f);
  }
  return hidden;
}

}  // namespace

FormatReader DcpFormat() {
  return FormatReader{
      .name = "dcp",
      .title = "PyTorch distributed checkpoint",
      .probe_names = kProbeNames,
      .looks_for =
          "a PyTorch distributed checkpoint (.metadata and *.distcp, "
          "shard-*-model-*-of-*.safetensors, model_world_size_W_rank_R.pt)",
      .accepts_file = [](std::string_view name) { return StripZst(name) == kMetadataFile; },
      .file_kinds = ".metadata",
      .detect = &DetectDcp,
      .read = &ReadDcpOrHf,
      .hidden = &DcpHidden,
      .model = {.top_key = &PickledTopKey, .by_default = &DcpModel},
      .inspect = &DcpInspect,
      // The ranks' files are one checkpoint, never torch entries of a run.
      .run = {.torch_files_are_one = true},
  };
}

}  // namespace ckptfs
