#include "core/crc/zip_crc.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <xxhash.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/cache/disk_cache.h"
#include "core/format/formats.h"

namespace ckptfs {
namespace {

constexpr char kMagic[8] = {'C', 'K', 'P', 'T', 'F', 'S', 'c', 'r'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 40;
constexpr size_t kTrailerBytes = 8;
constexpr uint64_t kChunkBytes = 4u << 20;

void PutLe(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetLe(std::string_view in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) {
    v = (v << 8) | static_cast<uint8_t>(in[at + static_cast<size_t>(i)]);
  }
  return v;
}

// mkdir -p; new directories private: a planted sidecar would put its CRCs in our headers.
Status MakePrivateDirs(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos < dir.size() && dir[pos] != '/') continue;
    if (::mkdir(dir.substr(0, pos).c_str(), 0700) != 0 && errno != EEXIST) {
      return Status::IoError(dir + ": cannot create: " + std::strerror(errno), errno);
    }
  }
  return Status::Ok();
}

Result<std::string> ReadSmallFile(const std::string& path, size_t limit) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(path + ": no sidecar");
    return Status::IoError(path + ": cannot open: " + std::strerror(errno), errno);
  }
  struct stat st;
  std::string bytes;
  Status status;
  if (::fstat(fd, &st) != 0) {
    status = Status::IoError(path + ": cannot stat: " + std::strerror(errno), errno);
  } else if (!S_ISREG(st.st_mode)) {
    status = Status::InvalidArgument(path + ": not a regular file");
  } else if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    status = Status::InvalidArgument(path + ": belongs to another user (uid " +
                                     std::to_string(st.st_uid) + ")");
  } else if (static_cast<uint64_t>(st.st_size) > limit) {
    status = Status::Corruption(path + ": " + std::to_string(st.st_size) +
                                " bytes, more than a sidecar of this checkpoint holds");
  } else {
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n =
          ::pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    bytes.resize(done);
  }
  ::close(fd);
  if (!status.ok()) return status;
  return bytes;
}

// Lowest priority the thread can take without privileges: CPU only when idle, disk only
// when no one else asks. Best effort: a pass at normal priority is still correct.
void LowerThreadPriority() {
  sched_param param{};
  (void)::sched_setscheduler(0, SCHED_IDLE, &param);
#ifdef SYS_ioprio_set
  constexpr int kWhoProcess = 1, kClassIdle = 3, kClassShift = 13;
  (void)::syscall(SYS_ioprio_set, kWhoProcess, 0, kClassIdle << kClassShift);
#endif
}

}  // namespace

std::optional<ZipCrcMode> ParseZipCrcMode(std::string_view text) {
  if (text == "auto") return ZipCrcMode::kAuto;
  if (text == "mount") return ZipCrcMode::kMount;
  if (text == "off") return ZipCrcMode::kOff;
  return std::nullopt;
}

std::string CrcKey::Hex() const {
  char hex[33];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx", static_cast<unsigned long long>(high),
                static_cast<unsigned long long>(low));
  return hex;
}

std::vector<uint32_t> MissingCrcStorages(const Checkpoint& ckpt) {
  std::vector<uint32_t> missing;
  for (uint32_t i = 0; i < ckpt.storages.size(); ++i) {
    if (!ckpt.storages[i].has_crc32) missing.push_back(i);
  }
  return missing;
}

std::optional<CrcKey> CrcKeyOf(const Checkpoint& ckpt) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  auto add = [state](std::string_view s) {
    const uint64_t n = s.size();
    XXH3_128bits_update(state, &n, sizeof(n));  // length first: fields cannot run together
    XXH3_128bits_update(state, s.data(), s.size());
  };
  add("ckptfs zip crc 1");
  bool keyed = true;
  for (const StoredFile& shard : ckpt.shards) {
    const std::string identity = shard.source->Identity();
    if (identity.empty()) keyed = false;
    add(shard.name);
    add(identity);
  }
  for (const Storage& s : ckpt.storages) {
    if (s.has_crc32) continue;
    StoredRange one;
    for (const StoredRange& r : RangesOf(ckpt, s, one)) {
      const uint64_t extent[3] = {r.shard, r.offset, r.size};
      XXH3_128bits_update(state, extent, sizeof(extent));
    }
  }
  const XXH128_hash_t h = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  if (!keyed) return std::nullopt;
  return CrcKey{h.low64, h.high64};
}

