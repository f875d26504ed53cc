// h5::Describe and h5::ValidateFile: files h5py writes (scripts/make_h5_files.py, run with
// /usr/bin/python3; skipped without h5py), the real Keras files of ../shared/fixtures/keras
// (NOTICE.md, manifest.json; skipped when absent), hostile bytes, budgets and deadlines.
// libhdf5 runs only in Describe's children: this process never calls it.
#include "core/format/keras/h5/h5_file.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/encoding/zip.h"
#include "core/format/keras/h5/protocol.h"
#include "core/source/byte_source.h"

namespace ckptfs {
namespace {

namespace fs = std::filesystem;
using h5::Dataset;
using h5::TypeClass;

const fs::path kFixtures = fs::path(CKPTFS_SOURCE_DIR) / ".." / "shared" / "fixtures" / "keras";

std::string ReadWhole(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// No child of this process is left, running or a zombie.
void ExpectNoChild() {
  errno = 0;
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

void ExpectOneLineNaming(const Status& s, const std::string& shown) {
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind(shown + ": ", 0), 0u) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
}

class H5FileTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::system("/usr/bin/python3 -c 'import h5py' 2>/dev/null") != 0) return;
    char pattern[] = "/tmp/ckptfs-h5-XXXXXX";
    if (mkdtemp(pattern) == nullptr) return;
    dir_ = pattern;
    const std::string cmd =
        "/usr/bin/python3 " CKPTFS_SOURCE_DIR "/scripts/make_h5_files.py " + dir_.string();
    made_ = std::system(cmd.c_str()) == 0;
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void SetUp() override {
    if (!made_) GTEST_SKIP() << "python3-h5py not installed: no HDF5 file to read";
  }

  static std::string Bytes(const std::string& name) { return ReadWhole(dir_ / name); }

  static Result<h5::File> Describe(const std::string& name, const h5::Limits& limits = {}) {
    const MemorySource source(name, Bytes(name));
    return h5::Describe(source, 0, source.Size(), name, limits);
  }

  static const Dataset* Find(const h5::File& file, const std::string& path) {
    for (const Dataset& d : file.datasets) {
      if (d.path == path) return &d;
    }
    return nullptr;
  }

  static nlohmann::json Attr(const std::vector<h5::Attribute>& attributes,
                             const std::string& name) {
    for (const h5::Attribute& a : attributes) {
      if (a.name == name) return a.value;
    }
    return "(absent)";
  }

