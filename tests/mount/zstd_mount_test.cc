// Mount tests of zstd-compressed checkpoints beyond the common checks (which every kind
// of storage passes in stored_checkpoint_test.cc): the decoded-block cache (a cache far
// smaller than a shard, stats.json counters), odd layouts, damaged and hostile .zst
// files, `verify`, and `ckptfs pack`. Compressed copies are made by
// scripts/make_checkpoint.py from a plain checkpoint with the same tensors, which the
// python checks are given as what they expect, so every byte read through a mount is
// compared with bytes no zstd decoder touched.

#include <regex>

#include "mount_harness.h"

namespace ckptfs::mount_test {
namespace {

constexpr milliseconds kPackTimeout = seconds(120);

std::string Slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// ---------------------------------------------------------------------------
// The cache, odd layouts, and pack

using ZstdMountTest = MountFixture;

// A cache of 1 MiB against shards of about 4 MiB (256 KiB frames): counters first on
// the fresh mount (misses, bounded decoding, evictions, charged <= capacity), then every
// check, then 16 concurrent random readers, all through constant eviction.
TEST_F(ZstdMountTest, CacheFarSmallerThanAShard) {
  const std::string plain = scratch_->Path("plain");
  const std::string source = scratch_->Path("seekable");
  ASSERT_NO_FATAL_FAILURE(Generate(plain, {"--shards", "2"}));
  ASSERT_NO_FATAL_FAILURE(
      Generate(source, {"--from", plain, "--compress", "seekable", "--frame-size", kFrameSize}));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint, nullptr, {"--cache-size", "1M"}));
  RunCheck("check_cache_stats.py", {plain, mountpoint, std::to_string(1 << 20),
                                    std::to_string(kFrameBytes), "--expect-evictions"});
  for (const char* check : kMountChecks) RunCheck(check, {plain, mountpoint});
  RunCheck("check_random_reads.py", {plain, mountpoint, "16", "200", "7"});
}

// stats.json of a compressed mount: the cache object and bytes_decompressed exist and
// move (a miss then a hit on the same tensor, decoding bounded by the frames touched).
TEST_F(ZstdMountTest, StatsCacheCounters) {
  const std::string plain = scratch_->Path("plain");
  const std::string source = scratch_->Path("seekable");
  ASSERT_NO_FATAL_FAILURE(Generate(plain));
  ASSERT_NO_FATAL_FAILURE(
      Generate(source, {"--from", plain, "--compress", "seekable", "--frame-size", kFrameSize}));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint, nullptr, {"--cache-size", "64M"}));
  RunCheck("check_cache_stats.py",
           {plain, mountpoint, std::to_string(64 << 20), std::to_string(kFrameBytes)});
  RunCheck("check_root.py", {plain, mountpoint});
}

// docs/architecture.md ("The read path"): a random read decodes only the frames it
// touches; the issue's target: bytes decoded <= requested + 2 frames per random read. 8 random
// tensors of 4 MiB (in 64 MiB of weight-like BF16, 1 MiB frames), each read whole through tensors/.
TEST_F(ZstdMountTest, TensorReadsDecodeOnlyTheirFrames) {
  const std::string plain = scratch_->Path("plain");
  const std::string source = scratch_->Path("seekable");
  ASSERT_NO_FATAL_FAILURE(Generate(
      plain, {"--kind", "bench", "--total-bytes", "64M", "--tensors", "16", "--shards", "2"}));
  ASSERT_NO_FATAL_FAILURE(
      Generate(source, {"--from", plain, "--compress", "seekable", "--frame-size", "1M"}));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint));
  RunCheck("check_tensor_decoding.py", {plain, mountpoint, std::to_string(1 << 20), "8"});
}

