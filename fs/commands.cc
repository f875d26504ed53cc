#include "fs/commands.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "core/checkpoint/format_reader.h"
#include "core/checkpoint/model.h"
#include "core/checkpoint/natural_order.h"
#include "core/crc/zip_crc.h"
#include "core/encoding/safetensors.h"
#include "core/format/formats.h"
#include "core/pack/pack.h"
#include "core/run/run_tree.h"
#include "core/volume/verify.h"
#include "core/volume/volume.h"
#include "fs/preflight.h"

namespace ckptfs {
namespace {

Result<std::unique_ptr<Volume>> OpenOrReport(const std::string& source,
                                             const ReadOptions& read_options,
                                             const OpenOptions& open, int* exit_code) {
  auto volume = Volume::Open(source, read_options, ZipCrcMode::kAuto, open);
  if (!volume.ok()) {
    PrintRefusal(volume.status());
    *exit_code = ExitCodeForOpenFailure(volume.status());
  }
  return volume;
}

// OpenOrReport for pack and verify, which take one checkpoint: a run SOURCE (no checkpoint
// at its top) is refused naming the entry to take instead; asked only once opening failed,
// so a checkpoint costs no second listing.
Result<std::unique_ptr<Volume>> OpenOneOrReport(const std::string& source, std::string_view verb,
                                                const ReadOptions& read_options,
                                                const OpenOptions& open, int* exit_code) {
  auto volume = Volume::Open(source, read_options, ZipCrcMode::kAuto, open);
  if (volume.ok()) return volume;
  if (std::optional<Status> run = RunInsteadOfCheckpoint(source, verb, read_options, open.remote)) {
    PrintRefusal(*run);
    *exit_code = 2;
    return *run;
  }
  PrintRefusal(volume.status());
  *exit_code = ExitCodeForOpenFailure(volume.status());
  return volume;
}

// Decoded bytes per stored byte; 1 for a plain (or empty) file.
double Ratio(const StoredFile& f) {
  const uint64_t stored = f.source->StoredSize();
  return stored ? static_cast<double>(f.source->Size()) / static_cast<double>(stored) : 1.0;
}

// "1234567" -> "1,234,567": parameter counts are read digit group by digit group.
std::string Grouped(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// Bytes of the tensor's elements, also for a strided view (whose `size` is 0).
uint64_t ViewBytes(const Tensor& t) {
  return t.contiguous() ? t.size : TensorByteSize(t.dtype, t.shape).value_or(0);
}

// Elements of a shape (1 for a scalar); shapes were checked against byte sizes at open,
// so this cannot overflow for a tensor that has bytes, and saturates for one that does not.
uint64_t Elements(const std::vector<uint64_t>& shape) {
  return ElementCount(shape).value_or(UINT64_MAX);
}

// Parameters (tensor elements) of the whole checkpoint and per dtype. Tied weights count
// once per tensor name, as summing numel() over a state dict does.
struct ParameterCount {
  struct PerDtype {
    size_t tensors = 0;
    uint64_t parameters = 0;
    uint64_t bytes = 0;
  };
  uint64_t total = 0;
  std::map<std::string, PerDtype> by_dtype;
};

ParameterCount CountParameters(const Checkpoint& ckpt) {
  ParameterCount count;
  for (size_t i = 0; i < ckpt.tensors.size(); ++i) {
    const Tensor& t = ckpt.tensors[i];
    const TypeShown type = TypeOf(ckpt, i);
    ParameterCount::PerDtype& d = count.by_dtype[type.dtype];
    const uint64_t n = Elements(type.shape);
    ++d.tensors;
    d.parameters += n;
    d.bytes += ViewBytes(t);
    count.total += n;
  }
  return count;
}

// Tensor indices in natural name order (layers.2 before layers.10), for people.
std::vector<uint32_t> NaturalTensorOrder(const Checkpoint& ckpt) {
  std::vector<uint32_t> order(ckpt.tensors.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return NaturalLess(ckpt.tensors[a].name, ckpt.tensors[b].name);
  });
  return order;
}

// What the merged views hold (core/checkpoint/model.h), for inspect's "model" line.
std::string ModelLine(const Checkpoint& ckpt) {
  const ModelView& m = ckpt.model;
  if (m.whole) {
    return std::string("every tensor") +
           (m.rule.empty() ? " (--model-key to choose a sub-tree)" : " (" + m.rule + ")");
  }
  const std::string what = !m.key.empty()                 ? m.key
                           : m.rule == kBlocksLeftOutRule ? m.rule
                                                          : "every tensor but the training state";
  return what + " (" + std::to_string(m.tensors) + " of " + std::to_string(ckpt.tensors.size()) +
         " tensors; --model-key to choose)";
}

nlohmann::json ModelJson(const Checkpoint& ckpt) {
  const ModelView& m = ckpt.model;
  return {{"key", m.key.empty() ? nlohmann::json(nullptr) : nlohmann::json(m.key)},
          {"rule", m.rule.empty() ? nlohmann::json(nullptr) : nlohmann::json(m.rule)},
          {"whole", m.whole},
          {"prefix_stripped", m.strip ? m.key + "." : ""},
          {"tensor_count", m.tensors}};
}

// SOURCE as messages name it: an hf:// one with the commit its revision was resolved to
// (the checkpoint's source_path), so what was mounted can be told after a branch moves.
std::string SourceShown(const std::string& source, const Checkpoint& ckpt) {
  return source.rfind("hf://", 0) == 0 ? ckpt.source_path : source;
}

nlohmann::json ZipCrcInspectJson(const ZipCrcStatus& crcs) {
  const char* state = crcs.state == ZipCrcStatus::State::kKnown     ? "known"
                      : crcs.state == ZipCrcStatus::State::kPending ? "pending"
                                                                    : "not_computed";
  return {{"state", state}, {"origin", crcs.origin}, {"sidecar", crcs.sidecar_path}};
}

// `source` is SOURCE as the user named it: a file SOURCE is named, not its directory.
nlohmann::json InspectJson(const std::string& source, const Checkpoint& ckpt,
                           const ZipCrcStatus& crcs) {
  using nlohmann::json;
  json shards = json::array();
  for (const StoredFile& s : ckpt.shards) {
    shards.push_back({{"file", s.name},
                      {"stored_as", s.stored_name},
                      {"storage", s.source->StorageKind()},
                      {"bytes", s.source->Size()},
                      {"stored_bytes", s.source->StoredSize()},
                      {"ratio", Ratio(s)}});
  }
  json tensors = json::array();
  for (uint32_t i : NaturalTensorOrder(ckpt)) {
    const Tensor& t = ckpt.tensors[i];
    const TypeShown type = TypeOf(ckpt, i);
    json entry = {{"name", t.name},        {"dtype", type.dtype},
                  {"shape", type.shape},   {"parameters", Elements(type.shape)},
                  {"bytes", ViewBytes(t)}, {"shard", ShardFile(ckpt, t.shard).name},
                  {"offset", t.offset}};
    if (!TensorKeys(ckpt).empty()) entry["tf_key"] = TensorKeys(ckpt)[i];
    if (!ckpt.model.whole) entry["in_model"] = t.in_model;
    if (!t.contiguous()) {
      // A strided view: where its storage starts and how it steps through it.
      entry["offset"] = ckpt.storages[t.storage].offset;
      entry["storage_offset"] = t.storage_offset;
      entry["stride"] = t.stride;
    }
    tensors.push_back(std::move(entry));
  }
  const ParameterCount params = CountParameters(ckpt);
  json by_dtype = json::object();
  for (const auto& [dtype, d] : params.by_dtype) {
    by_dtype[dtype] = {{"tensors", d.tensors}, {"parameters", d.parameters}, {"bytes", d.bytes}};
  }
  json metadata = json::object();
  for (const auto& [k, v] : ckpt.metadata) metadata[k] = v;
  json out = {{"source", SourceShown(source, ckpt)},
              {"format", std::string(FormatOf(ckpt).name)},
              {"index", ckpt.index.empty() ? json(nullptr) : json(ckpt.index[0].name)},
              {"shards", shards},
              {"tensor_count", ckpt.tensors.size()},
              {"tensor_bytes", ckpt.TotalTensorBytes()},
              {"model", ModelJson(ckpt)},
              {"parameter_count", params.total},
              {"parameters_by_dtype", by_dtype},
              {"metadata", metadata},
              {"zip_crc", ZipCrcInspectJson(crcs)},
              {"tensors", tensors}};
  if (ckpt.weights_only) out["weights_only"] = json::parse(WeightsOnlyJson(*ckpt.weights_only));
  // What only the format knows (DeepSpeed: the tag's ZeRO stage and world sizes).
  if (const auto lines = FormatOf(ckpt).inspect) {
    for (const auto& [label, text] : lines(ckpt)) out[label] = text;
  }
  return out;
}

// Every name inspect, verify and pack print comes from a file or its metadata: printed
// through Shown (control characters escaped, status.h), so a tensor name holding an ESC or
// a newline cannot drive the terminal or forge a table row.
std::string Shown(std::string_view name) { return EscapeControlChars(name); }

void PrintShardLine(const StoredFile& s) {
  const std::string name = Shown(s.stored_name);
  if (s.source->StoredSize() == s.source->Size() && s.stored_name == s.name) {
    std::printf("  %s  %s  (%s)\n", name.c_str(), HumanBytes(s.source->Size()).c_str(),
                s.source->StorageKind().c_str());
    return;
  }
  std::printf("  %s  %s stored, %s decoded, ratio %.2f  (%s)\n", name.c_str(),
              HumanBytes(s.source->StoredSize()).c_str(), HumanBytes(s.source->Size()).c_str(),
              Ratio(s), s.source->StorageKind().c_str());
}

void PrintInspectTable(const std::string& source, const Checkpoint& ckpt,
                       const ZipCrcStatus& crcs) {
  std::printf("source   %s\n", Shown(SourceShown(source, ckpt)).c_str());
  std::printf("format   %s\n", std::string(FormatOf(ckpt).name).c_str());
  std::printf("index    %s\n",
              ckpt.index.empty() ? "(single file)" : Shown(ckpt.index[0].name).c_str());
  std::printf("shards   %zu\n", ckpt.shards.size());
  for (const StoredFile& s : ckpt.shards) PrintShardLine(s);
  std::printf("tensors  %zu, %s\n", ckpt.tensors.size(),
              HumanBytes(ckpt.TotalTensorBytes()).c_str());
  std::printf("model    %s\n", Shown(ModelLine(ckpt)).c_str());
  if (ckpt.weights_only) {
    std::printf("torch.load(weights_only=True): %s\n",
                Shown(WeightsOnlyLine(*ckpt.weights_only)).c_str());
  }
  if (const auto lines = FormatOf(ckpt).inspect) {
    for (const auto& [label, text] : lines(ckpt)) {
      std::printf("%-8s %s\n", Shown(label).c_str(), Shown(text).c_str());
    }
  }
  const ParameterCount params = CountParameters(ckpt);
  std::printf("params   %s\n", Grouped(params.total).c_str());
  for (const auto& [dtype, d] : params.by_dtype) {
    std::printf("  %-8s %s in %zu tensor(s), %s\n", dtype.c_str(), Grouped(d.parameters).c_str(),
                d.tensors, HumanBytes(d.bytes).c_str());
  }
  std::printf("zip CRCs: %s\n\n", crcs.Describe().c_str());
  // Names escaped once, for the width and the rows alike.
  std::vector<std::string> names(ckpt.tensors.size());
  size_t width = 6;
  for (size_t i = 0; i < ckpt.tensors.size(); ++i) {
    names[i] = Shown(ckpt.tensors[i].name);
    width = std::max(width, names[i].size());
  }
  std::printf("%-*s  %-8s  %-20s  %12s  %s\n", static_cast<int>(width), "TENSOR", "DTYPE", "SHAPE",
              "BYTES", "SHARD");
  for (uint32_t i : NaturalTensorOrder(ckpt)) {
    const Tensor& t = ckpt.tensors[i];
    const TypeShown type = TypeOf(ckpt, i);
    std::printf("%-*s  %-8s  %-20s  %12llu  %s%s\n", static_cast<int>(width), names[i].c_str(),
                type.dtype.c_str(), ShapeToJson(type.shape).c_str(),
                static_cast<unsigned long long>(ViewBytes(t)),
                Shown(ShardFile(ckpt, t.shard).name).c_str(),
                t.contiguous() ? "" : "  (strided: only in pytorch_model.bin)");
  }
}

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// "3.2 s", "4:05", "1:02:03": how long something took or will take.
std::string Duration(double seconds) {
  char buf[32];
  if (seconds < 60) {
    std::snprintf(buf, sizeof(buf), "%.1f s", seconds);
  } else {
    const auto s = static_cast<unsigned long long>(seconds);
    if (s < 3600) {
      std::snprintf(buf, sizeof(buf), "%llu:%02llu", s / 60, s % 60);
    } else {
      std::snprintf(buf, sizeof(buf), "%llu:%02llu:%02llu", s / 3600, s / 60 % 60, s % 60);
    }
  }
  return buf;
}

// Megabytes (10^6 bytes) per second, as transfer rates are usually given.
double MegabytesPerSecond(uint64_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / 1e6 / seconds : 0;
}

// One progress line on stderr, rewritten in place at most 5 times a second, and only
// when stderr is a terminal (logs and pipes get the final line alone).
class ProgressLine {
 public:
  explicit ProgressLine(std::string what) : what_(std::move(what)), tty_(::isatty(2) == 1) {}
  ~ProgressLine() { Clear(); }
  bool active() const { return tty_; }

