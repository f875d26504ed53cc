// bundle: a TensorBundle's index (PREFIX.index) parsed and checked, as pure data.
//
// The index is a LevelDB table (sstable.h). Key "" holds the BundleHeaderProto; every
// other key a BundleEntryProto (bundle_proto.h). A tensor's bytes are raw, row-major,
// little-endian, at (shard_id, offset, size) in PREFIX.data-0000K-of-0000N. A partitioned
// variable's entry lists its slices and holds no bytes; each slice is its own entry under
// the key EncodeSliceKey(key, slice) (a "\x00"-prefixed OrderedCode key).
//
// ParseTensorBundle refuses, one line naming the file (and the key where there is one):
// anything sstable.h refuses (bad magic, truncated footer or block, block CRC mismatch,
// unsorted or duplicate keys, bad snappy block, varint overflow), a missing or malformed
// header, a big-endian bundle ("big-endian bundle"), a version it cannot read, more than
// kMaxTfShards shards, a malformed entry proto, shard_id >= num_shards, a shape whose
// element count times element size does not fit 64 bits ("huge element count"), a numeric
// tensor whose size is not elements x element size, a string tensor too small for its
// lengths, a partitioned variable with a missing slice entry, a slice outside the shape,
// or slices that overlap or leave a gap (slices.h). Entries of dtypes ckptfs does not
// serve (string, variant, resource, complex, quantized, 4-bit) are kept with their kind,
// for the reader to list in metadata and skip. Offsets against the data files' sizes are checked
// by CheckDataFileExtents, once the caller knows the sizes. Pure functions; thread-safe.
//
// Memory: the index is walked once (sstable.h), never held as a table. What the parse
// keeps (each tensor with its key, shape and slices; the slice entries, until the walk
// ends) and the decoded block being walked are charged to a MetadataBudget
// (core/encoding/metadata_budget.h): 32 x the index's bytes + 64 MiB unless the caller's
// budget says otherwise. Past it the index is refused, one line naming it ("metadata
// would take more than N bytes of memory"); an entry listing more slices than the table has slice
// entries is refused before its slices are decoded.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/encoding/metadata_budget.h"
#include "core/format/tf/bundle_proto.h"
#include "core/status.h"

namespace ckptfs::tf {

inline constexpr int64_t kMaxTfShards = 99999;  // TF names shards with %05d
inline constexpr int64_t kTensorBundleVersion = 1;

// Where some tensor bytes are, and their masked CRC32C as the index stores it.
struct TfLocation {
  uint32_t shard_id = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  bool has_crc32c = false;
  uint32_t masked_crc32c = 0;
};

// One stored slice of a partitioned variable.
struct TfSlicePiece {
  TensorSlice slice;  // one extent per axis of the whole tensor (length set)
  TfLocation where;   // the slice's bytes: row-major over the slice's own shape
};

struct TfTensor {
  std::string key;  // raw index key
  int64_t dtype_code = 0;
  TfDtype type;
  std::vector<uint64_t> shape;       // the whole tensor's shape
  TfLocation where;                  // unpartitioned tensors
  std::vector<TfSlicePiece> slices;  // partitioned variables: non-empty, `where` unused
  bool partitioned() const { return !slices.empty(); }
};

struct TensorBundle {
  BundleHeader header;
  std::vector<TfTensor> tensors;  // every non-slice entry, in key order
  uint64_t index_blocks = 0;      // data blocks of the index table
  uint64_t snappy_blocks = 0;
};

// Parses and checks the index `bytes`; `file_name` (PREFIX.index) starts every error. The
// first form charges a budget of its own (the index's bytes stored); the second charges
// the caller's, which must already count the index's bytes as stored, and leaves the
// tensors charged to it (TfTensorBytes each).
Result<TensorBundle> ParseTensorBundle(std::string_view bytes, const std::string& file_name);
Result<TensorBundle> ParseTensorBundle(std::string_view bytes, const std::string& file_name,
                                       MetadataBudget& budget);

// What one parsed tensor holds in memory, as ParseTensorBundle charges it: the object
// (twice: a growing vector holds up to double), its key, shape and slices.
uint64_t TfTensorBytes(const TfTensor& t);

// "PREFIX.data-00001-of-00004" for shard 1 of 4.
std::string DataFileName(std::string_view prefix, uint32_t shard_id, int64_t num_shards);

// The sizes of the bundle's data files, asking `size_of(name)` for each
// DataFileName(prefix, k, num_shards) (nullopt: no such file). A missing one is refused:
// "PREFIX.data-00001-of-00002: missing data file (the index names 2 shards)".
Result<std::vector<uint64_t>> DataFileSizes(
    const TensorBundle& bundle, std::string_view prefix,
    const std::function<std::optional<uint64_t>(const std::string& name)>& size_of);

// Checks every tensor and slice lies inside its data file; `data_sizes[k]` is the size of
// shard k (the span must hold num_shards sizes). Errors name the data file and key.
Status CheckDataFileExtents(const TensorBundle& bundle, std::span<const uint64_t> data_sizes,
                            std::string_view prefix);

// True if `bytes` (read from `where`) match its stored CRC (always true with no CRC). Not
// for DT_STRING, whose CRC covers decoded lengths (see strings.h).
bool TensorCrcMatches(const TfLocation& where, std::string_view bytes);

// The index key TF stores slice `slice` of tensor `key` under (checkpoint's
// EncodeTensorNameSlice: OrderedCode of 0, the name, the rank, then each extent's start
// and length, -1 for a whole axis).
std::string EncodeSliceKey(std::string_view key, const TensorSlice& slice);

// Elements of `shape` times `element_size`, or nullopt if it does not fit 63 bits.
std::optional<uint64_t> ShapeBytes(std::span<const uint64_t> shape, uint64_t element_size);

}  // namespace ckptfs::tf