// Issue 28 locally: reading one tensor of a packed checkpoint decodes at most its frames,
// and stats.json's views charge it to tensors/ (check_packed_amplification.py).
TEST_F(ZstdMountTest, PackedTensorReadDecodesOnlyItsFrames) {
  const std::string plain = scratch_->Path("plain");
  ASSERT_NO_FATAL_FAILURE(Generate(
      plain, {"--kind", "bench", "--total-bytes", "96M", "--tensors", "16", "--shards", "2"}));
  const std::string packed = scratch_->Path("packed");
  const ProcessResult pack = Ckptfs({"pack", plain, packed, "--frame-size", "1M"}, kPackTimeout);
  ASSERT_EQ(pack.exit_code, 0) << pack.Describe();
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(packed, mountpoint));
  EXPECT_TRUE(RunCheck("check_packed_amplification.py", {plain, packed, mountpoint}));
}

// Multi-frame shards whose frames lack Frame_Content_Size: ckptfs may require content
// sizes (then mount refuses: exit 2, one line naming a shard) or compute them once at
// mount (then the mount is sound).
TEST_F(ZstdMountTest, MultiframeWithoutContentSizes) {
  const std::string plain = scratch_->Path("plain");
  const std::string source = scratch_->Path("multiframe");
  ASSERT_NO_FATAL_FAILURE(Generate(plain));
  ASSERT_NO_FATAL_FAILURE(Generate(source, {"--from", plain, "--compress", "multiframe",
                                            "--frame-size", kFrameSize, "--no-content-size"}));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  mounts_.push_back(mountpoint);
  const ProcessResult r = RunProcess({kCkptfs, "mount", source, mountpoint}, kMountTimeout);
  if (r.exit_code != 0) {
    std::cout << "mount refused frames without content sizes: " << r.err;
    ExpectRefusal(r, {".safetensors"});
    EXPECT_FALSE(IsMounted(mountpoint));
    return;
  }
  ASSERT_TRUE(IsMounted(mountpoint)) << r.Describe();
  for (const char* check : {"check_npy.py", "check_shards.py", "check_random_reads.py"}) {
    RunCheck(check, {plain, mountpoint});
  }
}

// NAME and NAME.zst side by side (--keep-plain): one shard, shown once, no .zst file
// at the root or in shards/.
TEST_F(ZstdMountTest, PlainNextToZst) {
  const std::string source = scratch_->Path("both");
  ASSERT_NO_FATAL_FAILURE(
      Generate(source, {"--compress", "seekable", "--frame-size", kFrameSize, "--keep-plain"}));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint));
  for (const char* check : {"check_root.py", "check_shards.py", "check_npy.py"}) {
    RunCheck(check, {source, mountpoint});
  }
}

// A directory holding only model.safetensors.zst mounts like one holding
// model.safetensors.
TEST_F(ZstdMountTest, SingleFileCheckpoint) {
  const std::string plain = scratch_->Path("plain");
  const std::string source = scratch_->Path("seekable");
  ASSERT_NO_FATAL_FAILURE(Generate(plain, {"--single"}));
  ASSERT_NO_FATAL_FAILURE(
      Generate(source, {"--from", plain, "--compress", "seekable", "--frame-size", kFrameSize}));
  ASSERT_TRUE(fs::exists(source + "/model.safetensors.zst"));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint));
  for (const char* check : kMountChecks) RunCheck(check, {plain, mountpoint});
}

