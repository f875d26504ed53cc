#include "core/cache/disk_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ckptfs {
namespace {

namespace fs = std::filesystem;

constexpr size_t kHeader = 64;  // the entry header, see disk_cache.h

// A fresh directory, removed with everything in it when the test ends.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "disk_cache_test.XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);  // never follows symlinks planted by a test
  }
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Collects warn lines; thread-safe although DiskCache never calls it concurrently.
struct WarnLog {
  std::mutex mu;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> Fn() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu);
      lines.push_back(line);
    };
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu);
    return lines.size();
  }
};

std::string Identity(int i) {
  // Same length for every i < 10000: swapped files then differ only inside the header.
  char buf[128];
  std::snprintf(buf, sizeof(buf), "https://host/model-%04d.safetensors\n\"etag-%04d\"\n123456789",
                i, i);
  return buf;
}

// Bytes of block `block` of `object`: different per key and position, so a block served
// for another key shows.
std::vector<uint8_t> Pattern(std::string_view object, uint64_t block, size_t size) {
  std::vector<uint8_t> out(size);
  uint64_t x = XXH3_64bits(object.data(), object.size()) ^ (block * 0x9E3779B97F4A7C15ull);
  for (size_t i = 0; i < size; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    out[i] = static_cast<uint8_t>(x >> 56);
  }
  return out;
}

uint64_t FileBytes(std::string_view object, size_t size) { return kHeader + object.size() + size; }

// The documented entry path: DIR/<first hex digit>/<XXH3-128 of identity || le64 block>.
std::string EntryPath(const std::string& dir, std::string_view object, uint64_t block) {
  std::string input(object);
  for (int i = 0; i < 8; ++i) input.push_back(static_cast<char>(block >> (8 * i)));
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(input.data(), input.size()));
  char hex[33];
  for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", c.digest[i]);
  return dir + "/" + std::string(1, hex[0]) + "/" + hex;
}

std::unique_ptr<DiskCache> OpenOrDie(const std::string& dir, uint64_t capacity,
                                     std::function<void(const std::string&)> warn = {}) {
  auto cache = DiskCache::Open(dir, capacity, std::move(warn));
  if (!cache.ok()) {
    ADD_FAILURE() << cache.status().message();
    return nullptr;
  }
  return std::move(cache).value();
}

void Put(DiskCache& cache, std::string_view object, uint64_t block, size_t size) {
  const std::vector<uint8_t> bytes = Pattern(object, block, size);
  cache.Put(object, block, bytes);
}

// Whether the cache returns exactly the pattern; a hit with other bytes fails the test.
bool GetMatches(DiskCache& cache, std::string_view object, uint64_t block, size_t size) {
  std::vector<uint8_t> out(size, 0xEE);
  if (!cache.Get(object, block, out)) return false;
  EXPECT_EQ(out, Pattern(object, block, size)) << "wrong bytes for block " << block;
  return true;
}

// Bytes of the files the cache counts: entries and temporary files in its subdirectories.
uint64_t DiskUsage(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& sub : fs::directory_iterator(dir)) {
    if (!sub.is_directory() || sub.is_symlink() || sub.path().filename().string().size() != 1) {
      continue;
    }
    for (const auto& f : fs::directory_iterator(sub.path())) {
      if (f.is_regular_file() && !f.is_symlink()) total += f.file_size();
    }
  }
  return total;
}

std::vector<std::string> FilesIn(const std::string& sub_dir) {
  std::vector<std::string> names;
  for (const auto& f : fs::directory_iterator(sub_dir)) names.push_back(f.path().filename());
  return names;
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// Sets a file's access time `seconds` into the past (the cache's recency), and its
// modification time an hour before that: then a relatime mount does not move the access
// time on the next read by itself, and only the cache's own update can.
void SetAge(const std::string& path, int seconds) {
  struct timespec times[2];
  clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= seconds;
  times[1] = times[0];
  times[1].tv_sec -= 3600;
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW), 0) << path;
}

void FlipByte(const std::string& path, uint64_t offset) {
  const int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  uint8_t b = 0;
  ASSERT_EQ(pread(fd, &b, 1, static_cast<off_t>(offset)), 1);
  b ^= 0x01;
  ASSERT_EQ(pwrite(fd, &b, 1, static_cast<off_t>(offset)), 1);
  close(fd);
}

