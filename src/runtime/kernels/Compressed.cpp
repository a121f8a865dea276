//===- Compressed.cpp - constexpr_* weights decoded where they are read ---===//
//
// The CompressedValue forms of the constexpr ops:
//   BlockwiseValue  constexpr_blockwise_shift_scale, constexpr_affine_dequantize:
//                   (data - offset[block]) * scale[block]
//   LutValue        constexpr_lut_to_dense (iOS16 flat palette, iOS18 grouped
//                   palettes with vector entries)
//   SparseValue     constexpr_sparse_to_dense (bit mask + non-zero values)
// Inputs that are compressed values themselves (an iOS18 palette of quantized
// entries, quantized or palettized non-zero values) are read through them.
// decodeRaw computes exactly what the expanding kernels in Constexpr.cpp
// compute, element for element.
//
// Fused matrix-vector kernels (AVX2, FMA, F16C) read packed rows and
// dequantize in registers; they are bound by the instructions per byte, so
// they keep shuffles (two ports on the AVX2 machines measured) few:
//   int4/uint4 blocks: 32 bytes are read as eight 32-bit words, each holding
//     eight consecutive values; a mask leaves one nibble of every word in
//     place as an integer times a power of two, which converts to fp32
//     exactly, and x, permuted and scaled by the inverse power of two once
//     per call, makes each product u * x exactly. No shuffles, two
//     instructions per 8 values besides the FMA. int4 is read as uint4 of
//     the value plus 8 (one xor per word flips every nibble's sign bit).
//     Blocks multiply their partial sums by the block's scale (blocks of 32
//     read fp16 scales in the model file, no fp32 copy); offsets, and int4's
//     8, are taken off through per-block sums of x. With AVX-512,
//     blocks of 32 without offsets (export_llm's 4w) take the same kernel
//     with 16 lanes, 128 values per load, measured faster than the nibble
//     tables below on the AVX-512 machine measured (Zen 4).
//   int4/uint4 blocks of 32 without offsets, AVX-512 VNNI: x put on an
//     integer grid per block and multiplied in 8-bit dot products, summed
//     exactly in integers (see digitsForWords512). With AVX-VNNI (AVX2 CPUs
//     that have it) the same on 256-bit registers, with the same bits
//     (fusedDigitsVnni256Of). On other AVX2 CPUs, in a linear whose result
//     is fp16, x on a 16-bit grid per block and VPMADDUBSW (see
//     digitsForWords256).
//   16-entry fp16 palettes: two byte-table shuffles per 16 nibbles give the
//     fp16 values, F16C widens them; x is permuted once per call to the
//     order the nibbles come in (per 32 values: the even ones, then the odd).
//   6- and 8-bit palettes: byte planes of the fp16 entries looked up by
//     VPERMB/VPERMI2B with AVX-512 VBMI, by VPSHUFB on 16-entry tables and
//     VPBLENDVB with AVX2; palettes of other values gathered (VGATHERDPS)
//     from the fp32 palette (see planeGroup512).
//   8-bit blocks: bytes widened to fp32 eight at a time.
//   fp16 mode, 4-bit blocks and palettes: each block's 16 values rounded to
//     fp16 once into a table the nibbles index in registers, summed in
//     dotF32's order: the bits of the decoded, rounded row (tableRow512).
// With NEON (aarch64), int4/uint4 blocks of a multiple of 16 values: 8 bytes
// give 16 values (a mask, a shift and an interleave), decoded in registers
// as decodeRaw decodes them and summed in dotF32's order (simd::dotNeon):
// the bits of the decoded row (nibbleRowsNeon).
// Other forms decode a row into a small buffer and take its dot product.
//
//===----------------------------------------------------------------------===//
#include "runtime/kernels/Lazy.h"
#include "runtime/kernels/Simd.h"
#include "support/IntMath.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <type_traits>

namespace anefit::runtime {

namespace {

#if defined(__x86_64__)
using simd::hsum;
using simd::sum512;
#elif defined(__aarch64__)
/// The fused kernel a DotOperand is prepared for on aarch64.
constexpr int kFusedNibblesNeon = 1;
#endif

/// n values of `t` from flat element `begin`, as float (any numeric dtype,
/// sub-byte ones unpacked LSB-first; int4 signed).
void loadAsFloat(const Tensor &t, int64_t begin, int64_t n, float *dst) {
  const uint8_t *p = t.bytes();
  switch (t.dtype()) {
  case DType::F32:
    std::memcpy(dst, p + begin * 4, static_cast<size_t>(n) * 4);
    return;
  case DType::F16:
    halfToFloatN(reinterpret_cast<const uint16_t *>(p) + begin, dst, n);
    return;
  case DType::I8:
    for (int64_t i = 0; i < n; ++i)
      dst[i] = static_cast<float>(static_cast<int8_t>(p[begin + i]));
    return;
  case DType::U8:
    for (int64_t i = 0; i < n; ++i)
      dst[i] = static_cast<float>(p[begin + i]);
    return;
  case DType::I4:
  case DType::U4: {
    // Two values per byte through a 16-entry table (no branches).
    float table[16];
    for (int v = 0; v < 16; ++v)
      table[v] = static_cast<float>(t.dtype() == DType::I4 && v >= 8 ? v - 16 : v);
    int64_t i = 0, e = begin;
    if (n > 0 && (e & 1)) {
      dst[i++] = table[p[e >> 1] >> 4];
      ++e;
    }
    const uint8_t *b = p + (e >> 1);
    for (; i + 2 <= n; i += 2, ++b) {
      dst[i] = table[*b & 0xF];
      dst[i + 1] = table[*b >> 4];
    }
    if (i < n)
      dst[i] = table[*b & 0xF];
    return;
  }
  default:
    for (int64_t i = 0; i < n; ++i)
      dst[i] = t.floatAt(begin + i);
  }
}

/// n packed `bits`-wide unsigned values from element `begin` (LSB-first).
void loadIndices(const uint8_t *p, int bits, int64_t begin, int64_t n, uint32_t *dst) {
  if (bits == 8) {
    for (int64_t i = 0; i < n; ++i)
      dst[i] = p[begin + i];
    return;
  }
  if (bits == 4) {
    int64_t i = 0, e = begin;
    if (n > 0 && (e & 1)) {
      dst[i++] = p[e >> 1] >> 4;
      ++e;
    }
    const uint8_t *b = p + (e >> 1);
    for (; i + 2 <= n; i += 2, ++b) {
      dst[i] = *b & 0xF;
      dst[i + 1] = *b >> 4;
    }
    if (i < n)
      dst[i] = *b & 0xF;
    return;
  }
  uint32_t mask = (1u << bits) - 1;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t bit = static_cast<uint64_t>(begin + i) * static_cast<uint64_t>(bits);
    uint64_t byte = bit >> 3;
    uint32_t w = p[byte];
    if ((bit & 7) + static_cast<uint64_t>(bits) > 8)
      w |= static_cast<uint32_t>(p[byte + 1]) << 8;
    dst[i] = (w >> (bit & 7)) & mask;
  }
}

/// The values of a tensor input or of a compressed input, read by ranges.
struct Source {
  Tensor tensor;
  std::shared_ptr<const CompressedValue> value;

  void read(int64_t begin, int64_t n, float *dst) const {
    if (value)
      value->decode(begin, n, dst);
    else
      loadAsFloat(tensor, begin, n, dst);
  }
  int64_t numElements() const { return value ? value->numElements() : tensor.numElements(); }
  uint64_t storedBytes() const { return value ? value->storedBytes() : tensor.numBytes(); }
};

//===----------------------------------------------------------------------===//
// AVX2 building blocks
//===----------------------------------------------------------------------===//

#if defined(__x86_64__)

/// The fused kernels a DotOperand is prepared for.
constexpr int kFusedNibbles512 = 1, kFusedNibbles = 2, kFusedBytes = 3, kFusedWords = 4,
              kFusedWords512 = 5, kFusedDigits512 = 6, kFusedDigits256 = 7, kFusedDigitsVnni256 = 8,
              kFusedTables512 = 9, kFusedTables256 = 10, kFusedPlanes512 = 11, kFusedGather = 12,
              kFusedDigitsRounded256 = 13, kFusedPlanes256 = 14, kFusedNibblesInOrder = 15;

/// How far ahead of the packed rows the kernels prefetch (see Linear.cpp).
constexpr int64_t kPrefetchBytes = 4096;

/// Value k of each 32-bit word (nibble k, LSB first) as fp32, times a power
/// of two that permuteForWords takes off x: the nibble masked in place,
/// u * 2^4k, the last shifted down. int4 words are read as uint4 of the
/// values plus 8 (the sign bit of each nibble flipped once per word), and
/// the kernel takes 8 times the block's sum of x off.
template <int K> __attribute__((target("avx2"))) inline __m256 wordSlot(__m256i w) {
  if constexpr (K == 7)
    return _mm256_cvtepi32_ps(_mm256_srli_epi32(w, 28));
  else
    return _mm256_cvtepi32_ps(_mm256_and_si256(w, _mm256_set1_epi32(0xF << (4 * K))));
}

/// The power of two permuteForWords multiplies x by for value k of a word.
inline float wordSlotScale(int k) { return k < 7 ? std::ldexp(1.0f, -4 * k) : 1.0f; }

/// Values per row of x permuted by permuteForWords for groups of `words`
/// 32-bit words (8 in a 256-bit register, 16 in a 512-bit one): n rounded up
/// to a group, 8 * words values.
inline int64_t wordRowLength(int64_t n, int64_t words = 8) {
  return ceilDiv<int64_t>(n, 8 * words) * 8 * words;
}

/// x for wordDot: per group of `words` 32-bit words of eight values (64
/// values in 32 packed bytes for AVX2, 128 in 64 for AVX-512), slot k holds
/// x[8j + k] scaled by wordSlotScale over the words j. A row's last group may
/// be short: zeros fill the words past n. `xq` has wordRowLength(n, words)
/// values.
void permuteForWords(const float *x, int64_t n, float *xq, int64_t words = 8) {
  float scales[8];
  for (int k = 0; k < 8; ++k)
    scales[k] = wordSlotScale(k);
  for (int64_t c = 0; c < n; c += 8 * words) {
    int64_t have = std::min<int64_t>(words, (n - c) / 8);
    for (int k = 0; k < 8; ++k)
      for (int64_t j = 0; j < words; ++j)
        xq[c + k * words + j] = j < have ? x[c + 8 * j + k] * scales[k] : 0.0f;
  }
}

/// Prefetches the two 64-byte lines kPrefetchBytes past p (128 bytes of a
/// row the AVX-512 kernels stream).
inline void prefetchAhead128(const uint8_t *p) {
  const char *next = reinterpret_cast<const char *>(p) + kPrefetchBytes;
  _mm_prefetch(next, _MM_HINT_T0);
  _mm_prefetch(next + 64, _MM_HINT_T0);
}

/// The sign bit of each of a 32-bit word's eight nibbles: int4 q xor 8 is
/// q + 8 as uint4.
constexpr int kNibbleSignBits = static_cast<int>(0x88888888u);

/// The words of int4 data as uint4 of the values plus 8; uint4 unchanged.
template <bool Signed> __attribute__((target("avx2"))) inline __m256i wordBits(__m256i w) {
  if constexpr (Signed)
    return _mm256_xor_si256(w, _mm256_set1_epi32(kNibbleSignBits));
  else
    return w;
}

/// Eight lanes whose sum is start + dot(u, x) over the 64 values of the
/// words `w` (lane j: words j's values), xq permuted by permuteForWords; with
/// FromZero, dot(u, x) alone (start unread: a register fewer). Two chains of
/// four products (four chains of two measured no faster: the kernel is
/// bound by its instructions, not by the chains' latency).
template <bool FromZero = false>
__attribute__((target("avx2,fma"))) inline __m256 wordDot(__m256i w, const float *xq,
                                                          __m256 start = __m256()) {
  __m256 a = FromZero ? _mm256_mul_ps(wordSlot<0>(w), _mm256_loadu_ps(xq))
                      : _mm256_fmadd_ps(wordSlot<0>(w), _mm256_loadu_ps(xq), start);
  __m256 b = _mm256_mul_ps(wordSlot<1>(w), _mm256_loadu_ps(xq + 8));
  a = _mm256_fmadd_ps(wordSlot<2>(w), _mm256_loadu_ps(xq + 16), a);
  b = _mm256_fmadd_ps(wordSlot<3>(w), _mm256_loadu_ps(xq + 24), b);
  a = _mm256_fmadd_ps(wordSlot<4>(w), _mm256_loadu_ps(xq + 32), a);
  b = _mm256_fmadd_ps(wordSlot<5>(w), _mm256_loadu_ps(xq + 40), b);
  a = _mm256_fmadd_ps(wordSlot<6>(w), _mm256_loadu_ps(xq + 48), a);
  b = _mm256_fmadd_ps(wordSlot<7>(w), _mm256_loadu_ps(xq + 56), b);
  return _mm256_add_ps(a, b);
}

/// -8 times the sum of x over each 8 values, the start of each lane of
/// wordDot for int4 without offsets (u - 8 = q): rounded up to a group of
/// `words`, zeros past n.
void wordStarts(const float *x, int64_t n, float *starts, int64_t words = 8) {
  for (int64_t w = 0; w < wordRowLength(n, words) / 8; ++w) {
    float s = 0;
    for (int64_t k = 8 * w; k < std::min(n, 8 * w + 8); ++k)
      s += x[k];
    starts[w] = -8.0f * s;
  }
}

/// wordDot of the word group of a packed row (16 bytes per 32 values) that
/// starts at 32-value unit `unit`; xq is the row's x from permuteForWords,
/// `starts` its wordStarts (int4 without offsets) or null.
template <bool Signed>
__attribute__((target("avx2,fma"))) inline __m256 wordDotAt(const uint8_t *row, const float *xq,
                                                            const float *starts, int64_t unit) {
  return wordDot(
      wordBits<Signed>(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(row + unit * 16))),
      xq + unit * 32, starts ? _mm256_loadu_ps(starts + unit * 4) : _mm256_setzero_ps());
}

/// wordDotAt of sums started at zero.
template <bool Signed>
__attribute__((target("avx2,fma"))) inline __m256 wordDotAt(const uint8_t *row, const float *xq,
                                                            int64_t unit) {
  return wordDot<true>(
      wordBits<Signed>(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(row + unit * 16))),
      xq + unit * 32);
}

/// wordSlot with 16 lanes.
template <int K> __attribute__((target("avx512f"))) inline __m512 wordSlot512(__m512i w) {
  if constexpr (K == 7)
    return _mm512_cvtepi32_ps(_mm512_srli_epi32(w, 28));
  else
    return _mm512_cvtepi32_ps(_mm512_and_si512(w, _mm512_set1_epi32(0xF << (4 * K))));
}

/// wordDot with 16 lanes: 128 values (16 words), xq permuted by
/// permuteForWords with groups of 16 words.
__attribute__((target("avx512f"))) inline __m512 wordDot512(__m512i w, const float *xq,
                                                            __m512 start) {
  __m512 a = _mm512_fmadd_ps(wordSlot512<0>(w), _mm512_loadu_ps(xq), start);
  __m512 b = _mm512_mul_ps(wordSlot512<1>(w), _mm512_loadu_ps(xq + 16));
  a = _mm512_fmadd_ps(wordSlot512<2>(w), _mm512_loadu_ps(xq + 32), a);
  b = _mm512_fmadd_ps(wordSlot512<3>(w), _mm512_loadu_ps(xq + 48), b);
  a = _mm512_fmadd_ps(wordSlot512<4>(w), _mm512_loadu_ps(xq + 64), a);
  b = _mm512_fmadd_ps(wordSlot512<5>(w), _mm512_loadu_ps(xq + 80), b);
  a = _mm512_fmadd_ps(wordSlot512<6>(w), _mm512_loadu_ps(xq + 96), a);
  b = _mm512_fmadd_ps(wordSlot512<7>(w), _mm512_loadu_ps(xq + 112), b);
  return _mm512_add_ps(a, b);
}

// The 8-bit dot product kernel (AVX-512 VNNI) for 4-bit blocks of 32: x is
// put on a per-block integer grid and the products of the grid values with
// the 4-bit values are summed exactly, in integers.
//   - Block b's grid step is 2^(e - 21), e the exponent of the block's
//     largest |x| (at least -100): each x becomes the nearest multiple n of
//     the step, |n| <= 2^22, off by at most half a step (2^-22 of that
//     largest |x|, the spacing of fp32 values near it).
//   - n is written as three signed bytes, n = 65536 h + 256 m + l, and
//     VPDPBUSD multiplies each byte array by the 4-bit values (unsigned
//     bytes) four at a time into 32-bit lanes: lane p of a 64-byte group
//     sums values 8p..8p+7 (the low nibbles against the even values' bytes,
//     the high nibbles against the odd ones'). 65536 h + 256 m + l of a
//     lane is its exact integer sum (|sum| < 2^31), converted to fp32 once
//     and scaled by the block's scale times its step.
//   - int4 is read as uint4 of the value plus 8 (the sign bit of each
//     nibble flipped) and each lane starts at -8 times its n: exact too.
// Compared with fp32 FMAs over the exact x, each product is off by at most
// |q| * scale * step / 2 and nothing else is rounded until a block's sum:
// the error is of the size of fp32 accumulation's own.

/// Bytes of one group of 128 values (64 packed bytes) of digitsForWords512:
/// h, m and l of the even values, then of the odd ones, 64 bytes each.
constexpr int64_t kDigitGroupBytes = 384;

/// Zeros what a grid prep's block loop leaves unwritten, for x of n values
/// in groups of `values` (groupBytes of digits, values / 8 lane starts and
/// values / 32 steps each, rounded up): a last group short of blocks, and
/// uint4's lane starts. Called before the loop (a short last group's blocks
/// are written over the zeros).
void zeroPastBlocks(int64_t n, int64_t values, int64_t groupBytes, bool isSigned, int8_t *digits,
                    int32_t *starts, float *steps) {
  int64_t groups = ceilDiv<int64_t>(n, values), blocks = n / 32, perGroup = values / 32;
  std::fill(digits + (blocks / perGroup) * groupBytes, digits + groups * groupBytes, int8_t(0));
  std::fill(starts + (isSigned ? blocks * 4 : 0), starts + groups * (values / 8), 0);
  std::fill(steps + blocks, steps + groups * perGroup, 0.0f);
}

