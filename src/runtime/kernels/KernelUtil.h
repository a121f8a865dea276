//===- KernelUtil.h - Helpers shared by the kernel families -----*- C++ -*-===//
//
// Broadcasting, index arithmetic and typed dispatch used by several kernel
// files, so each kernel body can stay close to the op's definition.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/Convert.h"
#include "runtime/Kernel.h"
#include "support/Error.h"

#include <cstdint>
#include <vector>

namespace anefit::runtime {

/// Numpy-style broadcast of two shapes; fails through `ctx` when incompatible.
Shape broadcastShapes(const KernelContext &ctx, const Shape &a, const Shape &b);

/// For each element of `out` (row-major), the offset into a tensor of shape
/// `in` broadcast to `out`. Computed with an odometer, no division per element.
std::vector<int64_t> broadcastOffsets(const Shape &in, const Shape &out);

/// How a tensor of shape `in` broadcast to `out` lines up with `out`'s
/// elements (row-major), for the cases that need no index per element.
enum class BroadcastKind {
  Same,    ///< in == out: element i is in[i]
  Scalar,  ///< one element: in[0] everywhere
  Row,     ///< in is `out`'s trailing `inner` elements, repeated: in[i % inner]
  PerRow,  ///< one value per run of `inner` elements: in[i / inner]
  General, ///< anything else (use broadcastOffsets / forEachBroadcast)
};
struct BroadcastPattern {
  BroadcastKind kind = BroadcastKind::General;
  int64_t inner = 1;
};
/// The pattern of `in` broadcast to `out` (which must be the broadcast shape).
BroadcastPattern broadcastPattern(const Shape &in, const Shape &out);

/// Walks the elements of an `outShape` tensor and yields the matching flat
/// offset in `in` (broadcast), calling fn(outIndex, inOffset).
template <typename Fn> void forEachBroadcast(const Shape &in, const Shape &out, Fn &&fn) {
  int64_t rank = static_cast<int64_t>(out.size());
  int64_t n = numElementsOf(out);
  if (in == out) {
    for (int64_t i = 0; i < n; ++i)
      fn(i, i);
    return;
  }
  if (numElementsOf(in) == 1) {
    for (int64_t i = 0; i < n; ++i)
      fn(i, int64_t(0));
    return;
  }
  // Strides of `in` aligned to `out`'s trailing dims; 0 on broadcast dims.
  std::vector<int64_t> stride(rank, 0);
  std::vector<int64_t> inStrides = stridesOf(in);
  int64_t off = rank - static_cast<int64_t>(in.size());
  for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d)
    if (in[d] != 1)
      stride[d + off] = inStrides[d];
  std::vector<int64_t> idx(rank, 0);
  int64_t inOff = 0;
  for (int64_t i = 0; i < n; ++i) {
    fn(i, inOff);
    for (int64_t d = rank - 1; d >= 0; --d) {
      inOff += stride[d];
      if (++idx[d] < out[d])
        break;
      inOff -= stride[d] * out[d];
      idx[d] = 0;
    }
  }
}

/// Splits `shape` around `axis` into (outer, axisSize, inner) element counts.
struct AxisSplit {
  int64_t outer = 1, size = 1, inner = 1;
};
AxisSplit splitAt(const Shape &shape, int64_t axis);

/// Reads a const integer list parameter, failing when its length differs from `n`.
std::vector<int64_t> intsOfLength(KernelContext &ctx, std::string_view param, size_t n);

/// Copies elements between two strided layouts of `shape` (strides and
/// offsets in elements, possibly negative): for every index,
/// out[outOffset + idx . outStrides] = in[inOffset + idx . inStrides].
/// Dims are merged where both layouts allow, whole contiguous runs move with
/// memcpy, and transposes go through cache-sized blocks.
void copyStrided(const uint8_t *in, uint8_t *out, int elemBytes, const Shape &shape,
                 const std::vector<int64_t> &inStrides, int64_t inOffset,
                 const std::vector<int64_t> &outStrides, int64_t outOffset);

/// Copies a strided block into a dense one: out[i] = in[offset + idx . strides] over `shape`.
void gatherStrided(const uint8_t *in, uint8_t *out, int elemBytes, const Shape &shape,
                   const std::vector<int64_t> &inStrides, int64_t inOffset);

/// Writes tile(x, reps) (x of shape `xShape`, row-major) to `out`: the
/// innermost untiled block is copied once, each repetition copies the block
/// already written.
void tileInto(const uint8_t *x, const Shape &xShape, const std::vector<int64_t> &reps, uint8_t *out,
              int elemBytes);

/// Element width in bytes of a compute-dtype tensor (fp32/int32 4, bool 1).
inline int elemBytes(const Tensor &t) { return dtypeBits(t.dtype()) / 8; }

/// Calls fn.template operator()<T>() with T = float, int32_t or uint8_t (bool)
/// for a compute dtype.
template <typename Fn> void dispatchCompute(const KernelContext &ctx, DType t, Fn &&fn) {
  switch (t) {
  case DType::F32:
    fn.template operator()<float>();
    return;
  case DType::I32:
    fn.template operator()<int32_t>();
    return;
  case DType::Bool:
    fn.template operator()<uint8_t>();
    return;
  default:
    ctx.fail(std::string("unsupported dtype ") + std::string(dtypeName(t)));
  }
}

/// Reads fp32 rows [r0, r1) of a (rows x cols) matrix stored as fp32 or fp16
/// into `dst` (widening fp16 with the fastest conversion the CPU offers).
void loadRowsAsF32(const Tensor &m, int64_t cols, int64_t r0, int64_t r1, float *dst);

} // namespace anefit::runtime
