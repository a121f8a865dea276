//===- DataMovementTest.cpp - Fast data movement against element loops ----===//
//
// Every fast path of the data-movement kernels (run copies, views, blocked
// transposes, tiles kept lazy for attention) is compared with a reference
// written one element at a time from the op's definition, over random
// shapes, strides and dtypes, odd sizes and unit dims included.
//
//===----------------------------------------------------------------------===//
#include "RuntimeTestUtil.h"
#include "support/Random.h"

#include "runtime/kernels/KernelUtil.h"

#include <cstring>
#include <functional>
#include <random>

using namespace anefit;
using namespace anefit::test;
using runtime::numElementsOf;
using runtime::stridesOf;

namespace {

/// This file's random cases.
SeededRandom rng(20260101);

/// A random shape of `rank` dims of 1..maxDim (1s and odd sizes are common).
Shape randomShape(int64_t rank, int64_t maxDim) {
  Shape s;
  for (int64_t d = 0; d < rank; ++d)
    s.push_back(rng.pick(0, 3) == 0 ? 1 : rng.pick(1, maxDim));
  return s;
}

/// Distinct values in the dtype the interpreter computes in.
Tensor randomTensor(DType dt, const Shape &shape) {
  int64_t n = numElementsOf(shape);
  if (dt == DType::F32) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      v[i] = static_cast<float>(i) * 0.5f - 3.25f;
    return Tensor::fromF32(v, shape);
  }
  if (dt == DType::I32) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      v[i] = static_cast<int32_t>(i * 7 - 11);
    return Tensor::fromI32(v, shape);
  }
  std::vector<bool> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[i] = (i * 5 + 1) % 3 == 0;
  return Tensor::fromBool(v, shape);
}

DType randomDType() {
  static const DType all[] = {DType::F32, DType::I32, DType::Bool};
  return all[rng.pick(0, 2)];
}

/// Row-major index -> coordinates.
std::vector<int64_t> coords(int64_t i, const Shape &shape) {
  std::vector<int64_t> c(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    c[d] = shape[d] ? i % shape[d] : 0;
    i = shape[d] ? i / shape[d] : 0;
  }
  return c;
}

int64_t flat(const std::vector<int64_t> &c, const Shape &shape) {
  int64_t i = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    i = i * shape[d] + c[d];
  return i;
}

/// out[i] = x[src(coords(i))] over `outShape`; -1 means `fill` (as bytes of x's dtype).
Tensor referenceGather(const Tensor &x, const Shape &outShape,
                       const std::function<int64_t(const std::vector<int64_t> &)> &src) {
  Tensor out = Tensor::zeros(x.dtype(), outShape);
  int eb = dtypeBits(x.dtype()) / 8;
  for (int64_t i = 0; i < out.numElements(); ++i) {
    int64_t s = src(coords(i, outShape));
    if (s >= 0)
      std::memcpy(out.mutableBytes() + i * eb, x.bytes() + s * eb, static_cast<size_t>(eb));
  }
  return out;
}

void expectSameBytes(const Tensor &got, const Tensor &want) {
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.numBytes(), want.numBytes());
  for (int64_t i = 0; i < want.numElements(); ++i)
    ASSERT_EQ(got.floatAt(i), want.floatAt(i)) << "element " << i;
}

/// Runs `type` on input x (plus constant parameters) and returns output 0.
Tensor runUnary(const std::string &type, const Tensor &x, std::vector<Arg> params,
                const Shape &outShape, DType outType) {
  ProgramBuilder b;
  Value *in = b.input("x", x.dtype() == DType::Bool ? DType::Bool : x.dtype(), x.shape());
  params.insert(params.begin(), Arg("x", in));
  b.output(b.op(type, std::move(params), outType, outShape));
  return runOnce(b, {{"x", x}})[0];
}

ConstantRef ints(const std::vector<int64_t> &v) {
  std::vector<int32_t> w(v.begin(), v.end());
  return constI32(w, {static_cast<int64_t>(w.size())});
}

