//===- StepperTest.cpp - Stepping like a host, comparing two runs ---------===//
//
// The stepper behind fix/split/run: states kept and rounded between steps,
// carries from outputs to inputs (the state map's host loop), chains of
// functions run within a step, and the comparator's tolerance, NaN and
// first-mismatch rules.
//
//===----------------------------------------------------------------------===//
#include "runtime/Stepper.h"
#include "ir/AsmParser.h"
#include "ir/StateMap.h"
#include "support/DType.h"
#include "support/Error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

using namespace anefit;
using namespace anefit::runtime;

namespace {

std::unique_ptr<Model> parse(const char *text) { return parseModelText(text, "t.mil", nullptr); }

/// acc <- acc + x, as a Core ML state.
constexpr const char *kStateful = R"(
main[CoreML8](%x: (1, 2, fp32)(Tensor), %acc: (1, 2, fp16)(State)) {
  block0() {
    %r: (1, 2, fp16)(Tensor) = read_state(input=%acc, name="r")
    %xh: (1, 2, fp16)(Tensor) = cast(x=%x, dtype="fp16", name="xh")
    %s: (1, 2, fp16)(Tensor) = add(x=%r, y=%xh, name="s")
    write_state(input=%acc, data=%s, name="w")
  } -> (%s)
}
)";

/// The same with the state moved to an input and an output, as state-to-io
/// writes it.
constexpr const char *kMoved = R"(
main[CoreML7](%x: (1, 2, fp32)(Tensor), %acc: (1, 2, fp16)(Tensor)) {
  block0() {
    %xh: (1, 2, fp16)(Tensor) = cast(x=%x, dtype="fp16", name="xh")
    %s: (1, 2, fp16)(Tensor) = add(x=%acc, y=%xh, name="s")
    %acc_out: (1, 2, fp16)(Tensor) = identity(x=%s, name="acc_out")
  } -> (%s, %acc_out)
}
)";

StateMap accMap() {
  StateMap map;
  StateMapEntry e;
  e.state = "acc";
  e.input = "acc";
  e.output = "acc_out";
  e.shape = {1, 2};
  e.dtype = DType::F16;
  e.functions = {"main"};
  map.entries.push_back(e);
  return map;
}

const Tensor &output(const std::vector<NamedTensor> &outs, const std::string &name) {
  for (const NamedTensor &nt : outs)
    if (nt.name == name)
      return nt.tensor;
  throw std::runtime_error("no output " + name);
}

} // namespace

TEST(Stepper, KeepsStatesBetweenSteps) {
  auto m = parse(kStateful);
  Stepper s(*m->program->functions.front());
  for (int k = 1; k <= 3; ++k) {
    auto outs = s.step({{"x", Tensor::fromF32({1, 2}, {1, 2})}});
    EXPECT_EQ(output(outs, "s").floatAt(1), 2.0f * k);
  }
  EXPECT_EQ(s.stepsDone(), 3);
  ASSERT_TRUE(s.stateValue("acc"));
  EXPECT_EQ(s.stateValue("acc")->dtype(), DType::F16);
  EXPECT_EQ(s.stateValue("acc")->floatAt(0), 3.0f);
  EXPECT_FALSE(s.stateValue("nope"));
}

TEST(Stepper, RoundsStatesToTheirDeclaredDtype) {
  // fp32 0.1 is not an fp16 value: rounded, the state holds fp16(0.1).
  auto m = parse(kStateful);
  const Function &fn = *m->program->functions.front();
  StepperOptions raw;
  raw.roundStates = false;
  Stepper rounded(fn), kept(fn, {}, raw);
  TensorMap in{{"x", Tensor::fromF32({0.1f, 0.1f}, {1, 2})}};
  rounded.step(in);
  kept.step(in);
  float half = Tensor::fromF32({0.1f}, {1}).convertTo(DType::F16).floatAt(0);
  ASSERT_NE(half, 0.1f);
  EXPECT_EQ(rounded.states().find("acc")->floatAt(0), half);
  EXPECT_EQ(rounded.states().find("acc")->dtype(), DType::F32);
  EXPECT_EQ(kept.states().find("acc")->floatAt(0), 0.1f);
}

