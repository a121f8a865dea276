//===- StateToIOTest.cpp - The state-to-io pass ---------------------------===//
//
// Builds LFM2-style programs in C++, rewrites them, checks the structure and
// description, and steps original and rewritten programs side by side on the
// reference interpreter (the host feeding outputs back per the state map) to
// show the values are the same.
//
//===----------------------------------------------------------------------===//
#include "TestPrograms.h"

#include "TestSupport.h"
#include "runtime/Stepper.h"
#include "transforms/Pass.h"

#include "support/Error.h"

#include <gtest/gtest.h>

using namespace anefit;
using namespace anefit::test;

namespace {

/// One short-conv layer in ExecuTorch's form: state (1, D, 2) holds the last
/// two columns; out = concat(state, x); new state = its last two columns.
Value *shortConv(FnBuilder &b, const std::string &name, Value *x, int64_t d) {
  Value *st = b.state(name, f16({1, d, 2}));
  Value *r = b.read(name + "_read", st);
  Value *c = b.concat(name + "_cat", {r, x}, -1, f16({1, d, 3}));
  Value *next = b.slice(name + "_next", c, {0, 0, 1}, {1, (int32_t)d, 3}, f16({1, d, 2}));
  b.write(name + "_write", st, next);
  Value *w = b.constant(name + "_w", Constant::fromF32({0.5f}, {}));
  return b.op("mul", name + "_y", {{"x", {c}}, {"y", {w}}}, f16({1, d, 3}));
}

/// A KV-cache-like state (1, 2, 8, 32) written at a runtime position.
Value *kvCache(FnBuilder &b, Value *x, Value *pos) {
  Value *st = b.state("kv", f16({1, 2, 8, 32}));
  Value *r = b.read("kv_read", st);
  Value *end =
      b.op("add", "kv_end", {{"x", {pos}}, {"y", {b.ints("kv_one", {0, 0, 1, 0})}}}, i32({4}));
  Value *u =
      b.op("slice_update", "kv_upd",
           {{"x", {r}}, {"update", {x}}, {"begin", {pos}}, {"end", {end}}}, f16({1, 2, 8, 32}));
  return b.op("coreml_update_state", "kv_store", {{"state", {st}}, {"value", {u}}},
              f16({1, 2, 8, 32}));
}

std::unique_ptr<Model> twoConvModel() {
  auto m = newModel();
  FnBuilder b(newFunction(*m, "main"));
  Value *x = b.input("x", f16({1, 4, 1}));
  Value *y0 = shortConv(b, "conv0", x, 4);
  Value *y1 = shortConv(b, "conv1", x, 4);
  b.output(b.op("add", "y", {{"x", {y0}}, {"y", {y1}}}, f16({1, 4, 3})));
  describe(*m);
  return m;
}

PassResult runPipeline(Model &m, const std::string &pipeline) {
  PassManager pm;
  pm.addPipeline(pipeline);
  return pm.run(m);
}

/// A tensor of `shape` filled with step*100 + index, so every step differs.
runtime::Tensor pattern(const std::vector<int64_t> &shape, int step) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = static_cast<float>(step * 100 + i);
  return runtime::Tensor::fromF32(std::move(v), shape);
}

/// A write position along axis 2: the begin (0, 0, p, 0) of a rank-4 write,
/// or the position p alone.
runtime::Tensor position(const std::vector<int64_t> &shape, int32_t p) {
  if (shape == std::vector<int64_t>{4})
    return runtime::Tensor::fromI32({0, 0, p, 0}, shape);
  if (shape == std::vector<int64_t>{1})
    return runtime::Tensor::fromI32({p}, shape);
  throw std::runtime_error("no position of this shape");
}

const runtime::Tensor &outputOf(const std::vector<runtime::NamedTensor> &outs,
                                const std::string &name) {
  for (const runtime::NamedTensor &nt : outs)
    if (nt.name == name)
      return nt.tensor;
  throw std::runtime_error("no output " + name);
}

