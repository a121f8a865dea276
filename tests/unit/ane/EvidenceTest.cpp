//===- EvidenceTest.cpp - The checker on the evidence corpus --------------===//
//
// Runs `check` on every rebuilt model of tests/fixtures/evidence and holds it
// to the bar: no known-working model called ane-fails, every at-risk
// finding naming its contradicting evidence, and each pinned case's verdict
// the one cases.json documents (none of their failures missed). The corpus
// holds 150+ observed cases with quotes, split by source project, and no rule
// cites a held-out project.
//
//===----------------------------------------------------------------------===//
#include "ane/Evidence.h"
#include "io/ModelIO.h"
#include "support/Error.h"

#include <gtest/gtest.h>

using namespace anefit;
using namespace anefit::ane;

namespace {

const std::string kCorpus = std::string(ANEFIT_TEST_DATA_DIR) + "/fixtures/evidence";

std::vector<EvidenceResult> gradeAll() {
  return gradeCorpus(kCorpus, [](const std::string &model) {
    return loadModel(model, LoadOptions{.openWeights = false});
  });
}

TEST(Evidence, CorpusMeetsTheBar) {
  std::vector<EvidenceResult> results = gradeAll();
  size_t works = 0, falseAlarms = 0;
  for (const EvidenceResult &r : results) {
    SCOPED_TRACE(r.c.name);
    EXPECT_EQ(r.c.source.rfind("https://", 0), 0u);
    works += r.c.outcome == Outcome::Works;
    falseAlarms += r.grade == Grade::FalseAlarm;
    if (r.verdict == Verdict::AtRisk) {
      ASSERT_FALSE(r.contradictions.empty()) << "at-risk without contested findings";
      for (const std::string &why : r.contradictions)
        EXPECT_FALSE(why.empty()) << "an at-risk finding names no contradicting evidence";
    }
    if (r.c.verdict.empty())
      continue;
    // The first cases are pinned: each bounds a rule, and none of their
    // failures may be missed.
    EXPECT_TRUE(ruleFromCode(r.c.rule)) << r.c.rule;
    EXPECT_EQ(verdictName(r.verdict), r.c.verdict);
    EXPECT_NE(r.grade, Grade::Missed) << "a known failure predicted to run";
  }
  EXPECT_GE(2 * works + 10, results.size()) << "about half the corpus is known-working";
  EXPECT_EQ(falseAlarms, 0u) << "a known-working model called ane-fails";
}

// Every observed failure the rules were derived from is flagged, nearly: nine
// in ten of the derive part's failures, rounded down, are caught (ane-fails,
// at-risk, a fallback or a numerics finding). On each part at most 10% of the working
// models are called at-risk, and none ane-fails.
TEST(Evidence, DerivePartRecallAndPrecisionPerPart) {
  struct Part {
    size_t fails = 0, flagged = 0, works = 0, atRisk = 0, alarms = 0;
  } parts[2];
  for (const EvidenceResult &r : gradeAll()) {
    if (r.c.rebuilt == "guess")
      continue;
    Part &p = parts[r.c.part == CorpusPart::HeldOut];
    if (r.c.outcome == Outcome::Works) {
      ++p.works;
      p.atRisk += r.grade == Grade::AtRisk;
      p.alarms += r.grade == Grade::FalseAlarm;
    } else {
      ++p.fails;
      p.flagged += r.grade == Grade::Caught || r.grade == Grade::CaughtAtRisk;
    }
  }
  const Part &derive = parts[0];
  ASSERT_GT(derive.fails, 0u);
  EXPECT_GE(derive.flagged, 9 * derive.fails / 10)
      << derive.flagged << " of " << derive.fails << " derive failures flagged";
  for (const Part &p : parts) {
    EXPECT_EQ(p.alarms, 0u);
    EXPECT_LE(10 * p.atRisk, p.works) << p.atRisk << " of " << p.works << " working at-risk";
  }
}

TEST(Evidence, CorpusHoldsObservedCasesWithQuotesSplitBySource) {
  std::vector<CorpusCase> cases = loadCorpus(kCorpus);
  size_t observed = 0, heldOut = 0;
  for (const CorpusCase &c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(evidenceCertaintyFromName(c.certainty)) << "certainty '" << c.certainty << "'";
    EXPECT_FALSE(c.project.empty());
    observed += c.rebuilt != "guess";
    heldOut += c.part == CorpusPart::HeldOut;
    if (c.certainty != "statement" && c.rebuilt != "guess") {
      EXPECT_FALSE(c.quote.empty()) << "an observation without its quote";
    }
  }
  EXPECT_GE(observed, 150u);
  EXPECT_GE(heldOut, 50u);
  // No rule cites a held-out project: the held-out part is what the rules
  // never saw.
  for (const EvidenceCase &e : allEvidence()) {
    if (e.url.empty())
      continue;
    std::string project = corpusProject(std::string(e.url));
    for (const CorpusCase &c : cases) {
      if (c.part == CorpusPart::HeldOut) {
        ASSERT_NE(c.project, project)
            << "rule evidence " << e.url << " cites held-out case " << c.name;
      }
    }
  }
}

TEST(Evidence, GradesFollowTheOutcome) {
  CorpusCase fails{"f",         "f.mil", Outcome::Fails, "ANE-STATE-003",
                   "https://x", "w",     "ane-fails",    ""};
  CheckReport r;
  r.verdict = Verdict::Partial;
  EXPECT_EQ(gradeEvidence(fails, r).grade, Grade::Missed);
  r.verdict = Verdict::AtRisk;
  EXPECT_EQ(gradeEvidence(fails, r).grade, Grade::CaughtAtRisk);
  CorpusCase works = fails;
  works.outcome = Outcome::Works;
  r.verdict = Verdict::AneFails;
  EXPECT_EQ(gradeEvidence(works, r).grade, Grade::FalseAlarm);
  r.verdict = Verdict::Partial;
  EXPECT_EQ(gradeEvidence(works, r).grade, Grade::Passed);
  std::string md = evidenceMarkdown({gradeEvidence(works, r), gradeEvidence(fails, r)});
  EXPECT_NE(md.find("| derive | 1 | 0 | 0 | 1 | 1 | 1 | 0 | 0 | 0 | - |"), std::string::npos) << md;
  EXPECT_NE(md.find("| held-out | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | - |"), std::string::npos)
      << md;
}

TEST(Evidence, BadCorpusIsInputError) {
  EXPECT_THROW(parseCorpusCases("{", "c.json"), InputError);
  EXPECT_THROW(parseCorpusCases(R"({"schema": "nope", "cases": []})", "c.json"), InputError);
  EXPECT_THROW(
      parseCorpusCases(R"({"schema": "anefit.evidence/1", "cases": [{"name": "a"}]})", "c.json"),
      InputError);
  EXPECT_THROW(
      parseCorpusCases(
          R"({"schema": "anefit.evidence/1", "cases": [{"name": "a", "file": "../x", "rule": "r",
              "source": "s", "what": "w", "verdict": "ane", "outcome": "works"}]})",
          "c.json"),
      InputError);
  EXPECT_THROW(gradeCorpus("/nonexistent-corpus", nullptr), InputError);
}

} // namespace
