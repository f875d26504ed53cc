// dcp::ParseMetadata over the .metadata files PyTorch 2.11 wrote (../shared/fixtures/dcp,
// read in place, skipped when absent) and over small pickles built here in PyTorch's shape
// by a tiny pickle writer, valid and hostile, so the checks run without python.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/format/dcp/metadata.h"

namespace ckptfs::dcp {
namespace {

namespace fs = std::filesystem;

const std::string kFile = "ckpt/.metadata";
constexpr std::string_view kMeta = "torch.distributed.checkpoint.metadata";

// Writes pickle opcodes (protocol 4, no memo) the way python's pickler lays them out.
class PickleWriter {
 public:
  PickleWriter() : out_("\x80\x04", 2) {}
  PickleWriter& Str(std::string_view s) {
    if (s.size() < 256) {
      Op('\x8c');
      out_ += static_cast<char>(s.size());
    } else {
      Op('X');
      Le(s.size(), 4);
    }
    out_ += s;
    return *this;
  }
  PickleWriter& Int(int64_t v) {
    if (v >= 0 && v < 256) {
      Op('K');
      out_ += static_cast<char>(v);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      Op('J');
      Le(static_cast<uint32_t>(v), 4);
    } else {
      Op('\x8a');
      out_ += '\x08';
      Le(static_cast<uint64_t>(v), 8);
    }
    return *this;
  }
  PickleWriter& None() { return Op('N'); }
  PickleWriter& False() { return Op('\x89'); }
  PickleWriter& Global(std::string_view module, std::string_view name) {
    return Str(module).Str(name).Op('\x93');
  }
  PickleWriter& Mark() { return Op('('); }
  PickleWriter& Tuple() { return Op('t'); }  // MARK ... TUPLE
  PickleWriter& EmptyTuple() { return Op(')'); }
  PickleWriter& EmptyDict() { return Op('}'); }
  PickleWriter& SetItems() { return Op('u'); }  // MARK ... SETITEMS
  PickleWriter& EmptyList() { return Op(']'); }
  PickleWriter& Appends() { return Op('e'); }  // MARK ... APPENDS
  PickleWriter& NewObj() { return Op('\x81'); }
  PickleWriter& Reduce() { return Op('R'); }
  PickleWriter& Build() { return Op('b'); }
  PickleWriter& Memoize() { return Op('\x94'); }  // the top as memo entry 0, 1, 2, ...
  PickleWriter& Get(uint32_t memo) {
    Op('j');
    Le(memo, 4);
    return *this;
  }
  // A dataclass instance: NEWOBJ(cls, ()) then BUILD of the dict `fields` writes.
  template <typename F>
  PickleWriter& Dataclass(std::string_view module, std::string_view cls, F fields) {
    Global(module, cls).EmptyTuple().NewObj().EmptyDict().Mark();
    fields();
    return SetItems().Build();
  }
  // torch.Size(dims): REDUCE(torch.Size, (tuple,)).
  PickleWriter& Size(const std::vector<int64_t>& dims) {
    Global("torch", "Size").Mark().Mark();
    for (int64_t d : dims) Int(d);
    return Tuple().Tuple().Reduce();
  }
  std::string Finish() { return out_ + "."; }

