//===- WeightPassesTest.cpp - Passes that rewrite weights, on random problems ===//
//
// requantize, split-projection and depthwise-taps on random shapes, storage
// forms and biases, each model run through the interpreter beside its
// rewrite (fix's own comparison): fp16 requantization bit-equal in fp16
// mode, per-channel int8 within the error it reports, split projections and
// tap products bit-equal to the op they replace in fp32.
//
//===----------------------------------------------------------------------===//
#include "support/Random.h"
#include "transforms/TestPrograms.h"

#include "fix/Fix.h"
#include "ir/Clone.h"
#include "ir/Verifier.h"
#include "runtime/Interpreter.h"
#include "support/DType.h"
#include "support/Error.h"
#include "transforms/Pass.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

using namespace anefit;
using namespace anefit::test;

namespace {

std::mt19937 &rng() {
  static std::mt19937 r(7);
  return r;
}

int64_t pick(std::vector<int64_t> options) {
  return options[static_cast<size_t>(
      uniformInt(rng(), 0, static_cast<int64_t>(options.size()) - 1))];
}

Constant randomF16(std::vector<int64_t> shape, float scale) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto &h : v)
    h = floatToHalf(normalFloat(rng(), 0.0f, scale));
  return Constant::fromF16Bits(std::move(v), std::move(shape));
}

/// Packed integers of `dtype` (int4/uint4/int8/uint8), uniformly random
/// among the first `levels` codes (all of them when 0).
Constant randomInts(DType dtype, std::vector<int64_t> shape, int levels = 0) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  int bits = dtypeBits(dtype);
  Constant c;
  c.type = Type::tensor(dtype, shape);
  c.bytes.assign(static_cast<size_t>((n * bits + 7) / 8), 0);
  for (int64_t i = 0; i < n; ++i) {
    int v = static_cast<int>(uniformInt(rng(), 0, (levels ? levels : 1 << bits) - 1));
    if (bits == 4)
      c.bytes[static_cast<size_t>(i / 2)] |= static_cast<uint8_t>(v << (4 * (i % 2)));
    else
      c.bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(v);
  }
  return c;
}

/// y = linear(x, W) with W (rows, cols) from constexpr_blockwise_shift_scale
/// over blocks of (rowBlock, colBlock), or a plain fp16 const when both are 0.
std::unique_ptr<Model> linearModel(int64_t rows, int64_t cols, int64_t rowBlock, int64_t colBlock,
                                   DType dtype, bool offset, bool bias, int levels = 0) {
  auto m = newModel();
  Function &fn = newFunction(*m, "main");
  FnBuilder b(fn);
  Value *x = b.input("x", f16({1, cols}));
  Value *w;
  if (!rowBlock) {
    w = b.constant("w", randomF16({rows, cols}, 1.0f / std::sqrt(float(cols))));
  } else {
    std::vector<int64_t> s = {rows / rowBlock, cols / colBlock};
    Value *d = b.constant("d", randomInts(dtype, {rows, cols}, levels));
    Value *sc = b.constant("s", randomF16(s, 0.02f));
    std::vector<std::pair<std::string, std::vector<Value *>>> in = {{"data", {d}}, {"scale", {sc}}};
    if (offset)
      in.push_back({"offset", {b.constant("o", randomInts(dtype, s))}});
    w = b.op("constexpr_blockwise_shift_scale", "w", in, f16({rows, cols}));
  }
  std::vector<std::pair<std::string, std::vector<Value *>>> in = {{"x", {x}}, {"weight", {w}}};
  if (bias)
    in.push_back({"bias", {b.constant("b", randomF16({rows}, 1.0f))}});
  b.output(b.op("linear", "y", in, f16({1, rows})));
  describe(*m);
  return m;
}

struct Rewritten {
  std::unique_ptr<Model> model;
  PassResult result;
};

Rewritten rewrite(const Model &m, const std::string &pipeline) {
  Rewritten r{cloneModel(m), {}};
  PassManager pm;
  pm.addPipeline(pipeline);
  r.result = pm.run(*r.model);
  EXPECT_FALSE(hasErrors(verifyModel(*r.model))) << pipeline;
  return r;
}

