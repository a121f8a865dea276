//===- Elementwise.cpp - Output types of element-wise ops -----------------===//
//
// Ops whose output has their inputs' shape, or the shape their inputs
// broadcast to: unary ops (the first input's type), binary arithmetic and
// comparisons (numpy broadcasting, dtype promotion), cast and select.
//
//===----------------------------------------------------------------------===//
#include "ops/infer/InferUtil.h"

namespace anefit::infer {
namespace {

Result inferSameAsFirstImpl(InferCtx &c) {
  if (c.def.params.empty())
    return c.fail("no parameters");
  const Type *t = c.type(c.def.params[0].name);
  if (!t)
    return c.fail("missing input '" + std::string(c.def.params[0].name) + "'");
  return one(*t);
}

Result binaryImpl(InferCtx &c, bool toBool) {
  const Type *x = tensorParam(c, "x", false);
  const Type *y = x ? tensorParam(c, "y", false) : nullptr;
  if (!x || !y)
    return std::nullopt;
  DType dt = toBool ? DType::Bool : promoteDTypes(x->dtype(), y->dtype());
  if (!x->hasRank() || !y->hasRank())
    return one(Type::unranked(dt));
  std::string err;
  auto shape = broadcastShapes(x->shape(), y->shape(), err);
  if (!shape)
    return c.fail(err);
  return one(Type::tensor(dt, std::move(*shape)));
}

Result castImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x", false);
  if (!x)
    return std::nullopt;
  auto name = c.stringOr("dtype", "");
  if (!name || name->empty())
    return c.fail("'dtype' must be a constant string");
  auto dt = castTargetDType(*name);
  if (!dt)
    return c.fail("unknown dtype '" + *name + "'");
  return one(x->withDType(*dt));
}

Result selectImpl(InferCtx &c) {
  const Type *cond = tensorParam(c, "cond");
  const Type *a = cond ? tensorParam(c, "a") : nullptr;
  const Type *b = a ? tensorParam(c, "b") : nullptr;
  if (!b)
    return std::nullopt;
  std::string err;
  auto ab = broadcastShapes(a->shape(), b->shape(), err);
  auto all = ab ? broadcastShapes(cond->shape(), *ab, err) : std::nullopt;
  if (!all)
    return c.fail(err);
  return one(Type::tensor(promoteDTypes(a->dtype(), b->dtype()), std::move(*all)));
}

} // namespace
} // namespace anefit::infer

namespace anefit {

std::optional<DType> castTargetDType(std::string_view name) {
  // Frontends write int64/fp64 targets that Core ML narrows to 32 bits, and
  // numpy's long float names.
  if (name == "int64")
    return DType::I32;
  if (name == "fp64" || name == "float64" || name == "float32")
    return DType::F32;
  if (name == "float16")
    return DType::F16;
  return dtypeFromName(name);
}

ANEFIT_RULE(SameAsFirst, inferSameAsFirstImpl(c))
ANEFIT_RULE(Binary, binaryImpl(c, false))
ANEFIT_RULE(Compare, binaryImpl(c, true))
ANEFIT_RULE(Cast, castImpl(c))
ANEFIT_RULE(Select, selectImpl(c))

} // namespace anefit
