//===- Requantize.h - The forms per-block weights are requantized to -*- C++ -*-===//
//
// The rows of RequantizeForms.def, for the fix driver, the CLI and Python
// to list and validate `--requantize` values from one table.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace anefit {

struct RequantizeForm {
  std::string_view name;
  bool lossy;
  std::string_view help;
};

/// Every form, in table order.
std::span<const RequantizeForm> requantizeForms();

/// The form named `name`; null if none.
const RequantizeForm *findRequantizeForm(std::string_view name);

/// The names joined for messages: "fp16, c8w, ..., lut8 or auto" (or, with
/// other separators, "fp16|c8w|...|auto").
std::string requantizeFormNames(std::string_view sep = ", ", std::string_view last = " or ");

/// The `entries` values (a power of 2) that keep the weighted squared error
/// sum_i weight[i] * (v[i] - nearest value)^2 small over the n values of `v`
/// (1-D k-means, Lloyd's algorithm; `weight` null: every value alike):
/// started at the quantiles of the cube root of the weighted density, run
/// to convergence on a 4096-bin histogram, refined by two exact iterations.
/// At most `entries` distinct values are returned as they are (exact).
/// Sorted on return. The palettes of requantize's lut forms, each value
/// weighted by its input channel's energy when calibrated.
std::vector<float> fitPalette(const float *v, const float *weight, int64_t n, int entries);

/// What error feedback needs of a linear's input second moment H
/// (channels x channels, row-major): the columns in the order they are
/// rounded (by decreasing H_ii, the channels that carry the most first),
/// and the upper triangular U with U^T U = (H + damp I)^-1 over that order
/// (the Cholesky factor of the dampened inverse), as floats. `damp` is a
/// share of H's mean diagonal (requantize: 1 %, ours), raised tenfold until
/// the factorization succeeds. Null when H is zero or not finite.
struct FeedbackFactor {
  int64_t channels = 0;
  std::vector<int64_t> order; ///< position k is rounded k-th
  std::vector<float> u;       ///< channels x channels, upper, in `order`'s positions
  double damp = 0;            ///< the value added to H's diagonal
};
std::shared_ptr<const FeedbackFactor> feedbackFactor(const std::vector<double> &h, int64_t channels,
                                                     double damp);

/// Rounds each of the `rows` rows of `cols` values of `w` to the nearest
/// value of sorted `palette` (`entries` values) column by column in
/// f.order, carrying each column's rounding error to the columns not yet
/// rounded so the row's error e minimizes e^T H e greedily (error feedback,
/// as in GPTQ). Writes each element's palette index and value. Returns
/// sum over rows of e^T (H + damp I) e: the sum of the squared scaled
/// errors the feedback carried (exactly that, as U^T U is its inverse).
double assignWithFeedback(const float *w, int64_t rows, int64_t cols, const float *palette,
                          int entries, const FeedbackFactor &f, int *indices, float *values);

/// sum over rows of d^T H d for d the difference of `a` and `b` (rows x cols,
/// H cols x cols): the squared output error of a linear whose weight is `b`
/// instead of `a`, over inputs of second moment H.
double outputError2(const std::vector<double> &h, const float *a, const float *b, int64_t rows,
                    int64_t cols);

} // namespace anefit
