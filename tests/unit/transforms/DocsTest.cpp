//===- DocsTest.cpp - The pass reference generated from Passes.def --------===//
//
// docs/passes.md is passesMarkdown(): scripts/generated_docs.sh writes it and
// checks the file (the test `docs`); here, every pass of the table has its
// section in that text.
//
//===----------------------------------------------------------------------===//
#include "transforms/Pass.h"

#include <gtest/gtest.h>

#include <string>

namespace {

TEST(Docs, PassesMarkdownHasASectionPerPass) {
  std::string md = anefit::passesMarkdown();
  for (const anefit::PassInfo &p : anefit::passRegistry())
    EXPECT_NE(md.find("## " + std::string(p.cliName)), std::string::npos) << p.cliName;
}

} // namespace
