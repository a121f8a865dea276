//===- DocsTest.cpp - docs/passes.md stays generated from Passes.def ------===//
//
// The pass reference is generated from the table; this test fails when the
// committed file and the table drift apart, and rewrites the file when
// ANEFIT_UPDATE_DOCS is set.
//
//===----------------------------------------------------------------------===//
#include "transforms/Pass.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

namespace {

TEST(Docs, PassesMarkdownIsGeneratedFromTheTable) {
  std::string path = std::string(ANEFIT_TEST_DATA_DIR) + "/../docs/passes.md";
  std::string want = anefit::passesMarkdown();
  if (const char *update = std::getenv("ANEFIT_UPDATE_DOCS"); update && *update) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << want;
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << path << " is missing; run with ANEFIT_UPDATE_DOCS=1 to create it";
  std::string have((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(have, want) << path << " is out of date; run with ANEFIT_UPDATE_DOCS=1";
  for (const anefit::PassInfo &p : anefit::passRegistry())
    EXPECT_NE(have.find("## " + std::string(p.cliName)), std::string::npos);
}

} // namespace
