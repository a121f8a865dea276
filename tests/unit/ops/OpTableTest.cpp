//===- OpTableTest.cpp - Ops.def is the hand-edited source of op facts ----===//
//
// Ops.def is edited by hand. These tests keep it honest: traits agree across
// an op's rows and with its parameters, every op the interpreter runs and
// every op a rule names is in the table, and every rule has its lit files.
//
//===----------------------------------------------------------------------===//
#include "ane/AneRules.h"
#include "ops/OpRegistry.h"
#include "runtime/Interpreter.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
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
