//===- Checker.h - Predict ANE placement and failures -----------*- C++ -*-===//
//
// The engine behind `anefit check`: applies the rules of AneRules.def to every
// function of a model, predicts per op whether Core ML places it on the ANE,
// falls back to CPU/GPU, or makes the ANE compile fail, and summarizes each
// function (residency, segments, boundaries, verdict). It reads types only:
// weight data is never touched, so models load with openWeights=false.
// `fix` and `split` call it as a library.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ane/AneRules.h"
#include "ane/Measured.h"
#include "ir/Model.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace anefit::ane {

struct Coverage;
struct Observation;

struct CheckOptions {
  Chip chip = Chip::Any;
  TargetOs os = TargetOs::Any;
  ComputeUnits computeUnits = ComputeUnits::CpuAndNe;
  /// Check only this function; empty = every function. An unknown name is an InputError.
  std::string function;
  /// The patterns with working evidence (Coverage.h); null: the built-in
  /// coverage of the whole corpus. Grading the held-out part passes the
  /// derive part's.
  const Coverage *coverage = nullptr;
  /// Rules not to apply (`--ignore`).
  std::vector<RuleId> ignore = {};
  /// What a run at fp16 against fp32 measured (`check --numerics`); null:
  /// predicted from types only. Must outlive the check.
  std::shared_ptr<const NumericsMeasurement> numerics = nullptr;
};

/// Where an op is predicted to run.
enum class Placement : uint8_t {
  Ane,              ///< placed on the ANE
  CpuGpu,           ///< falls back to CPU (or GPU with compute units `all`)
  BlocksAneCompile, ///< the ANE compile (or first run) of its segment fails
};
std::string_view placementName(Placement p);

/// One rule firing at one place.
struct Finding {
  RuleId rule{};
  Effect effect{}; ///< usually the rule's effect
  /// Contested when public working evidence covers this case (then
  /// `contradiction` names it) or the failure was measured off Core ML.
  Certainty certainty = Certainty::Confirmed;
  std::string contradiction;
  std::string function;
  std::string op; ///< op name; empty for whole-function findings
  std::string opType;
  std::string torchNode; ///< PyTorch node behind the op, when its name carries one
  std::string types;     ///< operand and result types, "x: (1, 2048, 2, fp16)(State) -> ..."
  std::string message;   ///< lower-case reason with the values found
  /// ExecuTorch debug handles of the op (models read from a .pte).
  std::vector<int64_t> debugHandles;
  /// What a Mac observed of it (`check --observations`); empty: predicted.
  std::string observed = {};
  /// Its harm was measured on the user's weights (`check --numerics`);
  /// listed first among the findings of its rule.
  bool measured = false;

  /// Where the op comes from in the user's code (`check --etrecord`):
  /// joined through its ExecuTorch debug handles to the export's nodes.
  struct Source {
    std::string file; ///< relative to --source-root when under it
    int64_t line = 0; ///< 0: no frame outside PyTorch
    std::string function;
    std::string code;       ///< the source line
    std::string module;     ///< nn.Module path, "layers.0.conv"
    std::string moduleType; ///< its class
    std::string node;       ///< the edge node, "aten_index_put_default_1"
    std::string buffer; ///< the buffer it writes back into (or reads), "layers.0.conv.conv_state"
    bool writesBuffer = false; ///< ExecuTorch writes the op's output back into `buffer`
    std::string note;          ///< why there is no source (no handle, no node)
  };
  std::optional<Source> source = std::nullopt;

  /// The effect, with a contested failure ranked at-risk.
  Level level() const { return levelOf(effect, certainty); }
};

struct OpReport {
  /// The op in the checked model (valid while that model lives).
  const Operation *op = nullptr;
  std::string name;
  std::string type;
  Placement placement = Placement::Ane;
  std::vector<RuleId> rules; ///< the rules that decided the placement
  double flops = 0;          ///< estimated floating-point operations
  /// Placed on the ANE, but a contested failure rule points at it.
  bool atRisk = false;
  /// Its pattern (Coverage.h) and whether a working case of the corpus holds it.
  std::string pattern = {};
  bool covered = false;
};

/// A pattern of a function that no working case of the corpus holds.
struct UnverifiedPattern {
  std::string pattern;
  bool risky = false; ///< compression, state, runtime-index update or a dim above 16384
  size_t ops = 0;     ///< how many of the function's ops have it
  double flops = 0;
};

/// A maximal run of consecutive (program order) ops on the same device. Ops
/// that block the ANE compile belong to ANE segments: Core ML places them on
/// the ANE, and then the compile of that segment fails.
struct Segment {
  bool onAne = true;
  bool compileFails = false; ///< an op of this ANE segment blocks its compile
  bool atRisk = false;       ///< a contested failure points at an op of this ANE segment
  size_t firstOp = 0;        ///< index into FunctionReport::ops
  size_t lastOp = 0;
  size_t opCount = 0;
  double flops = 0;
};

/// Whether the ANE will take a function, and how much of it, from least to
/// most severe (a model's verdict is its worst function's).
enum class Verdict : uint8_t {
  Ane,     ///< every placed op on the ANE
  Partial, ///< ANE with CPU/GPU fallbacks
  NoAne,   ///< nothing on the ANE (whole-function fallback)
  AtRisk,  ///< a failure rule fires, but public working evidence contests it for this case
  /// Measured (`check --numerics`): at the ANE's fp16 the outputs are lost
  /// (inf, NaN, collapsed rows) or their top-1 leaves fp32's.
  WrongNumerics,
  AneFails, ///< the ANE compile or first run is predicted to fail, uncontested
};
std::string_view verdictName(Verdict v);

struct FunctionReport {
  std::string name;
  std::vector<OpReport> ops; ///< compute ops of the body in program order (no const)
  std::vector<Segment> segments;
  size_t boundaries = 0; ///< ANE <-> CPU/GPU transitions
  size_t aneOps = 0;
  double aneFlops = 0;
  double totalFlops = 0;
  uint64_t weightBytes = 0;      ///< weights of this function as stored, from their types
  uint64_t denseWeightBytes = 0; ///< the same weights decompressed (ops/Weights.h)
  size_t states = 0;
  /// Ops and FLOPs whose pattern a working case of the corpus holds.
  size_t coveredOps = 0;
  double coveredFlops = 0;
  /// The patterns no working case holds, risky ones first, then by op count.
  std::vector<UnverifiedPattern> unverified;
  Verdict verdict = Verdict::Ane;
};

struct CheckReport {
  std::string modelPath;
  std::string origin; ///< Model::origin: method and delegate for a .pte payload
  CheckOptions options;
  std::vector<FunctionReport> functions;
  /// Most severe first, then by rule, function and op (stable).
  std::vector<Finding> findings;
  uint64_t weightBytes = 0;       ///< weights as stored (compressed payloads at their dtype)
  uint64_t denseWeightBytes = 0;  ///< weights decompressed, as the compute ops read them
  Verdict verdict = Verdict::Ane; ///< the worst function verdict
  /// What a Mac observed of the model's probe kit (Observations.h), laid
  /// over this prediction by applyObservations; null: predicted only.
  std::shared_ptr<const Observation> observation = nullptr;

  /// True if some finding's effect is at least `threshold` (contested or not).
  bool hasFindingAtLeast(Effect threshold) const;
  /// True if some finding's level is at least `threshold` (`--fail-on`).
  bool hasFindingAtLeast(Level threshold) const;
};

/// Checks `model`. Throws InputError for an unknown CheckOptions::function.
CheckReport checkModel(const Model &model, const CheckOptions &options = {});

} // namespace anefit::ane
