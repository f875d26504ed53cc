#include "core/format/safetensors.h"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>

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

std::string Quote(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<TensorEntry> ParseEntry(const std::string& name, const json& value,
                               const std::string& file) {
  const std::string where = file + ": tensor " + Quote(name) + ": ";
  if (name.find('\0') != std::string::npos) {
    return Status::Corruption(file + ": tensor name contains a NUL byte");
  }
  if (!value.is_object()) return Status::Corruption(where + "entry is not an object");
  auto dtype_it = value.find("dtype");
  auto shape_it = value.find("shape");
  auto offsets_it = value.find("data_offsets");
  if (dtype_it == value.end() || !dtype_it->is_string()) {
    return Status::Corruption(where + "missing or non-string \"dtype\"");
  }
  TensorEntry entry;
  entry.name = name;
  auto dtype = ParseDtype(dtype_it->get_ref<const std::string&>());
  if (!dtype) {
    return Status::Corruption(where + "unknown dtype " + Quote(dtype_it->get<std::string>()));
  }
  entry.dtype = *dtype;
  if (shape_it == value.end() || !shape_it->is_array()) {
    return Status::Corruption(where + "missing or non-array \"shape\"");
  }
  for (const json& dim : *shape_it) {
    if (!dim.is_number_unsigned()) return Status::Corruption(where + "shape has a non-integer dim");
    entry.shape.push_back(dim.get<uint64_t>());
  }
  if (offsets_it == value.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
    return Status::Corruption(where + "\"data_offsets\" is not two unsigned integers");
  }
  entry.begin = (*offsets_it)[0].get<uint64_t>();
  entry.end = (*offsets_it)[1].get<uint64_t>();
  if (entry.end < entry.begin) return Status::Corruption(where + "data_offsets end before begin");
  auto bytes = TensorByteSize(entry.dtype, entry.shape);
  if (!bytes || *bytes != entry.end - entry.begin) {
    return Status::Corruption(where + "dtype " + std::string(DtypeName(entry.dtype)) +
                              " and shape " + ShapeToJson(entry.shape) + " do not match " +
                              std::to_string(entry.end - entry.begin) + " data bytes");
  }
  return entry;
}

Result<Metadata> ParseMetadata(const json& value, const std::string& file) {
  if (!value.is_object()) return Status::Corruption(file + ": \"__metadata__\" is not an object");
  Metadata metadata;
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string()) {
      return Status::Corruption(file + ": \"__metadata__\" value for " + Quote(key) +
                                " is not a string");
    }
    metadata.emplace_back(key, v.get<std::string>());
  }
  return metadata;
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
  uint64_t n = DtypeSize(dtype);
  for (uint64_t dim : shape) {
    if (dim != 0 && n > UINT64_MAX / dim) return std::nullopt;
    n *= dim;
  }
  return n;
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
  json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded())
    return Status::Corruption(file + ": safetensors header is not valid JSON");
  if (!doc.is_object()) return Status::Corruption(file + ": safetensors header is not an object");

  SafetensorsHeader header;
  header.data_start = 8 + text.size();
  if (header.data_start > file_size) {
    return Status::Corruption(file + ": header runs past end of file");
  }
  header.tensors.reserve(doc.size());
  for (const auto& [key, value] : doc.items()) {
    if (key == "__metadata__") {
      CKPTFS_ASSIGN_OR_RETURN(header.metadata, ParseMetadata(value, file));
      continue;
    }
    CKPTFS_ASSIGN_OR_RETURN(TensorEntry entry, ParseEntry(key, value, file));
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
  if (n > source.Size() - 8) {
    return Status::Corruption(file + ": header length " + std::to_string(n) +
                              " runs past end of file (" + std::to_string(source.Size()) +
                              " bytes)");
  }
  std::string text(n, '\0');
  CKPTFS_RETURN_IF_ERROR(source.ReadAt(8, {reinterpret_cast<uint8_t*>(text.data()), text.size()}));
  return ParseSafetensorsHeader(text, source.Size(), file);
}

std::string BuildSafetensorsHeader(std::span<const TensorEntry> tensors, const Metadata& metadata) {
  std::string body = "{";
  if (!metadata.empty()) {
    body += "\"__metadata__\":{";
    for (size_t i = 0; i < metadata.size(); ++i) {
      if (i) body += ',';
      body += Quote(metadata[i].first) + ':' + Quote(metadata[i].second);
    }
    body += '}';
  }
  for (const TensorEntry& t : tensors) {
    if (body.size() > 1) body += ',';
    body += Quote(t.name);
    body += ":{\"dtype\":\"";
    body += DtypeName(t.dtype);
    body += "\",\"shape\":" + ShapeToJson(t.shape) + ",\"data_offsets\":[" +
            std::to_string(t.begin) + ',' + std::to_string(t.end) + "]}";
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
