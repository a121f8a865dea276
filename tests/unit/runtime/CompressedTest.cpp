//===- CompressedTest.cpp - Weights decoded in place vs expanded ----------===//
//
// Every compressed-weight form the interpreter decodes where it is read
// (blockwise int4/uint4/int8/uint8 with and without offsets, 1-8 bit
// palettes with grouped channels and vector entries, affine, sparse, and
// iOS18 chains of them) is run through linear, matmul, conv and gather and
// compared with the same program run expand-then-multiply
// (RunOptions::decodeInPlace = false), for every kernel instruction set the
// CPU has, over random shapes, block sizes and dtypes with odd sizes.
//
//===----------------------------------------------------------------------===//
#include "RuntimeTestUtil.h"

#include "runtime/kernels/Lazy.h"

#include <bit>
#include <limits>
#include <optional>
#include <random>
#include <set>

using namespace anefit;
using namespace anefit::test;
using runtime::numElementsOf;

namespace {

/// This file's random cases.
SeededRandom rng(424242);

/// A constant of `dt` holding `values` (integers; sub-byte packed LSB-first).
ConstantRef packed(DType dt, const std::vector<int64_t> &values, const Shape &shape) {
  auto c = std::make_shared<Constant>();
  c->type = Type::tensor(dt, shape);
  int bits = dtypeBits(dt);
  c->bytes.assign((values.size() * bits + 7) / 8, 0);
  for (size_t i = 0; i < values.size(); ++i) {
    uint64_t v = static_cast<uint64_t>(values[i]) & ((uint64_t(1) << bits) - 1);
    storePackedBits(c->bytes, i, bits, v);
  }
  return c;
}

/// Random float constant, fp16 or fp32.
ConstantRef floats(DType dt, const Shape &shape, float lo, float hi) {
  std::vector<float> v(static_cast<size_t>(numElementsOf(shape)));
  for (float &f : v)
    f = rng.uniform(lo, hi);
  return dt == DType::F16 ? constF16(v, shape) : constF32(v, shape);
}

std::vector<int64_t> randomInts(int64_t n, int64_t lo, int64_t hi) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t &x : v)
    x = rng.pick(lo, hi);
  return v;
}

/// A divisor of n (blocks per dim).
int64_t divisorOf(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n; ++i)
    if (n % i == 0)
      d.push_back(i);
  return d[static_cast<size_t>(rng.pick(0, static_cast<int64_t>(d.size()) - 1))];
}

/// Adds a random compressed weight of `shape` to `b`; returns its value and
/// a description.
Value *compressedWeight(ProgramBuilder &b, const Shape &shape, std::string &what) {
  int64_t n = numElementsOf(shape);
  int64_t r = static_cast<int64_t>(shape.size());
  int kind = static_cast<int>(rng.pick(0, 5));
  DType fdt = rng.pick(0, 1) ? DType::F16 : DType::F32;
  if (kind <= 1) {
    // constexpr_blockwise_shift_scale
    static const DType qt[] = {DType::I4, DType::U4, DType::I8, DType::U8};
    DType dt = qt[rng.pick(0, 3)];
    int64_t lo = dt == DType::I4 ? -8 : dt == DType::I8 ? -128 : 0;
    int64_t hi = dt == DType::I4 ? 7 : dt == DType::U4 ? 15 : dt == DType::I8 ? 127 : 255;
    Shape blocks(shape.size(), 1);
    blocks[0] = divisorOf(shape[0]);
    if (r > 1)
      blocks[1] = rng.pick(0, 2) ? shape[1] / std::min<int64_t>(shape[1], 32) : divisorOf(shape[1]);
    if (r > 1 && shape[1] % blocks[1])
      blocks[1] = 1;
    for (int64_t d = 2; d < r; ++d)
      blocks[d] = rng.pick(0, 3) == 0 ? divisorOf(shape[d]) : 1;
    std::vector<Arg> args = {{"data", packed(dt, randomInts(n, lo, hi), shape)},
                             {"scale", floats(fdt, blocks, 0.01f, 0.2f)}};
    bool offset = rng.pick(0, 1);
    if (offset)
      args.push_back({"offset", packed(dt, randomInts(numElementsOf(blocks), lo, hi), blocks)});
    what = "blockwise " + std::string(dtypeName(dt)) + " blocks " + runtime::shapeStr(blocks) +
           (offset ? " offset" : "") + " scale " + std::string(dtypeName(fdt));
    return b.op("constexpr_blockwise_shift_scale", std::move(args), fdt, shape);
  }
  if (kind == 2 || kind == 3) {
    // constexpr_lut_to_dense (iOS18): grouped palettes, maybe vector entries
    static const DType it[] = {DType::U1, DType::U2, DType::U3, DType::U4, DType::U6, DType::U8};
    DType dt = kind == 3 ? DType::U4 : it[rng.pick(0, 5)];
    int bits = dtypeBits(dt);
    int64_t vs = 1, vaxis = 0;
    Shape idxShape = shape;
    if (rng.pick(0, 4) == 0 && r > 1 && shape[r - 1] % 2 == 0) {
      vs = 2, vaxis = r - 1;
      idxShape[vaxis] /= 2;
    }
    Shape lut;
    for (int64_t d = 0; d < r; ++d)
      lut.push_back(d == 0 ? divisorOf(idxShape[0])
                           : (rng.pick(0, 2) == 0 ? divisorOf(idxShape[d]) : 1));
    lut.push_back(int64_t(1) << bits);
    lut.push_back(vs);
    std::vector<Arg> args = {
        {"indices",
         packed(dt, randomInts(numElementsOf(idxShape), 0, (int64_t(1) << bits) - 1), idxShape)}};
    if (rng.pick(0, 3) == 0) {
      // iOS18 chain: the palette itself quantized.
      Shape lb(lut.size(), 1);
      Value *q = b.op("constexpr_blockwise_shift_scale",
                      {{"data", packed(DType::I8, randomInts(numElementsOf(lut), -100, 100), lut)},
                       {"scale", floats(fdt, lb, 0.01f, 0.02f)}},
                      fdt, lut);
      args.push_back({"lut", q});
      what = "lut of blockwise";
    } else {
      args.push_back({"lut", floats(fdt, lut, -1.0f, 1.0f)});
      what = "lut";
    }
    if (vs > 1)
      args.push_back({"vector_axis", scalarI32(static_cast<int32_t>(vaxis))});
    what += " " + std::string(dtypeName(dt)) + " palettes " + runtime::shapeStr(lut);
    return b.op("constexpr_lut_to_dense", std::move(args), fdt, shape);
  }
  if (kind == 4) {
    // constexpr_affine_dequantize (iOS16): per channel along an axis, or scalar
    bool u8 = rng.pick(0, 1);
    int64_t axis = rng.pick(0, r - 1);
    bool perChannel = rng.pick(0, 1);
    Shape ps = perChannel ? Shape{shape[axis]} : Shape{};
    auto zp = perChannel ? packed(u8 ? DType::U8 : DType::I8, randomInts(shape[axis], 0, 9), ps)
                         : packed(u8 ? DType::U8 : DType::I8, {3}, {});
    what = std::string("affine ") + (u8 ? "uint8" : "int8") + " axis " + std::to_string(axis) +
           (perChannel ? " per channel" : " scalar");
    return b.op("constexpr_affine_dequantize",
                {{"quantized_data", packed(u8 ? DType::U8 : DType::I8,
                                           randomInts(n, u8 ? 0 : -128, u8 ? 255 : 127), shape)},
                 {"zero_point", zp},
                 {"scale", floats(DType::F32, ps, 0.01f, 0.1f)},
                 {"axis", scalarI32(static_cast<int32_t>(axis))}},
                DType::F32, shape);
  }
  // constexpr_sparse_to_dense: mask bits, non-zeros dense or palettized.
  std::vector<int64_t> bits = randomInts(n, 0, 1);
  int64_t nnz = 0;
  for (int64_t v : bits)
    nnz += v;
  std::vector<Arg> args = {{"mask", packed(DType::U1, bits, shape)}};
  if (nnz > 0 && rng.pick(0, 1)) {
    Value *vals = b.op("constexpr_lut_to_dense",
                       {{"indices", packed(DType::U2, randomInts(nnz, 0, 3), {nnz})},
                        {"lut", floats(fdt, {1, 4, 1}, -1.0f, 1.0f)}},
                       fdt, {nnz});
    args.push_back({"nonzero_data", vals});
    what = "sparse of lut";
  } else {
    args.push_back({"nonzero_data", floats(fdt, {nnz}, -1.0f, 1.0f)});
    what = "sparse";
  }
  return b.op("constexpr_sparse_to_dense", std::move(args), fdt, shape);
}

Tensor randomInput(const Shape &shape) {
  std::vector<float> v(static_cast<size_t>(numElementsOf(shape)));
  for (float &f : v)
    f = rng.uniform(-1.0f, 1.0f);
  return Tensor::fromF32(v, shape);
}

