// dcp::Metadata: the `.metadata` file of a PyTorch distributed checkpoint
// (torch.distributed.checkpoint, DCP), read without running any of it.
//
// FileSystemWriter.finish pickles one torch.distributed.checkpoint.metadata.Metadata:
//   - state_dict_metadata: {fqn: TensorStorageMetadata | BytesStorageMetadata}. A tensor's
//     TensorStorageMetadata holds its TensorProperties (dtype ...), its full `size`
//     (torch.Size) and its `chunks`: ChunkStorageMetadata(offsets, sizes), the boxes the
//     ranks saved, each once (replicas are deduplicated by the planner).
//   - storage_data: {MetadataIndex(fqn, offset, index): _StorageInfo(relative_path, offset,
//     length[, transform_descriptors])}: where each item's bytes lie. MetadataIndex.offset
//     is the chunk's offsets (torch.Size) for a tensor chunk, None for a bytes item.
//   - planner_data: {fqn: path}, the keys of the nested state dict the flat fqn came from
//     (DefaultSavePlanner's flatten_state_dict mapping), e.g. ("optim", "param_groups").
//   - storage_meta (StorageMeta: checkpoint_id, save_id, load_id, modules) and version.
// PyTorch's own definitions: torch/distributed/checkpoint/metadata.py (the dataclasses),
// filesystem.py (_StorageInfo, the writer), planner.py (MetadataIndex use).
//
// The pickle is read by the restricted unpickler (core/encoding/pickle.h); then every global
// it names must be one of an exact list, or the file is refused (Unsupported, naming the
// global): the dataclasses above, torch.Size, the torch dtypes, torch.strided through
// torch.serialization._get_layout, _MEM_FORMAT_ENCODING, pathlib.PosixPath /
// PurePosixPath (StorageMeta.checkpoint_id), collections.OrderedDict. Nothing else.
//
// Untrusted input: every field is checked for its type; dtypes must be ones ckptfs has; a
// chunk's rank must equal its tensor's, and every box must lie inside the tensor's size
// (checked arithmetic); sizes and offsets are non-negative and fit 64 bits; every tensor
// chunk has exactly one storage_data entry and no entry names an unknown fqn or chunk;
// relative_path is one plain file name (no '/', never "." or ".."); a transform is kept by
// name (the reader refuses those it cannot apply). Messages start with `file_name`.
// Bounds: a tensor has at most 64 dimensions, a relative_path at most 255 bytes, two chunks
// of one tensor never share their offsets (storage_data finds a chunk by them), a dataclass
// has at most 32 fields; what the reader builds is charged to a MetadataBudget of the
// file's size (core/encoding/metadata_budget.h), so objects the pickle shares through its
// memo cannot multiply memory.
// Tiling (overlap, holes) is checked by TileTensor (tiling.h), not here.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/encoding/dtype.h"
#include "core/status.h"

namespace ckptfs::dcp {

// Where one saved item's bytes lie (_StorageInfo).
struct StorageInfo {
  std::string relative_path;  // a plain file name of the checkpoint directory
  uint64_t offset = 0;
  uint64_t length = 0;
  // transform_descriptors, as written (empty: the bytes are what torch.save wrote).
  std::vector<std::string> transforms;
};

// One chunk of a tensor (ChunkStorageMetadata) and where it is stored.
struct Chunk {
  std::vector<uint64_t> offsets;  // the box's start in each dimension
  std::vector<uint64_t> sizes;    // its extent in each dimension
  StorageInfo storage;
};

struct TensorItem {
  std::string fqn;  // flattened name: "model.layers.0.attn.qkv.weight"
  Dtype dtype = Dtype::kU8;
  std::vector<uint64_t> size;  // the whole tensor's shape
  std::vector<Chunk> chunks;   // in .metadata order
};

// A non-tensor value (BytesStorageMetadata): its bytes are a torch.save of the value.
struct BytesItem {
  std::string fqn;
  StorageInfo storage;
};

// One key of a planner_data path: a dict key, or a list index (a Python int in the path:
// traverse_state_dict numbers the items of lists it walks into).
struct PathKey {
  std::string key;  // the str key, or the index in decimal
  bool index = false;
};

struct Metadata {
  std::vector<TensorItem> tensors;  // in .metadata order
  std::vector<BytesItem> bytes;     // in .metadata order
  // planner_data: fqn -> the nested keys it was flattened from, in .metadata order; an fqn
  // the writer gave no path has none here.
  std::vector<std::pair<std::string, std::vector<PathKey>>> paths;
  std::string version;  // Metadata.version ("1.0"), "" when absent
};

// Parses the bytes of a `.metadata` file named `file_name` (for messages).
Result<Metadata> ParseMetadata(std::string_view data, const std::string& file_name);

}  // namespace ckptfs::dcp
