//===- Lazy.cpp - Repeated views and the compressed-value base ------------===//
//
// TiledValue, and what every CompressedValue shares: materializing, fp16
// rounding, and the row-at-a-time dot product the formats without a fused
// kernel use.
//
//===----------------------------------------------------------------------===//
#include "runtime/kernels/Lazy.h"
#include "runtime/kernels/Simd.h"

#include "runtime/ThreadPool.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace anefit::runtime {

//===----------------------------------------------------------------------===//
// TiledValue
//===----------------------------------------------------------------------===//

TiledValue::TiledValue(Tensor base, std::vector<int64_t> reps)
    : base_(std::move(base)), reps_(std::move(reps)) {
  for (size_t d = 0; d < reps_.size(); ++d)
    tiled_.push_back(base_.dim(static_cast<int64_t>(d)) * reps_[d]);
  for (size_t d = reps_.size(); d-- > 0;) {
    if (reps_[d] != 1)
      break;
    contiguous_ *= base_.dim(static_cast<int64_t>(d));
  }
}

Tensor TiledValue::materialize() const {
  Tensor out = Tensor::empty(base_.dtype(), tiled_);
  tileInto(base_.bytes(), base_.shape(), reps_, out.mutableBytes(), dtypeBits(base_.dtype()) / 8);
  return out;
}

int64_t TiledValue::baseOffset(int64_t i) const {
  int64_t off = 0, stride = 1;
  for (size_t d = tiled_.size(); d-- > 0;) {
    int64_t n = base_.dim(static_cast<int64_t>(d));
    int64_t c = i % tiled_[d];
    i /= tiled_[d];
    off += (c % n) * stride;
    stride *= n;
  }
  return off;
}

bool TiledValue::contiguousBlocks(int64_t block) const {
  return block > 0 && contiguous_ % block == 0;
}

const float *batchMatrix(const Tensor &t, int64_t b, int64_t matrixElements) {
  if (!t.isLazy())
    return t.dtype() == DType::F32 ? t.data<float>() + b * matrixElements : nullptr;
  const auto *tv = dynamic_cast<const TiledValue *>(t.lazyValue());
  if (!tv || tv->base().dtype() != DType::F32 || !tv->contiguousBlocks(matrixElements))
    return nullptr;
  return tv->base().data<float>() + tv->baseOffset(b * matrixElements);
}

//===----------------------------------------------------------------------===//
// CompressedValue
//===----------------------------------------------------------------------===//

namespace {

/// dot(a, b) over n floats.
float dotPortable(const float *a, const float *b, int64_t n) {
  // Eight independent sums: compilers turn them into vector lanes.
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j)
      s[j] += a[i + j] * b[i + j];
  for (; i < n; ++i)
    s[0] += a[i] * b[i];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) inline float dotAvx2(const float *a, const float *b,
                                                         int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
  }
  for (; i + 8 <= n; i += 8)
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_hadd_ps(h, h);
  h = _mm_hadd_ps(h, h);
  float r = _mm_cvtss_f32(h);
  // Fused as the fp16 kernel's tail is (Linear.cpp): the two give the same bits.
  for (; i < n; ++i)
    r = std::fma(a[i], b[i], r);
  return r;
}

/// fp32 values as simd::dot512 reads them.
struct F32Row512 {
  const float *a;
  __attribute__((target("avx512f"))) __m512 load16(int64_t c) const {
    return _mm512_loadu_ps(a + c);
  }
  float at(int64_t c) const { return a[c]; }
};
#elif defined(__aarch64__)
/// fp32 values as simd::dotNeon reads them.
struct F32RowNeon {
  const float *a;
  float32x4_t load4(int64_t c) const { return vld1q_f32(a + c); }
  float at(int64_t c) const { return a[c]; }
};
#endif

} // namespace

float dotF32(const float *a, const float *b, int64_t n) {
#if defined(__x86_64__)
  // Each ISA sums as its fp16 row kernel does (Linear.cpp).
  if (kernelIsa() >= KernelIsa::Avx512)
    return simd::dot512(F32Row512{a}, b, n);
  if (kernelIsa() != KernelIsa::Portable)
    return dotAvx2(a, b, n);
#elif defined(__aarch64__)
  if (kernelIsa() == KernelIsa::Neon)
    return simd::dotNeon(F32RowNeon{a}, b, n);
#endif
  return dotPortable(a, b, n);
}

namespace {

#if defined(__x86_64__)
// dotsF32 per ISA: each row's dot product inlined, so consecutive rows' sums
// overlap in the core and no call or ISA test comes between them.
__attribute__((target("avx2,fma"))) void dotsAvx2(const float *a, const float *rows, int64_t ld,
                                                  int64_t count, int64_t n, float *out) {
  for (int64_t j = 0; j < count; ++j)
    out[j] = dotAvx2(a, rows + j * ld, n);
}

__attribute__((target("avx512f"))) void dots512(const float *a, const float *rows, int64_t ld,
                                                int64_t count, int64_t n, float *out) {
  for (int64_t j = 0; j < count; ++j)
    out[j] = simd::dot512(F32Row512{a}, rows + j * ld, n);
}
#endif

} // namespace

void dotsF32(const float *a, const float *rows, int64_t ld, int64_t count, int64_t n, float *out) {
#if defined(__x86_64__)
  if (kernelIsa() >= KernelIsa::Avx512)
    return dots512(a, rows, ld, count, n, out);
  if (kernelIsa() != KernelIsa::Portable)
    return dotsAvx2(a, rows, ld, count, n, out);
#elif defined(__aarch64__)
  if (kernelIsa() == KernelIsa::Neon) {
    for (int64_t j = 0; j < count; ++j)
      out[j] = simd::dotNeon(F32RowNeon{a}, rows + j * ld, n);
    return;
  }
#endif
  for (int64_t j = 0; j < count; ++j)
    out[j] = dotPortable(a, rows + j * ld, n);
}

namespace {

float *rowBuffer(size_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < n)
    buf.resize(n);
  return buf.data();
}

} // namespace

void CompressedValue::decode(int64_t begin, int64_t n, float *dst) const {
  decodeRaw(begin, n, dst);
  if (roundHalf_)
    roundToHalfN(dst, n);
}

Tensor CompressedValue::materialize() const {
  Tensor out = Tensor::empty(DType::F32, shape_);
  float *o = out.mutableData<float>();
  int64_t n = out.numElements();
  parallelFor(n, int64_t(1) << 16, [&](int64_t b, int64_t e) { decode(b, e - b, o + b); });
  return out;
}

CompressedValue::DotOperand CompressedValue::prepareDot(int64_t cols, const float *x, int64_t ldx,
                                                        int64_t m, ProductGrade grade) const {
  DotOperand op;
  op.grade = grade;
  op.x = x;
  op.ldx = ldx;
  op.m = m;
  op.cols = cols;
  if (kernelIsa() != KernelIsa::Portable)
    roundHalf_ ? prepareRounded(op) : prepareFused(op);
  return op;
}

void CompressedValue::dotRows(const DotOperand &x, float *y, int64_t ldy, int64_t r0,
                              int64_t r1) const {
  if (x.fused) {
    dotRowsFused(x, y, ldy, r0, r1);
    return;
  }
  float *row = rowBuffer(static_cast<size_t>(x.cols));
  for (int64_t r = r0; r < r1; ++r) {
    decode(r * x.cols, x.cols, row);
    for (int64_t i = 0; i < x.m; ++i)
      y[i * ldy + r] = dotF32(row, x.x + i * x.ldx, x.cols);
  }
}

} // namespace anefit::runtime
