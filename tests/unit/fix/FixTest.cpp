//===- FixTest.cpp - The fix driver: rewrite, check, prove ----------------===//
#include "fix/Fix.h"
#include "ane/Checker.h"
#include "io/ModelIO.h"
#include "ir/AsmParser.h"
#include "ir/AsmPrinter.h"
#include "support/Error.h"
#include "transforms/Pass.h"

#include <gtest/gtest.h>

using namespace anefit;

namespace {

std::unique_ptr<Model> load(const std::string &rel) {
  return loadModel(std::string(ANEFIT_TEST_DATA_DIR) + "/" + rel);
}

FixOptions verifyMode(FixVerify mode) {
  FixOptions o;
  o.verify = mode;
  return o;
}

} // namespace

TEST(Fix, RewritesACopyAndProvesIt) {
  auto model = load("lit/transforms/Inputs/two-states.mil");
  std::string before = modelToString(*model);
  std::vector<std::string> stages;
  FixOptions options;
  options.steps = 5;
  options.progress = [&](std::string_view s) { stages.emplace_back(s); };
  FixResult r = fixModel(*model, options);
  EXPECT_EQ(modelToString(*model), before) << "the input model must not change";
  // Two states, one narrow (ANE-STATE-004): state-to-io is picked, then clean-up.
  EXPECT_EQ(r.pipeline, "state-to-io{keep-largest},canonicalize,dce");
  ASSERT_EQ(r.stateMap.entries.size(), 2u);
  EXPECT_EQ(r.stateMap.entries[0].output, "conv0_out");
  EXPECT_FALSE(r.changes.empty());
  EXPECT_TRUE(r.verifies());
  EXPECT_EQ(r.before.functions.at(0).states, 2u);
  EXPECT_EQ(r.after.functions.at(0).states, 0u);
  EXPECT_EQ(r.verification.status, FixVerification::Status::Same);
  EXPECT_EQ(r.verification.steps, 5);
  // Per step: output y (8 values) and two moved states (8 each).
  EXPECT_EQ(r.verification.comparison.compared(), 5u * 24u);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(stages,
            (std::vector<std::string>{"check", "rewrite", "check", "verify", "verify at fp16"}));
  // Both models measured at fp16 against the original at fp32.
  EXPECT_TRUE(r.verification.originalAtFp16.measured);
  EXPECT_TRUE(r.verification.fixedAtFp16.measured);
  EXPECT_FALSE(r.verification.fixedAtFp16.diverged());
  EXPECT_FALSE(r.fp16Refused);
}

TEST(Fix, FindsARewriteThatChangesNumbers) {
  auto model = load("lit/transforms/Inputs/two-states.mil");
  FixResult r = fixModel(*model, verifyMode(FixVerify::Never));
  EXPECT_EQ(r.verification.status, FixVerification::Status::NotRun);
  // Break the rewrite: y = r1 + n0 becomes r1 - n0.
  Function *fn = r.fixed->program->findFunction("main");
  bool broken = false;
  for (auto &op : fn->body->ops)
    if (op->type == "add") {
      op->type = "sub";
      broken = true;
    }
  ASSERT_TRUE(broken);
  runtime::Comparison cmp = compareRewrite(*model, *r.fixed, r.stateMap, 3, 0, {1e-4, 1e-3});
  EXPECT_FALSE(cmp.ok());
  EXPECT_EQ(cmp.firstMismatch().rfind("main: step 0: output 'y': element ", 0), 0u)
      << cmp.firstMismatch();
}

TEST(Fix, SkipsAutomaticVerificationTheInterpreterCannotRun) {
  auto model = load("lit/transforms/Inputs/no-kernel.mil");
  FixResult r = fixModel(*model);
  EXPECT_EQ(r.verification.status, FixVerification::Status::Skipped);
  EXPECT_NE(r.verification.skipReason.find("random_normal"), std::string::npos);
  EXPECT_TRUE(r.ok());
  EXPECT_THROW(fixModel(*model, verifyMode(FixVerify::Always)), InputError);
}

TEST(Fix, RejectsBadOptions) {
  auto model = load("lit/transforms/Inputs/two-states.mil");
  FixOptions noSteps;
  noSteps.steps = 0;
  EXPECT_THROW(fixModel(*model, noSteps), InputError);
  FixOptions badPass;
  badPass.passes = "no-such-pass";
  EXPECT_THROW(fixModel(*model, badPass), InputError);
}

namespace {

/// x (1, 16) -> linear with `outputs` rows -> y, as MIL text.
std::string linearModel(int outputs) {
  std::string w;
  for (int r = 0; r < outputs; ++r) {
    w += r ? ", [" : "[";
    for (int c = 0; c < 16; ++c)
      w += std::string(c ? ", " : "") + (c == r % 16 ? "1.0" : "0.0");
    w += "]";
  }
  std::string n = std::to_string(outputs);
  return "main[CoreML8](%x: (1, 16, fp16)(Tensor)) {\n  block0() {\n    %w: (" + n +
         ", 16, fp16)(Tensor) = const(val=[" + w + "], name=\"w\")\n    %y: (1, " + n +
         ", fp16)(Tensor) = linear(x=%x, weight=%w, name=\"y\")\n  } -> (%y)\n}\n";
}

} // namespace

TEST(Fix, WarnsWhenARewriteLowersTheAneShare) {
  // A 128-row linear is placed on the ANE; a 32-row one is kept on the CPU
  // (ANE-CONV-010): as if a rewrite had moved the function's compute off.
  auto wide = parseModelText(linearModel(128), "wide.mil", nullptr);
  auto tiny = parseModelText(linearModel(32), "tiny.mil", nullptr);
  ane::CheckReport before = ane::checkModel(*wide), after = ane::checkModel(*tiny);
  ASSERT_EQ(residencyOf(before).at(0).aneFlops, residencyOf(before).at(0).flops);
  ASSERT_EQ(residencyOf(after).at(0).aneFlops, 0);
  Diagnostics d = residencyDrops(before, after);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].severity, Diagnostic::Severity::Warning);
  EXPECT_EQ(d[0].str(), "warning: main: the rewrite lowers the predicted ANE share of FLOPs "
                        "from 100.0% to 0.0%; newly found: ANE-CONV-010 (tiny matmul the cost "
                        "model keeps on CPU)");
  // The other way round, or the same model: no warning.
  EXPECT_TRUE(residencyDrops(after, before).empty());
  EXPECT_TRUE(residencyDrops(before, before).empty());
}
