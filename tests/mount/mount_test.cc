// Mount tests: the real ckptfs binary over checkpoints made by
// scripts/make_checkpoint.py, read by real clients (numpy, mmap, cp) in
// tests/mount/check_*.py. The python checks recompute every expected value from the
// source shards; this file mounts, runs them, and checks the CLI's exit codes. The
// harness (deadlines, unmounting, fixtures) is in mount_harness.h; the zstd tests
// are in zstd_mount_test.cc.

#include "mount_harness.h"

namespace ckptfs::mount_test {
namespace {

// The checks of a mounted mixed checkpoint (every dtype and awkward name) run over every
// way of storing it, plain included: StoredCheckpointTest in stored_checkpoint_test.cc.

using MountTest = MountFixture;

// A directory holding one model.safetensors, and that file's own path, each mount to
// the same views as a sharded checkpoint.
TEST_F(MountTest, SingleFileSource) {
  const std::string dir = scratch_->Path("single");
  ASSERT_NO_FATAL_FAILURE(Generate(dir, {"--single"}));
  const std::string sources[] = {dir, dir + "/model.safetensors"};
  for (const std::string& source : sources) {
    SCOPED_TRACE("SOURCE " + source);
    const std::string mountpoint = scratch_->MakeDir("mnt" + std::to_string(mounts_.size()));
    ProcessResult mounted;
    ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint, &mounted, {"-v"}));
    // -v names SOURCE as given: the file, not its directory.
    EXPECT_EQ(mounted.out.substr(0, mounted.out.find('\n')),
              "ckptfs: mounted " + source + " at " + mountpoint + " (read-only)");
    for (const char* check : kMountChecks) RunCheck(check, {source, mountpoint});
  }
}

// 1 MiB of a merged file can span thousands of tiny tensors: each read must still go
// out as one reply (writev takes at most 1024 pieces, and a refused reply would leave
// the reader waiting forever), plain and from the zstd cache.
TEST_F(MountTest, ManyTinyTensorsPerRead) {
  const std::string plain = scratch_->Path("tiny");
  ASSERT_NO_FATAL_FAILURE(
      Generate(plain, {"--kind", "headers", "--shards", "4", "--tensors", "20000"}));
  const std::string packed = scratch_->Path("tiny.zst");
  ProcessResult pack = RunProcess({kCkptfs, "pack", plain, packed}, kGenerateTimeout);
  ASSERT_EQ(pack.exit_code, 0) << pack.Describe();
  for (const std::string& source : {plain, packed}) {
    SCOPED_TRACE("SOURCE " + source);
    const std::string mountpoint = scratch_->MakeDir("mnt" + std::to_string(mounts_.size()));
    ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint));
    RunCheck("check_merged.py", {plain, mountpoint});
    // A fresh plain source has no CRCs yet (the background pass fills them for the next
    // mount); `pack` wrote its output's.
    RunCheck("check_torch_bin.py",
             {plain, mountpoint, "--crc", source == plain ? "zero" : "valid"});
  }
}

TEST_F(MountTest, Inspect) {
  const std::string source = scratch_->Path("mixed");
  ASSERT_NO_FATAL_FAILURE(Generate(source));
  RunCheck("check_inspect.py", {kCkptfs, source});
}

// `ckptfs mount` returns only once the mount answers, and its daemon lets go of the
// caller's stdout/stderr (or `ckptfs mount ... | tee log` would never finish).
TEST_F(MountTest, MountReturnsWhenReadyAndDetaches) {
  const std::string source = scratch_->Path("mixed");
  ASSERT_NO_FATAL_FAILURE(Generate(source));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ProcessResult mount;
  ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint, &mount));
  EXPECT_FALSE(mount.left_pipes_open)
      << "the daemon still holds the stdout/stderr of `ckptfs mount`";
  const ProcessResult stat = RunProcess({"stat", "--", mountpoint + "/config.json"}, kMountTimeout);
  EXPECT_EQ(stat.exit_code, 0) << stat.Describe();
  // Facts of the data path go to the log and stats.json, not to the terminal (which
  // keeps only what concerns the checkpoint: here, tensors a view leaves out).
  EXPECT_EQ(mount.err.find("spliced"), std::string::npos) << mount.err;
  const ProcessResult stats =
      RunProcess({"cat", "--", mountpoint + "/.ckptfs/stats.json"}, kMountTimeout);
  EXPECT_NE(stats.out.find("\"replies_spliced\""), std::string::npos) << stats.out;
}