/// Runs both models on the same random inputs; fills `error`.
runtime::Comparison compare(const Model &a, const Model &b, runtime::Precision precision,
                            FixVerification *error = nullptr,
                            runtime::Tolerance tolerance = {0, 0}) {
  return compareRewrite(a, b, StateMap{}, 2, 11, tolerance, precision, error);
}

DType pickIntType() {
  DType types[] = {DType::I4, DType::U4, DType::I8, DType::U8};
  return types[pick({0, 1, 2, 3})];
}

TEST(Requantize, Fp16IsExactAsTheDeviceComputes) {
  rng().seed(101); // each test draws the same problems alone or in any order
  for (int trial = 0; trial < 40; ++trial) {
    int64_t cols = pick({32, 64, 96}), rows = pick({8, 24, 64});
    // Blocks along the columns (fewer than the row): per-block, not per-channel.
    int64_t colBlock = std::min(pick({8, 16, 32}), cols / 2), rowBlock = pick({1, 1, 8});
    DType t = pickIntType();
    bool offset = pick({0, 1}), bias = pick({0, 1});
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + " blocks " +
                 std::to_string(rowBlock) + "x" + std::to_string(colBlock) + " " +
                 std::string(dtypeName(t)) + (offset ? " offset" : ""));
    auto m = linearModel(rows, cols, rowBlock, colBlock, t, offset, bias);
    Rewritten r = rewrite(*m, "requantize{to=fp16}");
    EXPECT_EQ(countOps(*r.model->program->functions[0], "constexpr_blockwise_shift_scale"), 0);
    EXPECT_TRUE(r.result.exactInFp16);
    EXPECT_FALSE(r.result.lossy);
    runtime::Comparison c = compare(*m, *r.model, runtime::Precision::FP16);
    EXPECT_EQ(c.maxAbsDiff(), 0.0) << c.firstMismatch();
  }
}

TEST(Requantize, PerChannelInt8StaysWithinTheErrorItReports) {
  rng().seed(102); // each test draws the same problems alone or in any order
  for (int trial = 0; trial < 30; ++trial) {
    int64_t cols = pick({64, 128}), rows = pick({16, 64});
    auto m = linearModel(rows, cols, 1, pick({16, 32}), pickIntType(), pick({0, 1}), false);
    Rewritten r = rewrite(*m, "requantize{to=c8w}");
    EXPECT_TRUE(r.result.lossy);
    // The function's line, then the whole program's size and bits per weight.
    ASSERT_EQ(r.result.changes.size(), 2u);
    EXPECT_NE(r.result.changes[0].find("per-channel int8"), std::string::npos);
    EXPECT_NE(r.result.changes[1].find("bits per weight over all its " +
                                       std::to_string(rows * cols) + " weights"),
              std::string::npos)
        << r.result.changes[1];
    // One scale per output channel: data (rows, cols) int8, scale (rows, 1).
    walk(*r.model->program->functions[0]->body, [&](const Operation &op) {
      if (op.type != "constexpr_blockwise_shift_scale")
        return;
      EXPECT_EQ(op.inputType("data")->dtype(), DType::I8);
      EXPECT_EQ(*op.inputType("scale")->staticShape(), (std::vector<int64_t>{rows, 1}));
    });
    FixVerification v;
    compare(*m, *r.model, runtime::Precision::FP32, &v);
    // A weight error of at most half a step of amax/127 per element bounds
    // the output's relative error by about 1/127 times the row's spread.
    EXPECT_LT(v.relError, 0.02);
  }
}