  static inline fs::path dir_;
  static inline bool made_ = false;
};

TEST_F(H5FileTest, KerasThreeTree) {
  const auto file = Describe("keras3.h5");
  ASSERT_TRUE(file.ok()) << file.status().message();
  std::vector<std::string> groups;
  for (const h5::Group& g : file->groups) groups.push_back(g.path);
  EXPECT_EQ(groups, (std::vector<std::string>{"", "layers", "layers/dense", "layers/dense/vars",
                                              "optimizer", "optimizer/vars"}));
  EXPECT_EQ(Attr(file->groups[3].attributes, "name"), "dense");
  EXPECT_EQ(Attr(file->groups[5].attributes, "name"), "adam");
  ASSERT_EQ(file->datasets.size(), 16u);
  const Dataset* kernel = Find(*file, "layers/dense/vars/0");
  ASSERT_NE(kernel, nullptr);
  EXPECT_EQ(kernel->type, TypeClass::kFloat);
  EXPECT_EQ(kernel->type_size, 4u);
  EXPECT_EQ(kernel->shape, (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(kernel->size, 48u);
  EXPECT_EQ(kernel->problem, "");
  // The bytes at the offset are the array, little-endian row-major.
  const std::string bytes = Bytes("keras3.h5");
  ASSERT_LE(kernel->offset + kernel->size, bytes.size());
  for (int i = 0; i < 12; ++i) {
    float f = 0;
    std::memcpy(&f, bytes.data() + kernel->offset + 4 * i, 4);
    EXPECT_EQ(f, static_cast<float>(i));
  }
  const Dataset* iterations = Find(*file, "optimizer/vars/0");
  ASSERT_NE(iterations, nullptr);
  EXPECT_EQ(iterations->type, TypeClass::kInteger);
  EXPECT_TRUE(iterations->is_signed);
  EXPECT_EQ(iterations->type_size, 8u);
  EXPECT_TRUE(iterations->shape.empty());
  EXPECT_EQ(iterations->size, 8u);
  int64_t seven = 0;
  std::memcpy(&seven, bytes.data() + iterations->offset, 8);
  EXPECT_EQ(seven, 7);
}

TEST_F(H5FileTest, NamesComeInByteOrder) {
  const auto file = Describe("keras3.h5");
  ASSERT_TRUE(file.ok()) << file.status().message();
  std::vector<std::string> vars;
  for (const Dataset& d : file->datasets) {
    if (d.path.rfind("optimizer/vars/", 0) == 0) vars.push_back(d.path.substr(15));
  }
  EXPECT_EQ(vars, (std::vector<std::string>{"0", "1", "10", "11", "12", "13", "2", "3", "4", "5",
                                            "6", "7", "8", "9"}));
}

TEST_F(H5FileTest, Attributes) {
  const auto file = Describe("attributes.h5");
  ASSERT_TRUE(file.ok()) << file.status().message();
  ASSERT_FALSE(file->groups.empty());
  const auto& root = file->groups[0].attributes;
  EXPECT_EQ(Attr(root, "fixed"), "abc");
  EXPECT_EQ(Attr(root, "vlen"), "hello");
  EXPECT_EQ(Attr(root, "layer_names"), nlohmann::json::array({"dense", "dense_1"}));
  EXPECT_EQ(Attr(root, "count"), -3);
  EXPECT_EQ(Attr(root, "big"), 9223372036854775808ull);
  EXPECT_EQ(Attr(root, "floats"), nlohmann::json::array({0.5, 1.5}));
  EXPECT_EQ(Attr(root, "flag"), "(absent)");  // an enum: left out
  const Dataset* w = Find(*file, "w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(Attr(w->attributes, "note"), "on a dataset");
}

TEST_F(H5FileTest, AttributeOverItsBudgetIsRefused) {
  h5::Limits limits;
  limits.attribute_bytes = 4;
  const auto file = Describe("attributes.h5", limits);
  ExpectOneLineNaming(file.status(), "attributes.h5");
  EXPECT_NE(file.status().message().find("larger than 4 bytes"), std::string::npos);
}

TEST_F(H5FileTest, Types) {
  const auto file = Describe("types.h5");
  ASSERT_TRUE(file.ok()) << file.status().message();
  const std::string bytes = Bytes("types.h5");
  const Dataset* bf16 = Find(*file, "bf16");
  ASSERT_NE(bf16, nullptr);
  EXPECT_EQ(bf16->type, TypeClass::kOpaque);
  EXPECT_EQ(bf16->type_size, 2u);
  EXPECT_EQ(bf16->shape, (std::vector<uint64_t>{4}));
  EXPECT_EQ(bf16->problem, "");
  EXPECT_EQ(Attr(bf16->attributes, "dtype"), "bfloat16");
  EXPECT_EQ(bytes.substr(bf16->offset, 8), std::string("\0\1\2\3\4\5\6\7", 8));
  const Dataset* flags = Find(*file, "bool");
  ASSERT_NE(flags, nullptr);
  EXPECT_EQ(flags->type, TypeClass::kEnum);
  EXPECT_EQ(flags->type_size, 1u);
  EXPECT_EQ(flags->problem, "");
  EXPECT_EQ(bytes.substr(flags->offset, 3), std::string("\1\0\1", 3));
  const Dataset* scalar = Find(*file, "scalar");
  ASSERT_NE(scalar, nullptr);
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->size, 4u);
  EXPECT_EQ(scalar->problem, "");
  const Dataset* empty = Find(*file, "empty");
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->shape, (std::vector<uint64_t>{0}));
  EXPECT_EQ(empty->offset, 0u);
  EXPECT_EQ(empty->size, 0u);
  EXPECT_EQ(empty->problem, "");
  const Dataset* i16 = Find(*file, "i16");
  ASSERT_NE(i16, nullptr);
  EXPECT_TRUE(i16->is_signed);
  EXPECT_EQ(i16->type_size, 2u);
  const Dataset* u8 = Find(*file, "u8");
  ASSERT_NE(u8, nullptr);
  EXPECT_FALSE(u8->is_signed);
  const Dataset* f16 = Find(*file, "f16");
  ASSERT_NE(f16, nullptr);
  EXPECT_EQ(f16->type, TypeClass::kFloat);
  EXPECT_EQ(f16->type_size, 2u);
  EXPECT_EQ(f16->problem, "");
  const Dataset* big = Find(*file, "big");
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->problem, "big-endian");
  const Dataset* text = Find(*file, "text");
  ASSERT_NE(text, nullptr);
  EXPECT_EQ(text->type, TypeClass::kOther);
  EXPECT_EQ(text->problem, "type: string");
  const Dataset* null = Find(*file, "null");
  ASSERT_NE(null, nullptr);
  EXPECT_EQ(null->problem, "null dataspace");
  EXPECT_EQ(null->shape, (std::vector<uint64_t>{0}));
  EXPECT_EQ(null->size, 0u);
}

TEST_F(H5FileTest, StorageThatIsNotOneRangeIsAProblem) {
  const auto file = Describe("storage.h5");
  ASSERT_TRUE(file.ok()) << file.status().message();
  const Dataset* chunked = Find(*file, "chunked");
  const Dataset* gzip = Find(*file, "gzip");
  const Dataset* unwritten = Find(*file, "unwritten");
  const Dataset* plain = Find(*file, "plain");
  ASSERT_TRUE(chunked && gzip && unwritten && plain);
  EXPECT_EQ(chunked->problem, "chunked");
  EXPECT_EQ(gzip->problem, "compressed (deflate)");
  EXPECT_EQ(unwritten->problem, "storage not allocated");
  EXPECT_EQ(plain->problem, "");
  EXPECT_EQ(plain->size, 32u);
  const Dataset* external = Find(*file, "external");
  const Dataset* compact = Find(*file, "compact");
  ASSERT_TRUE(external && compact);
  EXPECT_EQ(external->problem, "external storage");
  EXPECT_EQ(compact->problem, "compact");
  EXPECT_EQ(compact->size, 16u);
  const Dataset* shuffled = Find(*file, "shuffled");
  const Dataset* checksummed = Find(*file, "checksummed");
  const Dataset* lzf = Find(*file, "lzf");
  ASSERT_TRUE(shuffled && checksummed && lzf);
  EXPECT_EQ(shuffled->problem, "compressed (deflate)");
  EXPECT_EQ(checksummed->problem, "checksummed (fletcher32)");
  EXPECT_EQ(lzf->problem, "compressed (filter 32000)");
}

TEST_F(H5FileTest, LinksOtherThanOneHardLinkAreRefused) {
  auto file = Describe("soft.h5");
  EXPECT_EQ(file.status().code(), Status::Code::kUnsupported);
  EXPECT_EQ(file.status().message(), "soft.h5: soft link layers/x, which Keras does not write");
  file = Describe("external.h5");
  EXPECT_EQ(file.status().message(),
            "external.h5: external link layers/ext, which Keras does not write");
  file = Describe("hard.h5");
  EXPECT_EQ(file.status().code(), Status::Code::kCorruption);
  EXPECT_EQ(file.status().message(), "hard.h5: object b reached twice (a cycle or a hard link)");
  ExpectNoChild();
}

TEST_F(H5FileTest, DepthAndObjectLimits) {
  ASSERT_TRUE(Describe("nested.h5").ok());
  h5::Limits limits;
  limits.depth = 3;
  ExpectOneLineNaming(Describe("nested.h5", limits).status(), "nested.h5");
  limits = {};
  limits.objects = 5;
  ExpectOneLineNaming(Describe("keras3.h5", limits).status(), "keras3.h5");
}

TEST_F(H5FileTest, AFileInsideALargerSourceIsReadFromItsBase) {
  const std::string file = Bytes("keras3.h5");
  const std::string prefix(1000, 'x');
  const MemorySource source("outer.keras", prefix + file + std::string(77, 'y'));
  const auto inner = h5::Describe(source, prefix.size(), file.size(), "outer.keras:inner.h5");
  const auto alone = Describe("keras3.h5");
  ASSERT_TRUE(inner.ok()) << inner.status().message();
  ASSERT_TRUE(alone.ok());
  ASSERT_EQ(inner->datasets.size(), alone->datasets.size());
  for (size_t i = 0; i < inner->datasets.size(); ++i) {
    EXPECT_EQ(inner->datasets[i].offset, alone->datasets[i].offset);  // from the base
  }
  // A range outside the source is the caller's error.
  EXPECT_FALSE(h5::Describe(source, prefix.size(), source.Size(), "x").ok());
}

TEST_F(H5FileTest, HostileBytesAreOneLineNamingTheFile) {
  const std::string good = Bytes("keras3.h5");
  std::vector<std::pair<std::string, std::string>> cases = {
      {"empty.h5", ""},
      {"garbage.h5", std::string(4096, '\x5a')},
      {"truncated.h5", good.substr(0, good.size() / 2)},
      {"header-only.h5", good.substr(0, 100)},
  };
  // The superblock (version 0) keeps the end-of-file address at byte 40: claim twice the
  // file's size.
  std::string long_eof = good;
  const uint64_t claimed = 2 * good.size();
  std::memcpy(long_eof.data() + 40, &claimed, 8);
  cases.emplace_back("long-eof.h5", long_eof);
  for (const auto& [name, bytes] : cases) {
    SCOPED_TRACE(name);
    const MemorySource source(name, bytes);
    const auto file = h5::Describe(source, 0, source.Size(), name);
    ExpectOneLineNaming(file.status(), name);
  }
  const MemorySource garbage("garbage.h5", std::string(4096, '\x5a'));
  EXPECT_EQ(h5::Describe(garbage, 0, garbage.Size(), "garbage.h5").status().message(),
            "garbage.h5: not an HDF5 file");
  ExpectNoChild();
}

TEST_F(H5FileTest, ReadBudget) {
  h5::Limits limits;
  limits.read_bytes = 100;
  const auto file = Describe("keras3.h5", limits);
  ExpectOneLineNaming(file.status(), "keras3.h5");
  EXPECT_NE(file.status().message().find("more than 100 bytes"), std::string::npos)
      << file.status().message();
  ExpectNoChild();
}

TEST_F(H5FileTest, SourceErrorsPassThrough) {
  auto base = std::make_shared<MemorySource>("keras3.h5", Bytes("keras3.h5"));
  const FaultySource faulty(base, {.fail_read_number = 1});
  const auto file = h5::Describe(faulty, 0, faulty.Size(), "keras3.h5");
  EXPECT_EQ(file.status().code(), Status::Code::kIoError) << file.status().message();
  ExpectNoChild();
}

TEST_F(H5FileTest, AChildThatOverstaysIsKilledAndReaped) {
  auto base = std::make_shared<MemorySource>("slow.h5", Bytes("keras3.h5"));
  const FaultySource slow(base, {.delay_us = 200000});  // the first read overstays
  h5::Limits limits;
  limits.timeout = std::chrono::milliseconds(120);
  const auto start = std::chrono::steady_clock::now();
  const auto file = h5::Describe(slow, 0, slow.Size(), "slow.h5", limits);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  ExpectOneLineNaming(file.status(), "slow.h5");
  EXPECT_NE(file.status().message().find("took longer than 120 ms"), std::string::npos)
      << file.status().message();
  ExpectNoChild();
}

TEST_F(H5FileTest, ManyThreadsDescribeAtOnce) {
  const std::string bytes = Bytes("keras3.h5");
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (size_t i = 0; i < ok.size(); ++i) {
    threads.emplace_back([&, i] {
      const MemorySource source("keras3.h5", bytes);
      const auto file = h5::Describe(source, 0, source.Size(), "keras3.h5");
      ok[i] = file.ok() && file->datasets.size() == 16;
    });
  }
  for (std::thread& t : threads) t.join();
  for (const int o : ok) EXPECT_TRUE(o);
  ExpectNoChild();
}

// A file that crashes Debian's libhdf5 1.10.8 (found by flipping bytes of a seed; kept in
// the fuzz corpus): the crash is the child's, reported as a signal, and the child is reaped.
TEST(H5CrashTest, AChildKilledByASignalIsOneLine) {
  const fs::path path = fs::path(CKPTFS_SOURCE_DIR) / "tests/fuzz/corpus/h5/crash-sigsegv.h5";
  const MemorySource source("crash.h5", ReadWhole(path));
  ASSERT_GT(source.Size(), 0u);
  const auto file = h5::Describe(source, 0, source.Size(), "crash.h5");
  ExpectOneLineNaming(file.status(), "crash.h5");
  ExpectNoChild();
  if (file.status().message().find("killed by") == std::string::npos) {
    GTEST_SKIP() << "this libhdf5 no longer crashes on it: " << file.status().message();
  }
  EXPECT_EQ(file.status().message(), "crash.h5: the HDF5 library failed on it (killed by SIGSEGV)");
}

// The child's answer is untrusted too: anything but the expected JSON is one line.
TEST(H5WireTest, AMalformedAnswerIsOneLine) {
  h5::File file;
  file.groups.push_back({"", {{"name", "x"}}});
  Dataset d;
  d.path = "a";
  d.type = TypeClass::kFloat;
  d.type_size = 4;
  d.shape = {2};
  d.size = 8;
  d.attributes.push_back({"dtype", "bfloat16"});
  file.datasets.push_back(d);
  const std::string good = h5::internal::EncodeFile(file);
  const auto back = h5::internal::DecodeFile(good, "f.h5");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->datasets[0].shape, d.shape);
  EXPECT_EQ(back->groups[0].attributes[0].value, "x");
  for (const std::string bad : {
           "",
           "[]",
           "{",
           "null",
           R"({"groups":[],"datasets":{}})",
           R"({"groups":[{"path":1,"attrs":[]}],"datasets":[]})",
           R"({"groups":[],"datasets":[{"path":"a","type":9,"type_size":4,"signed":false,)"
           R"("shape":[],"offset":0,"size":4,"problem":"","attrs":[]}]})",
           R"({"groups":[],"datasets":[{"path":"a","type":1,"type_size":4,"signed":false,)"
           R"("shape":[-1],"offset":0,"size":4,"problem":"","attrs":[]}]})",
           R"({"groups":[],"datasets":[{"path":"a","type":1,"type_size":4294967296,)"
           R"("signed":false,"shape":[],"offset":0,"size":4,"problem":"","attrs":[]}]})",
           R"({"groups":[{"path":"","attrs":[["a",{"nested":1}]]}],"datasets":[]})",
           R"({"groups":[{"path":"","attrs":[["a",[[1]]]]}],"datasets":[]})",
       }) {
    SCOPED_TRACE(bad);
    ExpectOneLineNaming(h5::internal::DecodeFile(bad, "f.h5").status(), "f.h5");
  }
}

