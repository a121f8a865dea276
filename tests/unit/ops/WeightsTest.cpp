//===- WeightsTest.cpp - The one weight counter ---------------------------===//
//
// Stored versus dense sizes of compressed weights, blobs shared between
// functions counted once, and the weights of a subset of ops (a split
// region). tests/python/test_weight_counter.py checks the same counter
// against coremltools' own sizes on real compressed packages.
//
//===----------------------------------------------------------------------===//
#include "ops/Weights.h"
#include "ir/AsmParser.h"

#include <gtest/gtest.h>

using namespace anefit;

namespace {

constexpr std::string_view kTwoFunctions = R"(
main[CoreML8](%x: (1, 64, fp16)(Tensor)) {
  block0() {
    %d: (64, 64, int4)(Tensor) = const(val=BLOBFILE(path="@model_path/weights/weight.bin", offset=64), name="d")
    %s: (64, 2, fp16)(Tensor) = const(val=BLOBFILE(path="@model_path/weights/weight.bin", offset=4224), name="s")
    %w: (64, 64, fp16)(Tensor) = constexpr_blockwise_shift_scale(data=%d, scale=%s, name="w")
    %b: (64, fp16)(Tensor) = const(val=BLOBFILE(path="@model_path/weights/weight.bin", offset=4544), name="b")
    %y: (1, 64, fp16)(Tensor) = linear(x=%x, weight=%w, bias=%b, name="y")
  } -> (%y)
}

other[CoreML8](%x: (1, 64, fp16)(Tensor)) {
  block0() {
    %d2: (64, 64, int4)(Tensor) = const(val=BLOBFILE(path="@model_path/weights/weight.bin", offset=64), name="d2")
    %s2: (64, 1, fp16)(Tensor) = const(val=BLOBFILE(path="@model_path/weights/weight.bin", offset=4800), name="s2")
    %w2: (64, 64, fp16)(Tensor) = constexpr_blockwise_shift_scale(data=%d2, scale=%s2, name="w2")
    %y2: (1, 64, fp16)(Tensor) = linear(x=%x, weight=%w2, name="y2")
  } -> (%y2)
}
)";

TEST(Weights, StoredAndDenseOfBlockwiseInt4) {
  auto model = parseModelText(kTwoFunctions, "two.mil", nullptr);
  const Program &p = *model->program;
  WeightCount main = countWeights(p, p.findFunction("main"));
  // int4 data packs two per byte; scales and bias are fp16.
  EXPECT_EQ(main.storedBytes, 64u * 64 / 2 + 64 * 2 * 2 + 64 * 2);
  EXPECT_EQ(main.storedElements, 64u * 64 + 128 + 64);
  // The linear reads the decompressed fp16 weight and the bias.
  EXPECT_EQ(main.denseBytes, 64u * 64 * 2 + 64 * 2);
  EXPECT_EQ(main.byScheme[size_t(WeightScheme::Blockwise)].bytes, 2048u + 256);
  EXPECT_EQ(main.byScheme[size_t(WeightScheme::Dense)].bytes, 128u);
  EXPECT_EQ(main.byDType.at("int4").bytes, 2048u);
  EXPECT_TRUE(main.compressed());

  // One scale per output channel is per-channel quantization, not blockwise.
  WeightCount other = countWeights(p, p.findFunction("other"));
  EXPECT_EQ(other.byScheme[size_t(WeightScheme::PerChannel)].bytes, 2048u + 128);
  EXPECT_EQ(other.byScheme[size_t(WeightScheme::Blockwise)].bytes, 0u);

  // The int4 blob both functions bind is stored once in the model.
  WeightCount all = countWeights(p);
  EXPECT_EQ(all.storedBytes, main.storedBytes + other.storedBytes - 2048);
  EXPECT_EQ(all.denseBytes, main.denseBytes + other.denseBytes);
}

TEST(Weights, OfARegionFollowsDecompressionChains) {
  auto model = parseModelText(kTwoFunctions, "two.mil", nullptr);
  const Function &fn = *model->program->findFunction("main");
  const Operation *linear = nullptr;
  walk(*fn.body, [&](const Operation &op) {
    if (op.type == "linear")
      linear = &op;
  });
  ASSERT_TRUE(linear);
  std::vector<const Operation *> ops{linear};
  WeightCount r = countWeightsOf(ops);
  EXPECT_EQ(r.storedBytes, countWeights(*model->program, &fn).storedBytes);
  EXPECT_EQ(r.denseBytes, 64u * 64 * 2 + 64 * 2);
  EXPECT_EQ(countWeightsOf({}).storedBytes, 0u);
}

} // namespace