  void Update(uint64_t done, uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (!tty_ || (shown_ && now - last_ < std::chrono::milliseconds(200) && done < total)) return;
    last_ = now;
    shown_ = true;
    const double elapsed = Seconds(now - start_);
    const double rate = MegabytesPerSecond(done, elapsed);
    std::string eta = "--";
    if (rate > 0 && total >= done) {
      eta = Duration(static_cast<double>(total - done) / 1e6 / rate);
    }
    std::fprintf(stderr, "\r%s: %s of %s (%.0f%%), %.1f MB/s, ETA %s\033[K", what_.c_str(),
                 HumanBytes(done).c_str(), HumanBytes(total).c_str(),
                 total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0,
                 rate, eta.c_str());
    std::fflush(stderr);
  }
  // Erases the line, so that what follows starts on a clean one.
  void Clear() {
    if (shown_) std::fputs("\r\033[K", stderr);
    shown_ = false;
  }
  double Elapsed() const { return Seconds(std::chrono::steady_clock::now() - start_); }

 private:
  std::string what_;
  bool tty_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_;
};

// verify has read every byte: the zip CRCs the mount lacks cost one more read of the
// tensors (from the page cache or the block cache, mostly), and save every later mount a
// background pass. Best effort: a sidecar not written is one line, not a failed verify.
void SaveZipCrcs(const Volume& volume, const RemoteOptions& remote) {
  const ZipCrcStatus& status = volume.zip_crcs();
  if (status.state == ZipCrcStatus::State::kKnown || !status.key) return;
  const std::atomic<bool> never{false};
  auto crcs = ComputeCrcs(volume.checkpoint(), status.missing, never, nullptr);
  const CrcStore store(CrcSidecarDir(remote.cache_dir));
  Status saved = crcs.ok() ? store.Save(*status.key, crcs.value()) : crcs.status();
  if (!saved.ok()) {
    PrintRefusal(Status::IoError("zip CRCs not saved: " + saved.message()));
    return;
  }
  std::printf("zip CRCs: saved in %s (pytorch_model.bin passes unzip -t from the next mount)\n",
              Shown(status.sidecar_path).c_str());
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

namespace {

// The views at the mount root, as the summary and the log line name them ("tensors/ ...").
std::string ViewNames(const Volume& volume) {
  const Checkpoint& ckpt = volume.checkpoint();
  const Layout& layout = volume.layout();
  std::string views;
  for (uint64_t ino : layout.Children(Layout::kRoot)) {
    const Node& node = *layout.Find(ino);
    const std::string name(node.name());
    if (name == ckpt.safetensors_view || name == ckpt.torch_view || name == "tensors" ||
        name == "shards" || name == "pytorch_model") {
      views += (views.empty() ? "" : " ") + name + (node.kind == NodeKind::kDirectory ? "/" : "");
    }
  }
  return views;
}

std::string FormatLine(const Checkpoint& ckpt) {
  return std::string(FormatOf(ckpt).title) + ", " + std::to_string(ckpt.shards.size()) +
         " shard(s)" + (ckpt.index.empty() ? "" : ", index " + ckpt.index[0].name) + ", " +
         std::to_string(ckpt.others.size()) + " other file(s)";
}

std::string CacheLine(const Volume& volume, const std::string& disk_cache) {
  return HumanBytes(volume.context().options().cache_bytes) + " in memory" +
         (disk_cache.empty() ? "" : ", on disk in " + disk_cache);
}

}  // namespace

std::string MountSummary(const Volume& volume, const std::string& source,
                         const std::string& mountpoint, const std::string& disk_cache,
                         const std::string& log) {
  const Checkpoint& ckpt = volume.checkpoint();
  std::vector<std::string> lines = {
      "ckptfs: mounted " + SourceShown(source, ckpt) + " at " + mountpoint + " (read-only)",
      "  format   " + FormatLine(ckpt),
      "  tensors  " + std::to_string(ckpt.tensors.size()) + ", " +
          HumanBytes(ckpt.TotalTensorBytes()),
      "  views    " + ViewNames(volume),
      "  model    " + ModelLine(ckpt),
      "  cache    " + CacheLine(volume, disk_cache),
      "  log      " + log,
  };
  for (const std::string& note : LayoutNotes(volume)) lines.push_back("  note     " + note);
  std::string out;
  // Names in SOURCE may hold control characters: each line stays one line.
  for (const std::string& line : lines) out += EscapeControlChars(line) + "\n";
  return out;
}

std::string MountLogLine(const Volume& volume, const std::string& source,
                         const std::string& mountpoint, const std::string& disk_cache) {
  const Checkpoint& ckpt = volume.checkpoint();
  return "mounted " + SourceShown(source, ckpt) + " at " + mountpoint + ": " + FormatLine(ckpt) +
         "; " + std::to_string(ckpt.tensors.size()) + " tensors, " +
         HumanBytes(ckpt.TotalTensorBytes()) + "; views " + ViewNames(volume) + "; cache " +
         CacheLine(volume, disk_cache);
}

std::string RunLogLine(const RunTree& run, const std::string& mountpoint) {
  return "mounted " + run.path() + " at " + mountpoint + ": " +
         std::to_string(run.EntryNames().size()) +
         (run.Pipeline() ? " component(s) of one model tree" : " checkpoint(s) of a run") +
         "; cache " + HumanBytes(run.context().options().cache_bytes) + " in memory";
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

std::string RunSummary(const RunTree& run, const std::string& mountpoint, const std::string& log) {
  const std::vector<std::string> names = run.EntryNames();
  auto or_none = [](const std::string& name) { return name.empty() ? "none" : name; };
  std::vector<std::string> lines = {
      "ckptfs: mounted " + run.path() + " at " + mountpoint + " (read-only, a " +
          (run.Pipeline() ? "model tree of components)" : "training run)"),
      run.Pipeline() ? "  pipeline " + std::to_string(names.size()) + " component(s)"
                     : "  run      " + std::to_string(names.size()) + " checkpoint(s), latest " +
                           or_none(run.Latest()) + ", best " + or_none(run.Best()),
  };
  if (!run.pin().empty()) {
    lines.push_back("  root     checkpoint " + run.pin() +
                    (run.pin() == "latest" || run.pin() == "best" ? " (follows the run)" : ""));
  }
  lines.push_back("  cache    " + HumanBytes(run.context().options().cache_bytes) +
                  " in memory, shared by every checkpoint");
  lines.push_back("  log      " + log);
  constexpr size_t kMaxSkipped = 10;
  const std::vector<std::string> skipped = run.Skipped();
  for (size_t i = 0; i < skipped.size() && i < kMaxSkipped; ++i) {
    lines.push_back("  skipped  " + skipped[i]);
  }
  std::string out;
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

int RunInspect(const std::string& source, bool json, const ReadOptions& options,
               const OpenOptions& open) {
  // What opening warns about (a server that gives nothing to tell a replaced object by) is
  // part of what inspect reports: `warning` lines after the table, "warnings" in JSON.
  auto warnings = std::make_shared<std::vector<std::string>>();
  auto warnings_mu = std::make_shared<std::mutex>();
  ReadOptions read_options = options;
  read_options.warn = [warnings, warnings_mu](const std::string& line) {
    std::lock_guard<std::mutex> lock(*warnings_mu);
    warnings->push_back(line);
  };
  auto print_warnings = [&] {
    std::lock_guard<std::mutex> lock(*warnings_mu);
    for (const std::string& line : *warnings) {
      std::printf("warning  %s\n", EscapeControlChars(line).c_str());
    }
  };
  // One listing of SOURCE serves both questions (a run? which checkpoint?): an hf:// SOURCE
  // costs a revision lookup and a tree listing each time, as a mount lists once.
  auto context = std::make_shared<ReadContext>(read_options);
  std::optional<SourceDir> listed;
  if (std::optional<int> run_rc = InspectIfRun(source, json, *context, open, &listed)) {
    if (json) {  // the run's JSON is printed already: warnings go beside it
      std::lock_guard<std::mutex> lock(*warnings_mu);
      for (const std::string& line : *warnings) {
        std::fprintf(stderr, "ckptfs: warning: %s\n", EscapeControlChars(line).c_str());
      }
    } else {
      print_warnings();
    }
    return *run_rc;
  }
  int rc = 0;
  auto volume = listed ? Volume::OpenListed(*listed, source, context, ZipCrcMode::kAuto, open)
                       : OpenOrReport(source, read_options, open, &rc);
  if (listed && !volume.ok()) {
    PrintRefusal(volume.status());
    rc = ExitCodeForOpenFailure(volume.status());
  }
  if (!volume.ok()) return rc;
  if (json) {
    nlohmann::json out = InspectJson(source, (*volume)->checkpoint(), (*volume)->zip_crcs());
    {
      std::lock_guard<std::mutex> lock(*warnings_mu);
      if (!warnings->empty()) out["warnings"] = *warnings;
    }
    std::puts(out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    PrintInspectTable(source, (*volume)->checkpoint(), (*volume)->zip_crcs());
    print_warnings();
  }
  return 0;
}

int RunVerify(const std::string& source, const ReadOptions& read_options, const OpenOptions& open) {
  int rc = 0;
  auto volume = OpenOneOrReport(source, "verify", read_options, open, &rc);
  if (!volume.ok()) return rc;
  (*volume)->context().StartWorkers();  // remote sources fetch ahead in parallel
  // Structure is sound (Open validated every header and frame index); now decode or read
  // every stored byte once, reporting each damaged frame or unreadable file, one line each.
  const Checkpoint& ckpt = (*volume)->checkpoint();
  ProgressLine progress("verify");
  const VerifyResult result = VerifyCheckpoint(
      ckpt,
      [&](const Status& s) {
        progress.Clear();
        PrintRefusal(s);
      },
      [&](uint64_t done, uint64_t total) { progress.Update(done, total); });
  progress.Clear();
  if (result.damaged) return 2;
  const uint64_t total = result.bytes_read;
  const double seconds = progress.Elapsed();
  // SOURCE as named: a file, not the directory it is in.
  std::printf("%s: ok (%zu %s, %zu tensors, %s; %s read in %s, %.1f MB/s)\n", Shown(source).c_str(),
              ckpt.shards.size(), ckpt.shards.size() == 1 ? "shard" : "shards", ckpt.tensors.size(),
              HumanBytes(ckpt.TotalTensorBytes()).c_str(), HumanBytes(total).c_str(),
              Duration(seconds).c_str(), MegabytesPerSecond(total, seconds));
  SaveZipCrcs(**volume, open.remote);
  return 0;
}

namespace {

// What `pack` made, read back from DEST (empty before): its .zst shards, the first and
// last when there are more than two, and how many files it copied as they are. The
// zip CRC sidecar is ckptfs's own and not counted.
std::string WhatPackMade(const std::string& dest) {
  std::vector<std::string> shards;
  size_t copied = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dest, ec)) {
    const std::string name = entry.path().filename();
    if (name.ends_with(".zst")) {
      shards.push_back(name);
    } else if (name != kPackedCrcFile) {
      ++copied;
    }
  }
  std::sort(shards.begin(), shards.end());
  std::string made;
  if (shards.size() <= 2) {
    for (const std::string& name : shards) made += (made.empty() ? "" : " ") + name;
  } else {
    made = shards.front() + " ... " + shards.back();
  }
  made += " (" + std::to_string(shards.size()) + (shards.size() == 1 ? " shard)" : " shards)");
  if (copied)
    made += " and " + std::to_string(copied) + (copied == 1 ? " file" : " files") + " copied";
  return made;
}

}  // namespace

int RunPack(const std::string& source, const std::string& dest, const PackOptions& options,
            const RemoteOptions& remote) {
  int rc = 0;
  // Packing reads every byte once, front to back: a small cache is plenty.
  ReadOptions read_options;
  read_options.cache_bytes = 64u << 20;
  auto volume = OpenOneOrReport(source, "pack", read_options, remote, &rc);
  if (!volume.ok()) return rc;
  (*volume)->context().StartWorkers();  // remote sources fetch ahead in parallel
  ProgressLine progress("pack");
  PackOptions with_progress = options;
  if (progress.active()) {
    with_progress.progress = [&](uint64_t done, uint64_t total) { progress.Update(done, total); };
  }
  PackSummary summary;
  const Checkpoint& ckpt = (*volume)->checkpoint();
  Status s = PackCheckpoint(ckpt, dest, with_progress, &summary);
  progress.Clear();
  if (s.ok()) s = WritePackedCrcs(dest, read_options, summary.range_crcs);
  if (!s.ok()) {
    PrintRefusal(s);
    return s.code() == Status::Code::kIoError ? 1 : 2;
  }
  const double seconds = progress.Elapsed();
  const double ratio = summary.compressed_bytes ? static_cast<double>(summary.decoded_bytes) /
                                                      static_cast<double>(summary.compressed_bytes)
                                                : 1.0;
  std::printf("%s: packed %zu tensors into %s: %s, %s -> %s (ratio %.2f) in %s, %.1f MB/s\n",
              Shown(source).c_str(), ckpt.tensors.size(), Shown(dest).c_str(),
              Shown(WhatPackMade(dest)).c_str(), HumanBytes(summary.decoded_bytes).c_str(),
              HumanBytes(summary.compressed_bytes).c_str(), ratio, Duration(seconds).c_str(),
              MegabytesPerSecond(summary.decoded_bytes, seconds));
  std::printf("mount it: ckptfs mount %s MOUNTPOINT\n", Shown(dest).c_str());
  return 0;
}

namespace {

// fusermount3's last line without its "fusermount3: " prefix.
std::string LastLine(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  text = text.substr(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1);
  const std::string prefix = "fusermount3: ";
  return text.rfind(prefix, 0) == 0 ? text.substr(prefix.size()) : text;
}

Status BusyStatus(const std::string& mountpoint) {
  return Status::IoError(mountpoint +
                         ": busy: a process has a file or directory open there (see fuser -vm " +
                         mountpoint + " or lsof " + mountpoint +
                         "); ckptfs umount -z detaches it now and ends it once they close");
}

}  // namespace

int RunUmount(const std::string& path, bool lazy) {
  const std::string mountpoint = MountTablePath(path);
  const std::optional<MountEntry> mount = FindMount(mountpoint);
  if (!mount) {
    PrintRefusal(Status::InvalidArgument(mountpoint + ": not mounted"));
    return 2;
  }
  // fusermount3 unmounts any FUSE mount of this user, and as root umount2 anything at all.
  if (mount->fstype != "fuse.ckptfs") {
    PrintRefusal(Status::InvalidArgument(mountpoint + ": not a ckptfs mount (" + mount->fstype +
                                         "); use umount(8) or fusermount3 -u"));
    return 2;
  }
  std::string err;
  const int rc = RunFusermount(mountpoint, lazy, &err);
  if (rc == 0) return 0;
  int error = 0;
  if (rc == 127) {
    // No fusermount3 on this machine: root can unmount directly.
    if (::umount2(mountpoint.c_str(), lazy ? MNT_DETACH : 0) == 0) return 0;
    error = errno;
  } else if (err.find("Device or resource busy") != std::string::npos) {
    error = EBUSY;
  }
  if (error == EBUSY) {
    PrintRefusal(BusyStatus(mountpoint));
  } else if (!FindMount(mountpoint)) {
    PrintRefusal(Status::InvalidArgument(mountpoint + ": not mounted"));  // raced another umount
    return 2;
  } else {
    PrintRefusal(Status::IoError(mountpoint + ": cannot unmount: " +
                                 (error ? std::string(std::strerror(error)) : LastLine(err))));
  }
  return 1;
}

}  // namespace ckptfs
