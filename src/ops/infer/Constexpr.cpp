//===- Constexpr.cpp - Output types of constexpr and quantization ops -----===//
//
// constexpr_* ops (weights decompressed at load time: affine, palettized,
// sparse, blockwise) and quantize/dequantize.
//
//===----------------------------------------------------------------------===//
#include "ops/infer/InferUtil.h"

namespace anefit::infer {
namespace {

Result constexprAffineImpl(InferCtx &c) {
  const Type *q = tensorParam(c, "quantized_data");
  const Type *s = q ? tensorParam(c, "scale", false) : nullptr;
  if (!s)
    return std::nullopt;
  return one(Type::tensor(s->dtype(), q->shape()));
}

Result constexprCastImpl(InferCtx &c) {
  const Type *src = tensorParam(c, "source_val", false);
  if (!src)
    return std::nullopt;
  auto name = c.stringOr("output_dtype", "");
  auto dt = name ? dtypeFromName(*name) : std::nullopt;
  if (!dt)
    return c.fail("'output_dtype' must name a dtype");
  return one(src->withDType(*dt));
}

/// Static dims of a shape given as a constant parameter (iOS16 constexpr ops).
Result fromShapeParam(InferCtx &c, DType dt) {
  auto shape = c.ints("shape");
  if (!shape)
    return c.fail("'shape' must be a constant");
  std::vector<Dim> out;
  for (int64_t v : *shape) {
    if (v < 0)
      return c.fail("negative shape value");
    out.push_back(Dim::of(v));
  }
  return one(Type::tensor(dt, std::move(out)));
}

Result constexprLutImpl(InferCtx &c) {
  const Type *lut = tensorParam(c, "lut");
  if (!lut)
    return std::nullopt;
  if (c.def.opset < 18)
    return fromShapeParam(c, lut->dtype());
  // iOS18: the output has the indices' shape, the vector axis widened by the
  // vector size (the lut's last dim).
  const Type *idx = tensorParam(c, "indices");
  if (!idx)
    return std::nullopt;
  if (lut->rank() != idx->rank() + 2)
    return c.fail("lut rank " + std::to_string(lut->rank()) + " is not indices rank " +
                  std::to_string(idx->rank()) + " + 2");
  std::vector<Dim> out = idx->shape();
  const Dim &vec = lut->shape().back();
  if (!(vec.isStatic() && vec.size == 1)) {
    auto axis = c.intOr("vector_axis", 0);
    if (!c.has("vector_axis") || !axis)
      return c.fail("'vector_axis' is needed when the vector size is not 1");
    auto na = normalizeAxis(*axis, idx->rank());
    if (!na)
      return axisError(c, *axis, idx->rank());
    if (!vec.isStatic())
      out[static_cast<size_t>(*na)] = Dim::unknown();
    else if (auto d = dimTimes(out[static_cast<size_t>(*na)], vec.size))
      out[static_cast<size_t>(*na)] = *d;
    else
      return c.fail("output size overflows");
  }
  return one(Type::tensor(lut->dtype(), std::move(out)));
}

Result constexprSparseImpl(InferCtx &c) {
  const Type *nz = tensorParam(c, "nonzero_data", false);
  if (!nz)
    return std::nullopt;
  if (c.def.opset < 18)
    return fromShapeParam(c, nz->dtype());
  const Type *mask = tensorParam(c, "mask", false);
  if (!mask)
    return std::nullopt;
  return one(mask->withDType(nz->dtype()));
}

Result constexprBlockwiseImpl(InferCtx &c) {
  const Type *data = tensorParam(c, "data");
  const Type *scale = data ? tensorParam(c, "scale") : nullptr;
  if (!scale)
    return std::nullopt;
  if (scale->rank() != data->rank())
    return c.fail("scale rank " + std::to_string(scale->rank()) + " does not match data rank " +
                  std::to_string(data->rank()));
  for (size_t i = 0; i < data->shape().size(); ++i) {
    const Dim &d = data->shape()[i], &s = scale->shape()[i];
    if (d.isStatic() && s.isStatic() && (s.size == 0 || d.size % s.size != 0))
      return c.fail("data dim " + std::to_string(i) + " of size " + std::to_string(d.size) +
                    " is not a multiple of scale dim " + std::to_string(s.size));
  }
  if (const Type *off = c.type("offset"); off && off->hasRank() && off->shape() != scale->shape())
    return c.fail("offset shape " + typeText(*off) + " differs from scale " + typeText(*scale));
  return one(Type::tensor(scale->dtype(), data->shape()));
}

Result constexprLutToSparseImpl(InferCtx &c) {
  const Type *mask = tensorParam(c, "indices_mask");
  const Type *nz = mask ? tensorParam(c, "indices_nonzero_data") : nullptr;
  const Type *lut = nz ? tensorParam(c, "lut") : nullptr;
  if (!lut || lut->rank() < 1)
    return lut ? c.fail("lut must have rank >= 1") : std::nullopt;
  std::vector<Dim> maskShape = mask->shape(), nzShape = nz->shape();
  const Dim &vec = lut->shape().back();
  if (!(vec.isStatic() && vec.size == 1)) {
    auto axis = c.intOr("vector_axis", 0);
    if (!c.has("vector_axis") || !axis)
      return c.fail("'vector_axis' is needed when the vector size is not 1");
    auto na = normalizeAxis(*axis, mask->rank());
    if (!na)
      return axisError(c, *axis, mask->rank());
    int64_t v = vec.isStatic() ? vec.size : 1;
    auto m = dimTimes(maskShape[static_cast<size_t>(*na)], v);
    if (!m)
      return c.fail("output size overflows");
    maskShape[static_cast<size_t>(*na)] = vec.isStatic() ? *m : Dim::unknown();
    for (Dim &d : nzShape) {
      auto t = dimTimes(d, v);
      if (!t)
        return c.fail("output size overflows");
      d = vec.isStatic() ? *t : Dim::unknown();
    }
  }
  return std::vector<Type>{Type::tensor(mask->dtype(), maskShape),
                           Type::tensor(lut->dtype(), nzShape)};
}

Result constexprSparseBlockwiseImpl(InferCtx &c) {
  const Type *mask = tensorParam(c, "data_mask", false);
  const Type *nz = mask ? tensorParam(c, "nonzero_data", false) : nullptr;
  const Type *scale = nz ? tensorParam(c, "scale", false) : nullptr;
  if (!scale)
    return std::nullopt;
  return std::vector<Type>{*mask, nz->withDType(scale->dtype())};
}

Result quantizeImpl(InferCtx &c) {
  const Type *in = tensorParam(c, "input", false);
  if (!in)
    return std::nullopt;
  auto name = c.stringOr("output_dtype", "");
  auto dt = name ? dtypeFromName(*name) : std::nullopt;
  if (!dt)
    return c.fail("'output_dtype' must name a dtype");
  return one(in->withDType(*dt));
}

Result dequantizeImpl(InferCtx &c) {
  const Type *in = tensorParam(c, "input", false);
  const Type *scale = in ? tensorParam(c, "scale", false) : nullptr;
  if (!scale)
    return std::nullopt;
  return one(in->withDType(scale->dtype()));
}

} // namespace
} // namespace anefit::infer

namespace anefit {

ANEFIT_RULE(ConstexprAffineDequantize, constexprAffineImpl(c))
ANEFIT_RULE(ConstexprCast, constexprCastImpl(c))
ANEFIT_RULE(ConstexprLutToDense, constexprLutImpl(c))
ANEFIT_RULE(ConstexprSparseToDense, constexprSparseImpl(c))
ANEFIT_RULE(ConstexprBlockwiseShiftScale, constexprBlockwiseImpl(c))
ANEFIT_RULE(ConstexprLutToSparse, constexprLutToSparseImpl(c))
ANEFIT_RULE(ConstexprSparseBlockwiseShiftScale, constexprSparseBlockwiseImpl(c))
ANEFIT_RULE(Quantize, quantizeImpl(c))
ANEFIT_RULE(Dequantize, dequantizeImpl(c))

} // namespace anefit
