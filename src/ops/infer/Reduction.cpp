//===- Reduction.cpp - Output types of reductions, norms and sorting ------===//
//
// Ops that combine or order elements along axes: reduce_*, the arg
// reductions, topk, argsort and layer_norm.
//
//===----------------------------------------------------------------------===//
#include "ops/infer/InferUtil.h"

namespace anefit::infer {
namespace {

Result reduceImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  if (!x)
    return std::nullopt;
  auto keep = c.boolParam("keep_dims");
  if (!keep)
    return c.fail("'keep_dims' must be a constant");
  auto reduced = reduceAxes(c, x->rank(), "axes");
  if (!reduced)
    return std::nullopt;
  std::vector<Dim> out;
  for (size_t i = 0; i < reduced->size(); ++i) {
    if (!(*reduced)[i])
      out.push_back(x->shape()[i]);
    else if (*keep)
      out.push_back(Dim::of(1));
  }
  return one(Type::tensor(x->dtype(), std::move(out)));
}

Result reduceArgImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  if (!x)
    return std::nullopt;
  auto keep = c.boolParam("keep_dims");
  auto axis = c.intParam("axis");
  auto dtName = c.stringParam("output_dtype");
  if (!keep || !axis || !dtName)
    return c.fail("'axis', 'keep_dims' and 'output_dtype' must be constants");
  auto dt = dtypeFromName(*dtName);
  if (!dt)
    return c.fail("unknown output_dtype '" + *dtName + "'");
  auto na = normalizeAxis(*axis, x->rank());
  if (!na)
    return axisError(c, *axis, x->rank());
  std::vector<Dim> out;
  for (int64_t i = 0; i < x->rank(); ++i) {
    if (i != *na)
      out.push_back(x->shape()[static_cast<size_t>(i)]);
    else if (*keep)
      out.push_back(Dim::of(1));
  }
  return one(Type::tensor(*dt, std::move(out)));
}

Result topkImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  if (!x)
    return std::nullopt;
  auto k = c.intParam("k");
  auto axis = c.intParam("axis");
  auto returnIndices = c.boolParam("return_indices");
  auto idxName = c.stringParam("output_indices_dtype");
  if (!axis || !returnIndices || !idxName)
    return c.fail("'axis', 'return_indices' and 'output_indices_dtype' must be constants");
  auto na = normalizeAxis(*axis, x->rank());
  if (!na)
    return axisError(c, *axis, x->rank());
  auto idxDType = dtypeFromName(*idxName);
  if (!idxDType)
    return c.fail("unknown output_indices_dtype '" + *idxName + "'");
  std::vector<Dim> shape = x->shape();
  Dim &d = shape[static_cast<size_t>(*na)];
  if (!k) {
    d = Dim::unknown();
  } else if (*k >= 0) {
    if (d.isStatic() && *k > d.size)
      return c.fail("k " + std::to_string(*k) + " exceeds axis size " + std::to_string(d.size));
    d = Dim::of(*k);
  } // k = -1 keeps the whole axis
  std::vector<Type> outs{Type::tensor(x->dtype(), shape)};
  if (*returnIndices)
    outs.push_back(Type::tensor(*idxDType, shape));
  return outs;
}

Result argsortImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  if (!x)
    return std::nullopt;
  auto axis = c.intParam("axis");
  if (!axis || !normalizeAxis(*axis, x->rank()))
    return c.fail("'axis' must be a constant within the rank");
  return one(x->withDType(DType::I32));
}

Result layerNormImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x", false);
  if (!x)
    return std::nullopt;
  if (x->hasRank() && c.has("axes")) {
    auto axes = reduceAxes(c, x->rank(), "axes");
    if (!axes)
      return std::nullopt;
  }
  return one(*x);
}

} // namespace
} // namespace anefit::infer

namespace anefit {

ANEFIT_RULE(Reduce, reduceImpl(c))
ANEFIT_RULE(ReduceArg, reduceArgImpl(c))
ANEFIT_RULE(TopK, topkImpl(c))
ANEFIT_RULE(Argsort, argsortImpl(c))
ANEFIT_RULE(LayerNorm, layerNormImpl(c))

} // namespace anefit