std::string EncodeCrcSidecar(const CrcKey& key, std::span<const uint32_t> crcs) {
  std::string out(kMagic, sizeof(kMagic));
  out.reserve(kHeaderBytes + 4 * crcs.size() + kTrailerBytes);
  PutLe(out, kVersion, 4);
  PutLe(out, 0, 4);
  PutLe(out, key.low, 8);
  PutLe(out, key.high, 8);
  PutLe(out, crcs.size(), 8);
  for (uint32_t crc : crcs) PutLe(out, crc, 4);
  PutLe(out, XXH3_64bits(out.data(), out.size()), 8);
  return out;
}

Result<std::vector<uint32_t>> DecodeCrcSidecar(std::string_view bytes, const CrcKey& key,
                                               size_t count, const std::string& name) {
  auto bad = [&name](const std::string& why) { return Status::Corruption(name + ": " + why); };
  if (bytes.size() < kHeaderBytes + kTrailerBytes) {
    return bad("truncated (" + std::to_string(bytes.size()) + " bytes)");
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) return bad("not a CRC sidecar");
  if (GetLe(bytes, 8, 4) != kVersion) {
    return bad("version " + std::to_string(GetLe(bytes, 8, 4)) + ", expected 1");
  }
  if (GetLe(bytes, 12, 4) != 0) return bad("reserved field not zero");
  const uint64_t stored_count = GetLe(bytes, 32, 8);
  if (stored_count != count) {
    return bad("holds " + std::to_string(stored_count) + " CRCs, the checkpoint has " +
               std::to_string(count));
  }
  // `count` is the caller's (storages in memory): this cannot overflow.
  if (bytes.size() != kHeaderBytes + 4 * count + kTrailerBytes) {
    return bad(std::to_string(bytes.size()) + " bytes, expected " +
               std::to_string(kHeaderBytes + 4 * count + kTrailerBytes));
  }
  const size_t body = bytes.size() - kTrailerBytes;
  if (GetLe(bytes, body, 8) != XXH3_64bits(bytes.data(), body)) return bad("checksum mismatch");
  if (CrcKey{GetLe(bytes, 16, 8), GetLe(bytes, 24, 8)} != key) {
    return bad("made for other bytes (key mismatch)");
  }
  std::vector<uint32_t> crcs(count);
  for (size_t i = 0; i < count; ++i) {
    crcs[i] = static_cast<uint32_t>(GetLe(bytes, kHeaderBytes + 4 * i, 4));
  }
  return crcs;
}

std::string CrcSidecarDir(const std::string& cache_dir) {
  if (!cache_dir.empty()) return cache_dir + "/crc";
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/') return std::string(xdg) + "/ckptfs/crc";
  const char* home = std::getenv("HOME");
  if (::geteuid() == 0 || !home || home[0] != '/') return "/var/cache/ckptfs/crc";
  return std::string(home) + "/.cache/ckptfs/crc";
}

Result<std::vector<uint32_t>> CrcStore::Load(const CrcKey& key, size_t count) const {
  const std::string path = PathFor(key);
  CKPTFS_ASSIGN_OR_RETURN(std::string bytes,
                          ReadSmallFile(path, kHeaderBytes + 4 * count + kTrailerBytes));
  return DecodeCrcSidecar(bytes, key, count, path);
}

Status CrcStore::Save(const CrcKey& key, std::span<const uint32_t> crcs) const {
  CKPTFS_RETURN_IF_ERROR(MakePrivateDirs(dir_));
  CKPTFS_RETURN_IF_ERROR(DiskCache::CheckDirectory(dir_, DiskCache::Sharing::kPrivate));
  static std::atomic<uint64_t> nonce{0};
  const std::string temp =
      dir_ + "/.tmp-" + std::to_string(::getpid()) + "-" + std::to_string(nonce.fetch_add(1));
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IoError(temp + ": cannot create: " + std::strerror(errno), errno);
  const std::string bytes = EncodeCrcSidecar(key, crcs);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const int err = errno;
  const bool ok =
      ::close(fd) == 0 && done == bytes.size() && ::rename(temp.c_str(), PathFor(key).c_str()) == 0;
  if (!ok) {
    ::unlink(temp.c_str());
    return Status::IoError(PathFor(key) + ": cannot write: " + std::strerror(err ? err : errno));
  }
  return Status::Ok();
}

