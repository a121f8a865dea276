//===- LinearTest.cpp - linear, matmul, conv and attention kernels --------===//
//
// Checks the BLAS-backed kernels against naive loops written in the test,
// with fp32 and in-place fp16 weights, over the shapes converters emit.
//
//===----------------------------------------------------------------------===//
#include "RuntimeTestUtil.h"
#include "runtime/kernels/Lazy.h"
#include "support/Random.h"

#include <cmath>
#include <cstring>
#include <random>

using namespace anefit;
using namespace anefit::test;

namespace {

std::vector<float> randomValues(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (float &f : v)
    f = uniformFloat(rng, -1, 1);
  return v;
}

/// fp16-representable values, so fp16 and fp32 weights give the same result.
std::vector<float> halfValues(size_t n, uint32_t seed) {
  std::vector<float> v = randomValues(n, seed);
  for (float &f : v)
    f = halfToFloat(floatToHalf(f));
  return v;
}

class LinearWeights : public ::testing::TestWithParam<std::tuple<bool, int64_t>> {};

TEST_P(LinearWeights, MatchesNaiveLoop) {
  auto [half, rows] = GetParam();
  const int64_t k = 37, n = 70; // not multiples of the vector width or tile
  std::vector<float> x = randomValues(rows * k, 1), w = halfValues(n * k, 2),
                     bias = randomValues(n, 3);
  ProgramBuilder b;
  Value *in = b.input("x", DType::F32, {rows, k});
  ConstantRef weight = half ? constF16(w, {n, k}) : constF32(w, {n, k});
  b.output(b.op("linear", {{"x", in}, {"weight", weight}, {"bias", constF32(bias, {n})}},
                DType::F32, {rows, n}));
  auto out = runOnce(b, {{"x", Tensor::fromF32(x, {rows, k})}});
  std::vector<float> want(rows * n);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = bias[j];
      for (int64_t c = 0; c < k; ++c)
        s += double(x[i * k + c]) * w[j * k + c];
      want[i * n + j] = static_cast<float>(s);
    }
  expectNear(out[0], want, {rows, n}, 1e-5f, 1e-5f);
}

INSTANTIATE_TEST_SUITE_P(Weights, LinearWeights,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(1, 3, 9)),
                         [](const auto &info) {
                           return std::string(std::get<0>(info.param) ? "fp16" : "fp32") + "_rows" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(Linear, Fp16DecodeRowsOnEveryIsa) {
  // The fused fp16 matrix-vector kernel (up to 4 rows of x) on every path
  // this CPU has: within fp32 accumulation error of a double-precision loop,
  // the same bits on 1 and 3 threads, and on the portable and AVX2 paths
  // exactly dotF32 of the widened row (the AVX-512 kernel sums 16 lanes in
  // its own order). Widths cover the 64-value steps, 8-value steps and
  // scalar tails.
  for (int64_t k : {5, 8, 37, 64, 100, 1031, 2048}) {
    for (int64_t rows : {1, 2, 4}) {
      const int64_t n = 67;
      std::vector<float> x = randomValues(size_t(rows * k), 40 + uint32_t(k)),
                         w = halfValues(size_t(n * k), 41 + uint32_t(k));
      ProgramBuilder b;
      Value *in = b.input("x", DType::F32, {rows, k});
      b.output(b.op("linear", {{"x", in}, {"weight", constF16(w, {n, k})}}, DType::F32, {rows, n}));
      Tensor xt = Tensor::fromF32(x, {rows, k});
      for (runtime::KernelIsa isa : kernelIsas()) {
        IsaGuard guard(isa);
        SCOPED_TRACE(std::string(isaName(isa)) + " k " + std::to_string(k) + " rows " +
                     std::to_string(rows));
        auto run = [&](int threads) {
          runtime::RunOptions opts;
          opts.threads = threads;
          runtime::Interpreter interp(*b.fn, opts);
          return interp.run({{"x", xt}})[0].tensor;
        };
        Tensor one = run(1), three = run(3);
        ASSERT_EQ(std::memcmp(one.bytes(), three.bytes(), size_t(one.numBytes())), 0);
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double s = 0, mag = 0;
            for (int64_t c = 0; c < k; ++c) {
              s += double(x[i * k + c]) * w[j * k + c];
              mag += std::fabs(double(x[i * k + c]) * w[j * k + c]);
            }
            float got = one.data<float>()[i * n + j];
            ASSERT_NEAR(got, s, 1e-6 * mag + 1e-7) << "row " << i << " column " << j;
            if (isa < runtime::KernelIsa::Avx512) {
              ASSERT_EQ(got, runtime::dotF32(x.data() + i * k, w.data() + j * k, k))
                  << "row " << i << " column " << j;
            }
          }
      }
    }
  }
}

