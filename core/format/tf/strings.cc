#include "core/format/tf/strings.h"

#include <cstring>

#include "core/format/tf/crc32c.h"
#include "core/format/tf/varint.h"

namespace ckptfs::tf {
namespace {

// Fields of a sub-message, for the object graph: varints and strings by field number.
struct Msg {
  std::vector<std::pair<uint32_t, uint64_t>> ints;
  std::vector<std::pair<uint32_t, std::string_view>> strings;
};

Result<Msg> ReadMsg(std::string_view in) {
  Msg m;
  while (!in.empty()) {
    VarintError error{};
    const auto tag = ReadVarint64(in, &error);
    if (!tag) return Status::Corruption(VarintErrorText(error));
    const auto number = static_cast<uint32_t>(*tag >> 3);
    switch (*tag & 7) {
      case 0: {
        const auto v = ReadVarint64(in, &error);
        if (!v) return Status::Corruption(VarintErrorText(error));
        m.ints.emplace_back(number, *v);
        break;
      }
      case 2: {
        const auto len = ReadVarint64(in, &error);
        if (!len) return Status::Corruption(VarintErrorText(error));
        if (*len > in.size()) return Status::Corruption("field runs past its message");
        m.strings.emplace_back(number, in.substr(0, *len));
        in.remove_prefix(*len);
        break;
      }
      case 1:
      case 5: {
        const size_t n = (*tag & 7) == 1 ? 8 : 4;
        if (in.size() < n) return Status::Corruption("truncated fixed-width field");
        in.remove_prefix(n);
        break;
      }
      default:
        return Status::Corruption("unsupported wire type");
    }
  }
  return m;
}

uint64_t IntField(const Msg& m, uint32_t number) {
  for (const auto& [n, v] : m.ints) {
    if (n == number) return v;
  }
  return 0;
}

std::string StringField(const Msg& m, uint32_t number) {
  for (const auto& [n, v] : m.strings) {
    if (n == number) return std::string(v);
  }
  return {};
}

Result<nlohmann::json> NodeToJson(const Msg& node, size_t id, size_t node_count) {
  nlohmann::json out = {{"id", id},
                        {"children", nlohmann::json::array()},
                        {"attributes", nlohmann::json::array()},
                        {"slot_variables", nlohmann::json::array()}};
  for (const auto& [number, bytes] : node.strings) {
    if (number < 1 || number > 3) continue;
    CKPTFS_ASSIGN_OR_RETURN(Msg sub, ReadMsg(bytes));
    if (number == 1) {
      const uint64_t child = IntField(sub, 1);
      if (child >= node_count) {
        return Status::Corruption("node " + std::to_string(id) + ": child id " +
                                  std::to_string(child) + " names no node");
      }
      out["children"].push_back({{"name", StringField(sub, 2)}, {"node_id", child}});
    } else if (number == 2) {
      out["attributes"].push_back({{"name", StringField(sub, 1)},
                                   {"full_name", StringField(sub, 2)},
                                   {"checkpoint_key", StringField(sub, 3)}});
    } else {
      out["slot_variables"].push_back({{"original_variable_node_id", IntField(sub, 1)},
                                       {"slot_name", StringField(sub, 2)},
                                       {"slot_variable_node_id", IntField(sub, 3)}});
    }
  }
  return out;
}

}  // namespace

Result<std::vector<std::string>> DecodeStringTensor(std::string_view bytes, uint64_t elements,
                                                    const TfLocation& where,
                                                    const std::string& what) {
  auto bad = [&](const std::string& why) { return Status::Corruption(what + ": " + why); };
  if (elements > bytes.size()) return bad("more strings than bytes");
  std::vector<uint64_t> lengths;
  lengths.reserve(elements);
  std::string_view in = bytes;
  uint32_t crc = 0;
  uint64_t total = 0;
  for (uint64_t i = 0; i < elements; ++i) {
    VarintError error{};
    const auto len = ReadVarint64(in, &error);
    if (!len) return bad(std::string("string length: ") + VarintErrorText(error));
    char le[8];
    for (int b = 0; b < 8; ++b) le[b] = static_cast<char>(*len >> (8 * b));
    crc = Crc32cExtend(crc, std::string_view(le, *len <= UINT32_MAX ? 4 : 8));
    if (*len > bytes.size() - total) return bad("string lengths run past the tensor");
    total += *len;
    lengths.push_back(*len);
  }
  if (elements > 0) {
    if (in.size() < 4) return bad("truncated length checksum");
    if (UnmaskCrc(LoadLe32(in.data())) != crc) return bad("string length checksum mismatch");
    crc = Crc32cExtend(crc, in.substr(0, 4));
    in.remove_prefix(4);
  }
  if (in.size() != total) {
    return bad("string bytes are " + std::to_string(in.size()) + ", lengths say " +
               std::to_string(total));
  }
  crc = Crc32cExtend(crc, in);
  if (where.has_crc32c && UnmaskCrc(where.masked_crc32c) != crc) return bad("CRC32C mismatch");
  std::vector<std::string> out;
  out.reserve(elements);
  for (uint64_t len : lengths) {
    out.emplace_back(in.substr(0, len));
    in.remove_prefix(len);
  }
  return out;
}

Result<nlohmann::json> ObjectGraphToJson(std::string_view bytes, const std::string& what) {
  auto graph = ReadMsg(bytes);
  if (!graph.ok()) return Status::Corruption(what + ": object graph: " + graph.status().message());
  std::vector<std::string_view> nodes;
  for (const auto& [number, b] : graph->strings) {
    if (number == 1) nodes.push_back(b);
  }
  nlohmann::json out = {{"nodes", nlohmann::json::array()}};
  for (size_t id = 0; id < nodes.size(); ++id) {
    auto node = ReadMsg(nodes[id]);
    auto json =
        node.ok() ? NodeToJson(*node, id, nodes.size()) : Result<nlohmann::json>(node.status());
    if (!json.ok()) return Status::Corruption(what + ": object graph: " + json.status().message());
    out["nodes"].push_back(std::move(*json));
  }
  return out;
}

}  // namespace ckptfs::tf
