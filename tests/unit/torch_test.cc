// torch.save files: the zip reader and writer, the tensor interpreter over the restricted
// unpickler, and the merged pytorch_model.bin view built by Layout.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ctime>
#include <nlohmann/json.hpp>

#include "core/format/pickle.h"
#include "core/format/torch_file.h"
#include "core/format/zip.h"
#include "core/volume/volume.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

using ::testing::HasSubstr;
using testing::MakeZip;

// A real torch.save (PyTorch 1.13) of OrderedDict(w=arange(6).reshape(2,3) f32, tied=w,
// b=bf16[1.5,-2], slice=arange(10)[4:7] i64, t=w.t()), written to a BytesIO (archive/).
const std::string kRealTorchFile(
    "\x50\x4b\x03\x04\x00\x00\x08\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x00\x10\x00\x12\x00\x61\x72"
    "\x63\x68\x69\x76\x65\x2f\x64\x61\x74\x61\x2e\x70\x6b\x6c\x46\x42\x0e\x00\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x80\x02\x63\x63\x6f\x6c\x6c\x65\x63\x74\x69\x6f\x6e\x73\x0a\x4f\x72\x64\x65\x72\x65\x64\x44"
    "\x69\x63\x74\x0a\x71\x00\x29\x52\x71"
    "\x01\x28\x58\x01\x00\x00\x00\x77\x71\x02\x63\x74\x6f\x72\x63\x68\x2e\x5f\x75\x74\x69\x6c\x73"
    "\x0a\x5f\x72\x65\x62\x75\x69\x6c\x64"
    "\x5f\x74\x65\x6e\x73\x6f\x72\x5f\x76\x32\x0a\x71\x03\x28\x28\x58\x07\x00\x00\x00\x73\x74\x6f"
    "\x72\x61\x67\x65\x71\x04\x63\x74\x6f"
    "\x72\x63\x68\x0a\x46\x6c\x6f\x61\x74\x53\x74\x6f\x72\x61\x67\x65\x0a\x71\x05\x58\x01\x00\x00"
    "\x00\x30\x71\x06\x58\x03\x00\x00\x00"
    "\x63\x70\x75\x71\x07\x4b\x06\x74\x71\x08\x51\x4b\x00\x4b\x02\x4b\x03\x86\x71\x09\x4b\x03\x4b"
    "\x01\x86\x71\x0a\x89\x68\x00\x29\x52"
    "\x71\x0b\x74\x71\x0c\x52\x71\x0d\x58\x04\x00\x00\x00\x74\x69\x65\x64\x71\x0e\x68\x0d\x58\x01"
    "\x00\x00\x00\x62\x71\x0f\x68\x03\x28"
    "\x28\x68\x04\x63\x74\x6f\x72\x63\x68\x0a\x42\x46\x6c\x6f\x61\x74\x31\x36\x53\x74\x6f\x72\x61"
    "\x67\x65\x0a\x71\x10\x58\x01\x00\x00"
    "\x00\x31\x71\x11\x68\x07\x4b\x02\x74\x71\x12\x51\x4b\x00\x4b\x02\x85\x71\x13\x4b\x01\x85\x71"
    "\x14\x89\x68\x00\x29\x52\x71\x15\x74"
    "\x71\x16\x52\x71\x17\x58\x05\x00\x00\x00\x73\x6c\x69\x63\x65\x71\x18\x68\x03\x28\x28\x68\x04"
    "\x63\x74\x6f\x72\x63\x68\x0a\x4c\x6f"
    "\x6e\x67\x53\x74\x6f\x72\x61\x67\x65\x0a\x71\x19\x58\x01\x00\x00\x00\x32\x71\x1a\x68\x07\x4b"
    "\x0a\x74\x71\x1b\x51\x4b\x04\x4b\x03"
    "\x85\x71\x1c\x4b\x01\x85\x71\x1d\x89\x68\x00\x29\x52\x71\x1e\x74\x71\x1f\x52\x71\x20\x58\x01"
    "\x00\x00\x00\x74\x71\x21\x68\x03\x28"
    "\x28\x68\x04\x68\x05\x68\x06\x68\x07\x4b\x06\x74\x71\x22\x51\x4b\x00\x4b\x03\x4b\x02\x86\x71"
    "\x23\x4b\x01\x4b\x03\x86\x71\x24\x89"
    "\x68\x00\x29\x52\x71\x25\x74\x71\x26\x52\x71\x27\x75\x2e\x50\x4b\x07\x08\x52\x45\xb8\x90\x8e"
    "\x01\x00\x00\x8e\x01\x00\x00\x50\x4b"
    "\x03\x04\x00\x00\x08\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x0e\x00\x36\x00\x61\x72\x63\x68"
    "\x69\x76\x65\x2f\x64\x61\x74\x61\x2f\x30\x46\x42\x32\x00\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x00\x00\x00\x00\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40\x00\x00\x80\x40\x00\x00\xa0"
    "\x40\x50\x4b\x07\x08\x17\x90\xe7\x91"
    "\x18\x00\x00\x00\x18\x00\x00\x00\x50\x4b\x03\x04\x00\x00\x08\x08\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x0e\x00\x2c\x00\x61\x72\x63\x68\x69\x76\x65\x2f\x64\x61\x74\x61\x2f\x31\x46\x42\x28"
    "\x00\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\xc0\x3f\x00\xc0\x50\x4b\x07\x08\x07\x51\x5a\xe3\x04\x00\x00\x00\x04\x00\x00\x00\x50\x4b\x03"
    "\x04\x00\x00\x08\x08\x00\x00\x00\x00"
    "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x0e\x00\x40\x00\x61\x72\x63\x68\x69"
    "\x76\x65\x2f\x64\x61\x74\x61\x2f\x32"
    "\x46\x42\x3c\x00\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00"
    "\x00\x03\x00\x00\x00\x00\x00\x00\x00"
    "\x04\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x06\x00\x00\x00\x00\x00\x00"
    "\x00\x07\x00\x00\x00\x00\x00\x00\x00"
    "\x08\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00\x00\x00\x00\x00\x00\x50\x4b\x07\x08\xa4\xe4\x85"
    "\x5e\x50\x00\x00\x00\x50\x00\x00\x00"
    "\x50\x4b\x03\x04\x00\x00\x08\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x00\x0f\x00\x33\x00\x61\x72"
    "\x63\x68\x69\x76\x65\x2f\x76\x65\x72\x73\x69\x6f\x6e\x46\x42\x2f\x00\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
    "\x33\x0a\x50\x4b\x07\x08\xd1\x9e\x67\x55\x02\x00\x00\x00\x02\x00\x00\x00\x50\x4b\x01\x02\x00"
    "\x00\x00\x00\x08\x08\x00\x00\x00\x00"
    "\x00\x00\x52\x45\xb8\x90\x8e\x01\x00\x00\x8e\x01\x00\x00\x10\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x61\x72\x63\x68\x69\x76\x65\x2f\x64\x61\x74\x61\x2e\x70\x6b\x6c\x50\x4b\x01\x02\x00\x00\x00"
    "\x00\x08\x08\x00\x00\x00\x00\x00\x00"
    "\x17\x90\xe7\x91\x18\x00\x00\x00\x18\x00\x00\x00\x0e\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x00\xde\x01\x00\x00\x61\x72"
    "\x63\x68\x69\x76\x65\x2f\x64\x61\x74\x61\x2f\x30\x50\x4b\x01\x02\x00\x00\x00\x00\x08\x08\x00"
    "\x00\x00\x00\x00\x00\x07\x51\x5a\xe3"
    "\x04\x00\x00\x00\x04\x00\x00\x00\x0e\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x68"
    "\x02\x00\x00\x61\x72\x63\x68\x69\x76"
    "\x65\x2f\x64\x61\x74\x61\x2f\x31\x50\x4b\x01\x02\x00\x00\x00\x00\x08\x08\x00\x00\x00\x00\x00"
    "\x00\xa4\xe4\x85\x5e\x50\x00\x00\x00"
    "\x50\x00\x00\x00\x0e\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xd4\x02\x00\x00\x61"
    "\x72\x63\x68\x69\x76\x65\x2f\x64\x61"
    "\x74\x61\x2f\x32\x50\x4b\x01\x02\x00\x00\x00\x00\x08\x08\x00\x00\x00\x00\x00\x00\xd1\x9e\x67"
    "\x55\x02\x00\x00\x00\x02\x00\x00\x00"
    "\x0f\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xa0\x03\x00\x00\x61\x72\x63\x68\x69"
    "\x76\x65\x2f\x76\x65\x72\x73\x69\x6f"
    "\x6e\x50\x4b\x06\x06\x2c\x00\x00\x00\x00\x00\x00\x00\x1e\x03\x2d\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x05\x00\x00\x00\x00\x00\x00"
    "\x00\x05\x00\x00\x00\x00\x00\x00\x00\x2f\x01\x00\x00\x00\x00\x00\x00\x12\x04\x00\x00\x00\x00"
    "\x00\x00\x50\x4b\x06\x07\x00\x00\x00"
    "\x00\x41\x05\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x50\x4b\x05\x06\x00\x00\x00\x00\x05\x00"
    "\x05\x00\x2f\x01\x00\x00\x12\x04\x00"
    "\x00\x00\x00",
    1443);