// `ckptfs pack PLAIN DEST`: seekable shards with checksums that `zstd -d` decodes to
// PLAIN's shards (check_packed.py), a mount of DEST passing every check against PLAIN,
// `verify DEST` clean; and packing DEST again is refused without writing anything.
TEST_F(ZstdMountTest, PackThenMount) {
  const std::string plain = scratch_->Path("plain");
  const std::string dest = scratch_->Path("packed");
  ASSERT_NO_FATAL_FAILURE(Generate(plain));
  const ProcessResult pack =
      Ckptfs({"pack", plain, dest, "--level", "3", "--frame-size", kFrameSize}, kPackTimeout);
  ASSERT_EQ(pack.exit_code, 0) << pack.Describe();
  EXPECT_TRUE(RunCheck("check_packed.py", {plain, dest, std::to_string(kFrameBytes)}));

  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(dest, mountpoint));
  for (const char* check : kMountChecks) RunCheck(check, {plain, mountpoint});
  RunCheck("check_inspect.py", {kCkptfs, dest});
  const ProcessResult verify = Ckptfs({"verify", dest}, kVerifyTimeout);
  EXPECT_EQ(verify.exit_code, 0) << verify.Describe();

  const std::string again = scratch_->Path("packed-again");
  const ProcessResult repack = Ckptfs({"pack", dest, again}, kPackTimeout);
  SCOPED_TRACE("ckptfs pack of an already packed checkpoint");
  ExpectRefusal(repack, {dest, ".zst"});
  EXPECT_TRUE(!fs::exists(again) || fs::is_empty(again))
      << "a refused pack left files in " << again;
}

// `ckptfs pack --byte-group`: a mount of the grouped shards serves PLAIN's bytes
// (model.safetensors, tensors/ .npy, shards/ and every other check), `verify` is clean,
// and `zstd -d` of a grouped shard gives bytes of the shard's size that are not the
// shard's (the grouped ones), with the safetensors header untouched.
TEST_F(ZstdMountTest, PackByteGroupedThenMount) {
  const std::string plain = scratch_->Path("plain");
  const std::string dest = scratch_->Path("packed");
  ASSERT_NO_FATAL_FAILURE(Generate(plain, {"--shards", "2"}));
  const ProcessResult pack =
      Ckptfs({"pack", plain, dest, "--byte-group", "--level", "3", "--frame-size", "100000"},
             kPackTimeout);
  ASSERT_EQ(pack.exit_code, 0) << pack.Describe();
  const ProcessResult verify = Ckptfs({"verify", dest}, kVerifyTimeout);
  EXPECT_EQ(verify.exit_code, 0) << verify.Describe();

  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(dest, mountpoint));
  for (const char* check : kMountChecks) RunCheck(check, {plain, mountpoint});
  RunCheck("check_inspect.py", {kCkptfs, dest});
  // inspect says how each shard is stored, grouping included.
  const ProcessResult inspect = Ckptfs({"inspect", dest}, kVerifyTimeout);
  EXPECT_EQ(inspect.exit_code, 0) << inspect.Describe();
  EXPECT_NE(inspect.out.find("seekable zstd, "), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find(" frames, byte-grouped"), std::string::npos) << inspect.out;

  size_t grouped_shards = 0;
  for (const auto& entry : fs::directory_iterator(plain)) {
    const std::string name = entry.path().filename();
    if (!name.ends_with(".safetensors")) continue;
    const std::string decoded = scratch_->Path(name + ".zstd-d");
    const ProcessResult unzstd =
        RunProcess({"zstd", "-q", "-d", dest + "/" + name + ".zst", "-o", decoded}, kPackTimeout);
    ASSERT_EQ(unzstd.exit_code, 0) << unzstd.Describe();
    const std::string original = Slurp(entry.path());
    const std::string grouped = Slurp(decoded);
    ASSERT_EQ(grouped.size(), original.size()) << name;
    uint64_t header = 0;
    std::memcpy(&header, original.data(), 8);
    EXPECT_EQ(grouped.substr(0, 8 + header), original.substr(0, 8 + header)) << name;
    grouped_shards += grouped != original;
  }
  EXPECT_EQ(grouped_shards, 2u);
}

