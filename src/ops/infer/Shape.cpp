//===- Shape.cpp - Output types of shape and tensor manipulation ops ------===//
//
// Ops that move, repeat or create elements without arithmetic on them:
// reshape, transpose, squeeze and friends, concat/split/stack, pad and tile,
// tensors made from a shape (fill, range_1d, the random ops), resampling
// and cropping, depth/space rearrangement, one_hot and sliding_windows.
//
//===----------------------------------------------------------------------===//
#include "ops/infer/InferUtil.h"

#include <algorithm>
#include <cmath>

namespace anefit::infer {
namespace {

Result reshapeImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x", false);
  if (!x)
    return std::nullopt;
  ShapeArg s = shapeArg(c, "shape");
  if (!s.values) {
    if (!s.length)
      return one(Type::unranked(x->dtype()));
    if (*s.length > 64)
      return c.fail("shape has " + std::to_string(*s.length) + " dims");
    return one(Type::tensor(x->dtype(), std::vector<Dim>(*s.length, Dim::unknown())));
  }
  std::vector<Dim> out;
  int64_t inferIndex = -1;
  int64_t known = 1;
  bool allKnown = true;
  for (size_t i = 0; i < s.values->size(); ++i) {
    int64_t v = (*s.values)[i];
    Dim d;
    if (v == -1) {
      if (inferIndex >= 0)
        return c.fail("shape has more than one -1");
      inferIndex = static_cast<int64_t>(i);
      out.push_back(Dim::unknown());
      continue;
    }
    if (v < -1)
      return c.fail("shape value " + std::to_string(v) + " is negative");
    if (v == 0) {
      // 0 copies an input dim. iOS15: the one at the same index, and the ranks
      // must match. iOS17: aligned from the right, 1 where x has no such dim.
      if (!x->hasRank()) {
        d = Dim::unknown();
      } else if (c.ios >= 17) {
        size_t fromRight = s.values->size() - 1 - i;
        d = fromRight < x->shape().size() ? x->shape()[x->shape().size() - 1 - fromRight]
                                          : Dim::of(1);
      } else if (x->shape().size() == s.values->size()) {
        d = x->shape()[i];
      } else {
        return c.fail("shape contains 0, so x rank " + std::to_string(x->shape().size()) +
                      " must equal the shape length " + std::to_string(s.values->size()));
      }
    } else {
      d = Dim::of(v);
    }
    if (d.isStatic()) {
      auto k = mulChecked(known, d.size);
      if (!k)
        return c.fail("shape element count overflows");
      known = *k;
    } else {
      allKnown = false;
    }
    out.push_back(d);
  }
  auto total = checkedCount(*x);
  if (inferIndex >= 0) {
    if (total && allKnown) {
      if (known == 0 || *total % known != 0)
        return c.fail("cannot infer -1: " + std::to_string(*total) +
                      " elements are not a multiple of " + std::to_string(known));
      out[static_cast<size_t>(inferIndex)] = Dim::of(*total / known);
    } else if (x->hasRank() && allKnown) {
      // The one non-static input dim passes through when all else is static and equal.
      std::vector<Dim> nonStatic;
      int64_t staticIn = 1;
      for (const Dim &d : x->shape()) {
        if (d.isStatic()) {
          auto k = mulChecked(staticIn, d.size);
          if (!k)
            return c.fail("input element count overflows");
          staticIn = *k;
        } else {
          nonStatic.push_back(d);
        }
      }
      if (nonStatic.size() == 1 && staticIn == known)
        out[static_cast<size_t>(inferIndex)] = nonStatic[0];
    }
  } else if (total && allKnown && known != *total) {
    return c.fail("cannot reshape " + std::to_string(*total) + " elements into " + shapeText(out));
  }
  return one(Type::tensor(x->dtype(), std::move(out)));
}

Result transposeImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  if (!x)
    return std::nullopt;
  auto perm = c.ints("perm");
  if (!perm)
    return c.fail("'perm' must be a constant");
  int64_t rank = x->rank();
  if (static_cast<int64_t>(perm->size()) != rank)
    return c.fail("perm has " + std::to_string(perm->size()) + " values for rank " +
                  std::to_string(rank));
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  std::vector<Dim> out;
  for (int64_t p : *perm) {
    auto np = normalizeAxis(p, rank);
    if (!np || seen[static_cast<size_t>(*np)])
      return c.fail("perm is not a permutation of 0.." + std::to_string(rank - 1));
    seen[static_cast<size_t>(*np)] = true;
    out.push_back(x->shape()[static_cast<size_t>(*np)]);
  }
  return one(Type::tensor(x->dtype(), std::move(out)));
}

