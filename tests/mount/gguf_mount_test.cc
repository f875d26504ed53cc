// GGUF files mounted as a user sees them (core/format/gguf): the files gguf-py wrote
// (../shared/fixtures/gguf, its NOTICE.md and manifest.json; skipped when absent) read in
// place. One file (F16, BF16, and Q8_0/Q4_0 mixed), the split set split3/ from its directory
// or one of its splits, packed with `ckptfs pack`, over HTTP and S3; inspect's lines; and
// bad files and sets written by make_gguf_hostile.py, each refused in one line.
// tests/mount/check_gguf.py reads every view (the root's .gguf files, tensors/ with numpy
// and xattrs, model.safetensors by hand, pytorch_model.bin with torch, metadata.json)
// against the manifest's sha256s and the fixtures' bytes.
#include <filesystem>

#include "remote_harness.h"

namespace ckptfs::mount_test {
namespace {

namespace fs = std::filesystem;

const fs::path kGgufFixtures = fs::path(kSourceDir) / ".." / "shared" / "fixtures" / "gguf";
constexpr char kSplitSet[] = "split3";
constexpr char kFirstSplit[] = "tiny-llama-f16-00001-of-00003.gguf";
constexpr char kSecondSplit[] = "tiny-llama-f16-00002-of-00003.gguf";
constexpr char kMixed[] = "tiny-llama-mixed.gguf";

class GgufMountTest : public MountFixture {
 protected:
  void SetUp() override {
    MountFixture::SetUp();
    if (IsSkipped()) return;
    if (!fs::is_directory(kGgufFixtures)) {
      GTEST_SKIP() << kGgufFixtures << " is absent (a user's clone): GGUF fixtures skipped";
    }
    fixtures_ = fs::canonical(kGgufFixtures).string();
  }

  std::string MountFresh(const std::string& source, const std::vector<std::string>& options = {},
                         ProcessResult* result = nullptr) {
    const std::string mountpoint = scratch_->MakeDir("mnt" + std::to_string(mounts_.size()));
    Mount(source, mountpoint, result, options);
    return mountpoint;
  }

  // check_gguf.py over `pairs` (CASE=MNT): CASE a file or split set of the manifest.
  bool CheckMounts(const std::vector<std::string>& pairs) {
    std::vector<std::string> args = {"mount", fixtures_};
    args.insert(args.end(), pairs.begin(), pairs.end());
    return RunCheck("check_gguf.py", args);
  }

