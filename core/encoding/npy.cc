#include "core/encoding/npy.h"

namespace ckptfs {

std::string BuildNpyHeader(Dtype dtype, std::span<const uint64_t> shape) {
  std::string dict =
      "{'descr': '" + std::string(NumpyDescr(dtype)) + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) {
    dict += std::to_string(shape[i]);
    dict += (shape.size() == 1 || i + 1 < shape.size()) ? ", " : "";
  }
  if (shape.size() == 1) dict.pop_back();  // "(3,)" is numpy's one-tuple spelling
  dict += "), }";

  // magic(6) + version(2) + header length field (2 in v1.0, 4 in v2.0) + dict + '\n'.
  const bool v2 = dict.size() + 1 + 10 > 65535;
  const size_t prefix = v2 ? 12 : 10;
  const size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict += '\n';

  std::string out = "\x93NUMPY";
  out += static_cast<char>(v2 ? 2 : 1);
  out += '\0';
  const size_t len = dict.size();
  for (size_t i = 0; i < (v2 ? 4u : 2u); ++i) out += static_cast<char>((len >> (8 * i)) & 0xff);
  return out + dict;
}

}  // namespace ckptfs