Result expandDimsImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  if (!x)
    return std::nullopt;
  auto axes = c.ints("axes");
  if (!axes || axes->empty())
    return c.fail("'axes' must be a non-empty constant");
  int64_t newRank = x->rank() + static_cast<int64_t>(axes->size());
  std::vector<bool> inserted(static_cast<size_t>(newRank), false);
  for (int64_t a : *axes) {
    auto na = normalizeAxis(a, newRank);
    if (!na)
      return axisError(c, a, newRank);
    if (inserted[static_cast<size_t>(*na)])
      return c.fail("axis " + std::to_string(a) + " given twice");
    inserted[static_cast<size_t>(*na)] = true;
  }
  std::vector<Dim> out;
  size_t next = 0;
  for (int64_t i = 0; i < newRank; ++i)
    out.push_back(inserted[static_cast<size_t>(i)] ? Dim::of(1) : x->shape()[next++]);
  return one(Type::tensor(x->dtype(), std::move(out)));
}

Result squeezeImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  if (!x)
    return std::nullopt;
  std::vector<Dim> out;
  if (!c.has("axes")) {
    for (const Dim &d : x->shape())
      if (!(d.isStatic() && d.size == 1))
        out.push_back(d);
    return one(Type::tensor(x->dtype(), std::move(out)));
  }
  auto removed = reduceAxes(c, x->rank(), "axes");
  if (!removed)
    return std::nullopt;
  for (size_t i = 0; i < removed->size(); ++i) {
    const Dim &d = x->shape()[i];
    if (!(*removed)[i]) {
      out.push_back(d);
      continue;
    }
    if (d.isStatic() && d.size != 1)
      return c.fail("cannot squeeze axis " + std::to_string(i) + " of size " +
                    std::to_string(d.size));
  }
  return one(Type::tensor(x->dtype(), std::move(out)));
}

Result concatImpl(InferCtx &c) {
  auto values = c.types("values");
  if (values.empty())
    return c.fail("'values' is empty");
  auto axis = c.intParam("axis");
  if (!c.has("axis") || !axis)
    return c.fail("'axis' must be a constant");
  const Type *first = values[0];
  for (const Type *t : values)
    if (!t->isTensor() || !t->hasRank())
      return first->isTensor() ? one(Type::unranked(first->dtype())) : c.fail("bad values");
  // coremltools concatenates scalars (and 1-element vectors) into slice
  // bounds, e.g. ExecuTorch's KV-cache write begin = concat(0, 0, pos, 0);
  // Core ML reads a scalar there as a vector of one.
  bool scalars =
      std::all_of(values.begin(), values.end(), [](const Type *t) { return t->rank() <= 1; }) &&
      std::any_of(values.begin(), values.end(), [](const Type *t) { return t->rank() == 0; });
  std::vector<Type> widened;
  if (scalars) {
    for (const Type *t : values)
      widened.push_back(t->rank() == 0 ? Type::tensor(t->dtype(), std::vector<int64_t>{1}) : *t);
    for (size_t i = 0; i < values.size(); ++i)
      values[i] = &widened[i];
    first = values[0];
  }
  int64_t rank = first->rank();
  auto na = normalizeAxis(*axis, rank);
  if (!na)
    return axisError(c, *axis, rank);
  std::vector<Dim> out = first->shape();
  DType dt = first->dtype();
  int64_t sum = 0;
  bool sumKnown = true;
  for (size_t i = 0; i < values.size(); ++i) {
    const Type *t = values[i];
    if (t->rank() != rank)
      return c.fail("value " + std::to_string(i) + " has rank " + std::to_string(t->rank()) +
                    ", expected " + std::to_string(rank));
    dt = promoteDTypes(dt, t->dtype());
    for (int64_t d = 0; d < rank; ++d) {
      const Dim &td = t->shape()[static_cast<size_t>(d)];
      if (d == *na) {
        if (td.isStatic()) {
          auto s = addChecked(sum, td.size);
          if (!s)
            return c.fail("concatenated size overflows");
          sum = *s;
        } else {
          sumKnown = false;
        }
        continue;
      }
      auto u = unifyDims(out[static_cast<size_t>(d)], td);
      if (!u)
        return c.fail("value " + std::to_string(i) + " dim " + std::to_string(d) + " is " +
                      td.str() + ", expected " + out[static_cast<size_t>(d)].str());
      out[static_cast<size_t>(d)] = *u;
    }
  }
  // interleave changes the order of elements, not the shape.
  if (values.size() == 1)
    out[static_cast<size_t>(*na)] = first->shape()[static_cast<size_t>(*na)];
  else
    out[static_cast<size_t>(*na)] = sumKnown ? Dim::of(sum) : Dim::unknown();
  return one(Type::tensor(dt, std::move(out)));
}

