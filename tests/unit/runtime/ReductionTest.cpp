//===- ReductionTest.cpp - Reductions, norms, sorting and pooling ---------===//
#include "RuntimeTestUtil.h"

#include <cmath>

using namespace anefit;
using namespace anefit::test;

namespace {

struct ReduceCase {
  const char *op;
  std::vector<float> wantAxis1; ///< reducing axis 1 of [[1,2,3],[4,5,6]]
  float wantAll;
};

const ReduceCase kReduceCases[] = {
    {"reduce_sum", {6, 15}, 21},
    {"reduce_mean", {2, 5}, 3.5f},
    {"reduce_max", {3, 6}, 6},
    {"reduce_min", {1, 4}, 1},
    {"reduce_prod", {6, 120}, 720},
    {"reduce_l1_norm", {6, 15}, 21},
    {"reduce_l2_norm", {std::sqrt(14.0f), std::sqrt(77.0f)}, std::sqrt(91.0f)},
    {"reduce_sum_square", {14, 77}, 91},
    {"reduce_log_sum", {std::log(6.0f), std::log(15.0f)}, std::log(21.0f)},
    {"reduce_log_sum_exp",
     {std::log(std::exp(1.0f) + std::exp(2.0f) + std::exp(3.0f)),
      std::log(std::exp(4.0f) + std::exp(5.0f) + std::exp(6.0f))},
     std::log(std::exp(1.0f) + std::exp(2.0f) + std::exp(3.0f) + std::exp(4.0f) + std::exp(5.0f) +
              std::exp(6.0f))},
};

class Reductions : public ::testing::TestWithParam<ReduceCase> {};

TEST_P(Reductions, OneAxisKeepDimsAndAllAxes) {
  const ReduceCase &c = GetParam();
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {2, 3});
  b.output(b.op(c.op, {{"x", x}, {"axes", constI32({-1}, {1})}, {"keep_dims", scalarBool(true)}},
                DType::F32, {2, 1}));
  b.output(b.op(c.op, {{"x", x}}, DType::F32, {}));
  auto out = runOnce(b, {{"x", Tensor::fromF32({1, 2, 3, 4, 5, 6}, {2, 3})}});
  expectNear(out[0], c.wantAxis1, {2, 1}, 1e-5f, 1e-5f);
  expectNear(out[1], {c.wantAll}, {}, 1e-5f, 1e-5f);
}

INSTANTIATE_TEST_SUITE_P(Table, Reductions, ::testing::ValuesIn(kReduceCases),
                         [](const auto &info) { return std::string(info.param.op); });

TEST(Reduction, IntegerSumIsExact) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::I32, {3});
  b.output(b.op("reduce_sum", {{"x", x}}, DType::I32, {}));
  auto out = runOnce(b, {{"x", Tensor::fromI32({1000000000, 1000000000, -1999999999}, {3})}});
  expectInts(out[0], {1}, {});
}

TEST(Reduction, ArgmaxArgminFirstOfTies) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {2, 3});
  b.output(b.op("reduce_argmax", {{"x", x}, {"axis", scalarI32(1)}}, DType::I32, {2}));
  b.output(b.op("reduce_argmin", {{"x", x}, {"axis", scalarI32(0)}}, DType::I32, {3}));
  auto out = runOnce(b, {{"x", Tensor::fromF32({1, 5, 5, 0, -1, 2}, {2, 3})}});
  expectInts(out[0], {1, 2}, {2});
  expectInts(out[1], {1, 1, 1}, {3});
}

TEST(Normalization, SoftmaxIsStableForLargeInputs) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {1, 3});
  b.output(b.op("softmax", {{"x", x}}, DType::F32, {1, 3}));
  auto out = runOnce(b, {{"x", Tensor::fromF32({1000, 1001, 1002}, {1, 3})}});
  float e1 = std::exp(-2.0f), e2 = std::exp(-1.0f), s = e1 + e2 + 1;
  expectNear(out[0], {e1 / s, e2 / s, 1 / s}, {1, 3}, 1e-6f);
}

