#include "core/format/ordered_json.h"

#include <utility>
#include <vector>

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

}  // namespace

json ParseOrderedJson(std::string_view text) {
  LinearBuilder builder;
  if (!json::sax_parse(text, &builder, json::input_format_t::json, /*strict=*/true,
                       /*ignore_comments=*/false)) {
    return json(json::value_t::discarded);
  }
  return builder.Take();
}

}  // namespace ckptfs
