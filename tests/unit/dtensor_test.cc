// DTensors in torch.save files: the per-rank state dicts FSDP trainers (verl and others)
// write, read from the files PyTorch 2.11 wrote (../shared/fixtures/dcp/fsdp_rank_files,
// NOTICE.md there; skipped when absent), and hostile edits of them.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "core/encoding/safetensors.h"
#include "core/encoding/torch_file.h"
#include "core/encoding/zip.h"
#include "core/source/byte_source.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

namespace fs = std::filesystem;

constexpr int kRanks = 4;

std::string RankFile(int rank) { return "model_world_size_4_rank_" + std::to_string(rank) + ".pt"; }

class TorchDTensorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const fs::path& d :
         {fs::path(CKPTFS_SOURCE_DIR) / ".." / "shared", fs::path("/work/shared")}) {
      if (fs::exists(d / "fixtures" / "dcp" / "fsdp_rank_files" / RankFile(0))) {
        dir_ = d / "fixtures" / "dcp" / "fsdp_rank_files";
        return;
      }
    }
    GTEST_SKIP() << "../shared/fixtures/dcp/fsdp_rank_files is absent (real PyTorch 2.11 files)";
  }

  std::string Bytes(const std::string& file) const {
    std::ifstream in(dir_ / file, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  TorchFile Read(int rank) const {
    auto source = LocalFileSource::Open((dir_ / RankFile(rank)).string(), RankFile(rank));
    EXPECT_TRUE(source.ok()) << source.status().message();
    Result<TorchFile> file = ReadTorchFile(**source);
    EXPECT_TRUE(file.ok()) << file.status().message();
    return file.ok() ? std::move(*file) : TorchFile{};
  }

  // The file of `rank` with data.pkl passed through `edit`, zipped again, as a source
  // named as the file.
  template <typename Edit>
  Result<TorchFile> ReadEdited(int rank, Edit edit) const {
    const std::string bytes = Bytes(RankFile(rank));
    MemorySource original(RankFile(rank), bytes);
    auto entries = ReadZipDirectory(original);
    EXPECT_TRUE(entries.ok());
    std::vector<std::pair<std::string, std::string>> records;
    for (const ZipEntry& e : *entries) {
      std::string data = bytes.substr(e.data_offset, e.size);
      if (e.name.ends_with("/data.pkl")) edit(data);
      records.emplace_back(e.name, std::move(data));
    }
    MemorySource edited(RankFile(rank), testing::MakeZip(records));
    return ReadTorchFile(edited);
  }

  fs::path dir_;
};

struct ExpectedPiece {
  std::vector<uint64_t> offset, size, mesh_shape, coordinate;
  std::vector<int32_t> shard_dims;
};

// What rank `r` holds of each DTensor, by make_fixtures.py's placements and torch.chunk.
std::map<std::string, ExpectedPiece> ExpectedPieces(uint64_t r) {
  const uint64_t embed_rows = r < 3 ? 33 : 32;  // 131 rows in chunks of ceil(131/4) = 33
  return {
      {"embed.weight", {{33 * r, 0}, {embed_rows, 24}, {4}, {r}, {0}}},
      {"layers.0.attn.qkv.weight", {{18 * r, 0}, {18, 26}, {4}, {r}, {0}}},
      {"layers.0.attn.qkv.bias", {{18 * r}, {18}, {4}, {r}, {0}}},
      // [Shard(0), Shard(1)] on the 2x2 mesh ("dp", "tp"): coordinate (r / 2, r % 2).
      {"layers.0.mlp.up.weight",
       {{48 * (r / 2), 12 * (r % 2)}, {48, 12}, {2, 2}, {r / 2, r % 2}, {0, 1}}},
      {"layers.0.mlp.down.weight", {{0, 24 * r}, {24, 24}, {4}, {r}, {1}}},
      {"layers.0.norm.weight", {{0}, {24}, {4}, {r}, {-1}}},
      // Shard(2) of a size-3 dimension over 4 ranks: rank 3's piece is empty, at offset 3.
      {"head.weight", {{0, 0, r}, {11, 24, r < 3 ? 1u : 0u}, {4}, {r}, {2}}},
  };
}

TEST_F(TorchDTensorTest, EachDTensorIsOneTensorWithItsBoxInTheWhole) {
  auto expected_source =
      LocalFileSource::Open((dir_ / "expected.safetensors").string(), "expected.safetensors");
  ASSERT_TRUE(expected_source.ok());
  auto expected = ReadSafetensorsHeader(**expected_source);
  ASSERT_TRUE(expected.ok()) << expected.status().message();
  std::map<std::string, const TensorEntry*> whole;
  for (const TensorEntry& e : expected->tensors) whole[e.name] = &e;

  for (int rank = 0; rank < kRanks; ++rank) {
    SCOPED_TRACE(RankFile(rank));
    const TorchFile file = Read(rank);
    std::vector<std::string> names;
    for (const TorchTensor& t : file.tensors) names.push_back(t.name);
    // The dict keys, once each: nothing of a mesh (its rank map tensor) is a tensor.
    EXPECT_EQ(names, (std::vector<std::string>{"embed.weight", "layers.0.attn.qkv.weight",
                                               "layers.0.attn.qkv.bias", "layers.0.mlp.up.weight",
                                               "layers.0.mlp.down.weight", "layers.0.norm.weight",
                                               "pos_ids", "scale", "head.weight"}));
    EXPECT_EQ(file.state_json, "");  // no mesh, spec or placement left over as a value
    const auto pieces = ExpectedPieces(static_cast<uint64_t>(rank));
    for (const TorchTensor& t : file.tensors) {
      SCOPED_TRACE(t.name);
      ASSERT_TRUE(whole.count(t.name));
      EXPECT_EQ(file.storages[t.storage].dtype, whole[t.name]->dtype);
      auto want = pieces.find(t.name);
      if (want == pieces.end()) {  // pos_ids, scale: plain tensors, whole
        EXPECT_FALSE(t.piece.has_value());
        EXPECT_EQ(t.shape, whole[t.name]->shape);
        continue;
      }
      ASSERT_TRUE(t.piece.has_value());
      const TorchPiece& p = *t.piece;
      EXPECT_EQ(p.global_shape, whole[t.name]->shape);
      EXPECT_EQ(p.offset, want->second.offset);
      EXPECT_EQ(p.size, want->second.size);
      EXPECT_EQ(t.shape, p.size);
      EXPECT_EQ(p.mesh_shape, want->second.mesh_shape);
      EXPECT_EQ(p.coordinate, want->second.coordinate);
      EXPECT_EQ(p.shard_dims, want->second.shard_dims);
      EXPECT_EQ(p.rank, std::optional<uint64_t>(rank));
    }
  }
}

// The local tensor's bytes, read through its storage and view, are the slice of the whole
// tensor its box names, for every placement (Shard(0), Shard(1), Shard(2), Replicate(), the
// 2x2 mesh) and every rank.
TEST_F(TorchDTensorTest, LocalBytesAreTheSliceOfTheWholeTheBoxNames) {
  const std::string expected_bytes = Bytes("expected.safetensors");
  MemorySource expected_source("expected.safetensors", expected_bytes);
  auto expected = ReadSafetensorsHeader(expected_source);
  ASSERT_TRUE(expected.ok());
  std::map<std::string, const TensorEntry*> whole;
  for (const TensorEntry& e : expected->tensors) whole[e.name] = &e;

  int pieces_checked = 0;
  for (int rank = 0; rank < kRanks; ++rank) {
    SCOPED_TRACE(RankFile(rank));
    const std::string bytes = Bytes(RankFile(rank));
    const TorchFile file = Read(rank);
    for (const TorchTensor& t : file.tensors) {
      SCOPED_TRACE(t.name);
      const TorchStorage& s = file.storages[t.storage];
      const TensorEntry& w = *whole.at(t.name);
      const uint64_t element = DtypeSize(s.dtype);
      const std::vector<uint64_t> global = t.piece ? t.piece->global_shape : t.shape;
      const std::vector<uint64_t> offset =
          t.piece ? t.piece->offset : std::vector<uint64_t>(t.shape.size(), 0);
      const std::vector<uint64_t> global_stride = RowMajorStrides(global);
      uint64_t count = 1;
      for (uint64_t n : t.shape) count *= n;
      std::vector<uint64_t> index(t.shape.size(), 0);
      for (uint64_t i = 0; i < count; ++i) {
        uint64_t local = t.storage_offset, at = 0;
        for (size_t d = 0; d < index.size(); ++d) {
          local += index[d] * t.stride[d];
          at += (offset[d] + index[d]) * global_stride[d];
        }
        ASSERT_EQ(bytes.substr(s.data_offset + local * element, element),
                  expected_bytes.substr(expected->data_start + w.begin + at * element, element))
            << "element " << i;
        for (size_t d = index.size(); d-- > 0;) {  // the next index, row-major
          if (++index[d] < t.shape[d]) break;
          index[d] = 0;
        }
      }
      pieces_checked += t.piece ? 1 : 0;
    }
  }
  EXPECT_EQ(pieces_checked, 7 * kRanks);
}

// One line naming the file and the tensor, and why.
void ExpectRefused(const Result<TorchFile>& file, Status::Code code,
                   const std::vector<std::string>& parts) {
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), code) << file.status().message();
  const std::string& message = file.status().message();
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_TRUE(message.starts_with("model_world_size_4_rank_1.pt: ")) << message;
  for (const std::string& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << message << " lacks " << part;
  }
}

