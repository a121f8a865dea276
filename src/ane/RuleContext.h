//===- RuleContext.h - What a rule predicate sees ---------------*- C++ -*-===//
//
// Internal to src/ane: the facts the checker gathers about one function (uses,
// states, weight size, target) and the sink predicates report into. Each rule
// predicate in AneRules.cpp is a small function over a RuleContext.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ane/Checker.h"
#include "ops/Weights.h"

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace anefit::ane {

/// Facts about one function, computed once before the rules run.
struct FunctionFacts {
  const Model *model = nullptr;
  const Function *function = nullptr;
  FunctionDescription description;
  CheckOptions options;
  const ChipInfo *chip = nullptr;
  /// Consumers of every value, in program order.
  std::unordered_map<const Value *, std::vector<const Operation *>> users;
  /// State-typed function inputs, in declaration order.
  std::vector<const Value *> states;
  /// Ops that read or write each state, in program order.
  std::unordered_map<const Value *, std::vector<const Operation *>> stateOps;
  /// Weights of the whole model, stored and dense, from types (data never read).
  WeightCount modelWeights;
  /// Set only while post-placement rules run (ANE-PLACE-*).
  const FunctionReport *placed = nullptr;
};

/// A finding before it is rendered: it points at ops rather than naming them.
struct RawFinding {
  RuleId rule;
  Effect effect;
  const Operation *op = nullptr; ///< null for function-level findings
  /// Further ops whose placement the finding decides (e.g. every op of a state).
  std::vector<const Operation *> related;
  bool wholeFunction = false; ///< decides the placement of every op of the function
  std::string message;
  /// Non-empty when public evidence contradicts the failure for this case: it
  /// names that evidence, and the finding makes the verdict `at-risk`.
  std::string contested;
  /// The harm was measured on the user's weights (`check --numerics`): the
  /// report lists such findings of a rule first.
  bool measured = false;
};

class RuleContext {
public:
  RuleContext(const FunctionFacts &facts, std::vector<RawFinding> &out) : facts(facts), out(out) {}

  const FunctionFacts &facts;
  RuleId current{};

  /// Reports the current rule at `op` (null: the function as a whole).
  RawFinding &report(const Operation *op, std::string message);

private:
  std::vector<RawFinding> &out;
};

/// Runs the predicate of `rule` (once per op for op rules, once for function rules).
void runRule(RuleId rule, RuleContext &ctx);

} // namespace anefit::ane
