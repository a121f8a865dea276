//===- MemoryBudgetTest.cpp - --max-memory as users write it --------------===//
#include "runtime/Tensor.h"

#include <gtest/gtest.h>

using anefit::runtime::MemoryBudget;

TEST(MemoryBudget, ParsesLimitsAsUsersWriteThem) {
  EXPECT_EQ(MemoryBudget::parseLimit("1048576"), 1048576u);
  EXPECT_EQ(MemoryBudget::parseLimit("512M"), 512ull << 20);
  EXPECT_EQ(MemoryBudget::parseLimit("8G"), 8ull << 30);
  EXPECT_EQ(MemoryBudget::parseLimit("8g"), 8ull << 30);
  EXPECT_EQ(MemoryBudget::parseLimit("64KiB"), 64ull << 10);
  EXPECT_EQ(MemoryBudget::parseLimit("2GB"), 2ull << 30);
  EXPECT_EQ(MemoryBudget::parseLimit("1T"), 1ull << 40);
  EXPECT_EQ(MemoryBudget::parseLimit("100B"), 100u);
  for (const char *bad :
       {"", "lots", "G", "0", "0M", "8X", "8 G", "-1", "8.5G", "16777216T", "99999999999999999999"})
    EXPECT_EQ(MemoryBudget::parseLimit(bad), std::nullopt) << bad;
}
