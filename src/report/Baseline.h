//===- Baseline.h - Compare a model's check against a recorded one -*- C++ -*-===//
//
// The baseline gate (`anefit check MODEL --baseline B.json`, docs/check.md):
// a check report recorded earlier (`--json -o B.json` or `--save-baseline`,
// schema anefit.check/2 or anefit.check-program/1) is held against the check
// of the model now. The gate fails when the predicted ANE residency drops by
// more than a tolerance, boundaries or Core ML delegates grow, or a finding at
// the gate's level appears (or an old one rises to it); it reports what got
// better as information. Findings are matched across the two runs by a key
// that survives edits elsewhere in the model (FindingKey), never by position.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ane/Checker.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace anefit::report {

/// One finding of a recorded (or the current) check, as the gate reads it
/// from the JSON report.
struct GateFinding {
  size_t delegate = 0; ///< index of its Core ML delegate (0 for a single model)
  std::string rule;    ///< "ANE-STATE-004"
  ane::Level level = ane::Level::Slow;
  std::string function;
  std::string op; ///< empty for a whole-function finding
  std::string opType;
  std::string torchNode;
  std::string message;
  /// With --etrecord: the PyTorch line behind the op (line 0: none).
  std::string file;
  int64_t line = 0;
  std::string code;
  std::string module;
};

/// One function of one delegate: where its compute is predicted to run.
struct GateUnit {
  size_t delegate = 0;
  std::string function;
  size_t ops = 0, aneOps = 0;
  double flops = 0, aneFlops = 0;
  size_t boundaries = 0;
};

/// A check report read back: what the gate compares.
struct GateRecord {
  std::string origin; ///< the file it was read from, or "this check"
  std::string schema;
  std::string model;       ///< the model path the record names
  std::string verdict;     ///< the (program's) verdict
  std::string toolVersion; ///< the anefit that checked it (tool.version), if it says
  std::string chip, os, computeUnits, function; ///< the options it was checked with
  size_t delegates = 1;
  std::vector<GateUnit> units;
  std::vector<GateFinding> findings; ///< in report order (delegate by delegate)
};

/// Reads a baseline: the JSON of `anefit check --json` for one model
/// (anefit.check/2) or a program (anefit.check-program/1). Anything else (not
/// JSON, another schema or version, a field of the wrong kind) throws one
/// InputError naming the file, the place, what was expected and found.
GateRecord readGateRecord(const std::string &path);
GateRecord parseGateRecord(std::string_view text, const std::string &origin);
/// The record of the checks just made (one report per Core ML delegate, as
/// `check` renders them): the same reader over the JSON `check --json`
/// writes, so both sides of a comparison are read by one code path.
GateRecord gateRecordOf(const std::vector<ane::CheckReport> &reports, std::string_view programPath);
/// The JSON `check --json` writes for these reports (what --save-baseline
/// records): anefit.check/2 for one, anefit.check-program/1 for several.
std::string baselineJson(const std::vector<ane::CheckReport> &reports,
                         std::string_view programPath);

struct GateOptions {
  /// Percentage points the ANE share of ops or of FLOPs of a function may
  /// drop before the gate fails. Ours: 0, since the prediction is
  /// deterministic (docs/check.md).
  double residencyTolerance = 0;
  /// A new finding (or one whose level rose) at least this severe fails the
  /// gate: by default the blocking and at-risk ones.
  ane::Level failOn = ane::Level::AtRisk;
};

/// SARIF's result.baselineState (SARIF 2.1.0, 3.27.24).
enum class BaselineState : uint8_t { New, Unchanged, Updated, Absent };
std::string_view baselineStateName(BaselineState s);

/// A finding of either run and what became of it.
struct FindingChange {
  BaselineState state = BaselineState::New;
  /// The current finding (New, Unchanged, Updated) and its index in the
  /// current record; the baseline's (Unchanged, Updated, Absent).
  std::optional<size_t> now, before;
  bool regression = false;  ///< fails the gate
  bool improvement = false; ///< gone, or its level fell
};

/// A measure that moved: residency, boundaries, delegates.
struct MeasureChange {
  std::string where; ///< "main", "model.pte#1 main", or "program"
  std::string what;  ///< "FLOPs on the ANE", "ops on the ANE", "boundaries", ...
  double before = 0, after = 0;
  bool percent = false; ///< before/after are shares in %
  bool regression = false;
};

struct GateResult {
  GateRecord baseline, current;
  GateOptions options;
  std::vector<MeasureChange> measures; ///< every measure that moved
  std::vector<FindingChange> findings; ///< current ones in order, then the absent ones
  /// Residency compared per program (the delegate count changed, so
  /// delegates cannot be paired).
  bool programTotals = false;
  bool regressed() const;
  size_t regressions() const;
  size_t improvements() const;
};

/// Compares `current` against `baseline`. Throws InputError (on the
/// baseline's file) when they are not comparable: checked with other
/// options, or another model (other function names).
GateResult compareToBaseline(const GateRecord &baseline, const GateRecord &current,
                             const GateOptions &options = {});

/// The differences in the user's terms: each measure that moved, each new,
/// risen, fallen or gone finding with its op (and PyTorch line when the
/// report has one), and a last line "gate: failed ..." or "gate: passed ...".
/// Every regression is listed; other changes up to `maxPerRule` per kind
/// of change and rule, then counted.
std::string renderGateText(const GateResult &result, size_t maxPerRule = 8);
/// The differences as JSON, schema anefit.gate/1 (docs/check.md).
std::string renderGateJson(const GateResult &result);
/// The SARIF of the current reports (as `check --format sarif` writes it)
/// with each result's baselineState, a result with baselineState "absent"
/// (kind "pass", level "none") for each finding gone, and the gate's
/// verdict in the run's properties and invocation.
std::string renderGateSarif(const std::vector<ane::CheckReport> &reports,
                            std::string_view programPath, const GateResult &result);

} // namespace anefit::report
