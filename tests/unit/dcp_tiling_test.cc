// dcp::TileTensor (core/format/dcp/tiling.h) and GatherSource (core/source/gather_source.h):
// a tensor saved as chunks, read whole. Every tiling is checked by assembling the tensor's
// bytes from it over random chunk contents and comparing with the tensor put together
// element by element.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "core/format/dcp/tiling.h"
#include "core/source/gather_source.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

using dcp::ChunkBox;
using dcp::TileTensor;
using dcp::Tiling;

// torch.chunk's split of `n` into `parts` (DTensor Shard): ceil-sized pieces, the last
// smaller, and empty pieces (offset n) where the ceil size runs out.
std::vector<std::pair<uint64_t, uint64_t>> TorchChunks(uint64_t n, uint64_t parts) {
  const uint64_t each = (n + parts - 1) / parts;
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (uint64_t i = 0; i < parts; ++i) {
    const uint64_t from = std::min(n, i * each);
    out.push_back({from, std::min(n, from + each) - from});
  }
  return out;
}

// Every box of the cartesian product of per-dimension pieces (offset, size).
std::vector<ChunkBox> Grid(const std::vector<std::vector<std::pair<uint64_t, uint64_t>>>& dims) {
  std::vector<ChunkBox> out(1);
  for (const auto& pieces : dims) {
    std::vector<ChunkBox> next;
    for (const ChunkBox& c : out) {
      for (const auto& [offset, size] : pieces) {
        ChunkBox b = c;
        b.offsets.push_back(offset);
        b.sizes.push_back(size);
        next.push_back(b);
      }
    }
    out = std::move(next);
  }
  return out;
}

// Pieces of a dimension split by the given placements (1: not split).
std::vector<std::pair<uint64_t, uint64_t>> Split(uint64_t n, uint64_t parts) {
  return TorchChunks(n, parts);
}

uint64_t Elements(const std::vector<uint64_t>& sizes) {
  uint64_t n = 1;
  for (uint64_t s : sizes) n *= s;
  return n;
}

std::vector<std::string> RandomContents(const std::vector<ChunkBox>& chunks, uint64_t es,
                                        std::mt19937_64& rng) {
  std::vector<std::string> out;
  for (const ChunkBox& c : chunks) {
    std::string bytes(Elements(c.sizes) * es, '\0');
    for (char& b : bytes) b = static_cast<char>(rng());
    out.push_back(std::move(bytes));
  }
  return out;
}

// The reference: every element of every chunk put at its place in the whole tensor.
std::string Direct(const std::vector<uint64_t>& shape, uint64_t es,
                   const std::vector<ChunkBox>& chunks, const std::vector<std::string>& bytes) {
  std::string out(Elements(shape) * es, '\0');
  for (size_t k = 0; k < chunks.size(); ++k) {
    const ChunkBox& c = chunks[k];
    const uint64_t n = Elements(c.sizes);
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t rest = i, global = 0, scale = 1;
      for (size_t j = shape.size(); j > 0; --j) {
        const uint64_t local = rest % c.sizes[j - 1];
        rest /= c.sizes[j - 1];
        global += (c.offsets[j - 1] + local) * scale;
        scale *= shape[j - 1];
      }
      std::memcpy(out.data() + global * es, bytes[k].data() + i * es, es);
    }
  }
  return out;
}

// The tensor as the tiling describes it.
std::string Assemble(const Tiling& t, const std::vector<std::string>& bytes) {
  std::string out;
  for (const dcp::TileGroup& g : t.groups) {
    for (uint64_t r = 0; r < g.count; ++r) {
      for (const dcp::TileRun& run : g.runs) {
        out += bytes.at(run.chunk).substr(run.chunk_offset + r * run.stride, run.length);
      }
    }
  }
  return out;
}

// Tiles, then checks the assembled bytes against the reference; returns the tiling.
Tiling TileAndCompare(const std::vector<uint64_t>& shape, uint64_t es,
                      const std::vector<ChunkBox>& chunks, uint64_t seed = 1) {
  Result<Tiling> t = TileTensor(shape, es, chunks, "t.distcp: w");
  EXPECT_TRUE(t.ok()) << t.status().message();
  if (!t.ok()) return {};
  std::mt19937_64 rng(seed);
  const std::vector<std::string> bytes = RandomContents(chunks, es, rng);
  EXPECT_EQ(t->bytes, Elements(shape) * es);
  EXPECT_EQ(Assemble(*t, bytes), Direct(shape, es, chunks, bytes));
  return *t;
}

