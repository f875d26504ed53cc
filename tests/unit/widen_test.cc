// Widening BF16 / F8_E4M3 / F8_E5M2 to float32 (core/encoding/widen.h) and WidenedSource
// (core/layout/views/widened_source.h): values from the types' definitions, and reads of
// any offset and length, at either phase, through a source that counts its reads.
#include "core/encoding/widen.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/layout/views/widened_source.h"

namespace ckptfs {
namespace {

float Widen(Dtype dtype, std::vector<uint8_t> in) {
  uint8_t out[4];
  WidenToF32(dtype, in.data(), 1, out);
  float f;
  std::memcpy(&f, out, 4);
  return f;
}

TEST(Widen, Float8E4M3FnByDefinition) {
  EXPECT_EQ(Widen(Dtype::kF8E4M3, {0x7e}), 448.0f);  // the largest: S.1111.110
  EXPECT_EQ(Widen(Dtype::kF8E4M3, {0xfe}), -448.0f);
  EXPECT_EQ(Widen(Dtype::kF8E4M3, {0x38}), 1.0f);
  EXPECT_EQ(Widen(Dtype::kF8E4M3, {0x01}), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(Widen(Dtype::kF8E4M3, {0x07}), std::ldexp(7.0f, -9));
  EXPECT_EQ(Widen(Dtype::kF8E4M3, {0x08}), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_TRUE(std::signbit(Widen(Dtype::kF8E4M3, {0x80})));
  EXPECT_EQ(Widen(Dtype::kF8E4M3, {0x78}), 256.0f);  // exponent 15 is finite in E4M3FN
  EXPECT_TRUE(std::isnan(Widen(Dtype::kF8E4M3, {0x7f})));
  EXPECT_TRUE(std::isnan(Widen(Dtype::kF8E4M3, {0xff})));
  int nans = 0;
  for (int b = 0; b < 256; ++b) nans += std::isnan(Widen(Dtype::kF8E4M3, {uint8_t(b)}));
  EXPECT_EQ(nans, 2);
}

TEST(Widen, Float8E5M2ByDefinition) {
  EXPECT_EQ(Widen(Dtype::kF8E5M2, {0x7b}), 57344.0f);
  EXPECT_EQ(Widen(Dtype::kF8E5M2, {0x3c}), 1.0f);
  EXPECT_EQ(Widen(Dtype::kF8E5M2, {0x01}), std::ldexp(1.0f, -16));
  EXPECT_EQ(Widen(Dtype::kF8E5M2, {0x04}), std::ldexp(1.0f, -14));
  EXPECT_EQ(Widen(Dtype::kF8E5M2, {0x7c}), INFINITY);
  EXPECT_EQ(Widen(Dtype::kF8E5M2, {0xfc}), -INFINITY);
  int nans = 0;
  for (int b = 0; b < 256; ++b) nans += std::isnan(Widen(Dtype::kF8E5M2, {uint8_t(b)}));
  EXPECT_EQ(nans, 6);
}

TEST(Widen, Bfloat16IsTheTopHalf) {
  EXPECT_EQ(Widen(Dtype::kBF16, {0x80, 0x3f}), 1.0f);
  EXPECT_EQ(Widen(Dtype::kBF16, {0x49, 0x40}), 3.140625f);
  EXPECT_EQ(Widen(Dtype::kBF16, {0x80, 0xff}), -INFINITY);
  EXPECT_EQ(std::bit_cast<uint32_t>(Widen(Dtype::kBF16, {0x01, 0x00})), 0x00010000u);
}

// Every range (inside one float32, across chunks, the last bytes, empty) reads as the
// same bytes of one whole read, at both phases of a 2-byte type; past the end fails.
TEST(WidenedSource, AnyRangeAtEitherPhase) {
  std::string bytes;
  for (int i = 0; i < 70001; ++i) bytes += static_cast<char>(i * 7 + 3);
  MemorySource stored("s.safetensors", bytes);
  for (uint32_t phase : {0u, 1u}) {
    WidenedSource wide(stored, Dtype::kBF16, phase);
    const uint64_t elements = (bytes.size() - phase) / 2;
    ASSERT_EQ(wide.Size(), elements * 4);
    std::vector<uint8_t> all(wide.Size());
    ASSERT_TRUE(wide.ReadAt(0, all).ok());
    for (uint64_t k = 0; k < elements; k += 997) {
      const uint8_t* in = reinterpret_cast<const uint8_t*>(bytes.data()) + phase + 2 * k;
      uint8_t want[4];
      WidenToF32(Dtype::kBF16, in, 1, want);
      ASSERT_EQ(std::memcmp(all.data() + 4 * k, want, 4), 0) << "element " << k;
    }
    const std::pair<uint64_t, uint64_t> kRanges[] = {
        {1, 6}, {3, 1}, {4, 4}, {5, 139'990}, {wide.Size() - 3, 3}, {7, 0}};
    for (auto [offset, length] : kRanges) {
      std::vector<uint8_t> part(length);
      ASSERT_TRUE(wide.ReadAt(offset, part).ok()) << offset << "+" << length;
      EXPECT_EQ(std::memcmp(part.data(), all.data() + offset, length), 0)
          << offset << "+" << length;
    }
    std::vector<uint8_t> past(8);
    EXPECT_FALSE(wide.ReadAt(wide.Size() - 4, past).ok());
  }
}

}  // namespace
}  // namespace ckptfs