// Requests of at most 992 KiB (max_read) fit a reply and its header in a pipe of the
// default fs.pipe-max-size (1 MiB), so plain shards splice without CAP_SYS_RESOURCE
// (fs/fuse_ops.cc, kSplicedMaxRead): stats.json says so, and every byte of the merged file
// came by descriptor but the header's.
TEST_F(MountTest, PlainShardsSpliceOnAStockKernel) {
  std::ifstream max_file("/proc/sys/fs/pipe-max-size");
  uint64_t pipe_max = 0;
  if (!(max_file >> pipe_max) || pipe_max < (1u << 20)) {
    GTEST_SKIP() << "fs.pipe-max-size below its default of 1 MiB here: replies are copied";
  }
  // Tensors of 2 MiB: each request holds a few, well within the segments a pipe holds.
  const std::string source = scratch_->Path("bench");
  ASSERT_NO_FATAL_FAILURE(Generate(
      source, {"--kind", "bench", "--total-bytes", "16M", "--tensors", "8", "--shards", "2"}));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint, nullptr));
  const ProcessResult r = RunProcess(
      {kPython, "-c",
       "import json, sys\n"
       "mnt = sys.argv[1]\n"
       "data = open(mnt + '/model.safetensors', 'rb').read()\n"
       "s = json.load(open(mnt + '/.ckptfs/stats.json'))\n"
       "header = 8 + int.from_bytes(data[:8], 'little')\n"
       "print(s['replies_spliced'], s['requests']['bytes_by_descriptor'] >= len(data) - header)",
       mountpoint},
      kCheckTimeout);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(r.out, "True True\n") << r.out;
}

// `-o max_read=N` stays the user's: smaller requests still splice, larger ones (past what a
// 1 MiB pipe holds) are copied; either way the merged file is whole.
TEST_F(MountTest, UsersMaxReadIsKept) {
  const std::string source = scratch_->Path("mixed");
  ASSERT_NO_FATAL_FAILURE(Generate(source));
  struct Case {
    std::string max_read;
    bool megabyte_requests;  // any request over 256 KiB
  };
  for (const Case& c : {Case{"65536", false}, Case{"1048576", true}}) {
    const std::string mountpoint = scratch_->MakeDir("mnt" + c.max_read);
    ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint, nullptr, {"-o", "max_read=" + c.max_read}));
    RunCheck("check_merged.py", {source, mountpoint});
    const ProcessResult r =
        RunProcess({kPython, "-c",
                    "import json, sys\n"
                    "s = json.load(open(sys.argv[1] + '/.ckptfs/stats.json'))\n"
                    "sizes = [k for k, v in s['requests']['by_size'].items() if v]\n"
                    "print(s['replies_spliced'], ' '.join(sorted(sizes)))",
                    mountpoint},
                   kCheckTimeout);
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
    EXPECT_EQ(r.out.find("1M") != std::string::npos, c.megabyte_requests)
        << c.max_read << ": " << r.out;
    // 1 MiB replies do not fit a 1 MiB pipe: the daemon copies them.
    if (c.megabyte_requests) {
      EXPECT_EQ(r.out.rfind("False", 0), 0u) << r.out;
    }
  }
}

// A loader's mmap faults pages in through read-around of read_ahead_kb: the mount raises
// its window to four requests, 3968 KiB (fs/fuse_ops.cc, RaiseReadahead), so each fault
// asks for two whole requests, not one of half a request; stats.json's `requests` says
// what the kernel asked.
TEST_F(MountTest, LoadersMmapAsksForWholeRequests) {
  const std::string source = scratch_->Path("mixed");
  ASSERT_NO_FATAL_FAILURE(Generate(source));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint, nullptr));
  const ProcessResult r = RunProcess(
      {kPython, "-c",
       "import json, mmap, os, sys\n"
       "mnt = sys.argv[1]\n"
       "st = os.stat(mnt)\n"
       "bdi = '/sys/class/bdi/%d:%d/read_ahead_kb' % (os.major(st.st_dev), os.minor(st.st_dev))\n"
       "print(open(bdi).read().strip())\n"
       "fd = os.open(mnt + '/model.safetensors', os.O_RDONLY)\n"
       "m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)\n"
       "data = m[:]\n"
       "r = json.load(open(mnt + '/.ckptfs/stats.json'))['requests']\n"
       "print(sum(r['by_size'].values()), 'requests', sorted(r['by_size'].items()))",
       mountpoint},
      kCheckTimeout);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "3968") << r.out;
  EXPECT_NE(r.out.find("requests"), std::string::npos) << r.out;
}

