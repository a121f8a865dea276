//===- ShapeTest.cpp - Data movement and tensor creation kernels ----------===//
//
// Expected values are written out by hand from the op definitions.
//
//===----------------------------------------------------------------------===//
#include "RuntimeTestUtil.h"

using namespace anefit;
using namespace anefit::test;

namespace {

std::vector<float> iota(int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i)
    v[i] = static_cast<float>(i);
  return v;
}

TEST(Shape, ReshapeInfersMinusOne) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {2, 6});
  b.output(b.op("reshape", {{"x", x}, {"shape", constI32({3, -1}, {2})}}, DType::F32, {3, 4}));
  auto out = runOnce(b, {{"x", Tensor::fromF32(iota(12), {2, 6})}});
  expectNear(out[0], iota(12), {3, 4});
}

TEST(Shape, ReshapeWrongCountIsInputError) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {2, 6});
  b.output(b.op("reshape", {{"x", x}, {"shape", constI32({5, 5}, {2})}}, DType::F32, {5, 5}));
  EXPECT_THROW(runOnce(b, {{"x", Tensor::fromF32(iota(12), {2, 6})}}), InputError);
}

TEST(Shape, TransposeExpandSqueeze) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::I32, {2, 3});
  Value *t = b.op("transpose", {{"x", x}, {"perm", constI32({1, 0}, {2})}}, DType::I32, {3, 2});
  Value *e =
      b.op("expand_dims", {{"x", t}, {"axes", constI32({0, -1}, {2})}}, DType::I32, {1, 3, 2, 1});
  b.output(t);
  b.output(e);
  b.output(b.op("squeeze", {{"x", e}}, DType::I32, {3, 2}));
  auto out = runOnce(b, {{"x", Tensor::fromI32({0, 1, 2, 3, 4, 5}, {2, 3})}});
  expectInts(out[0], {0, 3, 1, 4, 2, 5}, {3, 2});
  EXPECT_EQ(out[1].shape(), (Shape{1, 3, 2, 1}));
  expectInts(out[2], {0, 3, 1, 4, 2, 5}, {3, 2});
}

TEST(Shape, ConcatPlainAndInterleaved) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {2, 2});
  Value *y = b.input("y", DType::F32, {2, 2});
  b.output(b.op("concat", {{"values", std::vector<Value *>{x, y}}, {"axis", scalarI32(1)}},
                DType::F32, {2, 4}));
  b.output(b.op("concat",
                {{"values", std::vector<Value *>{x, y}},
                 {"axis", scalarI32(0)},
                 {"interleave", scalarBool(true)}},
                DType::F32, {4, 2}));
  auto out = runOnce(b, {{"x", Tensor::fromF32({1, 2, 3, 4}, {2, 2})},
                         {"y", Tensor::fromF32({5, 6, 7, 8}, {2, 2})}});
  expectNear(out[0], {1, 2, 5, 6, 3, 4, 7, 8}, {2, 4});
  expectNear(out[1], {1, 2, 5, 6, 3, 4, 7, 8}, {4, 2});
}

TEST(Shape, SplitBySizesAndStack) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {1, 6});
  auto parts =
      b.ops("split", {{"x", x}, {"split_sizes", constI32({1, 2, 3}, {3})}, {"axis", scalarI32(1)}},
            {Type::tensor(DType::F32, std::vector<int64_t>{1, 1}),
             Type::tensor(DType::F32, std::vector<int64_t>{1, 2}),
             Type::tensor(DType::F32, std::vector<int64_t>{1, 3})});
  for (Value *p : parts)
    b.output(p);
  b.output(b.op("stack", {{"values", std::vector<Value *>{x, x}}, {"axis", scalarI32(0)}},
                DType::F32, {2, 1, 6}));
  auto out = runOnce(b, {{"x", Tensor::fromF32(iota(6), {1, 6})}});
  expectNear(out[0], {0}, {1, 1});
  expectNear(out[1], {1, 2}, {1, 2});
  expectNear(out[2], {3, 4, 5}, {1, 3});
  EXPECT_EQ(out[3].shape(), (Shape{2, 1, 6}));
}

