//===- Linear.cpp - linear, matmul, conv and attention kernels ------------===//
//
// The heavy ops. Weights are read in place: fp16 rows are widened in
// registers, compressed weights (Lazy.h) decoded row by row, so running a
// model costs little more memory than its stored weights. Decode-sized
// products (up to 4 rows of x) stream the weight once through a fused
// matrix-vector kernel; larger ones decode 64-row tiles into a per-thread
// buffer and call BLAS. Work is split over rows, heads or batches with
// parallelFor; BLAS itself runs single-threaded inside those chunks.
//
//===----------------------------------------------------------------------===//
#include "runtime/kernels/Lazy.h"
#include "runtime/kernels/Simd.h"

#include "runtime/ThreadPool.h"

#include "runtime/kernels/Blas.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace anefit::runtime {
namespace {

#if defined(__x86_64__)
using simd::hsum;
using simd::sum512;
#endif

/// Rows of a weight decoded per tile for BLAS: 64 rows of up to 16K columns
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
  if (t.dtype() == DType::F32 && !t.isLazy())
    return t.data<float>();
  holder = t.materialize().convertTo(DType::F32);
  return holder.data<float>();
}

const CompressedValue *compressedOf(const Tensor &t) {
  return t.isLazy() ? dynamic_cast<const CompressedValue *>(t.lazyValue()) : nullptr;
}

/// fp32 rows [r0, r1) of weight `w` seen as [rows, cols]: dense fp32 in
/// place; fp16, other dtypes and compressed values decoded into `buf`.
const float *weightRows(const Tensor &w, int64_t cols, int64_t r0, int64_t r1, float *buf) {
  if (const CompressedValue *cv = compressedOf(w)) {
    cv->decode(r0 * cols, (r1 - r0) * cols, buf);
    return buf;
  }
  if (w.dtype() == DType::F32)
    return w.data<float>() + r0 * cols;
  loadRowsAsF32(w, cols, r0, r1, buf);
  return buf;
}

/// Bytes one element of `w` takes in memory (for sizing work chunks).
double elementBytes(const Tensor &w) {
  if (const CompressedValue *cv = compressedOf(w))
    return double(cv->storedBytes()) / double(std::max<int64_t>(cv->numElements(), 1));
  return dtypeBits(w.dtype()) / 8.0;
}

/// The fewest rows a thread takes at once (parallelFor hands out larger
/// ranges first): about 64 KB of weights, or less so that there are at least
/// 4 per thread when rows are few.
int64_t rowGrain(int64_t rows, int64_t cols, double bytesPerElement) {
  double rowBytes = std::max(1.0, double(cols) * bytesPerElement);
  int64_t grain = std::max<int64_t>(4, int64_t((64 << 10) / rowBytes));
  int64_t balanced = rows / (4 * std::max(1, currentThreads()));
  return std::max<int64_t>(1, std::min(grain, std::max<int64_t>(balanced, 4)));
}

#if defined(__x86_64__)
/// How far ahead of the weight stream the fp16 kernels prefetch, in bytes:
/// past the next 4 KB page, whose first lines the hardware prefetcher does
/// not fetch early (+5-15 % bandwidth on long rows on the AVX2-only machine
/// measured; the AVX-512 rows where kernelPrefetches(): on an Intel core
/// 2-8 KB ahead gave the same rate, 1.6x none).
constexpr int64_t kPrefetchBytes = 6144;

