//===- OpTableTest.cpp - Ops.def is the hand-edited source of op facts ----===//
//
// Ops.def is edited by hand. These tests keep it honest: traits agree across
// an op's rows and with its parameters, every op the interpreter runs and
// every op a rule names is in the table, and every rule has its lit files
// whose FIRE lines name the op and the values of the finding.
//
//===----------------------------------------------------------------------===//
#include "ane/AneRules.h"
#include "ane/RuleOps.h"
#include "ops/OpRegistry.h"
#include "runtime/Interpreter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

using namespace anefit;
namespace fs = std::filesystem;

namespace {

size_t stateParams(const OpDef &def) {
  size_t n = 0;
  for (const ParamSpec &p : def.params)
    n += p.kind == ParamKind::State;
  return n;
}

std::string readFile(const fs::path &p) {
  std::ifstream in(p);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

} // namespace

TEST(OpTable, TraitsAgreeAcrossRowsAndWithParameters) {
  std::map<std::string_view, uint8_t> traitsOf;
  for (const OpDef &def : allOps()) {
    SCOPED_TRACE(std::string(def.name) + "@" + std::to_string(def.opset));
    auto [it, fresh] = traitsOf.emplace(def.name, def.traits);
    EXPECT_EQ(it->second, def.traits) << "rows of one op must share its traits";
    bool stateOp = def.has(OpTrait::StateRead) || def.has(OpTrait::StateWrite);
    EXPECT_EQ(stateParams(def), stateOp ? 1u : 0u) << "exactly the state ops take a state";
    if (def.has(OpTrait::StateWrite)) {
      ASSERT_NE(def.writtenValueParam(), nullptr);
    }
    if (def.has(OpTrait::ConstLike)) {
      EXPECT_FALSE(stateOp);
      EXPECT_FALSE(def.has(OpTrait::DataMovement));
    }
    if (def.has(OpTrait::View)) {
      EXPECT_TRUE(def.has(OpTrait::DataMovement)) << "a view moves no data and computes nothing";
      EXPECT_NE(def.param("x"), nullptr) << "a view re-views its x";
    }
  }
}

TEST(OpTable, TraitsAnswerWhatCodeAsks) {
  EXPECT_TRUE(opHasTrait("const", OpTrait::ConstLike));
  EXPECT_TRUE(opHasTrait("constexpr_lut_to_dense", OpTrait::ConstLike));
  EXPECT_TRUE(opHasTrait("constexpr_affine_dequantize", OpTrait::ConstLike));
  EXPECT_FALSE(opHasTrait("dequantize", OpTrait::ConstLike));
  EXPECT_FALSE(opHasTrait("no_such_op", OpTrait::ConstLike));
  // Of the const-like ops, the constexpr_* ones decompress a weight (the
  // weight counter's stored-vs-dense split); const holds its value.
  for (const OpDef &def : allOps()) {
    if (def.has(OpTrait::ConstLike)) {
      EXPECT_EQ(decompressesWeights(def.name), def.name.substr(0, 10) == "constexpr_") << def.name;
    }
  }
  EXPECT_FALSE(decompressesWeights("const"));
  EXPECT_FALSE(decompressesWeights("dequantize"));
  EXPECT_FALSE(decompressesWeights("no_such_op"));
  EXPECT_TRUE(opHasTrait("reshape", OpTrait::View));
  EXPECT_FALSE(opHasTrait("transpose", OpTrait::View));
  EXPECT_TRUE(opHasTrait("transpose", OpTrait::DataMovement));
  EXPECT_EQ(opNamesWithTrait(OpTrait::StateRead | OpTrait::StateWrite),
            "read_state, write_state and coreml_update_state");
  EXPECT_EQ(findAnyOp("coreml_update_state")->stateParam()->name, "state");
  EXPECT_EQ(findAnyOp("coreml_update_state")->writtenValueParam()->name, "value");
  EXPECT_EQ(findAnyOp("write_state")->writtenValueParam()->name, "data");
  EXPECT_EQ(findAnyOp("read_state")->writtenValueParam(), nullptr);
  // What keeps a program from being lowered to iOS17.
  EXPECT_EQ(findOp("coreml_update_state", 18)->requiredIosVersion(), 18);
  EXPECT_EQ(findOp("gru", 18)->requiredIosVersion(), 18);
  EXPECT_EQ(findOp("gru", 17)->requiredIosVersion(), 17);
  EXPECT_EQ(findOp("conv", 18)->requiredIosVersion(), 17);
}

TEST(OpTable, EveryKernelOpIsInTheTable) {
  std::vector<std::string> kernels = runtime::kernelOpTypes();
  ASSERT_GT(kernels.size(), 100u);
  for (const std::string &op : kernels)
    EXPECT_NE(findAnyOp(op), nullptr) << "the interpreter runs '" << op << "', unknown to Ops.def";
}

TEST(OpTable, EveryRuleHasItsFireAndCleanLitFile) {
  fs::path dir = fs::path(ANEFIT_TEST_DATA_DIR) / "lit" / "ane";
  for (const ane::RuleInfo &r : ane::allRules()) {
    fs::path file = dir / (std::string(r.code) + ".mil");
    ASSERT_TRUE(fs::exists(file)) << r.code << ": tests/lit/ane/" << r.code << ".mil is missing";
    std::string text = readFile(file);
    EXPECT_NE(text.find("// FIRE: "), std::string::npos) << file << " has no FIRE check";
    EXPECT_NE(text.find("// CLEAN"), std::string::npos) << file << " has no CLEAN check";
    EXPECT_NE(text.find("//--- fire.mil"), std::string::npos) << file;
    EXPECT_NE(text.find("//--- clean.mil"), std::string::npos) << file;
  }
}

/// The FIRE block of a rule's lit file pins the finding, not just its id:
///   // FIRE: <level> <CODE>: <title> ...         the rule fired
///   // FIRE-NEXT: <fn>: <op type> '<op name>'   where (an op rule names an op)
///   // FIRE-NEXT: <operands> -> <results>       the op's types, when an op
///   // FIRE-NEXT: <message>                     why, with its values
///   // FIRE: evidence|fails|works: <url> ...    the evidence printed
/// and some line of the block states a value (a number: a shape, a size, a
/// count).
TEST(OpTable, EveryRuleFireCheckNamesTheOpAndItsValues) {
  fs::path dir = fs::path(ANEFIT_TEST_DATA_DIR) / "lit" / "ane";
  const std::regex place(R"(^(\w+): ([a-z_0-9]+) '[^']+')");
  const std::regex evidence(R"(^// FIRE: (evidence|fails|works): https?://)");
  const std::string next = "// FIRE-NEXT: ";
  size_t checked = 0;
  for (const ane::RuleInfo &r : ane::allRules()) {
    SCOPED_TRACE(std::string(r.code));
    std::istringstream in(readFile(dir / (std::string(r.code) + ".mil")));
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);)
      lines.push_back(l);
    std::regex header("^// FIRE: [a-z-]+ " + std::string(r.code) + ": ");
    auto it = std::find_if(lines.begin(), lines.end(),
                           [&](const std::string &l) { return std::regex_search(l, header); });
    ASSERT_NE(it, lines.end()) << "no '// FIRE: <level> " << r.code << ": ' line";
    std::vector<std::string> block;
    for (++it; it != lines.end() && it->rfind(next, 0) == 0; ++it)
      block.push_back(it->substr(next.size()));
    ASSERT_FALSE(block.empty()) << "no FIRE-NEXT line says where the rule fired";
    std::smatch m;
    bool atOp = std::regex_search(block[0], m, place) && findAnyOp(m[2].str()) != nullptr;
    if (r.kind == ane::RuleKind::Op) {
      EXPECT_TRUE(atOp) << "FIRE-NEXT '" << block[0]
                        << "' does not name the op: <fn>: <op> '<name>'";
    }
    if (atOp) {
      auto sig = std::find_if(block.begin(), block.end(), [](const std::string &l) {
        return l.find("->") != std::string::npos;
      });
      EXPECT_TRUE(sig != block.end()) << "no FIRE-NEXT line with the op's types (... -> ...)";
      EXPECT_TRUE(sig != block.end() && sig + 1 != block.end())
          << "no FIRE-NEXT message after the op's types";
    }
    EXPECT_TRUE(std::any_of(block.begin(), block.end(), [](const std::string &l) {
      return std::any_of(l.begin(), l.end(), ::isdigit);
    })) << "no FIRE-NEXT line states a value";
    // A rule with public evidence prints it; one whose whole scope is ours
    // (ANE-COV-001: no working case, so no source) prints the contradiction.
    const std::regex contested(R"(^// FIRE: contested: )");
    bool sourced = !r.failCases().empty() || !r.passCases().empty();
    EXPECT_TRUE(std::any_of(
        lines.begin(), lines.end(),
        [&](const std::string &l) { return std::regex_search(l, sourced ? evidence : contested); }))
        << (sourced ? "no '// FIRE: evidence|fails|works: <url>' line"
                    : "no '// FIRE: contested: ' line");
    ++checked;
  }
  EXPECT_EQ(checked, ane::allRules().size());
}

