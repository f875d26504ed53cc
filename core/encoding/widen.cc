#include "core/encoding/widen.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>

namespace ckptfs {
namespace {

constexpr uint32_t kSign = 0x80000000u;
constexpr uint32_t kQuietNan = 0x7fc00000u;

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }

// The float32 bits of each of the 256 values of a float8 with `mantissa_bits` mantissa
// bits and exponent bias `bias`; `fn` for the E4M3FN encoding (no infinity, NaN only where
// exponent and mantissa are all ones), else IEEE's (all-ones exponent: inf or NaN).
std::array<uint32_t, 256> Float8Table(int mantissa_bits, int bias, bool fn) {
  std::array<uint32_t, 256> table{};
  const int exponent_bits = 7 - mantissa_bits;
  const uint32_t max_exponent = (1u << exponent_bits) - 1;
  const uint32_t max_mantissa = (1u << mantissa_bits) - 1;
  for (uint32_t b = 0; b < 256; ++b) {
    const uint32_t sign = (b & 0x80) ? kSign : 0;
    const uint32_t exponent = (b >> mantissa_bits) & max_exponent;
    const uint32_t mantissa = b & max_mantissa;
    uint32_t bits;
    if (exponent == max_exponent && (!fn || mantissa == max_mantissa)) {
      bits = (fn || mantissa != 0) ? kQuietNan : Bits(INFINITY);
    } else if (exponent == 0) {
      // Subnormal: mantissa * 2^(1 - bias - mantissa_bits), a normal float32.
      bits = Bits(std::ldexp(static_cast<float>(mantissa), 1 - bias - mantissa_bits));
    } else {
      bits = ((exponent - bias + 127) << 23) | (mantissa << (23 - mantissa_bits));
    }
    table[b] = sign | bits;
  }
  return table;
}

void Store(uint32_t bits, uint8_t* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(bits >> (8 * i));
}

}  // namespace

bool WidensToF32(Dtype dtype) {
  return dtype == Dtype::kBF16 || dtype == Dtype::kF8E4M3 || dtype == Dtype::kF8E5M2;
}

void WidenToF32(Dtype dtype, const uint8_t* in, size_t count, uint8_t* out) {
  if (dtype == Dtype::kBF16) {
    for (size_t i = 0; i < count; ++i) {
      Store((static_cast<uint32_t>(in[2 * i]) | static_cast<uint32_t>(in[2 * i + 1]) << 8) << 16,
            out + 4 * i);
    }
    return;
  }
  static const std::array<uint32_t, 256> kE4M3 = Float8Table(3, 7, /*fn=*/true);
  static const std::array<uint32_t, 256> kE5M2 = Float8Table(2, 15, /*fn=*/false);
  const std::array<uint32_t, 256>& table = dtype == Dtype::kF8E4M3 ? kE4M3 : kE5M2;
  for (size_t i = 0; i < count; ++i) Store(table[in[i]], out + 4 * i);
}

}  // namespace ckptfs