TEST(Stepper, StartsFromAGivenState) {
  auto m = parse(kStateful);
  Stepper s(*m->program->functions.front());
  s.setState("acc", Tensor::fromF32({10, 20}, {1, 2}));
  auto outs = s.step({{"x", Tensor::fromF32({1, 1}, {1, 2})}});
  EXPECT_EQ(output(outs, "s").floatAt(1), 21.0f);
  EXPECT_THROW(s.setState("nope", Tensor::fromF32({0, 0}, {1, 2})), InputError);
}

TEST(Stepper, CarriesFromTheStateMapReproduceTheState) {
  auto stateful = parse(kStateful);
  auto moved = parse(kMoved);
  const Function &fm = *moved->program->functions.front();
  CarryMap carries = carriesFromStateMap(accMap(), fm);
  ASSERT_EQ(carries.size(), 1u);
  EXPECT_EQ(carries[0].source, "state map");
  Stepper a(*stateful->program->functions.front()), b(fm, carries);
  // Moved inputs are not asked of the caller.
  ASSERT_EQ(b.externalInputs().size(), 1u);
  EXPECT_EQ(b.externalInputs()[0]->name, "x");
  Comparison cmp;
  for (int k = 0; k < 4; ++k) {
    TensorMap in{{"x", Tensor::fromF32({0.5f * k, -1.0f}, {1, 2})}};
    auto oa = a.step(in);
    auto ob = b.step(in);
    cmp.compareOutputs("step " + std::to_string(k) + ": ", oa, ob);
    cmp.compare("state", *a.states().find("acc"), output(ob, "acc_out"));
  }
  EXPECT_TRUE(cmp.ok()) << cmp.firstMismatch();
  EXPECT_EQ(cmp.compared(), 16u);
  EXPECT_EQ(cmp.maxAbsDiff(), 0.0);
}

TEST(Stepper, CarryStartsFromItsInitialValue) {
  auto moved = parse(kMoved);
  const Function &fm = *moved->program->functions.front();
  Stepper s(fm, {{"acc_out", "acc", Tensor::fromF32({5, 6}, {1, 2}), "test"}});
  auto outs = s.step({{"x", Tensor::fromF32({1, 1}, {1, 2})}});
  EXPECT_EQ(output(outs, "s").floatAt(0), 6.0f);
  outs = s.step({{"x", Tensor::fromF32({1, 1}, {1, 2})}});
  EXPECT_EQ(output(outs, "s").floatAt(0), 7.0f);
  // A given input wins over the carried value.
  outs = s.step({{"x", Tensor::fromF32({1, 1}, {1, 2})}, {"acc", Tensor::fromF32({0, 0}, {1, 2})}});
  EXPECT_EQ(output(outs, "s").floatAt(0), 1.0f);
}

TEST(Stepper, RejectsCarriesNamingNothing) {
  auto moved = parse(kMoved);
  const Function &fm = *moved->program->functions.front();
  EXPECT_THROW(Stepper(fm, {{"nope", "acc", std::nullopt, "test"}}), InputError);
  EXPECT_THROW(Stepper(fm, {{"acc_out", "nope", std::nullopt, "test"}}), InputError);
  // A state map naming other functions' values adds no carry here.
  StateMap map = accMap();
  map.entries[0].output = "elsewhere";
  EXPECT_TRUE(carriesFromStateMap(map, fm).empty());
}

TEST(Stepper, HostCarriesReadTheModelsStateMap) {
  auto moved = parse(kMoved);
  const Function &fm = *moved->program->functions.front();
  EXPECT_TRUE(hostCarries(*moved, fm).empty());
  moved->description.metadata.userDefined[StateMap::kMetadataKey] = accMap().toJson(-1);
  CarryMap carries = hostCarries(*moved, fm);
  ASSERT_EQ(carries.size(), 1u);
  EXPECT_EQ(carries[0].output, "acc_out");
  EXPECT_EQ(carries[0].input, "acc");
  moved->description.metadata.userDefined[StateMap::kMetadataKey] = "{not json";
  EXPECT_THROW(hostCarries(*moved, fm), InputError);
}