std::string Repeat(char c, size_t n) { return std::string(n, c); }

TEST(Zip, WrittenRecordsReadBackAligned) {
  const std::string zip =
      MakeZip({{"a/data.pkl", "pickle"}, {"a/data/0", Repeat('x', 100)}, {"a/version", "3\n"}});
  MemorySource source("x.zip", zip);
  auto entries = ReadZipDirectory(source);
  ASSERT_TRUE(entries.ok()) << entries.status().message();
  ASSERT_EQ(entries->size(), 3u);
  EXPECT_EQ((*entries)[1].name, "a/data/0");
  EXPECT_EQ((*entries)[1].size, 100u);
  for (const ZipEntry& e : *entries) EXPECT_EQ(e.data_offset % kZipAlignment, 0u) << e.name;
  EXPECT_EQ(zip.substr((*entries)[1].data_offset, 100), Repeat('x', 100));
  EXPECT_EQ(zip.substr((*entries)[2].data_offset, 2), "3\n");
}

TEST(Zip, EveryTruncationIsAnError) {
  const std::string zip = MakeZip({{"a/data.pkl", "pickle"}, {"a/data/0", Repeat('x', 70)}});
  for (size_t n = 0; n < zip.size(); ++n) {
    MemorySource source("cut.zip", zip.substr(0, n));
    auto entries = ReadZipDirectory(source);
    EXPECT_FALSE(entries.ok()) << n;
    if (!entries.ok()) {
      EXPECT_EQ(entries.status().message().rfind("cut.zip: ", 0), 0u);
    }
  }
}

