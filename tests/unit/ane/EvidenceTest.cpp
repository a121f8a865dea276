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
#include "support/TestUtil.h"

#include <gtest/gtest.h>

#include <fstream>

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
  // Working cases are what precision is measured on: at least 45% of the
  // corpus (the sweeps find more failures than successes reported).
  EXPECT_GE(100 * works, 45 * results.size()) << "about half the corpus is known-working";
  EXPECT_EQ(falseAlarms, 0u) << "a known-working model called ane-fails";
}

// Every observed failure the rules were derived from is flagged, nearly: nine
// in ten of the derive part's failures, rounded down, are caught (ane-fails,
// at-risk, a fallback or a numerics finding). No working model of any part is
// called ane-fails, and at most 10% of the working models of the derive and the
// first held-out part are called at-risk. The fresh part's at-risk rate is
// measured, not held to the bar: it is reported in docs/rules.md, and a bar on
// it would pull the rules towards cases they must not be written from.
TEST(Evidence, DerivePartRecallAndPrecisionPerPart) {
  struct Part {
    size_t fails = 0, flagged = 0, works = 0, atRisk = 0, alarms = 0;
  } parts[kCorpusParts];
  for (const EvidenceResult &r : gradeAll()) {
    if (r.c.rebuilt == "guess")
      continue;
    Part &p = parts[static_cast<size_t>(r.c.part)];
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
  for (size_t i = 0; i < kCorpusParts; ++i) {
    const Part &p = parts[i];
    SCOPED_TRACE(corpusPartName(static_cast<CorpusPart>(i)));
    EXPECT_EQ(p.alarms, 0u);
    if (static_cast<CorpusPart>(i) != CorpusPart::Fresh) {
      EXPECT_LE(10 * p.atRisk, p.works) << p.atRisk << " of " << p.works << " working at-risk";
    }
  }
}

TEST(Evidence, CorpusHoldsObservedCasesWithQuotesSplitBySource) {
  std::vector<CorpusCase> cases = loadCorpus(kCorpus);
  size_t observed = 0, heldOut = 0, fresh = 0;
  for (const CorpusCase &c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(evidenceCertaintyFromName(c.certainty)) << "certainty '" << c.certainty << "'";
    EXPECT_FALSE(c.project.empty());
    observed += c.rebuilt != "guess";
    heldOut += c.part == CorpusPart::HeldOut;
    fresh += c.part == CorpusPart::Fresh && c.rebuilt != "guess";
    if (c.certainty != "statement" && c.rebuilt != "guess") {
      EXPECT_FALSE(c.quote.empty()) << "an observation without its quote";
    }
  }
  EXPECT_GE(observed, 150u);
  EXPECT_GE(heldOut, 50u);
  EXPECT_GE(fresh, 10u) << "the fresh sweep";
  // No rule cites a held-out project, old or fresh: the held-out parts are
  // what the rules never saw.
  for (const EvidenceCase &e : allEvidence()) {
    if (e.url.empty())
      continue;
    std::string project = corpusProject(std::string(e.url));
    for (const CorpusCase &c : cases) {
      if (c.part != CorpusPart::Derive) {
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
  CorpusCase freshFails = fails;
  freshFails.part = CorpusPart::Fresh;
  r.verdict = Verdict::AtRisk;
  md = evidenceMarkdown({gradeEvidence(freshFails, r)});
  EXPECT_NE(md.find("| held-out (fresh) | 1 | 0 | 1 | 0 | 0 | 0 | 0 | 0 | 0 | - |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| f | [](https://x) | held-out (fresh) | fails: w |"), std::string::npos)
      << md;
}

// The fresh sweep's projects are a part of their own; a project may not be on
// both held-out lists.
TEST(Evidence, FreshListSetsThePart) {
  test::ScratchDir dir;
  auto write = [&](const std::string &lists) {
    std::ofstream(dir.file("cases.json"))
        << R"({"schema": "anefit.evidence/2", )" << lists << R"(, "cases": [
             {"name": "a", "file": "", "source": "https://github.com/o/old/issues/1", "what": "w",
              "outcome": "works", "quote": "q", "certainty": "isolated"},
             {"name": "b", "file": "", "source": "https://github.com/o/new/issues/2", "what": "w",
              "outcome": "fails", "quote": "q", "certainty": "isolated"},
             {"name": "c", "file": "", "source": "https://example.org/x", "what": "w",
              "outcome": "fails", "quote": "q", "certainty": "isolated"}]})";
  };
  write(R"("heldout": ["o/old"], "fresh": ["o/new"])");
  std::vector<CorpusCase> cases = loadCorpus(dir.path().string());
  ASSERT_EQ(cases.size(), 3u);
  EXPECT_EQ(cases[0].part, CorpusPart::HeldOut);
  EXPECT_EQ(cases[1].part, CorpusPart::Fresh);
  EXPECT_EQ(cases[2].part, CorpusPart::Derive);
  write(R"("heldout": ["o/old"], "fresh": ["o/old"])");
  EXPECT_THROW(loadCorpus(dir.path().string()), InputError);
  write(R"("fresh": "o/new")");
  EXPECT_THROW(loadCorpus(dir.path().string()), InputError);
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
