//===- KvWriteStaticTest.cpp - kv-write-static, proven in the interpreter -===//
//
// Runs each write form before and after the rewrite in the reference
// interpreter, for every position the original accepts (all of them, not a
// sample: the rewrite must be exact everywhere, above 2048 rows included),
// in fp32 and in fp16 mode, and asks for bit-identical outputs.
//
//===----------------------------------------------------------------------===//
#include "ir/AsmParser.h"
#include "runtime/Interpreter.h"
#include "support/DType.h"
#include "support/Error.h"
#include "support/Random.h"
#include "transforms/Pass.h"

#include <gtest/gtest.h>

#include <random>

using namespace anefit;
using namespace anefit::runtime;

namespace {

std::unique_ptr<Model> parse(const std::string &text) {
  return parseModelText(text, "test.mil", nullptr);
}

std::unique_ptr<Model> rewritten(const std::string &text, const std::string &pipeline) {
  auto m = parse(text);
  PassManager pm;
  pm.addPipeline(pipeline);
  pm.run(*m);
  return m;
}

int countOps(const Function &fn, std::string_view type) {
  int n = 0;
  walk(*fn.body, [&](const Operation &op) { n += op.type == type; });
  return n;
}

/// Random normal values for every float input (rounded to fp16), zeros for
/// the position input.
TensorMap inputsFor(const Function &fn, std::mt19937 &rng) {
  TensorMap in;
  for (const auto &v : fn.inputs) {
    if (!v->type.isTensor())
      continue;
    Shape shape = *v->type.staticShape();
    if (isInteger(v->type.dtype())) {
      in[v->name] = Tensor::zeros(DType::I32, shape);
      continue;
    }
    Tensor t = Tensor::zeros(DType::F32, shape);
    for (int64_t i = 0; i < t.numElements(); ++i)
      t.mutableData<float>()[i] = halfToFloat(floatToHalf(normalFloat(rng)));
    in[v->name] = t;
  }
  return in;
}

/// Runs `before` and `after` for each position in [lo, hi] (the other
/// inputs random, the same for all); every position the original accepts
/// must give bit-identical outputs (and the states' final values). Returns
/// how many positions the original accepted.
int expectSameAtEveryPosition(const Model &before, const Model &after, const std::string &posName,
                              int32_t lo, int32_t hi, Precision precision) {
  const Function &fo = *before.program->functions.front();
  const Function &fa = *after.program->functions.front();
  RunOptions options;
  options.precision = precision;
  Interpreter io(fo, options), ia(fa, options);
  std::mt19937 rng(7);
  TensorMap in = inputsFor(fo, rng);
  int accepted = 0;
  for (int32_t p = lo; p <= hi; ++p) {
    in.at(posName).mutableData<int32_t>()[0] = p;
    StateContext so, sa;
    std::vector<NamedTensor> want;
    try {
      want = io.run(in, so);
    } catch (const InputError &) {
      continue; // not a valid position for the original
    }
    ++accepted;
    std::vector<NamedTensor> got = ia.run(in, sa);
    EXPECT_EQ(got.size(), want.size());
    for (size_t k = 0; k < want.size() && k < got.size(); ++k) {
      const Tensor &w = want[k].tensor, &g = got[k].tensor;
      EXPECT_EQ(w.shape(), g.shape()) << want[k].name;
      if (w.shape() != g.shape())
        return accepted;
      int64_t bad = -1;
      for (int64_t i = 0; i < w.numElements() && bad < 0; ++i)
        if (w.floatAt(i) != g.floatAt(i))
          bad = i;
      EXPECT_EQ(bad, -1) << "output " << want[k].name << " at position " << p << ", element "
                         << bad;
      if (bad >= 0)
        return accepted;
    }
    for (const auto &[name, t] : so.all()) {
      const Tensor *g = sa.find(name);
      EXPECT_TRUE(g) << name;
      int64_t bad = -1;
      for (int64_t i = 0; g && i < t.numElements() && bad < 0; ++i)
        if (t.floatAt(i) != g->floatAt(i))
          bad = i;
      EXPECT_EQ(bad, -1) << "state " << name << " at position " << p;
      if (!g || bad >= 0)
        return accepted;
    }
  }
  return accepted;
}

/// `text` with every `CTX`, `HEADS`, `DIM` and `ROWS` replaced by the numbers.
std::string instantiate(std::string text, int64_t ctx, int64_t heads = 1, int64_t dim = 4,
                        int64_t rows = 1) {
  for (auto [key, value] : {std::pair<std::string, int64_t>{"CTX", ctx},
                            {"HEADS", heads},
                            {"DIM", dim},
                            {"ROWS", rows}})
    for (size_t at; (at = text.find(key)) != std::string::npos;)
      text.replace(at, key.size(), std::to_string(value));
  return text;
}

/// ExecuTorch's KV write: the int32 input narrowed to uint16, squeezed,
/// widened back and concatenated with scalar zeros; fp32 cache input.
const char *kExecuTorchWrite = R"(main[CoreML8](%input_pos: (1,int32)(Tensor),
              %k_new: (1, HEADS, 1, DIM, fp16)(Tensor),
              %k_cache: (1, HEADS, CTX, DIM, fp32)(Tensor)) {
  block0() {
    %input_pos_u16: (1,uint16)(Tensor) = cast(x=%input_pos, dtype="uint16", name="input_pos_u16")
    %pos_u16: (uint16)(Scalar) = squeeze(x=%input_pos_u16, name="pos_u16")
    %pos_i32: (int32)(Scalar) = cast(x=%pos_u16, dtype="int32", name="pos_i32")
    %next: (int32)(Scalar) = add(x=%pos_i32, y=1, name="next")
    %begin: (4,int32)(Tensor) = concat(values=(0, 0, %pos_i32, 0), axis=0, interleave=False, name="begin")
    %end: (4,int32)(Tensor) = concat(values=(1, HEADS, %next, DIM), axis=0, interleave=False, name="end")
    %k_fp16: (1, HEADS, CTX, DIM, fp16)(Tensor) = cast(x=%k_cache, dtype="fp16", name="k_fp16")
    %k_put: (1, HEADS, CTX, DIM, fp16)(Tensor) = slice_update(x=%k_fp16, update=%k_new, begin=%begin, end=%end, begin_mask=[True, True, False, True], end_mask=[True, True, False, True], name="k_put")
    %y: (1, HEADS, CTX, DIM, fp16)(Tensor) = mul(x=%k_put, y=%k_put, name="y")
  } -> (%k_put, %y)
}
)";

