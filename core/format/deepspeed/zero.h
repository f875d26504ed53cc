// deepspeed/zero: the consolidated model of a DeepSpeed ZeRO tag directory (global_stepN/),
// as zero_to_fp32.py would write it, described as byte ranges of the rank files. Nothing is
// copied or loaded: every consolidated tensor is an ordered list of StoredRanges over the
// storages of the rank files' torch.save zips.
//
// The files of a tag (data-parallel world size D, tensor-parallel rank 00 only):
//   mp_rank_00_model_states.pt                       stage 0-2: the module as saved,
//                                                    param_shapes, buffers, frozen params
//   zero_pp_rank_R_mp_rank_00_model_states.pt        stage 3: the same, one per dp rank
//   [bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt  every dp rank: its partition of the
//                                                    fp32 master weights and the moments
//
// Consolidation, the rules of zero_to_fp32:
//   - stage 1/2: each param group is one flat vector, padded at its end to a multiple of
//     2 x D and cut into D equal partitions (single_partition_of_fp32_groups, one per rank);
//     the params lie end to end in param_shapes order (already round-robin ordered when the
//     run used round_robin_gradients), so a param is the concatenation of ranges of
//     consecutive ranks' partitions.
//   - stage 3: each param is cut separately into D chunks of ceil(numel / D) elements; rank
//     R's chunks lie end to end in its fp32_flat_groups (sub-groups concatenated), in
//     param_shapes order; a param is chunk R of every rank, the tail padding dropped.
//   - frozen params (frozen_param_shapes): stage 1/2 the whole tensor in
//     frozen_param_fragments of the model states file; stage 3 the concatenation of every
//     rank's fragment, cut to the param's size. Module dtype.
//   - buffers (buffer_names): the module's tensors, native dtype (zero_to_fp32 casts them to
//     fp32; here they stay zero-copy).
//   - tied params (shared_params, alias -> owner): the owner's bytes under both names.
//   - master weights are fp32 or bf16: the dtype is the partition storage's.
//   - exp_avg / exp_avg_sq (Adam's moments) partition exactly as the master weights.
//
// Untrusted input: every count is checked before use. Refusals, each one line naming the
// file: partitions of unequal sizes, sizes that do not add up (sum of numels != partition
// sum - padding), a param past its flat group, rank files of different world sizes or tags,
// a tensor the rules need that the file lacks or holds with another shape.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/encoding/dtype.h"
#include "core/encoding/stored_range.h"
#include "core/encoding/torch_file.h"
#include "core/status.h"

namespace ckptfs::deepspeed {

// File names of a tag.
std::string Zero3ModelStatesName(uint32_t dp_rank, uint32_t mp_rank);  // stage 3
std::string OptimStatesName(uint32_t dp_rank, uint32_t mp_rank, bool bf16);

// One rank file read with PickleGlobals::kDeepSpeed.
struct RankFile {
  std::string name;    // as refusals name it ("global_step10/mp_rank_00_model_states.pt")
  uint32_t shard = 0;  // the caller's number for the file: StoredRange::shard of its bytes
  const TorchFile* file = nullptr;
};

// One tensor of the consolidated checkpoint.
struct ZeroTensor {
  static constexpr uint32_t kOwnBytes = UINT32_MAX;

  std::string name;  // "model.<name>", "module.<name>", "optimizer.exp_avg.<name>", ...
  Dtype dtype = Dtype::kF32;
  std::vector<uint64_t> shape;
  uint64_t size = 0;         // bytes
  uint32_t first_range = 0;  // ZeroCheckpoint::ranges[first_range, + range_count)
  uint32_t range_count = 0;
  // A tied parameter: the index (in ZeroCheckpoint::tensors) of the tensor whose bytes it
  // shares; its ranges are that tensor's.
  uint32_t same_as = kOwnBytes;
  // The root key the name starts with ("model", "module", "optimizer"; 0 for a tensor at the
  // top level) and whether its value is a dict: Tensor::top_key_size / top_is_dict.
  uint32_t top_key_size = 0;
  bool top_is_dict = false;
};

struct ZeroCheckpoint {
  int stage = 0;  // 0 (no ZeRO: the module is the model), 1, 2, 3
  uint32_t dp_world_size = 1;
  uint32_t mp_world_size = 1;
  Dtype master_dtype = Dtype::kF32;  // of the partitions (stage 1-3)
  std::vector<ZeroTensor> tensors;   // in no particular order; names distinct
  std::vector<StoredRange> ranges;   // contiguous runs merged
  std::string state_json;            // what .ckptfs/metadata.json shows (see Consolidate)
};

// What a model states file says about the tag before the rest is opened.
struct TagInfo {
  uint32_t dp_world_size = 1;
  uint32_t mp_world_size = 1;
  std::optional<int64_t> global_steps;
  std::optional<int> config_stage;  // ds_config.zero_optimization.stage, if present
  // param_shapes is a list: the engine saved ZeRO optimizer state (engine._save_checkpoint
  // sets it only `if self.optimizer and zero_optimizer_state`). None: a tag without it (no
  // ZeRO, or no optimizer), whose model is the module or a pipeline's layer files.
  bool zero_state = true;
  bool module_saved = true;  // `module` is not None (a pipeline saves None: its layer files)
};

// Reads `model_states`'s world sizes and step; refuses a file that is not a DeepSpeed model
// states file (no buffer_names / param_shapes keys, world sizes out of range).
Result<TagInfo> ReadTagInfo(const RankFile& model_states);

// The tag a `latest` file's text names, stripped as DeepSpeed strips it: load_checkpoint
// (runtime/engine.py, `tag = fd.read().strip()`) and zero_to_fp32.py's
// get_fp32_state_dict_from_zero_checkpoint (`tag = fd.read().strip()`) call Python's
// str.strip() on the UTF-8 text, which drops every Unicode White_Space character at either
// end (ASCII " \t\n\r\v\f", \x1c-\x1f, U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028,
// U+2029, U+202F, U+205F, U+3000). Whitespace inside the tag is kept.
std::string_view StripLatest(std::string_view text);

// Consolidates a tag. `model_states`: stage 0-2 the one mp_rank_00 file; stage 3 every dp
// rank's in rank order. `optim_states`: every dp rank's in rank order, empty for stage 0.
// state_json holds the model states file's non-tensor values (global_steps, ds_version,
// ds_config, lr_scheduler, client state, ...) and "zero": {stage, dp_world_size,
// mp_world_size, master_dtype, rank_files, loss_scaler, ...} from rank 0's optimizer.
Result<ZeroCheckpoint> Consolidate(std::span<const RankFile> model_states,
                                   std::span<const RankFile> optim_states);

// "07" for 7: the two-digit ranks of DeepSpeed's file names.
std::string TwoDigits(uint32_t n);

// A pipeline tag's state_json: `state_json` with "zero" stating the tag's world sizes and
// configured stage and "pipeline": {layer_files, tensor_parallel, fp32_masters}; the
// masters are consolidated (as model_fp32.*) only without tensor parallelism, and exist only
// where the tag holds ZeRO optimizer state (TagInfo::zero_state).
std::string WithPipeline(const std::string& state_json, const TagInfo& tag, size_t layer_files);

// inspect's line for a consolidated tag, from its state_json: "stage 2, dp_world_size 2,
// mp_world_size 1, bf16, master weights F32, 3 rank files, complete" (a tag that opened has
// every rank file its world size promises). Empty if `state_json` has no "zero" object.
std::string ZeroSummary(const std::string& state_json);

}  // namespace ckptfs::deepspeed