/// x (n values, n a multiple of 32) on its blocks' grids, for
/// fusedDigits512Of: per group of 128 values kDigitGroupBytes of digits and
/// 16 lane starts (int4: -8 times the sum of each lane's n; uint4: zeros),
/// and a step per block; groups rounded up (zeros past n). False, writing
/// nothing further, when x holds an infinity or a NaN (their products are
/// not integers: the fp32 kernel takes that x).
__attribute__((target("avx512f,avx512bw,avx512vl"))) bool
digitsForWords512(const float *x, int64_t n, bool isSigned, int8_t *digits, int32_t *starts,
                  float *steps) {
  const __m512 fltMax = _mm512_set1_ps(std::numeric_limits<float>::max());
  for (int64_t i = 0; i < n; i += 16)
    if (_mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + i)), fltMax, _CMP_LE_OQ) != 0xFFFF)
      return false;
  zeroPastBlocks(n, 128, kDigitGroupBytes, isSigned, digits, starts, steps);
  int64_t blocks = n / 32;
  // The even and the odd values of a block, 16 each (they meet the low and
  // the high nibbles).
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i half = _mm512_set1_epi32(128), byte = _mm512_set1_epi32(255);
  for (int64_t b = 0; b < blocks; ++b) {
    __m512 x0 = _mm512_loadu_ps(x + b * 32), x1 = _mm512_loadu_ps(x + b * 32 + 16);
    float big = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    int e = big > 0 ? std::max(std::ilogb(big), -100) : 0;
    steps[b] = std::ldexp(1.0f, e - 21);
    __m512 inv = _mm512_set1_ps(std::ldexp(1.0f, 21 - e));
    // The nearest grid values (the rounding mode's, to nearest even).
    __m512i n0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, inv));
    __m512i n1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, inv));
    int8_t *g = digits + (b / 4) * kDigitGroupBytes + (b % 4) * 16;
    for (int parity = 0; parity < 2; ++parity) {
      __m512i v = _mm512_permutex2var_epi32(n0, parity ? odd : even, n1);
      // n = 65536 h + 256 m + l, each digit in [-128, 127].
      __m512i lo = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(v, half), byte), half);
      v = _mm512_srai_epi32(_mm512_sub_epi32(v, lo), 8);
      __m512i mid = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(v, half), byte), half);
      __m512i hi = _mm512_srai_epi32(_mm512_sub_epi32(v, mid), 8);
      int8_t *at = g + parity * 192;
      _mm_storeu_si128(reinterpret_cast<__m128i *>(at), _mm512_cvtepi32_epi8(hi));
      _mm_storeu_si128(reinterpret_cast<__m128i *>(at + 64), _mm512_cvtepi32_epi8(mid));
      _mm_storeu_si128(reinterpret_cast<__m128i *>(at + 128), _mm512_cvtepi32_epi8(lo));
    }
    if (isSigned) {
      int32_t *lane = starts + (b / 4) * 16 + (b % 4) * 4;
      lane[0] = -8 * _mm512_mask_reduce_add_epi32(0x00FF, n0);
      lane[1] = -8 * _mm512_mask_reduce_add_epi32(0xFF00, n0);
      lane[2] = -8 * _mm512_mask_reduce_add_epi32(0x00FF, n1);
      lane[3] = -8 * _mm512_mask_reduce_add_epi32(0xFF00, n1);
    }
  }
  return true;
}

/// The 16 exact integer lane sums of one 64-byte group `w` (digits `d`,
/// lane starts `start`): see digitsForWords512.
template <bool Signed>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) inline __m512i
digitGroup512(__m512i w, const int8_t *d, __m512i start) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512i lo, hi;
  if constexpr (Signed) {
    // (nibble & 0xF) ^ 8 in one instruction: 0x6A is A & B ^ C.
    const __m512i eight = _mm512_set1_epi8(8);
    lo = _mm512_ternarylogic_epi32(w, low4, eight, 0x6A);
    hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(w, 4), low4, eight, 0x6A);
  } else {
    lo = _mm512_and_si512(w, low4);
    hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), low4);
  }
  const __m512i zero = _mm512_setzero_si512();
  __m512i h = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, lo, _mm512_loadu_si512(d)), hi,
                                  _mm512_loadu_si512(d + 192));
  __m512i m = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, lo, _mm512_loadu_si512(d + 64)), hi,
                                  _mm512_loadu_si512(d + 256));
  __m512i l = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(start, lo, _mm512_loadu_si512(d + 128)), hi,
                                  _mm512_loadu_si512(d + 320));
  __m512i t = _mm512_add_epi32(_mm512_slli_epi32(h, 8), m);
  return _mm512_add_epi32(_mm512_slli_epi32(t, 8), l);
}

// The AVX2 form of the 8-bit dot products, for linears whose result is
// fp16 (ProductGrade::Fp16): x on a coarser grid per block of 32 (16 bits),
// VPMADDUBSW multiplying two signed-byte digits with the 4-bit values.
//   - Block b's grid step is 2^(e - 14), e the exponent of the block's
//     largest |x| (at least -100), or 2^(e - 13) when that largest |x|
//     rounds past what two digits hold (n > 32639): each x becomes the
//     nearest multiple n of the step, off by at most half a step, which is
//     at most 2^-15 of the block's largest |x| (2^-14 in the second case,
//     a largest |x| within 0.4 % below a power of two): 16 times finer than
//     the spacing of fp16 values near it.
//   - n = 256 h + l, both signed bytes. Per 32 packed bytes (64 values, two
//     blocks) VPMADDUBSW multiplies the low nibbles with the even values'
//     digits and the high nibbles with the odd ones' (pairs summed in 16
//     bits: at most 2 * 15 * 128 per pair, no saturation); VPMADDWD sums
//     them into eight 32-bit lanes, lane p holding values 8p..8p+7, with h
//     weighted 256: the lane's exact integer sum (|sum| < 2^22), converted
//     once and scaled by its block's scale times its step.
//   - int4 is read as uint4 of the value plus 8 and each lane starts at -8
//     times its n, as in the AVX-512 form.
// About 39 vector instructions per 64 packed bytes of the loop, against 58
// for the fp32 word kernel, whose instructions bound the AVX2 kernels.

/// Bytes of one group of 64 values (32 packed bytes) of digitsForWords256:
/// l of the even values, l of the odd, h of the even, h of the odd, 32
/// bytes each.
constexpr int64_t kDigitGroupBytes256 = 128;

/// True when no x is an infinity or a NaN.
__attribute__((target("avx2"))) bool allFinite(const float *x, int64_t n) {
  const __m256 absMask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 fltMax = _mm256_set1_ps(std::numeric_limits<float>::max());
  for (int64_t i = 0; i < n; i += 8)
    if (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), absMask), fltMax,
                                         _CMP_LE_OQ)) != 0xFF)
      return false;
  return true;
}

/// The AVX2 grid preps' common part: for each block b of 32 values of x (n
/// a multiple of 32, every x finite), its grid step 2^(e - Fraction), e the
/// exponent of its largest |x| (at least -100), or twice that when the
/// largest |x| would round past Limit steps, into steps[b]; and the 32 grid
/// values (the nearest multiples of the step, ties to even) to each(b, v).
template <int Fraction, int Limit, class Each>
__attribute__((target("avx2"))) void forEachBlockOnGrid(const float *x, int64_t n, float *steps,
                                                        Each each) {
  const __m256 absMask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  alignas(32) int32_t v[32];
  for (int64_t b = 0; b < n / 32; ++b) {
    __m256 xs[4], big = _mm256_setzero_ps();
    for (int j = 0; j < 4; ++j) {
      xs[j] = _mm256_loadu_ps(x + b * 32 + 8 * j);
      big = _mm256_max_ps(big, _mm256_and_ps(xs[j], absMask));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(big), _mm256_extractf128_ps(big, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    float top = std::max(_mm_cvtss_f32(m4), _mm_cvtss_f32(_mm_movehdup_ps(m4)));
    int e = top > 0 ? std::max(std::ilogb(top), -100) : 0;
    if (std::nearbyint(std::ldexp(top, Fraction - e)) > static_cast<float>(Limit))
      ++e;
    steps[b] = std::ldexp(1.0f, e - Fraction);
    __m256 inv = _mm256_set1_ps(std::ldexp(1.0f, Fraction - e));
    for (int j = 0; j < 4; ++j)
      _mm256_store_si256(reinterpret_cast<__m256i *>(v + 8 * j),
                         _mm256_cvtps_epi32(_mm256_mul_ps(xs[j], inv)));
    each(b, static_cast<const int32_t *>(v));
  }
}

/// The int4 lane starts of a block's grid values v: -8 times the sum of
/// each 8.
inline void laneStarts(const int32_t *v, int32_t *starts) {
  for (int p = 0; p < 4; ++p) {
    int32_t s = 0;
    for (int i = 8 * p; i < 8 * p + 8; ++i)
      s += v[i];
    starts[p] = -8 * s;
  }
}

/// x (n values, n a multiple of 32) on its blocks' 16-bit grids, for
/// fusedDigits256Of: per group of 64 values kDigitGroupBytes256 of digits
/// and 8 lane starts (int4: -8 times the sum of each lane's n; uint4:
/// zeros), and a step per block; groups rounded up (zeros past n). False,
/// writing nothing, when x holds an infinity or a NaN.
__attribute__((target("avx2"))) bool digitsForWords256(const float *x, int64_t n, bool isSigned,
                                                       int8_t *digits, int32_t *starts,
                                                       float *steps) {
  if (!allFinite(x, n))
    return false;
  zeroPastBlocks(n, 64, kDigitGroupBytes256, isSigned, digits, starts, steps);
  forEachBlockOnGrid<14, 32639>(x, n, steps, [&](int64_t b, const int32_t *v) {
    int8_t *g = digits + (b / 2) * kDigitGroupBytes256 + (b % 2) * 16;
    for (int i = 0; i < 32; ++i) {
      int32_t lo = ((v[i] + 128) & 255) - 128, hi = (v[i] - lo) / 256;
      int8_t *at = g + (i % 2) * 32 + i / 2;
      at[0] = static_cast<int8_t>(lo);
      at[64] = static_cast<int8_t>(hi);
    }
    if (isSigned)
      laneStarts(v, starts + b * 4);
  });
  return true;
}

/// digitsForWords512 with AVX2 alone, for the AVX-VNNI kernel: the same
/// grids (the largest |x| is at most 2^22 steps: three digits hold it),
/// digits, starts and steps, byte for byte.
__attribute__((target("avx2"))) bool digitsForWords512Avx2(const float *x, int64_t n, bool isSigned,
                                                           int8_t *digits, int32_t *starts,
                                                           float *steps) {
  if (!allFinite(x, n))
    return false;
  zeroPastBlocks(n, 128, kDigitGroupBytes, isSigned, digits, starts, steps);
  forEachBlockOnGrid<21, (1 << 30)>(x, n, steps, [&](int64_t b, const int32_t *v) {
    int8_t *g = digits + (b / 4) * kDigitGroupBytes + (b % 4) * 16;
    for (int i = 0; i < 32; ++i) {
      // n = 65536 h + 256 m + l, each digit in [-128, 127].
      int32_t l = ((v[i] + 128) & 255) - 128, rest = (v[i] - l) / 256;
      int32_t m = ((rest + 128) & 255) - 128, h = (rest - m) / 256;
      int8_t *at = g + (i % 2) * 192 + i / 2;
      at[0] = static_cast<int8_t>(h);
      at[64] = static_cast<int8_t>(m);
      at[128] = static_cast<int8_t>(l);
    }
    if (isSigned)
      laneStarts(v, starts + b * 4);
  });
  return true;
}

/// The low and the high nibbles of 32 packed bytes as bytes, int4 as uint4
/// of the value plus 8 (wordBits).
template <bool Signed>
__attribute__((target("avx2"))) inline void nibbleBytes(__m256i w, __m256i &lo, __m256i &hi) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  w = wordBits<Signed>(w);
  lo = _mm256_and_si256(w, low4);
  hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), low4);
}

/// digitGroup512 on 256-bit registers (AVX-VNNI): the 8 lane sums of one
/// half of a 64-byte group (32 bytes `w`; `d` the group's digits, plus 32
/// for its second half; `start` the half's lane starts).
template <bool Signed>
__attribute__((target("avx2,avxvnni"))) inline __m256i digitHalfVnni256(__m256i w, const int8_t *d,
                                                                        __m256i start) {
  __m256i lo, hi;
  nibbleBytes<Signed>(w, lo, hi);
  const __m256i *dv = reinterpret_cast<const __m256i *>(d);
  const __m256i zero = _mm256_setzero_si256();
  // 64-byte rows of h, m, l of the even values, then of the odd ones.
  __m256i h = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(zero, lo, _mm256_loadu_si256(dv)), hi,
                                      _mm256_loadu_si256(dv + 6));
  __m256i m = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(zero, lo, _mm256_loadu_si256(dv + 2)),
                                      hi, _mm256_loadu_si256(dv + 8));
  __m256i l =
      _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(start, lo, _mm256_loadu_si256(dv + 4)), hi,
                              _mm256_loadu_si256(dv + 10));
  __m256i t = _mm256_add_epi32(_mm256_slli_epi32(h, 8), m);
  return _mm256_add_epi32(_mm256_slli_epi32(t, 8), l);
}

/// The 8 exact integer lane sums of a 32-byte group whose low and high
/// nibbles are the bytes `lo` and `hi` (digits `d`, lane starts `start`):
/// see digitsForWords256.
__attribute__((target("avx2"))) inline __m256i digitSums256(__m256i lo, __m256i hi, const int8_t *d,
                                                            __m256i start) {
  const __m256i *dv = reinterpret_cast<const __m256i *>(d);
  __m256i l = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256(dv)),
                               _mm256_maddubs_epi16(hi, _mm256_loadu_si256(dv + 1)));
  __m256i h = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256(dv + 2)),
                               _mm256_maddubs_epi16(hi, _mm256_loadu_si256(dv + 3)));
  __m256i t = _mm256_add_epi32(_mm256_madd_epi16(h, _mm256_set1_epi16(256)),
                               _mm256_madd_epi16(l, _mm256_set1_epi16(1)));
  return _mm256_add_epi32(t, start);
}

/// digitSums256 of the 32-byte group `w`.
template <bool Signed>
__attribute__((target("avx2"))) inline __m256i digitGroup256(__m256i w, const int8_t *d,
                                                             __m256i start) {
  __m256i lo, hi;
  nibbleBytes<Signed>(w, lo, hi);
  return digitSums256(lo, hi, d, start);
}

// fp16 mode's 4-bit blocks of 32 on the 16-bit grid (fusedDigitsRounded256Of,
// roundedProductsTakeGrid16). The device holds each weight as the fp16 of
// q * scale. An fp16 scale is m * 2^e with m an integer under 2048 (the
// significand of a normal scale, the bits of a subnormal one) and
// e = max(exponent field, 1) - 25, so q * m is an integer under 2^15 and
// the fp16 of q * scale is round(q * m) * 2^e, round keeping 11 significant
// bits, ties to even (the product finite: BlockwiseValue::roundsOnGrid).
// With r = round(q * m) - q * m (|r| <= 8), a block's rounded row is
//   sum (q * scale + r * 2^e) * x = scale * sum q x + 2^e * sum r x,
// and r is looked up per weight by the nibble byte (VPSHUFB, one 16-byte
// table per block, chosen by m): its sum goes through the same 8-bit
// digits as q's, as r + 8 (an unsigned byte, 0-16) with the lane starts
// -8 times the sum of the lane's x.

/// The round(q * m) of the comment above for an integer n = q * m, |n| < 2^15.
inline int32_t roundTo11Bits(int32_t n) {
  uint32_t a = static_cast<uint32_t>(n < 0 ? -n : n);
  int shift = std::max(0, static_cast<int>(std::bit_width(a)) - 11);
  if (shift > 0) {
    uint32_t kept = a >> shift, rest = a & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (kept & 1)))
      ++kept;
    a = kept << shift;
  }
  return n < 0 ? -static_cast<int32_t>(a) : static_cast<int32_t>(a);
}

/// For each m < 2048, the 16 bytes r + 8 of the nibble bytes u the kernels
/// read (q = u - 8 for int4, whose nibbles nibbleBytes reads as uint4 of
/// q + 8; q = u for uint4).
using RoundingTable = std::array<std::array<uint8_t, 16>, 2048>;
const RoundingTable &roundingCorrections(bool isSigned) {
  static const auto make = [](bool sgn) {
    RoundingTable t{};
    for (int32_t m = 0; m < 2048; ++m)
      for (int32_t u = 0; u < 16; ++u) {
        int32_t n = (sgn ? u - 8 : u) * m;
        t[static_cast<size_t>(m)][static_cast<size_t>(u)] =
            static_cast<uint8_t>(roundTo11Bits(n) - n + 8);
      }
    return t;
  };
  static const RoundingTable forSigned = make(true), forUnsigned = make(false);
  return isSigned ? forSigned : forUnsigned;
}

/// A block's factors for fusedDigitsRounded256Of from its fp16 scale bits h
/// and grid step: scale * step for the sum of q x, sign * 2^e * step for
/// the sum of r x, and m (the row of roundingCorrections).
struct RoundedFactors {
  float main, correction;
  int32_t m;
};
__attribute__((target("f16c"))) inline RoundedFactors roundedFactors(uint16_t h, float step) {
  int32_t exponent = (h >> 10) & 31, m = (h & 0x3FF) | (exponent ? 0x400 : 0);
  uint32_t unit = static_cast<uint32_t>(h & 0x8000) << 16 |
                  static_cast<uint32_t>(std::max(exponent, 1) - 25 + 127) << 23;
  return {_cvtsh_ss(h) * step, std::bit_cast<float>(unit) * step, m};
}

/// A vector of `lo` in lanes 0-3 and `hi` in lanes 4-7: the scales of the
/// two 32-value halves of a word group.
__attribute__((target("avx2"))) inline __m256 halves(float lo, float hi) {
  return _mm256_setr_m128(_mm_set1_ps(lo), _mm_set1_ps(hi));
}

// Block scales as the kernels read them: fp32 (converted once, kept with the
// value) or fp16 (read where the model file has them, widened by F16C: one
// instruction where halfToFloatAt is a call; a file's fp16 data need not be
// 2-byte aligned, so one is read by memcpy).
inline float scaleAsFloat(const float *s) { return *s; }
__attribute__((target("f16c"))) inline float scaleAsFloat(const uint16_t *s) {
  uint16_t h;
  std::memcpy(&h, s, sizeof h);
  return _cvtsh_ss(h);
}

/// Scales [0, 4) in lanes 0-3 and again in lanes 4-7.
__attribute__((target("avx2"))) inline __m256 scaleQuads(const float *sc) {
  return _mm256_broadcast_ps(reinterpret_cast<const __m128 *>(sc));
}
__attribute__((target("avx2,f16c"))) inline __m256 scaleQuads(const uint16_t *sc) {
  __m128 s = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(sc)));
  return _mm256_setr_m128(s, s);
}

/// Scales [0, 8).
__attribute__((target("avx2"))) inline __m256 scaleOctet(const float *sc) {
  return _mm256_loadu_ps(sc);
}
__attribute__((target("avx2,f16c"))) inline __m256 scaleOctet(const uint16_t *sc) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(sc)));
}

/// Scales [0, 4).
__attribute__((target("avx2"))) inline __m128 scaleQuad4(const float *sc) {
  return _mm_loadu_ps(sc);
}
__attribute__((target("avx2,f16c"))) inline __m128 scaleQuad4(const uint16_t *sc) {
  return _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(sc)));
}

/// Scales [0, n) (n <= 4) in lanes 0-3, zeros after.
__attribute__((target("avx2"))) inline __m128 scaleQuad(const float *sc, int64_t n) {
  float t[4] = {};
  std::memcpy(t, sc, static_cast<size_t>(n) * sizeof(float));
  return _mm_loadu_ps(t);
}
__attribute__((target("avx2,f16c"))) inline __m128 scaleQuad(const uint16_t *sc, int64_t n) {
  uint16_t t[8] = {};
  std::memcpy(t, sc, static_cast<size_t>(n) * sizeof(uint16_t));
  return _mm_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(t)));
}

/// A 16-entry fp16 palette as two pshufb tables: the low and the high byte
/// of each entry.
struct HalfPalette {
  uint8_t lo[16], hi[16];
};

/// a0..a3 += the 32 fp16 values whose low and high bytes the interleaves
/// w0 = unpacklo(l, h) and w1 = unpackhi(l, h) of 256-bit l, h pair (w0:
/// values 0-7 in lane 0, 16-23 in lane 1; w1: 8-15, 24-31), widened by F16C,
/// times x[0..31] in that order: x + 0, + 8, + 16, + 24 into a0..a3.
__attribute__((target("avx2,fma,f16c"))) inline void halfPairsDot(__m256i w0, __m256i w1,
                                                                  const float *x, __m256 &a0,
                                                                  __m256 &a1, __m256 &a2,
                                                                  __m256 &a3) {
  a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(w0)), _mm256_loadu_ps(x), a0);
  a1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(w1)), _mm256_loadu_ps(x + 8), a1);
  a2 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(w0, 1)), _mm256_loadu_ps(x + 16),
                       a2);
  a3 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(w1, 1)), _mm256_loadu_ps(x + 24),
                       a3);
}