TEST(DataMovement, CopyStridedMatchesElementLoop) {
  // Every layout pair: permutations (transposes), reversed dims, offsets,
  // element widths 1, 2, 4 and 8 bytes.
  for (int iter = 0; iter < 400; ++iter) {
    int64_t rank = rng.pick(1, 5);
    Shape shape = randomShape(rank, 9);
    int eb = std::vector<int>{1, 2, 4, 8}[rng.pick(0, 3)];
    // Source: a bigger buffer with permuted, possibly negative strides.
    std::vector<int64_t> perm(rank);
    for (int64_t d = 0; d < rank; ++d)
      perm[d] = d;
    shuffleRange(rng.engine(), perm.begin(), perm.end());
    Shape srcShape(rank);
    for (int64_t d = 0; d < rank; ++d)
      srcShape[perm[d]] = shape[d];
    std::vector<int64_t> base = stridesOf(srcShape), inStrides(rank);
    int64_t inOffset = 0;
    for (int64_t d = 0; d < rank; ++d) {
      inStrides[d] = base[perm[d]];
      if (rng.pick(0, 4) == 0) { // walk this dim backwards
        inOffset += (shape[d] - 1) * inStrides[d];
        inStrides[d] = -inStrides[d];
      }
    }
    int64_t n = numElementsOf(shape);
    std::vector<uint8_t> src(static_cast<size_t>(n * eb));
    for (size_t i = 0; i < src.size(); ++i)
      src[i] = static_cast<uint8_t>(i * 31 + 7);
    // Destination: dense, or every other element of a wider buffer.
    bool spread = rng.pick(0, 2) == 0;
    std::vector<int64_t> outStrides = stridesOf(shape);
    if (spread)
      for (int64_t &s : outStrides)
        s *= 2;
    int64_t outOffset = spread ? 1 : 0;
    std::vector<uint8_t> got(static_cast<size_t>((2 * n + 2) * eb), 0xAB), want = got;
    runtime::copyStrided(src.data(), got.data(), eb, shape, inStrides, inOffset, outStrides,
                         outOffset);
    for (int64_t i = 0; i < n; ++i) {
      std::vector<int64_t> c = coords(i, shape);
      int64_t si = inOffset, di = outOffset;
      for (int64_t d = 0; d < rank; ++d)
        si += c[d] * inStrides[d], di += c[d] * outStrides[d];
      std::memcpy(&want[di * eb], &src[si * eb], static_cast<size_t>(eb));
    }
    ASSERT_EQ(got, want) << "iteration " << iter << " shape " << runtime::shapeStr(shape)
                         << " element bytes " << eb;
  }
}

TEST(DataMovement, TileMatchesElementLoop) {
  for (int iter = 0; iter < 300; ++iter) {
    int64_t rank = rng.pick(1, 5);
    Shape shape = randomShape(rank, 6);
    std::vector<int64_t> reps(rank);
    Shape outShape(rank);
    for (int64_t d = 0; d < rank; ++d) {
      reps[d] = rng.pick(1, 3);
      outShape[d] = shape[d] * reps[d];
    }
    Tensor x = randomTensor(randomDType(), shape);
    Tensor want = referenceGather(x, outShape, [&](const std::vector<int64_t> &c) {
      std::vector<int64_t> s(c);
      for (int64_t d = 0; d < rank; ++d)
        s[d] %= shape[d];
      return flat(s, shape);
    });
    Tensor got = runUnary("tile", x, {{"reps", ints(reps)}}, outShape, x.dtype());
    SCOPED_TRACE("tile " + runtime::shapeStr(shape) + " reps " + runtime::shapeStr(reps));
    expectSameBytes(got, want);
  }
}