/// Steps `before` (states inside) and `after` (states as IO, carried by the
/// host per `map`) on the reference interpreter for `steps` steps on the
/// same inputs and expects identical outputs and final state values.
void expectSameOverSteps(const Model &before, const Model &after, const StateMap &map,
                         const std::string &fname, int steps) {
  const Function &fb = *before.program->findFunction(fname);
  const Function &fa = *after.program->findFunction(fname);
  runtime::Stepper sb(fb);
  runtime::Stepper sa(fa, runtime::carriesFromStateMap(map, fa));
  ASSERT_EQ(sa.carries().size(), map.entries.size());
  for (int step = 0; step < steps; ++step) {
    runtime::TensorMap inputs;
    for (const auto &in : fb.inputs)
      if (in->type.isTensor())
        inputs[in->name] = in->type.dtype() == DType::I32
                               ? position(*in->type.staticShape(), step % 8)
                               : pattern(*in->type.staticShape(), step);
    auto ob = sb.step(inputs);
    auto oa = sa.step(inputs);
    runtime::Comparison cmp;
    std::string at = "step " + std::to_string(step) + ": ";
    cmp.compareOutputs(at, ob, oa);
    for (const StateMapEntry &e : map.entries) {
      ASSERT_TRUE(sb.stateValue(e.state)) << e.state;
      cmp.compare(at + "state '" + e.state + "'", *sb.stateValue(e.state), outputOf(oa, e.output));
    }
    EXPECT_TRUE(cmp.ok()) << cmp.firstMismatch();
    EXPECT_GT(cmp.compared(), 0u);
  }
}

TEST(StateToIO, MovesEveryStateByDefault) {
  auto m = twoConvModel();
  auto original = twoConvModel();
  PassResult r = runPipeline(*m, "state-to-io,canonicalize,dce");
  Function &fn = *m->program->findFunction("main");

  for (const auto &in : fn.inputs)
    EXPECT_TRUE(in->type.isTensor()) << in->name;
  EXPECT_EQ(countOps(fn, "read_state"), 0);
  EXPECT_EQ(countOps(fn, "write_state"), 0);
  EXPECT_EQ(outputNames(fn), (std::vector<std::string>{"y", "conv0_out", "conv1_out"}));
  EXPECT_EQ(fn.findInput("conv0")->type, f16({1, 4, 2}));

  // Description: no states; new multiarray inputs/outputs with the state's shape/dtype.
  EXPECT_TRUE(m->description.states.empty());
  EXPECT_EQ(featureNames(m->description.inputs), (std::vector<std::string>{"x", "conv0", "conv1"}));
  EXPECT_EQ(featureNames(m->description.outputs),
            (std::vector<std::string>{"y", "conv0_out", "conv1_out"}));
  EXPECT_EQ(m->description.outputs[1].type.shape, (std::vector<int64_t>{1, 4, 2}));
  EXPECT_EQ(m->description.outputs[1].type.dataType, ArrayDataType::Float16);
  EXPECT_EQ(m->description.inputs[1].type.kind, FeatureType::Kind::MultiArray);

  // Nothing iOS18-only remains: spec and opset drop together.
  EXPECT_EQ(m->specificationVersion, 8);
  EXPECT_EQ(fn.opset, "CoreML7");

  ASSERT_EQ(r.stateMap.entries.size(), 2u);
  EXPECT_EQ(r.stateMap.entries[0].input, "conv0");
  EXPECT_EQ(r.stateMap.entries[0].output, "conv0_out");
  EXPECT_TRUE(r.stateMap.entries[0].written);
  expectSameOverSteps(*original, *m, r.stateMap, "main", 8);
}

