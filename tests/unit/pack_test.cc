#include "core/format/formats.h"
#include "core/pack/pack.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/codec/zstd_source.h"
#include "core/source/byte_source.h"
#include "core/volume/volume.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

using testing::IndexJson;
using testing::MakeSafetensors;
using testing::MemoryDir;
using testing::TensorBytes;
using testing::TestTensor;

const std::vector<TestTensor> kTensors = {{"a.w", Dtype::kF32, {300, 100}},
                                          {"b.w", Dtype::kBF16, {1000}},
                                          {"c", Dtype::kI64, {}},
                                          {"d", Dtype::kU8, {7}}};

class PackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dest_ = std::filesystem::temp_directory_path() /
            ("ckptfs-pack-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dest_);
    auto ckpt = OpenCheckpointIn(
        MemoryDir({{"s1.safetensors", MakeSafetensors({kTensors[0], kTensors[1]})},
                   {"s2.safetensors", MakeSafetensors({kTensors[2], kTensors[3]})},
                   {"model.safetensors.index.json", IndexJson({{"a.w", "s1.safetensors"},
                                                               {"b.w", "s1.safetensors"},
                                                               {"c", "s2.safetensors"},
                                                               {"d", "s2.safetensors"}})},
                   {"config.json", "{}"}}),
        testing::TestContext());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    source_ = Volume::FromCheckpoint(std::move(ckpt).value(), testing::TestContextPtr());
  }
  void TearDown() override { std::filesystem::remove_all(dest_); }

  // Every tensor of the packed checkpoint equals the source's.
  void ExpectSameTensors(const Checkpoint& packed) {
    ASSERT_EQ(packed.tensors.size(), kTensors.size());
    for (const Tensor& t : packed.tensors) {
      auto it = std::find_if(kTensors.begin(), kTensors.end(),
                             [&](const TestTensor& k) { return k.name == t.name; });
      ASSERT_NE(it, kTensors.end());
      std::string bytes(t.size, '\0');
      ASSERT_TRUE(packed.shards[t.shard]
                      .source->ReadAt(t.offset, {reinterpret_cast<uint8_t*>(bytes.data()), t.size})
                      .ok());
      EXPECT_EQ(bytes, TensorBytes(*it)) << t.name;
    }
  }

  std::filesystem::path dest_;
  std::unique_ptr<Volume> source_;
};

TEST_F(PackTest, KeepsShardsAndRoundTrips) {
  PackOptions options;
  options.frame_size = 4096;
  ASSERT_TRUE(PackCheckpoint(source_->checkpoint(), dest_, options).ok());
  EXPECT_TRUE(std::filesystem::exists(dest_ / "s1.safetensors.zst"));
  EXPECT_TRUE(std::filesystem::exists(dest_ / "config.json"));
  EXPECT_TRUE(std::filesystem::exists(dest_ / "model.safetensors.index.json"));
  EXPECT_FALSE(std::filesystem::exists(dest_ / "s1.safetensors"));
  ReadContext context({.cache_bytes = 1 << 20});
  auto packed = OpenCheckpoint(dest_, context);
  ASSERT_TRUE(packed.ok()) << packed.status().message();
  const auto* zstd = dynamic_cast<const ZstdSource*>(packed->shards[0].source.get());
  ASSERT_NE(zstd, nullptr);
  EXPECT_TRUE(zstd->index().seekable);
  EXPECT_GT(zstd->index().frames.size(), 20u);  // 120 KB of tensors in 4 KiB frames
  EXPECT_TRUE(zstd->index().frames[0].checksum.has_value());
  ExpectSameTensors(*packed);

  // Packing it again is refused, naming why.
  Status again = PackCheckpoint(*packed, dest_.string() + "-again", options);
  EXPECT_NE(again.message().find("already packed"), std::string::npos) << again.message();
  // So is a destination that holds files.
  EXPECT_NE(PackCheckpoint(source_->checkpoint(), dest_, options).message().find("not empty"),
            std::string::npos);
}

