//===- Shape.cpp - Data movement kernels ----------------------------------===//
//
// Ops that move elements without arithmetic (reshape, transpose, slicing,
// gather/scatter, concat, pad, ...) plus the tensor creators (fill, range_1d,
// shape). They copy bytes, so one implementation serves every dtype. They
// move whole contiguous runs (copyStrided, memcpy), hand out views instead of
// copies where the result is a contiguous part of the input (reshapes,
// contiguous slices and splits, transposes of unit dims), and keep a tile
// read only by attention or matmul as a TiledValue (Lazy.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/kernels/Lazy.h"
#include "support/IntMath.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace anefit::runtime {
namespace {

/// An index read from an indices tensor, negative values counted from the
/// end; fails when out of [0, size).
int64_t checkedIndex(KernelContext &ctx, int64_t idx, int64_t size, std::string_view what) {
  std::optional<int64_t> i = normalizeIndex(idx, size);
  if (!i)
    ctx.fail(std::string(what) + " index " + std::to_string(idx) + " is out of range [" +
             std::to_string(-size) + ", " + std::to_string(size) + ")");
  return *i;
}

/// Geometry of a strided slice: per-dim begin, step and length.
struct SliceSpec {
  std::vector<int64_t> begin, step, length;
  std::vector<bool> squeeze;
};

SliceSpec sliceSpec(KernelContext &ctx, const Tensor &x) {
  int64_t rank = x.rank();
  std::vector<int64_t> begin = intsOfLength(ctx, "begin", rank);
  std::vector<int64_t> end = intsOfLength(ctx, "end", rank);
  std::vector<int64_t> stride =
      ctx.has("stride") ? intsOfLength(ctx, "stride", rank) : std::vector<int64_t>(rank, 1);
  auto mask = [&](std::string_view p) {
    std::vector<bool> m = ctx.has(p) ? ctx.boolsArg(p) : std::vector<bool>(rank, false);
    if (static_cast<int64_t>(m.size()) != rank)
      ctx.fail("parameter '" + std::string(p) + "' must have " + std::to_string(rank) + " values");
    return m;
  };
  std::vector<bool> bm = mask("begin_mask"), em = mask("end_mask"), sm = mask("squeeze_mask");
  SliceSpec s;
  s.squeeze = sm;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t dim = x.dim(d), st = stride[d];
    if (st == 0)
      ctx.fail("stride of dim " + std::to_string(d) + " is 0");
    int64_t b = begin[d], e = end[d];
    // Python slice semantics: negative indices count from the end, then clamp.
    if (b < 0)
      b += dim;
    if (e < 0)
      e += dim;
    if (st > 0) {
      b = bm[d] ? 0 : std::clamp<int64_t>(b, 0, dim);
      e = em[d] ? dim : std::clamp<int64_t>(e, 0, dim);
    } else {
      b = bm[d] ? dim - 1 : std::clamp<int64_t>(b, -1, dim - 1);
      e = em[d] ? -1 : std::clamp<int64_t>(e, -1, dim - 1);
    }
    int64_t len =
        st > 0 ? (e > b ? (e - b + st - 1) / st : 0) : (b > e ? (b - e - st - 1) / -st : 0);
    if (sm[d]) {
      if (begin[d] + (begin[d] < 0 ? dim : 0) < 0 || begin[d] + (begin[d] < 0 ? dim : 0) >= dim)
        ctx.fail("squeezed dim " + std::to_string(d) + " begin " + std::to_string(begin[d]) +
                 " is out of range");
      b = begin[d] < 0 ? begin[d] + dim : begin[d];
      len = 1;
    }
    s.begin.push_back(b);
    s.step.push_back(st);
    s.length.push_back(len);
  }
  return s;
}

/// Offset and strides (in elements) of the slice `s` of a tensor of `shape`.
void sliceView(const Shape &shape, const SliceSpec &s, int64_t &offset,
               std::vector<int64_t> &strides) {
  std::vector<int64_t> base = stridesOf(shape);
  offset = 0;
  strides.resize(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    offset += s.begin[d] * base[d];
    strides[d] = s.step[d] * base[d];
  }
}

/// A tensor usable by a byte-moving kernel: raw when its dtype is whole-byte
/// (fp16 tables stay fp16, int8 tables int8), else converted to compute dtype.
const Tensor &movable(KernelContext &ctx, std::string_view param) {
  const Tensor &r = ctx.raw(param);
  DType t = r.dtype();
  if (t == DType::F32 || t == DType::F16 || t == DType::I32 || t == DType::Bool || t == DType::I8 ||
      t == DType::U8 || t == DType::I16 || t == DType::U16)
    return r;
  return ctx.in(param);
}

/// `x` for an op that hands lazy values on: itself, or dense when the op's
/// readers do not all take its form.
Tensor passLazy(KernelContext &ctx, const Tensor &x) {
  if (x.isLazy() && !ctx.outputMayBeLazy(x.lazyValue()->kind()))
    return x.materialize();
  return x;
}

/// True when a strided layout of `shape` is one dense row-major run.
bool isDenseRun(const Shape &shape, const std::vector<int64_t> &strides) {
  int64_t expected = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 1)
      continue;
    if (strides[d] != expected)
      return false;
    expected *= shape[d];
  }
  return true;
}

/// The slice of x at `offset` with `strides` over `shape`: a view when it is
/// one contiguous run, else a copy.
Tensor sliceOf(const Tensor &x, const Shape &shape, const std::vector<int64_t> &strides,
               int64_t offset) {
  if (numElementsOf(shape) > 0 && isDenseRun(shape, strides))
    return x.view(offset, shape);
  Tensor out = Tensor::empty(x.dtype(), shape);
  gatherStrided(x.bytes(), out.mutableBytes(), elemBytes(x), shape, strides, offset);
  return out;
}

/// The slice `s` of x: a view when it is one contiguous run, else a copy.
Tensor sliceTensor(const Tensor &x, const SliceSpec &s) {
  int64_t offset;
  std::vector<int64_t> strides;
  sliceView(x.shape(), s, offset, strides);
  return sliceOf(x, s.length, strides, offset);
}

void setComputeOutput(KernelContext &ctx, size_t i, Tensor t) {
  DType want = computeDType(t.dtype());
  ctx.setOutput(i, want == t.dtype() ? std::move(t) : t.convertTo(want));
}

} // namespace

