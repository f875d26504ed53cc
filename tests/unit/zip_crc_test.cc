// The zip CRC sidecar (core/crc/zip_crc.h): its strict parser over truncated, lying and
// foreign files, its key, and the store's trust rules.

#include "core/crc/zip_crc.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace ckptfs {
namespace {

const CrcKey kKey{0x0123456789abcdefull, 0xfedcba9876543210ull};
const std::vector<uint32_t> kCrcs = {0xdeadbeef, 0, 0x12345678};

TEST(ZipCrcSidecarTest, RoundTrip) {
  const std::string bytes = EncodeCrcSidecar(kKey, kCrcs);
  EXPECT_EQ(bytes.size(), 48u + 4 * kCrcs.size());
  auto crcs = DecodeCrcSidecar(bytes, kKey, kCrcs.size(), "s");
  ASSERT_TRUE(crcs.ok()) << crcs.status().message();
  EXPECT_EQ(crcs.value(), kCrcs);
  EXPECT_TRUE(DecodeCrcSidecar(EncodeCrcSidecar(kKey, {}), kKey, 0, "s").ok());
}

TEST(ZipCrcSidecarTest, EveryTruncationRefused) {
  const std::string bytes = EncodeCrcSidecar(kKey, kCrcs);
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto crcs = DecodeCrcSidecar(bytes.substr(0, n), kKey, kCrcs.size(), "side");
    EXPECT_FALSE(crcs.ok()) << n;
    if (!crcs.ok()) {
      EXPECT_EQ(crcs.status().message().rfind("side: ", 0), 0u);
    }
  }
  EXPECT_FALSE(DecodeCrcSidecar(bytes + "x", kKey, kCrcs.size(), "s").ok());
}

TEST(ZipCrcSidecarTest, WrongCountsRefused) {
  const std::string bytes = EncodeCrcSidecar(kKey, kCrcs);
  // The checkpoint expects another number of CRCs than the file holds.
  EXPECT_FALSE(DecodeCrcSidecar(bytes, kKey, kCrcs.size() - 1, "s").ok());
  EXPECT_FALSE(DecodeCrcSidecar(bytes, kKey, kCrcs.size() + 1, "s").ok());
  // A count field that lies about the body, with the checksum made to match, so only
  // the count is wrong: huge, one more, one less.
  for (uint64_t lie : {uint64_t{1} << 62, uint64_t{4}, uint64_t{2}}) {
    std::string forged = bytes.substr(0, bytes.size() - 8);
    for (size_t i = 0; i < 8; ++i) forged[32 + i] = static_cast<char>(lie >> (8 * i));
    const uint64_t sum = XXH3_64bits(forged.data(), forged.size());
    for (size_t i = 0; i < 8; ++i) forged.push_back(static_cast<char>(sum >> (8 * i)));
    EXPECT_FALSE(DecodeCrcSidecar(forged, kKey, kCrcs.size(), "s").ok()) << lie;
    if (lie < 100) {
      EXPECT_FALSE(DecodeCrcSidecar(forged, kKey, lie, "s").ok()) << lie;
    }
  }
}

TEST(ZipCrcSidecarTest, DamageAndForeignKeysRefused) {
  const std::string bytes = EncodeCrcSidecar(kKey, kCrcs);
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string damaged = bytes;
    damaged[i] = static_cast<char>(damaged[i] ^ 0x01);
    EXPECT_FALSE(DecodeCrcSidecar(damaged, kKey, kCrcs.size(), "s").ok()) << i;
  }
  auto other = DecodeCrcSidecar(bytes, CrcKey{kKey.low, kKey.high + 1}, kCrcs.size(), "s");
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("key mismatch"), std::string::npos);
}

TEST(ZipCrcSidecarTest, ModesParse) {
  EXPECT_EQ(ParseZipCrcMode("auto"), ZipCrcMode::kAuto);
  EXPECT_EQ(ParseZipCrcMode("mount"), ZipCrcMode::kMount);
  EXPECT_EQ(ParseZipCrcMode("off"), ZipCrcMode::kOff);
  EXPECT_FALSE(ParseZipCrcMode("on").has_value());
}

TEST(ZipCrcStoreTest, SaveLoadPrivate) {
  char tmpl[] = "/tmp/zipcrc-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = std::string(tmpl) + "/a/crc";
  CrcStore store(dir);
  EXPECT_EQ(store.Load(kKey, 3).status().code(), Status::Code::kNotFound);
  ASSERT_TRUE(store.Save(kKey, kCrcs).ok());
  struct stat st;
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat(store.PathFor(kKey).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto crcs = store.Load(kKey, 3);
  ASSERT_TRUE(crcs.ok()) << crcs.status().message();
  EXPECT_EQ(crcs.value(), kCrcs);
  EXPECT_FALSE(store.Load(kKey, 4).ok());  // the checkpoint has another number of storages
  // A sidecar owned by another user is never used.
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(store.PathFor(kKey).c_str(), 65534, 65534), 0);
    auto foreign = store.Load(kKey, 3);
    ASSERT_FALSE(foreign.ok());
    EXPECT_NE(foreign.status().message().find("another user"), std::string::npos);
  }
  std::system(("rm -rf " + std::string(tmpl)).c_str());
}

TEST(ZipCrcStoreTest, DefaultDirectory) {
  EXPECT_EQ(CrcSidecarDir("/c"), "/c/crc");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const std::string saved = xdg ? xdg : "";
  ::setenv("XDG_CACHE_HOME", "/x", 1);
  EXPECT_EQ(CrcSidecarDir(""), "/x/ckptfs/crc");
  ::unsetenv("XDG_CACHE_HOME");
  if (::geteuid() == 0) {
    EXPECT_EQ(CrcSidecarDir(""), "/var/cache/ckptfs/crc");
  }
  if (xdg) ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
}

}  // namespace
}  // namespace ckptfs
