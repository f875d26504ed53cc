#include "core/format/dcp/tiling.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "core/checked.h"

namespace ckptfs::dcp {

bool Tiling::plain() const {
  return std::all_of(groups.begin(), groups.end(), [](const TileGroup& g) { return g.count == 1; });
}

namespace {

constexpr uint32_t kNoChunk = std::numeric_limits<uint32_t>::max();

bool Empty(const ChunkBox& c) {
  return std::any_of(c.sizes.begin(), c.sizes.end(), [](uint64_t s) { return s == 0; });
}

// Index of the cell along a dimension starting at boundary `x` (a boundary of that dim).
size_t CellOf(const std::vector<uint64_t>& bounds, uint64_t x) {
  return static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), x) - bounds.begin());
}

// Run `b` continues run `a` in every repetition: same chunk and stride, starting where
// `a` ends.
bool Continues(const TileRun& a, const TileRun& b) {
  return a.chunk == b.chunk && a.stride == b.stride && a.chunk_offset + a.length == b.chunk_offset;
}

void AppendMerged(std::vector<TileRun>& runs, const TileRun& run) {
  if (!runs.empty() && Continues(runs.back(), run)) {
    runs.back().length += run.length;
  } else {
    runs.push_back(run);
  }
}

// Appends `group` to `out`, merged: a lone run whose rows follow each other is one plain
// run, and a group of count 1 joins a count-1 group before it. So a single chunk is one
// run and a Shard(0) split K plain runs, whatever the grid looked like.
void AppendGroup(std::vector<TileGroup>& out, TileGroup group) {
  if (group.runs.size() == 1 && group.count > 1 && group.runs[0].length == group.runs[0].stride) {
    // length x count <= the chunk's bytes, which fit 64 bits.
    group.runs[0].length *= group.count;
    group.count = 1;
  }
  if (group.count == 1) {
    for (TileRun& r : group.runs) r.stride = 0;
    if (!out.empty() && out.back().count == 1) {
      for (const TileRun& r : group.runs) AppendMerged(out.back().runs, r);
      return;
    }
  }
  out.push_back(std::move(group));
}

// Each chunk has the tensor's rank and lies inside it; whether they tile it is the grid's
// to say (FindOwners), once the boxes are known to be boxes of this tensor.
Status CheckChunks(std::span<const uint64_t> shape, std::span<const ChunkBox> chunks,
                   const std::string& what) {
  const size_t rank = shape.size();
  for (size_t k = 0; k < chunks.size(); ++k) {
    const ChunkBox& c = chunks[k];
    const std::string which = what + ": chunk " + std::to_string(k);
    if (c.offsets.size() != rank || c.sizes.size() != rank) {
      return Status::InvalidArgument(which + " has rank " + std::to_string(c.offsets.size()) + "/" +
                                     std::to_string(c.sizes.size()) + ", tensor " +
                                     std::to_string(rank));
    }
    for (size_t j = 0; j < rank; ++j) {
      const std::optional<uint64_t> end = CheckedAdd(c.offsets[j], c.sizes[j]);
      if (!end || *end > shape[j]) {
        return Status::InvalidArgument(which + " lies past the tensor's size in dimension " +
                                       std::to_string(j));
      }
    }
  }
  return Status::Ok();
}

// The cells every chunk's boundaries cut the tensor into, and which chunk holds each: the
// tiling is read off this grid, so its size (not the tensor's) is what the work grows with.
struct Grid {
  std::vector<std::vector<uint64_t>> bounds;  // per dimension: 0, every boundary, its size
  std::vector<uint64_t> cells;                // cells per dimension
  uint64_t cell_count = 1;
  std::vector<uint32_t> owner;  // per cell, row-major: the chunk holding it
};

