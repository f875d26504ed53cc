#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "core/source/byte_source.h"
#include "core/source/http_source.h"

namespace ckptfs {
namespace {

std::span<uint8_t> Bytes(std::string& s) {
  return {reinterpret_cast<uint8_t*>(s.data()), s.size()};
}

TEST(MemorySource, ReadsAndRefusesPastEnd) {
  MemorySource src("m", "0123456789");
  std::string out(4, '\0');
  ASSERT_TRUE(src.ReadAt(3, Bytes(out)).ok());
  EXPECT_EQ(out, "3456");
  Status s = src.ReadAt(8, Bytes(out));
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_EQ(s.message().rfind("m: ", 0), 0u);
  EXPECT_FALSE(src.ReadAt(UINT64_MAX - 1, Bytes(out)).ok());  // no overflow
  std::string none;
  EXPECT_TRUE(src.ReadAt(10, Bytes(none)).ok());
}

TEST(LocalFileSource, ReadsAFileAndReportsMissingOnes) {
  char path[] = "/tmp/ckptfs-src-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "hello world", 11), 11);
  close(fd);
  auto src = LocalFileSource::Open(path, "hello.bin");
  ASSERT_TRUE(src.ok()) << src.status().message();
  EXPECT_EQ((*src)->Size(), 11u);
  EXPECT_GE((*src)->Fd(), 0);
  std::string out(5, '\0');
  ASSERT_TRUE((*src)->ReadAt(6, Bytes(out)).ok());
  EXPECT_EQ(out, "world");
  // Truncated after open: a short read is an error, never zeros.
  ASSERT_EQ(truncate(path, 4), 0);
  Status s = (*src)->ReadAt(6, Bytes(out));
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_NE(s.message().find("hello.bin: file truncated"), std::string::npos) << s.message();
  unlink(path);

  auto missing = LocalFileSource::Open("/nonexistent/x", "x.safetensors");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
  EXPECT_FALSE(LocalFileSource::Open("/tmp", "tmp").ok());  // a directory
}

TEST(FaultySource, FailsTheNthReadAndShortReads) {
  auto base = std::make_shared<MemorySource>("f", std::string(100, 'x'));
  FaultySource nth(base, {.fail_read_number = 1});
  std::string out(10, '\0');
  EXPECT_TRUE(nth.ReadAt(0, Bytes(out)).ok());
  EXPECT_EQ(nth.ReadAt(0, Bytes(out)).code(), Status::Code::kIoError);
  EXPECT_TRUE(nth.ReadAt(0, Bytes(out)).ok());

  FaultySource short_file(base, {.readable_bytes = 50});
  EXPECT_TRUE(short_file.ReadAt(40, Bytes(out)).ok());
  EXPECT_FALSE(short_file.ReadAt(45, Bytes(out)).ok());
}

}  // namespace
}  // namespace ckptfs

namespace ckptfs {
namespace {

TEST(HttpUrl, CredentialsNeverReachMessages) {
  EXPECT_EQ(RedactedUrl("https://user:secret@host/a/b"), "https://host/a/b");
  EXPECT_EQ(RedactedUrl("http://host/a@b"), "http://host/a@b");
  EXPECT_EQ(RedactedUrl("http://host:8080/x/"), "http://host:8080/x/");
}

}  // namespace
}  // namespace ckptfs