/// a0..a3 += v(nibble_i) * x_i over one group of 32 nibbles, v from a
/// 16-entry fp16 palette whose low and high bytes are tlo, thi (each in both
/// 128-bit lanes): two byte-table shuffles give the fp16 values, an
/// interleave pairs their bytes, F16C widens them (halfPairsDot).
///   - Not InOrder, x permuted by permuteForNibbles: the 16 bytes in both
///     lanes, the high nibbles shifted down in the upper lane (lane 0 the
///     even columns, lane 1 the odd ones): 17 instructions per 32 values
///     where 128-bit ones took 22.
///   - InOrder, x as it is: the nibbles interleaved back into column order
///     first (byte j holds column 2j in its low nibble, 2j + 1 in its high
///     one), so values 0-7, 8-15, 16-23 and 24-31 go into a0..a3: dotAvx2's
///     order (Lazy.cpp), and in fp16 mode the bits of dotF32 of the decoded
///     row.
template <bool InOrder>
__attribute__((target("avx2,fma,f16c"))) inline void
paletteChunk(const uint8_t *p, const float *x, __m256i tlo, __m256i thi, __m256 &a0, __m256 &a1,
             __m256 &a2, __m256 &a3) {
  __m256i n;
  if constexpr (InOrder) {
    const __m128i low4 = _mm_set1_epi8(0x0F);
    __m128i b = _mm_loadu_si128((const __m128i *)p);
    __m128i lo = _mm_and_si128(b, low4), hi = _mm_and_si128(_mm_srli_epi16(b, 4), low4);
    n = _mm256_setr_m128i(_mm_unpacklo_epi8(lo, hi), _mm_unpackhi_epi8(lo, hi));
  } else {
    const __m256i down = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
    __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
    n = _mm256_and_si256(_mm256_srlv_epi32(b, down), _mm256_set1_epi8(0x0F));
  }
  __m256i l = _mm256_shuffle_epi8(tlo, n), h = _mm256_shuffle_epi8(thi, n);
  halfPairsDot(_mm256_unpacklo_epi8(l, h), _mm256_unpackhi_epi8(l, h), x, a0, a1, a2, a3);
}

/// acc += q_i * x_i over n (a multiple of 16) int8 or uint8 values.
template <bool Signed>
__attribute__((target("avx2,fma"))) inline __m256 byteDot(const uint8_t *p, const float *x,
                                                          int64_t n, __m256 acc) {
  __m256 acc1 = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    if ((i & 63) == 0)
      _mm_prefetch(reinterpret_cast<const char *>(p + i) + kPrefetchBytes, _MM_HINT_T0);
    __m128i b = _mm_loadu_si128((const __m128i *)(p + i));
    __m256i q0 = Signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
    __m128i b1 = _mm_unpackhi_epi64(b, b);
    __m256i q1 = Signed ? _mm256_cvtepi8_epi32(b1) : _mm256_cvtepu8_epi32(b1);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q0), _mm256_loadu_ps(x + i), acc);
    acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q1), _mm256_loadu_ps(x + i + 8), acc1);
  }
  return _mm256_add_ps(acc, acc1);
}

/// x permuted for nibbleDot512 and paletteChunk: per 32 elements the even
/// ones, then the odd.
void permuteForNibbles(const float *x, int64_t n, float *xp) {
  for (int64_t c = 0; c + 32 <= n; c += 32)
    for (int64_t j = 0; j < 16; ++j) {
      xp[c + j] = x[c + 2 * j];
      xp[c + 16 + j] = x[c + 2 * j + 1];
    }
}

/// One group of 32 packed nibbles: a0 += table[lo nibbles] * xp[0..15],
/// a1 += table[hi nibbles] * xp[16..31].
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void
nibbleChunk512(const uint8_t *p, const float *xp, __m512 table, __m512 &a0, __m512 &a1) {
  const __m128i low4 = _mm_set1_epi8(0x0F);
  __m128i b = _mm_loadu_si128((const __m128i *)p);
  __m512i lo = _mm512_maskz_cvtepu8_epi32(0xFFFF, _mm_and_si128(b, low4));
  __m512i hi = _mm512_maskz_cvtepu8_epi32(0xFFFF, _mm_and_si128(_mm_srli_epi16(b, 4), low4));
  a0 = _mm512_fmadd_ps(_mm512_maskz_permutexvar_ps(0xFFFF, lo, table), _mm512_loadu_ps(xp), a0);
  a1 =
      _mm512_fmadd_ps(_mm512_maskz_permutexvar_ps(0xFFFF, hi, table), _mm512_loadu_ps(xp + 16), a1);
}

/// a += table[nibble_i] * xp_i over `chunks` groups of 32 packed nibbles,
/// the 16-entry fp32 table in one register, into four independent
/// accumulators (one chain would wait on the FMA latency).
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void
nibbleDot512(const uint8_t *p, const float *xp, int64_t chunks, __m512 table, __m512 &a0,
             __m512 &a1, __m512 &a2, __m512 &a3) {
  int64_t c = 0;
  for (; c + 2 <= chunks; c += 2, p += 32, xp += 64) {
    if ((c & 3) == 0)
      _mm_prefetch(reinterpret_cast<const char *>(p) + kPrefetchBytes, _MM_HINT_T0);
    nibbleChunk512(p, xp, table, a0, a1);
    nibbleChunk512(p + 16, xp + 32, table, a2, a3);
  }
  if (c < chunks)
    nibbleChunk512(p, xp, table, a0, a1);
}

//===----------------------------------------------------------------------===//
// 6- and 8-bit palettes
//===----------------------------------------------------------------------===//
//
// 64 or 256 entries do not fit the nibble kernels' one-register tables.
// AVX-512 with VBMI: a palette of fp16 values is held as two byte planes
// (the low bytes of its entries, then the high bytes: one 512-bit register
// each for 64 entries, four for 256), looked up 64 indices at a time by
// byte permutes across the register (VPERMB for 64 entries; for 256, two
// VPERMI2B of 128 and a blend on each index's top bit), interleaved into
// fp16 values and widened by F16C: no gathers, and per 64 values about a
// dozen shuffles, whichever the index width. 6-bit indices (48 bytes per
// 64) become bytes by one VPERMB and one VPMULTISHIFTQB. AVX2 (and AVX-512
// without VBMI), fp16 palettes: the same planes cut into 16-entry tables,
// each looked up by VPSHUFB on the index's low four bits and chosen by its
// higher bits in a tree of VPBLENDVB (planeTree256): per 32 values 8
// shuffles and 6 blends for 64 entries, 32 and 30 for 256, no gathers.
// Otherwise (palettes that are not exactly fp16, and the last 8-24 values of
// a column block that is no multiple of 32): the fp32 palette, 1 KB at most,
// gathered from L1 eight indices at a time (VGATHERDPS), which the AMD Zen 3
// measured runs at about one value a cycle and a half.

/// Bytes of 64 packed indices of `Bits` bits.
template <int Bits> constexpr int64_t kPlaneGroupBytes = 8 * Bits;

/// x permuted for planeGroup512: per 64 values, the order in which the
/// interleaved planes widen (unpacks work within 128-bit lanes): 0-7, 16-23,
/// 32-39, 48-55, then 8-15, 24-31, 40-47, 56-63.
void permuteForPlanes(const float *x, int64_t n, float *xp) {
  static constexpr int kStart[8] = {0, 16, 32, 48, 8, 24, 40, 56};
  for (int64_t c = 0; c + 64 <= n; c += 64)
    for (int j = 0; j < 8; ++j)
      std::memcpy(xp + c + 8 * j, x + c + kStart[j], 8 * sizeof(float));
}

/// a0..a3 += v(index_i) * xp_i over one group of 64 indices at p (xp
/// permuted by permuteForPlanes), v from the fp16 palette whose byte planes
/// are `planes` (2 registers for 6 bits: low, high; 8 for 8 bits: four of
/// low bytes, four of high).
template <int Bits>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,f16c"))) inline void
planeGroup512(const uint8_t *p, const float *xp, const __m512i *planes, __m512 &a0, __m512 &a1,
              __m512 &a2, __m512 &a3) {
  __m512i lo, hi;
  if constexpr (Bits == 6) {
    // Indices 8j..8j+7 are bytes 6j..6j+5: spread to qword j, then each
    // index's 6 bits shifted to its own byte (VPERMB reads the low 6).
    alignas(64) static constexpr uint8_t kSpread[64] = {
        0,  1,  2,  3,  4,  5,  5,  5,  6,  7,  8,  9,  10, 11, 11, 11, 12, 13, 14, 15, 16, 17,
        17, 17, 18, 19, 20, 21, 22, 23, 23, 23, 24, 25, 26, 27, 28, 29, 29, 29, 30, 31, 32, 33,
        34, 35, 35, 35, 36, 37, 38, 39, 40, 41, 41, 41, 42, 43, 44, 45, 46, 47, 47, 47};
    const __m512i shifts = _mm512_set1_epi64(0x2A241E18120C0600LL); // 0, 6, ..., 42
    __m512i raw = _mm512_maskz_loadu_epi8(0x0000FFFFFFFFFFFFULL, p);
    __m512i idx = _mm512_multishift_epi64_epi8(
        shifts, _mm512_permutexvar_epi8(_mm512_load_si512(kSpread), raw));
    lo = _mm512_permutexvar_epi8(idx, planes[0]);
    hi = _mm512_permutexvar_epi8(idx, planes[1]);
  } else {
    static_assert(Bits == 8);
    __m512i idx = _mm512_loadu_si512(p);
    __mmask64 upper = _mm512_movepi8_mask(idx); // entries 128-255
    lo = _mm512_mask_blend_epi8(upper, _mm512_permutex2var_epi8(planes[0], idx, planes[1]),
                                _mm512_permutex2var_epi8(planes[2], idx, planes[3]));
    hi = _mm512_mask_blend_epi8(upper, _mm512_permutex2var_epi8(planes[4], idx, planes[5]),
                                _mm512_permutex2var_epi8(planes[6], idx, planes[7]));
  }
  __m512i h0 = _mm512_unpacklo_epi8(lo, hi), h1 = _mm512_unpackhi_epi8(lo, hi);
  a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h0)), _mm512_loadu_ps(xp), a0);
  a1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(h0, 1)), _mm512_loadu_ps(xp + 16),
                       a1);
  a2 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h1)), _mm512_loadu_ps(xp + 32), a2);
  a3 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(h1, 1)), _mm512_loadu_ps(xp + 48),
                       a3);
}

/// Table t of a byte plane (entries 16t..16t+15) looked up by each byte of i.
__attribute__((target("avx2"))) inline __m256i planeTable256(const uint8_t *plane, int t,
                                                             __m256i i) {
  return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128(
                                 reinterpret_cast<const __m128i *>(plane + 16 * t))),
                             i);
}

/// Entries 16 first .. 16 (first + 2^Level) - 1 looked up by the low four
/// bits of each byte of `low` in the 16-byte tables of `plane` (one per 16
/// entries, read into both 128-bit lanes), the tables chosen by the bits
/// whose copies `sel` holds in each byte's top bit (sel[l] for level l + 1);
/// depth first, at most Level + 1 leaves live at once. With High, each leaf
/// is also table first + 2^(Level + 1)'s, taken where the index's top bit is
/// set: VPSHUFB gives zero for a byte whose top bit is set, so `low` keeps
/// that bit, `lowHigh` has it flipped, and an OR joins the two tables.
template <int Level, bool High>
__attribute__((target("avx2"))) inline __m256i
planeTree256(const uint8_t *plane, int first, __m256i low, __m256i lowHigh, const __m256i *sel) {
  if constexpr (Level == 0) {
    if constexpr (High)
      return _mm256_or_si256(planeTable256(plane, first, low),
                             planeTable256(plane, first + 8, lowHigh));
    else
      return planeTable256(plane, first, low);
  } else {
    __m256i a = planeTree256<Level - 1, High>(plane, first, low, lowHigh, sel);
    __m256i b = planeTree256<Level - 1, High>(plane, first + (1 << (Level - 1)), low, lowHigh, sel);
    return _mm256_blendv_epi8(a, b, sel[Level - 1]);
  }
}

/// 32 `Bits`-bit indices (24 or 32 bytes at p, all inside the data) as the
/// 32 bytes of a register, each index in its byte's low `Bits` bits (6-bit:
/// bits 6-7 are left as they come; planeTree256's callers ignore them).
template <int Bits>
__attribute__((target("avx2"))) inline __m256i planeIndices256(const uint8_t *p) {
  if constexpr (Bits == 8) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p));
  } else {
    static_assert(Bits == 6);
    // Four indices are three bytes (LSB first): bytes 0-11 make dwords 0-3,
    // read from p; bytes 12-23 dwords 4-7, read from p + 8 (in bytes 4-15 of
    // the upper lane). Index j of a dword sits at its bits 6j..6j+5: shifted
    // left by 2j, it lands in byte j.
    __m256i raw = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))),
        _mm_loadu_si128(reinterpret_cast<const __m128i *>(p + 8)), 1);
    const __m256i spread =
        _mm256_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1, //
                         4, 5, 6, -1, 7, 8, 9, -1, 10, 11, 12, -1, 13, 14, 15, -1);
    __m256i dw = _mm256_shuffle_epi8(raw, spread);
    const __m256i byte1 = _mm256_set1_epi32(0x0000FF00), byte2 = _mm256_set1_epi32(0x00FF0000),
                  byte3 = _mm256_set1_epi32(static_cast<int>(0xFF000000u));
    __m256i idx = _mm256_blendv_epi8(dw, _mm256_slli_epi32(dw, 2), byte1);
    idx = _mm256_blendv_epi8(idx, _mm256_slli_epi32(dw, 4), byte2);
    return _mm256_blendv_epi8(idx, _mm256_slli_epi32(dw, 6), byte3);
  }
}

/// The fp16 values of the 32 `Bits`-bit indices at p (planeIndices256) from
/// a palette's byte planes lo and hi (entries' low bytes, then high):
/// values 0-7 and 16-23 in h0, 8-15 and 24-31 in h1 (unpacks stay in their
/// 128-bit lanes).
template <int Bits>
__attribute__((target("avx2"))) inline void
planeValues256(const uint8_t *p, const uint8_t *lo, const uint8_t *hi, __m256i &h0, __m256i &h1) {
  __m256i idx = planeIndices256<Bits>(p);
  // Bits 4 and 5 (and 6) of each index to their byte's top bit (16-bit
  // shifts: what crosses into the next byte stays below its top bit); 8-bit
  // indices choose by their top bit with ORs, so VPSHUFB reads it too.
  constexpr int kLevels = Bits == 8 ? 3 : 2;
  __m256i sel[kLevels];
  for (int l = 0; l < kLevels; ++l)
    sel[l] = _mm256_slli_epi16(idx, 3 - l);
  __m256i low = _mm256_and_si256(idx, _mm256_set1_epi8(static_cast<char>(Bits == 8 ? 0x8F : 0x0F)));
  __m256i vlo, vhi;
  if constexpr (Bits == 8) {
    __m256i lowHigh = _mm256_xor_si256(low, _mm256_set1_epi8(-128));
    vlo = planeTree256<3, true>(lo, 0, low, lowHigh, sel);
    vhi = planeTree256<3, true>(hi, 0, low, lowHigh, sel);
  } else {
    vlo = planeTree256<2, false>(lo, 0, low, low, sel);
    vhi = planeTree256<2, false>(hi, 0, low, low, sel);
  }
  h0 = _mm256_unpacklo_epi8(vlo, vhi);
  h1 = _mm256_unpackhi_epi8(vlo, vhi);
}

/// Eight `Bits`-bit indices (6 or 8 bytes at p) as 32-bit lanes; `tail`: p
/// may be the last bytes of the data (no byte past the 6 is read).
template <int Bits>
__attribute__((target("avx2"))) inline __m256i gatherIndices(const uint8_t *p, bool tail) {
  if constexpr (Bits == 8) {
    (void)tail;
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p)));
  } else {
    static_assert(Bits == 6);
    // Indices 0-3 are the low 24 bits of bytes 0-3, 4-7 of bytes 3-6: each
    // word in four lanes, shifted down by 6j.
    uint32_t lo, hi = 0;
    std::memcpy(&lo, p, 4);
    if (tail) // constant sizes: no call to memcpy
      std::memcpy(&hi, p + 3, 3);
    else
      std::memcpy(&hi, p + 3, 4);
    const __m256i down = _mm256_setr_epi32(0, 6, 12, 18, 0, 6, 12, 18);
    __m256i v =
        _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi32(static_cast<int>(lo))),
                                _mm_set1_epi32(static_cast<int>(hi)), 1);
    return _mm256_and_si256(_mm256_srlv_epi32(v, down), _mm256_set1_epi32(63));
  }
}

//===----------------------------------------------------------------------===//
// fp16 mode: 4-bit rows read through tables of their rounded values
//===----------------------------------------------------------------------===//
//
// In fp16 mode every value of a compressed weight is rounded to fp16, and a
// row's product is what dotF32 gives for the decoded, rounded row. A 4-bit
// block (a palette) has 16 values: rounded once into a table, they are
// looked up by the nibbles in registers, and each lane sums the columns
// dotF32's lanes sum, in the same order, so the result has the decoded row's
// bits without the row being decoded. Up to four weight rows go through the
// loop side by side: dotF32's order leaves one row two chains of FMAs, whose
// latency the other rows' hide. The rows are prefetched in software, always:
// four streams at once outrun the hardware prefetcher (on the Zen 5 measured,
// the LFM2-350M-shaped 4w step took 17.0 ms of CPU with the prefetch and
// 21.5 ms without).

