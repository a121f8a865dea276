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

} // namespace anefit
