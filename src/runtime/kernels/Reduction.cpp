//===- Reduction.cpp - Reductions, normalizations, sorting and pooling ----===//
//
// Ops that combine many elements into one: reduce_*, softmax, the norms,
// cumsum, topk/argsort and pooling. Accumulation is in double so int32 sums
// are exact and fp32 sums do not drift with length.
//
//===----------------------------------------------------------------------===//
#include "runtime/kernels/KernelUtil.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

namespace anefit::runtime {
namespace {

/// The reduced-axes mask from parameter `param` (absent: all axes).
std::vector<bool> reducedAxes(KernelContext &ctx, const Tensor &x, std::string_view param) {
  std::vector<bool> mask(static_cast<size_t>(x.rank()), !ctx.has(param));
  if (ctx.has(param)) {
    std::vector<int64_t> axes = ctx.intsArg(param);
    if (axes.empty())
      mask.assign(mask.size(), true);
    for (int64_t a : axes)
      mask[ctx.axis(a, x.rank())] = true;
  }
  return mask;
}

/// Reduces x over the masked axes: acc = step(acc, v) from `init`, then
/// finish(acc, count). Output keeps reduced dims as 1 when keep_dims.
template <typename Step, typename Finish>
void reduce(KernelContext &ctx, double init, Step step, Finish finish) {
  const Tensor &x = ctx.in("x");
  std::vector<bool> mask = reducedAxes(ctx, x, "axes");
  bool keep = ctx.boolArg("keep_dims");
  Shape kept, outShape;
  int64_t count = 1;
  for (int64_t d = 0; d < x.rank(); ++d) {
    kept.push_back(mask[d] ? 1 : x.dim(d));
    if (mask[d])
      count *= x.dim(d);
    if (!mask[d] || keep)
      outShape.push_back(mask[d] ? 1 : x.dim(d));
  }
  std::vector<double> acc(static_cast<size_t>(numElementsOf(kept)), init);
  bool isF = x.dtype() == DType::F32;
  // Walking x in order, the matching accumulator is x's index with reduced
  // dims zeroed. Reduced axes at the end (a norm's mean over the last axis)
  // or at the front make contiguous runs: the same adds in the same order,
  // without an index per element.
  BroadcastPattern p = broadcastPattern(kept, x.shape());
  const float *xf = isF ? x.data<float>() : nullptr;
  int64_t n = x.numElements();
  if (isF && (p.kind == BroadcastKind::PerRow || p.kind == BroadcastKind::Scalar)) {
    for (int64_t r = 0, rows = n / p.inner; r < rows; ++r) {
      double a = acc[static_cast<size_t>(r)];
      for (const float *v = xf + r * p.inner, *end = v + p.inner; v != end; ++v)
        a = step(a, static_cast<double>(*v));
      acc[static_cast<size_t>(r)] = a;
    }
  } else if (isF && (p.kind == BroadcastKind::Row || p.kind == BroadcastKind::Same)) {
    for (int64_t r = 0, rows = n / p.inner; r < rows; ++r)
      for (int64_t i = 0; i < p.inner; ++i)
        acc[static_cast<size_t>(i)] =
            step(acc[static_cast<size_t>(i)], static_cast<double>(xf[r * p.inner + i]));
  } else {
    forEachBroadcast(kept, x.shape(), [&](int64_t i, int64_t o) {
      double v = isF ? xf[i] : static_cast<double>(x.intAt(i));
      acc[o] = step(acc[o], v);
    });
  }
  DType outT = computeDType(ctx.outputType().dtype());
  Tensor out = Tensor::empty(outT, outShape);
  if (outT == DType::F32) {
    float *o = out.mutableData<float>();
    for (size_t i = 0; i < acc.size(); ++i)
      o[i] = static_cast<float>(finish(acc[i], count));
  } else {
    int32_t *o = out.mutableData<int32_t>();
    for (size_t i = 0; i < acc.size(); ++i)
      o[i] = static_cast<int32_t>(finish(acc[i], count));
  }
  ctx.setOutput(0, std::move(out));
}

/// Argmax/argmin along one axis.
template <typename Better> void reduceArg(KernelContext &ctx, Better better) {
  const Tensor &x = ctx.in("x");
  int64_t axis = ctx.axis(ctx.intArg("axis"), x.rank());
  bool keep = ctx.boolArg("keep_dims");
  AxisSplit s = splitAt(x.shape(), axis);
  if (s.size == 0)
    ctx.fail("cannot take arg over an empty axis");
  Shape outShape = x.shape();
  if (x.rank() > 0) {
    if (keep)
      outShape[axis] = 1;
    else
      outShape.erase(outShape.begin() + axis);
  }
  Tensor out = Tensor::zeros(DType::I32, outShape);
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < s.inner; ++i) {
      int64_t best = 0;
      float bv = x.floatAt(o * s.size * s.inner + i);
      for (int64_t a = 1; a < s.size; ++a) {
        float v = x.floatAt((o * s.size + a) * s.inner + i);
        if (better(v, bv))
          best = a, bv = v;
      }
      out.mutableData<int32_t>()[o * s.inner + i] = static_cast<int32_t>(best);
    }
  ctx.setOutput(0, std::move(out));
}

const double kInf = std::numeric_limits<double>::infinity();

} // namespace

