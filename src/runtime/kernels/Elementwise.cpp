//===- Elementwise.cpp - Elementwise, activation and cast kernels ---------===//
//
// Binary ops broadcast numpy-style; unary ops and activations map each
// element. Float work is fp32; int32 and bool work is exact.
//
//===----------------------------------------------------------------------===//
#include "ops/TypeInference.h"
#include "runtime/kernels/KernelUtil.h"
#include "support/IntMath.h"

#include <array>
#include <cmath>
#include <cstring>

namespace anefit::runtime {
namespace {

/// out[r * inner + i] = f(x, y) over `outer` rows of `inner` elements, each
/// side read as its BroadcastKind says (Same: its own row, Row: the one row,
/// Scalar / PerRow: one value for the row): plain loops the compiler can
/// vectorize, no index per element.
template <BroadcastKind A, BroadcastKind B, typename T, typename R, typename F>
void mapRows(const T *a, const T *b, R *o, int64_t outer, int64_t inner, F &f) {
  for (int64_t r = 0; r < outer; ++r) {
    R *out = o + r * inner;
    const T *ar = A == BroadcastKind::Same ? a + r * inner : a;
    const T *br = B == BroadcastKind::Same ? b + r * inner : b;
    if constexpr (A == BroadcastKind::Scalar || A == BroadcastKind::PerRow) {
      const T av = a[A == BroadcastKind::Scalar ? 0 : r];
      for (int64_t i = 0; i < inner; ++i)
        out[i] = f(av, br[i]);
    } else if constexpr (B == BroadcastKind::Scalar || B == BroadcastKind::PerRow) {
      const T bv = b[B == BroadcastKind::Scalar ? 0 : r];
      for (int64_t i = 0; i < inner; ++i)
        out[i] = f(ar[i], bv);
    } else {
      for (int64_t i = 0; i < inner; ++i)
        out[i] = f(ar[i], br[i]);
    }
  }
}

/// One side of x, y is the whole output shape (`Same`), the other one of
/// the patterns mapRows reads (the Same side's kind is `A`/`B` below).
template <typename T, typename R, typename F>
bool mapFast(const T *a, BroadcastPattern pa, const T *b, BroadcastPattern pb, R *o, int64_t n,
             F &f) {
  using K = BroadcastKind;
  if (pa.kind == K::Same) {
    switch (pb.kind) {
    case K::Same:
      mapRows<K::Same, K::Same>(a, b, o, 1, n, f);
      return true;
    case K::Scalar:
      mapRows<K::Same, K::Scalar>(a, b, o, 1, n, f);
      return true;
    case K::Row:
      mapRows<K::Same, K::Row>(a, b, o, n / pb.inner, pb.inner, f);
      return true;
    case K::PerRow:
      mapRows<K::Same, K::PerRow>(a, b, o, n / pb.inner, pb.inner, f);
      return true;
    case K::General:
      return false;
    }
  }
  if (pb.kind == K::Same) {
    switch (pa.kind) {
    case K::Scalar:
      mapRows<K::Scalar, K::Same>(a, b, o, 1, n, f);
      return true;
    case K::Row:
      mapRows<K::Row, K::Same>(a, b, o, n / pa.inner, pa.inner, f);
      return true;
    case K::PerRow:
      mapRows<K::PerRow, K::Same>(a, b, o, n / pa.inner, pa.inner, f);
      return true;
    default:
      return false;
    }
  }
  return false;
}

/// Strides (in elements) of a tensor of shape `in` broadcast to `out`,
/// aligned to `out`'s dims: 0 along the dims it is broadcast over.
std::vector<int64_t> alignedStrides(const Shape &in, const Shape &out) {
  std::vector<int64_t> stride(out.size(), 0), own = stridesOf(in);
  size_t off = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d)
    if (in[d] != 1)
      stride[d + off] = own[d];
  return stride;
}

/// Calls row(r, offsets...) for each run of `shape`'s last axis (row r of
/// shape.back() elements), with each operand's offset of that run, by an
/// odometer over the other axes; `strides` are the operands' aligned
/// strides. Empty shapes (a scalar) are one run of one element.
template <size_t N, typename Row>
void forEachRun(const Shape &shape, const std::array<std::vector<int64_t>, N> &strides, Row &&row) {
  int64_t rank = static_cast<int64_t>(shape.size());
  int64_t inner = rank ? shape.back() : 1, n = numElementsOf(shape);
  if (n == 0)
    return;
  std::vector<int64_t> idx(static_cast<size_t>(std::max<int64_t>(rank, 1)), 0);
  std::array<int64_t, N> off{};
  for (int64_t r = 0; r * inner < n; ++r) {
    row(r, off);
    for (int64_t d = rank - 2; d >= 0; --d) {
      auto du = static_cast<size_t>(d);
      for (size_t k = 0; k < N; ++k)
        off[k] += strides[k][du];
      if (++idx[du] < shape[du])
        break;
      for (size_t k = 0; k < N; ++k)
        off[k] -= strides[k][du] * shape[du];
      idx[du] = 0;
    }
  }
}

/// out[i] = f(x[i'], y[i'']) for any broadcast, run by run along the last
/// axis: there each side is either contiguous or one value (a mask over
/// rows, a scale per channel), so each run is a plain loop the compiler
/// vectorizes, and no index is kept per element.
template <typename T, typename R, typename F>
void binaryMapRuns(const Shape &xs, const T *a, const Shape &ys, const T *b, const Shape &shape,
                   R *o, F &f) {
  std::array<std::vector<int64_t>, 2> strides = {alignedStrides(xs, shape),
                                                 alignedStrides(ys, shape)};
  int64_t inner = shape.empty() ? 1 : shape.back();
  bool av = shape.empty() || strides[0].back() != 0, bv = shape.empty() || strides[1].back() != 0;
  forEachRun(shape, strides, [&](int64_t r, const std::array<int64_t, 2> &off) {
    const T *ar = a + off[0], *br = b + off[1];
    R *out = o + r * inner;
    if (av && bv)
      for (int64_t i = 0; i < inner; ++i)
        out[i] = f(ar[i], br[i]);
    else if (av)
      for (int64_t i = 0; i < inner; ++i)
        out[i] = f(ar[i], br[0]);
    else if (bv)
      for (int64_t i = 0; i < inner; ++i)
        out[i] = f(ar[0], br[i]);
    else
      for (int64_t i = 0; i < inner; ++i)
        out[i] = f(ar[0], br[0]);
  });
}

/// out[i] = f(x[i'], y[i'']) over the broadcast shape of x and y.
template <typename T, typename R, typename F>
Tensor binaryMap(KernelContext &ctx, const Tensor &x, const Tensor &y, DType outDType, F f) {
  Shape shape = broadcastShapes(ctx, x.shape(), y.shape());
  const T *a = x.data<T>();
  const T *b = y.data<T>();
  int64_t n = numElementsOf(shape);
  Tensor out = Tensor::empty(outDType, shape);
  R *o = out.mutableData<R>();
  if (!mapFast(a, broadcastPattern(x.shape(), shape), b, broadcastPattern(y.shape(), shape), o, n,
               f))
    binaryMapRuns(x.shape(), a, y.shape(), b, shape, o, f);
  return out;
}

/// Arithmetic in the output's compute dtype (fp32 or int32).
template <typename Op> void arith(KernelContext &ctx, Op op) {
  DType t = computeDType(ctx.outputType().dtype());
  const Tensor *x = &ctx.in("x"), *y = &ctx.in("y");
  Tensor cx, cy;
  if (x->dtype() != t)
    x = &(cx = x->convertTo(t));
  if (y->dtype() != t)
    y = &(cy = y->convertTo(t));
  if (t == DType::F32)
    ctx.setOutput(0, binaryMap<float, float>(ctx, *x, *y, t, op));
  else if (t == DType::I32)
    ctx.setOutput(0, binaryMap<int32_t, int32_t>(ctx, *x, *y, t, op));
  else
    ctx.fail("arithmetic on dtype " + std::string(dtypeName(t)));
}

/// Comparison in the inputs' dtype; bool result.
template <typename Op> void compare(KernelContext &ctx, Op op) {
  const Tensor &x = ctx.in("x"), &y = ctx.in("y");
  if (x.dtype() != y.dtype())
    ctx.fail("x and y have different dtypes");
  dispatchCompute(ctx, x.dtype(), [&]<typename T>() {
    ctx.setOutput(0, binaryMap<T, uint8_t>(ctx, x, y, DType::Bool,
                                           [&](T a, T b) -> uint8_t { return op(a, b) ? 1 : 0; }));
  });
}

template <typename Op> void logical(KernelContext &ctx, Op op) {
  const Tensor &x = ctx.in("x"), &y = ctx.in("y");
  if (x.dtype() != DType::Bool || y.dtype() != DType::Bool)
    ctx.fail("logical ops take bool inputs");
  ctx.setOutput(0, binaryMap<uint8_t, uint8_t>(ctx, x, y, DType::Bool, [&](uint8_t a, uint8_t b) {
                  return static_cast<uint8_t>(op(a != 0, b != 0) ? 1 : 0);
                }));
}

/// out[i] = f(x[i]) for a float-only op.
template <typename F> void unaryFloat(KernelContext &ctx, F f) {
  const Tensor &x = ctx.in("x");
  if (x.dtype() != DType::F32)
    ctx.fail("expected a float input, found " + std::string(dtypeName(x.dtype())));
  Tensor out = Tensor::empty(DType::F32, x.shape());
  const float *a = x.data<float>();
  float *o = out.mutableData<float>();
  for (int64_t i = 0, n = x.numElements(); i < n; ++i)
    o[i] = f(a[i]);
  ctx.setOutput(0, std::move(out));
}

/// out[i] = f(x[i]) for an op defined on fp32 and int32.
template <typename F> void unaryNumeric(KernelContext &ctx, F f) {
  const Tensor &x = ctx.in("x");
  Tensor out = Tensor::empty(x.dtype(), x.shape());
  if (x.dtype() == DType::F32) {
    const float *a = x.data<float>();
    float *o = out.mutableData<float>();
    for (int64_t i = 0, n = x.numElements(); i < n; ++i)
      o[i] = f(a[i]);
  } else if (x.dtype() == DType::I32) {
    const int32_t *a = x.data<int32_t>();
    int32_t *o = out.mutableData<int32_t>();
    for (int64_t i = 0, n = x.numElements(); i < n; ++i)
      o[i] = f(a[i]);
  } else {
    ctx.fail("expected a numeric input, found " + std::string(dtypeName(x.dtype())));
  }
  ctx.setOutput(0, std::move(out));
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

/// Per-channel parameter (axis 1 of x) for prelu and softplus_parametric.
std::vector<float> channelParam(KernelContext &ctx, std::string_view param, const Tensor &x) {
  if (x.rank() < 3)
    ctx.fail("x must have rank >= 3, found rank " + std::to_string(x.rank()));
  std::vector<float> v = ctx.in(param).toFloats();
  if (static_cast<int64_t>(v.size()) == 1) {
    float only = v[0]; // not v[0] itself: assign may free it before reading it
    v.assign(static_cast<size_t>(x.dim(1)), only);
  }
  if (static_cast<int64_t>(v.size()) != x.dim(1))
    ctx.fail("parameter '" + std::string(param) + "' has " + std::to_string(v.size()) +
             " values, expected " + std::to_string(x.dim(1)) + " (channels)");
  return v;
}

template <typename F> void perChannel(KernelContext &ctx, const std::vector<float> &p, F f) {
  const Tensor &x = ctx.in("x");
  Tensor out = Tensor::zeros(DType::F32, x.shape());
  AxisSplit s = splitAt(x.shape(), 1);
  const float *a = x.data<float>();
  float *o = out.mutableData<float>();
  for (int64_t b = 0; b < s.outer; ++b)
    for (int64_t c = 0; c < s.size; ++c)
      for (int64_t i = 0; i < s.inner; ++i) {
        int64_t k = (b * s.size + c) * s.inner + i;
        o[k] = f(a[k], c);
      }
  ctx.setOutput(0, std::move(out));
}

int32_t floorDivInt(int32_t a, int32_t b) {
  return b == 0 ? 0 : floorDiv(a, b); // 0 defined here rather than undefined behaviour
}

} // namespace

// Binary arithmetic.
void addOp(KernelContext &ctx) {
  arith(ctx, [](auto a, auto b) { return a + b; });
}
void subOp(KernelContext &ctx) {
  arith(ctx, [](auto a, auto b) { return a - b; });
}
void mulOp(KernelContext &ctx) {
  arith(ctx, [](auto a, auto b) { return a * b; });
}
void realDivOp(KernelContext &ctx) {
  arith(ctx, []<typename T>(T a, T b) -> T {
    if constexpr (std::is_integral_v<T>)
      return b == 0 ? 0 : a / b;
    else
      return a / b;
  });
}
void floorDivOp(KernelContext &ctx) {
  arith(ctx, []<typename T>(T a, T b) -> T {
    if constexpr (std::is_integral_v<T>)
      return floorDivInt(a, b);
    else
      return std::floor(a / b);
  });
}
void modOp(KernelContext &ctx) {
  // Result takes the sign of the divisor (numpy's mod).
  arith(ctx, []<typename T>(T a, T b) -> T {
    if constexpr (std::is_integral_v<T>)
      return b == 0 ? 0 : a - floorDivInt(a, b) * b;
    else
      return a - std::floor(a / b) * b;
  });
}
void powOp(KernelContext &ctx) {
  arith(ctx, []<typename T>(T a, T b) -> T {
    if constexpr (std::is_integral_v<T>) {
      if (b < 0)
        return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
      int64_t r = 1;
      for (int32_t i = 0; i < b && i < 64; ++i)
        r = static_cast<int32_t>(r * a);
      return static_cast<T>(r);
    } else {
      return std::pow(a, b);
    }
  });
}
void maximumOp(KernelContext &ctx) {
  arith(ctx, [](auto a, auto b) { return a > b ? a : b; });
}
void minimumOp(KernelContext &ctx) {
  arith(ctx, [](auto a, auto b) { return a < b ? a : b; });
}

// Comparisons and logic.
void equalOp(KernelContext &ctx) {
  compare(ctx, [](auto a, auto b) { return a == b; });
}
void notEqualOp(KernelContext &ctx) {
  compare(ctx, [](auto a, auto b) { return a != b; });
}
void lessOp(KernelContext &ctx) {
  compare(ctx, [](auto a, auto b) { return a < b; });
}
void lessEqualOp(KernelContext &ctx) {
  compare(ctx, [](auto a, auto b) { return a <= b; });
}
void greaterOp(KernelContext &ctx) {
  compare(ctx, [](auto a, auto b) { return a > b; });
}
void greaterEqualOp(KernelContext &ctx) {
  compare(ctx, [](auto a, auto b) { return a >= b; });
}
void logicalAndOp(KernelContext &ctx) {
  logical(ctx, [](bool a, bool b) { return a && b; });
}
void logicalOrOp(KernelContext &ctx) {
  logical(ctx, [](bool a, bool b) { return a || b; });
}
void logicalXorOp(KernelContext &ctx) {
  logical(ctx, [](bool a, bool b) { return a != b; });
}
void logicalNotOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  if (x.dtype() != DType::Bool)
    ctx.fail("logical_not takes a bool input");
  Tensor out = Tensor::zeros(DType::Bool, x.shape());
  for (int64_t i = 0; i < x.numElements(); ++i)
    out.mutableData<uint8_t>()[i] = x.data<uint8_t>()[i] ? 0 : 1;
  ctx.setOutput(0, std::move(out));
}