Result splitImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  if (!x)
    return std::nullopt;
  auto axis = c.intParam("axis");
  if (!c.has("axis") || !axis)
    return c.fail("'axis' must be a constant");
  auto na = normalizeAxis(*axis, x->rank());
  if (!na)
    return axisError(c, *axis, x->rank());
  const Dim &d = x->shape()[static_cast<size_t>(*na)];
  std::vector<Dim> sizes;
  if (c.has("split_sizes")) {
    auto ss = c.ints("split_sizes");
    if (!ss || ss->empty())
      return c.fail("'split_sizes' must be a non-empty constant");
    int64_t sum = 0;
    for (int64_t s : *ss) {
      if (s < 0)
        return c.fail("negative split size " + std::to_string(s));
      auto t = addChecked(sum, s);
      if (!t)
        return c.fail("split sizes overflow");
      sum = *t;
      sizes.push_back(Dim::of(s));
    }
    if (d.isStatic() && sum != d.size)
      return c.fail("split sizes sum to " + std::to_string(sum) + ", axis has " +
                    std::to_string(d.size));
  } else if (c.has("num_splits")) {
    auto n = c.intOr("num_splits", 1);
    if (!n || *n < 1 || *n > 4096)
      return c.fail("'num_splits' must be a constant in 1..4096");
    Dim each = Dim::unknown();
    if (d.isStatic()) {
      if (d.size % *n != 0)
        return c.fail("axis size " + std::to_string(d.size) + " is not divisible by " +
                      std::to_string(*n));
      each = Dim::of(d.size / *n);
    } else if (*n == 1) {
      each = d;
    }
    sizes.assign(static_cast<size_t>(*n), each);
  } else {
    return c.fail("needs 'num_splits' or 'split_sizes'");
  }
  std::vector<Type> outs;
  for (const Dim &s : sizes) {
    std::vector<Dim> shape = x->shape();
    shape[static_cast<size_t>(*na)] = s;
    outs.push_back(Type::tensor(x->dtype(), std::move(shape)));
  }
  return outs;
}

