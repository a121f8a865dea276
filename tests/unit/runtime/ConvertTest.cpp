//===- ConvertTest.cpp - Bulk fp16 conversions against the scalar ones ----===//
//
// halfToFloatN, floatToHalfN and roundToHalfN give the bits of halfToFloat
// and floatToHalf for every fp16 value and for floats around every rounding
// boundary, NaNs, infinities, subnormals and odd lengths included, on every
// path this CPU has (F16C and portable).
//
//===----------------------------------------------------------------------===//
#include "runtime/Convert.h"
#include "RuntimeTestUtil.h"
#include "runtime/Tensor.h"
#include "runtime/ThreadPool.h"
#include "support/DType.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

using namespace anefit;
using namespace anefit::runtime;

namespace {

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(Convert, EveryHalfWidensLikeTheScalar) {
  std::vector<uint16_t> h(65536 + 3);
  for (size_t i = 0; i < h.size(); ++i)
    h[i] = static_cast<uint16_t>(i);
  for (KernelIsa isa : test::kernelIsas()) {
    test::IsaGuard guard(isa);
    SCOPED_TRACE(test::isaName(isa));
    std::vector<float> f(h.size());
    halfToFloatN(h.data(), f.data(), static_cast<int64_t>(h.size()));
    for (size_t i = 0; i < h.size(); ++i) {
      float want = halfToFloat(h[i]);
      if (std::isnan(want))
        ASSERT_TRUE(std::isnan(f[i])) << std::hex << h[i];
      else
        ASSERT_EQ(bitsOf(f[i]), bitsOf(want)) << std::hex << h[i];
    }
  }
}

/// Floats around every fp16 rounding boundary, specials and random bits.
std::vector<float> hardFloats() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          65504.0f,
                          65519.99f,
                          65520.0f,
                          -65520.0f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          -std::nanf("0x12345"),
                          5.96e-8f,
                          2.98e-8f,
                          2.99e-8f,
                          1e-10f,
                          6.1e-5f,
                          6.09e-5f,
                          std::numeric_limits<float>::denorm_min()};
  // Every fp16 value, and the floats just around each midpoint between two.
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    float a = halfToFloat(static_cast<uint16_t>(h)), b = halfToFloat(static_cast<uint16_t>(h + 1));
    float mid = a + (b - a) / 2;
    for (float x : {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      v.push_back(x);
      v.push_back(-x);
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) {
    uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    v.push_back(f);
  }
  return v;
}

TEST(Convert, FloatsNarrowAndRoundLikeTheScalar) {
  std::vector<float> v = hardFloats();
  for (KernelIsa isa : test::kernelIsas()) {
    test::IsaGuard guard(isa);
    SCOPED_TRACE(test::isaName(isa));
    std::vector<uint16_t> h(v.size());
    floatToHalfN(v.data(), h.data(), static_cast<int64_t>(v.size()));
    std::vector<float> r = v;
    roundToHalfN(r.data(), static_cast<int64_t>(r.size()));
    for (size_t i = 0; i < v.size(); ++i) {
      uint16_t want = floatToHalf(v[i]);
      ASSERT_EQ(h[i], want) << "value " << v[i] << " bits " << std::hex << bitsOf(v[i]);
      float wr = halfToFloat(want);
      if (std::isnan(wr))
        ASSERT_TRUE(std::isnan(r[i]));
      else
        ASSERT_EQ(bitsOf(r[i]), bitsOf(wr)) << "value " << v[i];
    }
  }
}

TEST(Convert, HalvingInPlaceGivesBothFormsOfTheScalar) {
  // The fp16 output and the fp32 carry a host keeps, from one pass, on two
  // threads, over a length that leaves odd tails in blocks and chunks.
  std::vector<float> v = hardFloats();
  v.resize(v.size() - 5);
  ThreadScope threads(2);
  Tensor t = Tensor::fromF32(v, {static_cast<int64_t>(v.size())});
  Tensor h = t.toHalfRoundingInPlace();
  ASSERT_EQ(h.dtype(), DType::F16);
  ASSERT_EQ(h.shape(), t.shape());
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t want = floatToHalf(v[i]);
    ASSERT_EQ(h.data<uint16_t>()[i], want) << "value " << v[i];
    float wr = halfToFloat(want);
    if (std::isnan(wr))
      ASSERT_TRUE(std::isnan(t.data<float>()[i]));
    else
      ASSERT_EQ(bitsOf(t.data<float>()[i]), bitsOf(wr)) << "value " << v[i];
  }
  // Only an fp32 tensor nobody else holds may be rounded in place.
  Tensor shared = t;
  EXPECT_THROW(t.toHalfRoundingInPlace(), std::logic_error);
  EXPECT_THROW(h.toHalfRoundingInPlace(), std::logic_error);
}

} // namespace