TEST(Stepper, ChainsFunctionsWithinAStep) {
  auto whole = parse(R"(
main[CoreML8](%x: (2, fp32)(Tensor), %w: (2, fp32)(Tensor)) {
  block0() {
    %a: (2, fp32)(Tensor) = add(x=%x, y=%x, name="a")
    %b: (2, fp32)(Tensor) = mul(x=%a, y=%w, name="b")
  } -> (%b)
}
)");
  auto first = parse(R"(
r0[CoreML8](%x: (2, fp32)(Tensor)) {
  block0() {
    %a: (2, fp32)(Tensor) = add(x=%x, y=%x, name="a")
  } -> (%a)
}
)");
  auto second = parse(R"(
r1[CoreML8](%a: (2, fp32)(Tensor), %w: (2, fp32)(Tensor)) {
  block0() {
    %b: (2, fp32)(Tensor) = mul(x=%a, y=%w, name="b")
  } -> (%b)
}
)");
  Stepper one(*whole->program->functions.front());
  Stepper chain(
      {first->program->functions.front().get(), second->program->functions.front().get()});
  ASSERT_EQ(chain.externalInputs().size(), 2u);
  EXPECT_EQ(chain.externalInputs()[0]->name, "x");
  EXPECT_EQ(chain.externalInputs()[1]->name, "w");
  TensorMap in{{"x", Tensor::fromF32({1, 2}, {2})}, {"w", Tensor::fromF32({3, 4}, {2})}};
  auto expected = one.step(in);
  auto got = chain.step(in);
  ASSERT_EQ(got.size(), 2u); // the boundary value a, then b
  EXPECT_EQ(got[0].name, "a");
  Comparison cmp;
  cmp.compareOutputs("", expected, got);
  EXPECT_TRUE(cmp.ok()) << cmp.firstMismatch();
  EXPECT_EQ(output(got, "b").floatAt(1), 16.0f);
  in["typo"] = Tensor::fromF32({0, 0}, {2});
  EXPECT_THROW(chain.step(in), InputError);
}

TEST(RandomInputs, AreSeededAndSkipWhatIsGiven) {
  auto moved = parse(kMoved);
  const Function &fm = *moved->program->functions.front();
  FunctionDescription desc = moved->description.describe("main");
  std::mt19937_64 r1(7), r2(7), r3(8);
  TensorMap a = randomInputs(fm, desc, r1), b = randomInputs(fm, desc, r2);
  TensorMap c = randomInputs(fm, desc, r3, {"acc"});
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a.at("x").toFloats(), b.at("x").toFloats());
  EXPECT_NE(a.at("x").toFloats(), c.at("x").toFloats());
  EXPECT_EQ(c.count("acc"), 0u);
}

TEST(Comparison, ToleranceNaNAndFirstMismatch) {
  Comparison cmp({0.1, 0.0});
  cmp.compare("a", Tensor::fromF32({1, NAN, 3}, {3}), Tensor::fromF32({1.05f, NAN, 3}, {3}));
  EXPECT_TRUE(cmp.ok());
  EXPECT_EQ(cmp.compared(), 2u);      // the NaN pair is not counted ...
  EXPECT_EQ(cmp.bothNonFinite(), 1u); // ... but counted and named
  EXPECT_EQ(cmp.firstNonFinite(), "a: element 1 is nan in both");
  EXPECT_NEAR(cmp.maxAbsDiff(), 0.05, 1e-6);
  cmp.compare("b", Tensor::fromF32({1, 2}, {2}), Tensor::fromF32({1, 2.5f}, {2}));
  cmp.compare("c", Tensor::fromF32({1}, {1}), Tensor::fromF32({NAN}, {1}));
  EXPECT_FALSE(cmp.ok());
  EXPECT_EQ(cmp.firstMismatch(), "b: element 1 is 2.5, was 2");
  EXPECT_TRUE(std::isinf(cmp.maxAbsDiff()));
}