/// y[n] = dot(x, W_n) for N fp16 rows of k values, read side by side: each
/// row summed exactly as dotF32 sums its widened values (four accumulators
/// of 8 lanes, an 8-lane step, a fused scalar tail), so a row's result does
/// not depend on the rows read with it.
template <int N>
__attribute__((target("avx2,fma,f16c"))) inline void
halfRowDots(const uint16_t *const *w, const float *x, int64_t k, float *y) {
  __m256 a[N][4];
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < 4; ++j)
      a[n][j] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 32 <= k; c += 32) {
    for (int n = 0; n < N; ++n)
      _mm_prefetch(reinterpret_cast<const char *>(w[n] + c) + kPrefetchBytes, _MM_HINT_T0);
    for (int j = 0; j < 4; ++j) {
      __m256 xv = _mm256_loadu_ps(x + c + 8 * j);
      for (int n = 0; n < N; ++n)
        a[n][j] = _mm256_fmadd_ps(
            _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w[n] + c + 8 * j))), xv, a[n][j]);
    }
  }
  for (; c + 8 <= k; c += 8) {
    __m256 xv = _mm256_loadu_ps(x + c);
    for (int n = 0; n < N; ++n)
      a[n][0] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w[n] + c))), xv,
                                a[n][0]);
  }
  for (int n = 0; n < N; ++n) {
    float sum =
        hsum(_mm256_add_ps(_mm256_add_ps(a[n][0], a[n][1]), _mm256_add_ps(a[n][2], a[n][3])));
    for (int64_t t = c; t < k; ++t)
      sum = std::fma(halfToFloatAt(w[n] + t), x[t], sum);
    y[n] = sum;
  }
}

/// y[i * ldy + r] = dot(x_i, W[r]) for fp16 rows [r0, r1) and i < m. The
/// range is read as two streams, its first half and its second half, a row
/// of each side by side: a core keeps more of the weight stream in flight
/// than with one (+25-40 % in a matrix-vector loop, 1.2x on an LFM2-350M
/// step, on the AVX2 machine measured), where rows next to each other,
/// though they share the loads of x as well, halve it.
__attribute__((target("avx2,fma,f16c"))) void gemvHalfAvx2(const uint16_t *w, const float *x,
                                                           int64_t ldx, int64_t m, float *y,
                                                           int64_t ldy, int64_t k, int64_t r0,
                                                           int64_t r1) {
  int64_t half = (r1 - r0) / 2;
  for (int64_t r = r0; r < r0 + half; ++r) {
    const uint16_t *rows[2] = {w + r * k, w + (r + half) * k};
    for (int64_t i = 0; i < m; ++i) {
      float out[2];
      halfRowDots<2>(rows, x + i * ldx, k, out);
      y[i * ldy + r] = out[0];
      y[i * ldy + r + half] = out[1];
    }
  }
  if ((r1 - r0) % 2) {
    const uint16_t *row = w + (r1 - 1) * k;
    for (int64_t i = 0; i < m; ++i)
      halfRowDots<1>(&row, x + i * ldx, k, y + i * ldy + r1 - 1);
  }
}

/// A row of fp16 weights as simd::dot512 reads it.
struct HalfRow512 {
  const uint16_t *w;
  __attribute__((target("avx512f"))) __m512 load16(int64_t c) const {
    return _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256((const __m256i *)(w + c)));
  }
  float at(int64_t c) const { return halfToFloatAt(w + c); }
  /// The line kPrefetchBytes past the 32 values at c (64 bytes, a line).
  void prefetch(int64_t c) const {
    _mm_prefetch(reinterpret_cast<const char *>(w + c) + kPrefetchBytes, _MM_HINT_T0);
  }
};

/// The same with 16 lanes, summed as dotF32 sums (simd::dot512); the rows
/// prefetched where kernelPrefetches() says (an Intel core streams 1.6x
/// faster with it, a Zen 4 core slower).
template <bool Prefetch>
__attribute__((target("avx512f"))) void
gemvHalfAvx512(const uint16_t *w, const float *x, int64_t ldx, int64_t m, float *y, int64_t ldy,
               int64_t k, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    HalfRow512 row{w + r * k};
    for (int64_t i = 0; i < m; ++i)
      y[i * ldy + r] = simd::dot512<Prefetch>(row, x + i * ldx, k);
  }
}
#elif defined(__aarch64__)
/// A row of fp16 weights as simd::dotNeon reads it (widened by NEON's
/// conversion, exact as halfToFloat is).
struct HalfRowNeon {
  const uint16_t *w;
  float32x4_t load4(int64_t c) const { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(w + c))); }
  float at(int64_t c) const { return halfToFloatAt(w + c); }
};

