//===- CheckerTest.cpp - The ANE checker on programs built in C++ ---------===//
//
// Each rule family on a small program built with the IR API: the rule fires on
// the bad form and stays quiet on the good one; placement, segments and
// verdicts follow from the findings.
//
//===----------------------------------------------------------------------===//
#include "ane/Checker.h"
#include "ane/CheckerPrograms.h"
#include "support/Error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

using namespace anefit;
using namespace anefit::ane;
using namespace anefit::ane::test;

namespace {

CheckOptions onChip(Chip chip) {
  CheckOptions options;
  options.chip = chip;
  return options;
}

TEST(AneChecker, ShortConvStateIsAtRiskForStateReasons) {
  // One narrow state rolled through a chain of ops: every public failure of
  // a narrow state had a second (KV) state beside it, so both state rules
  // fire contested and the verdict is at-risk, not ane-fails.
  ProgramBuilder b;
  buildShortConv(b, 2048);
  CheckReport r = checkModel(b.model);
  EXPECT_TRUE(fires(r, "ANE-STATE-004"));
  EXPECT_TRUE(fires(r, "ANE-STATE-005"));
  EXPECT_FALSE(fires(r, "ANE-STATE-003")) << "2 is below 32: STATE-004's case, not STATE-003's";
  EXPECT_FALSE(fires(r, "ANE-STATE-001"));
  EXPECT_EQ(r.verdict, Verdict::AtRisk);
  EXPECT_TRUE(r.hasFindingAtLeast(Effect::CompileFail));
  EXPECT_FALSE(r.hasFindingAtLeast(Level::CompileFail));
  auto chain = findingsOf(r, "ANE-STATE-005");
  ASSERT_EQ(chain.size(), 1u);
  EXPECT_EQ(chain[0]->certainty, Certainty::Contested);
  EXPECT_NE(
      chain[0]->contradiction.find("no public source shows this failure for the pattern alone"),
      std::string::npos)
      << chain[0]->contradiction;
  EXPECT_NE(chain[0]->message.find("concat -> slice_by_index"), std::string::npos)
      << chain[0]->message;
  EXPECT_EQ(chain[0]->torchNode, "aten_copy_default_0");
  const OpReport *read = opNamed(r, "read_state_0");
  ASSERT_TRUE(read);
  EXPECT_EQ(read->placement, Placement::Ane);
  EXPECT_TRUE(read->atRisk);
  // The state ops sit in one ANE segment, at risk; no boundary.
  ASSERT_EQ(r.functions[0].segments.size(), 1u);
  EXPECT_TRUE(r.functions[0].segments[0].atRisk);
  EXPECT_FALSE(r.functions[0].segments[0].compileFails);
  EXPECT_EQ(r.functions[0].boundaries, 0u);
  const OpReport *sum = opNamed(r, "sum_0");
  ASSERT_TRUE(sum);
  EXPECT_EQ(sum->placement, Placement::Ane);
  // The narrow state's read and write have no working case in the corpus;
  // the state rules already speak for those ops, so ANE-COV-001 does not.
  const FunctionReport &f = r.functions[0];
  EXPECT_LT(f.coveredOps, f.ops.size());
  ASSERT_FALSE(f.unverified.empty());
  EXPECT_TRUE(f.unverified[0].risky);
  EXPECT_NE(f.unverified[0].pattern.find("state=narrow"), std::string::npos)
      << f.unverified[0].pattern;
  EXPECT_FALSE(fires(r, "ANE-COV-001"));
}

TEST(AneChecker, NarrowStateBesideAKvStateFailsConfirmed) {
  // A narrow state beside an aligned KV state is the one state failure
  // observed in isolation (CoreML-LLM's LFM2 bisection): ane-fails. Narrow
  // states with no aligned one beside them are at-risk.
  ProgramBuilder b;
  Value *kv = b.input("kv", Type::state(f16({1, 8, 128, 64})));
  b.output(b.op("read_state", "read_kv", {{"input", val(kv)}}, f16({1, 8, 128, 64})));
  buildShortConv(b, 64, 0);
  CheckReport r = checkModel(b.model);
  EXPECT_EQ(r.verdict, Verdict::AneFails) << findingsText(r);
  auto pair = findingsOf(r, "ANE-STATE-002");
  ASSERT_FALSE(pair.empty());
  EXPECT_EQ(pair[0]->certainty, Certainty::Confirmed);
  EXPECT_TRUE(ruleInfo(pair[0]->rule).failureIsolated());

  ProgramBuilder narrow;
  buildShortConv(narrow, 64, 0);
  buildShortConv(narrow, 64, 1);
  CheckReport n = checkModel(narrow.model);
  EXPECT_EQ(n.verdict, Verdict::AtRisk) << findingsText(n);
  auto both = findingsOf(n, "ANE-STATE-002");
  ASSERT_FALSE(both.empty());
  EXPECT_EQ(both[0]->certainty, Certainty::Contested);
}

TEST(AneChecker, StateCountGrades) {
  for (int n : {1, 2, 3}) {
    ProgramBuilder b;
    for (int i = 0; i < n; ++i)
      buildShortConv(b, 64, i);
    CheckReport r = checkModel(b.model);
    EXPECT_EQ(fires(r, "ANE-STATE-001"), n >= 3) << n << " states";
    EXPECT_EQ(fires(r, "ANE-STATE-002"), n >= 2) << n << " states";
    if (n == 3) {
      EXPECT_EQ(findingsOf(r, "ANE-STATE-001").size(), 3u);
      EXPECT_EQ(findingsOf(r, "ANE-STATE-001")[0]->effect, Effect::RuntimeFail);
      // Runtime failures sort before compile failures.
      EXPECT_EQ(r.findings.front().effect, Effect::RuntimeFail);
    }
  }
}

/// `n` aligned KV states (innermost 64), each read and written in place.
CheckReport checkAlignedStates(int n) {
  ProgramBuilder b;
  Value *last = nullptr;
  for (int i = 0; i < n; ++i) {
    std::string s = std::to_string(i);
    Value *st = b.input("kv_" + s, Type::state(f16({1, 8, 128, 64})));
    last = b.op("read_state", "read_" + s, {{"input", val(st)}}, f16({1, 8, 128, 64}));
  }
  b.output(last);
  return checkModel(b.model);
}

TEST(AneChecker, StateCountNarrowedByAlignment) {
  // Two aligned KV states ship (Gemma 4): no finding, no verdict change.
  CheckReport two = checkAlignedStates(2);
  EXPECT_FALSE(fires(two, "ANE-STATE-002")) << findingsText(two);
  EXPECT_EQ(two.verdict, Verdict::Ane) << findingsText(two);
  // Three aligned states: contested, so at-risk with the counter-report named.
  CheckReport three = checkAlignedStates(3);
  auto f = findingsOf(three, "ANE-STATE-001");
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0]->certainty, Certainty::Contested);
  EXPECT_EQ(f[0]->level(), Level::AtRisk);
  EXPECT_NE(f[0]->contradiction.find("Anemll PR#50"), std::string::npos);
  EXPECT_EQ(three.verdict, Verdict::AtRisk) << findingsText(three);
  EXPECT_TRUE(three.hasFindingAtLeast(Level::AtRisk));
  EXPECT_FALSE(three.hasFindingAtLeast(Level::CompileFail));
  const OpReport *read = opNamed(three, "read_0");
  ASSERT_TRUE(read);
  EXPECT_EQ(read->placement, Placement::Ane);
  EXPECT_TRUE(read->atRisk);
}

