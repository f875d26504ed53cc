#include "core/encoding/safetensors.h"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/checked.h"
#include "core/encoding/json_scan.h"

namespace ckptfs {
namespace {

using nlohmann::json;

uint64_t LoadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void AppendLe64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Appends `s` as a JSON string. Names come from parsed JSON, so they are valid UTF-8 and
// only quotes, backslashes and control characters need escaping.
void AppendQuoted(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      out += "\\u00";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  out += '"';
}

std::string Quote(std::string_view s) {
  std::string out;
  AppendQuoted(out, s);
  return out;
}

// A tensor entry as the header spelled it, before validation.
struct RawEntry {
  std::string name;
  std::optional<std::string> dtype;
  std::optional<std::vector<uint64_t>> shape;
  std::optional<std::vector<uint64_t>> offsets;
  bool is_object = true;
  bool malformed_dtype = false;
  bool malformed_shape = false;
  bool malformed_offsets = false;
};

// Streams the header JSON into RawEntries without building a DOM: a mount reads one header
// per shard, and a DOM of 200k tensors costs more in allocation than the parse itself.
// Depth 1 holds tensor names and "__metadata__", depth 2 an entry's fields, depth 3 the
// numbers of "shape" and "data_offsets". Unknown fields are ignored, as the reference does.
class HeaderSax : public nlohmann::json_sax<json> {
 public:
  explicit HeaderSax(const std::string& file) : file_(file) {}

  std::vector<RawEntry> entries;
  Metadata metadata;
  Status error;

  bool null() override { return Scalar(); }
  bool boolean(bool) override { return Scalar(); }
  bool number_integer(number_integer_t) override { return Scalar(); }
  bool number_float(number_float_t, const string_t&) override { return Scalar(); }
  bool binary(binary_t&) override { return Scalar(); }
  bool number_unsigned(number_unsigned_t v) override {
    if (depth_ == 3 && array_) array_->push_back(v);
    return Scalar(/*unsigned_number=*/true);
  }
  bool string(string_t& v) override {
    if (depth_ == 2 && in_metadata_) {
      metadata.emplace_back(std::move(field_), std::move(v));
      return true;
    }
    if (depth_ == 2 && field_ == "dtype") {
      entries.back().dtype = std::move(v);
      return true;
    }
    return Scalar();
  }
  bool key(string_t& k) override {
    if (depth_ == 1) top_key_ = std::move(k);
    if (depth_ == 2) field_ = std::move(k);
    return true;
  }
  bool start_object(std::size_t) override {
    if (depth_ == 1) {
      in_metadata_ = top_key_ == "__metadata__";
      if (!in_metadata_) NewEntry(/*is_object=*/true);
    } else if (depth_ == 2 && in_metadata_) {
      return MetadataValueNotString();
    } else if (depth_ >= 2) {
      MarkMalformed();
    }
    ++depth_;
    return true;
  }
  bool end_object() override {
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    if (depth_ == 1) {
      if (top_key_ == "__metadata__") return Fail("\"__metadata__\" is not an object");
      NewEntry(/*is_object=*/false);
    } else if (depth_ == 2 && in_metadata_) {
      return MetadataValueNotString();
    } else if (depth_ == 2 && (field_ == "shape" || field_ == "data_offsets")) {
      auto& target = field_ == "shape" ? entries.back().shape : entries.back().offsets;
      target.emplace();
      array_ = &*target;
    } else {
      MarkMalformed();
    }
    ++depth_;
    return true;
  }
  bool end_array() override {
    if (--depth_ == 2) array_ = nullptr;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    if (error.ok()) error = Status::Corruption(file_ + ": safetensors header is not valid JSON");
    return false;
  }

 private:
  void NewEntry(bool is_object) {
    RawEntry e;
    e.name = std::move(top_key_);
    e.is_object = is_object;
    entries.push_back(std::move(e));
  }
  // Any scalar: fine inside an unknown field, wrong where a known field wants another type.
  bool Scalar(bool unsigned_number = false) {
    if (depth_ == 1) {
      if (top_key_ == "__metadata__") return Fail("\"__metadata__\" is not an object");
      NewEntry(/*is_object=*/false);
    } else if (depth_ == 2 && in_metadata_) {
      return MetadataValueNotString();
    } else if (depth_ == 2 || (depth_ == 3 && array_ && !unsigned_number)) {
      MarkMalformed();
    }
    return true;
  }
  void MarkMalformed() {
    if (in_metadata_ || entries.empty()) return;
    RawEntry& e = entries.back();
    if (field_ == "dtype") e.malformed_dtype = true;
    if (field_ == "shape") e.malformed_shape = true;
    if (field_ == "data_offsets") e.malformed_offsets = true;
  }
  bool MetadataValueNotString() {
    return Fail("\"__metadata__\" value for " + Quote(field_) + " is not a string");
  }
  bool Fail(const std::string& what) {
    error = Status::Corruption(file_ + ": " + what);
    return false;
  }

