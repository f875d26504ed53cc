// gguf::ParseHeader, ReadHeader, GgmlTypeOf and BuildHeader over GGUF files built here by a
// small writer (valid ones of version 2 and 3, and hostile ones, each one defect away from
// a valid file), and over the files gguf-py wrote (../shared/fixtures/gguf, NOTICE.md,
// manifest.json; read in place, skipped when absent).
#include "core/format/gguf/gguf_file.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/source/byte_source.h"

namespace ckptfs::gguf {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

const std::string kShown = "models/tiny.gguf";

// ggml type codes (enum ggml_type).
constexpr uint32_t kTypeF32 = 0;
constexpr uint32_t kTypeF16 = 1;
constexpr uint32_t kTypeQ4_0 = 2;
constexpr uint32_t kTypeQ4_K = 12;

// ---- A GGUF writer: each piece as the bytes gguf-py's GGUFWriter gives it ----

std::string Le(uint64_t v, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}
std::string F32Bytes(float v) {
  uint32_t u = 0;
  std::memcpy(&u, &v, 4);
  return Le(u, 4);
}
std::string F64Bytes(double v) {
  uint64_t u = 0;
  std::memcpy(&u, &v, 8);
  return Le(u, 8);
}
// A GGUF string: u64 length, then the bytes.
std::string Str(std::string_view s) { return Le(s.size(), 8) + std::string(s); }
uint32_t Code(ValueType t) { return static_cast<uint32_t>(t); }

// A key-value record: key, u32 value type, value.
std::string Kv(std::string_view key, ValueType type, const std::string& value) {
  return Str(key) + Le(Code(type), 4) + value;
}
std::string KvU32(std::string_view key, uint32_t v) { return Kv(key, ValueType::kU32, Le(v, 4)); }
std::string KvStr(std::string_view key, std::string_view v) {
  return Kv(key, ValueType::kString, Str(v));
}
// An array record: u32 item type, u64 count, the items (`items` already encoded).
std::string KvArray(std::string_view key, ValueType item, uint64_t count,
                    const std::string& items) {
  return Kv(key, ValueType::kArray, Le(Code(item), 4) + Le(count, 8) + items);
}
// `n` strings "tok0", "tok1"... as array items.
std::string Strings(uint64_t n) {
  std::string out;
  for (uint64_t i = 0; i < n; ++i) out += Str("tok" + std::to_string(i));
  return out;
}

// A tensor info: name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset.
std::string Info(std::string_view name, const std::vector<uint64_t>& ne, uint32_t type,
                 uint64_t offset) {
  std::string out = Str(name) + Le(ne.size(), 4);
  for (uint64_t n : ne) out += Le(n, 8);
  return out + Le(type, 4) + Le(offset, 8);
}

struct File {
  std::string magic = "GGUF";
  uint32_t version = 3;
  std::vector<std::string> kv;       // records
  std::vector<std::string> tensors;  // infos
  std::optional<uint64_t> kv_count;  // as stored, when not kv.size()
  std::optional<uint64_t> tensor_count;
  uint64_t alignment = kDefaultAlignment;  // of the padding after the infos
  uint64_t data_bytes = 0;

