//===- ElementwiseTest.cpp - Elementwise, activation and cast kernels -----===//
//
// Table-driven checks: each row names an op, its inputs and the expected
// values, run over the dtypes the op accepts, with a per-op tolerance.
//
//===----------------------------------------------------------------------===//
#include "RuntimeTestUtil.h"

#include <cmath>

using namespace anefit;
using namespace anefit::test;

namespace {

struct BinaryCase {
  const char *op;
  std::vector<float> x, y, want;
};

// x is [2, 3], y is [3] (broadcast along rows).
const BinaryCase kBinaryCases[] = {
    {"add", {1, 2, 3, 4, 5, 6}, {10, 20, 30}, {11, 22, 33, 14, 25, 36}},
    {"sub", {1, 2, 3, 4, 5, 6}, {1, 1, 1}, {0, 1, 2, 3, 4, 5}},
    {"mul", {1, -2, 3, 4, 5, 6}, {2, 3, -1}, {2, -6, -3, 8, 15, -6}},
    {"maximum", {1, 7, 3, 4, 5, 6}, {2, 2, 5}, {2, 7, 5, 4, 5, 6}},
    {"minimum", {1, 7, 3, 4, 5, 6}, {2, 2, 5}, {1, 2, 3, 2, 2, 5}},
    {"floor_div", {7, -7, 6, 9, -9, 0}, {2, 2, 4}, {3, -4, 1, 4, -5, 0}},
    {"mod", {7, -7, 6, 9, -9, 5}, {3, 3, 4}, {1, 2, 2, 0, 0, 1}},
    {"pow", {2, 3, 1, 0, 2, 5}, {3, 2, 3}, {8, 9, 1, 0, 4, 125}},
};

class BinaryOps : public ::testing::TestWithParam<std::tuple<BinaryCase, DType>> {};

TEST_P(BinaryOps, BroadcastsAndMatchesTable) {
  auto [c, dtype] = GetParam();
  ProgramBuilder b;
  Value *x = b.input("x", dtype, {2, 3});
  Value *y = b.input("y", dtype, {3});
  b.output(b.op(c.op, {{"x", x}, {"y", y}}, dtype, {2, 3}));
  Tensor tx = Tensor::fromF32(c.x, {2, 3}).convertTo(dtype);
  Tensor ty = Tensor::fromF32(c.y, {3}).convertTo(dtype);
  std::vector<Tensor> out = runOnce(b, {{"x", tx}, {"y", ty}});
  EXPECT_EQ(out[0].dtype(), dtype);
  expectNear(out[0], c.want, {2, 3});
}

INSTANTIATE_TEST_SUITE_P(Table, BinaryOps,
                         ::testing::Combine(::testing::ValuesIn(kBinaryCases),
                                            ::testing::Values(DType::F32, DType::F16, DType::I32)),
                         [](const auto &info) {
                           return std::string(std::get<0>(info.param).op) + "_" +
                                  std::string(dtypeName(std::get<1>(info.param)));
                         });

TEST(Elementwise, RealDivAndBroadcastBothSides) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {2, 1});
  Value *y = b.input("y", DType::F32, {1, 3});
  b.output(b.op("real_div", {{"x", x}, {"y", y}}, DType::F32, {2, 3}));
  auto out = runOnce(
      b, {{"x", Tensor::fromF32({1, 2}, {2, 1})}, {"y", Tensor::fromF32({1, 2, 4}, {1, 3})}});
  expectNear(out[0], {1, 0.5f, 0.25f, 2, 1, 0.5f}, {2, 3});
}

TEST(Elementwise, ComparisonsGiveBool) {
  const std::pair<const char *, std::vector<int64_t>> cases[] = {
      {"equal", {0, 1, 0}},      {"not_equal", {1, 0, 1}}, {"less", {1, 0, 0}},
      {"less_equal", {1, 1, 0}}, {"greater", {0, 0, 1}},   {"greater_equal", {0, 1, 1}},
  };
  for (auto &[op, want] : cases) {
    ProgramBuilder b;
    Value *x = b.input("x", DType::I32, {3});
    b.output(b.op(op, {{"x", x}, {"y", constI32({2, 2, 2}, {3})}}, DType::Bool, {3}));
    auto out = runOnce(b, {{"x", Tensor::fromI32({1, 2, 3}, {3})}});
    EXPECT_EQ(out[0].dtype(), DType::Bool) << op;
    expectInts(out[0], want, {3});
  }
}

