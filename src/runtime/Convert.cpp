//===- Convert.cpp - Bulk fp16 conversions --------------------------------===//
//
// The F16C forms convert 8 values per instruction with round-to-nearest-even;
// NaNs are then rewritten to the canonical quiet NaN floatToHalf produces, so
// both paths agree bit for bit.
//
//===----------------------------------------------------------------------===//
#include "runtime/Convert.h"

#include "runtime/kernels/Isa.h"
#include "runtime/kernels/Simd.h"

#include "support/DType.h"

#include <algorithm>

namespace anefit::runtime {
namespace {

#if defined(__x86_64__)
/// F16C conversions unless the kernels are held to portable code (both give
/// the same bits).
bool hasF16C() { return kernelIsa() != KernelIsa::Portable; }

__attribute__((target("avx2,f16c"))) void halfToFloatF16C(const uint16_t *src, float *dst,
                                                          int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
  for (; i < n; ++i)
    dst[i] = halfToFloatAt(src + i);
}

__attribute__((target("avx2,f16c"))) void floatToHalfF16C(const float *src, uint16_t *dst,
                                                          int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(dst + i), simd::halfBits8(_mm256_loadu_ps(src + i)));
  for (; i < n; ++i)
    dst[i] = floatToHalf(src[i]);
}

__attribute__((target("avx2,f16c"))) void roundToHalfF16C(float *p, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(p + i, _mm256_cvtph_ps(simd::halfBits8(_mm256_loadu_ps(p + i))));
  for (; i < n; ++i)
    p[i] = halfToFloat(floatToHalf(p[i]));
}
#endif

} // namespace

void toHalfRoundingN(float *p, uint16_t *half, int64_t n) {
  // Blocks small enough that the halves are read back from L1.
  constexpr int64_t kBlock = 2048;
  for (int64_t i = 0; i < n; i += kBlock) {
    int64_t m = std::min(kBlock, n - i);
    floatToHalfN(p + i, half + i, m);
    halfToFloatN(half + i, p + i, m);
  }
}

void halfToFloatN(const uint16_t *src, float *dst, int64_t n) {
#if defined(__x86_64__)
  if (hasF16C())
    return halfToFloatF16C(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i)
    dst[i] = halfToFloatAt(src + i);
}

void floatToHalfN(const float *src, uint16_t *dst, int64_t n) {
#if defined(__x86_64__)
  if (hasF16C())
    return floatToHalfF16C(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i)
    dst[i] = floatToHalf(src[i]);
}

void roundToHalfN(float *p, int64_t n) {
#if defined(__x86_64__)
  if (hasF16C())
    return roundToHalfF16C(p, n);
#endif
  for (int64_t i = 0; i < n; ++i)
    p[i] = halfToFloat(floatToHalf(p[i]));
}

} // namespace anefit::runtime