  // Magic to the last tensor info.
  std::string Infos() const {
    std::string out = magic + Le(version, 4) + Le(tensor_count.value_or(tensors.size()), 8) +
                      Le(kv_count.value_or(kv.size()), 8);
    for (const std::string& r : kv) out += r;
    for (const std::string& t : tensors) out += t;
    return out;
  }
  uint64_t DataStart() const { return AlignUp(Infos().size(), alignment); }
  std::string Bytes() const {
    std::string out = Infos();
    out.resize(DataStart(), '\0');
    for (uint64_t i = 0; i < data_bytes; ++i) out += static_cast<char>(i * 7 + 1);
    return out;
  }
};

// One kv, one F32 tensor of 8 elements at offset 0: every hostile case below is one change
// away from it.
File Base() {
  File f;
  f.kv = {KvStr("general.architecture", "llama")};
  f.tensors = {Info("w", {8}, kTypeF32, 0)};
  f.data_bytes = 32;
  return f;
}

Result<std::optional<Header>> Parse(const std::string& bytes) {
  return ParseHeader(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
                     bytes.size(), kShown);
}

// The header of the whole file `bytes`, by ParseHeader and by ReadHeader (which must agree).
Header Parsed(const std::string& bytes) {
  auto h = Parse(bytes);
  EXPECT_TRUE(h.ok()) << h.status().message();
  if (!h.ok()) return {};
  EXPECT_TRUE(h->has_value()) << "the whole file, yet more asked for";
  if (!h->has_value()) return {};
  MemorySource source(kShown, bytes);
  auto read = ReadHeader(source, kShown);
  EXPECT_TRUE(read.ok()) << read.status().message();
  if (read.ok()) {
    EXPECT_EQ(read->data_start, (*h)->data_start);
    EXPECT_EQ(read->kv_bytes, (*h)->kv_bytes);
    EXPECT_EQ(read->tensors.size(), (*h)->tensors.size());
  }
  return **h;
}

// `bytes` (a whole file) is refused by ParseHeader and by ReadHeader, with a Corruption or
// Unsupported naming the file.
void ExpectRefused(const std::string& bytes, const std::string& what) {
  SCOPED_TRACE(what);
  const auto expect_status = [&](const Status& s) {
    EXPECT_FALSE(s.ok());
    EXPECT_TRUE(s.code() == Status::Code::kCorruption || s.code() == Status::Code::kUnsupported)
        << s.message();
    EXPECT_NE(s.message().find(kShown), std::string::npos) << s.message();
  };
  auto parsed = Parse(bytes);
  if (parsed.ok()) {
    ADD_FAILURE() << "ParseHeader accepted it"
                  << (parsed->has_value() ? "" : " (asked for more of a whole file)");
  } else {
    expect_status(parsed.status());
  }
  MemorySource source(kShown, bytes);
  auto read = ReadHeader(source, kShown);
  if (read.ok()) {
    ADD_FAILURE() << "ReadHeader accepted it";
  } else {
    expect_status(read.status());
  }
}

void ExpectParses(const std::string& bytes, const std::string& what) {
  SCOPED_TRACE(what);
  auto parsed = Parse(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_TRUE(parsed->has_value());
}

// ---- Valid files ----

struct Want {
  std::string key;
  ValueType type;
  json value;
};

// Every value type, in file order, with what KeyValue::value should hold.
std::vector<std::pair<std::string, Want>> AllKinds() {
  std::string bytes64;
  json listed64 = json::array();
  for (int i = 0; i < 64; ++i) {
    bytes64 += static_cast<char>(i);
    listed64.push_back(i);
  }
  return {
      {KvStr("general.architecture", "llama"),
       {"general.architecture", ValueType::kString, "llama"}},
      {Kv("t.u8", ValueType::kU8, Le(200, 1)), {"t.u8", ValueType::kU8, 200}},
      {Kv("t.i8", ValueType::kI8, Le(static_cast<uint8_t>(-5), 1)), {"t.i8", ValueType::kI8, -5}},
      {Kv("t.u16", ValueType::kU16, Le(60000, 2)), {"t.u16", ValueType::kU16, 60000}},
      {Kv("t.i16", ValueType::kI16, Le(static_cast<uint16_t>(-300), 2)),
       {"t.i16", ValueType::kI16, -300}},
      {KvU32("t.u32", 4000000000u), {"t.u32", ValueType::kU32, 4000000000u}},
      {Kv("t.i32", ValueType::kI32, Le(static_cast<uint32_t>(-70000), 4)),
       {"t.i32", ValueType::kI32, -70000}},
      {Kv("t.i32pos", ValueType::kI32, Le(7, 4)), {"t.i32pos", ValueType::kI32, 7}},
      {Kv("t.f32", ValueType::kF32, F32Bytes(0.25f)), {"t.f32", ValueType::kF32, 0.25}},
      {Kv("t.bool", ValueType::kBool, Le(1, 1)), {"t.bool", ValueType::kBool, true}},
      {Kv("t.u64", ValueType::kU64, Le(1ull << 40, 8)), {"t.u64", ValueType::kU64, 1ull << 40}},
      {Kv("t.i64", ValueType::kI64, Le(static_cast<uint64_t>(-(1ll << 40)), 8)),
       {"t.i64", ValueType::kI64, -(1ll << 40)}},
      {Kv("t.f64", ValueType::kF64, F64Bytes(-2.5)), {"t.f64", ValueType::kF64, -2.5}},
      {KvArray("t.ints", ValueType::kI32, 3,
               Le(1, 4) + Le(static_cast<uint32_t>(-2), 4) + Le(3, 4)),
       {"t.ints", ValueType::kArray, json::array({1, -2, 3})}},
      {KvArray("t.words", ValueType::kString, 2, Str("a") + Str("bc")),
       {"t.words", ValueType::kArray, json::array({"a", "bc"})}},
      {KvArray("t.empty", ValueType::kF32, 0, ""), {"t.empty", ValueType::kArray, json::array()}},
      {KvArray("t.bytes64", ValueType::kU8, 64, bytes64),
       {"t.bytes64", ValueType::kArray, listed64}},
      {KvArray("tokenizer.ggml.tokens", ValueType::kString, 65, Strings(65)),
       {"tokenizer.ggml.tokens", ValueType::kArray,
        json{{"type", "ARRAY[STRING]"}, {"length", 65}}}},
  };
}

// AllKinds' records and four tensors laid out as gguf_write_to_buf lays them out: F16,
// F32, Q4_0 (4 blocks of 18 bytes) and a scalar, each padded to 32.
File Valid(uint32_t version = 3) {
  File f;
  f.version = version;
  for (const auto& [record, want] : AllKinds()) f.kv.push_back(record);
  f.tensors = {Info("token_embd.weight", {8, 4}, kTypeF16, 0),  // 64 bytes
               Info("norm.weight", {8}, kTypeF32, 64),          // 32
               Info("ffn.weight", {64, 2}, kTypeQ4_0, 96),      // 72
               Info("scale", {}, kTypeF32, 192)};               // 4
  f.data_bytes = 224;
  return f;
}

void ExpectValidTensors(const Header& h) {
  ASSERT_EQ(h.tensors.size(), 4u);
  const TensorInfo& embd = h.tensors[0];
  EXPECT_EQ(embd.name, "token_embd.weight");
  EXPECT_EQ(embd.ne, (std::vector<uint64_t>{8, 4}));
  ASSERT_NE(embd.type, nullptr);
  EXPECT_EQ(embd.type->name, "F16");
  EXPECT_EQ(embd.offset, 0u);
  EXPECT_EQ(embd.bytes, 64u);
  EXPECT_EQ(NumpyShape(embd), (std::vector<uint64_t>{4, 8}));
  EXPECT_EQ(h.tensors[1].name, "norm.weight");
  ASSERT_NE(h.tensors[1].type, nullptr);
  EXPECT_EQ(h.tensors[1].type->name, "F32");
  EXPECT_EQ(h.tensors[1].offset, 64u);
  EXPECT_EQ(h.tensors[1].bytes, 32u);
  const TensorInfo& ffn = h.tensors[2];
  EXPECT_EQ(ffn.ne, (std::vector<uint64_t>{64, 2}));
  ASSERT_NE(ffn.type, nullptr);
  EXPECT_EQ(ffn.type->name, "Q4_0");
  EXPECT_EQ(ffn.offset, 96u);
  EXPECT_EQ(ffn.bytes, 72u);
  const TensorInfo& scale = h.tensors[3];  // n_dims 0: one element
  EXPECT_TRUE(scale.ne.empty());
  EXPECT_EQ(scale.offset, 192u);
  EXPECT_EQ(scale.bytes, 4u);
  EXPECT_TRUE(NumpyShape(scale).empty());
}

TEST(GgufFileTest, ParsesEveryValueTypeAndTensor) {
  const File f = Valid();
  const Header h = Parsed(f.Bytes());
  EXPECT_EQ(h.version, 3u);
  EXPECT_EQ(h.alignment, 32u);
  EXPECT_EQ(h.data_start, f.DataStart());
  EXPECT_EQ(h.data_start % 32, 0u);
  const auto kinds = AllKinds();
  ASSERT_EQ(h.kv.size(), kinds.size());
  std::string records;
  for (size_t i = 0; i < kinds.size(); ++i) {
    const auto& [record, want] = kinds[i];
    const KeyValue& kv = h.kv[i];
    SCOPED_TRACE(want.key);
    EXPECT_EQ(kv.key, want.key);
    EXPECT_EQ(kv.type, want.type);
    EXPECT_EQ(kv.value, want.value) << kv.value.dump();
    ASSERT_LE(kv.begin, kv.end);
    ASSERT_LE(kv.end, h.kv_bytes.size());
    EXPECT_EQ(h.kv_bytes.substr(kv.begin, kv.end - kv.begin), record);
    records += record;
  }
  EXPECT_EQ(h.kv_bytes, records);
  const KeyValue* tokens = h.Find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->item_type, ValueType::kString);
  EXPECT_EQ(tokens->count, 65u);
  EXPECT_EQ(tokens->value["type"], "ARRAY[STRING]");
  EXPECT_EQ(tokens->value["length"], 65);
  EXPECT_EQ(h.Find("t.ints")->item_type, ValueType::kI32);
  EXPECT_EQ(h.Find("t.ints")->count, 3u);
  EXPECT_EQ(h.Find("t.bytes64")->count, 64u);
  ExpectValidTensors(h);
}

TEST(GgufFileTest, FindUnsignedString) {
  const Header h = Parsed(Valid().Bytes());
  EXPECT_EQ(h.Find("absent"), nullptr);
  EXPECT_EQ(h.Unsigned("t.u8"), 200u);
  EXPECT_EQ(h.Unsigned("t.u16"), 60000u);
  EXPECT_EQ(h.Unsigned("t.u32"), 4000000000u);
  EXPECT_EQ(h.Unsigned("t.u64"), 1ull << 40);
  EXPECT_EQ(h.Unsigned("t.i32pos"), 7u);
  EXPECT_EQ(h.Unsigned("t.i8"), std::nullopt);  // negative
  EXPECT_EQ(h.Unsigned("t.i64"), std::nullopt);
  EXPECT_EQ(h.Unsigned("t.f32"), std::nullopt);
  EXPECT_EQ(h.Unsigned("general.architecture"), std::nullopt);
  EXPECT_EQ(h.Unsigned("absent"), std::nullopt);
  EXPECT_EQ(h.String("general.architecture"), "llama");
  EXPECT_EQ(h.String("t.u8"), std::nullopt);
  EXPECT_EQ(h.String("absent"), std::nullopt);
}

TEST(GgufFileTest, ValueTypeNames) {
  EXPECT_EQ(ValueTypeName(ValueType::kU8), "UINT8");
  EXPECT_EQ(ValueTypeName(ValueType::kI16), "INT16");
  EXPECT_EQ(ValueTypeName(ValueType::kU32), "UINT32");
  EXPECT_EQ(ValueTypeName(ValueType::kF32), "FLOAT32");
  EXPECT_EQ(ValueTypeName(ValueType::kBool), "BOOL");
  EXPECT_EQ(ValueTypeName(ValueType::kString), "STRING");
  EXPECT_EQ(ValueTypeName(ValueType::kArray), "ARRAY");
  EXPECT_EQ(ValueTypeName(ValueType::kI64), "INT64");
  EXPECT_EQ(ValueTypeName(ValueType::kF64), "FLOAT64");
}

TEST(GgufFileTest, VersionTwoAccepted) {
  const Header h = Parsed(Valid(2).Bytes());
  EXPECT_EQ(h.version, 2u);
  EXPECT_EQ(h.kv.size(), AllKinds().size());
  ExpectValidTensors(h);
}

TEST(GgufFileTest, GeneralAlignmentHonoured) {
  File f;
  f.kv = {KvStr("general.architecture", "llama"), KvU32("general.alignment", 64)};
  f.tensors = {Info("a", {4}, kTypeF32, 0), Info("b", {4}, kTypeF32, 64)};
  f.alignment = 64;
  f.data_bytes = 80;
  const Header h = Parsed(f.Bytes());
  EXPECT_EQ(h.alignment, 64u);
  EXPECT_EQ(h.data_start, f.DataStart());
  EXPECT_EQ(h.data_start % 64, 0u);
  EXPECT_NE(f.Infos().size() % 64, 0u);  // padding was needed
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[1].offset, 64u);
  // Offsets aligned to 32 but not 64 are refused under 64.
  f.tensors[1] = Info("b", {4}, kTypeF32, 32);
  ExpectRefused(f.Bytes(), "offset 32 under alignment 64");
  // Without the key, 32.
  const Header base = Parsed(Base().Bytes());
  EXPECT_EQ(base.alignment, kDefaultAlignment);
  EXPECT_EQ(base.data_start, Base().DataStart());
}