/// Rounds v to fp16 and back; Checked: NaNs made canonical as roundToHalfN
/// makes them (tables that cannot hold a NaN skip the test).
template <bool Checked>
__attribute__((target("avx512f,avx512bw,avx512vl,f16c"))) inline __m512 roundedToHalf(__m512 v) {
  if constexpr (Checked)
    return _mm512_cvtph_ps(simd::halfBits16(v));
  else
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
template <bool Checked>
__attribute__((target("avx2,fma,f16c"))) inline __m256 roundedToHalf(__m256 v) {
  if constexpr (Checked)
    return _mm256_cvtph_ps(simd::halfBits8(v));
  else
    return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

/// The rounded values of a row's blocks: (q - offset) * scale, as
/// BlockwiseValue::decodeRaw computes them (without offsets q * scale, the
/// same bits as q - 0). tables(b) gives block b's 16 values for
/// tableRow512, tables(b, lo, hi) its values 0-7 and 8-15 for tableRow256.
template <bool Offsets, bool Checked> struct BlockTables {
  const float *q;       ///< the 16 data values as fp32
  const float *scales;  ///< the row's, per block
  const float *offsets; ///< the row's, per block, with Offsets

  __attribute__((target("avx512f,avx512bw,avx512vl,f16c"))) __m512 operator()(int64_t b) const {
    __m512 v = _mm512_loadu_ps(q);
    if constexpr (Offsets)
      v = _mm512_sub_ps(v, _mm512_set1_ps(offsets[b]));
    return roundedToHalf<Checked>(_mm512_mul_ps(v, _mm512_set1_ps(scales[b])));
  }
  __attribute__((target("avx2,fma,f16c"))) void operator()(int64_t b, __m256 &lo,
                                                           __m256 &hi) const {
    __m256 l = _mm256_loadu_ps(q), h = _mm256_loadu_ps(q + 8);
    if constexpr (Offsets) {
      l = _mm256_sub_ps(l, _mm256_set1_ps(offsets[b]));
      h = _mm256_sub_ps(h, _mm256_set1_ps(offsets[b]));
    }
    lo = roundedToHalf<Checked>(_mm256_mul_ps(l, _mm256_set1_ps(scales[b])));
    hi = roundedToHalf<Checked>(_mm256_mul_ps(h, _mm256_set1_ps(scales[b])));
  }
};

/// A row's 16-entry palettes, rounded, as BlockTables gives blocks.
template <bool Checked> struct PaletteTables {
  const float *palettes; ///< the row's, 16 values each

  __attribute__((target("avx512f,avx512bw,avx512vl,f16c"))) __m512 operator()(int64_t b) const {
    return roundedToHalf<Checked>(_mm512_loadu_ps(palettes + b * 16));
  }
  __attribute__((target("avx2,fma,f16c"))) void operator()(int64_t b, __m256 &lo,
                                                           __m256 &hi) const {
    lo = roundedToHalf<Checked>(_mm256_loadu_ps(palettes + b * 16));
    hi = roundedToHalf<Checked>(_mm256_loadu_ps(palettes + b * 16 + 8));
  }
};

/// out[j * M + i] = sum_c tables[j](c / (32 chunks))[nibble c of rows[j]] *
/// x_i[c] for R rows of `blocks` blocks of `chunks` 32-value chunks and M
/// rows of x (ldx apart), each summed as simd::dot512 sums the row's values.
/// A chunk's 16 bytes widen to 16 lanes: the low nibbles (the even columns)
/// and, shifted, the high ones (the odd), so x is permuted as
/// permuteForNibbles permutes it, and each lane's sum, the sum of one
/// column over the chunks in order, is put back in column order before the
/// two accumulators are added as dot512 adds them.
template <int R, int M, bool Chunk1, class Tables>
__attribute__((target("avx512f,avx512bw,avx512vl,f16c"))) inline void
tableRow512(const uint8_t *const *rows, const Tables *tables, int64_t blocks, int64_t chunks,
            const float *xp, int64_t ldx, float *out) {
  // Loops over R and M unrolled, so the accumulators stay in registers.
  __m512 a[R][M], b[R][M];
#pragma GCC unroll 4
  for (int j = 0; j < R; ++j)
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i)
      a[j][i] = b[j][i] = _mm512_setzero_ps();
  for (int64_t blk = 0, c = 0; blk < blocks; ++blk) {
    __m512 t[R];
#pragma GCC unroll 4
    for (int j = 0; j < R; ++j)
      t[j] = tables[j](blk);
    // Blocks of 32 (export_llm's 4w): one chunk, no inner loop.
    for (int64_t k = 0; k < (Chunk1 ? 1 : chunks); ++k, c += 32) {
#pragma GCC unroll 4
      for (int j = 0; j < R; ++j) {
        if ((c & 255) == 0)
          prefetchAhead128(rows[j] + c / 2);
        __m512i w = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(rows[j] + c / 2)));
        // permutexvar reads the low 4 bits of each lane: the nibble.
        __m512 wa = _mm512_permutexvar_ps(w, t[j]);
        __m512 wb = _mm512_permutexvar_ps(_mm512_srli_epi32(w, 4), t[j]);
#pragma GCC unroll 4
        for (int i = 0; i < M; ++i) {
          a[j][i] = _mm512_fmadd_ps(wa, _mm512_loadu_ps(xp + i * ldx + c), a[j][i]);
          b[j][i] = _mm512_fmadd_ps(wb, _mm512_loadu_ps(xp + i * ldx + c + 16), b[j][i]);
        }
      }
    }
  }
  // dot512's accumulators: columns 0-15 and 16-31 of every chunk.
  const __m512i low = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i high = _mm512_add_epi32(low, _mm512_set1_epi32(8));
  for (int j = 0; j < R; ++j)
    for (int i = 0; i < M; ++i)
      out[j * M + i] = sum512(_mm512_add_ps(_mm512_permutex2var_ps(a[j][i], low, b[j][i]),
                                            _mm512_permutex2var_ps(a[j][i], high, b[j][i])));
}

/// tableRow512 for AVX2, summed as dotAvx2 (Lazy.cpp) sums: four
/// accumulators of eight lanes per 32 values, each word's eight nibbles in
/// column order (x read as it is), a table's two halves picked by each
/// nibble's high bit.
template <int R, int M, class Tables>
__attribute__((target("avx2,fma,f16c"))) inline void
tableRow256(const uint8_t *const *rows, const Tables *tables, int64_t blocks, int64_t chunks,
            const float *x, int64_t ldx, float *out) {
  const __m256i down = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  const __m256i up = _mm256_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0);
  // Loops over R, M and the words unrolled, so the accumulators stay in
  // registers.
  __m256 s[R][M][4];
#pragma GCC unroll 4
  for (int j = 0; j < R; ++j)
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i)
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k)
        s[j][i][k] = _mm256_setzero_ps();
  for (int64_t blk = 0, c = 0; blk < blocks; ++blk) {
    __m256 lo[R], hi[R];
#pragma GCC unroll 4
    for (int j = 0; j < R; ++j)
      tables[j](blk, lo[j], hi[j]);
    for (int64_t ch = 0; ch < chunks; ++ch, c += 32)
#pragma GCC unroll 4
      for (int j = 0; j < R; ++j) {
        if ((c & 127) == 0)
          _mm_prefetch(reinterpret_cast<const char *>(rows[j] + c / 2) + kPrefetchBytes,
                       _MM_HINT_T0);
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          int32_t bits;
          std::memcpy(&bits, rows[j] + c / 2 + 4 * k, sizeof bits);
          __m256i w = _mm256_set1_epi32(bits);
          // permutevar8x32 reads the low 3 bits of the nibble, blendv the
          // sign bit, where the nibble's high bit is shifted.
          __m256i idx = _mm256_srlv_epi32(w, down);
          __m256 v = _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo[j], idx),
                                      _mm256_permutevar8x32_ps(hi[j], idx),
                                      _mm256_castsi256_ps(_mm256_sllv_epi32(w, up)));
#pragma GCC unroll 4
          for (int i = 0; i < M; ++i)
            s[j][i][k] = _mm256_fmadd_ps(v, _mm256_loadu_ps(x + i * ldx + c + 8 * k), s[j][i][k]);
        }
      }
  }
  for (int j = 0; j < R; ++j)
    for (int i = 0; i < M; ++i)
      out[j * M + i] = hsum(_mm256_add_ps(_mm256_add_ps(s[j][i][0], s[j][i][1]),
                                          _mm256_add_ps(s[j][i][2], s[j][i][3])));
}

/// Chooses the table kernel of this ISA for x (a 4-bit view whose blocks
/// are whole 32-value chunks) and permutes x for it.
void prepareTables(CompressedValue::DotOperand &x) {
  if (kernelIsa() >= KernelIsa::Avx512) {
    x.fused = kFusedTables512;
    x.permuted.resize(static_cast<size_t>(x.m * x.cols));
    for (int64_t i = 0; i < x.m; ++i)
      permuteForNibbles(x.x + i * x.ldx, x.cols, x.permuted.data() + i * x.cols);
  } else {
    x.fused = kFusedTables256;
  }
}

/// R rows of 4-bit values against up to four rows of x starting at x row i,
/// through the kernel prepareTables chose; out[j * m + i'] for row j, x row
/// i + i'.
template <int R, class Tables>
void tableRowsAt(const CompressedValue::DotOperand &x, const uint8_t *const *rows,
                 const Tables *tables, int64_t blocks, int64_t chunks, int64_t i, int64_t m,
                 float *out) {
  if (x.fused == kFusedTables512) {
    const float *xi = x.permuted.data() + i * x.cols;
    if (m == 4)
      tableRow512<R, 4, false>(rows, tables, blocks, chunks, xi, x.cols, out);
    else if (m == 3)
      tableRow512<R, 3, false>(rows, tables, blocks, chunks, xi, x.cols, out);
    else if (m == 2)
      tableRow512<R, 2, false>(rows, tables, blocks, chunks, xi, x.cols, out);
    else if (chunks == 1)
      tableRow512<R, 1, true>(rows, tables, blocks, chunks, xi, x.cols, out);
    else
      tableRow512<R, 1, false>(rows, tables, blocks, chunks, xi, x.cols, out);
  } else {
    const float *xi = x.x + i * x.ldx;
    if (m == 2)
      tableRow256<R, 2>(rows, tables, blocks, chunks, xi, x.ldx, out);
    else
      tableRow256<R, 1>(rows, tables, blocks, chunks, xi, x.ldx, out);
  }
}

/// y[i * ldy + r] for rows [r0, r1) of 4-bit values and every row i of x:
/// row r's bytes at rowBytes(r), its tables tablesOf(r), its `blocks`
/// blocks of `chunks` 32-value chunks. Rows go four at a time with one row
/// of x on AVX-512, two at a time with one or two rows of x, one at a time
/// with more (AVX-512 takes four rows of x at once, AVX2 two).
template <class RowBytes, class TablesOf>
void tableRows(const CompressedValue::DotOperand &x, int64_t r0, int64_t r1, int64_t blocks,
               int64_t chunks, float *y, int64_t ldy, RowBytes rowBytes, TablesOf tablesOf) {
  int64_t step = x.fused == kFusedTables512 ? 4 : 2;
  float out[8];
  int64_t r = r0;
  if (x.m == 1 && x.fused == kFusedTables512)
    for (; r + 4 <= r1; r += 4) {
      const uint8_t *rows[4] = {rowBytes(r), rowBytes(r + 1), rowBytes(r + 2), rowBytes(r + 3)};
      auto t0 = tablesOf(r), t1 = tablesOf(r + 1), t2 = tablesOf(r + 2), t3 = tablesOf(r + 3);
      decltype(t0) tables[4] = {t0, t1, t2, t3};
      tableRowsAt<4>(x, rows, tables, blocks, chunks, 0, 1, out);
      for (int j = 0; j < 4; ++j)
        y[r + j] = out[j];
    }
  if (x.m <= 2)
    for (; r + 2 <= r1; r += 2) {
      const uint8_t *rows[2] = {rowBytes(r), rowBytes(r + 1)};
      auto t0 = tablesOf(r), t1 = tablesOf(r + 1);
      decltype(t0) tables[2] = {t0, t1};
      tableRowsAt<2>(x, rows, tables, blocks, chunks, 0, x.m, out);
      for (int j = 0; j < 2; ++j)
        for (int64_t i = 0; i < x.m; ++i)
          y[i * ldy + r + j] = out[j * x.m + i];
    }
  for (; r < r1; ++r) {
    const uint8_t *rows[1] = {rowBytes(r)};
    auto t0 = tablesOf(r);
    for (int64_t i = 0; i < x.m; i += step) {
      int64_t m = std::min(step, x.m - i);
      tableRowsAt<1>(x, rows, &t0, blocks, chunks, i, m, out);
      for (int64_t k = 0; k < m; ++k)
        y[(i + k) * ldy + r] = out[k];
    }
  }
}

#endif

//===----------------------------------------------------------------------===//
// Block geometry shared by the blockwise and palette forms
//===----------------------------------------------------------------------===//

/// How a per-block parameter tensor of shape `blocks` (one entry per block of
/// `shape`) lays over the matrix view [rows, cols] with cols = the product of
/// every dim but the first: rows of `rowBlock` share an entry row, and
/// `colBlock` consecutive columns share an entry. Valid only when the dims
/// past the second have one block each.
struct MatrixBlocks {
  bool ok = false;
  int64_t cols = 0, rowBlock = 1, colBlock = 1, colBlocks = 1;
};

MatrixBlocks matrixBlocks(const Shape &shape, const Shape &blocks) {
  MatrixBlocks m;
  if (shape.size() < 2 || blocks.size() != shape.size())
    return m;
  for (size_t d = 2; d < shape.size(); ++d)
    if (blocks[d] != 1)
      return m;
  m.cols = 1;
  for (size_t d = 1; d < shape.size(); ++d)
    m.cols *= shape[d];
  m.rowBlock = shape[0] / blocks[0];
  m.colBlocks = blocks[1];
  m.colBlock = blocks[1] ? m.cols / blocks[1] : 0;
  m.ok = m.rowBlock > 0 && m.colBlock > 0;
  return m;
}

/// For a tensor of `shape` and a parameter of `blocks` entries per dim: the
/// parameter index of the first element of each row (rows = the last dim)
/// and the block length of the last dim.
struct RowMap {
  std::vector<int64_t> shape, blocks, blockLen, pstrides;
  int64_t last = 1, lastBlock = 1;

  RowMap(const Shape &s, const Shape &b) : shape(s), blocks(b) {
    for (size_t d = 0; d < s.size(); ++d)
      blockLen.push_back(b[d] ? s[d] / b[d] : 1);
    pstrides = stridesOf(b);
    if (!s.empty()) {
      last = s.back();
      lastBlock = blockLen.back();
    }
  }
  /// Parameter index of element (row, 0).
  int64_t rowBase(int64_t row) const {
    int64_t base = 0;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) {
      int64_t c = row % shape[d];
      row /= shape[d];
      base += (c / blockLen[d]) * pstrides[d];
    }
    return base;
  }
};

//===----------------------------------------------------------------------===//
// BlockwiseValue
//===----------------------------------------------------------------------===//

class BlockwiseValue final : public CompressedValue {
public:
  BlockwiseValue(Shape shape, bool roundHalf, Source data, Tensor scale, Tensor offset,
                 Shape blocks)
      : CompressedValue(std::move(shape), roundHalf), data_(std::move(data)),
        scale_(std::move(scale)), offset_(std::move(offset)), blocks_(std::move(blocks)),
        rows_(this->shape(), blocks_), matrix_(matrixBlocks(this->shape(), blocks_)) {
    int64_t nb = numElementsOf(blocks_);
    if (scale_.dtype() == DType::F16)
      scaleHalf_ = reinterpret_cast<const uint16_t *>(scale_.bytes());
    if (offset_.valid()) {
      offsetF_.resize(static_cast<size_t>(nb));
      loadAsFloat(offset_, 0, nb, offsetF_.data());
    }
  }

  uint64_t storedBytes() const override {
    return data_.storedBytes() + scale_.numBytes() + (offset_.valid() ? offset_.numBytes() : 0);
  }

protected:
  void decodeRaw(int64_t begin, int64_t n, float *dst) const override {
    data_.read(begin, n, dst);
    int64_t last = rows_.last;
    for (int64_t i = 0; i < n;) {
      int64_t e = begin + i, row = e / last, c = e % last;
      int64_t end = std::min(n - i, last - c);
      int64_t base = rows_.rowBase(row);
      // Block by block: one scale (and offset) per run of columns.
      for (int64_t k = 0; k < end;) {
        int64_t blk = (c + k) / rows_.lastBlock;
        int64_t stop = std::min(end, (blk + 1) * rows_.lastBlock - c);
        float sc = scaleAt(base + blk), of = offsetF_.empty() ? 0.0f : offsetF_[base + blk];
        for (float *d = dst + i + k, *e2 = dst + i + stop; d < e2; ++d)
          *d = (*d - of) * sc;
        k = stop;
      }
      i += end;
    }
  }

  void prepareFused(DotOperand &x) const override {
#if defined(__aarch64__)
    DType nibbles = data_.tensor.dtype();
    if (!data_.value && matrix_.ok && matrix_.cols == x.cols && matrix_.colBlock % 16 == 0 &&
        (nibbles == DType::I4 || nibbles == DType::U4))
      x.fused = kFusedNibblesNeon;
#endif
#if defined(__x86_64__)
    if (data_.value || !matrix_.ok || matrix_.cols != x.cols)
      return;
    DType dt = data_.tensor.dtype();
    bool nibbles = dt == DType::I4 || dt == DType::U4;
    bool bytes = dt == DType::I8 || dt == DType::U8;
    if ((nibbles && matrix_.colBlock % 32) || (bytes && matrix_.colBlock % 16) ||
        (!nibbles && !bytes))
      return;
    bool avx512 = kernelIsa() >= KernelIsa::Avx512;
    // AVX-512, blocks of 32 without offsets (the export_llm 4w form): the
    // word kernel with 16 lanes, measured faster than the nibble tables.
    bool words512 = avx512 && matrix_.colBlock == 32 && offsetF_.empty();
    x.fused = !nibbles   ? kFusedBytes
              : words512 ? kFusedWords512
              : avx512   ? kFusedNibbles512
                         : kFusedWords;
    int64_t cols = x.cols, nb = matrix_.colBlocks;
    if (x.fused == kFusedWords512 && kernelIsa() == KernelIsa::Avx512Vnni &&
        prepareDigits(x, dt == DType::I4, kFusedDigits512))
      return;
    // AVX2, blocks of 32 without offsets: with AVX-VNNI the 8-bit dot
    // products of AVX-512 VNNI on 256-bit registers (the same bits); without
    // it, for a product whose result is fp16, the 16-bit grid
    // (digitsForWords256).
    if (x.fused == kFusedWords && matrix_.colBlock == 32 && offsetF_.empty()) {
      if (kernelIsa() == KernelIsa::Avx2Vnni &&
          prepareDigits(x, dt == DType::I4, kFusedDigitsVnni256))
        return;
      if (x.grade == ProductGrade::Fp16 && kernelsTakeGrid16() &&
          prepareDigits(x, dt == DType::I4, kFusedDigits256))
        return;
    }
    if (x.fused == kFusedNibbles512) {
      x.permuted.resize(static_cast<size_t>(x.m * cols));
      for (int64_t i = 0; i < x.m; ++i)
        permuteForNibbles(x.x + i * x.ldx, cols, x.permuted.data() + i * cols);
    } else if (x.fused == kFusedWords || x.fused == kFusedWords512) {
      int64_t words = x.fused == kFusedWords ? 8 : 16, ld = wordRowLength(cols, words);
      x.permuted.resize(static_cast<size_t>(x.m * ld));
      for (int64_t i = 0; i < x.m; ++i)
        permuteForWords(x.x + i * x.ldx, cols, x.permuted.data() + i * ld, words);
      // The word kernels read int4 as uint4 of the values plus 8: without
      // offsets each lane's sum starts at -8 times its x, but for AVX2 blocks
      // of 32 (wordRow32), whose lanes start at zero; with offsets, or lanes
      // started at zero, 8 is taken off with the offsets through block sums.
      bool fromZero = x.fused == kFusedWords && matrix_.colBlock == 32;
      if (dt == DType::I4 && offsetF_.empty() && !fromZero) {
        x.starts.resize(static_cast<size_t>(x.m * (ld / 8)));
        for (int64_t i = 0; i < x.m; ++i)
          wordStarts(x.x + i * x.ldx, cols, x.starts.data() + i * (ld / 8), words);
      }
    }
    // The AVX-512 nibble kernel takes offsets into its per-block tables.
    bool int4FromZero = dt == DType::I4 && x.fused == kFusedWords && x.starts.empty();
    if ((!offsetF_.empty() || int4FromZero) && x.fused != kFusedNibbles512) {
      x.blockSums.resize(static_cast<size_t>(x.m * nb));
      for (int64_t i = 0; i < x.m; ++i)
        blockSums(x.x + i * x.ldx, x.blockSums.data() + i * nb);
    }
#endif
  }

  /// 4-bit data in blocks of whole 32-value chunks: the table kernels; on
  /// AVX2, blocks of 32 with fp16 scales and no offsets in a product whose
  /// result is fp16, the 16-bit grid with the rounded weights (see
  /// roundingCorrections).
  void prepareRounded(DotOperand &x) const override {
#if defined(__x86_64__)
    DType dt = data_.tensor.dtype();
    if (data_.value || !matrix_.ok || matrix_.cols != x.cols || matrix_.colBlock % 32 ||
        (dt != DType::I4 && dt != DType::U4))
      return;
    // Lane starts are -8 times the sums of x either way: the corrections
    // take them off.
    if (x.grade == ProductGrade::Fp16 && roundedProductsTakeGrid16() && matrix_.colBlock == 32 &&
        offsetF_.empty() && scaleHalf_ && roundsOnGrid(dt == DType::I4) &&
        prepareDigits(x, true, kFusedDigitsRounded256))
      return;
    prepareTables(x);
#endif
  }