TEST(Comparison, TheSameInfinityIsNotComparedAnOppositeOneDiffers) {
  Comparison cmp({0.1, 0.0});
  cmp.compare("a", Tensor::fromF32({-INFINITY, INFINITY}, {2}),
              Tensor::fromF32({-INFINITY, INFINITY}, {2}));
  EXPECT_TRUE(cmp.ok());
  EXPECT_EQ(cmp.compared(), 0u);
  EXPECT_EQ(cmp.bothNonFinite(), 2u);
  EXPECT_EQ(cmp.firstNonFinite(), "a: element 0 is -inf in both");
  cmp.compare("b", Tensor::fromF32({INFINITY, NAN}, {2}),
              Tensor::fromF32({-INFINITY, INFINITY}, {2}));
  EXPECT_FALSE(cmp.ok());
  EXPECT_EQ(cmp.firstMismatch(), "b: element 0 is -inf, was inf");
  EXPECT_EQ(cmp.bothNonFinite(), 2u);
  EXPECT_EQ(cmp.compared(), 2u);
  // rtol times an infinite expected value does not make every value pass.
  Comparison rel({0.0, 1e-3});
  rel.compare("c", Tensor::fromF32({INFINITY}, {1}), Tensor::fromF32({5}, {1}));
  EXPECT_FALSE(rel.ok());
  EXPECT_EQ(rel.firstMismatch(), "c: element 0 is 5, was inf");
}

TEST(Comparison, RelativeToleranceScalesWithTheExpectedValue) {
  Comparison cmp({0.0, 0.01});
  cmp.compare("big", Tensor::fromF32({1000}, {1}), Tensor::fromF32({1005}, {1}));
  EXPECT_TRUE(cmp.ok());
  cmp.compare("small", Tensor::fromF32({1}, {1}), Tensor::fromF32({1.05f}, {1}));
  EXPECT_FALSE(cmp.ok());
}

TEST(Comparison, ElementsNearZeroAreHeldToTheTensorsScale) {
  // Logits of RMS ~1.7 and one near zero, as a dot product that cancels
  // leaves it: its rounding error is that of the terms, 1e-3 of the scale.
  Comparison cmp({0.0, 1e-3});
  cmp.compare("logits", Tensor::fromF32({2.0f, -2.0f, 0.005f}, {3}),
              Tensor::fromF32({2.0f, -2.0f, 0.0062f}, {3}));
  EXPECT_TRUE(cmp.ok()) << cmp.firstMismatch();
  // Past rtol times the RMS it is still a difference.
  cmp.compare("logits", Tensor::fromF32({2.0f, -2.0f, 0.005f}, {3}),
              Tensor::fromF32({2.0f, -2.0f, 0.01f}, {3}));
  EXPECT_FALSE(cmp.ok());
  // A tensor of one scale keeps the element-wise tolerance.
  Comparison flat({0.0, 1e-3});
  flat.compare("y", Tensor::fromF32({1.0f, 1.0f}, {2}), Tensor::fromF32({1.0f, 1.0015f}, {2}));
  EXPECT_FALSE(flat.ok());
}

TEST(Comparison, Fp16ValuesMayDifferByTheirStepsOnly) {
  // A cache entry of 0.26 stored in fp16, where fp16's step is 2^-12: the
  // eval of a 4w export after scale-norm saw such entries 2 steps apart.
  const float step = 1.0f / 4096, x = 0.26195f;
  Tolerance t{0.0, 0.0, 2};
  Comparison two(t);
  two.compareOutputs("main: step 1: ", {{"k_cache", Tensor::fromF32({x}, {1})}},
                     {{"k_cache", Tensor::fromF32({x + 2 * step}, {1})}}, {"k_cache"});
  EXPECT_TRUE(two.ok()) << two.firstMismatch();
  Comparison three(t);
  three.compare("k", Tensor::fromF32({x}, {1}), Tensor::fromF32({x + 3 * step}, {1}), true);
  EXPECT_FALSE(three.ok());
  // Not declared fp16: the steps do not apply.
  Comparison fp32(t);
  fp32.compareOutputs("main: step 1: ", {{"y", Tensor::fromF32({x}, {1})}},
                      {{"y", Tensor::fromF32({x + step}, {1})}}, {"k_cache"});
  EXPECT_FALSE(fp32.ok());
  // Below fp16's normal range the step is 2^-24.
  Comparison tiny(t);
  tiny.compare("k", Tensor::fromF32({0.0f}, {1}), Tensor::fromF32({std::ldexp(1.0f, -23)}, {1}),
               true);
  EXPECT_TRUE(tiny.ok()) << tiny.firstMismatch();
}

