//===- KernelUtil.cpp - Helpers shared by the kernel families -------------===//
//
// Broadcasting, strided copies and fp16 widening used by many kernels.
//
//===----------------------------------------------------------------------===//
#include "runtime/kernels/KernelUtil.h"

#include <cstring>

#include <algorithm>

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

BroadcastPattern broadcastPattern(const Shape &in, const Shape &out) {
  int64_t n = numElementsOf(out);
  if (n == 0)
    return {BroadcastKind::General, 1};
  if (in == out)
    return {BroadcastKind::Same, n};
  if (numElementsOf(in) == 1)
    return {BroadcastKind::Scalar, n};
  // `in` aligned to `out`'s trailing dims, 1 in front.
  size_t rank = out.size(), off = rank - in.size();
  auto dim = [&](size_t d) { return d < off ? int64_t(1) : in[d - off]; };
  // Row: 1s, then out's dims (ones in out count on either side).
  size_t k = 0;
  while (k < rank && (dim(k) == 1 || out[k] == 1))
    ++k;
  bool row = true;
  int64_t inner = 1;
  for (size_t d = k; d < rank; ++d) {
    row = row && dim(d) == out[d];
    inner *= out[d];
  }
  if (row)
    return {BroadcastKind::Row, inner};
  // PerRow: out's dims, then 1s.
  size_t e = rank;
  while (e > 0 && (dim(e - 1) == 1 || out[e - 1] == 1))
    --e;
  bool perRow = true;
  inner = 1;
  for (size_t d = 0; d < rank; ++d) {
    if (d < e)
      perRow = perRow && dim(d) == out[d];
    else
      inner *= out[d];
  }
  if (perRow)
    return {BroadcastKind::PerRow, inner};
  return {BroadcastKind::General, 1};
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

namespace {

/// dst[j * dstStride] = src[j * srcStride] for j < n (strides in bytes).
template <int EB>
void copyLine(const uint8_t *src, int64_t srcStride, uint8_t *dst, int64_t dstStride, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    std::memcpy(dst + j * dstStride, src + j * srcStride, EB);
}

void copyLineAny(const uint8_t *src, int64_t srcStride, uint8_t *dst, int64_t dstStride, int64_t n,
                 int eb) {
  switch (eb) {
  case 4:
    return copyLine<4>(src, srcStride, dst, dstStride, n);
  case 2:
    return copyLine<2>(src, srcStride, dst, dstStride, n);
  case 1:
    return copyLine<1>(src, srcStride, dst, dstStride, n);
  case 8:
    return copyLine<8>(src, srcStride, dst, dstStride, n);
  default:
    for (int64_t j = 0; j < n; ++j)
      std::memcpy(dst + j * dstStride, src + j * srcStride, static_cast<size_t>(eb));
  }
}

} // namespace

void copyStrided(const uint8_t *in, uint8_t *out, int eb, const Shape &shape,
                 const std::vector<int64_t> &inStrides, int64_t inOffset,
                 const std::vector<int64_t> &outStrides, int64_t outOffset) {
  if (numElementsOf(shape) == 0)
    return;
  // Coalesce: drop unit dims, merge a dim into the one before it when both
  // layouts step over the pair contiguously. Strides become bytes.
  std::vector<int64_t> dims, is, os;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1)
      continue;
    int64_t si = inStrides[d] * eb, so = outStrides[d] * eb;
    if (!dims.empty() && is.back() == si * shape[d] && os.back() == so * shape[d]) {
      dims.back() *= shape[d];
      is.back() = si;
      os.back() = so;
      continue;
    }
    dims.push_back(shape[d]);
    is.push_back(si);
    os.push_back(so);
  }
  const uint8_t *src = in + inOffset * eb;
  uint8_t *dst = out + outOffset * eb;
  int64_t rank = static_cast<int64_t>(dims.size());
  if (rank == 0) {
    std::memcpy(dst, src, static_cast<size_t>(eb));
    return;
  }
  int64_t inner = dims[rank - 1], outerRank = rank - 1;
  bool runs = is[rank - 1] == eb && os[rank - 1] == eb;
  // A transpose (the output's innermost dim is not the input's): walk both
  // in blocks small enough to stay in cache.
  int64_t tdim = -1;
  if (!runs && os[rank - 1] == eb)
    for (int64_t d = 0; d < outerRank; ++d)
      if (is[d] == eb)
        tdim = d;
  std::vector<int64_t> idx(static_cast<size_t>(outerRank), 0);
  int64_t soff = 0, doff = 0;
  for (;;) {
    if (tdim >= 0) {
      constexpr int64_t kBlock = 32;
      int64_t tn = dims[tdim];
      for (int64_t t0 = 0; t0 < tn; t0 += kBlock)
        for (int64_t j0 = 0; j0 < inner; j0 += kBlock) {
          int64_t t1 = std::min(tn, t0 + kBlock), j1 = std::min(inner, j0 + kBlock);
          for (int64_t t = t0; t < t1; ++t)
            copyLineAny(src + soff + t * is[tdim] + j0 * is[rank - 1], is[rank - 1],
                        dst + doff + t * os[tdim] + j0 * eb, eb, j1 - j0, eb);
        }
    } else if (runs) {
      std::memcpy(dst + doff, src + soff, static_cast<size_t>(inner * eb));
    } else {
      copyLineAny(src + soff, is[rank - 1], dst + doff, os[rank - 1], inner, eb);
    }
    int64_t d = outerRank - 1;
    for (; d >= 0; --d) {
      if (d == tdim)
        continue;
      soff += is[d];
      doff += os[d];
      if (++idx[d] < dims[d])
        break;
      soff -= is[d] * dims[d];
      doff -= os[d] * dims[d];
      idx[d] = 0;
    }
    if (d < 0)
      return;
  }
}