TEST(Requantize, AutoFallsBackToFp16PastTheWeightErrorBound) {
  rng().seed(103); // each test draws the same problems alone or in any order
  auto m = linearModel(16, 64, 1, 16, DType::I8, false, false);
  Rewritten r = rewrite(*m, "requantize{to=auto max-error=0}");
  // The function's line, the weight's choice, auto's summary.
  ASSERT_EQ(r.result.changes.size(), 3u);
  EXPECT_NE(
      r.result.changes[1].find("'w' -> fp16 (16.00 bits per weight, no smaller form within 0.00%)"),
      std::string::npos)
      << r.result.changes[1];
  EXPECT_NE(r.result.changes[0].find("1 fp16 (exact)"), std::string::npos) << r.result.changes[0];
  EXPECT_FALSE(r.result.lossy);
}

/// The palettes of one rewritten weight: indices dtype and lut shape.
void expectPalettes(const Model &m, DType indices, std::vector<int64_t> lut) {
  int64_t seen = 0;
  walk(*m.program->functions[0]->body, [&](const Operation &op) {
    if (op.type != "constexpr_lut_to_dense")
      return;
    ++seen;
    EXPECT_EQ(op.inputType("indices")->dtype(), indices);
    EXPECT_EQ(*op.inputType("lut")->staticShape(), lut);
  });
  EXPECT_EQ(seen, 1);
  EXPECT_EQ(countOps(*m.program->functions[0], "constexpr_blockwise_shift_scale"), 0);
}

TEST(Requantize, PalettesAreExactOnWeightsWithFewValues) {
  rng().seed(106); // each test draws the same problems alone or in any order
  for (int trial = 0; trial < 30; ++trial) {
    // Two column blocks of 8 codes each per group of rows: at most 16
    // values per palette, so lut4 keeps every weight.
    int64_t group = pick({1, 4, 16}), rows = group * pick({1, 2, 3}), cols = pick({32, 64});
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + " group " +
                 std::to_string(group));
    auto m = linearModel(rows, cols, group, cols / 2, DType::U4, false, pick({0, 1}), 8);
    Rewritten r = rewrite(*m, "requantize{to=lut4 group=" + std::to_string(group) + "}");
    expectPalettes(*r.model, DType::U4, {rows / group, 1, 16, 1});
    ASSERT_EQ(r.result.changes.size(), 2u);
    EXPECT_NE(r.result.changes[0].find("mean 0.00%, max 0.00%"), std::string::npos)
        << r.result.changes[0];
    // Same weights; the palette and the block kernels add the products in
    // different orders, so outputs agree to rounding.
    FixVerification v;
    compare(*m, *r.model, runtime::Precision::FP32, &v);
    EXPECT_LT(v.relError, 1e-3);
  }
}

TEST(Requantize, PalettesStayWithinTheErrorOfTheirBits) {
  rng().seed(107); // each test draws the same problems alone or in any order
  for (int trial = 0; trial < 20; ++trial) {
    int64_t rows = pick({16, 48, 64}), cols = pick({64, 128});
    int bits = static_cast<int>(pick({4, 6, 8}));
    int64_t group = pick({1, 16, 32});
    int64_t g = group;
    while (rows % g)
      --g;
    std::string form = "lut" + std::to_string(bits);
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + " " + form + " group " +
                 std::to_string(group));
    auto m = linearModel(rows, cols, 1, pick({16, 32}), DType::I8, pick({0, 1}), false);
    Rewritten r = rewrite(*m, "requantize{to=" + form + " group=" + std::to_string(group) + "}");
    EXPECT_TRUE(r.result.lossy);
    DType indices = bits == 4 ? DType::U4 : bits == 6 ? DType::U6 : DType::U8;
    expectPalettes(*r.model, indices, {rows / g, 1, int64_t{1} << bits, 1});
    FixVerification v;
    compare(*m, *r.model, runtime::Precision::FP32, &v);
    // Codes in blocks of their own random scales make a heavy-tailed mix
    // that 16, 64 or 256 values approximate to a few percent (measured
    // here: at most 20 %, 7.5 % and 2.3 % on the outputs). A wrong index or
    // a palette read for the wrong rows gives errors near 100 %.
    EXPECT_LT(v.relError, bits == 4 ? 0.3 : bits == 6 ? 0.12 : 0.05);
  }
}

