//===- BroadcastFastPathTest.cpp - Binary ops and reductions vs element loops -===//
//
// The binary ops (arithmetic, comparisons, logic) take row loops without
// index math when one side is the whole output and the other the same
// shape, a scalar, a repeated trailing row or one value per row; reductions
// over trailing axes sum contiguous runs. Each is compared bit for bit with a
// reference written one element at a time from numpy's broadcasting rule,
// over random shapes with odd sizes, unit dims and vector tails, both
// operand orders and the general (middle-axis) broadcasts too.
//
//===----------------------------------------------------------------------===//
#include "RuntimeTestUtil.h"
#include "support/Random.h"

#include "runtime/kernels/KernelUtil.h"

#include <cstring>
#include <functional>
#include <random>

using namespace anefit;
using namespace anefit::test;
using runtime::BroadcastKind;
using runtime::numElementsOf;
using runtime::shapeStr;

namespace {

/// Offset in a tensor of shape `in` of element `i` of the broadcast shape `out`.
int64_t refOffset(const Shape &in, const Shape &out, int64_t i) {
  int64_t off = 0, stride = 1;
  size_t shift = out.size() - in.size();
  for (size_t d = out.size(); d-- > 0;) {
    int64_t idx = i % out[d];
    i /= out[d];
    if (d >= shift) {
      int64_t dim = in[d - shift];
      off += (dim == 1 ? 0 : idx) * stride;
      stride *= dim;
    }
  }
  return off;
}

/// numpy's broadcast of two compatible shapes.
Shape broadcastOf(const Shape &a, const Shape &b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (size_t d = 0; d < out.size(); ++d) {
    size_t k = out.size() - 1 - d;
    int64_t da = d < a.size() ? a[a.size() - 1 - d] : 1,
            db = d < b.size() ? b[b.size() - 1 - d] : 1;
    out[k] = da == 1 ? db : da;
  }
  return out;
}

/// A random output shape: rank 1-4, dims 1-13, sometimes a long last dim
/// (vector bodies and tails).
Shape randomShape(std::mt19937 &rng) {
  int64_t rank = uniformInt(rng, 1, 4);
  Shape s;
  for (int64_t d = 0; d < rank; ++d)
    s.push_back(uniformInt(rng, 1, 13));
  if (rng() % 3 == 0)
    s.back() = uniformInt(rng, 17, 70);
  return s;
}

/// A shape that broadcasts to `out`, of a kind picked at random: the same,
/// a scalar, a trailing row (leading dims dropped or 1), one value per row
/// (trailing dims 1), or random dims set to 1 (general).
Shape operandShape(const Shape &out, std::mt19937 &rng) {
  size_t rank = out.size();
  switch (rng() % 5) {
  case 0:
    return out;
  case 1:
    return rng() % 2 ? Shape{} : Shape(rng() % (rank + 1), 1);
  case 2: {
    size_t k = rng() % (rank + 1);
    Shape s(out.begin() + static_cast<int64_t>(k), out.end());
    if (rng() % 2)
      s.insert(s.begin(), k, 1);
    return s;
  }
  case 3: {
    size_t k = rng() % (rank + 1);
    Shape s = out;
    for (size_t d = k; d < rank; ++d)
      s[d] = 1;
    return s;
  }
  default: {
    Shape s = out;
    for (int64_t &d : s)
      if (rng() % 2)
        d = 1;
    return s;
  }
  }
}

Tensor randomTensor(DType t, const Shape &shape, std::mt19937 &rng, bool positive) {
  int64_t n = numElementsOf(shape);
  if (t == DType::F32) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float &f : v)
      f = uniformFloat(rng, positive ? 0.25f : -4.0f, 4.0f);
    return Tensor::fromF32(std::move(v), shape);
  }
  if (t == DType::I32) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int32_t &i : v)
      i = static_cast<int32_t>(uniformInt(rng, positive ? 1 : -9, 9));
    return Tensor::fromI32(std::move(v), shape);
  }
  std::vector<bool> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = rng() % 2;
  return Tensor::fromBool(std::move(v), shape);
}

struct BinaryRef {
  const char *op;
  DType in, out;
  /// The op on one element pair, as the kernel defines it (values as double
  /// carry float, int32 and bool exactly).
  std::function<double(double, double)> f;
  bool positive = false;
};

