//===- RuleOps.h - The op types each op rule looks at -----------*- C++ -*-===//
//
// The rows of RuleOps.def: the checker runs an op rule's predicate only on
// these types, and the rule listings print them.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ane/AneRules.h"

#include <span>
#include <string_view>

namespace anefit::ane {

/// The op types rule `id`'s predicate sees; empty: every op.
std::span<const std::string_view> ruleOpTypes(RuleId id);
/// The op types rule `id`'s predicate does not see (another rule reports
/// them); empty for most rules.
std::span<const std::string_view> ruleSkippedOpTypes(RuleId id);

} // namespace anefit::ane
