//===- ModelRunTest.cpp - Binding inputs and stepping a model's function --===//
#include "runtime/ModelRun.h"
#include "support/Random.h"

#include "TestSupport.h"
#include "ir/AsmParser.h"
#include "ir/StateMap.h"
#include "support/Error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace anefit;
using anefit::test::errorOf;
using namespace anefit::runtime;

namespace {

/// The state-to-io form of acc <- acc + x, with its state map in metadata.
std::unique_ptr<Model> movedAccumulator() {
  auto m = parseModelText(R"(
main[CoreML7](%x: (1, 2, fp32)(Tensor), %acc: (1, 2, fp32)(Tensor)) {
  block0() {
    %s: (1, 2, fp32)(Tensor) = add(x=%acc, y=%x, name="s")
    %acc_out: (1, 2, fp32)(Tensor) = identity(x=%s, name="acc_out")
  } -> (%s, %acc_out)
}
)",
                          "moved.mil", nullptr);
  StateMap map;
  map.entries.push_back({"acc", "acc", "acc_out", {1, 2}, DType::F32, {"main"}, true});
  m->description.metadata.userDefined[StateMap::kMetadataKey] = map.toJson(-1);
  return m;
}

float first(const std::vector<NamedTensor> &outs, const std::string &name) {
  for (const NamedTensor &nt : outs)
    if (nt.name == name)
      return nt.tensor.floatAt(0);
  throw std::runtime_error("no output " + name);
}

} // namespace

TEST(ParseStepKey, SplitsStepPrefixes) {
  EXPECT_EQ(parseStepKey("step3/x"), std::make_pair(int64_t(3), std::string("x")));
  EXPECT_EQ(parseStepKey("step12/state/acc"),
            std::make_pair(int64_t(12), std::string("state/acc")));
  EXPECT_FALSE(parseStepKey("x"));
  EXPECT_FALSE(parseStepKey("step/x"));
  EXPECT_FALSE(parseStepKey("stepx/x"));
  EXPECT_FALSE(parseStepKey("step1234567890/x"));
}

TEST(RunInputs, ArchiveGroupsBySteps) {
  RunInputs in;
  in.addArchive({{"step0/x", Tensor::fromF32({1, 1}, {1, 2})},
                 {"step2/x", Tensor::fromF32({3, 3}, {1, 2})},
                 {"w", Tensor::fromF32({0, 0}, {1, 2})}});
  EXPECT_EQ(in.perStepCount(), 3);
  EXPECT_TRUE(in.gives("x", 0));
  EXPECT_FALSE(in.gives("x", 1));
  EXPECT_TRUE(in.gives("w", 1));
}

TEST(ModelRun, CarriesTheStateMapLikeAHost) {
  auto m = movedAccumulator();
  ModelRunOptions o;
  o.inputs.shared["x"] = Tensor::fromF32({1, 2}, {1, 2});
  o.steps = 3;
  ModelRun run(*m, o);
  ASSERT_EQ(run.carries().size(), 1u);
  EXPECT_TRUE(run.stepped());
  std::vector<float> seen;
  while (!run.done())
    seen.push_back(first(run.next().outputs, "s"));
  EXPECT_EQ(seen, (std::vector<float>{1, 2, 3}));
}

TEST(ModelRun, AGivenInputIsNotCarried) {
  auto m = movedAccumulator();
  ModelRunOptions o;
  o.inputs.shared["x"] = Tensor::fromF32({1, 2}, {1, 2});
  o.inputs.shared["acc"] = Tensor::fromF32({10, 10}, {1, 2});
  o.steps = 2;
  ModelRun run(*m, o);
  EXPECT_TRUE(run.carries().empty());
  EXPECT_EQ(first(run.next().outputs, "s"), 11.0f);
  EXPECT_EQ(first(run.next().outputs, "s"), 11.0f);
}