TEST(AneChecker, StateInnermostAlignment) {
  for (int64_t width : {270, 256}) {
    ProgramBuilder b;
    Value *s = b.input("kv", Type::state(f16({1, 8, width})));
    Value *r0 = b.op("read_state", "read", {{"input", val(s)}}, f16({1, 8, width}));
    b.output(r0);
    CheckReport r = checkModel(b.model);
    EXPECT_EQ(fires(r, "ANE-STATE-003"), width == 270) << width;
    EXPECT_FALSE(fires(r, "ANE-STATE-004"));
  }
}

/// A KV cache written with slice_update; `runtimeBegin` takes the position
/// from an input instead of a constant.
CheckReport checkKvWrite(bool runtimeBegin) {
  ProgramBuilder b;
  Value *cache = b.input("k_cache", Type::state(f16({1, 8, 256, 64})));
  Value *k = b.input("k", f16({1, 8, 1, 64}));
  Value *pos = b.input("pos", Type::tensor(DType::I32, std::vector<int64_t>{4}));
  Value *old = b.op("read_state", "read_k", {{"input", val(cache)}}, f16({1, 8, 256, 64}));
  Binding begin = runtimeBegin ? val(pos) : imm(Constant::fromI32({0, 0, 5, 0}, {4}));
  Value *upd = b.op("slice_update", "aten_index_put_default_3",
                    {{"x", val(old)},
                     {"update", val(k)},
                     {"begin", begin},
                     {"end", imm(Constant::fromI32({1, 8, 6, 64}, {4}))}},
                    f16({1, 8, 256, 64}));
  b.op("coreml_update_state", "write_k", {{"state", val(cache)}, {"value", val(upd)}},
       f16({1, 8, 256, 64}));
  b.output(upd);
  return checkModel(b.model);
}

