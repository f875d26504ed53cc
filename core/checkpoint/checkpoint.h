// Checkpoint: what OpenCheckpoint (core/format/formats.h) finds in SOURCE, validated, with every
// file open.
//
// SOURCE is a directory holding an index (`*.safetensors.index.json`, or
// `pytorch_model.bin.index.json` as transformers writes it) with its shards, or a single
// weights file (`*.safetensors`, or a torch.save file: `*.bin`, `*.pt`, `*.pth`, `*.ckpt`), or the
// path of one such file. Any weight file may be stored as NAME.zst instead, decoded on
// read through `context`. Opening reads only
// headers, so its cost grows with the number of tensors, not the bytes of the checkpoint.
// Every inconsistency (missing or truncated shard, a tensor listed in the index but not in
// its shard or the reverse, a tensor in two shards, a bad header) is a Status whose
// message names the offending file. The result is immutable and safe to share between
// threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/cache/read_context.h"
#include "core/encoding/dtype.h"
#include "core/encoding/safetensors.h"
#include "core/encoding/stored_range.h"
#include "core/encoding/weights_only.h"
#include "core/source/byte_source.h"
#include "core/source/remote_options.h"
#include "core/source/source_dir.h"
#include "core/status.h"

namespace ckptfs {

struct FormatReader;  // core/checkpoint/format_reader.h

// A stored file the mount shows (shards, the index, config.json...), decoded if stored
// compressed.
struct StoredFile {
  std::string name;         // as the checkpoint names it ("model-00001-of-00002.safetensors")
  std::string stored_name;  // the file in SOURCE (the same, or NAME.zst)
  std::unique_ptr<ByteSource> source;  // the decoded bytes
  uint32_t mode = 0444;        // permission bits to show: the stored file's ByteSource::Mode()
  struct timespec mtime = {};  // the stored file's ByteSource::MTime() ({0, 0}: unknown)
};

// The bytes of one storage: a safetensors tensor's data, a torch storage record, or a TF
// tensor (a partitioned variable is several stored ranges, possibly in several shards).
// Tensors view storages; tied weights are several tensors over one storage.
struct Storage {
  uint32_t shard = 0;   // index into Checkpoint::shards, or past them into Checkpoint::decoded
                        // (ShardFile; the first range's, if ranged)
  uint64_t offset = 0;  // absolute byte offset within the shard file (the first range's)
  uint64_t size = 0;    // bytes (all ranges together)
  Dtype dtype = Dtype::kU8;
  bool has_crc32 = false;  // torch records carry one; ComputeStorageCrcs fills the rest
  uint32_t crc32 = 0;
  // range_count > 0: the bytes are Checkpoint::ranges[first_range, first_range +
  // range_count) laid end to end, not [offset, offset + size). Use RangesOf.
  uint32_t first_range = 0;
  uint32_t range_count = 0;
};

struct Tensor {
  std::string name;
  Dtype dtype = Dtype::kU8;
  // In the model the merged views show (ModelView, core/checkpoint/model.h).
  bool in_model = true;
  bool top_is_dict = false;  // torch: the container of top_key_size is a dict
  std::vector<uint64_t> shape;
  uint32_t shard = 0;    // index into Checkpoint::shards or past them (ShardFile)
  uint64_t offset = 0;   // absolute byte offset within the shard file (contiguous tensors)
  uint64_t size = 0;     // bytes (contiguous tensors; 0 otherwise)
  uint32_t storage = 0;  // index into Checkpoint::storages
  // torch: when the tensor lies inside a container (dict, list) that is a value of the
  // pickled root dict, the length of that root key (the name's first `top_key_size`
  // bytes, then '.'); 0 for a tensor that is itself a root value, or another format's.
  // It and the two bools above fill padding: a Tensor stays 128 bytes.
  uint32_t top_key_size = 0;
  uint64_t storage_offset = 0;        // elements from the start of the storage
  std::vector<uint64_t> stride = {};  // empty: row-major, so [offset, offset + size) holds it