std::vector<Tensor> run(ProgramBuilder &b, const runtime::TensorMap &in, bool inPlace,
                        runtime::Precision p = runtime::Precision::FP32, int threads = 1) {
  runtime::RunOptions o;
  o.precision = p;
  o.decodeInPlace = inPlace;
  o.threads = threads;
  runtime::Interpreter interp(*b.fn, o);
  std::vector<Tensor> out;
  for (auto &nt : interp.run(in))
    out.push_back(std::move(nt.tensor));
  return out;
}

/// |got - want| within fp32 accumulation error of a `k`-term dot product.
void expectClose(const Tensor &got, const Tensor &want, int64_t k) {
  ASSERT_EQ(got.shape(), want.shape());
  float scale = 0;
  for (int64_t i = 0; i < want.numElements(); ++i)
    scale = std::max(scale, std::fabs(want.floatAt(i)));
  float tol = 2e-6f * std::sqrt(static_cast<float>(std::max<int64_t>(k, 1))) * (1 + scale) + 1e-6f;
  for (int64_t i = 0; i < want.numElements(); ++i)
    ASSERT_NEAR(got.floatAt(i), want.floatAt(i), tol) << "element " << i;
}

/// linear(x, w) for random x of m rows, w of shape [n, k] built in `b`: the
/// in-place kernels of every ISA, on one thread and on `threads`, against
/// expand-then-multiply.
void expectLinearMatchesOnEveryIsa(ProgramBuilder &b, Value *w, int64_t n, int64_t k, int64_t m,
                                   const std::string &what, int threads) {
  Value *x = b.input("x", DType::F32, {m, k});
  b.output(b.op("linear", {{"x", x}, {"weight", w}}, DType::F32, {m, n}));
  runtime::TensorMap in = {{"x", randomInput({m, k})}};
  Tensor want = run(b, in, false)[0];
  for (runtime::KernelIsa isa : kernelIsas()) {
    IsaGuard guard(isa);
    SCOPED_TRACE(what + " n " + std::to_string(n) + " k " + std::to_string(k) + " m " +
                 std::to_string(m) + " isa " + isaName(isa));
    expectClose(run(b, in, true)[0], want, k);
    expectClose(run(b, in, true, runtime::Precision::FP32, threads)[0], want, k);
  }
}

TEST(Compressed, LinearMatchesExpandThenMultiply) {
  for (int iter = 0; iter < 160; ++iter) {
    int64_t n = std::vector<int64_t>{1, 3, 16, 17, 64}[rng.pick(0, 4)];
    int64_t k = std::vector<int64_t>{7, 32, 64, 96, 160, 48, 256, 288, 416}[rng.pick(0, 8)];
    int64_t m = std::vector<int64_t>{1, 2, 4, 5, 9}[rng.pick(0, 4)];
    ProgramBuilder b;
    std::string what;
    Value *w = compressedWeight(b, {n, k}, what);
    expectLinearMatchesOnEveryIsa(b, w, n, k, m, what, 3);
  }
}

TEST(Compressed, DecodedRowsEqualTheExpansionBitForBit) {
  // gather decodes whole rows: they must be exactly the expanded values, in
  // fp32 and in fp16 mode.
  for (int iter = 0; iter < 120; ++iter) {
    Shape shape = {std::vector<int64_t>{1, 5, 16}[rng.pick(0, 2)],
                   std::vector<int64_t>{3, 32, 40, 64}[rng.pick(0, 3)]};
    if (rng.pick(0, 3) == 0)
      shape.push_back(std::vector<int64_t>{2, 3}[rng.pick(0, 1)]);
    ProgramBuilder b;
    std::string what;
    Value *w = compressedWeight(b, shape, what);
    Value *idx = b.input("i", DType::I32, {shape[0]});
    Shape out = shape;
    b.output(b.op("gather", {{"x", w}, {"indices", idx}}, DType::F32, out));
    std::vector<int32_t> rows;
    for (int64_t r = shape[0] - 1; r >= 0; --r)
      rows.push_back(static_cast<int32_t>(r));
    runtime::TensorMap in = {{"i", Tensor::fromI32(rows, {shape[0]})}};
    for (runtime::Precision p : {runtime::Precision::FP32, runtime::Precision::FP16}) {
      Tensor want = run(b, in, false, p)[0], got = run(b, in, true, p)[0];
      SCOPED_TRACE(what + " " + runtime::shapeStr(shape));
      ASSERT_EQ(got.shape(), want.shape());
      for (int64_t i = 0; i < want.numElements(); ++i)
        ASSERT_EQ(got.floatAt(i), want.floatAt(i)) << "element " << i;
    }
  }
}

TEST(Compressed, MatmulAndConvMatchExpandThenMultiply) {
  for (int iter = 0; iter < 80; ++iter) {
    int64_t n = std::vector<int64_t>{4, 16, 33}[rng.pick(0, 2)],
            k = std::vector<int64_t>{32, 64, 6}[rng.pick(0, 2)];
    ProgramBuilder b;
    std::string what;
    bool ty = rng.pick(0, 1);
    Value *w = compressedWeight(b, ty ? Shape{n, k} : Shape{k, n}, what);
    // Up to 4 rows of x take the fused kernels, more the decoded tiles.
    int64_t bx = rng.pick(1, 2), rows = rng.pick(1, 3);
    Value *x = b.input("x", DType::F32, {bx, rows, k});
    b.output(b.op("matmul", {{"x", x}, {"y", w}, {"transpose_y", scalarBool(ty)}}, DType::F32,
                  {bx, rows, n}));
    // conv: weight [cout, cin/groups, kh, kw]
    int64_t groups = rng.pick(0, 1) ? 1 : 2, cin = 4 * groups, cout = 6 * groups;
    std::string cwhat;
    Value *cw = compressedWeight(b, {cout, cin / groups, 3, 2}, cwhat);
    Value *img = b.input("img", DType::F32, {1, cin, 5, 4});
    b.output(b.op("conv", {{"x", img}, {"weight", cw}, {"groups", scalarI32(groups)}}, DType::F32,
                  {1, cout, 3, 3}));
    runtime::TensorMap in = {{"x", randomInput({bx, rows, k})},
                             {"img", randomInput({1, cin, 5, 4})}};
    auto want = run(b, in, false);
    for (runtime::KernelIsa isa : kernelIsas()) {
      IsaGuard guard(isa);
      auto got = run(b, in, true, runtime::Precision::FP32, 2);
      SCOPED_TRACE(what + (ty ? " transposed" : "") + " / conv " + cwhat);
      expectClose(got[0], want[0], k);
      expectClose(got[1], want[1], cin * 6);
    }
  }
}

TEST(Compressed, Fp16ModeMatchesExpandThenMultiply) {
  for (int iter = 0; iter < 40; ++iter) {
    int64_t n = 16, k = std::vector<int64_t>{32, 64}[rng.pick(0, 1)];
    ProgramBuilder b;
    std::string what;
    Value *w = compressedWeight(b, {n, k}, what);
    Value *x = b.input("x", DType::F32, {1, k});
    b.output(b.op("linear", {{"x", x}, {"weight", w}}, DType::F32, {1, n}));
    runtime::TensorMap in = {{"x", randomInput({1, k})}};
    SCOPED_TRACE(what);
    Tensor want = run(b, in, false, runtime::Precision::FP16)[0];
    Tensor got = run(b, in, true, runtime::Precision::FP16)[0];
    for (int64_t i = 0; i < n; ++i) // both round the same dot product to fp16
      ASSERT_NEAR(got.floatAt(i), want.floatAt(i), 2e-3f * (1 + std::fabs(want.floatAt(i))));
  }
}

