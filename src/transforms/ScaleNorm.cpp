//===- ScaleNorm.cpp - Overflow-safe norms: scale x before squaring it ----===//
//
// A decomposed RMSNorm, y = x * rsqrt(mean(x^2) + eps) (or x / sqrt(...)),
// squares x in the program's precision. On the ANE that is fp16, whose
// largest value is 65504: any |x| above 256 squares to inf, rsqrt gives 0
// and the whole row is lost. Trained LLMs carry activations in the tens of
// thousands, so this is what an export's norms do to a trained model's
// outputs. The same holds for a decomposed LayerNorm, whose x is the
// centred input.
//
// The rewrite divides x by m = max(max|x|, 2^-14) over the reduced axes
// first:
//
//   y = (x / m) * rsqrt(mean((x / m)^2) + eps / m / m)
//
// which is the original in real arithmetic for any m > 0 (multiply inside
// the root by m^2). Every intermediate stays in range: (x / m)^2 <= 1, and
// eps / m / m <= eps * 2^28 (2684 for eps = 1e-5). The floor on m keeps an
// all-zero row at zero instead of 0 / 0. eps keeps the value the program
// stores, so in fp32 the rewrite differs from the original by rounding
// only.
//
//===----------------------------------------------------------------------===//
#include "support/DType.h"
#include "transforms/PassImpl.h"
#include "transforms/PatternRewriter.h"
#include "transforms/Patterns.h"

#include <cmath>

