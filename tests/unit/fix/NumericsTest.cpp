//===- NumericsTest.cpp - Where fp16 leaves fp32, op by op ----------------===//
//
// measureNumerics on constructed programs: an overflow built into a chain
// names the op where it starts (not the ops it spreads to), with the
// magnitudes at fp32; a value lost where no op uses it further (an eps term
// below what it is added to) starts nothing; a program that stays in range
// measures as calm.
//
//===----------------------------------------------------------------------===//
#include "fix/Numerics.h"
#include "ir/AsmParser.h"

#include <gtest/gtest.h>

using namespace anefit;

namespace {

ane::NumericsMeasurement measure(const std::string &text, int64_t steps = 2,
                                 uint64_t keepBytes = uint64_t(1) << 30) {
  auto model = parseModelText(text, "numerics.mil", nullptr);
  NumericsOptions o;
  o.keepBytes = keepBytes;
  o.run.random = true;
  o.run.steps = steps;
  o.inputsText = "random";
  return measureNumerics(*model, o);
}

const ane::MeasuredOp *origin(const ane::NumericsMeasurement &m) {
  for (const ane::MeasuredOp &op : m.ops)
    if (op.origin)
      return &op;
  return nullptr;
}

TEST(Numerics, NamesTheOpWhereAnOverflowStarts) {
  // x + 400 squares past 65504 at fp16; the sum and the root after it are
  // lost too, but only because what they read was.
  auto m = measure(R"(main[CoreML8](%x: (1, 3, 16, fp16)(Tensor)) {
  block0() {
    %h: (1, 3, 16, fp16)(Tensor) = add(x=%x, y=400.0:fp16, name="h")
    %sq: (1, 3, 16, fp16)(Tensor) = square(x=%h, name="sq")
    %s: (1, 3, 1, fp16)(Tensor) = reduce_sum(x=%sq, axes=[-1], keep_dims=True, name="s")
    %r: (1, 3, 1, fp16)(Tensor) = rsqrt(x=%s, name="r")
    %y: (1, 3, 16, fp16)(Tensor) = mul(x=%h, y=%r, name="y")
  } -> (%y)
})");
  EXPECT_EQ(m.steps, 2);
  const ane::MeasuredOp *o = origin(m);
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->op, "sq");
  EXPECT_EQ(o->nonFinite, 48u); // every square is past 65504
  EXPECT_EQ(o->elements, 48u);
  EXPECT_GT(o->maxAbsIn, 396.0);
  EXPECT_LT(o->maxAbsIn, 410.0);
  EXPECT_GT(o->maxAbsOut, 65504.0);
  size_t origins = 0;
  for (const ane::MeasuredOp &op : m.ops)
    origins += op.origin;
  EXPECT_EQ(origins, 1u);
  EXPECT_GE(m.divergentOps, 4u); // sq, s, r, y
  EXPECT_TRUE(m.diverged());
  EXPECT_EQ(m.collapsedRows, 6u); // 3 rows x 2 steps, all zero at fp16
  EXPECT_EQ(m.rows, 6u);
}

TEST(Numerics, AValueNotKeptCarriesOnWhatItReads) {
  // The tile of the overflowing squares is past what is kept (2 KB here),
  // so it is never compared; the sum that reads it still reads infinities
  // and starts nothing of its own.
  const char *program = R"(main[CoreML8](%x: (1, 3, 16, fp16)(Tensor)) {
  block0() {
    %h: (1, 3, 16, fp16)(Tensor) = add(x=%x, y=400.0:fp16, name="h")
    %sq: (1, 3, 16, fp16)(Tensor) = square(x=%h, name="sq")
    %t: (1, 3, 1024, fp16)(Tensor) = tile(x=%sq, reps=[1, 1, 64], name="t")
    %s: (1, 3, 1, fp16)(Tensor) = reduce_sum(x=%t, axes=[-1], keep_dims=True, name="s")
    %r: (1, 3, 1, fp16)(Tensor) = rsqrt(x=%s, name="r")
    %y: (1, 3, 16, fp16)(Tensor) = mul(x=%h, y=%r, name="y")
  } -> (%y)
})";
  for (uint64_t keep : {uint64_t(2048), uint64_t(1) << 30}) {
    SCOPED_TRACE("keep " + std::to_string(keep));
    auto m = measure(program, 2, keep);
    std::vector<std::string> origins;
    for (const ane::MeasuredOp &op : m.ops)
      if (op.origin)
        origins.push_back(op.op);
    EXPECT_EQ(origins, std::vector<std::string>{"sq"});
    EXPECT_TRUE(m.diverged());
  }
}

TEST(Numerics, ALossNoOpCarriesOnStartsNothing) {
  // 1e-6 / 3000 underflows in fp16 and its square is zero, but it is added
  // to values near 1: the sum keeps its fp32 value.
  auto m = measure(R"(main[CoreML8](%x: (1, 8, fp16)(Tensor)) {
  block0() {
    %big: (1, 8, fp16)(Tensor) = add(x=%x, y=3000.0:fp16, name="big")
    %tiny: (1, 8, fp16)(Tensor) = real_div(x=0.001:fp16, y=%big, name="tiny")
    %t2: (1, 8, fp16)(Tensor) = square(x=%tiny, name="t2")
    %y: (1, 8, fp16)(Tensor) = add(x=%x, y=%t2, name="y")
  } -> (%y)
})");
  EXPECT_EQ(origin(m), nullptr);
  EXPECT_FALSE(m.diverged());
  EXPECT_EQ(m.outputNonFinite, 0u);
  // The square is still measured (ANE-DTYPE-005 states its |x|).
  ASSERT_EQ(m.ops.size(), 1u);
  EXPECT_EQ(m.ops[0].op, "t2");
  EXPECT_FALSE(m.ops[0].origin);
}

TEST(Numerics, AProgramInRangeIsCalm) {
  auto m = measure(R"(main[CoreML8](%x: (1, 2, 32, fp16)(Tensor)) {
  block0() {
    %sq: (1, 2, 32, fp16)(Tensor) = mul(x=%x, y=%x, name="sq")
    %ms: (1, 2, 1, fp16)(Tensor) = reduce_mean(x=%sq, axes=[-1], keep_dims=True, name="ms")
    %v: (1, 2, 1, fp16)(Tensor) = add(x=%ms, y=1e-05:fp16, name="v")
    %r: (1, 2, 1, fp16)(Tensor) = rsqrt(x=%v, name="r")
    %y: (1, 2, 32, fp16)(Tensor) = mul(x=%x, y=%r, name="y")
  } -> (%y)
})",
                   3);
  EXPECT_EQ(origin(m), nullptr);
  EXPECT_FALSE(m.diverged());
  EXPECT_EQ(m.divergentOps, 0u);
  EXPECT_EQ(m.top1Agree, m.rows);
  EXPECT_LT(m.outputRelError, 2e-3);
  ASSERT_EQ(m.ops.size(), 1u); // the square, with its |x|
  EXPECT_GT(m.ops[0].maxAbsIn, 1.0);
  EXPECT_LT(m.ops[0].maxAbsIn, 6.0);
}

} // namespace