TEST(AneChecker, RuntimeSliceUpdateIntoStateShips) {
  // One aligned KV state written at a runtime position: the Anemll/CoreML-LLM
  // decode pattern, silent.
  CheckReport state = checkKvWrite(true);
  EXPECT_FALSE(fires(state, "ANE-STATE-006")) << findingsText(state);
  EXPECT_FALSE(fires(state, "ANE-STATE-005")) << "an in-place slice_update is no chain write";
  EXPECT_EQ(state.verdict, Verdict::Ane) << findingsText(state);
  CheckReport fixed = checkKvWrite(false);
  EXPECT_FALSE(fires(fixed, "ANE-STATE-006"));
  EXPECT_FALSE(fires(fixed, "ANE-STATE-003")) << "innermost 64 is a multiple of 32";
}

TEST(AneChecker, RuntimeSliceUpdateIntoCacheInputIsAtRisk) {
  // The ExecuTorch export shape: the cache is a plain input, written in-graph.
  for (bool runtimeBegin : {true, false}) {
    ProgramBuilder b;
    buildCacheWrite(b, runtimeBegin);
    CheckReport r = checkModel(b.model);
    auto f = findingsOf(r, "ANE-STATE-006");
    if (!runtimeBegin) {
      EXPECT_TRUE(f.empty()) << findingsText(r);
      continue;
    }
    ASSERT_EQ(f.size(), 1u) << findingsText(r);
    EXPECT_EQ(f[0]->torchNode, "aten_index_put_default_3");
    EXPECT_NE(f[0]->message.find("'pos' (a model input)"), std::string::npos) << f[0]->message;
    EXPECT_EQ(f[0]->certainty, Certainty::Contested);
    EXPECT_NE(f[0]->contradiction.find("writes a KV state"), std::string::npos);
    EXPECT_EQ(r.verdict, Verdict::AtRisk);
  }
}

TEST(AneChecker, BoundaryCastsAreNoIsland) {
  // fp32 in -> cast -> fp16 compute -> cast -> fp32 out, as coremltools
  // converts an fp16 model with fp32 I/O; then an fp32 op inside the graph.
  for (bool innerFp32 : {false, true}) {
    ProgramBuilder b;
    Value *x = b.input("x", Type::tensor(DType::F32, std::vector<int64_t>{1, 64, 1, 64}));
    Value *h =
        b.op("cast", "x_to_fp16", {{"x", val(x)}, {"dtype", imm(Constant::scalarString("fp16"))}},
             f16({1, 64, 1, 64}));
    Value *r = b.op("relu", "relu_0", {{"x", val(h)}}, f16({1, 64, 1, 64}));
    if (innerFp32) {
      Value *up =
          b.op("cast", "inner_up", {{"x", val(r)}, {"dtype", imm(Constant::scalarString("fp32"))}},
               Type::tensor(DType::F32, std::vector<int64_t>{1, 64, 1, 64}));
      Value *e = b.op("exp", "exp_fp32", {{"x", val(up)}},
                      Type::tensor(DType::F32, std::vector<int64_t>{1, 64, 1, 64}));
      r = b.op("cast", "inner_down",
               {{"x", val(e)}, {"dtype", imm(Constant::scalarString("fp16"))}},
               f16({1, 64, 1, 64}));
    }
    Value *out =
        b.op("cast", "out_to_fp32", {{"x", val(r)}, {"dtype", imm(Constant::scalarString("fp32"))}},
             Type::tensor(DType::F32, std::vector<int64_t>{1, 64, 1, 64}));
    b.output(out);
    CheckReport rep = checkModel(b.model);
    auto f = findingsOf(rep, "ANE-DTYPE-001");
    if (!innerFp32) {
      EXPECT_TRUE(f.empty()) << findingsText(rep);
      EXPECT_EQ(rep.functions[0].boundaries, 0u);
      EXPECT_EQ(rep.verdict, Verdict::Ane);
      continue;
    }
    ASSERT_EQ(f.size(), 2u) << findingsText(rep);
    EXPECT_EQ(f[0]->op, "inner_up");
    EXPECT_EQ(f[1]->op, "exp_fp32");
    EXPECT_EQ(rep.functions[0].boundaries, 2u) << findingsText(rep);
  }
}