Result stackImpl(InferCtx &c) {
  auto values = c.types("values");
  if (values.empty())
    return c.fail("'values' is empty");
  auto axis = c.intParam("axis");
  if (!c.has("axis") || !axis)
    return c.fail("'axis' must be a constant");
  const Type *first = values[0];
  if (!first->isTensor() || !first->hasRank())
    return one(Type::unranked(first->dtype()));
  std::vector<Dim> shape = first->shape();
  for (size_t i = 1; i < values.size(); ++i) {
    const Type *t = values[i];
    if (!t->isTensor() || !t->hasRank() || t->rank() != first->rank())
      return c.fail("value " + std::to_string(i) + " has a different rank");
    for (size_t d = 0; d < shape.size(); ++d) {
      auto u = unifyDims(shape[d], t->shape()[d]);
      if (!u)
        return c.fail("value " + std::to_string(i) + " shape " + typeText(*t) + " differs from " +
                      typeText(*first));
      shape[d] = *u;
    }
  }
  int64_t newRank = first->rank() + 1;
  auto na = normalizeAxis(*axis, newRank);
  if (!na)
    return axisError(c, *axis, newRank);
  shape.insert(shape.begin() + *na, Dim::of(static_cast<int64_t>(values.size())));
  return one(Type::tensor(first->dtype(), std::move(shape)));
}

Result padImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  if (!x)
    return std::nullopt;
  ShapeArg pad = shapeArg(c, "pad");
  if (!pad.length)
    return one(Type::tensor(x->dtype(), std::vector<Dim>(x->shape().size(), Dim::unknown())));
  if (*pad.length % 2 != 0 || *pad.length / 2 > x->rank())
    return c.fail("pad has " + std::to_string(*pad.length) + " values for rank " +
                  std::to_string(x->rank()));
  std::vector<Dim> out = x->shape();
  size_t k = static_cast<size_t>(*pad.length / 2);
  size_t first = out.size() - k;
  for (size_t i = 0; i < k; ++i) {
    Dim &d = out[first + i];
    if (!pad.values || !d.isStatic()) {
      d = (pad.values && (*pad.values)[2 * i] == 0 && (*pad.values)[2 * i + 1] == 0)
              ? d
              : Dim::unknown();
      continue;
    }
    int64_t b = (*pad.values)[2 * i], e = (*pad.values)[2 * i + 1];
    if (b < 0 || e < 0)
      return c.fail("negative pad value");
    auto s = addChecked(d.size, b);
    if (!s || !(s = addChecked(*s, e)))
      return c.fail("padded size overflows");
    d = Dim::of(*s);
  }
  return one(Type::tensor(x->dtype(), std::move(out)));
}

Result tileImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  if (!x)
    return std::nullopt;
  ShapeArg reps = shapeArg(c, "reps");
  if (reps.length && *reps.length != x->rank())
    return c.fail("reps has " + std::to_string(*reps.length) + " values for rank " +
                  std::to_string(x->rank()));
  std::vector<Dim> out = x->shape();
  for (size_t i = 0; i < out.size(); ++i) {
    if (!reps.values) {
      out[i] = Dim::unknown();
      continue;
    }
    if ((*reps.values)[i] < 0)
      return c.fail("negative reps value");
    auto d = dimTimes(out[i], (*reps.values)[i]);
    if (!d)
      return c.fail("tiled size overflows");
    out[i] = *d;
  }
  return one(Type::tensor(x->dtype(), std::move(out)));
}

DType valueDTypeOr(InferCtx &c, DType dflt) {
  const Type *v = c.type("value");
  return v ? v->dtype() : dflt;
}

/// A `dt` tensor of the shape the "shape" parameter gives: its values when
/// constant, else its length (unknown dims), else unranked.
Result tensorOfShapeParam(InferCtx &c, DType dt) {
  ShapeArg s = shapeArg(c, "shape");
  if (s.values) {
    std::vector<Dim> out;
    for (int64_t v : *s.values) {
      if (v < 0)
        return c.fail("negative shape value " + std::to_string(v));
      out.push_back(Dim::of(v));
    }
    return one(Type::tensor(dt, std::move(out)));
  }
  if (s.length)
    return one(Type::tensor(dt, std::vector<Dim>(*s.length, Dim::unknown())));
  return one(Type::unranked(dt));
}

Result fillImpl(InferCtx &c) {
  DType dt = valueDTypeOr(c, DType::F32);
  return tensorOfShapeParam(c, dt);
}

