//===- TypeInference.cpp - Output types of MIL ops ------------------------===//
//
// One inference rule per op family, named in Ops.def. Every rule reads its
// inputs through InferCtx, which looks parameters up in the op's inputs (and,
// for const and pre-iOS18 constexpr ops, in its attributes), reads constant
// values only when they are small, and does overflow-checked dim arithmetic so
// absurd shapes become errors rather than crashes.
//
//===----------------------------------------------------------------------===//
#include "ops/TypeInference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>

namespace anefit {

using Result = std::optional<std::vector<Type>>;

namespace {

/// Constants larger than this are not read for shape computation: shape-like
/// parameters are short, and a huge one would only be a malformed model.
constexpr uint64_t kMaxShapeConstElements = 1 << 16;

/// Element count of a static shape with overflow checking; nullopt if any
/// dim is not static or non-negative, or the product overflows.
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

/// True if `c` is a small numeric tensor constant whose values may be read.
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

class InferCtx {
public:
  InferCtx(const Operation &op, const OpDef &def, int ios, std::string &error)
      : op(op), def(def), ios(ios), error(error) {}

  const Operation &op;
  const OpDef &def;
  int ios;
  std::string &error;

  /// Records "optype: message" and returns an empty result.
  Result fail(const std::string &message) {
    error = op.type + ": " + message;
    return std::nullopt;
  }

  bool has(std::string_view p) const { return binding(p) || op.attribute(p); }

  /// The type of the first binding of `p` (value or constant), or null.
  const Type *type(std::string_view p) const {
    if (const Binding *b = binding(p))
      return b->isValue() ? &b->value->type : b->constant ? &b->constant->type : nullptr;
    if (const Constant *c = op.attribute(p))
      return &c->type;
    return nullptr;
  }

  /// Types of every binding of a variadic parameter.
  std::vector<const Type *> types(std::string_view p) const {
    std::vector<const Type *> out;
    if (const OpInput *in = op.input(p))
      for (const Binding &b : in->bindings) {
        if (b.isValue())
          out.push_back(&b.value->type);
        else if (b.constant)
          out.push_back(&b.constant->type);
      }
    return out;
  }

  /// The constant bound to `p` (immediate, const op output, or attribute).
  const Constant *constant(std::string_view p) const {
    if (const Constant *c = op.constInput(p))
      return c;
    return op.attribute(p);
  }

  /// Integer values of a small constant parameter; nullopt if not constant.
  std::optional<std::vector<int64_t>> ints(std::string_view p) const {
    const Constant *c = constant(p);
    if (!isSmallNumeric(c))
      return std::nullopt;
    try {
      return c->asInts();
    } catch (const std::exception &) {
      // A blob that cannot be read (missing weight file): treat as unknown.
      return std::nullopt;
    }
  }

  std::optional<std::vector<double>> doubles(std::string_view p) const {
    const Constant *c = constant(p);
    if (!isSmallNumeric(c))
      return std::nullopt;
    try {
      return c->asDoubles();
    } catch (const std::exception &) {
      return std::nullopt;
    }
  }

  /// A scalar integer parameter; `dflt` when absent, nullopt when present but not constant.
  std::optional<int64_t> intOr(std::string_view p, int64_t dflt) const {
    if (!has(p))
      return dflt;
    auto v = ints(p);
    if (!v || v->size() != 1)
      return std::nullopt;
    return (*v)[0];
  }

  std::optional<bool> boolOr(std::string_view p, bool dflt) const {
    auto v = intOr(p, dflt ? 1 : 0);
    if (!v)
      return std::nullopt;
    return *v != 0;
  }

  /// A scalar parameter; when absent, the default Ops.def gives it (nullopt
  /// when it gives none, or the value is not constant).
  std::optional<int64_t> intParam(std::string_view p) const {
    if (has(p))
      return intOr(p, 0);
    auto v = defaultAsNumber(def.paramDefault(p));
    if (!v)
      return std::nullopt;
    return static_cast<int64_t>(*v);
  }
  std::optional<bool> boolParam(std::string_view p) const {
    auto v = intParam(p);
    if (!v)
      return std::nullopt;
    return *v != 0;
  }
  std::optional<std::string> stringParam(std::string_view p) const {
    if (has(p))
      return stringOr(p, "");
    std::string_view text = def.paramDefault(p);
    if (text.empty())
      return std::nullopt;
    return std::string(text);
  }

