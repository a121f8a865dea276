//===- IntMathTest.cpp - floor and ceiling division, negative indices ------===//
//
// Held against their definitions in floating point over every sign.
//
//===----------------------------------------------------------------------===//
#include "support/IntMath.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace anefit;

TEST(IntMath, DivisionRoundsAsItsNameSays) {
  for (int64_t a = -20; a <= 20; ++a)
    for (int64_t b = -7; b <= 7; ++b) {
      if (b == 0)
        continue;
      double q = static_cast<double>(a) / static_cast<double>(b);
      EXPECT_EQ(floorDiv(a, b), static_cast<int64_t>(std::floor(q))) << a << " / " << b;
      EXPECT_EQ(ceilDiv(a, b), static_cast<int64_t>(std::ceil(q))) << a << " / " << b;
      EXPECT_EQ(floorDiv(static_cast<int32_t>(a), static_cast<int32_t>(b)),
                static_cast<int32_t>(std::floor(q)));
    }
}

TEST(IntMath, NegativeIndicesCountFromTheEnd) {
  EXPECT_EQ(normalizeIndex(0, 4), 0);
  EXPECT_EQ(normalizeIndex(3, 4), 3);
  EXPECT_EQ(normalizeIndex(-1, 4), 3);
  EXPECT_EQ(normalizeIndex(-4, 4), 0);
  EXPECT_EQ(normalizeIndex(4, 4), std::nullopt);
  EXPECT_EQ(normalizeIndex(-5, 4), std::nullopt);
  EXPECT_EQ(normalizeIndex(0, 0), std::nullopt);
  EXPECT_EQ(normalizeIndex(INT64_MIN, 4), std::nullopt);
}
