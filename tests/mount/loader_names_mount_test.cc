// Weights under the names their loaders open (issue 23, item 4), mounted with the real
// binary and read with numpy (mmap, header parsed as safetensors does) and torch.load: a
// real peft adapter (../shared/fixtures/wild/peft_adapter, skipped when absent), a peft
// adapter saved as adapter_model.bin, and the component folders of a diffusers pipeline
// as DiffusionPipeline.save_pretrained leaves them (unet/ sharded) and its root mounted
// whole, and a
// sentence-transformers model's module folders. Written and checked by
// tests/mount/check_loader_names.py.
#include <filesystem>

#include "mount_harness.h"

namespace ckptfs::mount_test {
namespace {

class LoaderNamesMountTest : public MountFixture {
 protected:
  void SetUp() override {
    MountFixture::SetUp();
    if (IsSkipped()) return;
    if (!HasTorch()) GTEST_SKIP() << "/usr/bin/python3 has no torch";
    src_ = scratch_->MakeDir("src");
  }

  void Write(const std::string& mode, const std::string& dir) {
    const ProcessResult r = RunProcess(
        {kPython, ScriptPath("tests/mount/check_loader_names.py"), mode, dir}, kGenerateTimeout);
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
  }

  // Mounts `dir` and checks that `name` and `torch_name` are its merged views.
  void CheckComponent(const std::string& dir, const std::string& name,
                      const std::string& torch_name) {
    const std::string mnt = scratch_->MakeDir("mnt-" + std::to_string(mounts_.size()));
    ASSERT_NO_FATAL_FAILURE(Mount(dir, mnt));
    RunCheck("check_loader_names.py", {"component", dir, mnt, name, torch_name});
  }

  std::string src_;
};

TEST_F(LoaderNamesMountTest, PeftAdapterKeepsItsName) {
  const std::string peft = std::string(kSourceDir) + "/../shared/fixtures/wild/peft_adapter";
  if (!std::filesystem::exists(peft)) GTEST_SKIP() << peft << " is absent (../shared/fixtures)";
  CheckComponent(peft, "adapter_model.safetensors", "adapter_model.bin");
}

TEST_F(LoaderNamesMountTest, PeftAdapterSavedWithTorchKeepsItsName) {
  ASSERT_NO_FATAL_FAILURE(Write("write-adapter-bin", src_));
  CheckComponent(src_, "adapter_model.safetensors", "adapter_model.bin");
}

TEST_F(LoaderNamesMountTest, DiffusersComponentsShowWhatTheirLoadersOpen) {
  ASSERT_NO_FATAL_FAILURE(Write("write-pipeline", src_));
  const std::string kDiffusers = "diffusion_pytorch_model";
  CheckComponent(src_ + "/unet", kDiffusers + ".safetensors", kDiffusers + ".bin");
  CheckComponent(src_ + "/vae", kDiffusers + ".safetensors", kDiffusers + ".bin");
  CheckComponent(src_ + "/text_encoder", "model.safetensors", "pytorch_model.bin");
  // The pipeline's root mounted whole: model_index.json and each folder, as
  // DiffusionPipeline.from_pretrained opens them, each weights folder with the same views;
  // no latest or best. Links out of SOURCE (a top file, a tokenizer file) are never shown.
  std::filesystem::create_symlink("/etc/hostname", src_ + "/leak.json");
  std::filesystem::create_symlink("/etc/hostname", src_ + "/tokenizer/leak.txt");
  const std::string mnt = scratch_->MakeDir("pipeline");
  ASSERT_NO_FATAL_FAILURE(Mount(src_, mnt));
  RunCheck("check_loader_names.py", {"pipeline-root", src_, mnt});
  const ProcessResult inspect = RunProcess({kCkptfs, "inspect", src_}, kGenerateTimeout);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.Describe();
  EXPECT_NE(inspect.out.find("pipeline: 3 components"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("latest   (none)"), std::string::npos) << inspect.out;
  for (const char* component : {"unet", "vae"}) {
    RunCheck("check_loader_names.py", {"component", src_ + "/" + component, mnt + "/" + component,
                                       kDiffusers + ".safetensors", kDiffusers + ".bin"});
  }
  RunCheck("check_loader_names.py", {"component", src_ + "/text_encoder", mnt + "/text_encoder",
                                     "model.safetensors", "pytorch_model.bin"});
}

// Issue 38: weights beside their save_pretrained(variant="fp16") variant, lone or sharded
// with an index, diffusers' and transformers' names: the plain weights are the checkpoint
// (merged views and tensors/ hold them alone), the variant's files stay at their paths
// byte for byte; a variant alone is the checkpoint, its views named for it.
TEST_F(LoaderNamesMountTest, VariantsBesideThePlainWeights) {
  ASSERT_NO_FATAL_FAILURE(Write("write-variants", src_));
  const std::string kD = "diffusion_pytorch_model";
  for (const char* folder : {"unet", "unet_sharded"}) {
    const std::string mnt = scratch_->MakeDir(std::string("mnt-") + folder);
    ASSERT_NO_FATAL_FAILURE(Mount(src_ + "/" + folder, mnt));
    RunCheck("check_loader_names.py",
             {"variants", src_ + "/" + folder, mnt, kD + ".safetensors", kD + ".bin"});
  }
  const std::string text = scratch_->MakeDir("mnt-text");
  ASSERT_NO_FATAL_FAILURE(Mount(src_ + "/text", text));
  RunCheck("check_loader_names.py",
           {"variants", src_ + "/text", text, "model.safetensors", "pytorch_model.bin"});
  const std::string alone = scratch_->MakeDir("mnt-fp16-only");
  ASSERT_NO_FATAL_FAILURE(Mount(src_ + "/fp16_only", alone));
  RunCheck("check_loader_names.py", {"variants", src_ + "/fp16_only", alone,
                                     kD + ".fp16.safetensors", kD + ".fp16.bin", "fp16"});
}

// sentence-transformers: the transformer at the top is the checkpoint, and the module
// folders modules.json lists (1_Pooling/ with its config, 2_Normalize/ empty) are beside it.
TEST_F(LoaderNamesMountTest, SentenceTransformersModuleFoldersAreShown) {
  ASSERT_NO_FATAL_FAILURE(Write("write-sentence-transformers", src_));
  CheckComponent(src_, "model.safetensors", "pytorch_model.bin");
  RunCheck("check_loader_names.py", {"module-folders", src_, scratch_->Path("mnt-0")});
}

// (issue 38) A module folder holding weights (3_Dense/model.safetensors) makes the model one
// tree, not a run: the transformer's views at the root as before, every file of SOURCE at
// its path, and 3_Dense/ with its files and views.
TEST_F(LoaderNamesMountTest, SentenceTransformersModuleWithWeightsIsOneModelTree) {
  ASSERT_NO_FATAL_FAILURE(Write("write-sentence-transformers-dense", src_));
  CheckComponent(src_, "model.safetensors", "pytorch_model.bin");
  const std::string mnt = scratch_->Path("mnt-0");
  RunCheck("check_loader_names.py", {"module-folders", src_, mnt});
  RunCheck("check_loader_names.py", {"component", src_ + "/3_Dense", mnt + "/3_Dense",
                                     "model.safetensors", "pytorch_model.bin"});
  RunCheck("check_source_paths.py", {src_, mnt});
  EXPECT_FALSE(std::filesystem::exists(mnt + "/latest"));
  EXPECT_FALSE(std::filesystem::exists(mnt + "/views"));
}

}  // namespace
}  // namespace ckptfs::mount_test