 private:
  PickleWriter& Op(char op) {
    out_ += op;
    return *this;
  }
  void Le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  std::string out_;
};

struct SpecChunk {
  std::vector<int64_t> offsets, sizes;
  std::string file = "__0_0.distcp";
  int64_t offset = 0, length = 64;
  std::vector<std::string> transforms = {};
  bool stored = true;
};
struct SpecTensor {
  std::string fqn;
  std::vector<int64_t> size = {};
  std::vector<SpecChunk> chunks = {};
  std::string dtype_module = "torch", dtype = "float32";
  std::string cls_module = std::string(kMeta), cls = "TensorStorageMetadata";
};
struct SpecBytes {
  std::string fqn;
  std::string file = "__0_0.distcp";
  int64_t offset = 0, length = 16;
  bool stored = true;
};
struct SpecEntry {  // a storage_data entry of its own (for an unknown fqn, a duplicate)
  std::string fqn;
  std::optional<std::vector<int64_t>> offsets = std::nullopt;
  std::string file = "__0_0.distcp";
};
using Key = std::variant<std::string, int64_t>;
struct Spec {
  std::vector<SpecTensor> tensors;
  std::vector<SpecBytes> bytes;
  std::vector<SpecEntry> extra;
  std::vector<std::pair<std::string, std::vector<Key>>> paths;
  bool storage_meta = true;
  std::optional<std::string> version = "1.0.0";
  // TensorProperties.memory_format as Python 3.11.0-3.11.6 pickle an enum member:
  // getattr(ENUM_CLASS, 'NAME'), ENUM_CLASS this global (empty: by value, as 3.12 does).
  std::string enum_by_getattr;
  std::string enum_member = "TORCH_CONTIGUOUS_FORMAT";  // its NAME
};

void StorageEntry(PickleWriter& w, const std::string& fqn,
                  const std::optional<std::vector<int64_t>>& offsets, int64_t index,
                  const std::string& file, int64_t offset, int64_t length,
                  const std::vector<std::string>& transforms) {
  w.Dataclass(kMeta, "MetadataIndex", [&] {
    w.Str("fqn").Str(fqn);
    if (offsets) w.Str("offset").Size(*offsets);
    w.Str("index");
    if (offsets) {
      w.Int(index);
    } else {
      w.None();
    }
  });
  w.Dataclass("torch.distributed.checkpoint.filesystem", "_StorageInfo", [&] {
    w.Str("relative_path").Str(file).Str("offset").Int(offset).Str("length").Int(length);
    if (!transforms.empty()) {
      w.Str("transform_descriptors").EmptyList().Mark();
      for (const std::string& t : transforms) w.Str(t);
      w.Appends();
    }
  });
}

// The .metadata pickle FileSystemWriter.finish would write for `spec`.
std::string Encode(const Spec& spec) {
  PickleWriter w;
  w.Dataclass(kMeta, "Metadata", [&] {
    w.Str("state_dict_metadata").EmptyDict().Mark();
    for (const SpecTensor& t : spec.tensors) {
      w.Str(t.fqn).Dataclass(t.cls_module, t.cls, [&] {
        w.Str("properties").Global(kMeta, "TensorProperties").EmptyTuple().NewObj().Mark();
        w.Global(t.dtype_module, t.dtype);
        w.Global("torch.serialization", "_get_layout").Mark().Str("torch.strided").Tuple().Reduce();
        w.False();
        if (spec.enum_by_getattr.empty()) {
          w.Global(kMeta, "_MEM_FORMAT_ENCODING").Mark().Int(0).Tuple().Reduce();
        } else {
          const size_t dot = spec.enum_by_getattr.rfind('.');
          w.Global("builtins", "getattr").Mark();
          w.Global(spec.enum_by_getattr.substr(0, dot), spec.enum_by_getattr.substr(dot + 1));
          w.Str(spec.enum_member).Tuple().Reduce();
        }
        w.False();
        w.Tuple().Build();
        w.Str("size").Size(t.size).Str("chunks").EmptyList().Mark();
        for (const SpecChunk& c : t.chunks) {
          w.Dataclass(kMeta, "ChunkStorageMetadata",
                      [&] { w.Str("offsets").Size(c.offsets).Str("sizes").Size(c.sizes); });
        }
        w.Appends();
      });
    }
    for (const SpecBytes& b : spec.bytes) {
      w.Str(b.fqn).Global(kMeta, "BytesStorageMetadata").EmptyTuple().NewObj();
    }
    w.SetItems();
    w.Str("planner_data").EmptyDict().Mark();
    for (const auto& [fqn, keys] : spec.paths) {
      w.Str(fqn).Mark();
      for (const Key& k : keys) {
        if (const auto* s = std::get_if<std::string>(&k)) {
          w.Str(*s);
        } else {
          w.Int(std::get<int64_t>(k));
        }
      }
      w.Tuple();
    }
    w.SetItems();
    w.Str("storage_data").EmptyDict().Mark();
    for (const SpecTensor& t : spec.tensors) {
      for (size_t i = 0; i < t.chunks.size(); ++i) {
        const SpecChunk& c = t.chunks[i];
        if (!c.stored) continue;
        StorageEntry(w, t.fqn, c.offsets, static_cast<int64_t>(i), c.file, c.offset, c.length,
                     c.transforms);
      }
    }
    for (const SpecBytes& b : spec.bytes) {
      if (b.stored) StorageEntry(w, b.fqn, std::nullopt, 0, b.file, b.offset, b.length, {});
    }
    for (const SpecEntry& e : spec.extra) StorageEntry(w, e.fqn, e.offsets, 0, e.file, 0, 8, {});
    w.SetItems();
    if (spec.storage_meta) {
      w.Str("storage_meta").Dataclass(kMeta, "StorageMeta", [&] {
        w.Str("checkpoint_id").Global("pathlib", "PosixPath").Mark().Str("/").Str("ckpt");
        w.Tuple().Reduce();
        w.Str("save_id").Str("2180e292").Str("load_id").None().Str("modules").EmptyList();
      });
    }
    if (spec.version) w.Str("version").Str(*spec.version);
  });
  return w.Finish();
}

// A tensor split in two along dim 1 (tensor parallel), a scalar, and a bytes item whose
// path runs through a list.
Spec TwoRankSpec() {
  Spec spec;
  spec.tensors.push_back(SpecTensor{
      .fqn = "model.w",
      .size = {4, 6},
      .chunks = {SpecChunk{.offsets = {0, 0}, .sizes = {4, 3}, .offset = 0, .length = 900},
                 SpecChunk{.offsets = {0, 3},
                           .sizes = {4, 3},
                           .file = "__1_0.distcp",
                           .offset = 0,
                           .length = 901,
                           .transforms = {"stream.zstd"}}},
      .dtype = "bfloat16"});
  spec.tensors.push_back(
      SpecTensor{.fqn = "model.scale",
                 .size = {},
                 .chunks = {SpecChunk{.offsets = {}, .sizes = {}, .offset = 900, .length = 700}}});
  spec.bytes.push_back(SpecBytes{.fqn = "optim.param_groups.0.lr", .offset = 1600, .length = 50});
  spec.paths = {{"model.w", {"model", "w"}},
                {"model.scale", {"model", "scale"}},
                {"optim.param_groups.0.lr", {"optim", "param_groups", int64_t{0}, "lr"}}};
  return spec;
}

Result<Metadata> Parse(const std::string& bytes) { return ParseMetadata(bytes, kFile); }

// The refusal of `bytes`: one line naming the file and holding `what`.
void ExpectRefused(const std::string& bytes, std::string_view what) {
  const Result<Metadata> m = Parse(bytes);
  ASSERT_FALSE(m.ok()) << "accepted; expected: " << what;
  const std::string& message = m.status().message();
  EXPECT_EQ(message.rfind(kFile + ": ", 0), 0u) << message;
  EXPECT_NE(message.find(what), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(DcpMetadata, ReadsWhatTheWriterRecords) {
  const Result<Metadata> m = Parse(Encode(TwoRankSpec()));
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->tensors.size(), 2u);
  const TensorItem& w = m->tensors[0];
  EXPECT_EQ(w.fqn, "model.w");
  EXPECT_EQ(w.dtype, Dtype::kBF16);
  EXPECT_EQ(w.size, (std::vector<uint64_t>{4, 6}));
  ASSERT_EQ(w.chunks.size(), 2u);
  EXPECT_EQ(w.chunks[1].offsets, (std::vector<uint64_t>{0, 3}));
  EXPECT_EQ(w.chunks[1].sizes, (std::vector<uint64_t>{4, 3}));
  EXPECT_EQ(w.chunks[0].storage.relative_path, "__0_0.distcp");
  EXPECT_EQ(w.chunks[0].storage.length, 900u);
  EXPECT_TRUE(w.chunks[0].storage.transforms.empty());
  EXPECT_EQ(w.chunks[1].storage.relative_path, "__1_0.distcp");
  EXPECT_EQ(w.chunks[1].storage.length, 901u);
  EXPECT_EQ(w.chunks[1].storage.transforms, (std::vector<std::string>{"stream.zstd"}));
  const TensorItem& scale = m->tensors[1];
  EXPECT_EQ(scale.dtype, Dtype::kF32);
  EXPECT_TRUE(scale.size.empty());
  ASSERT_EQ(scale.chunks.size(), 1u);
  EXPECT_EQ(scale.chunks[0].storage.offset, 900u);
  ASSERT_EQ(m->bytes.size(), 1u);
  EXPECT_EQ(m->bytes[0].fqn, "optim.param_groups.0.lr");
  EXPECT_EQ(m->bytes[0].storage.offset, 1600u);
  EXPECT_EQ(m->bytes[0].storage.length, 50u);
  ASSERT_EQ(m->paths.size(), 3u);
  EXPECT_EQ(m->paths[2].first, "optim.param_groups.0.lr");
  const std::vector<PathKey>& path = m->paths[2].second;
  ASSERT_EQ(path.size(), 4u);
  EXPECT_EQ(path[1].key, "param_groups");
  EXPECT_FALSE(path[1].index);
  EXPECT_EQ(path[2].key, "0");
  EXPECT_TRUE(path[2].index);
  EXPECT_EQ(m->version, "1.0.0");
}

// Fields PyTorch added over 2.x (storage_meta, version) may be absent.
TEST(DcpMetadata, OlderWritersLeaveOutLaterFields) {
  Spec spec = TwoRankSpec();
  spec.storage_meta = false;
  spec.version.reset();
  const Result<Metadata> m = Parse(Encode(spec));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->version, "");
  EXPECT_EQ(m->tensors.size(), 2u);
}

// Python 3.11.0-3.11.6 pickle an enum member by name, through getattr: a .metadata saved
// there is read; getattr of a name not in capitals, on anything but the memory-format
// enum, is still refused (pickle.h).
TEST(DcpMetadata, ReadsEnumMembersPickledByGetattr) {
  Spec spec = TwoRankSpec();
  spec.enum_by_getattr = std::string(kMeta) + "._MEM_FORMAT_ENCODING";
  const Result<Metadata> m = Parse(Encode(spec));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->tensors.size(), 2u);
  spec.enum_by_getattr = "collections.OrderedDict";
  spec.enum_member = "move_to_end";
  ExpectRefused(Encode(spec), "builtins.getattr is allowed only as getattr(");
}

TEST(DcpMetadata, RefusesGlobalsOffTheList) {
  Spec spec = TwoRankSpec();
  spec.tensors[0].dtype_module = "os";
  spec.tensors[0].dtype = "system";
  ExpectRefused(Encode(spec), "ckpt/.metadata: global os.system is not allowed (byte ");

  spec = TwoRankSpec();
  spec.tensors[0].cls = "EvilStorageMetadata";
  ExpectRefused(Encode(spec),
                "global torch.distributed.checkpoint.metadata.EvilStorageMetadata is not allowed");

  spec = TwoRankSpec();
  spec.tensors[0].cls_module = "mymodule";
  spec.tensors[0].cls = "Thing";
  ExpectRefused(Encode(spec), "global mymodule.Thing is not allowed");

  spec = TwoRankSpec();
  spec.tensors[0].dtype = "qint8";
  ExpectRefused(Encode(spec), "global torch.qint8 is not allowed (not a dtype ckptfs has)");
}

TEST(DcpMetadata, RefusesChunksOutsideTheirTensor) {
  Spec spec = TwoRankSpec();
  spec.tensors[0].chunks[1].offsets = {0, 4};  // [4, 7) of a dimension of 6
  ExpectRefused(Encode(spec), "lies past the tensor's size [4,6]");

  spec = TwoRankSpec();
  spec.tensors[0].chunks[1].offsets = {0};
  spec.tensors[0].chunks[1].sizes = {4};
  ExpectRefused(Encode(spec), "chunk 1 has rank 1/1, the tensor 2");

  spec = TwoRankSpec();
  spec.tensors[0].chunks[1].sizes = {4, 3, 1};
  ExpectRefused(Encode(spec), "chunk 1 has rank 2/3, the tensor 2");

  spec = TwoRankSpec();  // ends near 2^64 are compared without wrapping
  spec.tensors[0].dtype = "bool";
  spec.tensors[0].size = {1, INT64_MAX};
  spec.tensors[0].chunks[0].sizes = {1, 1};
  spec.tensors[0].chunks[1].offsets = {0, INT64_MAX};
  spec.tensors[0].chunks[1].sizes = {1, INT64_MAX};
  ExpectRefused(Encode(spec), "lies past the tensor's size");
}

TEST(DcpMetadata, RefusesSizesThatAreNegativeOrOverflow) {
  Spec spec = TwoRankSpec();
  spec.tensors[0].size = {4, -6};
  ExpectRefused(Encode(spec), "size is negative (-6)");

  spec = TwoRankSpec();
  spec.bytes[0].length = -1;
  ExpectRefused(Encode(spec), "length is negative (-1)");

  spec = TwoRankSpec();
  spec.tensors[0].size = {int64_t{1} << 62, int64_t{1} << 62};
  ExpectRefused(Encode(spec), "overflows 64 bits");

  // A size of 2^64: LONG1 with nine bytes, which no int64 holds.
  spec = TwoRankSpec();
  constexpr int64_t kMarker = 0x7eadbeefcafef00d;
  spec.tensors[0].size = {4, kMarker};
  std::string bytes = Encode(spec);
  std::string long1 = "\x8a\x08";
  for (int i = 0; i < 8; ++i) long1 += static_cast<char>((kMarker >> (8 * i)) & 0xff);
  const size_t at = bytes.find(long1);
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, long1.size(), std::string("\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01", 11));
  ExpectRefused(bytes, "integer too large");
}