TEST(Zip, LyingCentralDirectoryIsRefused) {
  std::string zip = MakeZip({{"a/data.pkl", "pickle"}});
  // The entry's size field (central directory offset + 20) claims more than the file holds.
  const size_t central = zip.rfind(std::string("PK\x01\x02", 4));
  zip[central + 20] = '\x7f';
  MemorySource source("lie.zip", zip);
  auto entries = ReadZipDirectory(source);
  ASSERT_FALSE(entries.ok());
  EXPECT_NE(entries.status().message().find("past the end"), std::string::npos)
      << entries.status().message();
}

TEST(TorchFile, ReadsRealTorchSave) {
  MemorySource source("real.bin", kRealTorchFile);
  auto file = ReadTorchFile(source);
  ASSERT_TRUE(file.ok()) << file.status().message();
  ASSERT_EQ(file->tensors.size(), 5u);
  std::map<std::string, const TorchTensor*> by_name;
  for (const TorchTensor& t : file->tensors) by_name[t.name] = &t;
  const TorchTensor& w = *by_name.at("w");
  EXPECT_EQ(w.shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(w.stride, (std::vector<uint64_t>{3, 1}));
  EXPECT_EQ(by_name.at("tied")->storage, w.storage);  // tied: one storage
  EXPECT_EQ(by_name.at("t")->storage, w.storage);
  EXPECT_EQ(by_name.at("t")->stride, (std::vector<uint64_t>{1, 3}));
  EXPECT_FALSE(IsRowMajor(by_name.at("t")->shape, by_name.at("t")->stride));
  const TorchTensor& slice = *by_name.at("slice");
  EXPECT_EQ(slice.storage_offset, 4u);
  const TorchStorage& s = file->storages[slice.storage];
  EXPECT_EQ(s.dtype, Dtype::kI64);
  EXPECT_EQ(s.size, 80u);
  // Element 4 of arange(10) is 4, stored little-endian.
  EXPECT_EQ(kRealTorchFile[s.data_offset + 4 * 8], '\x04');
  EXPECT_EQ(file->storages[by_name.at("b")->storage].dtype, Dtype::kBF16);
  EXPECT_TRUE(file->state_json.empty());
}

// A torch file with one storage record of `storage_bytes` and a pickle from `entries`.
// A mount measures pytorch_model.bin's pickle without making it: the count must be the
// size of the bytes, across SETITEMS batches, memo slots and every integer width.
TEST(TorchPickleBuilder, CountOnlyMatchesTheBytes) {
  const std::vector<uint64_t> shapes[] = {{}, {3}, {300, 70000}, {1ull << 33, 2}};
  std::vector<std::vector<uint64_t>> strides;
  std::vector<TorchPickleEntry> entries;
  std::vector<std::string> names;
  for (uint64_t i = 0; i < 2100; ++i) names.push_back("w." + std::to_string(i * 7919));
  for (uint64_t i = 0; i < 2100; ++i) strides.push_back(RowMajorStrides(shapes[i % 4]));
  for (uint64_t i = 0; i < 2100; ++i) {
    entries.push_back({names[i], i % 5 ? Dtype::kF32 : Dtype::kBF16, i, i * 1000, i % 3,
                       shapes[i % 4], strides[i]});
  }
  for (size_t n : {size_t{0}, size_t{1}, size_t{999}, size_t{1000}, size_t{1001}, size_t{2100}}) {
    std::span<const TorchPickleEntry> some(entries.data(), n);
    TorchPickleBuilder counter(/*count_only=*/true);
    for (const TorchPickleEntry& e : some) counter.Add(e);
    EXPECT_EQ(counter.Finish(), BuildTorchPickle(some).size()) << n << " entries";
    EXPECT_EQ(counter.Take(), "");
  }
}

std::string MakeTorchFile(const std::vector<TorchPickleEntry>& entries,
                          const std::string& storage_bytes) {
  return MakeZip({{"archive/data.pkl", BuildTorchPickle(entries)},
                  {"archive/data/0", storage_bytes},
                  {"archive/version", "3\n"}});
}

TEST(TorchFile, WrittenPickleReadsBack) {
  const std::vector<uint64_t> shape{2, 2}, stride{2, 1}, tshape{2}, tstride{1};
  std::vector<TorchPickleEntry> entries{{"x.weight", Dtype::kF32, 0, 6, 0, shape, stride},
                                        {"x.bias", Dtype::kF32, 0, 6, 4, tshape, tstride}};
  MemorySource source("m.bin", MakeTorchFile(entries, Repeat('\1', 24)));
  auto file = ReadTorchFile(source);
  ASSERT_TRUE(file.ok()) << file.status().message();
  ASSERT_EQ(file->tensors.size(), 2u);
  EXPECT_EQ(file->storages.size(), 1u);
  EXPECT_EQ(file->tensors[1].name, "x.bias");
  EXPECT_EQ(file->tensors[1].storage_offset, 4u);
}

// The refusal ReadTorchFile gives for a file of one storage record and `entries`.
std::string Refusal(const std::string& name, const std::vector<TorchPickleEntry>& entries,
                    size_t storage_bytes) {
  MemorySource source(name, MakeTorchFile(entries, Repeat('\0', storage_bytes)));
  auto file = ReadTorchFile(source);
  return file.ok() ? "accepted" : file.status().message();
}

TEST(TorchFile, ViewPastItsStorageIsRefused) {
  const std::vector<uint64_t> shape{4}, stride{1};
  // The storage holds 4 floats; the view starts at element 2 and wants 4.
  EXPECT_THAT(Refusal("big.bin", {{"x", Dtype::kF32, 0, 4, 2, shape, stride}}, 16),
              HasSubstr("big.bin: tensor \"x\""));
}

TEST(TorchFile, StorageSizeMustMatchItsRecord) {
  const std::vector<uint64_t> shape{4}, stride{1};
  EXPECT_THAT(Refusal("short.bin", {{"x", Dtype::kF32, 0, 8, 0, shape, stride}}, 16),
              HasSubstr("holds 16 bytes"));
}

TEST(TorchFile, MissingStorageRecordIsRefused) {
  const std::vector<uint64_t> shape{1}, stride{1};
  EXPECT_THAT(Refusal("miss.bin", {{"x", Dtype::kF32, 7, 1, 0, shape, stride}}, 4),
              HasSubstr("archive/data/7 is missing"));
}

TEST(TorchFile, NulInANameIsRefused) {
  const std::vector<uint64_t> shape{1}, stride{1};
  const std::string name("a\0b", 3);
  EXPECT_THAT(Refusal("nul.bin", {{name, Dtype::kF32, 0, 1, 0, shape, stride}}, 4),
              HasSubstr("NUL byte"));
}

TEST(TorchFile, LegacyFormatsAreNamed) {
  std::string tar(1024, '\0');
  tar.replace(257, 5, "ustar");
  MemorySource tar_source("old.tar", tar);
  EXPECT_NE(ReadTorchFile(tar_source).status().message().find("legacy tar"), std::string::npos);
  MemorySource pickle_source("old.pt", std::string("\x80\x02\x8a\x0a", 4) + Repeat('\0', 20));
  EXPECT_NE(ReadTorchFile(pickle_source).status().message().find("legacy pickle"),
            std::string::npos);
}

TEST(TorchFile, NestedStateBecomesNamesAndJson) {
  // torch.save({"epoch": 10, "model": {"fc.weight": torch.zeros(2)}, "tags": ["a"]}).
  const std::string saved(
      "\x50\x4b\x03\x04\x00\x00\x08\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\x00\x10\x00\x12\x00\x61\x72"
      "\x63\x68\x69\x76\x65\x2f\x64\x61\x74\x61\x2e\x70\x6b\x6c\x46\x42\x0e\x00\x5a\x5a\x5a\x5a\x5a"
      "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
      "\x80\x02\x7d\x71\x00\x28\x58\x05\x00\x00\x00\x65\x70\x6f\x63\x68\x71\x01\x4b\x0a\x58\x05\x00"
      "\x00\x00\x6d\x6f\x64\x65\x6c\x71\x02"
      "\x7d\x71\x03\x58\x09\x00\x00\x00\x66\x63\x2e\x77\x65\x69\x67\x68\x74\x71\x04\x63\x74\x6f\x72"
      "\x63\x68\x2e\x5f\x75\x74\x69\x6c\x73"
      "\x0a\x5f\x72\x65\x62\x75\x69\x6c\x64\x5f\x74\x65\x6e\x73\x6f\x72\x5f\x76\x32\x0a\x71\x05\x28"
      "\x28\x58\x07\x00\x00\x00\x73\x74\x6f"
      "\x72\x61\x67\x65\x71\x06\x63\x74\x6f\x72\x63\x68\x0a\x46\x6c\x6f\x61\x74\x53\x74\x6f\x72\x61"
      "\x67\x65\x0a\x71\x07\x58\x01\x00\x00"
      "\x00\x30\x71\x08\x58\x03\x00\x00\x00\x63\x70\x75\x71\x09\x4b\x02\x74\x71\x0a\x51\x4b\x00\x4b"
      "\x02\x85\x71\x0b\x4b\x01\x85\x71\x0c"
      "\x89\x63\x63\x6f\x6c\x6c\x65\x63\x74\x69\x6f\x6e\x73\x0a\x4f\x72\x64\x65\x72\x65\x64\x44\x69"
      "\x63\x74\x0a\x71\x0d\x29\x52\x71\x0e"
      "\x74\x71\x0f\x52\x71\x10\x73\x58\x04\x00\x00\x00\x74\x61\x67\x73\x71\x11\x5d\x71\x12\x58\x01"
      "\x00\x00\x00\x61\x71\x13\x61\x75\x2e"
      "\x50\x4b\x07\x08\xcd\xe8\xc0\x7c\xe0\x00\x00\x00\xe0\x00\x00\x00\x50\x4b\x03\x04\x00\x00\x08"
      "\x08\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x0e\x00\x24\x00\x61\x72\x63\x68\x69\x76\x65\x2f\x64"
      "\x61\x74\x61\x2f\x30\x46\x42\x20\x00"
      "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
      "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
      "\x00\x00\x00\x00\x00\x00\x00\x00\x50\x4b\x07\x08\x69\xdf\x22\x65\x08\x00\x00\x00\x08\x00\x00"
      "\x00\x50\x4b\x03\x04\x00\x00\x08\x08"
      "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x0f\x00\x3b\x00\x61"
      "\x72\x63\x68\x69\x76\x65\x2f\x76\x65"
      "\x72\x73\x69\x6f\x6e\x46\x42\x37\x00\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
      "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
      "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
      "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a"
      "\x33\x0a\x50\x4b\x07\x08\xd1\x9e\x67\x55\x02\x00\x00\x00\x02\x00\x00\x00\x50\x4b\x01\x02\x00"
      "\x00\x00\x00\x08\x08\x00\x00\x00\x00"
      "\x00\x00\xcd\xe8\xc0\x7c\xe0\x00\x00\x00\xe0\x00\x00\x00\x10\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x61\x72\x63\x68\x69\x76\x65\x2f\x64\x61\x74\x61\x2e\x70\x6b\x6c\x50\x4b\x01\x02\x00\x00\x00"
      "\x00\x08\x08\x00\x00\x00\x00\x00\x00"
      "\x69\xdf\x22\x65\x08\x00\x00\x00\x08\x00\x00\x00\x0e\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\x00\x30\x01\x00\x00\x61\x72"
      "\x63\x68\x69\x76\x65\x2f\x64\x61\x74\x61\x2f\x30\x50\x4b\x01\x02\x00\x00\x00\x00\x08\x08\x00"
      "\x00\x00\x00\x00\x00\xd1\x9e\x67\x55"
      "\x02\x00\x00\x00\x02\x00\x00\x00\x0f\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x98"
      "\x01\x00\x00\x61\x72\x63\x68\x69\x76"
      "\x65\x2f\x76\x65\x72\x73\x69\x6f\x6e\x50\x4b\x06\x06\x2c\x00\x00\x00\x00\x00\x00\x00\x1e\x03"
      "\x2d\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x03\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\xb7\x00\x00\x00\x00\x00"
      "\x00\x00\x12\x02\x00\x00\x00\x00\x00"
      "\x00\x50\x4b\x06\x07\x00\x00\x00\x00\xc9\x02\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x50\x4b"
      "\x05\x06\x00\x00\x00\x00\x03\x00\x03"
      "\x00\xb7\x00\x00\x00\x12\x02\x00\x00\x00\x00",
      811);
  MemorySource source("state.pt", saved);
  auto file = ReadTorchFile(source);
  ASSERT_TRUE(file.ok()) << file.status().message();
  ASSERT_EQ(file->tensors.size(), 1u);
  EXPECT_EQ(file->tensors[0].name, "model.fc.weight");
  EXPECT_EQ(file->state_json, R"({"epoch":10,"tags":["a"]})");
}

TEST(TorchFile, ContainersSharedAtEveryLevelAreRefusedQuickly) {
  // l0 = [1]; l(i+1) = [l(i), l(i)]: 60 levels would be 2^60 paths to walk.
  std::string p = "\x80\x02]K\x01a";
  for (int i = 0; i < 60; ++i) p += std::string("q\x00(h\x00h\x00l", 8);
  p += ".";
  std::string zip = MakeZip({{"archive/data.pkl", p}, {"archive/version", "3\n"}});
  MemorySource source("dag.pt", zip);
  auto file = ReadTorchFile(source);
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("shared too many times"), std::string::npos)
      << file.status().message();
}

