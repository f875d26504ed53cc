// Zip CRCs of the merged pytorch_model.bin of safetensors sources (core/crc/zip_crc.h):
// the real binary, checked with the real `unzip -t` and `python3 -m zipfile -t`. A fresh
// source serves CRC 0 while a background pass writes the sidecar; the next mount carries
// the CRCs. A sidecar whose shard changed, or a damaged one, is not used; a packed source
// carries its own.

#include <chrono>
#include <thread>

#include "mount_harness.h"

namespace ckptfs::mount_test {
namespace {

class ZipCrcMountTest : public MountFixture {
 protected:
  // Mounts `source` with its own sidecar directory and log; returns the mount point.
  std::string MountWithCache(const std::string& source, std::vector<std::string> options = {}) {
    const std::string n = std::to_string(mounts_.size());
    const std::string mountpoint = scratch_->MakeDir("mnt" + n);
    // The background pass says it is done at info level.
    options.insert(options.end(),
                   {"--cache-dir", Cache(), "--log-file", Log(), "--log-level", "info"});
    ProcessResult r;
    Mount(source, mountpoint, &r, options);
    mount_stderr_ += r.err;
    return mountpoint;
  }
  std::string Cache() { return scratch_->Path("cache"); }
  std::string Log() { return scratch_->Path("daemon.log"); }
  // What the mounts and their daemons logged (lines before the daemon starts go to the
  // terminal of `ckptfs mount`).
  std::string Logged() { return mount_stderr_ + ReadTextFile(Log()); }
  std::string mount_stderr_;

  // stats.json's zip_crc.state, read through a child (a hung mount cannot hang the test).
  std::string CrcState(const std::string& mountpoint) {
    const ProcessResult r = RunProcess(
        {kPython, "-c", "import json,sys; print(json.load(open(sys.argv[1]))['zip_crc']['state'])",
         mountpoint + "/.ckptfs/stats.json"},
        kCheckTimeout);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    return r.out.empty() ? "" : r.out.substr(0, r.out.size() - 1);
  }

  // Waits (at most 60 s) for the background pass to save the sidecar.
  void WaitForSidecar(const std::string& mountpoint) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::string state = CrcState(mountpoint);
    while (state == "computing" && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      state = CrcState(mountpoint);
    }
    ASSERT_EQ(state, "saved_for_next_mount");
  }

  // Whether both zip testers accept pytorch_model.bin.
  void ExpectZipTesters(const std::string& mountpoint, bool pass) {
    const std::string bin = mountpoint + "/pytorch_model.bin";
    const ProcessResult unzip = RunProcess({"unzip", "-tq", bin}, kCheckTimeout);
    const ProcessResult zipfile = RunProcess({kPython, "-m", "zipfile", "-t", bin}, kCheckTimeout);
    // zipfile -t exits 0 either way; it names the first bad record "corrupted".
    EXPECT_EQ(zipfile.exit_code, 0) << zipfile.Describe();
    if (pass) {
      EXPECT_EQ(unzip.exit_code, 0) << unzip.Describe();
      EXPECT_EQ(zipfile.out.find("corrupted"), std::string::npos) << zipfile.Describe();
      EXPECT_NE(zipfile.out.find("Done testing"), std::string::npos) << zipfile.Describe();
    } else {
      EXPECT_NE(unzip.exit_code, 0) << unzip.Describe();
      EXPECT_NE(unzip.out.find("bad CRC"), std::string::npos) << unzip.Describe();
      EXPECT_NE(zipfile.out.find("corrupted"), std::string::npos) << zipfile.Describe();
    }
  }

