//===- Convert.cpp - Bulk fp16 conversions --------------------------------===//
//
// The F16C forms convert 8 values per instruction with round-to-nearest-even;
// NaNs are then rewritten to the canonical quiet NaN floatToHalf produces, so
// both paths agree bit for bit.
//
//===----------------------------------------------------------------------===//
#include "runtime/Convert.h"

#include "runtime/kernels/Isa.h"

#include "support/DType.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

/// Eight floats to fp16 bits, NaNs as sign | 0x7E00.
__attribute__((target("avx2,f16c"))) inline __m128i toHalf8(__m256 v) {
  __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
  __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  if (_mm256_movemask_ps(nan)) {
    __m128i mask = _mm_packs_epi32(_mm256_castsi256_si128(_mm256_castps_si256(nan)),
                                   _mm256_extractf128_si256(_mm256_castps_si256(nan), 1));
    __m128i canon =
        _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16(short(0x8000))), _mm_set1_epi16(0x7E00));
    h = _mm_blendv_epi8(h, canon, mask);
  }
  return h;
}

__attribute__((target("avx2,f16c"))) void floatToHalfF16C(const float *src, uint16_t *dst,
                                                          int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(dst + i), toHalf8(_mm256_loadu_ps(src + i)));
  for (; i < n; ++i)
    dst[i] = floatToHalf(src[i]);
}

__attribute__((target("avx2,f16c"))) void roundToHalfF16C(float *p, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(p + i, _mm256_cvtph_ps(toHalf8(_mm256_loadu_ps(p + i))));
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