/// coremltools' index_put from torch.export: an int16 (signed) position; the
/// cache a Core ML state.
const char *kSignedStateWrite = R"(main[CoreML8](%pos: (1,int32)(Tensor),
              %new: (1, 1, 1, 2, fp16)(Tensor),
              %kv: (1, 1, CTX, 2, fp16)(State)) {
  block0() {
    %kv_read: (1, 1, CTX, 2, fp16)(Tensor) = read_state(input=%kv, name="kv_read")
    %pos_i16: (1,int16)(Tensor) = cast(x=%pos, dtype="int16", name="pos_i16")
    %p16: (int16)(Scalar) = squeeze(x=%pos_i16, name="p16")
    %p: (int32)(Scalar) = cast(x=%p16, dtype="int32", name="p")
    %next: (int32)(Scalar) = add(x=%p, y=1, name="next")
    %begin: (4,int32)(Tensor) = concat(values=(0, 0, %p, 0), axis=0, interleave=False, name="begin")
    %end: (4,int32)(Tensor) = concat(values=(1, 1, %next, 2), axis=0, interleave=False, name="end")
    %put: (1, 1, CTX, 2, fp16)(Tensor) = slice_update(x=%kv_read, update=%new, begin=%begin, end=%end, name="put")
    write_state(input=%kv, data=%put, name="kv_write")
    %y: (1, 1, CTX, 2, fp16)(Tensor) = read_state(input=%kv, name="y")
  } -> (%y)
}
)";