TEST(StateToIO, StoresTheStateMapInMetadataAndJson) {
  auto m = twoConvModel();
  PassResult r = runPipeline(*m, "state-to-io");
  const auto &ud = m->description.metadata.userDefined;
  ASSERT_TRUE(ud.count(StateMap::kMetadataKey));
  StateMap stored = StateMap::fromJson(ud.at(StateMap::kMetadataKey), "metadata");
  ASSERT_EQ(stored.entries.size(), 2u);
  EXPECT_EQ(stored.entries[1].state, "conv1");
  EXPECT_EQ(stored.entries[1].shape, (std::vector<int64_t>{1, 4, 2}));
  EXPECT_EQ(stored.entries[1].dtype, DType::F16);
  std::string json = r.stateMap.toJson();
  EXPECT_NE(json.find("\"schema\": \"anefit.statemap/1\""), std::string::npos);
  EXPECT_NE(json.find("\"initial\": \"zeros\""), std::string::npos);
  EXPECT_EQ(StateMap::fromJson(json, "x").toJson(), json);
  EXPECT_EQ(stateMapPathFor("out/model.mlpackage/"), "out/model.statemap.json");
  EXPECT_EQ(errorOf([] { StateMap::fromJson("{\"schema\": \"other\"}", "m.json"); }),
            "m.json: schema: expected \"anefit.statemap/1\", found \"other\"");
}

TEST(StateToIO, ReadAfterWriteSeesTheWrittenValue) {
  auto m = newModel();
  FnBuilder b(newFunction(*m, "main"));
  Value *x = b.input("x", f32({2}));
  Value *st = b.state("acc", f32({2}));
  Value *r0 = b.read("r0", st);
  Value *s = b.op("add", "s", {{"x", {r0}}, {"y", {x}}}, f32({2}));
  b.write("w0", st, s);
  Value *r1 = b.read("r1", st); // must see s, not the input
  Value *d = b.op("mul", "d", {{"x", {r1}}, {"y", {x}}}, f32({2}));
  Value *u = b.op("coreml_update_state", "u", {{"state", {st}}, {"value", {d}}}, f32({2}));
  b.output(b.op("add", "out", {{"x", {u}}, {"y", {r1}}}, f32({2})));
  describe(*m);
  auto original = newModel();
  { // Same program, kept unrewritten for the comparison.
    FnBuilder o(newFunction(*original, "main"));
    Value *ox = o.input("x", f32({2}));
    Value *ost = o.state("acc", f32({2}));
    Value *or0 = o.read("r0", ost);
    Value *os = o.op("add", "s", {{"x", {or0}}, {"y", {ox}}}, f32({2}));
    o.write("w0", ost, os);
    Value *or1 = o.read("r1", ost);
    Value *od = o.op("mul", "d", {{"x", {or1}}, {"y", {ox}}}, f32({2}));
    Value *ou = o.op("coreml_update_state", "u", {{"state", {ost}}, {"value", {od}}}, f32({2}));
    o.output(o.op("add", "out", {{"x", {ou}}, {"y", {or1}}}, f32({2})));
  }
  PassResult r = runPipeline(*m, "state-to-io,dce");
  Function &fn = *m->program->findFunction("main");
  EXPECT_EQ(d->definingOp->inputValue("x"), s);
  EXPECT_EQ(outputNames(fn), (std::vector<std::string>{"out", "acc_out"}));
  expectSameOverSteps(*original, *m, r.stateMap, "main", 8);
}

TEST(StateToIO, PassesANeverWrittenStateThrough) {
  auto m = newModel();
  FnBuilder b(newFunction(*m, "main"));
  Value *x = b.input("x", f32({2}));
  Value *st = b.state("bias", f32({2}));
  Value *r = b.read("r", st);
  b.output(b.op("add", "y", {{"x", {x}}, {"y", {r}}}, f32({2})));
  describe(*m);
  PassResult res = runPipeline(*m, "state-to-io");
  Function &fn = *m->program->findFunction("main");
  ASSERT_EQ(fn.body->outputs.size(), 2u);
  Value *out = fn.body->outputs[1];
  EXPECT_EQ(out->name, "bias_out");
  ASSERT_NE(out->definingOp, nullptr);
  EXPECT_EQ(out->definingOp->type, "identity");
  EXPECT_EQ(out->definingOp->inputValue("x"), fn.findInput("bias"));
  ASSERT_EQ(res.stateMap.entries.size(), 1u);
  EXPECT_FALSE(res.stateMap.entries[0].written);
  bool reported = false;
  for (const std::string &c : res.changes)
    reported = reported || c.find("never written: passed through") != std::string::npos;
  EXPECT_TRUE(reported);
}

