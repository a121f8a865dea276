//===- Linear.cpp - linear, matmul, conv and attention kernels ------------===//
//
// The heavy ops run on BLAS (cblas_sgemm). fp16 weights are read in place:
// they are widened tile by tile into a small per-thread scratch buffer, never
// copied whole, so running a model costs little more memory than its weights.
//
//===----------------------------------------------------------------------===//
#include "runtime/kernels/KernelUtil.h"

#include <cblas.h>

#include <cmath>
#include <cstring>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace anefit::runtime {
namespace {

/// Rows of an fp16 weight widened per tile: 64 rows of up to 16K columns
/// stay within a few MB of scratch.
constexpr int64_t kTileRows = 64;

/// Per-thread scratch reused across ops (no allocation on the hot path once
/// it has grown to the largest tile).
float *scratch(size_t n, int which = 0) {
  thread_local std::vector<float> buffers[3];
  std::vector<float> &b = buffers[which];
  if (b.size() < n)
    b.resize(n);
  return b.data();
}

/// Float view of a tensor in compute form: fp32 data in place, anything
/// else widened into `holder`.
const float *floatsOf(const Tensor &t, Tensor &holder) {
  if (t.dtype() == DType::F32)
    return t.data<float>();
  holder = t.convertTo(DType::F32);
  return holder.data<float>();
}

#if defined(__x86_64__)
/// y[r] = dot(x, W[r]) for fp16 rows, widening with F16C and accumulating
/// with FMA: a matrix-vector product that streams the weights once.
__attribute__((target("avx2,fma,f16c"))) void gemvHalfAvx2(const uint16_t *w, const float *x,
                                                           float *y, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t *row = w + r * cols;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) {
      __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + c)));
      __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + c + 8)));
      acc0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + c), acc0);
      acc1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + c + 8), acc1);
    }
    __m256 acc = _mm256_add_ps(acc0, acc1);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s = _mm_hadd_ps(s, s);
    s = _mm_hadd_ps(s, s);
    float sum = _mm_cvtss_f32(s);
    for (; c < cols; ++c)
      sum += halfToFloat(row[c]) * x[c];
    y[r] = sum;
  }
}
#endif

/// out[M, N] = x[M, K] @ W^T where W is [N, K] fp32 or fp16 (in place);
/// out has leading dimension ldo.
void matmulWeightT(const float *x, const Tensor &w, float *out, int64_t m, int64_t n, int64_t k,
                   int64_t ldo) {
  if (w.dtype() == DType::F32) {
    if (m == 1)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)n, (int)k, 1.0f, w.data<float>(), (int)k, x, 1,
                  0.0f, out, 1);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0f, x, (int)k,
                  w.data<float>(), (int)k, 0.0f, out, (int)ldo);
    return;
  }
#if defined(__x86_64__)
  static const bool fast = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                           __builtin_cpu_supports("f16c");
  if (w.dtype() == DType::F16 && fast && m <= 4) {
    for (int64_t i = 0; i < m; ++i)
      gemvHalfAvx2(w.data<uint16_t>(), x + i * k, out + i * ldo, n, k);
    return;
  }
#endif
  float *tile = scratch(static_cast<size_t>(kTileRows * k));
  for (int64_t r0 = 0; r0 < n; r0 += kTileRows) {
    int64_t r1 = std::min(n, r0 + kTileRows);
    loadRowsAsF32(w, k, r0, r1, tile);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)(r1 - r0), (int)k, 1.0f, x,
                (int)k, tile, (int)k, 0.0f, out + r0, (int)ldo);
  }
}

} // namespace

void linearOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  const Tensor &w = ctx.raw("weight");
  if (x.rank() < 1 || w.rank() != 2)
    ctx.fail("expected x of rank >= 1 and a 2-D weight, found " + shapeStr(x.shape()) + " and " +
             shapeStr(w.shape()));
  int64_t k = x.dim(x.rank() - 1), n = w.dim(0);
  if (w.dim(1) != k)
    ctx.fail("x has " + std::to_string(k) + " features, weight expects " +
             std::to_string(w.dim(1)));
  int64_t m = x.numElements() / std::max<int64_t>(k, 1);
  Shape outShape = x.shape();
  outShape.back() = n;
  Tensor out = Tensor::zeros(DType::F32, outShape);
  Tensor xh;
  const float *xf = floatsOf(x, xh);
  if (m && n && k)
    matmulWeightT(xf, w, out.mutableData<float>(), m, n, k, n);
  if (ctx.has("bias")) {
    const Tensor &b = ctx.in("bias");
    if (b.numElements() != n)
      ctx.fail("bias has " + std::to_string(b.numElements()) + " values, expected " +
               std::to_string(n));
    Tensor bh;
    const float *bf = floatsOf(b, bh);
    float *o = out.mutableData<float>();
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        o[i * n + j] += bf[j];
  }
  if (computeDType(ctx.outputType().dtype()) != DType::F32)
    out = out.convertTo(computeDType(ctx.outputType().dtype()));
  ctx.setOutput(0, std::move(out));
}

void matmulOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  const Tensor &y = ctx.raw("y");
  bool tx = ctx.boolArg("transpose_x", false), ty = ctx.boolArg("transpose_y", false);
  if (x.rank() < 1 || y.rank() < 1)
    ctx.fail("matmul needs inputs of rank >= 1");
  // Rank-1 operands become matrices and their unit dim is dropped at the end.
  Shape xs = x.shape(), ys = y.shape();
  bool xVec = xs.size() == 1, yVec = ys.size() == 1;
  if (xVec)
    xs.insert(xs.begin(), 1), tx = false;
  if (yVec)
    ys.push_back(1), ty = false;
  int64_t xr = xs[xs.size() - 2], xc = xs.back(), yr = ys[ys.size() - 2], yc = ys.back();
  int64_t m = tx ? xc : xr, k = tx ? xr : xc, k2 = ty ? yc : yr, n = ty ? yr : yc;
  if (k != k2)
    ctx.fail("inner dimensions differ: " + shapeStr(x.shape()) + " and " + shapeStr(y.shape()));
  Shape xb(xs.begin(), xs.end() - 2), yb(ys.begin(), ys.end() - 2);
  Shape batch = broadcastShapes(ctx, xb, yb);
  Shape outShape = batch;
  if (!xVec)
    outShape.push_back(m);
  if (!yVec)
    outShape.push_back(n);
  Shape fullShape = batch;
  fullShape.push_back(m);
  fullShape.push_back(n);
  Tensor out = Tensor::zeros(DType::F32, fullShape);
  Tensor xh;
  const float *xf = floatsOf(x, xh);
  bool yHalf = y.dtype() == DType::F16;
  Tensor yh;
  const float *yf = yHalf ? nullptr : floatsOf(ctx.in("y"), yh);
  std::vector<int64_t> xo = broadcastOffsets(xb, batch), yo = broadcastOffsets(yb, batch);
  int64_t nb = numElementsOf(batch);
  float *o = out.mutableData<float>();
  for (int64_t b = 0; b < nb && m && n; ++b) {
    const float *xm = xf + xo[b] * xr * xc;
    const float *ym;
    if (yHalf) {
      // Widen just this batch's matrix of the fp16 constant.
      float *buf = scratch(static_cast<size_t>(yr * yc), 1);
      halfToFloatN(y.data<uint16_t>() + yo[b] * yr * yc, buf, yr * yc);
      ym = buf;
    } else {
      ym = yf + yo[b] * yr * yc;
    }
    if (k == 0)
      continue;
    cblas_sgemm(CblasRowMajor, tx ? CblasTrans : CblasNoTrans, ty ? CblasTrans : CblasNoTrans,
                (int)m, (int)n, (int)k, 1.0f, xm, (int)xc, ym, (int)yc, 0.0f, o + b * m * n,
                (int)n);
  }
  out = out.reshaped(outShape);
  if (computeDType(ctx.outputType().dtype()) != DType::F32)
    out = out.convertTo(computeDType(ctx.outputType().dtype()));
  ctx.setOutput(0, std::move(out));
}

