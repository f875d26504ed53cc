#include "core/format/deepspeed/zero.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/checked.h"
#include "core/encoding/ordered_json.h"

namespace ckptfs::deepspeed {
namespace {

using json = nlohmann::ordered_json;

// j[key], or null where j is no object or lacks it (const operator[] would be undefined).
const json& Get(const json& j, const std::string& key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

constexpr uint32_t kMaxWorldSize = 1u << 16;
constexpr std::string_view kOsd = "optimizer_state_dict.";

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

Result<uint64_t> Numel(const json& shape, const std::string& what, const FileView& file) {
  if (!shape.is_array()) return file.Bad(what + ": shape is not a list");
  uint64_t n = 1;
  for (const json& d : shape) {
    const std::optional<uint64_t> next =
        d.is_number_unsigned() ? CheckedMul(n, d.get<uint64_t>()) : std::nullopt;
    if (!next) return file.Bad(what + ": bad shape");
    n = *next;
  }
  return n;
}

std::vector<uint64_t> Dims(const json& shape) {
  std::vector<uint64_t> out;
  for (const json& d : shape) out.push_back(d.get<uint64_t>());
  return out;
}

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

constexpr uint32_t kModelKey = 5;      // "model"
constexpr uint32_t kModuleKey = 6;     // "module"
constexpr uint32_t kOptimizerKey = 9;  // "optimizer"
constexpr std::string_view kMoments[] = {"exp_avg", "exp_avg_sq"};

// The optimizer-side facts every rank file must agree on.
struct OptimInfo {
  int stage = 0;
  uint32_t partition_count = 0;
  std::string groups_key;  // "single_partition_of_fp32_groups" or "fp32_flat_groups"
  std::string base_key;    // the base optimizer's state dict within optimizer_state_dict
};

Result<OptimInfo> ReadOptimInfo(const FileView& f) {
  const json& osd = Get(f.state(), "optimizer_state_dict");
  if (!osd.is_object())
    return f.Bad("no optimizer_state_dict: not a DeepSpeed optimizer states file");
  OptimInfo info;
  const bool flat3 = f.Find(std::string(kOsd) + "fp32_flat_groups.0") != nullptr;
  if (osd.contains("zero_stage") && Get(osd, "zero_stage").is_number_integer()) {
    info.stage = Get(osd, "zero_stage").get<int>();
  } else {
    info.stage = flat3 ? 3 : 1;  // BF16_Optimizer (ZeRO-1 under bf16) writes no zero_stage
  }
  if (info.stage < 1 || info.stage > 3) {
    return f.Bad("zero_stage " + std::to_string(info.stage) + " is not 1, 2 or 3");
  }
  const json& pc = Get(osd, "partition_count");
  uint64_t count = 0;
  if (pc.is_number_unsigned()) count = pc.get<uint64_t>();
  if (pc.is_array()) {  // per param group (expert groups may differ): the largest
    for (const json& c : pc) {
      if (c.is_number_unsigned()) count = std::max(count, c.get<uint64_t>());
    }
  }
  if (count == 0 || count > kMaxWorldSize)
    return f.Bad("partition_count is missing or out of range");
  info.partition_count = static_cast<uint32_t>(count);
  info.groups_key = info.stage == 3 ? "fp32_flat_groups" : "single_partition_of_fp32_groups";
  info.base_key = info.stage == 3 ? "optimizer_state_dict" : "base_optimizer_state";
  return info;
}

// A fingerprint of the optimizer's step in `f`: the record of each moment `step` tensor
// (same tag, same step, same bytes, same CRC) and each numeric step value.
std::string StepPrint(const FileView& f, const OptimInfo& info) {
  std::string print;
  const std::string prefix = std::string(kOsd) + info.base_key + ".";
  for (const TorchTensor& t : f.file().tensors) {
    if (!t.name.starts_with(prefix) || !t.name.ends_with(".step")) continue;
    const TorchStorage& s = f.file().storages[t.storage];
    print += t.name + "=" + std::to_string(s.crc32) + "/" + std::to_string(s.size) + ";";
  }
  const json& states = Get(Get(Get(f.state(), "optimizer_state_dict"), info.base_key), "state");
  if (states.is_object()) {
    for (const auto& [k, v] : states.items()) {
      if (Get(v, "step").is_number()) print += k + ":" + Get(v, "step").dump() + ";";
    }
  }
  return print;
}

// The base optimizer's state key of each flat group, in order: the params of its
// param_groups; 0, 1, 2, ... without them.
std::vector<std::string> StateKeys(const FileView& f, const OptimInfo& info, size_t groups) {
  std::vector<std::string> keys;
  const json& groups_json =
      Get(Get(Get(f.state(), "optimizer_state_dict"), info.base_key), "param_groups");
  if (groups_json.is_array()) {
    for (const json& g : groups_json) {
      if (!Get(g, "params").is_array()) continue;
      for (const json& p : Get(g, "params")) {
        if (p.is_number_integer()) keys.push_back(std::to_string(p.get<int64_t>()));
      }
    }
  }
  if (keys.size() != groups) {
    keys.clear();
    for (size_t g = 0; g < groups; ++g) keys.push_back(std::to_string(g));
  }
  return keys;
}

// The tensor of moment `moment` for flat group `g` in `f`, or null (elastic checkpoints keep
// a list of per-group dicts instead of torch's {"state": {k: ...}}).
const TorchTensor* MomentOf(const FileView& f, const OptimInfo& info, const std::string& key,
                            size_t g, std::string_view moment) {
  const std::string base = std::string(kOsd) + info.base_key + ".";
  const TorchTensor* t = f.Find(base + "state." + key + "." + std::string(moment));
  return t ? t : f.Find(base + std::to_string(g) + "." + std::string(moment));
}

// Per rank, per flat group: the pieces of the master weights (what == "") or of a moment.
struct Partitions {
  std::vector<std::vector<Piece>> by_rank;  // [rank][group]
  Dtype dtype = Dtype::kF32;
  bool present = true;
};

class Consolidator {
 public:
  Consolidator(std::span<const RankFile> model_states, std::span<const RankFile> optim_states) {
    for (const RankFile& rf : model_states) models_.emplace_back(rf);
    for (const RankFile& rf : optim_states) optims_.emplace_back(rf);
  }

  Result<ZeroCheckpoint> Run() {
    const FileView& m0 = models_[0];
    const json& st = m0.state();
    if (!st.contains("param_shapes") || !st.contains("buffer_names")) {
      return m0.Bad("no param_shapes or buffer_names: not a DeepSpeed model states file");
    }
    // None where the engine saved no ZeRO optimizer state (stage 0, or no optimizer): the
    // module, or a pipeline's layer files, is the model; partitions cannot be placed.
    if (!Get(st, "param_shapes").is_array() &&
        !(Get(st, "param_shapes").is_null() && optims_.empty())) {
      return m0.Bad(Get(st, "param_shapes").is_null()
                        ? "param_shapes is None but the tag has optimizer rank files: their "
                          "partitions cannot be placed"
                        : "param_shapes is not a list: not a DeepSpeed model states file");
    }
    ZeroCheckpoint& out = b_.out();
    out.dp_world_size = optims_.empty() ? 1 : static_cast<uint32_t>(optims_.size());
    if (Get(st, "mp_world_size").is_number_unsigned()) {
      out.mp_world_size = static_cast<uint32_t>(
          std::min<uint64_t>(Get(st, "mp_world_size").get<uint64_t>(), kMaxWorldSize));
    }
    AddOtherTensors();
    if (optims_.empty()) {
      out.stage = 0;
      CKPTFS_RETURN_IF_ERROR(AddModule(/*model_too=*/true));
    } else {
      CKPTFS_ASSIGN_OR_RETURN(info_, ReadOptimInfo(optims_[0]));
      CKPTFS_RETURN_IF_ERROR(CheckRanks());
      out.stage = info_.stage;
      if (info_.stage < 3) CKPTFS_RETURN_IF_ERROR(AddModule(/*model_too=*/false));
      CKPTFS_RETURN_IF_ERROR(AddBuffers());
      CKPTFS_RETURN_IF_ERROR(AddFrozen());
      CKPTFS_RETURN_IF_ERROR(info_.stage == 3 ? AddStage3() : AddStage12());
    }
    AddTied();
    out.state_json = StateJson();
    return std::move(out);
  }

 private:
  // Tensors of the model states file that are not the module or frozen fragments (a
  // client_state's tensors, a stage-0 optimizer), under their own names.
  void AddOtherTensors() {
    const FileView& m0 = models_[0];
    for (const TorchTensor& t : m0.file().tensors) {
      if (t.name.starts_with("module.") || t.name.starts_with("frozen_param_fragments.")) continue;
      Dtype dtype;
      Result<Piece> p = m0.PieceOf(t, &dtype);
      if (!p.ok()) continue;  // a strided client tensor: not served
      b_.Add(t.name, dtype, t.shape, t.top_key_size);
      b_.Append(p->shard, p->offset, p->numel * DtypeSize(dtype));
    }
  }

  // module.<name> as saved (stage 0-2); at stage 0 also the model.
  Status AddModule(bool model_too) {
    const FileView& m0 = models_[0];
    for (const TorchTensor& t : m0.file().tensors) {
      if (t.top_key_size != kModuleKey || !t.name.starts_with("module.")) continue;
      Dtype dtype;
      CKPTFS_ASSIGN_OR_RETURN(Piece p, m0.PieceOf(t, &dtype));
      const uint32_t i = b_.Add(t.name, dtype, t.shape, kModuleKey);
      b_.Append(p.shard, p.offset, p.numel * DtypeSize(dtype));
      if (model_too) b_.Tie("model." + t.name.substr(7), i, kModelKey);
    }
    return Status::Ok();
  }

  // Buffers: the module's tensors named in buffer_names, native dtype.
  Status AddBuffers() {
    const FileView& m0 = models_[0];
    const json& names = Get(m0.state(), "buffer_names");
    if (!names.is_array()) return Status::Ok();
    for (const json& n : names) {
      if (!n.is_string()) return m0.Bad("buffer_names holds a non-string");
      const std::string module_name = "module." + n.get<std::string>();
      if (std::optional<uint32_t> i = b_.Find(module_name)) {
        b_.Tie("model." + n.get<std::string>(), *i, kModelKey);
        continue;
      }
      const TorchTensor* t = m0.Find(module_name);
      if (!t) continue;  // zero_to_fp32 takes the buffers the module holds
      Dtype dtype;
      CKPTFS_ASSIGN_OR_RETURN(Piece p, m0.PieceOf(*t, &dtype));
      b_.Add("model." + n.get<std::string>(), dtype, t->shape, kModelKey);
      b_.Append(p.shard, p.offset, p.numel * DtypeSize(dtype));
    }
    return Status::Ok();
  }

  // Frozen params: whole in rank 0's fragments (stage 1/2), or one fragment per rank
  // concatenated (stage 3). Absent when saved with exclude_frozen_parameters.
  Status AddFrozen() {
    const FileView& m0 = models_[0];
    const json& shapes = Get(m0.state(), "frozen_param_shapes");
    if (shapes.is_null()) return Status::Ok();
    if (!shapes.is_object()) return m0.Bad("frozen_param_shapes is not a dict");
    const size_t files = info_.stage == 3 ? models_.size() : 1;
    for (const auto& [name, shape] : shapes.items()) {
      const std::string what = "frozen param \"" + name + "\"";
      CKPTFS_ASSIGN_OR_RETURN(const uint64_t numel, Numel(shape, what, m0));
      std::vector<Piece> pieces;
      Dtype dtype = Dtype::kF32;
      uint64_t have = 0;
      for (size_t r = 0; r < files; ++r) {
        const TorchTensor* t = models_[r].Find("frozen_param_fragments." + name);
        if (!t) return models_[r].Bad(what + " has no fragment in frozen_param_fragments");
        Dtype d;
        CKPTFS_ASSIGN_OR_RETURN(Piece p, models_[r].PieceOf(*t, &d));
        if (r > 0 && d != dtype) return models_[r].Bad(what + ": fragments of two dtypes");
        dtype = d;
        have += p.numel;
        pieces.push_back(p);
      }
      if (info_.stage < 3 ? have != numel : have < numel) {
        return models_[files - 1].Bad(what + ": fragments hold " + std::to_string(have) +
                                      " elements, its shape " + std::to_string(numel));
      }
      b_.Add("model." + name, dtype, Dims(shape), kModelKey);
      b_.Slice(pieces, 0, numel, DtypeSize(dtype));
    }
    return Status::Ok();
  }

  // Every optimizer rank file agrees with rank 0 on stage and world size, and on the step.
  Status CheckRanks() {
    const size_t d = optims_.size();
    if (info_.partition_count != d) {
      return optims_[0].Bad("partition_count " + std::to_string(info_.partition_count) +
                            " but the tag has " + std::to_string(d) +
                            " optimizer rank files: rank files of different world sizes");
    }
    const std::string step0 = StepPrint(optims_[0], info_);
    for (size_t r = 1; r < d; ++r) {
      CKPTFS_ASSIGN_OR_RETURN(const OptimInfo info, ReadOptimInfo(optims_[r]));
      if (info.partition_count != info_.partition_count || info.stage != info_.stage) {
        return optims_[r].Bad("zero_stage " + std::to_string(info.stage) + ", partition_count " +
                              std::to_string(info.partition_count) + " but " + optims_[0].name() +
                              " says " + std::to_string(info_.stage) + ", " +
                              std::to_string(info_.partition_count) +
                              ": rank files of different world sizes or runs");
      }
      if (StepPrint(optims_[r], info_) != step0) {
        return optims_[r].Bad("its optimizer step differs from " + optims_[0].name() +
                              "'s: rank files of different tags");
      }
    }
    const json& m0 = models_[0].state();
    for (size_t r = 1; r < models_.size(); ++r) {
      const json& mr = models_[r].state();
      for (const char* key : {"global_steps", "dp_world_size", "mp_world_size"}) {
        if (m0.contains(key) && mr.contains(key) && Get(m0, key) != Get(mr, key)) {
          return models_[r].Bad(std::string(key) + " " + QuoteJson(Get(mr, key)) + " but " +
                                models_[0].name() + " says " + QuoteJson(Get(m0, key)) +
                                ": rank files of different tags or world sizes");
        }
      }
    }
    if (m0.contains("dp_world_size") && Get(m0, "dp_world_size").is_number_unsigned() &&
        Get(m0, "dp_world_size").get<uint64_t>() != d) {
      return models_[0].Bad("dp_world_size " + QuoteJson(Get(m0, "dp_world_size")) +
                            " but rank 0's " + "partition_count is " + std::to_string(d) +
                            ": rank files of different world sizes");
    }
    return Status::Ok();
  }

  // The pieces of flat group `g` of every rank: the master weights (moment "") or a moment;
  // `present` false when rank 0 has no such moment (an optimizer without it).
  Result<Partitions> Collect(size_t groups, std::string_view moment,
                             const std::vector<std::string>& keys) {
    Partitions parts;
    parts.by_rank.resize(optims_.size());
    for (size_t r = 0; r < optims_.size(); ++r) {
      const FileView& f = optims_[r];
      for (size_t g = 0; g < groups; ++g) {
        const TorchTensor* t =
            moment.empty() ? f.Find(std::string(kOsd) + info_.groups_key + "." + std::to_string(g))
                           : MomentOf(f, info_, keys[g], g, moment);
        if (!t) {
          if (!moment.empty() && r == 0 && g == 0) {
            parts.present = false;
            return parts;
          }
          return f.Bad(std::string(moment.empty() ? info_.groups_key : moment) + " of group " +
                       std::to_string(g) + " is missing");
        }
        Dtype dtype;
        CKPTFS_ASSIGN_OR_RETURN(Piece p, f.PieceOf(*t, &dtype));
        if ((r > 0 || g > 0) && dtype != parts.dtype) {
          return f.Bad("\"" + t->name + "\" is " + std::string(DtypeName(dtype)) + ", others " +
                       std::string(DtypeName(parts.dtype)));
        }
        parts.dtype = dtype;
        parts.by_rank[r].push_back(p);
      }
    }
    return parts;
  }

  // The moments have the master weights' partition sizes, or (stage 1/2, whose master
  // partitions are saved without their padding) those sizes and the padding.
  Status SameSizes(const Partitions& master, const Partitions& moment, std::string_view what,
                   const std::vector<std::vector<uint64_t>>& pads) {
    for (size_t r = 0; r < optims_.size(); ++r) {
      for (size_t g = 0; g < master.by_rank[r].size(); ++g) {
        const uint64_t n = master.by_rank[r][g].numel;
        const uint64_t pad = pads.empty() ? 0 : pads[r][g];
        if (moment.by_rank[r][g].numel != n && moment.by_rank[r][g].numel != n + pad) {
          return optims_[r].Bad(std::string(what) + " of group " + std::to_string(g) + " holds " +
                                std::to_string(moment.by_rank[r][g].numel) +
                                " elements, the master weights " + std::to_string(n) +
                                (pad ? " and " + std::to_string(pad) + " padding" : ""));
        }
      }
    }
    return Status::Ok();
  }

  // group_paddings of every rank ([rank][group]); empty if a rank did not save them.
  std::vector<std::vector<uint64_t>> Paddings(size_t groups) const {
    std::vector<std::vector<uint64_t>> pads;
    for (const FileView& f : optims_) {
      const json& list = Get(Get(f.state(), "optimizer_state_dict"), "group_paddings");
      if (!list.is_array() || list.size() != groups) return {};
      std::vector<uint64_t>& rank = pads.emplace_back();
      for (const json& p : list) {
        if (!p.is_number_unsigned()) return {};
        rank.push_back(p.get<uint64_t>());
      }
    }
    return pads;
  }

  // Stage 1/2: group g is the concatenation of every rank's partition g.
  Status AddStage12() {
    const FileView& m0 = models_[0];
    const json& param_shapes = Get(m0.state(), "param_shapes");
    const size_t groups = param_shapes.size();
    if (optims_[0].Find(std::string(kOsd) + info_.groups_key + "." + std::to_string(groups))) {
      return optims_[0].Bad("more partitioned groups than param_shapes has (" +
                            std::to_string(groups) + ")");
    }
    const std::vector<std::string> keys = StateKeys(optims_[0], info_, groups);
    CKPTFS_ASSIGN_OR_RETURN(const Partitions master, Collect(groups, "", keys));
    b_.out().master_dtype = master.dtype;
    const std::vector<std::vector<uint64_t>> pads = Paddings(groups);
    // Twice: the master weights' sizes checked first (their refusals are the clearest),
    // then the moments collected and the tensors made.
    std::vector<Partitions> moments;
    CKPTFS_RETURN_IF_ERROR(Groups12(master, moments, pads, /*emit=*/false));
    for (std::string_view m : kMoments) {
      CKPTFS_ASSIGN_OR_RETURN(Partitions p, Collect(groups, m, keys));
      if (!p.present) continue;
      CKPTFS_RETURN_IF_ERROR(SameSizes(master, p, m, pads));
      moments.push_back(std::move(p));
    }
    return Groups12(master, moments, pads, /*emit=*/true);
  }

  // Stage 1/2, each param group: its partitions' sizes checked, and with `emit` its params
  // (and moments) added.
  Status Groups12(const Partitions& master, const std::vector<Partitions>& moments,
                  const std::vector<std::vector<uint64_t>>& pads, bool emit) {
    const FileView& m0 = models_[0];
    const json& param_shapes = Get(m0.state(), "param_shapes");
    const size_t groups = param_shapes.size();
    const size_t d = optims_.size();
    for (size_t g = 0; g < groups; ++g) {
      const json& shapes = param_shapes[g];
      if (!shapes.is_object())
        return m0.Bad("param_shapes[" + std::to_string(g) + "] is not a dict");
      // DeepSpeed saves each partition without its padding (a narrowed view), so with the
      // padding every rank's is the same size; older files keep the padding in.
      std::vector<Piece> flat;
      uint64_t total = 0, padding = 0;
      bool equal = true, equal_padded = !pads.empty();
      for (size_t r = 0; r < d; ++r) {
        const Piece& p = master.by_rank[r][g];
        const uint64_t pad = pads.empty() ? 0 : pads[r][g];
        equal &= p.numel == master.by_rank[0][g].numel;
        if (!pads.empty()) equal_padded &= p.numel + pad == master.by_rank[0][g].numel + pads[0][g];
        flat.push_back(p);
        total += p.numel;
        padding += pad;
      }
      if (!equal && !equal_padded) {
        return optims_[d - 1].Bad("partitions of group " + std::to_string(g) +
                                  " differ in size beyond their padding: partitions of unequal "
                                  "sizes");
      }
      uint64_t offset = 0;
      for (const auto& [name, shape] : shapes.items()) {
        CKPTFS_ASSIGN_OR_RETURN(const uint64_t numel, Numel(shape, "param \"" + name + "\"", m0));
        if (!RangeWithin(offset, numel, total)) {
          return m0.Bad("param \"" + name + "\" (elements " + std::to_string(offset) + " to " +
                        std::to_string(offset + numel) + ") lies past flat group " +
                        std::to_string(g) + " of " + std::to_string(total) + " elements");
        }
        if (emit) AddParam(name, shape, master, moments, g, flat, offset, numel);
        offset += numel;
      }
      // Sum of numels == partition sum - padding (the saved partitions hold no padding when
      // narrowed); zero_to_fp32's looser check (both aligned to 2 x D) without paddings.
      const uint64_t align = 2 * d;
      const uint64_t data = equal_padded && padding > 0 ? total : total - std::min(padding, total);
      const bool adds_up = !pads.empty()
                               ? offset == data && (equal_padded || padding <= total)
                               : (offset + align - 1) / align == (total + align - 1) / align;
      if (!adds_up) {
        return optims_[d - 1].Bad(
            "param group " + std::to_string(g) + ": params hold " + std::to_string(offset) +
            " elements but the partitions " + std::to_string(data) +
            (pads.empty() ? "" : " (" + std::to_string(padding) + " padding left out)") +
            ": partition sizes do not add up");
      }
    }
    return Status::Ok();
  }

  // One trainable param: model.<name> and its moments, elements [offset, offset + numel)
  // of flat group g (stage 1/2).
  void AddParam(const std::string& name, const json& shape, const Partitions& master,
                const std::vector<Partitions>& moments, size_t g, const std::vector<Piece>& flat,
                uint64_t offset, uint64_t numel) {
    b_.Add("model." + name, master.dtype, Dims(shape), kModelKey);
    b_.Slice(flat, offset, numel, DtypeSize(master.dtype));
    for (size_t m = 0; m < moments.size(); ++m) {
      std::vector<Piece> mflat;
      for (const auto& rank : moments[m].by_rank) mflat.push_back(rank[g]);
      b_.Add("optimizer." + std::string(kMoments[m]) + "." + name, moments[m].dtype, Dims(shape),
             kOptimizerKey);
      b_.Slice(mflat, offset, numel, DtypeSize(moments[m].dtype));
    }
  }

  // Stage 3: each param is chunk r of every rank r's flat vector (sub-groups end to end).
  Status AddStage3() {
    const FileView& m0 = models_[0];
    const size_t d = optims_.size();
    size_t groups = 0;
    while (optims_[0].Find(std::string(kOsd) + info_.groups_key + "." + std::to_string(groups))) {
      ++groups;
    }
    if (groups == 0) return optims_[0].Bad(info_.groups_key + " is missing");
    for (size_t r = 1; r < d; ++r) {
      if (!optims_[r].Find(std::string(kOsd) + info_.groups_key + "." +
                           std::to_string(groups - 1)) ||
          optims_[r].Find(std::string(kOsd) + info_.groups_key + "." + std::to_string(groups))) {
        return optims_[r].Bad("its number of sub-groups differs from rank 0's (" +
                              std::to_string(groups) + ")");
      }
    }
    const std::vector<std::string> keys = StateKeys(optims_[0], info_, groups);
    CKPTFS_ASSIGN_OR_RETURN(const Partitions master, Collect(groups, "", keys));
    b_.out().master_dtype = master.dtype;
    const std::vector<std::vector<uint64_t>> pads;  // stage 3 pads each param, not groups
    uint64_t per_rank = 0;
    for (const Piece& p : master.by_rank[0]) per_rank += p.numel;
    for (size_t r = 1; r < d; ++r) {
      uint64_t n = 0;
      for (const Piece& p : master.by_rank[r]) n += p.numel;
      if (n != per_rank) {
        return optims_[r].Bad("its partition holds " + std::to_string(n) + " elements, rank 0's " +
                              std::to_string(per_rank) + ": partitions of unequal sizes");
      }
    }
    std::vector<Partitions> moments;
    for (std::string_view m : kMoments) {
      CKPTFS_ASSIGN_OR_RETURN(Partitions p, Collect(groups, m, keys));
      if (!p.present) continue;
      CKPTFS_RETURN_IF_ERROR(SameSizes(master, p, m, pads));
      moments.push_back(std::move(p));
    }
    uint64_t offset = 0;
    for (const json& shapes : Get(m0.state(), "param_shapes")) {
      if (!shapes.is_object()) return m0.Bad("param_shapes holds a non-dict");
      for (const auto& [name, shape] : shapes.items()) {
        CKPTFS_ASSIGN_OR_RETURN(const uint64_t numel, Numel(shape, "param \"" + name + "\"", m0));
        const uint64_t chunk = numel / d + (numel % d ? 1 : 0);
        if (!RangeWithin(offset, chunk, per_rank)) {
          return m0.Bad("param \"" + name + "\" (chunk elements " + std::to_string(offset) +
                        " to " + std::to_string(offset + chunk) + ") lies past the flat group of " +
                        std::to_string(per_rank) + " elements per rank");
        }
        b_.Add("model." + name, master.dtype, Dims(shape), kModelKey);
        Chunks(master, offset, chunk, numel);
        for (size_t m = 0; m < moments.size(); ++m) {
          b_.Add("optimizer." + std::string(kMoments[m]) + "." + name, moments[m].dtype,
                 Dims(shape), kOptimizerKey);
          Chunks(moments[m], offset, chunk, numel);
        }
        offset += chunk;
      }
    }
    if (offset != per_rank) {
      return optims_[d - 1].Bad("params need " + std::to_string(offset) +
                                " elements per rank but each partition holds " +
                                std::to_string(per_rank) + ": partition sizes do not add up");
    }
    return Status::Ok();
  }

  // Chunk [offset, offset + chunk) of every rank in turn, until `numel` elements.
  void Chunks(const Partitions& parts, uint64_t offset, uint64_t chunk, uint64_t numel) {
    for (const std::vector<Piece>& rank : parts.by_rank) {
      const uint64_t take = std::min(chunk, numel);
      b_.Slice(rank, offset, take, DtypeSize(parts.dtype));
      numel -= take;
    }
  }

  // shared_params {alias: owner}: the owner's bytes under the alias too, in order.
  void AddTied() {
    const json& st = models_[0].state();
    const json& shared = Get(st, "shared_params");
    if (!shared.is_object()) return;
    for (const auto& [alias, owner] : shared.items()) {
      if (!owner.is_string()) continue;
      if (std::optional<uint32_t> i = b_.Find("model." + owner.get<std::string>())) {
        b_.Tie("model." + alias, *i, kModelKey);
      }
      for (std::string_view m : kMoments) {
        const std::string prefix = "optimizer." + std::string(m) + ".";
        if (std::optional<uint32_t> i = b_.Find(prefix + owner.get<std::string>())) {
          b_.Tie(prefix + alias, *i, kOptimizerKey);
        }
      }
    }
  }

  std::string StateJson() const {
    json state = models_[0].state();
    json zero = json::object();
    const ZeroCheckpoint& out = b_.out();
    zero["stage"] = out.stage;
    zero["dp_world_size"] = out.dp_world_size;
    zero["mp_world_size"] = out.mp_world_size;
    if (out.stage > 0) zero["master_dtype"] = std::string(DtypeName(out.master_dtype));
    json files = json::array();
    for (const FileView& f : models_) files.push_back(f.name());
    for (const FileView& f : optims_) files.push_back(f.name());
    zero["rank_files"] = std::move(files);
    if (!optims_.empty()) {
      const json& osd = Get(optims_[0].state(), "optimizer_state_dict");
      for (const char* key : {"loss_scaler", "dynamic_loss_scale", "overflow", "clip_grad",
                              "partition_count", "group_paddings", "ds_version"}) {
        if (osd.contains(key)) zero[key] = Get(osd, key);
      }
      if (!state.contains("ds_config") && optims_[0].state().contains("ds_config")) {
        state["ds_config"] = Get(optims_[0].state(), "ds_config");
      }
    }
    state["zero"] = std::move(zero);
    return state.dump(-1, ' ', false, json::error_handler_t::replace);
  }

  std::vector<FileView> models_;
  std::vector<FileView> optims_;
  OptimInfo info_;
  Builder b_;
};

}  // namespace

std::string ModelStatesName(uint32_t mp_rank) {
  return "mp_rank_" + TwoDigits(mp_rank) + "_model_states.pt";
}

std::string Zero3ModelStatesName(uint32_t dp_rank, uint32_t mp_rank) {
  return "zero_pp_rank_" + std::to_string(dp_rank) + "_mp_rank_" + TwoDigits(mp_rank) +
         "_model_states.pt";
}

std::string OptimStatesName(uint32_t dp_rank, uint32_t mp_rank, bool bf16) {
  return std::string(bf16 ? "bf16_" : "") + "zero_pp_rank_" + std::to_string(dp_rank) +
         "_mp_rank_" + TwoDigits(mp_rank) + "_optim_states.pt";
}

Result<TagInfo> ReadTagInfo(const RankFile& model_states) {
  const FileView f(model_states);
  const json& st = f.state();
  if (!st.contains("buffer_names") || !st.contains("param_shapes")) {
    return f.Bad("no param_shapes or buffer_names: not a DeepSpeed model states file");
  }
  TagInfo info;
  info.zero_state = !Get(st, "param_shapes").is_null();
  // state_json leaves tensors out, so a module of tensors may show as {} or not at all.
  info.module_saved = !(st.contains("module") && st["module"].is_null());
  for (auto [key, field] : {std::pair{"dp_world_size", &info.dp_world_size},
                            std::pair{"mp_world_size", &info.mp_world_size}}) {
    if (!st.contains(key)) continue;
    if (!st[key].is_number_unsigned() || st[key].get<uint64_t>() == 0 ||
        st[key].get<uint64_t>() > kMaxWorldSize) {
      return f.Bad(std::string(key) + " " + QuoteJson(st[key]) + " is out of range");
    }
    *field = st[key].get<uint32_t>();
  }
  if (Get(st, "global_steps").is_number_integer()) {
    info.global_steps = Get(st, "global_steps").get<int64_t>();
  }
  const json& stage = Get(Get(Get(st, "ds_config"), "zero_optimization"), "stage");
  if (stage.is_number_integer()) info.config_stage = stage.get<int>();
  return info;
}

std::string_view StripLatest(std::string_view text) {
  // The length of the White_Space character at the start (forward) or end of `s`, 0 if none.
  auto space_at = [](std::string_view s, bool forward) -> size_t {
    if (s.empty()) return 0;
    const unsigned char c = static_cast<unsigned char>(forward ? s.front() : s.back());
    if (c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f)) return 1;
    for (size_t len : {2, 3}) {  // the non-ASCII ones are two or three bytes in UTF-8
      if (s.size() < len) break;
      const std::string_view ch = forward ? s.substr(0, len) : s.substr(s.size() - len);
      static constexpr std::string_view kSpaces[] = {
          "\u0085", "\u00a0", "\u1680", "\u2000", "\u2001", "\u2002", "\u2003",
          "\u2004", "\u2005", "\u2006", "\u2007", "\u2008", "\u2009", "\u200a",
          "\u2028", "\u2029", "\u202f", "\u205f", "\u3000"};
      if (std::find(std::begin(kSpaces), std::end(kSpaces), ch) != std::end(kSpaces)) return len;
    }
    return 0;
  };
  while (size_t n = space_at(text, true)) text.remove_prefix(n);
  while (size_t n = space_at(text, false)) text.remove_suffix(n);
  return text;
}

std::string TwoDigits(uint32_t n) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%02u", n);
  return buf;
}

