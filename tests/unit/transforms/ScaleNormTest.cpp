//===- ScaleNormTest.cpp - scale-norm against the norm it rewrites --------===//
//
// Random decomposed RMSNorms and LayerNorms (rows, widths, eps, the forms
// the pass matches) over inputs whose magnitudes range from 1e-3 to 3e4: the
// rewritten norm must equal the original to fp32 rounding in fp32, and in
// fp16 mode stay finite and within fp16 rounding of the fp32 result, where
// the original loses every row whose |x| passes 256.
//
//===----------------------------------------------------------------------===//
#include "ir/AsmParser.h"
#include "runtime/Interpreter.h"
#include "support/DType.h"
#include "support/Random.h"
#include "transforms/Pass.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

using namespace anefit;
using namespace anefit::runtime;

namespace {

struct NormProblem {
  int64_t rows, width;
  double eps;
  int form; // 0: mul + add + rsqrt + mul, 1: pow + rsqrt(epsilon), 2: square + sqrt + real_div
  bool layerNorm;
};

std::string program(const NormProblem &p) {
  std::string t = "(1, " + std::to_string(p.rows) + ", " + std::to_string(p.width) + ", fp16)";
  std::string r = "(1, " + std::to_string(p.rows) + ", 1, fp16)";
  std::ostringstream os;
  os.precision(9);
  os << "main[CoreML8](%x: " << t << "(Tensor)) {\n  block0() {\n";
  std::string x = "%x";
  if (p.layerNorm) {
    os << "    %m: " << r
       << "(Tensor) = reduce_mean(x=%x, axes=[-1], keep_dims=True, name=\"m\")\n";
    os << "    %c: " << t << "(Tensor) = sub(x=%x, y=%m, name=\"c\")\n";
    x = "%c";
  }
  if (p.form == 0)
    os << "    %sq: " << t << "(Tensor) = mul(x=" << x << ", y=" << x << ", name=\"sq\")\n";
  else if (p.form == 1)
    os << "    %sq: " << t << "(Tensor) = pow(x=" << x << ", y=2.0:fp16, name=\"sq\")\n";
  else
    os << "    %sq: " << t << "(Tensor) = square(x=" << x << ", name=\"sq\")\n";
  os << "    %ms: " << r
     << "(Tensor) = reduce_mean(x=%sq, axes=[-1], keep_dims=True, name=\"ms\")\n";
  if (p.form == 1) {
    os << "    %r: " << r << "(Tensor) = rsqrt(x=%ms, epsilon=" << p.eps << ":fp16, name=\"r\")\n";
    os << "    %y: " << t << "(Tensor) = mul(x=%r, y=" << x << ", name=\"y\")\n";
  } else {
    os << "    %v: " << r << "(Tensor) = add(x=%ms, y=" << p.eps << ":fp16, name=\"v\")\n";
    if (p.form == 0) {
      os << "    %r: " << r << "(Tensor) = rsqrt(x=%v, name=\"r\")\n";
      os << "    %y: " << t << "(Tensor) = mul(x=" << x << ", y=%r, name=\"y\")\n";
    } else {
      os << "    %s: " << r << "(Tensor) = sqrt(x=%v, name=\"s\")\n";
      os << "    %y: " << t << "(Tensor) = real_div(x=" << x << ", y=%s, name=\"y\")\n";
    }
  }
  os << "  } -> (%y)\n}\n";
  return os.str();
}

/// The spacing of fp16 values at |v|.
double fp16Step(double v) {
  v = std::fabs(v);
  return v < 0x1p-14 ? 0x1p-24 : std::ldexp(1.0, std::ilogb(v) - 10);
}

/// The largest |a - b| relative to the largest |b| of each row, beyond
/// `steps` fp16 steps at each b.
double worstRowError(const Tensor &a, const Tensor &b, int64_t width, double steps = 0) {
  std::vector<float> u = a.toFloats(), v = b.toFloats();
  double worst = 0;
  for (size_t r = 0; r < u.size(); r += static_cast<size_t>(width)) {
    double peak = 0, diff = 0;
    for (size_t i = r; i < r + static_cast<size_t>(width); ++i) {
      peak = std::max(peak, std::fabs(static_cast<double>(v[i])));
      diff = std::max(diff, std::fabs(static_cast<double>(u[i]) - v[i]) - steps * fp16Step(v[i]));
    }
    worst = std::max(worst, peak > 0 ? diff / peak : diff);
  }
  return worst;
}

TEST(ScaleNorm, EqualsTheNormItRewritesAndStaysFiniteInFp16) {
  std::mt19937_64 rng(20261206);
  int lostBefore = 0;
  for (int trial = 0; trial < 48; ++trial) {
    NormProblem p{1 + static_cast<int64_t>(rng() % 5), 4 + static_cast<int64_t>(rng() % 120),
                  trial % 3 == 0 ? 1e-6 : 1e-5, static_cast<int>(rng() % 3), trial % 4 == 3};
    SCOPED_TRACE(program(p));
    auto before = parseModelText(program(p), "norm.mil", nullptr);
    auto after = parseModelText(program(p), "norm.mil", nullptr);
    PassManager pm;
    pm.addPipeline("scale-norm,dce");
    PassResult result = pm.run(*after);
    ASSERT_EQ(result.changes.size(), 1u);

    // Rows of every magnitude: a row's scale from 1e-3 to 3e4 (past fp16's
    // square root of 65504), one massive channel in some rows; every input
    // finite in fp16 (within +-60000).
    Tensor x = Tensor::zeros(DType::F32, {1, p.rows, p.width});
    for (int64_t r = 0; r < p.rows; ++r) {
      float scale = std::pow(10.0f, -3.0f + 7.5f * static_cast<float>(rng() % 1000) / 1000.0f);
      for (int64_t i = 0; i < p.width; ++i)
        x.mutableData<float>()[r * p.width + i] =
            std::clamp(scale * normalFloat(rng), -60000.0f, 60000.0f);
      if (rng() % 2)
        x.mutableData<float>()[r * p.width + static_cast<int64_t>(rng() % p.width)] = 25000.0f;
    }
    TensorMap in{{"x", x.convertTo(DType::F16)}};
    RunOptions fp32, fp16;
    fp16.precision = Precision::FP16;
    Tensor want = Interpreter(*before->program->functions.front(), fp32).run(in).at(0).tensor;
    Tensor got32 = Interpreter(*after->program->functions.front(), fp32).run(in).at(0).tensor;
    Tensor got16 = Interpreter(*after->program->functions.front(), fp16).run(in).at(0).tensor;
    Tensor orig16 = Interpreter(*before->program->functions.front(), fp16).run(in).at(0).tensor;
    // fp32: the same value up to a few roundings of fp32, then rounded to
    // the fp16 output, where a value so close to a tie may round to the
    // other neighbour (one fp16 step).
    EXPECT_LT(worstRowError(got32, want, p.width, 1), 1e-5);
    // fp16: every value finite and within fp16's rounding of each step.
    for (float v : got16.toFloats())
      ASSERT_TRUE(std::isfinite(v));
    EXPECT_LT(worstRowError(got16, want, p.width), 4e-3);
    lostBefore += worstRowError(orig16, want, p.width) > 0.5;
  }
  // The trials reach the overflow the pass removes: most originals lose rows.
  EXPECT_GT(lostBefore, 24);
}

} // namespace