Result fillLikeImpl(InferCtx &c) {
  const Type *ref = tensorParam(c, "ref_tensor", false);
  if (!ref)
    return std::nullopt;
  return one(ref->withDType(valueDTypeOr(c, DType::F32)));
}

Result range1dImpl(InferCtx &c) {
  const Type *start = tensorParam(c, "start", false);
  if (!start)
    return std::nullopt;
  auto s = c.doubles("start"), e = c.doubles("end"), st = c.doubles("step");
  if (s && e && st && s->size() == 1 && e->size() == 1 && st->size() == 1) {
    double step = (*st)[0];
    if (step == 0)
      return c.fail("step is 0");
    double n = std::ceil(((*e)[0] - (*s)[0]) / step);
    if (!(n < 9e15))
      return c.fail("range is too long");
    return one(Type::tensor(start->dtype(), {Dim::of(n > 0 ? static_cast<int64_t>(n) : 0)}));
  }
  return one(Type::tensor(start->dtype(), {Dim::unknown()}));
}

Result randomImpl(InferCtx &c) {
  // The distribution parameters (type domain T) decide the dtype; fp32 by default.
  DType dt = DType::F32;
  for (const ParamSpec &p : c.def.params)
    if (p.domain == "T")
      if (const Type *t = c.type(p.name))
        dt = t->dtype();
  return tensorOfShapeParam(c, dt);
}

Result upsampleImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  if (!x)
    return std::nullopt;
  if (x->rank() < 3)
    return c.fail("x rank " + std::to_string(x->rank()) + " is below 3");
  std::vector<Dim> out = x->shape();
  const char *names[2] = {"scale_factor_height", "scale_factor_width"};
  for (int i = 0; i < 2; ++i) {
    Dim &d = out[out.size() - 2 + static_cast<size_t>(i)];
    double scale = 1;
    if (c.has(names[i])) {
      auto v = c.doubles(names[i]);
      if (!v || v->size() != 1)
        return c.fail(std::string("'") + names[i] + "' must be a constant scalar");
      scale = (*v)[0];
    }
    if (!(scale > 0) || scale > 1e6)
      return c.fail(std::string(names[i]) + " " + std::to_string(scale) + " is out of range");
    if (!d.isStatic()) {
      d = scale == 1 ? d : Dim::unknown();
      continue;
    }
    double o = std::floor(static_cast<double>(d.size) * scale);
    if (!(o < 9e15))
      return c.fail("upsampled size overflows");
    d = Dim::of(static_cast<int64_t>(o));
  }
  return one(Type::tensor(x->dtype(), std::move(out)));
}

Result resizeTargetImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  if (!x)
    return std::nullopt;
  if (x->rank() < 3)
    return c.fail("x rank " + std::to_string(x->rank()) + " is below 3");
  auto h = c.intParam("target_size_height"), w = c.intParam("target_size_width");
  if (!h || !w || *h < 1 || *w < 1)
    return c.fail("target sizes must be positive constants");
  std::vector<Dim> out = x->shape();
  out[out.size() - 2] = Dim::of(*h);
  out[out.size() - 1] = Dim::of(*w);
  return one(Type::tensor(x->dtype(), std::move(out)));
}

Result resizeImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  if (!x)
    return std::nullopt;
  auto n = c.intOr("resized_dims", 0);
  if (!c.has("resized_dims") || !n || *n < 0 || *n > x->rank())
    return c.fail("'resized_dims' must be a constant within the rank");
  std::vector<Dim> out = x->shape();
  ShapeArg s = shapeArg(c, "shape");
  size_t first = out.size() - static_cast<size_t>(*n);
  for (size_t i = first; i < out.size(); ++i) {
    // `shape` gives the new sizes of the last resized_dims dims, right-aligned.
    if (s.values && s.values->size() >= static_cast<size_t>(*n)) {
      int64_t v = (*s.values)[s.values->size() - out.size() + i];
      if (v < 0)
        return c.fail("negative target size");
      out[i] = Dim::of(v);
    } else {
      out[i] = Dim::unknown();
    }
  }
  return one(Type::tensor(x->dtype(), std::move(out)));
}

