//===- Calibration.h - What the layers reading each weight see --*- C++ -*-===//
//
// A weight's error matters through the layer that reads it: a linear's
// output row is sum_c W[r, c] x_c, so an error d[r, c] costs about
// sum_c E[x_c^2] d[r, c]^2 of squared output error (the diagonal of the
// inputs' second moment; cross terms between channels are left out). The
// fix driver measures E[x_c^2] per input channel by running the original on
// calibration inputs (fix/Calibrate.h); requantize weights its palettes and
// its choice of form by them (Requantize.cpp). Plain data: the passes read
// it through PassContext, they never run a model.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace anefit {

class Operation;

/// How a layer reads a constant weight: the operand that is the weight, the
/// activation it multiplies, and which axis of each is the channel summed
/// over.
struct WeightInput {
  const char *weight;     ///< "weight" (linear, conv) or "y" (matmul)
  const char *activation; ///< "x"
  int weightAxis;         ///< the weight's input channel axis (ChannelEnergy::axis)
  /// The activation's channel axis: -1 the last (linear, matmul), 1 for
  /// conv's (N, C, ...), -2 for matmul with transpose_x.
  int activationAxis;
};

/// The weight `op` reads, when it is a linear, a conv of one group or a
/// matmul whose y is a value made by a const or constexpr_* op; nullopt
/// otherwise (calibration and requantize's dense weights read this one
/// list).
std::optional<WeightInput> weightInputOf(const Operation &op);

/// The input channel energies of the layers reading one weight.
struct ChannelEnergy {
  /// The weight's axis the layer sums over (its input channels): 1 for a
  /// linear's (out, in) weight and a conv's (Cout, Cin, ...), 0 for a
  /// matmul's constant y of shape (K, N), 1 when it is transposed.
  int axis = 1;
  /// Mean x_c^2 over every row the layers read, per index along `axis`.
  std::vector<double> energy;
  /// Rows of inputs averaged (steps times rows a step).
  int64_t rows = 0;
};

struct WeightCalibration {
  /// By the name of the op that makes the weight (a const, a constexpr_*):
  /// names survive cloning and the passes that run before requantize.
  std::map<std::string, ChannelEnergy> weights;
  /// Where the inputs came from, for messages ("text.txt's first 128 tokens").
  std::string source;
  /// The inputs are a seeded random draw, not the user's data.
  bool random = false;
};

} // namespace anefit