// Runs `body` in a forked child and returns its exit status (-1 if it did not exit).
// The child must not use gtest assertions: it reports through its status and stderr.
int RunInChild(const std::function<int()>& body) {
  fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
constexpr int kChildSkip = 77;

// In a child: a private mount namespace, so mounts made for a test vanish with it.
bool PrivateMounts() {
  return unshare(CLONE_NEWNS) == 0 &&
         mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
}

TEST(DiskCacheTest, RoundTrip) {
  TempDir dir;
  auto cache = OpenOrDie(dir.path(), 1 << 20);
  ASSERT_TRUE(cache);
  const std::string obj = Identity(1);
  Put(*cache, obj, 7, 5000);
  EXPECT_TRUE(GetMatches(*cache, obj, 7, 5000));
  DiskCache::Counters c = cache->counters();
  EXPECT_EQ(c.hits, 1u);
  EXPECT_EQ(c.misses, 0u);
  EXPECT_EQ(c.bytes_read, 5000u);
  EXPECT_EQ(c.bytes_written, 5000u);
  EXPECT_EQ(c.bytes_used, FileBytes(obj, 5000));
  EXPECT_EQ(c.write_errors, 0u);
  EXPECT_EQ(c.corrupt, 0u);
  struct stat st;
  ASSERT_EQ(stat(EntryPath(dir.path(), obj, 7).c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), FileBytes(obj, 5000));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // No temporary file is left behind.
  for (const std::string& name : FilesIn(fs::path(EntryPath(dir.path(), obj, 7)).parent_path())) {
    EXPECT_NE(name.rfind(".tmp-", 0), 0u) << name;
  }
}

// Fetch claims (TryClaim): of several processes missing one block, one fetches; the
// others wait for its entry. A claim whose process is gone, or that is stale, is broken.
TEST(DiskCacheTest, ClaimsLetOneFetcherThroughAndDieWithTheirProcess) {
  TempDir dir;
  auto a = OpenOrDie(dir.path(), 1 << 20);
  auto b = OpenOrDie(dir.path(), 1 << 20);
  ASSERT_TRUE(a && b);
  const std::string obj = Identity(1);
  const auto long_time = std::chrono::milliseconds(30000);
  EXPECT_TRUE(a->TryClaim(obj, 3, long_time));
  EXPECT_FALSE(b->TryClaim(obj, 3, long_time)) << "a live claim holds the block";
  EXPECT_TRUE(b->TryClaim(obj, 4, long_time)) << "another block is free";
  const auto now = std::chrono::steady_clock::now();
  EXPECT_FALSE(b->WaitForClaim(obj, 3, now + std::chrono::milliseconds(20)));
  std::thread fetcher([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    Put(*a, obj, 3, 100);
    a->Unclaim(obj, 3);
  });
  EXPECT_TRUE(b->WaitForClaim(obj, 3, now + std::chrono::seconds(10)));
  fetcher.join();
  EXPECT_TRUE(GetMatches(*b, obj, 3, 100));
  EXPECT_EQ(b->counters().claim_waits, 2u);
  // Stale: older than the caller's bound.
  EXPECT_TRUE(a->TryClaim(obj, 5, long_time));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(b->TryClaim(obj, 5, std::chrono::milliseconds(1)));
  // Its process is gone.
  const pid_t child = fork();
  if (child == 0) _exit(a->TryClaim(obj, 6, long_time) ? 0 : 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(b->TryClaim(obj, 6, long_time));
  // A claim is never an entry: a scan leaves it, and a Get of the block misses.
  EXPECT_FALSE(GetMatches(*b, obj, 6, 100));
}

TEST(DiskCacheTest, OtherKeysMiss) {
  TempDir dir;
  auto cache = OpenOrDie(dir.path(), 1 << 20);
  ASSERT_TRUE(cache);
  std::vector<uint8_t> out(1000);
  EXPECT_FALSE(cache->Get(Identity(1), 0, out));
  Put(*cache, Identity(1), 0, 1000);
  EXPECT_FALSE(cache->Get(Identity(1), 1, out));
  EXPECT_FALSE(cache->Get(Identity(2), 0, out));
  EXPECT_FALSE(cache->Get(Identity(1) + "x", 0, out));
  EXPECT_TRUE(GetMatches(*cache, Identity(1), 0, 1000));
  DiskCache::Counters c = cache->counters();
  EXPECT_EQ(c.misses, 4u);
  EXPECT_EQ(c.hits, 1u);
  EXPECT_EQ(c.corrupt, 0u);
}

TEST(DiskCacheTest, SurvivesReopen) {
  TempDir dir;
  {
    auto cache = OpenOrDie(dir.path(), 1 << 20);
    ASSERT_TRUE(cache);
    for (uint64_t b = 0; b < 5; ++b) Put(*cache, Identity(3), b, 4096);
  }
  auto cache = OpenOrDie(dir.path(), 1 << 20);
  ASSERT_TRUE(cache);
  EXPECT_EQ(cache->counters().bytes_used, 5 * FileBytes(Identity(3), 4096));
  for (uint64_t b = 0; b < 5; ++b) EXPECT_TRUE(GetMatches(*cache, Identity(3), b, 4096));
  EXPECT_EQ(cache->counters().hits, 5u);
}

TEST(DiskCacheTest, CreatesAPrivateDirectoryAndItsParents) {
  TempDir dir;
  const std::string path = dir.Sub("a/b/cache");
  auto cache = OpenOrDie(path, 1 << 20);
  ASSERT_TRUE(cache);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_TRUE(Exists(path + "/lock"));
  EXPECT_TRUE(Exists(path + "/CACHEDIR.TAG"));
  EXPECT_EQ(cache->dir(), path);
}

TEST(DiskCacheTest, FlippedPayloadByteIsDroppedAndReported) {
  TempDir dir;
  WarnLog warns;
  auto cache = OpenOrDie(dir.path(), 1 << 20, warns.Fn());
  ASSERT_TRUE(cache);
  const std::string obj = Identity(4);
  Put(*cache, obj, 2, 3000);
  const std::string path = EntryPath(dir.path(), obj, 2);
  FlipByte(path, FileBytes(obj, 3000) - 1);
  std::vector<uint8_t> out(3000);
  EXPECT_FALSE(cache->Get(obj, 2, out));
  EXPECT_FALSE(Exists(path));
  DiskCache::Counters c = cache->counters();
  EXPECT_EQ(c.corrupt, 1u);
  EXPECT_EQ(c.misses, 1u);
  EXPECT_EQ(c.hits, 0u);
  EXPECT_EQ(c.bytes_used, 0u);
  ASSERT_EQ(warns.size(), 1u);
  EXPECT_NE(warns.lines[0].find(path), std::string::npos) << warns.lines[0];
  EXPECT_NE(warns.lines[0].find("checksum"), std::string::npos) << warns.lines[0];
  EXPECT_EQ(warns.lines[0].find('\n'), std::string::npos);
  // Refetched and stored again, it is good.
  Put(*cache, obj, 2, 3000);
  EXPECT_TRUE(GetMatches(*cache, obj, 2, 3000));
}

TEST(DiskCacheTest, EveryDamagedHeaderOrPayloadByteIsAMiss) {
  TempDir dir;
  WarnLog warns;
  auto cache = OpenOrDie(dir.path(), 1 << 20, warns.Fn());
  ASSERT_TRUE(cache);
  const std::string obj = Identity(5);
  const size_t size = 777;
  const std::string path = EntryPath(dir.path(), obj, 9);
  uint64_t flips = 0;
  for (uint64_t offset = 0; offset < FileBytes(obj, size);
       offset += offset < kHeader + obj.size() ? 1 : 97) {
    Put(*cache, obj, 9, size);
    FlipByte(path, offset);
    std::vector<uint8_t> out(size);
    EXPECT_FALSE(cache->Get(obj, 9, out)) << "byte " << offset;
    EXPECT_FALSE(Exists(path)) << "byte " << offset;
    ++flips;
  }
  EXPECT_EQ(cache->counters().corrupt, flips);
  EXPECT_EQ(cache->counters().hits, 0u);
  EXPECT_EQ(cache->counters().bytes_used, 0u);
  // Reported, but not once per entry: a damaged disk must not flood the log.
  ASSERT_EQ(warns.size(), 10u);
  EXPECT_NE(warns.lines.back().find("only counted"), std::string::npos);
}

TEST(DiskCacheTest, TruncatedExtendedAndEmptyFilesAreDropped) {
  TempDir dir;
  auto cache = OpenOrDie(dir.path(), 1 << 20);
  ASSERT_TRUE(cache);
  const std::string obj = Identity(6);
  const std::string path = EntryPath(dir.path(), obj, 0);
  const uint64_t full = FileBytes(obj, 4096);
  uint64_t expected_corrupt = 0;
  for (uint64_t size : {full - 1, full / 2, uint64_t{10}, uint64_t{0}, full + 1}) {
    Put(*cache, obj, 0, 4096);
    ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(size)), 0);
    std::vector<uint8_t> out(4096);
    EXPECT_FALSE(cache->Get(obj, 0, out)) << size;
    EXPECT_FALSE(Exists(path)) << size;
    EXPECT_EQ(cache->counters().corrupt, ++expected_corrupt);
  }
}

