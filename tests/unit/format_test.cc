#include <gtest/gtest.h>

#include "core/encoding/dtype.h"
#include "core/encoding/hf_index.h"
#include "core/encoding/npy.h"
#include "core/encoding/safetensors.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

using testing::MakeSafetensors;
using testing::RawSafetensors;

Result<SafetensorsHeader> Parse(const std::string& file) {
  MemorySource src("f.safetensors", file);
  return ReadSafetensorsHeader(src);
}

TEST(Dtype, NamesSizesAndNumpy) {
  EXPECT_EQ(ParseDtype("BF16"), Dtype::kBF16);
  EXPECT_EQ(DtypeSize(Dtype::kBF16), 2u);
  EXPECT_EQ(NumpyDescr(Dtype::kBF16), "");
  EXPECT_EQ(NumpyDescr(Dtype::kF32), "<f4");
  EXPECT_EQ(NumpyDescr(Dtype::kBool), "|b1");
  EXPECT_EQ(DtypeSize(Dtype::kI64), 8u);
  EXPECT_EQ(ParseDtype("F8_E4M3"), Dtype::kF8E4M3);
  EXPECT_FALSE(ParseDtype("f32").has_value());
  for (int i = 0; i <= static_cast<int>(Dtype::kU64); ++i) {
    auto d = static_cast<Dtype>(i);
    EXPECT_EQ(ParseDtype(DtypeName(d)), d);
  }
}

TEST(Npy, HeaderIsAlignedAndSpellsShape) {
  std::vector<uint64_t> shape = {3};
  std::string h = BuildNpyHeader(Dtype::kF32, shape);
  EXPECT_EQ(h.size() % 64, 0u);
  EXPECT_EQ(h.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_NE(h.find("'shape': (3,)"), std::string::npos);
  EXPECT_EQ(h.back(), '\n');
  const size_t len = static_cast<uint8_t>(h[8]) | (static_cast<uint8_t>(h[9]) << 8);
  EXPECT_EQ(len + 10, h.size());

  EXPECT_NE(BuildNpyHeader(Dtype::kI8, std::vector<uint64_t>{}).find("'shape': ()"),
            std::string::npos);
  EXPECT_NE(BuildNpyHeader(Dtype::kU8, std::vector<uint64_t>{2, 0, 5}).find("'shape': (2, 0, 5)"),
            std::string::npos);
}

TEST(Safetensors, RoundTrip) {
  std::string file =
      MakeSafetensors({{"b", Dtype::kF32, {2, 2}}, {"a", Dtype::kU8, {3}}}, {{"format", "pt"}});
  auto h = Parse(file);
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(h->data_start % 8, 0u);
  ASSERT_EQ(h->tensors.size(), 2u);
  EXPECT_EQ(h->tensors[0].name, "b");  // sorted by offset
  EXPECT_EQ(h->tensors[0].end, 16u);
  EXPECT_EQ(h->tensors[1].shape, std::vector<uint64_t>{3});
  ASSERT_EQ(h->metadata.size(), 1u);
  EXPECT_EQ(h->metadata[0].second, "pt");
}

TEST(Safetensors, EmptyAndZeroSizeTensors) {
  EXPECT_TRUE(Parse(MakeSafetensors({})).ok());
  auto h = Parse(MakeSafetensors({{"z", Dtype::kF32, {0, 4}}, {"s", Dtype::kI64, {}}}));
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(h->tensors.size(), 2u);
}

struct BadCase {
  const char* label;
  std::string file;
  const char* expect_in_message;
};

// Keeps ctest names readable: the label, not a byte dump.
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.label; }

class SafetensorsRejects : public ::testing::TestWithParam<BadCase> {};

TEST_P(SafetensorsRejects, WithMessageNamingFile) {
  auto h = Parse(GetParam().file);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().message().rfind("f.safetensors: ", 0), 0u) << h.status().message();
  EXPECT_NE(h.status().message().find(GetParam().expect_in_message), std::string::npos)
      << h.status().message();
}

std::string LengthOnly(uint64_t n) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out + "{}      ";
}

INSTANTIATE_TEST_SUITE_P(
    Hostile, SafetensorsRejects,
    ::testing::Values(
        BadCase{"TooShort", "abc", "too short"},
        BadCase{"HeaderPastEof", LengthOnly(4096), "past end of file"},
        BadCase{"HugeHeader", LengthOnly(200'000'000), "100 MB"},
        BadCase{"NotJson", RawSafetensors("{not json", 0), "not valid JSON"},
        BadCase{"NotObject", RawSafetensors("[1,2]", 0), "does not start with '{'"},
        BadCase{"UnknownDtype",
                RawSafetensors(R"({"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}})", 1),
                "unknown dtype"},
        BadCase{"ShapeMismatch",
                RawSafetensors(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
                "do not match"},
        BadCase{
            "ShapeOverflow",
            RawSafetensors(
                R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0),
            "do not match"},
        BadCase{"Overlap",
                RawSafetensors(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                               R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                               6),
                "overlaps"},
        BadCase{"Hole",
                RawSafetensors(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})", 8),
                "hole"},
        BadCase{"OutOfRange",
                RawSafetensors(R"({"a":{"dtype":"U8","shape":[64],"data_offsets":[0,64]}})", 8),
                "truncated"},
        BadCase{"TrailingBytes",
                RawSafetensors(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 9),
                "trailing bytes"},
        BadCase{"EndBeforeBegin",
                RawSafetensors(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", 4),
                "end before begin"},
        BadCase{
            "NulInName",
            RawSafetensors(R"({"a\u0000b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1),
            "NUL"},
        BadCase{"NegativeDim",
                RawSafetensors(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", 1),
                "not an array of non-negative integers"},
        BadCase{"MetadataNotString", RawSafetensors(R"({"__metadata__":{"k":1}})", 0),
                "not a string"}),
    [](const auto& param_info) { return std::string(param_info.param.label); });

TEST(HfIndex, ParsesAndDeduplicatesShards) {
  auto idx = ParseHfIndex(
      R"({"metadata":{"total_size":3},"weight_map":{"a":"s2","b":"s1","c":"s2"}})", "i.json");
  ASSERT_TRUE(idx.ok()) << idx.status().message();
  EXPECT_EQ(idx->weight_map.size(), 3u);
  EXPECT_EQ(idx->shard_files, (std::vector<std::string>{"s1", "s2"}));
}

TEST(HfIndex, RefusesPathTricksAndBadShapes) {
  for (const char* shard : {"../x.safetensors", "/etc/passwd", "a/b.safetensors", "..", "."}) {
    auto idx = ParseHfIndex(std::string(R"({"weight_map":{"a":")") + shard + "\"}}", "i.json");
    ASSERT_FALSE(idx.ok()) << shard;
    EXPECT_NE(idx.status().message().find("not a plain file name"), std::string::npos);
  }
  EXPECT_FALSE(ParseHfIndex("{", "i.json").ok());
  EXPECT_FALSE(ParseHfIndex(R"({"metadata":{}})", "i.json").ok());
  EXPECT_FALSE(ParseHfIndex(R"({"weight_map":{"a":1}})", "i.json").ok());
  EXPECT_EQ(ParseHfIndex("[]", "i.json").status().message(), "i.json: not a JSON object");
}

}  // namespace
}  // namespace ckptfs