const BinaryRef kOps[] = {
    {"add", DType::F32, DType::F32, [](double a, double b) { return float(a) + float(b); }},
    {"sub", DType::F32, DType::F32, [](double a, double b) { return float(a) - float(b); }},
    {"mul", DType::F32, DType::F32, [](double a, double b) { return float(a) * float(b); }},
    {"real_div", DType::F32, DType::F32, [](double a, double b) { return float(a) / float(b); }},
    {"maximum", DType::F32, DType::F32,
     [](double a, double b) { return float(a) > float(b) ? float(a) : float(b); }},
    {"pow", DType::F32, DType::F32, [](double a, double b) { return std::pow(float(a), float(b)); },
     true},
    {"add", DType::I32, DType::I32, [](double a, double b) { return int32_t(a) + int32_t(b); }},
    {"mul", DType::I32, DType::I32, [](double a, double b) { return int32_t(a) * int32_t(b); }},
    {"greater", DType::F32, DType::Bool, [](double a, double b) { return float(a) > float(b); }},
    {"less_equal", DType::I32, DType::Bool, [](double a, double b) { return a <= b; }},
    {"logical_and", DType::Bool, DType::Bool, [](double a, double b) { return a != 0 && b != 0; }},
    {"logical_xor", DType::Bool, DType::Bool,
     [](double a, double b) { return (a != 0) != (b != 0); }},
};

double elementAt(const Tensor &t, int64_t i) {
  if (t.dtype() == DType::F32)
    return t.data<float>()[i];
  if (t.dtype() == DType::I32)
    return t.data<int32_t>()[i];
  return t.data<uint8_t>()[i];
}

TEST(BroadcastFastPath, BinaryOpsMatchElementLoopsOverRandomShapes) {
  std::mt19937 rng(15);
  int kinds[5] = {};
  for (int trial = 0; trial < 400; ++trial) {
    const BinaryRef &r = kOps[trial % std::size(kOps)];
    Shape out = randomShape(rng);
    Shape xs = operandShape(out, rng), ys = operandShape(out, rng);
    // Make sure the broadcast of the two is `out`: one side takes it whole
    // most of the time (the fast paths); otherwise a general pair.
    if (rng() % 4)
      (rng() % 2 ? xs : ys) = out;
    Shape bs = broadcastOf(xs, ys);
    ++kinds[static_cast<int>(runtime::broadcastPattern(ys, bs).kind)];
    Tensor tx = randomTensor(r.in, xs, rng, r.positive);
    Tensor ty = randomTensor(r.in, ys, rng, r.positive);
    ProgramBuilder b;
    Value *x = b.input("x", r.in, xs);
    Value *y = b.input("y", r.in, ys);
    b.output(b.op(r.op, {{"x", x}, {"y", y}}, r.out, bs));
    std::vector<Tensor> got = runOnce(b, {{"x", tx}, {"y", ty}});
    ASSERT_EQ(got[0].shape(), bs);
    ASSERT_EQ(got[0].dtype(), r.out);
    for (int64_t i = 0, n = numElementsOf(bs); i < n; ++i) {
      double want = r.f(elementAt(tx, refOffset(xs, bs, i)), elementAt(ty, refOffset(ys, bs, i)));
      double have = elementAt(got[0], i);
      if (r.out == DType::F32) {
        float w = float(want), h = float(have);
        ASSERT_EQ(std::memcmp(&w, &h, sizeof w), 0)
            << r.op << " x " << shapeStr(xs) << " y " << shapeStr(ys) << " element " << i << ": "
            << h << " vs " << w;
      } else {
        ASSERT_EQ(have, want) << r.op << " x " << shapeStr(xs) << " y " << shapeStr(ys)
                              << " element " << i;
      }
    }
  }
  // Every pattern came up.
  for (int k = 0; k < 5; ++k)
    EXPECT_GT(kinds[k], 3) << "broadcast kind " << k;
}

struct ReduceRef {
  const char *op;
  double init;
  std::function<double(double, double)> step;
  std::function<double(double, int64_t)> finish;
};

const ReduceRef kReductions[] = {
    {"reduce_sum", 0.0, [](double a, double v) { return a + v; },
     [](double a, int64_t) { return a; }},
    {"reduce_mean", 0.0, [](double a, double v) { return a + v; },
     [](double a, int64_t n) { return a / double(n); }},
    {"reduce_max", -INFINITY, [](double a, double v) { return v > a ? v : a; },
     [](double a, int64_t) { return a; }},
    {"reduce_sum_square", 0.0, [](double a, double v) { return a + v * v; },
     [](double a, int64_t) { return a; }},
    {"reduce_log_sum_exp", 0.0, [](double a, double v) { return a + std::exp(v); },
     [](double a, int64_t) { return std::log(a); }},
};

