//===- RemediesTest.cpp - The export-time remedies table ------------------===//
#include "ane/Remedies.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>

using namespace anefit;
using namespace anefit::ane;

TEST(Remedies, RowsAreWellFormed) {
  ASSERT_FALSE(allRemedies().empty());
  for (const Remedy &r : allRemedies()) {
    SCOPED_TRACE(std::string(ruleInfo(r.rule).code) + " " + std::string(r.setting));
    EXPECT_FALSE(r.setting.empty());
    EXPECT_FALSE(r.what.empty());
    EXPECT_FALSE(r.evidence.empty());
    if (r.where == RemedyWhere::Partitioner) {
      EXPECT_EQ(r.setting.rfind("CoreMLPartitioner(", 0), 0u);
    }
    if (r.where == RemedyWhere::ExportLlm) {
      EXPECT_EQ(r.setting.find("CoreMLPartitioner"), std::string_view::npos);
    }
  }
}

#ifdef ANEFIT_TEST_DATA_DIR
// Every export a row cites as evidence is a committed fixture.
TEST(Remedies, EvidenceNamesCommittedExports) {
  std::regex pte("([a-z0-9_]+)\\.pte");
  std::set<std::string> named;
  for (const Remedy &r : allRemedies()) {
    std::string text(r.evidence);
    for (std::sregex_iterator it(text.begin(), text.end(), pte), end; it != end; ++it)
      named.insert((*it)[1]);
  }
  EXPECT_GE(named.size(), 5u);
  for (const std::string &n : named)
    EXPECT_TRUE(
        std::filesystem::exists(std::string(ANEFIT_TEST_DATA_DIR) + "/fixtures/pte/" + n + ".pte"))
        << n;
}
#endif

TEST(Remedies, MatchOnTheTorchNode) {
  Finding gather;
  gather.rule = RuleId::GatherOp;
  gather.torchNode = "aten_embedding_default";
  EXPECT_EQ(remediesFor(gather).size(), 1u);
  gather.torchNode = "aten_index_tensor";
  EXPECT_TRUE(remediesFor(gather).empty());
  Finding states;
  states.rule = RuleId::StateTinyDim;
  auto rows = remediesFor(states);
  ASSERT_GE(rows.size(), 2u);
  EXPECT_EQ(rows[0]->setting, "CoreMLPartitioner(take_over_mutable_buffer=False)");
  EXPECT_NE(stateRemedyText().find("take_over_mutable_buffer=False"), std::string::npos);
}

// The arguments of Partitioner and CompileSpec rows, read once for split,
// its skip list and Python's partitioner_kwargs.
TEST(Remedies, ArgumentsOfTheSettings) {
  for (const Remedy &r : allRemedies()) {
    SCOPED_TRACE(std::string(r.setting));
    std::vector<RemedyArgument> args = remedyArguments(r);
    bool keyword = r.where == RemedyWhere::Partitioner || r.where == RemedyWhere::CompileSpec;
    EXPECT_EQ(args.empty(), !keyword);
    for (const RemedyArgument &a : args) {
      EXPECT_TRUE(std::regex_match(std::string(a.name), std::regex("[a-z_]+")));
      EXPECT_FALSE(a.value.empty());
    }
  }
  Remedy call{RuleId::GatherOp,
              RemedyWhere::Partitioner,
              "",
              "CoreMLPartitioner(skip_ops_for_coreml_delegation=[\"a.b\", \"c,d\"], x = (1, 2), "
              "take_over_mutable_buffer=False)",
              "",
              ""};
  std::vector<RemedyArgument> args = remedyArguments(call);
  ASSERT_EQ(args.size(), 3u);
  EXPECT_EQ(args[0].name, "skip_ops_for_coreml_delegation");
  EXPECT_EQ(args[0].value, "[\"a.b\", \"c,d\"]");
  EXPECT_EQ(args[1].name, "x");
  EXPECT_EQ(args[1].value, "(1, 2)");
  EXPECT_EQ(args[2].name, "take_over_mutable_buffer");
  EXPECT_EQ(args[2].value, "False");
  Remedy spec{RuleId::DelegateComputeUnits,
              RemedyWhere::CompileSpec,
              "",
              "compute_unit=ct.ComputeUnit.CPU_AND_NE",
              "",
              ""};
  args = remedyArguments(spec);
  ASSERT_EQ(args.size(), 1u);
  EXPECT_EQ(args[0].name, "compute_unit");
  EXPECT_EQ(args[0].value, "ct.ComputeUnit.CPU_AND_NE");
}
