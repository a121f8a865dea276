//===- Indexing.cpp - Output types of slicing, gather and scatter ops -----===//
//
// Ops that read or write elements at positions: slice_by_index,
// slice_by_size and slice_update, the gathers and scatters, and non_zero.
//
//===----------------------------------------------------------------------===//
#include "ops/infer/InferUtil.h"

#include <algorithm>
#include <limits>

namespace anefit::infer {
namespace {

/// Python slice length of slice(begin|None, end|None, stride) over `dim` elements.
int64_t sliceLength(int64_t dim, std::optional<int64_t> begin, std::optional<int64_t> end,
                    int64_t stride) {
  auto clampIndex = [&](int64_t v, int64_t lo, int64_t hi) {
    if (v < 0)
      v += dim;
    return std::min(std::max(v, lo), hi);
  };
  int64_t b, e;
  if (stride > 0) {
    b = begin ? clampIndex(*begin, 0, dim) : 0;
    e = end ? clampIndex(*end, 0, dim) : dim;
    return e > b ? (e - b + stride - 1) / stride : 0;
  }
  b = begin ? clampIndex(*begin, -1, dim - 1) : dim - 1;
  e = end ? clampIndex(*end, -1, dim - 1) : -1;
  return b > e ? (b - e + (-stride) - 1) / (-stride) : 0;
}

std::optional<std::vector<bool>> maskOf(InferCtx &c, std::string_view p, size_t n) {
  if (!c.has(p))
    return std::vector<bool>(n, false);
  auto v = c.ints(p);
  if (!v || v->size() != n) {
    c.fail("'" + std::string(p) + "' must be a constant with " + std::to_string(n) + " values");
    return std::nullopt;
  }
  std::vector<bool> out;
  for (int64_t b : *v)
    out.push_back(b != 0);
  return out;
}

/// The result shape of slice_by_index (also the shape slice_update's update must have).
std::optional<std::vector<Dim>> sliceByIndexShape(InferCtx &c, const Type &x) {
  size_t rank = x.shape().size();
  ShapeArg begin = shapeArg(c, "begin"), end = shapeArg(c, "end");
  if (begin.length && *begin.length != static_cast<int64_t>(rank)) {
    c.fail("begin has " + std::to_string(*begin.length) + " values for rank " +
           std::to_string(rank));
    return std::nullopt;
  }
  if (end.length && *end.length != static_cast<int64_t>(rank)) {
    c.fail("end has " + std::to_string(*end.length) + " values for rank " + std::to_string(rank));
    return std::nullopt;
  }
  auto stride = intList(c, "stride", rank, 1, std::numeric_limits<int64_t>::min());
  auto bm = stride ? maskOf(c, "begin_mask", rank) : std::nullopt;
  auto em = bm ? maskOf(c, "end_mask", rank) : std::nullopt;
  auto sm = em ? maskOf(c, "squeeze_mask", rank) : std::nullopt;
  if (!sm)
    return std::nullopt;
  std::vector<Dim> out;
  for (size_t i = 0; i < rank; ++i) {
    int64_t s = (*stride)[i];
    if (s == 0) {
      c.fail("stride of axis " + std::to_string(i) + " is 0");
      return std::nullopt;
    }
    if ((*sm)[i])
      continue;
    const Dim &d = x.shape()[i];
    bool fullRange = (*bm)[i] && (*em)[i];
    if (!d.isStatic()) {
      out.push_back(fullRange && (s == 1 || s == -1) ? d : Dim::unknown());
      continue;
    }
    std::optional<int64_t> b, e;
    if (!(*bm)[i]) {
      if (!begin.values) {
        out.push_back(Dim::unknown());
        continue;
      }
      b = (*begin.values)[i];
    }
    if (!(*em)[i]) {
      if (!end.values) {
        out.push_back(Dim::unknown());
        continue;
      }
      e = (*end.values)[i];
    }
    out.push_back(Dim::of(sliceLength(d.size, b, e, s)));
  }
  return out;
}

Result sliceByIndexImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  if (!x)
    return std::nullopt;
  auto shape = sliceByIndexShape(c, *x);
  if (!shape)
    return std::nullopt;
  return one(Type::tensor(x->dtype(), std::move(*shape)));
}

Result sliceUpdateImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  const Type *u = x ? tensorParam(c, "update") : nullptr;
  if (!x || !u)
    return std::nullopt;
  if (u->rank() == 0)
    return c.fail("update must not be a scalar");
  auto shape = sliceByIndexShape(c, *x);
  if (!shape)
    return std::nullopt;
  if (!typesCompatible(Type::tensor(u->dtype(), *shape), *u))
    return c.fail("update shape " + typeText(*u) + " does not match the slice shape " +
                  shapeText(*shape));
  return one(*x);
}

