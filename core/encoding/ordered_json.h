// Untrusted JSON: the one way ckptfs parses and prints JSON it did not write (a Keras
// config or metadata.json, a sharded weight map, DCP sharding info, trainer_state.json, an
// HTTP listing, what the HDF5 child sends back), bounded in depth, time and memory.
//
// Depth. nlohmann's parser keeps its stack on the heap, but copying, comparing or dumping a
// value recurses once per level, so 100,000 nested brackets (213 KB) overflow the stack
// wherever the value is copied. ParseJson refuses text nested deeper than kMaxJsonDepth
// before building anything; what it returns can then be copied and dumped safely.
// Memory. The tree costs far more than its text (a value is 16 bytes, an object member a
// key string and a slot besides): ParseJson charges an estimate of it (its text plus
// kJsonNodeBytes per structural character) to a MetadataBudget before it is built.
// Printing. QuoteJson prints at most a bounded prefix of a value for a message, whatever its
// size and depth.
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

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/encoding/metadata_budget.h"
#include "core/status.h"

namespace ckptfs {

// The deepest nesting of arrays and objects accepted in untrusted JSON. Real configs nest
// about 10 deep (a Keras functional model's layer dtype policy is 9).
inline constexpr size_t kMaxJsonDepth = 100;
// What ParseJson charges per structural character ([, {, :, ,) besides the text: a value,
// an object member's slot and key and its hash-index entry (measured: docs/security.md).
inline constexpr uint64_t kJsonNodeBytes = 96;

// Parses untrusted `text` (strict JSON, time linear in its size) as Json
// (nlohmann::json or nlohmann::ordered_json; the ordered one built with a hash index per
// object, so it too is linear). Errors name `shown`: Corruption "shown: not valid JSON",
// Unsupported "shown: JSON nested deeper than 100 levels", or the budget's refusal when
// `budget` is given and the tree would pass it ("NAME: metadata would take more than...").
template <typename Json>
Result<Json> ParseJson(std::string_view text, const std::string& shown,
                       MetadataBudget* budget = nullptr);

// At most `max_bytes` of `value`'s compact JSON (then "..."), for an error message: never
// more, whatever the value's size or depth (levels past 16 print as "..."). Control
// characters come out escaped, as JSON escapes them.
std::string QuoteJson(const nlohmann::json& value, size_t max_bytes = 120);
std::string QuoteJson(const nlohmann::ordered_json& value, size_t max_bytes = 120);

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
// a discarded value on any error), in time linear in its length; text nested deeper than
// twice kMaxJsonDepth is an error too (a discarded value). For JSON ckptfs wrote itself (the
// state_json of a checkpoint); untrusted text goes through ParseJson.
nlohmann::ordered_json ParseOrderedJson(std::string_view text);

}  // namespace ckptfs
