#include "core/format/tf/strings.h"

#include <cstring>

#include "core/checked.h"
#include "core/format/tf/crc32c.h"
#include "core/format/tf/varint.h"

namespace ckptfs::tf {
namespace {

// Calls fn(number, varint, bytes) for each varint (bytes empty) and length-delimited
// (varint 0) field of a message, in order; fixed-width fields are skipped. Nothing is kept,
// so a message of a million fields costs no more than one of a few.
using FieldFn = std::function<Status(uint32_t number, uint64_t varint, std::string_view bytes)>;

Status ForEachField(std::string_view in, uint32_t wire_of_interest, const FieldFn& fn) {
  while (!in.empty()) {
    VarintError error{};
    const auto tag = ReadVarint64(in, &error);
    if (!tag) return Status::Corruption(VarintErrorText(error));
    const auto number = static_cast<uint32_t>(*tag >> 3);
    switch (*tag & 7) {
      case 0: {
        const auto v = ReadVarint64(in, &error);
        if (!v) return Status::Corruption(VarintErrorText(error));
        if (wire_of_interest == 0) CKPTFS_RETURN_IF_ERROR(fn(number, *v, {}));
        break;
      }
      case 2: {
        const auto len = ReadVarint64(in, &error);
        if (!len) return Status::Corruption(VarintErrorText(error));
        if (*len > in.size()) return Status::Corruption("field runs past its message");
        if (wire_of_interest == 2) CKPTFS_RETURN_IF_ERROR(fn(number, 0, in.substr(0, *len)));
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
  return Status::Ok();
}

// A small sub-message's fields 1 to 3, the first of each (as protobuf's last-wins would
// not matter here: TF writes each once).
struct Sub {
  uint64_t ints[4] = {};
  std::string_view strings[4];
  bool has_int[4] = {};
  bool has_string[4] = {};
};

Result<Sub> ReadSub(std::string_view in) {
  Sub sub;
  // One pass for varints and one for strings keeps ForEachField's single-wire-type shape.
  CKPTFS_RETURN_IF_ERROR(ForEachField(in, 0, [&](uint32_t n, uint64_t v, std::string_view) {
    if (n >= 1 && n <= 3 && !sub.has_int[n]) {
      sub.ints[n] = v;
      sub.has_int[n] = true;
    }
    return Status::Ok();
  }));
  CKPTFS_RETURN_IF_ERROR(ForEachField(in, 2, [&](uint32_t n, uint64_t, std::string_view b) {
    if (n >= 1 && n <= 3 && !sub.has_string[n]) {
      sub.strings[n] = b;
      sub.has_string[n] = true;
    }
    return Status::Ok();
  }));
  return sub;
}

uint64_t IntField(const Sub& m, uint32_t number) { return m.ints[number]; }

std::string_view StringField(const Sub& m, uint32_t number) { return m.strings[number]; }

// Writes one node as nlohmann::json would dump it (keys sorted): attributes, children, id,
// slot_variables. Each sub-message is read once per list it belongs to (three passes over
// the node's fields, one list at a time), so nothing but the text is kept.
Status AppendNode(std::string_view node, size_t id, size_t node_count, MetadataBudget& budget,
                  std::string& out) {
  std::string piece;
  auto list = [&](uint32_t which, const char* open) -> Status {
    CKPTFS_RETURN_IF_ERROR(budget.Append(out, open));
    bool first = true;
    CKPTFS_RETURN_IF_ERROR(
        ForEachField(node, 2, [&](uint32_t number, uint64_t, std::string_view bytes) -> Status {
          if (number != which) return Status::Ok();
          CKPTFS_ASSIGN_OR_RETURN(Sub sub, ReadSub(bytes));
          piece = first ? "{" : ",{";
          first = false;
          if (which == 1) {
            const uint64_t child = IntField(sub, 1);
            if (child >= node_count) {
              return Status::Corruption("node " + std::to_string(id) + ": child id " +
                                        std::to_string(child) + " names no node");
            }
            piece += "\"name\":" + JsonQuoted(StringField(sub, 2)) +
                     ",\"node_id\":" + std::to_string(child) + "}";
          } else if (which == 2) {
            piece += "\"checkpoint_key\":" + JsonQuoted(StringField(sub, 3)) +
                     ",\"full_name\":" + JsonQuoted(StringField(sub, 2)) +
                     ",\"name\":" + JsonQuoted(StringField(sub, 1)) + "}";
          } else {
            piece += "\"original_variable_node_id\":" + std::to_string(IntField(sub, 1)) +
                     ",\"slot_name\":" + JsonQuoted(StringField(sub, 2)) +
                     ",\"slot_variable_node_id\":" + std::to_string(IntField(sub, 3)) + "}";
          }
          return budget.Append(out, piece);
        }));
    return budget.Append(out, "]");
  };
  CKPTFS_RETURN_IF_ERROR(list(2, "{\"attributes\":["));
  CKPTFS_RETURN_IF_ERROR(list(1, ",\"children\":["));
  CKPTFS_RETURN_IF_ERROR(budget.Append(out, ",\"id\":" + std::to_string(id)));
  CKPTFS_RETURN_IF_ERROR(list(3, ",\"slot_variables\":["));
  return budget.Append(out, "}");
}

}  // namespace

Status WalkStringTensor(std::string_view bytes, uint64_t elements, const TfLocation& where,
                        const std::string& what,
                        const std::function<Status(std::string_view)>& fn) {
  auto bad = [&](const std::string& why) { return Status::Corruption(what + ": " + why); };
  if (elements > bytes.size()) return bad("more strings than bytes");
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
    if (!RangeWithin(total, *len, bytes.size())) return bad("string lengths run past the tensor");
    total += *len;
  }
  const size_t lengths_size = bytes.size() - in.size();
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
  // Second pass: the lengths again (already checked), each string handed over in turn.
  std::string_view lengths = bytes.substr(0, lengths_size);
  for (uint64_t i = 0; i < elements; ++i) {
    VarintError error{};
    const uint64_t len = *ReadVarint64(lengths, &error);
    CKPTFS_RETURN_IF_ERROR(fn(in.substr(0, len)));
    in.remove_prefix(len);
  }
  return Status::Ok();
}

Result<std::vector<std::string>> DecodeStringTensor(std::string_view bytes, uint64_t elements,
                                                    const TfLocation& where,
                                                    const std::string& what) {
  std::vector<std::string> out;
  CKPTFS_RETURN_IF_ERROR(WalkStringTensor(bytes, elements, where, what, [&](std::string_view s) {
    out.emplace_back(s);
    return Status::Ok();
  }));
  return out;
}

Status AppendObjectGraphJson(std::string_view bytes, const std::string& what,
                             MetadataBudget& budget, std::string& out) {
  auto bad = [&](const Status& s) {
    if (s.code() == Status::Code::kUnsupported) return s;  // the budget's refusal says it all
    return Status::Corruption(what + ": object graph: " + s.message());
  };
  // Nodes are counted first (child ids must name one), then written one at a time.
  size_t node_count = 0;
  Status s = ForEachField(bytes, 2, [&](uint32_t number, uint64_t, std::string_view) {
    node_count += number == 1 ? 1 : 0;
    return Status::Ok();
  });
  if (!s.ok()) return bad(s);
  CKPTFS_RETURN_IF_ERROR(budget.Append(out, "{\"nodes\":["));
  size_t id = 0;
  s = ForEachField(bytes, 2, [&](uint32_t number, uint64_t, std::string_view node) -> Status {
    if (number != 1) return Status::Ok();
    if (id > 0) CKPTFS_RETURN_IF_ERROR(budget.Append(out, ","));
    return AppendNode(node, id++, node_count, budget, out);
  });
  if (!s.ok()) return bad(s);
  return budget.Append(out, "]}");
}

Result<nlohmann::json> ObjectGraphToJson(std::string_view bytes, const std::string& what) {
  MetadataBudget budget(what);
  budget.AddStored(bytes.size());
  std::string text;
  CKPTFS_RETURN_IF_ERROR(AppendObjectGraphJson(bytes, what, budget, text));
  return nlohmann::json::parse(text);
}

std::string JsonQuoted(std::string_view s) {
  return nlohmann::json(std::string(s))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ckptfs::tf