/// y[i * ldy + r] = dot(x_i, W[r]) for fp16 rows [r0, r1) and i < m, each
/// summed as dotF32 sums the widened row (simd::dotNeon).
void gemvHalfNeon(const uint16_t *w, const float *x, int64_t ldx, int64_t m, float *y, int64_t ldy,
                  int64_t k, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    HalfRowNeon row{w + r * k};
    for (int64_t i = 0; i < m; ++i)
      y[i * ldy + r] = simd::dotNeon(row, x + i * ldx, k);
  }
}
#endif

/// out[M, N] = x[M, K] @ W^T where W is [N, K]: fp32, fp16 or compressed,
/// read in place; out has leading dimension ldo. `grade`: how precise the
/// compressed products must be (see ProductGrade).
void matmulWeightT(const float *x, const Tensor &w, float *out, int64_t m, int64_t n, int64_t k,
                   int64_t ldo, ProductGrade grade = ProductGrade::Fp32) {
  const CompressedValue *cv = compressedOf(w);
  int64_t grain = rowGrain(n, k, elementBytes(w));
  if (m <= 4) {
    if (cv) {
      // x is permuted (and summed per block) once, not once per chunk.
      CompressedValue::DotOperand xd = cv->prepareDot(k, x, k, m, grade);
      parallelFor(n, grain, [&](int64_t r0, int64_t r1) { cv->dotRows(xd, out, ldo, r0, r1); });
      return;
    }
#if defined(__x86_64__)
    if (w.dtype() == DType::F16 && kernelIsa() != KernelIsa::Portable) {
      auto *gemv = kernelIsa() < KernelIsa::Avx512 ? gemvHalfAvx2
                   : kernelPrefetches()            ? gemvHalfAvx512<true>
                                                   : gemvHalfAvx512<false>;
      parallelFor(n, grain, [&](int64_t r0, int64_t r1) {
        gemv(w.data<uint16_t>(), x, k, m, out, ldo, k, r0, r1);
      });
      return;
    }
#elif defined(__aarch64__)
    if (w.dtype() == DType::F16 && kernelIsa() == KernelIsa::Neon) {
      parallelFor(n, grain, [&](int64_t r0, int64_t r1) {
        gemvHalfNeon(w.data<uint16_t>(), x, k, m, out, ldo, k, r0, r1);
      });
      return;
    }
#endif
    if (w.dtype() == DType::F32) {
      parallelFor(n, grain, [&](int64_t r0, int64_t r1) {
        for (int64_t i = 0; i < m; ++i)
          cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)(r1 - r0), (int)k, 1.0f,
                      w.data<float>() + r0 * k, (int)k, x + i * k, 1, 0.0f, out + i * ldo + r0, 1);
      });
      return;
    }
    // Other dtypes (fp16 without the vector kernels, bf16, ...): a row at a
    // time, widened into a small buffer.
    parallelFor(n, grain, [&](int64_t r0, int64_t r1) {
      float *row = scratch(static_cast<size_t>(k));
      for (int64_t r = r0; r < r1; ++r) {
        loadRowsAsF32(w, k, r, r + 1, row);
        for (int64_t i = 0; i < m; ++i)
          out[i * ldo + r] = dotF32(row, x + i * k, k);
      }
    });
    return;
  }
  int64_t tiles = (n + kTileRows - 1) / kTileRows;
  parallelFor(tiles, 1, [&](int64_t t0, int64_t t1) {
    float *buf = scratch(static_cast<size_t>(kTileRows * k));
    for (int64_t t = t0; t < t1; ++t) {
      int64_t r0 = t * kTileRows, r1 = std::min(n, r0 + kTileRows);
      const float *rows = weightRows(w, k, r0, r1, buf);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)(r1 - r0), (int)k, 1.0f, x,
                  (int)k, rows, (int)k, 0.0f, out + r0, (int)ldo);
    }
  });
}