  // A tensor whose bytes are not one row-major range (a transposed view torch saved as
  // is) only appears in views that carry strides: the merged pytorch_model.bin.
  bool contiguous() const { return stride.empty(); }
};

// Which tensors the merged views (model.safetensors, pytorch_model.bin) hold, and under
// what names: chosen once at open by SelectModel (core/checkpoint/model.h), which marks
// each tensor's `in_model`. tensors/ and .ckptfs/ show everything whatever it says.
struct ModelView {
  std::string key;       // the top-level sub-tree that is the model ("" : no sub-tree)
  std::string rule;      // how it was chosen, for inspect ("first of model_state_dict, ...")
  uint32_t strip = 0;    // bytes cut from the front of each model tensor's name (key + '.')
  uint64_t tensors = 0;  // how many tensors are in_model
  bool whole = true;     // every tensor, names unchanged (weights-only, or --model-key '')
};

// What only one format knows of a checkpoint, beyond what every format fills (TF's raw
// keys, core/format/tf/tf_state.h): its reader keeps it in Checkpoint::format_state and
// its table entry's hooks read it (FormatReader, formats.h); no other code looks inside.
struct FormatState {
  virtual ~FormatState() = default;
};

// A packed checkpoint's zip CRC sidecar (see core/crc/zip_crc.h): read at open, never shown.
inline constexpr std::string_view kPackedCrcFile = ".ckptfs-zip-crc";

// Decoded data. Most tensor bytes lie verbatim in a stored file, but a numpy array that
// torch.save pickled at protocol 2 (its default) holds its data as latin-1 text inside
// data.pkl, which no range of the file is. Such bytes are decoded once at open
// (torch_file.h) and kept in memory as `decoded` StoredFiles: one per torch file that has
// any, a MemorySource named, moded and timed as that torch file. Shard numbers go on past
// `shards` into `decoded` (shard shards.size() + k is decoded[k]; ShardFile), so a Storage,
// Tensor or StoredRange names them as it names a shard and every view reads them through
// the same extents, read path and cache. Nothing lists them: they are not in `shards`, so
// shards/, pack's copies, verify's and the run tree's walks over stored files never see
// them (verify has nothing to check: the decoding was strict). The Layout numbers its
// sources shards, decoded, index, others. Their memory is at most each pickle's size.
// A DCP tensor split along an inner dimension is `decoded` too: a GatherSource
// (core/source/gather_source.h) over its chunks in the shards, holding no bytes, only the
// pattern that interleaves them (core/format/dcp/dcp_reader.cc).
struct Checkpoint {
  std::string source_path;
  std::vector<StoredFile> shards;   // weight files, in file name order
  std::vector<StoredFile> decoded;  // decoded data (above), after every shard is added
  std::vector<StoredFile> index;    // the index json, if any (shown under shards/)
  std::vector<StoredFile> others;   // non-weight files, shown at the mount root
  std::vector<Tensor> tensors;      // sorted by name
  std::vector<Storage> storages;    // in shard order, then offset
  std::vector<StoredRange> ranges;  // of storages made of several ranges (Storage::range_count)
  Metadata metadata;                // union of the shards' __metadata__, first shard wins
  // The format table's entry that read it (core/format/formats.h), its identity; null when
  // none did (a files_only checkpoint, one built in memory): FormatOf gives its hooks.
  const FormatReader* format = nullptr;
  std::string state_json;  // torch: the non-tensor values, as JSON; empty if none
  // Torch sources: whether torch.load(weights_only=True) would load every source pickle
  // (their refusals together; core/encoding/pickle_globals.h). Unset for other formats.
  std::optional<WeightsOnlyVerdict> weights_only;
  ModelView model;  // what the merged views hold (SelectModel)
  // The merged views' names at the mount root: a merged view is named for what it merges.
  // HF weights saved under a loader's own name keep it (HfViewNames, hf_layout.h:
  // adapter_model.*, diffusion_pytorch_model.*); any other checkpoint's model is what
  // transformers looks for.
  std::string safetensors_view = "model.safetensors";
  std::string torch_view = "pytorch_model.bin";
  // Folders shown at the root beside the views, even empty (sentence-transformers' module
  // folders, OpenHfModuleFolders); their files are in `others` as "FOLDER/NAME".
  std::vector<std::string> folders;
  bool remote = false;  // files come from a server (SourceDir::remote)
  // SOURCE's own files and folders only (ReadFilesOnly): the Layout adds no views, so
  // every stored file keeps its name (a run's top `model.safetensors`, a checkpoint
  // directory's shards) and nothing else is shown.
  bool files_only = false;
  // SOURCE's own modification time when it is a local directory; {0, 0} otherwise (a
  // file path, a URL), where the mount's directories show the newest stored file's.
  struct timespec dir_mtime = {};
  std::unique_ptr<ByteSource> packed_crcs;    // SOURCE's kPackedCrcFile, if it has one
  std::unique_ptr<FormatState> format_state;  // the format's own (above); null if none

