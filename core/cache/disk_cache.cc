#include "core/cache/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

namespace ckptfs {
namespace {

constexpr char kMagic[8] = {'C', 'K', 'P', 'T', 'F', 'S', 'd', 'c'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kHeaderBytes = 64;
constexpr char kSubdirs[] = "0123456789abcdef";
constexpr char kTempPrefix[] = ".tmp-";
constexpr char kLockName[] = "lock";
constexpr int64_t kSecondNs = 1000000000;
// A writer needs milliseconds for an entry; a temporary file this old lost its writer.
constexpr int64_t kStaleTempNs = 600 * kSecondNs;
// Recency finer than this does not matter for eviction, and skipping the update spares an
// inode write on every hit of a hot block.
constexpr int64_t kTouchIntervalNs = 60 * kSecondNs;
constexpr int64_t kWriteWarningIntervalNs = 600 * kSecondNs;
constexpr int kMaxCorruptWarnings = 10;

constexpr char kCacheDirTag[] =
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by ckptfs (--cache-dir).\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n";

void PutLe32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void PutLe64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t GetLe32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t GetLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

int64_t ToNs(const struct timespec& t) { return int64_t{t.tv_sec} * kSecondNs + t.tv_nsec; }

int64_t NowNs() {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return ToNs(t);
}

class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() {
    if (fd_ >= 0) close(fd_);
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_;
};

bool IsHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

bool IsEntryName(const char* name) {
  for (int i = 0; i < 32; ++i) {
    if (!IsHex(name[i])) return false;
  }
  return name[32] == '\0';
}

// preadv/pwritev until `total` bytes moved: regular files rarely return short counts, but
// a signal or a nearly full disk may, and a short write must not be mistaken for success.
template <typename Op>
bool TransferFull(Op op, std::vector<struct iovec> iov, size_t total) {
  size_t done = 0;
  size_t first = 0;
  while (done < total) {
    ssize_t n =
        op(iov.data() + first, static_cast<int>(iov.size() - first), static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) {
      errno = 0;  // end of file: the caller reports the short count
      return false;
    }
    done += static_cast<size_t>(n);
    for (size_t left = static_cast<size_t>(n); left > 0 && first < iov.size();) {
      const size_t step = std::min(left, iov[first].iov_len);
      iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + step;
      iov[first].iov_len -= step;
      left -= step;
      if (iov[first].iov_len == 0) ++first;
    }
  }
  return true;
}

// mkdir -p, new directories private to the user: cached bytes may be anyone's weights.
Status MakeDirs(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos < dir.size() && dir[pos] != '/') continue;
    const std::string prefix = dir.substr(0, pos);
    if (mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      const int err = errno;
      return Status::IoError(dir + ": cannot create the cache directory: " + std::strerror(err),
                             err);
    }
  }
  return Status::Ok();
}

// Whether another user could have written into the directory `st` describes. Root is
// trusted: it can write anywhere anyway.
Status CheckOwnership(const std::string& dir, const struct stat& st, DiskCache::Sharing sharing) {
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(dir + ": the cache directory is not a directory");
  }
  if (sharing == DiskCache::Sharing::kShared) return Status::Ok();
  constexpr char kHint[] =
      "; another user could plant cache entries there (use a directory of your own, or "
      "--cache-dir-shared for a group's cache)";
  if (st.st_uid != geteuid() && st.st_uid != 0) {
    return Status::InvalidArgument(dir + ": the cache directory belongs to another user (uid " +
                                   std::to_string(st.st_uid) + ")" + kHint);
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::InvalidArgument(dir + ": the cache directory is writable by " +
                                   ((st.st_mode & S_IWOTH) != 0 ? "others" : "its group") +
                                   " (mode " + mode + ")" + kHint);
  }
  return Status::Ok();
}

// A name of `sub` that is the cache's to remove: an entry, or a temporary file older than
// kStaleTempNs (a younger one may be another process's write in progress).
enum class Kind { kOther, kEntry, kTemp };
Kind KindOf(const char* name) {
  if (IsEntryName(name)) return Kind::kEntry;
  if (std::strncmp(name, kTempPrefix, sizeof(kTempPrefix) - 1) == 0) return Kind::kTemp;
  return Kind::kOther;
}

}  // namespace