void reshapeOp(KernelContext &ctx) {
  Tensor x = passLazy(ctx, ctx.lazyIn("x"));
  if (!x.isLazy())
    x = ctx.in("x");
  std::vector<int64_t> target = ctx.intsArg("shape");
  Shape shape;
  int64_t known = 1, infer = -1;
  for (size_t d = 0; d < target.size(); ++d) {
    int64_t v = target[d];
    if (v == -1) {
      if (infer >= 0)
        ctx.fail("shape has more than one -1");
      infer = static_cast<int64_t>(d);
      v = 1;
    } else if (v == 0 && static_cast<int64_t>(d) < x.rank()) {
      v = x.dim(d); // 0 copies the input dim
    } else if (v < 0) {
      ctx.fail("shape has negative dim " + std::to_string(v));
    }
    shape.push_back(v);
    known *= v;
  }
  if (infer >= 0) {
    if (known == 0 || x.numElements() % known)
      ctx.fail("cannot infer -1 reshaping " + shapeStr(x.shape()) + " to " + shapeStr(target));
    shape[infer] = x.numElements() / known;
  }
  if (numElementsOf(shape) != x.numElements())
    ctx.fail("cannot reshape " + shapeStr(x.shape()) + " (" + std::to_string(x.numElements()) +
             " elements) to " + shapeStr(shape));
  ctx.setOutput(0, x.reshaped(shape));
}

void expandDimsOp(KernelContext &ctx) {
  Tensor x = passLazy(ctx, ctx.lazyIn("x"));
  if (!x.isLazy())
    x = ctx.in("x");
  std::vector<int64_t> axes = ctx.intsArg("axes");
  int64_t outRank = x.rank() + static_cast<int64_t>(axes.size());
  std::vector<bool> isNew(outRank, false);
  for (int64_t a : axes) {
    int64_t n = ctx.axis(a, outRank, "axes");
    if (isNew[n])
      ctx.fail("axes repeat " + std::to_string(a));
    isNew[n] = true;
  }
  Shape shape;
  for (int64_t d = 0, src = 0; d < outRank; ++d)
    shape.push_back(isNew[d] ? 1 : x.dim(src++));
  ctx.setOutput(0, x.reshaped(shape));
}

void squeezeOp(KernelContext &ctx) {
  Tensor x = passLazy(ctx, ctx.lazyIn("x"));
  if (!x.isLazy())
    x = ctx.in("x");
  std::vector<bool> drop(x.rank(), false);
  if (ctx.has("axes")) {
    for (int64_t a : ctx.intsArg("axes")) {
      int64_t d = ctx.axis(a, x.rank(), "axes");
      if (x.dim(d) != 1)
        ctx.fail("cannot squeeze dim " + std::to_string(a) + " of size " +
                 std::to_string(x.dim(d)));
      drop[d] = true;
    }
  } else {
    for (int64_t d = 0; d < x.rank(); ++d)
      drop[d] = x.dim(d) == 1;
  }
  Shape shape;
  for (int64_t d = 0; d < x.rank(); ++d)
    if (!drop[d])
      shape.push_back(x.dim(d));
  ctx.setOutput(0, x.reshaped(shape));
}

void flatten2dOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  auto axis = normalizeAxis(ctx.intArg("axis"), x.rank(), /*orRank=*/true);
  if (!axis)
    ctx.fail("axis is out of range");
  int64_t a = 1;
  for (int64_t d = 0; d < *axis; ++d)
    a *= x.dim(d);
  ctx.setOutput(0, x.reshaped({a, a ? x.numElements() / a : 0}));
}

void transposeOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  std::vector<int64_t> perm = intsOfLength(ctx, "perm", x.rank());
  std::vector<int64_t> base = stridesOf(x.shape()), strides;
  std::vector<bool> seen(x.rank(), false);
  Shape shape;
  for (int64_t p : perm) {
    int64_t d = ctx.axis(p, x.rank(), "perm");
    if (seen[d])
      ctx.fail("perm is not a permutation");
    seen[d] = true;
    shape.push_back(x.dim(d));
    strides.push_back(base[d]);
  }
  ctx.setOutput(0, sliceOf(x, shape, strides, 0));
}

void concatOp(KernelContext &ctx) {
  std::vector<const Tensor *> values = ctx.variadic("values");
  if (values.empty())
    ctx.fail("concat needs at least one value");
  // coremltools concatenates scalars into a vector (shape arithmetic such as
  // concat(values=(0, 0, %n, 0))): a scalar counts as a 1-element vector.
  std::vector<Tensor> lifted;
  lifted.reserve(values.size());
  for (const Tensor *&v : values)
    if (v->rank() == 0) {
      lifted.push_back(v->reshaped({1}));
      v = &lifted.back();
    }
  const Tensor &first = *values[0];
  int64_t axis = ctx.axis(ctx.intArg("axis"), first.rank());
  bool interleave = ctx.boolArg("interleave");
  Shape shape = first.shape();
  shape[axis] = 0;
  for (const Tensor *v : values) {
    if (v->rank() != first.rank() || v->dtype() != first.dtype())
      ctx.fail("values differ in rank or dtype");
    for (int64_t d = 0; d < first.rank(); ++d)
      if (d != axis && v->dim(d) != first.dim(d))
        ctx.fail("values differ in dim " + std::to_string(d) + ": " + shapeStr(first.shape()) +
                 " vs " + shapeStr(v->shape()));
    if (interleave && v->dim(axis) != first.dim(axis))
      ctx.fail("interleave needs equal sizes along the axis");
    shape[axis] += v->dim(axis);
  }
  Tensor out = Tensor::empty(first.dtype(), shape);
  int eb = elemBytes(first);
  AxisSplit s = splitAt(shape, axis);
  uint8_t *o = out.mutableBytes();
  int64_t pos = 0;
  for (int64_t b = 0; b < s.outer; ++b) {
    if (interleave) {
      for (int64_t k = 0; k < first.dim(axis); ++k)
        for (const Tensor *v : values) {
          int64_t chunk = s.inner * eb;
          std::memcpy(o + pos, v->bytes() + (b * v->dim(axis) + k) * chunk, chunk);
          pos += chunk;
        }
    } else {
      for (const Tensor *v : values) {
        int64_t chunk = v->dim(axis) * s.inner * eb;
        std::memcpy(o + pos, v->bytes() + b * chunk, chunk);
        pos += chunk;
      }
    }
  }
  ctx.setOutput(0, std::move(out));
}

void stackOp(KernelContext &ctx) {
  std::vector<const Tensor *> values = ctx.variadic("values");
  if (values.empty())
    ctx.fail("stack needs at least one value");
  const Tensor &first = *values[0];
  int64_t axis = ctx.axis(ctx.intArg("axis"), first.rank() + 1);
  for (const Tensor *v : values)
    if (v->shape() != first.shape() || v->dtype() != first.dtype())
      ctx.fail("values must have the same shape and dtype");
  Shape shape = first.shape();
  shape.insert(shape.begin() + axis, static_cast<int64_t>(values.size()));
  Tensor out = Tensor::empty(first.dtype(), shape);
  AxisSplit s = splitAt(shape, axis);
  int eb = elemBytes(first);
  int64_t chunk = s.inner * eb, pos = 0;
  for (int64_t b = 0; b < s.outer; ++b)
    for (const Tensor *v : values) {
      std::memcpy(out.mutableBytes() + pos, v->bytes() + b * chunk, chunk);
      pos += chunk;
    }
  ctx.setOutput(0, std::move(out));
}

void splitOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  int64_t axis = ctx.axis(ctx.intArg("axis"), x.rank());
  int64_t dim = x.dim(axis);
  std::vector<int64_t> sizes = ctx.intsArg("split_sizes");
  if (sizes.empty()) {
    int64_t n = ctx.intArg("num_splits", static_cast<int64_t>(ctx.numOutputs()));
    if (n <= 0)
      ctx.fail("num_splits must be positive");
    // The count comes from the model: check it before sizing anything by it.
    if (static_cast<uint64_t>(n) != ctx.numOutputs())
      ctx.fail("num_splits is " + std::to_string(n) + " but the op has " +
               std::to_string(ctx.numOutputs()) + " outputs");
    int64_t each = (dim + n - 1) / n;
    for (int64_t i = 0, left = dim; i < n; ++i, left -= each)
      sizes.push_back(std::min(each, std::max<int64_t>(left, 0)));
  }
  int64_t total = 0;
  for (int64_t v : sizes) {
    if (v < 0)
      ctx.fail("split sizes must be non-negative");
    total += v;
  }
  if (total != dim || sizes.size() != ctx.numOutputs())
    ctx.fail("split sizes " + shapeStr(sizes) + " do not cover dim " + std::to_string(dim) +
             " in " + std::to_string(ctx.numOutputs()) + " outputs");
  AxisSplit s = splitAt(x.shape(), axis);
  int eb = elemBytes(x);
  int64_t start = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Shape shape = x.shape();
    shape[axis] = sizes[i];
    if (s.outer == 1 && sizes[i] > 0) {
      // One contiguous run of x: a view.
      ctx.setOutput(i, x.view(start * s.inner, shape));
      start += sizes[i];
      continue;
    }
    Tensor out = Tensor::empty(x.dtype(), shape);
    int64_t chunk = sizes[i] * s.inner * eb;
    for (int64_t b = 0; b < s.outer; ++b)
      std::memcpy(out.mutableBytes() + b * chunk, x.bytes() + ((b * dim + start) * s.inner) * eb,
                  chunk);
    start += sizes[i];
    ctx.setOutput(i, std::move(out));
  }
}

void sliceByIndexOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  SliceSpec s = sliceSpec(ctx, x);
  Tensor out = sliceTensor(x, s);
  Shape squeezed;
  for (size_t d = 0; d < s.length.size(); ++d)
    if (!s.squeeze[d])
      squeezed.push_back(s.length[d]);
  ctx.setOutput(0, out.reshaped(squeezed));
}

void sliceBySizeOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  std::vector<int64_t> begin = intsOfLength(ctx, "begin", x.rank());
  std::vector<int64_t> size = intsOfLength(ctx, "size", x.rank());
  SliceSpec s;
  for (int64_t d = 0; d < x.rank(); ++d) {
    int64_t b = begin[d] < 0 ? begin[d] + x.dim(d) : begin[d];
    int64_t len = size[d] == -1 ? x.dim(d) - b : size[d];
    if (b < 0 || len < 0 || b + len > x.dim(d))
      ctx.fail("slice [" + std::to_string(begin[d]) + ", +" + std::to_string(size[d]) +
               ") is out of range for dim " + std::to_string(d) + " of size " +
               std::to_string(x.dim(d)));
    s.begin.push_back(b);
    s.step.push_back(1);
    s.length.push_back(len);
  }
  ctx.setOutput(0, sliceTensor(x, s));
}

void sliceUpdateOp(KernelContext &ctx) {
  // x with x[begin:end:stride] replaced by update.
  const Tensor &x = ctx.in("x");
  const Tensor &update = ctx.in("update");
  if (update.dtype() != x.dtype())
    ctx.fail("update dtype differs from x");
  SliceSpec s = sliceSpec(ctx, x);
  Shape squeezed;
  for (size_t d = 0; d < s.length.size(); ++d)
    if (!s.squeeze[d])
      squeezed.push_back(s.length[d]);
  if (update.shape() != s.length && update.shape() != squeezed)
    ctx.fail("update has shape " + shapeStr(update.shape()) + ", the slice has shape " +
             shapeStr(squeezed));
  int64_t offset;
  std::vector<int64_t> strides;
  sliceView(x.shape(), s, offset, strides);
  Tensor out = ctx.takeOrCopy("x");
  // Only the slice changes: a carried KV cache keeps its fp16 form but for it.
  copyStrided(update.bytes(), out.mutableBytesForBox(offset, s.length, strides), elemBytes(x),
              s.length, stridesOf(s.length), 0, strides, offset);
  ctx.setOutput(0, std::move(out));
}

void gatherOp(KernelContext &ctx) {
  // A compressed table (an embedding) decodes only the rows it gathers.
  const Tensor &held = ctx.lazyIn("x");
  const auto *packed =
      held.isLazy() ? dynamic_cast<const CompressedValue *>(held.lazyValue()) : nullptr;
  const Tensor &x = packed ? held : movable(ctx, "x");
  const Tensor &indices = ctx.in("indices");
  int64_t axis = ctx.axis(ctx.intArg("axis"), x.rank());
  int64_t batchDims = ctx.intArg("batch_dims");
  if (batchDims < 0)
    batchDims += indices.rank();
  if (batchDims < 0 || batchDims > axis || batchDims > indices.rank())
    ctx.fail("batch_dims " + std::to_string(batchDims) + " is out of range");
  for (int64_t d = 0; d < batchDims; ++d)
    if (x.dim(d) != indices.dim(d))
      ctx.fail("batch dims of x and indices differ");
  // out = x[:axis] ++ indices[batch_dims:] ++ x[axis+1:]
  Shape shape(x.shape().begin(), x.shape().begin() + axis);
  shape.insert(shape.end(), indices.shape().begin() + batchDims, indices.shape().end());
  shape.insert(shape.end(), x.shape().begin() + axis + 1, x.shape().end());
  Tensor out = Tensor::empty(x.dtype(), shape);
  int eb = packed ? 4 : elemBytes(x);
  AxisSplit xs = splitAt(x.shape(), axis);
  int64_t batch = 1;
  for (int64_t d = 0; d < batchDims; ++d)
    batch *= x.dim(d);
  int64_t outerPerBatch = xs.outer / std::max<int64_t>(batch, 1);
  int64_t idxPerBatch = indices.numElements() / std::max<int64_t>(batch, 1);
  int64_t chunk = xs.inner * eb;
  uint8_t *o = out.mutableBytes();
  int64_t pos = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t ob = 0; ob < outerPerBatch; ++ob)
      for (int64_t j = 0; j < idxPerBatch; ++j) {
        int64_t i =
            checkedIndex(ctx, indices.data<int32_t>()[b * idxPerBatch + j], xs.size, "gather");
        int64_t outer = b * outerPerBatch + ob;
        int64_t from = (outer * xs.size + i) * xs.inner;
        if (packed)
          packed->decode(from, xs.inner, reinterpret_cast<float *>(o + pos));
        else
          std::memcpy(o + pos, x.bytes() + from * eb, chunk);
        pos += chunk;
      }
  setComputeOutput(ctx, 0, std::move(out));
}

void gatherAlongAxisOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  const Tensor &indices = ctx.in("indices");
  int64_t axis = ctx.axis(ctx.intArg("axis"), x.rank());
  if (indices.rank() != x.rank())
    ctx.fail("indices must have the rank of x");
  for (int64_t d = 0; d < x.rank(); ++d)
    if (d != axis && indices.dim(d) != x.dim(d))
      ctx.fail("indices shape " + shapeStr(indices.shape()) + " does not fit x " +
               shapeStr(x.shape()));
  Tensor out = Tensor::zeros(x.dtype(), indices.shape());
  AxisSplit is = splitAt(indices.shape(), axis), xs = splitAt(x.shape(), axis);
  int eb = elemBytes(x);
  for (int64_t b = 0; b < is.outer; ++b)
    for (int64_t k = 0; k < is.size; ++k)
      for (int64_t i = 0; i < is.inner; ++i) {
        int64_t o = (b * is.size + k) * is.inner + i;
        int64_t src = checkedIndex(ctx, indices.data<int32_t>()[o], xs.size, "gather_along_axis");
        std::memcpy(out.mutableBytes() + o * eb,
                    x.bytes() + ((b * xs.size + src) * xs.inner + i) * eb, eb);
      }
  ctx.setOutput(0, std::move(out));
}

void gatherNdOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  const Tensor &indices = ctx.in("indices");
  int64_t batchDims = ctx.intArg("batch_dims");
  if (indices.rank() < 1)
    ctx.fail("indices must have rank >= 1");
  int64_t depth = indices.dim(indices.rank() - 1);
  if (batchDims < 0 || batchDims + depth > x.rank())
    ctx.fail("indices depth " + std::to_string(depth) + " exceeds the rank of x");
  Shape shape(indices.shape().begin(), indices.shape().end() - 1);
  shape.insert(shape.end(), x.shape().begin() + batchDims + depth, x.shape().end());
  Tensor out = Tensor::zeros(x.dtype(), shape);
  std::vector<int64_t> xstr = stridesOf(x.shape());
  int64_t inner = 1;
  for (int64_t d = batchDims + depth; d < x.rank(); ++d)
    inner *= x.dim(d);
  int64_t batch = 1;
  for (int64_t d = 0; d < batchDims; ++d)
    batch *= x.dim(d);
  int64_t tuples = indices.numElements() / std::max<int64_t>(depth, 1);
  int64_t perBatch = tuples / std::max<int64_t>(batch, 1);
  int eb = elemBytes(x);
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = batchDims ? (t / perBatch) * xstr[batchDims - 1] : 0;
    for (int64_t j = 0; j < depth; ++j)
      off += checkedIndex(ctx, indices.data<int32_t>()[t * depth + j], x.dim(batchDims + j),
                          "gather_nd") *
             xstr[batchDims + j];
    std::memcpy(out.mutableBytes() + t * inner * eb, x.bytes() + off * eb, inner * eb);
  }
  ctx.setOutput(0, std::move(out));
}

namespace {

/// Applies scatter mode `mode` to one element.
void scatterOne(KernelContext &ctx, const std::string &mode, Tensor &out, int64_t dst,
                const Tensor &updates, int64_t src) {
  if (out.dtype() == DType::F32 || out.dtype() == DType::I32) {
    bool f = out.dtype() == DType::F32;
    double a = f ? out.data<float>()[dst] : out.data<int32_t>()[dst];
    double u = f ? updates.data<float>()[src] : updates.data<int32_t>()[src];
    double r;
    if (mode == "update")
      r = u;
    else if (mode == "add")
      r = a + u;
    else if (mode == "sub")
      r = a - u;
    else if (mode == "mul")
      r = a * u;
    else if (mode == "div")
      r = f ? a / u : (u == 0 ? 0 : std::trunc(a / u));
    else if (mode == "max")
      r = std::max(a, u);
    else if (mode == "min")
      r = std::min(a, u);
    else
      ctx.fail("mode: expected update, add, sub, mul, div, max or min, found '" + mode + "'");
    if (f)
      out.mutableData<float>()[dst] = static_cast<float>(r);
    else
      out.mutableData<int32_t>()[dst] = static_cast<int32_t>(r);
  } else {
    if (mode != "update")
      ctx.fail("mode '" + mode + "' needs a numeric tensor");
    out.mutableData<uint8_t>()[dst] = updates.data<uint8_t>()[src];
  }
}

} // namespace

void scatterOp(KernelContext &ctx) {
  const Tensor &data = ctx.in("data"), &indices = ctx.in("indices"), &updates = ctx.in("updates");
  int64_t axis = ctx.axis(ctx.intArg("axis"), data.rank());
  std::string mode = ctx.strArg("mode");
  if (updates.dtype() != data.dtype())
    ctx.fail("updates dtype differs from data");
  // updates shape = data[:axis] ++ indices.shape ++ data[axis+1:]
  Shape want(data.shape().begin(), data.shape().begin() + axis);
  want.insert(want.end(), indices.shape().begin(), indices.shape().end());
  want.insert(want.end(), data.shape().begin() + axis + 1, data.shape().end());
  if (updates.shape() != want)
    ctx.fail("updates has shape " + shapeStr(updates.shape()) + ", expected " + shapeStr(want));
  Tensor out = data.clone();
  AxisSplit s = splitAt(data.shape(), axis);
  int64_t ni = indices.numElements(), src = 0;
  for (int64_t b = 0; b < s.outer; ++b)
    for (int64_t j = 0; j < ni; ++j) {
      int64_t i = checkedIndex(ctx, indices.data<int32_t>()[j], s.size, "scatter");
      for (int64_t k = 0; k < s.inner; ++k)
        scatterOne(ctx, mode, out, (b * s.size + i) * s.inner + k, updates, src++);
    }
  ctx.setOutput(0, std::move(out));
}

