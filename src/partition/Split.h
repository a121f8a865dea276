//===- Split.h - Check, partition, emit and prove a split -------*- C++ -*-===//
//
// The library behind `anefit split`: checks a model, plans ANE and CPU
// regions (Partitioner.h), optionally writes each region as a model of its
// own, and proves the split by stepping the original function and its
// regions chained in plan order on the same random inputs, in fp16 as the ANE
// computes, where every boundary cast is exact and the chain must reproduce
// the original bit for bit. The plan's JSON and skip-list forms are in
// PlanJson.h.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "partition/Partitioner.h"
#include "runtime/Stepper.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace anefit::partition {

struct SplitOptions {
  /// Split only this function; empty: every function.
  std::string function;
  PartitionOptions partition;
  /// When not empty, write region k of function F as
  /// DIR/F_region<k>_<target>.mlpackage (PlanJson.h: regionFileName).
  std::string emitDir;
  /// Replace region packages that exist (never an input).
  bool force = false;
  /// Prove each function's split in the interpreter.
  bool verify = false;
  /// Steps of the proof, states carried between them (>= 1).
  int64_t steps = 3;
  uint64_t seed = 0;
};

/// The proof of one function's split.
struct SplitVerification {
  std::string function;
  size_t regions = 0;
  int64_t steps = 0;
  runtime::Comparison comparison;
};

struct SplitResult {
  /// The checker's report the plan was made from.
  ane::CheckReport report;
  Plan plan;
  /// Region models written, in plan order.
  std::vector<std::string> writtenModels;
  std::vector<SplitVerification> verifications;

  /// No verification found a difference.
  bool ok() const {
    for (const SplitVerification &v : verifications)
      if (!v.comparison.ok())
        return false;
    return true;
  }
};

/// Checks `model`, plans its split and, as `options` ask, writes and proves
/// the regions. `model` must have its weights open when emitting or
/// verifying. Throws InputError on bad input or an interpreter error.
SplitResult splitModel(const Model &model, const SplitOptions &options);

/// Steps function `fp.function` of `model` and `regions` (one model per
/// region of `fp`, in order) chained, on the same random inputs, in fp16
/// mode, with states carried; compares every output with zero tolerance.
runtime::Comparison compareRegionChain(const Model &model, const FunctionPlan &fp,
                                       const std::vector<std::unique_ptr<Model>> &regions,
                                       int64_t steps, uint64_t seed);

} // namespace anefit::partition