TEST(DiskCacheTest, AnotherLengthIsAMiss) {
  TempDir dir;
  auto cache = OpenOrDie(dir.path(), 1 << 20);
  ASSERT_TRUE(cache);
  const std::string obj = Identity(7);
  for (size_t asked : {size_t{999}, size_t{1001}, size_t{0}}) {
    Put(*cache, obj, 0, 1000);
    std::vector<uint8_t> out(asked);
    EXPECT_FALSE(cache->Get(obj, 0, out)) << asked;
  }
  EXPECT_EQ(cache->counters().corrupt, 3u);
}

TEST(DiskCacheTest, EntryOfAnotherKeyIsNeverReturned) {
  TempDir dir;
  auto cache = OpenOrDie(dir.path(), 1 << 20);
  ASSERT_TRUE(cache);
  // Same identity length and block size: the files differ only in header and payload,
  // as with a collision of names.
  const std::string a = Identity(10), b = Identity(11);
  ASSERT_EQ(a.size(), b.size());
  Put(*cache, a, 0, 2048);
  Put(*cache, b, 0, 2048);
  Put(*cache, a, 1, 2048);
  fs::copy_file(EntryPath(dir.path(), a, 0), EntryPath(dir.path(), b, 0),
                fs::copy_options::overwrite_existing);
  fs::copy_file(EntryPath(dir.path(), a, 0), EntryPath(dir.path(), a, 1),
                fs::copy_options::overwrite_existing);
  std::vector<uint8_t> out(2048);
  EXPECT_FALSE(cache->Get(b, 0, out));
  EXPECT_FALSE(cache->Get(a, 1, out));
  EXPECT_TRUE(GetMatches(*cache, a, 0, 2048));
  EXPECT_EQ(cache->counters().corrupt, 2u);
}

TEST(DiskCacheTest, DirectoryWhereAnEntryBelongs) {
  TempDir dir;
  WarnLog warns;
  auto cache = OpenOrDie(dir.path(), 1 << 20, warns.Fn());
  ASSERT_TRUE(cache);
  const std::string obj = Identity(12);
  const std::string path = EntryPath(dir.path(), obj, 0);
  std::vector<uint8_t> out(100);
  // An empty directory is removed and the name is usable again.
  ASSERT_EQ(mkdir(path.c_str(), 0700), 0);
  EXPECT_FALSE(cache->Get(obj, 0, out));
  EXPECT_FALSE(Exists(path));
  Put(*cache, obj, 0, 100);
  EXPECT_TRUE(GetMatches(*cache, obj, 0, 100));
  // A directory with contents is not the cache's to delete: a miss, a failed Put, no harm.
  ASSERT_EQ(unlink(path.c_str()), 0);
  ASSERT_EQ(mkdir(path.c_str(), 0700), 0);
  std::ofstream(path + "/keep") << "x";
  EXPECT_FALSE(cache->Get(obj, 0, out));
  Put(*cache, obj, 0, 100);
  EXPECT_FALSE(cache->Get(obj, 0, out));
  EXPECT_TRUE(Exists(path + "/keep"));
  ASSERT_FALSE(warns.lines.empty());
  EXPECT_NE(warns.lines.back().find("cannot remove"), std::string::npos) << warns.lines.back();
  EXPECT_EQ(cache->counters().write_errors, 1u);
  EXPECT_EQ(cache->counters().corrupt, 3u);
}

