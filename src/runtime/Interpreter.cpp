//===- Interpreter.cpp - Reference interpreter for MIL programs -----------===//
//
// Plans a function once (a slot per value, the op after which each value is
// dead, the kernel of each op) and then runs it: bind inputs, call kernels in
// program order, free values at their last use, return the outputs.
//
//===----------------------------------------------------------------------===//
#include "runtime/Interpreter.h"

#include "runtime/Kernel.h"
#include "support/Error.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <unordered_map>

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

/// Rounds every element of an fp32 tensor to the nearest fp16 value
/// (ties to even, overflow to infinity): the fp16 pipeline's view of it.
void roundToHalf(Tensor &t) {
  float *p = t.mutableData<float>();
  for (int64_t i = 0, n = t.numElements(); i < n; ++i)
    p[i] = halfToFloat(floatToHalf(p[i]));
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
    states_[in->name] = Tensor::zeros(computeDType(in->type.dtype()), *shape);
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
  };
  std::vector<Step> steps;
  size_t numSlots = 0;
};

namespace {

/// One op's view of the interpreter state while its kernel runs.
class RunContext final : public KernelContext {
public:
  RunContext(const Operation &op, const InterpreterPlan &plan, std::vector<Tensor> &env,
             StateContext &states, std::unordered_map<const void *, Tensor> &convertCache)
      : KernelContext(op), plan_(plan), env_(env), states_(states), cache_(convertCache) {}

  const Tensor &raw(std::string_view param) override {
    const OpInput *in = op.input(param);
    if (!in || in->bindings.empty()) {
      if (const Constant *attr = op.attribute(param)) {
        temps_.push_back(constantTensor(*attr, op));
        return temps_.back();
      }
      fail("missing input '" + std::string(param) + "'");
    }
    return bound(in->bindings[0], param);
  }

  const Tensor &in(std::string_view param) override { return compute(raw(param)); }

  std::vector<const Tensor *> variadic(std::string_view param) override {
    const OpInput *in = op.input(param);
    if (!in)
      fail("missing input '" + std::string(param) + "'");
    std::vector<const Tensor *> out;
    for (const Binding &b : in->bindings)
      out.push_back(&compute(bound(b, param)));
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
      fail("kernel produced output " + std::to_string(i) + " of " +
           std::to_string(op.outputs.size()));
    env_[plan_.slots.at(op.outputs[i].get())] = std::move(t);
  }

  /// Drops the temporaries of this op.
  void finish() { temps_.clear(); }

private:
  const Tensor &bound(const Binding &b, std::string_view param) {
    if (b.isValue()) {
      auto it = plan_.slots.find(b.value);
      if (it == plan_.slots.end())
        fail("input '" + std::string(param) + "' refers to unknown value '" + b.value->name + "'");
      const Tensor &t = env_[it->second];
      if (!t.valid())
        fail("input '" + std::string(param) + "' value '" + b.value->name +
             "' has no value (a state must be read with read_state)");
      return t;
    }
    if (!b.constant)
      fail("input '" + std::string(param) + "' is empty");
    temps_.push_back(constantTensor(*b.constant, op));
    return temps_.back();
  }

  /// `t` in compute dtype; small converted constants are cached.
  const Tensor &compute(const Tensor &t) {
    DType want = computeDType(t.dtype());
    if (want == t.dtype())
      return t;
    bool cacheable = !t.isOwned() && t.numElements() <= (1 << 16);
    if (cacheable) {
      auto it = cache_.find(t.bytes());
      if (it != cache_.end() && it->second.shape() == t.shape())
        return it->second;
      Tensor c = t.convertTo(want);
      return cache_[t.bytes()] = std::move(c);
    }
    temps_.push_back(t.convertTo(want));
    return temps_.back();
  }

  std::string stateName(std::string_view param) {
    const OpInput *in = op.input(param);
    if (!in || in->bindings.size() != 1 || !in->bindings[0].isValue())
      fail("input '" + std::string(param) + "' must be a state");
    const Value *v = in->bindings[0].value;
    if (!v->type.isState())
      fail("input '" + std::string(param) + "' value '" + v->name + "' is not a state");
    return v->name;
  }

  const InterpreterPlan &plan_;
  std::vector<Tensor> &env_;
  StateContext &states_;
  std::unordered_map<const void *, Tensor> &cache_;
  std::deque<Tensor> temps_;
};

} // namespace

