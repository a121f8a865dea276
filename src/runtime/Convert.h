//===- Convert.h - Bulk fp16 conversions ------------------------*- C++ -*-===//
//
// fp16 <-> fp32 over whole buffers with the fastest instructions the CPU has
// (F16C, chosen at run time), giving exactly the bits of the scalar
// halfToFloat / floatToHalf in support/DType.h, NaNs included.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>

namespace anefit::runtime {

/// dst[i] = halfToFloat(src[i]).
void halfToFloatN(const uint16_t *src, float *dst, int64_t n);
/// dst[i] = floatToHalf(src[i]) (round to nearest even, overflow to inf).
void floatToHalfN(const float *src, uint16_t *dst, int64_t n);
/// p[i] = halfToFloat(floatToHalf(p[i])): fp32 values rounded to fp16 in place.
void roundToHalfN(float *p, int64_t n);
/// half[i] = floatToHalf(p[i]), and p rounded as roundToHalfN does.
void toHalfRoundingN(float *p, uint16_t *half, int64_t n);

} // namespace anefit::runtime