TEST(Compressed, Int4BlocksGiveTheBitsOfTheirDecodedRowsOnPortableAndNeon) {
  // The NEON kernel of int4/uint4 blocks (a multiple of 16 values; offsets
  // or none, fp16 or fp32 scales, 1-4 rows of x) decodes in registers what
  // decodeRaw decodes and sums in dotF32's order: each product is dotF32 of
  // the decoded row, bit for bit, as on the portable path, which decodes the
  // row. (The x86 kernels sum in their own orders: the other tests hold
  // them to their error bounds.)
  for (int iter = 0; iter < 60; ++iter) {
    int64_t n = std::vector<int64_t>{1, 3, 8, 17}[rng.pick(0, 3)];
    int64_t block = std::vector<int64_t>{16, 32, 48, 64}[rng.pick(0, 3)];
    int64_t k = block * rng.pick(1, 6), m = rng.pick(1, 4);
    DType dt = rng.pick(0, 1) ? DType::I4 : DType::U4;
    DType fdt = rng.pick(0, 1) ? DType::F16 : DType::F32;
    int64_t lo = dt == DType::I4 ? -8 : 0, hi = dt == DType::I4 ? 7 : 15;
    Shape blocks = {n, k / block};
    std::vector<Arg> args = {{"data", packed(dt, randomInts(n * k, lo, hi), {n, k})},
                             {"scale", floats(fdt, blocks, 0.01f, 0.2f)}};
    bool offset = rng.pick(0, 1);
    if (offset)
      args.push_back({"offset", packed(dt, randomInts(numElementsOf(blocks), lo, hi), blocks)});
    // The product, and the decoded rows (gather decodes whole rows).
    ProgramBuilder product, decoded;
    Value *x = product.input("x", DType::F32, {m, k});
    Value *w = product.op("constexpr_blockwise_shift_scale", args, fdt, {n, k});
    product.output(product.op("linear", {{"x", x}, {"weight", w}}, DType::F32, {m, n}));
    Value *idx = decoded.input("i", DType::I32, {n});
    Value *wd = decoded.op("constexpr_blockwise_shift_scale", args, fdt, {n, k});
    decoded.output(decoded.op("gather", {{"x", wd}, {"indices", idx}}, DType::F32, {n, k}));
    std::vector<int32_t> all(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r)
      all[static_cast<size_t>(r)] = static_cast<int32_t>(r);
    Tensor rows = run(decoded, {{"i", Tensor::fromI32(all, {n})}}, true)[0];
    Tensor xt = randomInput({m, k});
    for (runtime::KernelIsa isa : kernelIsas()) {
      if (isa != runtime::KernelIsa::Portable && isa != runtime::KernelIsa::Neon)
        continue;
      IsaGuard guard(isa);
      SCOPED_TRACE(std::string(dtypeName(dt)) + " blocks of " + std::to_string(block) + " k " +
                   std::to_string(k) + " m " + std::to_string(m) + (offset ? " offset" : "") +
                   " scale " + std::string(dtypeName(fdt)) + " isa " + isaName(isa));
      Tensor got = run(product, {{"x", xt}}, true)[0];
      for (int64_t i = 0; i < m; ++i)
        for (int64_t r = 0; r < n; ++r) {
          float want = runtime::dotF32(rows.data<float>() + r * k, xt.data<float>() + i * k, k);
          ASSERT_EQ(std::bit_cast<uint32_t>(got.floatAt(i * n + r)), std::bit_cast<uint32_t>(want))
              << "x row " << i << ", row " << r;
        }
    }
  }
}

/// export_llm's 4w form of an [n, k] weight: random int4 or uint4 data
/// (dt), one random fp16 scale per 32 inputs, no offsets.
Value *blocksOf32(ProgramBuilder &b, DType dt, int64_t n, int64_t k) {
  bool isSigned = dt == DType::I4;
  return b.op(
      "constexpr_blockwise_shift_scale",
      {{"data", packed(dt, randomInts(n * k, isSigned ? -8 : 0, isSigned ? 7 : 15), {n, k})},
       {"scale", floats(DType::F16, {n, k / 32}, 0.01f, 0.2f)}},
      DType::F16, {n, k});
}

TEST(Compressed, BlocksOf32WithoutOffsetsMatchOnEveryIsa) {
  // export_llm's 4w form (int4, one scale per 32 inputs, no offsets) takes
  // the word kernels (16 lanes on AVX-512, 8 on AVX2); rows of 1-3 blocks
  // past a whole group are read with masks or a half group.
  for (int iter = 0; iter < 60; ++iter) {
    int64_t n = std::vector<int64_t>{1, 5, 16}[rng.pick(0, 2)],
            k = std::vector<int64_t>{32, 64, 96, 160, 224, 256, 288, 1024}[rng.pick(0, 7)];
    int64_t m = rng.pick(1, 4);
    DType dt = rng.pick(0, 1) ? DType::I4 : DType::U4;
    ProgramBuilder b;
    Value *w = blocksOf32(b, dt, n, k);
    expectLinearMatchesOnEveryIsa(b, w, n, k, m, std::string(dtypeName(dt)), 2);
  }
}

TEST(Compressed, SixAndEightBitPalettesMatchOnEveryIsa) {
  // What `fix --requantize lut6|lut8` writes: uint6/uint8 indices into a
  // palette of 64/256 fp16 values per group of output channels (here also
  // per column block). With AVX-512 VBMI, fp16 palettes over whole groups of
  // 64 columns take the 512-bit byte-plane kernel; with AVX2, fp16 palettes
  // take the 256-bit one, 32 values at a time, and gather a column block's
  // last 8-24 values; fp32 palettes gather eight indices at a time (column
  // blocks of 8-56 past a multiple of 64 or 32; blocks that are no multiple
  // of 16 end in a group of 8, and the last row's last 6-bit group ends the
  // data).
  for (int iter = 0; iter < 80; ++iter) {
    int bits = rng.pick(0, 1) ? 6 : 8;
    int64_t entries = int64_t(1) << bits;
    int64_t n = std::vector<int64_t>{1, 5, 16, 17, 32}[rng.pick(0, 4)];
    int64_t block = std::vector<int64_t>{64, 128, 192, 8, 24, 72, 200}[rng.pick(0, 6)];
    int64_t colBlocks = rng.pick(1, 2), k = block * colBlocks, m = rng.pick(1, 4);
    int64_t rowGroup = divisorOf(n), groups = n / rowGroup;
    DType fdt = rng.pick(0, 3) ? DType::F16 : DType::F32;
    DType it = bits == 6 ? DType::U6 : DType::U8;
    ProgramBuilder b;
    Value *w = b.op("constexpr_lut_to_dense",
                    {{"indices", packed(it, randomInts(n * k, 0, entries - 1), {n, k})},
                     {"lut", floats(fdt, {groups, colBlocks, entries, 1}, -1.0f, 1.0f)}},
                    fdt, {n, k});
    std::string what = std::string(dtypeName(it)) + " " + std::string(dtypeName(fdt)) +
                       " palettes, block " + std::to_string(block) + " row group " +
                       std::to_string(rowGroup);
    expectLinearMatchesOnEveryIsa(b, w, n, k, m, what, 2);
  }
}

TEST(Compressed, Fp16ScalesReadInPlaceGiveTheBitsOfTheirFp32Values) {
  // Blocks of 32 read fp16 scales where the model has them (no fp32 copy);
  // every other form reads fp32. The same values stored either way give the
  // same bits, on every ISA, with and without offsets, for every block
  // count a row can end on (k / 32 = 1..9).
  for (int iter = 0; iter < 48; ++iter) {
    int64_t n = std::vector<int64_t>{1, 6, 17}[rng.pick(0, 2)], k = 32 * rng.pick(1, 9);
    int64_t m = rng.pick(1, 4);
    DType dt = rng.pick(0, 1) ? DType::I4 : DType::U4;
    bool isSigned = dt == DType::I4, offset = rng.pick(0, 3) == 0;
    std::vector<int64_t> q = randomInts(n * k, isSigned ? -8 : 0, isSigned ? 7 : 15);
    std::vector<int64_t> off = randomInts(n * (k / 32), isSigned ? -8 : 0, isSigned ? 7 : 15);
    std::vector<float> sc(static_cast<size_t>(n * (k / 32)));
    for (float &v : sc)
      v = halfToFloat(floatToHalf(rng.uniform(-0.2f, 0.2f)));
    runtime::TensorMap in = {{"x", randomInput({m, k})}};
    std::vector<Tensor> outs;
    for (bool half : {true, false}) {
      ProgramBuilder b;
      std::vector<Arg> args = {
          {"data", packed(dt, q, {n, k})},
          {"scale", half ? constF16(sc, {n, k / 32}) : constF32(sc, {n, k / 32})}};
      if (offset)
        args.push_back({"offset", packed(dt, off, {n, k / 32})});
      DType wt = half ? DType::F16 : DType::F32;
      Value *w = b.op("constexpr_blockwise_shift_scale", std::move(args), wt, {n, k});
      Value *x = b.input("x", DType::F32, {m, k});
      b.output(b.op("linear", {{"x", x}, {"weight", w}}, DType::F32, {m, n}));
      for (runtime::KernelIsa isa : kernelIsas()) {
        IsaGuard guard(isa);
        outs.push_back(run(b, in, true)[0]);
      }
    }
    size_t isas = outs.size() / 2;
    for (size_t j = 0; j < isas; ++j) {
      SCOPED_TRACE(std::string(dtypeName(dt)) + (offset ? " offset" : "") + " n " +
                   std::to_string(n) + " k " + std::to_string(k) + " m " + std::to_string(m) +
                   " isa " + isaName(kernelIsas()[j]));
      for (int64_t i = 0; i < m * n; ++i)
        ASSERT_EQ(outs[j].floatAt(i), outs[isas + j].floatAt(i)) << "element " << i;
    }
  }
}

/// linear(x, w) whose result the program declares fp16 (`fp16`) or fp32,
/// taken on as fp32 (a cast): in fp32 mode the value the kernel gave.
Value *linearTakenAsFp32(ProgramBuilder &b, Value *x, Value *w, const Shape &out, bool fp16) {
  if (!fp16)
    return b.op("linear", {{"x", x}, {"weight", w}}, DType::F32, out);
  Value *y = b.op("linear", {{"x", x}, {"weight", w}}, DType::F16, out);
  return b.op("cast", {{"x", y}, {"dtype", constStr("fp32")}}, DType::F32, out);
}