// Tensors need not be in offset order, nor tight: aligned, inside and disjoint is enough.
TEST(GgufFileTest, TensorsInAnyOrderWithGaps) {
  File f = Base();
  f.tensors = {Info("late", {8}, kTypeF32, 96), Info("early", {8}, kTypeF32, 0)};
  f.data_bytes = 128;
  const Header h = Parsed(f.Bytes());
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[0].offset, 96u);
  EXPECT_EQ(h.tensors[1].offset, 0u);
}

// ---- Reading the header in pieces ----

TEST(GgufFileTest, ShortPrefixAsksForMore) {
  const std::string bytes = Valid().Bytes();
  const size_t infos = Valid().Infos().size();
  const uint64_t data_start = Valid().DataStart();
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  for (size_t n = 0; n <= bytes.size(); ++n) {
    auto h = ParseHeader(std::span(data, n), bytes.size(), kShown);
    ASSERT_TRUE(h.ok()) << n << ": " << h.status().message();
    if (n < infos) {
      EXPECT_FALSE(h->has_value()) << n;
    } else if (n >= data_start) {
      ASSERT_TRUE(h->has_value()) << n;
      EXPECT_EQ((*h)->data_start, data_start);
      EXPECT_EQ((*h)->tensors.size(), 4u);
    }
  }
}