  void dotRowsFused(const DotOperand &x, float *y, int64_t ldy, int64_t r0,
                    int64_t r1) const override {
#if defined(__x86_64__)
    DType dt = data_.tensor.dtype();
    bool isSigned = dt == DType::I4 || dt == DType::I8;
    if (x.fused == kFusedTables512 || x.fused == kFusedTables256)
      tableRowsOf(isSigned, x, y, ldy, r0, r1);
    else if (x.fused == kFusedNibbles512)
      fusedNibbles512(isSigned, x, y, ldy, r0, r1);
    else if (x.fused == kFusedWords)
      fusedWords(isSigned, x, y, ldy, r0, r1);
    else if (x.fused == kFusedWords512 || x.fused == kFusedDigits512 ||
             x.fused == kFusedDigits256 || x.fused == kFusedDigitsVnni256)
      fusedBlocksOf32(isSigned, x, y, ldy, r0, r1);
    else if (x.fused == kFusedDigitsRounded256)
      isSigned ? fusedDigitsRounded256Of<true>(x, y, ldy, r0, r1)
               : fusedDigitsRounded256Of<false>(x, y, ldy, r0, r1);
    else
      fusedBytes(isSigned, x, y, ldy, r0, r1);
#elif defined(__aarch64__)
    // Up to four rows of x share each decoded chunk of the row.
    bool isSigned = data_.tensor.dtype() == DType::I4;
    for (int64_t i = 0; i < x.m; i += 4) {
      const float *xs = x.x + i * x.ldx;
      float *ys = y + i * ldy;
      switch ((std::min<int64_t>(x.m - i, 4) - 1) * 2 + isSigned) {
      case 0:
        nibbleRowsNeon<false, 1>(xs, x.ldx, ys, ldy, x.cols, r0, r1);
        break;
      case 1:
        nibbleRowsNeon<true, 1>(xs, x.ldx, ys, ldy, x.cols, r0, r1);
        break;
      case 2:
        nibbleRowsNeon<false, 2>(xs, x.ldx, ys, ldy, x.cols, r0, r1);
        break;
      case 3:
        nibbleRowsNeon<true, 2>(xs, x.ldx, ys, ldy, x.cols, r0, r1);
        break;
      case 4:
        nibbleRowsNeon<false, 3>(xs, x.ldx, ys, ldy, x.cols, r0, r1);
        break;
      case 5:
        nibbleRowsNeon<true, 3>(xs, x.ldx, ys, ldy, x.cols, r0, r1);
        break;
      case 6:
        nibbleRowsNeon<false, 4>(xs, x.ldx, ys, ldy, x.cols, r0, r1);
        break;
      default:
        nibbleRowsNeon<true, 4>(xs, x.ldx, ys, ldy, x.cols, r0, r1);
        break;
      }
    }
#endif
  }

private:
#if defined(__aarch64__)
  /// y[i * ldy + r] for rows [r0, r1) of int4/uint4 data (Signed: int4) in
  /// blocks of a multiple of 16 values and M rows of x, ldx apart: 16 values
  /// at a time widened to fp32 and decoded as decodeRaw decodes them, (q -
  /// offset) * scale, then summed as simd::dotNeon sums (four accumulators,
  /// 4 values each per 16): each row gets the bits dotF32 gives its decoded
  /// row.
  template <bool Signed, int M>
  void nibbleRowsNeon(const float *xs, int64_t ldx, float *y, int64_t ldy, int64_t cols, int64_t r0,
                      int64_t r1) const {
    const uint8_t *data = data_.tensor.bytes();
    int64_t nb = matrix_.colBlocks, len = matrix_.colBlock;
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t *row = data + r * cols / 2;
      int64_t base = (r / matrix_.rowBlock) * nb;
      float32x4_t acc[M][4];
      for (auto &lanes : acc)
        for (float32x4_t &a : lanes)
          a = vdupq_n_f32(0.0f);
      for (int64_t c = 0; c < cols; c += 16) {
        int64_t blk = base + c / len;
        float sc = scaleAt(blk), of = offsetF_.empty() ? 0.0f : offsetF_[blk];
        // Byte j holds values 2j (low nibble) and 2j + 1 (high nibble).
        uint8x8_t b = vld1_u8(row + c / 2);
        uint8x8x2_t v = vzip_u8(vand_u8(b, vdup_n_u8(0x0F)), vshr_n_u8(b, 4));
        int8x16_t q = vreinterpretq_s8_u8(vcombine_u8(v.val[0], v.val[1]));
        if constexpr (Signed) // the sign bit of a nibble: q xor 8 minus 8
          q = vsubq_s8(veorq_s8(q, vdupq_n_s8(8)), vdupq_n_s8(8));
        int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_s8(vget_high_s8(q));
        float32x4_t w[4] = {vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))),
                            vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo))),
                            vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))),
                            vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi)))};
        for (float32x4_t &wj : w)
          wj = vmulq_n_f32(vsubq_f32(wj, vdupq_n_f32(of)), sc);
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < 4; ++j)
            acc[i][j] = vfmaq_f32(acc[i][j], w[j], vld1q_f32(xs + i * ldx + c + 4 * j));
      }
      for (int i = 0; i < M; ++i)
        y[i * ldy + r] =
            vaddvq_f32(vaddq_f32(vaddq_f32(acc[i][0], acc[i][1]), vaddq_f32(acc[i][2], acc[i][3])));
    }
  }
#endif