/// One block of 32 values built so that the right grid makes its row exact:
/// x[0] = x0 lands on n0 steps, and every other x is 7/16 of a step above a
/// grid point 4j + 2 steps (exact in fp32), to which the right grid rounds it
/// down. q[0] is small enough that |sum(q * n)| < 2^23: the row is exactly
/// sum(q * n) * scale * step in fp32. A finer or coarser grid, or another
/// rounding, gives other n.
struct GridBlock {
  DType dt;
  std::vector<int64_t> q;
  std::vector<float> x;
  float want;
  static constexpr float kScale = 0.125f;

  GridBlock(DType type, double step, int64_t n0, float x0) : dt(type) {
    bool isSigned = dt == DType::I4;
    q = randomInts(32, isSigned ? -8 : 0, isSigned ? 7 : 15);
    std::vector<int64_t> n(32);
    x.resize(32);
    n[0] = n0, x[0] = x0;
    q[0] = rng.pick(isSigned ? -3 : 0, 3);
    for (size_t i = 1; i < 32; ++i) {
      n[i] = (4 * rng.pick(0, 1023) + 2) * (rng.pick(0, 1) ? 1 : -1);
      double off = n[i] > 0 ? 7.0 / 16 : -7.0 / 16;
      x[i] = static_cast<float>((static_cast<double>(n[i]) + off) * step);
    }
    double sum = 0;
    for (size_t i = 0; i < 32; ++i)
      sum += static_cast<double>(q[i] * n[i]);
    want = static_cast<float>(sum * kScale * step);
  }

  /// The row through the kernels in force, the linear declared fp16 or fp32.
  float run(bool fp16) const {
    ProgramBuilder b;
    Value *w = b.op("constexpr_blockwise_shift_scale",
                    {{"data", packed(dt, q, {1, 32})}, {"scale", constF16({kScale}, {1, 1})}},
                    DType::F16, {1, 32});
    Value *xv = b.input("x", DType::F32, {1, 32});
    b.output(linearTakenAsFp32(b, xv, w, {1, 1}, fp16));
    return ::run(b, {{"x", Tensor::fromF32(x, {1, 32})}}, true)[0].floatAt(0);
  }
};

TEST(Compressed, VnniPutsEachBlockOnItsGridAndSumsExactly) {
  std::vector<runtime::KernelIsa> vnni;
  for (runtime::KernelIsa isa : kernelIsas())
    if (isa == runtime::KernelIsa::Avx2Vnni || isa == runtime::KernelIsa::Avx512Vnni)
      vnni.push_back(isa);
  if (vnni.empty())
    GTEST_SKIP() << "this CPU has neither AVX-VNNI nor AVX-512 VNNI: their kernels do not run here";
  // With AVX-VNNI or AVX-512 VNNI: a GridBlock whose largest |x| is 1 (grid
  // step 2^-21), in a linear declared fp32.
  for (int iter = 0; iter < 20; ++iter) {
    GridBlock block(iter % 2 ? DType::I4 : DType::U4, 0x1p-21, int64_t(1) << 21, 1.0f);
    for (runtime::KernelIsa isa : vnni) {
      IsaGuard guard(isa);
      SCOPED_TRACE(std::string(dtypeName(block.dt)) + " isa " + isaName(isa));
      ASSERT_EQ(block.run(false), block.want);
    }
  }
}

/// run() with RunOptions::exactProducts.
std::vector<Tensor> runExact(ProgramBuilder &b, const runtime::TensorMap &in, bool exact) {
  runtime::RunOptions o;
  o.exactProducts = exact;
  o.threads = 1;
  runtime::Interpreter interp(*b.fn, o);
  std::vector<Tensor> out;
  for (auto &nt : interp.run(in))
    out.push_back(std::move(nt.tensor));
  return out;
}

TEST(Compressed, AvxVnniGivesTheBitsOfAvx512Vnni) {
  if (!runtime::cpuHasAvxVnni() || !runtime::cpuHasAvx512Vnni())
    GTEST_SKIP() << "this CPU lacks AVX-VNNI or AVX-512 VNNI: the two are not compared here";
  // The 256-bit kernel holds each 512-bit accumulator as two halves and adds
  // them as sum512 does: the same bits for every row length (1-13 blocks:
  // whole pairs of 64-byte groups, a last group of 1-4 blocks), x rows, sign
  // and scale dtype, in linears declared fp16 or fp32.
  for (int iter = 0; iter < 40; ++iter) {
    int64_t n = std::vector<int64_t>{1, 5, 16}[rng.pick(0, 2)], k = 32 * rng.pick(1, 13);
    int64_t m = rng.pick(1, 4);
    DType dt = rng.pick(0, 1) ? DType::I4 : DType::U4;
    bool isSigned = dt == DType::I4, half = rng.pick(0, 1), fp16 = rng.pick(0, 1);
    std::vector<float> sc(static_cast<size_t>(n * (k / 32)));
    for (float &v : sc)
      v = halfToFloat(floatToHalf(rng.uniform(-0.2f, 0.2f)));
    ProgramBuilder b;
    Value *w =
        b.op("constexpr_blockwise_shift_scale",
             {{"data", packed(dt, randomInts(n * k, isSigned ? -8 : 0, isSigned ? 7 : 15), {n, k})},
              {"scale", half ? constF16(sc, {n, k / 32}) : constF32(sc, {n, k / 32})}},
             half ? DType::F16 : DType::F32, {n, k});
    Value *x = b.input("x", DType::F32, {m, k});
    b.output(linearTakenAsFp32(b, x, w, {m, n}, fp16));
    runtime::TensorMap in = {{"x", randomInput({m, k})}};
    std::vector<Tensor> outs;
    for (runtime::KernelIsa isa : {runtime::KernelIsa::Avx2Vnni, runtime::KernelIsa::Avx512Vnni}) {
      IsaGuard guard(isa);
      outs.push_back(run(b, in, true)[0]);
    }
    SCOPED_TRACE(std::string(dtypeName(dt)) + " n " + std::to_string(n) + " k " +
                 std::to_string(k) + " m " + std::to_string(m) + (half ? " fp16" : " fp32") +
                 " scales" + (fp16 ? ", declared fp16" : ""));
    for (int64_t i = 0; i < m * n; ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(outs[0].floatAt(i)),
                std::bit_cast<uint32_t>(outs[1].floatAt(i)))
          << "element " << i;
  }
}

TEST(Compressed, Avx2PutsFp16LinearsOnA16BitGridAndSumsExactly) {
  if (!runtime::cpuHasAvx2())
    GTEST_SKIP() << "this CPU has no AVX2: its kernel does not run here";
  IsaGuard isa(runtime::KernelIsa::Avx2);
  // A linear declared fp16, blocks of 32: x on a 16-bit grid per block, step
  // 2^(e - 14) for a largest |x| of exponent e, or 2^(e - 13) when that |x|
  // rounds past 32639 steps (the first value of a quarter of the cases,
  // 32700 * 2^-14, on 16350 steps of 2^-13): GridBlocks, whose rows come
  // out exact only on the right grid. A largest |x| past the two digits'
  // range gives other n too.
  for (int iter = 0; iter < 24; ++iter) {
    bool wide = iter % 4 == 3;
    GridBlock block(iter % 2 ? DType::I4 : DType::U4, wide ? 0x1p-13 : 0x1p-14,
                    wide ? 16350 : 16384, wide ? 32700 * 0x1p-14f : 1.0f);
    SCOPED_TRACE(std::string(dtypeName(block.dt)) + (wide ? " step 2^-13" : " step 2^-14"));
    ASSERT_EQ(block.run(true), block.want);
  }
}