/// Slicing assignment of 4 rows (cache[:, :, p:p+4] = new) at an int32
/// position taken from the input by slice_by_index.
const char *kFourRows = R"(main[CoreML8](%cache: (1, 2, 12, 3, fp16)(Tensor),
              %new: (1, 2, 4, 3, fp16)(Tensor),
              %pos: (1,int32)(Tensor)) {
  block0() {
    %p: (int32)(Scalar) = slice_by_index(x=%pos, begin=[0], end=[1], end_mask=[True], squeeze_mask=[True], name="p")
    %stop: (int32)(Scalar) = add(x=%p, y=4, name="stop")
    %bp: (1,int32)(Tensor) = expand_dims(x=%p, axes=[0], name="bp")
    %begin: (4,int32)(Tensor) = concat(values=([0], [0], %bp, [0]), axis=0, interleave=False, name="begin")
    %end: (4,int32)(Tensor) = concat(values=([0], [0], %stop, [0]), axis=0, interleave=False, name="end")
    %assign: (1, 2, 12, 3, fp16)(Tensor) = slice_update(x=%cache, update=%new, begin=%begin, end=%end, end_mask=[True, True, False, True], name="assign")
  } -> (%assign)
}
)";

/// A prefill chunk of ROWS rows (more than chain-rows) at a uint16 position
/// into a cache of CTX rows, along axis 2, or along the last axis with AXIS3
/// (a K cache stored transposed).
const char *kPrefill = R"(main[CoreML8](%input_pos: (1,int32)(Tensor),
              %new: (1, 2, ROWS, 3, fp16)(Tensor),
              %cache: (1, 2, CTX, 3, fp16)(Tensor)) {
  block0() {
    %input_pos_u16: (1,uint16)(Tensor) = cast(x=%input_pos, dtype="uint16", name="input_pos_u16")
    %pos_u16: (uint16)(Scalar) = squeeze(x=%input_pos_u16, name="pos_u16")
    %pos_i32: (int32)(Scalar) = cast(x=%pos_u16, dtype="int32", name="pos_i32")
    %next: (int32)(Scalar) = add(x=%pos_i32, y=ROWS, name="next")
    %begin: (4,int32)(Tensor) = concat(values=(0, 0, %pos_i32, 0), axis=0, interleave=False, name="begin")
    %end: (4,int32)(Tensor) = concat(values=(1, 2, %next, 3), axis=0, interleave=False, name="end")
    %prefill: (1, 2, CTX, 3, fp16)(Tensor) = slice_update(x=%cache, update=%new, begin=%begin, end=%end, end_mask=[True, True, False, True], name="prefill")
  } -> (%prefill)
}
)";
const char *kPrefillLastAxis = R"(main[CoreML8](%pos: (1,int32)(Tensor),
              %new: (1, 2, 3, ROWS, fp16)(Tensor),
              %cache: (1, 2, 3, CTX, fp32)(Tensor)) {
  block0() {
    %p: (int32)(Scalar) = slice_by_index(x=%pos, begin=[0], end=[1], end_mask=[True], squeeze_mask=[True], name="p")
    %next: (int32)(Scalar) = add(x=%p, y=ROWS, name="next")
    %begin: (4,int32)(Tensor) = concat(values=(0, 0, 0, %p), axis=0, interleave=False, name="begin")
    %end: (4,int32)(Tensor) = concat(values=(0, 0, 0, %next), axis=0, interleave=False, name="end")
    %c16: (1, 2, 3, CTX, fp16)(Tensor) = cast(x=%cache, dtype="fp16", name="c16")
    %prefill: (1, 2, 3, CTX, fp16)(Tensor) = slice_update(x=%c16, update=%new, begin=%begin, end=%end, begin_mask=[True, True, True, False], end_mask=[True, True, True, False], name="prefill")
  } -> (%prefill)
}
)";