TEST(Requantize, PaletteOptionsAreChecked) {
  auto m = linearModel(16, 64, 1, 16, DType::I8, false, false);
  EXPECT_THROW(rewrite(*m, "requantize{to=lut4 group=0}"), InputError);
  EXPECT_THROW(rewrite(*m, "requantize{to=lut3}"), InputError);
}

TEST(SplitProjection, PiecesEqualTheWideLinear) {
  rng().seed(104); // each test draws the same problems alone or in any order
  for (int trial = 0; trial < 40; ++trial) {
    int64_t rows = pick({40, 96, 130, 256}), cols = pick({16, 32});
    int64_t maxBytes = pick({16, 64, 128});
    bool quantized = pick({0, 1});
    int64_t rowBlock = quantized ? pick({1, 2}) : 0;
    if (rowBlock && rows % rowBlock)
      rowBlock = 1;
    bool bias = pick({0, 1});
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + " max-bytes " +
                 std::to_string(maxBytes) + (quantized ? " quantized" : "") +
                 (bias ? " bias" : ""));
    auto m = linearModel(rows, cols, rowBlock, quantized ? 8 : 0, DType::I8, false, bias);
    Rewritten r = rewrite(*m, "split-projection{max-bytes=" + std::to_string(maxBytes) + "},dce");
    const Function &fn = *r.model->program->functions[0];
    int64_t pieces = countOps(fn, "linear");
    EXPECT_GE(pieces * maxBytes / 2, rows);
    EXPECT_EQ(countOps(fn, "concat"), pieces > 1 ? 1 : 0);
    EXPECT_EQ(outputNames(fn), std::vector<std::string>{"y"});
    walk(*fn.body, [&](const Operation &op) {
      if (op.type == "linear") {
        EXPECT_LE(op.output()->type.staticShape()->back() * 2, maxBytes) << op.name;
      }
    });
    // Each output element is the same dot product: bit-equal.
    runtime::Comparison c = compare(*m, *r.model, runtime::Precision::FP32);
    EXPECT_EQ(c.maxAbsDiff(), 0.0) << c.firstMismatch();
  }
}

TEST(SplitProjection, PalettizedPiecesEqualTheWideLinear) {
  rng().seed(108); // each test draws the same problems alone or in any order
  for (int trial = 0; trial < 20; ++trial) {
    int64_t rows = pick({96, 128, 192}), cols = pick({16, 32}), group = pick({1, 4, 16});
    int64_t maxBytes = pick({64, 128});
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + " group " +
                 std::to_string(group) + " max-bytes " + std::to_string(maxBytes));
    auto m = linearModel(rows, cols, 1, 8, DType::I8, false, pick({0, 1}));
    std::string lut = "requantize{to=lut4 group=" + std::to_string(group) + "}";
    Rewritten whole = rewrite(*m, lut);
    Rewritten split =
        rewrite(*whole.model, "split-projection{max-bytes=" + std::to_string(maxBytes) + "},dce");
    const Function &fn = *split.model->program->functions[0];
    EXPECT_GT(countOps(fn, "linear"), 1);
    EXPECT_EQ(countOps(fn, "constexpr_lut_to_dense"), countOps(fn, "linear"));
    // Each piece reads the same rows through the same palettes: bit-equal.
    runtime::Comparison c = compare(*whole.model, *split.model, runtime::Precision::FP32);
    EXPECT_EQ(c.maxAbsDiff(), 0.0) << c.firstMismatch();
  }
}

