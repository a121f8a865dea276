//===- FixSelectionTest.cpp - Which pass removes which rule --------------===//
//
// The PASS_FIX rows of Passes.def: they name real rules, pick the passes
// for a set of blocking findings in table order with clean-up after, and
// every pipeline they make parses.
//
//===----------------------------------------------------------------------===//
#include "ane/AneRules.h"
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
  EXPECT_EQ(passesRemoving("ANE-STATE-001"), std::vector<std::string_view>{"state-to-io"});
  EXPECT_EQ(passesRemoving("ANE-ATTN-001"), std::vector<std::string_view>{"decompose-sdpa"});
  EXPECT_TRUE(passesRemoving("ANE-DTYPE-002").empty());
}

} // namespace