TEST(Shape, SliceByIndexMasksNegativeStrideSqueeze) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {3, 4});
  // x[1:, ::-2] and x[-1, 1:3] (row squeezed).
  b.output(b.op("slice_by_index",
                {{"x", x},
                 {"begin", constI32({1, 0}, {2})},
                 {"end", constI32({0, 0}, {2})},
                 {"stride", constI32({1, -2}, {2})},
                 {"begin_mask", constBool({false, true}, {2})},
                 {"end_mask", constBool({true, true}, {2})}},
                DType::F32, {2, 2}));
  b.output(b.op("slice_by_index",
                {{"x", x},
                 {"begin", constI32({-1, 1}, {2})},
                 {"end", constI32({0, 3}, {2})},
                 {"squeeze_mask", constBool({true, false}, {2})}},
                DType::F32, {2}));
  b.output(b.op("slice_by_size",
                {{"x", x}, {"begin", constI32({0, 2}, {2})}, {"size", constI32({-1, 2}, {2})}},
                DType::F32, {3, 2}));
  auto out = runOnce(b, {{"x", Tensor::fromF32(iota(12), {3, 4})}});
  expectNear(out[0], {7, 5, 11, 9}, {2, 2});
  expectNear(out[1], {9, 10}, {2});
  expectNear(out[2], {2, 3, 6, 7, 10, 11}, {3, 2});
}

TEST(Shape, SliceUpdateWithRuntimeBegin) {
  // The KV-cache write: cache[:, pos:pos+1, :] = update, pos at run time.
  ProgramBuilder b;
  Value *cache = b.input("cache", DType::F32, {1, 4, 2});
  Value *pos = b.input("pos", DType::I32, {3});
  Value *end = b.input("end", DType::I32, {3});
  Value *upd = b.input("update", DType::F32, {1, 1, 2});
  b.output(b.op("slice_update", {{"x", cache}, {"update", upd}, {"begin", pos}, {"end", end}},
                DType::F32, {1, 4, 2}));
  auto out = runOnce(b, {{"cache", Tensor::fromF32(iota(8), {1, 4, 2})},
                         {"pos", Tensor::fromI32({0, 2, 0}, {3})},
                         {"end", Tensor::fromI32({1, 3, 2}, {3})},
                         {"update", Tensor::fromF32({-1, -2}, {1, 1, 2})}});
  expectNear(out[0], {0, 1, 2, 3, -1, -2, 6, 7}, {1, 4, 2});
}

TEST(Shape, GatherFamily) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {3, 2});
  b.output(b.op("gather", {{"x", x}, {"indices", constI32({2, 0, -1}, {3})}}, DType::F32, {3, 2}));
  b.output(b.op("gather", {{"x", x}, {"indices", constI32({1}, {1})}, {"axis", scalarI32(1)}},
                DType::F32, {3, 1}));
  b.output(b.op("gather_along_axis",
                {{"x", x}, {"indices", constI32({1, 0, 0}, {3, 1})}, {"axis", scalarI32(1)}},
                DType::F32, {3, 1}));
  b.output(
      b.op("gather_nd", {{"x", x}, {"indices", constI32({2, 1, 0, 0}, {2, 2})}}, DType::F32, {2}));
  auto out = runOnce(b, {{"x", Tensor::fromF32(iota(6), {3, 2})}});
  expectNear(out[0], {4, 5, 0, 1, 4, 5}, {3, 2});
  expectNear(out[1], {1, 3, 5}, {3, 1});
  expectNear(out[2], {1, 2, 4}, {3, 1});
  expectNear(out[3], {5, 0}, {2});
}

TEST(Shape, GatherFromFp16TableReadsRowsInPlace) {
  ProgramBuilder b;
  Value *idx = b.input("tokens", DType::I32, {1, 2});
  b.output(b.op("gather",
                {{"x", constF16({0.5f, 1.5f, 2.5f, 3.5f, -1, -2}, {3, 2})}, {"indices", idx}},
                DType::F16, {1, 2, 2}));
  auto out = runOnce(b, {{"tokens", Tensor::fromI32({2, 1}, {1, 2})}});
  expectNear(out[0], {-1, -2, 2.5f, 3.5f}, {1, 2, 2});
}

TEST(Shape, GatherOutOfRangeIsInputError) {
  ProgramBuilder b;
  Value *idx = b.input("i", DType::I32, {1});
  b.output(b.op("gather", {{"x", constF32({1, 2}, {2})}, {"indices", idx}}, DType::F32, {1}));
  EXPECT_THROW(runOnce(b, {{"i", Tensor::fromI32({2}, {1})}}), InputError);
}