/// out[M, N] = x[M, K] @ W where W is [K, N] (compressed), a tile of W's
/// rows at a time.
void matmulWeight(const float *x, int64_t ldx, const Tensor &w, float *out, int64_t m, int64_t n,
                  int64_t k) {
  float *buf = scratch(static_cast<size_t>(kTileRows * n));
  for (int64_t r0 = 0; r0 < k; r0 += kTileRows) {
    int64_t r1 = std::min(k, r0 + kTileRows);
    const float *rows = weightRows(w, n, r0, r1, buf);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)(r1 - r0), 1.0f,
                x + r0, (int)ldx, rows, (int)n, r0 ? 1.0f : 0.0f, out, (int)n);
  }
}

} // namespace

void linearOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  const Tensor &w = ctx.lazyIn("weight");
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
  // Every path of matmulWeightT writes each output element; only an empty
  // product (k == 0) leaves zeros to give.
  bool product = m && n && k;
  Tensor out = product ? Tensor::empty(DType::F32, outShape) : Tensor::zeros(DType::F32, outShape);
  Tensor xh;
  const float *xf = floatsOf(x, xh);
  // A result the program keeps in fp16 does not need fp32-grade products.
  ProductGrade grade = ctx.outputType().dtype() == DType::F16 && !ctx.options().exactProducts
                           ? ProductGrade::Fp16
                           : ProductGrade::Fp32;
  if (product)
    matmulWeightT(xf, w, out.mutableData<float>(), m, n, k, n, grade);
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
  const Tensor *xp = &ctx.lazyIn("x");
  const Tensor *yp = &ctx.lazyIn("y");
  bool tx = ctx.boolArg("transpose_x"), ty = ctx.boolArg("transpose_y");
  if (xp->rank() < 1 || yp->rank() < 1)
    ctx.fail("matmul needs inputs of rank >= 1");
  // Rank-1 operands become matrices and their unit dim is dropped at the end.
  Shape xs = xp->shape(), ys = yp->shape();
  bool xVec = xs.size() == 1, yVec = ys.size() == 1;
  if (xVec)
    xs.insert(xs.begin(), 1), tx = false;
  if (yVec)
    ys.push_back(1), ty = false;
  int64_t xr = xs[xs.size() - 2], xc = xs.back(), yr = ys[ys.size() - 2], yc = ys.back();
  int64_t m = tx ? xc : xr, k = tx ? xr : xc, k2 = ty ? yc : yr, n = ty ? yr : yc;
  if (k != k2)
    ctx.fail("inner dimensions differ: " + shapeStr(xp->shape()) + " and " + shapeStr(yp->shape()));
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
  float *o = out.mutableData<float>();
  int64_t nb = numElementsOf(batch);
  const CompressedValue *yPacked = compressedOf(*yp);
  if (yPacked && yb.empty() && !tx && !xp->isLazy() && m && n && k) {
    // A compressed 2-D y: every row of x against it, decoded in place.
    Tensor xh;
    const float *xf = floatsOf(ctx.in("x"), xh);
    int64_t rows = numElementsOf(xb) * m;
    if (ty)
      matmulWeightT(xf, *yp, o, rows, n, k, n);
    else
      matmulWeight(xf, k, *yp, o, rows, n, k);
    out = out.reshaped(outShape);
    if (computeDType(ctx.outputType().dtype()) != DType::F32)
      out = out.convertTo(computeDType(ctx.outputType().dtype()));
    ctx.setOutput(0, std::move(out));
    return;
  }
  // Operands read in place (dense, or repeated views by stride); anything
  // else is materialized once.
  std::vector<int64_t> xo = broadcastOffsets(xb, batch), yo = broadcastOffsets(yb, batch);
  auto denseF32 = [&](std::string_view param) {
    Tensor t = ctx.in(param);
    return t.dtype() == DType::F32 ? t : t.convertTo(DType::F32);
  };
  Tensor xd, yd;
  if (nb && xp->numElements() && !batchMatrix(*xp, 0, xr * xc))
    xd = denseF32("x"), xp = &xd;
  bool yHalf = !yp->isLazy() && yp->dtype() == DType::F16;
  if (!yHalf && nb && yp->numElements() && !batchMatrix(*yp, 0, yr * yc))
    yd = denseF32("y"), yp = &yd;
  const Tensor &x = *xp, &y = *yp;
  parallelFor(nb, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1 && m && n; ++b) {
      const float *xm = batchMatrix(x, xo[b], xr * xc);
      const float *ym;
      if (yHalf) {
        // Widen just this batch's matrix of the fp16 constant.
        float *buf = scratch(static_cast<size_t>(yr * yc), 1);
        halfToFloatN(y.data<uint16_t>() + yo[b] * yr * yc, buf, yr * yc);
        ym = buf;
      } else {
        ym = batchMatrix(y, yo[b], yr * yc);
      }
      if (k == 0)
        continue;
      cblas_sgemm(CblasRowMajor, tx ? CblasTrans : CblasNoTrans, ty ? CblasTrans : CblasNoTrans,
                  (int)m, (int)n, (int)k, 1.0f, xm, (int)xc, ym, (int)yc, 0.0f, o + b * m * n,
                  (int)n);
    }
  });
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
  std::string padType = ctx.strArg("pad_type");
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
  const Tensor &w = ctx.lazyIn("weight");
  if (x.rank() < 3 || w.rank() != x.rank())
    ctx.fail("x " + shapeStr(x.shape()) + " and weight " + shapeStr(w.shape()) +
             " must have the same rank >= 3");
  int64_t groups = ctx.intArg("groups");
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
  // Weights are read a tile of output channels at a time (fp16 widened and
  // compressed ones decoded into a per-thread buffer), never all at once.
  if (cinG == 1 && coutG == 1) {
    // Depthwise (the LFM2 short conv): one small filter per channel; direct
    // loops beat thousands of tiny GEMMs.
    int64_t kk1 = g.kH * g.kW;
    parallelFor(cout, 256, [&](int64_t c0, int64_t c1) {
      float *buf = scratch(static_cast<size_t>((c1 - c0) * kk1), 1);
      const float *wf = weightRows(w, kk1, c0, c1, buf);
      for (int64_t b = 0; b < n; ++b)
        for (int64_t c = c0; c < c1; ++c) {
          const float *plane = xf + (b * cin + c) * g.inH * g.inW;
          const float *k = wf + (c - c0) * kk1;
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
    });
  }
  float *cols = scratch(static_cast<size_t>(kk * hw), 2);
  int64_t tiles = (coutG + kTileRows - 1) / kTileRows;
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
      parallelFor(tiles, 1, [&](int64_t t0, int64_t t1) {
        float *buf = scratch(static_cast<size_t>(kTileRows * kk), 0);
        for (int64_t t = t0; t < t1; ++t) {
          int64_t r0 = t * kTileRows, r1 = std::min(coutG, r0 + kTileRows);
          const float *rows = weightRows(w, kk, grp * coutG + r0, grp * coutG + r1, buf);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(r1 - r0), (int)hw, (int)kk,
                      1.0f, rows, (int)kk, cols, (int)hw, 0.0f,
                      o + (b * cout + grp * coutG + r0) * hw, (int)hw);
        }
      });
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
  int64_t groups = ctx.intArg("groups");
  int64_t n = x.dim(0), cin = x.dim(1), coutG = w.dim(1);
  if (groups < 1 || w.dim(0) != cin || cin % groups)
    ctx.fail("weight " + shapeStr(w.shape()) + " does not fit " + std::to_string(cin) +
             " input channels in " + std::to_string(groups) + " groups");
  int64_t cout = coutG * groups, cinG = cin / groups;
  ConvGeometry g = convGeometry(ctx, x.shape(), w.shape(), true);
  // Full (unpadded) output extent, then crop by the padding or to output_shape.
  int64_t fullH = (g.inH - 1) * g.sH + g.dH * (g.kH - 1) + 1;
  int64_t fullW = (g.inW - 1) * g.sW + g.dW * (g.kW - 1) + 1;
  std::string padType = ctx.strArg("pad_type");
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

