//===- OpVerifierTest.cpp - Checking ops against the registry -------------===//
#include "OpTestUtil.h"

#include "ops/OpVerifier.h"

#include <gtest/gtest.h>

using namespace anefit;
using namespace anefit::test;

namespace {

std::string joined(const Diagnostics &ds) {
  std::string s;
  for (const Diagnostic &d : ds)
    s += d.str() + "\n";
  return s;
}

TEST(OpVerifier, WellFormedOpsPass) {
  OpHarness h;
  h.add("linear", {{"x", "fp16(1, s0, 64)"}, {"weight", weights("fp16(128, 64)")}},
        {"fp16(1, s0, 128)"});
  h.add("read_state", {{"input", "state fp16(1, 64, 2)"}}, {"fp16(1, 64, 2)"});
  h.add("write_state", {{"input", "state fp16(1, 64, 2)"}, {"data", "fp16(1, 64, 2)"}});
  Diagnostics ds = verifyOps(h.program);
  EXPECT_TRUE(ds.empty()) << joined(ds);
}

TEST(OpVerifier, DeclaredTypeMismatchNamesOpOutputAndTypes) {
  OpHarness h;
  h.add("add", {{"x", "fp32(2, 3)"}, {"y", "fp32(3)"}}, {"fp32(2, 4)"});
  Diagnostics ds = verifyOps(h.program);
  ASSERT_EQ(ds.size(), 1u) << joined(ds);
  EXPECT_EQ(ds[0].severity, Diagnostic::Severity::Error);
  EXPECT_EQ(ds[0].function, "main");
  EXPECT_EQ(ds[0].op, h.fn->body->ops.back()->name);
  EXPECT_NE(ds[0].message.find("output '"), std::string::npos);
  EXPECT_NE(ds[0].message.find("declared (2, 4, fp32)(Tensor)"), std::string::npos)
      << ds[0].message;
  EXPECT_NE(ds[0].message.find("inferred (2, 3, fp32)(Tensor)"), std::string::npos)
      << ds[0].message;
}

TEST(OpVerifier, SymbolicAndUnknownDimsAreCompatible) {
  OpHarness h;
  h.add("add", {{"x", "fp32(s0, 3)"}, {"y", "fp32(3)"}}, {"fp32(7, 3)"});
  h.add("relu", {{"x", "fp32(4)"}}, {"fp32(?)"});
  EXPECT_TRUE(verifyOps(h.program).empty()) << joined(verifyOps(h.program));
}

TEST(OpVerifier, UnknownOpIsAWarning) {
  OpHarness h;
  h.add("frobnicate", {{"x", "fp32(2)"}}, {"fp32(2)"});
  Diagnostics ds = verifyOps(h.program);
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].severity, Diagnostic::Severity::Warning);
  EXPECT_EQ(ds[0].message, "unknown op 'frobnicate' loaded as opaque with its declared types");
}

TEST(OpVerifier, OpFromANewerOpsetIsAnError) {
  OpHarness h("CoreML7");
  h.add("read_state", {{"input", "state fp16(4)"}}, {"fp16(4)"});
  Diagnostics ds = verifyOps(h.program);
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].severity, Diagnostic::Severity::Error);
  EXPECT_NE(ds[0].message.find("needs iOS18"), std::string::npos) << ds[0].message;

  // State ops of the coreml dialect and the proto-only write_state likewise.
  OpHarness older("CoreML7");
  older.add("write_state", {{"input", "state fp16(4)"}, {"data", "fp16(4)"}});
  ds = verifyOps(older.program);
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_NE(ds[0].message.find("'write_state' needs iOS18"), std::string::npos) << ds[0].message;
}

