// ordered_json helpers that stay linear in the size of the JSON.
//
// nlohmann::ordered_json keeps an object's members in insertion order in a vector, and its
// operator[], emplace, contains and parse find a key by walking that vector: building or
// parsing an object of n members costs n^2 / 2 key comparisons (what that cost when
// measured: docs/security.md). Metadata of untrusted checkpoints goes through these instead:
// a hash index beside the members, so each member costs O(1) expected time. Member order
// and duplicate keys behave as ordered_json's operator[] does: a key seen again keeps its
// first position and takes the last value.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>

namespace ckptfs {

// Builds one ordered_json object member by member.
class OrderedJsonObject {
 public:
  OrderedJsonObject() = default;
  // Starts from the members of `object` (an object, or anything else for none).
  explicit OrderedJsonObject(nlohmann::ordered_json object);

  // Sets `key` to `value`; an existing key keeps its position.
  void Set(std::string key, nlohmann::ordered_json value);
  // Adds `key` only if it is absent; returns whether it was added.
  bool SetIfAbsent(std::string key, nlohmann::ordered_json value);
  bool empty() const { return index_.empty(); }
  // The object built; the builder is left empty.
  nlohmann::ordered_json Take();

 private:
  using Members = nlohmann::ordered_json::object_t::Container;
  Members& members() { return value_.get_ref<nlohmann::ordered_json::object_t&>(); }

  nlohmann::ordered_json value_ = nlohmann::ordered_json::object();
  std::unordered_map<std::string, size_t> index_;  // key -> position in members()
};

// Parses `text` as nlohmann::ordered_json::parse(text, nullptr, false) does (strict JSON,
// a discarded value on any error), in time linear in its length.
nlohmann::ordered_json ParseOrderedJson(std::string_view text);

}  // namespace ckptfs
