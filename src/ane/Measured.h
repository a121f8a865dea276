//===- Measured.h - What a run at fp16 against fp32 measured ----*- C++ -*-===//
//
// The checker predicts from types alone; where the user asks it to read the
// weights (`check --numerics`), the program is also run at fp32 and at the
// ANE's fp16 on sample inputs (src/fix/Numerics.h). What that run measured
// comes back here as plain data, so the rules can state magnitudes instead of
// suspicions and the verdict can say the outputs are wrong: ANE-NUM-001 names
// the ops where the fp16 result first leaves fp32, ANE-DTYPE-005 states the
// largest |x| each square saw.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace anefit::ane {

/// One op's results at fp16 held against the same op at fp32, over the
/// steps measured.
struct MeasuredOp {
  std::string function;
  std::string op;
  /// Largest |x| of the op's float inputs, and of its results, at fp32.
  double maxAbsIn = 0;
  double maxAbsOut = 0;
  /// ||fp16 - fp32|| / ||fp32|| of its results on the worst step (infinity
  /// when values were lost).
  double relError = 0;
  /// Result values finite at fp32 and inf or NaN at fp16, and results that
  /// are zero at fp16 and not at fp32, on the worst step; of `elements`.
  size_t nonFinite = 0;
  size_t zeroed = 0;
  size_t elements = 0;
  /// The step of the worst comparison (0-based).
  int64_t step = 0;
  /// The divergence starts here: the fp16 result loses values (inf, NaN,
  /// zeroed) from inputs that lost none; or it drifts past the
  /// measurement's tolerance while its inputs do not, and the drift reaches
  /// a function output that diverges too.
  bool origin = false;
};

struct NumericsMeasurement {
  /// The function run, the steps and what the inputs were ("random, seed 0",
  /// or the archive's name).
  std::string function;
  int64_t steps = 0;
  std::string inputs;
  /// An op's fp16 result leaves fp32 above this relative RMS error (ours).
  double tolerance = 0;
  /// The function's outputs at fp16 against fp32: lost values, collapsed
  /// rows of the widest output, its relative error and top-1 agreement.
  std::string widest;
  size_t outputNonFinite = 0;
  size_t collapsedRows = 0;
  size_t rows = 0;
  size_t top1Agree = 0;
  double outputRelError = 0;
  /// Every op whose results were compared: the origins of divergence and
  /// the squares (their magnitudes), at least.
  std::vector<MeasuredOp> ops;
  size_t opsCompared = 0;
  size_t divergentOps = 0;

  /// The outputs at fp16 are lost where fp32's are not, or the widest
  /// output's top-1 agrees on at most half its rows.
  bool diverged() const {
    return outputNonFinite > 0 || collapsedRows > 0 || (rows > 0 && 2 * top1Agree <= rows);
  }
  /// The measured op `op` of `function`, or null.
  const MeasuredOp *find(const std::string &fn, const std::string &op) const {
    for (const MeasuredOp &m : ops)
      if (m.function == fn && m.op == op)
        return &m;
    return nullptr;
  }
};

} // namespace anefit::ane