// The grid's boundaries and cells, at most kMaxTileCells of them. Empty chunks (torch.chunk's
// last shards on an uneven split) hold no element, so they neither bound nor own a cell.
Result<Grid> MakeGrid(std::span<const uint64_t> shape, std::span<const ChunkBox> chunks,
                      const std::string& what) {
  const size_t rank = shape.size();
  Grid grid;
  grid.bounds.resize(rank);
  for (size_t j = 0; j < rank; ++j) {
    std::vector<uint64_t>& bounds = grid.bounds[j];
    bounds = {0, shape[j]};
    for (const ChunkBox& c : chunks) {
      if (Empty(c)) continue;
      bounds.push_back(c.offsets[j]);
      bounds.push_back(c.offsets[j] + c.sizes[j]);
    }
    std::sort(bounds.begin(), bounds.end());
    bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  }
  grid.cells.resize(rank);
  for (size_t j = 0; j < rank; ++j) {
    grid.cells[j] = grid.bounds[j].size() - 1;
    // Each factor is at most 2 x chunks + 1, so the running product is compared before
    // it could wrap.
    grid.cell_count *= grid.cells[j];
    if (grid.cell_count > kMaxTileCells) {
      return Status::InvalidArgument(what + ": chunk grid has more than " +
                                     std::to_string(kMaxTileCells) + " cells");
    }
  }
  return grid;
}

// Every cell's owner, refusing chunks that overlap or leave a hole. A cell is set at most
// once before an overlap stops the walk, so the work is bounded by the grid, however many
// chunks claim it.
Status FindOwners(Grid& grid, std::span<const ChunkBox> chunks, const std::string& what) {
  const size_t rank = grid.cells.size();
  grid.owner.assign(grid.cell_count, kNoChunk);
  for (size_t k = 0; k < chunks.size(); ++k) {
    const ChunkBox& c = chunks[k];
    if (Empty(c) || grid.cell_count == 0) continue;
    std::vector<size_t> lo(rank), hi(rank), at(rank);
    for (size_t j = 0; j < rank; ++j) {
      lo[j] = at[j] = CellOf(grid.bounds[j], c.offsets[j]);
      hi[j] = CellOf(grid.bounds[j], c.offsets[j] + c.sizes[j]);
    }
    while (true) {
      uint64_t index = 0;
      for (size_t j = 0; j < rank; ++j) index = index * grid.cells[j] + at[j];
      if (grid.owner[index] != kNoChunk) {
        return Status::InvalidArgument(what + ": chunks " + std::to_string(grid.owner[index]) +
                                       " and " + std::to_string(k) + " overlap");
      }
      grid.owner[index] = static_cast<uint32_t>(k);
      size_t j = rank;
      while (j > 0 && ++at[j - 1] == hi[j - 1]) {
        at[j - 1] = lo[j - 1];
        --j;
      }
      if (j == 0) break;
    }
  }
  for (uint64_t i = 0; i < grid.cell_count; ++i) {
    if (grid.owner[i] == kNoChunk) {
      return Status::InvalidArgument(what + ": chunks leave a hole (not every element is saved)");
    }
  }
  return Status::Ok();
}

// The innermost dimension before `below` that the grid splits (more than one cell).
std::optional<size_t> InnermostSplit(const std::vector<uint64_t>& cells, size_t below) {
  for (size_t j = below; j > 0; --j) {
    if (cells[j - 1] > 1) return j - 1;
  }
  return std::nullopt;
}

// Byte offset of element `x` in chunk `c`, row-major; every term is below the chunk's
// bytes, so nothing wraps.
uint64_t OffsetIn(const ChunkBox& c, const std::vector<uint64_t>& x, uint64_t element_size) {
  uint64_t offset = 0, step = element_size;
  for (size_t j = x.size(); j > 0; --j) {
    offset += (x[j - 1] - c.offsets[j - 1]) * step;
    step *= c.sizes[j - 1];
  }
  return offset;
}

