// The .npy format (version 1.0, or 2.0 when the header needs it): builds the header that
// precedes raw little-endian C-order data. The header is padded so data starts at a
// multiple of 64 bytes, as numpy writes it, which keeps numpy.load(mmap_mode='r') aligned.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/encoding/dtype.h"

namespace ckptfs {

// Requires NumpyDescr(dtype) to be non-empty.
std::string BuildNpyHeader(Dtype dtype, std::span<const uint64_t> shape);

}  // namespace ckptfs