void reduceSumOp(KernelContext &ctx) {
  reduce(
      ctx, 0.0, [](double a, double v) { return a + v; }, [](double a, int64_t) { return a; });
}
void reduceMeanOp(KernelContext &ctx) {
  reduce(
      ctx, 0.0, [](double a, double v) { return a + v; },
      [](double a, int64_t n) { return n ? a / static_cast<double>(n) : NAN; });
}
void reduceMaxOp(KernelContext &ctx) {
  reduce(
      ctx, -kInf, [](double a, double v) { return v > a || std::isnan(v) ? v : a; },
      [](double a, int64_t) { return a; });
}
void reduceMinOp(KernelContext &ctx) {
  reduce(
      ctx, kInf, [](double a, double v) { return v < a || std::isnan(v) ? v : a; },
      [](double a, int64_t) { return a; });
}
void reduceProdOp(KernelContext &ctx) {
  reduce(
      ctx, 1.0, [](double a, double v) { return a * v; }, [](double a, int64_t) { return a; });
}
void reduceL1NormOp(KernelContext &ctx) {
  reduce(
      ctx, 0.0, [](double a, double v) { return a + std::abs(v); },
      [](double a, int64_t) { return a; });
}
void reduceL2NormOp(KernelContext &ctx) {
  reduce(
      ctx, 0.0, [](double a, double v) { return a + v * v; },
      [](double a, int64_t) { return std::sqrt(a); });
}
void reduceLogSumOp(KernelContext &ctx) {
  reduce(
      ctx, 0.0, [](double a, double v) { return a + v; },
      [](double a, int64_t) { return std::log(a); });
}
void reduceLogSumExpOp(KernelContext &ctx) {
  // Summing exp in double keeps the result finite for fp32-range inputs.
  reduce(
      ctx, 0.0, [](double a, double v) { return a + std::exp(v); },
      [](double a, int64_t) { return std::log(a); });
}
void reduceSumSquareOp(KernelContext &ctx) {
  reduce(
      ctx, 0.0, [](double a, double v) { return a + v * v; }, [](double a, int64_t) { return a; });
}
void reduceArgmaxOp(KernelContext &ctx) {
  reduceArg(ctx,
            [](float v, float best) { return v > best || (std::isnan(v) && !std::isnan(best)); });
}
void reduceArgminOp(KernelContext &ctx) {
  reduceArg(ctx,
            [](float v, float best) { return v < best || (std::isnan(v) && !std::isnan(best)); });
}

void softmaxOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  int64_t axis = ctx.axis(ctx.intArg("axis"), x.rank());
  AxisSplit s = splitAt(x.shape(), axis);
  Tensor out = Tensor::zeros(DType::F32, x.shape());
  const float *a = x.data<float>();
  float *o = out.mutableData<float>();
  for (int64_t b = 0; b < s.outer; ++b)
    for (int64_t i = 0; i < s.inner; ++i) {
      int64_t base = b * s.size * s.inner + i;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t k = 0; k < s.size; ++k)
        mx = std::max(mx, a[base + k * s.inner]);
      float sum = 0;
      for (int64_t k = 0; k < s.size; ++k)
        sum += (o[base + k * s.inner] = std::exp(a[base + k * s.inner] - mx));
      for (int64_t k = 0; k < s.size; ++k)
        o[base + k * s.inner] /= sum;
    }
  ctx.setOutput(0, std::move(out));
}

void layerNormOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  std::vector<bool> mask = reducedAxes(ctx, x, "axes");
  // The normalized axes must be the trailing ones (what converters emit).
  int64_t first = x.rank();
  while (first > 0 && mask[first - 1])
    --first;
  for (int64_t d = 0; d < first; ++d)
    if (mask[d])
      ctx.fail("layer_norm over non-trailing axes is not supported");
  int64_t inner = 1;
  for (int64_t d = first; d < x.rank(); ++d)
    inner *= x.dim(d);
  int64_t outer = x.numElements() / std::max<int64_t>(inner, 1);
  float eps = ctx.floatArg("epsilon");
  std::vector<float> gamma, beta;
  if (ctx.has("gamma"))
    gamma = ctx.in("gamma").toFloats();
  if (ctx.has("beta"))
    beta = ctx.in("beta").toFloats();
  if ((!gamma.empty() && static_cast<int64_t>(gamma.size()) != inner) ||
      (!beta.empty() && static_cast<int64_t>(beta.size()) != inner))
    ctx.fail("gamma/beta must have " + std::to_string(inner) + " values");
  Tensor out = Tensor::zeros(DType::F32, x.shape());
  const float *a = x.data<float>();
  float *o = out.mutableData<float>();
  for (int64_t r = 0; r < outer; ++r) {
    const float *row = a + r * inner;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < inner; ++i)
      mean += row[i];
    mean /= static_cast<double>(inner);
    for (int64_t i = 0; i < inner; ++i)
      var += (row[i] - mean) * (row[i] - mean);
    var /= static_cast<double>(inner);
    float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
    for (int64_t i = 0; i < inner; ++i) {
      float v = (row[i] - static_cast<float>(mean)) * inv;
      if (!gamma.empty())
        v *= gamma[i];
      if (!beta.empty())
        v += beta[i];
      o[r * inner + i] = v;
    }
  }
  ctx.setOutput(0, std::move(out));
}

void batchNormOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  if (x.rank() < 2)
    ctx.fail("x must have rank >= 2");
  int64_t c = x.dim(1);
  auto channel = [&](std::string_view p, float dflt) {
    std::vector<float> v = ctx.has(p) ? ctx.in(p).toFloats() : std::vector<float>(c, dflt);
    if (static_cast<int64_t>(v.size()) != c)
      ctx.fail("parameter '" + std::string(p) + "' must have " + std::to_string(c) + " values");
    return v;
  };
  std::vector<float> mean = channel("mean", 0), var = channel("variance", 1),
                     gamma = channel("gamma", 1), beta = channel("beta", 0);
  float eps = ctx.floatArg("epsilon");
  for (int64_t i = 0; i < c; ++i)
    var[i] = gamma[i] / std::sqrt(var[i] + eps);
  Tensor out = Tensor::zeros(DType::F32, x.shape());
  AxisSplit s = splitAt(x.shape(), 1);
  for (int64_t b = 0; b < s.outer; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < s.inner; ++i) {
        int64_t k = (b * c + ch) * s.inner + i;
        out.mutableData<float>()[k] = (x.data<float>()[k] - mean[ch]) * var[ch] + beta[ch];
      }
  ctx.setOutput(0, std::move(out));
}

void instanceNormOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  if (x.rank() < 3)
    ctx.fail("x must have rank >= 3");
  int64_t c = x.dim(1);
  AxisSplit s = splitAt(x.shape(), 1);
  std::vector<float> gamma(c, 1.0f), beta(c, 0.0f);
  if (ctx.has("gamma"))
    gamma = ctx.in("gamma").toFloats();
  if (ctx.has("beta"))
    beta = ctx.in("beta").toFloats();
  if (static_cast<int64_t>(gamma.size()) != c || static_cast<int64_t>(beta.size()) != c)
    ctx.fail("gamma/beta must have " + std::to_string(c) + " values");
  float eps = ctx.floatArg("epsilon");
  Tensor out = Tensor::zeros(DType::F32, x.shape());
  for (int64_t b = 0; b < s.outer; ++b)
    for (int64_t ch = 0; ch < c; ++ch) {
      const float *p = x.data<float>() + (b * c + ch) * s.inner;
      float *o = out.mutableData<float>() + (b * c + ch) * s.inner;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < s.inner; ++i)
        mean += p[i];
      mean /= static_cast<double>(s.inner);
      for (int64_t i = 0; i < s.inner; ++i)
        var += (p[i] - mean) * (p[i] - mean);
      var /= static_cast<double>(s.inner);
      float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
      for (int64_t i = 0; i < s.inner; ++i)
        o[i] = (p[i] - static_cast<float>(mean)) * inv * gamma[ch] + beta[ch];
    }
  ctx.setOutput(0, std::move(out));
}