TEST_F(PackTest, ReshardsBySize) {
  PackOptions options;
  options.frame_size = 64 << 10;
  options.shard_size = 100'000;  // a.w alone is 120,000 bytes: it gets its own shard
  ASSERT_TRUE(PackCheckpoint(source_->checkpoint(), dest_, options).ok());
  ReadContext context({.cache_bytes = 1 << 20});
  auto packed = OpenCheckpoint(dest_, context);
  ASSERT_TRUE(packed.ok()) << packed.status().message();
  // Aligned order is c (8 bytes), a.w (120,000), b.w, d: a.w cannot join c, and b.w
  // cannot join a.w.
  ASSERT_EQ(packed->shards.size(), 3u);
  EXPECT_EQ(packed->shards[0].name, "model-00001-of-00003.safetensors");
  for (const Tensor& t : packed->tensors) {
    if (t.name == "a.w") {
      EXPECT_EQ(packed->shards[t.shard].name, "model-00002-of-00003.safetensors");
    }
  }
  ExpectSameTensors(*packed);
}

// What a killed pack leaves: finished files beside a NAME.part (garbage here). A rerun
// removes the .part, replaces the finished files, and reports what it wrote.
TEST_F(PackTest, RerunReplacesTheLeftoversOfAnInterruptedPack) {
  std::filesystem::create_directories(dest_);
  std::ofstream(dest_ / "s1.safetensors.zst") << "not zstd";
  std::ofstream(dest_ / "s2.safetensors.zst.part") << "half";
  PackOptions options;
  options.frame_size = 4096;
  PackSummary summary;
  Status s = PackCheckpoint(source_->checkpoint(), dest_, options, &summary);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_FALSE(std::filesystem::exists(dest_ / "s2.safetensors.zst.part"));
  EXPECT_EQ(summary.shards, 2u);
  EXPECT_EQ(summary.decoded_bytes, source_->checkpoint().shards[0].source->Size() +
                                       source_->checkpoint().shards[1].source->Size());
  EXPECT_EQ(summary.compressed_bytes, std::filesystem::file_size(dest_ / "s1.safetensors.zst") +
                                          std::filesystem::file_size(dest_ / "s2.safetensors.zst"));
  ReadContext context({.cache_bytes = 1 << 20});
  auto packed = OpenCheckpoint(dest_, context);
  ASSERT_TRUE(packed.ok()) << packed.status().message();
  ExpectSameTensors(*packed);

  // Finished now: replaced only with force.
  EXPECT_NE(PackCheckpoint(source_->checkpoint(), dest_, options).message().find("--force"),
            std::string::npos);
  options.force = true;
  EXPECT_TRUE(PackCheckpoint(source_->checkpoint(), dest_, options).ok());
}

// Whatever pack would not write stays, and makes DEST refused, force or not: a .part of
// another name, a directory where a shard goes, a symlink.
TEST_F(PackTest, NeverTouchesWhatItDoesNotWrite) {
  PackOptions options;
  options.frame_size = 4096;
  options.force = true;
  for (const char* name : {"notes.txt.part", "s1.safetensors.zst", "config.json"}) {
    SCOPED_TRACE(name);
    std::filesystem::remove_all(dest_);
    std::filesystem::create_directories(dest_);
    std::ofstream(dest_ / "s2.safetensors.zst.part") << "half";
    if (std::string(name) == "s1.safetensors.zst") {
      std::filesystem::create_directories(dest_ / name);
    } else if (std::string(name) == "config.json") {
      std::filesystem::create_symlink("/etc/hostname", dest_ / name);
    } else {
      std::ofstream(dest_ / name) << "mine";
    }
    Status s = PackCheckpoint(source_->checkpoint(), dest_, options);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.message();
    EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
    EXPECT_TRUE(std::filesystem::exists(dest_ / "s2.safetensors.zst.part"));
  }
}

TEST_F(PackTest, RefusesBadOptions) {
  PackOptions options;
  options.frame_size = 0;
  EXPECT_EQ(PackCheckpoint(source_->checkpoint(), dest_, options).code(),
            Status::Code::kInvalidArgument);
  options.frame_size = 4096;
  options.level = 99;
  EXPECT_EQ(PackCheckpoint(source_->checkpoint(), dest_, options).code(),
            Status::Code::kInvalidArgument);
}

// A checkpoint of several shards of a few MiB, in 64 KiB frames: enough frames per shard
// that threads overtake one another, and shards small enough that the pool runs across
// shard boundaries.
class PackThreadsTest : public PackTest {
 protected:
  static constexpr int kShards = 4;

