// zero.h's names, tag facts and summaries, and the half of Consolidator
// (zero_consolidator.h) that reads the model states files.
#include "core/format/deepspeed/zero.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/checked.h"
#include "core/encoding/ordered_json.h"
#include "core/format/deepspeed/zero_consolidator.h"

namespace ckptfs::deepspeed {

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

Result<ZeroCheckpoint> Consolidator::Run() {
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

void Consolidator::AddOtherTensors() {
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

Status Consolidator::AddModule(bool model_too) {
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

Status Consolidator::AddBuffers() {
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

Status Consolidator::AddFrozen() {
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

void Consolidator::AddTied() {
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

std::string Consolidator::StateJson() const {
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