struct DiskCache::Name {
  char sub[2] = {0, 0};  // the subdirectory: first hex digit of the key
  char hex[33] = {};     // the entry's file name
  XXH128_hash_t key{};

  static Name For(std::string_view object, uint64_t block) {
    // identity || block: the block is the fixed-size tail, so the encoding is unambiguous.
    std::string input(object);
    uint8_t le[8];
    PutLe64(le, block);
    input.append(reinterpret_cast<const char*>(le), sizeof(le));
    Name name;
    name.key = XXH3_128bits(input.data(), input.size());
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, name.key);
    for (int i = 0; i < 16; ++i) {
      std::snprintf(name.hex + 2 * i, 3, "%02x", canonical.digest[i]);
    }
    name.sub[0] = name.hex[0];
    return name;
  }
  static Name FromHex(const char* hex) {
    Name name;
    std::memcpy(name.hex, hex, 32);
    name.sub[0] = hex[0];
    return name;
  }
};

struct DiskCache::ScanEntry {
  int64_t atime_ns;
  uint64_t size;
  uint64_t ino;
  char hex[32];
};

DiskCache::DiskCache(std::string dir, int dir_fd, int lock_fd, uint64_t capacity,
                     std::function<void(const std::string&)> warn, Sharing sharing)
    : dir_(std::move(dir)),
      dir_fd_(dir_fd),
      lock_fd_(lock_fd),
      // Far beyond any disk, and small enough that the signed arithmetic of the estimate
      // cannot overflow: "unbounded" callers may pass UINT64_MAX.
      capacity_(std::min<uint64_t>(capacity, uint64_t{1} << 60)),
      slack_(capacity_ / 16),
      warn_(std::move(warn)),
      sharing_(sharing) {}

DiskCache::~DiskCache() {
  close(lock_fd_);
  close(dir_fd_);
}

Status DiskCache::CheckDirectory(const std::string& dir, Sharing sharing) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return Status::Ok();  // Open creates it, or says why not
  return CheckOwnership(dir, st, sharing);
}