TEST(Matmul, BatchedBroadcastAndTranspose) {
  // x [2, 3, 4] @ y^T with y [5, 4] broadcast over the batch.
  std::vector<float> x = randomValues(24, 4), y = randomValues(20, 5);
  ProgramBuilder b;
  Value *in = b.input("x", DType::F32, {2, 3, 4});
  b.output(b.op("matmul",
                {{"x", in}, {"y", constF32(y, {5, 4})}, {"transpose_y", scalarBool(true)}},
                DType::F32, {2, 3, 5}));
  b.output(b.op("matmul",
                {{"x", in}, {"y", constF16(y, {5, 4})}, {"transpose_y", scalarBool(true)}},
                DType::F32, {2, 3, 5}));
  auto out = runOnce(b, {{"x", Tensor::fromF32(x, {2, 3, 4})}});
  std::vector<float> want(30), wantHalf(30);
  for (int bt = 0; bt < 2; ++bt)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j) {
        double s = 0, sh = 0;
        for (int c = 0; c < 4; ++c) {
          s += double(x[(bt * 3 + i) * 4 + c]) * y[j * 4 + c];
          sh += double(x[(bt * 3 + i) * 4 + c]) * halfToFloat(floatToHalf(y[j * 4 + c]));
        }
        want[(bt * 3 + i) * 5 + j] = static_cast<float>(s);
        wantHalf[(bt * 3 + i) * 5 + j] = static_cast<float>(sh);
      }
  expectNear(out[0], want, {2, 3, 5});
  expectNear(out[1], wantHalf, {2, 3, 5});
}

TEST(Matmul, RankOneOperandsDropTheirDim) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {3});
  b.output(
      b.op("matmul", {{"x", x}, {"y", constF32({1, 2, 3, 4, 5, 6}, {3, 2})}}, DType::F32, {2}));
  auto out = runOnce(b, {{"x", Tensor::fromF32({1, 1, 1}, {3})}});
  expectNear(out[0], {9, 12}, {2});
}

/// Naive NCHW convolution for the checks below.
std::vector<float> naiveConv(const std::vector<float> &x, const std::vector<float> &w, int64_t n,
                             int64_t cin, int64_t h, int64_t wd, int64_t cout, int64_t kh,
                             int64_t kw, int64_t stride, int64_t padT, int64_t padL, int64_t groups,
                             int64_t oh, int64_t ow) {
  std::vector<float> out(n * cout * oh * ow, 0);
  int64_t cinG = cin / groups, coutG = cout / groups;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t co = 0; co < cout; ++co)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xx = 0; xx < ow; ++xx) {
          double s = 0;
          int64_t g = co / coutG;
          for (int64_t ci = 0; ci < cinG; ++ci)
            for (int64_t ky = 0; ky < kh; ++ky)
              for (int64_t kx = 0; kx < kw; ++kx) {
                int64_t iy = y * stride - padT + ky, ix = xx * stride - padL + kx;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd)
                  continue;
                s += double(x[((b * cin + g * cinG + ci) * h + iy) * wd + ix]) *
                     w[((co * cinG + ci) * kh + ky) * kw + kx];
              }
          out[((b * cout + co) * oh + y) * ow + xx] = static_cast<float>(s);
        }
  return out;
}