// A grouped shard whose record says element size 3: `mount` and `verify` refuse it (exit
// 2, one line naming the shard and the frame), nothing is mounted. The record is the seek
// table's last entry: the byte patched is its first region's element size.
TEST_F(ZstdMountTest, PackByteGroupedHostileRecordIsRefused) {
  const std::string plain = scratch_->Path("plain");
  const std::string dest = scratch_->Path("packed");
  ASSERT_NO_FATAL_FAILURE(Generate(plain, {"--single"}));
  const ProcessResult pack =
      Ckptfs({"pack", plain, dest, "--byte-group", "--frame-size", "100000"}, kPackTimeout);
  ASSERT_EQ(pack.exit_code, 0) << pack.Describe();
  const std::string shard = dest + "/model.safetensors.zst";
  std::string bytes = Slurp(shard);
  ASSERT_GT(bytes.size(), 64u);
  auto le32 = [&](size_t at) {
    uint32_t v = 0;
    std::memcpy(&v, bytes.data() + at, 4);
    return v;
  };
  const uint32_t frames = le32(bytes.size() - 9);
  const size_t table = 8 + size_t{frames} * 12 + 9;
  const uint32_t record_size = le32(bytes.size() - table + 8 + (frames - 1) * 12);
  const size_t record = bytes.size() - table - record_size;
  ASSERT_EQ(le32(record), 0x184D2A5Bu) << "no byte-group record where the seek table says";
  // header (8), version and frame count (8), frame index and region count (8), offset and
  // length (8): then the element size.
  bytes[record + 32] = 3;
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << bytes;

  SCOPED_TRACE("verify of a shard whose byte-group record is hostile");
  ExpectRefusal(Ckptfs({"verify", dest}, kVerifyTimeout), {"model.safetensors.zst"});
  const ProcessResult verify = Ckptfs({"verify", dest}, kVerifyTimeout);
  EXPECT_NE(verify.err.find("element size is not 2, 4 or 8"), std::string::npos)
      << verify.Describe();
  EXPECT_NE(verify.err.find("frame "), std::string::npos) << verify.Describe();
  const std::string mountpoint = scratch_->MakeDir("mnt");
  mounts_.push_back(mountpoint);
  ExpectRefusal(RunProcess({kCkptfs, "mount", dest, mountpoint}, kMountTimeout),
                {"model.safetensors.zst"});
  EXPECT_FALSE(IsMounted(mountpoint));
}

// `pack --shard-size` re-shards: a valid checkpoint (index and shards consistent, each
// shard within the size) with exactly PLAIN's tensors, mounting and passing every check.
TEST_F(ZstdMountTest, PackReshards) {
  const std::string plain = scratch_->Path("plain");
  const std::string dest = scratch_->Path("packed");
  ASSERT_NO_FATAL_FAILURE(Generate(plain));
  const ProcessResult pack =
      Ckptfs({"pack", plain, dest, "--level", "1", "--frame-size", "128K", "--shard-size", "3M"},
             kPackTimeout);
  ASSERT_EQ(pack.exit_code, 0) << pack.Describe();
  EXPECT_TRUE(RunCheck("check_packed.py",
                       {plain, dest, std::to_string(128 << 10), std::to_string(3 << 20)}));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(dest, mountpoint));
  // Expected values from DEST itself (shard names changed), decoded by `zstd -d`;
  // check_packed.py has shown DEST's tensors are PLAIN's.
  for (const char* check : kMountChecks) RunCheck(check, {dest, mountpoint});
  RunCheck("check_npy.py", {plain, mountpoint});
}

// `ckptfs pack --help` documents its options, and progress is for terminals only: run
// under a pseudo-terminal (script(1)) pack shows something, while with pipes (logs,
// CI) it writes no carriage returns or escape sequences.
TEST_F(ZstdMountTest, PackHelpAndProgress) {
  const ProcessResult help = Ckptfs({"pack", "--help"}, kRefusalTimeout);
  EXPECT_EQ(help.exit_code, 0) << help.Describe();
  for (const char* option : {"--level", "--frame-size", "--shard-size"}) {
    EXPECT_NE(help.out.find(option), std::string::npos) << option << "; " << help.Describe();
  }

  const std::string plain = scratch_->Path("plain");
  ASSERT_NO_FATAL_FAILURE(Generate(plain));
  const ProcessResult piped = Ckptfs({"pack", plain, scratch_->Path("piped")}, kPackTimeout);
  ASSERT_EQ(piped.exit_code, 0) << piped.Describe();
  const std::string logged = piped.out + piped.err;
  EXPECT_EQ(logged.find_first_of("\r\x1b"), std::string::npos)
      << "progress drawing on a pipe; " << piped.Describe();

  const std::string command =
      std::string(kCkptfs) + " pack '" + plain + "' '" + scratch_->Path("tty") + "'";
  const ProcessResult tty =
      RunProcess({"script", "-qefc", command, scratch_->Path("typescript")}, kPackTimeout);
  EXPECT_EQ(tty.exit_code, 0) << tty.Describe();
  EXPECT_FALSE(tty.out.empty()) << "no progress shown on a terminal; " << tty.Describe();
}

