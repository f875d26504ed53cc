// HTTP sources: the real binary mounting checkpoints served by nginx on loopback, read by
// the same python checks as local mounts; the server stopped or the object replaced
// under a mount. Skips without nginx (Debian's nginx-light, installed by setup.sh).

#include <netinet/in.h>
#include <sys/socket.h>

#include <thread>

#include "mount_harness.h"

namespace ckptfs::mount_test {
namespace {

constexpr char kNginx[] = "/usr/sbin/nginx";

// A port nothing listens on right now (the kernel's choice for an ephemeral bind).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return 0;
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

// nginx serving scratch/www on a free loopback port, stopped in TearDown.
class HttpMountTest : public MountFixture {
 protected:
  void SetUp() override {
    MountFixture::SetUp();
    if (IsSkipped()) return;
    if (::access(kNginx, X_OK) != 0) GTEST_SKIP() << kNginx << " missing (apt nginx-light)";
    www_ = scratch_->MakeDir("www");
    port_ = FreePort();
    ASSERT_NE(port_, 0);
    const std::string dir = scratch_->MakeDir("nginx");
    conf_ = dir + "/nginx.conf";
    // Workers run as the test's user, which can read the scratch directory.
    std::ofstream(conf_) << "user root;\npid " << dir << "/nginx.pid;\nerror_log " << dir
                         << "/error.log;\nevents {}\nhttp {\n"
                         << "  log_format bytes '$request_method $uri $status $body_bytes_sent';\n"
                         << "  access_log " << dir << "/access.log bytes;\n"
                         << "  client_body_temp_path " << dir << ";\n  proxy_temp_path " << dir
                         << ";\n  fastcgi_temp_path " << dir << ";\n  uwsgi_temp_path " << dir
                         << ";\n  scgi_temp_path " << dir
                         << ";\n  server { listen 127.0.0.1:" << port_ << "; root " << www_
                         << "; }\n}\n";
    ASSERT_NO_FATAL_FAILURE(StartServer());
  }

  // The server goes first: its config and pid file live in the scratch directory that
  // MountFixture::TearDown removes.
  void TearDown() override {
    StopServer();
    MountFixture::TearDown();
  }

  void StartServer() {
    const ProcessResult r = RunProcess({kNginx, "-c", conf_}, seconds(10));
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
    running_ = true;
  }

  void StopServer() {
    if (!running_) return;
    RunProcess({kNginx, "-c", conf_, "-s", "stop"}, seconds(10));
    running_ = false;
  }

  // Bytes of weight files the server has sent so far, and in how many requests (from its
  // access log, once it has been quiet for a moment: lines are written as requests end).
  std::pair<uint64_t, int> WeightBytesServed() {
    std::string log, last;
    for (auto deadline = Clock::now() + seconds(10); Clock::now() < deadline;) {
      std::this_thread::sleep_for(milliseconds(300));
      log = ReadTextFile(scratch_->path() + "/nginx/access.log");
      if (log == last) break;
      last = log;
    }
    uint64_t bytes = 0;
    int requests = 0;
    std::istringstream lines(log);
    for (std::string method, uri, status, sent; lines >> method >> uri >> status >> sent;) {
      if (uri.find(".safetensors") == std::string::npos || uri.find(".json") != std::string::npos) {
        continue;
      }
      bytes += std::stoull(sent);
      ++requests;
    }
    return {bytes, requests};
  }

  std::string Url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/" + path;
  }

  std::string www_, conf_;
  int port_ = 0;
  bool running_ = false;
};

TEST_F(HttpMountTest, MixedCheckpointOverHttp) {
  const std::string source = www_ + "/mixed";
  ASSERT_NO_FATAL_FAILURE(Generate(source));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(Url("mixed/"), mountpoint));
  for (const char* check : kMountChecks) RunCheck(check, {source, mountpoint});
  RunCheck("check_torch_bin.py", {source, mountpoint, "--crc", "zero"});
}

