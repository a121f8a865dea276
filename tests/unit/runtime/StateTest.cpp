//===- StateTest.cpp - States, precision, constexpr ops and errors --------===//
//
// Interpreter-level behaviour: states persisting across runs, fp16 rounding
// mode, dequantization of compressed constants, and the errors users see for
// bad inputs and unsupported ops.
//
//===----------------------------------------------------------------------===//
#include "RuntimeTestUtil.h"

#include "support/Error.h"

using namespace anefit;
using namespace anefit::test;

namespace {

/// acc <- acc + x; returns the new acc. The state is fp16 like LFM2's.
ProgramBuilder accumulator() {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {1, 2});
  Value *st = b.state("acc", DType::F16, {1, 2});
  Value *cur = b.op("read_state", {{"input", st}}, DType::F16, {1, 2});
  Value *xh = b.op("cast", {{"x", x}, {"dtype", constStr("fp16")}}, DType::F16, {1, 2});
  Value *sum = b.op("add", {{"x", cur}, {"y", xh}}, DType::F16, {1, 2});
  Value *upd = b.op("coreml_update_state", {{"state", st}, {"value", sum}}, DType::F16, {1, 2});
  b.output(b.op("cast", {{"x", upd}, {"dtype", constStr("fp32")}}, DType::F32, {1, 2}));
  return b;
}

TEST(State, PersistsAcrossRuns) {
  ProgramBuilder b = accumulator();
  runtime::Interpreter interp(*b.fn);
  runtime::StateContext states;
  for (int step = 1; step <= 3; ++step) {
    auto out = interp.run({{"x", Tensor::fromF32({1, 2}, {1, 2})}}, states);
    expectNear(out[0].tensor, {1.0f * step, 2.0f * step}, {1, 2});
  }
  ASSERT_NE(states.find("acc"), nullptr);
  expectNear(*states.find("acc"), {3, 6}, {1, 2});
}

TEST(State, StartsFromGivenValue) {
  ProgramBuilder b = accumulator();
  runtime::Interpreter interp(*b.fn);
  runtime::StateContext states;
  states.set(*b.fn, "acc", Tensor::fromF32({10, 20}, {1, 2}));
  auto out = interp.run({{"x", Tensor::fromF32({1, 1}, {1, 2})}}, states);
  expectNear(out[0].tensor, {11, 21}, {1, 2});
  EXPECT_THROW(states.set(*b.fn, "nope", Tensor::fromF32({0, 0}, {1, 2})), InputError);
  EXPECT_THROW(states.set(*b.fn, "acc", Tensor::fromF32({0, 0, 0}, {3})), InputError);
}

TEST(Precision, Fp16ModeOverflowsLikeTheAne) {
  // x * x with x = 300 is 90000: finite in fp32, inf in fp16.
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {2});
  b.output(b.op("mul", {{"x", x}, {"y", x}}, DType::F32, {2}));
  Tensor in = Tensor::fromF32({300, 1.0f / 3}, {2});
  auto fp32 = runOnce(b, {{"x", in}});
  auto fp16 = runOnce(b, {{"x", in}}, runtime::Precision::FP16);
  EXPECT_FLOAT_EQ(fp32[0].floatAt(0), 90000.0f);
  EXPECT_TRUE(std::isinf(fp16[0].floatAt(0)));
  // 1/9 rounded to the nearest fp16 value.
  EXPECT_EQ(fp16[0].floatAt(1), halfToFloat(floatToHalf(fp32[0].floatAt(1))));
  EXPECT_NE(fp16[0].floatAt(1), fp32[0].floatAt(1));
}

TEST(Constexpr, AffineDequantizePerChannel) {
  ProgramBuilder b;
  auto q = std::make_shared<Constant>();
  q->type = Type::tensor(DType::U8, std::vector<int64_t>{2, 2});
  q->bytes = {10, 12, 0, 255};
  Value *w = b.op("constexpr_affine_dequantize",
                  {{"quantized_data", q},
                   {"zero_point", constF32({10, 0}, {2})},
                   {"scale", constF32({0.5f, 2}, {2})},
                   {"axis", scalarI32(0)}},
                  DType::F32, {2, 2});
  b.output(w);
  auto out = runOnce(b);
  expectNear(out[0], {0, 1, 0, 510}, {2, 2});
}

TEST(Constexpr, LutToDenseBothForms) {
  // iOS16: 2-bit indices packed LSB first, flat lut of 4 entries.
  ProgramBuilder b;
  auto idx = std::make_shared<Constant>();
  idx->type = Type::tensor(DType::U8, std::vector<int64_t>{1});
  idx->bytes = {0b11100100}; // indices 0, 1, 2, 3
  auto shape = std::make_shared<Constant>(Constant::fromI32({2, 2}, {2}));
  b.output(b.op("constexpr_lut_to_dense",
                {{"indices", idx}, {"lut", constF32({-1, 0, 1, 2}, {4})}, {"shape", shape}},
                DType::F32, {2, 2}));
  // iOS18: uint2 indices per element, one lut per row block: lut [2, 1, 4, 1].
  auto idx18 = std::make_shared<Constant>();
  idx18->type = Type::tensor(DType::U2, std::vector<int64_t>{2, 2});
  idx18->bytes = {0b01001110}; // 2, 3, 0, 1
  b.output(b.op("constexpr_lut_to_dense",
                {{"indices", idx18}, {"lut", constF32({0, 1, 2, 3, 10, 11, 12, 13}, {2, 1, 4, 1})}},
                DType::F32, {2, 2}));
  auto out = runOnce(b);
  expectNear(out[0], {-1, 0, 1, 2}, {2, 2});
  expectNear(out[1], {2, 3, 10, 11}, {2, 2});
}