TEST(GgufFileTest, TruncatedFileRefused) {
  const std::string bytes = Valid().Bytes();
  for (size_t n : {size_t{0}, size_t{3}, size_t{8}, size_t{23}, size_t{24}, size_t{100},
                   Valid().Infos().size() - 1}) {
    ExpectRefused(bytes.substr(0, n), "cut at " + std::to_string(n));
  }
  // The header is whole but the data is not.
  ExpectRefused(bytes.substr(0, bytes.size() - 30), "data cut");
}

// A header of a few MB (a vocabulary, as real models have) is read whole, however much
// ReadHeader reads first.
TEST(GgufFileTest, ReadHeaderReadsAsMuchAsTheHeaderNeeds) {
  File f = Base();
  constexpr uint64_t kTokens = 200000;
  f.kv.push_back(KvArray("tokenizer.ggml.tokens", ValueType::kString, kTokens, Strings(kTokens)));
  f.kv.push_back(KvU32("after.tokens", 7));
  const std::string bytes = f.Bytes();
  ASSERT_GT(bytes.size(), 3u << 20);
  MemorySource source(kShown, bytes);
  auto h = ReadHeader(source, kShown);
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(h->data_start, f.DataStart());
  ASSERT_EQ(h->kv.size(), 3u);
  EXPECT_EQ(h->kv[1].count, kTokens);
  EXPECT_EQ(h->kv[1].value["length"], kTokens);
  EXPECT_EQ(h->Unsigned("after.tokens"), 7u);
  ASSERT_EQ(h->tensors.size(), 1u);
  EXPECT_EQ(h->tensors[0].name, "w");
}

// ---- Hostile files: each refused with a message naming the file, never a crash ----

TEST(GgufFileTest, BaseIsValid) { ExpectParses(Base().Bytes(), "base"); }

TEST(GgufFileTest, RefusesBadMagicAndByteOrder) {
  for (const char* magic : {"GGML", "FUGG", "GGUf", "\0\0\0\0"}) {
    File f = Base();
    f.magic = std::string(magic, 4);
    ExpectRefused(f.Bytes(), "magic " + f.magic);
  }
  // Version 3 or 2 written big-endian: the low 16 bits are 0.
  for (uint32_t version : {0x03000000u, 0x02000000u, 0x00030000u}) {
    File f = Base();
    f.version = version;
    ExpectRefused(f.Bytes(), "version " + std::to_string(version));
  }
}

TEST(GgufFileTest, RefusesOtherVersions) {
  for (uint32_t version : {0u, 1u, 4u, 0xffffffffu}) {
    File f = Base();
    f.version = version;
    ExpectRefused(f.Bytes(), "version " + std::to_string(version));
  }
}