TEST(DataMovement, TransposeMatchesElementLoop) {
  for (int iter = 0; iter < 300; ++iter) {
    int64_t rank = rng.pick(1, 5);
    Shape shape = randomShape(rank, iter % 10 == 0 ? 70 : 9);
    if (numElementsOf(shape) > 20000)
      continue;
    std::vector<int64_t> perm(rank);
    for (int64_t d = 0; d < rank; ++d)
      perm[d] = d;
    shuffleRange(rng.engine(), perm.begin(), perm.end());
    Shape outShape(rank);
    for (int64_t d = 0; d < rank; ++d)
      outShape[d] = shape[perm[d]];
    Tensor x = randomTensor(randomDType(), shape);
    Tensor want = referenceGather(x, outShape, [&](const std::vector<int64_t> &c) {
      std::vector<int64_t> s(rank);
      for (int64_t d = 0; d < rank; ++d)
        s[perm[d]] = c[d];
      return flat(s, shape);
    });
    Tensor got = runUnary("transpose", x, {{"perm", ints(perm)}}, outShape, x.dtype());
    SCOPED_TRACE("transpose " + runtime::shapeStr(shape) + " perm " + runtime::shapeStr(perm));
    expectSameBytes(got, want);
  }
}

TEST(DataMovement, SliceByIndexViewsAndCopiesMatchElementLoop) {
  int tested = 0;
  for (int iter = 0; iter < 400; ++iter) {
    int64_t rank = rng.pick(1, 4);
    Shape shape = randomShape(rank, 8);
    std::vector<int64_t> begin(rank), end(rank), stride(rank), outShape(rank);
    for (int64_t d = 0; d < rank; ++d) {
      int64_t n = shape[d];
      // Whole dims often, so contiguous slices (views) are common.
      if (rng.pick(0, 2) == 0) {
        begin[d] = 0, end[d] = n, stride[d] = 1;
      } else {
        int64_t st = rng.pick(0, 3) == 0 ? -rng.pick(1, 2) : rng.pick(1, 3);
        int64_t b = rng.pick(0, n - 1), e = rng.pick(0, n);
        if (st < 0)
          e = rng.pick(-1, n - 1);
        begin[d] = b, end[d] = e, stride[d] = st;
      }
      int64_t b = begin[d], e = end[d], st = stride[d];
      outShape[d] =
          st > 0 ? (e > b ? (e - b + st - 1) / st : 0) : (b > e ? (b - e - st - 1) / -st : 0);
      if (st < 0 && end[d] == -1) // -1 counts from the end in MIL: use end_mask instead
        outShape[d] = -1;
    }
    bool skip = false;
    std::vector<bool> endMask(rank, false);
    for (int64_t d = 0; d < rank; ++d)
      if (outShape[d] == -1) {
        endMask[d] = true;
        outShape[d] = (begin[d] + 1 - stride[d] - 1) / -stride[d];
      }
    for (int64_t d : outShape)
      skip = skip || d <= 0;
    if (skip)
      continue;
    Tensor x = randomTensor(randomDType(), shape);
    Tensor want = referenceGather(x, outShape, [&](const std::vector<int64_t> &c) {
      std::vector<int64_t> s(rank);
      for (int64_t d = 0; d < rank; ++d)
        s[d] = begin[d] + c[d] * stride[d];
      return flat(s, shape);
    });
    std::vector<bool> none(rank, false);
    Tensor got = runUnary("slice_by_index", x,
                          {{"begin", ints(begin)},
                           {"end", ints(end)},
                           {"stride", ints(stride)},
                           {"end_mask", constBool(endMask, {rank})}},
                          outShape, x.dtype());
    SCOPED_TRACE("slice " + runtime::shapeStr(shape) + " begin " + runtime::shapeStr(begin) +
                 " end " + runtime::shapeStr(end) + " stride " + runtime::shapeStr(stride));
    expectSameBytes(got, want);
    ++tested;
  }
  EXPECT_GT(tested, 150); // the random slices are mostly non-empty
}

