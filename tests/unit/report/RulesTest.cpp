//===- RulesTest.cpp - The rules table and docs/rules.md ------------------===//
//
// Every row of AneRules.def is well formed (stable unique id, evidence URL,
// fix), and the markdown of docs/rules.md names every rule (the file itself
// is written and checked by scripts/generated_docs.sh, the test `docs`).
//
//===----------------------------------------------------------------------===//
#include "ane/AneRules.h"
#include "ane/Evidence.h"
#include "io/ModelIO.h"
#include "report/Report.h"

#include <gtest/gtest.h>

#include <regex>
#include <set>

using namespace anefit::ane;

TEST(AneRules, RowsAreWellFormed) {
  std::set<std::string_view> ids;
  std::regex idPattern("ANE-[A-Z]+-[0-9]{3}");
  for (const RuleInfo &r : allRules()) {
    std::string code(r.code);
    EXPECT_TRUE(std::regex_match(code, idPattern)) << code;
    EXPECT_TRUE(ids.insert(r.code).second) << "duplicate id " << code;
    EXPECT_EQ(ruleFromCode(r.code), r.id) << code;
    EXPECT_FALSE(r.title.empty()) << code;
    EXPECT_FALSE(r.fix.empty()) << code;
    // Evidence both ways: failing cases and the working cases that bound the rule.
    // A rule whose whole scope is ours (ANE-COV-001) says why in an Ours row.
    auto fails = r.failCases();
    auto works = r.passCases();
    auto ours = r.oursCases();
    if (fails.empty()) {
      ASSERT_FALSE(ours.empty()) << code << " has neither failing evidence nor an Ours row";
    } else {
      EXPECT_FALSE(works.empty()) << code << " names no known-working case";
    }
    for (const auto &list : {fails, works})
      for (const EvidenceCase &c : list) {
        EXPECT_EQ(c.url.rfind("https://", 0), 0u) << code << ": " << c.url;
        EXPECT_FALSE(c.what.empty()) << code << ": " << c.url << " says nothing";
      }
    for (const EvidenceCase &c : ours) {
      EXPECT_TRUE(c.url.empty() && c.quote.empty()) << code << ": an Ours row cites a source";
      EXPECT_FALSE(c.what.empty()) << code << ": an Ours row says nothing";
    }
    EXPECT_FALSE(r.settleCheck().empty()) << code;
    // Folklore never decides a failure on its own.
    if (r.confidence == Confidence::Folklore) {
      EXPECT_LT(r.effect, Effect::CompileFail) << code;
    }
  }
  EXPECT_FALSE(ruleFromCode("ANE-NOPE-000"));
}

TEST(AneRules, FixHintsNameExistingPasses) {
  // A fix hint may only name a rewrite that `anefit fix --passes` knows.
  std::set<std::string> passes;
#define PASS(Id, CliName, ...) passes.insert(CliName);
#include "transforms/Passes.def"
#undef PASS
#undef PASS_OPTION
  ASSERT_TRUE(passes.count("state-to-io"));
  const std::string marker = "anefit fix --passes ";
  for (const RuleInfo &r : allRules()) {
    std::string fix(r.fix);
    for (size_t at = fix.find(marker); at != std::string::npos; at = fix.find(marker, at + 1)) {
      size_t begin = at + marker.size();
      size_t end = fix.find_first_of("` ,", begin);
      std::string name = fix.substr(begin, end == std::string::npos ? end : end - begin);
      EXPECT_TRUE(passes.count(name)) << r.code << " names unknown pass '" << name << "'";
    }
  }
}

TEST(AneRules, NamesRoundTrip) {
  for (Effect e : {Effect::Slow, Effect::Fallback, Effect::WrongNumerics, Effect::CompileFail,
                   Effect::RuntimeFail})
    EXPECT_EQ(effectFromName(effectName(e)), e);
  EXPECT_FALSE(effectFromName("crash"));
  for (const ChipInfo &c : allChips())
    EXPECT_EQ(chipFromName(c.name), c.chip);
  EXPECT_FALSE(chipFromName("m9"));
  EXPECT_EQ(osFromName("ios26"), TargetOs::Ios26);
  EXPECT_EQ(computeUnitsFromName("all"), ComputeUnits::All);
}

TEST(AneRules, GatesKeyOnCapabilities) {
  EXPECT_TRUE(gateApplies(Gate::Phone, Chip::A17, TargetOs::Any));
  EXPECT_FALSE(gateApplies(Gate::Phone, Chip::M4, TargetOs::Any));
  EXPECT_TRUE(gateApplies(Gate::NoSinCos, Chip::M2, TargetOs::Any));
  EXPECT_FALSE(gateApplies(Gate::NoSinCos, Chip::M3, TargetOs::Any));
  EXPECT_TRUE(gateApplies(Gate::NoTexture, Chip::M1, TargetOs::Any));
  EXPECT_FALSE(gateApplies(Gate::NoTexture, Chip::A14, TargetOs::Any));
  EXPECT_FALSE(gateApplies(Gate::Ios26, Chip::Any, TargetOs::Ios18));
  EXPECT_TRUE(gateApplies(Gate::Ios26, Chip::Any, TargetOs::Any));
}

TEST(AneRules, MarkdownNamesEveryRule) {
  std::string md = rulesMarkdown(corpusMarkdown(
      std::string(ANEFIT_TEST_DATA_DIR) + "/fixtures/evidence", [](const std::string &model) {
        return anefit::loadModel(model, anefit::LoadOptions{.openWeights = false});
      }));
  for (const RuleInfo &r : allRules())
    EXPECT_NE(md.find(std::string(r.code)), std::string::npos) << r.code;
}

TEST(AneRules, CoverageIsGeneratedFromTheCorpus) {
  // Coverage.def holds the patterns of the corpus's working cases; a case
  // added or changed leaves it stale until it is regenerated.
  std::string dir = std::string(ANEFIT_TEST_DATA_DIR) + "/fixtures/evidence";
  auto load = [](const std::string &model) {
    return anefit::loadModel(model, anefit::LoadOptions{.openWeights = false});
  };
  Coverage all = corpusCoverage(dir, loadCorpus(dir), load, /*derivePartOnly=*/false);
  EXPECT_EQ(all.keys, builtinCoverage().keys)
      << "src/ane/Coverage.def is stale: run 'anefit rules --format coverage --evidence "
         "tests/fixtures/evidence > src/ane/Coverage.def'";
  EXPECT_GT(all.keys.size(), 50u);
}
