//===- Calibration.h - What the layers reading each weight see --*- C++ -*-===//
//
// A weight's error matters through the layer that reads it: a linear's
// output row is sum_c W[r, c] x_c, so an error d[r, c] costs about
// sum_c E[x_c^2] d[r, c]^2 of squared output error (the diagonal of the
// inputs' second moment; cross terms between channels are left out). The
// fix driver measures E[x_c^2] per input channel by running the original on
// calibration inputs (fix/Calibrate.h); requantize weights its palettes and
// its choice of form by them (Requantize.cpp). For linears the driver also
// keeps the inputs' full second moment H = E[x x^T] (InputMoment), with
// which requantize assigns palette indices by error feedback: a column's
// rounding error is carried to the columns not yet rounded, through H's
// cross terms. Plain data: the passes read it through PassContext, they
// never run a model.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <map>
#include <memory>
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

/// The second moment H = E[x x^T] of the rows a linear reads (x over its
/// last axis, `channels` wide). Held as the rows themselves while there are
/// fewer than 2 x channels of them (fewer bytes than H), as the running sum
/// of x x^T after that: bounded by the smaller of the two, 4 x rows x
/// channels or 8 x channels^2 bytes. Layers reading the same activation
/// (q, k and v; gate and up) share one.
struct InputMoment {
  int64_t channels = 0;
  int64_t rows = 0;
  std::vector<float> samples; ///< rows x channels, while rows < 2 x channels
  std::vector<double> sum;    ///< channels x channels, sum of x x^T, after
  /// Adds `n` rows of `channels` values.
  void add(const float *x, int64_t n);
  /// H = E[x x^T], channels x channels, row-major.
  std::vector<double> matrix() const;
};

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
  /// The full second moment of what the layer reads, for a linear or a
  /// matmul with transpose_y (a weight of (out, in)); null for convs, other
  /// matmuls, and a weight read by layers of other widths.
  std::shared_ptr<const InputMoment> moment;
  /// The same second moment over inputs the fit never saw (fix: the model's
  /// own text from another seed), or null. Error feedback fits a layer's
  /// palette indices to `moment`'s rows: on those rows its output error
  /// flatters the fit the fewer rows there are, and auto chooses forms by
  /// the error on these instead.
  std::shared_ptr<const InputMoment> heldOut;
};

struct WeightCalibration {
  /// By the name of the op that makes the weight (a const, a constexpr_*):
  /// names survive cloning and the passes that run before requantize.
  std::map<std::string, ChannelEnergy> weights;
  /// Where the inputs came from, for messages ("text.txt's first 128 tokens").
  std::string source;
  /// The inputs are a seeded random draw, not the user's data.
  bool random = false;
  /// Where the held-out inputs came from (ChannelEnergy::heldOut); empty
  /// when there are none.
  std::string heldOutSource;
};

} // namespace anefit
