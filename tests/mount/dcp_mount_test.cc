// PyTorch distributed checkpoints (torch.distributed.checkpoint, DCP) mounted as one model:
// the real files PyTorch 2.11 wrote (../shared/fixtures/dcp, NOTICE.md) against the whole
// tensors they were made from and against PyTorch's own dcp_to_torch_save.
#include <filesystem>

#include "remote_harness.h"

namespace ckptfs::mount_test {
namespace {

namespace fs = std::filesystem;

const fs::path kDcpFixtures = fs::path(kSourceDir) / ".." / "shared" / "fixtures" / "dcp";

class DcpMountTest : public MountFixture {
 protected:
  // Writes a DCP checkpoint with scripts/make_dcp.py (torch 1.13 cannot write DCP itself).
  std::string Generate(const std::string& name, const std::vector<std::string>& args) {
    const std::string out = scratch_->Path(name);
    std::vector<std::string> command = {kPython, ScriptPath("scripts/make_dcp.py"), out};
    command.insert(command.end(), args.begin(), args.end());
    const ProcessResult r = RunProcess(command, kGenerateTimeout);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    return out;
  }

  std::string MountFresh(const std::string& source) {
    const std::string mountpoint = scratch_->MakeDir("mnt" + std::to_string(mounts_.size()));
    Mount(source, mountpoint, nullptr, {});
    return mountpoint;
  }
};

// single/: one process's nested training dict (model, optim, step, a string); dtensor/: four
// ranks' DTensors split Shard(0), Shard(1), Shard(2), Replicate() and on a 2x2 mesh.
TEST_F(DcpMountTest, FixturesEqualTheWholeTensorsAndDcpToTorchSave) {
  if (!fs::is_directory(kDcpFixtures)) {
    GTEST_SKIP() << kDcpFixtures << " is absent (a user's clone): real DCP fixtures skipped";
  }
  for (const std::string name : {"single", "dtensor"}) {
    SCOPED_TRACE(name);
    const std::string source = (kDcpFixtures / name).string();
    const ProcessResult verify = Ckptfs({"verify", source}, kVerifyTimeout);
    EXPECT_EQ(verify.exit_code, 0) << verify.Describe();
    const ProcessResult inspect = Ckptfs({"inspect", source}, kCheckTimeout);
    EXPECT_EQ(inspect.exit_code, 0) << inspect.Describe();
    EXPECT_NE(inspect.out.find("dcp"), std::string::npos) << inspect.Describe();
    const std::string mnt = MountFresh(source);
    if (HasFatalFailure()) return;
    RunCheck("check_dcp.py",
             {source, mnt, (kDcpFixtures / (name + ".dcp_to_torch_save.pt")).string()});
  }
}

// hf_dcp/: the Hugging Face form (HuggingFaceStorageWriter, save_distributed=True): each
// rank's pieces in shard-0000R-model-0000K-of-00002.safetensors, shown as the model
// _consolidate_hf_safetensors would write.
TEST_F(DcpMountTest, HuggingFaceFormIsTheConsolidatedModel) {
  const fs::path source = kDcpFixtures / "hf_dcp";
  if (!fs::is_directory(source)) GTEST_SKIP() << source << " is absent (a user's clone)";
  const ProcessResult verify = Ckptfs({"verify", source.string()}, kVerifyTimeout);
  EXPECT_EQ(verify.exit_code, 0) << verify.Describe();
  const std::string mnt = MountFresh(source.string());
  if (HasFatalFailure()) return;
  RunCheck("check_dcp.py", {source.string(), mnt});
  EXPECT_FALSE(fs::exists(mnt + "/shard-00001-model-00001-of-00002.safetensors"))
      << "the pieces are under shards/, not beside the model";
}

// fsdp_rank_files/: each of 4 ranks torch.save()d its DTensors (verl's
// model_world_size_4_rank_R.pt), consolidated from the placements each records.
TEST_F(DcpMountTest, FsdpRankFilesAreOneModel) {
  const fs::path source = kDcpFixtures / "fsdp_rank_files";
  if (!fs::is_directory(source)) GTEST_SKIP() << source << " is absent (a user's clone)";
  const ProcessResult verify = Ckptfs({"verify", source.string()}, kVerifyTimeout);
  EXPECT_EQ(verify.exit_code, 0) << verify.Describe();
  const std::string mnt = MountFresh(source.string());
  if (HasFatalFailure()) return;
  RunCheck("check_dcp.py", {source.string(), mnt});
}

// Cases the fixtures lack, written by scripts/make_dcp.py in PyTorch 2.11's format (its
// --self-check proves the bytes against the fixtures): uneven splits with empty chunks, list
// indices in the paths, other rank counts, the Hugging Face form.
TEST_F(DcpMountTest, GeneratedCasesEqualTheWholeTensors) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"training", {"--case", "training"}},
      {"uneven", {"--case", "uneven"}},
      {"tp3", {"--case", "tp", "--ranks", "3", "--seed", "7"}},
      {"tp8", {"--case", "tp", "--ranks", "8"}},
      {"hf", {"--case", "tp", "--hf"}},
  };
  for (const auto& [name, args] : cases) {
    SCOPED_TRACE(name);
    const std::string source = Generate(name, args);
    if (HasFailure()) return;
    const std::string mnt = MountFresh(source);
    if (HasFatalFailure()) return;
    RunCheck("check_dcp.py", {source, mnt});
  }
}