TEST(Elementwise, LogicalOps) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::Bool, {4});
  Value *y = b.input("y", DType::Bool, {4});
  b.output(b.op("logical_and", {{"x", x}, {"y", y}}, DType::Bool, {4}));
  b.output(b.op("logical_or", {{"x", x}, {"y", y}}, DType::Bool, {4}));
  b.output(b.op("logical_xor", {{"x", x}, {"y", y}}, DType::Bool, {4}));
  b.output(b.op("logical_not", {{"x", x}}, DType::Bool, {4}));
  auto out = runOnce(
      b, {{"x", Tensor::fromBool({0, 0, 1, 1}, {4})}, {"y", Tensor::fromBool({0, 1, 0, 1}, {4})}});
  expectInts(out[0], {0, 0, 0, 1}, {4});
  expectInts(out[1], {0, 1, 1, 1}, {4});
  expectInts(out[2], {0, 1, 1, 0}, {4});
  expectInts(out[3], {1, 1, 0, 0}, {4});
}

struct UnaryCase {
  const char *op;
  float (*ref)(float);
  float lo, hi; ///< input domain
  float tol;
};

float refGeluExact(float x) { return 0.5f * x * (1 + std::erf(x / std::sqrt(2.0f))); }
float refSigmoid(float x) { return 1 / (1 + std::exp(-x)); }

const UnaryCase kUnaryCases[] = {
    {"relu", [](float x) { return std::max(x, 0.0f); }, -3, 3, 0},
    {"relu6", [](float x) { return std::min(std::max(x, 0.0f), 6.0f); }, -8, 8, 0},
    {"sigmoid", refSigmoid, -6, 6, 1e-6f},
    {"silu", [](float x) { return x * refSigmoid(x); }, -6, 6, 1e-6f},
    {"gelu", refGeluExact, -4, 4, 1e-6f},
    {"tanh", [](float x) { return std::tanh(x); }, -4, 4, 1e-6f},
    {"exp", [](float x) { return std::exp(x); }, -4, 4, 1e-5f},
    {"sqrt", [](float x) { return std::sqrt(x); }, 0, 9, 1e-6f},
    {"erf", [](float x) { return std::erf(x); }, -3, 3, 1e-6f},
    {"abs", [](float x) { return std::fabs(x); }, -3, 3, 0},
    {"square", [](float x) { return x * x; }, -3, 3, 1e-6f},
    {"floor", [](float x) { return std::floor(x); }, -3, 3, 0},
    {"ceil", [](float x) { return std::ceil(x); }, -3, 3, 0},
    {"sin", [](float x) { return std::sin(x); }, -3, 3, 1e-6f},
    {"cos", [](float x) { return std::cos(x); }, -3, 3, 1e-6f},
    {"softplus", [](float x) { return std::log1p(std::exp(x)); }, -6, 6, 1e-6f},
    {"softsign", [](float x) { return x / (1 + std::fabs(x)); }, -6, 6, 1e-6f},
    {"rsqrt", [](float x) { return 1 / std::sqrt(x + 1e-12f); }, 0.1f, 9, 1e-6f},
    {"inverse", [](float x) { return 1 / (x + 1e-4f); }, 0.5f, 9, 1e-6f},
    {"log", [](float x) { return std::log(x + 1e-45f); }, 0.1f, 9, 1e-6f},
    {"sign", [](float x) { return x > 0 ? 1.0f : (x < 0 ? -1.0f : 0.0f); }, -3, 3, 0},
    {"acos", [](float x) { return std::acos(x); }, -0.9f, 0.9f, 1e-5f},
    {"asin", [](float x) { return std::asin(x); }, -0.9f, 0.9f, 1e-5f},
    {"atan", [](float x) { return std::atan(x); }, -3, 3, 1e-5f},
    {"atanh", [](float x) { return std::atanh(x); }, -0.9f, 0.9f, 1e-5f},
    {"cosh", [](float x) { return std::cosh(x); }, -3, 3, 1e-5f},
    {"sinh", [](float x) { return std::sinh(x); }, -3, 3, 1e-5f},
    {"tan", [](float x) { return std::tan(x); }, -1.2f, 1.2f, 1e-5f},
    {"exp2", [](float x) { return std::exp2(x); }, -4, 4, 1e-5f},
};