TEST(Comparison, ShapeChangesAndMissingOutputsAreMismatches) {
  Comparison shape;
  shape.compare("y", Tensor::fromF32({1, 2}, {2}), Tensor::fromF32({1, 2}, {1, 2}));
  EXPECT_FALSE(shape.ok());
  EXPECT_EQ(shape.firstMismatch(), "y: shape [2] became [1, 2]");
  Comparison missing;
  missing.compareOutputs("main: step 0: ", {{"y", Tensor::fromF32({1}, {1})}}, {});
  EXPECT_FALSE(missing.ok());
  EXPECT_EQ(missing.firstMismatch(), "main: step 0: output 'y': missing");
  Comparison exact; // the default tolerance is zero: any difference fails
  exact.compare("z", Tensor::fromF32({1}, {1}), Tensor::fromF32({1.0000001f}, {1}));
  EXPECT_FALSE(exact.ok());
}

namespace {

/// ExecuTorch's shape of a buffer around a Core ML delegate: an fp32 input
/// (the buffer), the new value returned as fp16, copied back by the host.
constexpr const char *kBufferIO = R"(
main[CoreML7](%x: (1, 2, fp32)(Tensor), %buf: (1, 2, fp32)(Tensor)) {
  block0() {
    %bh: (1, 2, fp16)(Tensor) = cast(x=%buf, dtype="fp16", name="bh")
    %xh: (1, 2, fp16)(Tensor) = cast(x=%x, dtype="fp16", name="xh")
    %s: (1, 2, fp16)(Tensor) = add(x=%bh, y=%xh, name="s")
  } -> (%s)
}
)";

} // namespace

TEST(Stepper, HostCarriesIncludeExecuTorchWriteBack) {
  auto m = parse(kBufferIO);
  const Function &fn = *m->program->functions.front();
  m->hostWriteBacks.push_back({"main", "s", "buf", "ExecuTorch aten::copy_ into buffer value 0"});
  CarryMap carries = hostCarries(*m, fn);
  ASSERT_EQ(carries.size(), 1u);
  EXPECT_EQ(carries[0].source, "ExecuTorch aten::copy_ into buffer value 0");
  EXPECT_FALSE(carries[0].initial); // zeros of the buffer, as ExecuTorch starts it
  Stepper s(fn, carries);
  ASSERT_EQ(s.externalInputs().size(), 1u);
  for (int k = 1; k <= 3; ++k) {
    // The fp16 output goes back into the fp32 buffer input, converted.
    auto outs = s.step({{"x", Tensor::fromF32({1.0f, 0.5f}, {1, 2})}});
    EXPECT_EQ(output(outs, "s").floatAt(0), 1.0f * k);
    EXPECT_EQ(output(outs, "s").floatAt(1), 0.5f * k);
  }
  // Write-backs of another function are not this one's.
  m->hostWriteBacks[0].function = "decode";
  EXPECT_TRUE(hostCarries(*m, fn).empty());
}

TEST(Stepper, HostCarriesRefuseAnUnreadableWriteBack) {
  auto m = parse(kBufferIO);
  m->hostWriteBackError = "p.pte#0: method 'forward' calls the delegate 2 times";
  try {
    hostCarries(*m, *m->program->functions.front());
    FAIL() << "expected an InputError";
  } catch (const InputError &e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("p.pte#0: method 'forward' calls the delegate 2 times; anefit cannot tell "
                       "which outputs ExecuTorch copies back into which inputs"),
              std::string::npos)
        << msg;
  }
}

namespace {

/// A KV cache written at a row, as an ExecuTorch export writes it: the
/// cache comes in as an input and goes out updated.
constexpr const char *kCacheWrite = R"(
main[CoreML7](%u: (1, 4, fp32)(Tensor), %cache: (3, 4, fp32)(Tensor)) {
  block0() {
    %n: (3, 4, fp32)(Tensor) = slice_update(x=%cache, update=%u, begin=[1, 0], end=[2, 4], name="n")
  } -> (%n)
}
)";

Tensor cacheOf(float v) { return Tensor::fromF32(std::vector<float>(12, v), {3, 4}); }

} // namespace

