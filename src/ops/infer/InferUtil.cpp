//===- InferUtil.cpp - Helpers shared by the inference rule families ------===//
//
// Checked dim arithmetic and the parameter readers of InferUtil.h.
//
//===----------------------------------------------------------------------===//
#include "ops/infer/InferUtil.h"

namespace anefit::infer {

std::optional<int64_t> checkedCount(const Type &t) {
  if (!t.isTensor() || !t.hasRank())
    return std::nullopt;
  int64_t n = 1;
  for (const Dim &d : t.shape()) {
    if (!d.isStatic() || d.size < 0 || __builtin_mul_overflow(n, d.size, &n))
      return std::nullopt;
  }
  return n;
}

bool isSmallNumeric(const Constant *c) {
  if (!c || !c->isTensorLike() || c->type.dtype() == DType::String)
    return false;
  auto n = checkedCount(c->type);
  if (!n || static_cast<uint64_t>(*n) > kMaxShapeConstElements)
    return false;
  // An immediate whose bytes do not cover its type is malformed; do not read it.
  return c->kind != Constant::Kind::Tensor ||
         c->bytes.size() >= storageBytes(c->type.dtype(), static_cast<uint64_t>(*n));
}

std::string shapeText(const std::vector<Dim> &shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + shape[i].str();
  return s + ")";
}

std::string typeText(const Type &t) { return t.shapeStr(); }

const Type *tensorParam(InferCtx &c, std::string_view p, bool needRank) {
  const Type *t = c.type(p);
  if (!t) {
    c.fail("missing input '" + std::string(p) + "'");
    return nullptr;
  }
  if (!t->isTensor()) {
    c.fail("input '" + std::string(p) + "' is a " + t->kindStr() + ", expected a tensor");
    return nullptr;
  }
  if (needRank && !t->hasRank()) {
    c.error.clear();
    return nullptr;
  }
  return t;
}

Result axisError(InferCtx &c, int64_t axis, int64_t rank) {
  return c.fail("axis " + std::to_string(axis) + " is out of range for rank " +
                std::to_string(rank));
}

std::optional<int64_t> mulChecked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

std::optional<int64_t> addChecked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

std::optional<Dim> dimTimes(const Dim &d, int64_t k) {
  if (k == 1)
    return d;
  if (!d.isStatic())
    return Dim::unknown();
  auto r = mulChecked(d.size, k);
  if (!r)
    return std::nullopt;
  return Dim::of(*r);
}

std::optional<Dim> unifyDims(const Dim &a, const Dim &b) {
  if (a.isStatic() && b.isStatic())
    return a.size == b.size ? std::optional<Dim>(a) : std::nullopt;
  if (a.isStatic())
    return a;
  if (b.isStatic())
    return b;
  if (a == b)
    return a;
  return a.kind == Dim::Kind::Symbolic ? a : b;
}

Result one(Type t) { return std::vector<Type>{std::move(t)}; }

std::optional<std::vector<int64_t>> intList(InferCtx &c, std::string_view p, size_t n, int64_t dflt,
                                            int64_t minValue) {
  if (!c.has(p))
    return std::vector<int64_t>(n, dflt);
  auto v = c.ints(p);
  if (!v) {
    c.fail("'" + std::string(p) + "' must be a constant");
    return std::nullopt;
  }
  if (v->size() != n) {
    c.fail("'" + std::string(p) + "' has " + std::to_string(v->size()) + " values, expected " +
           std::to_string(n));
    return std::nullopt;
  }
  for (int64_t x : *v)
    if (x < minValue) {
      c.fail("'" + std::string(p) + "' value " + std::to_string(x) + " is below " +
             std::to_string(minValue));
      return std::nullopt;
    }
  return v;
}

ShapeArg shapeArg(InferCtx &c, std::string_view p) {
  ShapeArg a;
  a.values = c.ints(p);
  if (a.values) {
    a.length = static_cast<int64_t>(a.values->size());
  } else if (const Type *t = c.type(p); t && t->isTensor() && t->hasRank() && t->rank() == 1 &&
                                        t->shape()[0].isStatic() && t->shape()[0].size >= 0 &&
                                        t->shape()[0].size <= 64) {
    // Only the length is known; shape-like parameters never exceed a few dims.
    a.length = t->shape()[0].size;
  }
  return a;
}

std::optional<std::vector<bool>> reduceAxes(InferCtx &c, int64_t rank, std::string_view p) {
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  if (!c.has(p)) {
    std::fill(reduced.begin(), reduced.end(), true);
    return reduced;
  }
  auto axes = c.ints(p);
  if (!axes) {
    c.fail("'" + std::string(p) + "' must be a constant");
    return std::nullopt;
  }
  for (int64_t a : *axes) {
    auto na = normalizeAxis(a, rank);
    if (!na) {
      axisError(c, a, rank);
      return std::nullopt;
    }
    reduced[static_cast<size_t>(*na)] = true;
  }
  return reduced;
}

} // namespace anefit::infer