  static std::string ShardName(int i) { return "w" + std::to_string(i) + ".safetensors"; }
  static std::vector<TestTensor> ShardTensors(int i) {
    const std::string p = "l" + std::to_string(i) + ".";
    return {{p + "w", Dtype::kF32, {200, 1000 + 37 * static_cast<uint64_t>(i)}},
            {p + "b", Dtype::kBF16, {150'001}},
            {p + "n", Dtype::kU8, {5}}};
  }
  // The files, with `wrap` applied to shard `wrapped` as it is opened.
  static Result<Checkpoint> Open(
      int wrapped = -1,
      std::function<std::unique_ptr<ByteSource>(std::unique_ptr<ByteSource>)> wrap = {}) {
    std::map<std::string, std::string> files;
    std::vector<std::pair<std::string, std::string>> index;
    for (int i = 0; i < kShards; ++i) {
      files[ShardName(i)] = MakeSafetensors(ShardTensors(i));
      for (const TestTensor& t : ShardTensors(i)) index.emplace_back(t.name, ShardName(i));
    }
    files["model.safetensors.index.json"] = IndexJson(index);
    files["config.json"] = "{}";
    SourceDir dir = MemoryDir(files);
    if (wrap) {
      auto open_memory = dir.open;
      dir.open = [=](const std::string& name) -> Result<std::unique_ptr<ByteSource>> {
        CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> src, open_memory(name));
        return name == ShardName(wrapped) ? wrap(std::move(src)) : std::move(src);
      };
    }
    return OpenCheckpointIn(dir, testing::TestContext());
  }
  // Every file in `dir`, by name.
  static std::map<std::string, std::string> Contents(const std::filesystem::path& dir) {
    std::map<std::string, std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      std::ifstream in(e.path(), std::ios::binary);
      std::ostringstream bytes;
      bytes << in.rdbuf();
      out[e.path().filename().string()] = bytes.str();
    }
    return out;
  }
  // The CRCs the frame workers computed on the way (`summary.range_crcs`) cover every
  // storage of the pack in dest_ and equal what a read back through its frames finds.
  void ExpectRangeCrcsMatchAReadBack(const PackSummary& summary) const {
    ReadContext context({.cache_bytes = 1 << 20});
    auto known = OpenCheckpoint(dest_, context);
    auto read = OpenCheckpoint(dest_, context);
    ASSERT_TRUE(known.ok() && read.ok());
    ASSERT_GE(known->storages.size(), 12u);
    EXPECT_EQ(ApplyRangeCrcs(*known, summary.range_crcs), known->storages.size());
    ASSERT_TRUE(ComputeStorageCrcs(*read).ok());
    for (size_t i = 0; i < read->storages.size(); ++i) {
      EXPECT_EQ(known->storages[i].crc32, read->storages[i].crc32) << "storage " << i;
    }
  }
  static size_t ThreadsNow() {
    auto tasks = std::filesystem::directory_iterator("/proc/self/task");
    return static_cast<size_t>(std::distance(begin(tasks), end(tasks)));
  }
};

// The output is the same bytes whatever the thread count: frames, seek tables, the
// byte-group record, the new index of a reshard. The zip CRCs the workers computed on the
// way match a read back, with storages cut by frame boundaries, byte-grouped frames
// (checksummed before grouping) and new shards.
TEST_F(PackThreadsTest, OutputIsTheSameForAnyThreadCount) {
  auto ckpt = Open();
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  struct Config {
    bool byte_group;
    uint64_t shard_size;
  };
  for (Config config : {Config{false, 0}, Config{true, 0}, Config{true, 1'500'000}}) {
    std::map<std::string, std::string> first;
    for (size_t threads : {1, 2, 3, 8}) {
      SCOPED_TRACE(::testing::Message() << "byte_group " << config.byte_group << " shard_size "
                                        << config.shard_size << " threads " << threads);
      PackOptions options;
      options.frame_size = 64 << 10;
      options.threads = threads;
      options.byte_group = config.byte_group;
      options.shard_size = config.shard_size;
      uint64_t last_done = 0, last_total = 0;
      options.progress = [&](uint64_t done, uint64_t total) {
        EXPECT_GE(done, last_done);  // called by the writer alone, in frame order
        last_done = done;
        last_total = total;
      };
      std::filesystem::remove_all(dest_);
      PackSummary summary;
      Status s = PackCheckpoint(*ckpt, dest_, options, &summary);
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_EQ(last_done, last_total);
      EXPECT_EQ(last_done, summary.decoded_bytes);
      ExpectRangeCrcsMatchAReadBack(summary);
      std::map<std::string, std::string> files = Contents(dest_);
      if (first.empty()) {
        first = std::move(files);
        EXPECT_GE(first.size(), 5u);
        continue;
      }
      ASSERT_EQ(files.size(), first.size());
      for (const auto& [name, bytes] : first) {
        EXPECT_TRUE(files[name] == bytes) << name << " differs";
      }
    }
    // And it reads back.
    ReadContext context({.cache_bytes = 1 << 20});
    auto packed = OpenCheckpoint(dest_, context);
    ASSERT_TRUE(packed.ok()) << packed.status().message();
    for (const Tensor& t : packed->tensors) {
      std::string bytes(t.size, '\0');
      ASSERT_TRUE(packed->shards[t.shard]
                      .source->ReadAt(t.offset, {reinterpret_cast<uint8_t*>(bytes.data()), t.size})
                      .ok());
      const std::string i(1, t.name[1]);
      const std::vector<TestTensor> tensors = ShardTensors(std::stoi(i));
      auto it = std::find_if(tensors.begin(), tensors.end(),
                             [&](const TestTensor& k) { return k.name == t.name; });
      ASSERT_NE(it, tensors.end());
      EXPECT_TRUE(bytes == TensorBytes(*it)) << t.name;
    }
  }
}