TEST(DataMovement, SliceUpdateInPlaceAndCopyMatchElementLoop) {
  // x is either an op result read only here (updated in place) or a
  // function input (copied); the input must not change.
  for (int iter = 0; iter < 200; ++iter) {
    int64_t rank = rng.pick(1, 4);
    Shape shape = randomShape(rank, 7);
    std::vector<int64_t> begin(rank), end(rank), len(rank);
    for (int64_t d = 0; d < rank; ++d) {
      begin[d] = rng.pick(0, shape[d] - 1);
      end[d] = rng.pick(begin[d] + 1, shape[d]);
      len[d] = end[d] - begin[d];
    }
    DType dt = randomDType();
    Tensor x = randomTensor(dt, shape), update = randomTensor(dt, len);
    Tensor before = x.clone();
    for (bool viaOp : {false, true}) {
      ProgramBuilder b;
      Value *xi = b.input("x", dt, shape);
      Value *ui = b.input("u", dt, len);
      Value *base =
          viaOp
              ? b.op("identity",
                     {{"x", b.op("tile", {{"x", xi}, {"reps", ints(Shape(rank, 1))}}, dt, shape)}},
                     dt, shape)
              : xi;
      b.output(b.op("slice_update",
                    {{"x", base}, {"update", ui}, {"begin", ints(begin)}, {"end", ints(end)}}, dt,
                    shape));
      Tensor got = runOnce(b, {{"x", x}, {"u", update}})[0];
      Tensor want =
          referenceGather(x, shape, [&](const std::vector<int64_t> &c) { return flat(c, shape); });
      for (int64_t i = 0; i < update.numElements(); ++i) {
        std::vector<int64_t> c = coords(i, len);
        for (int64_t d = 0; d < rank; ++d)
          c[d] += begin[d];
        int eb = dtypeBits(dt) / 8;
        std::memcpy(want.mutableBytes() + flat(c, shape) * eb, update.bytes() + i * eb,
                    static_cast<size_t>(eb));
      }
      SCOPED_TRACE(std::string(viaOp ? "op result " : "input ") + runtime::shapeStr(shape));
      expectSameBytes(got, want);
      expectSameBytes(x, before);
    }
  }
}

TEST(DataMovement, SplitConcatStackMatchElementLoop) {
  for (int iter = 0; iter < 200; ++iter) {
    int64_t rank = rng.pick(1, 4);
    Shape shape = randomShape(rank, 7);
    int64_t axis = rng.pick(0, rank - 1);
    DType dt = randomDType();
    Tensor x = randomTensor(dt, shape);
    // split into two sizes along axis (views when the axis is outermost)
    int64_t first = rng.pick(0, shape[axis]);
    Shape s1 = shape, s2 = shape;
    s1[axis] = first;
    s2[axis] = shape[axis] - first;
    ProgramBuilder b;
    Value *xi = b.input("x", dt, shape);
    auto parts = b.ops("split",
                       {{"x", xi},
                        {"split_sizes", ints({first, shape[axis] - first})},
                        {"axis", scalarI32(static_cast<int32_t>(axis))}},
                       {Type::tensor(dt, s1), Type::tensor(dt, s2)});
    b.output(parts[0]);
    b.output(parts[1]);
    // concat back in the other order
    Shape cat = shape;
    b.output(b.op("concat",
                  {{"values", std::vector<Value *>{parts[1], parts[0]}},
                   {"axis", scalarI32(static_cast<int32_t>(axis))}},
                  dt, cat));
    auto out = runOnce(b, {{"x", x}});
    expectSameBytes(out[0], referenceGather(x, s1, [&](const std::vector<int64_t> &c) {
                      return flat(c, shape);
                    }));
    expectSameBytes(out[1], referenceGather(x, s2, [&](const std::vector<int64_t> &c) {
                      std::vector<int64_t> s(c);
                      s[axis] += first;
                      return flat(s, shape);
                    }));
    expectSameBytes(out[2], referenceGather(x, cat, [&](const std::vector<int64_t> &c) {
                      std::vector<int64_t> s(c);
                      s[axis] = (c[axis] + first) % shape[axis];
                      return flat(s, shape);
                    }));
  }
}

