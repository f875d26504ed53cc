// TensorFlow TensorBundle parsers (core/format/tf/): CRC32C, the strict table reader, the
// bundle protos, names, slices, the `checkpoint` state file, strings and the object graph.
// Bundles come from scripts/make_tf_checkpoint.py (run with /usr/bin/python3) and from the
// real TensorFlow-written files in ../shared/fixtures/tf (skipped when absent).

#include <gtest/gtest.h>
#include <snappy-c.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/encoding/metadata_budget.h"
#include "core/format/formats.h"
#include "core/format/tf/bundle.h"
#include "core/format/tf/checkpoint_state.h"
#include "core/format/tf/crc32c.h"
#include "core/format/tf/names.h"
#include "core/format/tf/slices.h"
#include "core/format/tf/sstable.h"
#include "core/format/tf/strings.h"
#include "core/format/tf/varint.h"
#include "core/layout/layout.h"
#include "tests/unit/format_samples.h"
#include "tests/unit/test_util.h"

namespace ckptfs::tf {
namespace {

// The table's sample of this format (format_samples.h): a `checkpoint` state file naming a
// prefix (detect reads only the state file).
const testing::FormatSample kSample("tensorflow",
                                    {{"checkpoint",
                                      "model_checkpoint_path: \"/stale/dir/ckpt-1\"\n"},
                                     {"ckpt-1.index", "not parsed by detect"},
                                     {"ckpt-1.data-00000-of-00001", "x"}});

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// This process's scratch directory, removed when the test binary exits.
struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("ckptfs_tf_" + std::to_string(getpid()));
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};
const Scratch kScratch;

// A scratch directory holding the writer's output for `kind`, made once per test binary.
fs::path Generated(const std::string& kind, const std::string& extra = "") {
  static std::map<std::string, fs::path> made;
  std::string tag = kind + extra;
  std::replace(tag.begin(), tag.end(), ' ', '_');
  if (made.count(tag)) return made[tag];
  const fs::path dir = kScratch.dir / tag;
  fs::remove_all(dir);
  const std::string cmd = "/usr/bin/python3 " CKPTFS_SOURCE_DIR "/scripts/make_tf_checkpoint.py " +
                          kind + " " + dir.string() + " " + extra;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return made[tag] = dir;
}

bool HasPythonSnappy() {
  return std::system("/usr/bin/python3 -c 'import snappy' 2>/dev/null") == 0;
}

// An opened bundle: the parsed index and every data file's bytes.
struct Opened {
  TensorBundle bundle;
  std::vector<std::string> data;
};

// Opens PREFIX as a reader would: parse the index, find the data files, check extents.
Result<Opened> Open(const fs::path& prefix) {
  const std::string index_name = prefix.string() + ".index";
  CKPTFS_ASSIGN_OR_RETURN(TensorBundle bundle, ParseTensorBundle(ReadFile(index_name), index_name));
  auto size_of = [](const std::string& name) -> std::optional<uint64_t> {
    struct stat st {};
    if (stat(name.c_str(), &st) != 0) return std::nullopt;
    return static_cast<uint64_t>(st.st_size);
  };
  CKPTFS_ASSIGN_OR_RETURN(std::vector<uint64_t> sizes,
                          DataFileSizes(bundle, prefix.string(), size_of));
  CKPTFS_RETURN_IF_ERROR(CheckDataFileExtents(bundle, sizes, prefix.string()));
  Opened out{std::move(bundle), {}};
  for (int64_t k = 0; k < out.bundle.header.num_shards; ++k) {
    out.data.push_back(ReadFile(
        DataFileName(prefix.string(), static_cast<uint32_t>(k), out.bundle.header.num_shards)));
  }
  return out;
}

// The whole tensor's bytes, gathered from its runs (as a reader's extents would serve them).
std::string Gather(const Opened& o, const TfTensor& t) {
  auto runs = TensorRuns(t, DtypeSize(*t.type.dtype), "test");
  EXPECT_TRUE(runs.ok()) << runs.status().message();
  std::string out;
  for (const TfRun& r : *runs) out += o.data[r.shard_id].substr(r.offset, r.length);
  return out;
}

std::string StoredBytes(const Opened& o, const TfLocation& w) {
  return o.data[w.shard_id].substr(w.offset, w.size);
}

// Every tensor's CRC32C against its data file: numeric by bytes (each slice on its own),
// strings by TF's rule. Returns how many were checked.
size_t VerifyAllCrcs(const Opened& o) {
  size_t checked = 0;
  for (const TfTensor& t : o.bundle.tensors) {
    if (t.type.kind == TfKind::kString) {
      uint64_t n = 1;
      for (uint64_t d : t.shape) n *= d;
      auto s = DecodeStringTensor(StoredBytes(o, t.where), n, t.where, t.key);
      EXPECT_TRUE(s.ok()) << s.status().message();
      checked += t.where.has_crc32c;
      continue;
    }
    if (t.type.kind != TfKind::kNumeric) continue;
    if (!t.partitioned()) {
      EXPECT_TRUE(t.where.has_crc32c) << t.key;
      EXPECT_TRUE(TensorCrcMatches(t.where, StoredBytes(o, t.where))) << t.key;
      ++checked;
    }
    for (const TfSlicePiece& p : t.slices) {
      EXPECT_TRUE(TensorCrcMatches(p.where, StoredBytes(o, p.where))) << t.key;
      ++checked;
    }
  }
  return checked;
}

std::string Hex(std::string_view bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (char c : bytes) {
    out += kDigits[static_cast<uint8_t>(c) >> 4];
    out += kDigits[static_cast<uint8_t>(c) & 0xf];
  }
  return out;
}

// --- CRC32C -------------------------------------------------------------------------------

TEST(TfCrc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8a9136aau);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62a8ab43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending += static_cast<char>(i);
  EXPECT_EQ(Crc32c(ascending), 0x46dd794eu);
  EXPECT_EQ(Crc32cExtend(Crc32c("1234"), "56789"), 0xe3069283u);
  // LevelDB's crc32c_test: masking moves the value and round-trips.
  const uint32_t crc = Crc32c("foo");
  EXPECT_NE(MaskCrc(crc), crc);
  EXPECT_NE(MaskCrc(MaskCrc(crc)), crc);
  EXPECT_EQ(UnmaskCrc(MaskCrc(crc)), crc);
  EXPECT_EQ(UnmaskCrc(UnmaskCrc(MaskCrc(MaskCrc(crc)))), crc);
}