Result shapeImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x", false);
  if (!x)
    return std::nullopt;
  return one(Type::tensor(DType::I32, {x->hasRank() ? Dim::of(x->rank()) : Dim::unknown()}));
}

Result flatten2dImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  if (!x)
    return std::nullopt;
  auto axis = c.intParam("axis");
  if (!axis)
    return c.fail("'axis' must be a constant");
  auto a = normalizeAxis(*axis, x->rank(), /*orRank=*/true);
  if (!a)
    return axisError(c, *axis, x->rank());
  auto product = [&](size_t from, size_t to) -> std::optional<Dim> {
    int64_t p = 1;
    for (size_t i = from; i < to; ++i) {
      if (!x->shape()[i].isStatic())
        return Dim::unknown();
      auto m = mulChecked(p, x->shape()[i].size);
      if (!m)
        return std::nullopt;
      p = *m;
    }
    return Dim::of(p);
  };
  auto d0 = product(0, static_cast<size_t>(*a));
  auto d1 = product(static_cast<size_t>(*a), x->shape().size());
  if (!d0 || !d1)
    return c.fail("element count overflows");
  return one(Type::tensor(x->dtype(), {*d0, *d1}));
}

/// depth_to_space / pixel_shuffle (up = true) and space_to_depth / pixel_unshuffle.
Result blockRearrangeImpl(InferCtx &c, std::string_view param, bool up) {
  const Type *x = tensorParam(c, "x");
  if (!x)
    return std::nullopt;
  if (x->rank() != 4)
    return c.fail("x rank " + std::to_string(x->rank()) + " is not 4");
  auto b = c.intOr(param, 0);
  if (!c.has(param) || !b || *b < 1 || *b > 65536)
    return c.fail("'" + std::string(param) + "' must be a positive constant");
  auto bb = *b * *b;
  std::vector<Dim> s = x->shape();
  auto div = [&](Dim &d, int64_t k) -> bool {
    if (!d.isStatic()) {
      d = Dim::unknown();
      return true;
    }
    if (d.size % k != 0)
      return false;
    d = Dim::of(d.size / k);
    return true;
  };
  if (up) {
    if (!div(s[1], bb))
      return c.fail("channels " + s[1].str() + " are not divisible by " + std::to_string(bb));
    auto h = dimTimes(s[2], *b), w = dimTimes(s[3], *b);
    if (!h || !w)
      return c.fail("spatial size overflows");
    s[2] = *h;
    s[3] = *w;
  } else {
    if (!div(s[2], *b) || !div(s[3], *b))
      return c.fail("spatial dims " + shapeText(x->shape()) + " are not divisible by " +
                    std::to_string(*b));
    auto ch = dimTimes(s[1], bb);
    if (!ch)
      return c.fail("channels overflow");
    s[1] = *ch;
  }
  return one(Type::tensor(x->dtype(), std::move(s)));
}

Result oneHotImpl(InferCtx &c) {
  const Type *idx = tensorParam(c, "indices");
  if (!idx)
    return std::nullopt;
  auto axis = c.intParam("axis");
  if (!axis)
    return c.fail("'axis' must be a constant");
  auto na = normalizeAxis(*axis, idx->rank() + 1);
  if (!na)
    return axisError(c, *axis, idx->rank() + 1);
  Dim size = Dim::unknown();
  if (auto n = c.ints("one_hot_vector_size"); n && n->size() == 1) {
    if ((*n)[0] < 0)
      return c.fail("negative one_hot_vector_size");
    size = Dim::of((*n)[0]);
  }
  std::vector<Dim> out = idx->shape();
  out.insert(out.begin() + *na, size);
  const Type *on = c.type("on_value");
  return one(Type::tensor(on ? on->dtype() : DType::I32, std::move(out)));
}