TEST(GgufFileTest, RefusesCountsPastTheFile) {
  for (uint64_t count :
       {uint64_t{1000}, uint64_t{1} << 32, uint64_t{1} << 40, uint64_t{1} << 63, UINT64_MAX}) {
    File f = Base();
    f.tensor_count = count;
    f.data_bytes = 0;
    f.tensors.clear();
    ExpectRefused(f.Bytes(), "tensor_count " + std::to_string(count) + ", no tensor");
    f = Base();
    f.kv_count = count;
    f.data_bytes = 0;
    f.tensors.clear();
    ExpectRefused(f.Bytes(), "kv_count " + std::to_string(count) + ", one kv");
  }
}

TEST(GgufFileTest, RefusesStringLengths) {
  const std::string base = Base().Bytes();
  // The key's length is the 8 bytes after the 24-byte fixed header.
  for (uint64_t length :
       {uint64_t{base.size()}, uint64_t{1} << 32, uint64_t{1} << 63, UINT64_MAX, UINT64_MAX - 7}) {
    std::string bytes = base;
    bytes.replace(24, 8, Le(length, 8));
    ExpectRefused(bytes, "key length " + std::to_string(length));
  }
  for (uint64_t length : {uint64_t{1000}, uint64_t{1} << 63}) {
    File f = Base();
    f.kv = {KvStr("general.architecture", "llama"),
            Kv("s", ValueType::kString, Le(length, 8) + "abc")};
    ExpectRefused(f.Bytes(), "string value length " + std::to_string(length));
    f = Base();
    f.kv.push_back(KvArray("a", ValueType::kString, 2, Str("x") + Le(length, 8) + "abc"));
    ExpectRefused(f.Bytes(), "string item length " + std::to_string(length));
    f = Base();
    f.tensors = {Le(length, 8) + "w" + Info("", {8}, kTypeF32, 0).substr(8)};
    ExpectRefused(f.Bytes(), "tensor name length " + std::to_string(length));
  }
}

TEST(GgufFileTest, RefusesRepeatedKey) {
  File f = Base();
  f.kv.push_back(KvU32("a.key", 1));
  ExpectParses(f.Bytes(), "one a.key");
  f.kv.push_back(KvU32("a.key", 2));
  ExpectRefused(f.Bytes(), "a.key twice");
  f = Base();
  f.kv.push_back(KvStr("general.architecture", "llama"));
  ExpectRefused(f.Bytes(), "general.architecture twice, same value");
}

TEST(GgufFileTest, RefusesUnknownValueTypes) {
  for (uint32_t type : {13u, 100u, 0xffffffffu}) {
    File f = Base();
    f.kv.push_back(Str("k") + Le(type, 4) + Le(0, 8));
    ExpectRefused(f.Bytes(), "value type " + std::to_string(type));
    f = Base();
    f.kv.push_back(Kv("k", ValueType::kArray, Le(type, 4) + Le(1, 8) + Le(0, 8)));
    ExpectRefused(f.Bytes(), "array item type " + std::to_string(type));
  }
}

TEST(GgufFileTest, RefusesNestedArray) {
  File f = Base();
  const std::string inner = Le(Code(ValueType::kU8), 4) + Le(1, 8) + Le(5, 1);
  f.kv.push_back(KvArray("nested", ValueType::kArray, 1, inner));
  ExpectRefused(f.Bytes(), "array of arrays");
  f = Base();
  f.kv.push_back(KvArray("nested", ValueType::kArray, 0, ""));
  ExpectRefused(f.Bytes(), "empty array of arrays");
}

TEST(GgufFileTest, RefusesArrayCountPastTheFile) {
  struct Case {
    ValueType item;
    uint64_t count;
  };
  // 2^61 u64 items and 2^62 u32 items are 2^64 bytes: 0 when the product wraps.
  for (const Case& c :
       {Case{ValueType::kU8, 1000}, Case{ValueType::kU8, uint64_t{1} << 40},
        Case{ValueType::kU64, uint64_t{1} << 61}, Case{ValueType::kU32, uint64_t{1} << 62},
        Case{ValueType::kString, uint64_t{1} << 60}, Case{ValueType::kBool, UINT64_MAX}}) {
    File f = Base();
    f.kv.push_back(KvArray("a", c.item, c.count, Le(0, 8)));
    ExpectRefused(f.Bytes(),
                  std::string(ValueTypeName(c.item)) + " count " + std::to_string(c.count));
  }
}

TEST(GgufFileTest, RefusesBadGeneralAlignment) {
  const auto with = [](const std::string& record) {
    File f = Base();
    f.kv.push_back(record);
    return f.Bytes();
  };
  ExpectParses(with(KvU32("general.alignment", 32)), "u32 32");
  ExpectParses(with(KvU32("general.alignment", 16)), "u32 16");
  ExpectRefused(with(Kv("general.alignment", ValueType::kU64, Le(32, 8))), "u64 32");
  ExpectRefused(with(Kv("general.alignment", ValueType::kI32, Le(32, 4))), "i32 32");
  ExpectRefused(with(KvStr("general.alignment", "32")), "string");
  ExpectRefused(with(KvArray("general.alignment", ValueType::kU32, 1, Le(32, 4))), "array");
  for (uint32_t a : {0u, 3u, 48u, 0x80000001u}) {
    ExpectRefused(with(KvU32("general.alignment", a)), "u32 " + std::to_string(a));
  }
}