void l2NormOp(KernelContext &ctx) {
  // x / sqrt(max(sum(x^2), epsilon)) over the last three dims (fewer for
  // low ranks, keeping the leading batch dim).
  const Tensor &x = ctx.in("x");
  float eps = ctx.floatArg("epsilon");
  int64_t nd = std::min<int64_t>(3, std::max<int64_t>(x.rank() - 1, 1));
  int64_t inner = 1;
  for (int64_t d = x.rank() - nd; d < x.rank(); ++d)
    inner *= x.dim(d);
  int64_t outer = x.numElements() / std::max<int64_t>(inner, 1);
  Tensor out = Tensor::zeros(DType::F32, x.shape());
  for (int64_t r = 0; r < outer; ++r) {
    const float *p = x.data<float>() + r * inner;
    double sum = 0;
    for (int64_t i = 0; i < inner; ++i)
      sum += double(p[i]) * p[i];
    float inv = static_cast<float>(1.0 / std::sqrt(std::max(sum, double(eps))));
    for (int64_t i = 0; i < inner; ++i)
      out.mutableData<float>()[r * inner + i] = p[i] * inv;
  }
  ctx.setOutput(0, std::move(out));
}

void cumsumOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  int64_t axis = ctx.axis(ctx.intArg("axis"), x.rank());
  bool exclusive = ctx.boolArg("exclusive"), reverse = ctx.boolArg("reverse");
  AxisSplit s = splitAt(x.shape(), axis);
  Tensor out = Tensor::zeros(x.dtype(), x.shape());
  dispatchCompute(ctx, x.dtype(), [&]<typename T>() {
    const T *a = x.data<T>();
    T *o = out.mutableData<T>();
    for (int64_t b = 0; b < s.outer; ++b)
      for (int64_t i = 0; i < s.inner; ++i) {
        T acc = 0;
        for (int64_t step = 0; step < s.size; ++step) {
          int64_t k = reverse ? s.size - 1 - step : step;
          int64_t idx = (b * s.size + k) * s.inner + i;
          if (exclusive) {
            o[idx] = acc;
            acc = static_cast<T>(acc + a[idx]);
          } else {
            acc = static_cast<T>(acc + a[idx]);
            o[idx] = acc;
          }
        }
      }
  });
  ctx.setOutput(0, std::move(out));
}

namespace {

/// Indices 0..n-1 of one line along an axis, stably sorted by value.
void sortLine(const Tensor &x, int64_t base, int64_t stride, int64_t n, bool ascending,
              std::vector<int64_t> &order) {
  order.resize(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {
    float a = x.floatAt(base + i * stride), b = x.floatAt(base + j * stride);
    return ascending ? a < b : a > b;
  });
}

} // namespace

void topkOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  int64_t axis = ctx.axis(ctx.intArg("axis"), x.rank());
  int64_t k = ctx.intArg("k");
  bool ascending = ctx.boolArg("ascending");
  AxisSplit s = splitAt(x.shape(), axis);
  if (k < 0 || k > s.size)
    ctx.fail("k " + std::to_string(k) + " is out of range for axis size " + std::to_string(s.size));
  Shape outShape = x.shape();
  if (x.rank())
    outShape[axis] = k;
  Tensor values = Tensor::zeros(x.dtype(), outShape), indices = Tensor::zeros(DType::I32, outShape);
  int eb = elemBytes(x);
  std::vector<int64_t> order;
  for (int64_t b = 0; b < s.outer; ++b)
    for (int64_t i = 0; i < s.inner; ++i) {
      sortLine(x, b * s.size * s.inner + i, s.inner, s.size, ascending, order);
      for (int64_t j = 0; j < k; ++j) {
        int64_t dst = (b * k + j) * s.inner + i, src = (b * s.size + order[j]) * s.inner + i;
        std::memcpy(values.mutableBytes() + dst * eb, x.bytes() + src * eb, eb);
        indices.mutableData<int32_t>()[dst] = static_cast<int32_t>(order[j]);
      }
    }
  ctx.setOutput(0, std::move(values));
  if (ctx.numOutputs() > 1)
    ctx.setOutput(1, std::move(indices));
}

void argsortOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  int64_t axis = ctx.axis(ctx.intArg("axis"), x.rank());
  bool ascending = ctx.boolArg("ascending");
  AxisSplit s = splitAt(x.shape(), axis);
  Tensor out = Tensor::zeros(DType::I32, x.shape());
  std::vector<int64_t> order;
  for (int64_t b = 0; b < s.outer; ++b)
    for (int64_t i = 0; i < s.inner; ++i) {
      sortLine(x, b * s.size * s.inner + i, s.inner, s.size, ascending, order);
      for (int64_t j = 0; j < s.size; ++j)
        out.mutableData<int32_t>()[(b * s.size + j) * s.inner + i] = static_cast<int32_t>(order[j]);
    }
  ctx.setOutput(0, std::move(out));
}

