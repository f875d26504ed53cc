#include "core/encoding/ordered_json.h"

#include <algorithm>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/checked.h"

namespace ckptfs {

using json = nlohmann::ordered_json;

OrderedJsonObject::OrderedJsonObject(json object) {
  if (!object.is_object()) return;
  value_ = std::move(object);
  for (size_t i = 0; i < members().size(); ++i) index_.try_emplace(members()[i].first, i);
}

void OrderedJsonObject::Set(std::string key, json value) {
  auto [it, fresh] = index_.try_emplace(key, members().size());
  if (fresh) {
    members().emplace_back(std::move(key), std::move(value));
  } else {
    members()[it->second].second = std::move(value);
  }
}

bool OrderedJsonObject::SetIfAbsent(std::string key, json value) {
  auto [it, fresh] = index_.try_emplace(key, members().size());
  if (fresh) members().emplace_back(std::move(key), std::move(value));
  return fresh;
}

json OrderedJsonObject::Take() {
  index_.clear();
  return std::exchange(value_, json::object());
}

namespace {

// nlohmann's SAX interface: its parser (iterative, strict) reports values, and this puts
// them together, objects through OrderedJsonObject.
class LinearBuilder {
 public:
  bool null() { return Put(nullptr); }
  bool boolean(bool v) { return Put(v); }
  bool number_integer(json::number_integer_t v) { return Put(v); }
  bool number_unsigned(json::number_unsigned_t v) { return Put(v); }
  bool number_float(json::number_float_t v, const std::string&) { return Put(v); }
  bool string(json::string_t& v) { return Put(std::move(v)); }
  bool binary(json::binary_t& v) { return Put(json::binary(std::move(v))); }
  bool start_object(std::size_t) {
    open_.emplace_back();
    open_.back().is_object = true;
    return true;
  }
  bool key(json::string_t& k) {
    open_.back().key = std::move(k);
    return true;
  }
  bool end_object() { return Close(open_.back().object.Take()); }
  bool start_array(std::size_t) {
    open_.emplace_back();
    open_.back().array = json::array();
    return true;
  }
  bool end_array() { return Close(std::move(open_.back().array)); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    failed_ = true;
    return false;
  }

  json Take() { return failed_ ? json(json::value_t::discarded) : std::move(root_); }

 private:
  struct Open {
    bool is_object = false;
    OrderedJsonObject object;
    std::string key;  // of the member whose value comes next
    json array;
  };

  bool Put(json v) {
    if (open_.empty()) {
      root_ = std::move(v);
    } else if (open_.back().is_object) {
      open_.back().object.Set(std::move(open_.back().key), std::move(v));
    } else {
      open_.back().array.get_ref<json::array_t&>().push_back(std::move(v));
    }
    return true;
  }
  bool Close(json v) {
    open_.pop_back();
    return Put(std::move(v));
  }

  std::vector<Open> open_;
  json root_;
  bool failed_ = false;
};

// What a scan of the text finds before anything is built: how deep it nests (counting
// stops past `max_depth`) and how many structural characters it has. Brackets inside
// strings are skipped; for text that is not valid JSON the figures may be off, but the
// parser then fails, and no partial tree it builds nests deeper than the scan counted.
struct JsonShape {
  size_t depth = 0;
  uint64_t structural = 0;
};

JsonShape ScanJson(std::string_view text, size_t max_depth = kMaxJsonDepth) {
  JsonShape shape;
  size_t depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    switch (text[i]) {
      case '"':
        for (++i; i < text.size() && text[i] != '"'; ++i) i += text[i] == '\\' ? 1 : 0;
        break;
      case '[':
      case '{':
        ++shape.structural;
        shape.depth = std::max(shape.depth, ++depth);
        if (depth > max_depth) return shape;
        break;
      case ']':
      case '}':
        depth -= depth > 0 ? 1 : 0;
        break;
      case ',':
      case ':':
        ++shape.structural;
        break;
      default:
        break;
    }
  }
  return shape;
}

Status CheckShape(std::string_view text, const std::string& shown, MetadataBudget* budget) {
  const JsonShape shape = ScanJson(text);
  if (shape.depth > kMaxJsonDepth) {
    return Status::Unsupported(shown + ": JSON nested deeper than " +
                               std::to_string(kMaxJsonDepth) + " levels");
  }
  if (!budget) return Status::Ok();
  const std::optional<uint64_t> nodes = CheckedMul(shape.structural + 1, kJsonNodeBytes);
  const uint64_t tree = SaturatingAdd(text.size(), nodes.value_or(UINT64_MAX));
  return budget->ChargeOrRefuse(tree);
}

json ParseLinear(std::string_view text) {
  LinearBuilder builder;
  if (!json::sax_parse(text, &builder, json::input_format_t::json, /*strict=*/true,
                       /*ignore_comments=*/false)) {
    return json(json::value_t::discarded);
  }
  return builder.Take();
}

// QuoteJson's writer: compact JSON into `out`, stopping once it holds more than `max`.
template <typename Json>
void Quote(const Json& value, size_t max, size_t depth, std::string& out) {
  if (out.size() > max) return;
  if (depth > 16) {
    out += "...";
    return;
  }
  if (value.is_object() || value.is_array()) {
    const bool object = value.is_object();
    out += object ? '{' : '[';
    bool first = true;
    for (auto it = value.begin(); it != value.end() && out.size() <= max; ++it) {
      if (!first) out += ',';
      first = false;
      if (object) {
        out += Json(it.key()).dump(-1, ' ', false, Json::error_handler_t::replace);
        out += ':';
      }
      Quote(*it, max, depth + 1, out);
    }
    out += object ? '}' : ']';
    return;
  }
  if (value.is_string() && value.template get_ref<const std::string&>().size() > max) {
    // Only the prefix is escaped: a long string is never copied whole.
    const std::string& s = value.template get_ref<const std::string&>();
    out += Json(s.substr(0, max)).dump(-1, ' ', false, Json::error_handler_t::replace);
    return;
  }
  out += value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

template <typename Json>
std::string QuoteBounded(const Json& value, size_t max_bytes) {
  std::string out;
  Quote(value, max_bytes, 0, out);
  if (out.size() <= max_bytes) return out;
  out.resize(max_bytes);
  return out + "...";
}

}  // namespace

json ParseOrderedJson(std::string_view text) {
  // Text ckptfs wrote holds untrusted values (kMaxJsonDepth deep at most) a few levels
  // down (a Keras config under "config"): twice the bound is still safe to copy.
  if (ScanJson(text, 2 * kMaxJsonDepth).depth > 2 * kMaxJsonDepth) {
    return json(json::value_t::discarded);
  }
  return ParseLinear(text);
}

template <typename Json>
Result<Json> ParseJson(std::string_view text, const std::string& shown, MetadataBudget* budget) {
  CKPTFS_RETURN_IF_ERROR(CheckShape(text, shown, budget));
  Json value;
  if constexpr (std::is_same_v<Json, json>) {
    value = ParseLinear(text);
  } else {
    value = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  }
  if (value.is_discarded()) return Status::Corruption(shown + ": not valid JSON");
  return value;
}

template Result<nlohmann::json> ParseJson(std::string_view, const std::string&, MetadataBudget*);
template Result<nlohmann::ordered_json> ParseJson(std::string_view, const std::string&,
                                                  MetadataBudget*);

std::string QuoteJson(const nlohmann::json& value, size_t max_bytes) {
  return QuoteBounded(value, max_bytes);
}
std::string QuoteJson(const nlohmann::ordered_json& value, size_t max_bytes) {
  return QuoteBounded(value, max_bytes);
}

}  // namespace ckptfs