void Replace(std::string& data, const std::string& from, const std::string& to) {
  const size_t at = data.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  data.replace(at, from.size(), to);
}

TEST_F(TorchDTensorTest, AShardOfAnotherModuleIsRefused) {
  ExpectRefused(ReadEdited(1,
                           [](std::string& pkl) {
                             Replace(pkl, "torch.distributed.tensor.placement_types\nShard\n",
                                     "mytrainer.placements\nShard\n");
                           }),
                Status::Code::kUnsupported,
                {"DTensor \"embed.weight\"", "global mytrainer.placements.Shard"});
}

TEST_F(TorchDTensorTest, APartialPlacementIsRefused) {
  ExpectRefused(ReadEdited(1,
                           [](std::string& pkl) {
                             Replace(pkl, "torch.distributed.tensor.placement_types\nReplicate\n",
                                     "torch.distributed.tensor.placement_types\nPartial\n");
                           }),
                Status::Code::kUnsupported,
                {"DTensor \"layers.0.norm.weight\"",
                 "placement torch.distributed.tensor.placement_types.Partial", "not supported"});
}

TEST_F(TorchDTensorTest, AStridedShardPlacementIsRefused) {
  ExpectRefused(ReadEdited(1,
                           [](std::string& pkl) {
                             Replace(pkl, "torch.distributed.tensor.placement_types\nShard\n",
                                     "torch.distributed.tensor.placement_types\n_StridedShard\n");
                           }),
                Status::Code::kUnsupported,
                {"DTensor \"embed.weight\"", "placement_types._StridedShard", "not supported"});
}