std::string Refusal(const std::vector<uint64_t>& shape, uint64_t es,
                    const std::vector<ChunkBox>& chunks) {
  Result<Tiling> t = TileTensor(shape, es, chunks, "t.distcp: w");
  EXPECT_FALSE(t.ok());
  if (t.ok()) return {};
  EXPECT_EQ(t.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(t.status().message().find("t.distcp: w"), std::string::npos);
  return t.status().message();
}

size_t RunCount(const Tiling& t) {
  size_t n = 0;
  for (const auto& g : t.groups) n += g.runs.size();
  return n;
}

TEST(DcpTilingTest, Shard0EvenIsPlainRunsOfWholeChunks) {
  const Tiling t = TileAndCompare({8, 4}, 2, Grid({Split(8, 4), Split(4, 1)}));
  ASSERT_EQ(t.groups.size(), 1u);
  EXPECT_TRUE(t.plain());
  ASSERT_EQ(t.groups[0].runs.size(), 4u);
  for (uint32_t k = 0; k < 4; ++k) {
    EXPECT_EQ(t.groups[0].runs[k].chunk, k);
    EXPECT_EQ(t.groups[0].runs[k].chunk_offset, 0u);
    EXPECT_EQ(t.groups[0].runs[k].length, 2u * 4 * 2);
  }
}

TEST(DcpTilingTest, Shard0UnevenWithEmptyLastChunk) {
  const std::vector<ChunkBox> chunks = Grid({Split(5, 4), Split(3, 1)});
  ASSERT_EQ(chunks[3].sizes[0], 0u);  // 2, 2, 1, 0
  ASSERT_EQ(chunks[3].offsets[0], 5u);
  const Tiling t = TileAndCompare({5, 3}, 4, chunks);
  ASSERT_EQ(t.groups.size(), 1u);
  EXPECT_TRUE(t.plain());
  EXPECT_EQ(t.groups[0].runs.size(), 3u);
}

TEST(DcpTilingTest, Shard1On2DIsOneStridedGroup) {
  const Tiling t = TileAndCompare({6, 8}, 2, Grid({Split(6, 1), Split(8, 4)}));
  ASSERT_EQ(t.groups.size(), 1u);
  EXPECT_FALSE(t.plain());
  EXPECT_EQ(t.groups[0].count, 6u);
  ASSERT_EQ(t.groups[0].runs.size(), 4u);
  for (const auto& r : t.groups[0].runs) {
    EXPECT_EQ(r.length, 4u);
    EXPECT_EQ(r.stride, 4u);
  }
}

TEST(DcpTilingTest, Shard1UnevenOn2D) {
  // 7 columns over 3: 3, 3, 1.
  const Tiling t = TileAndCompare({5, 7}, 2, Grid({Split(5, 1), Split(7, 3)}));
  ASSERT_EQ(t.groups.size(), 1u);
  EXPECT_EQ(t.groups[0].count, 5u);
  EXPECT_EQ(t.groups[0].runs.size(), 3u);
}

TEST(DcpTilingTest, Shard2On3D) {
  const Tiling t = TileAndCompare({3, 4, 6}, 4, Grid({Split(3, 1), Split(4, 1), Split(6, 3)}));
  ASSERT_EQ(t.groups.size(), 1u);
  EXPECT_EQ(t.groups[0].count, 12u);
  EXPECT_EQ(t.groups[0].runs.size(), 3u);
}

TEST(DcpTilingTest, MeshShard0Shard1IsAGroupPerRowBand) {
  const Tiling t = TileAndCompare({4, 6}, 2, Grid({Split(4, 2), Split(6, 2)}));
  ASSERT_EQ(t.groups.size(), 2u);
  for (const auto& g : t.groups) {
    EXPECT_EQ(g.count, 2u);
    EXPECT_EQ(g.runs.size(), 2u);
  }
}

TEST(DcpTilingTest, ReplicateIsOneRun) {
  const Tiling t = TileAndCompare({3, 5}, 2, {ChunkBox{{0, 0}, {3, 5}}});
  ASSERT_EQ(t.groups.size(), 1u);
  ASSERT_EQ(t.groups[0].runs.size(), 1u);
  EXPECT_EQ(t.groups[0].runs[0].length, 30u);
  EXPECT_TRUE(t.plain());
}

TEST(DcpTilingTest, Scalar) {
  const Tiling t = TileAndCompare({}, 8, {ChunkBox{}});
  ASSERT_EQ(t.groups.size(), 1u);
  ASSERT_EQ(t.groups[0].runs.size(), 1u);
  EXPECT_EQ(t.groups[0].runs[0].length, 8u);
  EXPECT_NE(Refusal({}, 8, {ChunkBox{}, ChunkBox{}}).find("overlap"), std::string::npos);
  EXPECT_NE(Refusal({}, 8, {}).find("hole"), std::string::npos);
}

TEST(DcpTilingTest, ZeroSizeTensor) {
  const Tiling t = TileAndCompare({0, 4}, 2, Grid({Split(0, 1), Split(4, 2)}));
  EXPECT_EQ(t.bytes, 0u);
  EXPECT_TRUE(t.groups.empty());
  EXPECT_TRUE(t.plain());
  // Empty chunks still have to lie inside the tensor.
  Refusal({0, 4}, 2, {ChunkBox{{0, 0}, {0, 5}}});
}

TEST(DcpTilingTest, NonGridTiling) {
  // Rows 0-1 one chunk; rows 2-3 split in two columns: chunk 0 spans two cells of the
  // column split. Rows 0-1 are one plain run, rows 2-3 a strided group.
  const std::vector<ChunkBox> chunks = {{{0, 0}, {2, 4}}, {{2, 0}, {2, 2}}, {{2, 2}, {2, 2}}};
  const Tiling t = TileAndCompare({4, 4}, 2, chunks);
  ASSERT_EQ(t.groups.size(), 2u);
  EXPECT_EQ(t.groups[0].count, 1u);
  ASSERT_EQ(t.groups[0].runs.size(), 1u);
  EXPECT_EQ(t.groups[0].runs[0].length, 16u);
  EXPECT_EQ(t.groups[1].count, 2u);
  EXPECT_EQ(t.groups[1].runs.size(), 2u);
  // And the transpose: a chunk spanning two cells of the row split.
  TileAndCompare({4, 4}, 2, {{{0, 0}, {4, 2}}, {{0, 2}, {1, 2}}, {{1, 2}, {3, 2}}});
}

TEST(DcpTilingTest, ChunksOutOfOrder) {
  std::vector<ChunkBox> chunks = Grid({Split(6, 2), Split(6, 3)});
  std::mt19937_64 rng(7);
  for (int i = 0; i < 5; ++i) {
    std::shuffle(chunks.begin(), chunks.end(), rng);
    const Tiling t = TileAndCompare({6, 6}, 2, chunks, i);
    EXPECT_EQ(t.groups.size(), 2u);
  }
}

TEST(DcpTilingTest, OuterRowsBeforeTheSplitCostGroups) {
  // As the header says: rows of dims before e each have their groups; dims between e and
  // d, and after d, cost nothing.
  Tiling t = TileAndCompare({4, 8, 8}, 2, Grid({Split(4, 1), Split(8, 2), Split(8, 2)}));
  EXPECT_EQ(t.groups.size(), 4u * 2);
  t = TileAndCompare({4, 8, 8}, 2, Grid({Split(4, 2), Split(8, 1), Split(8, 2)}));
  EXPECT_EQ(t.groups.size(), 2u);
  EXPECT_EQ(t.groups[0].count, 2u * 8);
  t = TileAndCompare({4, 8, 8, 3}, 2, Grid({Split(4, 2), Split(8, 1), Split(8, 2), Split(3, 1)}));
  EXPECT_EQ(t.groups.size(), 2u);
}

TEST(DcpTilingTest, Refusals) {
  EXPECT_NE(Refusal({4, 4}, 2, {{{0, 0}, {4, 4}}, {{2, 2}, {2, 2}}}).find("overlap"),
            std::string::npos);
  EXPECT_NE(Refusal({4, 4}, 2, {{{0, 0}, {2, 4}}}).find("hole"), std::string::npos);
  EXPECT_NE(Refusal({4, 4}, 2, {{{0}, {4}}}).find("rank"), std::string::npos);
  EXPECT_NE(Refusal({4, 4}, 2, {{{0, 0}, {4, 4}}, {{4, 0}, {1, 4}}}).find("past"),
            std::string::npos);
  // A box whose end wraps 64 bits.
  EXPECT_NE(Refusal({4, 4}, 2, {{{0, UINT64_MAX}, {4, 2}}}).find("past"), std::string::npos);
  // A tensor whose bytes overflow.
  EXPECT_NE(Refusal({uint64_t{1} << 40, uint64_t{1} << 40}, 2,
                    {{{0, 0}, {uint64_t{1} << 40, uint64_t{1} << 40}}})
                .find("overflow"),
            std::string::npos);
  EXPECT_NE(Refusal({4}, 0, {{{0}, {4}}}).find("element size"), std::string::npos);
}

TEST(DcpTilingTest, RefusesTooManyCells) {
  // 1025 unit boxes on the diagonal make a 1026 x 1026 grid (> 2^20 cells), refused before
  // a cell is made.
  std::vector<ChunkBox> chunks;
  for (uint64_t k = 0; k < 1025; ++k) chunks.push_back({{k, k}, {1, 1}});
  EXPECT_NE(Refusal({2048, 2048}, 2, chunks).find("cells"), std::string::npos);
}

TEST(DcpTilingTest, RefusesTooManyRuns) {
  // Few chunks, but 2^21 outer rows each needing its own groups.
  const uint64_t rows = uint64_t{1} << 21;
  EXPECT_NE(Refusal({rows, 2, 2}, 2, Grid({Split(rows, 1), Split(2, 2), Split(2, 2)})).find("runs"),
            std::string::npos);
}

TEST(DcpTilingTest, RandomGrids) {
  std::mt19937_64 rng(2024);
  for (int iter = 0; iter < 400; ++iter) {
    const size_t rank = 1 + rng() % 4;
    std::vector<uint64_t> shape;
    std::vector<std::vector<std::pair<uint64_t, uint64_t>>> dims;
    for (size_t j = 0; j < rank; ++j) {
      const uint64_t n = rng() % 7;  // zero-size dims too
      shape.push_back(n);
      if (rng() % 2) {
        dims.push_back(TorchChunks(n, 1 + rng() % 4));  // torch.chunk, maybe empty pieces
      } else {
        // Random cut points.
        std::vector<uint64_t> cuts = {0, n};
        for (uint64_t c = rng() % 3; c > 0 && n > 0; --c) cuts.push_back(rng() % n);
        std::sort(cuts.begin(), cuts.end());
        cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
        std::vector<std::pair<uint64_t, uint64_t>> pieces;
        for (size_t i = 0; i + 1 < cuts.size(); ++i) {
          pieces.push_back({cuts[i], cuts[i + 1] - cuts[i]});
        }
        if (pieces.empty()) pieces.push_back({0, 0});
        dims.push_back(pieces);
      }
    }
    std::vector<ChunkBox> chunks = Grid(dims);
    std::shuffle(chunks.begin(), chunks.end(), rng);
    const uint64_t es = 1 + rng() % 4;
    SCOPED_TRACE("iteration " + std::to_string(iter));
    const Tiling t = TileAndCompare(shape, es, chunks, iter);
    // Memory grows with the chunks, and with rows only before e (the header's rule): d
    // the innermost dimension split among non-empty chunks, e the one before it.
    std::vector<size_t> split;
    for (size_t j = 0; j < rank; ++j) {
      if (std::count_if(dims[j].begin(), dims[j].end(), [](auto p) { return p.second > 0; }) > 1) {
        split.push_back(j);
      }
    }
    const size_t filled = std::count_if(chunks.begin(), chunks.end(),
                                        [](const ChunkBox& c) { return Elements(c.sizes) > 0; });
    uint64_t outer = 1;
    for (size_t j = 0; split.size() >= 2 && j < split[split.size() - 2]; ++j) outer *= shape[j];
    if (t.bytes == 0) {
      EXPECT_EQ(RunCount(t), 0u);
    } else {
      EXPECT_LE(RunCount(t), filled * outer);
    }
  }
}

// A source for GatherSource tests: bytes in memory, lent in pieces of at most 3 bytes (so a
// gathered read passes on several spans) when `lends`, with a mode, mtime and identity.
class TestSource final : public ByteSource {
 public:
  TestSource(std::string name, std::string bytes, bool lends, uint32_t mode = 0444,
             struct timespec mtime = {}, std::string identity = {})
      : name_(std::move(name)),
        bytes_(std::move(bytes)),
        lends_(lends),
        mode_(mode),
        mtime_(mtime),
        identity_(std::move(identity)) {}
  uint64_t Size() const override { return bytes_.size(); }
  Status Read(uint64_t offset, uint64_t length, ReadSink& sink) const override {
    CKPTFS_RETURN_IF_ERROR(CheckRange(offset, length));
    const auto* data = reinterpret_cast<const uint8_t*>(bytes_.data());
    if (!lends_ || !sink.lent) {
      if (length) std::memcpy(sink.Fill().data(), data + offset, length);
      return Status::Ok();
    }
    for (uint64_t at = offset; at < offset + length; at += 3) {
      sink.lent->push_back({{data + at, std::min<uint64_t>(3, offset + length - at)}, keep_});
    }
    return Status::Ok();
  }
  const std::string& Name() const override { return name_; }
  uint32_t Mode() const override { return mode_; }
  struct timespec MTime() const override {
    return mtime_;
  }
  std::string Identity() const override { return identity_; }
  void BeginServing() override { ++serving; }
  Status CheckUnchanged() const override { return unchanged; }
  void Prefetch(uint64_t offset, uint64_t length) const override {
    hints.push_back({offset, length});
  }
  int serving = 0;
  Status unchanged;
  mutable std::vector<std::pair<uint64_t, uint64_t>> hints;

 private:
  std::string name_, bytes_;
  bool lends_;
  uint32_t mode_;
  struct timespec mtime_;
  std::string identity_;
  std::shared_ptr<const void> keep_ = std::make_shared<int>(0);
};

std::vector<GatherGroup> FromTiling(const Tiling& t,
                                    const std::vector<std::unique_ptr<ByteSource>>& sources) {
  std::vector<GatherGroup> out;
  for (const auto& g : t.groups) {
    GatherGroup gg{g.count, {}};
    for (const auto& r : g.runs) {
      gg.runs.push_back({sources[r.chunk].get(), r.chunk_offset, r.stride, r.length});
    }
    out.push_back(std::move(gg));
  }
  return out;
}

std::string ReadFilled(const ByteSource& s, uint64_t offset, uint64_t length) {
  std::string out(length, '\0');
  const Status st = s.ReadAt(offset, {reinterpret_cast<uint8_t*>(out.data()), out.size()});
  EXPECT_TRUE(st.ok()) << st.message();
  return out;
}

std::string ReadLent(const ByteSource& s, uint64_t offset, uint64_t length, size_t* spans) {
  std::vector<LentBytes> lent;
  const Status st = testing::Lend(s, offset, length, &lent);
  EXPECT_TRUE(st.ok()) << st.message();
  std::string out;
  for (const LentBytes& l : lent)
    out.append(reinterpret_cast<const char*>(l.bytes.data()), l.bytes.size());
  *spans = lent.size();
  return out;
}

TEST(GatherSourceTest, RandomReadsFilledAndLent) {
  std::mt19937_64 rng(99);
  const std::vector<std::pair<std::vector<uint64_t>, std::vector<ChunkBox>>> cases = {
      {{8, 4}, Grid({Split(8, 4), Split(4, 1)})},
      {{6, 10}, Grid({Split(6, 1), Split(10, 4)})},
      {{5, 6, 7}, Grid({Split(5, 2), Split(6, 1), Split(7, 3)})},
      {{4, 6, 4}, Grid({Split(4, 1), Split(6, 2), Split(4, 2)})},
      {{4, 4}, {{{0, 0}, {2, 4}}, {{2, 0}, {2, 2}}, {{2, 2}, {2, 2}}}},
  };
  for (const auto& [shape, chunks] : cases) {
    const uint64_t es = 2;
    const Tiling t = TileAndCompare(shape, es, chunks);
    const std::vector<std::string> bytes = RandomContents(chunks, es, rng);
    const std::string whole = Direct(shape, es, chunks, bytes);
    // Every other chunk lends (cache blocks), the others fill (plain files).
    for (bool mixed : {false, true}) {
      std::vector<std::unique_ptr<ByteSource>> sources;
      for (size_t k = 0; k < chunks.size(); ++k) {
        if (mixed && k % 2) {
          sources.push_back(std::make_unique<TestSource>("c" + std::to_string(k), bytes[k], true));
        } else {
          sources.push_back(std::make_unique<MemorySource>("c" + std::to_string(k), bytes[k]));
        }
      }
      Result<std::unique_ptr<GatherSource>> g = GatherSource::Make("w", FromTiling(t, sources));
      ASSERT_TRUE(g.ok()) << g.status().message();
      ASSERT_EQ((*g)->Size(), whole.size());
      EXPECT_EQ(ReadFilled(**g, 0, whole.size()), whole);
      for (int i = 0; i < 200; ++i) {
        const uint64_t offset = rng() % (whole.size() + 1);
        const uint64_t length = rng() % (whole.size() - offset + 1);
        EXPECT_EQ(ReadFilled(**g, offset, length), whole.substr(offset, length));
        size_t spans = 0;
        EXPECT_EQ(ReadLent(**g, offset, length, &spans), whole.substr(offset, length));
        // Filled pieces of one read lend as one span.
        if (!mixed && length) {
          EXPECT_EQ(spans, 1u);
        }
      }
      // Past the end: Corruption, as every source.
      std::string out(2, '\0');
      EXPECT_FALSE(
          (*g)->ReadAt(whole.size() - 1, {reinterpret_cast<uint8_t*>(out.data()), 2}).ok());
    }
  }
}

TEST(GatherSourceTest, MakeRefusesARunPastItsSource) {
  MemorySource s("shard.distcp", std::string(23, 'x'));
  // 3 repetitions of 4 bytes, stride 10: the last ends at 24 > 23.
  Result<std::unique_ptr<GatherSource>> g = GatherSource::Make("w", {{3, {{&s, 0, 10, 4}}}});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("shard.distcp"), std::string::npos);
  EXPECT_NE(g.status().message().find("w:"), std::string::npos);
  EXPECT_TRUE(GatherSource::Make("w", {{3, {{&s, 0, 10, 3}}}}).ok());
  // Wrapping arithmetic does not pass.
  EXPECT_FALSE(GatherSource::Make("w", {{3, {{&s, 0, UINT64_MAX / 2 + 1, 1}}}}).ok());
  EXPECT_FALSE(GatherSource::Make("w", {{1, {{nullptr, 0, 0, 1}}}}).ok());
  // A total past 64 bits.
  EXPECT_FALSE(GatherSource::Make("w", {{UINT64_MAX, {{&s, 0, 0, 2}}}}).ok());
}

