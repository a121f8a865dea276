//===- PassExampleTest.cpp - Pass examples can fail -----------------------===//
#include "support/Error.h"
#include "transforms/Pass.h"

#include <gtest/gtest.h>

using namespace anefit;

TEST(PassExample, AWrongAfterOrAFragmentIsCaught) {
  const PassInfo *dce = findPass("dce");
  ASSERT_NE(dce, nullptr);
  EXPECT_TRUE(runPassExample(*dce).matches());
  PassInfo wrong = *dce;
  wrong.after = wrong.before; // as if dce removed nothing
  PassExampleRun r = runPassExample(wrong);
  EXPECT_FALSE(r.matches());
  EXPECT_NE(r.want.find("mul("), std::string::npos);
  EXPECT_EQ(r.got.find("mul("), std::string::npos);
  PassInfo fragment = *dce;
  fragment.before = "%b: (4,fp32)(Tensor) = mul(x=%x, y=2.0, name=\"b\")";
  EXPECT_THROW(runPassExample(fragment), InputError);
}