TEST(DiskCacheTest, SymlinkedEntryIsNeverFollowed) {
  TempDir dir, outside;
  auto cache = OpenOrDie(dir.path(), 1 << 20);
  ASSERT_TRUE(cache);
  const std::string obj = Identity(13);
  // A perfectly valid entry, but outside the cache and reached through a symlink.
  Put(*cache, obj, 0, 512);
  const std::string path = EntryPath(dir.path(), obj, 0);
  const std::string target = outside.Sub("entry");
  fs::rename(path, target);
  fs::create_symlink(target, path);
  std::vector<uint8_t> out(512);
  EXPECT_FALSE(cache->Get(obj, 0, out));
  EXPECT_FALSE(Exists(path));
  EXPECT_TRUE(Exists(target));
  EXPECT_EQ(cache->counters().corrupt, 1u);
  // A Put replaces the link itself, never writes through it.
  fs::create_symlink(target, path);
  const auto before = fs::file_size(target);
  Put(*cache, obj, 0, 100);
  EXPECT_FALSE(fs::is_symlink(path));
  EXPECT_EQ(fs::file_size(target), before);
  EXPECT_TRUE(GetMatches(*cache, obj, 0, 100));
}

TEST(DiskCacheTest, SymlinkedSubdirectoryIsNeverFollowed) {
  TempDir dir, outside;
  {
    auto cache = OpenOrDie(dir.path(), 1 << 20);
    ASSERT_TRUE(cache);
    const std::string obj = Identity(14);
    const std::string sub = fs::path(EntryPath(dir.path(), obj, 0)).parent_path();
    // Planted while mounted: writes fail, nothing lands outside, reads miss.
    fs::remove_all(sub);
    fs::create_symlink(outside.path(), sub);
    Put(*cache, obj, 0, 100);
    std::vector<uint8_t> out(100);
    EXPECT_FALSE(cache->Get(obj, 0, out));
    EXPECT_EQ(cache->counters().write_errors, 1u);
    EXPECT_TRUE(fs::is_empty(outside.path()));
  }
  // Found at Open: refused, naming it.
  auto reopened = DiskCache::Open(dir.path(), 1 << 20);
  ASSERT_FALSE(reopened.ok());
  EXPECT_NE(reopened.status().message().find(dir.path() + "/"), std::string::npos)
      << reopened.status().message();
  EXPECT_NE(reopened.status().message().find("not a directory"), std::string::npos)
      << reopened.status().message();
}

TEST(DiskCacheTest, FifoIsNotWaitedOn) {
  TempDir dir;
  auto cache = OpenOrDie(dir.path(), 1 << 20);
  ASSERT_TRUE(cache);
  const std::string obj = Identity(15);
  const std::string path = EntryPath(dir.path(), obj, 0);
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  std::vector<uint8_t> out(100);
  EXPECT_FALSE(cache->Get(obj, 0, out));  // would hang forever if it opened the FIFO blocking
  EXPECT_FALSE(Exists(path));
}

TEST(DiskCacheTest, OpenRefusesWhatIsNotADirectory) {
  TempDir dir;
  const std::string file = dir.Sub("file");
  std::ofstream(file) << "not a directory";
  for (const std::string& path : {file, file + "/cache"}) {
    auto cache = DiskCache::Open(path, 1 << 20);
    ASSERT_FALSE(cache.ok()) << path;
    EXPECT_NE(cache.status().message().find(path + ":"), std::string::npos)
        << cache.status().message();
    EXPECT_EQ(cache.status().message().find('\n'), std::string::npos);
    EXPECT_NE(cache.status().errno_value(), 0);
  }
  EXPECT_FALSE(DiskCache::Open("", 1 << 20).ok());
  // A name the cache needs, taken by a file.
  const std::string taken = dir.Sub("taken");
  ASSERT_EQ(mkdir(taken.c_str(), 0700), 0);
  std::ofstream(taken + "/a") << "x";
  auto cache = DiskCache::Open(taken, 1 << 20);
  ASSERT_FALSE(cache.ok());
  EXPECT_NE(cache.status().message().find(taken + "/a"), std::string::npos)
      << cache.status().message();
}

TEST(DiskCacheTest, ForeignFilesAreLeftAlone) {
  TempDir dir;
  ASSERT_EQ(mkdir(dir.Sub("a").c_str(), 0700), 0);
  ASSERT_EQ(mkdir(dir.Sub("lost+found").c_str(), 0700), 0);
  std::ofstream(dir.Sub("README")) << "mine";
  std::ofstream(dir.Sub("a/notes.txt")) << "mine too";
  std::ofstream(dir.Sub("a/0123456789abcdef0123456789abcdeX")) << "almost an entry name";
  const uint64_t entry = FileBytes(Identity(0), 1000);
  auto cache = OpenOrDie(dir.path(), 5 * entry);
  ASSERT_TRUE(cache);
  for (int i = 0; i < 40; ++i) Put(*cache, Identity(i), 0, 1000);
  EXPECT_GT(cache->counters().evictions, 0u);
  EXPECT_TRUE(Exists(dir.Sub("README")));
  EXPECT_TRUE(Exists(dir.Sub("lost+found")));
  EXPECT_TRUE(Exists(dir.Sub("a/notes.txt")));
  EXPECT_TRUE(Exists(dir.Sub("a/0123456789abcdef0123456789abcdeX")));
}