/// select_scatter: squeeze_mask drops the axis from the update; K and V
/// stacked on axis 0, the write touching K only.
const char *kStackedSelectScatter = R"(main[CoreML8](%kv: (2, 1, 10, 3, fp16)(Tensor),
              %k_new: (1, 3, fp16)(Tensor),
              %pos: (1,int32)(Tensor)) {
  block0() {
    %p: (int32)(Scalar) = gather(x=%pos, indices=0, axis=0, name="p")
    %begin: (4,int32)(Tensor) = concat(values=(0, 0, %p, 0), axis=0, interleave=False, name="begin")
    %stacked: (2, 1, 10, 3, fp16)(Tensor) = slice_update(x=%kv, update=%k_new, begin=%begin, end=[1, 1, 10, 3], end_mask=[False, True, False, True], squeeze_mask=[True, False, True, False], name="stacked")
  } -> (%stacked)
}
)";

TEST(KvWriteStatic, ExecuTorchFormIsExactAtEveryPosition) {
  for (Precision precision : {Precision::FP32, Precision::FP16}) {
    std::string text = instantiate(kExecuTorchWrite, 16, 2);
    auto before = parse(text);
    auto after = rewritten(text, "kv-write-static,dce");
    EXPECT_EQ(countOps(*after->program->functions.front(), "slice_update"), 0);
    EXPECT_EQ(expectSameAtEveryPosition(*before, *after, "input_pos", -4, 20, precision), 16);
  }
}

/// 4096 rows: past 2048, fp16 cannot tell p from p + 1, so the rewrite
/// splits the position; every one of the 4096 positions must still hit its
/// own row, in fp16 mode too.
TEST(KvWriteStatic, LongContextIsExactAtEveryPosition) {
  std::string text = instantiate(kExecuTorchWrite, 4096, 1, 1);
  auto before = parse(text);
  auto after = rewritten(text, "kv-write-static,dce");
  const Function &fn = *after->program->functions.front();
  EXPECT_EQ(countOps(fn, "slice_update"), 0);
  EXPECT_EQ(countOps(fn, "floor_div"), 1);
  EXPECT_EQ(expectSameAtEveryPosition(*before, *after, "input_pos", 0, 4100, Precision::FP16),
            4096);
  // fp32 mode keeps the casts exact; the rows around the split suffice.
  EXPECT_EQ(expectSameAtEveryPosition(*before, *after, "input_pos", 2040, 2060, Precision::FP32),
            21);
}

/// Why the split exists: the fp16 pipeline maps 2049 to 2048.
TEST(KvWriteStatic, Fp16CannotHoldPositionsPast2048) {
  EXPECT_EQ(halfToFloat(floatToHalf(2047.0f)), 2047.0f);
  EXPECT_EQ(halfToFloat(floatToHalf(2049.0f)), 2048.0f);
}

/// A signed position into a Core ML state, negative positions counting from
/// the end; 12 rows, and 3000 (split, not a multiple of the split base: the
/// positions around both ends, the split and the sign are run).
TEST(KvWriteStatic, SignedStatePositionsFromBothEnds) {
  std::string text = instantiate(kSignedStateWrite, 12);
  auto before = parse(text);
  auto after = rewritten(text, "kv-write-static,dce");
  EXPECT_EQ(countOps(*after->program->functions.front(), "slice_update"), 0);
  // Valid: 0..11, and -12..-2 (p = -1 gives the empty range [-1, 0)).
  EXPECT_EQ(expectSameAtEveryPosition(*before, *after, "pos", -14, 14, Precision::FP16), 23);

  text = instantiate(kSignedStateWrite, 3000);
  before = parse(text);
  after = rewritten(text, "kv-write-static,dce");
  EXPECT_EQ(countOps(*after->program->functions.front(), "floor_div"), 1);
  int accepted = 0;
  for (auto [lo, hi] : std::vector<std::pair<int32_t, int32_t>>{
           {-3003, -2940}, {-2060, -2040}, {-1010, -990}, {-70, 70}, {2040, 2060}, {2940, 3003}})
    accepted += expectSameAtEveryPosition(*before, *after, "pos", lo, hi, Precision::FP16);
  EXPECT_EQ(accepted, 61 + 21 + 21 + 140 + 21 + 60);
}