  uint64_t TotalTensorBytes() const;
};

// The keys `ckpt`'s format stores its tensors under where they are not their names (TF's
// raw index keys, which name tensors/ paths, the xattr user.ckptfs.tf_key and inspect's
// tf_key), parallel to `tensors`; empty for a format whose keys are its names
// (FormatReader::keys).
std::span<const std::string> TensorKeys(const Checkpoint& ckpt);

// The file shard number `shard` names: ckpt.shards[shard], or past them ckpt.decoded (the
// decoded data of a torch file, named as that file).
const StoredFile& ShardFile(const Checkpoint& ckpt, uint32_t shard);

// The stored ranges holding `storage`'s bytes, in order: the storage itself (written to
// `one`) or its ranges.
std::span<const StoredRange> RangesOf(const Checkpoint& ckpt, const Storage& storage,
                                      StoredRange& one);
// The same for contiguous tensor `t`: its own (shard, offset, size), or, when its storage
// is made of ranges (which such a tensor always covers whole), the storage's.
std::span<const StoredRange> RangesOf(const Checkpoint& ckpt, const Tensor& t, StoredRange& one);

// What /.ckptfs/metadata.json shows: the non-tensor values of a torch checkpoint, or the
// safetensors __metadata__ as {"__metadata__": {...}}. Pretty-printed, newline-terminated.
std::string MetadataJson(const Checkpoint& ckpt);
// MetadataJson(ckpt).size(), counted without making it (for a metadata memory budget).
uint64_t MetadataJsonSize(const Checkpoint& ckpt);

// Computes the CRC-32 of every storage that lacks one by reading it through its shard,
// in parallel; zip testers check them in the merged pytorch_model.bin.
Status ComputeStorageCrcs(Checkpoint& ckpt);

// Reads `storage` through its shard and returns its CRC-32, reading into `scratch` (grown
// to at most 4 MiB and kept: pass the same one for many storages).
Result<uint32_t> ReadStorageCrc(const Checkpoint& ckpt, const Storage& storage,
                                std::vector<uint8_t>& scratch);

// The CRC-32 of `length` bytes at `offset` of a stored file, learned by a reader that had
// the bytes in hand anyway (ckptfs pack's frame workers).
struct RangeCrc {
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t crc32 = 0;
};
// Range CRCs by stored file name (StoredFile::name), each file's sorted by offset.
using RangeCrcs = std::map<std::string, std::vector<RangeCrc>>;

// Gives each storage without a CRC whose stored ranges are all in `known` (same file,
// offset and length) the CRC they combine to, reading nothing; the others keep none
// (ComputeStorageCrcs reads those). Returns how many storages it gave one.
size_t ApplyRangeCrcs(Checkpoint& ckpt, const RangeCrcs& known);

// Contiguous tensor indices ordered by element size (largest first), then name. With an 8-aligned
// data start, laying tensors end to end in this order keeps every tensor aligned to its
// element size with no padding: the order of every safetensors file ckptfs writes.
std::vector<uint32_t> AlignedOrder(const Checkpoint& ckpt);

// What discovery is told besides the ReadContext its sources share: how to reach a
// remote SOURCE, and which model the merged views show. A RemoteOptions alone converts to
// one (the format's model rule).
struct OpenOptions {
  // Overloads, not default arguments: GCC 12 under -fsanitize=thread warns that a
  // defaulted std::optional<std::string> argument "may be used uninitialized".
  OpenOptions() = default;
  OpenOptions(RemoteOptions remote_options)  // NOLINT(google-explicit-constructor)
      : remote(std::move(remote_options)) {}
  OpenOptions(RemoteOptions remote_options, std::optional<std::string> key)
      : remote(std::move(remote_options)), model_key(std::move(key)) {}

  RemoteOptions remote;
  // Which sub-tree the merged views show (SelectModel, core/checkpoint/model.h; the CLI's
  // --model-key): unset, the format's rule; "" every tensor as stored; a key, that
  // top-level sub-tree.
  std::optional<std::string> model_key;
};

}  // namespace ckptfs
