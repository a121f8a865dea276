//===- Interpreter.cpp - Reference interpreter for MIL programs -----------===//
//
// Plans a function once (a slot per value, the op after which each value is
// dead, the kernel of each op, which values depend on constants only and which
// may stay lazy) and then runs it: bind inputs, call kernels in program order,
// free values at their last use, return the outputs. Values computed from
// constants alone are kept from one run to the next (within a byte budget),
// so a compressed weight read by an op that cannot decode it in place is
// expanded once, not at every step.
//
//===----------------------------------------------------------------------===//
#include "runtime/Interpreter.h"
#include "ops/OpRegistry.h"

#include "ops/Weights.h"
#include "runtime/Convert.h"
#include "runtime/Kernel.h"
#include "runtime/Profile.h"
#include "runtime/ThreadPool.h"
#include "support/Error.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <unordered_map>
#include <utility>

namespace anefit::runtime {
namespace {

struct KernelRow {
  std::string_view opType;
  KernelFn fn;
};

constexpr KernelRow kKernels[] = {
#define KERNEL(OpType, Fn) {OpType, &Fn},
#include "runtime/Kernels.def"
};

const std::unordered_map<std::string_view, KernelFn> &kernelTable() {
  static const std::unordered_map<std::string_view, KernelFn> table = [] {
    std::unordered_map<std::string_view, KernelFn> t;
    for (const KernelRow &row : kKernels)
      t.emplace(row.opType, row.fn);
    return t;
  }();
  return table;
}

std::string opWhere(const Operation &op) { return "op '" + op.name + "' (" + op.type + ")"; }

/// Turns a Constant holding a tensor into a Tensor viewing its bytes in place.
Tensor constantTensor(const Constant &c, const Operation &op) {
  if (!c.isTensorLike())
    throw InputError(opWhere(op) + ": expected a tensor constant, found " + c.type.str());
  if (c.type.dtype() == DType::String)
    throw InputError(opWhere(op) + ": a string constant is not a tensor");
  auto shape = c.type.staticShape();
  if (!shape)
    throw InputError(opWhere(op) + ": constant of type " + c.type.str() + " has no static shape");
  for (int64_t d : *shape)
    if (d < 0)
      throw InputError(opWhere(op) + ": constant has negative dimension");
  std::span<const uint8_t> data = c.data();
  uint64_t n = 1;
  for (int64_t d : *shape) {
    if (d && n > (uint64_t(1) << 40) / static_cast<uint64_t>(d))
      throw InputError(opWhere(op) + ": constant shape is too large");
    n *= static_cast<uint64_t>(d);
  }
  uint64_t need = storageBytes(c.type.dtype(), n);
  if (data.size() < need)
    throw InputError(opWhere(op) + ": constant of type " + c.type.str() + " holds " +
                     std::to_string(data.size()) + " bytes, expected " + std::to_string(need));
  std::shared_ptr<const void> owner;
  if (c.kind == Constant::Kind::Blob)
    owner = c.blob.store;
  return Tensor::borrow(c.type.dtype(), *shape, data.data(), std::move(owner));
}

bool sameKind(DType a, DType b) {
  if (isFloat(a) || isFloat(b))
    return isFloat(a) && isFloat(b);
  if (a == DType::Bool || b == DType::Bool)
    return a == b;
  return isInteger(a) && isInteger(b);
}

} // namespace

bool hasKernel(std::string_view opType) { return kernelTable().count(opType) != 0; }

std::vector<std::string> kernelOpTypes() {
  std::vector<std::string> out;
  for (const KernelRow &row : kKernels)
    out.emplace_back(row.opType);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Precision parsePrecision(std::string_view s) {
  if (s == "fp32")
    return Precision::FP32;
  if (s == "fp16")
    return Precision::FP16;
  throw InputError("--precision: expected fp32 or fp16, found '" + std::string(s) + "'");
}

//===----------------------------------------------------------------------===//
// StateContext
//===----------------------------------------------------------------------===//

void StateContext::initialize(const Function &fn) {
  for (const auto &in : fn.inputs) {
    if (!in->type.isState() || states_.count(in->name))
      continue;
    auto shape = in->type.staticShape();
    if (!shape)
      throw InputError("function '" + fn.name + "': state '" + in->name + "' of type " +
                       in->type.str() + " has no static shape");
    try {
      states_[in->name] = Tensor::zeros(computeDType(in->type.dtype()), *shape);
    } catch (const MemoryBudgetError &e) {
      throw MemoryBudgetError("function '" + fn.name + "': state '" + in->name + "': " + e.what());
    }
  }
}

void StateContext::set(const Function &fn, const std::string &name, const Tensor &value) {
  const Value *decl = fn.findInput(name);
  if (!decl || !decl->type.isState()) {
    std::string names;
    for (const auto &in : fn.inputs)
      if (in->type.isState())
        names += (names.empty() ? "" : ", ") + in->name;
    throw InputError("state '" + name + "': function '" + fn.name +
                     "' has no such state (states: " + (names.empty() ? "none" : names) + ")");
  }
  auto shape = decl->type.staticShape();
  if (!shape || *shape != value.shape())
    throw InputError("state '" + name + "': expected shape " + decl->type.shapeStr() + ", found " +
                     shapeStr(value.shape()));
  if (!sameKind(decl->type.dtype(), value.dtype()))
    throw InputError("state '" + name + "': expected dtype " +
                     std::string(dtypeName(decl->type.dtype())) + ", found " +
                     std::string(dtypeName(value.dtype())));
  states_[name] = value.convertTo(computeDType(decl->type.dtype()));
}

const Tensor *StateContext::find(const std::string &name) const {
  auto it = states_.find(name);
  return it == states_.end() ? nullptr : &it->second;
}

//===----------------------------------------------------------------------===//
// Plan
//===----------------------------------------------------------------------===//

struct InterpreterPlan {
  std::unordered_map<const Value *, size_t> slots;
  struct Step {
    const Operation *op;
    KernelFn fn;
    std::vector<size_t> freeAfter;
    /// Every input is a constant or a folded value: the outputs are kept.
    bool folded = false;
    /// LazyKind bits every reader of output 0 takes.
    unsigned lazyOut = 0;
    /// Slot of each binding of each input (SIZE_MAX: a constant), and of
    /// each output.
    std::vector<std::vector<size_t>> inputSlots;
    std::vector<size_t> outputSlots;
    /// With RunOptions::profile: the op type's row there, its group row
    /// (OpProfile::groupBy) and the weight bytes the op reads.
    size_t profileRow = 0;
    size_t profileGroup = OpProfile::kNoGroup;
    uint64_t weightBytes = 0;
    /// Kept across runs, filled as the kernel asks: its parameters' bindings
    /// and its immediate constants as tensors (deques: references stay put).
    std::deque<ParamBinding> params;
    std::deque<std::pair<const Constant *, Tensor>> constants;
  };
  std::vector<Step> steps;
  size_t numSlots = 0;
  /// Per slot: LazyKind bits the readers of the value take; the step that
  /// frees it (SIZE_MAX: never).
  std::vector<unsigned> lazyOk;
  std::vector<size_t> freedAt;
  /// Per function output: whether the caller wants it widened too.
  std::vector<char> widen;

  // Kept across runs.
  /// Values of folded steps, by slot (invalid until computed).
  std::vector<Tensor> folded;
  std::vector<char> foldTried;
  /// FP16 mode: the folded value was rounded to fp16.
  std::vector<char> foldRounded;
  /// Compute-dtype copies of constants whose stored dtype differs (fp16 norms
  /// and biases), by bytes address.
  std::unordered_map<const void *, Tensor> converted;
  uint64_t cachedBytes = 0;
};

namespace {

/// Bytes a kept tensor costs (views of constants and lazy values: none).
uint64_t ownedBytes(const Tensor &t) { return t.isOwned() && !t.isLazy() ? t.numBytes() : 0; }

/// Accepted LazyKind bits of (op type, param), and whether the op hands them on.
struct LazyRule {
  std::string_view opType, param;
  unsigned kinds;
  bool passes;
};

constexpr LazyRule kLazyRules[] = {
#define LAZY_INPUT(OpType, Param, Kinds, Passes) {OpType, Param, Kinds, Passes},
#include "runtime/Kernels.def"
};

const LazyRule *lazyRule(std::string_view opType, std::string_view param) {
  for (const LazyRule &r : kLazyRules)
    if (r.opType == opType && r.param == param)
      return &r;
  return nullptr;
}

/// One op's view of the interpreter state while its kernel runs.
class RunContext final : public KernelContext {
public:
  RunContext(InterpreterPlan::Step &step, size_t index, InterpreterPlan &plan,
             std::vector<Tensor> &env, StateContext &states, const RunOptions &options,
             uint64_t cacheBudget, std::deque<Tensor> &temps)
      : KernelContext(*step.op), step_(step), index_(index), plan_(plan), env_(env),
        states_(states), options_(options), cacheBudget_(cacheBudget), temps_(temps) {}

  ParamBinding &binding(std::string_view param) const override {
    for (ParamBinding &b : step_.params)
      if (b.name == param)
        return b;
    return step_.params.emplace_back(ParamBinding::of(op, param));
  }

  const Tensor &raw(std::string_view param) override { return dense(held(param)); }

  const Tensor &lazyIn(std::string_view param) override {
    const Tensor &t = held(param);
    if (!t.isLazy())
      return t;
    const LazyRule *rule = lazyRule(op.type, param);
    if (rule && (rule->kinds & t.lazyValue()->kind()))
      return t;
    return dense(t);
  }

  const Tensor &in(std::string_view param) override { return compute(raw(param)); }

  Tensor takeOrCopy(std::string_view param) override {
    const OpInput *in = binding(param).input;
    if (in && in->bindings.size() == 1 && in->bindings[0].isValue()) {
      size_t slot = step_.inputSlots[static_cast<size_t>(in - op.inputs.data())][0];
      if (plan_.freedAt[slot] == index_ && boundOnce(in->bindings[0].value)) {
        Tensor &t = env_[slot];
        if (!t.isLazy() && t.ownsUniquely() && computeDType(t.dtype()) == t.dtype())
          return std::move(t);
      }
    }
    return this->in(param).clone();
  }

  std::vector<const Tensor *> variadic(std::string_view param) override {
    const OpInput *in = binding(param).input;
    if (!in)
      fail("missing input '" + std::string(param) + "'");
    std::vector<const Tensor *> out;
    for (size_t i = 0; i < in->bindings.size(); ++i)
      out.push_back(&compute(dense(bound(*in, i, param))));
    return out;
  }

  const Tensor &stateOf(std::string_view param) override {
    const Tensor *t = states_.find(stateName(param));
    if (!t)
      fail("state '" + stateName(param) + "' has no value");
    return *t;
  }

  void setState(std::string_view param, Tensor value) override {
    std::string name = stateName(param);
    const Tensor *old = states_.find(name);
    value = value.materialize();
    if (old && old->shape() != value.shape())
      fail("state '" + name + "' has shape " + shapeStr(old->shape()) + ", the update has shape " +
           shapeStr(value.shape()));
    if (old && old->dtype() != value.dtype())
      value = value.convertTo(old->dtype());
    else if (!value.isOwned())
      value = value.clone();
    states_.setUnchecked(name, std::move(value));
  }

  void setOutput(size_t i, Tensor t) override {
    if (i >= op.outputs.size())
      failMissingOutput(i);
    env_[step_.outputSlots[i]] = std::move(t);
  }

  bool outputMayBeLazy(LazyKind kind) const override { return (step_.lazyOut & kind) != 0; }
  const RunOptions &options() const override { return options_; }

  /// Drops the temporaries of this op.
  void finish() { temps_.clear(); }

private:
  /// The tensor bound to `param`, as held (possibly lazy).
  const Tensor &held(std::string_view param) {
    const ParamBinding &pb = binding(param);
    const OpInput *in = pb.input;
    if (!in || in->bindings.empty()) {
      if (pb.attribute)
        return constantOf(*pb.attribute);
      fail("missing input '" + std::string(param) + "'");
    }
    return bound(*in, 0, param);
  }

  /// Constant `c` as a tensor viewing its bytes, made once per op.
  const Tensor &constantOf(const Constant &c) {
    for (const auto &[k, t] : step_.constants)
      if (k == &c)
        return t;
    return step_.constants.emplace_back(&c, constantTensor(c, op)).second;
  }

  /// Binding `i` of input `in`.
  const Tensor &bound(const OpInput &in, size_t i, std::string_view param) {
    const Binding &b = in.bindings[i];
    if (b.isValue()) {
      size_t slot = step_.inputSlots[static_cast<size_t>(&in - op.inputs.data())][i];
      const Tensor &t = env_[slot];
      if (t.valid())
        return t;
      const Tensor &f = plan_.folded[slot];
      if (f.valid())
        return f;
      fail("input '" + std::string(param) + "' value '" + b.value->name +
           "' has no value (a state must be read with read_state)");
    }
    if (!b.constant)
      fail("input '" + std::string(param) + "' is empty");
    return constantOf(*b.constant);
  }

  bool boundOnce(const Value *v) const {
    int n = 0;
    for (const OpInput &in : op.inputs)
      for (const Binding &b : in.bindings)
        n += b.value == v;
    return n == 1;
  }

  /// The dense form of `t` (lazy values materialized for this op).
  const Tensor &dense(const Tensor &t) {
    if (!t.isLazy())
      return t;
    temps_.push_back(t.materialize());
    return temps_.back();
  }

  /// `t` in compute dtype; converted constants are kept across runs.
  const Tensor &compute(const Tensor &t) {
    DType want = computeDType(t.dtype());
    if (want == t.dtype())
      return t;
    if (!t.isOwned()) {
      auto it = plan_.converted.find(t.bytes());
      if (it != plan_.converted.end() && it->second.shape() == t.shape() &&
          it->second.dtype() == want)
        return it->second;
      Tensor c = t.convertTo(want);
      if (plan_.cachedBytes + c.numBytes() <= cacheBudget_) {
        plan_.cachedBytes += c.numBytes();
        return plan_.converted[t.bytes()] = std::move(c);
      }
      temps_.push_back(std::move(c));
      return temps_.back();
    }
    temps_.push_back(t.convertTo(want));
    return temps_.back();
  }

  std::string stateName(std::string_view param) {
    const OpInput *in = binding(param).input;
    if (!in || in->bindings.size() != 1 || !in->bindings[0].isValue())
      fail("input '" + std::string(param) + "' must be a state");
    const Value *v = in->bindings[0].value;
    if (!v->type.isState())
      fail("input '" + std::string(param) + "' value '" + v->name + "' is not a state");
    return v->name;
  }

  InterpreterPlan::Step &step_;
  size_t index_;
  InterpreterPlan &plan_;
  std::vector<Tensor> &env_;
  StateContext &states_;
  const RunOptions &options_;
  uint64_t cacheBudget_;
  /// This op's temporaries (owned by the run, reused from op to op).
  std::deque<Tensor> &temps_;
};

using Clock = std::chrono::steady_clock;

/// Checks the caller's inputs against the function's: every name known and
/// every non-state input given, with its dtype kind and shape (symbolic
/// dims bound consistently).
void checkInputs(const Function &fn, const TensorMap &inputs) {
  std::string where = "function '" + fn.name + "'";
  for (const auto &[name, t] : inputs) {
    const Value *decl = fn.findInput(name);
    if (!decl || decl->type.isState()) {
      std::string names;
      for (const auto &in : fn.inputs)
        if (!in->type.isState())
          names += (names.empty() ? "" : ", ") + in->name;
      throw InputError(where + ": unknown input '" + name +
                       "' (inputs: " + (names.empty() ? "none" : names) + ")");
    }
  }
  std::map<std::string, int64_t> symbols;
  for (const auto &in : fn.inputs) {
    if (in->type.isState())
      continue;
    auto it = inputs.find(in->name);
    if (it == inputs.end())
      throw InputError(where + ": missing input '" + in->name + "' of type " + in->type.str());
    const Tensor &t = it->second;
    const Type &type = in->type;
    if (!sameKind(type.dtype(), t.dtype()))
      throw InputError(where + ": input '" + in->name + "': expected dtype " +
                       std::string(dtypeName(type.dtype())) + ", found " +
                       std::string(dtypeName(t.dtype())));
    if (type.hasRank()) {
      bool ok = type.rank() == t.rank();
      for (int64_t d = 0; ok && d < t.rank(); ++d) {
        const Dim &dim = type.shape()[d];
        if (dim.isStatic())
          ok = dim.size == t.dim(d);
        else if (dim.kind == Dim::Kind::Symbolic) {
          auto [s, fresh] = symbols.emplace(dim.symbol, t.dim(d));
          ok = fresh || s->second == t.dim(d);
        }
      }
      if (!ok)
        throw InputError(where + ": input '" + in->name + "': expected shape " + type.shapeStr() +
                         ", found " + shapeStr(t.shape()));
    }
  }
}

/// Puts the checked inputs in their slots. Not copied when already in
/// compute dtype: taken when the caller hands the inputs over (`owned`),
/// shared otherwise (kernels write only what they own alone: takeOrCopy
/// copies anything else).
void bindInputs(const Function &fn, const TensorMap &inputs, TensorMap *owned,
                const InterpreterPlan &plan, std::vector<Tensor> &env) {
  for (const auto &in : fn.inputs) {
    if (in->type.isState())
      continue;
    const Tensor &t = inputs.find(in->name)->second;
    DType want = computeDType(in->type.dtype());
    size_t slot = plan.slots.at(in.get());
    if (t.dtype() != want || t.isLazy() || isSubByte(want))
      env[slot] = t.convertTo(want);
    else if (owned)
      env[slot] = std::exchange(owned->find(in->name)->second, Tensor());
    else
      env[slot] = t;
  }
}

/// One run of a plan's steps over the run's slots.
struct StepRunner {
  InterpreterPlan &plan;
  std::vector<Tensor> &env;
  StateContext &states;
  const RunOptions &options;
  const std::string &fnName;
  bool fp16;
  /// FP16 mode: slots whose values the interpreter has rounded to fp16.
  std::vector<char> rounded;
  /// Temporaries of the op running (cleared after each op, its memory kept).
  std::deque<Tensor> temps;
  size_t done = 0;

  StepRunner(InterpreterPlan &plan, std::vector<Tensor> &env, StateContext &states,
             const RunOptions &options, const std::string &fnName)
      : plan(plan), env(env), states(states), options(options), fnName(fnName),
        fp16(options.precision == Precision::FP16), rounded(fp16 ? plan.numSlots : 0, 0) {}

  void runAll() {
    for (size_t si = 0; si < plan.steps.size(); ++si) {
      if (!reuseFolded(si))
        runStep(si);
      if (options.progress)
        options.progress(++done, plan.steps.size());
    }
  }

  /// A folded step whose values an earlier run kept: nothing to run.
  bool reuseFolded(size_t si) {
    const InterpreterPlan::Step &step = plan.steps[si];
    if (!step.folded || !plan.foldTried[si])
      return false;
    for (size_t slot : step.outputSlots)
      if (!plan.folded[slot].valid())
        return false;
    if (options.profile)
      options.profile->record(step.profileRow, 0.0, 0, step.profileGroup);
    return true;
  }

  void runStep(size_t si) {
    InterpreterPlan::Step &step = plan.steps[si];
    const Operation &op = *step.op;
    OpProfile *profile = options.profile;
    Clock::time_point opStart = profile || options.opTimed ? Clock::now() : Clock::time_point();
    RunContext ctx(step, si, plan, env, states, options, options.foldCacheBytes, temps);
    try {
      step.fn(ctx);
    } catch (const MemoryBudgetError &e) {
      // Name the op and the function; the file comes from run().
      ctx.fail(std::string(e.what()) + " (in function '" + fnName + "')");
    } catch (const std::bad_alloc &) {
      ctx.fail("out of memory (in function '" + fnName +
               "'; --max-memory sets how much the interpreter may use)");
    }
    for (size_t oi = 0; oi < op.outputs.size(); ++oi) {
      size_t slot = step.outputSlots[oi];
      if (!env[slot].valid())
        ctx.fail("kernel did not produce output '" + op.outputs[oi]->name + "'");
      if (fp16 && env[slot].dtype() == DType::F32 && !env[slot].isLazy() && op.type != "const")
        roundToHalf(step, slot);
    }
    ctx.finish();
    if (options.opTimed)
      options.opTimed(op, opStart, Clock::now());
    if (options.opResults) {
      std::vector<const Tensor *> results, operands;
      for (size_t slot : step.outputSlots)
        results.push_back(env[slot].valid() ? &env[slot] : nullptr);
      for (const std::vector<size_t> &slots : step.inputSlots)
        for (size_t s : slots)
          if (s != SIZE_MAX)
            operands.push_back(env[s].valid()           ? &env[s]
                               : plan.folded[s].valid() ? &plan.folded[s]
                                                        : nullptr);
      options.opResults(op, results, operands);
    }
    if (profile)
      profile->record(step.profileRow,
                      std::chrono::duration<double>(Clock::now() - opStart).count(),
                      step.weightBytes, step.profileGroup);
    if (step.folded)
      keepFolded(si);
    for (size_t s : step.freeAfter)
      env[s] = Tensor();
  }

  /// Rounds an op result to fp16. A result that shares bytes with an input
  /// is rounded in place only when that input was rounded already (its
  /// readers must not see it change); otherwise it gets its own bytes. An
  /// input holding fp16 values (a carried fp16 output) counts as rounded.
  void roundToHalf(const InterpreterPlan::Step &step, size_t slot) {
    Tensor &t = env[slot];
    bool aliasesRounded = false, aliasesOther = !t.isOwned();
    for (const std::vector<size_t> &slots : step.inputSlots)
      for (size_t s : slots)
        if (s != SIZE_MAX) {
          const Tensor &src = env[s].valid() ? env[s] : plan.folded[s];
          if (t.sharesStorage(src))
            (rounded[s] || plan.foldRounded[s] || src.holdsHalfValues() ? aliasesRounded
                                                                        : aliasesOther) = true;
        }
    if (aliasesOther || (!aliasesRounded && !t.ownsUniquely()))
      t = t.clone();
    if (aliasesOther || !aliasesRounded)
      t.roundToHalfInPlace();
    rounded[slot] = 1;
  }

  /// Keeps the values of a constant-only step for the next runs, if they
  /// fit the fold cache.
  void keepFolded(size_t si) {
    const InterpreterPlan::Step &step = plan.steps[si];
    plan.foldTried[si] = 1;
    uint64_t bytes = 0;
    for (size_t slot : step.outputSlots)
      bytes += ownedBytes(env[slot]);
    if (plan.cachedBytes + bytes > options.foldCacheBytes)
      return;
    plan.cachedBytes += bytes;
    for (size_t slot : step.outputSlots) {
      plan.folded[slot] = std::move(env[slot]);
      plan.foldRounded[slot] = fp16 && rounded[slot];
      env[slot] = Tensor();
    }
  }
};

/// The function's outputs from their slots (or the folded values). A result
/// no one else holds is handed over; anything else is copied.
std::vector<NamedTensor> collectOutputs(const Function &fn, InterpreterPlan &plan,
                                        std::vector<Tensor> &env) {
  std::vector<NamedTensor> outputs;
  const auto &outs = fn.body->outputs;
  for (size_t oi = 0; oi < outs.size(); ++oi) {
    const Value *v = outs[oi];
    size_t slot = plan.slots.at(v);
    Tensor &t = env[slot].valid() ? env[slot] : plan.folded[slot];
    DType want = v->type.isTensor() ? v->type.dtype() : t.dtype();
    bool alone =
        &t == &env[slot] && t.ownsUniquely() && std::count(outs.begin(), outs.end(), v) == 1;
    if (alone && t.dtype() == want)
      outputs.push_back({v->name, std::move(t)});
    else if (alone && !plan.widen.empty() && plan.widen[oi] && t.dtype() == DType::F32 &&
             want == DType::F16) {
      Tensor half = t.toHalfRoundingInPlace();
      outputs.push_back({v->name, std::move(half), std::move(t)});
    } else
      outputs.push_back({v->name, t.materialize().convertTo(want)});
  }
  return outputs;
}

/// Op types whose results depend on more than their inputs.
bool hasEffects(std::string_view type) {
  return type == "read_state" || type == "write_state" || type == "coreml_update_state";
}

/// A slot per input and per op result, and a step per op with its kernel.
void planSteps(const Function &fn, InterpreterPlan &plan) {
  auto addSlot = [&](const Value *v) { plan.slots.emplace(v, plan.numSlots++); };
  for (const auto &in : fn.inputs)
    addSlot(in.get());
  const auto &ops = fn.body->ops;
  for (size_t i = 0; i < ops.size(); ++i) {
    const Operation &op = *ops[i];
    auto it = kernelTable().find(op.type);
    if (it == kernelTable().end())
      throw InputError("function '" + fn.name + "': " + opWhere(op) +
                       ": the interpreter has no kernel for op type '" + op.type + "'");
    if (!op.blocks.empty())
      throw InputError("function '" + fn.name + "': " + opWhere(op) +
                       ": ops with nested blocks are not supported by the interpreter");
    for (const auto &out : op.outputs)
      addSlot(out.get());
    InterpreterPlan::Step step;
    step.op = &op;
    step.fn = it->second;
    plan.steps.push_back(std::move(step));
  }
  // A state lives in the host's StateContext, not in a slot: it has no value
  // to hand back (the verifier says the same).
  for (const Value *v : fn.body->outputs)
    if (v->type.isState())
      throw InputError("function '" + fn.name + "': block output '%" + v->name +
                       "' is a state; states cannot be returned");
}

/// Each step's input and output slots; a value read before it is defined
/// is refused.
void bindStepSlots(const Function &fn, InterpreterPlan &plan) {
  for (InterpreterPlan::Step &step : plan.steps) {
    for (const OpInput &in : step.op->inputs) {
      std::vector<size_t> slots;
      for (const Binding &b : in.bindings) {
        auto it = b.isValue() ? plan.slots.find(b.value) : plan.slots.end();
        if (b.isValue() && it == plan.slots.end())
          throw InputError("function '" + fn.name + "': " + opWhere(*step.op) + ": reads value '" +
                           b.value->name + "' that is not defined before it");
        slots.push_back(b.isValue() ? it->second : SIZE_MAX);
      }
      step.inputSlots.push_back(std::move(slots));
    }
    for (const auto &out : step.op->outputs)
      step.outputSlots.push_back(plan.slots.at(out.get()));
  }
}

/// Liveness: a value dies after the last op that reads it; function outputs
/// and states live to the end. A step without effects whose every input is
/// a constant or a folded value is folded.
void planLifetimes(const Function &fn, InterpreterPlan &plan) {
  const auto &ops = fn.body->ops;
  std::vector<size_t> lastUse(plan.numSlots, SIZE_MAX);
  std::vector<char> constantSlot(plan.numSlots, 0);
  for (size_t i = 0; i < ops.size(); ++i) {
    bool folded = !hasEffects(ops[i]->type);
    for (const auto &out : ops[i]->outputs)
      lastUse[plan.slots.at(out.get())] = i;
    for (const std::vector<size_t> &slots : plan.steps[i].inputSlots)
      for (size_t s : slots)
        if (s != SIZE_MAX) {
          lastUse[s] = i;
          folded = folded && constantSlot[s];
        }
    plan.steps[i].folded = folded;
    for (const auto &out : ops[i]->outputs)
      constantSlot[plan.slots.at(out.get())] = folded;
  }
  for (const Value *v : fn.body->outputs) {
    auto it = plan.slots.find(v);
    if (it == plan.slots.end())
      throw InputError("function '" + fn.name + "': output '" + v->name + "' is not defined");
    lastUse[it->second] = SIZE_MAX;
  }
  // (A kept value of a folded step lives in plan.folded, not in the run's
  // slots; one that did not fit the budget is freed like any other.)
  // Inputs too: a taken input freed after its last reader lets a value
  // aliasing it (a cast that keeps the compute dtype) be written in place.
  plan.freedAt.assign(plan.numSlots, SIZE_MAX);
  for (size_t s = 0; s < plan.numSlots; ++s)
    if (lastUse[s] != SIZE_MAX) {
      plan.steps[lastUse[s]].freeAfter.push_back(s);
      plan.freedAt[s] = lastUse[s];
    }
}

/// Lazy values: a value may stay lazy in the forms every reader takes
/// (readers that hand the form on count with their own output's readers).
/// Function outputs are always dense.
void planLazyValues(const Function &fn, InterpreterPlan &plan) {
  const auto &ops = fn.body->ops;
  plan.lazyOk.assign(plan.numSlots, kLazyTiled | kLazyCompressed);
  for (const Value *v : fn.body->outputs)
    plan.lazyOk[plan.slots.at(v)] = 0;
  for (size_t i = ops.size(); i-- > 0;) {
    const Operation &op = *ops[i];
    unsigned out = op.outputs.empty() ? 0 : plan.lazyOk[plan.slots.at(op.outputs[0].get())];
    if (op.outputs.size() == 1)
      plan.steps[i].lazyOut = out;
    for (const OpInput &in : op.inputs) {
      const LazyRule *rule = lazyRule(op.type, in.name);
      unsigned takes = rule ? rule->kinds & (rule->passes ? out : ~0u) : 0;
      if (in.bindings.size() != 1)
        takes = 0;
      for (const Binding &b : in.bindings)
        if (b.isValue())
          plan.lazyOk[plan.slots.at(b.value)] &= takes;
    }
  }
}

/// Each step's rows in the profile and the weight bytes it reads.
void planProfile(InterpreterPlan &plan, OpProfile &profile) {
  for (InterpreterPlan::Step &step : plan.steps) {
    step.profileRow = profile.rowOf(step.op->type);
    step.profileGroup = profile.groupOf(*step.op);
    const Operation *one[] = {step.op};
    // Data-movement ops (gather, slice_update, ...) read parts of their
    // constants: no rate would mean anything for them.
    bool reads = !step.folded && !opHasTrait(step.op->type, OpTrait::DataMovement);
    step.weightBytes = reads ? countWeightsOf(one).storedBytes : 0;
    if (step.weightBytes < kMinProfiledWeightBytes)
      step.weightBytes = 0;
  }
}

} // namespace

Interpreter::Interpreter(const Function &fn, RunOptions options) try
    : fn_(fn), options_(options), plan_(std::make_unique<InterpreterPlan>()) {
  InterpreterPlan &plan = *plan_;
  planSteps(fn, plan);
  bindStepSlots(fn, plan);
  planLifetimes(fn, plan);
  planLazyValues(fn, plan);
  if (options.profile)
    planProfile(plan, *options.profile);
  plan.folded.resize(plan.numSlots);
  plan.foldTried.assign(plan.steps.size(), 0);
  plan.foldRounded.assign(plan.numSlots, 0);
} catch (const InputError &e) {
  // A handler of a constructor's try block sees no members, only the
  // arguments (copied into options_, not moved, for this).
  if (options.source.empty())
    throw;
  throw InputError(options.source + ": " + e.what());
}

Interpreter::~Interpreter() = default;

uint64_t Interpreter::keptBytes() const { return plan_->cachedBytes; }

void Interpreter::widenOutputs(const std::vector<std::string> &names) {
  const auto &outs = fn_.body->outputs;
  plan_->widen.assign(outs.size(), 0);
  for (size_t i = 0; i < outs.size(); ++i)
    plan_->widen[i] = std::find(names.begin(), names.end(), outs[i]->name) != names.end();
}

std::vector<NamedTensor> Interpreter::run(const TensorMap &inputs) {
  StateContext states;
  return run(inputs, states);
}

std::vector<NamedTensor> Interpreter::run(const TensorMap &inputs, StateContext &states) {
  try {
    return runSteps(inputs, nullptr, states);
  } catch (...) {
    rethrowWithSource();
  }
}

std::vector<NamedTensor> Interpreter::run(TensorMap &&inputs, StateContext &states) {
  try {
    return runSteps(inputs, &inputs, states);
  } catch (...) {
    rethrowWithSource();
  }
}

void Interpreter::rethrowWithSource() const {
  std::string prefix = options_.source.empty() ? "" : options_.source + ": ";
  try {
    throw;
  } catch (const InputError &e) {
    if (prefix.empty())
      throw;
    throw InputError(prefix + e.what());
  } catch (const std::bad_alloc &) {
    throw InputError(prefix + "function '" + fn_.name +
                     "': out of memory (the model needs more than is available; --max-memory "
                     "sets how much the interpreter may use)");
  }
}

std::vector<NamedTensor> Interpreter::runSteps(const TensorMap &inputs, TensorMap *owned,
                                               StateContext &states) {
  OpProfile *profile = options_.profile;
  Clock::time_point runStart = profile ? Clock::now() : Clock::time_point();
  InterpreterPlan &plan = *plan_;
  ThreadScope threads(resolveThreads(options_.threads), options_.spin);
  std::vector<Tensor> env(plan.numSlots);

  // Nothing is taken from the caller when an input is refused.
  checkInputs(fn_, inputs);
  states.initialize(fn_);
  Clock::time_point bound = profile ? Clock::now() : Clock::time_point();
  bindInputs(fn_, inputs, owned, plan, env);

  StepRunner(plan, env, states, options_, fn_.name).runAll();

  Clock::time_point opsDone = profile ? Clock::now() : Clock::time_point();
  std::vector<NamedTensor> outputs = collectOutputs(fn_, plan, env);
  if (profile) {
    auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
    Clock::time_point end = Clock::now();
    profile->recordRun(seconds(end - runStart), seconds(bound - runStart), seconds(end - opsDone));
  }
  return outputs;
}

//===----------------------------------------------------------------------===//
// KernelContext parameter helpers
//===----------------------------------------------------------------------===//

void KernelContext::fail(const std::string &message) const {
  throw InputError(opWhere(op) + ": " + message);
}

void KernelContext::failMissingOutput(size_t i) const {
  fail("declares " + std::to_string(op.outputs.size()) + " result" +
       (op.outputs.size() == 1 ? "" : "s") + "; the op has at least " + std::to_string(i + 1));
}

int64_t KernelContext::axis(int64_t a, int64_t rank, std::string_view what) const {
  // A scalar has one axis: 0 (or -1).
  auto normalized = normalizeAxis(a, rank == 0 ? 1 : rank);
  if (!normalized)
    fail(std::string(what) + " " + std::to_string(a) + " is out of range for rank " +
         std::to_string(rank));
  return *normalized;
}

ParamBinding ParamBinding::of(const Operation &op, std::string_view param) {
  ParamBinding b;
  b.name = std::string(param);
  b.input = op.input(param);
  if (!b.input)
    b.attribute = op.attribute(param);
  b.constant = b.input ? op.constInput(param) : b.attribute;
  return b;
}

namespace {

/// The integers of a constant parameter, read the first time they are asked for.
const std::vector<int64_t> &constInts(ParamBinding &b) {
  if (!b.intsRead) {
    b.ints = b.constant->asInts();
    b.intsRead = true;
  }
  return b.ints;
}

} // namespace

std::vector<int64_t> KernelContext::intsArg(std::string_view param) {
  ParamBinding &b = binding(param);
  if (b.constant)
    return constInts(b);
  if (!b.present())
    return {};
  return in(param).toInts();
}

std::optional<int64_t> KernelContext::intArgOpt(std::string_view param) {
  ParamBinding &b = binding(param);
  if (!b.present())
    return std::nullopt;
  // A constant's integers are read once and kept; a value's every run.
  std::vector<int64_t> fromValue;
  const std::vector<int64_t> &v = b.constant ? constInts(b) : (fromValue = in(param).toInts());
  if (v.size() != 1)
    fail("parameter '" + std::string(param) + "' must be a scalar");
  return v[0];
}

std::string_view KernelContext::tableDefault(std::string_view param) const {
  const OpDef *def = findAnyOp(op.type);
  if (!def || !def->param(param))
    fail("the op table has no parameter '" + std::string(param) + "' for this op");
  std::string_view text = def->paramDefault(param);
  if (text.empty())
    fail("required parameter '" + std::string(param) + "' is missing");
  return text;
}

double KernelContext::tableNumber(std::string_view param) const {
  std::string_view text = tableDefault(param);
  std::optional<double> v = defaultAsNumber(text);
  if (!v)
    fail("parameter '" + std::string(param) + "' is absent and its default '" + std::string(text) +
         "' is not a number");
  return *v;
}

int64_t KernelContext::intArg(std::string_view param) {
  if (has(param))
    return *intArgOpt(param);
  return static_cast<int64_t>(tableNumber(param));
}

int64_t KernelContext::intArg(std::string_view param, int64_t dflt) {
  return intArgOpt(param).value_or(dflt);
}

float KernelContext::floatArg(std::string_view param) {
  if (has(param))
    return floatArg(param, 0.0f);
  return static_cast<float>(tableNumber(param));
}

float KernelContext::floatArg(std::string_view param, float dflt) {
  if (!has(param))
    return dflt;
  if (const Constant *c = constParam(param)) {
    if (c->numElements() != 1)
      fail("parameter '" + std::string(param) + "' must be a scalar");
    return static_cast<float>(c->elementAsDouble(0));
  }
  const Tensor &t = in(param);
  if (t.numElements() != 1)
    fail("parameter '" + std::string(param) + "' must be a scalar");
  return t.floatAt(0);
}

bool KernelContext::boolArg(std::string_view param) {
  if (has(param))
    return *intArgOpt(param) != 0;
  return tableNumber(param) != 0;
}

bool KernelContext::boolArg(std::string_view param, bool dflt) {
  if (!has(param))
    return dflt;
  return *intArgOpt(param) != 0;
}

std::vector<bool> KernelContext::boolsArg(std::string_view param) {
  std::vector<bool> out;
  for (int64_t v : intsArg(param))
    out.push_back(v != 0);
  return out;
}

std::string KernelContext::strArg(std::string_view param) {
  if (!has(param))
    return std::string(tableDefault(param));
  return strArg(param, "");
}

std::string KernelContext::strArg(std::string_view param, std::string_view dflt) {
  if (!has(param))
    return std::string(dflt);
  const Constant *c = constParam(param);
  if (!c || !c->asString())
    fail("parameter '" + std::string(param) + "' must be a constant string");
  return *c->asString();
}

} // namespace anefit::runtime