void gatherStrided(const uint8_t *in, uint8_t *out, int eb, const Shape &shape,
                   const std::vector<int64_t> &inStrides, int64_t inOffset) {
  copyStrided(in, out, eb, shape, inStrides, inOffset, stridesOf(shape), 0);
}

namespace {

void tileRec(const uint8_t *x, uint8_t *out, const std::vector<int64_t> &dims,
             const std::vector<int64_t> &reps, const std::vector<int64_t> &xInner,
             const std::vector<int64_t> &outInner, size_t d, int eb) {
  if (d == dims.size()) { // one element of a repeated innermost dim
    std::memcpy(out, x, static_cast<size_t>(eb));
    return;
  }
  bool plain = true;
  for (size_t e = d; e < dims.size() && plain; ++e)
    plain = reps[e] == 1;
  if (plain) {
    std::memcpy(out, x, static_cast<size_t>(dims[d] * xInner[d] * eb));
    return;
  }
  for (int64_t i = 0; i < dims[d]; ++i)
    tileRec(x + i * xInner[d] * eb, out + i * outInner[d] * eb, dims, reps, xInner, outInner, d + 1,
            eb);
  int64_t block = dims[d] * outInner[d] * eb;
  for (int64_t r = 1; r < reps[d]; ++r)
    std::memcpy(out + r * block, out, static_cast<size_t>(block));
}

} // namespace

void tileInto(const uint8_t *x, const Shape &xShape, const std::vector<int64_t> &reps, uint8_t *out,
              int eb) {
  // Coalesce: unit dims that are not repeated vanish; neighbouring dims that
  // are both not repeated merge.
  std::vector<int64_t> dims, rp;
  for (size_t d = 0; d < xShape.size(); ++d) {
    if (xShape[d] == 0 || reps[d] == 0)
      return;
    if (xShape[d] == 1 && reps[d] == 1)
      continue;
    if (!dims.empty() && reps[d] == 1 && rp.back() == 1) {
      dims.back() *= xShape[d];
      continue;
    }
    dims.push_back(xShape[d]);
    rp.push_back(reps[d]);
  }
  if (dims.empty()) {
    std::memcpy(out, x, static_cast<size_t>(eb));
    return;
  }
  size_t rank = dims.size();
  std::vector<int64_t> xInner(rank, 1), outInner(rank, 1);
  for (size_t d = rank - 1; d-- > 0;) {
    xInner[d] = xInner[d + 1] * dims[d + 1];
    outInner[d] = outInner[d + 1] * dims[d + 1] * rp[d + 1];
  }
  tileRec(x, out, dims, rp, xInner, outInner, 0, eb);
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
