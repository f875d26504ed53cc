// The GGUF entry of the format table (core/format/gguf/gguf_reader.cc) on files built
// here: a file's tensors in numpy's shapes, quantized ones as blocks kept out of the
// model, a split set shown at the root as the one file it was split from (byte for byte,
// through the layout's extents), and the split sets it refuses. The header parser's own
// cases: gguf_file_test.cc.
#include <gtest/gtest.h>

#include <cstring>

#include "core/checkpoint/format_reader.h"
#include "core/format/formats.h"
#include "core/format/gguf/gguf_file.h"
#include "core/layout/layout.h"
#include "tests/unit/format_samples.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

const testing::FormatSample kSample("gguf", {{"model.gguf", "not parsed by detect"}});

// A little-endian GGUF v3 writer, enough for these tests.
class Writer {
 public:
  template <typename T>
  static void Put(std::string& out, T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.append(b, sizeof(T));
  }
  static void PutString(std::string& out, std::string_view s) {
    Put<uint64_t>(out, s.size());
    out += s;
  }

  void String(std::string_view key, std::string_view value) {
    PutString(kv_, key);
    Put<uint32_t>(kv_, 8);
    PutString(kv_, value);
    ++kvs_;
  }
  void U16(std::string_view key, uint16_t value) {
    PutString(kv_, key);
    Put<uint32_t>(kv_, 2);
    Put<uint16_t>(kv_, value);
    ++kvs_;
  }
  void I32(std::string_view key, int32_t value) {
    PutString(kv_, key);
    Put<uint32_t>(kv_, 5);
    Put<int32_t>(kv_, value);
    ++kvs_;
  }
  // A tensor of ggml type `type` with GGUF's `ne` (innermost first) and its bytes.
  void Tensor(std::string name, std::vector<uint64_t> ne, uint32_t type, std::string data) {
    tensors_.push_back({std::move(name), std::move(ne), type, std::move(data)});
  }

  std::string Bytes() const {
    std::string out = "GGUF";
    Put<uint32_t>(out, 3);
    Put<uint64_t>(out, tensors_.size());
    Put<uint64_t>(out, kvs_);
    out += kv_;
    uint64_t offset = 0;
    for (const auto& t : tensors_) {
      PutString(out, t.name);
      Put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
      for (uint64_t n : t.ne) Put<uint64_t>(out, n);
      Put<uint32_t>(out, t.type);
      Put<uint64_t>(out, offset);
      offset += gguf::AlignUp(t.data.size(), 32);
    }
    out.resize(gguf::AlignUp(out.size(), 32), '\0');
    for (const auto& t : tensors_) {
      out += t.data;
      out.resize(gguf::AlignUp(out.size(), 32), '\0');
    }
    return out;
  }

 private:
  struct T {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    std::string data;
  };
  std::string kv_;
  uint64_t kvs_ = 0;
  std::vector<T> tensors_;
};

std::string Data(size_t n, char seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed + i * 7);
  return s;
}

// The model's tensors, in the order a set splits them.
struct Tensors {
  std::string embd = Data(4 * 8 * 2, 1);  // F16, ne {8, 4}
  std::string norm = Data(8 * 4, 2);      // F32, ne {8}
  std::string q4 = Data(2 * 18, 3);       // Q4_0, ne {32, 2}: one block a row
  std::string q8 = Data(34, 4);           // Q8_0, ne {32}
};

void AddModelKeys(Writer& w) {
  w.String("general.architecture", "llama");
  w.String("general.name", "tiny");
}

// The whole model in one file, with the split keys when it is split 1 of `count`.
std::string Unsplit(const Tensors& t) {
  Writer w;
  AddModelKeys(w);
  w.Tensor("token_embd.weight", {8, 4}, 1, t.embd);
  w.Tensor("blk.0.norm.weight", {8}, 0, t.norm);
  w.Tensor("blk.0.ffn.weight", {32, 2}, 2, t.q4);
  w.Tensor("output.weight", {32}, 8, t.q8);
  return w.Bytes();
}

// The same split in two as gguf-py writes it: the first split holds the model's keys and
// the split keys, the second only the split keys.
std::map<std::string, std::string> SplitInTwo(const Tensors& t, int32_t total = 4,
                                              uint16_t second_no = 1) {
  Writer a;
  AddModelKeys(a);
  a.U16("split.no", 0);
  a.U16("split.count", 2);
  a.I32("split.tensors.count", total);
  a.Tensor("token_embd.weight", {8, 4}, 1, t.embd);
  a.Tensor("blk.0.norm.weight", {8}, 0, t.norm);
  Writer b;
  b.U16("split.no", second_no);
  b.U16("split.count", 2);
  b.I32("split.tensors.count", total);
  b.Tensor("blk.0.ffn.weight", {32, 2}, 2, t.q4);
  b.Tensor("output.weight", {32}, 8, t.q8);
  return {{"tiny-00001-of-00002.gguf", a.Bytes()}, {"tiny-00002-of-00002.gguf", b.Bytes()}};
}

// The bytes of root file `name` of `ckpt`'s layout, read through its extents.
std::string RootFileBytes(const Checkpoint& ckpt, const std::string& name) {
  const Layout layout = Layout::Build(ckpt);
  const uint64_t ino = layout.Lookup(Layout::kRoot, name);
  EXPECT_NE(ino, 0u) << name << " is not at the root";
  std::string out;
  if (ino == 0) return out;
  for (const Extent& e : layout.Extents(ino, 0, UINT64_MAX)) {
    std::string part(e.length, '\0');
    EXPECT_TRUE(layout.Source(e.source)
                    .ReadAt(e.source_offset, {reinterpret_cast<uint8_t*>(part.data()), e.length})
                    .ok());
    out += part;
  }
  return out;
}