TEST(Compressed, BlocksOnTheirGridsStayWithinHalfAStepOfEachProduct) {
  // Blocks of 32 on every ISA, against the exact sum in double. AVX-VNNI and
  // AVX-512 VNNI put x on a grid per block (step 2^(e - 21), e the exponent of the
  // block's largest |x|, at least -100) and sums the products exactly in
  // integers; AVX2 does the same on a 16-bit grid (step at most 2^(e - 13))
  // in linears declared fp16 unless RunOptions::exactProducts. Each row
  // stays within half a step per |q| * scale, plus the rounding of a k-term
  // fp32 sum; the fp32 kernels within the second term alone. A linear
  // declared fp32, or exactProducts, gives the fp32 kernels' bits (VNNI's
  // on VNNI). x spans 1e-38 to 1e30 between blocks and 2^-30 inside one,
  // rows of 1-12 blocks (odd ones end on a half group), 1-3 rows of x (each
  // on its own grids); x holding an infinity or a NaN takes the fp32
  // kernel, bit for bit.
  for (int iter = 0; iter < 24; ++iter) {
    int64_t n = 5, k = 32 * rng.pick(1, 12), m = rng.pick(1, 3);
    DType dt = rng.pick(0, 1) ? DType::I4 : DType::U4;
    bool isSigned = dt == DType::I4;
    std::vector<int64_t> q = randomInts(n * k, isSigned ? -8 : 0, isSigned ? 7 : 15);
    std::vector<float> sc(static_cast<size_t>(n * (k / 32)));
    for (float &v : sc)
      v = halfToFloat(floatToHalf(rng.uniform(-0.2f, 0.2f)));
    std::vector<float> xv(static_cast<size_t>(m * k));
    for (int64_t blk = 0; blk < m * k / 32; ++blk) {
      float mag = std::vector<float>{1e-38f, 1e-30f, 3e-5f, 1.0f, 7e12f, 1e30f}[rng.pick(0, 5)];
      for (int64_t i = 0; i < 32; ++i)
        xv[static_cast<size_t>(blk * 32 + i)] =
            mag * rng.uniform(-1.0f, 1.0f) * (rng.pick(0, 3) == 0 ? 0x1p-30f : 1.0f);
    }
    bool nonFinite = iter % 6 == 5;
    if (nonFinite)
      xv[static_cast<size_t>(rng.pick(0, m * k - 1))] =
          rng.pick(0, 1) ? std::numeric_limits<float>::infinity() : std::nanf("");
    ProgramBuilder b;
    Value *w = b.op("constexpr_blockwise_shift_scale",
                    {{"data", packed(dt, q, {n, k})}, {"scale", constF16(sc, {n, k / 32})}},
                    DType::F16, {n, k});
    Value *x = b.input("x", DType::F32, {m, k});
    b.output(linearTakenAsFp32(b, x, w, {m, n}, true));
    b.output(linearTakenAsFp32(b, x, w, {m, n}, false));
    runtime::TensorMap in = {{"x", Tensor::fromF32(xv, {m, k})}};
    std::optional<Tensor> avx512;
    for (runtime::KernelIsa isa : kernelIsas()) {
      IsaGuard guard(isa);
      SCOPED_TRACE(std::string(dtypeName(dt)) + " k " + std::to_string(k) + " m " +
                   std::to_string(m) + " isa " + isaName(isa));
      std::vector<Tensor> got = runExact(b, in, false), exact = runExact(b, in, true);
      if (isa == runtime::KernelIsa::Avx512)
        avx512 = got[0];
      for (int64_t r = 0; r < m * n; ++r) {
        // Declared fp32, or exactProducts: the fp32 kernels' bits.
        ASSERT_EQ(std::bit_cast<uint32_t>(got[1].floatAt(r)),
                  std::bit_cast<uint32_t>(exact[1].floatAt(r)));
        ASSERT_EQ(std::bit_cast<uint32_t>(exact[0].floatAt(r)),
                  std::bit_cast<uint32_t>(exact[1].floatAt(r)));
      }
      if (nonFinite) {
        const Tensor &fp32 = isa == runtime::KernelIsa::Avx512Vnni ? *avx512 : exact[0];
        for (int64_t r = 0; r < m * n; ++r)
          ASSERT_EQ(std::bit_cast<uint32_t>(got[0].floatAt(r)),
                    std::bit_cast<uint32_t>(fp32.floatAt(r)))
              << "row " << r;
        continue;
      }
      for (int64_t e = 0; e < m * n; ++e) {
        int64_t row = e / n, r = e % n;
        double want = 0, mag = 0, grid = 0, exactGrid = 0;
        for (int64_t blk = 0; blk < k / 32; ++blk) {
          double s = sc[static_cast<size_t>(r * (k / 32) + blk)], big = 0, sumQ = 0;
          for (int64_t c = blk * 32; c < blk * 32 + 32; ++c) {
            double qv = static_cast<double>(q[static_cast<size_t>(r * k + c)]);
            double xc = xv[static_cast<size_t>(row * k + c)];
            want += qv * s * xc;
            mag += (std::fabs(qv) + 8) * std::fabs(s * xc);
            big = std::max(big, std::fabs(xc));
            sumQ += std::fabs(qv);
          }
          int ex = big > 0 ? std::max(std::ilogb(big), -100) : 0;
          // Half a step: 2^(e - 14) at most on AVX2, 2^(e - 22) with VNNI.
          if (isa == runtime::KernelIsa::Avx2)
            grid += std::fabs(s) * sumQ * std::ldexp(1.0, ex - 14);
          else if (isa == runtime::KernelIsa::Avx2Vnni || isa == runtime::KernelIsa::Avx512Vnni)
            exactGrid += std::fabs(s) * sumQ * std::ldexp(1.0, ex - 22);
        }
        // The fp32 word kernels scale x by down to 2^-28 (and q up as
        // much): x under 2^-98 underflows there, off by up to 2^-150 of a
        // scaled x, 15 * 2^-122 * |scale| (at most 0.2) of a product.
        double underflow = static_cast<double>(k) * 15 * 0x1p-122 * 0.2;
        double tol = static_cast<double>(k) * 0x1p-24 * mag + underflow + exactGrid;
        EXPECT_NEAR(got[0].floatAt(e), want, tol + grid) << "x row " << row << ", row " << r;
        EXPECT_NEAR(exact[0].floatAt(e), want, tol) << "x row " << row << ", row " << r;
      }
    }
  }
}

TEST(Compressed, Int4ReadAsUint4KeepsTheErrorOfItsSum) {
  // The AVX2 word kernel reads int4 q as u = q + 8 and takes 8 * sum(x) off
  // per word. With x far from zero mean the two sums cancel; the result
  // stays within the rounding bound of a k-term fp32 sum of |x| * (|q| + 8)
  // * scale, against the exact sum in double.
  for (int iter = 0; iter < 20; ++iter) {
    int64_t n = 8, k = std::vector<int64_t>{64, 96, 160, 1024, 4608}[rng.pick(0, 4)];
    std::vector<int64_t> q = randomInts(n * k, -8, 7);
    std::vector<float> sc(static_cast<size_t>(n * (k / 32)));
    for (float &v : sc)
      v = halfToFloat(floatToHalf(rng.uniform(0.01f, 0.2f)));
    ProgramBuilder b;
    Value *w = b.op("constexpr_blockwise_shift_scale",
                    {{"data", packed(DType::I4, q, {n, k})}, {"scale", constF16(sc, {n, k / 32})}},
                    DType::F16, {n, k});
    Value *x = b.input("x", DType::F32, {1, k});
    b.output(b.op("linear", {{"x", x}, {"weight", w}}, DType::F32, {1, n}));
    std::vector<float> xv(static_cast<size_t>(k));
    for (float &v : xv)
      v = rng.uniform(0.5f, 1.5f);
    runtime::TensorMap in = {{"x", Tensor::fromF32(xv, {1, k})}};
    for (runtime::KernelIsa isa : kernelIsas()) {
      IsaGuard guard(isa);
      SCOPED_TRACE("k " + std::to_string(k) + " isa " + isaName(isa));
      Tensor got = run(b, in, true)[0];
      for (int64_t r = 0; r < n; ++r) {
        double exact = 0, bound = 0;
        for (int64_t c = 0; c < k; ++c) {
          double s = sc[static_cast<size_t>(r * (k / 32) + c / 32)];
          double qv = static_cast<double>(q[static_cast<size_t>(r * k + c)]);
          exact += qv * s * xv[static_cast<size_t>(c)];
          bound += (std::fabs(qv) + 8) * s * xv[static_cast<size_t>(c)];
        }
        double tol = static_cast<double>(k) * 0x1p-24 * bound;
        EXPECT_NEAR(got.floatAt(r), exact, tol) << "row " << r;
      }
    }
  }
}

TEST(Compressed, DecodedRowsSumAsFp16RowsOnEveryIsa) {
  // A compressed weight without a fused kernel (here a 2-bit palette), and
  // any compressed weight in fp16 mode, is decoded a row at a time and
  // summed by dotF32; the same values stored as fp16 go through the fp16 row
  // kernel. Both sum in one order per instruction set, so a weight
  // requantized to fp16 gives the bits of its original (requantize{to=fp16}
  // is proven so). k covers full steps and tails of 8 and 32 values.
  for (int iter = 0; iter < 40; ++iter) {
    int64_t n = std::vector<int64_t>{3, 16}[rng.pick(0, 1)],
            k = std::vector<int64_t>{7, 32, 40, 96, 100, 1000}[rng.pick(0, 5)];
    int64_t m = rng.pick(1, 4);
    std::vector<float> palette = {-0.75f, -0.125f, 0.3125f, 1.0f}; // exact in fp16
    std::vector<int64_t> idx = randomInts(n * k, 0, 3);
    std::vector<float> dense(idx.size());
    for (size_t i = 0; i < idx.size(); ++i)
      dense[i] = palette[static_cast<size_t>(idx[i])];
    ProgramBuilder b;
    Value *w = b.op(
        "constexpr_lut_to_dense",
        {{"indices", packed(DType::U2, idx, {n, k})}, {"lut", constF16(palette, {1, 1, 4, 1})}},
        DType::F16, {n, k});
    Value *x = b.input("x", DType::F32, {m, k});
    b.output(b.op("linear", {{"x", x}, {"weight", w}}, DType::F32, {m, n}));
    b.output(b.op("linear", {{"x", x}, {"weight", constF16(dense, {n, k})}}, DType::F32, {m, n}));
    runtime::TensorMap in = {{"x", randomInput({m, k})}};
    for (runtime::KernelIsa isa : kernelIsas())
      for (runtime::Precision p : {runtime::Precision::FP32, runtime::Precision::FP16}) {
        IsaGuard guard(isa);
        SCOPED_TRACE("n " + std::to_string(n) + " k " + std::to_string(k) + " m " +
                     std::to_string(m) + " isa " + isaName(isa) +
                     (p == runtime::Precision::FP16 ? " fp16" : " fp32"));
        std::vector<Tensor> out = run(b, in, true, p);
        for (int64_t i = 0; i < m * n; ++i)
          ASSERT_EQ(out[0].floatAt(i), out[1].floatAt(i)) << "element " << i;
      }
  }
}