// Unary math.
void absOp(KernelContext &ctx) {
  unaryNumeric(ctx, [](auto a) { return a < 0 ? -a : a; });
}
void squareOp(KernelContext &ctx) {
  unaryNumeric(ctx, [](auto a) { return a * a; });
}
void signOp(KernelContext &ctx) {
  unaryNumeric(ctx, []<typename T>(T a) -> T { return a > 0 ? T(1) : (a < 0 ? T(-1) : T(0)); });
}
void acosOp(KernelContext &ctx) {
  unaryFloat(ctx, [](float a) { return std::acos(a); });
}
void asinOp(KernelContext &ctx) {
  unaryFloat(ctx, [](float a) { return std::asin(a); });
}
void atanOp(KernelContext &ctx) {
  unaryFloat(ctx, [](float a) { return std::atan(a); });
}
void atanhOp(KernelContext &ctx) {
  unaryFloat(ctx, [](float a) { return std::atanh(a); });
}
void ceilOp(KernelContext &ctx) {
  unaryFloat(ctx, [](float a) { return std::ceil(a); });
}
void cosOp(KernelContext &ctx) {
  unaryFloat(ctx, [](float a) { return std::cos(a); });
}
void coshOp(KernelContext &ctx) {
  unaryFloat(ctx, [](float a) { return std::cosh(a); });
}
void erfOp(KernelContext &ctx) {
  unaryFloat(ctx, [](float a) { return std::erf(a); });
}
void expOp(KernelContext &ctx) {
  unaryFloat(ctx, [](float a) { return std::exp(a); });
}
void exp2Op(KernelContext &ctx) {
  unaryFloat(ctx, [](float a) { return std::exp2(a); });
}
void floorOp(KernelContext &ctx) {
  unaryFloat(ctx, [](float a) { return std::floor(a); });
}
// Ties to even, like numpy's round.
void roundOp(KernelContext &ctx) {
  unaryFloat(ctx, [](float a) { return std::nearbyint(a); });
}
void sinOp(KernelContext &ctx) {
  unaryFloat(ctx, [](float a) { return std::sin(a); });
}
void sinhOp(KernelContext &ctx) {
  unaryFloat(ctx, [](float a) { return std::sinh(a); });
}
void sqrtOp(KernelContext &ctx) {
  unaryFloat(ctx, [](float a) { return std::sqrt(a); });
}
void tanOp(KernelContext &ctx) {
  unaryFloat(ctx, [](float a) { return std::tan(a); });
}
void tanhOp(KernelContext &ctx) {
  unaryFloat(ctx, [](float a) { return std::tanh(a); });
}
void inverseOp(KernelContext &ctx) {
  float eps = ctx.floatArg("epsilon");
  unaryFloat(ctx, [eps](float a) { return 1.0f / (a + eps); });
}
void logOp(KernelContext &ctx) {
  float eps = ctx.floatArg("epsilon");
  unaryFloat(ctx, [eps](float a) { return std::log(a + eps); });
}
void rsqrtOp(KernelContext &ctx) {
  float eps = ctx.floatArg("epsilon");
  unaryFloat(ctx, [eps](float a) { return 1.0f / std::sqrt(a + eps); });
}
void thresholdOp(KernelContext &ctx) {
  float alpha = ctx.floatArg("alpha");
  unaryNumeric(ctx, [alpha]<typename T>(T a) -> T { return a > T(alpha) ? a : T(alpha); });
}
void clipOp(KernelContext &ctx) {
  float alpha = ctx.floatArg("alpha"), beta = ctx.floatArg("beta");
  unaryFloat(ctx, [=](float a) { return std::min(std::max(a, alpha), beta); });
}