Interpreter::Interpreter(const Function &fn, RunOptions options)
    : fn_(fn), options_(std::move(options)), plan_(std::make_unique<InterpreterPlan>()) {
  InterpreterPlan &plan = *plan_;
  auto addSlot = [&](const Value *v) { plan.slots.emplace(v, plan.numSlots++); };
  for (const auto &in : fn.inputs)
    addSlot(in.get());
  std::vector<size_t> lastUse;
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
    plan.steps.push_back({&op, it->second, {}});
  }
  // Liveness: a value dies after the last op that reads it; function
  // outputs and states live to the end.
  lastUse.assign(plan.numSlots, SIZE_MAX);
  for (size_t i = 0; i < ops.size(); ++i) {
    for (const auto &out : ops[i]->outputs)
      lastUse[plan.slots.at(out.get())] = i;
    for (const Value *v : ops[i]->operandValues()) {
      auto it = plan.slots.find(v);
      if (it == plan.slots.end())
        throw InputError("function '" + fn.name + "': " + opWhere(*ops[i]) + ": reads value '" +
                         v->name + "' that is not defined before it");
      lastUse[it->second] = i;
    }
  }
  for (const Value *v : fn.body->outputs) {
    auto it = plan.slots.find(v);
    if (it == plan.slots.end())
      throw InputError("function '" + fn.name + "': output '" + v->name + "' is not defined");
    lastUse[it->second] = SIZE_MAX;
  }
  for (size_t s = fn.inputs.size(); s < plan.numSlots; ++s)
    if (lastUse[s] != SIZE_MAX)
      plan.steps[lastUse[s]].freeAfter.push_back(s);
}

Interpreter::~Interpreter() = default;

std::vector<NamedTensor> Interpreter::run(const TensorMap &inputs) {
  StateContext states;
  return run(inputs, states);
}

std::vector<NamedTensor> Interpreter::run(const TensorMap &inputs, StateContext &states) {
  const InterpreterPlan &plan = *plan_;
  std::vector<Tensor> env(plan.numSlots);
  std::string where = "function '" + fn_.name + "'";

  // Bind and check inputs: names, shapes (symbolic dims bound consistently)
  // and dtype kinds.
  for (const auto &[name, t] : inputs) {
    const Value *decl = fn_.findInput(name);
    if (!decl || decl->type.isState()) {
      std::string names;
      for (const auto &in : fn_.inputs)
        if (!in->type.isState())
          names += (names.empty() ? "" : ", ") + in->name;
      throw InputError(where + ": unknown input '" + name +
                       "' (inputs: " + (names.empty() ? "none" : names) + ")");
    }
  }
  std::map<std::string, int64_t> symbols;
  for (const auto &in : fn_.inputs) {
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
    env[plan.slots.at(in.get())] = t.convertTo(computeDType(type.dtype()));
  }
  states.initialize(fn_);

  std::unordered_map<const void *, Tensor> convertCache;
  size_t done = 0;
  for (const InterpreterPlan::Step &step : plan.steps) {
    RunContext ctx(*step.op, plan, env, states, convertCache);
    step.fn(ctx);
    for (const auto &out : step.op->outputs) {
      Tensor &t = env[plan.slots.at(out.get())];
      if (!t.valid())
        ctx.fail("kernel did not produce output '" + out->name + "'");
      if (options_.precision == Precision::FP16 && t.dtype() == DType::F32 && t.isOwned() &&
          step.op->type != "const")
        roundToHalf(t);
    }
    ctx.finish();
    for (size_t s : step.freeAfter)
      env[s] = Tensor();
    if (options_.progress)
      options_.progress(++done, plan.steps.size());
  }

  std::vector<NamedTensor> outputs;
  for (const Value *v : fn_.body->outputs) {
    const Tensor &t = env[plan.slots.at(v)];
    DType want = v->type.isTensor() ? v->type.dtype() : t.dtype();
    outputs.push_back({v->name, t.convertTo(want)});
  }
  return outputs;
}

//===----------------------------------------------------------------------===//
// KernelContext parameter helpers
//===----------------------------------------------------------------------===//

void KernelContext::fail(const std::string &message) const {
  throw InputError(opWhere(op) + ": " + message);
}

int64_t KernelContext::axis(int64_t a, int64_t rank, std::string_view what) const {
  int64_t r = rank == 0 ? 1 : rank;
  if (a < -r || a >= r)
    fail(std::string(what) + " " + std::to_string(a) + " is out of range for rank " +
         std::to_string(rank));
  return a < 0 ? a + r : a;
}

std::vector<int64_t> KernelContext::intsArg(std::string_view param) {
  if (const Constant *c = constParam(param))
    return c->asInts();
  if (!has(param))
    return {};
  return in(param).toInts();
}

std::optional<int64_t> KernelContext::intArgOpt(std::string_view param) {
  if (!has(param))
    return std::nullopt;
  std::vector<int64_t> v = intsArg(param);
  if (v.size() != 1)
    fail("parameter '" + std::string(param) + "' must be a scalar");
  return v[0];
}

int64_t KernelContext::intArg(std::string_view param, int64_t dflt) {
  return intArgOpt(param).value_or(dflt);
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

bool KernelContext::boolArg(std::string_view param, bool dflt) {
  if (!has(param))
    return dflt;
  return intArg(param, dflt ? 1 : 0) != 0;
}

std::vector<bool> KernelContext::boolsArg(std::string_view param) {
  std::vector<bool> out;
  for (int64_t v : intsArg(param))
    out.push_back(v != 0);
  return out;
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