void scatterAlongAxisOp(KernelContext &ctx) {
  const Tensor &data = ctx.in("data"), &indices = ctx.in("indices"), &updates = ctx.in("updates");
  int64_t axis = ctx.axis(ctx.intArg("axis"), data.rank());
  std::string mode = ctx.strArg("mode");
  if (updates.shape() != indices.shape() || indices.rank() != data.rank())
    ctx.fail("indices and updates must have the same shape and the rank of data");
  Tensor out = data.clone();
  AxisSplit is = splitAt(indices.shape(), axis), ds = splitAt(data.shape(), axis);
  if (is.outer != ds.outer || is.inner != ds.inner)
    ctx.fail("indices shape " + shapeStr(indices.shape()) + " does not fit data " +
             shapeStr(data.shape()));
  for (int64_t b = 0; b < is.outer; ++b)
    for (int64_t k = 0; k < is.size; ++k)
      for (int64_t i = 0; i < is.inner; ++i) {
        int64_t o = (b * is.size + k) * is.inner + i;
        int64_t dst = checkedIndex(ctx, indices.data<int32_t>()[o], ds.size, "scatter_along_axis");
        scatterOne(ctx, mode, out, (b * ds.size + dst) * ds.inner + i, updates, o);
      }
  ctx.setOutput(0, std::move(out));
}

void scatterNdOp(KernelContext &ctx) {
  const Tensor &data = ctx.in("data"), &indices = ctx.in("indices"), &updates = ctx.in("updates");
  std::string mode = ctx.strArg("mode");
  if (indices.rank() < 1)
    ctx.fail("indices must have rank >= 1");
  int64_t depth = indices.dim(indices.rank() - 1);
  if (depth > data.rank())
    ctx.fail("indices depth exceeds the rank of data");
  int64_t inner = 1;
  for (int64_t d = depth; d < data.rank(); ++d)
    inner *= data.dim(d);
  int64_t tuples = indices.numElements() / std::max<int64_t>(depth, 1);
  if (updates.numElements() != tuples * inner)
    ctx.fail("updates has " + std::to_string(updates.numElements()) + " elements, expected " +
             std::to_string(tuples * inner));
  std::vector<int64_t> str = stridesOf(data.shape());
  Tensor out = data.clone();
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = 0;
    for (int64_t j = 0; j < depth; ++j)
      off += checkedIndex(ctx, indices.data<int32_t>()[t * depth + j], data.dim(j), "scatter_nd") *
             str[j];
    for (int64_t k = 0; k < inner; ++k)
      scatterOne(ctx, mode, out, off + k, updates, t * inner + k);
  }
  ctx.setOutput(0, std::move(out));
}

void tileOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  std::vector<int64_t> reps = intsOfLength(ctx, "reps", x.rank());
  Shape shape;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (reps[d] < 0)
      ctx.fail("reps must be non-negative");
    shape.push_back(x.dim(d) * reps[d]);
  }
  if (ctx.outputMayBeLazy(kLazyTiled) && numElementsOf(shape) > 0) {
    // Read by attention or matmul only: they read x by stride.
    ctx.setOutput(0, Tensor::lazy(x.dtype(), shape, std::make_shared<TiledValue>(x, reps)));
    return;
  }
  Tensor out = Tensor::empty(x.dtype(), shape);
  if (out.numElements())
    tileInto(x.bytes(), x.shape(), reps, out.mutableBytes(), elemBytes(x));
  ctx.setOutput(0, std::move(out));
}

void padOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  std::vector<int64_t> pad = ctx.intsArg("pad");
  std::string mode = ctx.strArg("mode");
  float value = ctx.floatArg("constant_val");
  if (pad.size() % 2 || static_cast<int64_t>(pad.size()) > 2 * x.rank())
    ctx.fail("pad must hold 2 values per padded dim (at most " + std::to_string(2 * x.rank()) +
             "), found " + std::to_string(pad.size()));
  // pad covers the last pad.size()/2 dims.
  int64_t first = x.rank() - static_cast<int64_t>(pad.size()) / 2;
  std::vector<int64_t> before(x.rank(), 0), after(x.rank(), 0);
  Shape shape = x.shape();
  for (int64_t d = first; d < x.rank(); ++d) {
    before[d] = pad[2 * (d - first)], after[d] = pad[2 * (d - first) + 1];
    if (before[d] < 0 || after[d] < 0)
      ctx.fail("pad must be non-negative");
    if (mode == "reflect" && (before[d] >= x.dim(d) || after[d] >= x.dim(d)))
      ctx.fail("reflect pad must be smaller than the dim");
    if (mode == "replicate" && x.dim(d) == 0 && (before[d] || after[d]))
      ctx.fail("cannot replicate an empty dim");
    shape[d] += before[d] + after[d];
  }
  if (mode != "constant" && mode != "reflect" && mode != "replicate")
    ctx.fail("mode: expected constant, reflect or replicate, found '" + mode + "'");
  Tensor xf = x.dtype() == DType::F32 ? x : x.convertTo(DType::F32);
  Tensor out = Tensor::empty(DType::F32, shape);
  int64_t r = x.rank();
  if (r == 0 || out.numElements() == 0) {
    if (out.numElements())
      out.mutableData<float>()[0] = xf.data<float>()[0];
    setComputeOutput(ctx, 0, out.convertTo(computeDType(ctx.outputType().dtype())));
    return;
  }
  // Source coordinate of every output coordinate, per dim (-1: the constant).
  std::vector<std::vector<int64_t>> from(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d)
    for (int64_t o = 0; o < shape[d]; ++o) {
      int64_t c = o - before[d], n = x.dim(d);
      if (c < 0 || c >= n) {
        if (mode == "constant")
          c = -1;
        else if (mode == "reflect")
          c = c < 0 ? -c : 2 * (n - 1) - c;
        else
          c = c < 0 ? 0 : n - 1;
      }
      from[d].push_back(c);
    }
  // Row by row: the inner run of x moves with memcpy, the padding around it
  // element by element.
  std::vector<int64_t> xs = stridesOf(x.shape());
  int64_t last = shape[r - 1], n = x.dim(r - 1), rows = out.numElements() / last;
  std::vector<int64_t> idx(static_cast<size_t>(r - 1), 0);
  const float *xd = xf.data<float>();
  float *o = out.mutableData<float>();
  for (int64_t row = 0; row < rows; ++row, o += last) {
    int64_t src = 0;
    bool inside = true;
    for (int64_t d = 0; d < r - 1; ++d) {
      int64_t c = from[d][idx[d]];
      inside = inside && c >= 0;
      src += c * xs[d];
    }
    if (!inside || n == 0) {
      std::fill(o, o + last, value);
    } else {
      const float *xr = xd + src;
      for (int64_t j = 0; j < before[r - 1]; ++j)
        o[j] = from[r - 1][j] < 0 ? value : xr[from[r - 1][j]];
      std::memcpy(o + before[r - 1], xr, static_cast<size_t>(n) * 4);
      for (int64_t j = before[r - 1] + n; j < last; ++j)
        o[j] = from[r - 1][j] < 0 ? value : xr[from[r - 1][j]];
    }
    for (int64_t d = r - 2; d >= 0; --d) {
      if (++idx[d] < shape[d])
        break;
      idx[d] = 0;
    }
  }
  setComputeOutput(ctx, 0, out.convertTo(computeDType(ctx.outputType().dtype())));
}

void reverseOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  std::vector<bool> flip(x.rank(), !ctx.has("axes"));
  for (int64_t a : ctx.intsArg("axes"))
    flip[ctx.axis(a, x.rank(), "axes")] = true;
  std::vector<int64_t> strides = stridesOf(x.shape());
  int64_t offset = 0;
  for (int64_t d = 0; d < x.rank(); ++d)
    if (flip[d] && x.dim(d) > 0) {
      offset += (x.dim(d) - 1) * strides[d];
      strides[d] = -strides[d];
    }
  Tensor out = Tensor::zeros(x.dtype(), x.shape());
  gatherStrided(x.bytes(), out.mutableBytes(), elemBytes(x), x.shape(), strides, offset);
  ctx.setOutput(0, std::move(out));
}

void bandPartOp(KernelContext &ctx) {
  // Keeps x[..., m, n] where (lower < 0 || m - n <= lower) && (upper < 0 || n - m <= upper).
  const Tensor &x = ctx.in("x");
  if (x.rank() < 2)
    ctx.fail("x must have rank >= 2");
  int64_t lower = ctx.intArg("lower"), upper = ctx.intArg("upper");
  int64_t rows = x.dim(x.rank() - 2), cols = x.dim(x.rank() - 1);
  Tensor out = ctx.takeOrCopy("x");
  int eb = elemBytes(out);
  uint8_t *o = out.mutableBytes();
  int64_t matrices = rows && cols ? out.numElements() / (rows * cols) : 0;
  for (int64_t b = 0; b < matrices; ++b)
    for (int64_t m = 0; m < rows; ++m) {
      // Row m keeps columns [m - lower, m + upper]; the rest become zero.
      uint8_t *row = o + (b * rows + m) * cols * eb;
      int64_t keep0 = lower < 0 ? 0 : std::clamp<int64_t>(m - lower, 0, cols);
      int64_t keep1 = upper < 0 ? cols : std::clamp<int64_t>(m + upper + 1, 0, cols);
      if (keep1 < keep0)
        keep1 = keep0;
      std::memset(row, 0, static_cast<size_t>(keep0 * eb));
      std::memset(row + keep1 * eb, 0, static_cast<size_t>((cols - keep1) * eb));
    }
  ctx.setOutput(0, std::move(out));
}

namespace {

void fillWith(KernelContext &ctx, const Shape &shape) {
  for (int64_t d : shape)
    if (d < 0)
      ctx.fail("shape " + shapeStr(shape) + " has a negative dim");
  DType t = computeDType(ctx.outputType().dtype());
  Tensor out = Tensor::zeros(t, shape);
  float v = ctx.floatArg("value");
  for (int64_t i = 0; i < out.numElements(); ++i) {
    if (t == DType::F32)
      out.mutableData<float>()[i] = v;
    else if (t == DType::I32)
      out.mutableData<int32_t>()[i] = static_cast<int32_t>(v);
    else
      out.mutableData<uint8_t>()[i] = v != 0;
  }
  ctx.setOutput(0, std::move(out));
}

} // namespace

void fillOp(KernelContext &ctx) { fillWith(ctx, ctx.intsArg("shape")); }
void fillLikeOp(KernelContext &ctx) { fillWith(ctx, ctx.in("ref_tensor").shape()); }

void range1dOp(KernelContext &ctx) {
  const Tensor &start = ctx.in("start"), &end = ctx.in("end"), &step = ctx.in("step");
  double s = start.floatAt(0), e = end.floatAt(0), st = step.floatAt(0);
  if (start.dtype() == DType::I32)
    s = static_cast<double>(start.intAt(0)), e = static_cast<double>(end.intAt(0)),
    st = static_cast<double>(step.intAt(0));
  if (st == 0 || !std::isfinite(s) || !std::isfinite(e) || !std::isfinite(st))
    ctx.fail("step must be non-zero and bounds finite");
  double count = std::ceil((e - s) / st);
  if (count > static_cast<double>(kMaxTensorBytes / 4))
    ctx.fail("range has too many elements");
  int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  DType t = computeDType(ctx.outputType().dtype());
  Tensor out = Tensor::zeros(t, {n});
  for (int64_t i = 0; i < n; ++i) {
    if (t == DType::F32)
      out.mutableData<float>()[i] = static_cast<float>(s + static_cast<double>(i) * st);
    else
      out.mutableData<int32_t>()[i] = static_cast<int32_t>(s + static_cast<double>(i) * st);
  }
  ctx.setOutput(0, std::move(out));
}

void shapeOp(KernelContext &ctx) {
  const Tensor &x = ctx.raw("x");
  std::vector<int32_t> dims;
  for (int64_t d : x.shape())
    dims.push_back(static_cast<int32_t>(d));
  ctx.setOutput(0, Tensor::fromI32(dims, {x.rank()}));
}

void oneHotOp(KernelContext &ctx) {
  const Tensor &indices = ctx.in("indices");
  int64_t depth = ctx.intArg("one_hot_vector_size");
  if (depth < 0)
    ctx.fail("one_hot_vector_size must be non-negative");
  int64_t axis = ctx.axis(ctx.intArg("axis"), indices.rank() + 1);
  float on = ctx.floatArg("on_value"), off = ctx.floatArg("off_value");
  Shape shape = indices.shape();
  shape.insert(shape.begin() + axis, depth);
  Tensor out = Tensor::zeros(DType::F32, shape);
  AxisSplit s = splitAt(shape, axis);
  for (int64_t b = 0; b < s.outer; ++b)
    for (int64_t k = 0; k < depth; ++k)
      for (int64_t i = 0; i < s.inner; ++i) {
        int64_t idx = indices.data<int32_t>()[b * s.inner + i];
        if (idx < 0)
          idx += depth;
        out.mutableData<float>()[(b * depth + k) * s.inner + i] = idx == k ? on : off;
      }
  setComputeOutput(ctx, 0, out.convertTo(computeDType(ctx.outputType().dtype())));
}

namespace {

/// Nearest-neighbour resampling of the last two dims: output row y reads
/// input row rowOf[y], output column c reads input column colOf[c]. Rows
/// that repeat the previous one are copied whole.
void resampleNearest(const Tensor &x, Tensor &out, const std::vector<int64_t> &rowOf,
                     const std::vector<int64_t> &colOf) {
  int64_t r = x.rank(), inH = x.dim(r - 2), inW = x.dim(r - 1);
  int64_t outH = out.dim(r - 2), outW = out.dim(r - 1);
  int eb = elemBytes(x);
  int64_t planes = inH && inW ? x.numElements() / (inH * inW) : 0;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t y = 0; y < outH; ++y) {
      uint8_t *dst = out.mutableBytes() + (p * outH + y) * outW * eb;
      if (y > 0 && rowOf[y] == rowOf[y - 1]) {
        std::memcpy(dst, dst - outW * eb, static_cast<size_t>(outW * eb));
        continue;
      }
      const uint8_t *src = x.bytes() + (p * inH + rowOf[y]) * inW * eb;
      for (int64_t c = 0; c < outW; ++c)
        std::memcpy(dst + c * eb, src + colOf[c] * eb, static_cast<size_t>(eb));
    }
}

