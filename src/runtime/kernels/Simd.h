//===- Simd.h - x86 vector helpers shared by the weight kernels -*- C++ -*-===//
//
// The intrinsics header and the horizontal sums the dense (Linear.cpp) and
// compressed (Compressed.cpp) weight kernels both reduce their accumulators
// with. Each function carries its own target attribute, so the including file
// is built for the baseline ISA and picks a kernel at run time.
//
//===----------------------------------------------------------------------===//
#pragma once

#if defined(__x86_64__)
// GCC 12 reports the AVX-512 intrinsics that start from an undefined register
// (_mm512_cvtph_ps, _mm512_shuffle_f32x4, ...) as maybe-uninitialized once
// inlined; the warning is about the header, not this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

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

} // namespace anefit::runtime::simd
#endif