TEST_F(HttpMountTest, ServerDownAtMountIsOneLine) {
  const std::string source = www_ + "/mixed";
  ASSERT_NO_FATAL_FAILURE(Generate(source));
  StopServer();
  const std::string mountpoint = scratch_->MakeDir("mnt");
  const ProcessResult r = RunProcess({kCkptfs, "mount", Url("mixed/"), mountpoint}, seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_LE(r.elapsed, seconds(10)) << r.Describe();
  EXPECT_EQ(LineCount(r.err), 1) << r.Describe();
  EXPECT_NE(r.err.find("127.0.0.1"), std::string::npos) << r.Describe();
  EXPECT_FALSE(IsMounted(mountpoint));
}

// A shard replaced on the server after mount: reads of it fail (EIO), never mixing
// bytes of two versions, and the daemon stays up for the rest.
TEST_F(HttpMountTest, ObjectReplacedAfterMountGivesEio) {
  const std::string source = www_ + "/mixed";
  ASSERT_NO_FATAL_FAILURE(Generate(source));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(Url("mixed/"), mountpoint));
  const std::string shard = "model-00001-of-00008.safetensors";
  // Same size, new content and time: a new ETag.
  ProcessResult r =
      RunProcess({kPython, "-c",
                  "import os,sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[-1]^=1; "
                  "open(p,'wb').write(b); os.utime(p, (1, 1))",
                  source + "/" + shard},
                 seconds(10));
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  r = RunProcess({"cat", mountpoint + "/shards/" + shard}, seconds(60));
  EXPECT_NE(r.exit_code, 0) << "read of a replaced object must fail; " << r.Describe();
  EXPECT_NE(r.err.find("Input/output error"), std::string::npos) << r.Describe();
  r = RunProcess({"cat", mountpoint + "/config.json"}, seconds(60));
  EXPECT_EQ(r.exit_code, 0) << "the daemon must stay up; " << r.Describe();
}

// The server lost mid-mount: a read fails with EIO once --timeout has passed, the
// daemon stays up, and the same read succeeds once the server is back.
TEST_F(HttpMountTest, ServerLostThenBack) {
  const std::string source = www_ + "/mixed";
  ASSERT_NO_FATAL_FAILURE(Generate(source));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(Url("mixed/"), mountpoint, nullptr, {"--timeout", "2"}));
  const std::string shard = mountpoint + "/shards/model-00002-of-00008.safetensors";
  StopServer();
  ProcessResult r = RunProcess({"cat", shard}, seconds(60));
  EXPECT_NE(r.exit_code, 0) << "a read with the server gone must fail; " << r.Describe();
  EXPECT_NE(r.err.find("Input/output error"), std::string::npos) << r.Describe();
  EXPECT_LE(r.elapsed, seconds(10)) << "EIO must come within about --timeout; " << r.Describe();
  ASSERT_NO_FATAL_FAILURE(StartServer());
  r = RunProcess({"cmp", shard, source + "/model-00002-of-00008.safetensors"}, seconds(60));
  EXPECT_EQ(r.exit_code, 0) << "reads must work again once the server is back; " << r.Describe();
}

// DESIGN: a read of one tensor fetches about that tensor. nginx's log counts what the
// server sent: the headers at mount, then the tensor plus at most one partial block at
// each end (target: tensor + 2 MiB).
TEST_F(HttpMountTest, OneTensorFetchesAboutItsBytes) {
  const std::string source = www_ + "/bench";
  ASSERT_NO_FATAL_FAILURE(Generate(source, {"--kind", "bench", "--total-bytes", "96M", "--tensors",
                                            "12", "--shards", "3", "--dtype", "F32"}));
  const std::string mountpoint = scratch_->MakeDir("mnt");
  ASSERT_NO_FATAL_FAILURE(Mount(Url("bench/"), mountpoint));
  const auto [mount_bytes, mount_requests] = WeightBytesServed();
  EXPECT_GE(mount_requests, 3) << "each shard's header is read at mount";
  EXPECT_LE(mount_bytes, 64u << 10) << "a mount fetches headers only";

  const ProcessResult r =
      RunProcess({kPython, "-c", "import numpy, sys; print(numpy.load(sys.argv[1]).nbytes)",
                  mountpoint + "/tensors/model/layers/5/weight.npy"},
                 seconds(60));
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  const uint64_t tensor_bytes = std::stoull(r.out);
  ASSERT_GE(tensor_bytes, 7u << 20);
  const auto [total_bytes, total_requests] = WeightBytesServed();
  const uint64_t read_bytes = total_bytes - mount_bytes;
  std::cout << "tensor " << tensor_bytes << " B: server sent " << read_bytes << " B in "
            << total_requests - mount_requests << " requests\n";
  EXPECT_GE(read_bytes, tensor_bytes);
  EXPECT_LE(read_bytes, tensor_bytes + (2u << 20));
}

}  // namespace
}  // namespace ckptfs::mount_test