// ---- ValidateFile on its own. ----

Dataset Plain(const std::string& path, uint64_t offset, std::vector<uint64_t> shape) {
  Dataset d;
  d.path = path;
  d.type = TypeClass::kFloat;
  d.type_size = 4;
  d.shape = std::move(shape);
  d.offset = offset;
  d.size = 4;
  for (const uint64_t n : d.shape) d.size *= n;
  return d;
}

TEST(H5ValidateTest, Promises) {
  h5::File file;
  file.groups.push_back({"", {}});
  file.groups.push_back({"layers", {}});
  file.datasets.push_back(Plain("layers/a", 100, {2, 3}));
  file.datasets.push_back(Plain("layers/b", 124, {1}));
  EXPECT_TRUE(h5::ValidateFile(file, 200, "f.h5").ok());
  EXPECT_FALSE(h5::ValidateFile(file, 127, "f.h5").ok());  // b runs past the end

  h5::File overlap = file;
  overlap.datasets[1].offset = 120;
  const Status s = h5::ValidateFile(overlap, 200, "f.h5");
  EXPECT_EQ(s.message(), "f.h5: datasets layers/a and layers/b overlap");

  h5::File twice = file;
  twice.datasets[1].path = "layers/a";
  EXPECT_FALSE(h5::ValidateFile(twice, 200, "f.h5").ok());
  twice.datasets[1].path = "layers";  // a group's path
  EXPECT_FALSE(h5::ValidateFile(twice, 200, "f.h5").ok());

  for (const std::string& bad :
       std::vector<std::string>{"", "/a", "a/", "a//b", "a/./b", "..", std::string("a\0b", 3)}) {
    h5::File malformed = file;
    malformed.datasets[1].path = bad;
    ExpectOneLineNaming(h5::ValidateFile(malformed, 200, "f.h5"), "f.h5");
  }

  h5::File sized = file;
  sized.datasets[1].size = 5;
  EXPECT_FALSE(h5::ValidateFile(sized, 200, "f.h5").ok());
  sized.datasets[1] = Plain("layers/b", 0, {});
  sized.datasets[1].shape = {1ull << 62, 8};
  EXPECT_FALSE(h5::ValidateFile(sized, 200, "f.h5").ok());  // overflows

  // A dataset with a problem is not served: its offset is not checked.
  h5::File problem = file;
  problem.datasets[1].offset = 1u << 30;
  problem.datasets[1].problem = "chunked";
  EXPECT_TRUE(h5::ValidateFile(problem, 200, "f.h5").ok());

  h5::Limits limits;
  limits.rank = 1;
  EXPECT_FALSE(h5::ValidateFile(file, 200, "f.h5", limits).ok());
}

