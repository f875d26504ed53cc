// bundle_proto: a small strict decoder of the two protobuf messages a TensorBundle index
// holds (tensorflow/core/protobuf/tensor_bundle.proto), and TF's DataType enum.
//
//   BundleHeaderProto { int32 num_shards = 1; Endianness endianness = 2;
//                       VersionDef version = 3 { int32 producer = 1; int32 min_consumer = 2;
//                                                repeated int32 bad_consumers = 3; } }
//   BundleEntryProto  { DataType dtype = 1; TensorShapeProto shape = 2 { repeated Dim dim = 2
//                       { int64 size = 1; string name = 2; } bool unknown_rank = 3; }
//                       int32 shard_id = 3; int64 offset = 4; int64 size = 5;
//                       fixed32 crc32c = 6; repeated TensorSliceProto slices = 7 {
//                       repeated Extent extent = 1 { int64 start = 1; int64 length = 2; } } }
//
// Strict: a known field with the wrong wire type, a truncated field, a varint over 64 bits
// (or a 5+-byte int32 that is not a sign extension), a negative count, offset, size, dim
// or extent, a group, and an unknown-rank shape are refused. Unknown fields of the plain
// wire types are skipped, as protobuf does. Errors carry the problem only (no file or
// key): the caller adds them. Pure functions, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/encoding/dtype.h"
#include "core/status.h"

namespace ckptfs::tf {

struct BundleHeader {
  int64_t num_shards = 0;
  bool big_endian = false;
  int64_t producer = 0;
  int64_t min_consumer = 0;
};

// One axis of a TensorSliceProto: [start, start + length), or the whole axis.
struct SliceExtent {
  uint64_t start = 0;
  std::optional<uint64_t> length;  // nullopt: the whole axis (from `start`, which is 0)
};
using TensorSlice = std::vector<SliceExtent>;

struct BundleEntry {
  int64_t dtype = 0;  // TF DataType enum value
  std::vector<uint64_t> shape;
  int64_t shard_id = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  bool has_crc32c = false;
  uint32_t crc32c = 0;  // masked, as stored
  std::vector<TensorSlice> slices;
};

Result<BundleHeader> DecodeBundleHeader(std::string_view bytes);
// `max_slices`: more slices than this are refused as they are met ("more than N slices"),
// so a hostile entry cannot make a vector per empty slice field.
Result<BundleEntry> DecodeBundleEntry(std::string_view bytes, size_t max_slices = SIZE_MAX);

// What a TF DataType is to ckptfs.
enum class TfKind { kNumeric, kString, kVariant, kResource, kUnsupported };
struct TfDtype {
  TfKind kind = TfKind::kUnsupported;
  std::optional<Dtype> dtype;  // set for kNumeric
  std::string_view name;       // "DT_FLOAT", or "DT_<number>" style "unknown" for others
};
// DT_FLOAT..DT_UINT64, DT_HALF, DT_BFLOAT16, DT_BOOL, DT_FLOAT8_E5M2/E4M3FN map to a Dtype;
// DT_STRING, DT_VARIANT, DT_RESOURCE are recognized; complex, quantized, 4-bit, FNUZ
// float8 and reference types are kUnsupported with their name.
TfDtype DescribeTfDtype(int64_t code);

}  // namespace ckptfs::tf