std::string WithPipeline(const std::string& state_json, const TagInfo& tag, size_t layer_files) {
  json state = ParseOrderedJson(state_json);
  if (!state.is_object()) state = json::object();
  json& zero = state["zero"];
  if (!zero.is_object()) zero = json::object();
  if (tag.config_stage) zero["stage"] = *tag.config_stage;
  zero["dp_world_size"] = tag.dp_world_size;
  zero["mp_world_size"] = tag.mp_world_size;
  state["pipeline"] = {{"layer_files", layer_files},
                       {"tensor_parallel", tag.mp_world_size},
                       {"fp32_masters", !tag.zero_state          ? "none saved"
                                        : tag.mp_world_size == 1 ? "model_fp32"
                                                                 : "not consolidated"}};
  return state.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ZeroSummary(const std::string& state_json) {
  const json state = ParseOrderedJson(state_json);
  const json& zero = Get(state, "zero");
  if (!zero.is_object()) return "";
  const json& config = Get(state, "ds_config");
  const std::string precision = Get(Get(config, "bf16"), "enabled") == true   ? "bf16"
                                : Get(Get(config, "fp16"), "enabled") == true ? "fp16"
                                                                              : "fp32";
  std::string line = "stage " + QuoteJson(Get(zero, "stage")) + ", dp_world_size " +
                     QuoteJson(Get(zero, "dp_world_size")) + ", mp_world_size " +
                     QuoteJson(Get(zero, "mp_world_size")) + ", " + precision;
  if (Get(zero, "master_dtype").is_string()) {
    line += ", master weights " + Get(zero, "master_dtype").get<std::string>();
  }
  line += ", " + std::to_string(Get(zero, "rank_files").size()) + " rank files";
  const json& pipeline = Get(state, "pipeline");
  if (pipeline.is_object()) {
    line += ", pipeline of " + QuoteJson(Get(pipeline, "layer_files")) + " layer files (" +
            QuoteJson(Get(pipeline, "tensor_parallel")) + " tensor-parallel)";
  }
  return line + ", complete";
}

Result<ZeroCheckpoint> Consolidate(std::span<const RankFile> model_states,
                                   std::span<const RankFile> optim_states) {
  if (model_states.empty()) return Status::InvalidArgument("no model states file");
  Consolidator c(model_states, optim_states);
  CKPTFS_ASSIGN_OR_RETURN(ZeroCheckpoint out, c.Run());
  out.ranges.shrink_to_fit();
  return out;
}

}  // namespace ckptfs::deepspeed