namespace {

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void axpyAvx2(float a, const float *x, float *y, int64_t n) {
  __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i)
    y[i] += a * x[i];
}
#endif

/// y += a * x over n floats.
void axpy(float a, const float *x, float *y, int64_t n) {
#if defined(__x86_64__)
  if (kernelIsa() != KernelIsa::Portable)
    return axpyAvx2(a, x, y, n);
#endif
  for (int64_t i = 0; i < n; ++i)
    y[i] += a * x[i];
}

/// scores[j] = scale * dot(q, K[j]) (dotF32) for the s rows of K whose mask
/// byte mb[j * step] is set, -inf for the others (mb null: every row). The
/// rows of each unmasked run go to dotsF32 together.
void scoreRow(const float *q, const float *k, int64_t s, int64_t e, float scale, float *scores,
              const uint8_t *mb = nullptr, int64_t step = 0) {
  for (int64_t j = 0; j < s;) {
    if (mb && !mb[j * step]) {
      scores[j++] = -std::numeric_limits<float>::infinity();
      continue;
    }
    int64_t end = j + 1;
    while (end < s && (!mb || mb[end * step]))
      ++end;
    dotsF32(q, k + j * e, e, end - j, e, scores + j);
    for (int64_t t = j; t < end; ++t)
      scores[t] = scale * scores[t];
    j = end;
  }
}

