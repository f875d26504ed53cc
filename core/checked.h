// Checked arithmetic on unsigned 64-bit lengths, offsets and counts read from untrusted
// files: every parser that adds, multiplies or bounds a figure it read uses these instead
// of a hand-written `a > UINT64_MAX - b`, so a wrap cannot pass a check by accident.
//
// Each operation either gives the exact result or says it has none (nullopt, false); none
// wraps, none is undefined for any input. Saturating forms are for running totals whose
// only use is a comparison against a limit. At the top of core/ so that every layer
// (cache, source, codec, encoding, ...) may use it. Pure functions: thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace ckptfs {

// a + b, or nullopt where it exceeds UINT64_MAX.
constexpr std::optional<uint64_t> CheckedAdd(uint64_t a, uint64_t b) {
  uint64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

// a * b, or nullopt where it exceeds UINT64_MAX.
constexpr std::optional<uint64_t> CheckedMul(uint64_t a, uint64_t b) {
  uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

// a + b, or UINT64_MAX where it would exceed it.
constexpr uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return CheckedAdd(a, b).value_or(UINT64_MAX);
}

// `first` times every factor in order (a shape's element count with first 1, its byte size
// with first the element size), or nullopt where a partial product exceeds UINT64_MAX.
// Taken left to right: a zero factor makes every later product 0, but an overflow before
// it is still reported, so shapes read from a file refuse the same way whatever follows.
constexpr std::optional<uint64_t> CheckedProduct(std::span<const uint64_t> factors,
                                                 uint64_t first = 1) {
  uint64_t product = first;
  for (uint64_t f : factors) {
    if (__builtin_mul_overflow(product, f, &product)) return std::nullopt;
  }
  return product;
}

// Whether the `length` bytes at `offset` lie within [0, size): offset + length <= size,
// computed without wrapping. An empty range at `size` itself is within.
constexpr bool RangeWithin(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

}  // namespace ckptfs
