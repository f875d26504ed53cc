#include "core/checkpoint/natural_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace ckptfs {
namespace {

std::vector<std::string> Sorted(std::vector<std::string> names) {
  std::sort(names.begin(), names.end(),
            [](const std::string& a, const std::string& b) { return NaturalLess(a, b); });
  return names;
}

TEST(NaturalOrderTest, NumbersCompareByValue) {
  EXPECT_EQ(Sorted({"layers.10.w", "layers.2.w", "layers.1.w", "layers.100.w", "layers.9.w"}),
            (std::vector<std::string>{"layers.1.w", "layers.2.w", "layers.9.w", "layers.10.w",
                                      "layers.100.w"}));
  EXPECT_EQ(Sorted({"h.11.mlp", "h.2.attn", "h.2.mlp", "h.11.attn"}),
            (std::vector<std::string>{"h.2.attn", "h.2.mlp", "h.11.attn", "h.11.mlp"}));
}

TEST(NaturalOrderTest, TextComparesByBytes) {
  EXPECT_TRUE(NaturalLess("a", "b"));
  EXPECT_TRUE(NaturalLess("B", "a"));  // bytes, not a locale
  EXPECT_TRUE(NaturalLess("layer", "layers"));
  EXPECT_FALSE(NaturalLess("layers", "layer"));
  EXPECT_TRUE(NaturalLess("", "a"));
  EXPECT_FALSE(NaturalLess("", ""));
  EXPECT_FALSE(NaturalLess("x.1", "x.1"));
}

TEST(NaturalOrderTest, LongDigitRunsDoNotOverflow) {
  const std::string big = "w" + std::string(40, '9');
  EXPECT_TRUE(NaturalLess("w18446744073709551615", big));
  EXPECT_TRUE(NaturalLess("w" + std::string(30, '0') + "7", "w8"));
  EXPECT_FALSE(NaturalLess(big, "w18446744073709551616"));
}

TEST(NaturalOrderTest, LeadingZerosTieBreakByBytesSoTheOrderIsStrict) {
  EXPECT_TRUE(NaturalLess("a01", "a1"));
  EXPECT_FALSE(NaturalLess("a1", "a01"));
  EXPECT_TRUE(NaturalLess("a01", "a2"));
  EXPECT_TRUE(NaturalLess("model-00009", "model-00010"));
  EXPECT_TRUE(NaturalLess("a000", "a1"));
}

// Irreflexive, asymmetric and total over distinct names (so sorting is deterministic),
// and a sorted list never has a later name before an earlier one: checked over random
// names of digits, dots and letters.
TEST(NaturalOrderTest, IsAStrictTotalOrder) {
  std::mt19937 rng(11);
  const std::string alphabet = "0019.ab";
  std::vector<std::string> names;
  for (int n = 0; n < 300; ++n) {
    std::string s;
    for (size_t len = rng() % 7; len > 0; --len) s += alphabet[rng() % alphabet.size()];
    names.push_back(s);
  }
  for (const std::string& a : names) {
    EXPECT_FALSE(NaturalLess(a, a)) << a;
    for (const std::string& b : names) {
      if (a != b) {
        EXPECT_NE(NaturalLess(a, b), NaturalLess(b, a)) << a << " vs " << b;
      }
    }
  }
  const std::vector<std::string> sorted = Sorted(names);
  for (size_t i = 0; i + 1 < sorted.size(); ++i) {
    for (size_t j = i + 1; j < sorted.size(); ++j) {
      EXPECT_FALSE(NaturalLess(sorted[j], sorted[i])) << sorted[i] << " / " << sorted[j];
    }
  }
}

}  // namespace
}  // namespace ckptfs
