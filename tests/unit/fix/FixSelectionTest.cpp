//===- FixSelectionTest.cpp - Which pass removes which rule --------------===//
//
// The PASS_FIX rows of Passes.def: they name real rules, pick the passes
// for a set of blocking findings in table order with clean-up after, and
// every pipeline they make parses.
//
//===----------------------------------------------------------------------===//
#include "ane/AneRules.h"
#include "fix/Fix.h"
#include "io/ModelIO.h"
#include "transforms/Pass.h"

#include <gtest/gtest.h>

using namespace anefit;

namespace {

TEST(FixSelection, EveryRuleNamedIsInTheRulesTable) {
  size_t named = 0;
  for (const FixUse &u : fixUses())
    for (std::string_view id : u.removes) {
      EXPECT_TRUE(ane::ruleFromCode(id).has_value()) << u.cliName << " names unknown rule " << id;
      ++named;
    }
  EXPECT_GE(named, 8u);
}

TEST(FixSelection, EveryPassIsPickableOrCleanup) {
  // A pass without a PASS_FIX row would never run in a default fix.
  for (const PassInfo &p : passRegistry()) {
    bool row = false;
    for (const FixUse &u : fixUses())
      row = row || u.cliName == p.cliName;
    EXPECT_TRUE(row) << p.cliName;
  }
}

TEST(FixSelection, PicksThePassesThatRemoveTheBlockingRules) {
  EXPECT_EQ(pipelineRemoving({"ANE-STATE-006"}), "kv-write-static,canonicalize,dce");
  EXPECT_EQ(pipelineRemoving({"ANE-ATTN-002"}), "decompose-sdpa,canonicalize,dce");
  EXPECT_EQ(pipelineRemoving({"ANE-STATE-006", "ANE-STATE-004", "ANE-ATTN-002"}),
            "state-to-io{keep-largest},kv-write-static,decompose-sdpa,canonicalize,dce");
  // Blocking findings no pass removes: nothing to run, not even clean-up.
  EXPECT_EQ(pipelineRemoving({"ANE-CONV-004", "ANE-SHAPE-003"}), "");
  EXPECT_EQ(pipelineRemoving({}), "");
  for (const char *rule : {"ANE-STATE-001", "ANE-STATE-006", "ANE-ATTN-002"}) {
    PassManager pm;
    pm.addPipeline(pipelineRemoving({rule}));
    EXPECT_EQ(pm.size(), 3u) << rule;
  }
}

TEST(FixSelection, NamesThePassForAHint) {
  EXPECT_EQ(passesRemoving("ANE-STATE-006"), std::vector<std::string_view>{"kv-write-static"});
  EXPECT_EQ(passesRemoving("ANE-STATE-007"), std::vector<std::string_view>{"kv-write-static"});
  EXPECT_EQ(passesRemoving("ANE-STATE-001"), std::vector<std::string_view>{"state-to-io"});
  EXPECT_EQ(passesRemoving("ANE-ATTN-001"), std::vector<std::string_view>{"decompose-sdpa"});
  EXPECT_TRUE(passesRemoving("ANE-DTYPE-002").empty());
}

std::unique_ptr<Model> load(const std::string &rel) {
  return loadModel(std::string(ANEFIT_TEST_DATA_DIR) + "/" + rel);
}

TEST(FixSelection, FixRunsWhatTheFindingsCallFor) {
  FixOptions options;
  options.verify = FixVerify::Never;
  FixResult sdpa = fixModel(*load("lit/transforms/Inputs/two-long-sdpa.mil"), options);
  EXPECT_EQ(sdpa.pipeline, "decompose-sdpa,canonicalize,dce");
  EXPECT_EQ(sdpa.pickedFor, std::vector<std::string>{"ANE-ATTN-002"});
  EXPECT_TRUE(blockingRules(sdpa.after).empty());

  FixResult clean = fixModel(*load("lit/transforms/Inputs/clean.mil"), options);
  EXPECT_EQ(clean.pipeline, "");
  EXPECT_TRUE(clean.pickedFor.empty());
  EXPECT_TRUE(clean.changes.empty());

  options.passes = "dce";
  FixResult given = fixModel(*load("lit/transforms/Inputs/two-long-sdpa.mil"), options);
  EXPECT_EQ(given.pipeline, "dce");
  EXPECT_TRUE(given.pickedFor.empty());
}

/// fp16 mode rounds every op; the KV blend stays exact there too.
TEST(FixSelection, VerifiesInFp16Mode) {
  FixOptions options;
  options.verify = FixVerify::Always;
  options.precision = runtime::Precision::FP16;
  options.tolerance = {0, 0};
  FixResult r = fixModel(*load("lit/transforms/Inputs/kv-long-context.mil"), options);
  EXPECT_EQ(r.pipeline, "kv-write-static,canonicalize,dce");
  EXPECT_EQ(r.verification.status, FixVerification::Status::Same);
  EXPECT_EQ(r.verification.comparison.maxAbsDiff(), 0.0);
}

} // namespace
