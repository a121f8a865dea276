//===- Requantize.h - The forms per-block weights are requantized to -*- C++ -*-===//
//
// The rows of RequantizeForms.def, for the fix driver, the CLI and Python
// to list and validate `--requantize` values from one table.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
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

} // namespace anefit