// Activations.
void reluOp(KernelContext &ctx) {
  unaryFloat(ctx, [](float a) { return a > 0 ? a : 0.0f; });
}
void relu6Op(KernelContext &ctx) {
  unaryFloat(ctx, [](float a) { return std::min(std::max(a, 0.0f), 6.0f); });
}
void sigmoidOp(KernelContext &ctx) { unaryFloat(ctx, sigmoid); }
void siluOp(KernelContext &ctx) {
  unaryFloat(ctx, [](float a) { return a * sigmoid(a); });
}
void geluOp(KernelContext &ctx) {
  std::string mode = ctx.strArg("mode");
  if (mode == "EXACT")
    unaryFloat(ctx, [](float a) { return 0.5f * a * (1.0f + std::erf(a * 0.70710678118f)); });
  else if (mode == "TANH_APPROXIMATION")
    unaryFloat(ctx, [](float a) {
      return 0.5f * a * (1.0f + std::tanh(0.7978845608f * (a + 0.044715f * a * a * a)));
    });
  else if (mode == "SIGMOID_APPROXIMATION")
    unaryFloat(ctx, [](float a) { return a * sigmoid(1.702f * a); });
  else
    ctx.fail("mode: expected EXACT, TANH_APPROXIMATION or SIGMOID_APPROXIMATION, found '" + mode +
             "'");
}
void softplusOp(KernelContext &ctx) {
  // log(1 + e^x), written to stay finite for large x.
  unaryFloat(ctx, [](float a) { return std::max(a, 0.0f) + std::log1p(std::exp(-std::abs(a))); });
}
void softsignOp(KernelContext &ctx) {
  unaryFloat(ctx, [](float a) { return a / (1.0f + std::abs(a)); });
}
void eluOp(KernelContext &ctx) {
  float alpha = ctx.floatArg("alpha");
  unaryFloat(ctx, [alpha](float a) { return a > 0 ? a : alpha * (std::exp(a) - 1.0f); });
}
void leakyReluOp(KernelContext &ctx) {
  float alpha = ctx.floatArg("alpha");
  unaryFloat(ctx, [alpha](float a) { return a >= 0 ? a : alpha * a; });
}
void preluOp(KernelContext &ctx) {
  std::vector<float> alpha = channelParam(ctx, "alpha", ctx.in("x"));
  perChannel(ctx, alpha, [&](float a, int64_t c) { return a >= 0 ? a : alpha[c] * a; });
}
void clampedReluOp(KernelContext &ctx) {
  float alpha = ctx.floatArg("alpha"), beta = ctx.floatArg("beta");
  unaryFloat(ctx, [=](float a) { return std::min(a >= 0 ? a : alpha * a, beta); });
}
void linearActivationOp(KernelContext &ctx) {
  float alpha = ctx.floatArg("alpha"), beta = ctx.floatArg("beta");
  unaryFloat(ctx, [=](float a) { return alpha * a + beta; });
}
void scaledTanhOp(KernelContext &ctx) {
  float alpha = ctx.floatArg("alpha"), beta = ctx.floatArg("beta");
  unaryFloat(ctx, [=](float a) { return alpha * std::tanh(beta * a); });
}
void sigmoidHardOp(KernelContext &ctx) {
  float alpha = ctx.floatArg("alpha"), beta = ctx.floatArg("beta");
  unaryFloat(ctx, [=](float a) { return std::min(std::max(alpha * a + beta, 0.0f), 1.0f); });
}
void softplusParametricOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  std::vector<float> alpha = channelParam(ctx, "alpha", x), beta = channelParam(ctx, "beta", x);
  perChannel(ctx, alpha, [&](float a, int64_t c) {
    float z = beta[c] * a;
    return alpha[c] * (std::max(z, 0.0f) + std::log1p(std::exp(-std::abs(z))));
  });
}
void thresholdedReluOp(KernelContext &ctx) {
  float alpha = ctx.floatArg("alpha");
  unaryFloat(ctx, [alpha](float a) { return a >= alpha ? a : 0.0f; });
}