Result sliceBySizeImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  if (!x)
    return std::nullopt;
  size_t rank = x->shape().size();
  ShapeArg size = shapeArg(c, "size");
  auto begin = c.ints("begin");
  if (size.length && *size.length != static_cast<int64_t>(rank))
    return c.fail("size has " + std::to_string(*size.length) + " values for rank " +
                  std::to_string(rank));
  std::vector<Dim> out;
  for (size_t i = 0; i < rank; ++i) {
    if (!size.values) {
      out.push_back(Dim::unknown());
      continue;
    }
    int64_t s = (*size.values)[i];
    const Dim &d = x->shape()[i];
    if (s >= 0) {
      if (d.isStatic() && begin && begin->size() == rank && (*begin)[i] >= 0 &&
          (*begin)[i] <= d.size && s > d.size - (*begin)[i])
        return c.fail("slice of size " + std::to_string(s) + " at " + std::to_string((*begin)[i]) +
                      " exceeds dim " + std::to_string(i) + " of size " + std::to_string(d.size));
      out.push_back(Dim::of(s));
    } else if (s == -1) {
      // -1 takes everything from begin to the end.
      if (begin && begin->size() == rank && d.isStatic() && (*begin)[i] >= 0 &&
          (*begin)[i] <= d.size)
        out.push_back(Dim::of(d.size - (*begin)[i]));
      else if (begin && begin->size() == rank && (*begin)[i] == 0)
        out.push_back(d);
      else
        out.push_back(Dim::unknown());
    } else {
      return c.fail("size value " + std::to_string(s) + " is negative");
    }
  }
  return one(Type::tensor(x->dtype(), std::move(out)));
}

Result gatherImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  const Type *idx = x ? tensorParam(c, "indices") : nullptr;
  if (!x || !idx)
    return std::nullopt;
  auto axis = c.intParam("axis");
  auto batchDims = c.intParam("batch_dims");
  if (!axis || !batchDims)
    return c.fail("'axis' and 'batch_dims' must be constants");
  auto na = normalizeAxis(*axis, x->rank());
  if (!na)
    return axisError(c, *axis, x->rank());
  if (*batchDims < 0 || *batchDims > *na || *batchDims > idx->rank())
    return c.fail("batch_dims " + std::to_string(*batchDims) + " is out of range");
  std::vector<Dim> out(x->shape().begin(), x->shape().begin() + *na);
  out.insert(out.end(), idx->shape().begin() + *batchDims, idx->shape().end());
  out.insert(out.end(), x->shape().begin() + *na + 1, x->shape().end());
  return one(Type::tensor(x->dtype(), std::move(out)));
}

Result gatherAlongAxisImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  const Type *idx = x ? tensorParam(c, "indices") : nullptr;
  if (!x || !idx)
    return std::nullopt;
  if (x->rank() != idx->rank())
    return c.fail("indices rank " + std::to_string(idx->rank()) + " does not match x rank " +
                  std::to_string(x->rank()));
  auto axis = c.intParam("axis");
  if (!axis)
    return c.fail("'axis' must be a constant");
  if (!normalizeAxis(*axis, x->rank()))
    return axisError(c, *axis, x->rank());
  return one(Type::tensor(x->dtype(), idx->shape()));
}