TEST(Conv, TwoDimensionalCustomPadAndStride) {
  std::vector<float> x = randomValues(2 * 3 * 5 * 5, 6), w = halfValues(4 * 3 * 3 * 3, 7);
  ProgramBuilder b;
  Value *in = b.input("x", DType::F32, {2, 3, 5, 5});
  b.output(b.op("conv",
                {{"x", in},
                 {"weight", constF16(w, {4, 3, 3, 3})},
                 {"strides", constI32({2, 2}, {2})},
                 {"pad_type", constStr("custom")},
                 {"pad", constI32({1, 1, 1, 1}, {4})}},
                DType::F32, {2, 4, 3, 3}));
  auto out = runOnce(b, {{"x", Tensor::fromF32(x, {2, 3, 5, 5})}});
  expectNear(out[0], naiveConv(x, w, 2, 3, 5, 5, 4, 3, 3, 2, 1, 1, 1, 3, 3), {2, 4, 3, 3});
}

TEST(Conv, SamePaddingWithBias) {
  std::vector<float> x = randomValues(1 * 2 * 4 * 4, 8), w = randomValues(2 * 2 * 3 * 3, 9);
  ProgramBuilder b;
  Value *in = b.input("x", DType::F32, {1, 2, 4, 4});
  b.output(b.op("conv",
                {{"x", in},
                 {"weight", constF32(w, {2, 2, 3, 3})},
                 {"bias", constF32({1, -1}, {2})},
                 {"pad_type", constStr("same")}},
                DType::F32, {1, 2, 4, 4}));
  auto out = runOnce(b, {{"x", Tensor::fromF32(x, {1, 2, 4, 4})}});
  std::vector<float> want = naiveConv(x, w, 1, 2, 4, 4, 2, 3, 3, 1, 1, 1, 1, 4, 4);
  for (int i = 0; i < 32; ++i)
    want[i] += i < 16 ? 1 : -1;
  expectNear(out[0], want, {1, 2, 4, 4});
}

TEST(Conv, DepthwiseOneDimensional) {
  // The LFM2 short conv: groups == channels, kernel 3 along time.
  std::vector<float> x = randomValues(1 * 4 * 6, 10), w = randomValues(4 * 1 * 3, 11);
  ProgramBuilder b;
  Value *in = b.input("x", DType::F32, {1, 4, 6});
  b.output(b.op("conv", {{"x", in}, {"weight", constF32(w, {4, 1, 3})}, {"groups", scalarI32(4)}},
                DType::F32, {1, 4, 4}));
  auto out = runOnce(b, {{"x", Tensor::fromF32(x, {1, 4, 6})}});
  expectNear(out[0], naiveConv(x, w, 1, 4, 1, 6, 4, 1, 3, 1, 0, 0, 4, 1, 4), {1, 4, 4});
}

TEST(Conv, TransposeUpsamplesByStride) {
  // One input channel, one output channel, kernel 2, stride 2: each input
  // pixel stamps the kernel scaled by its value.
  ProgramBuilder b;
  Value *in = b.input("x", DType::F32, {1, 1, 1, 2});
  b.output(b.op("conv_transpose",
                {{"x", in},
                 {"weight", constF32({1, 2, 3, 4}, {1, 1, 2, 2})},
                 {"strides", constI32({2, 2}, {2})}},
                DType::F32, {1, 1, 2, 4}));
  auto out = runOnce(b, {{"x", Tensor::fromF32({1, 10}, {1, 1, 1, 2})}});
  expectNear(out[0], {1, 2, 10, 20, 3, 4, 30, 40}, {1, 1, 2, 4});
}