TEST(Shape, ScatterModes) {
  const std::pair<const char *, std::vector<float>> cases[] = {
      {"update", {10, 1, 20, 3}}, {"add", {10, 1, 22, 3}}, {"mul", {0, 1, 40, 3}},
      {"max", {10, 1, 20, 3}},    {"min", {0, 1, 2, 3}},
  };
  for (auto &[mode, want] : cases) {
    ProgramBuilder b;
    Value *data = b.input("data", DType::F32, {4});
    b.output(b.op("scatter",
                  {{"data", data},
                   {"indices", constI32({0, 2}, {2})},
                   {"updates", constF32({10, 20}, {2})},
                   {"mode", constStr(mode)}},
                  DType::F32, {4}));
    auto out = runOnce(b, {{"data", Tensor::fromF32(iota(4), {4})}});
    expectNear(out[0], want, {4});
  }
}

TEST(Shape, ScatterAlongAxisAndNd) {
  ProgramBuilder b;
  Value *data = b.input("data", DType::I32, {2, 2});
  b.output(b.op("scatter_along_axis",
                {{"data", data},
                 {"indices", constI32({1, 0}, {2, 1})},
                 {"updates", constI32({7, 8}, {2, 1})},
                 {"axis", scalarI32(1)},
                 {"mode", constStr("update")}},
                DType::I32, {2, 2}));
  b.output(
      b.op("scatter_nd",
           {{"data", data}, {"indices", constI32({1, 1}, {1, 2})}, {"updates", constI32({5}, {1})}},
           DType::I32, {2, 2}));
  auto out = runOnce(b, {{"data", Tensor::fromI32({0, 1, 2, 3}, {2, 2})}});
  expectInts(out[0], {0, 7, 8, 3}, {2, 2});
  expectInts(out[1], {0, 1, 2, 8}, {2, 2});
}

TEST(Shape, TilePadReverse) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {1, 3});
  b.output(b.op("tile", {{"x", x}, {"reps", constI32({2, 1}, {2})}}, DType::F32, {2, 3}));
  b.output(b.op("pad", {{"x", x}, {"pad", constI32({1, 2}, {2})}, {"constant_val", scalarF32(9)}},
                DType::F32, {1, 6}));
  b.output(b.op("pad", {{"x", x}, {"pad", constI32({2, 1}, {2})}, {"mode", constStr("reflect")}},
                DType::F32, {1, 6}));
  b.output(b.op("pad", {{"x", x}, {"pad", constI32({1, 1}, {2})}, {"mode", constStr("replicate")}},
                DType::F32, {1, 5}));
  b.output(b.op("reverse", {{"x", x}, {"axes", constI32({-1}, {1})}}, DType::F32, {1, 3}));
  auto out = runOnce(b, {{"x", Tensor::fromF32({1, 2, 3}, {1, 3})}});
  expectNear(out[0], {1, 2, 3, 1, 2, 3}, {2, 3});
  expectNear(out[1], {9, 1, 2, 3, 9, 9}, {1, 6});
  expectNear(out[2], {3, 2, 1, 2, 3, 2}, {1, 6});
  expectNear(out[3], {1, 1, 2, 3, 3}, {1, 5});
  expectNear(out[4], {3, 2, 1}, {1, 3});
}

TEST(Shape, BandPartKeepsTheBand) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {3, 3});
  b.output(b.op("band_part", {{"x", x}, {"lower", scalarI32(0)}}, DType::F32, {3, 3}));
  b.output(b.op("band_part", {{"x", x}, {"lower", scalarI32(1)}, {"upper", scalarI32(0)}},
                DType::F32, {3, 3}));
  auto out = runOnce(b, {{"x", Tensor::fromF32(std::vector<float>(9, 1), {3, 3})}});
  expectNear(out[0], {1, 1, 1, 0, 1, 1, 0, 0, 1}, {3, 3});
  expectNear(out[1], {1, 0, 0, 1, 1, 0, 0, 1, 1}, {3, 3});
}

