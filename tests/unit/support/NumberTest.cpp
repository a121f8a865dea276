//===- NumberTest.cpp - Decimal numbers read from text --------------------===//
//
// parseFloating reads as std::from_chars does on every standard library (the
// libc++ build reads through strtod_l): the same numbers, and the same texts
// refused.
//
//===----------------------------------------------------------------------===//
#include "support/Number.h"

#include <gtest/gtest.h>

#include <clocale>
#include <cmath>
#include <limits>

using namespace anefit;

namespace {

TEST(ParseFloating, ReadsTheWholeTextRoundedToNearest) {
  double d = 0;
  float f = 0;
  ASSERT_TRUE(parseFloating("1.5", d));
  EXPECT_EQ(d, 1.5);
  ASSERT_TRUE(parseFloating("-2e-3", d));
  EXPECT_EQ(d, -2e-3);
  ASSERT_TRUE(parseFloating("0.1", f));
  EXPECT_EQ(f, 0.1f);
  ASSERT_TRUE(parseFloating("3.4028234e38", f));
  EXPECT_EQ(f, std::numeric_limits<float>::max());
  ASSERT_TRUE(parseFloating("1e-40", f)); // subnormal: kept
  EXPECT_GT(f, 0.0f);
  EXPECT_LT(f, std::numeric_limits<float>::min());
  ASSERT_TRUE(parseFloating("-0", d));
  EXPECT_TRUE(std::signbit(d));
  ASSERT_TRUE(parseFloating("inf", d));
  EXPECT_TRUE(std::isinf(d));
  ASSERT_TRUE(parseFloating("nan", f));
  EXPECT_TRUE(std::isnan(f));
}

TEST(ParseFloating, RefusesWhatFromCharsRefuses) {
  double d = 7;
  for (const char *text : {"", " 1", "+1", "0x10", "-0x1p3", "1.5x", "1,5", "e5", "-", "1e"})
    EXPECT_FALSE(parseFloating(text, d)) << "'" << text << "'";
  EXPECT_EQ(d, 7); // untouched
  float f = 7;
  EXPECT_FALSE(parseFloating("1e39", f));  // overflows fp32
  EXPECT_FALSE(parseFloating("1e-50", f)); // a non-zero number gone to zero
  EXPECT_FALSE(parseFloating("1e400", d)); // overflows fp64
  EXPECT_EQ(f, 7);
}

TEST(ParseFloating, IgnoresTheLocale) {
  // A locale with ',' as its decimal point, where one is installed.
  const char *old = std::setlocale(LC_NUMERIC, nullptr);
  std::string saved = old ? old : "C";
  bool changed =
      std::setlocale(LC_NUMERIC, "de_DE.UTF-8") || std::setlocale(LC_NUMERIC, "fr_FR.UTF-8");
  double d = 0;
  EXPECT_TRUE(parseFloating("2.25", d));
  EXPECT_EQ(d, 2.25);
  EXPECT_FALSE(parseFloating("2,25", d));
  std::setlocale(LC_NUMERIC, saved.c_str());
  (void)changed;
}

} // namespace