#if defined(__x86_64__)
/// weightedRows with AVX2: each 64 (then 8) columns of out summed in
/// registers over the rows, the same FMAs in the same order as axpy's.
__attribute__((target("avx2,fma"))) void weightedRowsAvx2(const float *p, const float *v, int64_t s,
                                                          int64_t n, float *out) {
  int64_t c = 0;
  for (; c + 64 <= n; c += 64) {
    __m256 acc[8];
#pragma GCC unroll 8
    for (int t = 0; t < 8; ++t)
      acc[t] = _mm256_loadu_ps(out + c + 8 * t);
    for (int64_t j = 0; j < s; ++j) {
      if (p[j] == 0.0f)
        continue;
      __m256 pj = _mm256_set1_ps(p[j]);
      const float *row = v + j * n + c;
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t)
        acc[t] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(row + 8 * t), acc[t]);
    }
#pragma GCC unroll 8
    for (int t = 0; t < 8; ++t)
      _mm256_storeu_ps(out + c + 8 * t, acc[t]);
  }
  for (; c + 8 <= n; c += 8) {
    __m256 acc = _mm256_loadu_ps(out + c);
    for (int64_t j = 0; j < s; ++j)
      if (p[j] != 0.0f)
        acc = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_loadu_ps(v + j * n + c), acc);
    _mm256_storeu_ps(out + c, acc);
  }
  if (c < n)
    for (int64_t j = 0; j < s; ++j)
      if (p[j] != 0.0f)
        axpyAvx2(p[j], v + j * n + c, out + c, n - c);
}
#endif

/// out[c] += sum over the rows j < s of V (n columns) of p[j] * V[j][c],
/// rows whose p[j] is 0 skipped: axpy row after row, bit for bit.
void weightedRows(const float *p, const float *v, int64_t s, int64_t n, float *out) {
#if defined(__x86_64__)
  if (kernelIsa() != KernelIsa::Portable)
    return weightedRowsAvx2(p, v, s, n, out);
#endif
  for (int64_t j = 0; j < s; ++j)
    if (p[j] != 0.0f)
      axpy(p[j], v + j * n, out, n);
}

} // namespace