#if defined(__x86_64__)
  /// Per x row: sum of x over each column block (for the offsets).
  void blockSums(const float *x, float *sums) const {
    for (int64_t b = 0; b < matrix_.colBlocks; ++b) {
      float s = 0;
      for (int64_t k = 0; k < matrix_.colBlock; ++k)
        s += x[b * matrix_.colBlock + k];
      sums[b] = s;
    }
  }

  /// sum over the row's blocks b of scale[b] * (offset[b] + bias) * sum of
  /// x over b (offsets null: zeros).
  template <typename S>
  __attribute__((target("avx2,fma,f16c"))) float offsetTerm(const S *sc, const float *off,
                                                            float bias, const float *sums) const {
    int64_t nb = matrix_.colBlocks, b = 0;
    __m256 acc = _mm256_setzero_ps(), vb = _mm256_set1_ps(bias);
    for (; b + 8 <= nb; b += 8) {
      __m256 e = off ? _mm256_add_ps(_mm256_loadu_ps(off + b), vb) : vb;
      acc = _mm256_fmadd_ps(_mm256_mul_ps(scaleOctet(sc + b), e), _mm256_loadu_ps(sums + b), acc);
    }
    float t = hsum(acc);
    for (; b < nb; ++b)
      t += scaleAsFloat(sc + b) * ((off ? off[b] : 0.0f) + bias) * sums[b];
    return t;
  }

  /// Blocks of 32 with fp16 scales read them in place; others read fp32.
  void fusedWords(bool isSigned, const DotOperand &x, float *y, int64_t ldy, int64_t r0,
                  int64_t r1) const {
    if (scaleHalf_ && matrix_.colBlock == 32)
      isSigned ? fusedWordsOf<true>(scaleHalf_, x, y, ldy, r0, r1)
               : fusedWordsOf<false>(scaleHalf_, x, y, ldy, r0, r1);
    else
      isSigned ? fusedWordsOf<true>(scaleFloats(), x, y, ldy, r0, r1)
               : fusedWordsOf<false>(scaleFloats(), x, y, ldy, r0, r1);
  }

  /// Eight lanes whose sum is the scaled dot product of a row of 4-bit
  /// blocks of `chunks` 32-value units (scales sc) with xr, permuted by
  /// permuteForWords, each lane's sums started at `starts` (or 0): 64 values
  /// (32 bytes) per wordDot, two groups per step into two accumulators.
  /// Blocks of an even number of units: a block's groups are summed, then
  /// scaled. Odd (3 or more; blocks of one unit take wordRow32): each word
  /// group's halves take their blocks' scales. (Two rows side by side, which
  /// the fp16 rows gain from, measured slower: the registers do not hold two
  /// rows' chains.)
  template <bool Signed>
  __attribute__((target("avx2,fma"))) static inline __m256
  wordRow(const uint8_t *row, const float *sc, const float *xr, const float *starts, int64_t units,
          int64_t chunks) {
    // One prefetch per 64 bytes (4 units) of the row.
    auto prefetch = [row](int64_t u) {
      _mm_prefetch(reinterpret_cast<const char *>(row + u * 16) + kPrefetchBytes, _MM_HINT_T0);
    };
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    int64_t u = 0;
    if (chunks % 2 == 0) {
      for (int64_t b = 0; u < units; ++b) {
        __m256 s = _mm256_setzero_ps();
        for (int64_t end = u + chunks; u < end; u += 2) {
          if ((u & 3) == 0)
            prefetch(u);
          s = _mm256_add_ps(s, wordDotAt<Signed>(row, xr, starts, u));
        }
        acc0 = _mm256_fmadd_ps(s, _mm256_set1_ps(sc[b]), acc0);
      }
      return acc0;
    }
    auto scaleOf = [&](int64_t unit) { return sc[unit / chunks]; };
    for (; u + 4 <= units; u += 4) {
      prefetch(u);
      acc0 = _mm256_fmadd_ps(wordDotAt<Signed>(row, xr, starts, u),
                             halves(scaleOf(u), scaleOf(u + 1)), acc0);
      acc1 = _mm256_fmadd_ps(wordDotAt<Signed>(row, xr, starts, u + 2),
                             halves(scaleOf(u + 2), scaleOf(u + 3)), acc1);
    }
    if (u + 2 <= units) {
      acc0 = _mm256_fmadd_ps(wordDotAt<Signed>(row, xr, starts, u),
                             halves(scaleOf(u), scaleOf(u + 1)), acc0);
      u += 2;
    }
    if (u < units) {
      // The row's odd last 32 values: four words, the rest zeros (their
      // starts are zeros too).
      __m256i w =
          _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(row + u * 16)));
      __m256 start = starts ? _mm256_loadu_ps(starts + u * 4) : _mm256_setzero_ps();
      acc1 = _mm256_fmadd_ps(wordDot(wordBits<Signed>(w), xr + u * 32, start),
                             halves(scaleOf(u), 0.0f), acc1);
    }
    return _mm256_add_ps(acc0, acc1);
  }

  /// wordRow for blocks of 32 values (export_llm's 4w form; the usual group
  /// size), started at zero: a word group holds two blocks, and the four
  /// scales of two groups are loaded at once and spread over the groups'
  /// halves by two in-lane permutes. Per 64 values the loop so adds one
  /// permute to the eight masks, converts and FMAs (the general loop: two
  /// scalar loads, two shuffles and an insert, and the load of the starts).
  /// int4's 8, and the offsets, are taken off through block sums.
  template <bool Signed, typename S>
  __attribute__((target("avx2,fma,f16c"))) static inline __m256
  wordRow32(const uint8_t *row, const S *sc, const float *xr, int64_t units) {
    const __m256i first = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256i second = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    int64_t u = 0;
    for (; u + 4 <= units; u += 4) {
      _mm_prefetch(reinterpret_cast<const char *>(row + u * 16) + kPrefetchBytes, _MM_HINT_T0);
      __m256 s = scaleQuads(sc + u);
      acc0 = _mm256_fmadd_ps(wordDotAt<Signed>(row, xr, u), _mm256_permutevar_ps(s, first), acc0);
      acc1 =
          _mm256_fmadd_ps(wordDotAt<Signed>(row, xr, u + 2), _mm256_permutevar_ps(s, second), acc1);
    }
    if (u + 2 <= units) {
      acc0 = _mm256_fmadd_ps(wordDotAt<Signed>(row, xr, u),
                             halves(scaleAsFloat(sc + u), scaleAsFloat(sc + u + 1)), acc0);
      u += 2;
    }
    if (u < units) {
      __m256i w =
          _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(row + u * 16)));
      acc1 = _mm256_fmadd_ps(wordDot<true>(wordBits<Signed>(w), xr + u * 32),
                             halves(scaleAsFloat(sc + u), 0.0f), acc1);
    }
    return _mm256_add_ps(acc0, acc1);
  }

  /// y[i * ldy + r] for rows [r0, r1) of 4-bit blocks, a row at a time; the
  /// scales read as S (fp16 only for blocks of 32, see fusedWords).
  template <bool Signed, typename S>
  __attribute__((target("avx2,fma,f16c"))) void fusedWordsOf(const S *scales, const DotOperand &x,
                                                             float *y, int64_t ldy, int64_t r0,
                                                             int64_t r1) const {
    int64_t nb = matrix_.colBlocks, chunks = matrix_.colBlock / 32, cols = x.cols;
    int64_t units = cols / 32, ld = wordRowLength(cols);
    // Lanes started at -8 times their x (x.starts) take int4's 8 off as they
    // sum; otherwise it is taken off, with the offsets, through block sums:
    // (u - 8 - offset) * scale for int4, (u - offset) * scale for uint4.
    bool bySums = !offsetF_.empty() || (Signed && x.starts.empty());
    for (int64_t r = r0; r < r1; ++r) {
      int64_t p = (r / matrix_.rowBlock) * nb;
      const uint8_t *row = data_.tensor.bytes() + r * cols / 2;
      const S *sc = scales + p;
      const float *off = offsetF_.empty() ? nullptr : offsetF_.data() + p;
      for (int64_t i = 0; i < x.m; ++i) {
        const float *xr = x.permuted.data() + i * ld;
        __m256 lanes;
        if constexpr (std::is_same_v<S, float>) {
          const float *starts = x.starts.empty() ? nullptr : x.starts.data() + i * (ld / 8);
          lanes = chunks == 1 ? wordRow32<Signed>(row, sc, xr, units)
                              : wordRow<Signed>(row, sc, xr, starts, units, chunks);
        } else {
          lanes = wordRow32<Signed>(row, sc, xr, units);
        }
        float v = hsum(lanes);
        if (bySums)
          v -= offsetTerm(sc, off, Signed ? 8.0f : 0.0f, x.blockSums.data() + i * nb);
        y[i * ldy + r] = v;
      }
    }
  }

  /// Calls run(signed, prefetch, scales) for the 8-bit and AVX-512 kernels
  /// of blocks of 32: signed and prefetch as std::bool_constant (the data's
  /// sign, the AVX-512 kernels' prefetch choice), scales where the model has
  /// them if fp16.
  template <typename Run> void blocksOf32Kernel(bool isSigned, Run run) const {
    auto withScales = [&](auto isSignedTag, auto prefetchTag) {
      if (scaleHalf_)
        run(isSignedTag, prefetchTag, scaleHalf_);
      else
        run(isSignedTag, prefetchTag, scaleFloats());
    };
    auto withPrefetch = [&](auto isSignedTag) {
      if (kernelPrefetches())
        withScales(isSignedTag, std::true_type{});
      else
        withScales(isSignedTag, std::false_type{});
    };
    if (isSigned)
      withPrefetch(std::true_type{});
    else
      withPrefetch(std::false_type{});
  }

  /// Rows [r0, r1) through x.fused, one of the kernels of blocks of 32
  /// without offsets (the AVX2 ones always prefetch: the choice is not
  /// theirs).
  void fusedBlocksOf32(bool isSigned, const DotOperand &x, float *y, int64_t ldy, int64_t r0,
                       int64_t r1) const {
    blocksOf32Kernel(isSigned, [&](auto sg, auto pf, const auto *scales) {
      constexpr bool Signed = decltype(sg)::value, Prefetch = decltype(pf)::value;
      if (x.fused == kFusedWords512)
        fusedWords512Of<Signed, Prefetch>(scales, x, y, ldy, r0, r1);
      else if (x.fused == kFusedDigits512)
        fusedDigits512Of<Signed, Prefetch>(scales, x, y, ldy, r0, r1);
      else if (x.fused == kFusedDigits256)
        fusedDigits256Of<Signed>(scales, x, y, ldy, r0, r1);
      else
        fusedDigitsVnni256Of<Signed>(scales, x, y, ldy, r0, r1);
    });
  }

  /// Rows [r0, r1) through the table kernels (fp16 mode), each block's
  /// table made from its scale (fp16 scales widened a batch of rows at a
  /// time) and offset.
  void tableRowsOf(bool isSigned, const DotOperand &x, float *y, int64_t ldy, int64_t r0,
                   int64_t r1) const {
    float q[16];
    for (int v = 0; v < 16; ++v)
      q[v] = static_cast<float>(isSigned && v >= 8 ? v - 16 : v);
    int64_t nb = matrix_.colBlocks, chunks = matrix_.colBlock / 32, cols = x.cols;
    const uint8_t *data = data_.tensor.bytes();
    auto rowBytes = [&](int64_t r) { return data + r * cols / 2; };
    // fp16 scales widened for a batch of rows at a time, in one pass.
    constexpr int64_t kBatch = 64;
    thread_local std::vector<float> widened;
    int64_t rb = matrix_.rowBlock, ahead = 2 * kBatch / rb * nb,
            scaleCount = numElementsOf(blocks_);
    if (scaleHalf_ && widened.size() < static_cast<size_t>((kBatch + 1) * nb))
      widened.resize(static_cast<size_t>((kBatch + 1) * nb));
    auto run = [&](auto offsetsTag, auto checkedTag) {
      constexpr bool Offsets = decltype(offsetsTag)::value, Checked = decltype(checkedTag)::value;
      for (int64_t b0 = r0; b0 < r1; b0 += kBatch) {
        int64_t b1 = std::min(r1, b0 + kBatch), first = b0 / rb;
        if (scaleHalf_)
          halfToFloatN(scaleHalf_ + first * nb, widened.data(), ((b1 - 1) / rb - first + 1) * nb);
        const float *scales = scaleHalf_ ? widened.data() : scaleFloats() + first * nb;
        auto tablesOf = [&](int64_t r) {
          int64_t p = (rb == 1 ? r : r / rb) * nb;
          if (scaleHalf_ && p + ahead < scaleCount) {
            // The scales of a row two batches on, fetched while this batch's
            // rows are read (the pass that widens them would wait).
            const char *next = reinterpret_cast<const char *>(scaleHalf_ + p + ahead);
            for (int64_t o = 0; o < nb * 2; o += 64)
              _mm_prefetch(next + o, _MM_HINT_T0);
          }
          return BlockTables<Offsets, Checked>{q, scales + (p - first * nb),
                                               Offsets ? offsetF_.data() + p : nullptr};
        };
        tableRows(x, b0, b1, nb, chunks, y, ldy, rowBytes, tablesOf);
      }
    };
    auto withChecks = [&](auto offsetsTag) {
      if (finiteParams())
        run(offsetsTag, std::false_type{});
      else
        run(offsetsTag, std::true_type{});
    };
    if (offsetF_.empty())
      withChecks(std::false_type{});
    else
      withChecks(std::true_type{});
  }

  /// True when every scale and offset is finite: no weight value is then a
  /// NaN (the data and offsets are small integers), and the table kernels
  /// round without looking for one.
  bool finiteParams() const {
    std::call_once(finiteOnce_, [this] {
      bool finite =
          std::all_of(offsetF_.begin(), offsetF_.end(), [](float v) { return std::isfinite(v); });
      int64_t nb = numElementsOf(blocks_);
      if (scaleHalf_) {
        // fp16 bits: infinities and NaNs have every exponent bit set.
        for (int64_t i = 0; i < nb && finite; ++i) {
          uint16_t h;
          std::memcpy(&h, scaleHalf_ + i, sizeof h);
          finite = (h & 0x7C00) != 0x7C00;
        }
      } else {
        const float *sc = scaleFloats();
        finite = finite && std::all_of(sc, sc + nb, [](float v) { return std::isfinite(v); });
      }
      finite_ = finite;
    });
    return finite_;
  }

  /// True when every scale is a finite fp16 value and every q * scale
  /// (q up to 8 for int4, 15 for uint4) is under 65504: each weight's fp16
  /// is then round(q * m) * 2^e (roundingCorrections), never an infinity.
  bool roundsOnGrid(bool isSigned) const {
    std::call_once(gridOnce_, [this] {
      uint16_t largest = 0;
      for (int64_t i = 0, nb = numElementsOf(blocks_); i < nb; ++i) {
        uint16_t h;
        std::memcpy(&h, scaleHalf_ + i, sizeof h);
        largest = std::max<uint16_t>(largest, h & 0x7FFF); // |scale|, in order while finite
      }
      gridLargest_ =
          largest < 0x7C00 ? halfToFloat(largest) : std::numeric_limits<float>::infinity();
    });
    return (isSigned ? 8.0f : 15.0f) * gridLargest_ < 65504.0f;
  }

  /// Scales [0, 8) in lanes 0-7.
  __attribute__((target("avx512f,f16c"))) static inline __m512 scaleOctet512(const float *sc) {
    return _mm512_castps256_ps512(_mm256_loadu_ps(sc));
  }
  __attribute__((target("avx512f,f16c"))) static inline __m512 scaleOctet512(const uint16_t *sc) {
    return _mm512_castps256_ps512(
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(sc))));
  }

  /// acc + the four blocks of the word group `w` at unit u, lane group b
  /// times scales[b], for fusedWords512Of.
  template <bool Signed>
  __attribute__((target("avx512f"))) static inline __m512
  wordGroup512(__m512i w, const float *xq, const float *starts, int64_t u, __m512 scales,
               __m512 acc) {
    if constexpr (Signed)
      w = _mm512_xor_si512(w, _mm512_set1_epi32(kNibbleSignBits));
    __m512 start = starts ? _mm512_loadu_ps(starts + u * 4) : _mm512_setzero_ps();
    return _mm512_fmadd_ps(wordDot512(w, xq + u * 32, start), scales, acc);
  }

  /// Rows [r0, r1) of 4-bit blocks of 32 values without offsets, 128 values
  /// (64 bytes, four blocks) per wordDot512: lane group b takes block b's
  /// scale (the eight scales of two groups loaded at once, as S). A row's
  /// last 1-3 blocks are read with masks (zeros past the row: x and the
  /// starts are zeros there too). With Prefetch, each 64-byte line is
  /// prefetched kPrefetchBytes ahead (kernelPrefetches(): 1.45x on an Intel
  /// core streaming from memory).
  template <bool Signed, bool Prefetch, typename S>
  __attribute__((target("avx512f,f16c"))) void fusedWords512Of(const S *scales, const DotOperand &x,
                                                               float *y, int64_t ldy, int64_t r0,
                                                               int64_t r1) const {
    const __m512i first = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(4));
    int64_t nb = matrix_.colBlocks, cols = x.cols, units = cols / 32;
    int64_t ld = wordRowLength(cols, 16);
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t *row = data_.tensor.bytes() + r * cols / 2;
      const S *sc = scales + (r / matrix_.rowBlock) * nb;
      for (int64_t i = 0; i < x.m; ++i) {
        const float *xq = x.permuted.data() + i * ld;
        const float *starts = x.starts.empty() ? nullptr : x.starts.data() + i * (ld / 8);
        __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
        int64_t u = 0;
        for (; u + 8 <= units; u += 8) {
          if constexpr (Prefetch)
            prefetchAhead128(row + u * 16);
          __m512 s = scaleOctet512(sc + u);
          acc0 = wordGroup512<Signed>(_mm512_loadu_si512(row + u * 16), xq, starts, u,
                                      _mm512_permutexvar_ps(first, s), acc0);
          acc1 = wordGroup512<Signed>(_mm512_loadu_si512(row + u * 16 + 64), xq, starts, u + 4,
                                      _mm512_permutexvar_ps(second, s), acc1);
        }
        for (; u < units; u += 4) {
          int64_t left = std::min<int64_t>(4, units - u);
          __mmask16 words = static_cast<__mmask16>((1u << (4 * left)) - 1);
          acc0 = wordGroup512<Signed>(
              _mm512_maskz_loadu_epi32(words, row + u * 16), xq, starts, u,
              _mm512_permutexvar_ps(first, _mm512_castps128_ps512(scaleQuad(sc + u, left))), acc0);
        }
        y[i * ldy + r] = sum512(_mm512_add_ps(acc0, acc1));
      }
    }
  }

  /// Where row i of x on its grids starts in DotOperand::digits,
  /// digitStarts and steps, for the kernel `fused`: per group of 128 values
  /// (kFusedDigits512, kFusedDigitsVnni256: kDigitGroupBytes of digits) or
  /// 64 (kFusedDigits256: kDigitGroupBytes256), a lane start per 8 values
  /// and a step per block, the groups rounded up.
  struct GridRow {
    int64_t digits, starts, steps;
  };
  static GridRow gridRow(const DotOperand &x, int64_t i, int fused) {
    bool wide = fused != kFusedDigits256 && fused != kFusedDigitsRounded256;
    int64_t values = wide ? 128 : 64, groups = i * ceilDiv<int64_t>(x.cols, values);
    return {groups * (wide ? kDigitGroupBytes : kDigitGroupBytes256), groups * (values / 8),
            groups * (values / 32)};
  }

  /// x on its blocks' grids for `fused` (kFusedDigits512: fusedDigits512Of;
  /// kFusedDigitsVnni256: fusedDigitsVnni256Of, the same grids and layout;
  /// kFusedDigits256: fusedDigits256Of); false when x holds an infinity or a
  /// NaN.
  bool prepareDigits(DotOperand &x, bool isSigned, int fused) const {
    // Row m's offsets are the sizes of m rows.
    GridRow all = gridRow(x, x.m, fused);
    x.digits.resize(static_cast<size_t>(all.digits));
    x.digitStarts.resize(static_cast<size_t>(all.starts));
    x.steps.resize(static_cast<size_t>(all.steps));
    auto *digitsOf = fused == kFusedDigits512       ? digitsForWords512
                     : fused == kFusedDigitsVnni256 ? digitsForWords512Avx2
                                                    : digitsForWords256;
    for (int64_t i = 0; i < x.m; ++i)
      if (GridRow at = gridRow(x, i, fused);
          !digitsOf(x.x + i * x.ldx, x.cols, isSigned, x.digits.data() + at.digits,
                    x.digitStarts.data() + at.starts, x.steps.data() + at.steps)) {
        x.digits.clear(), x.digitStarts.clear(), x.steps.clear();
        return false;
      }
    x.fused = fused;
    return true;
  }

  /// Rows [r0, r1) of 4-bit blocks of 32 values without offsets through the
  /// 8-bit dot products (digitsForWords512): 128 values (64 bytes, four
  /// blocks) per digitGroup512, whose 16 lane sums are converted once and
  /// scaled by their block's scale times its grid step; the loop and its
  /// masked tail are those of fusedWords512Of.
  template <bool Signed, bool Prefetch, typename S>
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c"))) void
  fusedDigits512Of(const S *scales, const DotOperand &x, float *y, int64_t ldy, int64_t r0,
                   int64_t r1) const {
    const __m512i first = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(4));
    int64_t nb = matrix_.colBlocks, cols = x.cols, units = cols / 32;
    GridRow per = gridRow(x, 1, x.fused); // one row of x
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t *row = data_.tensor.bytes() + r * cols / 2;
      const S *sc = scales + (r / matrix_.rowBlock) * nb;
      for (int64_t i = 0; i < x.m; ++i) {
        const int8_t *dg = x.digits.data() + i * per.digits;
        const int32_t *st = x.digitStarts.data() + i * per.starts;
        const float *step = x.steps.data() + i * per.steps;
        __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
        int64_t u = 0;
        for (; u + 8 <= units; u += 8) {
          if constexpr (Prefetch)
            prefetchAhead128(row + u * 16);
          __m512 s = _mm512_mul_ps(scaleOctet512(sc + u),
                                   _mm512_castps256_ps512(_mm256_loadu_ps(step + u)));
          int64_t g = u / 4;
          __m512i t0 =
              digitGroup512<Signed>(_mm512_loadu_si512(row + u * 16), dg + g * kDigitGroupBytes,
                                    _mm512_loadu_si512(st + g * 16));
          __m512i t1 = digitGroup512<Signed>(_mm512_loadu_si512(row + u * 16 + 64),
                                             dg + (g + 1) * kDigitGroupBytes,
                                             _mm512_loadu_si512(st + (g + 1) * 16));
          acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t0), _mm512_permutexvar_ps(first, s), acc0);
          acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t1), _mm512_permutexvar_ps(second, s), acc1);
        }
        for (; u < units; u += 4) {
          // The last 1-3 blocks: bytes past the row read as zeros (their
          // digits and starts are zeros too), scales past it as zeros.
          int64_t left = std::min<int64_t>(4, units - u), g = u / 4;
          __mmask16 words = static_cast<__mmask16>((1u << (4 * left)) - 1);
          __m128 s = _mm_mul_ps(scaleQuad(sc + u, left), _mm_loadu_ps(step + u));
          __m512i t =
              digitGroup512<Signed>(_mm512_maskz_loadu_epi32(words, row + u * 16),
                                    dg + g * kDigitGroupBytes, _mm512_loadu_si512(st + g * 16));
          acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t),
                                 _mm512_permutexvar_ps(first, _mm512_castps128_ps512(s)), acc0);
        }
        y[i * ldy + r] = sum512(_mm512_add_ps(acc0, acc1));
      }
    }
  }

  /// Rows [r0, r1) of 4-bit blocks of 32 values without offsets through
  /// 16-bit grids (digitsForWords256): 64 values (32 bytes, two blocks) per
  /// digitGroup256, whose 8 lane sums are converted once and scaled by their
  /// block's scale times its grid step; the four scales of two groups loaded
  /// at once and spread as in wordRow32. A row's odd last block is read as a
  /// half group (its other half's digits and starts are zeros).
  template <bool Signed, typename S>
  __attribute__((target("avx2,fma,f16c"))) void
  fusedDigits256Of(const S *scales, const DotOperand &x, float *y, int64_t ldy, int64_t r0,
                   int64_t r1) const {
    const __m256i first = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256i second = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
    int64_t nb = matrix_.colBlocks, cols = x.cols, units = cols / 32;
    GridRow per = gridRow(x, 1, x.fused); // one row of x
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t *row = data_.tensor.bytes() + r * cols / 2;
      const S *sc = scales + (r / matrix_.rowBlock) * nb;
      for (int64_t i = 0; i < x.m; ++i) {
        const int8_t *dg = x.digits.data() + i * per.digits;
        const int32_t *st = x.digitStarts.data() + i * per.starts;
        const float *step = x.steps.data() + i * per.steps;
        __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
        int64_t u = 0;
        for (; u + 4 <= units; u += 4) {
          _mm_prefetch(reinterpret_cast<const char *>(row + u * 16) + kPrefetchBytes, _MM_HINT_T0);
          __m256 s = _mm256_mul_ps(scaleQuads(sc + u),
                                   _mm256_broadcast_ps(reinterpret_cast<const __m128 *>(step + u)));
          int64_t g = u / 2;
          __m256i t0 = digitGroup256<Signed>(
              _mm256_loadu_si256(reinterpret_cast<const __m256i *>(row + u * 16)),
              dg + g * kDigitGroupBytes256,
              _mm256_loadu_si256(reinterpret_cast<const __m256i *>(st + g * 8)));
          __m256i t1 = digitGroup256<Signed>(
              _mm256_loadu_si256(reinterpret_cast<const __m256i *>(row + u * 16 + 32)),
              dg + (g + 1) * kDigitGroupBytes256,
              _mm256_loadu_si256(reinterpret_cast<const __m256i *>(st + (g + 1) * 8)));
          acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t0), _mm256_permutevar_ps(s, first), acc0);
          acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t1), _mm256_permutevar_ps(s, second), acc1);
        }
        for (; u < units; u += 2) {
          // The last 1-3 blocks, a group at a time; a lone last block's
          // scale and step are read alone (zeros after).
          int64_t left = std::min<int64_t>(2, units - u), g = u / 2;
          __m256i w = left == 2
                          ? _mm256_loadu_si256(reinterpret_cast<const __m256i *>(row + u * 16))
                          : _mm256_zextsi128_si256(
                                _mm_loadu_si128(reinterpret_cast<const __m128i *>(row + u * 16)));
          float stepPair[4] = {step[u], left == 2 ? step[u + 1] : 0.0f, 0.0f, 0.0f};
          __m128 s = _mm_mul_ps(scaleQuad(sc + u, left), _mm_loadu_ps(stepPair));
          __m256i t = digitGroup256<Signed>(
              w, dg + g * kDigitGroupBytes256,
              _mm256_loadu_si256(reinterpret_cast<const __m256i *>(st + g * 8)));
          acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t),
                                 _mm256_permutevar_ps(_mm256_setr_m128(s, s), first), acc0);
        }
        y[i * ldy + r] = hsum(_mm256_add_ps(acc0, acc1));
      }
    }
  }

  /// The tables of r + 8 of two blocks (rows m0 and m1 of `table`, the
  /// first of roundingCorrections) in the two 128-bit lanes.
  __attribute__((target("avx2"))) static inline __m256i roundingTables(const uint8_t *table,
                                                                       int32_t m0, int32_t m1) {
    return _mm256_loadu2_m128i(reinterpret_cast<const __m128i *>(table + m1 * 16),
                               reinterpret_cast<const __m128i *>(table + m0 * 16));
  }

  /// The lane sums of q x and of (r + 8) x (with the starts: r x) of the
  /// 32-byte group w: digits d, lane starts st, `fixes` its two blocks'
  /// tables of r + 8 (roundingCorrections), one per 128-bit lane.
  template <bool Signed>
  __attribute__((target("avx2"))) static inline void
  roundedGroup(__m256i w, const int8_t *d, const int32_t *st, __m256i fixes, __m256i &sums,
               __m256i &corrections) {
    __m256i lo, hi;
    nibbleBytes<Signed>(w, lo, hi);
    __m256i start = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(st));
    sums = digitSums256(lo, hi, d, Signed ? start : _mm256_setzero_si256());
    corrections =
        digitSums256(_mm256_shuffle_epi8(fixes, lo), _mm256_shuffle_epi8(fixes, hi), d, start);
  }

  /// Rows [r0, r1) of 4-bit blocks of 32 with fp16 scales and no offsets in
  /// fp16 mode through 16-bit grids (prepareRounded): fusedDigits256Of's
  /// loop, each group's lane sums of q x scaled by scale times step, and
  /// the same digits' sums of r + 8 (roundingCorrections: two blocks'
  /// tables, one per 128-bit lane, looked up by the nibble bytes) by
  /// sign * 2^e times step (roundedFactors, four blocks at a time in
  /// vectors). A row's odd last block is read as a half group (its other
  /// half's digits and starts are zeros, its factors too).
  template <bool Signed>
  __attribute__((target("avx2,fma,f16c"))) void
  fusedDigitsRounded256Of(const DotOperand &x, float *y, int64_t ldy, int64_t r0,
                          int64_t r1) const {
    const uint8_t *table = roundingCorrections(Signed)[0].data();
    const __m256i first = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256i second = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
    const __m128i low5 = _mm_set1_epi32(31), one = _mm_set1_epi32(1);
    int64_t nb = matrix_.colBlocks, cols = x.cols, units = cols / 32;
    GridRow per = gridRow(x, 1, x.fused); // one row of x
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t *row = data_.tensor.bytes() + r * cols / 2;
      const uint16_t *sc = scaleHalf_ + (r / matrix_.rowBlock) * nb;
      for (int64_t i = 0; i < x.m; ++i) {
        const int8_t *dg = x.digits.data() + i * per.digits;
        const int32_t *st = x.digitStarts.data() + i * per.starts;
        const float *step = x.steps.data() + i * per.steps;
        __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, fix0 = acc0, fix1 = acc0;
        int64_t u = 0;
        for (; u + 4 <= units; u += 4) {
          _mm_prefetch(reinterpret_cast<const char *>(row + u * 16) + kPrefetchBytes, _MM_HINT_T0);
          // roundedFactors of four blocks.
          __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(sc + u));
          __m128 steps = _mm_loadu_ps(step + u);
          __m128 main = _mm_mul_ps(_mm_cvtph_ps(h), steps);
          __m128i bits = _mm_cvtepu16_epi32(h), e = _mm_and_si128(_mm_srli_epi32(bits, 10), low5);
          __m128i unit = _mm_or_si128(
              _mm_slli_epi32(_mm_and_si128(bits, _mm_set1_epi32(0x8000)), 16),
              _mm_slli_epi32(_mm_add_epi32(_mm_max_epi32(e, one), _mm_set1_epi32(127 - 25)), 23));
          __m128 fix = _mm_mul_ps(_mm_castsi128_ps(unit), steps);
          __m128i m = _mm_or_si128(
              _mm_and_si128(bits, _mm_set1_epi32(0x3FF)),
              _mm_and_si128(_mm_cmpgt_epi32(e, _mm_setzero_si128()), _mm_set1_epi32(0x400)));
          alignas(16) int32_t ms[4];
          _mm_store_si128(reinterpret_cast<__m128i *>(ms), m);
          int64_t g = u / 2;
          __m256i t0, c0, t1, c1;
          roundedGroup<Signed>(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(row + u * 16)),
                               dg + g * kDigitGroupBytes256, st + g * 8,
                               roundingTables(table, ms[0], ms[1]), t0, c0);
          roundedGroup<Signed>(
              _mm256_loadu_si256(reinterpret_cast<const __m256i *>(row + u * 16 + 32)),
              dg + (g + 1) * kDigitGroupBytes256, st + (g + 1) * 8,
              roundingTables(table, ms[2], ms[3]), t1, c1);
          __m256 mains = _mm256_setr_m128(main, main), fixes = _mm256_setr_m128(fix, fix);
          acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t0), _mm256_permutevar_ps(mains, first), acc0);
          acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t1), _mm256_permutevar_ps(mains, second), acc1);
          fix0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c0), _mm256_permutevar_ps(fixes, first), fix0);
          fix1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c1), _mm256_permutevar_ps(fixes, second), fix1);
        }
        for (; u < units; u += 2) {
          // The last 1-3 blocks, a group at a time.
          bool pair = u + 1 < units;
          int64_t g = u / 2;
          uint16_t h0, h1 = 0;
          std::memcpy(&h0, sc + u, sizeof h0);
          if (pair)
            std::memcpy(&h1, sc + u + 1, sizeof h1);
          RoundedFactors f0 = roundedFactors(h0, step[u]),
                         f1 = pair ? roundedFactors(h1, step[u + 1]) : RoundedFactors{0, 0, 0};
          __m256i w = pair ? _mm256_loadu_si256(reinterpret_cast<const __m256i *>(row + u * 16))
                           : _mm256_zextsi128_si256(
                                 _mm_loadu_si128(reinterpret_cast<const __m128i *>(row + u * 16)));
          __m256i t, c;
          roundedGroup<Signed>(w, dg + g * kDigitGroupBytes256, st + g * 8,
                               roundingTables(table, f0.m, f1.m), t, c);
          acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), halves(f0.main, f1.main), acc0);
          fix0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c), halves(f0.correction, f1.correction), fix0);
        }
        y[i * ldy + r] = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(fix0, fix1)));
      }
    }
  }

  /// a, b += the lane sums of the two halves of the 64-byte group at w
  /// (digits d, lane starts st), each lane times its block's entry of s4 (the
  /// group's four scales times steps).
  template <bool Signed>
  __attribute__((target("avx2,avxvnni,fma"))) static inline void
  vnniGroup(const uint8_t *w, const int8_t *d, const int32_t *st, __m128 s4, __m256 &a, __m256 &b) {
    const __m256i first = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256i second = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
    __m256 s = _mm256_setr_m128(s4, s4);
    __m256i t0 =
        digitHalfVnni256<Signed>(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(w)), d,
                                 _mm256_loadu_si256(reinterpret_cast<const __m256i *>(st)));
    __m256i t1 = digitHalfVnni256<Signed>(
        _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w + 32)), d + 32,
        _mm256_loadu_si256(reinterpret_cast<const __m256i *>(st + 8)));
    a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t0), _mm256_permutevar_ps(s, first), a);
    b = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t1), _mm256_permutevar_ps(s, second), b);
  }

  /// fusedDigits512Of with AVX-VNNI on 256-bit registers, bit for bit: the
  /// digits of digitsForWords512Avx2, each 512-bit accumulator of
  /// fusedDigits512Of held as two halves (its group's first and second 32
  /// bytes), the same FMAs in the same order, and the halves added as
  /// sum512 adds them. The weight rows are prefetched (AVX2's choice).
  template <bool Signed, typename S>
  __attribute__((target("avx2,avxvnni,fma,f16c"))) void
  fusedDigitsVnni256Of(const S *scales, const DotOperand &x, float *y, int64_t ldy, int64_t r0,
                       int64_t r1) const {
    int64_t nb = matrix_.colBlocks, cols = x.cols, units = cols / 32;
    GridRow per = gridRow(x, 1, x.fused); // one row of x
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t *row = data_.tensor.bytes() + r * cols / 2;
      const S *sc = scales + (r / matrix_.rowBlock) * nb;
      for (int64_t i = 0; i < x.m; ++i) {
        const int8_t *dg = x.digits.data() + i * per.digits;
        const int32_t *st = x.digitStarts.data() + i * per.starts;
        const float *step = x.steps.data() + i * per.steps;
        // acc0 and acc1 of fusedDigits512Of, as (a0, b0) and (a1, b1).
        __m256 a0 = _mm256_setzero_ps(), b0 = a0, a1 = a0, b1 = a0;
        int64_t u = 0;
        for (; u + 8 <= units; u += 8) {
          prefetchAhead128(row + u * 16);
          __m128 s0 = _mm_mul_ps(scaleQuad4(sc + u), _mm_loadu_ps(step + u));
          __m128 s1 = _mm_mul_ps(scaleQuad4(sc + u + 4), _mm_loadu_ps(step + u + 4));
          int64_t g = u / 4;
          vnniGroup<Signed>(row + u * 16, dg + g * kDigitGroupBytes, st + g * 16, s0, a0, b0);
          vnniGroup<Signed>(row + u * 16 + 64, dg + (g + 1) * kDigitGroupBytes, st + (g + 1) * 16,
                            s1, a1, b1);
        }
        for (; u < units; u += 4) {
          // The last 1-3 blocks: bytes past the row read as zeros (their
          // digits and starts are zeros too), scales past it as zeros.
          int64_t left = std::min<int64_t>(4, units - u);
          alignas(32) uint8_t last[64] = {};
          std::memcpy(last, row + u * 16, static_cast<size_t>(left * 16));
          __m128 s = _mm_mul_ps(scaleQuad(sc + u, left), _mm_loadu_ps(step + u));
          int64_t g = u / 4;
          vnniGroup<Signed>(last, dg + g * kDigitGroupBytes, st + g * 16, s, a0, b0);
        }
        y[i * ldy + r] = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(b0, b1)));
      }
    }
  }

  /// Block b's 16 weight values, (q - offset) * scale (exact in fp32).
  __attribute__((target("avx512f"))) static inline __m512 blockTable(__m512 qs, const float *sc,
                                                                     const float *off, int64_t b) {
    __m512 t = off ? _mm512_sub_ps(qs, _mm512_set1_ps(off[b])) : qs;
    return _mm512_mul_ps(t, _mm512_set1_ps(sc[b]));
  }

  /// Each block's 16 weight values ((q - offset) * scale, exact in fp32) in a
  /// register; nibbles pick from it.
  __attribute__((target("avx512f,avx512bw,avx512vl"))) void
  fusedNibbles512(bool isSigned, const DotOperand &x, float *y, int64_t ldy, int64_t r0,
                  int64_t r1) const {
    alignas(64) float q[16];
    for (int v = 0; v < 16; ++v)
      q[v] = static_cast<float>(isSigned && v >= 8 ? v - 16 : v);
    const __m512 qs = _mm512_load_ps(q);
    int64_t nb = matrix_.colBlocks, chunks = matrix_.colBlock / 32, cols = x.cols, m = x.m;
    const float *xp = x.permuted.data();
    const uint8_t *data = data_.tensor.bytes();
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t *row = data + r * cols / 2;
      const float *sc = scaleFloats() + (r / matrix_.rowBlock) * nb;
      const float *off = offsetF_.empty() ? nullptr : offsetF_.data() + (r / matrix_.rowBlock) * nb;
      for (int64_t i = 0; i < m; ++i) {
        const float *xr = xp + i * cols;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int64_t b = 0;
        if (chunks == 1) {
          // Blocks of 32 (the usual group size): two blocks per step, each
          // into its own accumulators.
          for (; b + 2 <= nb; b += 2) {
            nibbleChunk512(row + b * 16, xr + b * 32, blockTable(qs, sc, off, b), a0, a1);
            nibbleChunk512(row + b * 16 + 16, xr + b * 32 + 32, blockTable(qs, sc, off, b + 1), a2,
                           a3);
          }
        }
        for (; b < nb; ++b)
          nibbleDot512(row + b * chunks * 16, xr + b * chunks * 32, chunks,
                       blockTable(qs, sc, off, b), a0, a1, a2, a3);
        y[i * ldy + r] = sum512(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
      }
    }
  }

  __attribute__((target("avx2,fma"))) void fusedBytes(bool isSigned, const DotOperand &x, float *y,
                                                      int64_t ldy, int64_t r0, int64_t r1) const {
    int64_t nb = matrix_.colBlocks, bl = matrix_.colBlock, cols = x.cols, m = x.m;
    const float *sums = x.blockSums.data();
    const uint8_t *data = data_.tensor.bytes();
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t *row = data + r * cols;
      const float *sc = scaleFloats() + (r / matrix_.rowBlock) * nb;
      const float *off = offsetF_.empty() ? nullptr : offsetF_.data() + (r / matrix_.rowBlock) * nb;
      for (int64_t i = 0; i < m; ++i) {
        const float *xr = x.x + i * x.ldx;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
          __m256 part = isSigned
                            ? byteDot<true>(row + b * bl, xr + b * bl, bl, _mm256_setzero_ps())
                            : byteDot<false>(row + b * bl, xr + b * bl, bl, _mm256_setzero_ps());
          acc = _mm256_fmadd_ps(part, _mm256_set1_ps(sc[b]), acc);
        }
        float r_ = hsum(acc);
        if (off)
          for (int64_t b = 0; b < nb; ++b)
            r_ -= off[b] * sc[b] * sums[i * nb + b];
        y[i * ldy + r] = r_;
      }
    }
  }