TEST(DataMovement, PadModesMatchElementLoop) {
  for (int iter = 0; iter < 150; ++iter) {
    int64_t rank = rng.pick(1, 4);
    Shape shape = randomShape(rank, 6);
    int64_t padded = rng.pick(1, rank);
    std::string mode = std::vector<std::string>{"constant", "reflect", "replicate"}[rng.pick(0, 2)];
    std::vector<int64_t> pad, before(rank, 0), after(rank, 0);
    Shape outShape = shape;
    for (int64_t d = rank - padded; d < rank; ++d) {
      int64_t lim = mode == "reflect" ? shape[d] - 1 : 3;
      before[d] = rng.pick(0, lim), after[d] = rng.pick(0, lim);
      pad.push_back(before[d]);
      pad.push_back(after[d]);
      outShape[d] += before[d] + after[d];
    }
    Tensor x = randomTensor(DType::F32, shape);
    Tensor got = runUnary(
        "pad", x, {{"pad", ints(pad)}, {"mode", constStr(mode)}, {"constant_val", scalarF32(9.5f)}},
        outShape, DType::F32);
    std::vector<float> want(static_cast<size_t>(numElementsOf(outShape)));
    for (size_t i = 0; i < want.size(); ++i) {
      std::vector<int64_t> c = coords(static_cast<int64_t>(i), outShape);
      bool inside = true;
      for (int64_t d = 0; d < rank; ++d) {
        int64_t v = c[d] - before[d], n = shape[d];
        if (v < 0 || v >= n) {
          if (mode == "constant")
            inside = false;
          else if (mode == "reflect")
            v = v < 0 ? -v : 2 * (n - 1) - v;
          else
            v = v < 0 ? 0 : n - 1;
        }
        c[d] = v;
      }
      want[i] = inside ? x.floatAt(flat(c, shape)) : 9.5f;
    }
    SCOPED_TRACE(mode + " " + runtime::shapeStr(shape) + " pad " + runtime::shapeStr(pad));
    expectNear(got, want, outShape, 0, 0);
  }
}

TEST(DataMovement, DepthSpaceFamilyMatchesElementLoop) {
  for (int iter = 0; iter < 60; ++iter) {
    int64_t block = rng.pick(1, 3), n = rng.pick(1, 2), oc = rng.pick(1, 3), h = rng.pick(1, 4),
            w = rng.pick(1, 5);
    int64_t c = oc * block * block;
    DType dt = randomDType();
    Tensor x = randomTensor(dt, {n, c, h, w});
    Shape up = {n, oc, h * block, w * block};
    for (bool dcr : {true, false}) {
      Tensor got =
          dcr ? runUnary("depth_to_space", x, {{"block_size", scalarI32(block)}}, up, dt)
              : runUnary("pixel_shuffle", x, {{"upscale_factor", scalarI32(block)}}, up, dt);
      Tensor want = referenceGather(x, up, [&](const std::vector<int64_t> &o) {
        int64_t by = o[2] % block, bx = o[3] % block;
        int64_t ic = dcr ? (by * block + bx) * oc + o[1] : o[1] * block * block + by * block + bx;
        return flat({o[0], ic, o[2] / block, o[3] / block}, {n, c, h, w});
      });
      expectSameBytes(got, want);
    }
    // space_to_depth and pixel_unshuffle of the upscaled tensor
    Tensor big = randomTensor(dt, up);
    Shape down = {n, oc * block * block, h, w};
    Tensor s2d = runUnary("space_to_depth", big, {{"block_size", scalarI32(block)}}, down, dt);
    expectSameBytes(
        s2d, referenceGather(big, down, [&](const std::vector<int64_t> &o) {
          int64_t ch = o[1] % oc, bl = o[1] / oc;
          return flat({o[0], ch, o[2] * block + bl / block, o[3] * block + bl % block}, up);
        }));
    Tensor un =
        runUnary("pixel_unshuffle", big, {{"downscale_factor", scalarI32(block)}}, down, dt);
    expectSameBytes(
        un, referenceGather(big, down, [&](const std::vector<int64_t> &o) {
          int64_t ch = o[1] / (block * block), f = o[1] % (block * block);
          return flat({o[0], ch, o[2] * block + f / block, o[3] * block + f % block}, up);
        }));
  }
}