void ApplyCrcs(Checkpoint& ckpt, std::span<const uint32_t> missing,
               std::span<const uint32_t> crcs) {
  for (size_t i = 0; i < missing.size() && i < crcs.size(); ++i) {
    Storage& s = ckpt.storages[missing[i]];
    s.crc32 = crcs[i];
    s.has_crc32 = true;
  }
}

Result<std::vector<uint32_t>> ComputeCrcs(const Checkpoint& ckpt, std::span<const uint32_t> missing,
                                          const std::atomic<bool>& stop,
                                          std::atomic<uint64_t>* bytes_done) {
  std::vector<uint32_t> crcs;
  crcs.reserve(missing.size());
  std::vector<uint8_t> buf;
  for (uint32_t index : missing) {
    uLong crc = crc32(0, nullptr, 0);
    StoredRange one;
    for (const StoredRange& r : RangesOf(ckpt, ckpt.storages[index], one)) {
      const ByteSource& source = *ShardFile(ckpt, r.shard).source;
      for (uint64_t done = 0; done < r.size;) {
        if (stop.load(std::memory_order_relaxed)) return Status::IoError("stopped", ECANCELED);
        const uint64_t n = std::min(kChunkBytes, r.size - done);
        buf.resize(n);
        CKPTFS_RETURN_IF_ERROR(source.ReadAt(r.offset + done, buf));
        crc = crc32(crc, buf.data(), static_cast<uInt>(n));
        done += n;
        if (bytes_done) bytes_done->fetch_add(n, std::memory_order_relaxed);
      }
    }
    crcs.push_back(static_cast<uint32_t>(crc));
  }
  return crcs;
}

std::string ZipCrcStatus::Describe() const {
  switch (state) {
    case State::kKnown:
      return "known (" + origin + (sidecar_path.empty() ? "" : " " + sidecar_path) + ")";
    case State::kPending:
      return "not yet computed; unzip -t fails until a background pass finishes (next mount)";
    case State::kUnknown:
      return "not computed (" + origin +
             "); unzip -t and zipfile -t fail, torch.load is unaffected";
  }
  return {};
}

Result<ZipCrcStatus> ResolveZipCrcs(Checkpoint& ckpt, ZipCrcMode mode, const CrcStore& store,
                                    const std::function<void(const std::string&)>& warn) {
  ZipCrcStatus status;
  status.missing = MissingCrcStorages(ckpt);
  if (status.missing.empty()) {
    status.origin = ckpt.storages.empty() ? "no storages" : "torch zip";
    return status;
  }
  for (uint32_t i : status.missing) status.missing_bytes += ckpt.storages[i].size;
  status.state = ZipCrcStatus::State::kUnknown;
  if (mode == ZipCrcMode::kOff) {
    status.origin = "--zip-crc off";
    return status;
  }
  status.key = CrcKeyOf(ckpt);
  auto note = [&warn](const Status& s) {
    if (warn) warn(s.message() + "; ignored");
  };
  if (status.key) {
    status.sidecar_path = store.PathFor(*status.key);
    if (ckpt.packed_crcs) {
      const ByteSource& file = *ckpt.packed_crcs;
      const uint64_t limit = 48 + 4 * uint64_t{status.missing.size()};
      std::string bytes(file.Size() <= limit ? file.Size() : 0, '\0');
      Status read = file.Size() <= limit
                        ? file.ReadAt(0, {reinterpret_cast<uint8_t*>(bytes.data()), bytes.size()})
                        : Status::Corruption(file.Name() + ": larger than its checkpoint's");
      auto crcs = read.ok()
                      ? DecodeCrcSidecar(bytes, *status.key, status.missing.size(), file.Name())
                      : Result<std::vector<uint32_t>>(read);
      if (crcs.ok()) {
        ApplyCrcs(ckpt, status.missing, crcs.value());
        status.state = ZipCrcStatus::State::kKnown;
        status.origin = "packed with the source";
        status.sidecar_path = ckpt.source_path + "/" + std::string(kPackedCrcFile);
        return status;
      }
      note(crcs.status());
    }
    auto crcs = store.Load(*status.key, status.missing.size());
    if (crcs.ok()) {
      ApplyCrcs(ckpt, status.missing, crcs.value());
      status.state = ZipCrcStatus::State::kKnown;
      status.origin = "sidecar";
      return status;
    }
    if (crcs.status().code() != Status::Code::kNotFound) note(crcs.status());
  }
  if (mode == ZipCrcMode::kMount) {
    CKPTFS_RETURN_IF_ERROR(ComputeStorageCrcs(ckpt));  // on every core: the mount waits
    std::vector<uint32_t> crcs;
    for (uint32_t i : status.missing) crcs.push_back(ckpt.storages[i].crc32);
    status.state = ZipCrcStatus::State::kKnown;
    status.origin = "computed at mount";
    if (status.key) {
      if (Status saved = store.Save(*status.key, crcs); !saved.ok()) {
        note(saved);
        status.sidecar_path.clear();
      }
    }
    return status;
  }
  if (!status.key) {
    status.origin = "a shard has no stable identity to key a sidecar";
  } else if (ckpt.remote) {
    status.origin =
        "remote source: no background pass; `ckptfs verify` or --zip-crc mount writes them";
  } else if (std::any_of(ckpt.shards.begin(), ckpt.shards.end(),
                         [](const StoredFile& f) { return f.stored_name != f.name; })) {
    // A pass would decode every frame through the cache the user's reads share, evicting
    // what they keep hot; `ckptfs pack` output carries its CRCs instead.
    status.origin =
        "compressed shards: no background pass; `ckptfs verify` or --zip-crc mount writes them";
  } else {
    status.state = ZipCrcStatus::State::kPending;
    status.origin = "a background pass computes them for the next mount";
  }
  return status;
}

