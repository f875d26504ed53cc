// Mount tests of two promises about compressed shards (issue 10, items 5 and 11):
// - a .zst shard rewritten in place after mount (same size) gives EIO, never a mix of
//   old and new bytes, whether its frames are decoded through the cache (multi-frame,
//   seekable without checksums) or through the spill file (single-frame);
// - the daemon's peak RSS stays within --cache-size plus the fixed overhead that
//   core/cache/read_context.h states, for 4 MiB frames (`ckptfs pack`) and 60 MiB
//   single-frame shards, under many parallel readers.
// The fixtures' names hold "Zstd" so the zstd mount test filter picks them up.

#include <fstream>

#include "mount_harness.h"

namespace ckptfs::mount_test {
namespace {

// The fixed overhead read_context.h states: RSS <= --cache-size + this.
constexpr uint64_t kFixedOverheadBytes = 40ull << 20;

// Peak resident memory (VmHWM) of process `pid`, in bytes; 0 if unreadable.
uint64_t PeakRss(pid_t pid) { return ProcStatusBytes(pid, "VmHWM:"); }

// Reads `paths` under `mountpoint` in parallel with cat; returns cat's stderr lines and
// exit status, as one shell run.
ProcessResult CatInParallel(const std::string& mountpoint, const std::vector<std::string>& paths) {
  std::string script;
  for (const std::string& path : paths) {
    script += "cat \"$1/" + path + "\" > /dev/null & pids=\"$pids $!\"; ";
  }
  script += "fail=0; for pid in $pids; do wait $pid || fail=1; done; exit $fail";
  return RunProcess({"/bin/sh", "-c", script, "sh", mountpoint}, kCheckTimeout);
}

// Up to `n` files under tensors/, relative to the mount point, largest first.
std::vector<std::string> SomeTensors(const std::string& mountpoint, size_t n) {
  std::vector<std::pair<uintmax_t, std::string>> files;
  for (const auto& entry : fs::recursive_directory_iterator(mountpoint + "/tensors")) {
    if (!entry.is_regular_file()) continue;
    files.emplace_back(entry.file_size(), fs::relative(entry.path(), mountpoint).string());
  }
  std::sort(files.rbegin(), files.rend());
  std::vector<std::string> out;
  for (size_t i = 0; i < files.size() && i < n; ++i) out.push_back(files[i].second);
  return out;
}

// ---------------------------------------------------------------------------
// A shard rewritten in place

struct RewriteCase {
  const char* name;
  std::vector<std::string> compress_args;
  std::vector<std::string> mount_args;
  bool read_before;  // read some of the shard first (single-frame: it is spilled then)
};

class ZstdRewriteMountTest : public MountFixture,
                             public testing::WithParamInterface<RewriteCase> {};

// Rewrites `path` in place with its own bytes: same size, same inode, new mtime (and
// ctime). What the file now holds does not matter: the identity taken at mount no longer
// matches, so nothing decoded after this may be served.
void RewriteInPlace(const std::string& path) {
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::fstream out(path, std::ios::binary | std::ios::in | std::ios::out);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

TEST_P(ZstdRewriteMountTest, ShardRewrittenAfterMountGivesEio) {
  const RewriteCase& c = GetParam();
  const std::string plain = scratch_->Path("plain");
  const std::string source = scratch_->Path("zst");
  ASSERT_NO_FATAL_FAILURE(Generate(plain, {"--kind", "bench", "--total-bytes", "8M", "--tensors",
                                           "8", "--shards", "1", "--single"}));
  std::vector<std::string> args = {"--from", plain};
  args.insert(args.end(), c.compress_args.begin(), c.compress_args.end());
  ASSERT_NO_FATAL_FAILURE(Generate(source, args));
  const std::string shard = source + "/model.safetensors.zst";
  ASSERT_TRUE(fs::exists(shard));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint, nullptr, c.mount_args));
  const std::vector<std::string> tensors = SomeTensors(mountpoint, 8);
  ASSERT_GE(tensors.size(), 4u);
  if (c.read_before) {
    const ProcessResult first = CatInParallel(mountpoint, {tensors[0]});
    ASSERT_EQ(first.exit_code, 0) << first.Describe();
  }
  ASSERT_NO_FATAL_FAILURE(RewriteInPlace(shard));
  // Tensors not read yet: their frames (or the spill file) must be checked.
  const ProcessResult after = CatInParallel(mountpoint, {tensors[2], tensors[3]});
  EXPECT_NE(after.exit_code, 0) << "reads after an in-place rewrite succeeded; "
                                << after.Describe();
  EXPECT_NE(after.err.find("Input/output error"), std::string::npos) << after.Describe();
}

const RewriteCase kRewriteCases[] = {
    {"multiframe-no-checksums",
     {"--compress", "multiframe", "--frame-size", kFrameSize, "--no-frame-checksums"},
     {"--cache-size", "4M"},
     true},
    {"seekable-no-seek-checksums",
     {"--compress", "seekable", "--frame-size", kFrameSize, "--no-seek-checksums"},
     {"--cache-size", "4M"},
     true},
    {"single-frame-spill-first", {"--compress", "single"}, {"--cache-size", "1M"}, true},
    {"single-frame-spill-after", {"--compress", "single"}, {"--cache-size", "1M"}, false},
};
INSTANTIATE_TEST_SUITE_P(Shards, ZstdRewriteMountTest, testing::ValuesIn(kRewriteCases),
                         CaseName<RewriteCase>);

// ---------------------------------------------------------------------------
// Peak memory with a 1 MiB cache

using ZstdMemoryMountTest = MountFixture;

// 16 parallel readers of tensors/ plus one of model.safetensors, with --cache-size 1M, over
// (a) `ckptfs pack --frame-size 4M` and (b) two 60 MiB single-frame shards. Before the
// bound: 77 MiB and 372 MiB peak.
TEST_F(ZstdMemoryMountTest, PeakRssStaysWithinCacheAndFixedOverhead) {
  const std::string plain = scratch_->Path("plain");
  ASSERT_NO_FATAL_FAILURE(Generate(
      plain, {"--kind", "bench", "--total-bytes", "120M", "--tensors", "24", "--shards", "2"}));
  const std::string packed = scratch_->Path("packed");
  const ProcessResult pack = Ckptfs({"pack", plain, packed, "--frame-size", "4M"}, kCheckTimeout);
  ASSERT_EQ(pack.exit_code, 0) << pack.Describe();
  const std::string single = scratch_->Path("single");
  ASSERT_NO_FATAL_FAILURE(Generate(single, {"--from", plain, "--compress", "single"}));

  constexpr uint64_t kCache = 1 << 20;
  for (const std::string& source : {packed, single}) {
    SCOPED_TRACE(source);
    const std::string mountpoint = scratch_->MakeDir("mnt-" + fs::path(source).filename().string());
    ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint, nullptr,
                                  {"--cache-size", "1M", "--spill-dir", scratch_->path()}));
    const pid_t daemon = DaemonOf(mountpoint);
    ASSERT_GT(daemon, 0) << "no single daemon for " << mountpoint;
    std::vector<std::string> paths = SomeTensors(mountpoint, 16);
    paths.push_back("model.safetensors");
    const ProcessResult r = CatInParallel(mountpoint, paths);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    const uint64_t peak = PeakRss(daemon);
    std::cout << source << ": peak RSS " << (peak >> 10) << " KiB with --cache-size 1M\n";
    EXPECT_GT(peak, 0u);
    EXPECT_LE(peak, kCache + kFixedOverheadBytes) << "peak RSS " << (peak >> 20) << " MiB";
  }
}

}  // namespace
}  // namespace ckptfs::mount_test