TEST(GatherSourceTest, ModeMTimeIdentityAndServing) {
  TestSource a("a", "abcd", false, 0555, {100, 5}, "id-a");
  TestSource b("b", "efgh", true, 0444, {100, 7}, "id-b");
  TestSource c("c", "ijkl", false, 0440, {99, 9}, "");
  Result<std::unique_ptr<GatherSource>> ab =
      GatherSource::Make("w", {{2, {{&a, 0, 2, 2}, {&b, 0, 2, 2}}}});
  ASSERT_TRUE(ab.ok());
  EXPECT_EQ((*ab)->Mode(), 0444u);
  EXPECT_EQ((*ab)->MTime().tv_sec, 100);
  EXPECT_EQ((*ab)->MTime().tv_nsec, 7);
  EXPECT_EQ(ReadFilled(**ab, 0, 8), "abefcdgh");
  EXPECT_EQ((*ab)->Fd(), -1);
  const std::string id = (*ab)->Identity();
  EXPECT_FALSE(id.empty());
  // Another pattern over the same sources is other bytes: another identity.
  Result<std::unique_ptr<GatherSource>> ba =
      GatherSource::Make("w", {{2, {{&b, 0, 2, 2}, {&a, 0, 2, 2}}}});
  ASSERT_TRUE(ba.ok());
  EXPECT_NE((*ba)->Identity(), id);
  (*ab)->BeginServing();
  EXPECT_EQ(a.serving, 1);
  EXPECT_EQ(b.serving, 1);

  Result<std::unique_ptr<GatherSource>> abc =
      GatherSource::Make("w", {{1, {{&a, 0, 0, 4}, {&c, 0, 0, 4}, {&b, 0, 0, 4}}}});
  ASSERT_TRUE(abc.ok());
  EXPECT_EQ((*abc)->Mode(), 0440u);
  EXPECT_EQ((*abc)->MTime().tv_sec, 100);
  EXPECT_TRUE((*abc)->Identity().empty());  // c cannot tell
  EXPECT_TRUE((*abc)->CheckUnchanged().ok());
  c.unchanged = Status::IoError("c: changed since it was opened");
  EXPECT_EQ((*abc)->CheckUnchanged().message(), "c: changed since it was opened");
}