/// floor(size * scale), refused where it is no size (a scale of 1e30).
int64_t scaledSize(KernelContext &ctx, int64_t size, float scale) {
  double out = std::floor(double(size) * double(scale));
  if (!(out < double(int64_t(1) << 40)))
    ctx.fail("scale factor " + std::to_string(scale) + " gives an output size too large");
  return static_cast<int64_t>(out);
}

} // namespace

void upsampleNearestOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  if (x.rank() < 3)
    ctx.fail("x must have rank >= 3");
  float sh = ctx.floatArg("scale_factor_height"), sw = ctx.floatArg("scale_factor_width");
  if (!(sh > 0) || !(sw > 0))
    ctx.fail("scale factors must be positive");
  int64_t r = x.rank(), inH = x.dim(r - 2), inW = x.dim(r - 1);
  int64_t outH = scaledSize(ctx, inH, sh), outW = scaledSize(ctx, inW, sw);
  Shape shape = x.shape();
  shape[r - 2] = outH, shape[r - 1] = outW;
  Tensor out = Tensor::zeros(x.dtype(), shape);
  std::vector<int64_t> rowOf, colOf;
  for (int64_t y = 0; y < outH; ++y)
    rowOf.push_back(std::min(inH - 1, static_cast<int64_t>(std::floor(y / sh))));
  for (int64_t c = 0; c < outW; ++c)
    colOf.push_back(std::min(inW - 1, static_cast<int64_t>(std::floor(c / sw))));
  resampleNearest(x, out, rowOf, colOf);
  setComputeOutput(ctx, 0, std::move(out));
}

void upsampleBilinearOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  if (x.rank() < 3)
    ctx.fail("x must have rank >= 3");
  float sh = ctx.floatArg("scale_factor_height"), sw = ctx.floatArg("scale_factor_width");
  bool align = ctx.boolArg("align_corners");
  bool halfPixel = ctx.boolArg("half_pixel_centers", !align);
  if (!(sh > 0) || !(sw > 0))
    ctx.fail("scale factors must be positive");
  int64_t r = x.rank(), inH = x.dim(r - 2), inW = x.dim(r - 1);
  int64_t outH = scaledSize(ctx, inH, sh), outW = scaledSize(ctx, inW, sw);
  // Source coordinate of output pixel o along one axis.
  auto src = [&](int64_t o, int64_t in, int64_t out, float scale) {
    double c;
    if (align)
      c = out > 1 ? static_cast<double>(o) * (in - 1) / (out - 1) : 0.0;
    else if (halfPixel)
      c = (o + 0.5) / scale - 0.5;
    else
      c = o / scale;
    return std::clamp(c, 0.0, static_cast<double>(in - 1));
  };
  Shape shape = x.shape();
  shape[r - 2] = outH, shape[r - 1] = outW;
  Tensor out = Tensor::zeros(DType::F32, shape);
  int64_t planes = x.numElements() / std::max<int64_t>(inH * inW, 1);
  for (int64_t p = 0; p < planes; ++p) {
    const float *pl = x.data<float>() + p * inH * inW;
    for (int64_t y = 0; y < outH; ++y) {
      double cy = src(y, inH, outH, sh);
      int64_t y0 = static_cast<int64_t>(std::floor(cy)), y1 = std::min(y0 + 1, inH - 1);
      double fy = cy - y0;
      for (int64_t xx = 0; xx < outW; ++xx) {
        double cx = src(xx, inW, outW, sw);
        int64_t x0 = static_cast<int64_t>(std::floor(cx)), x1 = std::min(x0 + 1, inW - 1);
        double fx = cx - x0;
        double v = (1 - fy) * ((1 - fx) * pl[y0 * inW + x0] + fx * pl[y0 * inW + x1]) +
                   fy * ((1 - fx) * pl[y1 * inW + x0] + fx * pl[y1 * inW + x1]);
        out.mutableData<float>()[(p * outH + y) * outW + xx] = static_cast<float>(v);
      }
    }
  }
  ctx.setOutput(0, std::move(out));
}

namespace {

/// depth_to_space / pixel_shuffle: x [N, C, H, W] -> [N, C/b², H*b, W*b]. The
/// output, seen as [N, oc, H, b, W, b], is a permutation of x's dims: DCR
/// (depth_to_space) takes the channel as (by, bx, oc), CRD (pixel_shuffle)
/// as (oc, by, bx).
void depthToSpace(KernelContext &ctx, int64_t block, bool blockFirst) {
  const Tensor &x = ctx.in("x");
  if (x.rank() != 4 || block < 1 || x.dim(1) % (block * block))
    ctx.fail("x " + shapeStr(x.shape()) + " does not fit block size " + std::to_string(block));
  int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3), oc = c / (block * block);
  Tensor out = Tensor::empty(x.dtype(), {n, oc, h * block, w * block});
  int64_t hw = h * w;
  std::vector<int64_t> in =
      blockFirst ? std::vector<int64_t>{c * hw, hw, w, block * oc * hw, 1, oc * hw}
                 : std::vector<int64_t>{c * hw, block * block * hw, w, block * hw, 1, hw};
  Shape view = {n, oc, h, block, w, block};
  copyStrided(x.bytes(), out.mutableBytes(), elemBytes(x), view, in, 0, stridesOf(view), 0);
  ctx.setOutput(0, std::move(out));
}

} // namespace

void pixelShuffleOp(KernelContext &ctx) { depthToSpace(ctx, ctx.intArg("upscale_factor"), false); }
void depthToSpaceOp(KernelContext &ctx) { depthToSpace(ctx, ctx.intArg("block_size"), true); }

void spaceToDepthOp(KernelContext &ctx) {
  // [N, C, H, W] -> [N, (by, bx, C), H/b, W/b].
  const Tensor &x = ctx.in("x");
  int64_t block = ctx.intArg("block_size");
  if (x.rank() != 4 || block < 1 || x.dim(2) % block || x.dim(3) % block)
    ctx.fail("x " + shapeStr(x.shape()) + " does not fit block size " + std::to_string(block));
  int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  int64_t oh = h / block, ow = w / block, oc = c * block * block;
  Tensor out = Tensor::empty(x.dtype(), {n, oc, oh, ow});
  Shape view = {n, block, block, c, oh, ow};
  std::vector<int64_t> in = {c * h * w, w, 1, h * w, block * w, block};
  copyStrided(x.bytes(), out.mutableBytes(), elemBytes(x), view, in, 0, stridesOf(view), 0);
  ctx.setOutput(0, std::move(out));
}