class UnaryOps : public ::testing::TestWithParam<std::tuple<UnaryCase, int>> {};

TEST_P(UnaryOps, MatchesReferenceOverRanks) {
  auto [c, rank] = GetParam();
  std::vector<int64_t> shape(static_cast<size_t>(rank), 2);
  shape.push_back(5);
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  std::vector<float> in, want;
  for (int64_t i = 0; i < n; ++i) {
    float v = c.lo + (c.hi - c.lo) * static_cast<float>(i) / static_cast<float>(n - 1);
    in.push_back(v);
    want.push_back(c.ref(v));
  }
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, shape);
  b.output(b.op(c.op, {{"x", x}}, DType::F32, shape));
  auto out = runOnce(b, {{"x", Tensor::fromF32(in, shape)}});
  expectNear(out[0], want, shape, c.tol, c.tol);
}

INSTANTIATE_TEST_SUITE_P(Table, UnaryOps,
                         ::testing::Combine(::testing::ValuesIn(kUnaryCases),
                                            ::testing::Values(0, 1, 3)),
                         [](const auto &info) {
                           return std::string(std::get<0>(info.param).op) + "_rank" +
                                  std::to_string(std::get<1>(info.param) + 1);
                         });

TEST(Activations, ParameterisedAndDefaults) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {1, 2, 2});
  b.output(b.op("leaky_relu", {{"x", x}, {"alpha", scalarF32(0.1f)}}, DType::F32, {1, 2, 2}));
  b.output(b.op("elu", {{"x", x}, {"alpha", scalarF32(1.0f)}}, DType::F32, {1, 2, 2}));
  b.output(b.op("clip", {{"x", x}, {"alpha", scalarF32(-1)}, {"beta", scalarF32(1)}}, DType::F32,
                {1, 2, 2}));
  b.output(
      b.op("prelu", {{"x", x}, {"alpha", constF32({0.5f, 0.25f}, {2})}}, DType::F32, {1, 2, 2}));
  b.output(
      b.op("gelu", {{"x", x}, {"mode", constStr("TANH_APPROXIMATION")}}, DType::F32, {1, 2, 2}));
  b.output(b.op("threshold", {{"x", x}, {"alpha", scalarF32(0.5f)}}, DType::F32, {1, 2, 2}));
  auto out = runOnce(b, {{"x", Tensor::fromF32({-2, 3, -4, 0.25f}, {1, 2, 2})}});
  expectNear(out[0], {-0.2f, 3, -0.4f, 0.25f}, {1, 2, 2});
  expectNear(out[1], {std::exp(-2.0f) - 1, 3, std::exp(-4.0f) - 1, 0.25f}, {1, 2, 2});
  expectNear(out[2], {-1, 1, -1, 0.25f}, {1, 2, 2});
  expectNear(out[3], {-1, 3, -1, 0.25f}, {1, 2, 2});
  auto tanhGelu = [](float v) {
    return 0.5f * v * (1 + std::tanh(std::sqrt(2 / 3.14159265f) * (v + 0.044715f * v * v * v)));
  };
  expectNear(out[4], {tanhGelu(-2), tanhGelu(3), tanhGelu(-4), tanhGelu(0.25f)}, {1, 2, 2}, 1e-6f,
             1e-5f);
  expectNear(out[5], {0.5f, 3, 0.5f, 0.5f}, {1, 2, 2});
}