TEST(GgufFileTest, DimensionCounts) {
  File f = Base();
  f.tensors = {Info("scalar", {}, kTypeF32, 0)};
  const Header h = Parsed(f.Bytes());
  ASSERT_EQ(h.tensors.size(), 1u);
  EXPECT_EQ(h.tensors[0].bytes, 4u);  // n_dims 0: one element
  f.tensors = {Info("four", {2, 1, 2, 2}, kTypeF32, 0)};
  EXPECT_EQ(Parsed(f.Bytes()).tensors.at(0).bytes, 32u);
  f.tensors = {Info("five", {2, 1, 2, 2, 1}, kTypeF32, 0)};
  ExpectRefused(f.Bytes(), "n_dims 5");
  f.tensors = {Str("many") + Le(0x80000000u, 4) + Le(1, 8) + Le(0, 4) + Le(0, 8)};
  ExpectRefused(f.Bytes(), "n_dims 2^31");
}

TEST(GgufFileTest, RefusesOverflowingSizes) {
  // Elements 2^64 (0 when wrapped); bytes 2^64 (4 * 2^62); each dimension past int64.
  for (const std::vector<uint64_t>& ne :
       {std::vector<uint64_t>{1ull << 32, 1ull << 32}, std::vector<uint64_t>{1ull << 62},
        std::vector<uint64_t>{1ull << 63, 2}, std::vector<uint64_t>{2, 1ull << 63},
        std::vector<uint64_t>{1ull << 16, 1ull << 16, 1ull << 16, 1ull << 16},
        std::vector<uint64_t>{UINT64_MAX}}) {
    File f = Base();
    f.tensors = {Info("w", ne, kTypeF32, 0)};
    std::string what = "ne";
    for (uint64_t n : ne) what += " " + std::to_string(n);
    ExpectRefused(f.Bytes(), what);
  }
}

TEST(GgufFileTest, RefusesRowsNotWholeBlocks) {
  File f = Base();
  f.tensors = {Info("q", {32}, kTypeQ4_0, 0)};  // one block, 18 bytes
  EXPECT_EQ(Parsed(f.Bytes()).tensors.at(0).bytes, 18u);
  for (uint64_t ne0 : {16u, 48u, 1u}) {
    f.tensors = {Info("q", {ne0}, kTypeQ4_0, 0)};
    ExpectRefused(f.Bytes(), "Q4_0 ne0 " + std::to_string(ne0));
  }
  f.tensors = {Info("q", {16, 2}, kTypeQ4_0, 0)};  // 32 elements, but rows of 16
  ExpectRefused(f.Bytes(), "Q4_0 ne 16 2");
  f.tensors = {Info("k", {128}, kTypeQ4_K, 0)};
  f.data_bytes = 256;
  ExpectRefused(f.Bytes(), "Q4_K ne0 128");
}

TEST(GgufFileTest, RefusesUnknownGgmlTypes) {
  for (uint32_t type : {4u, 5u, 31u, 200u, 0xffffffffu}) {
    File f = Base();
    f.tensors = {Info("w", {8}, type, 0)};
    ExpectRefused(f.Bytes(), "ggml type " + std::to_string(type));
  }
}

TEST(GgufFileTest, RefusesUnalignedOffsets) {
  for (uint64_t offset : {4u, 16u, 33u}) {
    File f = Base();
    f.tensors = {Info("w", {4}, kTypeF32, offset)};
    f.data_bytes = 64;
    ExpectRefused(f.Bytes(), "offset " + std::to_string(offset));
  }
}

TEST(GgufFileTest, RefusesDataPastTheFile) {
  File f = Base();
  f.tensors = {Info("w", {8}, kTypeF32, 0)};
  f.data_bytes = 31;
  ExpectRefused(f.Bytes(), "one byte short");
  f.data_bytes = 32;
  ExpectParses(f.Bytes(), "exactly to the end");
  // Offsets far out, one whose end wraps to 0.
  for (uint64_t offset : {uint64_t{32}, uint64_t{1} << 40, uint64_t{1} << 63, UINT64_MAX - 31}) {
    f.tensors = {Info("w", {8}, kTypeF32, offset)};
    ExpectRefused(f.Bytes(), "offset " + std::to_string(offset));
  }
}

TEST(GgufFileTest, RefusesOverlappingData) {
  File f = Base();
  f.data_bytes = 128;
  f.tensors = {Info("a", {8}, kTypeF32, 0), Info("b", {8}, kTypeF32, 32)};
  ExpectParses(f.Bytes(), "adjacent");
  f.tensors = {Info("a", {8}, kTypeF32, 0), Info("b", {8}, kTypeF32, 0)};
  ExpectRefused(f.Bytes(), "same offset");
  f.tensors = {Info("a", {16}, kTypeF32, 0), Info("b", {8}, kTypeF32, 32)};
  ExpectRefused(f.Bytes(), "b inside a");
  f.tensors = {Info("a", {16}, kTypeF32, 32), Info("b", {16}, kTypeF32, 0)};
  ExpectRefused(f.Bytes(), "b before a, overlapping");
  f.tensors = {Info("a", {8}, kTypeF32, 0), Info("b", {8}, kTypeF32, 64),
               Info("c", {16}, kTypeF32, 32)};
  ExpectRefused(f.Bytes(), "c overlaps b, not its neighbour in the file");
  // A tensor of no bytes between two that overlap hides nothing.
  f.tensors = {Info("big", {32}, kTypeF32, 0), Info("empty", {0}, kTypeF32, 32),
               Info("c", {8}, kTypeF32, 64)};
  ExpectRefused(f.Bytes(), "big overlaps c, an empty tensor between them");
}