namespace {

/// Spatial geometry of a conv-like op, 1-D convs seen as 2-D with height 1.
struct ConvGeometry {
  int64_t inH = 1, inW = 1, kH = 1, kW = 1, sH = 1, sW = 1, dH = 1, dW = 1;
  int64_t padTop = 0, padLeft = 0, padBottom = 0, padRight = 0;
  int64_t outH = 1, outW = 1;
};

/// Reads strides, dilations, pad_type and pad for `spatial` = 1 or 2 dims.
ConvGeometry convGeometry(KernelContext &ctx, const Shape &in, const Shape &kernel,
                          bool transpose) {
  size_t ns = in.size() - 2;
  if (ns < 1 || ns > 2)
    ctx.fail("only 1-D and 2-D convolutions are supported, found " + std::to_string(ns) +
             " spatial dims");
  ConvGeometry g;
  auto get = [&](std::string_view p, int64_t dflt) {
    std::vector<int64_t> v = ctx.has(p) ? intsOfLength(ctx, p, ns) : std::vector<int64_t>(ns, dflt);
    for (int64_t e : v)
      if (e < 1)
        ctx.fail("parameter '" + std::string(p) + "' must be positive");
    return v;
  };
  std::vector<int64_t> s = get("strides", 1), d = get("dilations", 1);
  int64_t inSp[2] = {1, in.back()}, kSp[2] = {1, kernel.back()};
  if (ns == 2)
    inSp[0] = in[2], kSp[0] = kernel[2];
  g.inH = inSp[0], g.inW = inSp[1], g.kH = kSp[0], g.kW = kSp[1];
  g.sH = ns == 2 ? s[0] : 1, g.sW = s.back();
  g.dH = ns == 2 ? d[0] : 1, g.dW = d.back();
  std::string padType = ctx.strArg("pad_type", "valid");
  int64_t pads[4] = {0, 0, 0, 0}; // top, bottom, left, right
  if (padType == "custom") {
    std::vector<int64_t> p = intsOfLength(ctx, "pad", 2 * ns);
    for (int64_t e : p)
      if (e < 0)
        ctx.fail("pad must be non-negative");
    if (ns == 2)
      pads[0] = p[0], pads[1] = p[1], pads[2] = p[2], pads[3] = p[3];
    else
      pads[2] = p[0], pads[3] = p[1];
  } else if (padType == "same" || padType == "same_lower") {
    if (!transpose) {
      int64_t ins[2] = {g.inH, g.inW}, st[2] = {g.sH, g.sW}, ks[2] = {g.kH, g.kW},
              dl[2] = {g.dH, g.dW};
      for (int i = 0; i < 2; ++i) {
        int64_t out = (ins[i] + st[i] - 1) / st[i];
        int64_t total = std::max<int64_t>((out - 1) * st[i] + dl[i] * (ks[i] - 1) + 1 - ins[i], 0);
        int64_t small = total / 2, big = total - small;
        pads[2 * i] = padType == "same" ? small : big;
        pads[2 * i + 1] = padType == "same" ? big : small;
      }
    }
  } else if (padType != "valid") {
    ctx.fail("pad_type: expected valid, same, same_lower or custom, found '" + padType + "'");
  }
  g.padTop = pads[0], g.padBottom = pads[1], g.padLeft = pads[2], g.padRight = pads[3];
  if (!transpose) {
    int64_t effH = g.dH * (g.kH - 1) + 1, effW = g.dW * (g.kW - 1) + 1;
    int64_t spanH = g.inH + g.padTop + g.padBottom - effH,
            spanW = g.inW + g.padLeft + g.padRight - effW;
    if (spanH < 0 || spanW < 0)
      ctx.fail("kernel " + shapeStr(kernel) + " is larger than the padded input " + shapeStr(in));
    g.outH = spanH / g.sH + 1;
    g.outW = spanW / g.sW + 1;
  }
  return g;
}

} // namespace

void convOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  const Tensor &w = ctx.raw("weight");
  if (x.rank() < 3 || w.rank() != x.rank())
    ctx.fail("x " + shapeStr(x.shape()) + " and weight " + shapeStr(w.shape()) +
             " must have the same rank >= 3");
  int64_t groups = ctx.intArg("groups", 1);
  int64_t n = x.dim(0), cin = x.dim(1), cout = w.dim(0), cinG = w.dim(1);
  if (groups < 1 || cin % groups || cout % groups || cinG * groups != cin)
    ctx.fail("groups " + std::to_string(groups) + " do not fit " + std::to_string(cin) +
             " input and " + std::to_string(cout) + " output channels with weight " +
             shapeStr(w.shape()));
  ConvGeometry g = convGeometry(ctx, x.shape(), w.shape(), false);
  int64_t coutG = cout / groups, kk = cinG * g.kH * g.kW, hw = g.outH * g.outW;
  Shape outShape = {n, cout};
  if (x.rank() == 4)
    outShape.push_back(g.outH);
  outShape.push_back(g.outW);
  Tensor out = Tensor::zeros(DType::F32, outShape);
  float *o = out.mutableData<float>();
  const float *xf = x.data<float>();
  // Weights of all groups widened once per op (conv weights are small next
  // to the activations they slide over).
  Tensor wh;
  const float *wf;
  if (w.dtype() == DType::F32) {
    wf = w.data<float>();
  } else {
    float *buf = scratch(static_cast<size_t>(w.numElements()), 1);
    loadRowsAsF32(w, kk, 0, cout, buf);
    wf = buf;
  }
  if (cinG == 1 && coutG == 1) {
    // Depthwise (the LFM2 short conv): one small filter per channel; direct
    // loops beat thousands of tiny GEMMs.
    for (int64_t b = 0; b < n; ++b)
      for (int64_t c = 0; c < cout; ++c) {
        const float *plane = xf + (b * cin + c) * g.inH * g.inW;
        const float *k = wf + c * g.kH * g.kW;
        float *dst = o + (b * cout + c) * hw;
        for (int64_t oy = 0; oy < g.outH; ++oy)
          for (int64_t ox = 0; ox < g.outW; ++ox) {
            float acc = 0;
            for (int64_t ky = 0; ky < g.kH; ++ky) {
              int64_t iy = oy * g.sH - g.padTop + ky * g.dH;
              if (iy < 0 || iy >= g.inH)
                continue;
              for (int64_t kx = 0; kx < g.kW; ++kx) {
                int64_t ix = ox * g.sW - g.padLeft + kx * g.dW;
                if (ix >= 0 && ix < g.inW)
                  acc += plane[iy * g.inW + ix] * k[ky * g.kW + kx];
              }
            }
            dst[oy * g.outW + ox] = acc;
          }
      }
  }
  float *cols = scratch(static_cast<size_t>(kk * hw), 2);
  for (int64_t b = 0; b < n && !(cinG == 1 && coutG == 1); ++b) {
    for (int64_t grp = 0; grp < groups; ++grp) {
      // im2col: one row per (channel, ky, kx), one column per output pixel.
      for (int64_t c = 0; c < cinG; ++c) {
        const float *plane = xf + ((b * cin) + grp * cinG + c) * g.inH * g.inW;
        for (int64_t ky = 0; ky < g.kH; ++ky)
          for (int64_t kx = 0; kx < g.kW; ++kx) {
            float *row = cols + ((c * g.kH + ky) * g.kW + kx) * hw;
            for (int64_t oy = 0; oy < g.outH; ++oy) {
              int64_t iy = oy * g.sH - g.padTop + ky * g.dH;
              for (int64_t ox = 0; ox < g.outW; ++ox) {
                int64_t ix = ox * g.sW - g.padLeft + kx * g.dW;
                bool inside = iy >= 0 && iy < g.inH && ix >= 0 && ix < g.inW;
                row[oy * g.outW + ox] = inside ? plane[iy * g.inW + ix] : 0.0f;
              }
            }
          }
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)coutG, (int)hw, (int)kk, 1.0f,
                  wf + grp * coutG * kk, (int)kk, cols, (int)hw, 0.0f,
                  o + (b * cout + grp * coutG) * hw, (int)hw);
    }
  }
  if (ctx.has("bias")) {
    std::vector<float> bias = ctx.in("bias").toFloats();
    if (static_cast<int64_t>(bias.size()) != cout)
      ctx.fail("bias has " + std::to_string(bias.size()) + " values, expected " +
               std::to_string(cout));
    for (int64_t b = 0; b < n; ++b)
      for (int64_t c = 0; c < cout; ++c)
        for (int64_t i = 0; i < hw; ++i)
          o[(b * cout + c) * hw + i] += bias[c];
  }
  ctx.setOutput(0, std::move(out));
}

void convTransposeOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  const Tensor &w = ctx.in("weight");
  if (x.rank() < 3 || w.rank() != x.rank())
    ctx.fail("x " + shapeStr(x.shape()) + " and weight " + shapeStr(w.shape()) +
             " must have the same rank >= 3");
  int64_t groups = ctx.intArg("groups", 1);
  int64_t n = x.dim(0), cin = x.dim(1), coutG = w.dim(1);
  if (groups < 1 || w.dim(0) != cin || cin % groups)
    ctx.fail("weight " + shapeStr(w.shape()) + " does not fit " + std::to_string(cin) +
             " input channels in " + std::to_string(groups) + " groups");
  int64_t cout = coutG * groups, cinG = cin / groups;
  ConvGeometry g = convGeometry(ctx, x.shape(), w.shape(), true);
  // Full (unpadded) output extent, then crop by the padding or to output_shape.
  int64_t fullH = (g.inH - 1) * g.sH + g.dH * (g.kH - 1) + 1;
  int64_t fullW = (g.inW - 1) * g.sW + g.dW * (g.kW - 1) + 1;
  std::string padType = ctx.strArg("pad_type", "valid");
  int64_t outH, outW, offH = g.padTop, offW = g.padLeft;
  if (padType == "same" || padType == "same_lower") {
    outH = g.inH * g.sH, outW = g.inW * g.sW;
    int64_t th = fullH - outH, tw = fullW - outW;
    offH = padType == "same" ? th / 2 : th - th / 2;
    offW = padType == "same" ? tw / 2 : tw - tw / 2;
  } else {
    outH = fullH - g.padTop - g.padBottom, outW = fullW - g.padLeft - g.padRight;
  }
  std::vector<int64_t> outputShape = ctx.intsArg("output_shape");
  if (!outputShape.empty()) {
    if (static_cast<int64_t>(outputShape.size()) != x.rank())
      ctx.fail("output_shape must have rank " + std::to_string(x.rank()));
    outW = outputShape.back();
    outH = x.rank() == 4 ? outputShape[2] : 1;
  }
  if (outH < 1 || outW < 1)
    ctx.fail("output would be empty");
  Shape outShape = {n, cout};
  if (x.rank() == 4)
    outShape.push_back(outH);
  outShape.push_back(outW);
  Tensor out = Tensor::zeros(DType::F32, outShape);
  float *o = out.mutableData<float>();
  const float *xf = x.data<float>(), *wf = w.data<float>();
  // Each input pixel scatters kernel * value into the output.
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ci = 0; ci < cin; ++ci) {
      int64_t grp = ci / cinG;
      for (int64_t iy = 0; iy < g.inH; ++iy)
        for (int64_t ix = 0; ix < g.inW; ++ix) {
          float v = xf[((b * cin + ci) * g.inH + iy) * g.inW + ix];
          for (int64_t co = 0; co < coutG; ++co)
            for (int64_t ky = 0; ky < g.kH; ++ky) {
              int64_t oy = iy * g.sH + ky * g.dH - offH;
              if (oy < 0 || oy >= outH)
                continue;
              for (int64_t kx = 0; kx < g.kW; ++kx) {
                int64_t ox = ix * g.sW + kx * g.dW - offW;
                if (ox < 0 || ox >= outW)
                  continue;
                o[((b * cout + grp * coutG + co) * outH + oy) * outW + ox] +=
                    v * wf[((ci * coutG + co) * g.kH + ky) * g.kW + kx];
              }
            }
        }
    }
  if (ctx.has("bias")) {
    std::vector<float> bias = ctx.in("bias").toFloats();
    if (static_cast<int64_t>(bias.size()) != cout)
      ctx.fail("bias has " + std::to_string(bias.size()) + " values, expected " +
               std::to_string(cout));
    for (int64_t b = 0; b < n; ++b)
      for (int64_t c = 0; c < cout; ++c)
        for (int64_t i = 0; i < outH * outW; ++i)
          o[(b * cout + c) * outH * outW + i] += bias[c];
  }
  ctx.setOutput(0, std::move(out));
}