TEST(GatherSourceTest, PrefetchHintsEachSourceTheRowsARangeCovers) {
  // 6 rows x 2 runs of 4 bytes (stride 4): bytes [11, 31) are in rows 1 to 3.
  TestSource a("a", std::string(24, 'a'), false);
  TestSource b("b", std::string(24, 'b'), false);
  Result<std::unique_ptr<GatherSource>> g =
      GatherSource::Make("w", {{6, {{&a, 0, 4, 4}, {&b, 0, 4, 4}}}});
  ASSERT_TRUE(g.ok());
  (*g)->Prefetch(11, 20);
  for (const TestSource* s : {&a, &b}) {
    ASSERT_EQ(s->hints.size(), 1u);
    const auto [offset, length] = s->hints[0];
    EXPECT_EQ(offset, 4u);            // row 1
    EXPECT_EQ(offset + length, 16u);  // through row 3
  }
  (*g)->Prefetch(48, 10);  // past the end: nothing
  EXPECT_EQ(a.hints.size(), 1u);
  // Across groups: each group's sources hinted for the rows the range has there.
  TestSource c("c", std::string(10, 'c'), false);
  g = GatherSource::Make("w", {{6, {{&a, 0, 4, 4}}}, {5, {{&c, 0, 2, 2}}}});
  ASSERT_TRUE(g.ok());
  (*g)->Prefetch(20, 7);  // a's row 5, c's rows 0 and 1
  ASSERT_EQ(a.hints.size(), 2u);
  EXPECT_EQ(a.hints[1], std::make_pair(uint64_t{20}, uint64_t{4}));
  ASSERT_EQ(c.hints.size(), 1u);
  EXPECT_EQ(c.hints[0], std::make_pair(uint64_t{0}, uint64_t{4}));
}