  std::string fixtures_;  // canonical
};

// Each single file: verify reads it whole, and every view equals the manifest: F16 and F32
// .npy, BF16 as .safetensors and widened .npy, Q8_0/Q4_0 raw blocks with their xattrs,
// the merged files holding the non-quantized tensors only (the mount says so).
TEST_F(GgufMountTest, FixtureFilesInEveryView) {
  std::vector<std::string> pairs;
  for (const char* file : {"tiny-llama-f16.gguf", "tiny-llama-bf16.gguf", kMixed}) {
    SCOPED_TRACE(file);
    const std::string source = fixtures_ + "/" + file;
    const ProcessResult verify = Ckptfs({"verify", source}, kVerifyTimeout);
    EXPECT_EQ(verify.exit_code, 0) << verify.Describe();
    ProcessResult mounted;
    const std::string mnt = MountFresh(source, {"-v"}, &mounted);
    if (HasFatalFailure()) return;
    const bool quantized = std::string(file) == kMixed;
    EXPECT_EQ(mounted.out.find("29 tensor(s) of block types (Q8_0, Q4_0): in tensors/ only") !=
                  std::string::npos,
              quantized)
        << "the mount should say which tensors the merged files leave out; " << mounted.Describe();
    pairs.push_back(std::string(file) + "=" + mnt);
  }
  CheckMounts(pairs);
}

// split3/ from its directory and from its second split: the splits unchanged at the root
// and NAME.gguf byte-identical to the unsplit file; tensors from all three splits.
TEST_F(GgufMountTest, SplitSetFromItsDirectoryAndFromOneSplit) {
  const std::string dir = fixtures_ + "/" + kSplitSet;
  const std::string second = dir + "/" + kSecondSplit;
  for (const std::string& source : {dir, second}) {
    const ProcessResult verify = Ckptfs({"verify", source}, kVerifyTimeout);
    EXPECT_EQ(verify.exit_code, 0) << verify.Describe();
  }
  const std::string from_dir = MountFresh(dir);
  if (HasFatalFailure()) return;
  const std::string from_split = MountFresh(second);
  if (HasFatalFailure()) return;
  CheckMounts({std::string(kSplitSet) + "=" + from_dir, std::string(kSplitSet) + "=" + from_split});
}

// A copy of split3/ packed by `ckptfs pack` (every split a seekable NAME.gguf.zst), mounted
// from its directory: the same mount as the plain set, NAME.gguf still identical.
TEST_F(GgufMountTest, PackedSplitSetFromItsDirectory) {
  const std::string copy = scratch_->Path(kSplitSet);
  fs::copy(fixtures_ + "/" + kSplitSet, copy);
  const std::string packed = scratch_->Path("packed");
  const ProcessResult pack = Ckptfs({"pack", copy, packed}, kGenerateTimeout);
  ASSERT_EQ(pack.exit_code, 0) << pack.Describe();
  ASSERT_TRUE(fs::exists(packed + "/" + kFirstSplit + ".zst")) << pack.Describe();
  ASSERT_FALSE(fs::exists(packed + "/" + kFirstSplit)) << pack.Describe();
  const std::string mnt = MountFresh(packed);
  if (HasFatalFailure()) return;
  CheckMounts({std::string(kSplitSet) + "=" + mnt});
}

// The packed set named by one of its splits (SOURCE "any one split", plain or .zst): the
// other splits are there as NAME.gguf.zst, so the set mounts as from its directory.
TEST_F(GgufMountTest, PackedSplitSetFromOneSplit) {
  const std::string copy = scratch_->Path(kSplitSet);
  fs::copy(fixtures_ + "/" + kSplitSet, copy);
  const std::string packed = scratch_->Path("packed");
  const ProcessResult pack = Ckptfs({"pack", copy, packed}, kGenerateTimeout);
  ASSERT_EQ(pack.exit_code, 0) << pack.Describe();
  std::vector<std::string> pairs;
  for (const std::string& split :
       {std::string(kSecondSplit) + ".zst", std::string(kFirstSplit) + ".zst"}) {
    SCOPED_TRACE(split);
    const ProcessResult inspect = Ckptfs({"inspect", packed + "/" + split}, kCheckTimeout);
    EXPECT_EQ(inspect.exit_code, 0) << inspect.Describe();
    const std::string mnt = MountFresh(packed + "/" + split);
    if (HasFatalFailure()) return;
    pairs.push_back(std::string(kSplitSet) + "=" + mnt);
  }
  CheckMounts(pairs);
}

// split3/ served by nginx (which cannot list: SOURCE names a split, the others are asked
// for) and by s3rver (the prefix, listed): every view as local, NAME.gguf identical.
// Each part skips without its server.
TEST_F(GgufMountTest, SplitSetOverHttpAndS3) {
  if (const std::string unavailable = NginxServer::UnavailableReason(); unavailable.empty()) {
    NginxServer server(fixtures_, scratch_->Path("nginx"));
    ASSERT_EQ(server.Start(), "");
    const std::string url = server.Url(std::string(kSplitSet) + "/" + kFirstSplit);
    const ProcessResult inspect = Ckptfs({"inspect", url}, kCheckTimeout);
    EXPECT_EQ(inspect.exit_code, 0) << inspect.Describe();
    const std::string mnt = MountFresh(url);
    if (HasFatalFailure()) return;
    CheckMounts({std::string(kSplitSet) + "=" + mnt});
    EXPECT_TRUE(ForceUnmount(mnt));  // before the server stops
  } else {
    std::printf("skipped HTTP: %s\n", unavailable.c_str());
  }

  if (const std::string unavailable = S3Server::UnavailableReason(); unavailable.empty()) {
    ScopedEnv env;
    S3Server server(scratch_->Path("s3"));
    server.SetClientEnv(env);
    ASSERT_EQ(server.Start(), "");
    ASSERT_EQ(server.Upload(fixtures_ + "/" + kSplitSet, std::string(kSplitSet) + "/"), "");
    const std::string url = S3Server::Url(std::string(kSplitSet) + "/");
    const std::string mnt = MountFresh(url, server.ClientOptions());
    if (HasFatalFailure()) return;
    CheckMounts({std::string(kSplitSet) + "=" + mnt});
    EXPECT_TRUE(ForceUnmount(mnt));  // before the server stops
  } else {
    std::printf("skipped S3: %s\n", unavailable.c_str());
  }
}

// inspect and inspect --json: "format gguf", the "gguf" line (architecture, version,
// alignment, key-values; a split set's splits and NAME.gguf), the params rows per ggml
// type (tensors and bytes), and each tensor's ggml type (Q4_0, Q8_0) and numpy shape.
TEST_F(GgufMountTest, InspectShowsGgufAndGgmlTypes) {
  RunCheck("check_gguf.py", {"inspect", kCkptfs, fixtures_, kMixed});
  RunCheck("check_gguf.py", {"inspect", kCkptfs, fixtures_, kSplitSet});
  const ProcessResult table = Ckptfs({"inspect", fixtures_ + "/" + kMixed}, kCheckTimeout);
  ASSERT_EQ(table.exit_code, 0) << table.Describe();
  for (const char* text : {"\nformat   gguf\n", "\ngguf     llama; version 3, alignment 32, ",
                           "\n  Q4_0     786,432 in 12 tensor(s), 432.0 KiB\n", " Q8_0 "}) {
    EXPECT_NE(table.out.find(text), std::string::npos) << text << "\n" << table.Describe();
  }
}

// Bad files and sets (make_gguf_hostile.py): a split missing (from the directory or from a
// split), a split renamed into another set, split.tensors.count disagreeing, a tensor in
// two splits, a truncated file, header or split, bad magic, two models in one directory.
// `inspect` and `mount` each exit 2 with one line naming the file, quickly, and nothing is
// left mounted.
TEST_F(GgufMountTest, HostileFilesFailInOneLine) {
  const std::string out = scratch_->MakeDir("hostile");
  const ProcessResult made = RunProcess(
      {kPython, ScriptPath("tests/mount/make_gguf_hostile.py"), fixtures_, out}, kGenerateTimeout);
  ASSERT_EQ(made.exit_code, 0) << made.Describe();
  std::istringstream lines(made.out);
  int cases = 0;
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> fields;
    std::istringstream split(line);
    for (std::string field; std::getline(split, field, '\t');) fields.push_back(field);
    ASSERT_GE(fields.size(), 2u) << line;
    SCOPED_TRACE(fields[0]);
    ++cases;
    const std::string source = out + "/" + fields[0];
    const std::string mountpoint = scratch_->MakeDir("refused" + std::to_string(cases));
    mounts_.push_back(mountpoint);  // in case ckptfs mounts it after all
    for (const ProcessResult& r :
         {RunProcess({kCkptfs, "mount", source, mountpoint}, kRefusalTimeout),
          Ckptfs({"inspect", source}, kRefusalTimeout)}) {
      ExpectRefusal(r, {fields[1]});
      for (size_t i = 2; i < fields.size(); ++i) {
        EXPECT_NE(r.err.find(fields[i]), std::string::npos)
            << "stderr should say " << fields[i] << "; " << r.Describe();
      }
    }
    EXPECT_FALSE(IsMounted(mountpoint)) << "a refused source was left mounted";
    EXPECT_TRUE(WaitForNoDaemon(mountpoint, kDaemonExitTimeout)) << "a daemon outlived its refusal";
  }
  EXPECT_GE(cases, 12);
}

}  // namespace
}  // namespace ckptfs::mount_test
