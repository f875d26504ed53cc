// slices: a partitioned variable's stored slices as the whole tensor's bytes.
//
// TF1 partitioners and MaxShardSizePolicy split a variable along any axis; each slice is
// stored row-major over its own shape. The whole tensor, row-major, is then a sequence of
// runs, each a contiguous piece of one slice: for a slice whose extents cover every axis
// after axis k in full, each run is its extent on axis k times the trailing dims, one run
// per index of the axes before k. TensorRuns lists those runs in the whole tensor's order,
// merging neighbours that are contiguous in one data file, so a reader serves the tensor
// as extents over the data files with nothing copied. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "core/format/tf/bundle.h"
#include "core/status.h"

namespace ckptfs::tf {

// A piece of tensor bytes: `length` bytes at `offset` in data shard `shard_id`.
struct TfRun {
  uint32_t shard_id = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  bool operator==(const TfRun&) const = default;
};

// Most runs one tensor may take (each is 24 bytes of memory for the mount's life).
inline constexpr uint64_t kMaxTfRuns = 1u << 20;

// The runs making up `tensor`'s bytes, whole tensor in row-major order; `element_size` is
// its dtype's size. An unpartitioned tensor is one run (none if empty). Refused, as a
// Corruption starting "`file_name`: "...key...: a slice outside the shape, a slice whose
// rank differs, slices that overlap or leave part of the tensor uncovered, or more than
// kMaxTfRuns runs.
Result<std::vector<TfRun>> TensorRuns(const TfTensor& tensor, uint64_t element_size,
                                      const std::string& file_name);

}  // namespace ckptfs::tf
