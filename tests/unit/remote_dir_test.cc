// Remote SourceDirs (core/source/remote_dir.h) against a server that records every request:
// a name that is not a plain file name (`..`, `.`, a '/', percent-encoded dot-dot, NUL)
// is refused by every function of the SourceDir before any URL or key is made from it,
// so no caller (a format's index, a run's records) can make a request leave SOURCE.
#include "core/source/remote_dir.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/loopback_server.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

using namespace std::chrono_literals;

// A loopback HTTP server that answers 404 to everything and records each request's path
// as sent (method and target of the request line).
class RecordingServer {
 public:
  int port() const { return server_.port(); }
  std::string Url(const std::string& path) const { return server_.Url(path); }
  // The request targets so far, e.g. "/run2/ds/latest".
  std::vector<std::string> Paths() {
    std::lock_guard lock(mu_);
    return paths_;
  }

 private:
  std::string Answer(const std::string& request) {
    const size_t first = request.find(' ');
    const size_t second = request.find(' ', first + 1);
    if (first != std::string::npos && second != std::string::npos) {
      std::lock_guard lock(mu_);
      paths_.push_back(request.substr(first + 1, second - first - 1));
    }
    return "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  }

  std::mutex mu_;
  std::vector<std::string> paths_;  // guarded by mu_
  testing::LoopbackHttpServer server_{[this](const std::string& r) { return Answer(r); }};
};

// `path` as a server resolves it (percent-decoded as often as it changes, then `.` and
// `..` segments applied) lies beneath `prefix` (ending in '/').
bool StaysUnder(std::string path, const std::string& prefix) {
  for (int round = 0; round < 4; ++round) {
    std::string decoded;
    for (size_t i = 0; i < path.size(); ++i) {
      if (path[i] == '%' && i + 2 < path.size() && std::isxdigit(path[i + 1]) &&
          std::isxdigit(path[i + 2])) {
        decoded += static_cast<char>(std::stoi(path.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        decoded += path[i];
      }
    }
    path = decoded;
  }
  std::vector<std::string> segments;
  for (size_t at = 0; at <= path.size();) {
    const size_t slash = std::min(path.find('/', at), path.size());
    const std::string segment = path.substr(at, slash - at);
    if (segment == "..") {
      if (!segments.empty()) segments.pop_back();
    } else if (segment != "." && !segment.empty()) {
      segments.push_back(segment);
    }
    at = slash + 1;
  }
  std::string resolved;
  for (const std::string& s : segments) resolved += "/" + s;
  return (resolved + "/").starts_with(prefix) && path.find('\0') == std::string::npos;
}

const std::vector<std::string>& HostileNames() {
  static const std::vector<std::string> names = {"..",
                                                 ".",
                                                 "",
                                                 "../secret_tag",
                                                 "a/b",
                                                 "/etc",
                                                 "..%2Fx",
                                                 "%2E%2E",
                                                 "%2e%2E%2fsecret",
                                                 "%252E%252E%252Fx",
                                                 "..\\x",
                                                 "x\x01y",
                                                 std::string("x\0y", 3),
                                                 std::string("..\0", 3)};
  return names;
}

// Every SourceDir function refuses each hostile name, and the server saw nothing outside
// `prefix`; a plain name is asked for beneath it (the recording works).
void ExpectNoRequestLeaves(const SourceDir& dir, RecordingServer& server,
                           const std::string& prefix) {
  for (const std::string& name : HostileNames()) {
    SCOPED_TRACE(::testing::PrintToString(name));
    const Result<bool> has = dir.Has(name);
    EXPECT_TRUE(!has.ok() || !*has);
    EXPECT_FALSE(dir.open(name).ok());
    EXPECT_FALSE(dir.OpenDir(name).ok());
    EXPECT_FALSE(dir.Info(name).ok());
  }
  for (const std::string& path : server.Paths()) {
    EXPECT_TRUE(StaysUnder(path, prefix)) << "a request outside " << prefix << ": " << path;
    EXPECT_EQ(path.find("secret"), std::string::npos) << path;
  }
  const Result<bool> plain = dir.Has("plain_name");
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_FALSE(*plain);
  const std::vector<std::string> paths = server.Paths();
  ASSERT_FALSE(paths.empty());
  EXPECT_EQ(paths.back(), prefix + "plain_name");
}

TEST(RemoteDirNames, HttpNeverAsksForANameThatIsNotPlain) {
  RecordingServer server;
  ASSERT_NE(server.port(), 0);
  HttpOptions http;
  http.timeout = 2s;
  auto dir = HttpDir(server.Url("run2/ds/"), http, testing::TestContext(), {"latest"});
  ASSERT_TRUE(dir.ok()) << dir.status().message();
  ExpectNoRequestLeaves(*dir, server, "/run2/ds/");
  // The hostile names are refused with a line naming the problem.
  auto open = dir->open("../secret_tag");
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.status().message().find("not a plain file name"), std::string::npos)
      << open.status().message();
}

TEST(RemoteDirNames, HttpFileUrlSiblingsStayInItsDirectory) {
  RecordingServer server;
  ASSERT_NE(server.port(), 0);
  HttpOptions http;
  http.timeout = 2s;
  auto dir = HttpDir(server.Url("run2/ds/model.safetensors"), http, testing::TestContext(), {});
  ASSERT_TRUE(dir.ok()) << dir.status().message();
  ExpectNoRequestLeaves(*dir, server, "/run2/ds/");
}

TEST(RemoteDirNames, S3NeverAsksForAKeyThatIsNotPlain) {
  RecordingServer server;
  ASSERT_NE(server.port(), 0);
  RemoteOptions remote;
  remote.s3.endpoint = server.Url("");
  remote.http.timeout = 2s;
  // An object's URL: its siblings are HEADed by name, beneath the same prefix.
  auto dir = S3Dir("s3://bucket/run2/ds/model.safetensors", remote, testing::TestContext());
  ASSERT_TRUE(dir.ok()) << dir.status().message();
  ExpectNoRequestLeaves(*dir, server, "/bucket/run2/ds/");
}

}  // namespace
}  // namespace ckptfs