TEST(Activations, PreluWithOneAlphaForEveryChannel) {
  // One alpha value serves every channel (the vector holding it is refilled
  // with copies of it, a copy libc++ took from freed memory when the value
  // was read from the vector itself).
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {1, 3, 2});
  b.output(b.op("prelu", {{"x", x}, {"alpha", constF32({0.5f}, {1})}}, DType::F32, {1, 3, 2}));
  auto out = runOnce(b, {{"x", Tensor::fromF32({-2, 3, -4, 0.25f, -1, 5}, {1, 3, 2})}});
  expectNear(out[0], {-1, 3, -2, 0.25f, -0.5f, 5}, {1, 3, 2});
}

TEST(Elementwise, RoundHalfToEven) {
  // MIL round is numpy's: ties go to the even integer.
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {8});
  b.output(b.op("round", {{"x", x}}, DType::F32, {8}));
  auto out = runOnce(
      b, {{"x", Tensor::fromF32({-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f, 0.4f, -0.6f}, {8})}});
  expectNear(out[0], {-2, -2, 0, 0, 2, 2, 0, -1}, {8}, 0, 0);
}

TEST(Elementwise, SelectBroadcastsCondition) {
  ProgramBuilder b;
  Value *a = b.input("a", DType::F32, {2, 2});
  b.output(b.op("select", {{"cond", constBool({true, false}, {2})}, {"a", a}, {"b", scalarF32(-1)}},
                DType::F32, {2, 2}));
  auto out = runOnce(b, {{"a", Tensor::fromF32({1, 2, 3, 4}, {2, 2})}});
  expectNear(out[0], {1, -1, 3, -1}, {2, 2});
}

/// Element `i` of a tensor of shape `in` broadcast to `out`, by division:
/// the reference select's row-wise copies are held to.
int64_t broadcastIndex(const Shape &in, const Shape &out, int64_t i) {
  int64_t offset = 0, stride = 1;
  for (int64_t d = static_cast<int64_t>(out.size()) - 1; d >= 0; --d) {
    int64_t coord = i % out[static_cast<size_t>(d)];
    i /= out[static_cast<size_t>(d)];
    int64_t k = d - static_cast<int64_t>(out.size() - in.size());
    if (k >= 0) {
      int64_t extent = in[static_cast<size_t>(k)];
      offset += (extent == 1 ? 0 : coord) * stride;
      stride *= extent;
    }
  }
  return offset;
}

/// Random operand shapes that broadcast together, and their broadcast: a
/// random output of rank 0 to 4, each operand its trailing dims, some of
/// them 1.
struct BroadcastProblem {
  std::vector<Shape> operands;
  Shape shape; ///< the operands' broadcast
};
BroadcastProblem randomBroadcast(SeededRandom &r, size_t operands) {
  Shape out;
  for (int64_t d = r.pick(0, 4); d > 0; --d)
    out.push_back(r.pick(1, 5));
  BroadcastProblem p;
  size_t rank = 0;
  for (size_t k = 0; k < operands; ++k) {
    Shape s(out.begin() + r.pick(0, static_cast<int64_t>(out.size())), out.end());
    for (int64_t &d : s)
      if (r.pick(0, 2) == 0)
        d = 1;
    rank = std::max(rank, s.size());
    p.operands.push_back(std::move(s));
  }
  p.shape.assign(rank, 1);
  for (const Shape &x : p.operands)
    for (size_t k = 0; k < x.size(); ++k)
      p.shape[rank - x.size() + k] = std::max(p.shape[rank - x.size() + k], x[k]);
  return p;
}