TEST(DiskCacheTest, StaleTemporaryFilesAreRemovedAtOpen) {
  TempDir dir;
  { ASSERT_TRUE(OpenOrDie(dir.path(), 1 << 20)); }
  // Left by a writer that crashed an hour ago, and by one writing right now.
  const std::string stale = dir.Sub("3/.tmp-00000000deadbeef-1");
  const std::string live = dir.Sub("3/.tmp-00000000deadbeef-2");
  std::ofstream(stale) << std::string(1000, 'x');
  std::ofstream(live) << std::string(300, 'x');
  struct timespec times[2];
  clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= 3600;
  times[1] = times[0];
  ASSERT_EQ(utimensat(AT_FDCWD, stale.c_str(), times, 0), 0);
  auto cache = OpenOrDie(dir.path(), 1 << 20);
  ASSERT_TRUE(cache);
  EXPECT_FALSE(Exists(stale));
  EXPECT_TRUE(Exists(live));
  EXPECT_EQ(cache->counters().bytes_used, 300u);  // a write in progress takes room too
}

TEST(DiskCacheTest, EvictionKeepsWithinCapacity) {
  TempDir dir;
  const uint64_t entry = FileBytes(Identity(0), 4096);
  const uint64_t capacity = 10 * entry + 100;
  auto cache = OpenOrDie(dir.path(), capacity);
  ASSERT_TRUE(cache);
  for (int i = 0; i < 60; ++i) {
    Put(*cache, Identity(i), 0, 4096);
    const DiskCache::Counters c = cache->counters();
    ASSERT_LE(c.bytes_used, capacity) << i;
    ASSERT_LE(DiskUsage(dir.path()), capacity) << i;
    // Alone, the estimate is exact.
    ASSERT_EQ(c.bytes_used, DiskUsage(dir.path())) << i;
  }
  const DiskCache::Counters c = cache->counters();
  EXPECT_GE(c.evictions, 50u);
  EXPECT_EQ(c.write_errors, 0u);
  EXPECT_TRUE(GetMatches(*cache, Identity(59), 0, 4096));  // the newest is kept
  // A block bigger than the whole cache is not stored, and is no error.
  Put(*cache, Identity(99), 0, capacity);
  EXPECT_FALSE(Exists(EntryPath(dir.path(), Identity(99), 0)));
  EXPECT_EQ(cache->counters().write_errors, 0u);
}

TEST(DiskCacheTest, EvictsLeastRecentlyUsedAcrossReopen) {
  TempDir dir;
  const uint64_t entry = FileBytes(Identity(0), 4096);
  const uint64_t capacity = 4 * entry + 100;
  {
    auto cache = OpenOrDie(dir.path(), capacity);
    ASSERT_TRUE(cache);
    for (int i = 0; i < 4; ++i) Put(*cache, Identity(i), 0, 4096);
  }
  // Written hours apart, oldest first; then the oldest is read again.
  for (int i = 0; i < 4; ++i) SetAge(EntryPath(dir.path(), Identity(i), 0), (4 - i) * 3600);
  {
    auto cache = OpenOrDie(dir.path(), capacity);
    ASSERT_TRUE(cache);
    EXPECT_TRUE(GetMatches(*cache, Identity(0), 0, 4096));
  }
  // The recency read above must survive a remount: entry 1 is now the least recent.
  auto cache = OpenOrDie(dir.path(), capacity);
  ASSERT_TRUE(cache);
  Put(*cache, Identity(4), 0, 4096);
  EXPECT_EQ(cache->counters().evictions, 1u);
  EXPECT_FALSE(Exists(EntryPath(dir.path(), Identity(1), 0)));
  for (int i : {0, 2, 3, 4}) EXPECT_TRUE(GetMatches(*cache, Identity(i), 0, 4096)) << i;
}

TEST(DiskCacheTest, HitsRecordRecencyOnANoatimeMount) {
  // The kernel moves access times by itself on relatime mounts, which would hide a cache
  // that never records its hits; on a noatime mount only the cache's own update counts.
  TempDir dir;
  const uint64_t entry = FileBytes(Identity(0), 4096);
  const uint64_t capacity = 4 * entry + 100;
  const int status = RunInChild([&]() -> int {
    if (!PrivateMounts() ||
        mount(dir.path().c_str(), dir.path().c_str(), nullptr, MS_BIND, nullptr) != 0 ||
        mount(nullptr, dir.path().c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_NOATIME, nullptr) !=
            0) {
      return kChildSkip;
    }
    auto cache = DiskCache::Open(dir.path(), capacity);
    if (!cache.ok()) return 1;
    for (int i = 0; i < 4; ++i) Put(**cache, Identity(i), 0, 4096);
    for (int i = 0; i < 4; ++i) {
      struct timespec times[2];
      clock_gettime(CLOCK_REALTIME, &times[0]);
      times[0].tv_sec -= (4 - i) * 3600;
      times[1] = times[0];
      const std::string path = EntryPath(dir.path(), Identity(i), 0);
      if (utimensat(AT_FDCWD, path.c_str(), times, 0) != 0) return 2;
    }
    std::vector<uint8_t> out(4096);
    if (!(*cache)->Get(Identity(0), 0, out)) return 3;
    Put(**cache, Identity(4), 0, 4096);
    if (!Exists(EntryPath(dir.path(), Identity(0), 0))) return 4;  // the hit was not recorded
    if (Exists(EntryPath(dir.path(), Identity(1), 0))) return 5;
    return 0;
  });
  if (status == kChildSkip) GTEST_SKIP() << "no private mount namespace here (needs root)";
  EXPECT_EQ(status, 0);
}