#endif

  /// Block scale i as fp32.
  float scaleAt(int64_t i) const {
    return scaleHalf_ ? halfToFloatAt(scaleHalf_ + i) : scaleFloats()[i];
  }

  /// The scales as fp32, converted at the first call and kept (fp16 scales
  /// are so held twice: only the kernels that do not read fp16 call this).
  const float *scaleFloats() const {
    std::call_once(scaleOnce_, [this] {
      int64_t nb = numElementsOf(blocks_);
      scaleF_.resize(static_cast<size_t>(nb));
      loadAsFloat(scale_, 0, nb, scaleF_.data());
    });
    return scaleF_.data();
  }

  Source data_;
  Tensor scale_, offset_;
  Shape blocks_;
  RowMap rows_;
  MatrixBlocks matrix_;
  /// fp16 scales where the model has them: the word kernels for blocks of 32
  /// read them there (an fp32 copy is twice their size: 143 MB of the 4w
  /// LFM2.5-1.2B export's peak resident memory, read again every step).
  const uint16_t *scaleHalf_ = nullptr;
  mutable std::once_flag scaleOnce_;
  mutable std::vector<float> scaleF_;
  std::vector<float> offsetF_;
  mutable std::once_flag finiteOnce_;
  mutable bool finite_ = false;
  mutable std::once_flag gridOnce_;
  mutable float gridLargest_ = 0; ///< the largest |scale| (roundsOnGrid)
};

//===----------------------------------------------------------------------===//
// LutValue
//===----------------------------------------------------------------------===//

class LutValue final : public CompressedValue {
public:
  /// indices: packed `bits`-wide values, one per element of `indexShape`;
  /// lut: groups x entries x vectorSize floats; groups per dim of the index
  /// shape; vector entries spread along `vectorAxis` of the output.
  LutValue(Shape shape, bool roundHalf, Tensor indices, int bits, Shape indexShape,
           std::vector<float> lut, Shape groups, int64_t entries, int64_t vectorSize,
           int64_t vectorAxis, uint64_t lutBytes)
      : CompressedValue(std::move(shape), roundHalf), indices_(std::move(indices)), bits_(bits),
        indexShape_(std::move(indexShape)), lut_(std::move(lut)), groups_(std::move(groups)),
        entries_(entries), vs_(vectorSize), vaxis_(vectorAxis), lutBytes_(lutBytes),
        rows_(indexShape_, groups_), matrix_(matrixBlocks(indexShape_, groups_)) {
#if defined(__x86_64__)
    finiteLut_ = std::all_of(lut_.begin(), lut_.end(), [](float v) { return std::isfinite(v); });
    // Palettes of fp16 values (exactly) as byte tables for the AVX2 kernel.
    if (bits_ == 4 && vs_ == 1 && entries_ == 16) {
      std::vector<HalfPalette> tables(lut_.size() / 16);
      bool exact = true;
      for (size_t i = 0; i < lut_.size() && exact; ++i) {
        uint16_t h = floatToHalf(lut_[i]);
        float back = halfToFloat(h);
        exact = std::memcmp(&back, &lut_[i], 4) == 0;
        tables[i / 16].lo[i % 16] = static_cast<uint8_t>(h);
        tables[i / 16].hi[i % 16] = static_cast<uint8_t>(h >> 8);
      }
      if (exact)
        halfPalettes_ = std::move(tables);
    }
    // 6- and 8-bit palettes of fp16 values (exactly) as byte planes for the
    // AVX-512 VBMI kernel: per palette the entries' low bytes, then the high.
    if ((bits_ == 6 || bits_ == 8) && vs_ == 1 && entries_ == (int64_t(1) << bits_)) {
      std::vector<uint8_t> planes(lut_.size() * 2);
      bool exact = true;
      for (size_t i = 0; i < lut_.size() && exact; ++i) {
        uint16_t h = floatToHalf(lut_[i]);
        float back = halfToFloat(h);
        exact = std::memcmp(&back, &lut_[i], 4) == 0;
        size_t palette = i / static_cast<size_t>(entries_), e = i % static_cast<size_t>(entries_);
        planes[palette * 2 * entries_ + e] = static_cast<uint8_t>(h);
        planes[palette * 2 * entries_ + entries_ + e] = static_cast<uint8_t>(h >> 8);
      }
      if (exact)
        planes_ = std::move(planes);
    }
#endif
  }

  uint64_t storedBytes() const override { return indices_.numBytes() + lutBytes_; }

protected:
  void decodeRaw(int64_t begin, int64_t n, float *dst) const override {
#if defined(__x86_64__)
    // Whole rows of fp16 palettes of 64 or 256 entries over whole 32-value
    // steps: looked up in registers (planeValues256), the same values. Rows
    // are decoded so in fp16 mode where no kernel sums in dotF32's order
    // (AVX-512), and for gathers (a tied embedding).
    // (planes_ exist only for 6- and 8-bit indices into full palettes of
    // single values.)
    if (!planes_.empty() && matrix_.ok && matrix_.colBlock % 32 == 0 &&
        kernelIsa() >= KernelIsa::Avx2 && n > 0 && begin % matrix_.cols == 0 &&
        n % matrix_.cols == 0) {
      for (int64_t r = begin / matrix_.cols, e = (begin + n) / matrix_.cols; r < e;
           ++r, dst += matrix_.cols)
        bits_ == 6 ? decodePlanes256<6>(r, dst) : decodePlanes256<8>(r, dst);
      return;
    }
#endif
    thread_local std::vector<uint32_t> idx;
    if (vs_ == 1) {
      if (idx.size() < static_cast<size_t>(n))
        idx.resize(static_cast<size_t>(n));
      loadIndices(indices_.bytes(), bits_, begin, n, idx.data());
      int64_t last = rows_.last;
      for (int64_t i = 0; i < n;) {
        int64_t e = begin + i, row = e / last, c = e % last;
        int64_t end = std::min(n - i, last - c);
        int64_t base = rows_.rowBase(row);
        // Palette by palette over the row.
        for (int64_t k = 0; k < end;) {
          int64_t blk = (c + k) / rows_.lastBlock;
          int64_t stop = std::min(end, (blk + 1) * rows_.lastBlock - c);
          const float *pal = lut_.data() + (base + blk) * entries_;
          for (; k < stop; ++k)
            dst[i + k] = pal[idx[i + k]];
        }
        i += end;
      }
      return;
    }
    // Vector entries: output element -> index element and vector lane.
    const Shape &out = shape();
    std::vector<int64_t> ostr = stridesOf(out), istr = stridesOf(indexShape_);
    int64_t r = static_cast<int64_t>(out.size());
    for (int64_t i = 0; i < n; ++i) {
      int64_t rem = begin + i, ie = 0, lane = 0, g = 0;
      for (int64_t d = 0; d < r; ++d) {
        int64_t c = rem / ostr[d];
        rem %= ostr[d];
        if (d == vaxis_) {
          lane = c % vs_;
          c /= vs_;
        }
        ie += c * istr[d];
        g += (c / rows_.blockLen[d]) * rows_.pstrides[d];
      }
      uint32_t v;
      loadIndices(indices_.bytes(), bits_, ie, 1, &v);
      dst[i] = lut_[static_cast<size_t>((g * entries_ + v) * vs_ + lane)];
    }
  }

  void prepareFused(DotOperand &x) const override {
#if defined(__x86_64__)
    if ((bits_ == 6 || bits_ == 8) && vs_ == 1 && matrix_.ok && matrix_.cols == x.cols &&
        entries_ == (int64_t(1) << bits_) && matrix_.colBlock % 8 == 0 &&
        kernelIsa() >= KernelIsa::Avx2) {
      // Palettes spanning whole groups of 64 columns, of fp16 values: the
      // AVX-512 VBMI planes; otherwise eight indices gathered at a time.
      if (kernelIsa() >= KernelIsa::Avx512 && cpuHasAvx512Vbmi() && !planes_.empty() &&
          matrix_.colBlock % 64 == 0) {
        x.fused = kFusedPlanes512;
        x.permuted.resize(static_cast<size_t>(x.m * x.cols));
        for (int64_t i = 0; i < x.m; ++i)
          permuteForPlanes(x.x + i * x.ldx, x.cols, x.permuted.data() + i * x.cols);
      } else {
        x.fused = planes_.empty() ? kFusedGather : kFusedPlanes256;
      }
      return;
    }
    if (bits_ != 4 || vs_ != 1 || !matrix_.ok || matrix_.cols != x.cols || matrix_.colBlock % 32)
      return;
    if (kernelIsa() >= KernelIsa::Avx512)
      x.fused = kFusedNibbles512;
    else if (!halfPalettes_.empty())
      x.fused = kFusedNibbles;
    else
      return;
    x.permuted.resize(static_cast<size_t>(x.m * x.cols));
    for (int64_t i = 0; i < x.m; ++i)
      permuteForNibbles(x.x + i * x.ldx, x.cols, x.permuted.data() + i * x.cols);
#endif
  }

  /// 4-bit palettes over whole 32-value chunks: the table kernels. 6- and
  /// 8-bit palettes of finite fp16 values (rounding leaves them as they are)
  /// over column blocks of whole 32-value steps, where dotF32 is dotAvx2:
  /// fusedPlanes256, which sums in its order. Otherwise (and with AVX-512,
  /// whose dotF32 sums 16 lanes in simd::dot512's order) rows are decoded.
  void prepareRounded(DotOperand &x) const override {
#if defined(__x86_64__)
    if (vs_ != 1 || !matrix_.ok || matrix_.cols != x.cols)
      return;
    if (bits_ == 6 || bits_ == 8) {
      if (planes_.empty() || !finiteLut_) // planes_: full palettes of fp16 values
        return;
      if (kernelIsa() < KernelIsa::Avx512 && matrix_.colBlock % 32 == 0)
        x.fused = kFusedPlanes256;
      return;
    }
    if (bits_ != 4 || matrix_.colBlock % 32)
      return;
    // Palettes of finite fp16 values, where dotF32 is dotAvx2: the nibble
    // kernel in its order (paletteChunk<true>).
    if (kernelIsa() < KernelIsa::Avx512 && !halfPalettes_.empty() && finiteLut_) {
      x.fused = kFusedNibblesInOrder;
      return;
    }
    prepareTables(x);
#endif
  }

  void dotRowsFused(const DotOperand &x, float *y, int64_t ldy, int64_t r0,
                    int64_t r1) const override {
#if defined(__x86_64__)
    if (x.fused == kFusedTables512 || x.fused == kFusedTables256) {
      tableRowsOf(x, y, ldy, r0, r1);
    } else if (x.fused == kFusedPlanes512) {
      if (bits_ == 6)
        fusedPlanes512<6>(x, y, ldy, r0, r1);
      else
        fusedPlanes512<8>(x, y, ldy, r0, r1);
    } else if (x.fused == kFusedPlanes256) {
      if (bits_ == 6)
        fusedPlanes256<6>(x, y, ldy, r0, r1);
      else
        fusedPlanes256<8>(x, y, ldy, r0, r1);
    } else if (x.fused == kFusedGather) {
      if (bits_ == 6)
        fusedGather<6>(x, y, ldy, r0, r1);
      else
        fusedGather<8>(x, y, ldy, r0, r1);
    } else if (x.fused == kFusedNibbles512)
      fusedNibbles512(x, y, ldy, r0, r1);
    else if (x.fused == kFusedNibblesInOrder)
      fusedNibbles<true>(x, y, ldy, r0, r1);
    else
      fusedNibbles<false>(x, y, ldy, r0, r1);
#endif
  }

private:
#if defined(__x86_64__)
  /// Rows [r0, r1) through the table kernels (fp16 mode): the palettes are
  /// the tables.
  void tableRowsOf(const DotOperand &x, float *y, int64_t ldy, int64_t r0, int64_t r1) const {
    int64_t nb = matrix_.colBlocks, chunks = matrix_.colBlock / 32, cols = x.cols;
    auto rowBytes = [&](int64_t r) { return indices_.bytes() + r * cols / 2; };
    auto run = [&](auto checkedTag) {
      auto tablesOf = [&](int64_t r) {
        return PaletteTables<decltype(checkedTag)::value>{lut_.data() +
                                                          (r / matrix_.rowBlock) * nb * 16};
      };
      tableRows(x, r0, r1, nb, chunks, y, ldy, rowBytes, tablesOf);
    };
    if (finiteLut_)
      run(std::false_type{});
    else
      run(std::true_type{});
  }

  /// Rows [r0, r1) of 4-bit indices into fp16 palettes through
  /// paletteChunk: x permuted by permuteForNibbles, or InOrder x as it is
  /// (fp16 mode: prepareRounded).
  template <bool InOrder>
  __attribute__((target("avx2,fma,f16c"))) void
  fusedNibbles(const DotOperand &x, float *y, int64_t ldy, int64_t r0, int64_t r1) const {
    int64_t nb = matrix_.colBlocks, chunks = matrix_.colBlock / 32, cols = x.cols;
    const uint8_t *data = indices_.bytes();
    for (int64_t r = r0; r < r1; ++r) {
      const HalfPalette *palettes = halfPalettes_.data() + (r / matrix_.rowBlock) * nb;
      const uint8_t *row = data + r * cols / 2;
      for (int64_t i = 0; i < x.m; ++i) {
        const float *xr = InOrder ? x.x + i * x.ldx : x.permuted.data() + i * cols;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t b = 0; b < nb; ++b) {
          __m256i tlo =
              _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)palettes[b].lo));
          __m256i thi =
              _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)palettes[b].hi));
          const uint8_t *p = row + b * chunks * 16;
          const float *xb = xr + b * chunks * 32;
          for (int64_t c = 0; c < chunks; ++c) {
            if (((b * chunks + c) & 3) == 0)
              _mm_prefetch(reinterpret_cast<const char *>(p + c * 16) + kPrefetchBytes,
                           _MM_HINT_T0);
            paletteChunk<InOrder>(p + c * 16, xb + c * 32, tlo, thi, a0, a1, a2, a3);
          }
        }
        y[i * ldy + r] = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
      }
    }
  }