TEST(Attention, SdpaWithBoolMaskMatchesNaive) {
  const int64_t l = 3, s = 4, e = 8;
  std::vector<float> q = randomValues(2 * l * e, 12), k = randomValues(2 * s * e, 13),
                     v = randomValues(2 * s * e, 14);
  std::vector<bool> mask;
  for (int i = 0; i < l; ++i)
    for (int j = 0; j < s; ++j)
      mask.push_back(j <= i + 1);
  ProgramBuilder b;
  Value *qi = b.input("q", DType::F32, {2, l, e});
  b.output(b.op("scaled_dot_product_attention",
                {{"query", qi},
                 {"key", constF32(k, {2, s, e})},
                 {"value", constF32(v, {2, s, e})},
                 {"attn_mask", constBool(mask, {l, s})}},
                DType::F32, {2, l, e}));
  auto out = runOnce(b, {{"q", Tensor::fromF32(q, {2, l, e})}});
  std::vector<float> want(2 * l * e);
  for (int bt = 0; bt < 2; ++bt)
    for (int i = 0; i < l; ++i) {
      std::vector<double> sc(s);
      double mx = -1e30, sum = 0;
      for (int j = 0; j < s; ++j) {
        double d = 0;
        for (int c = 0; c < e; ++c)
          d += double(q[(bt * l + i) * e + c]) * k[(bt * s + j) * e + c];
        sc[j] = mask[i * s + j] ? d / std::sqrt(double(e)) : -1e30;
        mx = std::max(mx, sc[j]);
      }
      for (int j = 0; j < s; ++j)
        sum += (sc[j] = mask[i * s + j] ? std::exp(sc[j] - mx) : 0);
      for (int c = 0; c < e; ++c) {
        double o = 0;
        for (int j = 0; j < s; ++j)
          o += sc[j] / sum * v[(bt * s + j) * e + c];
        want[(bt * l + i) * e + c] = static_cast<float>(o);
      }
    }
  expectNear(out[0], want, {2, l, e});
}

TEST(Attention, BoolMaskGivesTheFloatMasksResultsBitForBit) {
  // Decode shapes (1-4 query rows, heads, odd key counts, head sizes with and
  // without a vector tail): a boolean mask skips the masked keys' products
  // and exps; the same mask as 0 / -inf floats computes them all and adds.
  // Rows with every key masked come out as zeros either way.
  std::mt19937 rng(17);
  for (int trial = 0; trial < 24; ++trial) {
    int64_t h = 1 + trial % 3, l = 1 + trial % 4, s = 1 + int64_t(rng() % 40),
            e = trial % 2 ? 64 : 1 + int64_t(rng() % 20);
    std::vector<float> q = randomValues(size_t(h * l * e), 100 + trial),
                       k = randomValues(size_t(h * s * e), 200 + trial),
                       v = randomValues(size_t(h * s * e), 300 + trial);
    std::vector<bool> keep(size_t(l * s));
    std::vector<float> additive(keep.size());
    for (size_t i = 0; i < keep.size(); ++i) {
      keep[i] = (trial % 5 == 0 && i < size_t(s)) ? false : rng() % 3 != 0;
      additive[i] = keep[i] ? 0.0f : -INFINITY;
    }
    auto run = [&](ConstantRef mask) {
      ProgramBuilder b;
      Value *qi = b.input("q", DType::F32, {h, l, e});
      b.output(b.op("scaled_dot_product_attention",
                    {{"query", qi},
                     {"key", constF32(k, {h, s, e})},
                     {"value", constF32(v, {h, s, e})},
                     {"attn_mask", std::move(mask)}},
                    DType::F32, {h, l, e}));
      return runOnce(b, {{"q", Tensor::fromF32(q, {h, l, e})}})[0];
    };
    Tensor withBool = run(constBool(keep, {l, s})), withFloat = run(constF32(additive, {l, s}));
    ASSERT_EQ(withBool.shape(), withFloat.shape());
    EXPECT_EQ(std::memcmp(withBool.bytes(), withFloat.bytes(), size_t(withBool.numBytes())), 0)
        << "h " << h << " l " << l << " s " << s << " e " << e;
  }
}