  const std::string& file_;
  int depth_ = 0;
  bool in_metadata_ = false;
  std::string top_key_;
  std::string field_;
  std::vector<uint64_t>* array_ = nullptr;
};

// The fast path: the entries and metadata HeaderSax makes, for a header in JsonScan's
// subset whose entries have only the three known fields (what every writer emits); false
// for anything else, which HeaderSax then parses and judges. At a million tensors this
// takes a fraction of the full parser's time.
bool ScanHeader(std::string_view text, std::vector<RawEntry>& entries, Metadata& metadata) {
  JsonScan scan(text);
  auto numbers = [&scan](std::optional<std::vector<uint64_t>>& target) {
    target.emplace();  // a repeated field replaces, as in HeaderSax
    if (!scan.Consume('[')) return false;
    if (scan.Consume(']')) return true;
    do {
      uint64_t v;
      if (!scan.Unsigned(v)) return false;
      target->push_back(v);
    } while (scan.Consume(','));
    return scan.Consume(']');
  };
  if (!scan.Consume('{')) return false;
  if (scan.Consume('}')) return scan.AtEnd();
  do {
    std::string_view key;
    if (!scan.String(key) || !scan.Consume(':') || !scan.Consume('{')) return false;
    if (key == "__metadata__") {
      if (scan.Consume('}')) continue;
      do {
        std::string_view name, value;
        if (!scan.String(name) || !scan.Consume(':') || !scan.String(value)) return false;
        metadata.emplace_back(name, value);
      } while (scan.Consume(','));
      if (!scan.Consume('}')) return false;
      continue;
    }
    RawEntry& entry = entries.emplace_back();
    entry.name = key;
    if (scan.Consume('}')) continue;
    do {
      std::string_view field, dtype;
      if (!scan.String(field) || !scan.Consume(':')) return false;
      if (field == "dtype") {
        if (!scan.String(dtype)) return false;
        entry.dtype = std::string(dtype);
      } else if (field == "shape") {
        if (!numbers(entry.shape)) return false;
      } else if (field == "data_offsets") {
        if (!numbers(entry.offsets)) return false;
      } else {
        return false;
      }
    } while (scan.Consume(','));
    if (!scan.Consume('}')) return false;
  } while (scan.Consume(','));
  return scan.Consume('}') && scan.AtEnd();
}

Result<TensorEntry> ValidateEntry(RawEntry& raw, const std::string& file) {
  // Error text is built only on failure: this runs once per tensor at mount.
  auto bad = [&](const std::string& what) {
    return Status::Corruption(file + ": tensor " + Quote(raw.name) + ": " + what);
  };
  if (raw.name.find('\0') != std::string::npos) {
    return Status::Corruption(file + ": tensor name contains a NUL byte");
  }
  if (!raw.is_object) return bad("entry is not an object");
  if (!raw.dtype || raw.malformed_dtype) return bad("missing or non-string \"dtype\"");
  auto dtype = ParseDtype(*raw.dtype);
  // C128 is ckptfs's name for torch's complex128; safetensors defines no such dtype.
  if (!dtype || *dtype == Dtype::kC128) return bad("unknown dtype " + Quote(*raw.dtype));
  if (!raw.shape || raw.malformed_shape)
    return bad("\"shape\" is not an array of non-negative integers");
  if (!raw.offsets || raw.malformed_offsets || raw.offsets->size() != 2) {
    return bad("\"data_offsets\" is not two unsigned integers");
  }
  TensorEntry entry{std::move(raw.name), *dtype, std::move(*raw.shape), (*raw.offsets)[0],
                    (*raw.offsets)[1]};
  if (entry.end < entry.begin) return bad("data_offsets end before begin");
  auto bytes = TensorByteSize(entry.dtype, entry.shape);
  if (!bytes || *bytes != entry.end - entry.begin) {
    return bad("dtype " + std::string(DtypeName(entry.dtype)) + " and shape " +
               ShapeToJson(entry.shape) + " do not match " +
               std::to_string(entry.end - entry.begin) + " data bytes");
  }
  return entry;
}

// The reference loader requires the tensors to tile the data section exactly.
Status CheckTiling(const std::vector<TensorEntry>& sorted, uint64_t data_size,
                   const std::string& file) {
  uint64_t expected = 0;
  for (const TensorEntry& t : sorted) {
    if (t.begin != expected) {
      const char* what =
          t.begin < expected ? "overlaps the previous tensor" : "leaves a hole before it";
      return Status::Corruption(file + ": tensor " + Quote(t.name) + " at data offset " +
                                std::to_string(t.begin) + " " + what + " (expected offset " +
                                std::to_string(expected) + ")");
    }
    expected = t.end;
  }
  if (expected != data_size) {
    return Status::Corruption(file + ": tensors end at data offset " + std::to_string(expected) +
                              " but the data section has " + std::to_string(data_size) +
                              " bytes (" +
                              (expected > data_size ? "file truncated" : "trailing bytes") + ")");
  }
  return Status::Ok();
}

}  // namespace

std::optional<uint64_t> TensorByteSize(Dtype dtype, std::span<const uint64_t> shape) {
  return CheckedProduct(shape, DtypeSize(dtype));
}

// A one-byte dtype's byte size is the element count.
std::optional<uint64_t> ElementCount(std::span<const uint64_t> shape) {
  return TensorByteSize(Dtype::kU8, shape);
}

std::string ShapeToJson(std::span<const uint64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view text, uint64_t file_size,
                                                 const std::string& file) {
  if (text.empty() || text.front() != '{') {
    return Status::Corruption(file + ": safetensors header does not start with '{'");
  }
  std::vector<RawEntry> entries;
  Metadata metadata;
  if (!ScanHeader(text, entries, metadata)) {
    HeaderSax sax(file);
    if (!json::sax_parse(text.begin(), text.end(), &sax)) {
      return sax.error.ok() ? Status::Corruption(file + ": safetensors header is not valid JSON")
                            : sax.error;
    }
    entries = std::move(sax.entries);
    metadata = std::move(sax.metadata);
  }
  SafetensorsHeader header;
  header.data_start = 8 + text.size();
  if (header.data_start > file_size) {
    return Status::Corruption(file + ": header runs past end of file");
  }
  header.metadata = std::move(metadata);
  header.tensors.reserve(entries.size());
  for (RawEntry& raw : entries) {
    CKPTFS_ASSIGN_OR_RETURN(TensorEntry entry, ValidateEntry(raw, file));
    header.tensors.push_back(std::move(entry));
  }
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const TensorEntry& a, const TensorEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  CKPTFS_RETURN_IF_ERROR(CheckTiling(header.tensors, file_size - header.data_start, file));
  return header;
}

Result<SafetensorsHeader> ReadSafetensorsHeader(const ByteSource& source) {
  const std::string& file = source.Name();
  if (source.Size() < 8) {
    return Status::Corruption(file + ": too short for a safetensors file (" +
                              std::to_string(source.Size()) + " bytes)");
  }
  std::array<uint8_t, 8> len_bytes;
  CKPTFS_RETURN_IF_ERROR(source.ReadAt(0, len_bytes));
  const uint64_t n = LoadLe64(len_bytes.data());
  if (n > kMaxSafetensorsHeader) {
    return Status::Corruption(file + ": header length " + std::to_string(n) +
                              " exceeds the 100 MB safetensors limit");
  }
  if (!RangeWithin(8, n, source.Size())) {
    return Status::Corruption(file + ": header length " + std::to_string(n) +
                              " runs past end of file (" + std::to_string(source.Size()) +
                              " bytes)");
  }
  std::string text(n, '\0');
  CKPTFS_RETURN_IF_ERROR(source.ReadAt(8, {reinterpret_cast<uint8_t*>(text.data()), text.size()}));
  return ParseSafetensorsHeader(text, source.Size(), file);
}

std::string SafetensorsHeaderOpening(const Metadata& metadata) {
  std::string body = "{";
  if (!metadata.empty()) {
    body += "\"__metadata__\":{";
    for (size_t i = 0; i < metadata.size(); ++i) {
      if (i) body += ',';
      AppendQuoted(body, metadata[i].first);
      body += ':';
      AppendQuoted(body, metadata[i].second);
    }
    body += '}';
  }
  return body;
}

void AppendSafetensorsEntry(std::string& out, std::string_view name, Dtype dtype,
                            std::span<const uint64_t> shape, uint64_t begin, uint64_t end) {
  AppendQuoted(out, name);
  out += ":{\"dtype\":\"";
  out += DtypeName(dtype);
  out += "\",\"shape\":";
  out += ShapeToJson(shape);
  out += ",\"data_offsets\":[";
  out += std::to_string(begin);
  out += ',';
  out += std::to_string(end);
  out += "]}";
}

std::string BuildSafetensorsHeader(std::span<const TensorEntry> tensors, const Metadata& metadata) {
  std::string body = SafetensorsHeaderOpening(metadata);
  for (const TensorEntry& t : tensors) {
    if (body.size() > 1) body += ',';
    AppendSafetensorsEntry(body, t.name, t.dtype, t.shape, t.begin, t.end);
  }
  body += '}';
  // Pad with spaces (valid JSON whitespace) so 8 + N, the data start, is 8-aligned.
  body.append((8 - body.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + body.size());
  AppendLe64(out, body.size());
  out += body;
  return out;
}

}  // namespace ckptfs
