//===- TypeTest.cpp - Types and dtypes ------------------------------------===//
#include "ir/Type.h"
#include "support/DType.h"

#include <gtest/gtest.h>

using namespace anefit;

TEST(Type, PrintsLikeCoremltools) {
  EXPECT_EQ(Type::tensor(DType::F32, std::vector<int64_t>{1, 3, 224, 224}).str(),
            "(1, 3, 224, 224, fp32)(Tensor)");
  EXPECT_EQ(Type::tensor(DType::I32, std::vector<int64_t>{3}).str(), "(3,int32)(Tensor)");
  EXPECT_EQ(Type::scalar(DType::F32).str(), "(fp32)(Scalar)");
  EXPECT_EQ(Type::state(Type::tensor(DType::F16, std::vector<int64_t>{1, 8})).str(),
            "(1, 8, fp16)(State)");
  EXPECT_EQ(Type::tensor(DType::F16, {Dim::symbolic("is0"), Dim::of(1024)}).str(),
            "(is0, 1024, fp16)(Tensor)");
}

TEST(Type, StaticShapeAndElements) {
  Type t = Type::tensor(DType::F16, std::vector<int64_t>{2, 3});
  ASSERT_TRUE(t.numElements());
  EXPECT_EQ(*t.numElements(), 6);
  Type s = Type::tensor(DType::F16, {Dim::symbolic("n"), Dim::of(3)});
  EXPECT_FALSE(s.numElements());
  EXPECT_NE(t, s);
}

TEST(DType, CodesRoundTrip) {
  for (int i = 0; i < kNumDTypes; ++i) {
    DType t = static_cast<DType>(i);
    EXPECT_EQ(dtypeFromName(dtypeName(t)), t);
    EXPECT_EQ(dtypeFromProtoCode(dtypeProtoCode(t)), t);
    if (dtypeBlobCode(t) != 0) {
      EXPECT_EQ(dtypeFromBlobCode(dtypeBlobCode(t)), t);
    }
  }
  EXPECT_FALSE(dtypeFromProtoCode(99));
  EXPECT_EQ(storageBytes(DType::U4, 5), 3u);
}

TEST(DType, HalfConversions) {
  EXPECT_EQ(floatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7C00); // overflow rounds to inf
  EXPECT_EQ(halfToFloat(0x0001), 5.9604644775390625e-08f);
  EXPECT_EQ(floatToHalf(5.9604644775390625e-08f), 0x0001);
  for (uint32_t h = 0; h < 0x7C00; ++h)
    EXPECT_EQ(floatToHalf(halfToFloat(static_cast<uint16_t>(h))), h);
}

TEST(Type, ElementCountOverflowIsNotACount) {
  Type huge = Type::tensor(DType::F16, std::vector<int64_t>{1ll << 40, 1ll << 40});
  EXPECT_FALSE(huge.numElements());
  Type negative = Type::tensor(DType::F16, std::vector<int64_t>{2, -3});
  EXPECT_FALSE(negative.numElements());
}

TEST(Type, NormalizeAxis) {
  // In range: a positive axis stays, a negative one counts from the end.
  EXPECT_EQ(normalizeAxis(0, 4), 0);
  EXPECT_EQ(normalizeAxis(3, 4), 3);
  EXPECT_EQ(normalizeAxis(-1, 4), 3);
  EXPECT_EQ(normalizeAxis(-4, 4), 0);
  // Out of range either way.
  EXPECT_FALSE(normalizeAxis(4, 4));
  EXPECT_FALSE(normalizeAxis(-5, 4));
  EXPECT_FALSE(normalizeAxis(0, 0));
  EXPECT_FALSE(normalizeAxis(INT64_MIN, 4));
  EXPECT_FALSE(normalizeAxis(INT64_MAX, 4));
  // With orRank the place after the last dimension is an axis too; -1 is still the last dim.
  EXPECT_EQ(normalizeAxis(4, 4, /*orRank=*/true), 4);
  EXPECT_EQ(normalizeAxis(-1, 4, /*orRank=*/true), 3);
  EXPECT_EQ(normalizeAxis(0, 0, /*orRank=*/true), 0);
  EXPECT_FALSE(normalizeAxis(5, 4, /*orRank=*/true));
  EXPECT_FALSE(normalizeAxis(-5, 4, /*orRank=*/true));
}
