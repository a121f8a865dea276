//===- Numerics.cpp - Where fp16 leaves fp32, op by op --------------------===//
#include "fix/Numerics.h"

#include "fix/Fix.h"
#include "support/DType.h"
#include "transforms/Patterns.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace anefit {
namespace {

/// One value's fp32 result on the current step.
struct Kept {
  double maxAbs = 0;
  /// Its values, when they fit the budget (else only maxAbs is compared).
  std::vector<float> values;
};

/// Origins a divergent value keeps track of (the first ones).
constexpr size_t kFollowed = 8;

/// fp16's spacing at 1 is 2^-10: four steps of it at the largest input
/// bound what rounding the inputs can move a result by (ours).
constexpr double kInputUlps = 4.0 / 1024.0;

/// A result drifts when more than this share of its elements moves past the
/// tolerance (ours), or its relative RMS error does.
constexpr double kOffShare = 0.25;

/// Below this |x| an fp32 value may round to zero in fp16 (half the
/// smallest subnormal, 2^-25); above it a zero at fp16 is a lost value.
constexpr double kZeroFloor = 2.9802322387695312e-08;

/// The smallest normal fp16 value, 2^-14: below it fp16 keeps fewer digits.
constexpr double kSmallestNormalHalf = 6.103515625e-05;

class Measurement {
public:
  explicit Measurement(const NumericsOptions &options) : options_(options) {}

  /// The fp32 run's results of `op` (and the function inputs it reads):
  /// kept for the fp16 run's comparison.
  void keep(const Operation &op, const std::vector<const runtime::Tensor *> &results,
            const std::vector<const runtime::Tensor *> &operands) {
    if (op.type == "const")
      return;
    std::vector<Value *> reads = op.operandValues();
    for (size_t i = 0; i < reads.size() && i < operands.size(); ++i)
      if (!reads[i]->definingOp && !kept_.count(reads[i]))
        keepValue(reads[i], operands[i]);
    for (size_t i = 0; i < results.size() && i < op.outputs.size(); ++i)
      keepValue(op.outputs[i].get(), results[i]);
  }

  /// The fp16 run's results of `op`, held against the kept fp32 ones.
  void compare(const Operation &op, const std::vector<const runtime::Tensor *> &results,
               const std::vector<const runtime::Tensor *> &operands) {
    if (op.type == "const")
      return;
    // Function inputs carried from step to step (caches) hold each run's
    // own values: what the fp16 run carries in may already have left fp32.
    // A cache has left it when any entry has: the few rows an earlier
    // step wrote wrong are a small share of a cache, but attention reads
    // them (without this, the attention would look like where it starts).
    std::vector<Value *> reads = op.operandValues();
    for (size_t i = 0; i < reads.size() && i < operands.size(); ++i)
      if (!reads[i]->definingOp && assessed_.insert(reads[i]).second)
        if (auto c = held(reads[i], operands[i], 0)) {
          if (c->divergent || c->anyOff)
            diverged_.insert(reads[i]);
          if (c->lost)
            lost_.insert(reads[i]);
        }
    std::vector<const Value *> divergedInputs;
    bool inputLost = false, inputNonFinite = false;
    double maxIn = 0;
    for (const Value *v : reads) {
      if (diverged_.count(v))
        divergedInputs.push_back(v);
      inputLost = inputLost || lost_.count(v);
      inputNonFinite = inputNonFinite || nonFinite_.count(v);
      auto it = kept_.find(v);
      if (it != kept_.end())
        maxIn = std::max(maxIn, it->second.maxAbs);
    }
    for (size_t i = 0; i < results.size() && i < op.outputs.size(); ++i) {
      const Value *value = op.outputs[i].get();
      std::optional<Held> c = held(value, results[i], maxIn);
      if (!c) {
        // Not compared (past what is kept, or not a float): it carries on
        // what it reads, so what reads it does not look like a start.
        if (!divergedInputs.empty()) {
          diverged_.insert(value);
          inherit(value, divergedInputs);
        }
        if (inputLost)
          lost_.insert(value);
        if (inputNonFinite)
          nonFinite_.insert(value);
        continue;
      }
      ++compared_;
      ane::MeasuredOp &m = c->m;
      m.op = op.name;
      m.maxAbsIn = maxIn;
      m.step = step_;
      // A result that reads a divergent value and has any element off
      // carries that divergence on, though too few elements moved to call
      // it divergent itself (a cache with one wrong row written into it):
      // what reads it does not start a divergence of its own.
      if (!c->divergent && c->anyOff && !divergedInputs.empty()) {
        diverged_.insert(value);
        inherit(value, divergedInputs);
      }
      if (c->divergent) {
        diverged_.insert(value);
        ++divergentThisStep_;
        if (m.nonFinite)
          nonFinite_.insert(value);
        if (c->lost)
          lost_.insert(value);
        // Where a loss starts: inf or NaN from finite inputs (an overflow
        // after a drift is an overflow of its own), or zeros from inputs
        // that hold fp32's values.
        if ((m.nonFinite && !inputNonFinite) || (c->lost && divergedInputs.empty() && !inputLost))
          merge(op, m, /*origin=*/true);
        // Which drifts this one descends from: a new one when what it
        // reads is right, else theirs (a few at most are followed).
        std::vector<size_t> &from = originsOf_[value];
        if (divergedInputs.empty() && !c->lost) {
          from.push_back(pending_.size());
          pending_.push_back({&op, m});
        }
        inherit(value, divergedInputs);
      }
      if (squaredValue(op))
        merge(op, m, /*origin=*/false);
    }
  }

