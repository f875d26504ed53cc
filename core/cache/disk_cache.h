// DiskCache: the `--cache-dir` store of fetched bytes, kept across mounts.
//
// Remote objects are read in fixed blocks; the caller names each object by an identity
// string (redacted URL, ETag or Last-Modified, size: a changed object gets new keys) and
// stores and looks up whole blocks of it here before going to the network.
//
// Contract:
// - Get returns true only with exactly the bytes some Put stored for the same (identity,
//   block) and length. Anything else found under that name — a truncated, corrupt or
//   foreign file, one of another length, a directory, symlink or FIFO — is a miss; it is
//   removed where possible, counted in `corrupt` and reported through `warn`. After a
//   miss the contents of `out` are unspecified.
// - Put is best effort: a full disk, an unwritable directory or a name taken by something
//   the cache cannot replace count a write error and change nothing else. A block larger
//   than the capacity is not stored.
// - Bounded: the files of the cache (entries, plus temporary files being written) take
//   at most the capacity; a Put that would pass it first evicts the least recently used
//   entries down to 90% of it. While one thread evicts, others write on into a slack of
//   1/16 of the capacity rather than wait; past that their blocks are dropped. Alone, a
//   process never passes capacity + slack. Processes sharing the directory see each
//   other's writes only when they scan (a process rescans after writing a slack's worth),
//   so each other process may add its slack and the blocks it is writing at that moment.
//   Sizes are file sizes (header included), not disk blocks used.
// - LRU across remounts and processes: recency is the entry file's access time, set on
//   a hit, so it survives remounts and every process sharing the directory sees the same
//   order. Open and each eviction scan the directory to learn what is there.
// - Shared: several processes (mounts) may use one directory at once. Entries are
//   published with rename(2), so a reader sees a whole entry or none. Evictors are
//   serialized across processes by flock(2) on `DIR/lock`; entries another process
//   removes simply become misses. Each mount enforces its own capacity, so mounts
//   sharing a directory should agree on it (the smallest wins).
// - Safe in a hostile directory: no symlink inside it is followed, nothing is written
//   outside it, and only names the cache itself creates are ever removed (one-hex-digit
//   subdirectories holding 32-hex-digit entries and `.tmp-*` files).
// - Trusted writers only: a private directory (the default) must belong to this user (or
//   root) and be writable by nobody else, or Open refuses it: another user could plant
//   entries there, which would then be served as the checkpoint's bytes. A directory
//   opened as shared (`--cache-dir-shared`, for a group's cache) may belong to anyone and
//   be writable by others; its subdirectories are made group-writable. Either way an
//   entry file owned by anyone but this user or root is never served (dropped as foreign),
//   and entries are created 0600.
// - Thread safety: Get, Put and counters may be called from any thread at once. A hit
//   takes no lock at all; a Put takes one only to evict. One thread evicts at a time while
//   the others write on (see Bounded); it may wait for another process's eviction.
//   `warn` is called from the thread that met the event, never concurrently with itself.
//
// On-disk format (version 1), all integers little-endian:
//   DIR/lock            flock target for evictors (empty)
//   DIR/CACHEDIR.TAG    marks the directory as a cache for backup tools
//   DIR/<h>/<32 hex>    one entry per (identity, block); <h> is the first hex digit of the
//                       name, the name is XXH3-128(identity || block as u64) in hex
//   DIR/<h>/.tmp-*      an entry being written; left by a crashed writer, removed when
//                       older than ten minutes
// An entry file is a 64-byte header, the identity, then the payload:
//    0  8  magic "CKPTFSdc"           32  8  block number
//    8  4  format version (1)         40  8  payload length
//   12  4  identity length            48  8  XXH3-64 of the payload
//   16 16  XXH3-128 key (low, high)   56  8  reserved, zero
// Every header field is compared with what the caller asked for (the whole identity, not
// just its hash), so neither a hash collision nor a misplaced file can return another
// object's bytes, and the payload hash catches damage to the data. Entries are not
// fsync'ed: after a crash a damaged entry fails these checks and is refetched.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"

namespace ckptfs {

class DiskCache {
 public:
  struct Counters {
    uint64_t hits = 0;
    uint64_t misses = 0;         // every Get that returned false, corrupt entries included
    uint64_t corrupt = 0;        // entries found invalid and dropped
    uint64_t bytes_read = 0;     // payload bytes returned by hits
    uint64_t bytes_written = 0;  // payload bytes stored by Puts
    uint64_t evictions = 0;      // entries this instance evicted
    uint64_t write_errors = 0;   // Puts that failed (full disk, unwritable directory...)
    uint64_t bytes_used = 0;     // estimate of the directory's size, exact after a scan
    uint64_t claim_waits = 0;    // misses another process was fetching: waited, not fetched
  };

  // Longest identity accepted; Get misses and Put ignores longer ones.
  static constexpr size_t kMaxIdentityBytes = 64 * 1024;

  // Whether users other than the owner may write to the directory (see the contract).
  enum class Sharing { kPrivate, kShared };