/// v as fp16 mode holds a value: the fp32 of its fp16.
float roundedToHalf(float v) { return halfToFloat(floatToHalf(v)); }

/// True when a and b have the same bits, or are both NaN.
bool sameBits(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) ||
         (std::isnan(a) && std::isnan(b));
}

/// Runs b in fp16 mode on every ISA this CPU has, with 1 and 3 threads, and
/// asserts that outputs 2j and 2j + 1 have the same bits, element for
/// element (`what` and the ISA and thread count in the trace).
void expectOutputPairsSameBitsInFp16(ProgramBuilder &b, const runtime::TensorMap &in,
                                     const std::string &what) {
  for (runtime::KernelIsa isa : kernelIsas())
    for (int threads : {1, 3}) {
      IsaGuard guard(isa);
      SCOPED_TRACE(what + " isa " + isaName(isa) + " threads " + std::to_string(threads));
      std::vector<Tensor> out = run(b, in, true, runtime::Precision::FP16, threads);
      ASSERT_EQ(out.size() % 2, 0u);
      for (size_t j = 0; j + 1 < out.size(); j += 2) {
        ASSERT_EQ(out[j].numElements(), out[j + 1].numElements());
        for (int64_t i = 0; i < out[j].numElements(); ++i)
          ASSERT_PRED2(sameBits, out[j].floatAt(i), out[j + 1].floatAt(i))
              << "output " << j << " element " << i;
      }
    }
}

TEST(Compressed, Fp16ModeFourBitWeightsGiveTheBitsOfTheirDecodedRowsOnEveryIsa) {
  // In fp16 mode every value of a compressed weight is rounded to fp16 and a
  // row's product is dotF32 of the decoded, rounded row. 4-bit blocks and
  // palettes whose blocks are whole 32-value chunks take table kernels (each
  // block's 16 values rounded once, looked up by the nibbles); they must give
  // those bits, which the same rounded values stored as fp16 give (the fp16
  // rows sum as dotF32: DecodedRowsSumAsFp16RowsOnEveryIsa). int4/uint4
  // blocks of 32, 64 and 16 (16: decoded a row at a time), offsets or none,
  // fp16 or fp32 scales of either sign and any fp16 magnitude, now and then
  // an infinite scale (NaN and infinite weights); 16-entry fp16 and fp32 palettes per group of
  // rows and columns; 1-5 rows of x; row counts that leave fours, pairs and single rows; 1 and 3
  // threads.
  for (int iter = 0; iter < 120; ++iter) {
    int64_t n = std::vector<int64_t>{1, 2, 3, 6, 13, 36}[rng.pick(0, 5)];
    int64_t block = std::vector<int64_t>{32, 32, 64, 16}[rng.pick(0, 3)];
    int64_t k = block * rng.pick(1, 6), m = rng.pick(1, 5);
    bool palette = rng.pick(0, 3) == 0;
    int64_t rowGroup = divisorOf(n), groups = n / rowGroup, colBlocks = k / block;
    std::vector<int64_t> q = randomInts(n * k, 0, 15);
    std::vector<float> dense(static_cast<size_t>(n * k));
    ProgramBuilder b;
    Value *w;
    std::string what;
    if (palette) {
      // fp16 palettes take the AVX2 nibble kernel in dotF32's order; fp32
      // ones (rounded) the tables.
      bool halfLut = rng.pick(0, 1);
      std::vector<float> lut(static_cast<size_t>(groups * colBlocks * 16));
      for (float &v : lut)
        v = halfLut ? roundedToHalf(rng.uniform(-1.0f, 1.0f)) : rng.uniform(-1.0f, 1.0f);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < k; ++c) {
          int64_t g = (r / rowGroup) * colBlocks + c / block;
          dense[r * k + c] = roundedToHalf(lut[g * 16 + q[r * k + c]]);
        }
      Shape lutShape = {groups, colBlocks, 16, 1};
      w = b.op("constexpr_lut_to_dense",
               {{"indices", packed(DType::U4, q, {n, k})},
                {"lut", halfLut ? constF16(lut, lutShape) : constF32(lut, lutShape)}},
               DType::F16, {n, k});
      what = halfLut ? "fp16 palettes" : "fp32 palettes";
    } else {
      bool isSigned = rng.pick(0, 1), offsets = rng.pick(0, 1), half = rng.pick(0, 1);
      DType dt = isSigned ? DType::I4 : DType::U4;
      if (isSigned)
        for (int64_t &v : q)
          v -= 8;
      int64_t nb = groups * colBlocks;
      std::vector<float> scales(static_cast<size_t>(nb));
      // Either sign, from fp16 subnormals up to 2^10 (every q * scale
      // finite: the tables of fp16 scales are read, GridTables) or to 2^13
      // (some products past 65504: the tables are rounded, BlockTables).
      int top = rng.pick(0, 1) ? 9 : 13;
      for (float &v : scales) {
        float mag = std::ldexp(rng.uniform(1.0f, 2.0f), static_cast<int>(rng.pick(-26, top)));
        v = (rng.pick(0, 1) ? -1.0f : 1.0f) * (half ? roundedToHalf(mag) : mag);
      }
      if (rng.pick(0, 7) == 0)
        scales[static_cast<size_t>(rng.pick(0, nb - 1))] = std::numeric_limits<float>::infinity();
      std::vector<int64_t> off =
          offsets ? randomInts(nb, isSigned ? -8 : 0, isSigned ? 7 : 15) : std::vector<int64_t>();
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < k; ++c) {
          int64_t g = (r / rowGroup) * colBlocks + c / block;
          float o = offsets ? static_cast<float>(off[g]) : 0.0f;
          dense[r * k + c] = roundedToHalf((static_cast<float>(q[r * k + c]) - o) * scales[g]);
        }
      std::vector<Arg> args = {{"data", packed(dt, q, {n, k})},
                               {"scale", half ? constF16(scales, {groups, colBlocks})
                                              : constF32(scales, {groups, colBlocks})}};
      if (offsets)
        args.push_back({"offset", packed(dt, off, {groups, colBlocks})});
      w = b.op("constexpr_blockwise_shift_scale", std::move(args), DType::F16, {n, k});
      what = std::string(dtypeName(dt)) + (offsets ? " offsets" : "") +
             (half ? " fp16 scales" : " fp32 scales");
    }
    Value *x = b.input("x", DType::F32, {m, k});
    b.output(b.op("linear", {{"x", x}, {"weight", w}}, DType::F32, {m, n}));
    b.output(b.op("linear", {{"x", x}, {"weight", constF16(dense, {n, k})}}, DType::F32, {m, n}));
    runtime::TensorMap in = {{"x", randomInput({m, k})}};
    expectOutputPairsSameBitsInFp16(b, in,
                                    what + " n " + std::to_string(n) + " k " + std::to_string(k) +
                                        " block " + std::to_string(block) + " row group " +
                                        std::to_string(rowGroup) + " m " + std::to_string(m));
    if (HasFatalFailure())
      return;
  }
}

