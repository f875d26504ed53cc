#include "core/checkpoint/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/checkpoint/format_reader.h"

namespace ckptfs {
std::vector<uint32_t> AlignedOrder(const Checkpoint& ckpt) {
  std::vector<uint32_t> order;
  order.reserve(ckpt.tensors.size());
  for (uint32_t i = 0; i < ckpt.tensors.size(); ++i) {
    if (ckpt.tensors[i].contiguous()) order.push_back(i);
  }
  // Tensors are sorted by name; a stable sort keeps that order within one element size.
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return DtypeSize(ckpt.tensors[a].dtype) > DtypeSize(ckpt.tensors[b].dtype);
  });
  return order;
}

uint64_t Checkpoint::TotalTensorBytes() const {
  uint64_t total = 0;
  for (const Tensor& t : tensors) total += t.size;
  return total;
}

namespace {

// JSON text laid out as nlohmann's dump(2) lays it out, token by token: strings, numbers
// and literals are copied as they are (the text is nlohmann's own dump, so they already
// read as dump would write them), whitespace outside strings is dropped, and "{", "[",
// "," and ":" get dump's newlines, indents and spaces. The same bytes as parse + dump(2)
// without the tree, whose JSON value per string, number or node costs 50 to 100 times its
// text (1M empty TF strings: 3 MB of state_json, 70 MiB of tree). Only the first
// kIndentLevels levels are laid out; deeper ones stay compact, as dump(-1) writes them: an
// indent per level makes a deep value's layout grow as its depth squared (a 30 KB Keras
// config nested 15,000 deep laid out to 880 MiB), where this keeps it within 12 times the
// compact text (a value and its comma, 2 bytes, become a newline and at most 20 spaces
// more). `emit(text)` or `emit(n, ' ')` receives the output; run once to count and once to
// write, the output is allocated once, at its size.
constexpr size_t kIndentLevels = 10;

template <typename Emit>
void IndentJson(std::string_view in, Emit&& emit) {
  size_t depth = 0;
  char last = '\0';  // the last byte emitted outside a string
  auto newline = [&] {
    emit(std::string_view("\n"));
    emit(2 * depth, ' ');
  };
  auto next_token = [&](size_t i) {
    while (i < in.size() && (in[i] == ' ' || in[i] == '\n' || in[i] == '\t' || in[i] == '\r')) ++i;
    return i < in.size() ? in[i] : '\0';
  };
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    const bool laid_out = depth <= kIndentLevels;  // the level `c` is on
    switch (c) {
      case '"': {
        size_t j = i + 1;
        while (j < in.size() && in[j] != '"') j += in[j] == '\\' ? 2 : 1;
        emit(in.substr(i, j + 1 - i));
        i = j;
        last = '"';
        break;
      }
      case '{':
      case '[':
        emit(in.substr(i, 1));
        last = c;
        if (next_token(i + 1) == (c == '{' ? '}' : ']')) break;  // "{}" and "[]" stay so
        ++depth;
        if (depth <= kIndentLevels) newline();
        break;
      case '}':
      case ']':
        if (last != (c == '}' ? '{' : '[')) {
          depth -= depth > 0 ? 1 : 0;
          if (laid_out) newline();
        }
        emit(in.substr(i, 1));
        last = c;
        break;
      case ',':
        emit(std::string_view(","));
        if (laid_out) newline();
        last = c;
        break;
      case ':':
        emit(laid_out ? std::string_view(": ") : std::string_view(":"));
        last = c;
        break;
      case ' ':
      case '\n':
      case '\t':
      case '\r':
        break;
      default:
        emit(in.substr(i, 1));
        last = c;
    }
  }
}

// IndentJson's two outputs: a count of its bytes, and the bytes.
struct CountBytes {
  uint64_t& n;
  void operator()(std::string_view text) { n += text.size(); }
  void operator()(size_t count, char) { n += count; }
};
struct AppendBytes {
  std::string& out;
  void operator()(std::string_view text) { out.append(text); }
  void operator()(size_t count, char c) { out.append(count, c); }
};

