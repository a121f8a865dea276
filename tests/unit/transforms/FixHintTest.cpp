//===- FixHintTest.cpp - The fix each report names for a rule -------------===//
//
// fixHint (transforms/Pass.h) names the pass that removes a rule's findings
// from the pass table: the Core ML state rules name state-to-io.
//
//===----------------------------------------------------------------------===//
#include "ane/AneRules.h"
#include "transforms/Pass.h"

#include <gtest/gtest.h>

using namespace anefit;

namespace {

TEST(FixHint, StateRulesNameStateToIO) {
  for (const char *code : {"ANE-STATE-001", "ANE-STATE-002", "ANE-STATE-004", "ANE-STATE-005"}) {
    auto rule = ane::ruleFromCode(code);
    ASSERT_TRUE(rule) << code;
    EXPECT_NE(fixHint(ane::ruleInfo(*rule)).find("`anefit fix` runs state-to-io"),
              std::string::npos)
        << code << ": " << fixHint(ane::ruleInfo(*rule));
  }
}

} // namespace
