// The safetensors entry of the format table: an HF index of .safetensors shards, or one
// .safetensors file. Each tensor is its own storage.
#include "core/checkpoint/hf_layout.h"
#include "core/checkpoint/model.h"
#include "core/encoding/safetensors.h"

namespace ckptfs {
namespace {

ShardContents FromSafetensors(SafetensorsHeader& header, uint32_t shard_no) {
  ShardContents out;
  out.tensors.reserve(header.tensors.size());
  out.storages.reserve(header.tensors.size());
  for (TensorEntry& t : header.tensors) {
    const uint64_t offset = header.data_start + t.begin, size = t.end - t.begin;
    out.storages.push_back(Storage{shard_no, offset, size, t.dtype});
    Tensor tensor{.name = std::move(t.name),
                  .dtype = t.dtype,
                  .shape = std::move(t.shape),
                  .shard = shard_no,
                  .offset = offset,
                  .size = size,
                  .storage = static_cast<uint32_t>(out.storages.size() - 1)};
    out.tensors.push_back(std::move(tensor));
  }
  out.metadata = std::move(header.metadata);
  return out;
}

Result<ShardContents> ParseSafetensorsShard(const StoredFile& shard, uint32_t shard_no) {
  CKPTFS_ASSIGN_OR_RETURN(SafetensorsHeader header, ReadSafetensorsHeader(*shard.source));
  return FromSafetensors(header, shard_no);
}

constexpr HfLayout kLayout = {".safetensors.index.json", "model.safetensors.index.json", "",
                              &SafetensorsWeightName, &ParseSafetensorsShard};

constexpr auto kProbeNames = WithHfCompanions<3>(
    {"model.safetensors.index.json", "model.safetensors", "model.safetensors.zst"});

}  // namespace

FormatReader SafetensorsFormat() {
  return FormatReader{
      .name = "safetensors",
      .title = "safetensors",
      .probe_names = kProbeNames,
      .looks_for = "*.safetensors, *.safetensors.index.json",
      .accepts_file = [](std::string_view name) { return !SafetensorsWeightName(name).empty(); },
      .file_kinds = ".safetensors",
      .detect = [](const SourceDir& dir) -> Result<std::optional<Claim>> {
        return DetectHf(dir, kLayout);
      },
      .read = [](const SourceDir& dir, const Claim& claim, ReadContext& context,
                 Checkpoint& ckpt) { return ReadHf(dir, claim, context, kLayout, ckpt); },
      .metadata_is_header = true,
      .hidden = &HfHidden,
      .model = {.top_key = &DottedTopKey},
      .run = {.final_model = true},
  };
}

}  // namespace ckptfs
