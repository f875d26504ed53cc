// Read errors a user can trace (issue 38, item 1), through the real binary: a failed read
// is one log line naming the mount, the file in it, the stored file and why, however often
// the kernel retries it; stats.json keeps the record and a total; and a daemon whose
// syslog goes away after the mount logs to its fallback file, not nowhere.
#include <sys/socket.h>
#include <sys/un.h>

#include <regex>

#include "mount_harness.h"

namespace ckptfs::mount_test {
namespace {

// make_checkpoint.py's "zst-corrupt-frame": frame 6 of shard 2's .zst does not decode,
// and the tensor over it (model.layers.1.w1) fails to read.
constexpr char kDamagedStored[] = "model-00002-of-00003.safetensors.zst";
constexpr char kDamagedFile[] = "tensors/model/layers/1/w1.npy";

// Polls (bounded) until `path` holds `text`; returns the file's text either way.
std::string WaitForText(const std::string& path, const std::string& text, milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  std::string content = ReadTextFile(path);
  while (content.find(text) == std::string::npos && Clock::now() < deadline) {
    usleep(20000);
    content = ReadTextFile(path);
  }
  return content;
}

// The lines of `text` holding `needle`.
std::vector<std::string> LinesWith(const std::string& text, const std::string& needle) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find(needle) != std::string::npos) lines.push_back(line);
  }
  return lines;
}

class ReadErrorLogTest : public MountFixture {
 protected:
  void SetUp() override {
    MountFixture::SetUp();
    if (IsSkipped()) return;
    source_ = scratch_->Path("hostile");
    ASSERT_NO_FATAL_FAILURE(
        Generate(source_, {"--kind", "hostile", "--case", "zst-corrupt-frame"}));
    mountpoint_ = scratch_->MakeDir("mnt");
  }

  // Reads the damaged tensor file whole, as `cat` does (readahead, then the kernel's retry
  // of the page it was refused): it must fail with EIO.
  void ReadDamagedTensor() {
    const ProcessResult r = RunProcess({"cat", mountpoint_ + "/" + kDamagedFile}, seconds(60));
    EXPECT_NE(r.exit_code, 0) << r.Describe();
    EXPECT_NE(r.err.find("Input/output error"), std::string::npos) << r.Describe();
  }

  // The one line the failed read logs: its four fields, and a reason.
  void ExpectOneReadLine(const std::string& log_text) {
    const std::vector<std::string> lines = LinesWith(log_text, kDamagedStored);
    ASSERT_EQ(lines.size(), 1u) << "one line per failed read, not per retry; the log:\n"
                                << log_text;
    EXPECT_TRUE(
        std::regex_search(lines[0], std::regex("error: read failed: mount " + mountpoint_ +
                                               ", file " + std::string(kDamagedFile) + ", source " +
                                               source_ + "/" + kDamagedStored + ": .*frame")))
        << lines[0];
  }

  std::string source_;
  std::string mountpoint_;
};

TEST_F(ReadErrorLogTest, AFailedReadIsOneLineAndAStatsRecord) {
  const std::string log = scratch_->Path("daemon.log");
  ASSERT_NO_FATAL_FAILURE(Mount(source_, mountpoint_, nullptr, {"--log-file", log}));
  ReadDamagedTensor();
  ExpectOneReadLine(WaitForText(log, kDamagedStored, kMountTimeout));

  // stats.json: the total and the record, its fields as the line's, with a time.
  const ProcessResult stats = RunProcess(
      {kPython, "-c",
       "import json,sys; e=json.load(open(sys.argv[1]))['errors']; r=e['recent']; "
       "print(e['total'], len(r)); "
       "[print(x['file'], x['source'], x['time'], 'frame' in x['reason'], sep='\\n') for x in r]",
       mountpoint_ + "/.ckptfs/stats.json"},
      kCheckTimeout);
  ASSERT_EQ(stats.exit_code, 0) << stats.Describe();
  std::istringstream out(stats.out);
  uint64_t total = 0, kept = 0;
  std::string file, stored, time, has_reason;
  ASSERT_TRUE(out >> total >> kept >> file >> stored >> time >> has_reason) << stats.Describe();
  EXPECT_EQ(total, 1u) << stats.out;
  EXPECT_EQ(kept, 1u) << stats.out;
  EXPECT_EQ(file, kDamagedFile);
  EXPECT_EQ(stored, source_ + "/" + kDamagedStored);
  EXPECT_TRUE(std::regex_match(time, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)"))) << time;
  EXPECT_EQ(has_reason, "True") << stats.out;
}

// A datagram socket standing in for syslog (journald's /dev/log): bound in the scratch
// directory, closed and removed to take syslog away.
class FakeSyslog {
 public:
  explicit FakeSyslog(std::string path) : path_(std::move(path)) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    if (fd_ < 0 || path_.size() >= sizeof(addr.sun_path)) return;
    std::memcpy(addr.sun_path, path_.data(), path_.size());
    if (bind(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) Close();
  }
  ~FakeSyslog() { Close(); }
  bool ok() const { return fd_ >= 0; }
  // The datagrams received within `timeout` until one holds `text`, joined by newlines.
  std::string ReceiveUntil(const std::string& text, milliseconds timeout) {
    std::string got;
    const Clock::time_point deadline = Clock::now() + timeout;
    while (got.find(text) == std::string::npos && Clock::now() < deadline) {
      pollfd p = {fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      char buf[2048];
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n > 0) got.append(buf, static_cast<size_t>(n)) += "\n";
    }
    return got;
  }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    unlink(path_.c_str());
  }

 private:
  std::string path_;
  int fd_ = -1;
};

// Syslog answers at mount, then goes (journald stopped): the daemon's next line, the
// failed read's, lands in its fallback file, after a line saying why.
TEST_F(ReadErrorLogTest, SyslogGoneAfterMountLinesGoToTheFallbackFile) {
  const std::string socket_path = scratch_->Path("syslog.sock");
  FakeSyslog syslog(socket_path);
  ASSERT_TRUE(syslog.ok()) << socket_path << ": " << strerror(errno);
  ::setenv("CKPTFS_SYSLOG_SOCKET", socket_path.c_str(), 1);
  ProcessResult r;
  Mount(source_, mountpoint_, &r, {"--log-level", "info"});
  ::unsetenv("CKPTFS_SYSLOG_SOCKET");
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(r.err, "") << "syslog answers: no fallback notice; " << r.Describe();
  const std::string received = syslog.ReceiveUntil("mounted ", kMountTimeout);
  EXPECT_TRUE(std::regex_search(received, std::regex(R"(<30>\w{3} [ \d]\d \d\d:\d\d:\d\d )"
                                                     R"(ckptfs\[\d+\]: mounted )")))
      << "the mount's info line reaches syslog as syslog(3) writes it; got:\n"
      << received;

  syslog.Close();
  ReadDamagedTensor();
  const std::string fallback = scratch_->Path("xdg-state") + "/ckptfs/ckptfs.log";
  const std::string text = WaitForText(fallback, kDamagedStored, kMountTimeout);
  EXPECT_NE(text.find("warn: syslog at " + socket_path + " stopped answering ("), std::string::npos)
      << text;
  EXPECT_NE(text.find("the daemon logs to " + fallback + " from now on"), std::string::npos)
      << text;
  ExpectOneReadLine(text);
}

}  // namespace
}  // namespace ckptfs::mount_test
