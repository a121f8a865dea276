//===- Coverage.h - Which patterns have working evidence --------*- C++ -*-===//
//
// A rule can only speak for the patterns its evidence saw. This names the
// pattern of every compute op (its type and dtype, and where it matters the
// compression layout of its weight, its use of a state, an update at a
// runtime index, a dim beyond 16384) and says which patterns a working case
// of the evidence corpus holds. A risky pattern (compression, state, runtime
// update, very wide dim) no working case holds is unverified: ANE-COV-001
// makes the verdict at-risk, and every report states the coverage.
//
// The built-in coverage (Coverage.def) is generated from the corpus's working
// cases (`anefit rules --format coverage --evidence tests/fixtures/evidence`);
// grading the held-out part uses the derive part's working cases only.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Model.h"

#include <set>
#include <string>

namespace anefit::ane {

/// The pattern of one compute op that working evidence is matched on, e.g.
/// "linear fp16 weight=constexpr_blockwise_shift_scale:int4:per-block".
struct OpPattern {
  std::string key;
  /// A compressed weight, a state read or write, an update or gather at a
  /// runtime index, or an output dim above 16384.
  bool risky = false;
};
OpPattern opPattern(const Operation &op);

/// The patterns that have working evidence.
struct Coverage {
  std::set<std::string> keys;
  bool contains(const std::string &key) const { return keys.count(key) != 0; }
  /// Adds the pattern of every compute op of every function of `program`.
  void add(const Program &program);
};

/// The coverage of the evidence corpus's working cases (Coverage.def).
const Coverage &builtinCoverage();

/// Coverage.def's text for `c`.
std::string coverageTable(const Coverage &c);

} // namespace anefit::ane