TEST(StateToIO, KeepsOutputNamesWhenAStateReadIsReturned) {
  auto m = newModel();
  FnBuilder b(newFunction(*m, "main"));
  Value *x = b.input("x", f32({2}));
  Value *st = b.state("s", f32({2}));
  b.output(b.read("peek", st));
  b.write("w", st, x);
  describe(*m);
  runPipeline(*m, "state-to-io,canonicalize,dce");
  Function &fn = *m->program->findFunction("main");
  EXPECT_EQ(outputNames(fn), (std::vector<std::string>{"peek", "s_out"}));
  EXPECT_EQ(fn.body->outputs[0]->definingOp->type, "identity");
  EXPECT_EQ(fn.body->outputs[0]->definingOp->inputValue("x"), fn.findInput("s"));
}

TEST(StateToIO, KeepLargestKeepsTheKVCacheOnly) {
  auto build = [] {
    auto m = newModel();
    FnBuilder b(newFunction(*m, "main"));
    Value *x = b.input("x", f16({1, 4, 1}));
    Value *kvIn = b.input("k", f16({1, 2, 1, 32}));
    Value *pos = b.input("pos", i32({4}));
    Value *y0 = shortConv(b, "conv0", x, 4);
    Value *kv = kvCache(b, kvIn, pos);
    Value *y1 = shortConv(b, "conv1", x, 4);
    b.output(b.op("add", "y", {{"x", {y0}}, {"y", {y1}}}, f16({1, 4, 3})));
    b.output(b.op("identity", "kv_copy", {{"x", {kv}}}, f16({1, 2, 8, 32})));
    describe(*m);
    return m;
  };
  auto m = build();
  auto original = build();
  PassResult r = runPipeline(*m, "state-to-io{keep-largest},canonicalize,dce");
  Function &fn = *m->program->findFunction("main");
  EXPECT_TRUE(fn.findInput("kv")->type.isState());
  EXPECT_TRUE(fn.findInput("conv0")->type.isTensor());
  EXPECT_TRUE(fn.findInput("conv1")->type.isTensor());
  EXPECT_EQ(featureNames(m->description.states), (std::vector<std::string>{"kv"}));
  EXPECT_EQ(r.stateMap.keptStates, (std::vector<std::string>{"kv"}));
  EXPECT_EQ(r.stateMap.entries.size(), 2u);
  // A state remains, so the model stays at iOS18.
  EXPECT_EQ(m->specificationVersion, 9);
  EXPECT_EQ(fn.opset, "CoreML8");
  // The KV write at a runtime position stays, inside the kept state.
  EXPECT_EQ(countOps(fn, "slice_update"), 1);
  EXPECT_EQ(countOps(fn, "coreml_update_state"), 1);
  EXPECT_NE(r.changes.front().find("kept state 'kv' (1x2x8x32 fp16)"), std::string::npos);
}

TEST(StateToIO, KeepLargestMovesUnalignedStates) {
  auto m = twoConvModel(); // innermost dim 2: never kept
  PassResult r = runPipeline(*m, "state-to-io{keep-largest}");
  EXPECT_EQ(r.stateMap.entries.size(), 2u);
  EXPECT_TRUE(r.stateMap.keptStates.empty());
  ASSERT_FALSE(r.diagnostics.empty());
  EXPECT_NE(r.diagnostics[0].message.find("moving every state"), std::string::npos);
  auto k = twoConvModel();
  PassResult rk = runPipeline(*k, "state-to-io{keep-largest keep-align=1}");
  EXPECT_EQ(rk.stateMap.entries.size(), 1u);
  EXPECT_EQ(rk.stateMap.keptStates, (std::vector<std::string>{"conv0"}));
}