TEST(DcpMetadata, RefusesPathsThatAreNotOnePlainName) {
  for (const std::string& name :
       std::vector<std::string>{"sub/__0_0.distcp", "/etc/passwd", "..", ".", "", "../x",
                                std::string("a\0b", 3), std::string(256, 'a')}) {
    Spec spec = TwoRankSpec();
    spec.tensors[0].chunks[1].file = name;
    ExpectRefused(Encode(spec), "relative_path");
    ExpectRefused(Encode(spec), "is not a plain file name");
  }
  Spec spec = TwoRankSpec();
  spec.tensors[0].chunks[1].file = std::string(255, 'a');
  EXPECT_TRUE(Parse(Encode(spec)).ok());
}

TEST(DcpMetadata, EveryItemHasExactlyOneStorageEntry) {
  Spec spec = TwoRankSpec();
  spec.tensors[0].chunks[1].stored = false;
  ExpectRefused(Encode(spec), "tensor \"model.w\" chunk at offsets [0,3] has no storage_data");

  spec = TwoRankSpec();
  spec.bytes[0].stored = false;
  ExpectRefused(Encode(spec), "item \"optim.param_groups.0.lr\" has no storage_data entry");

  spec = TwoRankSpec();
  spec.extra.push_back(SpecEntry{.fqn = "model.ghost", .offsets = std::vector<int64_t>{0}});
  ExpectRefused(Encode(spec), "storage_data entry for \"model.ghost\" names no item");

  spec = TwoRankSpec();
  spec.extra.push_back(SpecEntry{.fqn = "model.w", .offsets = std::vector<int64_t>{0, 1}});
  ExpectRefused(Encode(spec), "names no chunk of it (offsets [0,1])");

  spec = TwoRankSpec();
  spec.extra.push_back(SpecEntry{.fqn = "model.w", .offsets = std::vector<int64_t>{0, 3}});
  ExpectRefused(Encode(spec), "at offsets [0,3] is given twice");

  spec = TwoRankSpec();
  spec.extra.push_back(SpecEntry{.fqn = "model.w", .offsets = std::nullopt});
  ExpectRefused(Encode(spec), "has no chunk offset");

  spec = TwoRankSpec();
  spec.extra.push_back(
      SpecEntry{.fqn = "optim.param_groups.0.lr", .offsets = std::vector<int64_t>{0}});
  ExpectRefused(Encode(spec), "the item is not a tensor");

  spec = TwoRankSpec();  // two chunks at the same offsets could not be told apart
  spec.tensors[0].chunks[1].offsets = {0, 0};
  ExpectRefused(Encode(spec), "two chunks at offsets [0,0]");
}