namespace {

enum class PoolKind { Avg, Max, L2 };

void pool(KernelContext &ctx, PoolKind kind) {
  const Tensor &x = ctx.in("x");
  int64_t ns = x.rank() - 2;
  if (ns < 1 || ns > 2)
    ctx.fail("only 1-D and 2-D pooling is supported");
  std::vector<int64_t> ks = intsOfLength(ctx, "kernel_sizes", ns);
  std::vector<int64_t> st =
      ctx.has("strides") ? intsOfLength(ctx, "strides", ns) : std::vector<int64_t>(ns, 1);
  for (int64_t v : ks)
    if (v < 1)
      ctx.fail("kernel_sizes must be positive");
  for (int64_t v : st)
    if (v < 1)
      ctx.fail("strides must be positive");
  bool ceilMode = ctx.boolArg("ceil_mode");
  bool excludePad = kind == PoolKind::Avg && ctx.boolArg("exclude_padding_from_average");
  std::string padType = ctx.strArg("pad_type");
  // Work in 2-D; a 1-D pool has height 1.
  int64_t in[2] = {ns == 2 ? x.dim(2) : 1, x.dim(x.rank() - 1)};
  int64_t k[2] = {ns == 2 ? ks[0] : 1, ks.back()}, s[2] = {ns == 2 ? st[0] : 1, st.back()};
  int64_t padB[2] = {0, 0}, padE[2] = {0, 0}, out[2];
  if (padType == "custom") {
    std::vector<int64_t> p = intsOfLength(ctx, "pad", 2 * ns);
    for (int64_t i = 0; i < ns; ++i)
      padB[i + 2 - ns] = p[2 * i], padE[i + 2 - ns] = p[2 * i + 1];
  }
  for (int i = 0; i < 2; ++i) {
    if (padType == "same" || padType == "same_lower") {
      out[i] = (in[i] + s[i] - 1) / s[i];
      int64_t total = std::max<int64_t>((out[i] - 1) * s[i] + k[i] - in[i], 0);
      padB[i] = padType == "same" ? total / 2 : total - total / 2;
      padE[i] = total - padB[i];
    } else {
      int64_t span = in[i] + padB[i] + padE[i] - k[i];
      if (span < 0)
        ctx.fail("kernel is larger than the padded input");
      out[i] = (ceilMode ? (span + s[i] - 1) / s[i] : span / s[i]) + 1;
    }
  }
  Shape outShape = {x.dim(0), x.dim(1)};
  if (ns == 2)
    outShape.push_back(out[0]);
  outShape.push_back(out[1]);
  Tensor result = Tensor::zeros(DType::F32, outShape);
  int64_t planes = x.dim(0) * x.dim(1);
  for (int64_t p = 0; p < planes; ++p) {
    const float *src = x.data<float>() + p * in[0] * in[1];
    float *dst = result.mutableData<float>() + p * out[0] * out[1];
    for (int64_t oy = 0; oy < out[0]; ++oy)
      for (int64_t ox = 0; ox < out[1]; ++ox) {
        double acc = kind == PoolKind::Max ? -kInf : 0.0;
        int64_t count = 0, padded = 0;
        for (int64_t ky = 0; ky < k[0]; ++ky)
          for (int64_t kx = 0; kx < k[1]; ++kx) {
            int64_t iy = oy * s[0] - padB[0] + ky, ix = ox * s[1] - padB[1] + kx;
            bool inside = iy >= 0 && iy < in[0] && ix >= 0 && ix < in[1];
            // Windows running past the end in ceil mode do not count padding.
            if (iy < in[0] + padE[0] && ix < in[1] + padE[1])
              ++padded;
            if (!inside)
              continue;
            double v = src[iy * in[1] + ix];
            ++count;
            if (kind == PoolKind::Max)
              acc = std::max(acc, v);
            else if (kind == PoolKind::Avg)
              acc += v;
            else
              acc += v * v;
          }
        double r = acc;
        if (kind == PoolKind::Avg)
          r = acc / std::max<int64_t>(excludePad ? count : padded, 1);
        else if (kind == PoolKind::L2)
          r = std::sqrt(acc);
        dst[oy * out[1] + ox] = static_cast<float>(r);
      }
  }
  ctx.setOutput(0, std::move(result));
}

} // namespace

void avgPoolOp(KernelContext &ctx) { pool(ctx, PoolKind::Avg); }
void maxPoolOp(KernelContext &ctx) { pool(ctx, PoolKind::Max); }
void l2PoolOp(KernelContext &ctx) { pool(ctx, PoolKind::L2); }

} // namespace anefit::runtime