Result slidingWindowsImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  if (!x)
    return std::nullopt;
  auto axis = c.intParam("axis");
  auto size = c.intParam("size");
  auto stride = c.intParam("stride");
  if (!c.has("axis") || !c.has("size") || !axis || !size || !stride || *size < 1 || *stride < 1)
    return c.fail("'axis', 'size' and 'stride' must be positive constants");
  auto na = normalizeAxis(*axis, x->rank());
  if (!na)
    return axisError(c, *axis, x->rank());
  std::vector<Dim> out(x->shape().begin(), x->shape().begin() + *na);
  const Dim &d = x->shape()[static_cast<size_t>(*na)];
  if (d.isStatic()) {
    if (d.size < *size)
      return c.fail("window " + std::to_string(*size) + " exceeds axis size " +
                    std::to_string(d.size));
    out.push_back(Dim::of((d.size - *size) / *stride + 1));
  } else {
    out.push_back(Dim::unknown());
  }
  out.push_back(Dim::of(*size));
  out.insert(out.end(), x->shape().begin() + *na + 1, x->shape().end());
  return one(Type::tensor(x->dtype(), std::move(out)));
}

Result cropImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  if (!x)
    return std::nullopt;
  if (x->rank() < 3)
    return c.fail("x rank " + std::to_string(x->rank()) + " is below 3");
  std::vector<Dim> out = x->shape();
  const char *names[2] = {"crop_height", "crop_width"};
  for (size_t i = 0; i < 2; ++i) {
    auto v = c.ints(names[i]);
    if (!v || v->size() != 2 || (*v)[0] < 0 || (*v)[1] < 0)
      return c.fail(std::string("'") + names[i] + "' must be two non-negative constants");
    Dim &d = out[out.size() - 2 + i];
    if (!d.isStatic()) {
      d = Dim::unknown();
      continue;
    }
    int64_t o = d.size - (*v)[0] - (*v)[1];
    if (o < 0)
      return c.fail(std::string(names[i]) + " removes more than the dim of size " +
                    std::to_string(d.size));
    d = Dim::of(o);
  }
  return one(Type::tensor(x->dtype(), std::move(out)));
}

} // namespace
} // namespace anefit::infer

namespace anefit {

ANEFIT_RULE(Reshape, reshapeImpl(c))
ANEFIT_RULE(Transpose, transposeImpl(c))
ANEFIT_RULE(ExpandDims, expandDimsImpl(c))
ANEFIT_RULE(Squeeze, squeezeImpl(c))
ANEFIT_RULE(Concat, concatImpl(c))
ANEFIT_RULE(Split, splitImpl(c))
ANEFIT_RULE(Stack, stackImpl(c))
ANEFIT_RULE(Pad, padImpl(c))
ANEFIT_RULE(Tile, tileImpl(c))
ANEFIT_RULE(Fill, fillImpl(c))
ANEFIT_RULE(FillLike, fillLikeImpl(c))
ANEFIT_RULE(Range1d, range1dImpl(c))
ANEFIT_RULE(Random, randomImpl(c))
ANEFIT_RULE(Upsample, upsampleImpl(c))
ANEFIT_RULE(ResizeTarget, resizeTargetImpl(c))
ANEFIT_RULE(Resize, resizeImpl(c))
ANEFIT_RULE(Shape, shapeImpl(c))
ANEFIT_RULE(Flatten2d, flatten2dImpl(c))
ANEFIT_RULE(DepthToSpace, blockRearrangeImpl(c, "block_size", true))
ANEFIT_RULE(SpaceToDepth, blockRearrangeImpl(c, "block_size", false))
ANEFIT_RULE(PixelShuffle, blockRearrangeImpl(c, "upscale_factor", true))
ANEFIT_RULE(PixelUnshuffle, blockRearrangeImpl(c, "downscale_factor", false))
ANEFIT_RULE(OneHot, oneHotImpl(c))
ANEFIT_RULE(SlidingWindows, slidingWindowsImpl(c))
ANEFIT_RULE(Crop, cropImpl(c))

} // namespace anefit