namespace anefit {
namespace {

/// MIL's default epsilon of rsqrt (iOS15 and later).
constexpr double kRsqrtDefaultEpsilon = 1e-12;

/// The floor of the scale: the smallest normal fp16 value (ours; any
/// positive value keeps the rewrite exact in real arithmetic).
constexpr float kScaleFloor = 6.103515625e-05f;

/// The one op using `v`, or null when it has no use or several (or is a
/// function output).
Operation *soleUser(const UseMap &uses, const Value *v) {
  const std::vector<Use> &us = uses.uses(v);
  if (us.size() != 1)
    return nullptr;
  std::vector<Operation *> users = uses.users(v);
  return users.size() == 1 ? users[0] : nullptr;
}

/// A constant of one element bound to `param` of `op`, as a double.
std::optional<double> scalarInput(const Operation &op, std::string_view param) {
  const Constant *c = op.constInput(param);
  if (!c || c->numElements() != 1 || !isFloat(c->type.dtype()))
    return std::nullopt;
  return c->elementAsDouble(0);
}

/// The operand of binary `op` that is not `v`, or null when `op` does not
/// read `v` as x or y.
Value *otherOperand(const Operation &op, const Value *v) {
  Value *x = op.inputValue("x"), *y = op.inputValue("y");
  if (x == v)
    return y;
  if (y == v)
    return x;
  return nullptr;
}

/// One decomposed norm: x squared, the mean over `mean`'s axes, eps added,
/// the inverse root, and `out` = x times it.
struct NormMatch {
  Value *x = nullptr;
  Operation *mean = nullptr;
  Operation *out = nullptr;
  double eps = 0;
};

/// Matches the chain from the square `op` to the op that multiplies (or
/// divides) x by the inverse root; nullopt when any link differs or a value
/// in the chain has another use.
std::optional<NormMatch> matchNorm(Operation &op, const UseMap &uses) {
  NormMatch m;
  m.x = squaredValue(op);
  if (!m.x)
    return std::nullopt;
  m.mean = soleUser(uses, op.output());
  if (!m.mean || m.mean->type != "reduce_mean" || m.mean->inputValue("x") != op.output())
    return std::nullopt;
  const Constant *keep = m.mean->constInput("keep_dims");
  if (!keep || !keep->asScalar() || *keep->asScalar() == 0 || !m.mean->constInput("axes"))
    return std::nullopt;
  Value *v = m.mean->output();
  Operation *next = soleUser(uses, v);
  if (next && next->type == "add") {
    // eps: a constant of one element on the other side.
    std::optional<double> eps =
        next->inputValue("x") == v ? scalarInput(*next, "y") : scalarInput(*next, "x");
    if (!eps)
      return std::nullopt;
    m.eps = *eps;
    v = next->output();
    next = soleUser(uses, v);
  }
  if (!next || next->inputValue("x") != v)
    return std::nullopt;
  if (next->type == "rsqrt") {
    std::optional<double> e = scalarInput(*next, "epsilon");
    m.eps += next->input("epsilon") ? e.value_or(-1) : kRsqrtDefaultEpsilon;
    m.out = soleUser(uses, next->output());
    if (!m.out || m.out->type != "mul" || otherOperand(*m.out, next->output()) != m.x)
      return std::nullopt;
  } else if (next->type == "sqrt") {
    m.out = soleUser(uses, next->output());
    if (!m.out || m.out->type != "real_div" || m.out->inputValue("x") != m.x ||
        m.out->inputValue("y") != next->output())
      return std::nullopt;
  } else {
    return std::nullopt;
  }
  if (!(m.eps >= 0) || !std::isfinite(m.eps))
    return std::nullopt;
  return m;
}

Constant floatScalar(DType dt, float v) {
  return dt == DType::F16 ? Constant::fromF16Bits({floatToHalf(v)}, {}) : Constant::scalarF32(v);
}

class ScaleNormPass : public Pass {
public:
  explicit ScaleNormPass(const PassOptions &) {}
  std::string_view name() const override { return "scale-norm"; }
  void run(Model &model, PassResult &result) override;
};

/// Writes the scaled form of `m` before its last op and replaces that op,
/// keeping its names.
void rewrite(const NormMatch &m, PatternRewriter &rw) {
  Operation &at = *m.out;
  std::string base = at.name;
  DType dt = m.x->type.dtype();
  Type rowType = m.mean->output()->type;
  Value *axes = m.mean->inputValue("axes");
  Value *keep = m.mean->inputValue("keep_dims");
  auto reduce = [&](std::string type, std::string_view hint, Value *x) {
    std::vector<NewInput> in{{"x", {x}}};
    if (axes)
      in.push_back({"axes", {axes}});
    else
      in.push_back(
          {"axes", {rw.createConst(at, std::string(hint) + "_axes", *m.mean->constInput("axes"))}});
    if (keep)
      in.push_back({"keep_dims", {keep}});
    else
      in.push_back(
          {"keep_dims",
           {rw.createConst(at, std::string(hint) + "_keep_dims", Constant::scalarBool(true))}});
    return rw.create(at, std::move(type), hint, std::move(in), {rowType})->output();
  };
  auto binary = [&](std::string type, std::string_view hint, Value *x, Value *y, Type t) {
    return rw.create(at, std::move(type), hint, {{"x", {x}}, {"y", {y}}}, {t})->output();
  };
  auto unary = [&](std::string type, std::string_view hint, Value *x, Type t) {
    return rw.create(at, std::move(type), hint, {{"x", {x}}}, {t})->output();
  };
  Value *absX = unary("abs", base + "_abs", m.x, m.x->type);
  Value *peak = reduce("reduce_max", base + "_max_abs", absX);
  Value *floor = rw.createConst(at, base + "_scale_floor", floatScalar(dt, kScaleFloor));
  Value *scale = binary("maximum", base + "_scale", peak, floor, rowType);
  Value *xs = binary("real_div", base + "_scaled", m.x, scale, m.x->type);
  Value *sq = unary("square", base + "_scaled_square", xs, m.x->type);
  Value *ms = reduce("reduce_mean", base + "_scaled_mean", sq);
  // eps / m / m: divided twice rather than by m^2, which overflows fp16
  // past m = 256; for a large m it underflows to 0, far below the mean.
  Value *eps = rw.createConst(at, base + "_eps", floatScalar(dt, static_cast<float>(m.eps)));
  Value *epsOnce = binary("real_div", base + "_eps_scaled_once", eps, scale, rowType);
  Value *epsTerm = binary("real_div", base + "_eps_scaled", epsOnce, scale, rowType);
  Value *den = binary("add", base + "_scaled_var", ms, epsTerm, rowType);
  Value *inv = unary("rsqrt", base + "_scaled_rsqrt", den, rowType);
  Value *y = binary("mul", base + "_scaled_norm", xs, inv, at.output()->type);
  std::vector<Value *> old{at.operandValues()};
  rw.replaceOpKeepingNames(at, y);
  eraseDeadProducers(rw, old);
}

void ScaleNormPass::run(Model &model, PassResult &result) {
  for (auto &fn : model.program->functions) {
    UseMap uses(*fn);
    PatternRewriter rw(*fn, uses);
    std::vector<Operation *> squares;
    for (auto &op : fn->body->ops)
      if (squaredValue(*op))
        squares.push_back(op.get());
    size_t done = 0;
    for (Operation *op : squares) {
      if (rw.isErased(op))
        continue;
      std::optional<NormMatch> m = matchNorm(*op, uses);
      if (!m)
        continue;
      rewrite(*m, rw);
      ++done;
    }
    result.exactInFp32Only = result.exactInFp32Only || done > 0;
    if (done)
      result.changes.push_back("scale-norm: " + fn->name + ": " + std::to_string(done) + " norm" +
                               (done == 1 ? "" : "s") +
                               " -> x scaled by its largest |x| before the square");
  }
}

} // namespace

Value *squaredValue(const Operation &op) {
  if (op.outputs.size() != 1 || !isFloat(op.output()->type.dtype()))
    return nullptr;
  if (op.type == "square")
    return op.inputValue("x");
  if (op.type == "mul") {
    Value *x = op.inputValue("x");
    return x && x == op.inputValue("y") ? x : nullptr;
  }
  if (op.type == "pow") {
    const Constant *e = op.constInput("y");
    auto v =
        e && e->numElements() == 1 ? std::optional<double>(e->elementAsDouble(0)) : std::nullopt;
    return v && *v == 2.0 ? op.inputValue("x") : nullptr;
  }
  return nullptr;
}

std::unique_ptr<Pass> createScaleNormPass(const PassOptions &options) {
  return std::make_unique<ScaleNormPass>(options);
}

} // namespace anefit
