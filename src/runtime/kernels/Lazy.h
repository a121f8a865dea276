//===- Lazy.h - Values the kernels read without materializing ---*- C++ -*-===//
//
// Two LazyValue forms:
//   TiledValue       tile(x, reps) kept as x: a grouped-query attention's
//                    head repetition is read by stride, never written out.
//   CompressedValue  a constexpr_* weight (blockwise shift/scale, palette,
//                    affine, sparse, and their iOS18 chains) decoded where a
//                    kernel reads it: row by row into registers or a small
//                    buffer, never as a whole dense matrix.
// Both materialize() to exactly the dense tensor the plain kernels produce.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/kernels/Isa.h"
#include "runtime/kernels/KernelUtil.h"

#include <memory>
#include <vector>

namespace anefit::runtime {

/// tile(base, reps), possibly reshaped: flat element i of the tiled shape
/// T (T[d] = base.dim(d) * reps[d]) is base at index (t_d mod base.dim(d)).
class TiledValue final : public LazyValue {
public:
  /// `base` is dense, in compute dtype; reps has base's rank.
  TiledValue(Tensor base, std::vector<int64_t> reps);
  LazyKind kind() const override { return kLazyTiled; }
  Tensor materialize() const override;

  const Tensor &base() const { return base_; }
  const Shape &tiledShape() const { return tiled_; }
  /// Element offset into base() of flat element `i` of the tiled shape.
  int64_t baseOffset(int64_t i) const;
  /// True when every run of `block` elements starting at a multiple of
  /// `block` lies contiguously in base() (a matrix can be read in place).
  bool contiguousBlocks(int64_t block) const;

private:
  Tensor base_;
  std::vector<int64_t> reps_;
  Shape tiled_;
  int64_t contiguous_ = 1; ///< elements of the untiled innermost dims
};

/// The matrix [b] of a batched operand of shape [..., rows, cols] seen as
/// `batch` matrices: a pointer to its rows*cols fp32 values, read in place
/// from a dense tensor or from a TiledValue whose blocks are contiguous.
/// Returns null when the operand cannot be read that way.
const float *batchMatrix(const Tensor &t, int64_t b, int64_t matrixElements);

/// How precise a product y = W x must be. Fp32 (the default): every kernel
/// keeps fp32-grade products. Fp16 (a linear whose result the program
/// declares fp16): int4/uint4 blocks of 32 without offsets may put x on a
/// 16-bit grid per block where that is the faster kernel (AVX2 without
/// AVX-512 or AVX-VNNI), each x moved by at most 2^-15 of its block's
/// largest |x|.
enum class ProductGrade { Fp32, Fp16 };

/// A constexpr_* value decoded on demand. Shape and decode are those of the
/// op's output in compute dtype (fp32); with `roundHalf` (the interpreter's
/// fp16 mode) every value is rounded to fp16 as the op's result would be.
class CompressedValue : public LazyValue {
public:
  CompressedValue(Shape shape, bool roundHalf) : shape_(std::move(shape)), roundHalf_(roundHalf) {}
  LazyKind kind() const override { return kLazyCompressed; }
  Tensor materialize() const override;

  const Shape &shape() const { return shape_; }
  int64_t numElements() const { return numElementsOf(shape_); }
  bool roundHalf() const { return roundHalf_; }
  /// Writes elements [begin, begin + n) (row-major) as fp32 to dst.
  void decode(int64_t begin, int64_t n, float *dst) const;
  /// The x of a product y = W x as the row kernels read it, prepared once
  /// per product by the calling thread and then read by every thread's rows:
  /// for the fused kernels, x in the order their shuffles give and the sums
  /// of x over each column block (for offsets).
  struct DotOperand {
    const float *x = nullptr;
    int64_t ldx = 0, m = 0, cols = 0;
    ProductGrade grade = ProductGrade::Fp32;
    int fused = 0;                ///< which fused kernel reads it; 0: none
    std::vector<float> permuted;  ///< m rows of cols values, when the kernel needs them
    std::vector<float> blockSums; ///< m rows of one sum per column block
    std::vector<float> starts;    ///< m rows of where the kernel's sums start
    /// For the 8-bit dot product kernels: m rows of x on a per-block integer
    /// grid, as signed bytes, with the lanes' integer starts and each
    /// block's grid step.
    std::vector<int8_t> digits;
    std::vector<int32_t> digitStarts;
    std::vector<float> steps;
  };
  /// x (m rows of `cols` values, ldx apart) for dotRows with W = this value
  /// seen as [numElements / cols, cols].
  DotOperand prepareDot(int64_t cols, const float *x, int64_t ldx, int64_t m,
                        ProductGrade grade = ProductGrade::Fp32) const;
  /// y[i * ldy + r] = sum_c W[r, c] * x[i * ldx + c] for rows [r0, r1) of W,
  /// i < m. The formats with a fused kernel (int4/uint4/int8/uint8 blocks,
  /// 4-bit palettes) dequantize in registers; the rest decode a row at a time.
  /// With roundHalf(), every row is exactly dotF32 of its decoded (rounded)
  /// values: 4-bit blocks and palettes look their rounded values up in
  /// registers, summed in dotF32's order; the rest decode a row at a time.
  /// Safe to call from several threads on disjoint rows.
  void dotRows(const DotOperand &x, float *y, int64_t ldy, int64_t r0, int64_t r1) const;
  /// prepareDot and dotRows in one (one thread, or a caller that runs once).
  void dotRows(int64_t cols, const float *x, int64_t ldx, int64_t m, float *y, int64_t ldy,
               int64_t r0, int64_t r1) const {
    dotRows(prepareDot(cols, x, ldx, m), y, ldy, r0, r1);
  }
  /// Bytes of the packed data (for reports and tests).
  virtual uint64_t storedBytes() const = 0;

protected:
  /// decode() without the fp16 rounding.
  virtual void decodeRaw(int64_t begin, int64_t n, float *dst) const = 0;
  /// Chooses the fused kernel for `x` (x.cols, x.m set) and prepares x for
  /// it; leaves x.fused at 0 when this view has none (rows are decoded).
  virtual void prepareFused(DotOperand &x) const {}
  /// prepareFused for fp16 mode (roundHalf()): a kernel chosen here must
  /// give each row the bits of the decoded row (rounded to fp16) summed by
  /// dotF32; leaves x.fused at 0 when this view has none.
  virtual void prepareRounded(DotOperand &x) const {}
  /// The fused kernel prepareFused or prepareRounded chose.
  virtual void dotRowsFused(const DotOperand &x, float *y, int64_t ldy, int64_t r0,
                            int64_t r1) const {}

private:
  Shape shape_;
  bool roundHalf_;
};

/// The compressed value of a constexpr op's output, or null when the op's
/// form is not one CompressedValue reads (the op then expands as usual).
/// `ctx` is the constexpr op's context: its inputs may be compressed values
/// themselves (iOS18 chains).
std::shared_ptr<const CompressedValue> compressedValueOf(KernelContext &ctx);

/// dot(a, b) over n floats with the kernels' instruction set.
float dotF32(const float *a, const float *b, int64_t n);
/// out[j] = dotF32(a, rows + j * ld, n) for j < count, bit for bit.
void dotsF32(const float *a, const float *rows, int64_t ld, int64_t count, int64_t n, float *out);

} // namespace anefit::runtime
