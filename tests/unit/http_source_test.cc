// HttpSource without a server worth the name: how names become URL segments, how a
// Content-Range is read, and the time limits against a listener that never answers.
// Answers checked against the mounted version (validators, size) against a small
// loopback server here; wrong offsets end to end in tests/mount/hostile_http_mount_test.cc.
#include "core/source/http_source.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "core/source/remote_source.h"
#include "core/source/s3.h"
#include "tests/unit/loopback_server.h"
#include "tests/unit/test_util.h"

namespace ckptfs {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

TEST(UrlNameProblem, PlainNamesPass) {
  for (const char* name : {"model-00001-of-00002.safetensors", "config.json", "a b+c.json",
                           "100%.txt", "%zz", "..x", "x..", "...", "%2E%2E%2E"}) {
    EXPECT_EQ(UrlNameProblem(name), "") << name;
  }
}

// An index naming these over HTTP made nginx serve a file beside the checkpoint.
TEST(UrlNameProblem, NamesThatDecodeOutOfTheDirectoryAreRefused) {
  for (const char* name : {"..%2Fsecret.safetensors", "%2E%2E%2Fsecret.safetensors", "%2e%2e",
                           "%2E", "..%5Cx", "..%252Fsecret.safetensors", "%25252E%25252E", "a%2Fb",
                           "a%00b", "a%0Ab", "..", ".", "", "../x", "a\\b", "a\x01"}) {
    EXPECT_NE(UrlNameProblem(name), "") << name;
  }
  EXPECT_NE(UrlNameProblem(std::string("a\0b", 3)), "");
  EXPECT_NE(UrlNameProblem("..%2Fsecret.safetensors").find("../secret.safetensors"),
            std::string::npos)
      << "the message shows what the name decodes to";
}

TEST(EncodeUrlSegment, EverythingButUnreservedIsEscaped) {
  EXPECT_EQ(EncodeUrlSegment("model-00001-of-00002.safetensors"),
            "model-00001-of-00002.safetensors");
  EXPECT_EQ(EncodeUrlSegment("..%2Fsecret"), "..%252Fsecret");
  EXPECT_EQ(EncodeUrlSegment("a b/c?d#e~_"), "a%20b%2Fc%3Fd%23e~_");
  EXPECT_EQ(EncodeUrlSegment("\xc3\xa9"), "%C3%A9");
}

TEST(S3CheckpointFiles, NamesThatDecodeOutOfTheDirectoryAreSkipped) {
  auto files = S3CheckpointFiles("llama/", {{"llama/..%2Fsecret.safetensors", 1, ""},
                                            {"llama/%2E%2E", 1, ""},
                                            {"llama/model.safetensors", 1, ""}});
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].first, "model.safetensors");
}

TEST(ParseContentRange, ReadsStartEndAndTotal) {
  auto r = ParseContentRange("bytes 0-99/1000");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->first, 0u);
  EXPECT_EQ(r->last, 99u);
  EXPECT_EQ(r->total, 1000u);
  r = ParseContentRange("bytes 1048576-2097151/9223372036854775807");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->first, 1048576u);
  EXPECT_EQ(r->last, 2097151u);
  EXPECT_EQ(r->total, 9223372036854775807u);
}

TEST(ParseContentRange, RefusesAnythingElse) {
  for (const char* value :
       {"", "bytes", "bytes */1000", "bytes 0-99/*", "bytes 100-99/1000", "bytes 0-1000/1000",
        "bytes -1-99/1000", "bytes 0-+9/1000", "bytes 0 -99/1000", "items 0-99/1000",
        "Bytes 0-99/1000", "bytes 0-99/1000 ", "bytes 0-99", "bytes 0-99/1000/2",
        "bytes 0-99/99999999999999999999", "bytes 0x0-99/1000"}) {
    EXPECT_FALSE(ParseContentRange(value)) << value;
  }
}

