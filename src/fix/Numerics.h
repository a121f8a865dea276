//===- Numerics.h - Where fp16 leaves fp32, op by op ------------*- C++ -*-===//
//
// The ANE computes in fp16; the model means fp32. `check --numerics` runs
// one function of the model twice in the interpreter, at fp32 and at fp16
// (every float op result rounded to fp16), step by step on the same inputs,
// and holds each op's fp16 results against its fp32 results. It names the
// ops where the divergence starts (their results lose values or move past a
// tolerance while the values they read do not), states the magnitudes
// (largest |x| in and out at fp32), and measures the function's outputs as
// `fix` does (PrecisionGap). The result is plain data the checker reads
// (ane/Measured.h).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ane/Measured.h"
#include "ir/Model.h"
#include "runtime/ModelRun.h"

#include <cstdint>

namespace anefit {

struct NumericsOptions {
  /// The function, inputs (given, or random from the seed), steps (0: the
  /// given inputs' steps, at least 1) and threads of both runs; the
  /// precision is set by the measurement.
  runtime::ModelRunOptions run;
  /// Where the inputs came from, for the report ("random, seed 0").
  std::string inputsText;
  /// An op's fp16 result leaves fp32 above this relative RMS error (ours:
  /// 5 %, well above fp16's rounding of a well-conditioned op).
  double tolerance = 0.05;
  /// fp32 results kept per step for the comparison; ops past it are
  /// compared by their largest |x| only.
  uint64_t keepBytes = uint64_t(1) << 30;
};

/// Runs the measurement. Throws InputError when the interpreter cannot run
/// the function (an op without a kernel, a missing input, ...).
ane::NumericsMeasurement measureNumerics(const Model &model, const NumericsOptions &options);

} // namespace anefit