  // Opens the cache in `dir`, creating it (and missing parents) with mode 0700, and trims
  // it to `capacity_bytes` if it holds more (capacities above 2^60 count as 2^60). Fails
  // with a one-line Status naming the directory if it cannot be created, is not a
  // directory or is not writable, or (kPrivate) if CheckDirectory refuses it. `warn`
  // receives one line for events a user should see: a corrupt or foreign entry dropped
  // (the first ten), the directory becoming unwritable or full (at most once per ten
  // minutes, not per block). It may be empty.
  static Result<std::unique_ptr<DiskCache>> Open(const std::string& dir, uint64_t capacity_bytes,
                                                 std::function<void(const std::string&)> warn = {},
                                                 Sharing sharing = Sharing::kPrivate);
  // Ok if `dir` does not exist yet (Open creates it private) or, for kPrivate, belongs to
  // this user or root and is writable by neither its group nor others; otherwise an
  // InvalidArgument naming the directory, the problem and --cache-dir-shared. Lets a
  // caller refuse a directory before it opens anything else.
  static Status CheckDirectory(const std::string& dir, Sharing sharing);
  ~DiskCache();
  DiskCache(const DiskCache&) = delete;
  DiskCache& operator=(const DiskCache&) = delete;

  // True, with `out` filled, when a valid entry for (object, block) holding exactly
  // out.size() bytes exists. See the contract for what a miss does.
  bool Get(std::string_view object, uint64_t block, std::span<uint8_t> out);
  // Stores `bytes` as (object, block), replacing any entry of that name. Best effort.
  void Put(std::string_view object, uint64_t block, std::span<const uint8_t> bytes);

  // Fetch claims: several processes sharing the directory that miss the same block at
  // once fetch it once between them. The one whose TryClaim succeeds fetches, Puts and
  // Unclaims; the others WaitForClaim, then Get. A claim is a file `.tmp-claim-<name>`
  // (created O_EXCL, holding the claimant's pid) beside where the entry will be: a
  // temporary name, so a claim a crashed process left is removed like its other temporary
  // files, and never served. Best effort: a claim that cannot be made, or that is older
  // than `stale` or whose process is gone, lets the caller fetch (a duplicate fetch, never
  // a wrong byte: entries are checked as always).
  // True when this caller should fetch (it holds the claim, or no claim can be made);
  // false when a live claim of another process (or thread) holds the block.
  bool TryClaim(std::string_view object, uint64_t block, std::chrono::milliseconds stale);
  void Unclaim(std::string_view object, uint64_t block);
  // Waits until the claim on (object, block) ends or `deadline` passes, polling; true if
  // it ended (the entry may now be there), false at the deadline.
  bool WaitForClaim(std::string_view object, uint64_t block,
                    std::chrono::steady_clock::time_point deadline);

  Counters counters() const;
  uint64_t capacity() const { return capacity_; }
  const std::string& dir() const { return dir_; }

 private:
  struct Name;
  struct ScanEntry;
  DiskCache(std::string dir, int dir_fd, int lock_fd, uint64_t capacity,
            std::function<void(const std::string&)> warn, Sharing sharing);

  // Makes the just created subdirectory `name` group-writable in a shared directory.
  void ShareSubdir(const char* name) const;
  // A file descriptor (O_PATH) of subdirectory `hex`, never a symlink; -1 with errno set.
  int OpenSubdir(char hex, bool create) const;
  // Removes the invalid entry `name` in `sub` (if it is still the file `seen`, when
  // given), counts and reports it.
  void Drop(int sub, const Name& name, const struct stat* seen, const std::string& why);
  bool WriteEntry(int sub, const Name& name, std::string_view object, uint64_t block,
                  std::span<const uint8_t> bytes);
  // Makes room for a file of `file_bytes` if this thread can take both locks without
  // waiting; otherwise someone else is evicting already.
  void TryEvict(uint64_t file_bytes);
  // Scans the directory (the caller holds the locks), removes stale temporary files and,
  // if the total passes `trigger`, evicts least recently used entries down to `target`.
  void ScanAndEvict(uint64_t trigger, uint64_t target);
  void WriteFailed(const std::string& what, int err);

  const std::string dir_;
  const int dir_fd_;
  const int lock_fd_;  // flock(2) serializes evictors across processes
  const uint64_t capacity_;
  const uint64_t slack_;
  const std::function<void(const std::string&)> warn_;
  const Sharing sharing_;
  uint64_t nonce_ = 0;  // makes temporary file names unique across processes

  std::mutex evict_mu_;  // serializes evictors within the process; never waited for
  std::mutex warn_mu_;   // serializes calls of warn_ and guards the fields below
  int corrupt_warnings_ = 0;
  int64_t last_write_warning_ns_ = INT64_MIN;

  // Estimated bytes in the directory, this instance's writes in progress included: a Put
  // reserves its bytes here before it writes. in_flight_ is the part of used_ reserved but
  // not yet published, which a scan cannot see (its temporary files may not exist yet).
  std::atomic<int64_t> used_{0};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<uint64_t> written_since_scan_{0};
  std::atomic<uint64_t> next_temp_{0};
  std::atomic<uint64_t> hits_{0}, misses_{0}, corrupt_{0}, bytes_read_{0}, bytes_written_{0},
      evictions_{0}, write_errors_{0}, claim_waits_{0};
};

}  // namespace ckptfs
