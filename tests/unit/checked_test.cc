// core/checked.h on its edges: the largest sums and products that fit, the smallest that do
// not, zeros, and ranges that end at, past or far past the size.
#include "core/checked.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace ckptfs {
namespace {

TEST(CheckedTest, AddFitsUpToMaxAndRefusesOnePast) {
  EXPECT_EQ(CheckedAdd(0, 0), 0u);
  EXPECT_EQ(CheckedAdd(2, 3), 5u);
  EXPECT_EQ(CheckedAdd(UINT64_MAX, 0), UINT64_MAX);
  EXPECT_EQ(CheckedAdd(UINT64_MAX - 7, 7), UINT64_MAX);
  EXPECT_EQ(CheckedAdd(UINT64_MAX - 7, 8), std::nullopt);
  EXPECT_EQ(CheckedAdd(UINT64_MAX, 1), std::nullopt);
  EXPECT_EQ(CheckedAdd(1, UINT64_MAX), std::nullopt);
  EXPECT_EQ(CheckedAdd(UINT64_MAX, UINT64_MAX), std::nullopt);
}

TEST(CheckedTest, MulFitsUpToMaxAndRefusesOnePast) {
  EXPECT_EQ(CheckedMul(0, UINT64_MAX), 0u);
  EXPECT_EQ(CheckedMul(UINT64_MAX, 0), 0u);
  EXPECT_EQ(CheckedMul(1, UINT64_MAX), UINT64_MAX);
  EXPECT_EQ(CheckedMul(uint64_t{1} << 32, (uint64_t{1} << 32) - 1),
            UINT64_MAX - UINT32_MAX);                                         // fits
  EXPECT_EQ(CheckedMul(uint64_t{1} << 32, uint64_t{1} << 32), std::nullopt);  // 2^64
  EXPECT_EQ(CheckedMul(UINT64_MAX / 3, 3), UINT64_MAX);                       // max is 3 x 5 x ...
  EXPECT_EQ(CheckedMul(UINT64_MAX / 3 + 1, 3), std::nullopt);
  EXPECT_EQ(CheckedMul(2, UINT64_MAX / 2 + 1), std::nullopt);
}

TEST(CheckedTest, SaturatingAddStopsAtMax) {
  EXPECT_EQ(SaturatingAdd(2, 3), 5u);
  EXPECT_EQ(SaturatingAdd(UINT64_MAX - 1, 1), UINT64_MAX);
  EXPECT_EQ(SaturatingAdd(UINT64_MAX - 1, 2), UINT64_MAX);
  EXPECT_EQ(SaturatingAdd(UINT64_MAX, UINT64_MAX), UINT64_MAX);
}

TEST(CheckedTest, ProductOfAShape) {
  EXPECT_EQ(CheckedProduct({}), 1u);  // a scalar has one element
  EXPECT_EQ(CheckedProduct({}, 4), 4u);
  const std::vector<uint64_t> shape{4096, 11008};
  EXPECT_EQ(CheckedProduct(shape), 4096u * 11008u);
  EXPECT_EQ(CheckedProduct(shape, 2), 2u * 4096u * 11008u);  // bytes of a bf16 tensor
  const std::vector<uint64_t> empty{3, 0, 5};
  EXPECT_EQ(CheckedProduct(empty), 0u);
  EXPECT_EQ(CheckedProduct(empty, 8), 0u);
}

TEST(CheckedTest, ProductRefusesAnOverflowAnywhere) {
  const std::vector<uint64_t> fits{uint64_t{1} << 31, uint64_t{1} << 32};  // 2^63
  EXPECT_EQ(CheckedProduct(fits), uint64_t{1} << 63);
  EXPECT_EQ(CheckedProduct(fits, 2), std::nullopt);  // the element size tips it over
  const std::vector<uint64_t> wraps_to_zero{uint64_t{1} << 32, uint64_t{1} << 32};
  EXPECT_EQ(CheckedProduct(wraps_to_zero), std::nullopt);  // wrapping would say 0
  // A zero after an overflow does not hide it; a zero before one does (the product is 0).
  const std::vector<uint64_t> zero_after{uint64_t{1} << 40, uint64_t{1} << 40, 0};
  EXPECT_EQ(CheckedProduct(zero_after), std::nullopt);
  const std::vector<uint64_t> zero_before{0, uint64_t{1} << 40, uint64_t{1} << 40};
  EXPECT_EQ(CheckedProduct(zero_before), 0u);
  const std::vector<uint64_t> max{UINT64_MAX};
  EXPECT_EQ(CheckedProduct(max), UINT64_MAX);
  EXPECT_EQ(CheckedProduct(max, 2), std::nullopt);
}

TEST(CheckedTest, RangeWithinASize) {
  EXPECT_TRUE(RangeWithin(0, 0, 0));
  EXPECT_TRUE(RangeWithin(0, 10, 10));
  EXPECT_TRUE(RangeWithin(10, 0, 10));  // empty, at the end
  EXPECT_TRUE(RangeWithin(3, 7, 10));
  EXPECT_FALSE(RangeWithin(3, 8, 10));
  EXPECT_FALSE(RangeWithin(11, 0, 10));  // starts past the end
  EXPECT_FALSE(RangeWithin(0, 11, 10));
  // Sums that would wrap to a small number past a plain `offset + length <= size`.
  EXPECT_FALSE(RangeWithin(8, UINT64_MAX - 7, 100));
  EXPECT_FALSE(RangeWithin(UINT64_MAX, 1, 100));
  EXPECT_FALSE(RangeWithin(1, UINT64_MAX, UINT64_MAX));
  EXPECT_TRUE(RangeWithin(1, UINT64_MAX - 1, UINT64_MAX));
  EXPECT_TRUE(RangeWithin(UINT64_MAX, 0, UINT64_MAX));
}

// Usable where a constant is needed (limits computed at compile time).
static_assert(CheckedMul(uint64_t{1} << 20, 1024) == uint64_t{1} << 30);
static_assert(!CheckedAdd(UINT64_MAX, 1).has_value());
static_assert(RangeWithin(4, 4, 8) && !RangeWithin(5, 4, 8));

}  // namespace
}  // namespace ckptfs