TEST(OpVerifier, ParameterChecks) {
  struct Case {
    const char *label;
    std::string op;
    std::vector<std::pair<std::string, Arg>> inputs;
    std::vector<std::string> outputs;
    std::string expected;
  };
  std::vector<Case> cases = {
      {"missing required", "softmax", {}, {"fp32(2)"}, "missing required parameter 'x'"},
      {"unknown param",
       "relu",
       {{"x", "fp32(2)"}, {"alpha", f32(1)}},
       {"fp32(2)"},
       "unknown parameter 'alpha'"},
      {"const-only bound to a runtime value",
       "linear",
       {{"x", "fp32(2, 4)"}, {"weight", "fp32(3, 4)"}},
       {"fp32(2, 3)"},
       "parameter 'weight' must be a constant"},
      {"dtype not allowed",
       "relu",
       {{"x", "int32(2)"}},
       {"int32(2)"},
       "has dtype int32, allowed: fp16|fp32"},
      {"domain mismatch",
       "add",
       {{"x", "fp16(2)"}, {"y", "fp32(2)"}},
       {"fp32(2)"},
       "(both are type T)"},
      {"state expected", "read_state", {{"input", "fp16(4)"}}, {"fp16(4)"}, "expected a state"},
      {"inference error",
       "conv",
       {{"x", "fp32(1, 3, 8, 8)"}, {"weight", weights("fp32(8, 3, 3)")}},
       {"fp32(1, 8, 6, 6)"},
       "conv: weight rank 3 does not match x rank 4"},
      {"output count",
       "split",
       {{"x", "fp32(4)"}, {"num_splits", i32(2)}, {"axis", i32(0)}},
       {"fp32(2)"},
       "declares 1 outputs, inferred 2"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.label);
    OpHarness h;
    h.add(c.op, c.inputs, c.outputs);
    Diagnostics ds = verifyOps(h.program);
    EXPECT_TRUE(hasErrors(ds));
    EXPECT_NE(joined(ds).find(c.expected), std::string::npos) << joined(ds);
  }
}

TEST(OpVerifier, Iso17AllowsMixedFloatParams) {
  // iOS17 gives conv's weight its own domain, so fp16 x with fp32 weight is fine.
  OpHarness h("CoreML7");
  h.add("conv", {{"x", "fp16(1, 3, 8, 8)"}, {"weight", weights("fp32(8, 3, 3, 3)")}},
        {"fp16(1, 8, 6, 6)"});
  EXPECT_TRUE(verifyOps(h.program).empty()) << joined(verifyOps(h.program));
  OpHarness old("CoreML5");
  old.add("conv", {{"x", "fp16(1, 3, 8, 8)"}, {"weight", weights("fp32(8, 3, 3, 3)")}},
          {"fp16(1, 8, 6, 6)"});
  EXPECT_TRUE(hasErrors(verifyOps(old.program)));
}

TEST(OpVerifier, ConstexprParamsAsAttributesBeforeIos18) {
  OpHarness h("CoreML6");
  auto op = std::make_unique<Operation>("constexpr_affine_dequantize", "w");
  op->attributes["quantized_data"] = std::make_shared<Constant>(weights("int8(8, 4)"));
  op->attributes["zero_point"] = std::make_shared<Constant>(weights("int8"));
  op->attributes["scale"] = std::make_shared<Constant>(weights("fp16"));
  op->attributes["axis"] = std::make_shared<Constant>(i32(0));
  op->addOutput("w", ty("fp16(8, 4)"));
  h.fn->body->append(std::move(op));
  Diagnostics ds = verifyOps(h.program);
  EXPECT_TRUE(ds.empty()) << joined(ds);
}

TEST(OpVerifier, CanonicalizeInputOrderFollowsTheTable) {
  OpHarness h;
  Operation *op = h.add("conv", {{"weight", weights("fp32(8, 3, 3, 3)")},
                                 {"x", "fp32(1, 3, 8, 8)"},
                                 {"zzz_extra", i32(1)},
                                 {"groups", i32(1)},
                                 {"bias", weights("fp32(8)")}});
  canonicalizeInputOrder(h.program);
  std::vector<std::string> names;
  for (const OpInput &in : op->inputs)
    names.push_back(in.name);
  EXPECT_EQ(names, (std::vector<std::string>{"x", "weight", "bias", "groups", "zzz_extra"}));
}

} // namespace
