//===- ParametricOpsTest.cpp - Parametric activations, L2 ops, windows -----===//
//
// The ops LLM exports rarely use, each against the formula of its MIL
// definition: activations with alpha/beta (scalar or per channel), L2
// normalization and pooling, sliding windows, flatten2d, fill_like, and
// quantize/dequantize (per tensor and per axis).
//
//===----------------------------------------------------------------------===//
#include "RuntimeTestUtil.h"

#include <cmath>

using namespace anefit;
using namespace anefit::test;

namespace {

/// A constant of an 8-bit dtype (int8 or uint8) from small integers.
ConstantRef const8(DType dtype, const std::vector<int> &v, std::vector<int64_t> shape) {
  auto c = std::make_shared<Constant>();
  c->type = Type::tensor(dtype, std::move(shape));
  for (int x : v)
    c->bytes.push_back(static_cast<uint8_t>(x));
  return c;
}

float softplus(float z) { return std::log1p(std::exp(z)); }

TEST(Activations, AlphaBetaFamily) {
  const std::vector<float> in = {-2, 3, -4, 0.25f};
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {1, 2, 1, 2});
  auto ab = [&](const char *op, float alpha, float beta) {
    b.output(b.op(op, {{"x", x}, {"alpha", scalarF32(alpha)}, {"beta", scalarF32(beta)}},
                  DType::F32, {1, 2, 1, 2}));
  };
  ab("clamped_relu", 0.1f, 2);
  ab("linear_activation", 2, 1);
  ab("scaled_tanh", 2, 0.5f);
  ab("sigmoid_hard", 0.2f, 0.5f);
  // alpha_c * log(1 + e^(beta_c * x)) with C = 2 along axis -3.
  b.output(b.op("softplus_parametric",
                {{"x", x}, {"alpha", constF32({1, 2}, {2})}, {"beta", constF32({1, 0.5f}, {2})}},
                DType::F32, {1, 2, 1, 2}));
  auto out = runOnce(b, {{"x", Tensor::fromF32(in, {1, 2, 1, 2})}});
  Shape s = {1, 2, 1, 2};
  // x >= 0: min(beta, x); else min(beta, alpha * x).
  expectNear(out[0], {-0.2f, 2, -0.4f, 0.25f}, s);
  expectNear(out[1], {-3, 7, -7, 1.5f}, s);
  expectNear(
      out[2],
      {2 * std::tanh(-1.0f), 2 * std::tanh(1.5f), 2 * std::tanh(-2.0f), 2 * std::tanh(0.125f)}, s);
  // min(max(alpha * x + beta, 0), 1).
  expectNear(out[3], {0.1f, 1, 0, 0.55f}, s);
  expectNear(out[4], {softplus(-2), softplus(3), 2 * softplus(-2), 2 * softplus(0.125f)}, s);
}

TEST(Activations, ThresholdedReluKeepsValuesAtTheThreshold) {
  // x if x >= alpha, else 0.
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {5});
  b.output(b.op("thresholded_relu", {{"x", x}, {"alpha", scalarF32(0.5f)}}, DType::F32, {5}));
  auto out = runOnce(b, {{"x", Tensor::fromF32({-2, 0.25f, 0.5f, 0.75f, 3}, {5})}});
  expectNear(out[0], {0, 0, 0.5f, 0.75f, 3}, {5});
}

TEST(Normalization, L2NormOverTheLastThreeDimsPerBatch) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {2, 1, 2, 2});
  b.output(b.op("l2_norm", {{"x", x}}, DType::F32, {2, 1, 2, 2}));
  // epsilon bounds the sum of squares from below: an all-zero batch stays 0.
  b.output(b.op("l2_norm", {{"x", x}, {"epsilon", scalarF32(100)}}, DType::F32, {2, 1, 2, 2}));
  auto out = runOnce(b, {{"x", Tensor::fromF32({1, 1, 1, 1, 0, 3, 0, 4}, {2, 1, 2, 2})}});
  expectNear(out[0], {0.5f, 0.5f, 0.5f, 0.5f, 0, 0.6f, 0, 0.8f}, {2, 1, 2, 2});
  expectNear(out[1], {0.1f, 0.1f, 0.1f, 0.1f, 0, 0.3f, 0, 0.4f}, {2, 1, 2, 2});
}

TEST(Pooling, L2PoolIsTheRootOfTheWindowsSumOfSquares) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {1, 1, 2, 4});
  b.output(b.op("l2_pool",
                {{"x", x},
                 {"kernel_sizes", constI32({2, 2}, {2})},
                 {"strides", constI32({2, 2}, {2})},
                 {"pad_type", constStr("valid")}},
                DType::F32, {1, 1, 1, 2}));
  auto out = runOnce(b, {{"x", Tensor::fromF32({1, 2, 3, 4, 2, 4, 5, 6}, {1, 1, 2, 4})}});
  expectNear(out[0], {std::sqrt(25.0f), std::sqrt(86.0f)}, {1, 1, 1, 2});
}