TEST(DcpMetadata, RefusesMissingNeededFields) {
  const std::string good = Encode(TwoRankSpec());
  for (const std::string_view field :
       {"length", "relative_path", "chunks", "size", "fqn", "properties", "state_dict_metadata"}) {
    std::string bytes = good;
    const std::string key =
        std::string(1, '\x8c') + static_cast<char>(field.size()) + std::string(field);
    size_t at = 0;
    while ((at = bytes.find(key, at)) != std::string::npos) {
      bytes[at + key.size() - 1] = '_';  // "length" -> "lengt_"
      at += key.size();
    }
    ExpectRefused(bytes, "has no " + std::string(field));
  }
}

// Python shares objects through the memo, so a small pickle can name one chunk list from
// many tensors: what that would build is charged to the metadata budget and refused, not
// allocated (200 tensors x 1000 chunks of rank 64 from a pickle of 270 KB).
TEST(DcpMetadata, SharedObjectsCannotMultiplyMemory) {
  constexpr int kRank = 64, kChunks = 1000, kTensors = 200;
  PickleWriter w;
  w.Global(kMeta, "Metadata").EmptyTuple().NewObj().EmptyDict().Mark();
  w.Str("state_dict_metadata").EmptyDict().Mark();
  for (int t = 0; t < kTensors; ++t) {
    w.Str("t" + std::to_string(t)).Global(kMeta, "TensorStorageMetadata").EmptyTuple().NewObj();
    w.EmptyDict().Mark();
    w.Str("properties").Global(kMeta, "TensorProperties").EmptyTuple().NewObj();
    w.Mark().Global("torch", "float32").Tuple().Build();
    if (t == 0) {
      std::vector<int64_t> size(kRank, 1);
      size[0] = kChunks;
      w.Str("size").Size(size).Memoize();            // memo 0
      w.Str("chunks").EmptyList().Memoize().Mark();  // memo 1
      for (int c = 0; c < kChunks; ++c) {
        std::vector<int64_t> offsets(kRank, 0);
        offsets[0] = c;
        w.Dataclass(kMeta, "ChunkStorageMetadata", [&] {
          w.Str("offsets").Size(offsets).Str("sizes");
          if (c == 0) {
            w.Size(std::vector<int64_t>(kRank, 1)).Memoize();  // memo 2
          } else {
            w.Get(2);
          }
        });
      }
      w.Appends();
    } else {
      w.Str("size").Get(0).Str("chunks").Get(1);
    }
    w.SetItems().Build();
  }
  w.SetItems().SetItems().Build();
  const std::string bytes = w.Finish();
  EXPECT_LT(bytes.size(), 400u << 10);
  ExpectRefused(bytes, "metadata would take more than");
}

