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
#include "support/Random.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
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

/// Both forms of `want` (fp32 values before rounding): t rounded, h its fp16.
void expectBothForms(const Tensor &t, const Tensor &h, const std::vector<float> &want,
                     const std::string &when) {
  for (size_t i = 0; i < want.size(); ++i) {
    uint16_t bits = floatToHalf(want[i]);
    ASSERT_EQ(h.data<uint16_t>()[i], bits) << when << ", element " << i;
    float wr = halfToFloat(bits);
    ASSERT_EQ(bitsOf(t.data<float>()[i]), bitsOf(wr)) << when << ", element " << i;
  }
}

TEST(Convert, HalvingAgainConvertsTheBoxesWrittenSinceAndNothingElse) {
  // A KV cache [heads 4, positions 6, dim 5] carried from step to step: each
  // step writes one position of every head (a strided box) and hands the
  // cache out as fp16 again. The fp16 form is kept with the cache and only
  // the box converted, unless someone still holds it or the cache was
  // written some other way; every form is the full conversion's, bit for bit.
  std::vector<float> hard = hardFloats();
  std::mt19937 rng(7);
  Shape shape = {4, 6, 5};
  std::vector<float> want(120);
  for (float &v : want)
    v = hard[static_cast<size_t>(uniformInt(rng, 0, static_cast<int64_t>(hard.size()) - 1))];
  Tensor t = Tensor::fromF32(want, shape);
  Tensor h = t.toHalfRoundingInPlace();
  EXPECT_FALSE(h.isOwned()) << "the fp16 form is read-only: it is kept with the cache";
  expectBothForms(t, h, want, "first");
  const uint8_t *kept = h.bytes();
  auto writePosition = [&](int64_t pos, int64_t stride, int64_t count) {
    float *p =
        reinterpret_cast<float *>(t.mutableBytesForBox(pos * 5, {4, 1, count}, {30, 5, stride}));
    for (int64_t head = 0; head < 4; ++head)
      for (int64_t j = 0; j < count; ++j) {
        int64_t e = head * 30 + pos * 5 + j * stride;
        p[e] = want[static_cast<size_t>(e)] =
            hard[static_cast<size_t>(uniformInt(rng, 0, static_cast<int64_t>(hard.size()) - 1))];
      }
  };
  for (int64_t pos = 0; pos < 6; ++pos) {
    h = Tensor();
    writePosition(pos, pos % 2 ? 1 : 2, pos % 2 ? 5 : 3);
    h = t.toHalfRoundingInPlace();
    EXPECT_EQ(h.bytes(), kept) << "position " << pos << ": the kept fp16 form was not reused";
    expectBothForms(t, h, want, "position " + std::to_string(pos));
  }
  // Held by the caller: a new fp16 tensor, the held one unchanged.
  Tensor held = h;
  std::vector<uint16_t> before(held.data<uint16_t>(), held.data<uint16_t>() + 120);
  writePosition(3, 1, 5);
  h = t.toHalfRoundingInPlace();
  EXPECT_NE(h.bytes(), held.bytes());
  expectBothForms(t, h, want, "while the last was held");
  EXPECT_EQ(std::vector<uint16_t>(held.data<uint16_t>(), held.data<uint16_t>() + 120), before);
  // Written without a box: every element is converted again.
  held = h = Tensor();
  float *p = t.mutableData<float>();
  for (size_t i = 0; i < want.size(); i += 7)
    p[i] = want[i] =
        hard[static_cast<size_t>(uniformInt(rng, 0, static_cast<int64_t>(hard.size()) - 1))];
  h = t.toHalfRoundingInPlace();
  expectBothForms(t, h, want, "after a write of any element");
}

} // namespace