// The pickle denylist holds inside a DTensor as anywhere: refused before it is read.
TEST_F(TorchDTensorTest, ADeniedGlobalInsideAMeshIsRefused) {
  const Result<TorchFile> file = ReadEdited(1, [](std::string& pkl) {
    Replace(pkl, "torch.distributed._mesh_layout\n_MeshLayout\n", "os\nsystem\n");
  });
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), Status::Code::kUnsupported);
  EXPECT_NE(file.status().message().find("global os.system is not allowed"), std::string::npos)
      << file.status().message();
}

// embed.weight's Shard(dim=0) made Shard(dim=1). The first "dim" key in the pickle is
// embed.weight's: BINUNICODE 'dim', BINPUT n, BININT1 0, SETITEM.
void ShardEmbedAlongDim1(std::string& pkl) {
  const size_t at =
      pkl.find(std::string("X\x03\x00\x00\x00"
                           "dim",
                           8));
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(pkl.substr(at + 10, 2), std::string("K\x00", 2));
  pkl[at + 11] = '\x01';
}

TEST_F(TorchDTensorTest, ALocalShapeOtherThanTheBoxIsRefused) {
  // With its shard order to match, [131,24] over 4 along dim 1 gives [131,6] on rank 1,
  // not the [33,24] it holds.
  ExpectRefused(ReadEdited(1,
                           [](std::string& pkl) {
                             ShardEmbedAlongDim1(pkl);
                             // ShardOrderEntry(tensor_dim=0, mesh_dims=(0,)) -> tensor_dim=1
                             Replace(pkl, std::string("ShardOrderEntry\nq\x56K\x00", 20),
                                     "ShardOrderEntry\nq\x56K\x01");
                           }),
                Status::Code::kCorruption,
                {"DTensor \"embed.weight\"", "shape [33,24]", "placements [Shard(1)]", "mesh [4]",
                 "coordinate [1]", "give [131,6]"});
}