  std::optional<std::string> stringOr(std::string_view p, std::string dflt) const {
    if (!has(p))
      return dflt;
    const Constant *c = constant(p);
    if (!c)
      return std::nullopt;
    return c->asString();
  }

private:
  const Binding *binding(std::string_view p) const {
    const OpInput *in = op.input(p);
    if (!in || in->bindings.empty())
      return nullptr;
    return &in->bindings[0];
  }
};

std::string shapeText(const std::vector<Dim> &shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + shape[i].str();
  return s + ")";
}

std::string typeText(const Type &t) { return t.shapeStr(); }

/// A tensor-typed parameter with a known rank, or an error.
const Type *tensorParam(InferCtx &c, std::string_view p, bool needRank = true) {
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

/// floor(a / b) for b > 0.
int64_t floorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int64_t ceilDiv(int64_t a, int64_t b) { return -floorDiv(-a, b); }

/// Dim `d` times static `k`: static stays static, anything else times 1 stays.
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

/// The more precise of two dims that must be equal; nullopt if two static dims differ.
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

//===----------------------------------------------------------------------===//
// Rules
//===----------------------------------------------------------------------===//

} // namespace

std::optional<std::vector<Dim>> broadcastShapes(const std::vector<Dim> &a,
                                                const std::vector<Dim> &b, std::string &error) {
  size_t n = std::max(a.size(), b.size());
  std::vector<Dim> out(n);
  for (size_t i = 0; i < n; ++i) {
    const Dim *da = i < n - a.size() ? nullptr : &a[i - (n - a.size())];
    const Dim *db = i < n - b.size() ? nullptr : &b[i - (n - b.size())];
    if (!da || !db) {
      out[i] = da ? *da : *db;
      continue;
    }
    if (da->isStatic() && da->size == 1) {
      out[i] = *db;
    } else if (db->isStatic() && db->size == 1) {
      out[i] = *da;
    } else if (da->isStatic() && db->isStatic()) {
      if (da->size != db->size) {
        error = "shapes " + shapeText(a) + " and " + shapeText(b) + " do not broadcast";
        return std::nullopt;
      }
      out[i] = *da;
    } else if (da->isStatic() || db->isStatic()) {
      // A non-static dim against a static one other than 1 must equal it.
      out[i] = da->isStatic() ? *da : *db;
    } else {
      out[i] = *da == *db ? *da : Dim::unknown();
    }
  }
  return out;
}

DType promoteDTypes(DType a, DType b) {
  if (a == b)
    return a;
  if (isFloat(a) != isFloat(b))
    return isFloat(a) ? a : b;
  if (a == DType::Bool)
    return b;
  if (b == DType::Bool)
    return a;
  return dtypeBits(a) >= dtypeBits(b) ? a : b;
}

bool typesCompatible(const Type &declared, const Type &inferred) {
  if (declared.kind() != inferred.kind())
    return false;
  switch (declared.kind()) {
  case Type::Kind::Tensor:
    break;
  case Type::Kind::State:
    return typesCompatible(declared.elementType(), inferred.elementType());
  case Type::Kind::List:
  case Type::Kind::Dict:
    return declared.elements().size() == inferred.elements().size();
  case Type::Kind::Tuple:
    if (declared.elements().size() != inferred.elements().size())
      return false;
    for (size_t i = 0; i < declared.elements().size(); ++i)
      if (!typesCompatible(declared.elements()[i], inferred.elements()[i]))
        return false;
    return true;
  }
  if (declared.dtype() != inferred.dtype())
    return false;
  if (!declared.hasRank() || !inferred.hasRank())
    return true;
  const auto &ds = declared.shape();
  const auto &is = inferred.shape();
  // A variadic dim stands for any number of dims.
  auto variadic = [](const std::vector<Dim> &s) {
    return std::any_of(s.begin(), s.end(),
                       [](const Dim &d) { return d.kind == Dim::Kind::Variadic; });
  };
  if (variadic(ds) || variadic(is))
    return true;
  if (ds.size() != is.size())
    return false;
  for (size_t i = 0; i < ds.size(); ++i)
    if (ds[i].isStatic() && is[i].isStatic() && ds[i].size != is[i].size)
      return false;
  return true;
}

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

/// Output spatial size of a conv/pool window. `padType` is valid, same,
/// same_lower or custom; `padBegin/padEnd` apply to custom.
std::optional<Dim> windowOut(InferCtx &c, const Dim &in, int64_t kernel, int64_t stride,
                             int64_t dilation, const std::string &padType, int64_t padBegin,
                             int64_t padEnd, bool ceilMode, size_t axis) {
  auto effK = mulChecked(kernel - 1, dilation);
  if (!effK || !(effK = addChecked(*effK, 1))) {
    c.fail("kernel size overflows");
    return std::nullopt;
  }
  if (padType == "same" || padType == "same_lower") {
    if (!in.isStatic())
      return stride == 1 ? in : Dim::unknown();
    return Dim::of(ceilDiv(in.size, stride));
  }
  int64_t pad = padType == "custom" ? padBegin + padEnd : 0;
  if (!in.isStatic())
    return (stride == 1 && *effK == 1 + pad) ? in : Dim::unknown();
  auto span = addChecked(in.size, pad);
  if (!span) {
    c.fail("spatial size overflows");
    return std::nullopt;
  }
  int64_t num = *span - *effK;
  int64_t out = (ceilMode ? ceilDiv(num, stride) : floorDiv(num, stride)) + 1;
  if (out <= 0) {
    c.fail("spatial dim " + std::to_string(axis) + " of size " + std::to_string(in.size) +
           " is smaller than the effective kernel " + std::to_string(*effK));
    return std::nullopt;
  }
  return Dim::of(out);
}

/// Reads an int list parameter of length `n` with a default of `dflt` for each element.
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

std::optional<std::string> padTypeOf(InferCtx &c, bool allowSameLower) {
  auto pt = c.stringParam("pad_type");
  if (!pt) {
    c.fail(c.has("pad_type") ? "'pad_type' must be a constant string" : "'pad_type' is required");
    return std::nullopt;
  }
  if (*pt != "valid" && *pt != "same" && *pt != "custom" && *pt != "same_lower") {
    c.fail("unknown pad_type '" + *pt + "'");
    return std::nullopt;
  }
  if (*pt == "same_lower" && !allowSameLower) {
    c.fail("pad_type 'same_lower' needs iOS16 or later");
    return std::nullopt;
  }
  return pt;
}

/// What conv and conv_transpose read alike: x and weight of one rank
/// (3 to 5), and a positive constant groups.
struct ConvOperands {
  const Type *x;
  const Type *w;
  size_t spatial; ///< spatial dims: rank - 2
  int64_t groups;
};

std::optional<ConvOperands> convOperands(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  const Type *w = x ? tensorParam(c, "weight") : nullptr;
  if (!x || !w)
    return std::nullopt;
  int64_t rank = x->rank();
  if (rank < 3 || rank > 5)
    return c.fail("x rank " + std::to_string(rank) + " is not 3, 4 or 5"), std::nullopt;
  if (w->rank() != rank)
    return c.fail("weight rank " + std::to_string(w->rank()) + " does not match x rank " +
                  std::to_string(rank)),
           std::nullopt;
  auto groups = c.intParam("groups");
  if (!groups || *groups < 1)
    return c.fail("'groups' must be a positive constant"), std::nullopt;
  return ConvOperands{x, w, static_cast<size_t>(rank - 2), *groups};
}

/// Strides, dilations, pad type and pad of a window over `n` spatial dims.
struct ConvWindow {
  std::vector<int64_t> strides, dilations, pad;
  std::string padType;
};

std::optional<ConvWindow> convWindow(InferCtx &c, size_t n, bool allowSameLower) {
  auto strides = intList(c, "strides", n, 1, 1);
  auto dil = strides ? intList(c, "dilations", n, 1, 1) : std::nullopt;
  auto padType = dil ? padTypeOf(c, allowSameLower) : std::nullopt;
  auto pad = padType ? intList(c, "pad", 2 * n, 0, 0) : std::nullopt;
  if (!pad)
    return std::nullopt;
  return ConvWindow{std::move(*strides), std::move(*dil), std::move(*pad), std::move(*padType)};
}

Result convImpl(InferCtx &c) {
  auto ops = convOperands(c);
  if (!ops)
    return std::nullopt;
  const Type *x = ops->x, *w = ops->w;
  size_t n = ops->spatial;
  int64_t groups = ops->groups;
  const Dim &cin = x->shape()[1];
  const Dim &wcin = w->shape()[1];
  if (cin.isStatic() && wcin.isStatic()) {
    auto expect = mulChecked(wcin.size, groups);
    if (!expect || *expect != cin.size)
      return c.fail("x has " + std::to_string(cin.size) + " channels but weight expects " +
                    std::to_string(wcin.size) + " x " + std::to_string(groups) + " groups");
  }
  auto win = convWindow(c, n, c.ios >= 16);
  if (!win)
    return std::nullopt;
  std::vector<Dim> out{x->shape()[0], w->shape()[0]};
  for (size_t i = 0; i < n; ++i) {
    const Dim &k = w->shape()[i + 2];
    if (!k.isStatic()) {
      out.push_back(Dim::unknown());
      continue;
    }
    auto d = windowOut(c, x->shape()[i + 2], k.size, win->strides[i], win->dilations[i],
                       win->padType, win->pad[2 * i], win->pad[2 * i + 1], false, i + 2);
    if (!d)
      return std::nullopt;
    out.push_back(*d);
  }
  return one(Type::tensor(x->dtype(), std::move(out)));
}

Result convTransposeImpl(InferCtx &c) {
  auto ops = convOperands(c);
  if (!ops)
    return std::nullopt;
  const Type *x = ops->x, *w = ops->w;
  size_t n = ops->spatial;
  int64_t rank = x->rank();
  int64_t groups = ops->groups;
  auto cout = dimTimes(w->shape()[1], groups);
  if (!cout)
    return c.fail("output channels overflow");
  if (c.has("output_shape")) {
    auto os = c.ints("output_shape");
    if (os && (os->size() == n || os->size() == static_cast<size_t>(rank))) {
      std::vector<Dim> out{x->shape()[0], *cout};
      for (size_t i = os->size() - n; i < os->size(); ++i) {
        if ((*os)[i] < 0)
          return c.fail("negative output_shape value");
        out.push_back(Dim::of((*os)[i]));
      }
      return one(Type::tensor(x->dtype(), std::move(out)));
    }
  }
  auto win = convWindow(c, n, true);
  if (!win)
    return std::nullopt;
  std::vector<Dim> out{x->shape()[0], *cout};
  for (size_t i = 0; i < n; ++i) {
    const Dim &in = x->shape()[i + 2];
    const Dim &k = w->shape()[i + 2];
    if (!in.isStatic() || !k.isStatic()) {
      out.push_back(Dim::unknown());
      continue;
    }
    int64_t s = win->strides[i];
    auto effK = mulChecked(k.size - 1, win->dilations[i]);
    auto base = mulChecked(s, in.size - 1);
    auto sameOut = mulChecked(s, in.size);
    if (!effK || !base || !sameOut)
      return c.fail("spatial size overflows");
    int64_t o;
    if (win->padType == "same" || win->padType == "same_lower")
      o = *sameOut;
    else
      o = *base + *effK + 1 -
          (win->padType == "custom" ? win->pad[2 * i] + win->pad[2 * i + 1] : 0);
    if (o <= 0)
      return c.fail("output spatial dim " + std::to_string(i + 2) + " would be " +
                    std::to_string(o));
    out.push_back(Dim::of(o));
  }
  return one(Type::tensor(x->dtype(), std::move(out)));
}

Result poolImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  if (!x)
    return std::nullopt;
  int64_t rank = x->rank();
  if (rank < 3 || rank > 5)
    return c.fail("x rank " + std::to_string(rank) + " is not 3, 4 or 5");
  size_t n = static_cast<size_t>(rank - 2);
  auto k = c.ints("kernel_sizes");
  if (!k || k->size() != n)
    return c.fail("'kernel_sizes' must be a constant with " + std::to_string(n) + " values");
  for (int64_t v : *k)
    if (v < 1)
      return c.fail("kernel size " + std::to_string(v) + " is not positive");
  auto strides = intList(c, "strides", n, 1, 1);
  auto padType = strides ? padTypeOf(c, true) : std::nullopt;
  auto pad = padType ? intList(c, "pad", 2 * n, 0, 0) : std::nullopt;
  auto ceilMode = pad ? c.boolParam("ceil_mode") : std::nullopt;
  if (!ceilMode)
    return pad ? c.fail("'ceil_mode' must be a constant") : std::nullopt;
  std::vector<Dim> out{x->shape()[0], x->shape()[1]};
  for (size_t i = 0; i < n; ++i) {
    auto d = windowOut(c, x->shape()[i + 2], (*k)[i], (*strides)[i], 1, *padType, (*pad)[2 * i],
                       (*pad)[2 * i + 1], *ceilMode, i + 2);
    if (!d)
      return std::nullopt;
    out.push_back(*d);
  }
  return one(Type::tensor(x->dtype(), std::move(out)));
}

Result linearImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  const Type *w = x ? tensorParam(c, "weight") : nullptr;
  if (!x || !w)
    return std::nullopt;
  if (x->rank() < 1)
    return c.fail("x must have rank >= 1");
  if (w->rank() != 2)
    return c.fail("weight rank " + std::to_string(w->rank()) + " is not 2");
  if (!unifyDims(x->shape().back(), w->shape()[1]))
    return c.fail("x last dim " + x->shape().back().str() + " does not match weight dim 1 " +
                  w->shape()[1].str());
  if (const Type *b = c.type("bias");
      b && b->hasRank() && b->rank() == 1 && !unifyDims(b->shape()[0], w->shape()[0]))
    return c.fail("bias size " + b->shape()[0].str() + " does not match weight dim 0 " +
                  w->shape()[0].str());
  std::vector<Dim> out = x->shape();
  out.back() = w->shape()[0];
  return one(Type::tensor(x->dtype(), std::move(out)));
}