// Bad --cache-size values are usage errors.
TEST_F(ZstdMountTest, BadCacheSize) {
  const std::string source = scratch_->Path("plain");
  ASSERT_NO_FATAL_FAILURE(Generate(source));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  mounts_.push_back(mountpoint);
  for (const char* size : {"lots", "12Q", "-5M"}) {
    SCOPED_TRACE(std::string("--cache-size ") + size);
    ExpectRefusal(
        RunProcess({kCkptfs, "mount", "--cache-size", size, source, mountpoint}, kRefusalTimeout),
        {size});
    EXPECT_FALSE(IsMounted(mountpoint));
  }
}

// pack checks its source like mount does: a broken shard is refused, naming it.
TEST_F(ZstdMountTest, PackRefusesBrokenSource) {
  const std::string source = scratch_->Path("hostile");
  ASSERT_NO_FATAL_FAILURE(Generate(source, {"--kind", "hostile", "--case", "truncated-shard"}));
  const std::string dest = scratch_->Path("packed");
  ExpectRefusal(Ckptfs({"pack", source, dest}, kPackTimeout), {"model-00002-of-00003"});
  EXPECT_TRUE(!fs::exists(dest) || fs::is_empty(dest)) << "a refused pack left files in " << dest;
}

// ---------------------------------------------------------------------------
// Damaged and hostile .zst shards (make_checkpoint.py --kind hostile --case zst-*): a
// 3-shard checkpoint of 64 KiB frames whose shard 2 is broken so that, when the
// checkpoint still mounts, only model.layers.1.w1 is affected.

enum class ZstExpect {
  kRefuse,  // mount exits 2 quickly, one line naming the shard
  kEio,     // mount succeeds; reads of the damaged tensor give EIO, the rest is intact
  kEither,  // one or the other
};

struct ZstHostileCase {
  const char* name;
  ZstExpect expect;
};

void PrintTo(const ZstHostileCase& c, std::ostream* os) { *os << c.name; }

// Mirrors ZST_HOSTILE_CASES in make_checkpoint.py, which describes each case.
const ZstHostileCase kZstHostileCases[] = {
    {"zst-corrupt-frame", ZstExpect::kEio},
    {"zst-checksum-mismatch", ZstExpect::kEio},
    {"zst-lying-seek-table", ZstExpect::kEither},
    {"zst-lying-decoded-size", ZstExpect::kEither},
    {"zst-bomb", ZstExpect::kEither},
    {"zst-bomb-seek-table", ZstExpect::kRefuse},
    {"zst-bomb-multiframe", ZstExpect::kRefuse},
    {"zst-bomb-single", ZstExpect::kRefuse},
    {"zst-truncated", ZstExpect::kRefuse},
    {"zst-header-frame-corrupt", ZstExpect::kRefuse},
    {"zst-seek-table-reserved", ZstExpect::kRefuse},
    {"zst-seek-table-count", ZstExpect::kRefuse},
};

constexpr char kDamagedShard[] = "model-00002-of-00003.safetensors";
constexpr char kDamagedTensor[] = "model.layers.1.w1";
constexpr int kHostileFrameBytes = 64 << 10;

