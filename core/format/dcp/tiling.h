// TileTensor: a whole tensor's row-major bytes as pieces of the chunks it was saved in
// (a DCP tensor's ChunkStorageMetadata boxes, an FSDP DTensor's local shards, the HF form's
// saved_offsets), described so that memory grows with the chunks, not with the rows.
//
// Each chunk is a box of the tensor (offsets, sizes per dimension) stored row-major and
// contiguous somewhere. Together the chunks must tile the tensor: every element in exactly
// one chunk. The result is a list of groups; group g is `count` repetitions, repetition r
// being the runs k = 0..K-1 in order, run k the bytes
//   [chunk_offset_k + r * stride_k, + length_k)   of chunk `chunk_k`'s bytes,
// and the tensor's bytes are the groups' repetitions end to end. So:
//   - one chunk, or chunks split along dimension 0 only (FSDP's Shard(0)): one group,
//     count 1, a run per chunk (each a whole chunk, stride unused);
//   - a 32000x8192 tensor split 8 ways along dimension 1 (tensor parallel Shard(1)): one
//     group, count 32000, 8 runs (each chunk's row, stride its row's bytes);
//   - a 2x2 mesh [Shard(0), Shard(1)]: two groups (one per row band), two runs each.
// In general: the grid of every chunk's boundaries (empty chunks, as torch.chunk gives on
// an uneven split, hold no element and add none); the innermost dimension d with more
// than one cell; the innermost dimension e before d with more than one cell, if any; a
// group per cell along e, runs the cells along d (adjacent runs of one chunk merged, and
// adjacent groups of count 1 joined). Memory grows with the chunks, except that each row
// of the dimensions before e (split or not) has its own groups: a [4, 8, 8] tensor split
// along dims 1 and 2 is 4 x 2 groups, one split along dims 0 and 2 is 2 groups.
//
// Untrusted input: chunks whose rank differs from the tensor's, a box past the tensor's
// size, chunks that overlap or leave holes, byte counts that overflow 64 bits, a zero
// element size, a grid of more than kMaxTileCells cells or a tiling needing more than
// kMaxTileCells runs (rows before e x cells along e and d) are InvalidArgument naming
// `what` (the file and tensor).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace ckptfs::dcp {

// Bounds the grid a hostile chunk list may ask for (a grid cell is a few words).
inline constexpr uint64_t kMaxTileCells = uint64_t{1} << 20;

struct ChunkBox {
  std::vector<uint64_t> offsets;
  std::vector<uint64_t> sizes;
};

struct TileRun {
  uint32_t chunk = 0;         // index into the chunks given
  uint64_t chunk_offset = 0;  // bytes from the start of that chunk's bytes
  uint64_t length = 0;        // bytes
  uint64_t stride = 0;        // bytes between repetitions
};

struct TileGroup {
  uint64_t count = 0;         // repetitions
  std::vector<TileRun> runs;  // one repetition, in order
};

struct Tiling {
  std::vector<TileGroup> groups;
  uint64_t bytes = 0;  // the tensor's: element_size x every dimension
  // True when every group has count 1: the runs, end to end, are plain byte ranges.
  bool plain() const;
};

// The tiling of a tensor of `shape` (elements of `element_size` bytes) by `chunks`.
Result<Tiling> TileTensor(std::span<const uint64_t> shape, uint64_t element_size,
                          std::span<const ChunkBox> chunks, const std::string& what);

}  // namespace ckptfs::dcp