TEST(DataMovement, SlidingWindowsAlongAnAxis) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::I32, {2, 5});
  // Windows of 3 every 2 along axis 1: (5 - 3) / 2 + 1 = 2 windows.
  b.output(
      b.op("sliding_windows",
           {{"x", x}, {"axis", scalarI32(1)}, {"size", scalarI32(3)}, {"stride", scalarI32(2)}},
           DType::I32, {2, 2, 3}));
  // stride defaults to 1.
  b.output(b.op("sliding_windows", {{"x", x}, {"axis", scalarI32(0)}, {"size", scalarI32(2)}},
                DType::I32, {1, 2, 5}));
  auto out = runOnce(b, {{"x", Tensor::fromI32({0, 1, 2, 3, 4, 10, 11, 12, 13, 14}, {2, 5})}});
  expectInts(out[0], {0, 1, 2, 2, 3, 4, 10, 11, 12, 12, 13, 14}, {2, 2, 3});
  expectInts(out[1], {0, 1, 2, 3, 4, 10, 11, 12, 13, 14}, {1, 2, 5});
}

TEST(Shape, Flatten2dAndFillLike) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {2, 3, 2});
  b.output(b.op("flatten2d", {{"x", x}}, DType::F32, {2, 6}));
  b.output(b.op("flatten2d", {{"x", x}, {"axis", scalarI32(-1)}}, DType::F32, {6, 2}));
  b.output(b.op("flatten2d", {{"x", x}, {"axis", scalarI32(0)}}, DType::F32, {1, 12}));
  b.output(
      b.op("fill_like", {{"ref_tensor", x}, {"value", scalarF32(1.5f)}}, DType::F32, {2, 3, 2}));
  b.output(b.op("fill_like", {{"ref_tensor", x}}, DType::F32, {2, 3, 2}));
  std::vector<float> v(12);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(i);
  auto out = runOnce(b, {{"x", Tensor::fromF32(v, {2, 3, 2})}});
  expectNear(out[0], v, {2, 6});
  expectNear(out[1], v, {6, 2});
  expectNear(out[2], v, {1, 12});
  expectNear(out[3], std::vector<float>(12, 1.5f), {2, 3, 2});
  expectNear(out[4], std::vector<float>(12, 0.0f), {2, 3, 2});
}

TEST(Quantization, QuantizeRoundsAddsZeroPointAndClamps) {
  // round(x / scale) + zero_point, clamped to the output dtype.
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {5});
  b.output(b.op("quantize",
                {{"input", x},
                 {"scale", scalarF32(0.5f)},
                 {"zero_point", const8(DType::U8, {128}, {})},
                 {"output_dtype", constStr("uint8")}},
                DType::U8, {5}));
  b.output(b.op("quantize",
                {{"input", x}, {"scale", scalarF32(0.5f)}, {"output_dtype", constStr("int8")}},
                DType::I8, {5}));
  auto out = runOnce(b, {{"x", Tensor::fromF32({-1, 0, 0.6f, 2.6f, 100}, {5})}});
  expectInts(out[0], {126, 128, 129, 133, 255}, {5});
  expectInts(out[1], {-2, 0, 1, 5, 127}, {5});
}

TEST(Quantization, DequantizePerTensorAndPerAxis) {
  // (input - zero_point) * scale; per axis, one scale and zero point a slice.
  ProgramBuilder b;
  b.output(b.op("dequantize",
                {{"input", const8(DType::U8, {0, 128, 255}, {3})},
                 {"zero_point", const8(DType::U8, {128}, {})},
                 {"scale", scalarF32(0.5f)}},
                DType::F32, {3}));
  b.output(b.op("dequantize",
                {{"input", const8(DType::I8, {-3, 4, 1, -1}, {2, 2})},
                 {"zero_point", const8(DType::I8, {0, 1}, {2})},
                 {"scale", constF32({1, 2}, {2})},
                 {"axis", scalarI32(0)}},
                DType::F32, {2, 2}));
  auto out = runOnce(b);
  expectNear(out[0], {-64, 0, 63.5f}, {3});
  expectNear(out[1], {-3, 4, 0, -4}, {2, 2});
}

TEST(Parameters, AnAbsentParameterTakesTheOpTablesDefault) {
  // Ops.def: thresholded_relu's alpha is required; topk's k, axis and
  // ascending default to 1, -1 and False; gelu's mode to EXACT.
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {2, 3});
  b.output(b.ops("topk", {{"x", x}},
                 {Type::tensor(DType::F32, {2, 1}), Type::tensor(DType::I32, {2, 1})})[0]);
  b.output(b.op("gelu", {{"x", x}}, DType::F32, {2, 3}));
  auto out = runOnce(b, {{"x", Tensor::fromF32({1, 5, 3, -2, -1, -3}, {2, 3})}});
  expectNear(out[0], {5, -1}, {2, 1});
  expectNear(out[1], {0.8413447f, 4.9999986f, 2.9959502f, -0.0455003f, -0.1586553f, -0.0040497f},
             {2, 3}, 1e-5f, 1e-5f);

  ProgramBuilder bad;
  Value *y = bad.input("y", DType::F32, {2});
  bad.output(bad.op("thresholded_relu", {{"x", y}}, DType::F32, {2}));
  try {
    runOnce(bad, {{"y", Tensor::fromF32({1, 2}, {2})}});
    ADD_FAILURE() << "a missing required parameter was given a value";
  } catch (const InputError &e) {
    EXPECT_NE(std::string(e.what()).find("required parameter 'alpha' is missing"),
              std::string::npos)
        << e.what();
  }
}

} // namespace