TEST(Interpreter, TakenInputsAreWrittenInPlace) {
  auto m = parse(kCacheWrite);
  Interpreter interp(*m->program->functions.front());
  StateContext states;
  TensorMap in{{"u", Tensor::fromF32({7, 7, 7, 7}, {1, 4})}, {"cache", cacheOf(1)}};
  const uint8_t *bytes = in.at("cache").bytes();
  auto outs = interp.run(std::move(in), states);
  // The update went into the cache's own bytes: no copy of the cache.
  EXPECT_EQ(outs.front().tensor.bytes(), bytes);
  EXPECT_EQ(outs.front().tensor.floatAt(0), 1.0f);
  EXPECT_EQ(outs.front().tensor.floatAt(4), 7.0f);
  EXPECT_FALSE(in.at("cache").valid());
}

TEST(Interpreter, InputsHeldElsewhereAreNeverWritten) {
  auto m = parse(kCacheWrite);
  Interpreter interp(*m->program->functions.front());
  StateContext states;
  Tensor kept = cacheOf(1);
  TensorMap in{{"u", Tensor::fromF32({7, 7, 7, 7}, {1, 4})}, {"cache", kept}};
  auto outs = interp.run(std::move(in), states);
  EXPECT_NE(outs.front().tensor.bytes(), kept.bytes());
  EXPECT_EQ(outs.front().tensor.floatAt(4), 7.0f);
  EXPECT_EQ(kept.floatAt(4), 1.0f);
  // Nor are inputs given by reference.
  TensorMap shared{{"u", Tensor::fromF32({7, 7, 7, 7}, {1, 4})}, {"cache", cacheOf(1)}};
  outs = interp.run(shared, states);
  EXPECT_EQ(shared.at("cache").floatAt(4), 1.0f);
}

TEST(Interpreter, ARefusedInputTakesNothing) {
  auto m = parse(kCacheWrite);
  Interpreter interp(*m->program->functions.front());
  StateContext states;
  TensorMap in{{"u", Tensor::fromF32({7, 7, 7}, {1, 3})}, {"cache", cacheOf(1)}};
  const uint8_t *bytes = in.at("cache").bytes();
  EXPECT_THROW(interp.run(std::move(in), states), InputError);
  ASSERT_TRUE(in.at("cache").valid());
  EXPECT_EQ(in.at("cache").bytes(), bytes);
  EXPECT_EQ(in.at("cache").floatAt(4), 1.0f);
}

namespace {

/// A carried cache written at the row an input names (gathered from the
/// cache itself, so a row out of range fails while running, after the
/// inputs were taken).
constexpr const char *kCarriedCache = R"(
main[CoreML7](%row: (1, int32)(Tensor), %u: (1, 4, fp32)(Tensor), %cache: (3, 4, fp32)(Tensor)) {
  block0() {
    %old: (1, 4, fp32)(Tensor) = gather(x=%cache, indices=%row, axis=0, name="old")
    %new: (1, 4, fp32)(Tensor) = add(x=%old, y=%u, name="new")
    %b: (1, int32)(Tensor) = identity(x=%row, name="b")
    %zero: (1, int32)(Tensor) = const(val=[0], name="zero")
    %begin: (2, int32)(Tensor) = concat(values=(%b, %zero), axis=0, interleave=False, name="begin")
    %four: (1, int32)(Tensor) = const(val=[4], name="four")
    %one: (1, int32)(Tensor) = const(val=[1], name="one")
    %r1: (1, int32)(Tensor) = add(x=%row, y=%one, name="r1")
    %end: (2, int32)(Tensor) = concat(values=(%r1, %four), axis=0, interleave=False, name="end")
    %n: (3, 4, fp32)(Tensor) = slice_update(x=%cache, update=%new, begin=%begin, end=%end, name="n")
  } -> (%n)
}
)";

} // namespace

TEST(Stepper, ACarriedValueIsUpdatedInPlaceAndStepsStayExact) {
  auto m = parse(kCarriedCache);
  const Function &fn = *m->program->functions.front();
  Stepper s(fn, {{"n", "cache", std::nullopt, "test"}});
  Tensor u = Tensor::fromF32({1, 2, 3, 4}, {1, 4});
  for (int k = 0; k < 4; ++k)
    s.step({{"row", Tensor::fromI32({k % 3}, {1})}, {"u", u}});
  auto outs = s.step({{"row", Tensor::fromI32({0}, {1})}, {"u", u}});
  // Row 0 was written at steps 0 and 3 and now: 3 * u; rows 1, 2 once.
  EXPECT_EQ(output(outs, "n").floatAt(3), 12.0f);
  EXPECT_EQ(output(outs, "n").floatAt(7), 4.0f);
  EXPECT_EQ(output(outs, "n").floatAt(11), 4.0f);
}