void sdpaOp(KernelContext &ctx) {
  // softmax(Q K^T / sqrt(E) + mask) V over the last two dims, batch dims
  // broadcast. Key and value may be repeated views (grouped-query heads),
  // read by stride.
  const Tensor &q = ctx.in("query");
  const Tensor *kp = &ctx.lazyIn("key"), *vp = &ctx.lazyIn("value");
  if (q.rank() < 3 || kp->rank() != q.rank() || vp->rank() != q.rank())
    ctx.fail("query, key and value must have the same rank >= 3");
  int64_t r = q.rank(), l = q.dim(r - 2), e = q.dim(r - 1), s = kp->dim(r - 2), ev = vp->dim(r - 1);
  if (kp->dim(r - 1) != e || vp->dim(r - 2) != s)
    ctx.fail("shapes do not fit: query " + shapeStr(q.shape()) + ", key " + shapeStr(kp->shape()) +
             ", value " + shapeStr(vp->shape()));
  Shape qb(q.shape().begin(), q.shape().end() - 2), kb(kp->shape().begin(), kp->shape().end() - 2),
      vb(vp->shape().begin(), vp->shape().end() - 2);
  Shape batch = broadcastShapes(ctx, qb, broadcastShapes(ctx, kb, vb));
  std::vector<int64_t> qo = broadcastOffsets(qb, batch), ko = broadcastOffsets(kb, batch),
                       vo = broadcastOffsets(vb, batch);
  Tensor kd, vd;
  if (kp->numElements() && !batchMatrix(*kp, 0, s * e))
    kd = ctx.in("key"), kp = &kd;
  if (vp->numElements() && !batchMatrix(*vp, 0, s * ev))
    vd = ctx.in("value"), vp = &vd;
  const Tensor *mask = ctx.has("attn_mask") ? &ctx.in("attn_mask") : nullptr;
  Shape scoreShape = batch;
  scoreShape.push_back(l);
  scoreShape.push_back(s);
  // Mask rows: the offset of (batch, i, 0) and the step along j (0 when the
  // mask broadcasts over the keys).
  std::vector<int64_t> maskRow;
  int64_t maskStep = 0;
  if (mask) {
    broadcastShapes(ctx, mask->shape(), scoreShape);
    if (static_cast<int64_t>(mask->shape().size()) > static_cast<int64_t>(scoreShape.size()))
      ctx.fail("attn_mask has higher rank than the scores");
    Shape lead = mask->shape(), scoreLead(scoreShape.begin(), scoreShape.end() - 1);
    int64_t last = 1;
    if (!lead.empty()) {
      last = lead.back();
      lead.pop_back();
    }
    maskStep = last == 1 ? 0 : 1;
    maskRow = broadcastOffsets(lead, scoreLead);
    for (int64_t &m : maskRow)
      m *= last;
  }
  Shape outShape = batch;
  outShape.push_back(l);
  outShape.push_back(ev);
  Tensor out = Tensor::zeros(DType::F32, outShape);
  float scale = 1.0f / std::sqrt(static_cast<float>(e));
  const float ninf = -std::numeric_limits<float>::infinity();
  const Tensor &k = *kp, &v = *vp;
  float *o = out.mutableData<float>();
  // Heads that read the same keys and values (grouped-query attention's
  // repeated view) form a group. A decode-sized query (l <= 4) goes through
  // a group's keys and values a block at a time for all its heads, so they
  // are read from memory once, not once per head; each sum keeps its order.
  int64_t heads = numElementsOf(batch), widest = 1;
  std::vector<int64_t> groupStart;
  const float *lastK = nullptr, *lastV = nullptr;
  for (int64_t b = 0; b < heads; ++b) {
    const float *kb = batchMatrix(k, ko[b], s * e), *vb = batchMatrix(v, vo[b], s * ev);
    if (b == 0 || l > 4 || kb != lastK || vb != lastV)
      groupStart.push_back(b);
    lastK = kb, lastV = vb;
    widest = std::max(widest, b + 1 - groupStart.back());
  }
  groupStart.push_back(heads);
  bool boolMask = mask && mask->dtype() == DType::Bool;
  // A boolean mask is applied as the decode scores are made: a masked key's
  // score is -inf whatever its product, which is then not computed.
  bool maskedInScores = boolMask && l <= 4 && l && s && e;
  constexpr int64_t kKeyBlock = 64;
  parallelFor(static_cast<int64_t>(groupStart.size()) - 1, 1, [&](int64_t g0, int64_t g1) {
    float *scoresAll = scratch(static_cast<size_t>(widest * l * s), 1);
    for (int64_t g = g0; g < g1; ++g) {
      int64_t first = groupStart[g], last = groupStart[g + 1];
      const float *km = batchMatrix(k, ko[first], s * e), *vm = batchMatrix(v, vo[first], s * ev);
      auto scoresOf = [&](int64_t b) { return scoresAll + (b - first) * l * s; };
      if (!(l && s && e))
        std::fill(scoresAll, scoresAll + (last - first) * l * s, 0.0f);
      else if (l <= 4)
        for (int64_t kb = 0; kb < s; kb += kKeyBlock)
          for (int64_t b = first; b < last; ++b)
            for (int64_t i = 0; i < l; ++i)
              scoreRow(q.data<float>() + (qo[b] * l + i) * e, km + kb * e,
                       std::min(kKeyBlock, s - kb), e, scale, scoresOf(b) + i * s + kb,
                       maskedInScores ? mask->data<uint8_t>() + maskRow[b * l + i] + kb * maskStep
                                      : nullptr,
                       maskStep);
      else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)l, (int)s, (int)e, scale,
                    q.data<float>() + qo[first] * l * e, (int)e, km, (int)e, 0.0f, scoresAll,
                    (int)s);
      for (int64_t b = first; b < last; ++b)
        for (int64_t i = 0; i < l; ++i) {
          float *row = scoresOf(b) + i * s;
          if (mask && !maskedInScores) {
            int64_t mo = maskRow[b * l + i];
            if (boolMask) {
              const uint8_t *mb = mask->data<uint8_t>() + mo;
              for (int64_t j = 0; j < s; ++j)
                row[j] = mb[j * maskStep] ? row[j] : ninf;
            } else if (mask->dtype() == DType::F32) {
              const float *mf = mask->data<float>() + mo;
              for (int64_t j = 0; j < s; ++j)
                row[j] += mf[j * maskStep];
            } else {
              for (int64_t j = 0; j < s; ++j)
                row[j] += mask->floatAt(mo + j * maskStep);
            }
          }
          float mx = ninf;
          for (int64_t j = 0; j < s; ++j)
            mx = std::max(mx, row[j]);
          float sum = 0;
          // exp(-inf - mx) is 0 for every mx the max can be: masked keys
          // need no exp.
          for (int64_t j = 0; j < s; ++j)
            sum += (row[j] = mx == ninf || row[j] == ninf ? 0.0f : std::exp(row[j] - mx));
          for (int64_t j = 0; j < s; ++j)
            row[j] = sum > 0 ? row[j] / sum : 0.0f;
        }
      if (!(l && ev && s))
        continue;
      if (l <= 4) {
        // out_i = sum_j p_ij V_j, streaming V once per group.
        for (int64_t kb = 0; kb < s; kb += kKeyBlock)
          for (int64_t b = first; b < last; ++b)
            for (int64_t i = 0; i < l; ++i)
              weightedRows(scoresOf(b) + i * s + kb, vm + kb * ev, std::min(kKeyBlock, s - kb), ev,
                           o + (b * l + i) * ev);
      } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)l, (int)ev, (int)s, 1.0f,
                    scoresAll, (int)s, vm, (int)ev, 0.0f, o + first * l * ev, (int)ev);
      }
    }
  });
  ctx.setOutput(0, std::move(out));
}

} // namespace anefit::runtime
