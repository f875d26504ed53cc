// The torch entry of the format table: an HF index of torch.save shards
// (pytorch_model.bin.index.json), or one torch.save file (.bin, .pt, .pth, Lightning's .ckpt).
// Storages are torch's, tensors view them (tied weights share one), and non-tensor values become
// state_json.
#include "core/checkpoint/hf_layout.h"
#include "core/checkpoint/model.h"
#include "core/encoding/torch_file.h"

namespace ckptfs {

ShardContents FromTorchFile(TorchFile& file, uint32_t shard_no) {
  ShardContents out;
  for (const TorchStorage& s : file.storages) {
    out.storages.push_back(Storage{s.decoded ? kDecodedData : shard_no, s.data_offset, s.size,
                                   s.dtype, s.has_crc32, s.crc32});
  }
  out.decoded = std::move(file.decoded);
  for (TorchTensor& t : file.tensors) {
    const Storage& s = out.storages[t.storage];
    const uint64_t element = DtypeSize(s.dtype);
    Tensor tensor{.name = std::move(t.name),
                  .dtype = s.dtype,
                  .top_is_dict = t.top_is_dict,
                  .shape = std::move(t.shape),
                  .shard = s.shard,
                  .storage = t.storage,
                  .top_key_size = t.top_key_size,
                  .storage_offset = t.storage_offset};
    if (IsRowMajor(tensor.shape, t.stride)) {
      // The interpreter checked that the view lies inside the storage.
      tensor.size = TensorByteSize(s.dtype, tensor.shape).value_or(0);  // 0: empty
      // An empty view may name any offset; keep it at its storage.
      tensor.offset = s.offset + (tensor.size ? t.storage_offset * element : 0);
    } else {
      tensor.stride = std::move(t.stride);
    }
    out.tensors.push_back(std::move(tensor));
  }
  out.state_json = std::move(file.state_json);
  out.weights_only = std::move(file.weights_only);
  return out;
}

namespace {

Result<ShardContents> ParseTorchShard(const StoredFile& shard, uint32_t shard_no) {
  CKPTFS_ASSIGN_OR_RETURN(TorchFile file, ReadTorchFile(*shard.source));
  return FromTorchFile(file, shard_no);
}

// A torch weights file of this entry. Not: map.pt, a split checkpoint's list of keys
// (split_reader.cc), DeepSpeed's rank files, parts of a ZeRO tag (deepspeed_reader.cc), and
// HF Trainer's own files (IsHfTrainerFile), parts of a Trainer checkpoint.
std::string TorchEntryWeightName(std::string_view file) {
  const std::string_view name = StripZst(file);
  if (name == "map.pt" || IsHfTrainerFile(name)) return {};
  if (EndsWith(name, "_model_states.pt") || EndsWith(name, "_optim_states.pt")) return {};
  return TorchWeightName(file);
}

// Several lone torch files: pytorch_model.bin, since trainers leave training_args.bin and
// optimizer.pt beside it.
constexpr HfLayout kLayout = {".bin.index.json", "", "pytorch_model.bin", &TorchEntryWeightName,
                              &ParseTorchShard};

constexpr auto kProbeNames = WithHfCompanions<3>(
    {"pytorch_model.bin.index.json", "pytorch_model.bin", "pytorch_model.bin.zst"});

Status ReadTorch(const SourceDir& dir, const Claim& claim, ReadContext& context, Checkpoint& ckpt) {
  CKPTFS_RETURN_IF_ERROR(ReadHf(dir, claim, context, kLayout, ckpt));
  // A safetensors conversion of torch weights: what transformers' loader looks for.
  ckpt.metadata = {{"format", "pt"}};
  return Status::Ok();
}

// A SOURCE naming one of Trainer's files (`inspect checkpoint-500/optimizer.pt`) asked for
// that file: read as any torch.save file. In a directory they are never weights.
Result<std::optional<Claim>> DetectTorch(const SourceDir& dir) {
  if (!dir.named.empty() && IsHfTrainerFile(dir.named)) {
    for (const std::string& f : dir.files) {
      if (IsHfTrainerFile(f))
        return std::optional<Claim>(Claim{Claim::Rank::kLoneFile, std::string(StripZst(f))});
    }
  }
  return DetectHf(dir, kLayout);
}

// With no key: the first of kTorchModelKeys whose value is a dict holding tensors.
void TorchModel(Checkpoint& ckpt) {
  for (std::string_view key : kTorchModelKeys) {
    if (TakeModelSubtree(ckpt, std::string(key), /*dicts_only=*/true)) {
      ckpt.model.rule = "first of model_state_dict, state_dict, model, module";
      return;
    }
  }
}

}  // namespace

FormatReader TorchFormat() {
  return FormatReader{
      .name = "torch",
      .title = "torch.save",
      .probe_names = kProbeNames,
      .looks_for = "*.bin, *.pt, *.pth, *.ckpt, *.bin.index.json",
      .accepts_file = [](std::string_view name) { return !TorchWeightName(name).empty(); },
      .file_kinds = ".bin, .pt, .pth, .ckpt",
      .detect = &DetectTorch,
      .read = &ReadTorch,
      .hidden = &HfHidden,
      .model = {.top_key = &PickledTopKey, .by_default = &TorchModel},
      .run = {.final_model = true},
  };
}

}  // namespace ckptfs