Result<std::unique_ptr<DiskCache>> DiskCache::Open(const std::string& dir, uint64_t capacity_bytes,
                                                   std::function<void(const std::string&)> warn,
                                                   Sharing sharing) {
  if (dir.empty()) return Status::InvalidArgument("cache directory: empty path");
  CKPTFS_RETURN_IF_ERROR(MakeDirs(dir));
  const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    const int err = errno;
    return Status::IoError(dir + ": cannot open the cache directory: " + std::strerror(err), err);
  }
  // Judged through the descriptor every later access goes through: a rename of the path
  // after this check cannot swap in another directory.
  struct stat dir_st;
  if (fstat(dir_fd, &dir_st) != 0) {
    const int err = errno;
    close(dir_fd);
    return Status::IoError(dir + ": cannot stat the cache directory: " + std::strerror(err), err);
  }
  if (Status s = CheckOwnership(dir, dir_st, sharing); !s.ok()) {
    close(dir_fd);
    return s;
  }
  int lock_fd = openat(dir_fd, kLockName, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (lock_fd < 0 && errno == EACCES) {
    // Another user's lock in a shared directory: flock(2) needs only a readable file.
    lock_fd = openat(dir_fd, kLockName, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  }
  if (lock_fd < 0) {
    const int err = errno;
    close(dir_fd);
    return Status::IoError(dir + ": the cache directory is not writable (" + kLockName + ": " +
                               std::strerror(err) + ")",
                           err);
  }
  // From here the cache owns both descriptors.
  std::unique_ptr<DiskCache> cache(
      new DiskCache(dir, dir_fd, lock_fd, capacity_bytes, std::move(warn), sharing));
  if (getrandom(&cache->nonce_, sizeof(cache->nonce_), 0) != sizeof(cache->nonce_)) {
    // Only uniqueness matters (O_EXCL catches the rest): pid and time will do.
    cache->nonce_ = (static_cast<uint64_t>(getpid()) << 32) ^ static_cast<uint64_t>(NowNs());
  }

  // Subdirectories up front, so that a name planted where one belongs is refused now, in
  // one clear line, rather than failing every Put of a sixteenth of the keys.
  for (const char* h = kSubdirs; *h != '\0'; ++h) {
    const char sub[2] = {*h, '\0'};
    if (mkdirat(dir_fd, sub, 0700) == 0) {
      cache->ShareSubdir(sub);
    } else if (errno != EEXIST) {
      const int err = errno;
      return Status::IoError(dir + "/" + sub + ": cannot create: " + std::strerror(err), err);
    }
    struct stat st;
    if (fstatat(dir_fd, sub, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) {
      return Status::IoError(dir + "/" + sub +
                                 ": is not a directory (the cache directory holds foreign files; "
                                 "choose an empty one)",
                             ENOTDIR);
    }
  }
  // The lock file may survive from a time the directory was writable: prove a write.
  {
    const UniqueFd sub(cache->OpenSubdir('0', /*create=*/false));
    char probe[64];
    std::snprintf(probe, sizeof(probe), "%s%016" PRIx64 "-probe", kTempPrefix, cache->nonce_);
    const int fd =
        sub ? openat(sub.get(), probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
    if (fd < 0) {
      const int err = errno;
      return Status::IoError(
          dir + ": the cache directory is not writable (" + std::strerror(err) + ")", err);
    }
    close(fd);
    unlinkat(sub.get(), probe, 0);
  }
  const int tag = openat(dir_fd, "CACHEDIR.TAG", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (tag >= 0) {
    // Best effort: the tag only tells backup tools to skip the directory.
    [[maybe_unused]] ssize_t n = write(tag, kCacheDirTag, sizeof(kCacheDirTag) - 1);
    close(tag);
  }

  // Learn the size of what is there, and trim it if the capacity was lowered.
  {
    std::lock_guard<std::mutex> lock(cache->evict_mu_);
    const bool locked = flock(lock_fd, LOCK_EX) == 0;
    cache->ScanAndEvict(cache->capacity_, cache->capacity_ / 10 * 9);
    if (locked) flock(lock_fd, LOCK_UN);
  }
  return cache;
}

void DiskCache::ShareSubdir(const char* name) const {
  if (sharing_ != Sharing::kShared) return;
  // Explicit, not left to the umask: the other writers of a shared directory are its
  // group. Keeps set-group-ID, which new subdirectories inherit from a group's directory.
  struct stat st;
  if (fstatat(dir_fd_, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) return;
  fchmodat(dir_fd_, name, 0770 | (st.st_mode & S_ISGID), 0);
}

int DiskCache::OpenSubdir(char hex, bool create) const {
  const char name[2] = {hex, '\0'};
  // O_NOFOLLOW: a symlink planted in place of a subdirectory must not lead writes out.
  int fd = openat(dir_fd_, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && create) {
    // Someone emptied the directory under a running mount: start again.
    if (mkdirat(dir_fd_, name, 0700) == 0) {
      ShareSubdir(name);
    } else if (errno != EEXIST) {
      return -1;
    }
    fd = openat(dir_fd_, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }
  return fd;
}

bool DiskCache::Get(std::string_view object, uint64_t block, std::span<uint8_t> out) {
  auto miss = [this] {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return false;
  };
  if (object.size() > kMaxIdentityBytes) return miss();
  const Name name = Name::For(object, block);
  const UniqueFd sub(OpenSubdir(name.sub[0], /*create=*/false));
  if (!sub) return miss();
  // O_NONBLOCK: opening a FIFO planted under an entry's name must not hang the reader.
  const UniqueFd fd(openat(sub.get(), name.hex, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) {
    if (errno == ELOOP) Drop(sub.get(), name, nullptr, "is a symbolic link");
    return miss();
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return miss();
  if (!S_ISREG(st.st_mode)) {
    Drop(sub.get(), name, &st, "is not a regular file");
    return miss();
  }
  const uint64_t file_bytes = kHeaderBytes + object.size() + out.size();
  auto drop_entry = [&](const std::string& why) {
    Drop(sub.get(), name, &st, why);
    used_.fetch_sub(st.st_size, std::memory_order_relaxed);
    return miss();
  };
  // A valid header proves nothing about who wrote the bytes: in a shared directory anyone
  // with write access can plant a well-formed entry holding other weights.
  if (st.st_uid != geteuid() && st.st_uid != 0) {
    return drop_entry("belongs to another user (uid " + std::to_string(st.st_uid) +
                      "), not this one or root");
  }
  if (static_cast<uint64_t>(st.st_size) != file_bytes) {
    // Truncated, or written for another length: either way not this block.
    return drop_entry("holds " + std::to_string(st.st_size) + " bytes, expected " +
                      std::to_string(file_bytes));
  }

  std::vector<uint8_t> header(kHeaderBytes + object.size());
  const bool read_ok =
      TransferFull([&](const struct iovec* iov, int count,
                       off_t offset) { return preadv(fd.get(), iov, count, offset); },
                   {{header.data(), header.size()}, {out.data(), out.size()}}, file_bytes);
  if (!read_ok) {
    // errno 0: the file shrank since fstat (it is not ours to judge: it was replaced or
    // is being damaged); an I/O error: the disk's problem, the entry may be fine.
    return errno == 0 ? drop_entry("was truncated while read") : miss();
  }

  const uint8_t* h = header.data();
  std::string why;
  if (std::memcmp(h, kMagic, sizeof(kMagic)) != 0) {
    why = "has no ckptfs cache header";
  } else if (GetLe32(h + 8) != kFormatVersion) {
    why = "has format version " + std::to_string(GetLe32(h + 8)) + ", expected " +
          std::to_string(kFormatVersion);
  } else if (GetLe32(h + 12) != object.size() || GetLe64(h + 16) != name.key.low64 ||
             GetLe64(h + 24) != name.key.high64 || GetLe64(h + 32) != block ||
             std::memcmp(h + kHeaderBytes, object.data(), object.size()) != 0) {
    why = "belongs to another object or block";
  } else if (GetLe64(h + 40) != out.size() || GetLe64(h + 56) != 0) {
    why = "has a damaged header";
  } else if (GetLe64(h + 48) != XXH3_64bits(out.data(), out.size())) {
    why = "fails its checksum";
  }
  if (!why.empty()) return drop_entry(why);

  if (NowNs() - ToNs(st.st_atim) > kTouchIntervalNs) {
    // The access time is the recency every process sharing the directory evicts by. Set
    // explicitly: noatime mounts would never move it, relatime only sometimes.
    const struct timespec times[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
    futimens(fd.get(), times);
  }
  hits_.fetch_add(1, std::memory_order_relaxed);
  bytes_read_.fetch_add(out.size(), std::memory_order_relaxed);
  return true;
}

void DiskCache::Put(std::string_view object, uint64_t block, std::span<const uint8_t> bytes) {
  if (object.size() > kMaxIdentityBytes) return;
  const uint64_t file_bytes = kHeaderBytes + object.size() + bytes.size();
  if (file_bytes > capacity_) return;
  // Evict before writing, so that a single writer never passes the capacity; rescan now
  // and then even when this process's estimate says there is room, since other processes
  // sharing the directory write too.
  if (used_.load(std::memory_order_relaxed) + static_cast<int64_t>(file_bytes) >
          static_cast<int64_t>(capacity_) ||
      written_since_scan_.load(std::memory_order_relaxed) > slack_) {
    TryEvict(file_bytes);
  }
  // Reserve the bytes: threads writing while another evicts may pass the capacity only
  // by the slack; beyond it a block is dropped rather than made to wait. in_flight_ moves
  // first, so that a scan reading used_ then in_flight_ counts this write at least once
  // (see ScanAndEvict).
  const auto delta = static_cast<int64_t>(file_bytes);
  in_flight_.fetch_add(delta);
  int64_t used = used_.load();
  do {
    if (used + delta > static_cast<int64_t>(capacity_ + slack_)) {
      in_flight_.fetch_sub(delta);
      return;
    }
  } while (!used_.compare_exchange_weak(used, used + delta));

  const Name name = Name::For(object, block);
  const UniqueFd sub(OpenSubdir(name.sub[0], /*create=*/true));
  if (!sub) {
    WriteFailed(dir_ + "/" + name.sub, errno);
  } else if (WriteEntry(sub.get(), name, object, block, bytes)) {
    in_flight_.fetch_sub(delta);  // published: a scan sees the file from now on
    bytes_written_.fetch_add(bytes.size(), std::memory_order_relaxed);
    written_since_scan_.fetch_add(file_bytes, std::memory_order_relaxed);
    return;
  }
  in_flight_.fetch_sub(delta);
  used_.fetch_sub(delta);
}

bool DiskCache::WriteEntry(int sub, const Name& name, std::string_view object, uint64_t block,
                           std::span<const uint8_t> bytes) {
  std::vector<uint8_t> header(kHeaderBytes + object.size(), 0);
  uint8_t* h = header.data();
  std::memcpy(h, kMagic, sizeof(kMagic));
  PutLe32(h + 8, kFormatVersion);
  PutLe32(h + 12, static_cast<uint32_t>(object.size()));
  PutLe64(h + 16, name.key.low64);
  PutLe64(h + 24, name.key.high64);
  PutLe64(h + 32, block);
  PutLe64(h + 40, bytes.size());
  PutLe64(h + 48, XXH3_64bits(bytes.data(), bytes.size()));
  std::memcpy(h + kHeaderBytes, object.data(), object.size());

  // Written under a name no other writer uses, then renamed over the entry's name: a
  // reader, here or in another mount, opens either the old file or the whole new one.
  char temp[64];
  std::snprintf(temp, sizeof(temp), "%s%016" PRIx64 "-%" PRIu64, kTempPrefix, nonce_,
                next_temp_.fetch_add(1, std::memory_order_relaxed));
  const std::string where = dir_ + "/" + name.sub + "/" + temp;
  const int fd = openat(sub, temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    WriteFailed(where, errno);
    return false;
  }
  bool ok = TransferFull([&](const struct iovec* iov, int count,
                             off_t offset) { return pwritev(fd, iov, count, offset); },
                         {{h, header.size()}, {const_cast<uint8_t*>(bytes.data()), bytes.size()}},
                         header.size() + bytes.size());
  int err = errno == 0 ? ENOSPC : errno;  // a write of 0 bytes: the disk is full
  if (close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && renameat(sub, temp, sub, name.hex) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    unlinkat(sub, temp, 0);
    WriteFailed(where, err);
  }
  return ok;
}

void DiskCache::TryEvict(uint64_t file_bytes) {
  std::unique_lock<std::mutex> lock(evict_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;  // another thread is at it; the slack covers the wait
  // Another process evicting: wait for it (one scan), then scan anyway, since its view of
  // this process's writes was as stale as this one's of its. Not waiting starves the
  // process that loses the race for the lock: its estimate never comes down. Where flock
  // does not work (some network filesystems) evictors may overlap and evict a little
  // too much, which is harmless.
  int rc;
  while ((rc = flock(lock_fd_, LOCK_EX)) != 0 && errno == EINTR) {
  }
  const uint64_t room = capacity_ - file_bytes;  // Put checked file_bytes <= capacity_
  ScanAndEvict(room, std::min(room, capacity_ / 10 * 9));
  if (rc == 0) flock(lock_fd_, LOCK_UN);
}

void DiskCache::ScanAndEvict(uint64_t trigger, uint64_t target) {
  // The estimate moves on while the scan runs (other threads' Puts and drops); what the
  // scan finds replaces only the published part of what the estimate held when it began.
  // This instance's writes in progress are not in the scan (its own temporary files are
  // skipped) but in in_flight_. Reading used_ before in_flight_, in the opposite order
  // of Put's updates, errs towards counting a write twice until the next scan, never
  // towards losing it.
  const int64_t used_before = used_.load();
  const int64_t in_flight_before = in_flight_.load();
  written_since_scan_.store(0, std::memory_order_relaxed);
  const int64_t now = NowNs();
  char own_temp[64];
  const int own_temp_len =
      std::snprintf(own_temp, sizeof(own_temp), "%s%016" PRIx64 "-", kTempPrefix, nonce_);

  std::vector<ScanEntry> entries;
  uint64_t total = 0;
  std::vector<std::unique_ptr<UniqueFd>> subs;
  for (const char* h = kSubdirs; *h != '\0'; ++h) {
    subs.push_back(std::make_unique<UniqueFd>(OpenSubdir(*h, /*create=*/false)));
    const int sub = subs.back()->get();
    if (sub < 0) continue;
    const int list_fd = dup(sub);
    DIR* d = list_fd >= 0 ? fdopendir(list_fd) : nullptr;
    if (d == nullptr) {
      if (list_fd >= 0) close(list_fd);
      continue;
    }
    while (const struct dirent* de = readdir(d)) {
      const Kind kind = KindOf(de->d_name);
      if (kind == Kind::kOther) continue;
      struct stat st;
      // Names vanish under a scan whenever another process evicts: not an error.
      if (fstatat(sub, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (kind == Kind::kTemp) {
        if (std::strncmp(de->d_name, own_temp, static_cast<size_t>(own_temp_len)) == 0) {
          continue;  // in in_flight_
        }
        if (S_ISREG(st.st_mode) && now - ToNs(st.st_mtim) > kStaleTempNs) {
          unlinkat(sub, de->d_name, 0);  // left by a writer that crashed
        } else if (S_ISREG(st.st_mode)) {
          total += static_cast<uint64_t>(st.st_size);  // another writer's, in progress
        }
        continue;
      }
      if (!S_ISREG(st.st_mode)) {
        Drop(sub, Name::FromHex(de->d_name), &st, "is not a regular file");
        continue;
      }
      ScanEntry e{ToNs(st.st_atim), static_cast<uint64_t>(st.st_size), st.st_ino, {}};
      std::memcpy(e.hex, de->d_name, sizeof(e.hex));
      entries.push_back(e);
      total += e.size;
    }
    closedir(d);
  }

  if (total > trigger) {
    std::sort(entries.begin(), entries.end(),
              [](const ScanEntry& a, const ScanEntry& b) { return a.atime_ns < b.atime_ns; });
    for (const ScanEntry& e : entries) {
      if (total <= target) break;
      const Name name = Name::FromHex(e.hex);
      const int sub = subs[static_cast<size_t>(std::strchr(kSubdirs, e.hex[0]) - kSubdirs)]->get();
      struct stat st;
      if (fstatat(sub, name.hex, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) total -= e.size;  // another process evicted it
        continue;
      }
      // A hit or a rewrite since the scan made it recent: the scan's order is stale for it.
      if (st.st_ino != e.ino || ToNs(st.st_atim) != e.atime_ns) continue;
      if (unlinkat(sub, name.hex, 0) == 0) {
        evictions_.fetch_add(1, std::memory_order_relaxed);
        total -= e.size;
      } else if (errno == ENOENT) {
        total -= e.size;
      }
    }
  }
  used_.fetch_add(static_cast<int64_t>(total) - used_before + in_flight_before);
}

void DiskCache::Drop(int sub, const Name& name, const struct stat* seen, const std::string& why) {
  // Remove by name only what was judged: another process may have renamed a good entry
  // over the name since (a bad file found by name with no `seen` is a symlink).
  struct stat now;
  int remove_error = 0;
  if (fstatat(sub, name.hex, &now, AT_SYMLINK_NOFOLLOW) == 0 &&
      (seen == nullptr ? S_ISLNK(now.st_mode)
                       : now.st_dev == seen->st_dev && now.st_ino == seen->st_ino)) {
    // A directory goes only if empty: the cache never removes trees it did not create.
    if (unlinkat(sub, name.hex, S_ISDIR(now.st_mode) ? AT_REMOVEDIR : 0) != 0) {
      remove_error = errno;
    }
  }
  corrupt_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(warn_mu_);
  if (corrupt_warnings_ >= kMaxCorruptWarnings) return;
  ++corrupt_warnings_;
  std::string line = dir_ + "/" + name.sub + "/" + name.hex + ": cache entry " + why +
                     (remove_error == 0 ? "; removed"
                                        : "; cannot remove it (" +
                                              std::string(std::strerror(remove_error)) + ")") +
                     ", the block is fetched again";
  if (corrupt_warnings_ == kMaxCorruptWarnings) line += " (further bad entries only counted)";
  if (warn_) warn_(line);
}

void DiskCache::WriteFailed(const std::string& what, int err) {
  write_errors_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(warn_mu_);
  const int64_t now = NowNs();
  if (last_write_warning_ns_ != INT64_MIN &&
      now - last_write_warning_ns_ < kWriteWarningIntervalNs) {
    return;
  }
  last_write_warning_ns_ = now;
  if (warn_) {
    warn_(what + ": cannot write to the disk cache: " + std::strerror(err) +
          "; reads go on without caching (reported at most every 10 minutes)");
  }
}

namespace {

// "<temp prefix>claim-<entry name>": a temporary name to the scan (see TryClaim).
std::string ClaimName(const char* hex) { return std::string(kTempPrefix) + "claim-" + hex; }

}  // namespace

bool DiskCache::TryClaim(std::string_view object, uint64_t block, std::chrono::milliseconds stale) {
  if (object.size() > kMaxIdentityBytes) return true;
  const Name name = Name::For(object, block);
  const UniqueFd sub(OpenSubdir(name.sub[0], /*create=*/true));
  if (!sub) return true;
  const std::string claim = ClaimName(name.hex);
  for (int attempt = 0; attempt < 2; ++attempt) {
    const UniqueFd fd(openat(sub.get(), claim.c_str(),
                             O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (fd) {
      const std::string pid = std::to_string(getpid());
      (void)!write(fd.get(), pid.data(), pid.size());
      return true;
    }
    if (errno != EEXIST) return true;  // cannot claim: fetch anyway
    // Someone's claim: live unless it is old or its process is gone. A dead one is
    // removed and claimed afresh (once: two processes breaking it race for the new one).
    struct stat st;
    if (fstatat(sub.get(), claim.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone
    if (!S_ISREG(st.st_mode)) return true;
    bool dead = NowNs() - ToNs(st.st_mtim) > static_cast<int64_t>(stale.count()) * 1000000;
    if (!dead) {
      const UniqueFd in(openat(sub.get(), claim.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
      char buf[16] = {};
      const ssize_t n = in ? read(in.get(), buf, sizeof(buf) - 1) : -1;
      const long pid = n > 0 ? std::strtol(buf, nullptr, 10) : 0;
      dead = pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
    }
    if (!dead) return false;
    unlinkat(sub.get(), claim.c_str(), 0);
  }
  return true;
}

void DiskCache::Unclaim(std::string_view object, uint64_t block) {
  if (object.size() > kMaxIdentityBytes) return;
  const Name name = Name::For(object, block);
  const UniqueFd sub(OpenSubdir(name.sub[0], /*create=*/false));
  if (sub) unlinkat(sub.get(), ClaimName(name.hex).c_str(), 0);
}

bool DiskCache::WaitForClaim(std::string_view object, uint64_t block,
                             std::chrono::steady_clock::time_point deadline) {
  claim_waits_.fetch_add(1, std::memory_order_relaxed);
  const Name name = Name::For(object, block);
  const std::string claim = ClaimName(name.hex);
  // Polled: a block takes a round trip or more to fetch, and a 5 ms poll costs nothing
  // beside it; inotify would need a descriptor per waiter for the same answer.
  for (;;) {
    const UniqueFd sub(OpenSubdir(name.sub[0], /*create=*/false));
    struct stat st;
    if (!sub || fstatat(sub.get(), claim.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

DiskCache::Counters DiskCache::counters() const {
  Counters c;
  c.hits = hits_.load(std::memory_order_relaxed);
  c.misses = misses_.load(std::memory_order_relaxed);
  c.corrupt = corrupt_.load(std::memory_order_relaxed);
  c.bytes_read = bytes_read_.load(std::memory_order_relaxed);
  c.bytes_written = bytes_written_.load(std::memory_order_relaxed);
  c.evictions = evictions_.load(std::memory_order_relaxed);
  c.write_errors = write_errors_.load(std::memory_order_relaxed);
  c.claim_waits = claim_waits_.load(std::memory_order_relaxed);
  c.bytes_used = static_cast<uint64_t>(std::max<int64_t>(0, used_.load(std::memory_order_relaxed)));
  return c;
}

}  // namespace ckptfs
