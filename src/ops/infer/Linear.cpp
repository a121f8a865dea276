//===- Linear.cpp - Output types of conv, pooling and matmul ops ----------===//
//
// Ops that contract over weights or windows: conv and conv_transpose, the
// pools (they share the conv window arithmetic), linear, matmul, attention
// and einsum.
//
//===----------------------------------------------------------------------===//
#include "ops/infer/InferUtil.h"

#include <algorithm>
#include <map>

namespace anefit::infer {
namespace {

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

} // namespace
} // namespace anefit::infer

namespace anefit {

ANEFIT_RULE(Conv, convImpl(c))
ANEFIT_RULE(ConvTranspose, convTransposeImpl(c))
ANEFIT_RULE(Pool, poolImpl(c))
ANEFIT_RULE(Linear, linearImpl(c))
ANEFIT_RULE(Matmul, matmulImpl(c))
ANEFIT_RULE(Attention, attentionImpl(c))
ANEFIT_RULE(Einsum, einsumImpl(c))

} // namespace anefit