#endif

  Tensor indices_;
  int bits_;
  Shape indexShape_;
  std::vector<float> lut_;
  Shape groups_;
  int64_t entries_, vs_, vaxis_;
  uint64_t lutBytes_;
  RowMap rows_;
  MatrixBlocks matrix_;
#if defined(__x86_64__)
  __attribute__((target("avx512f,avx512bw,avx512vl"))) void
  fusedNibbles512(const DotOperand &x, float *y, int64_t ldy, int64_t r0, int64_t r1) const {
    int64_t nb = matrix_.colBlocks, chunks = matrix_.colBlock / 32, cols = x.cols, m = x.m;
    const float *xp = x.permuted.data();
    const uint8_t *data = indices_.bytes();
    for (int64_t r = r0; r < r1; ++r) {
      const float *palettes = lut_.data() + (r / matrix_.rowBlock) * nb * 16;
      const uint8_t *row = data + r * cols / 2;
      for (int64_t i = 0; i < m; ++i) {
        const float *xr = xp + i * cols;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t b = 0; b < nb; ++b)
          nibbleDot512(row + b * chunks * 16, xr + b * chunks * 32, chunks,
                       _mm512_loadu_ps(palettes + b * 16), a0, a1, a2, a3);
        y[i * ldy + r] = sum512(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
      }
    }
  }

  /// Rows [r0, r1) of 6- or 8-bit indices through planeGroup512, 64
  /// columns at a time, palette block by palette block.
  template <int Bits>
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,f16c"))) void
  fusedPlanes512(const DotOperand &x, float *y, int64_t ldy, int64_t r0, int64_t r1) const {
    constexpr int kRegs = Bits == 6 ? 2 : 8;
    constexpr int64_t kGroup = kPlaneGroupBytes<Bits>;
    int64_t nb = matrix_.colBlocks, groups = matrix_.colBlock / 64, cols = x.cols;
    int64_t rowBytes = cols * Bits / 8, paletteBytes = 2 * entries_;
    const float *xp = x.permuted.data();
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t *row = indices_.bytes() + r * rowBytes;
      const uint8_t *palettes = planes_.data() + (r / matrix_.rowBlock) * nb * paletteBytes;
      for (int64_t i = 0; i < x.m; ++i) {
        const float *xr = xp + i * cols;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t b = 0; b < nb; ++b) {
          __m512i planes[kRegs];
          for (int k = 0; k < kRegs; ++k)
            planes[k] = _mm512_loadu_si512(palettes + b * paletteBytes + 64 * k);
          const uint8_t *p = row + b * groups * kGroup;
          const float *xb = xr + b * groups * 64;
          for (int64_t g = 0; g < groups; ++g, p += kGroup, xb += 64) {
            _mm_prefetch(reinterpret_cast<const char *>(p) + kPrefetchBytes, _MM_HINT_T0);
            planeGroup512<Bits>(p, xb, planes, a0, a1, a2, a3);
          }
        }
        y[i * ldy + r] = sum512(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
      }
    }
  }

  /// Row r's values through planeValues256 (column blocks of whole 32-value
  /// steps), as decodeRaw's general path gives them.
  template <int Bits>
  __attribute__((target("avx2,f16c"))) void decodePlanes256(int64_t r, float *dst) const {
    int64_t nb = matrix_.colBlocks, block = matrix_.colBlock, paletteBytes = 2 * entries_;
    const uint8_t *p = indices_.bytes() + r * matrix_.cols * Bits / 8;
    int64_t palette0 = (r / matrix_.rowBlock) * nb;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t *lo = planes_.data() + (palette0 + b) * paletteBytes, *hi = lo + entries_;
      for (int64_t c = 0; c < block; c += 32, p += 4 * Bits, dst += 32) {
        __m256i h0, h1;
        planeValues256<Bits>(p, lo, hi, h0, h1);
        _mm256_storeu_ps(dst, _mm256_cvtph_ps(_mm256_castsi256_si128(h0)));
        _mm256_storeu_ps(dst + 8, _mm256_cvtph_ps(_mm256_castsi256_si128(h1)));
        _mm256_storeu_ps(dst + 16, _mm256_cvtph_ps(_mm256_extracti128_si256(h0, 1)));
        _mm256_storeu_ps(dst + 24, _mm256_cvtph_ps(_mm256_extracti128_si256(h1, 1)));
      }
    }
  }

  /// Rows [r0, r1) of 6- or 8-bit indices through planeTree256, 32 values a
  /// step into four accumulators; a column block's last 8-24 values gathered.
  /// Over column blocks of whole 32-value steps this sums as dotAvx2
  /// (Lazy.cpp) does: fp16 mode takes it too (prepareRounded).
  template <int Bits>
  __attribute__((target("avx2,fma,f16c"))) void
  fusedPlanes256(const DotOperand &x, float *y, int64_t ldy, int64_t r0, int64_t r1) const {
    int64_t nb = matrix_.colBlocks, block = matrix_.colBlock, cols = x.cols;
    int64_t rowBytes = cols * Bits / 8, paletteBytes = 2 * entries_;
    const uint8_t *end = indices_.bytes() + indices_.numBytes();
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t *row = indices_.bytes() + r * rowBytes;
      int64_t palette0 = (r / matrix_.rowBlock) * nb;
      for (int64_t i = 0; i < x.m; ++i) {
        const float *xr = x.x + i * x.ldx;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t *lo = planes_.data() + (palette0 + b) * paletteBytes, *hi = lo + entries_;
          const uint8_t *p = row + b * block * Bits / 8;
          const float *xb = xr + b * block;
          int64_t c = 0;
          for (; c + 32 <= block; c += 32, p += 4 * Bits) {
            _mm_prefetch(reinterpret_cast<const char *>(p) + kPrefetchBytes, _MM_HINT_T0);
            __m256i h0, h1;
            planeValues256<Bits>(p, lo, hi, h0, h1);
            halfPairsDot(h0, h1, xb + c, a0, a1, a2, a3);
          }
          const float *pal = lut_.data() + (palette0 + b) * entries_;
          for (; c < block; c += 8, p += Bits)
            a0 = _mm256_fmadd_ps(_mm256_i32gather_ps(pal, gatherIndices<Bits>(p, p + 8 > end), 4),
                                 _mm256_loadu_ps(xb + c), a0);
        }
        y[i * ldy + r] = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
      }
    }
  }

  /// Rows [r0, r1) of 6- or 8-bit indices, the fp32 palette gathered eight
  /// values at a time (32 a step, four accumulators).
  template <int Bits>
  __attribute__((target("avx2,fma"))) void fusedGather(const DotOperand &x, float *y, int64_t ldy,
                                                       int64_t r0, int64_t r1) const {
    int64_t nb = matrix_.colBlocks, block = matrix_.colBlock, cols = x.cols;
    int64_t rowBytes = cols * Bits / 8;
    const uint8_t *end = indices_.bytes() + indices_.numBytes();
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t *row = indices_.bytes() + r * rowBytes;
      const float *palettes = lut_.data() + (r / matrix_.rowBlock) * nb * entries_;
      for (int64_t i = 0; i < x.m; ++i) {
        const float *xr = x.x + i * x.ldx;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t b = 0; b < nb; ++b) {
          const float *pal = palettes + b * entries_;
          const uint8_t *p = row + b * block * Bits / 8;
          const float *xb = xr + b * block;
          int64_t c = 0;
          for (; c + 32 <= block; c += 32, p += 4 * Bits) {
            _mm_prefetch(reinterpret_cast<const char *>(p) + kPrefetchBytes, _MM_HINT_T0);
            __m256i i0 = gatherIndices<Bits>(p, false);
            __m256i i1 = gatherIndices<Bits>(p + Bits, false);
            __m256i i2 = gatherIndices<Bits>(p + 2 * Bits, false);
            __m256i i3 = gatherIndices<Bits>(p + 3 * Bits, p + 3 * Bits + 8 > end);
            a0 = _mm256_fmadd_ps(_mm256_i32gather_ps(pal, i0, 4), _mm256_loadu_ps(xb + c), a0);
            a1 = _mm256_fmadd_ps(_mm256_i32gather_ps(pal, i1, 4), _mm256_loadu_ps(xb + c + 8), a1);
            a2 = _mm256_fmadd_ps(_mm256_i32gather_ps(pal, i2, 4), _mm256_loadu_ps(xb + c + 16), a2);
            a3 = _mm256_fmadd_ps(_mm256_i32gather_ps(pal, i3, 4), _mm256_loadu_ps(xb + c + 24), a3);
          }
          for (; c < block; c += 8, p += Bits)
            a0 = _mm256_fmadd_ps(_mm256_i32gather_ps(pal, gatherIndices<Bits>(p, p + 8 > end), 4),
                                 _mm256_loadu_ps(xb + c), a0);
        }
        y[i * ldy + r] = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
      }
    }
  }

  std::vector<HalfPalette> halfPalettes_; ///< per palette, for the AVX2 kernel
  std::vector<uint8_t> planes_;           ///< per 6/8-bit palette, for fusedPlanes512
  bool finiteLut_ = false;                ///< no NaN or infinity in the palettes (tableRowsOf)
#endif
};

//===----------------------------------------------------------------------===//
// SparseValue
//===----------------------------------------------------------------------===//

class SparseValue final : public CompressedValue {
public:
  SparseValue(Shape shape, bool roundHalf, Tensor mask, Source values)
      : CompressedValue(std::move(shape), roundHalf), mask_(std::move(mask)),
        values_(std::move(values)) {
    const Shape &s = this->shape();
    last_ = s.empty() ? 1 : std::max<int64_t>(s.back(), 1);
    int64_t rows = numElements() / last_;
    rowOnes_.resize(static_cast<size_t>(rows) + 1, 0);
    for (int64_t r = 0; r < rows; ++r)
      rowOnes_[r + 1] = rowOnes_[r] + ones(r * last_, (r + 1) * last_);
  }

  /// Set bits in total (the values the mask needs).
  int64_t totalOnes() const { return rowOnes_.back(); }
  uint64_t storedBytes() const override { return mask_.numBytes() + values_.storedBytes(); }

protected:
  void decodeRaw(int64_t begin, int64_t n, float *dst) const override {
    int64_t row = begin / last_;
    int64_t k = rowOnes_[row] + ones(row * last_, begin);
    int64_t count = ones(begin, begin + n);
    thread_local std::vector<float> vals;
    if (vals.size() < static_cast<size_t>(count) + 1)
      vals.resize(static_cast<size_t>(count) + 1);
    values_.read(k, count, vals.data());
    int64_t j = 0;
    for (int64_t i = 0; i < n; ++i)
      dst[i] = bit(begin + i) ? vals[j++] : 0.0f;
  }

private:
  bool bit(int64_t i) const { return (mask_.bytes()[i >> 3] >> (i & 7)) & 1; }
  int64_t ones(int64_t b, int64_t e) const {
    int64_t n = 0;
    for (; b < e && (b & 63); ++b)
      n += bit(b);
    for (; b + 64 <= e; b += 64) {
      uint64_t w;
      std::memcpy(&w, mask_.bytes() + (b >> 3), 8);
      n += __builtin_popcountll(w);
    }
    for (; b < e; ++b)
      n += bit(b);
    return n;
  }

  Tensor mask_;
  Source values_;
  int64_t last_ = 1;
  std::vector<int64_t> rowOnes_;
};

//===----------------------------------------------------------------------===//
// Building the values from the constexpr ops
//===----------------------------------------------------------------------===//

/// The input as a Source: a compressed value when the input is one.
Source sourceParam(KernelContext &ctx, std::string_view param) {
  const Tensor &t = ctx.lazyIn(param);
  Source s;
  if (t.isLazy()) {
    if (auto cv = std::dynamic_pointer_cast<const CompressedValue>(t.lazyShared())) {
      s.value = std::move(cv);
      return s;
    }
    s.tensor = t.materialize();
    return s;
  }
  s.tensor = t;
  return s;
}

bool isPackedInt(DType t) {
  return t == DType::I4 || t == DType::U4 || t == DType::I8 || t == DType::U8 || t == DType::U1 ||
         t == DType::U2 || t == DType::U3 || t == DType::U6 || t == DType::I16 || t == DType::U16 ||
         t == DType::I32;
}

bool floatOutput(KernelContext &ctx) { return isFloat(ctx.outputType().dtype()); }

std::shared_ptr<const CompressedValue> blockwiseOf(KernelContext &ctx, bool roundHalf) {
  Source data = sourceParam(ctx, "data");
  const Tensor &scale = ctx.raw("scale");
  Tensor offset = ctx.has("offset") ? ctx.raw("offset") : Tensor();
  Shape shape = data.value ? data.value->shape() : data.tensor.shape();
  int64_t r = static_cast<int64_t>(shape.size());
  if (scale.rank() != r || (offset.valid() && offset.shape() != scale.shape()) ||
      !isFloat(scale.dtype()))
    return nullptr;
  if (!data.value && !(isPackedInt(data.tensor.dtype()) || isFloat(data.tensor.dtype())))
    return nullptr;
  if (offset.valid() && !(isPackedInt(offset.dtype()) || isFloat(offset.dtype())))
    return nullptr;
  for (int64_t d = 0; d < r; ++d)
    if (scale.dim(d) < 1 || shape[d] % scale.dim(d))
      return nullptr;
  return std::make_shared<BlockwiseValue>(shape, roundHalf, std::move(data), scale, offset,
                                          scale.shape());
}

std::shared_ptr<const CompressedValue> affineOf(KernelContext &ctx, bool roundHalf) {
  const Tensor &q = ctx.raw("quantized_data");
  if (q.dtype() != DType::I8 && q.dtype() != DType::U8)
    return nullptr;
  int64_t r = q.rank();
  if (r == 0)
    return nullptr;
  auto normalized = normalizeAxis(ctx.intArg("axis", 0), r);
  if (!normalized)
    return nullptr;
  int64_t axis = *normalized;
  auto param = [&](std::string_view p, float dflt) -> Tensor {
    if (!ctx.has(p))
      return Tensor::fromF32({dflt}, {1});
    return ctx.raw(p);
  };
  Tensor scale = param("scale", 1.0f), zp = param("zero_point", 0.0f);
  int64_t size = q.dim(axis);
  Shape blocks(static_cast<size_t>(r), 1);
  auto perAxis = [&](const Tensor &t) -> Tensor {
    // Scalar or one per channel along axis, laid out as a blocks-shaped tensor.
    std::vector<float> v = t.toFloats();
    if (v.size() == 1) {
      // assign's value may not be an element of the vector it refills
      // (libc++ frees the element before it reads it).
      float only = v[0];
      v.assign(static_cast<size_t>(size), only);
    }
    if (static_cast<int64_t>(v.size()) != size)
      return Tensor();
    Shape s(static_cast<size_t>(r), 1);
    s[axis] = size;
    return Tensor::fromF32(std::move(v), s);
  };
  Tensor s = perAxis(scale), z = perAxis(zp);
  if (!s.valid() || !z.valid())
    return nullptr;
  Shape b = s.shape();
  Source data;
  data.tensor = q;
  return std::make_shared<BlockwiseValue>(q.shape(), roundHalf, std::move(data), std::move(s),
                                          std::move(z), b);
}

std::shared_ptr<const CompressedValue> lutOf(KernelContext &ctx, bool roundHalf) {
  const Tensor &indices = ctx.raw("indices");
  Source lut = sourceParam(ctx, "lut");
  std::vector<float> values(static_cast<size_t>(lut.numElements()));
  lut.read(0, lut.numElements(), values.data());
  if (ctx.has("shape")) {
    // iOS16: a flat palette, indices packed in uint8 bytes.
    Shape shape = ctx.intsArg("shape");
    for (int64_t d : shape)
      if (d < 0)
        return nullptr;
    int64_t entries = lut.numElements();
    int bits = 0;
    while ((int64_t(1) << bits) < entries)
      ++bits;
    if ((int64_t(1) << bits) != entries || bits < 1 || bits > 8)
      return nullptr;
    int64_t n = numElementsOf(shape);
    if (static_cast<uint64_t>(indices.numBytes()) * 8 < static_cast<uint64_t>(n) * bits)
      return nullptr;
    Shape groups(shape.size(), 1);
    return std::make_shared<LutValue>(shape, roundHalf, indices, bits, shape, std::move(values),
                                      groups, entries, 1, 0, lut.storedBytes());
  }
  // iOS18: lut [groups per dim..., 2^bits, vector_size].
  Shape lt = lut.value ? lut.value->shape() : lut.tensor.shape();
  int64_t r = indices.rank();
  if (static_cast<int64_t>(lt.size()) != r + 2 || r == 0)
    return nullptr;
  int bits = dtypeBits(indices.dtype());
  if (!(isSubByte(indices.dtype()) || indices.dtype() == DType::U8) || bits < 1 || bits > 8)
    return nullptr;
  int64_t entries = lt[r], vs = lt[r + 1];
  if (entries != (int64_t(1) << bits) || vs < 1)
    return nullptr;
  auto normalized = normalizeAxis(ctx.intArg("vector_axis", 0), r);
  if (!normalized)
    return nullptr;
  int64_t vaxis = *normalized;
  Shape groups;
  for (int64_t d = 0; d < r; ++d) {
    if (lt[d] < 1 || indices.dim(d) % lt[d])
      return nullptr;
    groups.push_back(lt[d]);
  }
  Shape shape = indices.shape();
  shape[vaxis] *= vs;
  return std::make_shared<LutValue>(shape, roundHalf, indices, bits, indices.shape(),
                                    std::move(values), groups, entries, vs, vaxis,
                                    lut.storedBytes());
}

std::shared_ptr<const CompressedValue> sparseOf(KernelContext &ctx, bool roundHalf) {
  Source values = sourceParam(ctx, "nonzero_data");
  const Tensor &mask = ctx.raw("mask");
  Shape shape;
  if (ctx.has("shape")) {
    shape = ctx.intsArg("shape");
    for (int64_t d : shape)
      if (d < 0)
        return nullptr;
  } else {
    shape = mask.shape();
  }
  int64_t n = numElementsOf(shape);
  if (static_cast<uint64_t>(mask.numBytes()) * 8 < static_cast<uint64_t>(n))
    return nullptr;
  if (mask.dtype() != DType::U1 && mask.dtype() != DType::U8)
    return nullptr;
  if (!values.value && !isFloat(values.tensor.dtype()) && !isPackedInt(values.tensor.dtype()))
    return nullptr;
  int64_t available = values.numElements();
  auto v = std::make_shared<SparseValue>(shape, roundHalf, mask, std::move(values));
  if (v->totalOnes() > available)
    return nullptr; // the expanding kernel reports it
  return v;
}

} // namespace

std::shared_ptr<const CompressedValue> compressedValueOf(KernelContext &ctx) {
  if (!floatOutput(ctx))
    return nullptr;
  bool roundHalf = ctx.options().precision == Precision::FP16;
  const std::string &type = ctx.op.type;
  if (type == "constexpr_blockwise_shift_scale")
    return blockwiseOf(ctx, roundHalf);
  if (type == "constexpr_affine_dequantize")
    return affineOf(ctx, roundHalf);
  if (type == "constexpr_lut_to_dense")
    return lutOf(ctx, roundHalf);
  if (type == "constexpr_sparse_to_dense")
    return sparseOf(ctx, roundHalf);
  return nullptr;
}

} // namespace anefit::runtime