const Tensor* Named(const Checkpoint& ckpt, std::string_view name) {
  for (const Tensor& t : ckpt.tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

TEST(GgufReaderTest, OneFileInNumpyShapesWithBlocksOutOfTheModel) {
  Tensors t;
  auto ckpt =
      OpenCheckpointIn(testing::MemoryDir({{"tiny.gguf", Unsplit(t)}}), testing::TestContext());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_EQ(FormatOf(*ckpt).name, "gguf");
  ASSERT_EQ(ckpt->tensors.size(), 4u);
  const Tensor* embd = Named(*ckpt, "token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->dtype, Dtype::kF16);
  EXPECT_EQ(embd->shape, (std::vector<uint64_t>{4, 8}));  // ne reversed
  EXPECT_TRUE(embd->in_model);
  const size_t q4 = static_cast<size_t>(Named(*ckpt, "blk.0.ffn.weight") - ckpt->tensors.data());
  const std::optional<BlockType> blocks = BlocksOf(*ckpt, q4);
  ASSERT_TRUE(blocks.has_value());
  EXPECT_EQ(blocks->name, "Q4_0");
  EXPECT_EQ(blocks->extension, "q4_0");
  EXPECT_EQ(blocks->block_elements, 32u);
  EXPECT_EQ(blocks->block_bytes, 18u);
  EXPECT_EQ(blocks->shape, (std::vector<uint64_t>{2, 32}));
  EXPECT_EQ(ckpt->tensors[q4].dtype, Dtype::kU8);
  EXPECT_EQ(ckpt->tensors[q4].shape, (std::vector<uint64_t>{36}));
  EXPECT_FALSE(ckpt->tensors[q4].in_model);
  EXPECT_EQ(ckpt->model.tensors, 2u);  // F16 and F32: the quantized two are in no merged view
  EXPECT_FALSE(ckpt->model.whole);
  EXPECT_EQ(RootFileBytes(*ckpt, "tiny.gguf"), Unsplit(t));
  EXPECT_NE(ckpt->state_json.find("\"general.architecture\":\"llama\""), std::string::npos);
}

TEST(GgufReaderTest, ASplitSetIsTheFileItWasSplitFrom) {
  Tensors t;
  for (const char* named : {"", "tiny-00002-of-00002.gguf"}) {
    SCOPED_TRACE(named);
    SourceDir dir = testing::MemoryDir(SplitInTwo(t));
    dir.named = named;
    auto ckpt = OpenCheckpointIn(dir, testing::TestContext());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    EXPECT_EQ(ckpt->shards.size(), 2u);
    EXPECT_EQ(RootFileBytes(*ckpt, "tiny.gguf"), Unsplit(t));
    EXPECT_EQ(RootFileBytes(*ckpt, "tiny-00002-of-00002.gguf"),
              SplitInTwo(t)["tiny-00002-of-00002.gguf"]);
    EXPECT_EQ(ckpt->state_json.find("split."), std::string::npos) << ckpt->state_json;
  }
}

// Each refusal is one line naming the file at fault.
TEST(GgufReaderTest, RefusesBrokenSplitSets) {
  Tensors t;
  auto refused = [](std::map<std::string, std::string> files, const std::string& expect) {
    auto ckpt = OpenCheckpointIn(testing::MemoryDir(std::move(files)), testing::TestContext());
    ASSERT_FALSE(ckpt.ok()) << expect;
    EXPECT_NE(ckpt.status().message().find(expect), std::string::npos) << ckpt.status().message();
    EXPECT_EQ(ckpt.status().message().find('\n'), std::string::npos);
  };
  auto missing = SplitInTwo(t);
  missing.erase("tiny-00002-of-00002.gguf");
  refused(missing, "tiny-00002-of-00002.gguf: split 2 of 2 of mem/tiny-00001-of-00002.gguf");
  refused(SplitInTwo(t, 4, 0), "tiny-00002-of-00002.gguf: says it is split 1 of 2");
  auto other = SplitInTwo(t);
  other["tiny-00002-of-00002.gguf"] = SplitInTwo(t, 5)["tiny-00002-of-00002.gguf"];
  refused(other, "tiny-00002-of-00002.gguf: split.tensors.count 5");
  refused(SplitInTwo(t, 5), "the splits hold 4 tensors, split.tensors.count says 5");
  auto doubled = SplitInTwo(t, 4);
  doubled["tiny-00002-of-00002.gguf"] = SplitInTwo(t)["tiny-00001-of-00002.gguf"];
  refused(doubled, "says it is split 1 of 2");
  auto two = SplitInTwo(t);
  two["other.gguf"] = Unsplit(t);
  refused(two, "2 GGUF models");
}

TEST(GgufReaderTest, ATensorInTwoSplitsIsRefused) {
  Tensors t;
  Writer a;
  AddModelKeys(a);
  a.U16("split.no", 0);
  a.U16("split.count", 2);
  a.I32("split.tensors.count", 2);
  a.Tensor("w", {8}, 0, t.norm);
  Writer b;
  b.U16("split.no", 1);
  b.U16("split.count", 2);
  b.I32("split.tensors.count", 2);
  b.Tensor("w", {8}, 0, t.norm);
  auto ckpt = OpenCheckpointIn(testing::MemoryDir({{"x-00001-of-00002.gguf", a.Bytes()},
                                                   {"x-00002-of-00002.gguf", b.Bytes()}}),
                               testing::TestContext());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_NE(ckpt.status().message().find("tensor \"w\" is also in"), std::string::npos)
      << ckpt.status().message();
}

}  // namespace
}  // namespace ckptfs
