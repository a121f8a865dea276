//===- DecomposeSdpaTest.cpp - decompose-sdpa against the SDPA kernel -----===//
//
// Random attention problems (shapes, grouped-query repetition, no mask, bool
// masks and float masks of several broadcast shapes) run through the
// interpreter's own scaled_dot_product_attention kernel and through the
// decomposition, in fp32 and in fp16 mode; the outputs must agree to
// rounding.
//
//===----------------------------------------------------------------------===//
#include "ir/AsmParser.h"
#include "runtime/Interpreter.h"
#include "support/DType.h"
#include "support/Random.h"
#include "transforms/Pass.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>

using namespace anefit;
using namespace anefit::runtime;

namespace {

std::string shapeText(const std::vector<int64_t> &s) {
  std::string out;
  for (int64_t d : s)
    out += std::to_string(d) + ", ";
  return out;
}

enum class MaskKind { None, Bool, Float };

struct Problem {
  int64_t batch, kvHeads, groups, rows, keys, dim, valueDim;
  MaskKind mask;
  std::vector<int64_t> maskShape;
};

/// The program a converter writes: K and V repeated with expand_dims, tile
/// and reshape when groups > 1, then the SDPA op.
std::string program(const Problem &p) {
  int64_t heads = p.kvHeads * p.groups;
  std::vector<int64_t> q = {p.batch, heads, p.rows, p.dim};
  std::vector<int64_t> kc = {p.batch, p.kvHeads, p.keys, p.dim};
  std::vector<int64_t> vc = {p.batch, p.kvHeads, p.keys, p.valueDim};
  std::ostringstream os;
  os << "main[CoreML8](%q: (" << shapeText(q) << "fp16)(Tensor), %k: (" << shapeText(kc)
     << "fp16)(Tensor), %v: (" << shapeText(vc) << "fp16)(Tensor)";
  if (p.mask != MaskKind::None)
    os << ", %mask: (" << shapeText(p.maskShape) << (p.mask == MaskKind::Bool ? "bool" : "fp16")
       << ")(Tensor)";
  os << ") {\n  block0() {\n";
  std::string key = "%k", value = "%v";
  if (p.groups > 1) {
    for (auto [name, shape] : {std::pair<std::string, std::vector<int64_t>>{"k", kc}, {"v", vc}}) {
      std::vector<int64_t> e = {shape[0], shape[1], 1, shape[2], shape[3]};
      std::vector<int64_t> t = {shape[0], shape[1], p.groups, shape[2], shape[3]};
      std::vector<int64_t> r = {shape[0], heads, shape[2], shape[3]};
      os << "    %" << name << "_e: (" << shapeText(e) << "fp16)(Tensor) = expand_dims(x=%" << name
         << ", axes=[2], name=\"" << name << "_e\")\n";
      os << "    %" << name << "_t: (" << shapeText(t) << "fp16)(Tensor) = tile(x=%" << name
         << "_e, reps=[1, 1, " << p.groups << ", 1, 1], name=\"" << name << "_t\")\n";
      os << "    %" << name << "_r: (" << shapeText(r) << "fp16)(Tensor) = reshape(x=%" << name
         << "_t, shape=[" << r[0] << ", " << r[1] << ", " << r[2] << ", " << r[3] << "], name=\""
         << name << "_r\")\n";
    }
    key = "%k_r";
    value = "%v_r";
  }
  std::vector<int64_t> o = {p.batch, heads, p.rows, p.valueDim};
  os << "    %o: (" << shapeText(o)
     << "fp16)(Tensor) = scaled_dot_product_attention(query=%q, key=" << key << ", value=" << value
     << (p.mask != MaskKind::None ? ", attn_mask=%mask" : "") << ", name=\"o\")\n";
  os << "  } -> (%o)\n}\n";
  return os.str();
}

/// Random inputs; bool masks keep at least one key per row (a row with every
/// key masked is undefined in PyTorch and differs by design).
TensorMap inputs(const Function &fn, const Problem &p, std::mt19937 &rng) {
  TensorMap in;
  for (const auto &v : fn.inputs) {
    Shape shape = *v->type.staticShape();
    if (v->name == "mask" && p.mask == MaskKind::Bool) {
      Tensor t = Tensor::zeros(DType::Bool, shape);
      uint8_t *b = t.mutableData<uint8_t>();
      int64_t s = shape.back();
      for (int64_t i = 0; i < t.numElements(); ++i)
        b[i] = coinFlip(rng, 0.6);
      for (int64_t row = 0; row < t.numElements() / s; ++row)
        b[row * s + uniformInt(rng, 0, s - 1)] = 1;
      in[v->name] = t;
      continue;
    }
    Tensor t = Tensor::zeros(DType::F32, shape);
    for (int64_t i = 0; i < t.numElements(); ++i) {
      float x = normalFloat(rng, 0.0f, 2.0f);
      if (v->name == "mask") // additive: mostly small, some large negative
        x = coinFlip(rng, 0.6) ? x : -30.0f;
      t.mutableData<float>()[i] = halfToFloat(floatToHalf(x));
    }
    in[v->name] = t;
  }
  return in;
}

int countOps(const Function &fn, std::string_view type) {
  int n = 0;
  walk(*fn.body, [&](const Operation &op) { n += op.type == type; });
  return n;
}

TEST(DecomposeSdpa, MatchesTheSdpaKernelOnRandomProblems) {
  std::mt19937 rng(2024);
  auto pick = [&](std::vector<int64_t> options) {
    return options[static_cast<size_t>(
        uniformInt(rng, 0, static_cast<int64_t>(options.size()) - 1))];
  };
  double worst32 = 0, worst16 = 0;
  int groupedRuns = 0;
  for (int trial = 0; trial < 120; ++trial) {
    Problem p;
    p.batch = pick({1, 2});
    p.kvHeads = pick({1, 2, 3});
    p.groups = pick({1, 2, 4});
    p.rows = pick({1, 3});
    p.keys = pick({1, 5, 17, 40});
    p.dim = pick({4, 16, 64});
    p.valueDim = pick({4, 8});
    p.mask = static_cast<MaskKind>(trial % 3);
    int64_t heads = p.kvHeads * p.groups;
    // Broadcast shapes converters write: per key, per row and key,
    // per batch, per head.
    switch (pick({0, 1, 2, 3})) {
    case 0:
      p.maskShape = {1, p.keys};
      break;
    case 1:
      p.maskShape = {p.rows, p.keys};
      break;
    case 2:
      p.maskShape = {1, 1, p.rows, p.keys};
      break;
    default:
      p.maskShape = {p.batch, heads, p.rows, p.keys};
    }
    SCOPED_TRACE(program(p));
    auto before = parseModelText(program(p), "sdpa.mil", nullptr);
    auto after = parseModelText(program(p), "sdpa.mil", nullptr);
    PassManager pm;
    pm.addPipeline("decompose-sdpa,dce");
    PassResult r = pm.run(*after);
    EXPECT_TRUE(r.diagnostics.empty());
    const Function &fa = *after->program->functions.front();
    ASSERT_EQ(countOps(fa, "scaled_dot_product_attention"), 0);
    // Grouped-query problems read the unrepeated K and V.
    bool grouped = countOps(fa, "tile") == 0 && p.groups > 1;
    groupedRuns += grouped;
    if (p.groups > 1) {
      EXPECT_TRUE(grouped) << "mask " << shapeText(p.maskShape);
    }

    TensorMap in = inputs(*before->program->functions.front(), p, rng);
    for (Precision precision : {Precision::FP32, Precision::FP16}) {
      RunOptions options;
      options.precision = precision;
      Interpreter io(*before->program->functions.front(), options);
      Interpreter ia(fa, options);
      Tensor want = io.run(in).at(0).tensor, got = ia.run(in).at(0).tensor;
      ASSERT_EQ(want.shape(), got.shape());
      // The outputs are fp16. In fp32 mode both sides round one fp32 result
      // to fp16 at the end: at most one fp16 ulp of the value apart. fp16
      // mode rounds every op of the decomposition (the kernel only its
      // result), the weights to 2^-11 relative: a few ulps of the largest
      // |V| summed over.
      double vMax = 0;
      for (int64_t i = 0; i < in.at("v").numElements(); ++i)
        vMax = std::max(vMax, (double)std::fabs(in.at("v").floatAt(i)));
      double worst = 0;
      for (int64_t i = 0; i < want.numElements(); ++i) {
        double w = want.floatAt(i), d = std::fabs(w - got.floatAt(i));
        worst = std::max(worst, d);
        double bound = precision == Precision::FP32
                           ? std::ldexp(1.0, std::ilogb(std::max(std::fabs(w), 1.0 / 16384)) - 10)
                           : 4 * std::ldexp(vMax, -10);
        EXPECT_LE(d, bound) << (precision == Precision::FP32 ? "fp32" : "fp16") << " element " << i
                            << " " << w;
      }
      (precision == Precision::FP32 ? worst32 : worst16) =
          std::max(precision == Precision::FP32 ? worst32 : worst16, worst);
    }
  }
  EXPECT_GT(groupedRuns, 30);
  std::printf("max |diff| over 120 problems: fp32 %.3g, fp16 mode %.3g\n", worst32, worst16);
}

} // namespace