TEST(BroadcastFastPath, ReductionsMatchElementLoopsOverRandomAxes) {
  std::mt19937 rng(16);
  for (int trial = 0; trial < 300; ++trial) {
    const ReduceRef &r = kReductions[trial % std::size(kReductions)];
    Shape xs = randomShape(rng);
    size_t rank = xs.size();
    // Trailing axes (a norm), leading axes, every axis, or a random set.
    std::vector<bool> mask(rank, false);
    size_t k = rng() % rank;
    switch (trial / std::size(kReductions) % 4) {
    case 0:
      for (size_t d = k; d < rank; ++d)
        mask[d] = true;
      break;
    case 1:
      for (size_t d = 0; d <= k; ++d)
        mask[d] = true;
      break;
    case 2:
      mask.assign(rank, true);
      break;
    default:
      for (size_t d = 0; d < rank; ++d)
        mask[d] = rng() % 2;
      mask[k] = true;
    }
    std::vector<int32_t> axes;
    Shape kept;
    for (size_t d = 0; d < rank; ++d) {
      if (mask[d])
        axes.push_back(rng() % 2 ? int32_t(d) : int32_t(d) - int32_t(rank));
      kept.push_back(mask[d] ? 1 : xs[d]);
    }
    Tensor tx = randomTensor(DType::F32, xs, rng, false);
    ProgramBuilder b;
    Value *x = b.input("x", DType::F32, xs);
    b.output(b.op(r.op,
                  {{"x", x},
                   {"axes", constI32(axes, {int64_t(axes.size())})},
                   {"keep_dims", scalarBool(true)}},
                  DType::F32, kept));
    std::vector<Tensor> got = runOnce(b, {{"x", tx}});
    ASSERT_EQ(got[0].shape(), kept);
    int64_t count = numElementsOf(xs) / numElementsOf(kept);
    std::vector<double> acc(static_cast<size_t>(numElementsOf(kept)), r.init);
    for (int64_t i = 0; i < numElementsOf(xs); ++i) {
      double &a = acc[static_cast<size_t>(refOffset(kept, xs, i))];
      a = r.step(a, tx.data<float>()[i]);
    }
    for (size_t i = 0; i < acc.size(); ++i) {
      float want = float(r.finish(acc[i], count)), have = got[0].data<float>()[i];
      ASSERT_EQ(std::memcmp(&want, &have, sizeof want), 0)
          << r.op << " x " << shapeStr(xs) << " kept " << shapeStr(kept) << " element " << i << ": "
          << have << " vs " << want;
    }
  }
}

TEST(BroadcastFastPath, PatternsOfCommonShapes) {
  using K = BroadcastKind;
  auto kind = [](const Shape &in, const Shape &out) { return runtime::broadcastPattern(in, out); };
  EXPECT_EQ(kind({1, 1, 1024}, {1, 1, 1024}).kind, K::Same);
  EXPECT_EQ(kind({}, {1, 4}).kind, K::Scalar);
  EXPECT_EQ(kind({1, 1, 1}, {1, 1, 1024}).kind, K::Scalar);
  // An RMSNorm weight, a rotary table over heads.
  EXPECT_EQ(kind({1024}, {1, 7, 1024}).kind, K::Row);
  EXPECT_EQ(kind({1024}, {1, 7, 1024}).inner, 1024);
  EXPECT_EQ(kind({1, 1, 1, 64}, {1, 16, 1, 64}).kind, K::Row);
  EXPECT_EQ(kind({1, 1, 1, 64}, {1, 16, 1, 64}).inner, 64);
  // A mean per row.
  EXPECT_EQ(kind({1, 7, 1}, {1, 7, 1024}).kind, K::PerRow);
  EXPECT_EQ(kind({1, 7, 1}, {1, 7, 1024}).inner, 1024);
  EXPECT_EQ(kind({2, 3, 1, 1}, {2, 3, 4, 5}).inner, 20);
  // A middle axis and an outer product are general.
  EXPECT_EQ(kind({2, 1, 5}, {2, 3, 5}).kind, K::General);
  EXPECT_EQ(kind({3, 1}, {3, 4}).kind, K::PerRow);
  EXPECT_EQ(kind({1, 4}, {3, 4}).kind, K::Row);
  EXPECT_EQ(kind({1, 3, 1}, {2, 3, 4}).kind, K::General);
  // Empty outputs take the general walk (nothing to do).
  EXPECT_EQ(kind({0, 4}, {0, 4}).kind, K::General);
}

} // namespace