  /// `value` descends from the drifts its divergent inputs descend from
  /// (a few at most are followed).
  void inherit(const Value *value, const std::vector<const Value *> &divergedInputs) {
    std::vector<size_t> &from = originsOf_[value];
    for (const Value *in : divergedInputs)
      for (size_t o : originsOf_[in])
        if (from.size() < kFollowed && std::find(from.begin(), from.end(), o) == from.end())
          from.push_back(o);
  }

  /// Clears what one step kept. The step's drifting ops that read no
  /// divergent value become origins when their drift reaches a function
  /// output that diverges too; one that dies on the way (an eps term
  /// rounded far below the sum it is added to) starts nothing. Losses
  /// (inf, NaN, zeroed values) are origins where they start.
  void endStep(const Function &fn) {
    std::vector<char> reaches(pending_.size(), 0);
    for (const Value *out : fn.body->outputs)
      if (diverged_.count(out))
        for (size_t o : originsOf_[out])
          reaches[o] = 1;
    for (size_t i = 0; i < pending_.size(); ++i)
      if (reaches[i])
        merge(*pending_[i].op, pending_[i].measured, /*origin=*/true);
    pending_.clear();
    originsOf_.clear();
    lost_.clear();
    nonFinite_.clear();
    assessed_.clear();
    kept_.clear();
    diverged_.clear();
    keptBytes_ = 0;
    divergentOps_ = std::max(divergentOps_, divergentThisStep_);
    divergentThisStep_ = 0;
    ++step_;
  }

  ane::NumericsMeasurement result(const std::string &function) {
    ane::NumericsMeasurement out;
    out.function = function;
    out.steps = step_;
    out.inputs = options_.inputsText;
    out.tolerance = options_.tolerance;
    out.opsCompared = step_ ? compared_ / static_cast<size_t>(step_) : 0;
    out.divergentOps = divergentOps_;
    for (const Operation *op : order_)
      out.ops.push_back(measured_.at(op));
    return out;
  }

private:
  /// A divergent op that read no divergent value, until the step ends.
  struct Pending {
    const Operation *op;
    ane::MeasuredOp measured;
  };

  /// One value's fp16 values held against its kept fp32 ones.
  struct Held {
    ane::MeasuredOp m;
    bool lost = false;
    bool divergent = false;
    /// Some element moved past the tolerance of its own size (and of the
    /// smallest normal fp16 value), however few.
    bool anyOff = false;
  };

  /// `value`'s fp16 values `t` against the kept fp32 ones, `maxIn` the
  /// largest |x| of what produced them; nullopt when either is missing.
  std::optional<Held> held(const Value *value, const runtime::Tensor *t, double maxIn) const {
    auto it = kept_.find(value);
    if (!t || t->isLazy() || !isFloat(t->dtype()) || it == kept_.end() || it->second.values.empty())
      return std::nullopt;
    const std::vector<float> &u = it->second.values;
    std::vector<float> v = t->toFloats();
    if (v.size() != u.size())
      return std::nullopt;
    Held h;
    ane::MeasuredOp &m = h.m;
    m.maxAbsOut = it->second.maxAbs;
    m.elements = u.size();
    // The tensor's typical magnitude (median |x| at fp32): an element is
    // off when it moves by more than the tolerance of its own size plus
    // that, so rounding near zero is not counted, and a few massive
    // channels do not hide the loss of every other one.
    std::vector<float> mags(u.size());
    for (size_t e = 0; e < u.size(); ++e)
      mags[e] = std::isfinite(u[e]) ? std::fabs(u[e]) : 0.0f;
    auto mid = mags.begin() + static_cast<std::ptrdiff_t>(mags.size() / 2);
    std::nth_element(mags.begin(), mid, mags.end());
    double typical = mags.empty() ? 0.0 : *mid;
    double err2 = 0, norm2 = 0;
    size_t off = 0, counted = 0;
    for (size_t e = 0; e < u.size(); ++e) {
      if (!std::isfinite(u[e]))
        continue;
      ++counted;
      if (!std::isfinite(v[e])) {
        ++m.nonFinite;
        continue;
      }
      // Zero where fp32 holds a value of the tensor's own size, and more
      // than the rounding of its inputs to fp16 explains (4 steps of fp16
      // at the largest input): lost (an underflow). A difference of two
      // large values that fp16 rounds to the same number is rounding.
      double u1 = std::fabs(u[e]);
      if (v[e] == 0 && u1 > kZeroFloor && u1 > options_.tolerance * typical &&
          u1 > kInputUlps * maxIn)
        ++m.zeroed;
      double d = static_cast<double>(u[e]) - v[e];
      err2 += d * d;
      norm2 += static_cast<double>(u[e]) * u[e];
      off += std::fabs(d) > options_.tolerance * (u1 + typical);
      h.anyOff = h.anyOff || std::fabs(d) > options_.tolerance * (u1 + kSmallestNormalHalf);
    }
    m.relError = m.nonFinite ? INFINITY : norm2 > 0 ? std::sqrt(err2 / norm2) : 0;
    h.lost = m.nonFinite > 0 || m.zeroed > 0;
    h.divergent = h.lost || m.relError > options_.tolerance ||
                  static_cast<double>(off) > kOffShare * static_cast<double>(counted);
    return h;
  }

