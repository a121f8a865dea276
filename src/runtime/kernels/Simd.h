//===- Simd.h - Vector helpers shared by the weight kernels ------*- C++ -*-===//
//
// x86-64: the intrinsics header, the horizontal sums the dense (Linear.cpp) and
// compressed (Compressed.cpp) weight kernels both reduce their accumulators
// with, the one order of summation of the AVX-512 dot products, which
// the fp16 rows and the decoded rows of a compressed weight share (so a
// weight requantized to fp16 gives the bits its decoded original gives), and
// fp32 -> fp16 in registers with the bits floatToHalf gives (Convert.cpp's
// bulk conversions, the fp16-mode weight kernels).
// Each function carries its own target attribute, so the including file is
// built for the baseline ISA and picks a kernel at run time.
//
// aarch64: the one order of summation of the NEON dot products (fp16 rows,
// fp32 rows, decoded int4 blocks), for the same reason. NEON is aarch64's
// baseline: no target attributes.
//
//===----------------------------------------------------------------------===//
#pragma once

#if defined(__x86_64__)
// GCC 12 reports the AVX-512 intrinsics that start from an undefined register
// (_mm512_cvtph_ps, _mm512_shuffle_f32x4, ...) as maybe-uninitialized or
// uninitialized once inlined; the warning is about the header, not this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cmath>
#include <cstdint>

namespace anefit::runtime::simd {

/// Sum of the 8 lanes.
__attribute__((target("avx2"))) inline float hsum(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_hadd_ps(h, h);
  h = _mm_hadd_ps(h, h);
  return _mm_cvtss_f32(h);
}

/// Sum of the 16 lanes.
__attribute__((target("avx512f"))) inline float sum512(__m512 v) {
  __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                           _mm512_castps512_ps256(_mm512_shuffle_f32x4(v, v, 0xEE)));
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_hadd_ps(q, q);
  q = _mm_hadd_ps(q, q);
  return _mm_cvtss_f32(q);
}

/// Eight floats to fp16 bits (round to nearest even, overflow to inf), NaNs
/// as sign | 0x7E00: floatToHalf's bits.
__attribute__((target("avx2,f16c"))) inline __m128i halfBits8(__m256 v) {
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

/// halfBits8 of sixteen floats.
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m256i halfBits16(__m512 v) {
  __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
  __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  if (nan) {
    __m256i canon = _mm256_or_si256(_mm256_and_si256(h, _mm256_set1_epi16(short(0x8000))),
                                    _mm256_set1_epi16(0x7E00));
    h = _mm256_mask_blend_epi16(nan, h, canon);
  }
  return h;
}

/// dot(w, x) over k values as every AVX-512 dot product of the kernels sums
/// it: two accumulators of 16 lanes over 32 values a step, sum512, then the
/// last k % 32 values fused one by one in order. `w` reads the weights:
/// w.load16(c) (16 values from c as fp32, with a target attribute of its
/// own) and w.at(c) (one); with Prefetch, w.prefetch(c) once a step (a
/// weight stream read from memory; kernelPrefetches() says whether). The
/// order of summation is the same either way.
template <bool Prefetch = false, class Weights>
__attribute__((target("avx512f"))) inline float dot512(const Weights &w, const float *x,
                                                       int64_t k) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0;
  int64_t c = 0;
  for (; c + 32 <= k; c += 32) {
    if constexpr (Prefetch)
      w.prefetch(c);
    a0 = _mm512_fmadd_ps(w.load16(c), _mm512_loadu_ps(x + c), a0);
    a1 = _mm512_fmadd_ps(w.load16(c + 16), _mm512_loadu_ps(x + c + 16), a1);
  }
  float sum = sum512(_mm512_add_ps(a0, a1));
  for (; c < k; ++c)
    sum = std::fma(w.at(c), x[c], sum);
  return sum;
}

} // namespace anefit::runtime::simd

#elif defined(__aarch64__)
#include <arm_neon.h>

#include <cmath>
#include <cstdint>

namespace anefit::runtime::simd {

/// dot(w, x) over k values as every NEON dot product of the kernels sums it:
/// four accumulators of 4 lanes over 16 values a step, whole fours past the
/// last step into the first, the accumulators added in pairs and their lanes
/// summed, then the last k % 4 values fused one by one in order. `w` reads
/// the weights: w.load4(c) (4 values from c as fp32) and w.at(c) (one).
template <class Weights> inline float dotNeon(const Weights &w, const float *x, int64_t k) {
  float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
  int64_t c = 0;
  for (; c + 16 <= k; c += 16) {
    a0 = vfmaq_f32(a0, w.load4(c), vld1q_f32(x + c));
    a1 = vfmaq_f32(a1, w.load4(c + 4), vld1q_f32(x + c + 4));
    a2 = vfmaq_f32(a2, w.load4(c + 8), vld1q_f32(x + c + 8));
    a3 = vfmaq_f32(a3, w.load4(c + 12), vld1q_f32(x + c + 12));
  }
  for (; c + 4 <= k; c += 4)
    a0 = vfmaq_f32(a0, w.load4(c), vld1q_f32(x + c));
  float sum = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
  for (; c < k; ++c)
    sum = std::fma(w.at(c), x[c], sum);
  return sum;
}

} // namespace anefit::runtime::simd
#endif
