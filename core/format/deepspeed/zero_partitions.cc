// The optimizer rank files of a ZeRO tag (zero.h): what every rank must agree on, and the
// flat partitions of the master weights and moments cut into tensors, stage 1/2 (one flat
// vector per param group across the ranks) and stage 3 (each param chunked over the ranks).
// The part of Consolidator (zero_consolidator.h) that reads optim_states files.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/checked.h"
#include "core/encoding/ordered_json.h"
#include "core/format/deepspeed/zero_consolidator.h"

namespace ckptfs::deepspeed {
namespace {

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

}  // namespace

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

Status Consolidator::CheckRanks() {
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

Result<Partitions> Consolidator::Collect(size_t groups, std::string_view moment,
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

Status Consolidator::SameSizes(const Partitions& master, const Partitions& moment,
                               std::string_view what,
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

std::vector<std::vector<uint64_t>> Consolidator::Paddings(size_t groups) const {
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

Status Consolidator::AddStage12() {
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

Status Consolidator::Groups12(const Partitions& master, const std::vector<Partitions>& moments,
                              const std::vector<std::vector<uint64_t>>& pads, bool emit) {
  const FileView& m0 = models_[0];
  const json& param_shapes = Get(m0.state(), "param_shapes");
  const size_t groups = param_shapes.size();
  const size_t d = optims_.size();
  for (size_t g = 0; g < groups; ++g) {
    const json& shapes = param_shapes[g];
    if (!shapes.is_object()) return m0.Bad("param_shapes[" + std::to_string(g) + "] is not a dict");
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

void Consolidator::AddParam(const std::string& name, const json& shape, const Partitions& master,
                            const std::vector<Partitions>& moments, size_t g,
                            const std::vector<Piece>& flat, uint64_t offset, uint64_t numel) {
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

Status Consolidator::AddStage3() {
  const FileView& m0 = models_[0];
  const size_t d = optims_.size();
  size_t groups = 0;
  while (optims_[0].Find(std::string(kOsd) + info_.groups_key + "." + std::to_string(groups))) {
    ++groups;
  }
  if (groups == 0) return optims_[0].Bad(info_.groups_key + " is missing");
  for (size_t r = 1; r < d; ++r) {
    if (!optims_[r].Find(std::string(kOsd) + info_.groups_key + "." + std::to_string(groups - 1)) ||
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
        return m0.Bad("param \"" + name + "\" (chunk elements " + std::to_string(offset) + " to " +
                      std::to_string(offset + chunk) + ") lies past the flat group of " +
                      std::to_string(per_rank) + " elements per rank");
      }
      b_.Add("model." + name, master.dtype, Dims(shape), kModelKey);
      Chunks(master, offset, chunk, numel);
      for (size_t m = 0; m < moments.size(); ++m) {
        b_.Add("optimizer." + std::string(kMoments[m]) + "." + name, moments[m].dtype, Dims(shape),
               kOptimizerKey);
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

void Consolidator::Chunks(const Partitions& parts, uint64_t offset, uint64_t chunk,
                          uint64_t numel) {
  for (const std::vector<Piece>& rank : parts.by_rank) {
    const uint64_t take = std::min(chunk, numel);
    b_.Slice(rank, offset, take, DtypeSize(parts.dtype));
    numel -= take;
  }
}

}  // namespace ckptfs::deepspeed