TEST(Normalization, LayerNormWithGammaBeta) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {2, 2});
  b.output(b.op("layer_norm",
                {{"x", x},
                 {"axes", constI32({-1}, {1})},
                 {"gamma", constF32({2, 1}, {2})},
                 {"beta", constF32({0, 1}, {2})},
                 {"epsilon", scalarF32(0)}},
                DType::F32, {2, 2}));
  auto out = runOnce(b, {{"x", Tensor::fromF32({1, 3, 4, 8}, {2, 2})}});
  // Each row normalizes to (-1, 1), then gamma (2, 1) and beta (0, 1) apply.
  expectNear(out[0], {-2, 2, -2, 2}, {2, 2});
}

TEST(Normalization, BatchNormAndInstanceNorm) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {1, 2, 2});
  b.output(b.op("batch_norm",
                {{"x", x},
                 {"mean", constF32({1, 0}, {2})},
                 {"variance", constF32({4, 1}, {2})},
                 {"gamma", constF32({1, 2}, {2})},
                 {"beta", constF32({0, 1}, {2})},
                 {"epsilon", scalarF32(0)}},
                DType::F32, {1, 2, 2}));
  b.output(b.op("instance_norm", {{"x", x}, {"epsilon", scalarF32(0)}}, DType::F32, {1, 2, 2}));
  auto out = runOnce(b, {{"x", Tensor::fromF32({3, 5, 1, -1}, {1, 2, 2})}});
  expectNear(out[0], {1, 2, 3, -1}, {1, 2, 2});
  expectNear(out[1], {-1, 1, 1, -1}, {1, 2, 2});
}

TEST(Scan, CumsumVariants) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::I32, {4});
  b.output(b.op("cumsum", {{"x", x}}, DType::I32, {4}));
  b.output(b.op("cumsum", {{"x", x}, {"exclusive", scalarBool(true)}}, DType::I32, {4}));
  b.output(b.op("cumsum", {{"x", x}, {"reverse", scalarBool(true)}}, DType::I32, {4}));
  auto out = runOnce(b, {{"x", Tensor::fromI32({1, 2, 3, 4}, {4})}});
  expectInts(out[0], {1, 3, 6, 10}, {4});
  expectInts(out[1], {0, 1, 3, 6}, {4});
  expectInts(out[2], {10, 9, 7, 4}, {4});
}

TEST(Sorting, TopkAndArgsort) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {5});
  auto tk = b.ops("topk", {{"x", x}, {"k", scalarI32(2)}},
                  {Type::tensor(DType::F32, std::vector<int64_t>{2}),
                   Type::tensor(DType::I32, std::vector<int64_t>{2})});
  b.output(tk[0]);
  b.output(tk[1]);
  b.output(b.op("argsort", {{"x", x}, {"ascending", scalarBool(true)}}, DType::I32, {5}));
  auto out = runOnce(b, {{"x", Tensor::fromF32({3, 9, 1, 9, 4}, {5})}});
  expectNear(out[0], {9, 9}, {2});
  expectInts(out[1], {1, 3}, {2});
  expectInts(out[2], {2, 0, 4, 1, 3}, {5});
}

TEST(Pooling, MaxAvgWithPadding) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {1, 1, 2, 2});
  b.output(b.op("max_pool",
                {{"x", x},
                 {"kernel_sizes", constI32({2, 2}, {2})},
                 {"strides", constI32({1, 1}, {2})},
                 {"pad_type", constStr("valid")}},
                DType::F32, {1, 1, 1, 1}));
  b.output(b.op("avg_pool",
                {{"x", x},
                 {"kernel_sizes", constI32({2, 2}, {2})},
                 {"strides", constI32({2, 2}, {2})},
                 {"pad_type", constStr("custom")},
                 {"pad", constI32({1, 0, 1, 0}, {4})}},
                DType::F32, {1, 1, 1, 1}));
  b.output(b.op("avg_pool",
                {{"x", x},
                 {"kernel_sizes", constI32({2, 2}, {2})},
                 {"strides", constI32({2, 2}, {2})},
                 {"pad_type", constStr("custom")},
                 {"pad", constI32({1, 0, 1, 0}, {4})},
                 {"exclude_padding_from_average", scalarBool(true)}},
                DType::F32, {1, 1, 1, 1}));
  auto out = runOnce(b, {{"x", Tensor::fromF32({1, 2, 3, 8}, {1, 1, 2, 2})}});
  expectNear(out[0], {8}, {1, 1, 1, 1});
  expectNear(out[1], {0.25f}, {1, 1, 1, 1}); // window holds 3 pads and x[0,0]
  expectNear(out[2], {1}, {1, 1, 1, 1});
}

} // namespace