class ZstHostileTest : public MountFixture, public testing::WithParamInterface<ZstHostileCase> {
 protected:
  // The undamaged plain checkpoint every case starts from, made once.
  static void SetUpTestSuite() {
    suite_dir_ = new TempDir();
    suite_error_ =
        new std::string(GenerateCheckpoint(suite_dir_->Path("base"), {"--kind", "zstbase"}));
  }

  static void TearDownTestSuite() {
    delete suite_dir_;
    delete suite_error_;
  }

  void SetUp() override {
    MountFixture::SetUp();
    if (IsSkipped()) return;
    ASSERT_EQ(*suite_error_, "");
    base_ = suite_dir_->Path("base");
    source_ = scratch_->Path("hostile");
    ASSERT_NO_FATAL_FAILURE(Generate(source_, {"--kind", "hostile", "--case", GetParam().name}));
  }

  // The mount is up: the damaged tensor gives EIO, everything else reads back exactly,
  // the log names shard and offset, and the daemon is still serving.
  void ExpectEioAndSurvival(const std::string& mountpoint, const std::string& log) {
    RunCheck("check_damaged.py", {base_, mountpoint, kDamagedTensor, kDamagedShard,
                                  std::to_string(kHostileFrameBytes)});
    // "the read returns EIO with a log line naming shard and offset"
    const std::string text = ReadTextFile(log);
    const std::regex offset(R"(offset\D{0,4}\d)", std::regex::icase);
    bool found = false;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      if (line.find(kDamagedShard) != std::string::npos && std::regex_search(line, offset)) {
        found = true;
        break;
      }
    }
    EXPECT_TRUE(found) << "no line of the daemon log names " << kDamagedShard
                       << " and an offset (\"offset N\"); the log:\n"
                       << text;
    EXPECT_FALSE(ProcessesWithArg(mountpoint).empty()) << "the daemon died";
    const ProcessResult stat =
        RunProcess({"stat", "--", mountpoint + "/config.json"}, kMountTimeout);
    EXPECT_EQ(stat.exit_code, 0) << "the mount stopped answering: " << stat.Describe();
  }

  static TempDir* suite_dir_;
  static std::string* suite_error_;
  std::string base_;
  std::string source_;
};

TempDir* ZstHostileTest::suite_dir_ = nullptr;
std::string* ZstHostileTest::suite_error_ = nullptr;

TEST_P(ZstHostileTest, MountRefusesOrReadsFail) {
  const std::string mountpoint = scratch_->MakeDir("mnt");
  const std::string log = scratch_->Path("daemon.log");
  mounts_.push_back(mountpoint);
  const ProcessResult mount =
      RunProcess({kCkptfs, "mount", "--log-file", log, source_, mountpoint},
                 GetParam().expect == ZstExpect::kRefuse ? kRefusalTimeout : kMountTimeout);
  const ZstExpect expect = GetParam().expect;
  const bool refused = mount.exit_code != 0;
  if (expect == ZstExpect::kRefuse || (expect == ZstExpect::kEither && refused)) {
    SCOPED_TRACE("ckptfs mount must refuse");
    ExpectRefusal(mount, {kDamagedShard});
    EXPECT_FALSE(IsMounted(mountpoint)) << "a refused checkpoint was left mounted";
    EXPECT_TRUE(WaitForNoDaemon(mountpoint, kDaemonExitTimeout)) << "a daemon was left running";
    return;
  }
  ASSERT_EQ(mount.exit_code, 0) << "the damage is only visible when decoding; " << mount.Describe();
  ASSERT_TRUE(IsMounted(mountpoint));
  ExpectEioAndSurvival(mountpoint, log);
}

// verify decodes everything: exit 2, naming the damaged shard, whatever the case.
TEST_P(ZstHostileTest, VerifyReportsShard) {
  const ProcessResult r = Ckptfs({"verify", source_}, kVerifyTimeout);
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_NE((r.out + r.err).find(kDamagedShard), std::string::npos)
      << "verify should name " << kDamagedShard << "; " << r.Describe();
}

