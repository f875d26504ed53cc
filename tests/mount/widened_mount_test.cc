// Tensors of float types numpy lacks (BF16, F8_E4M3, F8_E5M2) as float32 .npy files in
// tensors/, widened on read (issue 38, item 1), beside the .safetensors of their stored
// bytes: a safetensors file written byte by byte (every F8 value, a BF16 tensor at an odd
// offset, one of 300k elements) and a torch.save of bfloat16 tensors, mounted with the
// real binary and read with numpy (plain and mmap). Written and checked by
// tests/mount/check_widened.py.
#include "mount_harness.h"

namespace ckptfs::mount_test {
namespace {

class WidenedMountTest : public MountFixture {
 protected:
  void Write(const std::string& mode, const std::string& dir) {
    const ProcessResult r = RunProcess(
        {kPython, ScriptPath("tests/mount/check_widened.py"), mode, dir}, kGenerateTimeout);
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
  }
};

TEST_F(WidenedMountTest, SafetensorsBf16AndF8AsFloat32Npy) {
  const std::string src = scratch_->MakeDir("src");
  ASSERT_NO_FATAL_FAILURE(Write("write-safetensors", src));
  // inspect reports the stored dtypes, as the xattrs do: the .npy's float32 is a view.
  const ProcessResult inspect = Ckptfs({"inspect", "--json", src}, kGenerateTimeout);
  EXPECT_EQ(inspect.exit_code, 0) << inspect.Describe();
  for (const char* dtype : {"\"BF16\"", "\"F8_E4M3\"", "\"F8_E5M2\""}) {
    EXPECT_NE(inspect.out.find(dtype), std::string::npos) << dtype << " in " << inspect.out;
  }
  const std::string mnt = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(src, mnt));
  RunCheck("check_widened.py", {"check-safetensors", src, mnt});
}

TEST_F(WidenedMountTest, TorchBfloat16AsFloat32Npy) {
  if (!HasTorch()) GTEST_SKIP() << "/usr/bin/python3 has no torch";
  const std::string src = scratch_->MakeDir("src");
  ASSERT_NO_FATAL_FAILURE(Write("write-torch", src));
  const std::string mnt = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(src, mnt));
  RunCheck("check_widened.py", {"check-torch", src, mnt});
}

}  // namespace
}  // namespace ckptfs::mount_test