Result matmulImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  const Type *y = x ? tensorParam(c, "y") : nullptr;
  if (!x || !y)
    return std::nullopt;
  auto tx = c.boolParam("transpose_x");
  auto ty = c.boolParam("transpose_y");
  if (!tx || !ty)
    return c.fail("transpose flags must be constants");
  std::vector<Dim> xs = x->shape(), ys = y->shape();
  if (xs.empty() || ys.empty())
    return c.fail("operands must have rank >= 1");
  // numpy: a rank-1 x is a row vector, a rank-1 y a column vector; the added
  // dim is dropped again from the result. Transposing a vector is a no-op.
  bool xVec = xs.size() == 1, yVec = ys.size() == 1;
  if (xVec)
    xs.insert(xs.begin(), Dim::of(1));
  else if (*tx)
    std::swap(xs[xs.size() - 1], xs[xs.size() - 2]);
  if (yVec)
    ys.push_back(Dim::of(1));
  else if (*ty)
    std::swap(ys[ys.size() - 1], ys[ys.size() - 2]);
  if (!unifyDims(xs.back(), ys[ys.size() - 2]))
    return c.fail("inner dims " + xs.back().str() + " and " + ys[ys.size() - 2].str() +
                  " do not match for x " + typeText(*x) + " and y " + typeText(*y));
  std::vector<Dim> xb(xs.begin(), xs.end() - 2), yb(ys.begin(), ys.end() - 2);
  std::string err;
  auto batch = broadcastShapes(xb, yb, err);
  if (!batch)
    return c.fail("batch dims: " + err);
  std::vector<Dim> out = *batch;
  if (!xVec)
    out.push_back(xs[xs.size() - 2]);
  if (!yVec)
    out.push_back(ys.back());
  DType dt = x->dtype();
  if (c.ios >= 17 && x->dtype() != y->dtype()) {
    // iOS17 allows one constant operand of another float type; the result
    // takes the dtype of the non-constant operand.
    bool xConst = c.constant("x") != nullptr, yConst = c.constant("y") != nullptr;
    if (xConst && !yConst)
      dt = y->dtype();
  }
  return one(Type::tensor(dt, std::move(out)));
}