// A zstd bomb: 8 MiB of RLE blocks (4 bytes for 128 KiB of zeros each) in one frame
// whose header states no content size, 256 GiB decoded: learning its size took inspect
// 16-21 s and mount 16-18 s. Both now refuse within the refusal budget (1 s; frame_index.h
// bounds what a frame without a content size may decode), naming the file, as safetensors
// and as torch (whose zip directory is at the end of the decoded bytes).
TEST_F(ZstdMountTest, BombWithoutContentSizeIsRefusedQuickly) {
  std::string bomb = {'\x28', '\xb5', '\x2f', '\xfd', '\x00', '\x38'};  // no size, 128 KiB window
  constexpr uint32_t kRle = (128 << 10) << 3 | 1 << 1;
  const std::string block = {static_cast<char>(kRle), static_cast<char>(kRle >> 8),
                             static_cast<char>(kRle >> 16), '\0'};
  for (int i = 0; i < (2 << 20); ++i) bomb += block;
  bomb[bomb.size() - 4] |= 1;  // the last block
  for (const char* name : {"model.safetensors.zst", "pytorch_model.bin.zst"}) {
    SCOPED_TRACE(name);
    const std::string source = scratch_->MakeDir(std::string("bomb-") + name);
    {
      std::ofstream out(source + "/" + name, std::ios::binary);
      out << bomb;
    }
    ExpectRefusal(Ckptfs({"inspect", source}, kRefusalTimeout), {name});
    const std::string mountpoint = scratch_->MakeDir(std::string("mnt-") + name);
    mounts_.push_back(mountpoint);
    ExpectRefusal(RunProcess({kCkptfs, "mount", source, mountpoint}, kRefusalTimeout), {name});
    EXPECT_FALSE(IsMounted(mountpoint));
    fs::remove_all(source);
  }
}

// verify reports all the damage, not just the first: two shards damaged differently
// (a corrupt frame in shard 2, a checksum mismatch in shard 3) are both named. A mount
// of it fails reads of both damaged tensors and serves the rest.
TEST_F(ZstdMountTest, VerifyReportsEveryDamagedShard) {
  const std::string source = scratch_->Path("two");
  const std::string other = scratch_->Path("other");
  ASSERT_NO_FATAL_FAILURE(Generate(source, {"--kind", "hostile", "--case", "zst-corrupt-frame"}));
  ASSERT_NO_FATAL_FAILURE(Generate(
      other, {"--kind", "hostile", "--case", "zst-checksum-mismatch", "--damage-shard", "3"}));
  const std::string shard3 = "model-00003-of-00003.safetensors";
  fs::copy_file(other + "/" + shard3 + ".zst", source + "/" + shard3 + ".zst",
                fs::copy_options::overwrite_existing);

  const ProcessResult r = Ckptfs({"verify", source}, kVerifyTimeout);
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  for (const std::string shard : {kDamagedShard, shard3.c_str()}) {
    EXPECT_NE((r.out + r.err).find(shard), std::string::npos)
        << "verify should name " << shard << "; " << r.Describe();
  }

  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint));
  for (const char* tensor : {"1/w1.npy", "2/w1.npy"}) {
    const ProcessResult cat =
        RunProcess({"cat", "--", mountpoint + "/tensors/model/layers/" + tensor}, kCheckTimeout);
    EXPECT_NE(cat.err.find("Input/output error"), std::string::npos) << cat.Describe();
  }
  for (const char* tensor : {"0/w1.npy", "1/w0.npy", "2/w2.npy"}) {
    const ProcessResult cat =
        RunProcess({"cat", "--", mountpoint + "/tensors/model/layers/" + tensor}, kCheckTimeout);
    EXPECT_EQ(cat.exit_code, 0) << cat.Describe();
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, ZstHostileTest, testing::ValuesIn(kZstHostileCases),
                         CaseName<ZstHostileCase>);

}  // namespace
}  // namespace ckptfs::mount_test