void sdpaOp(KernelContext &ctx) {
  // softmax(Q K^T / sqrt(E) + mask) V over the last two dims, batch dims broadcast.
  const Tensor &q = ctx.in("query"), &k = ctx.in("key"), &v = ctx.in("value");
  if (q.rank() < 3 || k.rank() != q.rank() || v.rank() != q.rank())
    ctx.fail("query, key and value must have the same rank >= 3");
  int64_t r = q.rank(), l = q.dim(r - 2), e = q.dim(r - 1), s = k.dim(r - 2), ev = v.dim(r - 1);
  if (k.dim(r - 1) != e || v.dim(r - 2) != s)
    ctx.fail("shapes do not fit: query " + shapeStr(q.shape()) + ", key " + shapeStr(k.shape()) +
             ", value " + shapeStr(v.shape()));
  Shape qb(q.shape().begin(), q.shape().end() - 2), kb(k.shape().begin(), k.shape().end() - 2),
      vb(v.shape().begin(), v.shape().end() - 2);
  Shape batch = broadcastShapes(ctx, qb, broadcastShapes(ctx, kb, vb));
  std::vector<int64_t> qo = broadcastOffsets(qb, batch), ko = broadcastOffsets(kb, batch),
                       vo = broadcastOffsets(vb, batch);
  const Tensor *mask = ctx.has("attn_mask") ? &ctx.in("attn_mask") : nullptr;
  Shape scoreShape = batch;
  scoreShape.push_back(l);
  scoreShape.push_back(s);
  std::vector<int64_t> mo;
  if (mask) {
    broadcastShapes(ctx, mask->shape(), scoreShape);
    if (static_cast<int64_t>(mask->shape().size()) > static_cast<int64_t>(scoreShape.size()))
      ctx.fail("attn_mask has higher rank than the scores");
    mo = broadcastOffsets(mask->shape(), scoreShape);
  }
  Shape outShape = batch;
  outShape.push_back(l);
  outShape.push_back(ev);
  Tensor out = Tensor::zeros(DType::F32, outShape);
  float *scores = scratch(static_cast<size_t>(l * s), 1);
  float scale = 1.0f / std::sqrt(static_cast<float>(e));
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < numElementsOf(batch); ++b) {
    const float *qm = q.data<float>() + qo[b] * l * e, *km = k.data<float>() + ko[b] * s * e,
                *vm = v.data<float>() + vo[b] * s * ev;
    if (l && s && e)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)l, (int)s, (int)e, scale, qm,
                  (int)e, km, (int)e, 0.0f, scores, (int)s);
    else
      std::fill(scores, scores + l * s, 0.0f);
    for (int64_t i = 0; i < l; ++i) {
      float *row = scores + i * s;
      if (mask)
        for (int64_t j = 0; j < s; ++j) {
          int64_t mi = mo[(b * l + i) * s + j];
          if (mask->dtype() == DType::Bool)
            row[j] = mask->data<uint8_t>()[mi] ? row[j] : ninf;
          else
            row[j] += mask->floatAt(mi);
        }
      float mx = ninf;
      for (int64_t j = 0; j < s; ++j)
        mx = std::max(mx, row[j]);
      float sum = 0;
      for (int64_t j = 0; j < s; ++j)
        sum += (row[j] = mx == ninf ? 0.0f : std::exp(row[j] - mx));
      for (int64_t j = 0; j < s; ++j)
        row[j] = sum > 0 ? row[j] / sum : 0.0f;
    }
    if (l && ev && s)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)l, (int)ev, (int)s, 1.0f, scores,
                  (int)s, vm, (int)ev, 0.0f, out.mutableData<float>() + b * l * ev, (int)ev);
  }
  ctx.setOutput(0, std::move(out));
}

} // namespace anefit::runtime
