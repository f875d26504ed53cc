// Zip CRCs: the CRC-32 of each storage that the merged pytorch_model.bin's zip records.
//
// torch.load ignores them; `unzip -t` and `python3 -m zipfile -t` check them. A torch
// source's records carry theirs; a safetensors tensor has none, and computing one reads
// the tensor. So CRCs are computed once and kept in a small sidecar file, keyed by what
// the bytes are, and every later mount of the same bytes puts them in the zip headers
// without reading anything:
//
// - Key (CrcKeyOf): XXH3-128 over every shard's name and ByteSource::Identity (a local
//   file's path, size, mtime and inode; a remote object's URL, ETag or Last-Modified and
//   size; a packed shard's frame checksums), then each storage without a CRC as (shard,
//   offset, size). A shard with no identity means no key: nothing is cached.
// - Where (CrcStore): --cache-dir/crc if given, else $XDG_CACHE_HOME/ckptfs/crc, else
//   ~/.cache/ckptfs/crc (root: /var/cache/ckptfs/crc), one file per key named by its hex.
//   A packed source also carries one in its directory (kPackedCrcFile, written by pack).
// - Trust: a sidecar is read only if it is a regular file owned by this user or root, and
//   used only if it parses exactly (DecodeCrcSidecar); anything else is ignored with one
//   line naming the file. The directory is created 0700 and must not be writable by
//   others; files are written 0600 under a temporary name and renamed into place.
//
// Sidecar format (version 1), integers little-endian, 48 + 4 * count bytes:
//    0  8  magic "CKPTFScr"              16 16  key (low, high 64 bits)
//    8  4  version (1)                   32  8  count of CRCs
//   12  4  reserved, zero                40 4n  the CRC-32s, in storage order
//   40+4n 8  XXH3-64 of every byte before it
//
// A mount never changes bytes it serves: CRCs learned while mounted (BackgroundCrcPass)
// go to the sidecar for the next mount, not into this mount's headers.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/status.h"

namespace ckptfs {

// --zip-crc: kAuto uses a sidecar, else computes one in the background (plain local shards)
// for the next mount; kMount computes before serving (and writes the sidecar); kOff
// leaves every unknown CRC 0 and reads no sidecar.
enum class ZipCrcMode { kAuto, kMount, kOff };
std::optional<ZipCrcMode> ParseZipCrcMode(std::string_view text);

struct CrcKey {
  uint64_t low = 0;
  uint64_t high = 0;
  bool operator==(const CrcKey&) const = default;
  std::string Hex() const;  // 32 hex digits, high first
};

// Storages of `ckpt` without a CRC (has_crc32 false), in storage order.
std::vector<uint32_t> MissingCrcStorages(const Checkpoint& ckpt);
// The key of `ckpt`'s missing CRCs, or nullopt if some shard has no identity.
std::optional<CrcKey> CrcKeyOf(const Checkpoint& ckpt);

std::string EncodeCrcSidecar(const CrcKey& key, std::span<const uint32_t> crcs);
// The CRCs of `bytes` if it is a version 1 sidecar for `key` holding exactly `count`;
// otherwise a Corruption naming `name` and the first problem found.
Result<std::vector<uint32_t>> DecodeCrcSidecar(std::string_view bytes, const CrcKey& key,
                                               size_t count, const std::string& name);

// The directory of sidecars: `cache_dir`/crc, or the per-user default described above.
std::string CrcSidecarDir(const std::string& cache_dir);

// Sidecar files in one directory. Thread-safe (no state but the path).
class CrcStore {
 public:
  explicit CrcStore(std::string dir) : dir_(std::move(dir)) {}
  const std::string& dir() const { return dir_; }
  std::string PathFor(const CrcKey& key) const { return dir_ + "/" + key.Hex(); }
  // NotFound if there is no sidecar for `key`; any other error says why the one there
  // cannot be used (foreign owner, not a regular file, corrupt).
  Result<std::vector<uint32_t>> Load(const CrcKey& key, size_t count) const;
  // Creates the directory if needed (0700) and writes the sidecar atomically.
  Status Save(const CrcKey& key, std::span<const uint32_t> crcs) const;