// The key metadata.json gives the weights_only verdict under, beside the pickle's own keys
// (dunder, as safetensors' __metadata__, so a state dict's own keys hardly collide).
constexpr std::string_view kWeightsOnlyKey = "__weights_only__";

// The text metadata.json is laid out from: state_json itself, or, where there is a
// verdict, a copy of it in `held` with the verdict added as its last key. Never a copy
// without one (a TF object graph's state_json is tens of MB). As it is where state_json is
// no object, or where a key of that name may be there already.
std::string_view StateWithVerdict(const Checkpoint& ckpt, std::string& held) {
  if (!ckpt.weights_only) return ckpt.state_json;
  const std::string quoted = "\"" + std::string(kWeightsOnlyKey) + "\"";
  const std::string entry = quoted + ":" + WeightsOnlyJson(*ckpt.weights_only);
  const std::string& state = ckpt.state_json;
  if (state.empty()) return held = "{" + entry + "}";
  if (state.front() != '{' || state.back() != '}' || state.find(quoted) != state.npos) {
    return state;
  }
  const bool empty = state.find_first_not_of(" \n", 1) == state.size() - 1;
  held.reserve(state.size() + entry.size() + 1);
  held.append(state, 0, state.size() - 1).append(empty ? "" : ",").append(entry).append("}");
  return held;
}

}  // namespace

uint64_t MetadataJsonSize(const Checkpoint& ckpt) {
  if (FormatOf(ckpt).metadata_is_header) return MetadataJson(ckpt).size();
  std::string held;
  const std::string_view state = StateWithVerdict(ckpt, held);
  if (state.empty()) return 3;
  uint64_t size = 1;  // the final newline
  IndentJson(state, CountBytes{size});
  return size;
}