TEST(DiskCacheTest, LowerCapacityOnReopenTrims) {
  TempDir dir;
  const uint64_t entry = FileBytes(Identity(0), 4096);
  {
    auto cache = OpenOrDie(dir.path(), 100 * entry);
    ASSERT_TRUE(cache);
    for (int i = 0; i < 10; ++i) Put(*cache, Identity(i), 0, 4096);
  }
  for (int i = 0; i < 10; ++i) SetAge(EntryPath(dir.path(), Identity(i), 0), (10 - i) * 60 + 60);
  const uint64_t capacity = 4 * entry + 100;
  auto cache = OpenOrDie(dir.path(), capacity);
  ASSERT_TRUE(cache);
  EXPECT_LE(DiskUsage(dir.path()), capacity);
  EXPECT_EQ(cache->counters().bytes_used, DiskUsage(dir.path()));
  EXPECT_EQ(cache->counters().evictions, 7u);  // down to 90%: three entries
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(Exists(EntryPath(dir.path(), Identity(i), 0)), i >= 7) << i;
  }
}

TEST(DiskCacheTest, HugeCapacityIsNoOverflow) {
  TempDir dir;
  auto cache = OpenOrDie(dir.path(), UINT64_MAX);
  ASSERT_TRUE(cache);
  for (uint64_t b = 0; b < 3; ++b) Put(*cache, Identity(0), b, 1000);
  for (uint64_t b = 0; b < 3; ++b) EXPECT_TRUE(GetMatches(*cache, Identity(0), b, 1000));
  EXPECT_EQ(cache->counters().bytes_used, 3 * FileBytes(Identity(0), 1000));
  EXPECT_EQ(cache->capacity(), uint64_t{1} << 60);
}

TEST(DiskCacheTest, ZeroCapacityStoresNothing) {
  TempDir dir;
  auto cache = OpenOrDie(dir.path(), 0);
  ASSERT_TRUE(cache);
  Put(*cache, Identity(0), 0, 10);
  std::vector<uint8_t> out(10);
  EXPECT_FALSE(cache->Get(Identity(0), 0, out));
  EXPECT_EQ(DiskUsage(dir.path()), 0u);
  EXPECT_EQ(cache->counters().write_errors, 0u);
}

TEST(DiskCacheTest, UnwritableSubdirectoriesCountErrorsAndWarnOnce) {
  TempDir dir;
  WarnLog warns;
  auto cache = OpenOrDie(dir.path(), 1 << 20, warns.Fn());
  ASSERT_TRUE(cache);
  // Every subdirectory replaced by a file under a running mount: no Put can succeed.
  for (char h : std::string("0123456789abcdef")) {
    const std::string sub = dir.Sub(std::string(1, h));
    fs::remove_all(sub);
    std::ofstream(sub) << "x";
  }
  for (int i = 0; i < 50; ++i) Put(*cache, Identity(i), 0, 1000);
  std::vector<uint8_t> out(1000);
  EXPECT_FALSE(cache->Get(Identity(0), 0, out));
  EXPECT_EQ(cache->counters().write_errors, 50u);
  EXPECT_EQ(cache->counters().bytes_used, 0u);
  ASSERT_EQ(warns.size(), 1u);
  EXPECT_NE(warns.lines[0].find(dir.path()), std::string::npos) << warns.lines[0];
  EXPECT_NE(warns.lines[0].find("cannot write"), std::string::npos) << warns.lines[0];
}

TEST(DiskCacheTest, ReadOnlyDirectoryIsRefusedAtOpen) {
  TempDir dir;
  { ASSERT_TRUE(OpenOrDie(dir.path(), 1 << 20)); }  // existing cache, lock file and all
  // Root ignores permission bits: make it read-only with a bind mount in a private
  // mount namespace of a child process.
  const int status = RunInChild([&]() -> int {
    if (!PrivateMounts() ||
        mount(dir.path().c_str(), dir.path().c_str(), nullptr, MS_BIND, nullptr) != 0 ||
        mount(nullptr, dir.path().c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) !=
            0) {
      return kChildSkip;
    }
    auto cache = DiskCache::Open(dir.path(), 1 << 20);
    if (cache.ok()) return 1;
    const std::string& msg = cache.status().message();
    if (msg.find(dir.path() + ":") == std::string::npos ||
        msg.find("not writable") == std::string::npos) {
      std::fprintf(stderr, "unexpected message: %s\n", msg.c_str());
      return 2;
    }
    return 0;
  });
  if (status == kChildSkip) GTEST_SKIP() << "no private mount namespace here (needs root)";
  EXPECT_EQ(status, 0);
}