// ---- Real Keras files. ----

std::map<std::string, nlohmann::json> Attrs(const std::vector<h5::Attribute>& attributes) {
  std::map<std::string, nlohmann::json> out;
  for (const h5::Attribute& a : attributes) out[a.name] = a.value;
  return out;
}

TEST(H5FixtureTest, EveryDatasetOfEveryKerasFileMatchesItsManifest) {
  if (!fs::is_regular_file(kFixtures / "manifest.json")) {
    GTEST_SKIP() << kFixtures << " is absent (a user's clone)";
  }
  const auto manifest = nlohmann::json::parse(ReadWhole(kFixtures / "manifest.json"));
  size_t files = 0, datasets = 0;
  for (const auto& entry : manifest) {
    const std::string name = entry["file"].get<std::string>();
    SCOPED_TRACE(name);
    auto source = LocalFileSource::Open((kFixtures / name).string(), name);
    ASSERT_TRUE(source.ok()) << source.status().message();
    uint64_t base = 0, size = (*source)->Size();
    std::string shown = name;
    if (entry["container"] == "zip") {
      const auto zip = ReadZipDirectory(**source);
      ASSERT_TRUE(zip.ok()) << zip.status().message();
      bool found = false;
      for (const ZipEntry& e : *zip) {
        if (e.name != "model.weights.h5") continue;
        ASSERT_EQ(e.method, 0);
        base = e.data_offset;
        size = e.size;
        found = true;
      }
      ASSERT_TRUE(found);
      shown += ":model.weights.h5";
    }
    const auto file = h5::Describe(**source, base, size, shown);
    ASSERT_TRUE(file.ok()) << file.status().message();
    ASSERT_EQ(file->datasets.size(), entry["datasets"].size());
    for (const auto& want : entry["datasets"]) {
      const std::string path = want["name"].get<std::string>();
      SCOPED_TRACE(path);
      const Dataset* got = nullptr;
      for (const Dataset& d : file->datasets) {
        if (d.path == path) got = &d;
      }
      ASSERT_NE(got, nullptr);
      EXPECT_EQ(got->problem, "");
      EXPECT_EQ(got->shape, want["shape"].get<std::vector<uint64_t>>());
      EXPECT_EQ(got->offset, want["offset_in_h5"].get<uint64_t>());
      EXPECT_EQ(base + got->offset, want["offset_in_file"].get<uint64_t>());
      EXPECT_EQ(got->size, want["nbytes"].get<uint64_t>());
      const std::string dtype = want["dtype"].get<std::string>();
      if (dtype == "<f4") {
        EXPECT_EQ(got->type, TypeClass::kFloat);
        EXPECT_EQ(got->type_size, 4u);
      } else if (dtype == "<i8") {
        EXPECT_EQ(got->type, TypeClass::kInteger);
        EXPECT_EQ(got->type_size, 8u);
        EXPECT_TRUE(got->is_signed);
      } else {
        ADD_FAILURE() << "dtype " << dtype << " not in this test";
      }
      ++datasets;
    }
    for (const auto& group : entry["groups_with_attrs"]) {
      for (const auto& [key, value] : group["attrs"].items()) {
        // The manifest cuts long values ("...(192 chars)"): those are not compared.
        if (!value.is_string() || value.get<std::string>().find("...(") != std::string::npos) {
          continue;
        }
        for (const h5::Group& g : file->groups) {
          if (g.path != group["name"].get<std::string>()) continue;
          bool seen = false;
          // The manifest writes arrays as JSON text.
          const auto array = nlohmann::json::parse(value.get<std::string>(), nullptr, false);
          for (const h5::Attribute& a : g.attributes) {
            seen |= a.name == key && (a.value == value || (array.is_array() && a.value == array));
          }
          EXPECT_TRUE(seen) << g.path << " " << key << " " << value << " got "
                            << nlohmann::json(Attrs(g.attributes)).dump();
        }
      }
    }
    ++files;
  }
  EXPECT_EQ(files, manifest.size());
  EXPECT_EQ(datasets, 292u);
  ExpectNoChild();
}

}  // namespace
}  // namespace ckptfs