/// A tied embedding: e = gather(w, t) (the token's row) and y = linear(x, w)
/// (the LM head) read one fp16 weight of `rows` rows.
std::unique_ptr<Model> tiedModel(int64_t rows, int64_t cols, int64_t tokens) {
  auto m = newModel();
  Function &fn = newFunction(*m, "main");
  FnBuilder b(fn);
  Value *x = b.input("x", f16({1, cols}));
  Value *t = b.input("t", i32({1, tokens}));
  Value *w = b.constant("w", randomF16({rows, cols}, 1.0f));
  b.output(b.op("gather", "e",
                {{"x", {w}},
                 {"indices", {t}},
                 {"axis", {b.scalarInt("axis", 0)}},
                 {"batch_dims", {b.scalarInt("batch_dims", 0)}},
                 {"validate_indices", {b.constant("validate", Constant::scalarBool(false))}}},
                f16({1, tokens, cols})));
  b.output(b.op("linear", "y", {{"x", {x}}, {"weight", {w}}}, f16({1, rows})));
  describe(*m);
  return m;
}

TEST(SplitProjection, TiedEmbeddingIsStoredOnceAndGathersTheSameRows) {
  rng().seed(109); // each test draws the same problems alone or in any order
  for (int trial = 0; trial < 12; ++trial) {
    int64_t rows = pick({40, 96, 130}), cols = pick({8, 16}), maxBytes = pick({16, 64});
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + " max-bytes " +
                 std::to_string(maxBytes));
    auto m = tiedModel(rows, cols, rows * 2);
    Rewritten r = rewrite(*m, "split-projection{max-bytes=" + std::to_string(maxBytes) + "},dce");
    const Function &fn = *r.model->program->functions[0];
    int64_t pieces = countOps(fn, "linear");
    ASSERT_GT(pieces, 1);
    EXPECT_EQ(countOps(fn, "gather"), pieces);
    // The pieces' rows only: the whole weight is gone.
    int64_t stored = 0;
    walk(*fn.body, [&](const Operation &op) {
      if (op.type == "const" && op.output()->type.dtype() == DType::F16)
        stored += op.output()->type.numElements().value_or(0);
    });
    EXPECT_EQ(stored, rows * cols);
    // Every row, by its index and by its negative index, and the head.
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < rows; ++i) {
      ids.push_back(static_cast<int32_t>(i));
      ids.push_back(static_cast<int32_t>(i - rows));
    }
    runtime::TensorMap in = {{"t", runtime::Tensor::fromI32(ids, {1, 2 * rows})}};
    std::vector<float> x(static_cast<size_t>(cols));
    for (auto &v : x)
      v = std::normal_distribution<float>(0.0f, 1.0f)(rng());
    in.emplace("x", runtime::Tensor::fromF32(x, {1, cols}));
    auto run = [&](const Model &model) {
      runtime::Interpreter interp(*model.program->functions[0]);
      runtime::StateContext states;
      return interp.run(in, states);
    };
    auto want = run(*m), got = run(*r.model);
    ASSERT_EQ(want.size(), got.size());
    for (size_t o = 0; o < want.size(); ++o) {
      ASSERT_EQ(want[o].tensor.numBytes(), got[o].tensor.numBytes()) << want[o].name;
      EXPECT_EQ(std::memcmp(want[o].tensor.bytes(), got[o].tensor.bytes(),
                            static_cast<size_t>(want[o].tensor.numBytes())),
                0)
          << want[o].name;
    }
  }
}

/// y = conv(x, w, groups=C) over a window of exactly K (rank 3 or 4).
std::unique_ptr<Model> depthwiseModel(int64_t c, int64_t k, bool rank4, bool bias) {
  auto m = newModel();
  Function &fn = newFunction(*m, "main");
  FnBuilder b(fn);
  std::vector<int64_t> xs =
      rank4 ? std::vector<int64_t>{1, c, 1, k} : std::vector<int64_t>{1, c, k};
  std::vector<int64_t> ws =
      rank4 ? std::vector<int64_t>{c, 1, 1, k} : std::vector<int64_t>{c, 1, k};
  std::vector<int64_t> ys =
      rank4 ? std::vector<int64_t>{1, c, 1, 1} : std::vector<int64_t>{1, c, 1};
  Value *x = b.input("x", f16(xs));
  Value *w = b.constant("w", randomF16(ws, 0.5f));
  int spatial = rank4 ? 2 : 1;
  std::vector<int32_t> ones(static_cast<size_t>(spatial), 1), zeros(2 * spatial, 0);
  std::vector<std::pair<std::string, std::vector<Value *>>> in = {
      {"x", {x}},
      {"weight", {w}},
      {"strides", {b.ints("strides", ones)}},
      {"pad_type", {b.constant("pad_type", Constant::scalarString("valid"))}},
      {"pad", {b.ints("pad", zeros)}},
      {"dilations", {b.ints("dilations", ones)}},
      {"groups", {b.scalarInt("groups", static_cast<int32_t>(c))}}};
  if (bias)
    in.push_back({"bias", {b.constant("b", randomF16({c}, 1.0f))}});
  b.output(b.op("conv", "y", in, f16(ys)));
  describe(*m);
  return m;
}

