// Helpers for unit tests: safetensors files and checkpoint directories built in memory.
#pragma once

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/cache/read_context.h"
#include "core/checkpoint/checkpoint.h"
#include "core/encoding/safetensors.h"
#include "core/encoding/zip.h"
#include "core/source/byte_source.h"

namespace ckptfs::testing {

// One ReadContext for tests that do not care about caching (no workers started).
inline std::shared_ptr<ReadContext> TestContextPtr() {
  static auto context = std::make_shared<ReadContext>(ReadOptions{.cache_bytes = 64u << 20});
  return context;
}
inline ReadContext& TestContext() { return *TestContextPtr(); }

struct TestTensor {
  std::string name;
  Dtype dtype;
  std::vector<uint64_t> shape;
};

// Deterministic bytes for a tensor, different per name so mix-ups show.
// A read taking lent spans, as a mount's reply does: appends them to `lent`. A source that
// fills the reader's memory instead lends nothing: Unsupported.
inline Status Lend(const ByteSource& source, uint64_t offset, uint64_t length,
                   std::vector<LentBytes>* lent) {
  class Sink final : public ReadSink {
   public:
    explicit Sink(std::vector<LentBytes>* to, uint64_t n) : ReadSink(to), n_(n) {}
    std::span<uint8_t> Fill() override {
      scratch_.resize(n_);
      filled = true;
      return scratch_;
    }
    bool filled = false;

   private:
    uint64_t n_;
    std::vector<uint8_t> scratch_;
  } sink(lent, length);
  CKPTFS_RETURN_IF_ERROR(source.Read(offset, length, sink));
  if (sink.filled) return Status::Unsupported(source.Name() + ": copied, not lent");
  return Status::Ok();
}

inline std::string TensorBytes(const TestTensor& t) {
  std::string out(*TensorByteSize(t.dtype, t.shape), '\0');
  uint32_t x = 2166136261u;
  for (char c : t.name) x = (x ^ static_cast<uint8_t>(c)) * 16777619u;
  for (char& c : out) {
    x = x * 1103515245u + 12345u;
    c = static_cast<char>(x >> 16);
  }
  return out;
}

// A valid safetensors file holding `tensors` in the given order.
inline std::string MakeSafetensors(const std::vector<TestTensor>& tensors,
                                   const Metadata& metadata = {}) {
  std::vector<TensorEntry> entries;
  std::string data;
  for (const TestTensor& t : tensors) {
    std::string bytes = TensorBytes(t);
    entries.push_back({t.name, t.dtype, t.shape, data.size(), data.size() + bytes.size()});
    data += bytes;
  }
  return BuildSafetensorsHeader(entries, metadata) + data;
}

// A safetensors file whose JSON header is exactly `json` (padded), followed by `data_bytes`
// zero bytes: for malformed headers.
inline std::string RawSafetensors(const std::string& json, size_t data_bytes) {
  std::string header = json;
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  return out + header + std::string(data_bytes, '\0');
}

// A SourceDir over in-memory files.
inline SourceDir MemoryDir(std::map<std::string, std::string> files) {
  SourceDir dir;
  dir.path = "mem";
  for (const auto& kv : files) dir.files.push_back(kv.first);
  dir.open = [files](const std::string& name) -> Result<std::unique_ptr<ByteSource>> {
    auto it = files.find(name);
    if (it == files.end()) return Status::NotFound(name + ": no such file");
    return std::unique_ptr<ByteSource>(new MemorySource(name, it->second));
  };
  return dir;
}

inline std::string IndexJson(const std::vector<std::pair<std::string, std::string>>& map) {
  std::string out = "{\"metadata\": {}, \"weight_map\": {";
  for (size_t i = 0; i < map.size(); ++i) {
    out += (i ? ", \"" : "\"") + map[i].first + "\": \"" + map[i].second + "\"";
  }
  return out + "}}";
}

// A stored (uncompressed) zip of `records` (name, bytes), laid out as Layout lays out
// pytorch_model.bin and as torch.save writes: what torch file tests parse.
inline std::string MakeZip(const std::vector<std::pair<std::string, std::string>>& records) {
  std::string out;
  std::vector<ZipRecord> meta;
  std::vector<uint64_t> offsets;
  for (const auto& [name, bytes] : records) {
    meta.push_back({name, bytes.size(), 0});
    offsets.push_back(out.size());
    out += ZipLocalHeader(meta.back(), out.size());
    out += bytes;
  }
  return out + ZipCentralDirectory(meta, offsets, out.size());
}

// Peak RSS (KiB) since the last ResetPeakRss(), from VmHWM.
inline long PeakRssKib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

// Resets VmHWM to the current RSS (writing 5 to clear_refs).
inline void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

// The text of `path` in the repository (CKPTFS_SOURCE_DIR), "" if it cannot be read: for
// the tests that keep docs and build from drifting apart.
inline std::string ReadRepoFile(const std::string& path) {
  std::ifstream in(std::string(CKPTFS_SOURCE_DIR) + "/" + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace ckptfs::testing
