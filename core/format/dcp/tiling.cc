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

}  // namespace

Result<Tiling> TileTensor(std::span<const uint64_t> shape, uint64_t element_size,
                          std::span<const ChunkBox> chunks, const std::string& what) {
  const size_t rank = shape.size();
  if (element_size == 0) return Status::InvalidArgument(what + ": element size 0");
  if (chunks.size() >= kNoChunk) {
    return Status::InvalidArgument(what + ": " + std::to_string(chunks.size()) + " chunks");
  }
  const std::optional<uint64_t> total = CheckedProduct(shape, element_size);
  if (!total) return Status::InvalidArgument(what + ": tensor size overflows 64 bits");

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

  // The grid: every non-empty chunk's boundaries per dimension. Empty chunks (torch.chunk's
  // last shards on an uneven split) hold no element, so they neither bound nor own a cell.
  std::vector<std::vector<uint64_t>> bounds(rank);
  for (size_t j = 0; j < rank; ++j) {
    bounds[j] = {0, shape[j]};
    for (const ChunkBox& c : chunks) {
      if (Empty(c)) continue;
      bounds[j].push_back(c.offsets[j]);
      bounds[j].push_back(c.offsets[j] + c.sizes[j]);
    }
    std::sort(bounds[j].begin(), bounds[j].end());
    bounds[j].erase(std::unique(bounds[j].begin(), bounds[j].end()), bounds[j].end());
  }
  std::vector<uint64_t> cells(rank);  // cells per dimension
  uint64_t cell_count = 1;
  for (size_t j = 0; j < rank; ++j) {
    cells[j] = bounds[j].size() - 1;
    // Each factor is at most 2 x chunks + 1, so the running product is compared before
    // it could wrap.
    cell_count *= cells[j];
    if (cell_count > kMaxTileCells) {
      return Status::InvalidArgument(what + ": chunk grid has more than " +
                                     std::to_string(kMaxTileCells) + " cells");
    }
  }

  // Every cell's owner. A cell is set at most once before an overlap stops the walk, so
  // the work is bounded by the grid, however many chunks claim it.
  std::vector<uint32_t> owner(cell_count, kNoChunk);
  for (size_t k = 0; k < chunks.size(); ++k) {
    const ChunkBox& c = chunks[k];
    if (Empty(c) || cell_count == 0) continue;
    std::vector<size_t> lo(rank), hi(rank), at(rank);
    for (size_t j = 0; j < rank; ++j) {
      lo[j] = at[j] = CellOf(bounds[j], c.offsets[j]);
      hi[j] = CellOf(bounds[j], c.offsets[j] + c.sizes[j]);
    }
    while (true) {
      uint64_t index = 0;
      for (size_t j = 0; j < rank; ++j) index = index * cells[j] + at[j];
      if (owner[index] != kNoChunk) {
        return Status::InvalidArgument(what + ": chunks " + std::to_string(owner[index]) + " and " +
                                       std::to_string(k) + " overlap");
      }
      owner[index] = static_cast<uint32_t>(k);
      size_t j = rank;
      while (j > 0 && ++at[j - 1] == hi[j - 1]) {
        at[j - 1] = lo[j - 1];
        --j;
      }
      if (j == 0) break;
    }
  }
  for (uint64_t i = 0; i < cell_count; ++i) {
    if (owner[i] == kNoChunk) {
      return Status::InvalidArgument(what + ": chunks leave a hole (not every element is saved)");
    }
  }

  Tiling tiling;
  tiling.bytes = *total;
  if (*total == 0) return tiling;

  // d: the innermost split dimension; e: the innermost split dimension before it. Dims
  // after d and between e and d are whole in every chunk, so along a cell of e (and the
  // whole dims up to d) each chunk's rows follow at one stride: one group. Dims before e
  // are split or not: their rows each need their own groups.
  const auto innermost_split = [&](size_t below) -> std::optional<size_t> {
    for (size_t j = below; j > 0; --j) {
      if (cells[j - 1] > 1) return j - 1;
    }
    return std::nullopt;
  };
  const std::optional<size_t> d = innermost_split(rank);
  if (!d) {
    // One cell: one chunk holds the whole tensor, in order.
    tiling.groups.push_back({1, {{owner[0], 0, *total, 0}}});
    return tiling;
  }
  const std::optional<size_t> e = innermost_split(*d);
  const size_t first_whole = e ? *e + 1 : 0;  // dims [first_whole, d) are whole in chunks

  // Rows of the dims before e, each a set of groups; checked before anything is made.
  const std::optional<uint64_t> outer_rows = CheckedProduct(shape.subspan(0, e ? *e : 0));
  const uint64_t cells_e = e ? cells[*e] : 1;
  const std::optional<uint64_t> runs_made =
      outer_rows ? CheckedMul(*outer_rows, cells_e * cells[*d]) : std::nullopt;
  if (!runs_made || *runs_made > kMaxTileCells) {
    return Status::InvalidArgument(what + ": tiling needs more than " +
                                   std::to_string(kMaxTileCells) + " runs");
  }
  // Bounded by the tensor's elements, which fit 64 bits.
  uint64_t whole_rows = 1;
  for (size_t j = first_whole; j < *d; ++j) whole_rows *= shape[j];
  uint64_t inner = element_size;  // bytes of one index along d, the same in every chunk
  for (size_t j = *d + 1; j < rank; ++j) inner *= shape[j];

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
      for (size_t cd = 0; cd < cells[*d]; ++cd) {
        x[*d] = bounds[*d][cd];
        cell[*d] = cd;
        uint64_t index = 0;
        for (size_t j = 0; j < rank; ++j) index = index * cells[j] + cell[j];
        const uint32_t k = owner[index];
        const ChunkBox& c = chunks[k];
        // Byte offset of x in chunk k, row-major; every term is below the chunk's bytes.
        uint64_t offset = 0, step = element_size;
        for (size_t j = rank; j > 0; --j) {
          offset += (x[j - 1] - c.offsets[j - 1]) * step;
          step *= c.sizes[j - 1];
        }
        AppendMerged(group.runs, {k, offset, (bounds[*d][cd + 1] - bounds[*d][cd]) * inner,
                                  c.sizes[*d] * inner});
      }
      AppendGroup(tiling.groups, std::move(group));
    }
  }
  return tiling;
}

}  // namespace ckptfs::dcp