// As systemd runs it (Type=notify): READY=1 once the mount answers, SIGTERM exits 0.
TEST_F(MountTest, ForegroundNotifiesReadyAndStopsCleanlyOnSigterm) {
  const std::string dir = scratch_->Path("ckpt");
  ASSERT_NO_FATAL_FAILURE(Generate(dir));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  mounts_.push_back(mountpoint);  // TearDown unmounts if the check could not
  RunCheck("check_notify.py", {kCkptfs, dir, mountpoint});
}

TEST_F(MountTest, UmountCommand) {
  const std::string source = scratch_->Path("mixed");
  ASSERT_NO_FATAL_FAILURE(Generate(source));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint));
  ASSERT_FALSE(ProcessesWithArg(mountpoint).empty())
      << "no daemon found with " << mountpoint << " in its command line";

  const ProcessResult umount = RunProcess({kCkptfs, "umount", mountpoint}, kMountTimeout);
  EXPECT_EQ(umount.exit_code, 0) << umount.Describe();
  ASSERT_FALSE(IsMounted(mountpoint));
  EXPECT_TRUE(WaitForNoDaemon(mountpoint, kDaemonExitTimeout))
      << "the daemon outlived its mount by " << kDaemonExitTimeout.count() << " ms";
  EXPECT_TRUE(fs::is_empty(mountpoint)) << "the mount point should be the empty dir again";

  // Unmounting what is not mounted is a refusal: non-zero, one line naming the path.
  const ProcessResult again = RunProcess({kCkptfs, "umount", mountpoint}, kMountTimeout);
  EXPECT_NE(again.exit_code, 0) << again.Describe();
  EXPECT_EQ(LineCount(again.err), 1) << again.Describe();
  EXPECT_NE(again.err.find(mountpoint), std::string::npos) << again.Describe();
}

// A shard truncated or rewritten under a live mount: reads of it fail with EIO and a log
// line naming the shard, never short or stale-versus-header bytes; other files still read.
TEST_F(MountTest, ShardChangedAfterMountGivesEio) {
  const std::string source = scratch_->Path("mixed");
  ASSERT_NO_FATAL_FAILURE(Generate(source));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  const std::string log = scratch_->Path("daemon.log");
  ASSERT_NO_FATAL_FAILURE(Mount(source, mountpoint, nullptr, {"--log-file", log}));
  const std::string shard = "model-00002-of-00008.safetensors";
  fs::resize_file(source + "/" + shard, fs::file_size(source + "/" + shard) / 2);

  const ProcessResult broken =
      RunProcess({"cat", "--", mountpoint + "/shards/" + shard}, kCheckTimeout);
  EXPECT_NE(broken.exit_code, 0) << broken.Describe();
  EXPECT_NE(broken.err.find("Input/output error"), std::string::npos) << broken.Describe();
  const ProcessResult intact = RunProcess(
      {"cat", "--", mountpoint + "/shards/model-00001-of-00008.safetensors"}, kCheckTimeout);
  EXPECT_EQ(intact.exit_code, 0) << intact.Describe();

  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(shard + ": file changed since mount"), std::string::npos) << text;
}

// Sources that are no checkpoint at all are refused like broken ones, naming the path.
TEST_F(MountTest, UnreadableSources) {
  const std::string empty = scratch_->MakeDir("empty");
  const std::string no_weights = scratch_->MakeDir("no_weights");
  std::ofstream(no_weights + "/config.json") << "{}\n";
  const std::string mountpoint = scratch_->MakeDir("mnt");
  mounts_.push_back(mountpoint);  // in case ckptfs wrongly mounts one anyway
  for (const std::string& source : {scratch_->Path("missing"), empty, no_weights}) {
    SCOPED_TRACE("SOURCE " + source);
    ExpectRefusal(RunProcess({kCkptfs, "mount", source, mountpoint}, kRefusalTimeout), {source});
    EXPECT_FALSE(IsMounted(mountpoint)) << "a refused source was left mounted";
    ExpectRefusal(RunProcess({kCkptfs, "inspect", source}, kRefusalTimeout), {source});
  }
}

