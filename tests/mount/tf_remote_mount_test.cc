// TensorFlow bundles from remote sources: the writer's standard bundle (two data files,
// slices, strings, a `checkpoint` file naming a stale absolute path) served by nginx over
// HTTP and by s3rver over S3, mounted as a directory URL and as a prefix URL, and checked
// by tests/mount/check_tf.py against the writer's own description of every tensor, as
// tf_mount_test.cc does locally. A server cannot list a directory: the `checkpoint` file is
// asked for by name (the format table's probe names), then the index and data files the
// bundle names. Skips without nginx, or without s3rver and node.

#include "remote_harness.h"

namespace ckptfs::mount_test {
namespace {

class TfRemoteMountTest : public MountFixture {
 protected:
  // The writer's standard bundle at scratch/std (what check_tf.py compares against).
  std::string GenerateStandard() {
    const std::string dir = scratch_->Path("std");
    const ProcessResult r = RunProcess(
        {kPython, ScriptPath("scripts/make_tf_checkpoint.py"), "standard", dir}, kGenerateTimeout);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    return dir;
  }

  void MountAndCheck(const std::string& url, const std::string& expected,
                     const std::vector<std::string>& options) {
    SCOPED_TRACE(url);
    const std::string mountpoint = scratch_->MakeDir("mnt" + std::to_string(mounts_.size()));
    ASSERT_NO_FATAL_FAILURE(Mount(url, mountpoint, nullptr, options));
    RunCheck("check_tf.py", {expected, mountpoint, "--no-torch"});
  }
};

TEST_F(TfRemoteMountTest, OverHttp) {
  const std::string unavailable = NginxServer::UnavailableReason();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  const std::string www = scratch_->MakeDir("www");
  const std::string expected = GenerateStandard();
  fs::copy(expected, www + "/std");
  NginxServer server(www, scratch_->Path("nginx"));
  ASSERT_EQ(server.Start(), "");
  MountAndCheck(server.Url("std/"), expected, {});
  MountAndCheck(server.Url("std/ckpt-3"), expected, {});
  const ProcessResult inspect = Ckptfs({"inspect", "--json", server.Url("std/")}, kCheckTimeout);
  EXPECT_EQ(inspect.exit_code, 0) << inspect.Describe();
  EXPECT_NE(inspect.out.find("\"format\": \"tensorflow\""), std::string::npos) << inspect.out;
  // Unmounted before the server stops.
  for (const std::string& m : mounts_) EXPECT_TRUE(ForceUnmount(m));
}

TEST_F(TfRemoteMountTest, OverS3) {
  const std::string unavailable = S3Server::UnavailableReason();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  ScopedEnv env;
  S3Server server(scratch_->Path("s3"));
  server.SetClientEnv(env);
  ASSERT_EQ(server.Start(), "");
  const std::string expected = GenerateStandard();
  ASSERT_EQ(server.Upload(expected, "tf/"), "");
  MountAndCheck(S3Server::Url("tf/"), expected, server.ClientOptions());
  MountAndCheck(S3Server::Url("tf/ckpt-3"), expected, server.ClientOptions());
  for (const std::string& m : mounts_) EXPECT_TRUE(ForceUnmount(m));
}

}  // namespace
}  // namespace ckptfs::mount_test
