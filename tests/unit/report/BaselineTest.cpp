//===- BaselineTest.cpp - Pairing findings across two checks --------------===//
//
// compareToBaseline (report/Baseline.h) on records built in C++: which
// finding of the record a current one is paired with, when the keys that
// text tests cannot set apart disagree (source against op name), and what
// counts as a regression.
//
//===----------------------------------------------------------------------===//
#include "report/Baseline.h"

#include <gtest/gtest.h>

using namespace anefit;
using namespace anefit::report;

namespace {

GateRecord record(std::vector<GateFinding> findings) {
  GateRecord r;
  r.origin = "b.json";
  r.model = "m.pte";
  r.verdict = "at-risk";
  r.chip = "any";
  r.os = "any";
  r.computeUnits = "cpu_and_ne";
  r.units.push_back({.delegate = 0,
                     .function = "main",
                     .ops = 4,
                     .aneOps = 4,
                     .flops = 100,
                     .aneFlops = 100,
                     .boundaries = 0});
  r.findings = std::move(findings);
  return r;
}

GateFinding kvWrite(const std::string &op, const std::string &module, int64_t line,
                    const std::string &code) {
  GateFinding f;
  f.rule = "ANE-STATE-006";
  f.level = ane::Level::AtRisk;
  f.function = "main";
  f.op = op;
  f.opType = "slice_update";
  f.message = "writes a cache at a runtime position";
  f.file = "/src/sdpa.py";
  f.line = line;
  f.code = code;
  f.module = module;
  return f;
}

TEST(BaselineGate, TheSourceLinePairsBeforeTheOpName) {
  // The export renumbered its nodes so that the names crossed over: by name
  // each would pair with the other layer's write; by source each pairs with
  // its own, at its moved line.
  GateRecord before = record({kvWrite("write_1", "layers.0", 10, "k_out = f(k)"),
                              kvWrite("write_2", "layers.1", 10, "k_out = f(k)")});
  GateRecord now = record({kvWrite("write_2", "layers.0", 17, "k_out = f(k)"),
                           kvWrite("write_1", "layers.1", 17, "k_out = f(k)")});
  GateResult g = compareToBaseline(before, now);
  ASSERT_EQ(g.findings.size(), 2u);
  EXPECT_EQ(g.findings[0].before, 0u);
  EXPECT_EQ(g.findings[1].before, 1u);
  EXPECT_EQ(g.findings[0].state, BaselineState::Unchanged);
  EXPECT_FALSE(g.regressed());
}

TEST(BaselineGate, AnotherDirectoryIsTheSameFile) {
  GateRecord before = record({kvWrite("w", "layers.0", 10, "k_out = f(k)")});
  GateRecord now = before;
  now.findings[0].file = "examples/sdpa.py"; // --source-root on one side
  now.findings[0].op = "renamed";
  GateResult g = compareToBaseline(before, now);
  ASSERT_EQ(g.findings.size(), 1u);
  EXPECT_EQ(g.findings[0].state, BaselineState::Unchanged);
}

TEST(BaselineGate, ANewReasonAtTheSameLevelIsUpdatedNotWorse) {
  GateRecord before = record({kvWrite("w", "layers.0", 10, "k_out = f(k)")});
  GateRecord now = before;
  now.findings[0].message = "writes a wider cache at a runtime position";
  GateResult g = compareToBaseline(before, now);
  ASSERT_EQ(g.findings.size(), 1u);
  EXPECT_EQ(g.findings[0].state, BaselineState::Updated);
  EXPECT_FALSE(g.findings[0].regression);
  EXPECT_FALSE(g.findings[0].improvement);
  EXPECT_FALSE(g.regressed());
}

TEST(BaselineGate, ResidencyWithinTheToleranceIsNoRegression) {
  GateRecord before = record({});
  GateRecord now = before;
  now.units[0].aneFlops = 99.5; // -0.5 pt
  EXPECT_TRUE(compareToBaseline(before, now).regressed());
  GateResult g = compareToBaseline(
      before, now, GateOptions{.residencyTolerance = 0.5, .failOn = ane::Level::AtRisk});
  EXPECT_FALSE(g.regressed());
  ASSERT_EQ(g.measures.size(), 1u);
  EXPECT_EQ(g.measures[0].what, "FLOPs on the ANE");
  EXPECT_DOUBLE_EQ(g.measures[0].after, 99.5);
}

TEST(BaselineGate, AlikeFindingsPairFirstComeFirstPaired) {
  // Three alike writes become two: one is gone, the counts are right.
  auto alike = [](const std::string &op) {
    GateFinding f = kvWrite(op, "", 0, "");
    f.file.clear();
    return f;
  };
  GateRecord before = record({alike("w_1"), alike("w_2"), alike("w_3")});
  GateRecord now = record({alike("w_7"), alike("w_8")});
  GateResult g = compareToBaseline(before, now);
  size_t unchanged = 0, absent = 0;
  for (const FindingChange &c : g.findings) {
    unchanged += c.state == BaselineState::Unchanged;
    absent += c.state == BaselineState::Absent;
  }
  EXPECT_EQ(unchanged, 2u);
  EXPECT_EQ(absent, 1u);
  EXPECT_FALSE(g.regressed());
  EXPECT_EQ(g.improvements(), 1u);
}

} // namespace
