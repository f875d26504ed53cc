#include "core/encoding/pickle_key.h"

#include <string_view>

namespace ckptfs {
namespace {

std::optional<std::string> ScalarName(const PickleValue& k) {
  switch (k.kind) {
    case PickleKind::kString:
    case PickleKind::kBytes:
      return k.text;
    case PickleKind::kInt:
      return std::to_string(k.int_value);
    case PickleKind::kBool:
      return std::string(k.int_value ? "True" : "False");
    case PickleKind::kNone:
      return std::string("None");
    default:
      return std::nullopt;
  }
}

// "Phase" of the global "__main__.Phase" (or "pkg.mod.Outer.Phase").
std::string_view LastName(std::string_view global) {
  const size_t dot = global.rfind('.');
  return dot == std::string_view::npos ? global : global.substr(dot + 1);
}

}  // namespace

std::optional<std::string> PickleKeyName(const PickleTree& tree, uint32_t v) {
  const PickleValue& k = tree.at(v);
  if (k.kind != PickleKind::kCall) return ScalarName(k);
  // REDUCE / NEWOBJ of a global on a tuple; the unpickler allowed getattr only on a name
  // in capitals (pickle.h).
  if (k.items.size() != 2 || tree.at(k.items[0]).kind != PickleKind::kGlobal) return std::nullopt;
  const std::string& callable = tree.at(k.items[0]).text;
  const std::vector<uint32_t>& args = tree.at(k.items[1]).items;
  if (LastName(callable) == "getattr") {
    if (args.size() != 2 || tree.at(args[0]).kind != PickleKind::kGlobal ||
        tree.at(args[1]).kind != PickleKind::kString) {
      return std::nullopt;
    }
    return std::string(LastName(tree.at(args[0]).text)) + "." + tree.at(args[1]).text;
  }
  if (args.size() != 1) return std::nullopt;
  const PickleValue& arg = tree.at(args[0]);
  std::optional<std::string> value = ScalarName(arg);
  if (!value) return std::nullopt;
  if (arg.kind == PickleKind::kString) value = "'" + *value + "'";
  return std::string(LastName(callable)) + "(" + *value + ")";
}

}  // namespace ckptfs