// A storage gets a CRC from ApplyRangeCrcs only when a known range matches its own in
// file, offset and length: nothing is guessed.
TEST_F(PackThreadsTest, RangeCrcsGiveOnlyWhatTheyCover) {
  auto ckpt = Open();
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  PackOptions options;
  options.frame_size = 64 << 10;
  PackSummary summary;
  ASSERT_TRUE(PackCheckpoint(*ckpt, dest_, options, &summary).ok());
  auto packed = OpenCheckpoint(dest_, testing::TestContext());
  ASSERT_TRUE(packed.ok());
  ASSERT_FALSE(packed->storages.empty());
  const Storage& first = packed->storages[0];
  const std::string& file = packed->shards[first.shard].name;
  RangeCrcs one_short;  // the first storage's offset, one byte short
  one_short[file].push_back({first.offset, first.size - 1, 0});
  EXPECT_EQ(ApplyRangeCrcs(*packed, one_short), 0u);
  RangeCrcs just_it;  // the pack's CRC of that storage alone
  const std::vector<RangeCrc>& all = summary.range_crcs.at(file);
  auto it = std::find_if(all.begin(), all.end(),
                         [&](const RangeCrc& r) { return r.offset == first.offset; });
  ASSERT_NE(it, all.end());
  just_it[file].push_back(*it);
  EXPECT_EQ(ApplyRangeCrcs(*packed, just_it), 1u);
  EXPECT_TRUE(packed->storages[0].has_crc32);
}

// A read that fails mid-pack stops it: the first failing frame's error (the same for any
// thread count), every worker joined, the failing shard and those after it not written and
// no .part left; the shards before it are finished.
TEST_F(PackThreadsTest, ReadErrorStopsThePackCleanly) {
  std::string first_error;
  for (size_t threads : {1, 2, 8}) {
    SCOPED_TRACE(::testing::Message() << "threads " << threads);
    // Shard 1 reads fine up to its middle, then every read fails as a short file would.
    auto ckpt = Open(1, [](std::unique_ptr<ByteSource> src) -> std::unique_ptr<ByteSource> {
      const uint64_t half = src->Size() / 2;
      return std::make_unique<FaultySource>(std::move(src),
                                            FaultySource::Faults{.readable_bytes = half});
    });
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    std::filesystem::remove_all(dest_);
    PackOptions options;
    options.frame_size = 64 << 10;
    options.threads = threads;
    const size_t threads_before = ThreadsNow();
    Status s = PackCheckpoint(*ckpt, dest_, options);
    EXPECT_EQ(ThreadsNow(), threads_before);
    ASSERT_EQ(s.code(), Status::Code::kIoError) << s.message();
    EXPECT_NE(s.message().find("injected short read"), std::string::npos) << s.message();
    if (first_error.empty()) first_error = s.message();
    EXPECT_EQ(s.message(), first_error);
    const std::map<std::string, std::string> files = Contents(dest_);
    EXPECT_EQ(files.count(ShardName(0) + ".zst"), 1u);
    for (const auto& [name, bytes] : files) {
      EXPECT_EQ(name, ShardName(0) + ".zst") << "left behind";
    }
  }
}

}  // namespace
}  // namespace ckptfs
