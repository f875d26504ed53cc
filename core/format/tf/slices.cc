#include "core/format/tf/slices.h"

#include <algorithm>

#include "core/checked.h"

namespace ckptfs::tf {
namespace {

struct PlacedRun {
  uint64_t whole_offset = 0;  // bytes into the whole tensor
  TfRun run;
};

Status Bad(const std::string& file_name, const TfTensor& t, const std::string& what) {
  return Status::Corruption(file_name + ": \"" + t.key + "\": " + what);
}

// Appends the runs of one slice; `budget` is how many runs may still be added.
Status PlaceSlice(const TfTensor& t, const TfSlicePiece& piece, uint64_t esize,
                  const std::string& file_name, uint64_t& budget, std::vector<PlacedRun>& out) {
  const size_t rank = t.shape.size();
  if (piece.slice.size() != rank) return Bad(file_name, t, "slice rank differs from the shape");
  std::vector<uint64_t> start(rank), len(rank), stride(rank, 1);
  for (size_t a = 0; a < rank; ++a) {
    start[a] = piece.slice[a].start;
    len[a] = piece.slice[a].length.value_or(t.shape[a] - std::min(start[a], t.shape[a]));
    if (!RangeWithin(start[a], len[a], t.shape[a])) {
      return Bad(file_name, t, "slice extent outside the shape on axis " + std::to_string(a));
    }
  }
  for (size_t a = rank; a-- > 1;) stride[a - 1] = stride[a] * t.shape[a];
  const auto slice_bytes = ShapeBytes(len, esize);
  if (!slice_bytes || *slice_bytes != piece.where.size) {
    return Bad(file_name, t, "slice size does not match its extents");
  }
  if (*slice_bytes == 0) return Status::Ok();
  // The last axis the slice does not cover in full; runs are contiguous from there on.
  size_t j = rank;
  for (size_t a = rank; a-- > 0;) {
    if (start[a] != 0 || len[a] != t.shape[a]) {
      j = a;
      break;
    }
  }
  if (j == rank) {
    if (budget == 0) return Bad(file_name, t, "more than kMaxTfRuns runs");
    --budget;
    out.push_back({0, {piece.where.shard_id, piece.where.offset, *slice_bytes}});
    return Status::Ok();
  }
  uint64_t count = 1;
  for (size_t a = 0; a < j; ++a) count *= len[a];  // <= slice elements, no overflow
  if (count > budget) {
    return Bad(file_name, t, "more than " + std::to_string(kMaxTfRuns) + " runs");
  }
  budget -= count;
  const uint64_t run_bytes = len[j] * stride[j] * esize;
  std::vector<uint64_t> index(j, 0);
  uint64_t local = piece.where.offset;
  for (uint64_t n = 0; n < count; ++n) {
    uint64_t whole = start[j] * stride[j];
    for (size_t a = 0; a < j; ++a) whole += (start[a] + index[a]) * stride[a];
    out.push_back({whole * esize, {piece.where.shard_id, local, run_bytes}});
    local += run_bytes;
    for (size_t a = j; a-- > 0;) {  // row-major increment of the leading index
      if (++index[a] < len[a]) break;
      index[a] = 0;
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<TfRun>> TensorRuns(const TfTensor& tensor, uint64_t element_size,
                                      const std::string& file_name) {
  const auto total = ShapeBytes(tensor.shape, element_size);
  if (!total) return Bad(file_name, tensor, "huge element count");
  if (!tensor.partitioned()) {
    if (tensor.where.size != *total) return Bad(file_name, tensor, "size does not match shape");
    if (*total == 0) return std::vector<TfRun>{};
    return std::vector<TfRun>{{tensor.where.shard_id, tensor.where.offset, *total}};
  }
  std::vector<PlacedRun> placed;
  uint64_t budget = kMaxTfRuns;
  for (const TfSlicePiece& piece : tensor.slices) {
    CKPTFS_RETURN_IF_ERROR(PlaceSlice(tensor, piece, element_size, file_name, budget, placed));
  }
  std::sort(placed.begin(), placed.end(),
            [](const PlacedRun& a, const PlacedRun& b) { return a.whole_offset < b.whole_offset; });
  std::vector<TfRun> runs;
  uint64_t end = 0;
  for (const PlacedRun& p : placed) {
    if (p.whole_offset < end) {
      return Bad(file_name, tensor, "slices overlap at byte " + std::to_string(p.whole_offset));
    }
    if (p.whole_offset > end) {
      return Bad(file_name, tensor,
                 "slices leave bytes " + std::to_string(end) + ".." +
                     std::to_string(p.whole_offset) + " uncovered");
    }
    end += p.run.length;
    TfRun* last = runs.empty() ? nullptr : &runs.back();
    if (last && last->shard_id == p.run.shard_id && last->offset + last->length == p.run.offset) {
      last->length += p.run.length;
    } else {
      runs.push_back(p.run);
    }
  }
  if (end != *total) {
    return Bad(
        file_name, tensor,
        "slices leave bytes " + std::to_string(end) + ".." + std::to_string(*total) + " uncovered");
  }
  return runs;
}

}  // namespace ckptfs::tf