// Bytes made from their offset, of any size, without memory: stands in for a 64 MiB shard.
class SyntheticSource final : public ByteSource {
 public:
  SyntheticSource(std::string name, uint64_t size, uint8_t seed)
      : name_(std::move(name)), size_(size), seed_(seed) {}
  static uint8_t At(uint64_t i, uint8_t seed) { return static_cast<uint8_t>(i * 131 + seed); }
  uint64_t Size() const override { return size_; }
  Status Read(uint64_t offset, uint64_t length, ReadSink& sink) const override {
    CKPTFS_RETURN_IF_ERROR(CheckRange(offset, length));
    if (length == 0) return Status::Ok();
    std::span<uint8_t> out = sink.Fill();
    for (uint64_t i = 0; i < length; ++i) out[i] = At(offset + i, seed_);
    return Status::Ok();
  }
  const std::string& Name() const override { return name_; }

 private:
  std::string name_;
  uint64_t size_;
  uint8_t seed_;
};

TEST(GatherSourceTest, TensorParallelShard1Figure) {
  // The figure: 32000 x 8192 bf16, split 8 ways along dim 1.
  const uint64_t rows = 32000, cols = 8192, es = 2, parts = 8;
  const std::vector<ChunkBox> chunks = Grid({Split(rows, 1), Split(cols, parts)});
  Result<Tiling> t = TileTensor(std::vector<uint64_t>{rows, cols}, es, chunks, "w");
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_EQ(t->groups.size(), 1u);
  EXPECT_EQ(t->groups[0].count, rows);
  EXPECT_EQ(t->groups[0].runs.size(), parts);
  std::vector<std::unique_ptr<ByteSource>> sources;
  for (uint64_t k = 0; k < parts; ++k) {
    sources.push_back(std::make_unique<SyntheticSource>(
        "__" + std::to_string(k) + "_0.distcp", rows * cols / parts * es, static_cast<uint8_t>(k)));
  }
  Result<std::unique_ptr<GatherSource>> g = GatherSource::Make("w", FromTiling(*t, sources));
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ((*g)->Size(), rows * cols * es);
  const uint64_t described = (*g)->DescriptionBytes();
  std::printf(
      "[figure] 32000x8192 bf16 Shard(1) x8: %zu group, count %llu, %zu runs; "
      "GatherSource describes %llu bytes of tensor in %llu bytes\n",
      t->groups.size(), static_cast<unsigned long long>(t->groups[0].count),
      t->groups[0].runs.size(), static_cast<unsigned long long>((*g)->Size()),
      static_cast<unsigned long long>(described));
  EXPECT_LT(described, 2048u);
  // Spot reads across row and chunk boundaries match element (i, j) of chunk j / 1024.
  const uint64_t width = cols / parts;
  for (uint64_t i : {uint64_t{0}, uint64_t{1}, uint64_t{15999}, rows - 1}) {
    for (uint64_t j : {uint64_t{0}, width - 1, width, cols - 1}) {
      const uint64_t offset = (i * cols + j) * es;
      const uint64_t from = offset > 3 ? offset - 3 : 0;
      const std::string got = ReadFilled(**g, from, std::min<uint64_t>(8, (*g)->Size() - from));
      for (uint64_t b = 0; b < got.size(); ++b) {
        const uint64_t at = from + b;
        const uint64_t e = at / es, ii = e / cols, jj = e % cols, k = jj / width;
        const uint64_t local = (ii * width + jj % width) * es + at % es;
        EXPECT_EQ(static_cast<uint8_t>(got[b]), SyntheticSource::At(local, static_cast<uint8_t>(k)))
            << "byte " << at;
      }
    }
  }
}