  void Unmount(const std::string& mountpoint) {
    const ProcessResult r = Ckptfs({"umount", mountpoint}, kCheckTimeout);
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
    ASSERT_TRUE(WaitForNoDaemon(mountpoint, std::chrono::seconds(10)));
  }
};

// The path a user takes: mount (CRCs 0, pass in the background), remount (CRCs known).
TEST_F(ZipCrcMountTest, BackgroundPassThenRemountPassesZipTesters) {
  const std::string source = scratch_->Path("src");
  ASSERT_NO_FATAL_FAILURE(Generate(source, {"--kind", "llama"}));
  const std::string first = MountWithCache(source);
  ASSERT_NO_FATAL_FAILURE(WaitForSidecar(first));
  ExpectZipTesters(first, false);  // bytes never change under a mounted file
  EXPECT_NE(Logged().find("zip CRCs: background pass done in"), std::string::npos);
  ASSERT_NO_FATAL_FAILURE(Unmount(first));
  const std::string second = MountWithCache(source);
  EXPECT_EQ(CrcState(second), "known");
  ExpectZipTesters(second, true);
  RunCheck("check_torch_bin.py", {source, second, "--crc", "valid"});
  // inspect says where they come from.
  const ProcessResult inspect = Ckptfs({"inspect", source, "--cache-dir", Cache()}, kCheckTimeout);
  EXPECT_NE(inspect.out.find("zip CRCs: known (sidecar " + Cache() + "/crc/"), std::string::npos)
      << inspect.Describe();
}

// --zip-crc off: CRC fields stay 0 even with a sidecar at hand; mount computes them first.
TEST_F(ZipCrcMountTest, OffLeavesZeroAndMountComputes) {
  const std::string source = scratch_->Path("src");
  ASSERT_NO_FATAL_FAILURE(Generate(source, {"--kind", "llama"}));
  const std::string computed = MountWithCache(source, {"--zip-crc", "mount"});
  EXPECT_EQ(CrcState(computed), "known");
  ExpectZipTesters(computed, true);
  const std::string off = MountWithCache(source, {"--zip-crc", "off"});
  EXPECT_EQ(CrcState(off), "not_computed");
  RunCheck("check_torch_bin.py", {source, off, "--crc", "zero"});
  ExpectZipTesters(off, false);
}

// A shard rewritten after the sidecar was saved: the old sidecar is not used.
TEST_F(ZipCrcMountTest, ChangedShardIgnoresSidecar) {
  const std::string source = scratch_->Path("src");
  ASSERT_NO_FATAL_FAILURE(Generate(source, {"--kind", "llama"}));
  const std::string first = MountWithCache(source, {"--zip-crc", "mount"});
  ASSERT_NO_FATAL_FAILURE(Unmount(first));
  // Same bytes and size, new file: a copy renamed over the shard.
  const std::string shard = source + "/model-00001-of-00002.safetensors";
  ASSERT_EQ(RunProcess({"cp", shard, shard + ".new"}, kCheckTimeout).exit_code, 0);
  ASSERT_EQ(RunProcess({"mv", shard + ".new", shard}, kCheckTimeout).exit_code, 0);
  const std::string second = MountWithCache(source);
  EXPECT_NE(CrcState(second), "known") << "a sidecar keyed by the old shard was used";
  ExpectZipTesters(second, false);
}

// A damaged sidecar is ignored with a log line naming it, and rewritten by the pass.
TEST_F(ZipCrcMountTest, CorruptSidecarIgnoredWithLogLine) {
  const std::string source = scratch_->Path("src");
  ASSERT_NO_FATAL_FAILURE(Generate(source, {"--kind", "llama"}));
  const std::string first = MountWithCache(source);
  ASSERT_NO_FATAL_FAILURE(WaitForSidecar(first));
  ASSERT_NO_FATAL_FAILURE(Unmount(first));
  const ProcessResult find = RunProcess({"find", Cache() + "/crc", "-type", "f"}, kCheckTimeout);
  ASSERT_EQ(LineCount(find.out), 1) << find.Describe();
  const std::string sidecar = find.out.substr(0, find.out.size() - 1);
  ASSERT_EQ(RunProcess({"truncate", "-s", "-4", sidecar}, kCheckTimeout).exit_code, 0);
  const std::string second = MountWithCache(source);
  ASSERT_NO_FATAL_FAILURE(WaitForSidecar(second));
  ExpectZipTesters(second, false);
  const std::string log = Logged();
  EXPECT_NE(log.find(sidecar + ": "), std::string::npos) << log;
  EXPECT_NE(log.find("; ignored"), std::string::npos) << log;
  ASSERT_NO_FATAL_FAILURE(Unmount(second));
  ExpectZipTesters(MountWithCache(source), true);  // the pass wrote a good one
}

// `ckptfs pack` output carries its CRCs: zip testers pass on its first mount, with an
// empty sidecar directory.
TEST_F(ZipCrcMountTest, PackedSourcePassesOnFirstMount) {
  const std::string source = scratch_->Path("src");
  const std::string packed = scratch_->Path("packed");
  ASSERT_NO_FATAL_FAILURE(Generate(source, {"--kind", "llama"}));
  const ProcessResult pack = Ckptfs({"pack", source, packed, "--frame-size", "1M"}, kCheckTimeout);
  ASSERT_EQ(pack.exit_code, 0) << pack.Describe();
  const std::string mountpoint = MountWithCache(packed);
  EXPECT_EQ(CrcState(mountpoint), "known");
  ExpectZipTesters(mountpoint, true);
  const ProcessResult ls = RunProcess({"ls", "-A", mountpoint}, kCheckTimeout);
  EXPECT_EQ(ls.out.find(".ckptfs-zip-crc"), std::string::npos) << ls.out;
}

}  // namespace
}  // namespace ckptfs::mount_test
