// The consolidation of a ZeRO tag (zero.h's Consolidate), shared by its two halves:
//   zero.cc             the model states files: the module, buffers, frozen and tied params,
//                       and the tag's state_json
//   zero_partitions.cc  the optimizer states files: their agreement, and the flat partitions
//                       of the master weights and moments cut into tensors (stage 1/2, 3)
// Internal to core/format/deepspeed: the contract is zero.h. Not thread-safe: one
// Consolidator per tag.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/checked.h"
#include "core/encoding/ordered_json.h"
#include "core/format/deepspeed/zero.h"

namespace ckptfs::deepspeed {

using json = nlohmann::ordered_json;

// j[key], or null where j is no object or lacks it (const operator[] would be undefined).
inline const json& Get(const json& j, const std::string& key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

inline constexpr uint32_t kMaxWorldSize = 1u << 16;
inline constexpr std::string_view kOsd = "optimizer_state_dict.";

// A run of `numel` elements at byte `offset` of shard `shard`.
struct Piece {
  uint32_t shard = 0;
  uint64_t offset = 0;
  uint64_t numel = 0;
};

// One rank file: its tensors by name and its non-tensor values.
class FileView {
 public:
  explicit FileView(const RankFile& rf) : rf_(rf) {
    for (const TorchTensor& t : rf.file->tensors) by_name_.emplace(t.name, &t);
    if (!rf.file->state_json.empty()) {
      state_ = ParseOrderedJson(rf.file->state_json);
    }
    if (!state_.is_object()) state_ = json::object();
  }

  const std::string& name() const { return rf_.name; }
  const TorchFile& file() const { return *rf_.file; }
  const json& state() const { return state_; }

  const TorchTensor* Find(const std::string& name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
  }

  Status Bad(const std::string& what) const { return Status::Corruption(rf_.name + ": " + what); }

  // The bytes of row-major tensor `t` as one piece; its storage's dtype in *dtype.
  Result<Piece> PieceOf(const TorchTensor& t, Dtype* dtype) const {
    const TorchStorage& s = rf_.file->storages[t.storage];
    if (!IsRowMajor(t.shape, t.stride)) {
      return Status::Unsupported(rf_.name + ": tensor \"" + t.name + "\" is not contiguous");
    }
    const std::optional<uint64_t> elements = CheckedProduct(t.shape);
    if (!elements) return Bad("tensor \"" + t.name + "\" size");
    const uint64_t numel = *elements;
    *dtype = s.dtype;
    // ReadTorchFile checked the view against its storage.
    return Piece{rf_.shard, s.data_offset + (numel ? t.storage_offset * DtypeSize(s.dtype) : 0),
                 numel};
  }

 private:
  const RankFile& rf_;
  std::unordered_map<std::string_view, const TorchTensor*> by_name_;
  json state_;
};

// The element count of a shape list; refused (naming `what`) if it is none or overflows.
Result<uint64_t> Numel(const json& shape, const std::string& what, const FileView& file);

// The dimensions of a shape list Numel accepted.
std::vector<uint64_t> Dims(const json& shape);

// Builds the tensors and their ranges; a later tensor of the same name replaces the
// earlier, as a python dict would.
class Builder {
 public:
  ZeroCheckpoint& out() { return out_; }
  const ZeroCheckpoint& out() const { return out_; }

  uint32_t Add(const std::string& name, Dtype dtype, std::vector<uint64_t> shape,
               uint32_t top_key_size) {
    ZeroTensor t{.name = name, .dtype = dtype, .shape = std::move(shape)};
    t.first_range = static_cast<uint32_t>(out_.ranges.size());
    t.top_key_size = top_key_size;
    t.top_is_dict = top_key_size > 0;
    auto [it, fresh] = index_.try_emplace(name, static_cast<uint32_t>(out_.tensors.size()));
    if (fresh) {
      out_.tensors.push_back(std::move(t));
    } else {
      out_.tensors[it->second] = std::move(t);
    }
    current_ = it->second;
    return it->second;
  }

  // Appends `bytes` at `offset` of `shard` to the current tensor, merging with its last range.
  void Append(uint32_t shard, uint64_t offset, uint64_t bytes) {
    if (bytes == 0) return;
    ZeroTensor& t = out_.tensors[current_];
    t.size += bytes;
    if (t.range_count > 0) {
      StoredRange& last = out_.ranges.back();
      if (last.shard == shard && last.offset + last.size == offset) {
        last.size += bytes;
        return;
      }
    }
    out_.ranges.push_back({shard, offset, bytes});
    ++t.range_count;
  }

  // Appends elements [start, start + count) of the vector `pieces` laid end to end
  // (the caller checked that they lie inside it).
  void Slice(std::span<const Piece> pieces, uint64_t start, uint64_t count, uint64_t element) {
    for (const Piece& p : pieces) {
      if (count == 0) return;
      if (start >= p.numel) {
        start -= p.numel;
        continue;
      }
      const uint64_t take = std::min(count, p.numel - start);
      Append(p.shard, p.offset + start * element, take * element);
      count -= take;
      start = 0;
    }
  }

  // A tensor sharing tensor `owner`'s bytes.
  void Tie(const std::string& name, uint32_t owner, uint32_t top_key_size) {
    while (out_.tensors[owner].same_as != ZeroTensor::kOwnBytes)
      owner = out_.tensors[owner].same_as;
    const ZeroTensor o = out_.tensors[owner];
    const uint32_t i = Add(name, o.dtype, o.shape, top_key_size);
    out_.tensors[i].same_as = owner;
    out_.tensors[i].size = o.size;
    out_.tensors[i].first_range = o.first_range;
    out_.tensors[i].range_count = o.range_count;
  }

  std::optional<uint32_t> Find(const std::string& name) const {
    auto it = index_.find(name);
    if (it == index_.end()) return std::nullopt;
    return it->second;
  }

 private:
  ZeroCheckpoint out_;
  std::unordered_map<std::string, uint32_t> index_;
  uint32_t current_ = 0;
};

inline constexpr uint32_t kModelKey = 5;      // "model"
inline constexpr uint32_t kModuleKey = 6;     // "module"
inline constexpr uint32_t kOptimizerKey = 9;  // "optimizer"
inline constexpr std::string_view kMoments[] = {"exp_avg", "exp_avg_sq"};

// The optimizer-side facts every rank file must agree on.
struct OptimInfo {
  int stage = 0;
  uint32_t partition_count = 0;
  std::string groups_key;  // "single_partition_of_fp32_groups" or "fp32_flat_groups"
  std::string base_key;    // the base optimizer's state dict within optimizer_state_dict
};

// The optimizer-side facts of optimizer states file `f`; refused if it is none.
Result<OptimInfo> ReadOptimInfo(const FileView& f);

// Per rank, per flat group: the pieces of the master weights (what == "") or of a moment.
struct Partitions {
  std::vector<std::vector<Piece>> by_rank;  // [rank][group]
  Dtype dtype = Dtype::kF32;
  bool present = true;
};

// Consolidate's work for one tag: the rank files read once, the tensors built as each rule
// of zero.h places them.
class Consolidator {
 public:
  Consolidator(std::span<const RankFile> model_states, std::span<const RankFile> optim_states) {
    for (const RankFile& rf : model_states) models_.emplace_back(rf);
    for (const RankFile& rf : optim_states) optims_.emplace_back(rf);
  }

  // The consolidated checkpoint; `model_states` must not be empty.
  Result<ZeroCheckpoint> Run();

 private:
  // --- The model states files (zero.cc) ---
  // Tensors of the model states file that are not the module or frozen fragments (a
  // client_state's tensors, a stage-0 optimizer), under their own names.
  void AddOtherTensors();
  // module.<name> as saved (stage 0-2); at stage 0 also the model.
  Status AddModule(bool model_too);
  // Buffers: the module's tensors named in buffer_names, native dtype.
  Status AddBuffers();
  // Frozen params: whole in rank 0's fragments (stage 1/2), or one fragment per rank
  // concatenated (stage 3). Absent when saved with exclude_frozen_parameters.
  Status AddFrozen();
  // shared_params {alias: owner}: the owner's bytes under the alias too, in order.
  void AddTied();
  // ZeroCheckpoint::state_json: rank 0's model state and "zero" (zero.h's Consolidate).
  std::string StateJson() const;

  // --- The optimizer states files (zero_partitions.cc) ---
  // Every optimizer rank file agrees with rank 0 on stage and world size, and on the step.
  Status CheckRanks();
  // The pieces of flat group `g` of every rank: the master weights (moment "") or a moment;
  // `present` false when rank 0 has no such moment (an optimizer without it).
  Result<Partitions> Collect(size_t groups, std::string_view moment,
                             const std::vector<std::string>& keys);
  // The moments have the master weights' partition sizes, or (stage 1/2, whose master
  // partitions are saved without their padding) those sizes and the padding.
  Status SameSizes(const Partitions& master, const Partitions& moment, std::string_view what,
                   const std::vector<std::vector<uint64_t>>& pads);
  // group_paddings of every rank ([rank][group]); empty if a rank did not save them.
  std::vector<std::vector<uint64_t>> Paddings(size_t groups) const;
  // Stage 1/2: group g is the concatenation of every rank's partition g.
  Status AddStage12();
  // Stage 1/2, each param group: its partitions' sizes checked, and with `emit` its params
  // (and moments) added.
  Status Groups12(const Partitions& master, const std::vector<Partitions>& moments,
                  const std::vector<std::vector<uint64_t>>& pads, bool emit);
  // One trainable param: model.<name> and its moments, elements [offset, offset + numel)
  // of flat group g (stage 1/2).
  void AddParam(const std::string& name, const json& shape, const Partitions& master,
                const std::vector<Partitions>& moments, size_t g, const std::vector<Piece>& flat,
                uint64_t offset, uint64_t numel);
  // Stage 3: each param is chunk r of every rank r's flat vector (sub-groups end to end).
  Status AddStage3();
  // Chunk [offset, offset + chunk) of every rank in turn, until `numel` elements.
  void Chunks(const Partitions& parts, uint64_t offset, uint64_t chunk, uint64_t numel);

  std::vector<FileView> models_;
  std::vector<FileView> optims_;
  OptimInfo info_;
  Builder b_;
};

}  // namespace ckptfs::deepspeed