TEST(AneChecker, FallbackOpCutsSegments) {
  ProgramBuilder b;
  Value *x = b.input("x", f16({1, 64, 1, 64}));
  Value *idx = b.input("idx", Type::tensor(DType::I32, std::vector<int64_t>{1, 64, 1, 64}));
  Value *a = b.op("relu", "relu_0", {{"x", val(x)}}, f16({1, 64, 1, 64}));
  Value *s = b.op("scatter_along_axis", "scatter_0",
                  {{"data", val(a)},
                   {"indices", val(idx)},
                   {"updates", val(a)},
                   {"axis", imm(Constant::scalarI32(3))}},
                  f16({1, 64, 1, 64}));
  Value *c = b.op("relu", "relu_1", {{"x", val(s)}}, f16({1, 64, 1, 64}));
  b.output(c);
  CheckReport r = checkModel(b.model);
  ASSERT_TRUE(fires(r, "ANE-OP-001"));
  ASSERT_EQ(r.functions.size(), 1u);
  const FunctionReport &f = r.functions[0];
  EXPECT_EQ(f.segments.size(), 3u);
  EXPECT_EQ(f.boundaries, 2u);
  EXPECT_EQ(f.aneOps, 2u);
  EXPECT_EQ(f.verdict, Verdict::Partial);
  EXPECT_TRUE(fires(r, "ANE-PLACE-001"));
  EXPECT_EQ(opNamed(r, "scatter_0")->placement, Placement::CpuGpu);
  EXPECT_EQ(opNamed(r, "scatter_0")->rules, std::vector<RuleId>{RuleId::ScatterOp});
  EXPECT_FALSE(r.hasFindingAtLeast(Effect::CompileFail));
  EXPECT_TRUE(r.hasFindingAtLeast(Effect::Fallback));
}

TEST(AneChecker, CleanProgramRunsOnAne) {
  ProgramBuilder b;
  Value *x = b.input("x", f16({1, 64, 1, 64}));
  Value *a = b.op("relu", "relu_0", {{"x", val(x)}}, f16({1, 64, 1, 64}));
  b.output(a);
  CheckReport r = checkModel(b.model);
  EXPECT_TRUE(r.findings.empty()) << findingsText(r);
  EXPECT_EQ(r.verdict, Verdict::Ane);
  EXPECT_EQ(r.functions[0].segments.size(), 1u);
}

TEST(AneChecker, WeightSizeFromTypesOnly) {
  // 65536 x 16384 fp16 = 2 GiB in a blob nobody opened: only the type is read.
  ProgramBuilder b;
  Type big = f16({65536, 16384});
  Value *w = b.constant("lm_head", Constant::fromBlob(big, BlobRef{"@model_path/w.bin", 64, {}}));
  Value *x = b.input("x", f16({1, 16384}));
  Value *y = b.op("linear", "lm", {{"x", val(x)}, {"weight", val(w)}}, f16({1, 65536}));
  b.output(y);
  CheckReport phone = checkModel(b.model, onChip(Chip::A17));
  EXPECT_EQ(phone.weightBytes, 2ull * 65536 * 16384);
  EXPECT_TRUE(fires(phone, "ANE-PROG-001"));
  EXPECT_TRUE(fires(phone, "ANE-PROG-002"));
  EXPECT_EQ(phone.verdict, Verdict::NoAne);
  CheckReport mac = checkModel(b.model, onChip(Chip::M4));
  EXPECT_FALSE(fires(mac, "ANE-PROG-001")) << "the 1 GB limit is the iPhone's";
  // The 65536-wide result: over the M1 axis limit, within the M4 one.
  EXPECT_TRUE(fires(checkModel(b.model, onChip(Chip::M1)), "ANE-SHAPE-002"));
  EXPECT_FALSE(fires(mac, "ANE-SHAPE-002"));
  EXPECT_TRUE(fires(mac, "ANE-CONV-006")) << "65536 fp16 outputs exceed 64 KB of kernel memory";
}

TEST(AneChecker, EnumeratedShapesCount) {
  for (size_t n : {3u, 200u}) {
    ProgramBuilder b;
    Value *x = b.input("x", Type::tensor(DType::F16, {Dim::of(1), Dim::symbolic("is0")}));
    b.output(b.op("relu", "y", {{"x", val(x)}},
                  Type::tensor(DType::F16, {Dim::of(1), Dim::symbolic("is0")})));
    FeatureDescription fd;
    fd.name = "x";
    for (size_t i = 0; i < n; ++i)
      fd.type.enumeratedShapes.push_back({1, (int64_t)(i + 1) * 32});
    b.model.description.inputs.push_back(fd);
    CheckReport r = checkModel(b.model);
    EXPECT_EQ(fires(r, "ANE-SHAPE-005"), n > 128) << n;
    // Enumerated shapes are not a dynamic shape.
    EXPECT_FALSE(fires(r, "ANE-SHAPE-004")) << n;
  }
}

TEST(AneChecker, ToleratesOddButParsableOps) {
  // Ops without results, variadic bindings where one is expected and unknown
  // op types come from user files; the checker must neither crash nor throw
  // (and the reports print them: report/CheckReportTest.cpp).
  ProgramBuilder b;
  buildOddOps(b);
  EXPECT_NO_THROW(checkModel(b.model));
}

TEST(AneChecker, UnknownFunctionIsInputError) {
  ProgramBuilder b;
  b.output(b.input("x", f16({1, 64})));
  EXPECT_THROW(checkModel(b.model, CheckOptions{.function = "nope"}), InputError);
}

} // namespace
