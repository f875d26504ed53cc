#include "core/encoding/names.h"

namespace ckptfs {

std::string PercentEscapeSlash(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 3);
  for (char c : text) {
    if (c == '%') {
      out += "%25";
    } else if (c == '/') {
      out += "%2F";
    } else {
      out += c;
    }
  }
  return out;
}

std::string TensorNameProblem(std::string_view name) {
  if (name.find('\0') != std::string_view::npos) return "it holds a NUL byte";
  return "";
}

uint64_t Fnv1a64(std::string_view bytes) {
  uint64_t h = 14695981039346656037ull;
  for (char c : bytes) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

std::string SplitKeyFileName(std::string_view key) {
  std::string out = key == "map" ? std::string("%6Dap") : PercentEscapeSlash(key);
  if (out.size() + 3 > kMaxFileName) {
    static constexpr char kHex[] = "0123456789abcdef";
    out.resize(kSplitPrefixBytes);
    out += '~';
    const uint64_t h = Fnv1a64(key);
    for (int shift = 60; shift >= 0; shift -= 4) out += kHex[(h >> shift) & 0xf];
  }
  return out + ".pt";
}

std::optional<SplitName> DecodeSplitFileName(std::string_view name) {
  constexpr std::string_view kSuffix = ".pt";
  if (name.size() < kSuffix.size() || name.size() > kMaxFileName ||
      name.substr(name.size() - kSuffix.size()) != kSuffix || name == kSplitMapFile ||
      name.find('/') != std::string_view::npos || name.find('\0') != std::string_view::npos) {
    return std::nullopt;
  }
  std::string_view stem = name.substr(0, name.size() - kSuffix.size());
  SplitName out;
  if (name.size() == kSplitHashedSize && stem[kSplitPrefixBytes] == '~' &&
      stem.substr(kSplitPrefixBytes + 1).find_first_not_of("0123456789abcdef") ==
          std::string_view::npos) {
    // The prefix was cut at a byte count, maybe inside an escape: kept as it is.
    out.hashed = true;
    out.key = std::string(stem.substr(0, kSplitPrefixBytes));
    return out;
  }
  if (stem == "%6Dap") {
    out.key = "map";
    return out;
  }
  for (size_t i = 0; i < stem.size(); ++i) {
    if (stem[i] != '%') {
      out.key += stem[i];
    } else if (stem.substr(i, 3) == "%25") {
      out.key += '%';
      i += 2;
    } else if (stem.substr(i, 3) == "%2F") {
      out.key += '/';
      i += 2;
    } else {
      return std::nullopt;
    }
  }
  // "map.pt" is not a key file, and a name the key would not give is no key's.
  if (SplitKeyFileName(out.key) != name) return std::nullopt;
  return out;
}

}  // namespace ckptfs