TEST(Shape, CreatorsFillRangeShapeOneHot) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::I32, {2, 3});
  Value *shp = b.op("shape", {{"x", x}}, DType::I32, {2});
  b.output(shp);
  b.output(b.op("fill", {{"shape", shp}, {"value", scalarF32(2.5f)}}, DType::F32, {2, 3}));
  b.output(b.op("range_1d",
                {{"start", scalarI32(1)}, {"end", scalarI32(8)}, {"step", scalarI32(3)}},
                DType::I32, {3}));
  b.output(b.op("range_1d",
                {{"start", scalarF32(0)}, {"end", scalarF32(-1)}, {"step", scalarF32(-0.5f)}},
                DType::F32, {2}));
  b.output(b.op("one_hot",
                {{"indices", constI32({2, 0}, {2})}, {"one_hot_vector_size", scalarI32(3)}},
                DType::I32, {2, 3}));
  auto out = runOnce(b, {{"x", Tensor::fromI32({0, 0, 0, 0, 0, 0}, {2, 3})}});
  expectInts(out[0], {2, 3}, {2});
  expectNear(out[1], std::vector<float>(6, 2.5f), {2, 3});
  expectInts(out[2], {1, 4, 7}, {3});
  expectNear(out[3], {0, -0.5f}, {2});
  expectInts(out[4], {0, 0, 1, 1, 0, 0}, {2, 3});
}

TEST(Shape, UpsampleNearestAndBilinear) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {1, 1, 1, 2});
  b.output(
      b.op("upsample_nearest_neighbor",
           {{"x", x}, {"scale_factor_height", scalarF32(2)}, {"scale_factor_width", scalarF32(2)}},
           DType::F32, {1, 1, 2, 4}));
  b.output(
      b.op("upsample_bilinear",
           {{"x", x}, {"scale_factor_height", scalarF32(1)}, {"scale_factor_width", scalarF32(2)}},
           DType::F32, {1, 1, 1, 4}));
  auto out = runOnce(b, {{"x", Tensor::fromF32({0, 3}, {1, 1, 1, 2})}});
  expectNear(out[0], {0, 0, 3, 3, 0, 0, 3, 3}, {1, 1, 2, 4});
  // align_corners defaults to true: 0, 1, 2, 3.
  expectNear(out[1], {0, 1, 2, 3}, {1, 1, 1, 4});
}

} // namespace

namespace {

TEST(Shape, CropResizeNonZero) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {1, 1, 2, 3});
  b.output(b.op(
      "crop",
      {{"x", x}, {"crop_height", constI32({1, 0}, {2})}, {"crop_width", constI32({0, 1}, {2})}},
      DType::F32, {1, 1, 1, 2}));
  b.output(
      b.op("resize_nearest_neighbor",
           {{"x", x}, {"target_size_height", scalarI32(1)}, {"target_size_width", scalarI32(6)}},
           DType::F32, {1, 1, 1, 6}));
  b.output(b.op("non_zero", {{"x", x}}, DType::I32, {3, 4}));
  auto out = runOnce(b, {{"x", Tensor::fromF32({0, 1, 0, 2, 0, 3}, {1, 1, 2, 3})}});
  expectNear(out[0], {2, 0}, {1, 1, 1, 2});
  expectNear(out[1], {0, 0, 1, 1, 0, 0}, {1, 1, 1, 6});
  expectInts(out[2], {0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 1, 2}, {3, 4});
}

TEST(Shape, PixelUnshuffleInvertsPixelShuffle) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::F32, {1, 4, 1, 2});
  Value *up =
      b.op("pixel_shuffle", {{"x", x}, {"upscale_factor", scalarI32(2)}}, DType::F32, {1, 1, 2, 4});
  b.output(up);
  b.output(b.op("pixel_unshuffle", {{"x", up}, {"downscale_factor", scalarI32(2)}}, DType::F32,
                {1, 4, 1, 2}));
  std::vector<float> v = {0, 1, 2, 3, 4, 5, 6, 7};
  auto out = runOnce(b, {{"x", Tensor::fromF32(v, {1, 4, 1, 2})}});
  expectNear(out[0], {0, 2, 1, 3, 4, 6, 5, 7}, {1, 1, 2, 4});
  expectNear(out[1], v, {1, 4, 1, 2});
}

TEST(Shape, ReverseSequencePerBatchLength) {
  ProgramBuilder b;
  Value *x = b.input("x", DType::I32, {2, 3});
  b.output(b.op("reverse_sequence",
                {{"x", x},
                 {"lengths", constI32({2, 3}, {2})},
                 {"seq_axis", scalarI32(1)},
                 {"batch_axis", scalarI32(0)}},
                DType::I32, {2, 3}));
  auto out = runOnce(b, {{"x", Tensor::fromI32({1, 2, 3, 4, 5, 6}, {2, 3})}});
  expectInts(out[0], {2, 1, 3, 6, 5, 4}, {2, 3});
}

} // namespace