/// Axes of a reduction: nullopt axes parameter means all axes.
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

} // namespace

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

namespace {

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

/// Values of an int shape-like parameter, or the count when only its length is known.
struct ShapeArg {
  std::optional<std::vector<int64_t>> values;
  std::optional<int64_t> length;
};

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

Result attentionImpl(InferCtx &c) {
  const Type *q = tensorParam(c, "query");
  const Type *k = q ? tensorParam(c, "key") : nullptr;
  const Type *v = k ? tensorParam(c, "value") : nullptr;
  if (!v)
    return std::nullopt;
  int64_t rank = q->rank();
  if (rank < 3)
    return c.fail("query rank " + std::to_string(rank) + " is below 3");
  if (k->rank() != rank || v->rank() != rank)
    return c.fail("query, key and value ranks differ (" + std::to_string(rank) + ", " +
                  std::to_string(k->rank()) + ", " + std::to_string(v->rank()) + ")");
  size_t r = static_cast<size_t>(rank);
  for (size_t i = 0; i + 2 < r; ++i)
    if (!unifyDims(q->shape()[i], k->shape()[i]) || !unifyDims(q->shape()[i], v->shape()[i]))
      return c.fail("batch dim " + std::to_string(i) + " differs between query " + typeText(*q) +
                    ", key " + typeText(*k) + " and value " + typeText(*v));
  if (!unifyDims(q->shape()[r - 1], k->shape()[r - 1]))
    return c.fail("query embedding " + q->shape()[r - 1].str() + " does not match key " +
                  k->shape()[r - 1].str());
  if (!unifyDims(k->shape()[r - 2], v->shape()[r - 2]))
    return c.fail("key length " + k->shape()[r - 2].str() + " does not match value length " +
                  v->shape()[r - 2].str());
  std::vector<Dim> out = q->shape();
  out.back() = v->shape().back();
  return one(Type::tensor(q->dtype(), std::move(out)));
}

const Type *stateParam(InferCtx &c, std::string_view p) {
  const Type *s = c.type(p);
  if (!s) {
    c.fail("missing input '" + std::string(p) + "'");
    return nullptr;
  }
  if (!s->isState()) {
    c.fail("input '" + std::string(p) + "' is a " + s->kindStr() + ", expected a state");
    return nullptr;
  }
  return s;
}

Result readStateImpl(InferCtx &c) {
  const Type *s = stateParam(c, "input");
  if (!s)
    return std::nullopt;
  return one(s->elementType());
}

Result writeStateImpl(InferCtx &c) {
  const Type *s = stateParam(c, "input");
  const Type *d = s ? tensorParam(c, "data", false) : nullptr;
  if (!d)
    return std::nullopt;
  if (!typesCompatible(s->elementType(), *d))
    return c.fail("data " + typeText(*d) + " does not match state " + typeText(s->elementType()));
  return std::vector<Type>{};
}

Result updateStateImpl(InferCtx &c) {
  const Type *s = stateParam(c, "state");
  const Type *v = s ? tensorParam(c, "value", false) : nullptr;
  if (!v)
    return std::nullopt;
  if (!typesCompatible(s->elementType(), *v))
    return c.fail("value " + typeText(*v) + " does not match state " + typeText(s->elementType()));
  return one(*v);
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

Result einsumImpl(InferCtx &c) {
  auto values = c.types("values");
  auto eq = c.stringOr("equation", "");
  if (!eq || eq->empty())
    return c.fail("'equation' must be a constant string");
  size_t arrow = eq->find("->");
  if (arrow == std::string::npos || eq->find("...") != std::string::npos || values.empty())
    return values.empty() ? c.fail("'values' is empty") : one(Type::unranked(values[0]->dtype()));
  std::vector<std::string> terms;
  std::string lhs = eq->substr(0, arrow);
  size_t start = 0;
  for (size_t i = 0; i <= lhs.size(); ++i)
    if (i == lhs.size() || lhs[i] == ',') {
      std::string t;
      for (char ch : lhs.substr(start, i - start))
        if (ch != ' ')
          t += ch;
      terms.push_back(t);
      start = i + 1;
    }
  if (terms.size() != values.size())
    return c.fail("equation has " + std::to_string(terms.size()) + " operands, got " +
                  std::to_string(values.size()));
  std::map<char, Dim> dims;
  for (size_t i = 0; i < terms.size(); ++i) {
    const Type *t = values[i];
    if (!t->isTensor() || !t->hasRank() || t->rank() != static_cast<int64_t>(terms[i].size()))
      return c.fail("operand " + std::to_string(i) + " does not have rank " +
                    std::to_string(terms[i].size()));
    for (size_t j = 0; j < terms[i].size(); ++j) {
      const Dim &d = t->shape()[j];
      auto [it, fresh] = dims.emplace(terms[i][j], d);
      if (fresh)
        continue;
      // A label of size 1 broadcasts against any size.
      if (it->second.isStatic() && it->second.size == 1)
        it->second = d;
      else if (!(d.isStatic() && d.size == 1)) {
        auto u = unifyDims(it->second, d);
        if (!u)
          return c.fail(std::string("label '") + terms[i][j] + "' has sizes " + it->second.str() +
                        " and " + d.str());
        it->second = *u;
      }
    }
  }
  std::vector<Dim> out;
  for (char ch : eq->substr(arrow + 2)) {
    if (ch == ' ')
      continue;
    auto it = dims.find(ch);
    if (it == dims.end())
      return c.fail(std::string("output label '") + ch + "' is not in any operand");
    out.push_back(it->second);
  }
  return one(Type::tensor(values[0]->dtype(), std::move(out)));
}

//===----------------------------------------------------------------------===//
// constexpr_* (weights decompressed at load time)
//===----------------------------------------------------------------------===//

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

//===----------------------------------------------------------------------===//
// Control flow and the less common ops
//===----------------------------------------------------------------------===//

Result condImpl(InferCtx &c) {
  if (c.op.blocks.size() != 2)
    return c.fail("has " + std::to_string(c.op.blocks.size()) + " blocks, expected 2");
  const Block &t = *c.op.blocks[0], &f = *c.op.blocks[1];
  if (t.outputs.size() != f.outputs.size())
    return c.fail("the true block returns " + std::to_string(t.outputs.size()) +
                  " values, the false block " + std::to_string(f.outputs.size()));
  std::vector<Type> out;
  for (size_t i = 0; i < t.outputs.size(); ++i) {
    const Type &a = t.outputs[i]->type, &b = f.outputs[i]->type;
    if (!typesCompatible(a, b) && !typesCompatible(b, a))
      return c.fail("branch result " + std::to_string(i) + " is " + a.str() +
                    " in the true block but " + b.str() + " in the false block");
    out.push_back(a);
  }
  return out;
}

Result whileLoopImpl(InferCtx &c) {
  if (c.op.blocks.size() != 2)
    return c.fail("has " + std::to_string(c.op.blocks.size()) + " blocks, expected 2");
  std::vector<Type> out;
  for (const Value *v : c.op.blocks[1]->outputs)
    out.push_back(v->type);
  return out;
}

Result nonZeroImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  if (!x)
    return std::nullopt;
  return one(Type::tensor(DType::I32, {Dim::unknown(), Dim::of(x->rank())}));
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

/// gru, rnn, lstm: x is [seq, batch, input]; the hidden size is weight_hh's
/// last dim (it multiplies the hidden state in every variant).
Result recurrentImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  const Type *whh = x ? tensorParam(c, "weight_hh") : nullptr;
  if (!whh)
    return std::nullopt;
  if (x->rank() != 3)
    return c.fail("x rank " + std::to_string(x->rank()) + " is not 3 (seq, batch, input)");
  if (whh->rank() != 2)
    return c.fail("weight_hh rank " + std::to_string(whh->rank()) + " is not 2");
  auto direction = c.stringParam("direction");
  auto outputSequence = c.boolParam("output_sequence");
  if (!direction || !outputSequence)
    return c.fail("'direction' and 'output_sequence' must be constants");
  int64_t factor = *direction == "bidirectional" ? 2 : 1;
  if (factor == 2 && c.op.type != "lstm")
    return c.fail("direction 'bidirectional' is only supported by lstm");
  auto hidden = dimTimes(whh->shape()[1], factor);
  if (!hidden)
    return c.fail("hidden size overflows");
  const Dim &seq = x->shape()[0], &batch = x->shape()[1];
  std::vector<Type> outs{
      Type::tensor(x->dtype(), {*outputSequence ? seq : Dim::of(1), batch, *hidden}),
      Type::tensor(x->dtype(), {batch, *hidden})};
  if (c.op.type == "lstm")
    outs.push_back(Type::tensor(x->dtype(), {batch, *hidden}));
  return outs;
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

} // namespace

//===----------------------------------------------------------------------===//
// Rule entry points named by Ops.def
//===----------------------------------------------------------------------===//

#define ANEFIT_RULE(Name, Body)                                                                    \
  Result infer##Name(const Operation &op, const OpDef &def, int ios, std::string &error) {         \
    InferCtx c(op, def, ios, error);                                                               \
    return Body;                                                                                   \
  }