TEST(Constexpr, BlockwiseShiftScaleAndSparse) {
  ProgramBuilder b;
  auto data = std::make_shared<Constant>();
  data->type = Type::tensor(DType::I8, std::vector<int64_t>{2, 4});
  data->bytes = {1, 2, 3, 4, 0xff, 0xfe, 0, 1}; // 1 2 3 4 / -1 -2 0 1
  b.output(b.op("constexpr_blockwise_shift_scale",
                {{"data", data},
                 {"scale", constF32({1, 10, 2, 3}, {2, 2})},
                 {"offset", constF32({0, 1, 0, 1}, {2, 2})}},
                DType::F32, {2, 4}));
  auto mask = std::make_shared<Constant>();
  mask->type = Type::tensor(DType::U1, std::vector<int64_t>{2, 3});
  mask->bytes = {0b100101}; // elements 0, 2, 5 set
  b.output(b.op("constexpr_sparse_to_dense",
                {{"nonzero_data", constF32({7, 8, 9}, {3})}, {"mask", mask}}, DType::F32, {2, 3}));
  auto out = runOnce(b);
  expectNear(out[0], {1, 2, 20, 30, -2, -4, -3, 0}, {2, 4});
  expectNear(out[1], {7, 0, 8, 0, 0, 9}, {2, 3});
}

TEST(Errors, OpWithoutKernelIsNamed) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {2});
  b.output(b.op("no_such_op", {{"x", x}}, DType::F32, {2}));
  try {
    runtime::Interpreter interp(*b.fn);
    FAIL() << "expected InputError";
  } catch (const InputError &e) {
    std::string m = e.what();
    EXPECT_NE(m.find("no_such_op"), std::string::npos) << m;
    EXPECT_NE(m.find("no kernel"), std::string::npos) << m;
  }
}

TEST(Errors, BadInputsAreInputErrors) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {1, 2});
  b.output(b.op("relu", {{"x", x}}, DType::F32, {1, 2}));
  runtime::Interpreter interp(*b.fn);
  auto message = [&](const runtime::TensorMap &in) {
    try {
      interp.run(in);
    } catch (const InputError &e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({}).find("missing input 'x'"), std::string::npos);
  EXPECT_NE(message({{"x", Tensor::fromF32({1, 2, 3}, {3})}}).find("expected shape"),
            std::string::npos);
  EXPECT_NE(message({{"x", Tensor::fromI32({1, 2}, {1, 2})}}).find("expected dtype fp32"),
            std::string::npos);
  EXPECT_NE(message({{"x", Tensor::fromF32({1, 2}, {1, 2})}, {"y", Tensor::scalarF32(0)}})
                .find("unknown input 'y'"),
            std::string::npos);
}

TEST(Errors, SymbolicDimsBindConsistently) {
  ProgramBuilder b;
  Value *x = b.fn->addInput("x", Type::tensor(DType::F32, {Dim::symbolic("n"), Dim::of(2)}));
  Value *y = b.fn->addInput("y", Type::tensor(DType::F32, {Dim::symbolic("n"), Dim::of(2)}));
  b.output(b.op("add", {{"x", x}, {"y", y}},
                Type::tensor(DType::F32, {Dim::symbolic("n"), Dim::of(2)})));
  runtime::Interpreter interp(*b.fn);
  auto ok = interp.run(
      {{"x", Tensor::fromF32({1, 2, 3, 4}, {2, 2})}, {"y", Tensor::fromF32({1, 1, 1, 1}, {2, 2})}});
  expectNear(ok[0].tensor, {2, 3, 4, 5}, {2, 2});
  EXPECT_THROW(interp.run({{"x", Tensor::fromF32({1, 2, 3, 4}, {2, 2})},
                           {"y", Tensor::fromF32({1, 1}, {1, 2})}}),
               InputError);
}

TEST(Interpreter, KernelTableCoversTheIssueList) {
  for (const char *op : {"linear",
                         "matmul",
                         "conv",
                         "conv_transpose",
                         "softmax",
                         "layer_norm",
                         "batch_norm",
                         "reshape",
                         "transpose",
                         "concat",
                         "split",
                         "slice_by_index",
                         "gather",
                         "scatter",
                         "slice_update",
                         "cast",
                         "pad",
                         "tile",
                         "select",
                         "cumsum",
                         "topk",
                         "reduce_argmax",
                         "band_part",
                         "scaled_dot_product_attention",
                         "fill",
                         "range_1d",
                         "read_state",
                         "write_state",
                         "coreml_update_state",
                         "upsample_nearest_neighbor",
                         "max_pool",
                         "gelu",
                         "constexpr_lut_to_dense",
                         "constexpr_affine_dequantize",
                         "constexpr_blockwise_shift_scale",
                         "constexpr_sparse_to_dense",
                         "constexpr_cast"})
    EXPECT_TRUE(runtime::hasKernel(op)) << op;
  EXPECT_FALSE(runtime::hasKernel("no_such_op"));
}

} // namespace