 private:
  std::string dir_;
};

// Writes the CRCs of `missing` into the storages of `ckpt` (has_crc32 set).
void ApplyCrcs(Checkpoint& ckpt, std::span<const uint32_t> missing, std::span<const uint32_t> crcs);

// Reads the storages `missing` of `ckpt` in order, 4 MiB at a time, and returns their
// CRCs. Adds each chunk's size to `*bytes_done`; gives up with Cancelled-like IoError if
// `stop` becomes true.
Result<std::vector<uint32_t>> ComputeCrcs(const Checkpoint& ckpt, std::span<const uint32_t> missing,
                                          const std::atomic<bool>& stop,
                                          std::atomic<uint64_t>* bytes_done);

// What a mount knows about its zip CRCs; shown by inspect and stats.json.
struct ZipCrcStatus {
  enum class State {
    kKnown,    // every record carries its CRC (`origin` says from where)
    kPending,  // unknown now; a background pass can compute them for the next mount
    kUnknown,  // unknown, and nothing will compute them (--zip-crc off, remote, no key)
  };
  State state = State::kKnown;
  std::string origin;        // "torch zip", "sidecar", "computed at mount", or why unknown
  std::string sidecar_path;  // the sidecar used, or the one a pass would write
  std::optional<CrcKey> key;
  std::vector<uint32_t> missing;  // storages whose CRCs the pass computes
  uint64_t missing_bytes = 0;

  // One line for `inspect`: "known (sidecar PATH)", "not yet computed; ...".
  std::string Describe() const;
};

// Resolves `ckpt`'s missing CRCs at open: from a sidecar (the packed source's own, then
// the store's), or by computing them now (kMount, which then saves a sidecar). `warn`
// receives one line per sidecar ignored or not saved. Fails only if kMount cannot read
// a storage.
Result<ZipCrcStatus> ResolveZipCrcs(Checkpoint& ckpt, ZipCrcMode mode, const CrcStore& store,
                                    const std::function<void(const std::string&)>& warn);

// Writes `dest`/kPackedCrcFile for the packed checkpoint in `dest` (ckptfs pack's output):
// its key (frame checksums, not paths) holds wherever `dest` is copied or uploaded. A
// storage whose stored ranges are all in `known` (PackSummary::range_crcs: computed from
// the bytes the frames were compressed from, which the frames' checksums guard on every
// read) gets their combined CRC; any other is read back through its frames on every
// core. Writes nothing if no CRC is missing.
Status WritePackedCrcs(const std::string& dest, const ReadOptions& read_options,
                       const RangeCrcs& known = {});

// Computes a mount's pending CRCs on a thread of idle priority (CPU SCHED_IDLE and I/O
// class idle), reading through the checkpoint's own sources, then saves the sidecar and
// logs one line with the seconds and bytes. The checkpoint and `status` must outlive the
// pass; the destructor stops and joins it.
class BackgroundCrcPass {
 public:
  enum class State { kRunning, kSaved, kFailed };
  BackgroundCrcPass(const Checkpoint& ckpt, const ZipCrcStatus& status, CrcStore store,
                    std::function<void(const std::string&)> log);
  ~BackgroundCrcPass();
  BackgroundCrcPass(const BackgroundCrcPass&) = delete;
  BackgroundCrcPass& operator=(const BackgroundCrcPass&) = delete;

  State state() const { return state_.load(std::memory_order_acquire); }
  uint64_t bytes_done() const { return bytes_done_.load(std::memory_order_relaxed); }

 private:
  void Run();

  const Checkpoint& ckpt_;
  const std::vector<uint32_t>& missing_;
  const CrcKey key_;
  const uint64_t total_bytes_;
  const CrcStore store_;
  const std::function<void(const std::string&)> log_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> bytes_done_{0};
  std::atomic<State> state_{State::kRunning};
  std::thread thread_;  // last: starts once everything above is set
};

}  // namespace ckptfs