Result inferNone(const Operation &, const OpDef &, int, std::string &) { return std::nullopt; }
Result inferConst(const Operation &op, const OpDef &, int, std::string &error) {
  const Constant *val = op.attribute("val");
  if (!val) {
    error = op.type + ": missing attribute 'val'";
    return std::nullopt;
  }
  return one(val->type);
}
ANEFIT_RULE(SameAsFirst, inferSameAsFirstImpl(c))
ANEFIT_RULE(Binary, binaryImpl(c, false))
ANEFIT_RULE(Compare, binaryImpl(c, true))
ANEFIT_RULE(Cast, castImpl(c))
ANEFIT_RULE(Linear, linearImpl(c))
ANEFIT_RULE(Matmul, matmulImpl(c))
ANEFIT_RULE(Conv, convImpl(c))
ANEFIT_RULE(ConvTranspose, convTransposeImpl(c))
ANEFIT_RULE(Pool, poolImpl(c))
ANEFIT_RULE(Reduce, reduceImpl(c))
ANEFIT_RULE(ReduceArg, reduceArgImpl(c))
ANEFIT_RULE(Reshape, reshapeImpl(c))
ANEFIT_RULE(Transpose, transposeImpl(c))
ANEFIT_RULE(ExpandDims, expandDimsImpl(c))
ANEFIT_RULE(Squeeze, squeezeImpl(c))
ANEFIT_RULE(Concat, concatImpl(c))
ANEFIT_RULE(Split, splitImpl(c))
ANEFIT_RULE(Stack, stackImpl(c))
ANEFIT_RULE(SliceByIndex, sliceByIndexImpl(c))
ANEFIT_RULE(SliceBySize, sliceBySizeImpl(c))
ANEFIT_RULE(SliceUpdate, sliceUpdateImpl(c))
ANEFIT_RULE(Gather, gatherImpl(c))
ANEFIT_RULE(GatherAlongAxis, gatherAlongAxisImpl(c))
ANEFIT_RULE(GatherNd, gatherNdImpl(c))
ANEFIT_RULE(Scatter, scatterImpl(c, 0))
ANEFIT_RULE(ScatterAlongAxis, scatterImpl(c, 1))
ANEFIT_RULE(ScatterNd, scatterImpl(c, 2))
ANEFIT_RULE(Pad, padImpl(c))
ANEFIT_RULE(Tile, tileImpl(c))
ANEFIT_RULE(Select, selectImpl(c))
ANEFIT_RULE(Fill, fillImpl(c))
ANEFIT_RULE(FillLike, fillLikeImpl(c))
ANEFIT_RULE(Range1d, range1dImpl(c))
ANEFIT_RULE(TopK, topkImpl(c))
ANEFIT_RULE(Argsort, argsortImpl(c))
ANEFIT_RULE(Attention, attentionImpl(c))
ANEFIT_RULE(ReadState, readStateImpl(c))
ANEFIT_RULE(WriteState, writeStateImpl(c))
ANEFIT_RULE(UpdateState, updateStateImpl(c))
ANEFIT_RULE(Upsample, upsampleImpl(c))
ANEFIT_RULE(ResizeTarget, resizeTargetImpl(c))
ANEFIT_RULE(Resize, resizeImpl(c))
ANEFIT_RULE(Shape, shapeImpl(c))
ANEFIT_RULE(Flatten2d, flatten2dImpl(c))
ANEFIT_RULE(DepthToSpace, blockRearrangeImpl(c, "block_size", true))
ANEFIT_RULE(SpaceToDepth, blockRearrangeImpl(c, "block_size", false))
ANEFIT_RULE(PixelShuffle, blockRearrangeImpl(c, "upscale_factor", true))
ANEFIT_RULE(PixelUnshuffle, blockRearrangeImpl(c, "downscale_factor", false))
ANEFIT_RULE(LayerNorm, layerNormImpl(c))
ANEFIT_RULE(Einsum, einsumImpl(c))
ANEFIT_RULE(ConstexprAffineDequantize, constexprAffineImpl(c))
ANEFIT_RULE(ConstexprCast, constexprCastImpl(c))
ANEFIT_RULE(ConstexprLutToDense, constexprLutImpl(c))
ANEFIT_RULE(ConstexprSparseToDense, constexprSparseImpl(c))
ANEFIT_RULE(ConstexprBlockwiseShiftScale, constexprBlockwiseImpl(c))
ANEFIT_RULE(ConstexprLutToSparse, constexprLutToSparseImpl(c))
ANEFIT_RULE(ConstexprSparseBlockwiseShiftScale, constexprSparseBlockwiseImpl(c))
ANEFIT_RULE(Quantize, quantizeImpl(c))
ANEFIT_RULE(Cond, condImpl(c))
ANEFIT_RULE(WhileLoop, whileLoopImpl(c))
ANEFIT_RULE(NonZero, nonZeroImpl(c))
ANEFIT_RULE(OneHot, oneHotImpl(c))
ANEFIT_RULE(SlidingWindows, slidingWindowsImpl(c))
ANEFIT_RULE(Crop, cropImpl(c))
ANEFIT_RULE(Random, randomImpl(c))
ANEFIT_RULE(Recurrent, recurrentImpl(c))
ANEFIT_RULE(Dequantize, dequantizeImpl(c))

#undef ANEFIT_RULE

std::optional<std::vector<Type>> inferOutputTypes(const Operation &op, int iosVersion,
                                                  std::string &error) {
  error.clear();
  const OpDef *def = findOp(op.type, iosVersion);
  if (!def)
    return std::nullopt;
  if (!def->infer) {
    std::vector<Type> declared;
    for (const auto &v : op.outputs)
      declared.push_back(v->type);
    return declared;
  }
  try {
    auto types = def->infer(op, *def, iosVersion, error);
    if (!types && error.empty()) {
      // An input of unknown rank: nothing more precise than the declaration.
      std::vector<Type> declared;
      for (const auto &v : op.outputs)
        declared.push_back(v->type);
      return declared;
    }
    return types;
  } catch (const std::exception &e) {
    // Reading a constant can fail on a malformed weight file; report, never crash.
    error = op.type + ": " + e.what();
    return std::nullopt;
  }
}

} // namespace anefit