TEST(Elementwise, SelectMatchesTheElementwiseDefinitionUnderBroadcasting) {
  SeededRandom r(41);
  for (int trial = 0; trial < 200; ++trial) {
    BroadcastProblem p = randomBroadcast(r, 3);
    const Shape &cs = p.operands[0], &as = p.operands[1], &bs = p.operands[2], &shape = p.shape;
    SCOPED_TRACE("trial " + std::to_string(trial));
    std::vector<bool> c(static_cast<size_t>(runtime::numElementsOf(cs)));
    std::vector<float> av(static_cast<size_t>(runtime::numElementsOf(as))),
        bv(static_cast<size_t>(runtime::numElementsOf(bs)));
    for (size_t i = 0; i < c.size(); ++i)
      c[i] = r.pick(0, 1);
    for (float &x : av)
      x = r.uniform(0, 1);
    for (float &x : bv)
      x = r.uniform(-1, 0);
    ProgramBuilder b;
    Value *cv = b.input("c", DType::Bool, cs);
    Value *a = b.input("a", DType::F32, as);
    Value *bb = b.input("b", DType::F32, bs);
    b.output(b.op("select", {{"cond", cv}, {"a", a}, {"b", bb}}, DType::F32, shape));
    auto got = runOnce(b, {{"c", Tensor::fromBool(c, cs)},
                           {"a", Tensor::fromF32(av, as)},
                           {"b", Tensor::fromF32(bv, bs)}});
    std::vector<float> want(static_cast<size_t>(runtime::numElementsOf(shape)));
    for (int64_t i = 0; i < static_cast<int64_t>(want.size()); ++i)
      want[static_cast<size_t>(i)] = c[static_cast<size_t>(broadcastIndex(cs, shape, i))]
                                         ? av[static_cast<size_t>(broadcastIndex(as, shape, i))]
                                         : bv[static_cast<size_t>(broadcastIndex(bs, shape, i))];
    expectNear(got[0], want, shape);
  }
}

TEST(Elementwise, BinaryOpsMatchTheElementwiseDefinitionUnderBroadcasting) {
  SeededRandom r(43);
  for (int trial = 0; trial < 200; ++trial) {
    BroadcastProblem p = randomBroadcast(r, 2);
    const Shape &xs = p.operands[0], &ys = p.operands[1], &shape = p.shape;
    SCOPED_TRACE("trial " + std::to_string(trial));
    std::vector<float> xv(static_cast<size_t>(runtime::numElementsOf(xs))),
        yv(static_cast<size_t>(runtime::numElementsOf(ys)));
    for (float &v : xv)
      v = r.uniform(-2, 2);
    for (float &v : yv)
      v = r.uniform(-2, 2);
    // sub is not symmetric: a side read for the other shows.
    ProgramBuilder b;
    Value *x = b.input("x", DType::F32, xs);
    Value *y = b.input("y", DType::F32, ys);
    b.output(b.op("sub", {{"x", x}, {"y", y}}, DType::F32, shape));
    auto got = runOnce(b, {{"x", Tensor::fromF32(xv, xs)}, {"y", Tensor::fromF32(yv, ys)}});
    std::vector<float> want(static_cast<size_t>(runtime::numElementsOf(shape)));
    for (int64_t i = 0; i < static_cast<int64_t>(want.size()); ++i)
      want[static_cast<size_t>(i)] = xv[static_cast<size_t>(broadcastIndex(xs, shape, i))] -
                                     yv[static_cast<size_t>(broadcastIndex(ys, shape, i))];
    expectNear(got[0], want, shape);
  }
}

TEST(Elementwise, CastTruncatesAndConverts) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {4});
  b.output(b.op("cast", {{"x", x}, {"dtype", constStr("int32")}}, DType::I32, {4}));
  b.output(b.op("cast", {{"x", x}, {"dtype", constStr("bool")}}, DType::Bool, {4}));
  b.output(b.op("cast", {{"x", x}, {"dtype", constStr("fp16")}}, DType::F16, {4}));
  auto out = runOnce(b, {{"x", Tensor::fromF32({-1.7f, 0, 2.9f, 1e9f}, {4})}});
  expectInts(out[0], {-1, 0, 2, 1000000000}, {4});
  expectInts(out[1], {1, 0, 1, 1}, {4});
  EXPECT_EQ(out[2].dtype(), DType::F16); // declared output dtype
  EXPECT_TRUE(std::isinf(out[2].floatAt(3)));
}

} // namespace