// Bad input (issue 26, item 5): one line naming the file, exit 2, for mount and inspect
// alike; nothing mounted, no code run.
TEST_F(DcpMountTest, HostileCheckpointsAreRefusedInOneLine) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"path_outside", {".metadata"}},
      {"absolute_path", {".metadata"}},
      {"range_past_end", {".distcp"}},
      {"overlap", {".metadata"}},
      {"hole", {".metadata"}},
      {"overflow", {".metadata"}},
      {"global_os_system", {".metadata"}},
      {"unknown_class", {".metadata"}},
      {"missing_file", {".distcp"}},
      {"transform", {"transform zstd"}},
  };
  for (const auto& [kind, names] : cases) {
    SCOPED_TRACE(kind);
    const std::string source = Generate(kind, {"--case", "tp", "--hostile", kind});
    if (HasFailure()) return;
    const std::string mountpoint = scratch_->MakeDir("refused-" + kind);
    mounts_.push_back(mountpoint);  // in case ckptfs wrongly mounts it anyway
    ExpectRefusal(RunProcess({kCkptfs, "mount", source, mountpoint}, kRefusalTimeout), names);
    EXPECT_FALSE(IsMounted(mountpoint)) << "a refused checkpoint was left mounted";
    ExpectRefusal(RunProcess({kCkptfs, "inspect", source}, kRefusalTimeout), names);
  }
}

// Over HTTP (nginx, which cannot list: `.metadata` is asked for by name, then the .distcp
// files it names) and S3 (s3rver), as local. Skips without nginx, or without s3rver and node.
TEST_F(DcpMountTest, OverHttpAndS3) {
  const std::string expected = Generate("tp", {"--case", "tp"});
  if (HasFailure()) return;
  if (const std::string unavailable = NginxServer::UnavailableReason(); unavailable.empty()) {
    const std::string www = scratch_->MakeDir("www");
    fs::copy(expected, www + "/tp");
    NginxServer server(www, scratch_->Path("nginx"));
    ASSERT_EQ(server.Start(), "");
    const std::string mountpoint = scratch_->MakeDir("mnt-http");
    ASSERT_NO_FATAL_FAILURE(Mount(server.Url("tp/"), mountpoint, nullptr, {}));
    RunCheck("check_dcp.py", {expected, mountpoint});
    EXPECT_TRUE(ForceUnmount(mountpoint));  // before the server stops
  } else {
    std::printf("skipped HTTP: %s\n", unavailable.c_str());
  }
  if (const std::string unavailable = S3Server::UnavailableReason(); unavailable.empty()) {
    ScopedEnv env;
    S3Server server(scratch_->Path("s3"));
    server.SetClientEnv(env);
    ASSERT_EQ(server.Start(), "");
    ASSERT_EQ(server.Upload(expected, "dcp/"), "");
    const std::string mountpoint = scratch_->MakeDir("mnt-s3");
    ASSERT_NO_FATAL_FAILURE(
        Mount(S3Server::Url("dcp/"), mountpoint, nullptr, server.ClientOptions()));
    RunCheck("check_dcp.py", {expected, mountpoint});
    EXPECT_TRUE(ForceUnmount(mountpoint));
  } else {
    std::printf("skipped S3: %s\n", unavailable.c_str());
  }
}

}  // namespace
}  // namespace ckptfs::mount_test