Status WritePackedCrcs(const std::string& dest, const ReadOptions& read_options,
                       const RangeCrcs& known) {
  ReadContext context(read_options);
  CKPTFS_ASSIGN_OR_RETURN(Checkpoint ckpt, OpenCheckpoint(dest, context));
  for (StoredFile& f : ckpt.shards) f.source->BeginServing();
  const std::vector<uint32_t> missing = MissingCrcStorages(ckpt);
  const std::optional<CrcKey> key = CrcKeyOf(ckpt);
  if (missing.empty() || !key) return Status::Ok();
  // After the key, which names the storages without a CRC; what `known` covers is not read.
  Status computed =
      ApplyRangeCrcs(ckpt, known) < missing.size() ? ComputeStorageCrcs(ckpt) : Status::Ok();
  context.Shutdown();
  CKPTFS_RETURN_IF_ERROR(computed);
  std::vector<uint32_t> crcs;
  for (uint32_t i : missing) crcs.push_back(ckpt.storages[i].crc32);
  const std::string path = dest + "/" + std::string(kPackedCrcFile);
  const std::string temp = path + ".part";
  const std::string bytes = EncodeCrcSidecar(*key, crcs);
  FILE* f = std::fopen(temp.c_str(), "wbe");
  bool ok = f && std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  ok = (f && std::fclose(f) == 0) && ok;
  if (!ok || std::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(temp.c_str());
    return Status::IoError(path + ": cannot write: " + std::strerror(err), err);
  }
  return Status::Ok();
}

BackgroundCrcPass::BackgroundCrcPass(const Checkpoint& ckpt, const ZipCrcStatus& status,
                                     CrcStore store, std::function<void(const std::string&)> log)
    : ckpt_(ckpt),
      missing_(status.missing),
      key_(status.key.value_or(CrcKey{})),
      total_bytes_(status.missing_bytes),
      store_(std::move(store)),
      log_(std::move(log)),
      thread_([this] { Run(); }) {}

BackgroundCrcPass::~BackgroundCrcPass() {
  stop_ = true;
  thread_.join();
}

void BackgroundCrcPass::Run() {
  LowerThreadPriority();
  const auto start = std::chrono::steady_clock::now();
  auto crcs = ComputeCrcs(ckpt_, missing_, stop_, &bytes_done_);
  Status status = crcs.ok() ? store_.Save(key_, crcs.value()) : crcs.status();
  if (stop_) return;  // unmounting: no line for a pass cut short
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char line[256];
  if (status.ok()) {
    std::snprintf(line, sizeof(line),
                  "zip CRCs: background pass done in %.1f s (%llu bytes, %.0f MB/s); the next "
                  "mount's pytorch_model.bin carries them: ",
                  seconds, static_cast<unsigned long long>(total_bytes_),
                  seconds > 0 ? static_cast<double>(total_bytes_) / 1e6 / seconds : 0.0);
    if (log_) log_(line + store_.PathFor(key_));
    state_.store(State::kSaved, std::memory_order_release);
  } else {
    if (log_) log_("zip CRCs: background pass failed: " + status.message());
    state_.store(State::kFailed, std::memory_order_release);
  }
}

}  // namespace ckptfs