TEST(GgufFileTest, RefusesRepeatedTensorName) {
  File f = Base();
  f.data_bytes = 64;
  f.tensors = {Info("w", {8}, kTypeF32, 0), Info("v", {8}, kTypeF32, 32)};
  ExpectParses(f.Bytes(), "w, v");
  f.tensors = {Info("w", {8}, kTypeF32, 0), Info("w", {8}, kTypeF32, 32)};
  ExpectRefused(f.Bytes(), "w twice");
}

// ---- GgmlTypeOf ----

TEST(GgufFileTest, GgmlTypes) {
  struct Case {
    uint32_t code;
    std::string_view name;
    uint32_t block_elements;
    uint32_t block_bytes;
    std::optional<Dtype> dtype;
  };
  for (const Case& c : {Case{0, "F32", 1, 4, Dtype::kF32}, Case{1, "F16", 1, 2, Dtype::kF16},
                        Case{30, "BF16", 1, 2, Dtype::kBF16}, Case{2, "Q4_0", 32, 18, {}},
                        Case{8, "Q8_0", 32, 34, {}}, Case{12, "Q4_K", 256, 144, {}},
                        Case{14, "Q6_K", 256, 210, {}}, Case{23, "IQ4_XS", 256, 136, {}}}) {
    SCOPED_TRACE(c.name);
    const GgmlType* t = GgmlTypeOf(c.code);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->code, c.code);
    EXPECT_EQ(t->name, c.name);
    EXPECT_EQ(t->block_elements, c.block_elements);
    EXPECT_EQ(t->block_bytes, c.block_bytes);
    EXPECT_EQ(t->dtype, c.dtype);
  }
  EXPECT_EQ(GgmlTypeOf(2)->extension, "q4_0");
  EXPECT_EQ(GgmlTypeOf(0)->extension, "f32");
  for (uint32_t code : {4u, 5u, 31u, 1000u, 0xffffffffu}) {
    EXPECT_EQ(GgmlTypeOf(code), nullptr) << code;
  }
}

// ---- BuildHeader ----

// The header gguf_write_to_buf writes for `h`'s kv and tensors, tight.
std::string Rebuilt(const Header& h, std::vector<uint64_t>& offsets) {
  return BuildHeader(h.kv, h.kv_bytes, h.tensors, h.alignment, offsets);
}

std::vector<uint64_t> Offsets(const Header& h) {
  std::vector<uint64_t> out;
  for (const TensorInfo& t : h.tensors) out.push_back(t.offset);
  return out;
}

void ExpectSameTensors(const Header& a, const Header& b) {
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].name, b.tensors[i].name);
    EXPECT_EQ(a.tensors[i].ne, b.tensors[i].ne);
    EXPECT_EQ(a.tensors[i].type, b.tensors[i].type);
    EXPECT_EQ(a.tensors[i].bytes, b.tensors[i].bytes);
  }
}

TEST(GgufFileTest, BuildHeaderReproducesATightFile) {
  const std::string bytes = Valid().Bytes();
  const Header h = Parsed(bytes);
  std::vector<uint64_t> offsets;
  const std::string header = Rebuilt(h, offsets);
  EXPECT_EQ(header, bytes.substr(0, h.data_start));
  EXPECT_EQ(offsets, Offsets(h));
  const Header again = Parsed(header + bytes.substr(h.data_start));
  EXPECT_EQ(again.kv_bytes, h.kv_bytes);
  ASSERT_EQ(again.kv.size(), h.kv.size());
  for (size_t i = 0; i < h.kv.size(); ++i) {
    EXPECT_EQ(again.kv[i].key, h.kv[i].key);
    EXPECT_EQ(again.kv[i].value, h.kv[i].value);
  }
  ExpectSameTensors(again, h);
}

TEST(GgufFileTest, BuildHeaderWritesVersionThree) {
  const std::string bytes = Valid(2).Bytes();
  const Header h = Parsed(bytes);
  std::vector<uint64_t> offsets;
  const std::string header = Rebuilt(h, offsets);
  EXPECT_EQ(header.substr(0, 8), std::string("GGUF") + Le(3, 4));
  EXPECT_EQ(header.substr(8), bytes.substr(8, h.data_start - 8));
}

TEST(GgufFileTest, BuildHeaderUnderAlignment64) {
  File f;
  f.kv = {KvU32("general.alignment", 64), KvStr("general.name", "x")};
  f.tensors = {Info("a", {3}, kTypeF32, 0), Info("b", {40}, kTypeF32, 64),
               Info("c", {1}, kTypeF16, 256)};
  f.alignment = 64;
  f.data_bytes = 320;
  const std::string bytes = f.Bytes();
  const Header h = Parsed(bytes);
  std::vector<uint64_t> offsets;
  EXPECT_EQ(Rebuilt(h, offsets), bytes.substr(0, h.data_start));
  EXPECT_EQ(offsets, (std::vector<uint64_t>{0, 64, 256}));
}

