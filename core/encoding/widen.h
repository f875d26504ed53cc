// Widening the float types numpy lacks to float32: BF16 (bfloat16), F8_E4M3 (safetensors'
// name for float8_e4m3fn) and F8_E5M2, as ml_dtypes and torch define them. Every value of
// each is a float32 value, so the widening is exact: BF16 is the top half of a float32;
// F8_E4M3FN has bias 7, subnormals, no infinity and NaN at S.1111.111; F8_E5M2 is IEEE-like
// (bias 15, subnormals, infinities, NaNs). tensors/ shows such tensors as float32 .npy
// files widened on read. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/encoding/dtype.h"

namespace ckptfs {

// Whether `dtype` is one numpy lacks that widens exactly to float32 (BF16, F8_E4M3, F8_E5M2).
bool WidensToF32(Dtype dtype);

// Widens `count` elements of `dtype` (WidensToF32), stored little-endian at `in`
// (count * DtypeSize(dtype) bytes), into `count` little-endian float32 at `out`. A NaN
// stays a NaN of the same sign.
void WidenToF32(Dtype dtype, const uint8_t* in, size_t count, uint8_t* out);

}  // namespace ckptfs