TEST_F(TorchDTensorTest, AShardOrderOtherThanThePlacementsIsRefused) {
  ExpectRefused(ReadEdited(1, ShardEmbedAlongDim1), Status::Code::kUnsupported,
                {"DTensor \"embed.weight\"", "shard order"});
}

TEST_F(TorchDTensorTest, ACoordinateOutsideTheMeshIsRefused) {
  // rank 1's _coordinate_on_dim (1,) made (9,) on a mesh of 4.
  ExpectRefused(
      ReadEdited(1,
                 [](std::string& pkl) {
                   Replace(pkl, "_coordinate_on_dimq\x44K\x01", "_coordinate_on_dimq\x44K\x09");
                 }),
      Status::Code::kCorruption, {"DTensor \"embed.weight\"", "outside mesh dimension 0"});
}

// The box for every coordinate of a mesh, as "offset+size" per dimension.
std::vector<std::string> Boxes(std::vector<uint64_t> global, std::vector<uint64_t> mesh,
                               std::vector<int32_t> shard_dims) {
  std::vector<std::string> out;
  uint64_t count = 1;
  for (uint64_t m : mesh) count *= m;
  for (uint64_t rank = 0; rank < count; ++rank) {
    TorchPiece p{global, {}, {}, mesh, std::vector<uint64_t>(mesh.size()), shard_dims, {}};
    for (size_t i = mesh.size(), r = rank; i-- > 0; r /= mesh[i]) p.coordinate[i] = r % mesh[i];
    ComputeTorchPieceBox(p);
    std::string box;
    for (size_t d = 0; d < global.size(); ++d) {
      box += (d ? "," : "") + std::to_string(p.offset[d]) + "+" + std::to_string(p.size[d]);
    }
    out.push_back(box);
  }
  return out;
}

// torch's own examples (compute_local_shape_and_global_offset's docstring) and uneven,
// nested and empty splits as torch.chunk makes them.
TEST(TorchPieceBoxTest, SplitsAsTorchChunkNestedInPlacementOrder) {
  // (8, 4) on a (2, 4) mesh, [Shard(0), Shard(0)]: rank r holds row r.
  EXPECT_EQ(Boxes({8, 4}, {2, 4}, {0, 0}),
            (std::vector<std::string>{"0+1,0+4", "1+1,0+4", "2+1,0+4", "3+1,0+4", "4+1,0+4",
                                      "5+1,0+4", "6+1,0+4", "7+1,0+4"}));
  // (2, 5) on a mesh of 4, [Shard(1)]: chunks of 2, 2, 1 and an empty one at offset 5.
  EXPECT_EQ(Boxes({2, 5}, {4}, {1}),
            (std::vector<std::string>{"0+2,0+2", "0+2,2+2", "0+2,4+1", "0+2,5+0"}));
  // 5 rows on (2, 2), [Shard(0), Shard(0)]: 3 + 2, then each again: 2 + 1, 1 + 1.
  EXPECT_EQ(Boxes({5}, {2, 2}, {0, 0}), (std::vector<std::string>{"0+2", "2+1", "3+1", "4+1"}));
  // 3 rows on (2, 2): the last piece is empty, at the dimension's size.
  EXPECT_EQ(Boxes({3}, {2, 2}, {0, 0}), (std::vector<std::string>{"0+1", "1+1", "2+1", "3+0"}));
  // [Replicate(), Shard(1)]: the same columns along the first mesh dimension.
  EXPECT_EQ(
      Boxes({4, 6}, {2, 3}, {-1, 1}),
      (std::vector<std::string>{"0+4,0+2", "0+4,2+2", "0+4,4+2", "0+4,0+2", "0+4,2+2", "0+4,4+2"}));
  // [Shard(1), Shard(0)] on (2, 2): the 2x2 fixture's placements the other way round.
  EXPECT_EQ(Boxes({96, 24}, {2, 2}, {1, 0}),
            (std::vector<std::string>{"0+48,0+12", "48+48,0+12", "0+48,12+12", "48+48,12+12"}));
}

