//===- Constexpr.cpp - const, constexpr_* and (de)quantization kernels ----===//
//
// Constants are handed out in place. A compressed weight (constexpr_* op)
// whose every reader decodes in place becomes a CompressedValue (Lazy.h);
// otherwise it is expanded here, once: its value depends on constants alone,
// so the interpreter keeps it for later runs (RunOptions::foldCacheBytes).
// These expansions are the reference the compressed values must match.
//
//===----------------------------------------------------------------------===//
#include "runtime/kernels/Lazy.h"

#include <cmath>
#include <cstring>

namespace anefit::runtime {
namespace {

/// Per-axis or scalar parameter broadcast along `axis` of `shape`.
std::vector<float> alongAxis(KernelContext &ctx, std::string_view param, const Shape &shape,
                             int64_t axis, float dflt) {
  if (!ctx.has(param))
    return std::vector<float>(1, dflt);
  std::vector<float> v = ctx.raw(param).toFloats();
  if (v.size() != 1 && (shape.empty() || static_cast<int64_t>(v.size()) != shape[axis]))
    ctx.fail("parameter '" + std::string(param) + "' has " + std::to_string(v.size()) +
             " values, expected 1 or " + (shape.empty() ? "1" : std::to_string(shape[axis])));
  return v;
}

/// out = (q - zeroPoint) * scale, parameters scalar or per `axis`.
void affine(KernelContext &ctx, const Tensor &q, int64_t axisParam) {
  int64_t axis = q.rank() ? ctx.axis(axisParam, q.rank()) : 0;
  std::vector<float> zp = alongAxis(ctx, "zero_point", q.shape(), axis, 0.0f);
  std::vector<float> scale = alongAxis(ctx, "scale", q.shape(), axis, 1.0f);
  Tensor out = Tensor::zeros(DType::F32, q.shape());
  AxisSplit s = splitAt(q.shape(), axis);
  for (int64_t b = 0; b < s.outer; ++b)
    for (int64_t c = 0; c < s.size; ++c) {
      float z = zp.size() == 1 ? zp[0] : zp[c], sc = scale.size() == 1 ? scale[0] : scale[c];
      for (int64_t i = 0; i < s.inner; ++i) {
        int64_t k = (b * s.size + c) * s.inner + i;
        out.mutableData<float>()[k] = (static_cast<float>(q.intAt(k)) - z) * sc;
      }
    }
  ctx.setOutput(0, std::move(out));
}

/// Shape parameter of the iOS16 constexpr ops (uint32 list).
Shape shapeParam(KernelContext &ctx, std::string_view param) {
  Shape shape = ctx.intsArg(param);
  for (int64_t d : shape)
    if (d < 0)
      ctx.fail("shape " + shapeStr(shape) + " has a negative dim");
  return shape;
}

/// Bit i of a packed LSB-first bitmask.
bool bitAt(const Tensor &mask, int64_t i) {
  if (mask.dtype() == DType::U1)
    return mask.intAt(i) != 0;
  return (mask.bytes()[i / 8] >> (i % 8)) & 1;
}

/// Hands the op's result on as a CompressedValue when every reader decodes it
/// in place and the form is one CompressedValue reads.
bool emitCompressed(KernelContext &ctx) {
  if (!ctx.options().decodeInPlace || !ctx.outputMayBeLazy(kLazyCompressed))
    return false;
  std::shared_ptr<const CompressedValue> v = compressedValueOf(ctx);
  if (!v)
    return false;
  ctx.setOutput(0, Tensor::lazy(DType::F32, v->shape(), v));
  return true;
}

/// Checks that a packed input holds at least `bits` bits.
void needBits(KernelContext &ctx, const Tensor &t, uint64_t bits, std::string_view what) {
  if (static_cast<uint64_t>(t.numBytes()) * 8 < bits)
    ctx.fail(std::string(what) + " holds " + std::to_string(t.numBytes() * 8) + " bits, " +
             std::to_string(bits) + " needed");
}

} // namespace

void constOp(KernelContext &ctx) {
  const Constant *c = ctx.constParam("val");
  if (!c)
    ctx.fail("const without a value");
  if (!c->isTensorLike() || c->type.dtype() == DType::String) {
    // Strings, lists and tuples are only read as parameters (constParam);
    // the value slot gets an empty placeholder.
    ctx.setOutput(0, Tensor::zeros(DType::U8, {0}));
    return;
  }
  ctx.setOutput(0, ctx.raw("val"));
}

void affineDequantizeOp(KernelContext &ctx) {
  if (emitCompressed(ctx))
    return;
  affine(ctx, ctx.raw("quantized_data"), ctx.intArg("axis"));
}

void dequantizeOp(KernelContext &ctx) { affine(ctx, ctx.raw("input"), ctx.intArg("axis", 0)); }

void quantizeOp(KernelContext &ctx) {
  // q = clamp(round(x / scale + zero_point)) in the output dtype's range.
  const Tensor &x = ctx.in("input");
  std::string name = ctx.strArg("output_dtype");
  bool isU8 = name == "uint8";
  if (!isU8 && name != "int8")
    ctx.fail("output_dtype: expected int8 or uint8, found '" + name + "'");
  int64_t axis = x.rank() ? ctx.axis(ctx.intArg("axis", 0), x.rank()) : 0;
  std::vector<float> zp = alongAxis(ctx, "zero_point", x.shape(), axis, 0.0f);
  std::vector<float> scale = alongAxis(ctx, "scale", x.shape(), axis, 1.0f);
  float lo = isU8 ? 0.0f : -128.0f, hi = isU8 ? 255.0f : 127.0f;
  Tensor out = Tensor::zeros(DType::I32, x.shape());
  AxisSplit s = splitAt(x.shape(), axis);
  for (int64_t b = 0; b < s.outer; ++b)
    for (int64_t c = 0; c < s.size; ++c) {
      float z = zp.size() == 1 ? zp[0] : zp[c], sc = scale.size() == 1 ? scale[0] : scale[c];
      for (int64_t i = 0; i < s.inner; ++i) {
        int64_t k = (b * s.size + c) * s.inner + i;
        float q = std::nearbyint(x.data<float>()[k] / sc + z);
        out.mutableData<int32_t>()[k] = static_cast<int32_t>(std::clamp(q, lo, hi));
      }
    }
  ctx.setOutput(0, std::move(out));
}

void constexprCastOp(KernelContext &ctx) {
  std::string name = ctx.strArg("output_dtype");
  auto to = dtypeFromName(name);
  if (!to)
    ctx.fail("output_dtype: unknown dtype '" + name + "'");
  ctx.setOutput(0, ctx.raw("source_val").convertTo(computeDType(*to)));
}

void lutToDenseOp(KernelContext &ctx) {
  if (emitCompressed(ctx))
    return;
  const Tensor &indices = ctx.raw("indices");
  const Tensor &lut = ctx.raw("lut");
  if (ctx.has("shape")) {
    // iOS16: flat lut of 2^nbits entries, indices packed LSB-first in bytes.
    Shape shape = shapeParam(ctx, "shape");
    int64_t entries = lut.numElements();
    int nbits = 0;
    while ((int64_t(1) << nbits) < entries)
      ++nbits;
    if ((int64_t(1) << nbits) != entries || nbits < 1 || nbits > 8)
      ctx.fail("lut has " + std::to_string(entries) + " entries, expected 2, 4, 16, 64 or 256");
    Tensor out = Tensor::zeros(DType::F32, shape);
    int64_t n = out.numElements();
    needBits(ctx, indices, static_cast<uint64_t>(n) * nbits, "indices");
    for (int64_t i = 0; i < n; ++i) {
      uint32_t v = loadPackedBits({indices.bytes(), static_cast<size_t>(indices.numBytes())},
                                  static_cast<uint64_t>(i), nbits);
      out.mutableData<float>()[i] = lut.floatAt(v);
    }
    ctx.setOutput(0, std::move(out));
    return;
  }
  // iOS18: lut [blocks per dim..., 2^nbits, vector_size]; indices hold one
  // palette index per element (per vector along vector_axis).
  int64_t r = indices.rank();
  if (lut.rank() != r + 2)
    ctx.fail("lut rank " + std::to_string(lut.rank()) + " must be indices rank " +
             std::to_string(r) + " + 2");
  int64_t entries = lut.dim(r), vs = lut.dim(r + 1);
  int64_t vaxis = r ? ctx.axis(ctx.intArg("vector_axis", 0), r, "vector_axis") : 0;
  std::vector<int64_t> block(r);
  for (int64_t d = 0; d < r; ++d) {
    if (lut.dim(d) < 1 || indices.dim(d) % lut.dim(d))
      ctx.fail("lut blocks " + shapeStr(lut.shape()) + " do not divide indices " +
               shapeStr(indices.shape()));
    block[d] = indices.dim(d) / lut.dim(d);
  }
  Shape shape = indices.shape();
  if (r)
    shape[vaxis] *= vs;
  Tensor out = Tensor::zeros(DType::F32, shape);
  std::vector<int64_t> istr = stridesOf(indices.shape()), ostr = stridesOf(shape),
                       lstr = stridesOf(lut.shape());
  for (int64_t i = 0; i < indices.numElements(); ++i) {
    int64_t rem = i, lutOff = 0, outOff = 0;
    for (int64_t d = 0; d < r; ++d) {
      int64_t c = rem / istr[d];
      rem %= istr[d];
      lutOff += (c / block[d]) * lstr[d];
      outOff += (d == vaxis ? c * vs : c) * ostr[d];
    }
    int64_t idx = indices.intAt(i);
    if (idx < 0 || idx >= entries)
      ctx.fail("index " + std::to_string(idx) + " outside the lut of " + std::to_string(entries));
    for (int64_t v = 0; v < vs; ++v)
      out.mutableData<float>()[outOff + (r ? v * ostr[vaxis] : 0)] =
          lut.floatAt(lutOff + idx * vs + v);
  }
  ctx.setOutput(0, std::move(out));
}

void blockwiseShiftScaleOp(KernelContext &ctx) {
  // out = (data - offset[block]) * scale[block]; blocks tile data per dim.
  if (emitCompressed(ctx))
    return;
  const Tensor &data = ctx.raw("data");
  const Tensor &scale = ctx.raw("scale");
  const Tensor *offset = ctx.has("offset") ? &ctx.raw("offset") : nullptr;
  int64_t r = data.rank();
  if (scale.rank() != r || (offset && offset->shape() != scale.shape()))
    ctx.fail("scale/offset must have the rank of data and equal shapes");
  std::vector<int64_t> block(r);
  for (int64_t d = 0; d < r; ++d) {
    if (scale.dim(d) < 1 || data.dim(d) % scale.dim(d))
      ctx.fail("scale " + shapeStr(scale.shape()) + " does not divide data " +
               shapeStr(data.shape()));
    block[d] = data.dim(d) / scale.dim(d);
  }
  Tensor out = Tensor::zeros(DType::F32, data.shape());
  std::vector<int64_t> dstr = stridesOf(data.shape()), sstr = stridesOf(scale.shape());
  for (int64_t i = 0; i < data.numElements(); ++i) {
    int64_t rem = i, so = 0;
    for (int64_t d = 0; d < r; ++d) {
      int64_t c = rem / dstr[d];
      rem %= dstr[d];
      so += (c / block[d]) * sstr[d];
    }
    float v = data.floatAt(i) - (offset ? offset->floatAt(so) : 0.0f);
    out.mutableData<float>()[i] = v * scale.floatAt(so);
  }
  ctx.setOutput(0, std::move(out));
}

void sparseToDenseOp(KernelContext &ctx) {
  if (emitCompressed(ctx))
    return;
  const Tensor &values = ctx.raw("nonzero_data");
  const Tensor &mask = ctx.raw("mask");
  Shape shape = ctx.has("shape") ? shapeParam(ctx, "shape") : mask.shape();
  Tensor out = Tensor::zeros(DType::F32, shape);
  int64_t n = out.numElements();
  if (mask.dtype() != DType::U1)
    needBits(ctx, mask, static_cast<uint64_t>(n), "mask");
  else if (mask.numElements() < n)
    ctx.fail("mask is smaller than the output");
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i)
    if (bitAt(mask, i)) {
      if (k >= values.numElements())
        ctx.fail("mask has more set bits than nonzero_data has values (" +
                 std::to_string(values.numElements()) + ")");
      out.mutableData<float>()[i] = values.floatAt(k++);
    }
  DType want = computeDType(ctx.outputType().dtype());
  ctx.setOutput(0, want == DType::F32 ? std::move(out) : out.convertTo(want));
}

} // namespace anefit::runtime
