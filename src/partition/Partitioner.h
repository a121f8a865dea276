//===- Partitioner.h - Split functions between the ANE and the CPU -*- C++ -*-===//
//
// `anefit split`: starting from the checker's per-op placement, groups each
// function's ops into contiguous regions that run on the ANE or on the CPU.
// A roofline cost model (compute and bytes per target, a fixed penalty per
// ANE <-> CPU boundary) may pull a small ANE-able run into the CPU region
// around it when the boundaries it would need cost more than it saves; ops
// the checker blames never move onto the ANE. Every boundary carries the
// reason it exists. Regions in program order form a chain: running them one
// after the other, each fed with the values earlier ones produced, computes
// exactly what the function computes.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ane/Checker.h"
#include "ir/Model.h"

#include <memory>
#include <string>
#include <vector>

namespace anefit::partition {

enum class Target : uint8_t { Ane, Cpu };
std::string_view targetName(Target t);

/// Relative costs, in milliseconds. Defaults: the Core ML segmenter's anchors
/// (ANE 800 GFLOP/s and 50 GB/s, CPU 20 GFLOP/s and 10 GB/s) and a measured
/// ~0.72 ms per extra ANE region (reference ane_constraints.md §3d, ANE-PL-01).
struct CostModel {
  double aneGflops = 800;
  double aneGBps = 50;
  double cpuGflops = 20;
  double cpuGBps = 10;
  double boundaryMs = 0.72;
};

struct PartitionOptions {
  CostModel cost;
  /// Let the cost model move ANE-able ops to the CPU to save boundaries.
  bool absorbSmallRegions = true;
};

/// An op of a region, with why it is where it is.
struct PlacedOp {
  const Operation *op = nullptr;
  ane::Placement checkerPlacement = ane::Placement::Ane;
  std::vector<std::string> rules; ///< rule codes that put it off the ANE
  bool absorbed = false;          ///< ANE-able, moved to the CPU by the cost model
  double flops = 0;
  double bytes = 0;
};

struct Region {
  size_t index = 0;
  Target target = Target::Ane;
  std::vector<PlacedOp> ops;          ///< compute ops in program order (consts excluded)
  std::vector<const Value *> inputs;  ///< values read from outside, first use order
  std::vector<const Value *> outputs; ///< values used after the region or returned
  std::vector<const Value *> states;  ///< state inputs the region touches
  double costMs = 0;
  double flops = 0;

  /// Ops the cost model moved here from the ANE (PlacedOp::absorbed).
  size_t absorbedOps() const;
};

struct Boundary {
  size_t fromRegion = 0;
  size_t toRegion = 0;
  std::vector<std::string> values; ///< tensors crossing it
  /// Why it exists, e.g. "to the CPU: reduce_prod 'aten_prod_dim_int_0'
  /// falls back to the CPU (ANE-OP-003)".
  std::string reason;
};

struct FunctionPlan {
  std::string function;
  std::vector<Region> regions;
  std::vector<Boundary> boundaries;
  double planCostMs = 0; ///< regions + boundaries
  double cpuOnlyCostMs = 0;
  std::vector<std::string> warnings;

  /// The regions placed on the ANE.
  size_t aneRegions() const;
};

/// An aten op for ExecuTorch's CoreMLPartitioner skip list.
struct SkipOp {
  std::string atenOp;              ///< "aten.index_put.default"
  std::vector<std::string> milOps; ///< the Core ML ops it was recognised in
  std::vector<std::string> rules;  ///< rule codes that blamed them
};

/// A CoreMLPartitioner or CoreMLBackend.generate_compile_specs argument that
/// removes findings at export time (a Partitioner or CompileSpec row of
/// ane/Remedies.def), for a model read from a .pte.
struct PartitionerArgument {
  std::string name;               ///< "take_over_mutable_buffer"
  std::string value;              ///< as Python source: "False"
  std::string what;               ///< what it does
  std::vector<std::string> rules; ///< rule codes of the findings it removes

  /// "take_over_mutable_buffer=False".
  std::string argument() const { return name + "=" + value; }
};

struct Plan {
  std::string modelPath;
  std::vector<FunctionPlan> functions;
  std::vector<SkipOp> skipOps;
  /// Other CoreMLPartitioner arguments to export with (.pte models only).
  std::vector<PartitionerArgument> partitionerArguments;
  /// Arguments of CoreMLBackend.generate_compile_specs to export with, for
  /// CoreMLPartitioner's compile_specs (.pte models only).
  std::vector<PartitionerArgument> compileSpecArguments;
  /// Ops placed on the CPU whose names carry no PyTorch node.
  std::vector<std::string> unmappedCpuOps;
};

/// What to lower a model with so that ExecuTorch's CoreMLPartitioner keeps
/// off the Core ML delegate what `report` (ane::checkModel) puts off the ANE:
/// the plan's skip ops, partitioner and compile-spec arguments and unmapped
/// CPU ops, without functions. Every reader of them (`split` and its skip
/// list, its JSON and HTML, Python's Report.skip_ops_for_coreml_delegation and
/// anefit.executorch.partitioner_kwargs) gets them from here:
/// - skip ops: the aten op of every op the checker places off the ANE by a
///   rule of its own (ANE-PROG-* rules put every op off the ANE, and no skip
///   list changes them), with its Core ML ops and rules, sorted by name;
/// - partitioner and compile-spec arguments (for a report on a .pte only):
///   every keyword argument of a Partitioner or CompileSpec remedy of a
///   finding (ane::remedyArguments), except a remedy's own
///   skip_ops_for_coreml_delegation: the op it names is off the ANE by the
///   finding that names it, so the skip ops hold it already, under the name
///   its op carries and with the rules behind it; the remedy's literal would
///   add a name no op of this model stands behind when the two differ.
Plan exportAdvice(const ane::CheckReport &report);

/// The export advice of several plans (every Core ML delegate of one
/// ExecuTorch program): their skip ops and partitioner arguments, each once
/// with the MIL ops and rules of every plan naming it; skip ops by aten name.
/// The result has no functions.
Plan mergeExportAdvice(const std::vector<Plan> &plans);

/// Plans every checked function of `model` from `report` (made by
/// ane::checkModel on the same model), with the report's exportAdvice.
Plan makePlan(const Model &model, const ane::CheckReport &report,
              const PartitionOptions &options = {});

/// Region `r` of `plan` as a model of its own: one function "main" whose
/// inputs are the region's inputs (and states), whose body copies the region's
/// ops and the constants they use, and whose outputs are the region's outputs.
std::unique_ptr<Model> extractRegion(const Model &model, const FunctionPlan &plan, size_t r);

} // namespace anefit::partition