  /// One value's fp32 values (or its largest |x| past the budget).
  void keepValue(const Value *value, const runtime::Tensor *t) {
    if (!t || t->isLazy() || !isFloat(t->dtype()))
      return;
    Kept k;
    std::vector<float> v = t->toFloats();
    for (float x : v)
      if (std::isfinite(x))
        k.maxAbs = std::max(k.maxAbs, static_cast<double>(std::fabs(x)));
    uint64_t bytes = v.size() * sizeof(float);
    if (keptBytes_ + bytes <= options_.keepBytes) {
      keptBytes_ += bytes;
      k.values = std::move(v);
    }
    kept_[value] = std::move(k);
  }

  /// Adds one step's comparison of `op` to its record: largest
  /// magnitudes over the steps, the worst step's losses and error.
  void merge(const Operation &op, const ane::MeasuredOp &m, bool origin) {
    auto [it, inserted] = measured_.try_emplace(&op, m);
    if (inserted) {
      order_.push_back(&op);
    } else {
      ane::MeasuredOp &r = it->second;
      r.maxAbsIn = std::max(r.maxAbsIn, m.maxAbsIn);
      r.maxAbsOut = std::max(r.maxAbsOut, m.maxAbsOut);
      bool worse = m.nonFinite + m.zeroed > r.nonFinite + r.zeroed ||
                   (m.nonFinite + m.zeroed == r.nonFinite + r.zeroed && m.relError > r.relError);
      if (worse) {
        r.nonFinite = m.nonFinite;
        r.zeroed = m.zeroed;
        r.relError = m.relError;
        r.elements = m.elements;
        r.step = m.step;
      }
    }
    it->second.origin = it->second.origin || origin;
  }

  const NumericsOptions &options_;
  std::unordered_map<const Value *, Kept> kept_;
  std::unordered_set<const Value *> diverged_, lost_, nonFinite_, assessed_;
  std::vector<Pending> pending_;
  std::unordered_map<const Value *, std::vector<size_t>> originsOf_;
  std::unordered_map<const Operation *, ane::MeasuredOp> measured_;
  std::vector<const Operation *> order_;
  uint64_t keptBytes_ = 0;
  size_t compared_ = 0, divergentThisStep_ = 0, divergentOps_ = 0;
  int64_t step_ = 0;
};

} // namespace

ane::NumericsMeasurement measureNumerics(const Model &model, const NumericsOptions &options) {
  Measurement m(options);
  runtime::ModelRunOptions o32 = options.run, o16 = options.run;
  o32.run.precision = runtime::Precision::FP32;
  o16.run.precision = runtime::Precision::FP16;
  o32.run.opResults = [&](const Operation &op, const std::vector<const runtime::Tensor *> &r,
                          const std::vector<const runtime::Tensor *> &in) { m.keep(op, r, in); };
  o16.run.opResults = [&](const Operation &op, const std::vector<const runtime::Tensor *> &r,
                          const std::vector<const runtime::Tensor *> &in) { m.compare(op, r, in); };
  runtime::ModelRun run32(model, std::move(o32)), run16(model, std::move(o16));
  GapMeter meter;
  while (!run32.done()) {
    runtime::StepRecord r32 = run32.next();
    runtime::StepRecord r16 = run16.next();
    meter.add(r32.outputs, r16.outputs);
    m.endStep(run32.function());
  }
  ane::NumericsMeasurement out = m.result(run32.function().name);
  for (ane::MeasuredOp &op : out.ops)
    op.function = out.function;
  PrecisionGap gap = meter.finish(run32.steps());
  out.widest = gap.widest;
  out.outputNonFinite = gap.nonFinite;
  out.collapsedRows = gap.collapsedRows;
  out.rows = gap.rows;
  out.top1Agree = gap.top1Agree;
  out.outputRelError = gap.reportedRelError();
  return out;
}

} // namespace anefit