TEST(StateToIO, SelectsStatesByNameAndGlob) {
  auto m = twoConvModel();
  PassResult r = runPipeline(*m, "state-to-io{states=conv1 output-suffix=_new input-suffix=_in}");
  Function &fn = *m->program->findFunction("main");
  EXPECT_TRUE(fn.findInput("conv0")->type.isState());
  ASSERT_NE(fn.findInput("conv1_in"), nullptr);
  EXPECT_EQ(outputNames(fn).back(), "conv1_new");
  EXPECT_EQ(r.stateMap.keptStates, (std::vector<std::string>{"conv0"}));
  EXPECT_EQ(m->specificationVersion, 9); // conv0 is still a state

  auto g = twoConvModel();
  PassResult rg = runPipeline(*g, "state-to-io{states=conv*}");
  EXPECT_EQ(rg.stateMap.entries.size(), 2u);
}

TEST(StateToIO, UnknownStateListsTheAvailableOnes) {
  auto m = twoConvModel();
  m->sourcePath = "model.mlpackage";
  EXPECT_EQ(errorOf([&] { runPipeline(*m, "state-to-io{states=conv2}"); }),
            "model.mlpackage: state-to-io{states}: no state matches 'conv2'; available states: "
            "conv0, conv1");
  EXPECT_EQ(errorOf([&] { runPipeline(*m, "state-to-io{states=conv0 keep-largest}"); }),
            "model.mlpackage: state-to-io: options 'states' and 'keep-largest' exclude each other");
  EXPECT_EQ(errorOf([&] { runPipeline(*m, "state-to-io{output-suffix=}"); }),
            "model.mlpackage: state-to-io: expected different input-suffix and output-suffix, "
            "found '' for both");
}

TEST(StateToIO, RejectsAnOutputNameClash) {
  auto m = newModel();
  FnBuilder b(newFunction(*m, "main"));
  Value *x = b.input("x", f32({2}));
  Value *st = b.state("s", f32({2}));
  b.write("w", st, x);
  b.output(b.op("relu", "s_out", {{"x", {x}}}, f32({2})));
  std::string e = errorOf([&] { runPipeline(*m, "state-to-io"); });
  EXPECT_EQ(e, "state-to-io: main: state 's': output name 's_out' is already used; choose "
               "another output-suffix");
}

TEST(StateToIO, RewritesEveryFunctionConsistently) {
  auto build = [] {
    auto m = newModel();
    for (const char *name : {"decode", "main"}) {
      FnBuilder b(newFunction(*m, name));
      Value *x = b.input("x", f16({1, 4, 1}));
      Value *y = shortConv(b, "conv0", x, 4);
      if (std::string(name) == "main")
        y = b.op("relu", "r", {{"x", {y}}}, f16({1, 4, 3}));
      b.output(y);
    }
    describe(*m);
    return m;
  };
  auto m = build();
  auto original = build();
  PassResult r = runPipeline(*m, "state-to-io,canonicalize,dce");
  for (const char *name : {"decode", "main"}) {
    Function &fn = *m->program->findFunction(name);
    EXPECT_TRUE(fn.findInput("conv0")->type.isTensor()) << name;
    EXPECT_EQ(outputNames(fn).back(), "conv0_out") << name;
    EXPECT_EQ(fn.opset, "CoreML8") << "multi-function models stay at iOS18";
    expectSameOverSteps(*original, *m, r.stateMap, name, 8);
  }
  ASSERT_EQ(r.stateMap.entries.size(), 1u);
  EXPECT_EQ(r.stateMap.entries[0].functions, (std::vector<std::string>{"decode", "main"}));
  for (const FunctionDescription &fd : m->description.functions) {
    EXPECT_TRUE(fd.states.empty());
    EXPECT_EQ(featureNames(fd.inputs), (std::vector<std::string>{"x", "conv0"}));
    EXPECT_EQ(featureNames(fd.outputs).back(), "conv0_out");
  }
}