TEST(ModelRun, RandomInputsAreSeeded) {
  auto m = movedAccumulator();
  ModelRunOptions o;
  o.random = true;
  o.seed = 5;
  ModelRun a(*m, o), b(*m, o);
  EXPECT_FALSE(a.stepped());
  EXPECT_EQ(first(a.next().outputs, "s"), first(b.next().outputs, "s"));
  EXPECT_TRUE(a.done());
}

TEST(ModelRun, NamesUnknownAndMissingInputs) {
  auto m = movedAccumulator();
  ModelRunOptions o;
  o.inputs.shared["typo"] = Tensor::fromF32({1, 2}, {1, 2});
  EXPECT_EQ(errorOf([&] { ModelRun(*m, o).next(); }),
            "function 'main': unknown input 'typo' (inputs: acc, x)");
  ModelRunOptions none;
  none.inputs.perStep[1]["x"] = Tensor::fromF32({1, 2}, {1, 2});
  none.steps = 2;
  none.missingInputHint = "use --input";
  EXPECT_EQ(errorOf([&] { ModelRun(*m, none).next(); }),
            "missing input 'x' of type (1, 2, fp32)(Tensor) for step 0; use --input");
  ModelRunOptions fn;
  fn.function = "other";
  EXPECT_EQ(errorOf([&] { ModelRun(*m, fn); }), "moved.mil: no function 'other' (functions: main)");
}

TEST(TensorStats, CountsNaNAndInfinity) {
  TensorStats s = statsOf(Tensor::fromF32({1, -2, NAN, INFINITY}, {4}));
  EXPECT_EQ(s.min, -2);
  EXPECT_TRUE(std::isinf(s.max));
  EXPECT_EQ(s.mean, -0.5);
  EXPECT_EQ(s.nans, 1);
  EXPECT_EQ(s.infs, 1);
  EXPECT_EQ(s.finite, 2);
  EXPECT_TRUE(std::isnan(statsOf(Tensor::fromF32({NAN}, {1})).mean));
}

TEST(TensorStats, BlocksAgreeWithTheElementLoop) {
  // Sizes around the block of 4096 and the 4-wide loop, fp32 and fp16, with
  // and without NaN / infinity in some blocks.
  std::mt19937 rng(3);
  for (int64_t n : {1, 3, 4, 7, 4095, 4096, 4097, 9001}) {
    for (int special = 0; special < 3; ++special) {
      std::vector<float> v(static_cast<size_t>(n));
      for (float &x : v)
        x = normalFloat(rng, 0.5f, 3.0f);
      if (special == 1)
        v[static_cast<size_t>(n / 2)] = NAN;
      if (special == 2) {
        v.back() = -INFINITY;
        v.front() = NAN;
      }
      for (DType dt : {DType::F32, DType::F16}) {
        Tensor t = Tensor::fromF32(v, {n}).convertTo(dt);
        double mn = INFINITY, mx = -INFINITY, sum = 0;
        int64_t nans = 0, infs = 0, finite = 0;
        for (int64_t i = 0; i < n; ++i) {
          double x = t.floatAt(i);
          if (std::isnan(x)) {
            ++nans;
            continue;
          }
          mn = std::min(mn, x);
          mx = std::max(mx, x);
          if (std::isinf(x))
            ++infs;
          else
            sum += x, ++finite;
        }
        TensorStats s = statsOf(t);
        SCOPED_TRACE("n=" + std::to_string(n) + " special=" + std::to_string(special) +
                     " dtype=" + std::string(dtypeName(dt)));
        EXPECT_EQ(s.min, mn);
        EXPECT_EQ(s.max, mx);
        EXPECT_EQ(s.nans, nans);
        EXPECT_EQ(s.infs, infs);
        EXPECT_EQ(s.finite, finite);
        // Summed in another order: equal to a few ulps of the sum's size.
        if (finite == 0)
          EXPECT_TRUE(std::isnan(s.mean));
        else
          EXPECT_NEAR(s.mean, sum / double(finite), 1e-12 * (1 + std::abs(sum)));
      }
    }
  }
}