TEST(DcpMetadata, RefusesTensorsOfTooManyDimensions) {
  Spec spec = TwoRankSpec();
  spec.tensors[1].size = std::vector<int64_t>(65, 1);
  spec.tensors[1].chunks[0].offsets = std::vector<int64_t>(65, 0);
  spec.tensors[1].chunks[0].sizes = std::vector<int64_t>(65, 1);
  ExpectRefused(Encode(spec), "size has 65 dimensions (at most 64)");
}

// A dataclass has a handful of fields: a state dict of many, which every field lookup
// would scan, is refused.
TEST(DcpMetadata, RefusesDataclassesOfManyFields) {
  PickleWriter w;
  w.Dataclass(kMeta, "Metadata", [&] {
    for (int i = 0; i < 33; ++i) w.Str("f" + std::to_string(i)).None();
  });
  ExpectRefused(w.Finish(), "the root (Metadata) has more than 32 fields");
}

TEST(DcpMetadata, RefusesEveryTruncation) {
  const std::string good = Encode(TwoRankSpec());
  ASSERT_TRUE(Parse(good).ok());
  for (size_t n = 0; n < good.size(); ++n) {
    ExpectRefused(good.substr(0, n), "");
  }
}

// The fuzz target's seeds, which python's own pickler wrote (memo, frames) with stand-in
// classes (tests/fuzz/dcp_metadata_seeds.py): the sound ones parse, the hostile ones refuse.
TEST(DcpMetadata, SeedCorpus) {
  const fs::path corpus =
      fs::path(CKPTFS_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / "dcp_metadata";
  const auto parse = [&](const std::string& name) {
    std::ifstream in(corpus / name, std::ios::binary);
    return ParseMetadata(std::string(std::istreambuf_iterator<char>(in), {}), name);
  };
  const Result<Metadata> dtensor = parse("dtensor.metadata");
  ASSERT_TRUE(dtensor.ok()) << dtensor.status().message();
  ASSERT_EQ(dtensor->tensors.size(), 5u);
  EXPECT_EQ(dtensor->tensors[2].dtype, Dtype::kI64);
  EXPECT_EQ(dtensor->tensors[2].chunks[3].offsets, (std::vector<uint64_t>{2, 2}));
  EXPECT_EQ(dtensor->tensors[2].chunks[3].storage.relative_path, "__3_0.distcp");
  EXPECT_EQ(dtensor->tensors[4].chunks[3].sizes, (std::vector<uint64_t>{2, 0}));
  const Result<Metadata> single = parse("single.metadata");
  ASSERT_TRUE(single.ok()) << single.status().message();
  ASSERT_EQ(single->bytes.size(), 2u);
  ASSERT_EQ(single->paths.size(), 5u);
  EXPECT_TRUE(single->paths[3].second[2].index);
  const Result<Metadata> old = parse("old_writer.metadata");
  ASSERT_TRUE(old.ok()) << old.status().message();
  EXPECT_EQ(old->version, "");
  const Result<Metadata> transforms = parse("transforms.metadata");
  ASSERT_TRUE(transforms.ok()) << transforms.status().message();
  EXPECT_EQ(transforms->tensors[0].dtype, Dtype::kC64);
  EXPECT_EQ(transforms->tensors[0].chunks[0].storage.transforms,
            (std::vector<std::string>{"stream.zstd"}));
  const std::pair<std::string, std::string> hostile[] = {
      {"dotdot.metadata", "relative_path \"../etc/passwd\" is not a plain file name"},
      {"past_size.metadata", "lies past the tensor's size [4]"},
      {"os_system.metadata", "global os.system is not allowed"},
  };
  for (const auto& [name, what] : hostile) {
    const Result<Metadata> m = parse(name);
    ASSERT_FALSE(m.ok()) << name;
    EXPECT_EQ(m.status().message().rfind(name + ": ", 0), 0u) << m.status().message();
    EXPECT_NE(m.status().message().find(what), std::string::npos) << m.status().message();
  }
}

// The fixtures PyTorch 2.11 wrote (make_fixtures.py, seed 1).
const fs::path kFixtures = fs::path(CKPTFS_SOURCE_DIR) / ".." / "shared" / "fixtures" / "dcp";

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

const TensorItem* Find(const Metadata& m, std::string_view fqn) {
  for (const TensorItem& t : m.tensors) {
    if (t.fqn == fqn) return &t;
  }
  return nullptr;
}

struct Want {
  std::string fqn;
  Dtype dtype;
  std::vector<uint64_t> size;
};
// full_model(1): k = 2.
const std::vector<Want> kModel = {
    {"embed.weight", Dtype::kBF16, {131, 24}},
    {"layers.0.attn.qkv.weight", Dtype::kF32, {72, 26}},
    {"layers.0.attn.qkv.bias", Dtype::kF16, {72}},
    {"layers.0.mlp.up.weight", Dtype::kBF16, {96, 24}},
    {"layers.0.mlp.down.weight", Dtype::kBF16, {24, 96}},
    {"layers.0.norm.weight", Dtype::kF32, {24}},
    {"pos_ids", Dtype::kI64, {19}},
    {"scale", Dtype::kF32, {}},
    {"head.weight", Dtype::kF64, {11, 24, 3}},
};

// Every stored range lies in its .distcp file and holds a torch.save zip.
void ExpectStoredItem(const fs::path& dir, const StorageInfo& s, const std::string& what) {
  const std::string file = ReadAll(dir / s.relative_path);
  ASSERT_FALSE(file.empty()) << what << ": " << s.relative_path;
  ASSERT_LE(s.offset + s.length, file.size()) << what;
  EXPECT_GE(s.length, 4u) << what;
  EXPECT_EQ(file.compare(s.offset, 4, "PK\x03\x04"), 0) << what << " at " << s.offset;
  EXPECT_TRUE(s.transforms.empty()) << what;
}

Result<Metadata> ParseFixture(const fs::path& dir) {
  return ParseMetadata(ReadAll(dir / ".metadata"), (dir / ".metadata").string());
}

TEST(DcpMetadata, SingleProcessFixture) {
  const fs::path dir = kFixtures / "single";
  if (!fs::exists(dir / ".metadata")) GTEST_SKIP() << dir << " is absent (../shared/fixtures)";
  const Result<Metadata> m = ParseFixture(dir);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->version, "1.0.0");
  for (const Want& want : kModel) {
    const TensorItem* t = Find(*m, "model." + want.fqn);
    ASSERT_NE(t, nullptr) << want.fqn;
    EXPECT_EQ(t->dtype, want.dtype) << want.fqn;
    EXPECT_EQ(t->size, want.size) << want.fqn;
    ASSERT_EQ(t->chunks.size(), 1u) << want.fqn;
    EXPECT_EQ(t->chunks[0].offsets, std::vector<uint64_t>(want.size.size(), 0));
    EXPECT_EQ(t->chunks[0].sizes, want.size);
  }
  // optim.state of the first three parameters: exp_avg (f32, its shape) and a scalar step.
  for (size_t i = 0; i < 3; ++i) {
    const TensorItem* avg = Find(*m, "optim.state." + kModel[i].fqn + ".exp_avg");
    ASSERT_NE(avg, nullptr) << kModel[i].fqn;
    EXPECT_EQ(avg->dtype, Dtype::kF32);
    EXPECT_EQ(avg->size, kModel[i].size);
    const TensorItem* step = Find(*m, "optim.state." + kModel[i].fqn + ".step");
    ASSERT_NE(step, nullptr) << kModel[i].fqn;
    EXPECT_TRUE(step->size.empty());
  }
  EXPECT_EQ(m->tensors.size(), kModel.size() + 6);
  for (const TensorItem& t : m->tensors) {
    for (const Chunk& c : t.chunks) ExpectStoredItem(dir, c.storage, t.fqn);
  }
  std::vector<std::string> bytes;
  for (const BytesItem& b : m->bytes) {
    bytes.push_back(b.fqn);
    ExpectStoredItem(dir, b.storage, b.fqn);
  }
  EXPECT_EQ(bytes,
            (std::vector<std::string>{"optim.param_groups.0.lr", "optim.param_groups.0.betas",
                                      "optim.param_groups.0.params", "step", "note"}));
  // planner_data: one path per item; param_groups is a list, so its index is an int.
  EXPECT_EQ(m->paths.size(), m->tensors.size() + m->bytes.size());
  for (const auto& [fqn, path] : m->paths) {
    std::string joined;
    for (const PathKey& k : path) joined += (joined.empty() ? "" : ".") + k.key;
    EXPECT_EQ(joined, fqn);
    if (fqn == "optim.param_groups.0.betas") {
      ASSERT_EQ(path.size(), 4u);
      EXPECT_FALSE(path[1].index);
      EXPECT_TRUE(path[2].index);
      EXPECT_EQ(path[2].key, "0");
    } else if (fqn == "model.embed.weight") {
      ASSERT_EQ(path.size(), 2u);
      EXPECT_EQ(path[1].key, "embed.weight");  // the model dict's key holds dots
      EXPECT_FALSE(path[1].index);
    } else if (fqn == "optim.state.embed.weight.exp_avg") {
      ASSERT_EQ(path.size(), 4u);
      EXPECT_EQ(path[2].key, "embed.weight");
    }
  }
}