Result gatherNdImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  const Type *idx = x ? tensorParam(c, "indices") : nullptr;
  if (!x || !idx)
    return std::nullopt;
  auto batchDims = c.intParam("batch_dims");
  if (!batchDims || *batchDims < 0)
    return c.fail("'batch_dims' must be a non-negative constant");
  if (idx->rank() < 1)
    return c.fail("indices must have rank >= 1");
  const Dim &last = idx->shape().back();
  if (!last.isStatic())
    return one(Type::unranked(x->dtype()));
  if (last.size < 0)
    return c.fail("indices have a negative last dim");
  auto from = addChecked(*batchDims, last.size);
  if (!from || *from > x->rank())
    return c.fail("indices address " + last.str() + " dims after " + std::to_string(*batchDims) +
                  " batch dims of a rank " + std::to_string(x->rank()) + " tensor");
  std::vector<Dim> out(idx->shape().begin(), idx->shape().end() - 1);
  out.insert(out.end(), x->shape().begin() + *from, x->shape().end());
  return one(Type::tensor(x->dtype(), std::move(out)));
}

Result scatterImpl(InferCtx &c, int kind) {
  const Type *data = tensorParam(c, "data");
  const Type *idx = data ? tensorParam(c, "indices") : nullptr;
  const Type *upd = idx ? tensorParam(c, "updates") : nullptr;
  if (!upd)
    return std::nullopt;
  std::vector<Dim> expect;
  if (kind == 0) { // scatter
    auto axis = c.intParam("axis");
    if (!axis)
      return c.fail("'axis' must be a constant");
    auto na = normalizeAxis(*axis, data->rank());
    if (!na)
      return axisError(c, *axis, data->rank());
    expect.assign(data->shape().begin(), data->shape().begin() + *na);
    expect.insert(expect.end(), idx->shape().begin(), idx->shape().end());
    expect.insert(expect.end(), data->shape().begin() + *na + 1, data->shape().end());
  } else if (kind == 1) { // scatter_along_axis
    expect = idx->shape();
  } else { // scatter_nd
    if (idx->rank() < 1 || !idx->shape().back().isStatic())
      return one(*data);
    int64_t k = idx->shape().back().size;
    if (k < 0 || k > data->rank())
      return c.fail("indices address " + std::to_string(k) + " dims of a rank " +
                    std::to_string(data->rank()) + " tensor");
    expect.assign(idx->shape().begin(), idx->shape().end() - 1);
    expect.insert(expect.end(), data->shape().begin() + k, data->shape().end());
  }
  if (!typesCompatible(Type::tensor(upd->dtype(), expect), *upd))
    return c.fail("updates shape " + typeText(*upd) + " does not match the expected " +
                  shapeText(expect));
  return one(*data);
}

Result nonZeroImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  if (!x)
    return std::nullopt;
  return one(Type::tensor(DType::I32, {Dim::unknown(), Dim::of(x->rank())}));
}

} // namespace
} // namespace anefit::infer

namespace anefit {

ANEFIT_RULE(SliceByIndex, sliceByIndexImpl(c))
ANEFIT_RULE(SliceUpdate, sliceUpdateImpl(c))
ANEFIT_RULE(SliceBySize, sliceBySizeImpl(c))
ANEFIT_RULE(Gather, gatherImpl(c))
ANEFIT_RULE(GatherAlongAxis, gatherAlongAxisImpl(c))
ANEFIT_RULE(GatherNd, gatherNdImpl(c))
ANEFIT_RULE(Scatter, scatterImpl(c, 0))
ANEFIT_RULE(ScatterAlongAxis, scatterImpl(c, 1))
ANEFIT_RULE(ScatterNd, scatterImpl(c, 2))
ANEFIT_RULE(NonZero, nonZeroImpl(c))

} // namespace anefit