// Appends the groups of a tensor the grid splits, `d` and `e` as TileTensor finds them: a
// group per cell along e for every row of the dims before e, a run per cell along d. A
// tiling of more than kMaxTileCells runs is refused before anything is made.
Status AppendTiles(std::span<const uint64_t> shape, uint64_t element_size,
                   std::span<const ChunkBox> chunks, const Grid& grid, size_t d,
                   std::optional<size_t> e, const std::string& what, Tiling& tiling) {
  const size_t rank = shape.size();
  const std::vector<std::vector<uint64_t>>& bounds = grid.bounds;
  const std::vector<uint64_t>& cells = grid.cells;
  const size_t first_whole = e ? *e + 1 : 0;  // dims [first_whole, d) are whole in chunks

  // Rows of the dims before e, each a set of groups; checked before anything is made.
  const std::optional<uint64_t> outer_rows = CheckedProduct(shape.subspan(0, e ? *e : 0));
  const uint64_t cells_e = e ? cells[*e] : 1;
  const std::optional<uint64_t> runs_made =
      outer_rows ? CheckedMul(*outer_rows, cells_e * cells[d]) : std::nullopt;
  if (!runs_made || *runs_made > kMaxTileCells) {
    return Status::InvalidArgument(what + ": tiling needs more than " +
                                   std::to_string(kMaxTileCells) + " runs");
  }
  // Bounded by the tensor's elements, which fit 64 bits.
  uint64_t whole_rows = 1;
  for (size_t j = first_whole; j < d; ++j) whole_rows *= shape[j];
  uint64_t inner = element_size;  // bytes of one index along d, the same in every chunk
  for (size_t j = d + 1; j < rank; ++j) inner *= shape[j];

  std::vector<uint64_t> x(rank, 0);   // the group's first element
  std::vector<size_t> cell(rank, 0);  // the cell holding it
  for (uint64_t row = 0; row < *outer_rows; ++row) {
    for (size_t j = e ? *e : 0, rest = row; e && j > 0; --j) {
      x[j - 1] = rest % shape[j - 1];
      rest /= shape[j - 1];
      cell[j - 1] = static_cast<size_t>(
          std::upper_bound(bounds[j - 1].begin(), bounds[j - 1].end(), x[j - 1]) -
          bounds[j - 1].begin() - 1);
    }
    for (uint64_t ce = 0; ce < cells_e; ++ce) {
      TileGroup group;
      group.count = whole_rows;
      if (e) {
        x[*e] = bounds[*e][ce];
        cell[*e] = ce;
        group.count *= bounds[*e][ce + 1] - bounds[*e][ce];
      }
      for (size_t cd = 0; cd < cells[d]; ++cd) {
        x[d] = bounds[d][cd];
        cell[d] = cd;
        uint64_t index = 0;
        for (size_t j = 0; j < rank; ++j) index = index * cells[j] + cell[j];
        const uint32_t k = grid.owner[index];
        const ChunkBox& c = chunks[k];
        AppendMerged(group.runs, {k, OffsetIn(c, x, element_size),
                                  (bounds[d][cd + 1] - bounds[d][cd]) * inner, c.sizes[d] * inner});
      }
      AppendGroup(tiling.groups, std::move(group));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<Tiling> TileTensor(std::span<const uint64_t> shape, uint64_t element_size,
                          std::span<const ChunkBox> chunks, const std::string& what) {
  if (element_size == 0) return Status::InvalidArgument(what + ": element size 0");
  if (chunks.size() >= kNoChunk) {
    return Status::InvalidArgument(what + ": " + std::to_string(chunks.size()) + " chunks");
  }
  const std::optional<uint64_t> total = CheckedProduct(shape, element_size);
  if (!total) return Status::InvalidArgument(what + ": tensor size overflows 64 bits");
  CKPTFS_RETURN_IF_ERROR(CheckChunks(shape, chunks, what));
  CKPTFS_ASSIGN_OR_RETURN(Grid grid, MakeGrid(shape, chunks, what));
  CKPTFS_RETURN_IF_ERROR(FindOwners(grid, chunks, what));

  Tiling tiling;
  tiling.bytes = *total;
  if (*total == 0) return tiling;

  // d: the innermost split dimension; e: the innermost split dimension before it. Dims
  // after d and between e and d are whole in every chunk, so along a cell of e (and the
  // whole dims up to d) each chunk's rows follow at one stride: one group. Dims before e
  // are split or not: their rows each need their own groups.
  const std::optional<size_t> d = InnermostSplit(grid.cells, shape.size());
  if (!d) {
    // One cell: one chunk holds the whole tensor, in order.
    tiling.groups.push_back({1, {{grid.owner[0], 0, *total, 0}}});
    return tiling;
  }
  const std::optional<size_t> e = InnermostSplit(grid.cells, *d);
  CKPTFS_RETURN_IF_ERROR(AppendTiles(shape, element_size, chunks, grid, *d, e, what, tiling));
  return tiling;
}

}  // namespace ckptfs::dcp