TEST(Stepper, AStepRefusedOnItsInputsCanBeRetried) {
  auto m = parse(kCarriedCache);
  const Function &fn = *m->program->functions.front();
  Stepper s(fn, {{"n", "cache", std::nullopt, "test"}});
  Tensor u = Tensor::fromF32({1, 2, 3, 4}, {1, 4});
  s.step({{"row", Tensor::fromI32({1}, {1})}, {"u", u}});
  EXPECT_THROW(s.step({{"row", Tensor::fromI32({1}, {1})}, {"u", Tensor::fromF32({1}, {1, 1})}}),
               InputError);
  auto outs = s.step({{"row", Tensor::fromI32({1}, {1})}, {"u", u}});
  EXPECT_EQ(output(outs, "n").floatAt(4), 2.0f);
  EXPECT_EQ(s.stepsDone(), 2);
}

TEST(Stepper, AStepThatFailsWhileRunningEndsTheSteps) {
  auto m = parse(kCarriedCache);
  const Function &fn = *m->program->functions.front();
  Stepper s(fn, {{"n", "cache", std::nullopt, "test"}});
  Tensor u = Tensor::fromF32({1, 2, 3, 4}, {1, 4});
  s.step({{"row", Tensor::fromI32({1}, {1})}, {"u", u}});
  EXPECT_THROW(s.step({{"row", Tensor::fromI32({9}, {1})}, {"u", u}}), InputError);
  // The carried cache may be half written: no step may silently go on from it.
  try {
    s.step({{"row", Tensor::fromI32({1}, {1})}, {"u", u}});
    FAIL() << "a step after a failed run succeeded";
  } catch (const InputError &e) {
    EXPECT_NE(std::string(e.what()).find("an earlier step failed"), std::string::npos) << e.what();
  }
}

TEST(Stepper, AnFp16OutputCarriedIntoAnFp32InputIsRoundedEachStep) {
  // As ExecuTorch's copy_ of an fp16 delegate output into its fp32 buffer:
  // the next step reads the fp16 value, not the fp32 sum before rounding.
  auto m = parse(R"(
main[CoreML7](%u: (1, 3, fp32)(Tensor), %buf: (1, 3, fp32)(Tensor)) {
  block0() {
    %n: (1, 3, fp32)(Tensor) = add(x=%buf, y=%u, name="n")
    %h: (1, 3, fp16)(Tensor) = cast(x=%n, dtype="fp16", name="h")
  } -> (%h)
}
)");
  Stepper s(*m->program->functions.front(), {{"h", "buf", std::nullopt, "test"}});
  std::vector<float> u = {0.1f, 1e-4f, 3000.7f};
  std::vector<float> want(3, 0.0f);
  for (int k = 0; k < 6; ++k) {
    auto outs = s.step({{"u", Tensor::fromF32(u, {1, 3})}});
    const Tensor &h = output(outs, "h");
    ASSERT_EQ(h.dtype(), DType::F16);
    for (size_t i = 0; i < 3; ++i) {
      want[i] = halfToFloat(floatToHalf(want[i] + u[i]));
      EXPECT_EQ(h.floatAt(static_cast<int64_t>(i)), want[i]) << "step " << k << " lane " << i;
    }
    // The widened form went to the carry: the caller holds no second copy.
    for (const NamedTensor &nt : outs)
      EXPECT_FALSE(nt.widened.valid()) << nt.name;
  }
}