// A loopback port that accepts connections (the kernel completes them: backlog) and
// never answers: a stalled server.
class StalledListener {
 public:
  StalledListener() { fd_ = testing::ListenOnLoopback(&port_); }
  ~StalledListener() {
    if (fd_ >= 0) ::close(fd_);
  }
  std::string Url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/" + path;
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Opening many objects of a stalled server ends by the one open deadline, not one
// timeout per object.
TEST(HttpSourceTimeLimits, OpeningEndsByTheOpenDeadline) {
  StalledListener server;
  ASSERT_NE(server.port(), 0);
  HttpOptions options;
  options.timeout = milliseconds(5000);
  options.connect_timeout = milliseconds(5000);
  const auto start = Clock::now();
  options.open_deadline = start + milliseconds(400);
  for (int i = 0; i < 4; ++i) {
    auto source = HttpSource::Open(server.Url("x" + std::to_string(i)), "x", options);
    EXPECT_FALSE(source.ok());
  }
  // Reads of objects made while opening are held to it as well.
  auto listed = HttpSource::FromListing(server.Url("y"), "y", 100, "\"e\"", options);
  std::vector<uint8_t> buf(10);
  EXPECT_FALSE(listed->ReadAt(0, buf).ok());
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
}

// A read that runs out of time says so (errno ETIMEDOUT), so that RemoteSource, which
// reads every remote object of a mount, can fail the kernel's retries of it at once; a
// mount's readers see EIO.
TEST(HttpSourceTimeLimits, ARangeThatTimedOutFailsWithEtimedout) {
  StalledListener server;
  ASSERT_NE(server.port(), 0);
  HttpOptions options;
  options.timeout = milliseconds(500);
  auto source = HttpSource::FromListing(server.Url("y"), "y", 1000, "\"e\"", options);
  source->BeginServing();
  EXPECT_EQ(source->timeout(), milliseconds(500));
  std::vector<uint8_t> buf(100);
  const auto start = Clock::now();
  const Status s = source->ReadAt(0, buf);
  EXPECT_GE(Clock::now() - start, milliseconds(400));
  EXPECT_EQ(s.errno_value(), ETIMEDOUT) << s.message();
}

// Through RemoteSource, as a mount reads: the kernel asks again at once for a read that
// just failed (and again under an mmap fault), and an object that timed out a moment ago
// fails at once, with EIO, whatever block is asked, so the reader waits for --timeout once.
TEST(HttpSourceTimeLimits, ARangeThatJustTimedOutFailsAtOnceThroughRemoteSource) {
  StalledListener server;
  ASSERT_NE(server.port(), 0);
  HttpOptions options;
  options.timeout = milliseconds(500);
  auto object = HttpSource::FromListing(server.Url("y"), "y", 3 << 20, "\"e\"", options);
  ReadContext context(ReadOptions{.cache_bytes = 16u << 20});
  const std::string identity = object->Identity();
  RemoteSource source(std::move(object), identity, context, nullptr, options.timeout);
  source.BeginServing();
  std::vector<LentBytes> lent;
  auto start = Clock::now();
  Status s = testing::Lend(source, 0, 100, &lent);
  EXPECT_EQ(s.errno_value(), EIO) << s.message();
  EXPECT_GE(Clock::now() - start, milliseconds(400));
  start = Clock::now();
  EXPECT_FALSE(testing::Lend(source, 0, 100, &lent).ok());
  EXPECT_FALSE(testing::Lend(source, 4096, 4096, &lent).ok());
  EXPECT_LT(Clock::now() - start, milliseconds(100)) << "the kernel's retries must fail at once";
  // Another block fails at once too; after the window the server is asked again.
  start = Clock::now();
  EXPECT_FALSE(testing::Lend(source, RemoteSource::kBlockSize, 100, &lent).ok());
  EXPECT_LT(Clock::now() - start, milliseconds(100));
  std::this_thread::sleep_for(RemoteSource::TimedOutWindow(options.timeout));
  start = Clock::now();
  EXPECT_FALSE(testing::Lend(source, RemoteSource::kBlockSize, 100, &lent).ok());
  EXPECT_GE(Clock::now() - start, milliseconds(400));
  context.Shutdown();
}

// Nothing listening: each retry of the kernel's is one quick attempt, not --timeout of
// retries again.
TEST(HttpSourceTimeLimits, ARefusedRangeIsTriedOnceMoreWithoutRetries) {
  int port = 0;
  {
    StalledListener closed;  // a free port, closed again at once
    port = closed.port();
  }
  HttpOptions options;
  options.timeout = milliseconds(600);
  auto source = HttpSource::FromListing("http://127.0.0.1:" + std::to_string(port) + "/y", "y",
                                        1000, "\"e\"", options);
  source->BeginServing();
  std::vector<uint8_t> buf(100);
  auto start = Clock::now();
  EXPECT_FALSE(source->ReadAt(0, buf).ok());
  EXPECT_GE(Clock::now() - start, milliseconds(300)) << "refused connections are retried";
  start = Clock::now();
  EXPECT_FALSE(source->ReadAt(0, buf).ok());
  EXPECT_LT(Clock::now() - start, milliseconds(200));
}

// A loopback HTTP server serving one object whose bytes and validator headers a test may
// change at any time; one request per connection (Connection: close). Ranges are
// honoured; If-Match is ignored, as s3rver does, so only the answer's own headers can
// tell a replaced object. Every request's head is kept.
class ObjectServer {
 public:
  std::string Url() const { return server_.Url("obj"); }
  int port() const { return server_.port(); }
  // The object from now on: its bytes and its validator header lines ("ETag: W/\"1\"\r\n").
  void Set(std::string body, std::string headers) {
    std::lock_guard<std::mutex> lock(mu_);
    body_ = std::move(body);
    headers_ = std::move(headers);
  }
  std::vector<std::string> Requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  std::string Answer(const std::string& request) {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(request);
    const bool head = request.rfind("HEAD ", 0) == 0;
    std::string status = "200 OK", range_header, body = body_;
    unsigned long long first = 0, last = 0;
    const size_t r = request.find("Range: bytes=");
    if (!head && r != std::string::npos &&
        std::sscanf(request.c_str() + r, "Range: bytes=%llu-%llu", &first, &last) == 2 &&
        first <= last && first < body_.size()) {
      last = std::min<unsigned long long>(last, body_.size() - 1);
      status = "206 Partial Content";
      range_header = "Content-Range: bytes " + std::to_string(first) + "-" + std::to_string(last) +
                     "/" + std::to_string(body_.size()) + "\r\n";
      body = body_.substr(first, last - first + 1);
    }
    return "HTTP/1.1 " + status + "\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\nConnection: close\r\n" + range_header + headers_ + "\r\n" + (head ? "" : body);
  }