// Selection, casts.

/// select copies a's or b's element as cond says, row by row along the last
/// axis: a row whose cond is one value (a one-hot mask over the rows, the
/// KV-cache blends fix writes) is one copy or fill, not a choice per element.
void selectOp(KernelContext &ctx) {
  const Tensor &cond = ctx.in("cond"), &a = ctx.in("a"), &b = ctx.in("b");
  if (a.dtype() != b.dtype())
    ctx.fail("a and b have different dtypes");
  Shape shape = broadcastShapes(ctx, cond.shape(), broadcastShapes(ctx, a.shape(), b.shape()));
  Tensor out = Tensor::zeros(a.dtype(), shape);
  // cond as one byte per element of its own shape.
  std::vector<uint8_t> mask(static_cast<size_t>(cond.numElements()));
  for (size_t i = 0; i < mask.size(); ++i)
    mask[i] = cond.dtype() == DType::F32   ? cond.data<float>()[i] != 0.0f
              : cond.dtype() == DType::I32 ? cond.data<int32_t>()[i] != 0
                                           : cond.bytes()[i] != 0;
  std::array<std::vector<int64_t>, 3> strides = {alignedStrides(cond.shape(), shape),
                                                 alignedStrides(a.shape(), shape),
                                                 alignedStrides(b.shape(), shape)};
  int64_t inner = shape.empty() ? 1 : shape.back();
  int64_t ic = shape.empty() ? 0 : strides[0].back(), ia = shape.empty() ? 0 : strides[1].back(),
          ib = shape.empty() ? 0 : strides[2].back();
  auto eb = static_cast<int64_t>(elemBytes(a));
  const uint8_t *ab = a.bytes(), *bb = b.bytes();
  uint8_t *o = out.mutableBytes();
  forEachRun(shape, strides, [&](int64_t r, const std::array<int64_t, 3> &off) {
    uint8_t *dst = o + r * inner * eb;
    if (ic == 0) {
      // One choice for the run: a copy of a's or b's run, or a fill.
      bool pick = mask[static_cast<size_t>(off[0])];
      const uint8_t *src = pick ? ab + off[1] * eb : bb + off[2] * eb;
      if ((pick ? ia : ib) != 0)
        std::memcpy(dst, src, static_cast<size_t>(inner * eb));
      else
        for (int64_t i = 0; i < inner; ++i)
          std::memcpy(dst + i * eb, src, static_cast<size_t>(eb));
      return;
    }
    for (int64_t i = 0; i < inner; ++i) {
      const uint8_t *src = mask[static_cast<size_t>(off[0] + i)] ? ab + (off[1] + i * ia) * eb
                                                                 : bb + (off[2] + i * ib) * eb;
      std::memcpy(dst + i * eb, src, static_cast<size_t>(eb));
    }
  });
  ctx.setOutput(0, std::move(out));
}

void castOp(KernelContext &ctx) {
  std::string name = ctx.strArg("dtype");
  auto to = castTargetDType(name);
  if (!to)
    ctx.fail("dtype: unknown dtype '" + name + "'");
  DType compute = computeDType(*to);
  const Tensor &held = ctx.lazyIn("x");
  if (held.isLazy() && compute == DType::F32 && ctx.outputMayBeLazy(held.lazyValue()->kind())) {
    // A compressed float weight stays compressed (its values are fp32 already).
    ctx.setOutput(0, held);
    return;
  }
  const Tensor &x = ctx.in("x");
  if (isInteger(*to) && !isSubByte(*to) && *to != DType::I32)
    // Narrow integer types wrap like a store to that type would.
    ctx.setOutput(0, x.convertTo(*to).convertTo(compute));
  else if (x.dtype() == compute)
    // Same compute dtype (fp32 -> fp16 keeps fp32 values): the input itself.
    ctx.setOutput(0, x);
  else
    ctx.setOutput(0, x.convertTo(compute));
}

void identityOp(KernelContext &ctx) { ctx.setOutput(0, ctx.in("x")); }

} // namespace anefit::runtime
