#include "core/format/tf/names.h"

namespace ckptfs::tf {

std::string UnescapeTfSegment(std::string_view segment) {
  std::string out;
  out.reserve(segment.size());
  for (size_t i = 0; i < segment.size(); ++i) {
    const char c = segment[i];
    const char next = i + 1 < segment.size() ? segment[i + 1] : '\0';
    if (c == '.' && next == '.') {
      out += '.';
      ++i;
    } else if (c == '.' && next == 'S') {
      out += '/';
      ++i;
    } else if (c == '.' && i == 0) {
      // A marker such as .OPTIMIZER_SLOT: TF's escaping never yields a lone dot.
    } else {
      out += c;
    }
  }
  return out;
}

TfName TfKeyToName(std::string_view key) {
  if (key.size() > kVariableValueSuffix.size() && key.ends_with(kVariableValueSuffix)) {
    key.remove_suffix(kVariableValueSuffix.size());
  }
  TfName name;
  size_t begin = 0;
  while (true) {
    const size_t slash = key.find('/', begin);
    name.segments.push_back(UnescapeTfSegment(key.substr(begin, slash - begin)));
    if (slash == std::string_view::npos) break;
    begin = slash + 1;
  }
  for (size_t i = 0; i < name.segments.size(); ++i) {
    name.dotted += (i ? "." : "") + name.segments[i];
  }
  return name;
}

namespace {

// Whether `key` has a segment exactly `segment` (between '/'s or the ends).
bool HasSegment(std::string_view key, std::string_view segment) {
  size_t begin = 0;
  while (true) {
    const size_t slash = key.find('/', begin);
    if (key.substr(begin, slash - begin) == segment) return true;
    if (slash == std::string_view::npos) return false;
    begin = slash + 1;
  }
}

}  // namespace

bool IsObjectBasedKey(std::string_view key) { return HasSegment(key, ".ATTRIBUTES"); }

bool IsTrainingStateKey(std::string_view key) {
  const std::string_view first = key.substr(0, key.find('/'));
  return first == "optimizer" || first == "save_counter" || HasSegment(key, ".OPTIMIZER_SLOT");
}

}  // namespace ckptfs::tf
