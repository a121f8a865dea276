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
#include "ir/Model.h"

#include <cstdint>
#include <string>
#include <vector>

namespace anefit::ane {

struct CheckOptions {
  Chip chip = Chip::Any;
  TargetOs os = TargetOs::Any;
  ComputeUnits computeUnits = ComputeUnits::CpuAndNe;
  /// Check only this function; empty = every function. An unknown name is an InputError.
  std::string function;
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
  RuleId rule;
  Effect effect; ///< usually the rule's effect
  std::string function;
  std::string op; ///< op name; empty for whole-function findings
  std::string opType;
  std::string torchNode; ///< PyTorch node behind the op, when its name carries one
  std::string types;     ///< operand and result types, "x: (1, 2048, 2, fp16)(State) -> ..."
  std::string message;   ///< lower-case reason with the values found
  /// ExecuTorch debug handles of the op (models read from a .pte).
  std::vector<int64_t> debugHandles;
};

struct OpReport {
  std::string name;
  std::string type;
  Placement placement = Placement::Ane;
  std::vector<RuleId> rules; ///< the rules that decided the placement
  double flops = 0;          ///< estimated floating-point operations
};

/// A maximal run of consecutive (program order) ops on the same device. Ops
/// that block the ANE compile belong to ANE segments: Core ML places them on
/// the ANE, and then the compile of that segment fails.
struct Segment {
  bool onAne = true;
  bool compileFails = false; ///< an op of this ANE segment blocks its compile
  size_t firstOp = 0;        ///< index into FunctionReport::ops
  size_t lastOp = 0;
  size_t opCount = 0;
  double flops = 0;
};

/// Whether the ANE will take a function, and how much of it.
enum class Verdict : uint8_t {
  Ane,      ///< every placed op on the ANE
  Partial,  ///< ANE with CPU/GPU fallbacks
  NoAne,    ///< nothing on the ANE (whole-function fallback)
  AneFails, ///< the ANE compile or first run is predicted to fail
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
  uint64_t weightBytes = 0; ///< constants of this function, from their types
  size_t states = 0;
  Verdict verdict = Verdict::Ane;
};

struct CheckReport {
  std::string modelPath;
  std::string origin; ///< Model::origin: method and delegate for a .pte payload
  CheckOptions options;
  std::vector<FunctionReport> functions;
  /// Most severe first, then by rule, function and op (stable).
  std::vector<Finding> findings;
  uint64_t weightBytes = 0;
  Verdict verdict = Verdict::Ane; ///< the worst function verdict

  /// True if some finding's effect is at least `threshold`.
  bool hasFindingAtLeast(Effect threshold) const;
};

/// Checks `model`. Throws InputError for an unknown CheckOptions::function.
CheckReport checkModel(const Model &model, const CheckOptions &options = {});

/// The PyTorch node an op name carries (coremltools names ops after the torch
/// node, e.g. "aten_index_put_default_3"); empty if none.
std::string torchNodeOf(std::string_view opName);

} // namespace anefit::ane
