//===- TextTest.cpp - Text helpers ----------------------------------------===//
//
// asciiLower folds A-Z only: bytes of other scripts and of UTF-8 sequences
// stay as they are, whatever the C library's locale.
//
//===----------------------------------------------------------------------===//
#include "support/Text.h"

#include <gtest/gtest.h>

#include <string>

using namespace anefit;

namespace {

TEST(AsciiLower, FoldsOnlyAsciiCapitals) {
  EXPECT_EQ(asciiLower("Model.PTE"), "model.pte");
  EXPECT_EQ(asciiLower("CPU_ONLY"), "cpu_only");
  EXPECT_EQ(asciiLower("aten_Index_Put_0"), "aten_index_put_0");
  // "Ä" in UTF-8 and a lone 0xC4 byte are kept byte for byte; '@', '[', '`'
  // and '{' border the capitals and the small letters.
  std::string other = "\xC3\x84\xC4@[`{Z";
  EXPECT_EQ(asciiLower(other), "\xC3\x84\xC4@[`{z");
  EXPECT_EQ(asciiLower(""), "");
}

} // namespace