  mutable std::mutex mu_;
  std::string body_, headers_;         // guarded by mu_
  std::vector<std::string> requests_;  // guarded by mu_
  testing::LoopbackHttpServer server_{[this](const std::string& r) { return Answer(r); }};
};

// A 403 on a URL without a trailing '/' is what servers answer for a directory asked for
// as a file: the refusal says how to name a directory.
TEST(HttpSourceOpen, ForbiddenSuggestsTheTrailingSlash) {
  testing::LoopbackHttpServer server([](const std::string&) {
    return std::string("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  });
  ASSERT_NE(server.port(), 0);
  auto source = HttpSource::Open(server.Url("models/llama"), "llama", HttpOptions{});
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().errno_value(), EACCES);
  EXPECT_EQ(source.status().message(),
            "llama: access denied to " + server.Url("models/llama") +
                " (HTTP 403); if it is a directory, end the URL with '/': " +
                server.Url("models/llama/"));
}

constexpr char kLastModified[] = "Last-Modified: Thu, 01 Jan 2015 00:00:00 GMT\r\n";

// Reads bytes [0, 100) of `source`: their status, and the bytes in `out`.
Status ReadHead(const HttpSource& source, std::string* out) {
  std::vector<uint8_t> buf(100);
  Status s = source.ReadAt(0, buf);
  out->assign(buf.begin(), buf.end());
  return s;
}

// Without a strong ETag, every validator the server gave at open is compared on every
// answer: a weak ETag that changes is EIO even where Last-Modified stays the same (it was
// the only one compared before, so the new bytes were served), and a Last-Modified that
// changes is EIO even where the weak ETag stays.
TEST(HttpSourceValidators, WithoutAStrongETagEveryValidatorGivenIsCompared) {
  struct Case {
    const char* what;
    std::string before, after, expect;
  } cases[] = {
      {"weak ETag alone", "ETag: W/\"1\"\r\n", "ETag: W/\"2\"\r\n", "ETag W/\"2\", was W/\"1\""},
      {"weak ETag, same Last-Modified", std::string("ETag: W/\"1\"\r\n") + kLastModified,
       std::string("ETag: W/\"2\"\r\n") + kLastModified, "ETag W/\"2\", was W/\"1\""},
      {"Last-Modified, same weak ETag", std::string("ETag: W/\"1\"\r\n") + kLastModified,
       "ETag: W/\"1\"\r\nLast-Modified: Fri, 02 Jan 2015 00:00:00 GMT\r\n",
       "Last-Modified Fri, 02 Jan 2015 00:00:00 GMT, was Thu, 01 Jan 2015"},
      {"weak ETag dropped", "ETag: W/\"1\"\r\n", "", "ETag missing, was W/\"1\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ObjectServer server;
    ASSERT_NE(server.port(), 0);
    const std::string v1(4096, 'a'), v2(4096, 'b');  // same size: only validators tell
    server.Set(v1, c.before);
    auto source = HttpSource::Open(server.Url(), "obj", HttpOptions{});
    ASSERT_TRUE(source.ok()) << source.status().message();
    EXPECT_TRUE((*source)->HasValidator());
    (*source)->BeginServing();
    std::string got;
    ASSERT_TRUE(ReadHead(**source, &got).ok());
    EXPECT_EQ(got, v1.substr(0, 100));
    server.Set(v2, c.after);
    const Status s = ReadHead(**source, &got);
    EXPECT_EQ(s.code(), Status::Code::kIoError);
    EXPECT_EQ(s.errno_value(), EIO);
    EXPECT_NE(s.message().find("obj: changed on the server since it was mounted (" + c.expect),
              std::string::npos)
        << s.message();
    // A weak ETag is never sent as If-Match, which compares strongly and never matches.
    for (const std::string& request : server.Requests()) {
      EXPECT_EQ(request.find("If-Match"), std::string::npos) << request;
    }
  }
}

// A strong ETag is sent as If-Match, and compared on the answer as well, for servers that
// ignore If-Match.
TEST(HttpSourceValidators, AStrongETagIsSentAsIfMatchAndCompared) {
  ObjectServer server;
  ASSERT_NE(server.port(), 0);
  server.Set(std::string(4096, 'a'), std::string("ETag: \"v1\"\r\n") + kLastModified);
  auto source = HttpSource::Open(server.Url(), "obj", HttpOptions{});
  ASSERT_TRUE(source.ok()) << source.status().message();
  std::string got;
  ASSERT_TRUE(ReadHead(**source, &got).ok());
  const std::vector<std::string> requests = server.Requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_NE(requests[1].find("If-Match: \"v1\"\r\n"), std::string::npos) << requests[1];
  server.Set(std::string(4096, 'b'), std::string("ETag: \"v2\"\r\n") + kLastModified);
  const Status s = ReadHead(**source, &got);
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_NE(s.message().find("(ETag \"v2\", was \"v1\")"), std::string::npos) << s.message();
}

// A server that gives neither ETag nor Last-Modified: HasValidator says so (the mount
// warns), and the size is still compared on every answer.
TEST(HttpSourceValidators, WithoutValidatorsTheSizeIsStillCompared) {
  ObjectServer server;
  ASSERT_NE(server.port(), 0);
  server.Set(std::string(4096, 'a'), "");
  auto source = HttpSource::Open(server.Url(), "obj", HttpOptions{});
  ASSERT_TRUE(source.ok()) << source.status().message();
  EXPECT_FALSE((*source)->HasValidator());
  EXPECT_EQ((*source)->Identity(), server.Url() + "\n\n4096");
  std::string got;
  ASSERT_TRUE(ReadHead(**source, &got).ok());
  server.Set(std::string(5000, 'b'), "");
  const Status s = ReadHead(**source, &got);
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_NE(s.message().find("is bytes 0-99/5000"), std::string::npos) << s.message();
}

// An S3 listing without a strong ETag: each answer's Last-Modified is compared with the
// listing's time, to the second.
TEST(HttpSourceValidators, AListedObjectWithoutStrongETagComparesItsTime) {
  ObjectServer server;
  ASSERT_NE(server.port(), 0);
  server.Set(std::string(4096, 'a'), kLastModified);  // 1420070400
  auto source = HttpSource::FromListing(server.Url(), "obj", 4096, "", HttpOptions{},
                                        timespec{1420070400, 0});
  EXPECT_TRUE(source->HasValidator());
  std::string got;
  ASSERT_TRUE(ReadHead(*source, &got).ok());
  server.Set(std::string(4096, 'b'), "Last-Modified: Thu, 01 Jan 2015 00:01:00 GMT\r\n");
  const Status s = ReadHead(*source, &got);
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_NE(s.message().find("changed on the server since it was mounted (Last-Modified"),
            std::string::npos)
      << s.message();
}

TEST(UrlPasswordProblem, RefusesPasswordsNeverShowsThem) {
  EXPECT_EQ(UrlPasswordProblem("https://host/ckpt/"), "");
  EXPECT_EQ(UrlPasswordProblem("https://someone@host:8443/ckpt/"), "");
  EXPECT_EQ(UrlPasswordProblem("http://host/a:b@c/model.safetensors"), "") << "@ in the path";
  EXPECT_EQ(UrlPasswordProblem("http://host?x=a:b@c"), "") << "@ in the query";
  for (const std::string url : {"http://someone:hunter2@host/ckpt/", "https://:hunter2@host/",
                                "http://some:one:hunter2@host:80/x.safetensors"}) {
    const std::string problem = UrlPasswordProblem(url);
    EXPECT_NE(problem, "") << url;
    EXPECT_EQ(problem.find("hunter2"), std::string::npos) << problem;
    EXPECT_NE(problem.find(".netrc"), std::string::npos) << problem;
  }
}

}  // namespace
}  // namespace ckptfs