TEST(DataMovement, NearestResamplingAndBandPartMatchElementLoop) {
  for (int iter = 0; iter < 60; ++iter) {
    Shape shape = {rng.pick(1, 2), rng.pick(1, 3), rng.pick(1, 6), rng.pick(1, 7)};
    Tensor x = randomTensor(DType::F32, shape);
    int64_t oh = rng.pick(1, 13), ow = rng.pick(1, 13);
    Shape outShape = {shape[0], shape[1], oh, ow};
    Tensor got =
        runUnary("resize_nearest_neighbor", x,
                 {{"target_size_height", scalarI32(oh)}, {"target_size_width", scalarI32(ow)}},
                 outShape, DType::F32);
    expectSameBytes(got, referenceGather(x, outShape, [&](const std::vector<int64_t> &o) {
                      return flat({o[0], o[1], o[2] * shape[2] / oh, o[3] * shape[3] / ow}, shape);
                    }));
    float sh = static_cast<float>(rng.pick(1, 3)),
          sw = static_cast<float>(rng.pick(1, 3)) * 0.5f + 1;
    Shape upShape = {shape[0], shape[1], static_cast<int64_t>(std::floor(shape[2] * sh)),
                     static_cast<int64_t>(std::floor(shape[3] * sw))};
    Tensor up =
        runUnary("upsample_nearest_neighbor", x,
                 {{"scale_factor_height", scalarF32(sh)}, {"scale_factor_width", scalarF32(sw)}},
                 upShape, DType::F32);
    expectSameBytes(up, referenceGather(x, upShape, [&](const std::vector<int64_t> &o) {
                      int64_t iy =
                          std::min(shape[2] - 1, static_cast<int64_t>(std::floor(o[2] / sh)));
                      int64_t ix =
                          std::min(shape[3] - 1, static_cast<int64_t>(std::floor(o[3] / sw)));
                      return flat({o[0], o[1], iy, ix}, shape);
                    }));
    int64_t lower = rng.pick(-1, 4), upper = rng.pick(-1, 4);
    Tensor band =
        runUnary("band_part", x, {{"lower", scalarI32(lower)}, {"upper", scalarI32(upper)}}, shape,
                 DType::F32);
    expectSameBytes(band, referenceGather(x, shape, [&](const std::vector<int64_t> &o) -> int64_t {
                      int64_t m = o[2], n = o[3];
                      bool keep = (lower < 0 || m - n <= lower) && (upper < 0 || n - m <= upper);
                      return keep ? flat(o, shape) : -1;
                    }));
  }
}

TEST(DataMovement, ViewsNeverAliasWhatTheCallerSees) {
  // Reshapes, contiguous slices, splits and casts hand out views of their
  // input; outputs returned to the caller must still be independent.
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {2, 6});
  Value *r = b.op("reshape", {{"x", x}, {"shape", ints({3, 4})}}, DType::F32, {3, 4});
  Value *s = b.op("slice_by_index", {{"x", r}, {"begin", ints({1, 0})}, {"end", ints({3, 4})}},
                  DType::F32, {2, 4});
  Value *c = b.op("cast", {{"x", s}, {"dtype", constStr("fp16")}}, DType::F16, {2, 4});
  b.output(r);
  b.output(s);
  b.output(c);
  Tensor in = randomTensor(DType::F32, {2, 6});
  auto out = runOnce(b, {{"x", in}});
  for (const Tensor &t : out)
    EXPECT_FALSE(t.sharesStorage(in));
  EXPECT_FALSE(out[0].sharesStorage(out[1]));
  for (int64_t i = 0; i < 8; ++i)
    EXPECT_EQ(out[1].floatAt(i), in.floatAt(4 + i));
}