TEST(StateToIO, RejectsStatesOfDifferentTypesAcrossFunctions) {
  auto m = newModel();
  FnBuilder a(newFunction(*m, "a"));
  a.write("w", a.state("s", f32({2})), a.input("x", f32({2})));
  FnBuilder b(newFunction(*m, "b"));
  b.write("w", b.state("s", f32({3})), b.input("x", f32({3})));
  EXPECT_EQ(errorOf([&] { runPipeline(*m, "state-to-io"); }),
            "state-to-io: b: state 's': expected (2,fp32)(Tensor) as in function a, found "
            "(3,fp32)(Tensor)");
}

/// The roll written as slice_update at a position computed from the state's
/// shape: drop the oldest column, then write the new one at index L-1.
TEST(StateToIO, MakesTheRollUpdateStatic) {
  auto build = [] {
    auto m = newModel();
    FnBuilder b(newFunction(*m, "main"));
    Value *x = b.input("x", f16({1, 4, 1}));
    Value *st = b.state("conv", f16({1, 4, 3}));
    Value *r = b.read("r", st);
    Value *old = b.slice("old", r, {0, 0, 1}, {1, 4, 3}, f16({1, 4, 2}));
    Value *rolled = b.concat("rolled", {old, x}, 2, f16({1, 4, 3}));
    Value *sh = b.op("shape", "sh", {{"x", {r}}}, i32({3}));
    // Bounds as coremltools builds them: 1-D int32 pieces concatenated.
    Value *len =
        b.op("gather", "len",
             {{"x", {sh}}, {"indices", {b.ints("i2", {2})}}, {"axis", {b.scalarInt("a0", 0)}}},
             i32({1}));
    Value *lastIdx =
        b.op("sub", "lastIdx", {{"x", {len}}, {"y", {b.scalarInt("one", 1)}}}, i32({1}));
    Value *zeros = b.ints("zeros", {0, 0});
    Value *begin = b.op("concat", "begin",
                        {{"values", {zeros, lastIdx}}, {"axis", {b.scalarInt("a1", 0)}}}, i32({3}));
    Value *upd = b.op(
        "slice_update", "upd",
        {{"x", {rolled}}, {"update", {x}}, {"begin", {begin}}, {"end", {b.ints("end", {1, 4, 3})}}},
        f16({1, 4, 3}));
    b.write("w", st, upd);
    b.output(b.op("mul", "y", {{"x", {upd}}, {"y", {r}}}, f16({1, 4, 3})));
    describe(*m);
    return m;
  };
  auto m = build();
  auto original = build();
  PassResult r = runPipeline(*m, "state-to-io,canonicalize,dce");
  Function &fn = *m->program->findFunction("main");
  EXPECT_EQ(countOps(fn, "slice_update"), 0);
  EXPECT_EQ(countOps(fn, "shape"), 0);
  EXPECT_EQ(fn.body->outputs.back()->name, "conv_out");
  EXPECT_EQ(fn.body->outputs.back()->definingOp->type, "concat");
  EXPECT_EQ(m->specificationVersion, 8);
  bool reported = false;
  for (const std::string &c : r.changes)
    reported = reported || c.find("made 1 state updates static") != std::string::npos;
  EXPECT_TRUE(reported);
  expectSameOverSteps(*original, *m, r.stateMap, "main", 8);
}

