// A shape as messages and listings write it: "[4096,4096]". One joiner for every layer.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace ckptfs {

// `dims` joined by ',' between `open` and `close`: "[]" for a scalar.
inline std::string ShapeText(std::span<const uint64_t> dims, char open = '[', char close = ']') {
  std::string out(1, open);
  for (size_t i = 0; i < dims.size(); ++i) {
    // Appended piece by piece: `s += (i ? "," : "") + std::to_string(d)` makes GCC 12's
    // -O3 warn (-Wrestrict) about a temporary it cannot prove apart.
    if (i) out += ',';
    out += std::to_string(dims[i]);
  }
  out += close;
  return out;
}

}  // namespace ckptfs
