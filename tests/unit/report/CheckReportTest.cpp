//===- CheckReportTest.cpp - The check report as text, JSON and SARIF -----===//
//
// The reports of the checker (report/Report.h) on programs built in C++ and on
// a committed fixture: findings, evidence and coverage in every format, odd
// ops printed without a crash, and a report that does not change when the
// weight file is gone (the checker reads types only).
//
//===----------------------------------------------------------------------===//
#include "ane/CheckerPrograms.h"
#include "io/ModelIO.h"
#include "report/Report.h"
#include "support/TestUtil.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace fs = std::filesystem;
using namespace anefit;
using namespace anefit::ane;
using namespace anefit::ane::test;

namespace {

CheckReport checkPackage(const std::string &path) {
  auto model = loadModel(path, LoadOptions{.openWeights = false});
  return checkModel(*model);
}

TEST(AneReport, PrintsOddButParsableOps) {
  ProgramBuilder b;
  buildOddOps(b);
  CheckReport r = checkModel(b.model);
  EXPECT_FALSE(renderJson(r).empty());
  EXPECT_FALSE(renderSarif(r).empty());
}

TEST(AneReport, TextOfAContestedFindingHasBothSidesAndTheSettle) {
  ProgramBuilder b;
  buildCacheWrite(b, /*runtimeBegin=*/true);
  std::string text = renderText(checkModel(b.model));
  EXPECT_NE(text.find("at-risk ANE-STATE-006"), std::string::npos) << text;
  EXPECT_NE(text.find("  works: https://github.com/Anemll/Anemll"), std::string::npos) << text;
  EXPECT_NE(text.find("  settle: "), std::string::npos) << text;
}

TEST(AneReport, JsonAndSarifCarryFindings) {
  ProgramBuilder b;
  buildShortConv(b, 2048);
  CheckReport r = checkModel(b.model);
  r.modelPath = "m.mil";
  std::string json = renderJson(r);
  EXPECT_NE(json.find("\"schema\": \"anefit.check/2\""), std::string::npos);
  EXPECT_NE(json.find("\"certainty\": \"contested\""), std::string::npos);
  EXPECT_NE(json.find("\"rule\": \"ANE-STATE-004\""), std::string::npos);
  EXPECT_NE(json.find("\"atRisk\": true"), std::string::npos);
  EXPECT_NE(json.find("\"coverage\": {"), std::string::npos);
  EXPECT_NE(json.find("\"unverified\": ["), std::string::npos);
  EXPECT_NE(json.find("\"certainty\": \"together\""), std::string::npos)
      << "each piece of evidence says how it was observed";
  EXPECT_NE(json.find("\"quote\": \""), std::string::npos);
  std::string sarif = renderSarif(r);
  EXPECT_NE(sarif.find("\"version\": \"2.1.0\""), std::string::npos);
  EXPECT_NE(sarif.find("\"ruleId\": \"ANE-STATE-005\""), std::string::npos);
  EXPECT_NE(sarif.find("\"coverage\": ["), std::string::npos);
  std::string text = renderText(r);
  EXPECT_NE(text.find("at-risk ANE-STATE-004"), std::string::npos) << text;
  EXPECT_NE(text.find("coverage: "), std::string::npos) << text;
  EXPECT_NE(text.find("unverified: "), std::string::npos) << text;
  EXPECT_EQ(text.find("\033["), std::string::npos) << "no colour unless asked";
  EXPECT_NE(text.find("segment 1: ane read_state_0 .. sum_0 (5 ops"), std::string::npos) << text;
  EXPECT_NE(renderText(r, TextOptions{.placement = true})
                .find("ane (at-risk)  read_state 'read_state_0' ANE-STATE-004 ANE-STATE-005"),
            std::string::npos)
      << renderText(r, TextOptions{.placement = true});
  EXPECT_NE(renderText(r, TextOptions{.color = true}).find("\033["), std::string::npos);
}

TEST(AneReport, SameReportWithoutWeightFile) {
  std::string path = std::string(ANEFIT_TEST_DATA_DIR) + "/fixtures/lfm2_shortconv/model.mlpackage";
  ASSERT_TRUE(fs::exists(path)) << path << " is missing";
  anefit::test::ScratchDir dir;
  fs::path copy = dir.path() / "model.mlpackage";
  fs::copy(path, copy, fs::copy_options::recursive);
  size_t removed = 0;
  for (const auto &e : fs::recursive_directory_iterator(copy))
    if (e.is_regular_file() && e.path().filename() == "weight.bin")
      removed += fs::remove(e.path());
  ASSERT_GT(removed, 0u) << "the fixture has no weight file to remove";
  CheckReport withWeights = checkPackage(path);
  CheckReport without = checkPackage(copy.string());
  withWeights.modelPath = without.modelPath = "model.mlpackage";
  EXPECT_EQ(renderJson(withWeights), renderJson(without));
  EXPECT_EQ(withWeights.weightBytes, without.weightBytes);
  EXPECT_GT(without.weightBytes, 0u);
}

} // namespace