std::string MetadataJson(const Checkpoint& ckpt) {
  // Formats other than safetensors keep their non-tensor values as state_json: laid out,
  // never parsed again (see IndentJson), into a string allocated once at its size.
  if (!FormatOf(ckpt).metadata_is_header) {
    std::string held;
    const std::string_view state = StateWithVerdict(ckpt, held);
    if (state.empty()) return "{}\n";
    uint64_t size = 1;
    IndentJson(state, CountBytes{size});
    std::string out;
    out.reserve(size);
    IndentJson(state, AppendBytes{out});
    out += '\n';
    return out;
  }
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  for (const auto& [key, value] : ckpt.metadata) meta[key] = value;
  out["__metadata__"] = std::move(meta);
  return out.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

const FormatReader& FormatOf(const Checkpoint& ckpt) {
  static const FormatReader kNone = {};
  return ckpt.format ? *ckpt.format : kNone;
}

std::optional<BlockType> BlocksOf(const Checkpoint& ckpt, size_t i) {
  const auto blocks = FormatOf(ckpt).blocks;
  return blocks ? blocks(ckpt, i) : std::nullopt;
}

TypeShown TypeOf(const Checkpoint& ckpt, size_t i) {
  if (std::optional<BlockType> blocks = BlocksOf(ckpt, i)) {
    return {std::string(blocks->name), std::move(blocks->shape)};
  }
  const Tensor& t = ckpt.tensors[i];
  return {std::string(DtypeName(t.dtype)), t.shape};
}

std::span<const std::string> TensorKeys(const Checkpoint& ckpt) {
  const auto keys = FormatOf(ckpt).keys;
  return keys ? keys(ckpt) : std::span<const std::string>();
}

const StoredFile& ShardFile(const Checkpoint& ckpt, uint32_t shard) {
  return shard < ckpt.shards.size() ? ckpt.shards[shard] : ckpt.decoded[shard - ckpt.shards.size()];
}

std::span<const StoredRange> RangesOf(const Checkpoint& ckpt, const Storage& storage,
                                      StoredRange& one) {
  if (storage.range_count > 0) {
    return std::span<const StoredRange>(ckpt.ranges)
        .subspan(storage.first_range, storage.range_count);
  }
  one = StoredRange{storage.shard, storage.offset, storage.size};
  return {&one, 1};
}

std::span<const StoredRange> RangesOf(const Checkpoint& ckpt, const Tensor& t, StoredRange& one) {
  if (t.storage < ckpt.storages.size() && ckpt.storages[t.storage].range_count > 0) {
    return RangesOf(ckpt, ckpt.storages[t.storage], one);
  }
  one = StoredRange{t.shard, t.offset, t.size};
  return {&one, 1};
}

Result<uint32_t> ReadStorageCrc(const Checkpoint& ckpt, const Storage& storage,
                                std::vector<uint8_t>& scratch) {
  // The caller's buffer, grown once: a fresh zeroed 4 MiB vector per storage cost its
  // zeroing and page faults, a third of the CRC pass after a pack (perf).
  const uint64_t chunk = std::min<uint64_t>(storage.size, 4 << 20);
  if (scratch.size() < chunk) scratch.resize(chunk);
  uLong crc = crc32(0, nullptr, 0);
  StoredRange one;
  for (const StoredRange& range : RangesOf(ckpt, storage, one)) {
    for (uint64_t done = 0; done < range.size;) {
      const uint64_t n = std::min<uint64_t>(chunk, range.size - done);
      CKPTFS_RETURN_IF_ERROR(
          ShardFile(ckpt, range.shard).source->ReadAt(range.offset + done, {scratch.data(), n}));
      crc = crc32(crc, scratch.data(), static_cast<uInt>(n));
      done += n;
    }
  }
  return static_cast<uint32_t>(crc);
}

size_t ApplyRangeCrcs(Checkpoint& ckpt, const RangeCrcs& known) {
  size_t given = 0;
  for (Storage& s : ckpt.storages) {
    if (s.has_crc32) continue;
    uLong crc = crc32(0, nullptr, 0);
    bool all = true;
    StoredRange one;
    for (const StoredRange& r : RangesOf(ckpt, s, one)) {
      auto file = known.find(ShardFile(ckpt, r.shard).name);
      if (file == known.end()) {
        all = false;
        break;
      }
      const std::vector<RangeCrc>& ranges = file->second;
      auto it =
          std::lower_bound(ranges.begin(), ranges.end(), r.offset,
                           [](const RangeCrc& k, uint64_t offset) { return k.offset < offset; });
      if (it == ranges.end() || it->offset != r.offset || it->length != r.size) {
        all = false;
        break;
      }
      crc = crc32_combine(crc, it->crc32, static_cast<z_off_t>(r.size));
    }
    if (!all) continue;
    s.crc32 = static_cast<uint32_t>(crc);
    s.has_crc32 = true;
    ++given;
  }
  return given;
}

Status ComputeStorageCrcs(Checkpoint& ckpt) {
  std::atomic<size_t> next{0};
  std::vector<Status> errors(ckpt.storages.size(), Status::Ok());
  auto work = [&] {
    std::vector<uint8_t> scratch;
    for (size_t i = next++; i < ckpt.storages.size(); i = next++) {
      Storage& s = ckpt.storages[i];
      if (s.has_crc32) continue;
      Result<uint32_t> crc = ReadStorageCrc(ckpt, s, scratch);
      if (!crc.ok()) {
        errors[i] = crc.status();
        continue;
      }
      s.crc32 = crc.value();
      s.has_crc32 = true;
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < std::max(1u, std::thread::hardware_concurrency()); ++t) {
    threads.emplace_back(work);
  }
  work();
  for (std::thread& t : threads) t.join();
  for (const Status& e : errors) CKPTFS_RETURN_IF_ERROR(e);
  return Status::Ok();
}

}  // namespace ckptfs
