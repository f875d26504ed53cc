// PyTorch distributed checkpoints (torch.distributed.checkpoint, DCP) mounted as one model:
// the real files PyTorch 2.11 wrote (../shared/fixtures/dcp, NOTICE.md) against the whole
// tensors they were made from and against PyTorch's own dcp_to_torch_save.
#include <filesystem>

#include "mount_harness.h"

namespace ckptfs::mount_test {
namespace {

namespace fs = std::filesystem;

const fs::path kDcpFixtures = fs::path(kSourceDir) / ".." / "shared" / "fixtures" / "dcp";

class DcpMountTest : public MountFixture {
 protected:
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

}  // namespace
}  // namespace ckptfs::mount_test