TEST(OpTable, RuleOpsRowsNameOpRulesAndKnownOps) {
  size_t rows = 0;
  for (const ane::RuleInfo &r : ane::allRules()) {
    std::span<const std::string_view> types = ane::ruleOpTypes(r.id);
    if (types.empty())
      continue;
    ++rows;
    EXPECT_EQ(r.kind, ane::RuleKind::Op) << r.code << ": a function rule sees no single op";
    for (std::string_view t : types)
      EXPECT_NE(findAnyOp(t), nullptr) << r.code << " names '" << t << "', not in Ops.def";
  }
  EXPECT_GT(rows, 20u);
}

TEST(OpTable, RuleSkipsRowsNameRulesOfEveryOpAndKnownOps) {
  size_t rows = 0;
  for (const ane::RuleInfo &r : ane::allRules()) {
    std::span<const std::string_view> skips = ane::ruleSkippedOpTypes(r.id);
    if (skips.empty())
      continue;
    ++rows;
    EXPECT_EQ(r.kind, ane::RuleKind::Op) << r.code;
    EXPECT_TRUE(ane::ruleOpTypes(r.id).empty())
        << r.code << ": a rule that names its ops has nothing to skip";
    for (std::string_view t : skips)
      EXPECT_NE(findAnyOp(t), nullptr) << r.code << " skips '" << t << "', not in Ops.def";
  }
  EXPECT_GE(rows, 1u);
}