// Random recursive cuts of a box (a k-d tree): tilings that are no grid, where one chunk
// spans cells of another's split.
void Cut(ChunkBox box, int depth, std::mt19937_64& rng, std::vector<ChunkBox>& out) {
  std::vector<size_t> cuttable;
  for (size_t j = 0; j < box.sizes.size(); ++j) {
    if (box.sizes[j] > 1) cuttable.push_back(j);
  }
  if (depth == 0 || cuttable.empty() || rng() % 4 == 0) {
    out.push_back(box);
    return;
  }
  const size_t j = cuttable[rng() % cuttable.size()];
  const uint64_t at = 1 + rng() % (box.sizes[j] - 1);
  ChunkBox rest = box;
  box.sizes[j] = at;
  rest.offsets[j] += at;
  rest.sizes[j] -= at;
  Cut(box, depth - 1, rng, out);
  Cut(rest, depth - 1, rng, out);
}

TEST(GatherSourceTest, RandomNonGridTilingsRead) {
  std::mt19937_64 rng(31337);
  for (int iter = 0; iter < 300; ++iter) {
    SCOPED_TRACE("iteration " + std::to_string(iter));
    const size_t rank = 1 + rng() % 4;
    ChunkBox whole;
    for (size_t j = 0; j < rank; ++j) {
      whole.offsets.push_back(0);
      whole.sizes.push_back(1 + rng() % 6);
    }
    std::vector<ChunkBox> chunks;
    Cut(whole, 1 + static_cast<int>(rng() % 6), rng, chunks);
    // Empty chunks anywhere inside the tensor change nothing.
    for (uint64_t n = rng() % 3; n > 0; --n) {
      ChunkBox empty = whole;
      const size_t j = rng() % rank;
      empty.offsets[j] = rng() % (whole.sizes[j] + 1);
      empty.sizes[j] = 0;
      chunks.push_back(empty);
    }
    std::shuffle(chunks.begin(), chunks.end(), rng);
    const uint64_t es = 1 + rng() % 4;
    const Tiling t = TileAndCompare(whole.sizes, es, chunks, iter);
    const std::vector<std::string> bytes = RandomContents(chunks, es, rng);
    const std::string reference = Direct(whole.sizes, es, chunks, bytes);
    std::vector<std::unique_ptr<ByteSource>> sources;
    for (size_t k = 0; k < chunks.size(); ++k) {
      sources.push_back(std::make_unique<TestSource>("c", bytes[k], rng() % 2 == 0));
    }
    Result<std::unique_ptr<GatherSource>> g = GatherSource::Make("w", FromTiling(t, sources));
    ASSERT_TRUE(g.ok()) << g.status().message();
    ASSERT_EQ((*g)->Size(), reference.size());
    for (int i = 0; i < 20; ++i) {
      const uint64_t offset = rng() % (reference.size() + 1);
      const uint64_t length = rng() % (reference.size() - offset + 1);
      EXPECT_EQ(ReadFilled(**g, offset, length), reference.substr(offset, length));
      size_t spans = 0;
      EXPECT_EQ(ReadLent(**g, offset, length, &spans), reference.substr(offset, length));
    }
  }
}

}  // namespace
}  // namespace ckptfs
