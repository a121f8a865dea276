//===- Calibration.cpp - Which layers read a constant weight --------------===//
#include "transforms/Calibration.h"

#include "ir/IR.h"

namespace anefit {
namespace {

/// A value made by a const or a constexpr_* op (a stored weight).
bool isStoredWeight(const Value *v) {
  if (!v || !v->definingOp)
    return false;
  const std::string &t = v->definingOp->type;
  return t == "const" || t.rfind("constexpr_", 0) == 0;
}

/// The boolean bound to `param` (false when absent or not constant).
bool boolInput(const Operation &op, std::string_view param) {
  const Constant *c = op.constInput(param);
  if (!c)
    c = op.attribute(param);
  return c && c->numElements() == 1 && c->elementAsDouble(0) != 0;
}

} // namespace

std::optional<WeightInput> weightInputOf(const Operation &op) {
  if (op.type == "linear" && isStoredWeight(op.inputValue("weight")))
    return WeightInput{"weight", "x", 1, -1};
  if (op.type == "conv" && isStoredWeight(op.inputValue("weight"))) {
    const Constant *g = op.constInput("groups");
    if (!g)
      g = op.attribute("groups");
    if (g && g->numElements() == 1 && g->elementAsDouble(0) != 1)
      return std::nullopt; // a grouped conv's channels are not the weight's axis 1
    return WeightInput{"weight", "x", 1, 1};
  }
  if (op.type == "matmul" && isStoredWeight(op.inputValue("y")) &&
      !isStoredWeight(op.inputValue("x")))
    return WeightInput{"y", "x", boolInput(op, "transpose_y") ? 1 : 0,
                       boolInput(op, "transpose_x") ? -2 : -1};
  return std::nullopt;
}

void InputMoment::add(const float *x, int64_t n) {
  const auto c = static_cast<size_t>(channels);
  if (sum.empty() && rows + n < 2 * channels) {
    samples.insert(samples.end(), x, x + static_cast<size_t>(n) * c);
    rows += n;
    return;
  }
  if (sum.empty()) { // fold the rows kept so far into the running sum
    sum.assign(c * c, 0.0);
    std::vector<float> kept = std::move(samples);
    samples = {};
    int64_t k = rows;
    rows = 0;
    add(kept.data(), k);
  }
  // The upper triangle only; matrix() mirrors it.
  for (int64_t r = 0; r < n; ++r) {
    const float *xr = x + static_cast<size_t>(r) * c;
    for (size_t i = 0; i < c; ++i) {
      double xi = xr[i];
      if (xi == 0)
        continue;
      double *row = sum.data() + i * c;
      for (size_t j = i; j < c; ++j)
        row[j] += xi * xr[j];
    }
  }
  rows += n;
}

std::vector<double> InputMoment::matrix() const {
  const auto c = static_cast<size_t>(channels);
  std::vector<double> h(c * c, 0.0);
  if (rows <= 0)
    return h;
  if (!sum.empty()) {
    h = sum;
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      const float *xr = samples.data() + static_cast<size_t>(r) * c;
      for (size_t i = 0; i < c; ++i) {
        double xi = xr[i];
        if (xi == 0)
          continue;
        double *row = h.data() + i * c;
        for (size_t j = i; j < c; ++j)
          row[j] += xi * xr[j];
      }
    }
  }
  double inv = 1.0 / static_cast<double>(rows);
  for (size_t i = 0; i < c; ++i)
    for (size_t j = i; j < c; ++j)
      h[j * c + i] = h[i * c + j] *= inv;
  return h;
}

} // namespace anefit