TEST(DepthwiseTaps, MatchesTheConvKernel) {
  rng().seed(105); // each test draws the same problems alone or in any order
  for (int trial = 0; trial < 40; ++trial) {
    int64_t c = pick({1, 4, 64, 1024}), k = pick({1, 2, 3, 4, 5});
    bool rank4 = pick({0, 1}), bias = pick({0, 1});
    SCOPED_TRACE("C " + std::to_string(c) + " K " + std::to_string(k) +
                 (rank4 ? " rank 4" : " rank 3") + (bias ? " bias" : ""));
    auto m = depthwiseModel(c, k, rank4, bias);
    Rewritten r = rewrite(*m, "depthwise-taps,dce");
    const Function &fn = *r.model->program->functions[0];
    EXPECT_EQ(countOps(fn, "conv"), 0);
    EXPECT_EQ(countOps(fn, "mul"), k);
    EXPECT_EQ(outputNames(fn), std::vector<std::string>{"y"});
    // The conv's own float operations in its order: bit-equal in fp32.
    runtime::Comparison c32 = compare(*m, *r.model, runtime::Precision::FP32);
    EXPECT_EQ(c32.maxAbsDiff(), 0.0) << c32.firstMismatch();
    // fp16 mode rounds each product and partial sum: a few fp16 steps.
    FixVerification v;
    compare(*m, *r.model, runtime::Precision::FP16, &v);
    EXPECT_LT(v.relError, 2e-3);
  }
}

TEST(DepthwiseTaps, LeavesConvsOverALongerWindow) {
  rng().seed(106); // each test draws the same problems alone or in any order
  auto m = depthwiseModel(8, 3, false, false);
  // A prefill window: 6 positions in, 4 out.
  Function &fn = *m->program->functions[0];
  fn.inputs[0]->type = f16({1, 8, 6});
  fn.body->outputs[0]->type = f16({1, 8, 4});
  describe(*m);
  Rewritten r = rewrite(*m, "depthwise-taps");
  EXPECT_EQ(countOps(*r.model->program->functions[0], "conv"), 1);
  EXPECT_TRUE(r.result.changes.empty());
}

} // namespace

namespace {

TEST(Requantize, AWeightHoldingInfStaysDense) {
  rng().seed(200);
  auto m = linearModel(8, 32, 1, 16, DType::I8, false, false);
  // One block's scale is inf: no per-channel scale can hold that row.
  walk(*m->program->functions[0]->body, [&](Operation &op) {
    if (op.name != "s")
      return;
    Constant c = *op.attribute("val");
    c.bytes[0] = 0x00;
    c.bytes[1] = 0x7C; // fp16 +inf
    op.attributes["val"] = std::make_shared<const Constant>(std::move(c));
  });
  Rewritten r = rewrite(*m, "requantize{to=c8w}");
  ASSERT_EQ(r.result.changes.size(), 2u);
  EXPECT_NE(r.result.changes[0].find("1 fp16 (exact)"), std::string::npos) << r.result.changes[0];
  // Kept dense: 16 bits for each of the 8 x 32 weights.
  EXPECT_NE(r.result.changes[1].find("16.00 bits per weight over all its 256 weights"),
            std::string::npos)
      << r.result.changes[1];
  EXPECT_FALSE(r.result.lossy);
}

} // namespace
