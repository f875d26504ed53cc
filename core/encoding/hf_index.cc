#include "core/encoding/hf_index.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/encoding/json_scan.h"

namespace ckptfs {
namespace {

using json = nlohmann::json;

// Streams the index, keeping only "weight_map" (depth 1 key, its entries at depth 2):
// the index of a large checkpoint lists every tensor, and a DOM of it is pure overhead.
class IndexSax : public nlohmann::json_sax<json> {
 public:
  explicit IndexSax(const std::string& file) : file_(file) {}

  HfIndex index;
  bool saw_weight_map = false;
  Status error;

  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool string(string_t& v) override {
    if (!InMap()) return Value();
    if (!IsPlainFileName(v)) {
      return Fail("shard name \"" + v +
                  "\" is not a plain file name inside the checkpoint directory");
    }
    index.weight_map.emplace_back(std::move(key_), std::move(v));
    return true;
  }
  bool key(string_t& k) override {
    if (depth_ == 1) in_map_ = k == "weight_map";
    if (depth_ == 2) key_ = std::move(k);
    return true;
  }
  bool start_object(std::size_t) override { return Open(/*object=*/true); }
  bool start_array(std::size_t) override { return Open(/*object=*/false); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    if (error.ok()) error = Status::Corruption(file_ + ": not valid JSON");
    return false;
  }

 private:
  bool InMap() const { return in_map_ && depth_ == 2; }
  bool Open(bool object) {
    if (depth_ == 0 && !object) return Fail("not a JSON object");
    if (in_map_ && depth_ == 1) {
      if (!object) return Fail("missing \"weight_map\" object");
      saw_weight_map = true;
    }
    if (InMap()) return Value();
    ++depth_;
    return true;
  }
  bool Close() {
    --depth_;
    return true;
  }
  // A scalar, or a container where the weight map needs a shard name.
  bool Value() {
    if (depth_ == 0) return Fail("not a JSON object");
    if (in_map_ && depth_ == 1) return Fail("missing \"weight_map\" object");
    if (InMap()) return Fail("weight_map entry for \"" + key_ + "\" is not a string");
    return true;
  }
  bool Fail(const std::string& what) {
    error = Status::Corruption(file_ + ": " + what);
    return false;
  }

  const std::string& file_;
  int depth_ = 0;
  bool in_map_ = false;
  std::string key_;
};

// The fast path: what IndexSax makes, for an index in JsonScan's subset with plain shard
// names; false for anything else, which IndexSax then parses and judges.
bool ScanIndex(std::string_view text, HfIndex& index, bool& saw_weight_map) {
  JsonScan scan(text);
  if (!scan.Consume('{')) return false;
  if (scan.Consume('}')) return scan.AtEnd();
  do {
    std::string_view key;
    if (!scan.String(key) || !scan.Consume(':')) return false;
    if (key != "weight_map") {
      if (!scan.SkipValue()) return false;
      continue;
    }
    if (!scan.Consume('{')) return false;
    saw_weight_map = true;
    if (scan.Consume('}')) continue;
    do {
      std::string_view tensor, shard;
      if (!scan.String(tensor) || !scan.Consume(':') || !scan.String(shard)) return false;
      if (!IsPlainFileName(shard)) return false;
      index.weight_map.emplace_back(tensor, shard);
    } while (scan.Consume(','));
    if (!scan.Consume('}')) return false;
  } while (scan.Consume(','));
  return scan.Consume('}') && scan.AtEnd();
}

}  // namespace

bool IsPlainFileName(std::string_view name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string_view("/\0", 2)) == std::string_view::npos;
}

Result<HfIndex> ParseHfIndex(std::string_view text, const std::string& file) {
  HfIndex index;
  bool saw_weight_map = false;
  if (!ScanIndex(text, index, saw_weight_map)) {
    IndexSax sax(file);
    if (!json::sax_parse(text.begin(), text.end(), &sax)) {
      return sax.error.ok() ? Status::Corruption(file + ": not valid JSON") : sax.error;
    }
    index = std::move(sax.index);
    saw_weight_map = sax.saw_weight_map;
  }
  if (!saw_weight_map) return Status::Corruption(file + ": missing \"weight_map\" object");
  for (const auto& entry : index.weight_map) index.shard_files.push_back(entry.second);
  std::sort(index.shard_files.begin(), index.shard_files.end());
  index.shard_files.erase(std::unique(index.shard_files.begin(), index.shard_files.end()),
                          index.shard_files.end());
  return index;
}

}  // namespace ckptfs