TEST(Stepper, Fp16ModeCarriedCacheGivesTheBitsOfAFreshCopyEachStep) {
  // fp16 mode, an export's KV cache: the fp32 buffer carried in holds the
  // last step's fp16 output, so its cast to fp16 is a view (nothing to
  // round) and slice_update's result is rounded only in the row it wrote.
  // Each step must give the bits of a run handed a fresh fp32 copy of the
  // cache, whose values the interpreter rounds in full.
  auto m = parse(R"(
main[CoreML7](%row: (1, int32)(Tensor), %u: (1, 4, fp32)(Tensor), %cache: (3, 4, fp32)(Tensor)) {
  block0() {
    %c: (3, 4, fp16)(Tensor) = cast(x=%cache, dtype="fp16", name="c")
    %old: (1, 4, fp16)(Tensor) = gather(x=%c, indices=%row, axis=0, name="old")
    %u16: (1, 4, fp16)(Tensor) = cast(x=%u, dtype="fp16", name="u16")
    %new: (1, 4, fp16)(Tensor) = add(x=%old, y=%u16, name="new")
    %b: (1, int32)(Tensor) = identity(x=%row, name="b")
    %zero: (1, int32)(Tensor) = const(val=[0], name="zero")
    %begin: (2, int32)(Tensor) = concat(values=(%b, %zero), axis=0, interleave=False, name="begin")
    %four: (1, int32)(Tensor) = const(val=[4], name="four")
    %one: (1, int32)(Tensor) = const(val=[1], name="one")
    %r1: (1, int32)(Tensor) = add(x=%row, y=%one, name="r1")
    %end: (2, int32)(Tensor) = concat(values=(%r1, %four), axis=0, interleave=False, name="end")
    %n: (3, 4, fp16)(Tensor) = slice_update(x=%c, update=%new, begin=%begin, end=%end, name="n")
  } -> (%n)
}
)");
  const Function &fn = *m->program->functions.front();
  StepperOptions options;
  options.run.precision = Precision::FP16;
  Stepper carried(fn, {{"n", "cache", std::nullopt, "test"}}, options);
  Interpreter fresh(fn, options.run);
  Tensor cache = Tensor::zeros(DType::F32, {3, 4});
  for (int k = 0; k < 12; ++k) {
    std::vector<float> u(4);
    for (size_t i = 0; i < u.size(); ++i)
      u[i] = 0.1f * static_cast<float>(k + 1) + 1e-3f * static_cast<float>(i) + 3e-5f;
    TensorMap in = {{"row", Tensor::fromI32({(k * 2) % 3}, {1})},
                    {"u", Tensor::fromF32(u, {1, 4})}};
    Tensor got = output(carried.step(in), "n").clone();
    in["cache"] = cache;
    Tensor want = output(fresh.run(in), "n").clone();
    ASSERT_EQ(got.numBytes(), want.numBytes());
    EXPECT_EQ(std::memcmp(got.bytes(), want.bytes(), got.numBytes()), 0) << "step " << k;
    cache = want.convertTo(DType::F32);
  }
  EXPECT_NE(cache.floatAt(0), 0.0f);
}

TEST(Stepper, AnFp16CacheCarriedStepByStepIsTheFullConversionEachStep) {
  // An export's KV cache: fp32 buffer in, one row written by slice_update,
  // fp16 out and copied back. A caller that drops each step's outputs lets
  // the stepper convert only the row written; one that keeps them all makes
  // it convert everything each step. Both see the same bits.
  std::string text = kCarriedCache;
  text.replace(text.find("  } -> (%n)"), 11,
               "    %h: (3, 4, fp16)(Tensor) = cast(x=%n, dtype=\"fp16\", name=\"h\")\n"
               "  } -> (%h)");
  auto m = parse(text.c_str());
  const Function &fn = *m->program->functions.front();
  Stepper dropping(fn, {{"h", "cache", std::nullopt, "test"}});
  Stepper keeping(fn, {{"h", "cache", std::nullopt, "test"}});
  std::vector<std::vector<NamedTensor>> kept;
  for (int k = 0; k < 12; ++k) {
    std::vector<float> u(4);
    for (size_t i = 0; i < u.size(); ++i)
      u[i] = 0.1f * static_cast<float>(k + 1) + 1e-3f * static_cast<float>(i) + 3e-5f;
    TensorMap in = {{"row", Tensor::fromI32({(k * 2) % 3}, {1})},
                    {"u", Tensor::fromF32(u, {1, 4})}};
    Tensor fast = output(dropping.step(in), "h").clone();
    kept.push_back(keeping.step(in));
    const Tensor &full = output(kept.back(), "h");
    ASSERT_EQ(fast.numBytes(), full.numBytes());
    EXPECT_EQ(std::memcmp(fast.bytes(), full.bytes(), fast.numBytes()), 0) << "step " << k;
  }
  // Rows were written several times over: the values are sums of rounded sums.
  EXPECT_NE(output(kept.back(), "h").floatAt(0), 0.0f);
}