TEST(TfCrc32cTest, HardwareMatchesTable) {
  std::cout << "crc32c implementation: " << Crc32cImplementation() << "\n";
  std::mt19937 rng(7);
  std::string data(4099, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  for (size_t len : {0u, 1u, 7u, 8u, 9u, 63u, 64u, 1000u, 4099u}) {
    for (size_t start : {0u, 1u, 3u}) {
      const std::string_view piece = std::string_view(data).substr(start, len);
      EXPECT_EQ(Crc32cExtend(12345, piece), Crc32cExtendTable(12345, piece)) << len;
    }
  }
}

// --- varints and protos --------------------------------------------------------------------

TEST(TfVarintTest, RefusesOverflowAndTruncation) {
  VarintError error{};
  std::string_view ok("\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 10);
  EXPECT_EQ(ReadVarint64(ok, &error), UINT64_MAX);
  std::string_view over("\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02", 10);
  EXPECT_FALSE(ReadVarint64(over, &error));
  EXPECT_EQ(error, VarintError::kOverflow);
  std::string_view eleven("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11);
  EXPECT_FALSE(ReadVarint64(eleven, &error));
  std::string_view cut("\x80\x80", 2);
  EXPECT_FALSE(ReadVarint64(cut, &error));
  EXPECT_EQ(error, VarintError::kTruncated);
  std::string_view big32("\x80\x80\x80\x80\x10", 5);
  EXPECT_FALSE(ReadVarint32(big32, &error));
  EXPECT_EQ(error, VarintError::kOverflow);
}

TEST(TfBundleProtoTest, DecodesAndRefuses) {
  // dtype=1, shape {dim {size 3}}, shard_id=1, offset=8, size=12, crc32c=fixed32.
  const std::string entry(
      "\x08\x01\x12\x04\x12\x02\x08\x03\x18\x01\x20\x08\x28\x0c\x35\x78\x56\x34\x12", 19);
  auto e = DecodeBundleEntry(entry);
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e->dtype, 1);
  EXPECT_EQ(e->shape, std::vector<uint64_t>{3});
  EXPECT_EQ(e->shard_id, 1);
  EXPECT_EQ(e->offset, 8u);
  EXPECT_EQ(e->size, 12u);
  EXPECT_EQ(e->crc32c, 0x12345678u);
  EXPECT_NE(
      DecodeBundleEntry(std::string("\x0a\x01x", 3)).status().message().find("wrong wire type"),
      std::string::npos);
  EXPECT_NE(DecodeBundleEntry(entry.substr(0, 17)).status().message().find("truncated"),
            std::string::npos);
  // A negative offset (sign-extended int64) and a negative dim are refused.
  EXPECT_FALSE(
      DecodeBundleEntry(std::string("\x20\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11)).ok());
  EXPECT_FALSE(DecodeBundleEntry(
                   std::string("\x12\x0d\x12\x0b\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 15))
                   .ok());
  EXPECT_FALSE(DecodeBundleEntry(std::string("\x0b", 1)).ok());  // group wire type

  auto h = DecodeBundleHeader(std::string("\x08\x02\x1a\x02\x08\x01", 6));
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(h->num_shards, 2);
  EXPECT_EQ(h->producer, 1);
  EXPECT_FALSE(h->big_endian);
  EXPECT_TRUE(DecodeBundleHeader(std::string("\x08\x01\x10\x01", 4))->big_endian);
  EXPECT_FALSE(DecodeBundleHeader(std::string("\x08\x00", 2)).ok());

  EXPECT_EQ(DescribeTfDtype(1).dtype, Dtype::kF32);
  EXPECT_EQ(DescribeTfDtype(14).dtype, Dtype::kBF16);
  EXPECT_EQ(DescribeTfDtype(19).dtype, Dtype::kF16);
  EXPECT_EQ(DescribeTfDtype(25).dtype, Dtype::kF8E4M3);
  EXPECT_EQ(DescribeTfDtype(7).kind, TfKind::kString);
  EXPECT_EQ(DescribeTfDtype(20).kind, TfKind::kResource);
  EXPECT_EQ(DescribeTfDtype(21).kind, TfKind::kVariant);
  EXPECT_EQ(DescribeTfDtype(8).kind, TfKind::kUnsupported);
  EXPECT_EQ(DescribeTfDtype(8).name, "DT_COMPLEX64");
  EXPECT_EQ(DescribeTfDtype(101).kind, TfKind::kUnsupported);
}

// --- names ---------------------------------------------------------------------------------

TEST(TfNamesTest, SlotEscapesAndTf1Keys) {
  const TfName slot =
      TfKeyToName("model/dense/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE");
  EXPECT_EQ(slot.segments, (std::vector<std::string>{"model", "dense", "kernel", "OPTIMIZER_SLOT",
                                                     "optimizer", "m"}));
  EXPECT_EQ(slot.dotted, "model.dense.kernel.OPTIMIZER_SLOT.optimizer.m");
  EXPECT_EQ(TfKeyToName("dense/kernel").dotted, "dense.kernel");
  EXPECT_EQ(TfKeyToName("save_counter/.ATTRIBUTES/VARIABLE_VALUE").dotted, "save_counter");
  const TfName escaped = TfKeyToName("model/conv1..weight/a.Sb/.ATTRIBUTES/VARIABLE_VALUE");
  EXPECT_EQ(escaped.segments, (std::vector<std::string>{"model", "conv1.weight", "a/b"}));
  EXPECT_EQ(escaped.dotted, "model.conv1.weight.a/b");
  // Left to right: "...S" is ".." then ".S"? No: ".." -> "." first, then "S" stays.
  EXPECT_EQ(UnescapeTfSegment("a...Sb"), "a./b");
  EXPECT_EQ(UnescapeTfSegment("..hidden"), ".hidden");  // an escaped dot is kept
  EXPECT_EQ(TfKeyToName("_CHECKPOINTABLE_OBJECT_GRAPH").dotted, "_CHECKPOINTABLE_OBJECT_GRAPH");
}

// --- slices --------------------------------------------------------------------------------

TfTensor Partitioned(std::vector<uint64_t> shape,
                     std::vector<std::pair<TensorSlice, uint64_t>> parts) {
  TfTensor t;
  t.key = "p";
  t.type = DescribeTfDtype(1);
  t.shape = std::move(shape);
  for (auto& [slice, offset] : parts) {
    std::vector<uint64_t> lens;
    for (size_t a = 0; a < slice.size(); ++a) lens.push_back(slice[a].length.value_or(t.shape[a]));
    t.slices.push_back({slice, {0, offset, *ShapeBytes(lens, 4), false, 0}});
  }
  return t;
}

TEST(TfSlicesTest, Axis0IsContiguousRuns) {
  // [6,4] split on axis 0 at 2: slice A rows 0-1 at offset 1000, slice B rows 2-5 at 0.
  TfTensor t =
      Partitioned({6, 4}, {{{{0, 2}, {0, std::nullopt}}, 1000}, {{{2, 4}, {0, std::nullopt}}, 0}});
  auto runs = TensorRuns(t, 4, "x.index");
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  EXPECT_EQ(*runs, (std::vector<TfRun>{{0, 1000, 32}, {0, 0, 64}}));
}

TEST(TfSlicesTest, Axis1InterleavesRows) {
  // [3,5] split on axis 1 at 2: A = cols 0-1 (3x2) at 0, B = cols 2-4 (3x3) at 100.
  TfTensor t =
      Partitioned({3, 5}, {{{{0, std::nullopt}, {0, 2}}, 0}, {{{0, std::nullopt}, {2, 3}}, 100}});
  auto runs = TensorRuns(t, 4, "x.index");
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  EXPECT_EQ(*runs,
            (std::vector<TfRun>{
                {0, 0, 8}, {0, 100, 12}, {0, 8, 8}, {0, 112, 12}, {0, 16, 8}, {0, 124, 12}}));
  // Stored back to back in file order, neighbours merge into one run.
  TfTensor whole =
      Partitioned({3, 5}, {{{{0, 2}, {0, std::nullopt}}, 0}, {{{2, 1}, {0, std::nullopt}}, 40}});
  EXPECT_EQ(*TensorRuns(whole, 4, "x.index"), (std::vector<TfRun>{{0, 0, 60}}));
}

TEST(TfSlicesTest, RefusesOverlapGapAndOutside) {
  TfTensor overlap =
      Partitioned({4, 2}, {{{{0, 3}, {0, std::nullopt}}, 0}, {{{2, 2}, {0, std::nullopt}}, 100}});
  EXPECT_NE(
      TensorRuns(overlap, 4, "x.index").status().message().find("x.index: \"p\": slices overlap"),
      std::string::npos);
  TfTensor gap = Partitioned({4, 2}, {{{{0, 2}, {0, std::nullopt}}, 0}});
  EXPECT_NE(TensorRuns(gap, 4, "x.index").status().message().find("uncovered"), std::string::npos);
  TfTensor outside = Partitioned({4, 2}, {{{{0, 4}, {1, 2}}, 0}});
  EXPECT_NE(TensorRuns(outside, 4, "x.index").status().message().find("outside"),
            std::string::npos);
}

// --- checkpoint state -----------------------------------------------------------------------

TEST(TfCheckpointStateTest, NamesAPrefixInsideSource) {
  auto state = ParseCheckpointState(
      "model_checkpoint_path: \"/old/host/run/ckpt-3\"\n# comment\n"
      "all_model_checkpoint_paths: 'ckpt-2'\nall_model_checkpoint_paths: \"ckpt\\055\\x33\"\n"
      "all_model_checkpoint_timestamps: 1.7e9\nlast_preserved_timestamp: 1699999999.25\n",
      "checkpoint");
  ASSERT_TRUE(state.ok()) << state.status().message();
  EXPECT_EQ(state->model_checkpoint_path, "/old/host/run/ckpt-3");
  EXPECT_EQ(state->all_model_checkpoint_paths, (std::vector<std::string>{"ckpt-2", "ckpt-3"}));
  EXPECT_EQ(*LatestCheckpointPrefix("model_checkpoint_path: \"/old/host/run/ckpt-3\"", "c"),
            "ckpt-3");
  EXPECT_EQ(*StatePathInSource("ckpt-3", "c"), "ckpt-3");
  EXPECT_EQ(*StatePathInSource("./sub/ckpt-3", "c"), "sub/ckpt-3");
  EXPECT_EQ(*StatePathInSource("../../etc/passwd", "c"), "passwd");
  EXPECT_EQ(*StatePathInSource("sub/../../x", "c"), "x");
  EXPECT_FALSE(StatePathInSource("/", "c").ok());
  EXPECT_FALSE(StatePathInSource("..", "c").ok());
  EXPECT_FALSE(StatePathInSource("a\nb", "c").ok());
  EXPECT_EQ(LatestCheckpointPrefix("all_model_checkpoint_paths: \"x\"", "c").status().code(),
            Status::Code::kNotFound);
  auto bad = ParseCheckpointState("model_checkpoint_path \"x\"\n", "dir/checkpoint");
  EXPECT_EQ(bad.status().message(),
            "dir/checkpoint: line 1: expected ':' after model_checkpoint_path");
  EXPECT_FALSE(ParseCheckpointState("model_checkpoint_path: \"unterminated\n", "c").ok());
}

// --- whole bundles from the writer -----------------------------------------------------------

void CheckStandard(const fs::path& dir, bool snappy) {
  auto o = Open(dir / "ckpt-3");
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(o->bundle.header.num_shards, 2);
  if (snappy) {
    EXPECT_GT(o->bundle.snappy_blocks, 0u);
  }
  const auto expected = nlohmann::json::parse(ReadFile(dir / "expected.json"));
  ASSERT_EQ(o->bundle.tensors.size(), expected.size());
  size_t numeric = 0, partitioned = 0;
  for (const TfTensor& t : o->bundle.tensors) {
    const auto& want = expected.at(t.key);
    EXPECT_EQ(t.shape, want.at("shape").get<std::vector<uint64_t>>()) << t.key;
    if (want.at("dtype") == "STRING") {
      ASSERT_EQ(t.type.kind, TfKind::kString) << t.key;
      continue;
    }
    ASSERT_EQ(t.type.kind, TfKind::kNumeric) << t.key;
    EXPECT_EQ(DtypeName(*t.type.dtype), want.at("dtype").get<std::string>()) << t.key;
    EXPECT_EQ(Hex(Gather(*o, t)), want.at("hex").get<std::string>()) << t.key;
    ++numeric;
    partitioned += t.partitioned();
  }
  EXPECT_EQ(numeric, 26u);  // 15 dtypes, 8 named, 3 partitioned
  EXPECT_EQ(partitioned, 3u);
  EXPECT_GT(VerifyAllCrcs(*o), 25u);

  for (const TfTensor& t : o->bundle.tensors) {
    if (t.key == "strings/vocab") {
      auto s = DecodeStringTensor(StoredBytes(*o, t.where), 3, t.where, t.key);
      ASSERT_TRUE(s.ok()) << s.status().message();
      EXPECT_EQ(*s, (std::vector<std::string>{"alpha", "", std::string("\xff\0bin", 5)}));
    }
    if (t.key == kObjectGraphKey) {
      auto s = DecodeStringTensor(StoredBytes(*o, t.where), 1, t.where, t.key);
      ASSERT_TRUE(s.ok()) << s.status().message();
      auto graph = ObjectGraphToJson(s->at(0), t.key);
      ASSERT_TRUE(graph.ok()) << graph.status().message();
      EXPECT_EQ((*graph)["nodes"].size(), 7u);
      EXPECT_EQ((*graph)["nodes"][0]["children"][0]["name"], "model");
      EXPECT_EQ((*graph)["nodes"][4]["slot_variables"][0]["slot_name"], "m");
    }
  }
  auto latest = LatestCheckpointPrefix(ReadFile(dir / "checkpoint"), "checkpoint");
  EXPECT_EQ(*latest, "ckpt-3");
  // The verify walk finds every block sound.
  EXPECT_TRUE(CheckSstableBlocks(ReadFile(dir / "ckpt-3.index"), "i").empty());
}

TEST(TfBundleTest, WriterBundleEveryDtypeSlicesStrings) {
  CheckStandard(Generated("standard"), false);
}

TEST(TfBundleTest, WriterBundleSnappyBlocks) {
  if (!HasPythonSnappy()) GTEST_SKIP() << "python3-snappy not installed: no snappy bundle to write";
  CheckStandard(Generated("standard", "--snappy"), true);
}

TEST(TfBundleTest, HostileBundlesRefusedInOneLine) {
  const fs::path dir = Generated("hostile");
  const auto cases = nlohmann::json::parse(ReadFile(dir / "cases.json"));
  ASSERT_GE(cases.size(), 16u);
  for (const auto& [name, want] : cases.items()) {
    const auto start = std::chrono::steady_clock::now();
    auto o = Open(dir / name / "ckpt");
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_FALSE(o.ok()) << name << " was accepted";
    const std::string& msg = o.status().message();
    EXPECT_NE(msg.find(want.get<std::string>()), std::string::npos) << name << ": " << msg;
    EXPECT_NE(msg.find((dir / name / "ckpt").string()), std::string::npos) << name << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << name;
    EXPECT_LT(secs, 1.0) << name;
    std::cout << name << ": " << msg.substr(msg.rfind('/') + 1) << "\n";
  }
}

// True if the table walks to its end (every block read and checked).
bool SstWalks(std::string_view bytes) {
  MetadataBudget budget("i");
  budget.AddStored(bytes.size());
  return WalkSstable(bytes, "i", budget,
                     [](std::string_view, std::string_view) { return Status::Ok(); })
      .ok();
}

TEST(TfBundleTest, VerifyReportsEachBadBlock) {
  // Corrupt two data blocks of the 50k-entry-style table: both are reported.
  const fs::path dir = Generated("many", "--count 3000");
  std::string bytes = ReadFile(dir / "ckpt-1.index");
  ASSERT_TRUE(SstWalks(bytes));
  bytes[10] ^= 1;     // first block
  bytes[20000] ^= 1;  // a later block
  const auto problems = CheckSstableBlocks(bytes, "ckpt-1.index");
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_NE(problems[0].find("ckpt-1.index: block at offset 0: block checksum mismatch"),
            std::string::npos);
  EXPECT_FALSE(SstWalks(bytes));
}

long RssKib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

TEST(TfBundleTest, FiftyThousandVariables) {
  const fs::path dir = Generated("many");
  const std::string bytes = ReadFile(dir / "ckpt-1.index");
  const long rss_before = RssKib();
  const auto start = std::chrono::steady_clock::now();
  auto bundle = ParseTensorBundle(bytes, "ckpt-1.index");
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const long rss_after = RssKib();
  ASSERT_TRUE(bundle.ok()) << bundle.status().message();
  ASSERT_EQ(bundle->tensors.size(), 50000u);
  std::cout << "50000-variable index (" << bytes.size() << " bytes): parsed in " << secs * 1000
            << " ms, RSS +" << static_cast<double>(rss_after - rss_before) / 1024.0 << " MiB\n";
  EXPECT_LT(secs, 1.0);
  auto o = Open(dir / "ckpt-1");
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(VerifyAllCrcs(*o), 50000u);
  const TfTensor& last = o->bundle.tensors.back();
  EXPECT_EQ(TfKeyToName(last.key).dotted, "model.layer_49999.kernel");
  float v[2];
  std::memcpy(v, Gather(*o, last).data(), 8);
  EXPECT_EQ(v[0], 49999.0f);
  EXPECT_EQ(v[1], -49999.0f);
}

// --- metadata memory: hostile indexes, strings and object graphs ----------------------------
// Each case is built here byte by byte (a table, its blocks, the protos) so that its size is
// exact. CKPTFS_TF_MEMORY_CASES=DIR also writes the full-size cases the attack campaign
// reported into DIR (for `/usr/bin/time -v ckptfs inspect DIR/<case>`).

void PutVarint(std::string& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out += static_cast<char>((v & 0x7f) | 0x80);
  out += static_cast<char>(v);
}

std::string VarintField(uint32_t number, uint64_t v) {
  std::string out;
  PutVarint(out, uint64_t{number} << 3);
  PutVarint(out, v);
  return out;
}

std::string BytesField(uint32_t number, std::string_view bytes) {
  std::string out;
  PutVarint(out, (uint64_t{number} << 3) | 2);
  PutVarint(out, bytes.size());
  out += bytes;
  return out;
}

std::string Le32(uint32_t v) {
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(v >> (8 * i));
  return out;
}

// One entry of a block: `shared` bytes of the previous key, then `suffix`.
struct RawEntry {
  uint32_t shared = 0;
  std::string suffix;
  std::string value;
};

// A block's contents: the entries, a restart point at the first only, the count.
std::string BlockOf(const std::vector<RawEntry>& entries) {
  std::string out;
  for (const RawEntry& e : entries) {
    PutVarint(out, e.shared);
    PutVarint(out, e.suffix.size());
    PutVarint(out, e.value.size());
    out += e.suffix;
    out += e.value;
  }
  return out + Le32(0) + Le32(1);
}

struct RawBlock {
  std::string contents;
  std::string last_key;
  bool snappy = false;
};

// A whole table: the data blocks (snappy-compressed where asked), an empty metaindex, an
// index block with a separator (the last key) per data block, the footer.
std::string TableOf(const std::vector<RawBlock>& blocks) {
  std::string out;
  auto emit = [&](std::string_view contents, bool snappy) {
    std::string stored(contents);
    if (snappy) {
      size_t n = snappy_max_compressed_length(contents.size());
      stored.assign(n, '\0');
      EXPECT_EQ(snappy_compress(contents.data(), contents.size(), stored.data(), &n), SNAPPY_OK);
      stored.resize(n);
    }
    std::string handle;
    PutVarint(handle, out.size());
    PutVarint(handle, stored.size());
    const char type = snappy ? 1 : 0;
    out += stored;
    out += type;
    out += Le32(MaskCrc(Crc32cExtend(Crc32c(stored), std::string_view(&type, 1))));
    return handle;
  };
  std::string index;
  std::vector<uint32_t> restarts;
  for (const RawBlock& b : blocks) {
    restarts.push_back(static_cast<uint32_t>(index.size()));
    const std::string handle = emit(b.contents, b.snappy);
    PutVarint(index, 0);
    PutVarint(index, b.last_key.size());
    PutVarint(index, handle.size());
    index += b.last_key + handle;
  }
  for (uint32_t r : restarts) index += Le32(r);
  index += Le32(static_cast<uint32_t>(restarts.size()));
  std::string footer = emit(Le32(0) + Le32(1), false);
  footer += emit(index, false);
  footer.resize(40, '\0');
  for (int i = 0; i < 8; ++i) footer += static_cast<char>(kSstMagic >> (8 * i));
  return out + footer;
}

std::string HeaderValue() { return VarintField(1, 1) + BytesField(3, VarintField(1, 1)); }

std::string ShapeValue(std::initializer_list<uint64_t> dims) {
  std::string shape;
  for (uint64_t d : dims) shape += BytesField(2, VarintField(1, d));
  return BytesField(2, shape);
}

// A scalar F32 at offset 0 whose entry carries `padding` zero bytes in an unknown field
// (protobuf skips it): TF would never write it, but it is a valid entry.
std::string PaddedEntry(uint64_t padding) {
  return VarintField(1, 1) + VarintField(5, 4) + BytesField(15, std::string(padding, '\0'));
}

// `blocks` snappy blocks, each one entry that decodes to about `block_bytes`.
std::string SnappyBombIndex(int blocks, uint64_t block_bytes) {
  std::vector<RawBlock> raw;
  raw.push_back({BlockOf({{0, "", HeaderValue()}}), "", false});
  for (int i = 0; i < blocks; ++i) {
    const std::string key = "t" + std::to_string(100 + i);
    raw.push_back({BlockOf({{0, key, PaddedEntry(block_bytes - 64)}}), key, true});
  }
  return TableOf(raw);
}

// `n` entries in one block whose keys grow by a byte each: "a", "aa", "aaa", ... (4 stored
// bytes an entry, n * n / 2 bytes of keys).
std::string GrowingKeysIndex(uint32_t n) {
  std::vector<RawEntry> entries = {{0, "", HeaderValue()}};
  for (uint32_t i = 0; i < n; ++i) entries.push_back({i, "a", ""});
  return TableOf({{BlockOf(entries), std::string(n, 'a'), false}});
}

// `n` entries of one unknown dtype (skipped, listed in metadata.json), 6 stored bytes each.
std::string TinyEntriesIndex(uint32_t n) {
  std::vector<RawEntry> entries = {{0, "", HeaderValue()}};
  for (uint32_t i = 0; i < n; ++i) {
    std::string key(3, '\0');
    key[0] = static_cast<char>('a' + (i >> 16));
    key[1] = static_cast<char>((i >> 8) & 0xff);
    key[2] = static_cast<char>(i & 0xff);
    entries.push_back({0, key, ""});
  }
  return TableOf({{BlockOf(entries), entries.back().suffix, false}});
}

// A bundle of one DT_STRING tensor `key` of shape `dims` holding `strings`, as TF stores it.
void WriteStringBundle(const fs::path& dir, const std::string& key,
                       std::initializer_list<uint64_t> dims, uint64_t count,
                       std::string_view each) {
  fs::create_directories(dir);
  std::string lengths;
  uint32_t crc = 0;
  for (uint64_t i = 0; i < count; ++i) {
    PutVarint(lengths, each.size());
    crc = Crc32cExtend(crc, Le32(static_cast<uint32_t>(each.size())));
  }
  std::string data = lengths + Le32(MaskCrc(crc));
  for (uint64_t i = 0; i < count; ++i) data += each;
  const std::string entry = VarintField(1, 7) + ShapeValue(dims) + VarintField(5, data.size());
  std::ofstream(dir / "ckpt.index", std::ios::binary)
      << TableOf({{BlockOf({{0, "", HeaderValue()}, {0, key, entry}}), key, false}});
  std::ofstream(dir / "ckpt.data-00000-of-00001", std::ios::binary) << data;
}

// An object graph of `n` nodes, each with no fields (2 bytes a node).
std::string EmptyNodesGraph(uint64_t n) {
  std::string graph;
  for (uint64_t i = 0; i < n; ++i) graph += BytesField(1, "");
  return graph;
}

using testing::PeakRssKib;
using testing::ResetPeakRss;

// Writes the campaign's full-size cases into $CKPTFS_TF_MEMORY_CASES, if set.
TEST(TfMemoryTest, WriteCampaignCasesWhenAsked) {
  const char* dir = std::getenv("CKPTFS_TF_MEMORY_CASES");
  if (!dir) GTEST_SKIP() << "CKPTFS_TF_MEMORY_CASES not set: no cases to write";
  const fs::path out(dir);
  fs::create_directories(out / "snappy_bomb");
  std::ofstream(out / "snappy_bomb" / "ckpt.index", std::ios::binary)
      << SnappyBombIndex(8, 60u << 20);
  std::ofstream(out / "snappy_bomb" / "ckpt.data-00000-of-00001", std::ios::binary)
      << std::string(4, '\0');
  WriteStringBundle(out / "empty_strings", "s", {1000000}, 1000000, "");
  const std::string graph = EmptyNodesGraph(300000);
  WriteStringBundle(out / "graph_nodes", std::string(kObjectGraphKey), {}, 1, graph);
  fs::create_directories(out / "growing_keys");
  std::ofstream(out / "growing_keys" / "ckpt.index", std::ios::binary) << GrowingKeysIndex(200000);
  std::ofstream(out / "growing_keys" / "ckpt.data-00000-of-00001", std::ios::binary) << "";
  fs::create_directories(out / "tiny_entries");
  std::ofstream(out / "tiny_entries" / "ckpt.index", std::ios::binary) << TinyEntriesIndex(2000000);
  std::ofstream(out / "tiny_entries" / "ckpt.data-00000-of-00001", std::ios::binary) << "";
}

// Snappy blocks that decode to far more than they store: only one decoded block is held
// at a time (the campaign's 23 MiB index held all of them: 514 MiB).
TEST(TfMemoryTest, SnappyBlocksAreHeldOneAtATime) {
  constexpr uint64_t kBlock = 16u << 20;
  const std::string bytes = SnappyBombIndex(6, kBlock);
  ASSERT_LT(bytes.size(), 6 * kBlock / 16) << "snappy should shrink the zeros ~21x";
  MetadataBudget budget("bomb.index");
  budget.AddStored(bytes.size());
  ResetPeakRss();
  const long before = PeakRssKib();
  auto bundle = ParseTensorBundle(bytes, "bomb.index", budget);
  const long grown = PeakRssKib() - before;
  ASSERT_TRUE(bundle.ok()) << bundle.status().message();
  EXPECT_EQ(bundle->tensors.size(), 6u);
  EXPECT_EQ(bundle->snappy_blocks, 6u);
  std::cout << "6 snappy blocks of 16 MiB from " << bytes.size() << " bytes: charged peak "
            << budget.peak() << ", peak RSS +" << grown / 1024 << " MiB\n";
  EXPECT_LT(budget.peak(), kBlock + (1u << 20));
  EXPECT_LT(grown, 2 * static_cast<long>(kBlock >> 10));  // not 6 blocks (96 MiB)
}

// Prefix compression lets 4 stored bytes make a key as long as the previous one plus one:
// n entries hold n*n/2 bytes of keys (200k entries, 0.8 MB: 20 GB). Refused, at once.
TEST(TfMemoryTest, KeysThatGrowByPrefixAreRefusedAtTheLimit) {
  const std::string bytes = GrowingKeysIndex(200000);
  ResetPeakRss();
  const long before = PeakRssKib();
  const auto start = std::chrono::steady_clock::now();
  auto bundle = ParseTensorBundle(bytes, "keys.index");
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(bundle.ok());
  const std::string& msg = bundle.status().message();
  std::cout << msg << " (" << secs << " s, peak RSS +" << (PeakRssKib() - before) / 1024
            << " MiB)\n";
  EXPECT_EQ(msg.rfind("keys.index: metadata would take more than ", 0), 0u) << msg;
  EXPECT_NE(msg.find("32 times its " + std::to_string(bytes.size()) + " bytes plus 64 MiB"),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  EXPECT_LT(secs, 2.0);
  // The parse's peak stays within its limit (plus a few MiB of the test's own).
  EXPECT_LT(PeakRssKib() - before,
            static_cast<long>(MetadataBudget(bytes.size()).limit() >> 10) + 8 * 1024);
}

// Many tiny entries: the budget counts every parsed entry; a small one refuses them, the
// default takes them (2 MiB of index: under 32 x + 64 MiB).
TEST(TfMemoryTest, TinyEntriesCountedAgainstTheBudget) {
  const std::string bytes = TinyEntriesIndex(300000);
  MetadataBudget small("tiny.index", 0, 1u << 20);
  small.AddStored(bytes.size());
  auto refused = ParseTensorBundle(bytes, "tiny.index", small);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("tiny.index: metadata would take more than"),
            std::string::npos)
      << refused.status().message();
  MetadataBudget budget("tiny.index");
  budget.AddStored(bytes.size());
  auto bundle = ParseTensorBundle(bytes, "tiny.index", budget);
  ASSERT_TRUE(bundle.ok()) << bundle.status().message();
  EXPECT_EQ(bundle->tensors.size(), 300000u);
  EXPECT_LE(budget.used(), budget.limit());
  EXPECT_GE(budget.used(), 300000 * 2 * sizeof(TfTensor)) << "every entry is charged";
}

// An entry that lists more slices than the table has slice entries is refused before its
// slices are decoded (each would be a vector).
TEST(TfMemoryTest, MoreSlicesThanSliceEntriesRefused) {
  std::string value = VarintField(1, 1) + ShapeValue({4});
  for (int i = 0; i < 100000; ++i) value += BytesField(7, "");
  const std::string bytes =
      TableOf({{BlockOf({{0, "", HeaderValue()}, {0, "p", value}}), "p", false}});
  auto bundle = ParseTensorBundle(bytes, "slices.index");
  ASSERT_FALSE(bundle.ok());
  EXPECT_NE(bundle.status().message().find("\"p\": more than 0 slices"), std::string::npos)
      << bundle.status().message();
}

// 1M empty strings (1 MB stored): metadata.json lists them all, and the reader's peak is a
// few bytes a string (the campaign saw 180 MiB: a JSON value and a std::string each).
TEST(TfMemoryTest, MillionEmptyStringsCostTheirText) {
  const fs::path dir = kScratch.dir / "empty_strings";
  WriteStringBundle(dir, "s", {1000000}, 1000000, "");
  ResetPeakRss();
  const long before = PeakRssKib();
  auto ckpt = OpenCheckpoint((dir / "ckpt").string(), testing::TestContext());
  const long grown = PeakRssKib() - before;
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  std::cout << "1M empty strings: peak RSS +" << grown / 1024 << " MiB, state_json "
            << ckpt->state_json.size() << " bytes\n";
  const auto meta = nlohmann::json::parse(ckpt->state_json);
  ASSERT_EQ(meta["strings"]["s"]["value"].size(), 1000000u);
  EXPECT_EQ(meta["strings"]["s"]["value"][999999], "");
  EXPECT_EQ(meta["strings"]["s"]["shape"], nlohmann::json::array({1000000}));
  EXPECT_LT(grown, 24 * 1024);
}

// 300k empty object-graph nodes (0.6 MB): written as text, no JSON tree (303 MiB before).
TEST(TfMemoryTest, ObjectGraphNodesCostTheirText) {
  const fs::path dir = kScratch.dir / "graph_nodes";
  WriteStringBundle(dir, std::string(kObjectGraphKey), {}, 1, EmptyNodesGraph(300000));
  ResetPeakRss();
  const long before = PeakRssKib();
  auto ckpt = OpenCheckpoint((dir / "ckpt").string(), testing::TestContext());
  const long grown = PeakRssKib() - before;
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  std::cout << "300k object-graph nodes: peak RSS +" << grown / 1024 << " MiB, state_json "
            << ckpt->state_json.size() << " bytes\n";
  const auto meta = nlohmann::json::parse(ckpt->state_json);
  ASSERT_EQ(meta["object_graph"]["nodes"].size(), 300000u);
  EXPECT_EQ(meta["object_graph"]["nodes"][299999]["id"], 299999);
  EXPECT_LT(grown, 80 * 1024);
}

// metadata.json is state_json laid out as dump(2) would, without parsing it into a tree:
// the same bytes, for TF's text and for nlohmann-written JSON with every kind of token
// (what every format's state_json is).
TEST(TfMemoryTest, MetadataJsonLaidOutWithoutParsing) {
  auto standard = OpenCheckpoint(Generated("standard").string(), testing::TestContext());
  ASSERT_TRUE(standard.ok()) << standard.status().message();
  const std::vector<std::string> texts = {
      standard->state_json,
      R"({"a":[],"b":{},"c":[1,-2.5e-07,true,false,null,"x\"y\\",{"d":[[],[{}],[[1]]]}],)"
      R"("e":"\u0001é","f:,{[":"]}"})",
      R"([])",
      R"("scalar")",
      R"({ "spaced" : [ 1 , 2 ] , "x" : { } })",
  };
  for (const std::string& text : texts) {
    Checkpoint ckpt;
    ckpt.format = FormatNamed("tensorflow");
    ckpt.state_json = text;
    EXPECT_EQ(MetadataJson(ckpt), nlohmann::ordered_json::parse(text).dump(2) + "\n") << text;
  }
  Checkpoint empty;
  empty.format = FormatNamed("torch");
  EXPECT_EQ(MetadataJson(empty), "{}\n");
}

// Real-shaped bundles sit far below the bound: 50k variables, and every real fixture.
TEST(TfMemoryTest, NormalBundlesWellUnderTheBound) {
  const std::string bytes = ReadFile(Generated("many") / "ckpt-1.index");
  MetadataBudget budget("ckpt-1.index");
  budget.AddStored(bytes.size());
  auto bundle = ParseTensorBundle(bytes, "ckpt-1.index", budget);
  ASSERT_TRUE(bundle.ok()) << bundle.status().message();
  const double ratio = static_cast<double>(budget.peak()) / static_cast<double>(bytes.size());
  std::cout << "50k variables: parse charged " << budget.peak() << " bytes, " << ratio
            << " x the index's " << bytes.size() << "\n";
  EXPECT_LT(ratio, 8.0);
  auto ckpt = OpenCheckpoint(Generated("many").string(), testing::TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_EQ(ckpt->tensors.size(), 50000u);
}

// --- real TensorFlow-written files -----------------------------------------------------------

const fs::path kFixtures = fs::path(CKPTFS_SOURCE_DIR) / ".." / "shared" / "fixtures" / "tf";

TEST(TfFixturesTest, EveryRealIndexParsesAndEveryCrcVerifies) {
  if (!fs::exists(kFixtures)) GTEST_SKIP() << "no " << kFixtures << ": real TF fixtures absent";
  size_t indexes = 0, snappy = 0, tensors = 0, graphs = 0;
  for (const auto& entry : fs::recursive_directory_iterator(kFixtures)) {
    if (entry.path().extension() != ".index") continue;
    ++indexes;
    const fs::path prefix = entry.path().parent_path() / entry.path().stem();
    auto o = Open(prefix);
    ASSERT_TRUE(o.ok()) << o.status().message();
    snappy += o->bundle.snappy_blocks > 0;
    tensors += VerifyAllCrcs(*o);
    EXPECT_TRUE(CheckSstableBlocks(ReadFile(entry.path()), "i").empty()) << entry.path();
    for (const TfTensor& t : o->bundle.tensors) {
      if (t.key != kObjectGraphKey) continue;
      auto s = DecodeStringTensor(StoredBytes(*o, t.where), 1, t.where, t.key);
      ASSERT_TRUE(s.ok()) << s.status().message();
      auto graph = ObjectGraphToJson(s->at(0), t.key);
      ASSERT_TRUE(graph.ok()) << graph.status().message();
      EXPECT_FALSE((*graph)["nodes"].empty());
      ++graphs;
    }
  }
  std::cout << indexes << " real indexes (" << snappy << " with snappy blocks), " << tensors
            << " tensor CRCs verified, " << graphs << " object graphs\n";
  EXPECT_GE(indexes, 10u);
  EXPECT_GT(snappy, 0u);
  EXPECT_GT(graphs, 0u);
}

TEST(TfFixturesTest, CheckpointFilesNameAPrefixInsideTheirDirectory) {
  if (!fs::exists(kFixtures)) GTEST_SKIP() << "no " << kFixtures << ": real TF fixtures absent";
  size_t files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(kFixtures)) {
    if (entry.path().filename() != "checkpoint" || !entry.is_regular_file()) continue;
    auto prefix = LatestCheckpointPrefix(ReadFile(entry.path()), entry.path().string());
    ASSERT_TRUE(prefix.ok()) << prefix.status().message();
    EXPECT_EQ(prefix->find('/'), std::string::npos) << *prefix;
    std::cout << entry.path().parent_path().filename().string() << "/checkpoint -> " << *prefix
              << "\n";
    ++files;
  }
  EXPECT_EQ(files, 2u);
}

// The reader (core/format/tf/tf_reader.cc) over the writer's standard bundle: keys kept
// beside tensors, a partitioned variable one storage of several stored ranges, and its
// tensors/ file one extent per range after the .npy header (nothing copied).
TEST(TfReaderTest, PartitionedTensorIsRangesOverTheDataFiles) {
  const fs::path dir = Generated("standard");
  auto ckpt = OpenCheckpoint(dir.string(), testing::TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_EQ(ckpt->format, FormatNamed("tensorflow"));
  ASSERT_EQ(TensorKeys(*ckpt).size(), ckpt->tensors.size());
  auto it = std::find_if(ckpt->tensors.begin(), ckpt->tensors.end(),
                         [](const Tensor& t) { return t.name == "part.axis1"; });
  ASSERT_NE(it, ckpt->tensors.end());
  EXPECT_EQ(TensorKeys(*ckpt)[static_cast<size_t>(it - ckpt->tensors.begin())], "part/axis1");
  const Storage& s = ckpt->storages[it->storage];
  ASSERT_GT(s.range_count, 1u) << "slices on axis 1 interleave rows";
  StoredRange one;
  uint64_t total = 0;
  for (const StoredRange& r : RangesOf(*ckpt, *it, one)) total += r.size;
  EXPECT_EQ(total, 3u * 5u * 8u);
  EXPECT_EQ(it->size, total);

  Layout layout = Layout::Build(*ckpt);
  uint64_t ino = layout.Lookup(Layout::kRoot, "tensors");
  ino = layout.Lookup(ino, "part");
  ino = layout.Lookup(ino, "axis1.npy");
  ASSERT_NE(ino, 0u);
  size_t stored = 0;
  for (const Extent& e : layout.Extents(ino, 0, UINT64_MAX))
    stored += layout.Stored(e.source) ? 1 : 0;
  EXPECT_EQ(stored, s.range_count);
}

// Writes bundle DIR/ckpt with scripts/make_tf_checkpoint.py, `adds` being Python calls
// on its Bundle `b` ("b.add(b\"k\", \"F32\", [2]);"): keys no TF writer would write.
void WritePyBundle(const fs::path& dir, const std::string& adds) {
  const std::string cmd = "cd " CKPTFS_SOURCE_DIR
                          "/scripts && /usr/bin/python3 -c 'import make_tf_checkpoint as m; "
                          "b = m.Bundle(); " +
                          adds + " b.write(\"" + dir.string() + "\", \"ckpt\")'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

// Two keys that map to one name ("a/b" and "a..b" both to "a.b"): one line naming both.
TEST(TfReaderTest, TwoKeysOneNameRefusedNamingBoth) {
  const fs::path dir = kScratch.dir / "collide";
  ASSERT_NO_FATAL_FAILURE(
      WritePyBundle(dir, "b.add(b\"a/b\", \"F32\", [2]); b.add(b\"a..b\", \"F32\", [2]);"));
  auto ckpt = OpenCheckpoint((dir / "ckpt").string(), testing::TestContext());
  ASSERT_FALSE(ckpt.ok());
  const std::string& message = ckpt.status().message();
  EXPECT_NE(message.find("ckpt.index"), std::string::npos) << message;
  EXPECT_NE(message.find("\"a/b\""), std::string::npos) << message;
  EXPECT_NE(message.find("\"a..b\""), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

// A TF key is any bytes, but names become paths: a key holding NUL is refused as a
// safetensors or torch name holding one is (TensorNameProblem), naming the index.
TEST(TfReaderTest, KeyHoldingNulRefusedAsInEveryFormat) {
  const fs::path dir = kScratch.dir / "nul";
  ASSERT_NO_FATAL_FAILURE(
      WritePyBundle(dir, "b.add(b\"a\\x00b\", \"F32\", [2]); b.add(b\"c\", \"F32\", [2]);"));
  auto ckpt = OpenCheckpoint((dir / "ckpt").string(), testing::TestContext());
  ASSERT_FALSE(ckpt.ok());
  const std::string& message = ckpt.status().message();
  EXPECT_EQ(ckpt.status().code(), Status::Code::kCorruption);
  EXPECT_NE(message.find("ckpt.index: tensor \"a\\x00b\": it holds a NUL byte (names become "
                         "paths)"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

}  // namespace
}  // namespace ckptfs::tf
