#include "fs/commands.h"

#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/codec/zstd_source.h"
#include "core/format/safetensors.h"
#include "core/pack/pack.h"
#include "core/volume/volume.h"
#include "fs/preflight.h"

namespace ckptfs {
namespace {

Result<std::unique_ptr<Volume>> OpenOrReport(const std::string& source, const CodecOptions& codec,
                                             const RemoteOptions& remote, int* exit_code) {
  auto volume = Volume::Open(source, codec, /*zip_crc=*/false, remote);
  if (!volume.ok()) {
    PrintRefusal(volume.status());
    *exit_code = ExitCodeForOpenFailure(volume.status());
  }
  return volume;
}

Status ReadEverything(const ByteSource& source) {
  std::vector<uint8_t> buf(4u << 20);
  for (uint64_t off = 0; off < source.Size(); off += buf.size()) {
    const uint64_t n = std::min<uint64_t>(buf.size(), source.Size() - off);
    CKPTFS_RETURN_IF_ERROR(source.ReadAt(off, {buf.data(), n}));
  }
  return Status::Ok();
}

// How a shard is stored, for inspect.
std::string StorageKind(const StoredFile& f) {
  const auto* zstd = dynamic_cast<const ZstdSource*>(f.source.get());
  if (!zstd) return "plain";
  const size_t frames = zstd->index().frames.size();
  if (zstd->decodes_whole()) return "zstd, " + std::to_string(frames) + " frame(s), decoded whole";
  return std::string(zstd->index().seekable ? "seekable zstd, " : "zstd, ") +
         std::to_string(frames) + " frames";
}

std::string HumanBytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof(buf), u ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

// Bytes of the tensor's elements, also for a strided view (whose `size` is 0).
uint64_t ViewBytes(const Tensor& t) {
  return t.contiguous() ? t.size : TensorByteSize(t.dtype, t.shape).value_or(0);
}

nlohmann::json InspectJson(const Checkpoint& ckpt) {
  using nlohmann::json;
  json shards = json::array();
  for (const StoredFile& s : ckpt.shards) {
    shards.push_back({{"file", s.name},
                      {"stored_as", s.stored_name},
                      {"storage", StorageKind(s)},
                      {"bytes", s.source->Size()}});
  }
  json tensors = json::array();
  for (const Tensor& t : ckpt.tensors) {
    json entry = {
        {"name", t.name},        {"dtype", DtypeName(t.dtype)},        {"shape", t.shape},
        {"bytes", ViewBytes(t)}, {"shard", ckpt.shards[t.shard].name}, {"offset", t.offset}};
    if (!t.contiguous()) {
      // A strided view: where its storage starts and how it steps through it.
      entry["offset"] = ckpt.storages[t.storage].offset;
      entry["storage_offset"] = t.storage_offset;
      entry["stride"] = t.stride;
    }
    tensors.push_back(std::move(entry));
  }
  json metadata = json::object();
  for (const auto& [k, v] : ckpt.metadata) metadata[k] = v;
  return {{"source", ckpt.source_path},
          {"format", ckpt.format == CheckpointFormat::kTorch ? "torch" : "safetensors"},
          {"index", ckpt.index.empty() ? json(nullptr) : json(ckpt.index[0].name)},
          {"shards", shards},
          {"tensor_count", ckpt.tensors.size()},
          {"tensor_bytes", ckpt.TotalTensorBytes()},
          {"metadata", metadata},
          {"tensors", tensors}};
}

void PrintInspectTable(const Checkpoint& ckpt) {
  std::printf("source   %s\n", ckpt.source_path.c_str());
  std::printf("index    %s\n", ckpt.index.empty() ? "(single file)" : ckpt.index[0].name.c_str());
  std::printf("shards   %zu\n", ckpt.shards.size());
  for (const StoredFile& s : ckpt.shards) {
    std::printf("  %s  %s  (%s)\n", s.stored_name.c_str(), HumanBytes(s.source->Size()).c_str(),
                StorageKind(s).c_str());
  }
  std::printf("tensors  %zu, %s\n\n", ckpt.tensors.size(),
              HumanBytes(ckpt.TotalTensorBytes()).c_str());
  size_t width = 6;
  for (const Tensor& t : ckpt.tensors) width = std::max(width, t.name.size());
  std::printf("%-*s  %-8s  %-20s  %12s  %s\n", static_cast<int>(width), "TENSOR", "DTYPE", "SHAPE",
              "BYTES", "SHARD");
  for (const Tensor& t : ckpt.tensors) {
    std::printf("%-*s  %-8s  %-20s  %12llu  %s%s\n", static_cast<int>(width), t.name.c_str(),
                std::string(DtypeName(t.dtype)).c_str(), ShapeToJson(t.shape).c_str(),
                static_cast<unsigned long long>(ViewBytes(t)), ckpt.shards[t.shard].name.c_str(),
                t.contiguous() ? "" : "  (strided: only in pytorch_model.bin)");
  }
}

}  // namespace

std::optional<uint64_t> ParseByteSize(const std::string& text) {
  // stoull skips blanks and takes a sign, and wraps "-1" to 2^64-1: digits first, only.
  if (text.empty() || text[0] < '0' || text[0] > '9') return std::nullopt;
  size_t pos = 0;
  uint64_t value = 0;
  try {
    value = std::stoull(text, &pos);
  } catch (...) {
    return std::nullopt;
  }
  std::string unit = text.substr(pos);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (!unit.empty() && (unit.back() == 'i')) unit.pop_back();
  int shift = 0;
  if (unit == "K" || unit == "k")
    shift = 10;
  else if (unit == "M" || unit == "m")
    shift = 20;
  else if (unit == "G" || unit == "g")
    shift = 30;
  else if (unit == "T" || unit == "t")
    shift = 40;
  else if (!unit.empty())
    return std::nullopt;
  if (shift && value > (UINT64_MAX >> shift)) return std::nullopt;
  return value << shift;
}

std::vector<std::string> LayoutNotes(const Volume& volume) {
  constexpr size_t kMaxLines = 20;
  std::vector<std::string> lines;
  for (const std::string& name : volume.layout().hidden()) {
    lines.push_back(name + ": hidden at the mount root: the name belongs to a ckptfs view");
  }
  const std::vector<std::string>& notes = volume.layout().notes();
  for (size_t i = 0; i < notes.size() && i < kMaxLines; ++i) lines.push_back(notes[i]);
  if (notes.size() > kMaxLines) {
    lines.push_back("... and " + std::to_string(notes.size() - kMaxLines) +
                    " more tensors left out of some view (see ckptfs inspect)");
  }
  return lines;
}

std::string MountSummary(const Volume& volume, const std::string& mountpoint,
                         const std::string& disk_cache, const std::string& log) {
  const Checkpoint& ckpt = volume.checkpoint();
  const Layout& layout = volume.layout();
  std::string views;
  for (uint64_t ino : layout.Children(Layout::kRoot)) {
    const Node& node = *layout.Find(ino);
    const std::string name(node.name());
    if (name == "model.safetensors" || name == "pytorch_model.bin" || name == "tensors" ||
        name == "shards" || name == "pytorch_model") {
      views += (views.empty() ? "" : " ") + name + (node.kind == NodeKind::kDirectory ? "/" : "");
    }
  }
  std::vector<std::string> lines = {
      "ckptfs: mounted " + ckpt.source_path + " at " + mountpoint + " (read-only)",
      "  format   " +
          std::string(ckpt.format == CheckpointFormat::kTorch ? "torch.save" : "safetensors") +
          ", " + std::to_string(ckpt.shards.size()) + " shard(s)" +
          (ckpt.index.empty() ? "" : ", index " + ckpt.index[0].name) + ", " +
          std::to_string(ckpt.others.size()) + " other file(s)",
      "  tensors  " + std::to_string(ckpt.tensors.size()) + ", " +
          HumanBytes(ckpt.TotalTensorBytes()),
      "  views    " + views,
      "  cache    " + HumanBytes(volume.codec().options().cache_bytes) + " in memory" +
          (disk_cache.empty() ? "" : ", on disk in " + disk_cache),
      "  log      " + log,
  };
  for (const std::string& note : LayoutNotes(volume)) lines.push_back("  note     " + note);
  std::string out;
  // Names in SOURCE may hold control characters: each line stays one line.
  for (const std::string& line : lines) out += EscapeControlChars(line) + "\n";
  return out;
}

void PrintRefusal(const Status& status) {
  // Status messages are escaped already; escaping again changes nothing.
  std::fprintf(stderr, "ckptfs: %s\n", EscapeControlChars(status.message()).c_str());
}

int ExitCodeForOpenFailure(const Status& status) {
  return status.code() == Status::Code::kIoError ? 1 : 2;
}

int RunInspect(const std::string& source, bool json, const CodecOptions& codec,
               const RemoteOptions& remote) {
  int rc = 0;
  auto volume = OpenOrReport(source, codec, remote, &rc);
  if (!volume.ok()) return rc;
  if (json) {
    std::puts(InspectJson((*volume)->checkpoint())
                  .dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
                  .c_str());
  } else {
    PrintInspectTable((*volume)->checkpoint());
  }
  return 0;
}

int RunVerify(const std::string& source, const CodecOptions& codec, const RemoteOptions& remote) {
  int rc = 0;
  auto volume = OpenOrReport(source, codec, remote, &rc);
  if (!volume.ok()) return rc;
  (*volume)->codec().StartWorkers();  // remote sources fetch ahead in parallel
  // Structure is sound (Open validated every header and frame index); now decode or read
  // every stored byte once, reporting each damaged frame or unreadable file, one line each.
  const Checkpoint& ckpt = (*volume)->checkpoint();
  size_t damaged = 0;
  auto report = [&](const Status& s) {
    PrintRefusal(s);
    ++damaged;
  };
  for (const auto* group : {&ckpt.shards, &ckpt.index, &ckpt.others}) {
    for (const StoredFile& f : *group) {
      if (const auto* zstd = dynamic_cast<const ZstdSource*>(f.source.get())) {
        zstd->VerifyAll(report);
      } else if (Status s = ReadEverything(*f.source); !s.ok()) {
        report(s);
      }
    }
  }
  // torch.save records carry a CRC-32 of each storage: check what the zip promised.
  for (const Storage& s : ckpt.storages) {
    if (!s.has_crc32 || damaged) continue;
    Result<uint32_t> crc = ReadStorageCrc(ckpt, s);
    if (!crc.ok()) {
      report(crc.status());
    } else if (crc.value() != s.crc32) {
      char line[160];
      std::snprintf(line, sizeof(line),
                    ": storage at byte %llu (%llu bytes) has CRC-32 %08x, the zip says %08x",
                    static_cast<unsigned long long>(s.offset),
                    static_cast<unsigned long long>(s.size), crc.value(), s.crc32);
      report(Status::Corruption(ckpt.shards[s.shard].name + line));
    }
  }
  if (damaged) return 2;
  std::printf("%s: ok (%zu shards, %zu tensors, %s)\n", ckpt.source_path.c_str(),
              ckpt.shards.size(), ckpt.tensors.size(), HumanBytes(ckpt.TotalTensorBytes()).c_str());
  return 0;
}

int RunPack(const std::string& source, const std::string& dest, int level, uint64_t frame_size,
            uint64_t shard_size, const RemoteOptions& remote) {
  int rc = 0;
  // Packing reads every byte once, front to back: a small cache is plenty.
  CodecOptions codec;
  codec.cache_bytes = 64u << 20;
  auto volume = OpenOrReport(source, codec, remote, &rc);
  if (!volume.ok()) return rc;
  (*volume)->codec().StartWorkers();  // remote sources fetch ahead in parallel
  PackOptions options;
  options.level = level;
  options.frame_size = frame_size;
  options.shard_size = shard_size;
  const bool tty = ::isatty(2);
  if (tty) {
    options.progress = [](uint64_t done, uint64_t total) {
      std::fprintf(stderr, "\rpack: %s of %s (%.0f%%)   ", HumanBytes(done).c_str(),
                   HumanBytes(total).c_str(),
                   total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0);
    };
  }
  Status s = PackCheckpoint((*volume)->checkpoint(), dest, options);
  if (tty) std::fputc('\n', stderr);
  if (!s.ok()) {
    PrintRefusal(s);
    return s.code() == Status::Code::kIoError ? 1 : 2;
  }
  std::printf("%s: packed %zu tensors into %s\n", (*volume)->checkpoint().source_path.c_str(),
              (*volume)->checkpoint().tensors.size(), dest.c_str());
  return 0;
}

int RunUmount(const std::string& path) {
  // Judged from the mount table, never by touching the mount: a dead daemon's mount fails
  // every stat with ENOTCONN and a hung one blocks it. realpath(3) of the parent still
  // resolves symlinks on the way to it.
  std::string mountpoint = AbsolutePath(path);
  if (mountpoint != "/") {
    char parent[PATH_MAX];
    const size_t slash = mountpoint.rfind('/');
    if (::realpath(slash == 0 ? "/" : mountpoint.substr(0, slash).c_str(), parent) != nullptr) {
      mountpoint =
          (std::string(parent) == "/" ? "" : std::string(parent)) + mountpoint.substr(slash);
    }
  }
  const std::optional<MountEntry> mount = FindMount(mountpoint);
  if (!mount) {
    PrintRefusal(Status::InvalidArgument(mountpoint + ": not a mount point"));
    return 2;
  }
  // fusermount3 unmounts any FUSE mount of this user, and as root umount2 anything at all.
  if (mount->fstype != "fuse.ckptfs") {
    PrintRefusal(Status::InvalidArgument(mountpoint + ": not a ckptfs mount (" + mount->fstype +
                                         "); use umount(8) or fusermount3 -u"));
    return 2;
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execlp("fusermount3", "fusermount3", "-u", mountpoint.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  if (pid > 0 && ::waitpid(pid, &status, 0) == pid && WIFEXITED(status)) {
    if (WEXITSTATUS(status) == 0) return 0;
    if (WEXITSTATUS(status) != 127) return 1;  // fusermount3 already said why
  }
  // No fusermount3 on this machine: root can unmount directly.
  if (::umount2(mountpoint.c_str(), 0) == 0) return 0;
  PrintRefusal(Status::IoError(mountpoint + ": cannot unmount: " + std::strerror(errno)));
  return 1;
}

}  // namespace ckptfs