TEST(DiskCacheTest, FullDiskCountsErrorsWarnsOnceAndLeavesNoDebris) {
  TempDir dir;
  const int status = RunInChild([&]() -> int {
    if (!PrivateMounts() ||
        mount("tmpfs", dir.path().c_str(), "tmpfs", 0, "size=256k,mode=0700") != 0) {
      return kChildSkip;
    }
    int warn_count = 0;
    auto cache = DiskCache::Open(dir.path(), 64 << 20, [&](const std::string&) { ++warn_count; });
    if (!cache.ok()) return 1;
    for (int i = 0; i < 20; ++i) Put(**cache, Identity(i), 0, 64 << 10);
    const DiskCache::Counters c = (*cache)->counters();
    if (c.write_errors == 0 || c.write_errors == 20) return 2;
    if (warn_count != 1) return 3;
    // What was written reads back; what failed left no temporary file and is a miss.
    int hits = 0;
    for (int i = 0; i < 20; ++i) {
      std::vector<uint8_t> out(64 << 10);
      if ((*cache)->Get(Identity(i), 0, out)) {
        if (out != Pattern(Identity(i), 0, 64 << 10)) return 4;
        ++hits;
      }
    }
    if (static_cast<uint64_t>(hits) + c.write_errors != 20) return 5;
    for (const auto& sub : fs::directory_iterator(dir.path())) {
      if (!sub.is_directory()) continue;
      for (const std::string& name : FilesIn(sub.path())) {
        if (name.rfind(".tmp-", 0) == 0) return 6;
      }
    }
    if ((*cache)->counters().bytes_used != DiskUsage(dir.path())) return 7;
    return 0;
  });
  if (status == kChildSkip) GTEST_SKIP() << "no private mount namespace here (needs root)";
  EXPECT_EQ(status, 0);
}

// Several threads per cache, reading and writing shared and own keys, with a capacity
// small enough that evictions run all the time.
struct Workload {
  static constexpr int kSharedKeys = 40;
  static constexpr size_t kMaxSize = 5000;
  static size_t Size(int key) { return 1000 + static_cast<size_t>(key) * 7919 % (kMaxSize - 1000); }
  static uint64_t MaxEntry() { return FileBytes(Identity(0), kMaxSize); }
  static uint64_t TotalBytes() {
    uint64_t total = 0;
    for (int k = 0; k < kSharedKeys; ++k) total += 2 * FileBytes(Identity(k), Size(k));
    return total;
  }
  // What the contract allows: the slack per process, and the blocks the other processes
  // are writing when one of them evicts.
  static uint64_t Bound(uint64_t capacity, int processes, int threads_per_process) {
    return capacity + processes * (capacity / 16) +
           static_cast<uint64_t>((processes - 1) * threads_per_process) * MaxEntry();
  }

  // Runs `threads` threads over `cache`; `id` tells callers' private keys apart. Returns
  // the number of hits with wrong bytes.
  static int Run(DiskCache& cache, int id, int threads, int ops) {
    std::atomic<int> wrong{0};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        uint32_t x = static_cast<uint32_t>(id * 131 + t * 7 + 1);
        for (int op = 0; op < ops; ++op) {
          x = x * 1103515245u + 12345u;
          const bool own = (x >> 20) % 4 == 0;
          const int key = own ? 1000 + id * 100 + t * 10 + static_cast<int>((x >> 8) % 8)
                              : static_cast<int>((x >> 8) % kSharedKeys);
          const std::string obj = Identity(key);
          const uint64_t block = (x >> 4) % 2;
          const size_t size = Size(key % 1000);
          std::vector<uint8_t> out(size);
          if (cache.Get(obj, block, out)) {
            if (out != Pattern(obj, block, size)) wrong.fetch_add(1);
          } else {
            const std::vector<uint8_t> bytes = Pattern(obj, block, size);
            cache.Put(obj, block, bytes);
          }
        }
      });
    }
    for (auto& w : workers) w.join();
    return wrong.load();
  }
};

TEST(DiskCacheConcurrencyTest, ManyThreadsOneInstance) {
  TempDir dir;
  const uint64_t capacity = Workload::TotalBytes() / 3;
  auto cache = OpenOrDie(dir.path(), capacity);
  ASSERT_TRUE(cache);
  EXPECT_EQ(Workload::Run(*cache, 1, 4, 500), 0);
  const DiskCache::Counters c = cache->counters();
  EXPECT_EQ(c.corrupt, 0u);  // concurrent publish and eviction never look like damage
  EXPECT_EQ(c.write_errors, 0u);
  EXPECT_GT(c.hits, 0u);
  EXPECT_GT(c.evictions, 0u);
  // Alone, the cache stays within capacity + slack, and its estimate never falls short.
  EXPECT_LE(DiskUsage(dir.path()), Workload::Bound(capacity, 1, 4));
  EXPECT_GE(c.bytes_used, DiskUsage(dir.path()));
}

TEST(DiskCacheConcurrencyTest, TwoInstancesOnOneDirectory) {
  TempDir dir;
  const uint64_t capacity = Workload::TotalBytes() / 3;
  auto a = OpenOrDie(dir.path(), capacity);
  auto b = OpenOrDie(dir.path(), capacity);
  ASSERT_TRUE(a && b);
  int wrong_a = 0, wrong_b = 0;
  std::thread ta([&] { wrong_a = Workload::Run(*a, 1, 3, 400); });
  std::thread tb([&] { wrong_b = Workload::Run(*b, 2, 3, 400); });
  ta.join();
  tb.join();
  EXPECT_EQ(wrong_a + wrong_b, 0);
  for (DiskCache* c : {a.get(), b.get()}) {
    const DiskCache::Counters k = c->counters();
    EXPECT_EQ(k.corrupt, 0u);
    EXPECT_EQ(k.write_errors, 0u);
    EXPECT_GT(k.hits, 0u);
    EXPECT_GT(k.bytes_written, 0u);  // neither starves the other
  }
  EXPECT_GT(a->counters().evictions + b->counters().evictions, 0u);
  EXPECT_LE(DiskUsage(dir.path()), Workload::Bound(capacity, 2, 3));
  a.reset();
  b.reset();
  auto c = OpenOrDie(dir.path(), capacity);
  EXPECT_LE(DiskUsage(dir.path()), capacity);
}