TEST(GgufFileTest, BuildHeaderLaysOutAnew) {
  File f = Base();
  f.tensors = {Info("late", {8}, kTypeF32, 96), Info("q", {32}, kTypeQ4_0, 32),
               Info("early", {3}, kTypeF32, 0)};
  f.data_bytes = 128;
  const Header h = Parsed(f.Bytes());
  std::vector<uint64_t> offsets;
  const std::string header = Rebuilt(h, offsets);
  EXPECT_EQ(offsets, (std::vector<uint64_t>{0, 32, 64}));  // 32, 18 and 12 bytes, padded
  EXPECT_EQ(header.size() % 32, 0u);
  const Header again = Parsed(header + std::string(76, '\0'));
  ExpectSameTensors(again, h);
  EXPECT_EQ(Offsets(again), offsets);
  EXPECT_EQ(again.version, 3u);
}

TEST(GgufFileTest, BuildHeaderCopiesTheKvGiven) {
  const Header h = Parsed(Valid().Bytes());
  std::vector<KeyValue> kv;
  std::string expect_records;
  for (const KeyValue& r : h.kv) {
    if (r.key.starts_with("t.")) continue;
    kv.push_back(r);
    expect_records += h.kv_bytes.substr(r.begin, r.end - r.begin);
  }
  ASSERT_EQ(kv.size(), 2u);
  std::vector<uint64_t> offsets;
  const std::string header = BuildHeader(kv, h.kv_bytes, h.tensors, h.alignment, offsets);
  const Header again = Parsed(header + std::string(224, '\0'));
  EXPECT_EQ(again.kv_bytes, expect_records);
  ASSERT_EQ(again.kv.size(), 2u);
  EXPECT_EQ(again.kv[0].key, "general.architecture");
  EXPECT_EQ(again.kv[1].key, "tokenizer.ggml.tokens");
  ExpectSameTensors(again, h);
  EXPECT_EQ(offsets, Offsets(h));
}

// ---- The files gguf-py wrote ----

const fs::path kFixtures = fs::path(CKPTFS_SOURCE_DIR) / ".." / "shared" / "fixtures" / "gguf";

std::string ReadWhole(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string TypeName(const KeyValue& kv) {
  if (kv.type != ValueType::kArray) return std::string(ValueTypeName(kv.type));
  return "ARRAY[" + std::string(ValueTypeName(kv.item_type)) + "]";
}

void ExpectManifestFile(const fs::path& path, const json& want) {
  auto source = LocalFileSource::Open(path.string(), want["file"].get<std::string>());
  ASSERT_TRUE(source.ok()) << source.status().message();
  auto h = ReadHeader(**source, want["file"].get<std::string>());
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(h->version, want["version"]);
  EXPECT_EQ(h->alignment, want["alignment"]);
  EXPECT_EQ(h->data_start, want["data_offset"]);
  ASSERT_EQ(h->kv.size(), want["kv_count"]);
  size_t i = 0;
  for (const auto& [key, kv] : want["kv"].items()) {
    const KeyValue& got = h->kv[i++];
    EXPECT_EQ(got.key, key);
    EXPECT_EQ(TypeName(got), kv["type"]) << key;
    if (kv.contains("value")) {
      EXPECT_EQ(got.value, kv["value"]) << key;
    }
    if (kv.contains("len")) {
      EXPECT_EQ(got.count, kv["len"]) << key;
    }
  }
  ASSERT_EQ(h->tensors.size(), want["tensor_count"]);
  ASSERT_EQ(want["tensors"].size(), h->tensors.size());
  for (size_t t = 0; t < h->tensors.size(); ++t) {
    const TensorInfo& got = h->tensors[t];
    const json& w = want["tensors"][t];
    SCOPED_TRACE(got.name);
    EXPECT_EQ(got.name, w["name"]);
    ASSERT_NE(got.type, nullptr);
    EXPECT_EQ(got.type->name, w["type"].get<std::string>());
    EXPECT_EQ(got.ne, w["shape"].get<std::vector<uint64_t>>());
    EXPECT_EQ(NumpyShape(got), w["numpy_shape"].get<std::vector<uint64_t>>());
    EXPECT_EQ(got.bytes, w["nbytes"]);
    EXPECT_EQ(h->data_start + got.offset, w["offset"]);
  }
  // gguf-py lays the data out as gguf_write_to_buf does: BuildHeader gives the same bytes.
  std::vector<uint64_t> offsets;
  const std::string header = BuildHeader(h->kv, h->kv_bytes, h->tensors, h->alignment, offsets);
  EXPECT_EQ(header, ReadWhole(path).substr(0, h->data_start));
  EXPECT_EQ(offsets, Offsets(*h));
}

TEST(GgufFileTest, GgufPyFixtures) {
  const fs::path manifest_path = kFixtures / "manifest.json";
  if (!fs::exists(manifest_path)) GTEST_SKIP() << kFixtures << " is absent (../shared/fixtures)";
  std::ifstream in(manifest_path);
  const json manifest = json::parse(in);
  ASSERT_FALSE(manifest["files"].empty());
  for (const auto& [name, want] : manifest["files"].items()) {
    SCOPED_TRACE(name);
    ExpectManifestFile(kFixtures / want["file"].get<std::string>(), want);
  }
}

}  // namespace
}  // namespace ckptfs::gguf