TEST(DataMovement, RepeatedKeysReadByStrideEqualTheWrittenTile) {
  // GQA: K/V (1, kv, s, e) -> expand_dims -> tile -> reshape (1, kv*rep, s, e)
  // -> attention and matmul. The tile stays lazy (attention then takes the
  // heads of a KV head together, a block of keys at a time); making it a
  // function output forces it dense; both runs must agree exactly, with
  // keys in one block or several and a boolean mask with runs across them.
  for (int64_t rep : {1, 2, 3})
    for (bool blockTile : {false, true})
      for (int64_t s : {5, 150}) {
        int64_t kv = 2, e = 8, heads = kv * rep;
        std::vector<bool> keep(static_cast<size_t>(2 * s));
        for (size_t j = 0; j < keep.size(); ++j)
          keep[j] = (j / 7) % 4 != 2;
        auto build = [&](ProgramBuilder &b, bool exposeTile) {
          Value *q = b.input("q", DType::F32, {1, heads, 2, e});
          Value *k = b.input("k", DType::F32, {1, kv, s, e});
          Value *rk;
          Value *tiled;
          if (blockTile) {
            // tile on the head dim itself: head h reads kv head h % kv
            tiled = b.op("tile", {{"x", k}, {"reps", ints({1, rep, 1, 1})}}, DType::F32,
                         {1, heads, s, e});
            rk = tiled;
          } else {
            Value *ex =
                b.op("expand_dims", {{"x", k}, {"axes", ints({2})}}, DType::F32, {1, kv, 1, s, e});
            tiled = b.op("tile", {{"x", ex}, {"reps", ints({1, 1, rep, 1, 1})}}, DType::F32,
                         {1, kv, rep, s, e});
            rk = b.op("reshape", {{"x", tiled}, {"shape", ints({1, heads, s, e})}}, DType::F32,
                      {1, heads, s, e});
          }
          b.output(b.op("scaled_dot_product_attention", {{"query", q}, {"key", rk}, {"value", rk}},
                        DType::F32, {1, heads, 2, e}));
          b.output(b.op(
              "scaled_dot_product_attention",
              {{"query", q}, {"key", rk}, {"value", rk}, {"attn_mask", constBool(keep, {2, s})}},
              DType::F32, {1, heads, 2, e}));
          b.output(b.op("matmul", {{"x", q}, {"y", rk}, {"transpose_y", scalarBool(true)}},
                        DType::F32, {1, heads, 2, s}));
          if (exposeTile)
            b.output(tiled);
        };
        ProgramBuilder lazy, dense;
        build(lazy, false);
        build(dense, true);
        runtime::TensorMap in = {{"q", randomTensor(DType::F32, {1, heads, 2, e})},
                                 {"k", randomTensor(DType::F32, {1, kv, s, e})}};
        auto a = runOnce(lazy, in), b = runOnce(dense, in);
        SCOPED_TRACE("rep " + std::to_string(rep) + (blockTile ? " block" : " interleaved") +
                     " s " + std::to_string(s));
        expectSameBytes(a[0], b[0]);
        expectSameBytes(a[1], b[1]);
        expectSameBytes(a[2], b[2]);
      }
}

TEST(DataMovement, CastToTheSameComputeTypeKeepsValues) {
  // fp32 -> fp16 in fp32 mode keeps fp32 values (a view); fp16 mode rounds
  // a copy and leaves the input alone.
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {3});
  b.output(b.op("cast", {{"x", x}, {"dtype", constStr("fp16")}}, DType::F16, {3}));
  b.output(x);
  Tensor in = Tensor::fromF32({1.0001f, -2.5f, 65519.0f}, {3});
  auto f32 = runOnce(b, {{"x", in}});
  EXPECT_EQ(f32[0].floatAt(0), halfToFloat(floatToHalf(1.0001f))); // declared fp16 output
  auto f16 = runOnce(b, {{"x", in}}, runtime::Precision::FP16);
  EXPECT_EQ(f16[0].floatAt(0), halfToFloat(floatToHalf(1.0001f)));
  EXPECT_EQ(in.floatAt(0), 1.0001f);
  EXPECT_EQ(f16[1].floatAt(0), 1.0001f);
}

} // namespace