TEST(DiskCacheProcessTest, TwoProcessesShareOneDirectory) {
  TempDir dir;
  const uint64_t capacity = Workload::TotalBytes() / 3;
  { ASSERT_TRUE(OpenOrDie(dir.path(), capacity)); }
  const pid_t pid = fork();
  if (pid == 0) {
    auto cache = DiskCache::Open(dir.path(), capacity);
    if (!cache.ok()) _exit(1);
    const int wrong = Workload::Run(**cache, 2, 2, 600);
    const DiskCache::Counters c = (*cache)->counters();
    _exit(wrong != 0 ? 2 : c.corrupt != 0 ? 3 : c.hits == 0 ? 4 : 0);
  }
  ASSERT_GT(pid, 0);
  auto cache = OpenOrDie(dir.path(), capacity);
  ASSERT_TRUE(cache);
  EXPECT_EQ(Workload::Run(*cache, 1, 2, 600), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: open failed, 2: wrong bytes, 3: corrupt, 4: no hits";
  EXPECT_EQ(cache->counters().corrupt, 0u);
  EXPECT_GT(cache->counters().hits, 0u);
  EXPECT_LE(DiskUsage(dir.path()), Workload::Bound(capacity, 2, 2));
}

// ---------------------------------------------------------------------------
// Trusted writers only: a directory others could write to is refused unless shared, and an
// entry another user wrote is never served.

constexpr uid_t kNobody = 65534;

// Tests that chown to another user need root (the mount tests' user on these machines).
#define SKIP_UNLESS_ROOT() \
  if (geteuid() != 0) GTEST_SKIP() << "chown to another user needs root"

TEST(DiskCacheTrustTest, RefusesADirectoryWritableByOthers) {
  for (const mode_t mode : {0777, 01777, 0770, 0720}) {
    SCOPED_TRACE(mode);
    TempDir dir;
    const std::string path = dir.Sub("cache");
    ASSERT_EQ(mkdir(path.c_str(), 0700), 0);
    ASSERT_EQ(chmod(path.c_str(), mode), 0);
    auto cache = DiskCache::Open(path, 1 << 20);
    ASSERT_FALSE(cache.ok()) << "a directory of mode " << std::oct << mode << " was accepted";
    EXPECT_NE(cache.status().message().find(path), std::string::npos);
    EXPECT_NE(cache.status().message().find("--cache-dir-shared"), std::string::npos);
    EXPECT_EQ(cache.status().message().find('\n'), std::string::npos);
    EXPECT_FALSE(DiskCache::CheckDirectory(path, DiskCache::Sharing::kPrivate).ok());
    // Nothing was written into a refused directory.
    EXPECT_TRUE(fs::is_empty(path));
    // Shared on purpose: accepted, and new subdirectories let the group write.
    auto shared = DiskCache::Open(path, 1 << 20, {}, DiskCache::Sharing::kShared);
    ASSERT_TRUE(shared.ok()) << shared.status().message();
    struct stat st;
    ASSERT_EQ(stat((path + "/a").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0770u);
  }
}

TEST(DiskCacheTrustTest, RefusesADirectoryOfAnotherUser) {
  SKIP_UNLESS_ROOT();
  TempDir dir;
  const std::string path = dir.Sub("cache");
  ASSERT_EQ(mkdir(path.c_str(), 0700), 0);
  ASSERT_EQ(chown(path.c_str(), kNobody, kNobody), 0);
  auto cache = DiskCache::Open(path, 1 << 20);
  ASSERT_FALSE(cache.ok()) << "a directory owned by nobody was accepted";
  EXPECT_NE(cache.status().message().find("another user"), std::string::npos)
      << cache.status().message();
  EXPECT_FALSE(DiskCache::CheckDirectory(path, DiskCache::Sharing::kPrivate).ok());
  EXPECT_TRUE(DiskCache::CheckDirectory(path, DiskCache::Sharing::kShared).ok());
  // A directory that does not exist yet is created private, so it passes the check.
  EXPECT_TRUE(DiskCache::CheckDirectory(dir.Sub("new"), DiskCache::Sharing::kPrivate).ok());
}

// An entry valid in every byte but written by another user (copied from a real one and
// chowned, as a planter with write access to a shared directory would) is a miss, dropped
// and reported; the block is then stored again by this user and served.
TEST(DiskCacheTrustTest, EntryOfAnotherUserIsNeverServed) {
  SKIP_UNLESS_ROOT();
  for (const auto sharing : {DiskCache::Sharing::kPrivate, DiskCache::Sharing::kShared}) {
    TempDir dir;
    WarnLog warnings;
    auto cache = DiskCache::Open(dir.path(), 1 << 20, warnings.Fn(), sharing);
    ASSERT_TRUE(cache.ok()) << cache.status().message();
    const std::string obj = Identity(3);
    Put(**cache, obj, 1, 4096);
    const std::string entry = EntryPath(dir.path(), obj, 1);
    ASSERT_EQ(chown(entry.c_str(), kNobody, kNobody), 0);
    EXPECT_FALSE(GetMatches(**cache, obj, 1, 4096)) << "an entry owned by nobody was served";
    EXPECT_EQ((*cache)->counters().corrupt, 1u);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings.lines[0].find("another user"), std::string::npos) << warnings.lines[0];
    EXPECT_FALSE(Exists(entry)) << "the foreign entry should have been removed";
    Put(**cache, obj, 1, 4096);
    EXPECT_TRUE(GetMatches(**cache, obj, 1, 4096));
  }
}

}  // namespace
}  // namespace ckptfs