// Usage errors are refusals too: exit 2 and one line ("Every refusal is one line").
TEST_F(MountTest, BadUsage) {
  const std::string mountpoint = scratch_->MakeDir("mnt");
  mounts_.push_back(mountpoint);
  const std::vector<std::vector<std::string>> usages = {
      {kCkptfs},
      {kCkptfs, "frobnicate"},
      {kCkptfs, "mount"},
      {kCkptfs, "mount", scratch_->path()},
      {kCkptfs, "mount", "--no-such-option", scratch_->path(), mountpoint},
      {kCkptfs, "inspect"},
      {kCkptfs, "umount"},
  };
  for (const std::vector<std::string>& argv : usages) {
    ExpectRefusal(RunProcess(argv, kRefusalTimeout), {});  // its message shows the argv
  }
  EXPECT_FALSE(IsMounted(mountpoint));
}

// ---------------------------------------------------------------------------
// Hostile inputs: each case (see make_checkpoint.py --kind hostile) is a valid
// 3-shard checkpoint broken in one way. ckptfs must refuse it quickly with exit 2
// and one line on stderr naming the offending file, and leave nothing mounted.

constexpr char kShard1[] = "model-00001-of-00003.safetensors";
constexpr char kShard2[] = "model-00002-of-00003.safetensors";
constexpr char kIndex[] = "model.safetensors.index.json";

struct HostileCase {
  const char* name;
  // The refusal must name one of these (files, or for index-escape the bad path).
  const char* offender;
  const char* other_offender;
};

void PrintTo(const HostileCase& c, std::ostream* os) { *os << c.name; }

const HostileCase kHostileCases[] = {
    {"missing-shard", kShard2, nullptr},
    {"truncated-shard", kShard2, nullptr},
    {"header-past-eof", kShard2, nullptr},
    {"bad-json", kShard2, nullptr},
    {"overlapping-offsets", kShard2, nullptr},
    {"out-of-range-offsets", kShard2, nullptr},
    {"shape-mismatch", kShard2, nullptr},
    // The name is in shards 1 and 2: either may be blamed.
    {"duplicate-tensor", kShard2, kShard1},
    {"index-escape", kIndex, "../"},
    {"huge-header", kShard2, nullptr},
    // The NUL name is in the index and in shard 2, whichever is read first.
    {"nul-name", kShard2, kIndex},
    {"bad-dtype", kShard2, nullptr},
    {"shape-overflow", kShard2, nullptr},
    {"offset-overflow", kShard2, nullptr},
};

class MountHostileTest : public MountFixture, public testing::WithParamInterface<HostileCase> {
 protected:
  // The names a refusal of this case may blame.
  static std::vector<std::string> Offenders(const HostileCase& c) {
    std::vector<std::string> names = {c.offender};
    if (c.other_offender != nullptr) names.push_back(c.other_offender);
    return names;
  }
};

TEST_P(MountHostileTest, HostileInputs) {
  const std::string source = scratch_->Path("hostile");
  ASSERT_NO_FATAL_FAILURE(Generate(source, {"--kind", "hostile", "--case", GetParam().name}));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  mounts_.push_back(mountpoint);  // in case ckptfs wrongly mounts it anyway

  {
    SCOPED_TRACE("ckptfs mount");
    ExpectRefusal(RunProcess({kCkptfs, "mount", source, mountpoint}, kRefusalTimeout),
                  Offenders(GetParam()));
    EXPECT_FALSE(IsMounted(mountpoint)) << "a refused checkpoint was left mounted";
    EXPECT_TRUE(WaitForNoDaemon(mountpoint, kDaemonExitTimeout)) << "a daemon was left running";
  }
  {
    SCOPED_TRACE("ckptfs inspect");
    ExpectRefusal(RunProcess({kCkptfs, "inspect", source}, kRefusalTimeout), Offenders(GetParam()));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, MountHostileTest, testing::ValuesIn(kHostileCases),
                         CaseName<HostileCase>);

}  // namespace
}  // namespace ckptfs::mount_test
