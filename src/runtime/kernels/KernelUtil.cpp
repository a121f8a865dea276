//===- KernelUtil.cpp - Helpers shared by the kernel families -------------===//
//
// Broadcasting, strided copies and fp16 widening used by many kernels.
//
//===----------------------------------------------------------------------===//
#include "runtime/kernels/KernelUtil.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace anefit::runtime {

Shape broadcastShapes(const KernelContext &ctx, const Shape &a, const Shape &b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      ctx.fail("shapes " + shapeStr(a) + " and " + shapeStr(b) + " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> broadcastOffsets(const Shape &in, const Shape &out) {
  std::vector<int64_t> offs(static_cast<size_t>(numElementsOf(out)));
  forEachBroadcast(in, out, [&](int64_t i, int64_t o) { offs[i] = o; });
  return offs;
}

AxisSplit splitAt(const Shape &shape, int64_t axis) {
  AxisSplit s;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < axis)
      s.outer *= shape[d];
    else if (d == axis)
      s.size = shape[d];
    else
      s.inner *= shape[d];
  }
  return s;
}

std::vector<int64_t> intsOfLength(KernelContext &ctx, std::string_view param, size_t n) {
  std::vector<int64_t> v = ctx.intsArg(param);
  if (v.size() != n)
    ctx.fail("parameter '" + std::string(param) + "' has " + std::to_string(v.size()) +
             " values, expected " + std::to_string(n));
  return v;
}

void gatherStrided(const uint8_t *in, uint8_t *out, int eb, const Shape &shape,
                   const std::vector<int64_t> &inStrides, int64_t inOffset) {
  int64_t rank = static_cast<int64_t>(shape.size());
  int64_t n = numElementsOf(shape);
  if (n == 0)
    return;
  if (rank == 0) {
    std::memcpy(out, in + inOffset * eb, eb);
    return;
  }
  // Copy the innermost dimension as a run when it is contiguous.
  int64_t inner = shape[rank - 1];
  bool contiguous = inStrides[rank - 1] == 1;
  std::vector<int64_t> idx(rank, 0);
  int64_t off = inOffset;
  for (int64_t o = 0; o < n; o += inner) {
    if (contiguous) {
      std::memcpy(out + o * eb, in + off * eb, static_cast<size_t>(inner * eb));
    } else {
      for (int64_t k = 0; k < inner; ++k)
        std::memcpy(out + (o + k) * eb, in + (off + k * inStrides[rank - 1]) * eb, eb);
    }
    for (int64_t d = rank - 2; d >= 0; --d) {
      off += inStrides[d];
      if (++idx[d] < shape[d])
        break;
      off -= inStrides[d] * shape[d];
      idx[d] = 0;
    }
  }
}

#if defined(__x86_64__)
__attribute__((target("f16c,avx"))) static void halfToFloatF16C(const uint16_t *src, float *dst,
                                                                int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
  for (; i < n; ++i)
    dst[i] = halfToFloat(src[i]);
}
#endif

void halfToFloatN(const uint16_t *src, float *dst, int64_t n) {
#if defined(__x86_64__)
  static const bool hasF16C = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  if (hasF16C) {
    halfToFloatF16C(src, dst, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i)
    dst[i] = halfToFloat(src[i]);
}

void loadRowsAsF32(const Tensor &m, int64_t cols, int64_t r0, int64_t r1, float *dst) {
  int64_t n = (r1 - r0) * cols;
  if (m.dtype() == DType::F32) {
    std::memcpy(dst, m.data<float>() + r0 * cols, static_cast<size_t>(n) * 4);
  } else if (m.dtype() == DType::F16) {
    halfToFloatN(m.data<uint16_t>() + r0 * cols, dst, n);
  } else {
    for (int64_t i = 0; i < n; ++i)
      dst[i] = m.floatAt(r0 * cols + i);
  }
}

} // namespace anefit::runtime