TEST(Compressed, Fp16ModeSixAndEightBitPalettesGiveTheBitsOfTheirDecodedRowsOnEveryIsa) {
  // fp16 palettes of 64 and 256 finite values are what fp16 mode rounds them
  // to: over column blocks of whole steps the byte-plane kernels sum them in
  // dotF32's order (AVX2: 32 values a step; AVX-512 VBMI: 64), and must
  // give the bits of the decoded rows, which the same values stored as fp16
  // give. Blocks of 8-24 values past whole steps, fp32 palettes (rounded)
  // and now and then an infinite entry are decoded a row at a time; 1-4 rows
  // of x; 1 and 3 threads. Gathered rows (a tied embedding) are decoded in
  // registers where the blocks are whole steps: the same bits again.
  for (int iter = 0; iter < 60; ++iter) {
    int bits = rng.pick(0, 1) ? 6 : 8;
    int64_t entries = int64_t(1) << bits;
    int64_t n = std::vector<int64_t>{1, 3, 5, 16, 17}[rng.pick(0, 4)];
    int64_t block = std::vector<int64_t>{32, 64, 128, 96, 192, 8, 24, 72}[rng.pick(0, 7)];
    int64_t colBlocks = rng.pick(1, 3), k = block * colBlocks, m = rng.pick(1, 4);
    int64_t rowGroup = divisorOf(n), groups = n / rowGroup;
    bool half = rng.pick(0, 3) != 0;
    std::vector<int64_t> q = randomInts(n * k, 0, entries - 1);
    std::vector<float> lut(static_cast<size_t>(groups * colBlocks * entries));
    for (float &v : lut)
      v = half ? roundedToHalf(rng.uniform(-1.0f, 1.0f)) : rng.uniform(-1.0f, 1.0f);
    if (rng.pick(0, 7) == 0)
      lut[static_cast<size_t>(rng.pick(0, static_cast<int64_t>(lut.size()) - 1))] =
          -std::numeric_limits<float>::infinity();
    std::vector<float> dense(static_cast<size_t>(n * k));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) {
        int64_t g = (r / rowGroup) * colBlocks + c / block;
        dense[r * k + c] = roundedToHalf(lut[g * entries + q[r * k + c]]);
      }
    DType it = bits == 6 ? DType::U6 : DType::U8;
    Shape lutShape = {groups, colBlocks, entries, 1};
    ProgramBuilder b;
    Value *w = b.op("constexpr_lut_to_dense",
                    {{"indices", packed(it, q, {n, k})},
                     {"lut", half ? constF16(lut, lutShape) : constF32(lut, lutShape)}},
                    DType::F16, {n, k});
    Value *x = b.input("x", DType::F32, {m, k});
    b.output(b.op("linear", {{"x", x}, {"weight", w}}, DType::F32, {m, n}));
    b.output(b.op("linear", {{"x", x}, {"weight", constF16(dense, {n, k})}}, DType::F32, {m, n}));
    Value *rows = b.input("i", DType::I32, {n});
    b.output(b.op("gather", {{"x", w}, {"indices", rows}}, DType::F32, {n, k}));
    b.output(
        b.op("gather", {{"x", constF16(dense, {n, k})}, {"indices", rows}}, DType::F32, {n, k}));
    std::vector<int32_t> order;
    for (int64_t r = n - 1; r >= 0; --r)
      order.push_back(static_cast<int32_t>(r));
    runtime::TensorMap in = {{"x", randomInput({m, k})}, {"i", Tensor::fromI32(order, {n})}};
    expectOutputPairsSameBitsInFp16(
        b, in,
        std::string(dtypeName(it)) + (half ? " fp16" : " fp32") + " palettes n " +
            std::to_string(n) + " k " + std::to_string(k) + " block " + std::to_string(block) +
            " row group " + std::to_string(rowGroup) + " m " + std::to_string(m));
    if (HasFatalFailure())
      return;
  }
}

/// run() in fp16 mode, one thread, with RunOptions::exactProducts `exact`.
std::vector<Tensor> runFp16(ProgramBuilder &b, const runtime::TensorMap &in, bool exact) {
  runtime::RunOptions o;
  o.precision = runtime::Precision::FP16;
  o.exactProducts = exact;
  o.threads = 1;
  runtime::Interpreter interp(*b.fn, o);
  std::vector<Tensor> out;
  for (auto &nt : interp.run(in))
    out.push_back(std::move(nt.tensor));
  return out;
}

/// The AVX2 instruction sets this CPU runs.
std::vector<runtime::KernelIsa> avx2Isas() {
  std::vector<runtime::KernelIsa> v;
  for (runtime::KernelIsa isa : kernelIsas())
    if (isa == runtime::KernelIsa::Avx2 || isa == runtime::KernelIsa::Avx2Vnni)
      v.push_back(isa);
  return v;
}

TEST(Compressed, Fp16ModeAvx2KeepsTheDevicesFp16WeightsOnTheGrid) {
  std::vector<runtime::KernelIsa> isas = avx2Isas();
  if (isas.empty())
    GTEST_SKIP() << "this CPU has no AVX2: its kernel does not run here";
  // fp16 mode, int4/uint4 blocks of 32 with fp16 scales, linears declared
  // fp16: AVX2 puts x on 16-bit grids and adds, per weight, the difference
  // between the fp16 the device holds and q * scale. Each row of x holds,
  // in one block, x = 1 against q0 and x = -/+q0/8 against -8 (int4) or
  // 8 (uint4), zeros elsewhere: q * scale cancels exactly, and the row
  // is fp16(q0 * scale) - q0 * scale, exact in fp16. Random fp16 scales of
  // either sign, subnormal to 2^11; every row of weights shares q0 and
  // its partner in those columns. Without the differences every row
  // would be zero.
  int64_t differing = 0;
  for (int iter = 0; iter < 60; ++iter) {
    int64_t n = rng.pick(1, 9), nbk = rng.pick(1, 5), k = 32 * nbk, m = rng.pick(1, 3);
    bool isSigned = rng.pick(0, 1);
    DType dt = isSigned ? DType::I4 : DType::U4;
    std::vector<int64_t> q = randomInts(n * k, isSigned ? -8 : 0, isSigned ? 7 : 15);
    std::vector<uint16_t> bits(static_cast<size_t>(n * nbk));
    std::vector<float> sc(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) {
      int64_t field = rng.pick(0, 3) == 0 ? rng.pick(0, 1) : rng.pick(0, 26);
      bits[i] = static_cast<uint16_t>((rng.pick(0, 1) << 15) | (field << 10) | rng.pick(0, 1023));
      sc[i] = halfToFloat(bits[i]);
    }
    std::vector<float> xv(static_cast<size_t>(m * k), 0.0f);
    std::vector<int64_t> blockOf(static_cast<size_t>(m)), q0Of(static_cast<size_t>(m));
    static const int64_t signedQ[] = {-7, -6, -5, -3, 3, 5, 6, 7};
    std::set<int64_t> taken; // columns another row of x's pair holds
    auto freeColumn = [&](int64_t blk) {
      int64_t c;
      do
        c = blk * 32 + rng.pick(0, 31);
      while (!taken.insert(c).second);
      return c - blk * 32;
    };
    for (int64_t i = 0; i < m; ++i) {
      int64_t blk = rng.pick(0, nbk - 1), p0 = freeColumn(blk), p1 = freeColumn(blk);
      int64_t q0 = isSigned ? signedQ[rng.pick(0, 7)]
                            : std::vector<int64_t>{3, 5, 6, 7, 11, 13, 15}[rng.pick(0, 6)];
      int64_t partner = isSigned ? -8 : 8;
      for (int64_t r = 0; r < n; ++r) {
        q[static_cast<size_t>(r * k + blk * 32 + p0)] = q0;
        q[static_cast<size_t>(r * k + blk * 32 + p1)] = partner;
      }
      xv[static_cast<size_t>(i * k + blk * 32 + p0)] = 1.0f;
      xv[static_cast<size_t>(i * k + blk * 32 + p1)] =
          static_cast<float>(-q0 * 0.125 * (partner < 0 ? -1 : 1));
      blockOf[static_cast<size_t>(i)] = blk, q0Of[static_cast<size_t>(i)] = q0;
    }
    ProgramBuilder b;
    Value *w = b.op("constexpr_blockwise_shift_scale",
                    {{"data", packed(dt, q, {n, k})}, {"scale", constF16(sc, {n, nbk})}},
                    DType::F16, {n, k});
    Value *x = b.input("x", DType::F32, {m, k});
    b.output(b.op("linear", {{"x", x}, {"weight", w}}, DType::F16, {m, n}));
    runtime::TensorMap in = {{"x", Tensor::fromF32(xv, {m, k})}};
    std::vector<float> want(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t r = 0; r < n; ++r) {
        double s = sc[static_cast<size_t>(r * nbk + blockOf[static_cast<size_t>(i)])];
        double exact = static_cast<double>(q0Of[static_cast<size_t>(i)]) * s;
        double held = halfToFloat(floatToHalf(static_cast<float>(exact)));
        want[static_cast<size_t>(i * n + r)] = static_cast<float>(held - exact);
        differing += held != exact;
      }
    for (runtime::KernelIsa isa : isas)
      for (bool exact : {false, true}) {
        IsaGuard guard(isa);
        SCOPED_TRACE(std::string(dtypeName(dt)) + " n " + std::to_string(n) + " k " +
                     std::to_string(k) + " m " + std::to_string(m) + " isa " + isaName(isa) +
                     (exact ? " exact products" : ""));
        Tensor got = runFp16(b, in, exact)[0];
        for (int64_t e = 0; e < m * n; ++e)
          ASSERT_PRED2(sameBits, got.floatAt(e), want[static_cast<size_t>(e)]) << "element " << e;
      }
  }
  EXPECT_GT(differing, 100) << "too few scales whose products round: the test would not bite";

  // The grid is taken (not the exact table kernel): an x of 2^-20 beside an
  // x of 1 (q 0) lies under half a step of 2^-14 and counts as zero; with
  // exactProducts its product stays.
  for (runtime::KernelIsa isa : isas)
    for (bool isSigned : {true, false}) {
      IsaGuard guard(isa);
      std::vector<int64_t> q(32, 0);
      q[5] = 7;
      std::vector<float> xv(32, 0.0f);
      xv[0] = 1.0f, xv[5] = 0x1p-20f;
      ProgramBuilder b;
      Value *w = b.op("constexpr_blockwise_shift_scale",
                      {{"data", packed(isSigned ? DType::I4 : DType::U4, q, {1, 32})},
                       {"scale", constF16({3.0f}, {1, 1})}},
                      DType::F16, {1, 32});
      Value *x = b.input("x", DType::F32, {1, 32});
      b.output(b.op("linear", {{"x", x}, {"weight", w}}, DType::F16, {1, 1}));
      runtime::TensorMap in = {{"x", Tensor::fromF32(xv, {1, 32})}};
      SCOPED_TRACE(std::string(isaName(isa)) + (isSigned ? " int4" : " uint4"));
      EXPECT_EQ(runFp16(b, in, false)[0].floatAt(0), 0.0f);
      EXPECT_EQ(runFp16(b, in, true)[0].floatAt(0), 21.0f * 0x1p-20f);
    }
}