/// A KV cache written at a runtime position with bounds built the way
/// exporters build them (concat of zeros and the position): once moved, its
/// write becomes a one-hot select blend, exact for every valid position,
/// negative ones included.
TEST(StateToIO, BlendsARuntimePositionWriteOfAMovedCache) {
  auto build = [] {
    auto m = newModel();
    FnBuilder b(newFunction(*m, "main"));
    Value *k = b.input("k", f16({1, 2, 1, 4}));
    Value *pos = b.input("pos", i32({1}));
    Value *st = b.state("kv", f16({1, 2, 8, 4}));
    Value *r = b.read("kv_read", st);
    Value *zeros2 = b.ints("z2", {0, 0});
    Value *zero1 = b.ints("z1", {0});
    Value *begin =
        b.op("concat", "begin",
             {{"values", {zeros2, pos, zero1}}, {"axis", {b.scalarInt("a0", 0)}}}, i32({4}));
    Value *next = b.op("add", "next", {{"x", {pos}}, {"y", {b.scalarInt("one", 1)}}}, i32({1}));
    Value *end = b.op("concat", "end",
                      {{"values", {b.ints("e2", {1, 2}), next, b.ints("e1", {4})}},
                       {"axis", {b.scalarInt("a1", 0)}}},
                      i32({4}));
    Value *u =
        b.op("slice_update", "kv_upd",
             {{"x", {r}}, {"update", {k}}, {"begin", {begin}}, {"end", {end}}}, f16({1, 2, 8, 4}));
    b.write("kv_write", st, u);
    b.output(b.op("mul", "y", {{"x", {u}}, {"y", {u}}}, f16({1, 2, 8, 4})));
    describe(*m);
    return m;
  };
  auto m = build();
  auto original = build();
  PassResult r = runPipeline(*m, "state-to-io,canonicalize,dce");
  Function &fn = *m->program->findFunction("main");
  EXPECT_EQ(countOps(fn, "slice_update"), 0);
  EXPECT_EQ(countOps(fn, "select"), 2);
  EXPECT_TRUE(r.diagnostics.empty());
  EXPECT_EQ(m->specificationVersion, 8);
  // expectSameOverSteps feeds positions 0..7 (step % 8) along axis 2.
  expectSameOverSteps(*original, *m, r.stateMap, "main", 10);

  // Negative positions count from the end in slice_update (pos = -2 writes
  // row 6, with end = pos + 1 = -1); the blend agrees. (-1 would give the
  // empty range [-1, 0), which is not a valid write.)
  const Function &fo = *original->program->findFunction("main");
  for (int p : {-2, -8, 3}) {
    runtime::TensorMap in = {{"k", pattern({1, 2, 1, 4}, p + 20)},
                             {"pos", runtime::Tensor::fromI32({p}, {1})}};
    runtime::Stepper orig(fo), rewritten(fn);
    auto want = orig.step(in);
    in["kv"] = runtime::Tensor::zeros(DType::F16, {1, 2, 8, 4});
    auto got = rewritten.step(in);
    runtime::Comparison cmp;
    std::string at = "position " + std::to_string(p) + ": ";
    cmp.compare(at + "y", outputOf(want, "y"), outputOf(got, "y"));
    cmp.compare(at + "kv", *orig.stateValue("kv"), outputOf(got, "kv_out"));
    EXPECT_TRUE(cmp.ok()) << cmp.firstMismatch();
  }
}

TEST(StateToIO, WarnsWhenAMovedStateKeepsARuntimeWrite) {
  auto m = newModel();
  FnBuilder b(newFunction(*m, "main"));
  Value *k = b.input("k", f16({1, 2, 1, 32}));
  Value *pos = b.input("pos", i32({4}));
  b.output(kvCache(b, k, pos));
  describe(*m);
  PassResult r = runPipeline(*m, "state-to-io");
  ASSERT_EQ(r.diagnostics.size(), 1u);
  EXPECT_EQ(r.diagnostics[0].str(),
            "warning: main: op 'kv_upd': state 'kv' is still updated by a slice_update at a "
            "runtime position; the ANE compiler may reject it");
  // slice_update is iOS18-only: no lowering.
  EXPECT_EQ(m->specificationVersion, 9);
}

TEST(StateToIO, DoesNothingWithoutStates) {
  auto m = newModel();
  FnBuilder b(newFunction(*m, "main"));
  b.output(b.op("relu", "y", {{"x", {b.input("x", f32({2}))}}}, f32({2})));
  describe(*m);
  PassResult r = runPipeline(*m, "state-to-io");
  EXPECT_TRUE(r.changes.empty());
  EXPECT_EQ(m->specificationVersion, 9);
  EXPECT_FALSE(m->description.metadata.userDefined.count(StateMap::kMetadataKey));
}

} // namespace