TEST(DcpMetadata, DTensorFixture) {
  const fs::path dir = kFixtures / "dtensor";
  if (!fs::exists(dir / ".metadata")) GTEST_SKIP() << dir << " is absent (../shared/fixtures)";
  const Result<Metadata> m = ParseFixture(dir);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->tensors.size(), kModel.size());
  for (const Want& want : kModel) {
    const TensorItem* t = Find(*m, "model." + want.fqn);
    ASSERT_NE(t, nullptr) << want.fqn;
    EXPECT_EQ(t->dtype, want.dtype) << want.fqn;
    EXPECT_EQ(t->size, want.size) << want.fqn;
  }
  using Boxes = std::vector<std::pair<std::vector<uint64_t>, std::vector<uint64_t>>>;
  const auto boxes = [&](std::string_view fqn) {
    Boxes out;
    const TensorItem* t = Find(*m, fqn);
    if (t) {
      for (const Chunk& c : t->chunks) out.emplace_back(c.offsets, c.sizes);
    }
    return out;
  };
  // Shard(0) on 4 ranks: torch.chunk's split, 33 33 33 32.
  EXPECT_EQ(
      boxes("model.embed.weight"),
      (Boxes{{{0, 0}, {33, 24}}, {{33, 0}, {33, 24}}, {{66, 0}, {33, 24}}, {{99, 0}, {32, 24}}}));
  // Shard(1): four chunks of [24, 24] along dimension 1.
  EXPECT_EQ(
      boxes("model.layers.0.mlp.down.weight"),
      (Boxes{{{0, 0}, {24, 24}}, {{0, 24}, {24, 24}}, {{0, 48}, {24, 24}}, {{0, 72}, {24, 24}}}));
  // The 2x2 mesh [Shard(0), Shard(1)].
  EXPECT_EQ(
      boxes("model.layers.0.mlp.up.weight"),
      (Boxes{{{0, 0}, {48, 12}}, {{0, 12}, {48, 12}}, {{48, 0}, {48, 12}}, {{48, 12}, {48, 12}}}));
  // Shard(2) of a dimension of 3 over 4 ranks: the last rank's chunk is empty.
  EXPECT_EQ(boxes("model.head.weight"), (Boxes{{{0, 0, 0}, {11, 24, 1}},
                                               {{0, 0, 1}, {11, 24, 1}},
                                               {{0, 0, 2}, {11, 24, 1}},
                                               {{0, 0, 3}, {11, 24, 0}}}));
  EXPECT_EQ(boxes("model.layers.0.norm.weight"), (Boxes{{{0}, {24}}}));  // Replicate()
  EXPECT_EQ(boxes("model.scale"), (Boxes{{{}, {}}}));
  // Each rank's chunk lies in that rank's file.
  const TensorItem* down = Find(*m, "model.layers.0.mlp.down.weight");
  ASSERT_NE(down, nullptr);
  for (size_t r = 0; r < down->chunks.size(); ++r) {
    EXPECT_EQ(down->chunks[r].storage.relative_path, "__" + std::to_string(r) + "_0.distcp");
  }
  std::vector<bool> rank_files(4, false);
  for (const TensorItem& t : m->tensors) {
    for (const Chunk& c : t.chunks) {
      ExpectStoredItem(dir, c.storage, t.fqn);
      for (size_t r = 0; r < 4; ++r) {
        if (c.storage.relative_path == "__" + std::to_string(r) + "_0.distcp") rank_files[r] = true;
      }
    }
  }
  EXPECT_EQ(rank_files, std::vector<bool>(4, true));
  ASSERT_EQ(m->bytes.size(), 1u);
  EXPECT_EQ(m->bytes[0].fqn, "step");
  ExpectStoredItem(dir, m->bytes[0].storage, "step");
  ASSERT_EQ(m->paths.size(), 10u);
  EXPECT_EQ(m->paths.back().first, "step");
  ASSERT_EQ(m->paths.back().second.size(), 1u);
  EXPECT_EQ(m->paths.back().second[0].key, "step");
}

}  // namespace
}  // namespace ckptfs::dcp