// PyTorch 2.2-2.4's form, written by stand-ins (tests/unit/dtensor_cases.py says what and
// why): a DTensor's state as a (None, slots) pair, DTensorSpec and TensorMeta in
// torch.distributed._tensor.placement_types, a DeviceMesh holding its `mesh` tensor. Every
// whole tensor is arange as float32, so each local element is its index in the whole.
TEST(TorchDTensorOldFormTest, RankFilesOfTorch22To24ReadWithTheirBoxes) {
  const fs::path dir = fs::temp_directory_path() / ("ckptfs-dtensor-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string cmd =
      "/usr/bin/python3 " CKPTFS_SOURCE_DIR "/tests/unit/dtensor_cases.py " + dir.string();
  const int rc = std::system(cmd.c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) GTEST_SKIP() << "/usr/bin/python3 has no torch";
  ASSERT_EQ(rc, 0) << cmd;
  const std::map<std::string, std::vector<std::string>> boxes = {
      {"w", {"0+2,0+3", "2+1,0+3", "3+1,0+3", "4+1,0+3"}},  // [Shard(0), Shard(0)] of [5, 3]
      {"b", {"0+4", "4+3", "0+4", "4+3"}},                  // [Replicate(), Shard(0)] of [7]
  };
  for (int rank = 0; rank < 4; ++rank) {
    const std::string file = "old_rank_" + std::to_string(rank) + ".pt";
    SCOPED_TRACE(file);
    std::ifstream in(dir / file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    MemorySource source(file, bytes);
    Result<TorchFile> read = ReadTorchFile(source);
    ASSERT_TRUE(read.ok()) << read.status().message();
    ASSERT_EQ(read->tensors.size(), 2u);
    EXPECT_EQ(read->state_json, "");
    for (const TorchTensor& t : read->tensors) {
      SCOPED_TRACE(t.name);
      ASSERT_TRUE(t.piece.has_value());
      const TorchPiece& p = *t.piece;
      EXPECT_EQ(p.mesh_shape, (std::vector<uint64_t>{2, 2}));
      EXPECT_EQ(p.coordinate, (std::vector<uint64_t>{uint64_t(rank / 2), uint64_t(rank % 2)}));
      EXPECT_EQ(p.rank, std::nullopt);  // 2.2-2.8 meshes record no rank of their own
      std::string box;
      for (size_t d = 0; d < p.offset.size(); ++d) {
        box += (d ? "," : "") + std::to_string(p.offset[d]) + "+" + std::to_string(p.size[d]);
      }
      EXPECT_EQ(box, boxes.at(t.name)[rank]);
      // Each element is its row-major index in the whole.
      const TorchStorage& s = read->storages[t.storage];
      const std::vector<uint64_t> global_stride = RowMajorStrides(p.global_shape);
      uint64_t count = 1;
      for (uint64_t n : t.shape) count *= n;
      std::vector<uint64_t> index(t.shape.size(), 0);
      for (uint64_t i = 0; i < count; ++i) {
        uint64_t local = t.storage_offset, at = 0;
        for (size_t d = 0; d < index.size(); ++d) {
          local += index[d] * t.stride[d];
          at += (p.offset[d] + index[d]) * global_stride[d];
        }
        float value = 0;
        std::memcpy(&value, bytes.data() + s.data_offset + local * 4, 4);
        EXPECT_EQ(value, static_cast<float>(at)) << "element " << i;
        for (size_t d = index.size(); d-- > 0;) {
          if (++index[d] < t.shape[d]) break;
          index[d] = 0;
        }
      }
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ckptfs