void slidingWindowsOp(KernelContext &ctx) {
  const Tensor &x = ctx.in("x");
  int64_t axis = ctx.axis(ctx.intArg("axis"), x.rank());
  int64_t size = ctx.intArg("size"), stride = ctx.intArg("stride");
  if (size < 1 || stride < 1 || size > x.dim(axis))
    ctx.fail("size/stride do not fit axis of size " + std::to_string(x.dim(axis)));
  int64_t windows = (x.dim(axis) - size) / stride + 1;
  Shape shape = x.shape();
  shape[axis] = windows;
  shape.insert(shape.begin() + axis + 1, size);
  AxisSplit s = splitAt(x.shape(), axis);
  Tensor out = Tensor::zeros(x.dtype(), shape);
  int eb = elemBytes(x);
  int64_t chunk = s.inner * eb, pos = 0;
  for (int64_t b = 0; b < s.outer; ++b)
    for (int64_t wdw = 0; wdw < windows; ++wdw)
      for (int64_t k = 0; k < size; ++k) {
        std::memcpy(out.mutableBytes() + pos,
                    x.bytes() + ((b * s.size + wdw * stride + k) * s.inner) * eb, chunk);
        pos += chunk;
      }
  ctx.setOutput(0, std::move(out));
}

void cropOp(KernelContext &ctx) {
  // x[..., top:H-bottom, left:W-right]
  const Tensor &x = ctx.in("x");
  if (x.rank() < 2)
    ctx.fail("x must have rank >= 2");
  std::vector<int64_t> ch = intsOfLength(ctx, "crop_height", 2);
  std::vector<int64_t> cw = intsOfLength(ctx, "crop_width", 2);
  int64_t r = x.rank(), h = x.dim(r - 2), w = x.dim(r - 1);
  if (ch[0] < 0 || ch[1] < 0 || cw[0] < 0 || cw[1] < 0 || ch[0] + ch[1] > h || cw[0] + cw[1] > w)
    ctx.fail("crop " + shapeStr(ch) + " x " + shapeStr(cw) + " does not fit " +
             shapeStr(x.shape()));
  SliceSpec s;
  for (int64_t d = 0; d < r; ++d) {
    s.begin.push_back(d == r - 2 ? ch[0] : d == r - 1 ? cw[0] : 0);
    s.step.push_back(1);
    s.length.push_back(d == r - 2 ? h - ch[0] - ch[1] : d == r - 1 ? w - cw[0] - cw[1] : x.dim(d));
  }
  ctx.setOutput(0, sliceTensor(x, s));
}

void resizeNearestOp(KernelContext &ctx) {
  // Output pixel i reads input pixel floor(i * in / out) along each axis.
  const Tensor &x = ctx.in("x");
  if (x.rank() < 3)
    ctx.fail("x must have rank >= 3");
  int64_t outH = ctx.intArg("target_size_height"), outW = ctx.intArg("target_size_width");
  if (outH < 1 || outW < 1)
    ctx.fail("target sizes must be positive");
  int64_t r = x.rank(), inH = x.dim(r - 2), inW = x.dim(r - 1);
  Shape shape = x.shape();
  shape[r - 2] = outH, shape[r - 1] = outW;
  Tensor out = Tensor::zeros(x.dtype(), shape);
  std::vector<int64_t> rowOf, colOf;
  for (int64_t y = 0; y < outH; ++y)
    rowOf.push_back(y * inH / outH);
  for (int64_t c = 0; c < outW; ++c)
    colOf.push_back(c * inW / outW);
  resampleNearest(x, out, rowOf, colOf);
  ctx.setOutput(0, std::move(out));
}

void nonZeroOp(KernelContext &ctx) {
  // [N, rank] int32 coordinates of the non-zero elements, in row-major order.
  const Tensor &x = ctx.in("x");
  std::vector<int64_t> strides = stridesOf(x.shape());
  std::vector<int32_t> coords;
  int64_t count = 0;
  for (int64_t i = 0; i < x.numElements(); ++i) {
    if (x.floatAt(i) == 0.0f)
      continue;
    ++count;
    int64_t rem = i;
    for (int64_t d = 0; d < x.rank(); ++d) {
      coords.push_back(static_cast<int32_t>(rem / strides[d]));
      rem %= strides[d];
    }
  }
  ctx.setOutput(0, Tensor::fromI32(coords, {count, x.rank()}));
}

void pixelUnshuffleOp(KernelContext &ctx) {
  // Inverse of pixel_shuffle: [N, C, H*r, W*r] -> [N, (C, fy, fx), H, W].
  const Tensor &x = ctx.in("x");
  int64_t f = ctx.intArg("downscale_factor");
  if (x.rank() != 4 || f < 1 || x.dim(2) % f || x.dim(3) % f)
    ctx.fail("x " + shapeStr(x.shape()) + " does not fit downscale factor " + std::to_string(f));
  int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2) / f, w = x.dim(3) / f;
  int64_t H = x.dim(2), W = x.dim(3);
  Tensor out = Tensor::empty(x.dtype(), {n, c * f * f, h, w});
  Shape view = {n, c, f, f, h, w};
  std::vector<int64_t> in = {c * H * W, H * W, W, 1, f * W, f};
  copyStrided(x.bytes(), out.mutableBytes(), elemBytes(x), view, in, 0, stridesOf(view), 0);
  ctx.setOutput(0, std::move(out));
}

void reverseSequenceOp(KernelContext &ctx) {
  // For each batch b, reverse the first lengths[b] entries along seq_axis.
  const Tensor &x = ctx.in("x");
  const Tensor &lengths = ctx.in("lengths");
  int64_t seqAxis = ctx.axis(ctx.intArg("seq_axis"), x.rank(), "seq_axis");
  int64_t batchAxis = ctx.axis(ctx.intArg("batch_axis"), x.rank(), "batch_axis");
  if (seqAxis == batchAxis || lengths.numElements() != x.dim(batchAxis))
    ctx.fail("lengths must have one value per batch and seq_axis differ from batch_axis");
  std::vector<int64_t> strides = stridesOf(x.shape());
  Tensor out = x.clone();
  int eb = elemBytes(x);
  for (int64_t i = 0; i < x.numElements(); ++i) {
    int64_t b = (i / strides[batchAxis]) % x.dim(batchAxis);
    int64_t s = (i / strides[seqAxis]) % x.dim(seqAxis);
    int64_t len = lengths.intAt(b);
    if (len < 0 || len > x.dim(seqAxis))
      ctx.fail("length " + std::to_string(len) + " exceeds the sequence of " +
               std::to_string(x.dim(seqAxis)));
    if (s < len) {
      int64_t src = i + (len - 1 - 2 * s) * strides[seqAxis];
      std::memcpy(out.mutableBytes() + i * eb, x.bytes() + src * eb, eb);
    }
  }
  ctx.setOutput(0, std::move(out));
}

} // namespace anefit::runtime