TEST(Attention, DotsOfManyRowsAreDotF32BitForBitOnEveryIsa) {
  // dotsF32 (attention's scores, a run of keys at a time) sums each row as
  // dotF32 does, whatever the length's tail.
  for (runtime::KernelIsa isa : kernelIsas()) {
    IsaGuard guard(isa);
    for (int64_t n : {1, 7, 8, 31, 32, 33, 64, 96, 130}) {
      int64_t ld = n + 3, count = 9;
      std::vector<float> a = randomValues(size_t(n), 41),
                         rows = randomValues(size_t(count * ld), 42);
      std::vector<float> got(static_cast<size_t>(count));
      runtime::dotsF32(a.data(), rows.data(), ld, count, n, got.data());
      for (int64_t j = 0; j < count; ++j)
        ASSERT_EQ(got[size_t(j)], runtime::dotF32(a.data(), rows.data() + j * ld, n))
            << "isa " << isaName(isa) << " n " << n << " row " << j;
    }
  }
}

TEST(Attention, DecodeRowsSumAsDotF32ExpAndAxpyOnEveryIsa) {
  // One query row (a decode step) over heads, with a boolean mask holding
  // runs of kept and masked keys: the scores are scale * dotF32, the
  // softmax exp(score - max) / sum, and the output adds p_j * V_j key after
  // key (FMAs with a vector ISA), for head sizes with 64-column blocks,
  // 8-column vectors and a scalar tail.
  std::mt19937 rng(23);
  for (runtime::KernelIsa isa : kernelIsas())
    for (int64_t e : {64, 72, 13, 136}) {
      IsaGuard guard(isa);
      int64_t h = 3, s = 37;
      std::vector<float> q = randomValues(size_t(h * e), 51),
                         k = randomValues(size_t(h * s * e), 52),
                         v = randomValues(size_t(h * s * e), 53);
      std::vector<bool> keep(static_cast<size_t>(s));
      for (size_t j = 0; j < keep.size(); ++j)
        keep[j] = (j / 5) % 3 != 1 && rng() % 7 != 0;
      ProgramBuilder b;
      Value *qi = b.input("q", DType::F32, {h, 1, e});
      b.output(b.op("scaled_dot_product_attention",
                    {{"query", qi},
                     {"key", constF32(k, {h, s, e})},
                     {"value", constF32(v, {h, s, e})},
                     {"attn_mask", constBool(keep, {1, s})}},
                    DType::F32, {h, 1, e}));
      Tensor got = runOnce(b, {{"q", Tensor::fromF32(q, {h, 1, e})}})[0];
      float scale = 1.0f / std::sqrt(static_cast<float>(e));
      for (int64_t hd = 0; hd < h; ++hd) {
        std::vector<float> p(static_cast<size_t>(s));
        float mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < s; ++j) {
          p[size_t(j)] = keep[size_t(j)] ? scale * runtime::dotF32(q.data() + hd * e,
                                                                   k.data() + (hd * s + j) * e, e)
                                         : -INFINITY;
          mx = std::max(mx, p[size_t(j)]);
        }
        for (float &pj : p)
          sum += (pj = pj == -INFINITY ? 0.0f : std::exp(pj - mx));
        for (float &pj : p)
          pj = pj / sum;
        for (int64_t c = 0; c < e; ++c) {
          float o = 0;
          for (int64_t j = 0; j < s; ++j) {
            float vj = v[size_t((hd * s + j) * e + c)];
            if (p[size_t(j)] != 0.0f)
              o = isa == runtime::KernelIsa::Portable ? o + p[size_t(j)] * vj
                                                      : std::fma(p[size_t(j)], vj, o);
          }
          ASSERT_EQ(got.floatAt(hd * e + c), o)
              << "isa " << isaName(isa) << " e " << e << " head " << hd << " column " << c;
        }
      }
    }
}

TEST(Linear, MismatchedFeaturesIsInputError) {
  ProgramBuilder b;
  Value *in = b.input("x", DType::F32, {1, 3});
  b.output(
      b.op("linear", {{"x", in}, {"weight", constF32({1, 2, 3, 4}, {2, 2})}}, DType::F32, {1, 2}));
  try {
    runOnce(b, {{"x", Tensor::fromF32({1, 2, 3}, {1, 3})}});
    FAIL() << "expected InputError";
  } catch (const InputError &e) {
    EXPECT_NE(std::string(e.what()).find("op 'linear_0' (linear)"), std::string::npos) << e.what();
  }
}

} // namespace