TEST(Compressed, Fp16ModeAvx2GridStaysWithinHalfAStepOfEachRoundedProduct) {
  std::vector<runtime::KernelIsa> isas = avx2Isas();
  if (isas.empty())
    GTEST_SKIP() << "this CPU has no AVX2: its kernel does not run here";
  // Random fp16 x (of magnitudes 2^-14 to 2^10 between blocks), random q and
  // fp16 scales (as large as the grid takes: 8 * |scale| under 65504 for
  // int4, 15 * |scale| for uint4), rows of 1-12 blocks (odd counts end on a
  // half group), 1-3 rows of x: each fp16 output within half a step per
  // |weight| of the exact sum of the fp16 weights, plus the rounding of a
  // k-term fp32 sum, plus half an fp16 step of the result.
  for (int iter = 0; iter < 40; ++iter) {
    int64_t n = 5, nbk = rng.pick(1, 12), k = 32 * nbk, m = rng.pick(1, 3);
    bool isSigned = rng.pick(0, 1);
    DType dt = isSigned ? DType::I4 : DType::U4;
    std::vector<int64_t> q = randomInts(n * k, isSigned ? -8 : 0, isSigned ? 7 : 15);
    float top = isSigned ? 8000.0f : 4300.0f;
    std::vector<float> sc(static_cast<size_t>(n * nbk));
    for (float &v : sc)
      v = roundedToHalf(rng.pick(0, 9) == 0 ? rng.uniform(-top, top) : rng.uniform(-0.2f, 0.2f));
    std::vector<float> xv(static_cast<size_t>(m * k));
    for (int64_t blk = 0; blk < m * nbk; ++blk) {
      float mag = std::vector<float>{0x1p-14f, 1e-3f, 1.0f, 1024.0f}[rng.pick(0, 3)];
      for (int64_t c = 0; c < 32; ++c)
        xv[static_cast<size_t>(blk * 32 + c)] = roundedToHalf(mag * rng.uniform(-1.0f, 1.0f));
    }
    ProgramBuilder b;
    Value *w = b.op("constexpr_blockwise_shift_scale",
                    {{"data", packed(dt, q, {n, k})}, {"scale", constF16(sc, {n, nbk})}},
                    DType::F16, {n, k});
    Value *x = b.input("x", DType::F32, {m, k});
    b.output(b.op("linear", {{"x", x}, {"weight", w}}, DType::F16, {m, n}));
    runtime::TensorMap in = {{"x", Tensor::fromF32(xv, {m, k})}};
    for (runtime::KernelIsa isa : isas) {
      IsaGuard guard(isa);
      SCOPED_TRACE(std::string(dtypeName(dt)) + " k " + std::to_string(k) + " m " +
                   std::to_string(m) + " isa " + isaName(isa));
      Tensor got = runFp16(b, in, false)[0];
      for (int64_t e = 0; e < m * n; ++e) {
        int64_t row = e / n, r = e % n;
        double want = 0, mag = 0, grid = 0;
        for (int64_t blk = 0; blk < nbk; ++blk) {
          double big = 0, sumW = 0;
          for (int64_t c = blk * 32; c < blk * 32 + 32; ++c) {
            double wv = roundedToHalf(static_cast<float>(q[static_cast<size_t>(r * k + c)]) *
                                      sc[static_cast<size_t>(r * nbk + blk)]);
            double xc = xv[static_cast<size_t>(row * k + c)];
            want += wv * xc;
            mag += std::fabs(wv * xc);
            big = std::max(big, std::fabs(xc));
            sumW += std::fabs(wv);
          }
          int ex = big > 0 ? std::ilogb(big) : 0;
          grid += sumW * std::ldexp(1.0, ex - 14);
        }
        double tol = static_cast<double>(k) * 0x1p-22 * mag + grid;
        tol += 0x1p-11 * (std::fabs(want) + tol) + 0x1p-25;
        if (std::fabs(want) - tol > 65520) { // past fp16's range either way
          EXPECT_TRUE(std::isinf(got.floatAt(e))) << "x row " << row << ", row " << r;
        } else if (std::fabs(want) + tol < 65504) {
          EXPECT_NEAR(got.floatAt(e), want, tol) << "x row " << row << ", row " << r;
        }
      }
    }
  }
}

TEST(Compressed, Avx512RowsPrefetchedOrNotGiveTheSameBits) {
  // Whether the AVX-512 kernels prefetch is chosen by CPU (on for Intel, off
  // for Zen 4): both paths run here, on any AVX-512 machine, and must give
  // the same bits: fp16 rows, and int4/uint4 blocks of 32 (the word kernel,
  // and the 8-bit dot product one where the CPU has VNNI), on rows long
  // enough to prefetch past their end, on one and two threads.
  if (!runtime::cpuHasAvx512())
    GTEST_SKIP() << "this CPU has no AVX-512: its kernels do not run here";
  for (int iter = 0; iter < 24; ++iter) {
    IsaGuard isa(iter % 2 ? runtime::KernelIsa::Avx512 : runtime::KernelIsa::Avx512Vnni);
    int64_t n = std::vector<int64_t>{1, 5, 33}[rng.pick(0, 2)],
            k = std::vector<int64_t>{32, 288, 1024, 4096}[rng.pick(0, 3)];
    int64_t m = rng.pick(1, 4);
    DType dt = rng.pick(0, 1) ? DType::I4 : DType::U4;
    ProgramBuilder b;
    Value *x = b.input("x", DType::F32, {m, k});
    Value *words = blocksOf32(b, dt, n, k);
    b.output(b.op("linear", {{"x", x}, {"weight", words}}, DType::F32, {m, n}));
    b.output(b.op("linear", {{"x", x}, {"weight", floats(DType::F16, {n, k}, -1.0f, 1.0f)}},
                  DType::F32, {m, n}));
    runtime::TensorMap in = {{"x", randomInput({m, k})}};
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::string(dtypeName(dt)) + " n " + std::to_string(n) + " k " +
                   std::to_string(k) + " m " + std::to_string(m) + " threads " +
                   std::to_string(threads));
      std::vector<Tensor> on, off;
      {
        PrefetchGuard guard(true);
        on = run(b, in, true, runtime::Precision::FP32, threads);
      }
      {
        PrefetchGuard guard(false);
        off = run(b, in, true, runtime::Precision::FP32, threads);
      }
      for (size_t o = 0; o < on.size(); ++o)
        for (int64_t i = 0; i < m * n; ++i)
          ASSERT_EQ(on[o].floatAt(i), off[o].floatAt(i)) << "output " << o << " element " << i;
    }
  }
}

TEST(Compressed, ExpandedOnceAndKeptWithinTheBudget) {
  // A compressed weight read by an op that cannot decode it (add) is
  // expanded at the first run and kept; with no budget it is expanded at
  // every run, with the same results.
  ProgramBuilder b;
  Value *w = b.op("constexpr_blockwise_shift_scale",
                  {{"data", packed(DType::I8, randomInts(64, -100, 100), {8, 8})},
                   {"scale", floats(DType::F16, {8, 1}, 0.1f, 0.2f)}},
                  DType::F16, {8, 8});
  Value *x = b.input("x", DType::F32, {8, 8});
  b.output(b.op("add", {{"x", x}, {"y", w}}, DType::F32, {8, 8}));
  runtime::TensorMap in = {{"x", randomInput({8, 8})}};
  runtime::RunOptions keep, none;
  none.foldCacheBytes = 0;
  runtime::Interpreter a(*b.fn, keep), c(*b.fn, none);
  Tensor first = a.run(in)[0].tensor;
  EXPECT_EQ(a.keptBytes(), 64u * 4);
  Tensor second = a.run(in)[0].tensor, third = c.run(in)[0].tensor;
  EXPECT_EQ(c.keptBytes(), 0u);
  for (int64_t i = 0; i < 64; ++i) {
    EXPECT_EQ(first.floatAt(i), second.floatAt(i));
    EXPECT_EQ(first.floatAt(i), third.floatAt(i));
  }
}

TEST(Compressed, ErrorsOfTheExpandingKernelsStillReported) {
  // A mask with more set bits than values: the in-place form refuses it and
  // the expanding kernel reports the error.
  ProgramBuilder b;
  Value *w = b.op(
      "constexpr_sparse_to_dense",
      {{"nonzero_data", constF32({1, 2}, {2})}, {"mask", packed(DType::U1, {1, 1, 1, 0}, {2, 2})}},
      DType::F32, {2, 2});
  Value *x = b.input("x", DType::F32, {1, 2});
  b.output(b.op("linear", {{"x", x}, {"weight", w}}, DType::F32, {1, 2}));
  EXPECT_THROW(run(b, {{"x", randomInput({1, 2})}}, true), InputError);
}

} // namespace