TEST(KvWriteStatic, SeveralRowsAtEveryPosition) {
  auto before = parse(kFourRows);
  auto after = rewritten(kFourRows, "kv-write-static,dce");
  const Function &fn = *after->program->functions.front();
  EXPECT_EQ(countOps(fn, "slice_update"), 0);
  EXPECT_EQ(countOps(fn, "select"), 8); // per row: the blend and the either-end mask
  for (Precision precision : {Precision::FP32, Precision::FP16})
    EXPECT_EQ(expectSameAtEveryPosition(*before, *after, "pos", -14, 14, precision), 9 + 8);
}

/// More rows than chain-rows: one placement matmul and one select, exact
/// at every position the original accepts, in fp32 and fp16 mode, past 2048
/// rows too, along the last axis too.
TEST(KvWriteStatic, PrefillChunkThroughOneMatmul) {
  struct Case {
    const char *text;
    int64_t ctx, rows;
    int32_t lo, hi;
    int expected; ///< positions the original accepts in [lo, hi]
  };
  // Unsigned: p in [0, ctx - rows]. Signed (int32 from slice_by_index): also
  // p in [-ctx, -rows - 1] (p = -rows gives the empty end 0).
  for (const Case &c : {Case{kPrefill, 40, 12, -3, 45, 40 - 12 + 1},
                        Case{kPrefillLastAxis, 24, 7, -30, 30, (24 - 7 + 1) + (24 - 7)},
                        Case{kPrefill, 2100, 64, 1990, 2100, 2100 - 64 - 1990 + 1}}) {
    std::string text = instantiate(c.text, c.ctx, 1, 4, c.rows);
    auto before = parse(text);
    auto after = rewritten(text, "kv-write-static,dce");
    const Function &fn = *after->program->functions.front();
    EXPECT_EQ(countOps(fn, "slice_update"), 0) << c.ctx;
    EXPECT_EQ(countOps(fn, "matmul"), 1) << c.ctx;
    for (Precision precision : {Precision::FP32, Precision::FP16})
      EXPECT_EQ(expectSameAtEveryPosition(*before, *after, c.text == kPrefill ? "input_pos" : "pos",
                                          c.lo, c.hi, precision),
                c.expected)
          << c.ctx;
  }
}

TEST(KvWriteStatic, ConstantSubRangeOfAnotherAxis) {
  auto before = parse(kStackedSelectScatter);
  auto after = rewritten(kStackedSelectScatter, "kv-write-static,dce");
  const Function &fn = *after->program->functions.front();
  EXPECT_EQ(countOps(fn, "slice_update"), 0);
  EXPECT_EQ(countOps(fn, "concat"), 1);
  EXPECT_EQ(expectSameAtEveryPosition(*before, *after, "pos", -12, 12, Precision::FP16), 20);
}

/// state-to-io's masked-updates is the same rewrite: the moved state's write
/// is blended the same way, and the values agree at every position.
TEST(KvWriteStatic, StateToIOUsesTheSameRewrite) {
  std::string text = instantiate(kSignedStateWrite, 12);
  auto viaPass = rewritten(text, "kv-write-static");
  auto viaMove = rewritten(text, "state-to-io");
  auto ops = [](const Model &m) {
    std::vector<std::string> types;
    walk(*m.program->functions.front()->body, [&](const Operation &op) {
      if (op.type == "equal" || op.type == "select" || op.type == "cast")
        types.push_back(op.type + ":" + op.name);
    });
    return types;
  };
  EXPECT_EQ(ops(*viaPass), ops(*viaMove));
}

} // namespace