TEST(TorchFile, RowMajorIgnoresUnitDimensions) {
  EXPECT_TRUE(IsRowMajor(std::vector<uint64_t>{2, 1, 3}, std::vector<uint64_t>{3, 99, 1}));
  EXPECT_FALSE(IsRowMajor(std::vector<uint64_t>{2, 3}, std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(IsRowMajor(std::vector<uint64_t>{0, 3}, std::vector<uint64_t>{7, 7}));
  EXPECT_EQ(RowMajorStrides(std::vector<uint64_t>{2, 3, 4}), (std::vector<uint64_t>{12, 4, 1}));
}

// File `ino` of `volume`, read through the same plan a FUSE read uses.
std::string ReadWholeFile(const Volume& volume, uint64_t ino) {
  const uint64_t size = volume.layout().Find(ino)->size;
  std::vector<ReadPiece> plan;
  std::string bytes(size, '\0');
  if (!volume.PlanRead(ino, 0, size, &plan).ok() ||
      !volume.ReadInto(plan, reinterpret_cast<uint8_t*>(bytes.data())).ok()) {
    return "read failed";
  }
  return bytes;
}

TEST(TorchLayout, TorchSourceGetsEveryViewAndStridedTensorsOnlyInTheBin) {
  auto ckpt = OpenCheckpointIn(testing::MemoryDir({{"pytorch_model.bin", kRealTorchFile},
                                                   {"training_args.bin", "not weights"}}),
                               testing::TestCodec());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_EQ(ckpt->format, CheckpointFormat::kTorch);
  auto volume = Volume::FromCheckpoint(std::move(ckpt).value(), testing::TestCodecPtr());
  const Layout& layout = volume->layout();
  const uint64_t tensors = layout.Lookup(Layout::kRoot, "tensors");
  EXPECT_NE(layout.Lookup(tensors, "w.npy"), 0u);
  EXPECT_NE(layout.Lookup(tensors, "tied.npy"), 0u);
  EXPECT_EQ(layout.Lookup(tensors, "t.npy"), 0u);  // strided
  EXPECT_EQ(layout.notes().size(), 1u);
  EXPECT_NE(layout.Lookup(Layout::kRoot, "training_args.bin"), 0u);  // not weights: shown

  // The merged .bin reads back with the same five tensors and three storages.
  const uint64_t bin = layout.Lookup(Layout::kRoot, "pytorch_model.bin");
  ASSERT_NE(bin, 0u);
  const std::string bytes = ReadWholeFile(*volume, bin);
  MemorySource merged("merged.bin", bytes);
  auto file = ReadTorchFile(merged);
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(file->tensors.size(), 5u);
  EXPECT_EQ(file->storages.size(), 3u);
  // The CRCs came from the source zip, so they describe the bytes served.
  auto entries = ReadZipDirectory(merged);
  ASSERT_TRUE(entries.ok());
  for (const TorchStorage& s : file->storages) EXPECT_NE(s.crc32, 0u);

  const uint64_t meta = layout.Lookup(layout.Lookup(Layout::kRoot, ".ckptfs"), "metadata.json");
  ASSERT_NE(meta, 0u);
}

// torch.save({"w": <f32[6]>, "d": {"k0": 0, "k1": 1, ...}}) with `keys` keys in "d", as
// pickle writes a dict: SETITEMS in batches of 1000.
std::string TorchFileWithBigDict(size_t keys) {
  const std::vector<uint64_t> shape{6}, stride{1};
  const std::vector<TorchPickleEntry> w{{"w", Dtype::kF32, 0, 6, 0, shape, stride}};
  std::string p = BuildTorchPickle(w);
  p.resize(p.size() - 2);  // SETITEMS, STOP: "d" joins the root's items
  auto unicode = [&](const std::string& text) {
    p += 'X';
    for (int i = 0; i < 4; ++i) p += static_cast<char>(text.size() >> (8 * i));
    p += text;
  };
  unicode("d");
  p += '}';
  for (size_t i = 0; i < keys; ++i) {
    if (i % 1000 == 0) p += '(';
    unicode("k" + std::to_string(i));
    p += 'J';  // BININT
    for (int b = 0; b < 4; ++b) p += static_cast<char>(i >> (8 * b));
    if (i % 1000 == 999 || i + 1 == keys) p += 'u';
  }
  p += "u.";
  return MakeZip(
      {{"archive/data.pkl", p}, {"archive/data/0", Repeat('\1', 24)}, {"archive/version", "3\n"}});
}

// A dict of 200,000 keys (3.4 MB of pickle) goes through the reader, the merged layout
// and .ckptfs/metadata.json in linear time: ordered_json's own member lookup made it
// quadratic (100,000 keys took inspect 29 s; 200,000 would take ~2 min).
TEST(TorchFile, BigDictStaysLinear) {
  constexpr size_t kKeys = 200'000;
  const std::string zip = TorchFileWithBigDict(kKeys);
  // CPU time, not wall time: the bound is on the work, whatever else the machine runs.
  const std::clock_t start = std::clock();
  auto ckpt =
      OpenCheckpointIn(testing::MemoryDir({{"pytorch_model.bin", zip}}), testing::TestCodec());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  auto volume = Volume::FromCheckpoint(std::move(ckpt).value(), testing::TestCodecPtr());
  const double cpu_seconds = static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
  EXPECT_LT(cpu_seconds, 3.0);
  const Layout& layout = volume->layout();
  const uint64_t meta = layout.Lookup(layout.Lookup(Layout::kRoot, ".ckptfs"), "metadata.json");
  ASSERT_NE(meta, 0u);
  const std::string text = ReadWholeFile(*volume, meta);
  const auto json = nlohmann::json::parse(text);  // sorted keys: linear to parse
  ASSERT_EQ(json["d"].size(), kKeys);
  EXPECT_EQ(json["d"]["k0"], 0);
  EXPECT_EQ(json["d"]["k199999"], 199999);
  // Member order is the pickle's.
  const size_t k1 = text.find("\"k1\": 1,"), k2 = text.find("\"k2\": 2,");
  EXPECT_LT(text.find("\"k0\": 0,"), k1);
  EXPECT_LT(k1, k2);
  EXPECT_LT(k2, text.find("\"k10\": 10,"));
}

TEST(TorchLayout, SafetensorsSourceGetsAMergedBin) {
  auto ckpt = OpenCheckpointIn(
      testing::MemoryDir(
          {{"model.safetensors",
            testing::MakeSafetensors({{"a", Dtype::kF16, {3}}, {"u", Dtype::kU16, {2}}})}}),
      testing::TestCodec());
  ASSERT_TRUE(ckpt.ok());
  auto volume = Volume::FromCheckpoint(std::move(ckpt).value(), testing::TestCodecPtr());
  const Layout& layout = volume->layout();
  const uint64_t bin = layout.Lookup(Layout::kRoot, "pytorch_model.bin");
  const std::string bytes = ReadWholeFile(*volume, bin);
  MemorySource merged("merged.bin", bytes);
  auto file = ReadTorchFile(merged);
  ASSERT_TRUE(file.ok()) << file.status().message();
  ASSERT_EQ(file->tensors.size(), 1u);  // U16 has no torch 1.13 type: noted, left out
  EXPECT_EQ(layout.notes().size(), 1u);
  EXPECT_EQ(bytes.substr(file->storages[0].data_offset, 6),
            testing::TensorBytes({"a", Dtype::kF16, {3}}));
}

}  // namespace
}  // namespace ckptfs
