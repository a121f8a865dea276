//===- Stepper.cpp - Step a model like a host, and compare two runs -------===//
#include "runtime/Stepper.h"

#include "runtime/RandomInput.h"
#include "runtime/ThreadPool.h"
#include "support/Error.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <set>
#include <utility>

namespace anefit::runtime {

//===----------------------------------------------------------------------===//
// Carry sources
//===----------------------------------------------------------------------===//

namespace {

bool hasOutput(const Function &fn, const std::string &name) {
  for (const Value *v : fn.body->outputs)
    if (v->name == name)
      return true;
  return false;
}

} // namespace

CarryMap carriesFromStateMap(const StateMap &map, const Function &fn) {
  CarryMap carries;
  for (const StateMapEntry &e : map.entries) {
    if (!fn.findInput(e.input) || !hasOutput(fn, e.output))
      continue;
    carries.push_back(
        {e.output, e.input, Tensor::zeros(computeDType(e.dtype), e.shape), "state map"});
  }
  return carries;
}

CarryMap hostCarries(const Model &model, const Function &fn) {
  CarryMap carries;
  // ExecuTorch's write-back around a Core ML delegate (read from the .pte's
  // instructions by the .pte reader): buffers start at zeros, as the
  // runtime's planned memory does, and take the delegate's output after
  // every call.
  if (!model.hostWriteBackError.empty())
    throw InputError(model.hostWriteBackError +
                     "; anefit cannot tell which outputs ExecuTorch copies back into which "
                     "inputs, so it cannot step this program like a device (run one step, or "
                     "give every input of every step)");
  for (const HostWriteBack &w : model.hostWriteBacks)
    if (w.function.empty() || w.function == fn.name)
      carries.push_back({w.output, w.input, std::nullopt, w.how});
  const auto &meta = model.description.metadata.userDefined;
  auto mapText = meta.find(StateMap::kMetadataKey);
  if (mapText != meta.end()) {
    std::string origin = model.sourcePath.empty() ? "the model" : model.sourcePath;
    CarryMap fromMap = carriesFromStateMap(StateMap::fromJson(mapText->second, origin), fn);
    carries.insert(carries.end(), fromMap.begin(), fromMap.end());
  }
  return carries;
}

//===----------------------------------------------------------------------===//
// Stepper
//===----------------------------------------------------------------------===//

Stepper::Stepper(const Function &fn, CarryMap carries, StepperOptions options)
    : Stepper(std::vector<const Function *>{&fn}, std::move(carries), std::move(options)) {}

Stepper::Stepper(std::vector<const Function *> chain, CarryMap carries, StepperOptions options)
    : chain_(std::move(chain)), carries_(std::move(carries)), options_(std::move(options)) {
  if (chain_.empty())
    throw InputError("stepper: no function to run");
  std::set<std::string> produced, states;
  std::set<std::string> inputs, outputs;
  for (const Function *fn : chain_) {
    interpreters_.push_back(std::make_unique<Interpreter>(*fn, options_.run));
    for (const auto &in : fn->inputs) {
      inputs.insert(in->name);
      if (in->type.isState()) {
        if (states.insert(in->name).second)
          stateInputs_.push_back(in.get());
      } else if (!produced.count(in->name)) {
        bool carried = carriesInto(in->name);
        bool seen = false;
        for (const Value *v : externalInputs_)
          seen |= v->name == in->name;
        if (!carried && !seen)
          externalInputs_.push_back(in.get());
      }
    }
    for (const Value *v : fn->body->outputs) {
      produced.insert(v->name);
      outputs.insert(v->name);
    }
  }
  std::vector<std::string> carriedOutputs;
  for (const Carry &c : carries_)
    carriedOutputs.push_back(c.output);
  for (auto &interp : interpreters_)
    interp->widenOutputs(carriedOutputs);
  for (const Carry &c : carries_) {
    if (!outputs.count(c.output))
      throw InputError("function '" + chain_.front()->name + "': " + c.source + " carries '" +
                       c.output + "', which is not an output");
    if (!inputs.count(c.input))
      throw InputError("function '" + chain_.front()->name + "': " + c.source + " carries into '" +
                       c.input + "', which is not an input");
    const Value *decl = nullptr;
    for (const Function *fn : chain_)
      if (!decl)
        decl = fn->findInput(c.input);
    carriedDTypes_.push_back(decl->type.dtype());
    if (c.initial) {
      carried_[c.input] = c.initial->clone();
      continue;
    }
    auto shape = decl->type.staticShape();
    if (!shape)
      throw InputError("function '" + chain_.front()->name + "': carried input '" + c.input +
                       "' of type " + decl->type.str() + " needs an initial value");
    carried_[c.input] = Tensor::zeros(computeDType(decl->type.dtype()), *shape);
  }
}

Stepper::~Stepper() = default;

void Stepper::setState(const std::string &name, const Tensor &value) {
  for (const Function *fn : chain_) {
    const Value *decl = fn->findInput(name);
    if (decl && decl->type.isState()) {
      states_.set(*fn, name, value);
      return;
    }
  }
  // Let StateContext word the error, naming the first stage's states.
  states_.set(*chain_.front(), name, value);
}

std::optional<Tensor> Stepper::stateValue(const std::string &name) const {
  const Tensor *t = states_.find(name);
  if (!t)
    return std::nullopt;
  for (const Value *v : stateInputs_)
    if (v->name == name)
      return t->convertTo(v->type.dtype());
  return t->clone();
}

std::vector<NamedTensor> Stepper::runChain(const TensorMap &inputs, TensorMap &values) {
  if (interpreters_.size() == 1)
    // One function: the interpreter checks names, shapes and dtypes itself,
    // and takes nothing when it refuses an input.
    return interpreters_.front()->run(std::move(values), states_);
  std::set<std::string> known;
  for (const Function *fn : chain_)
    for (const auto &in : fn->inputs)
      if (!in->type.isState())
        known.insert(in->name);
  for (const auto &[name, t] : inputs)
    if (!known.count(name))
      throw InputError("function '" + chain_.front()->name + "': unknown input '" + name +
                       "' of the chain");
  std::vector<NamedTensor> all;
  for (auto &interp : interpreters_) {
    TensorMap feed;
    for (const auto &in : interp->function().inputs) {
      if (in->type.isState())
        continue;
      auto it = values.find(in->name);
      if (it == values.end())
        throw InputError("function '" + interp->function().name + "': missing input '" + in->name +
                         "' of type " + in->type.str());
      feed.emplace(in->name, it->second);
    }
    for (NamedTensor &out : interp->run(feed, states_)) {
      values[out.name] = out.tensor;
      all.push_back(std::move(out));
    }
  }
  return all;
}

bool Stepper::carriesInto(const std::string &input) const {
  for (const Carry &c : carries_)
    if (c.input == input)
      return true;
  return false;
}

std::vector<NamedTensor> Stepper::step(const TensorMap &inputs) {
  if (carriedLost_)
    throw InputError("function '" + chain_.front()->name +
                     "': an earlier step failed after it had taken the values carried from "
                     "outputs to inputs; start the steps again from the first");
  // The carried values are handed over, not copied: the interpreter may
  // write them in place (a KV cache updated by slice_update); the next ones
  // come from this step's outputs. A value given in `inputs` wins.
  TensorMap values = inputs;
  for (auto it = carried_.begin(); it != carried_.end();)
    it = values.try_emplace(it->first, std::move(it->second)).second ? carried_.erase(it)
                                                                     : std::next(it);
  std::vector<NamedTensor> all;
  try {
    all = runChain(inputs, values);
  } catch (...) {
    // An input the interpreter refused took nothing: the same step can be
    // tried again. A run that failed later may have spent the values.
    for (auto &[name, t] : values)
      if (!inputs.count(name) && carriesInto(name)) {
        if (t.valid())
          carried_[name] = std::move(t);
        else
          carriedLost_ = true;
      }
    throw;
  }
  // The host's copies use the threads the interpreter does.
  ThreadScope threads(resolveThreads(options_.run.threads), options_.run.spin);
  if (options_.roundStates)
    for (const Function *fn : chain_)
      for (const auto &in : fn->inputs)
        if (in->type.isState())
          if (const Tensor *t = states_.find(in->name))
            states_.set(*fn, in->name, t->convertTo(in->type.dtype()));
  // The host hands each carried value over in the input's declared dtype
  // (ExecuTorch's copy_ into an fp32 buffer of an fp16 delegate output): the
  // widened output when the run gave one (the same values, already in the
  // compute dtype the interpreter reads them in), else a conversion.
  for (size_t i = 0; i < carries_.size(); ++i)
    for (NamedTensor &nt : all)
      if (nt.name == carries_[i].output) {
        if (nt.widened.valid() && nt.widened.dtype() == computeDType(carriedDTypes_[i]))
          carried_[carries_[i].input] = std::exchange(nt.widened, Tensor());
        else
          carried_[carries_[i].input] = nt.tensor.convertTo(carriedDTypes_[i]);
      }
  ++stepsDone_;
  return all;
}

TensorMap randomInputs(const Function &fn, const FunctionDescription &desc, std::mt19937_64 &rng,
                       const std::vector<std::string> &skip) {
  TensorMap out;
  for (const auto &in : fn.inputs) {
    if (in->type.isState() || std::find(skip.begin(), skip.end(), in->name) != skip.end())
      continue;
    const FeatureDescription *fd = nullptr;
    for (const FeatureDescription &d : desc.inputs)
      if (d.name == in->name)
        fd = &d;
    out[in->name] = randomInput(*in, fd, rng);
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Comparison
//===----------------------------------------------------------------------===//

void Comparison::fail(const std::string &what) {
  if (ok_)
    firstMismatch_ = what;
  ok_ = false;
}

void Comparison::compare(const std::string &what, const Tensor &expected, const Tensor &actual,
                         bool storedFp16) {
  if (expected.shape() != actual.shape()) {
    fail(what + ": shape " + shapeStr(expected.shape()) + " became " + shapeStr(actual.shape()));
    return;
  }
  // The relative tolerance applies to each element's magnitude, or to the
  // tensor's RMS where that is larger: an element that a sum brought near
  // zero carries the rounding error of the terms it was summed from, which
  // are of the tensor's typical size, not of its own.
  double squares = 0;
  int64_t finite = 0;
  for (int64_t i = 0; i < expected.numElements(); ++i) {
    double x = expected.floatAt(i);
    if (std::isfinite(x)) {
      squares += x * x;
      ++finite;
    }
  }
  double rms = finite ? std::sqrt(squares / static_cast<double>(finite)) : 0.0;
  bool fp16 = storedFp16 && tolerance_.fp16Ulps > 0;
  for (int64_t i = 0; i < expected.numElements(); ++i) {
    double x = expected.floatAt(i), y = actual.floatAt(i);
    if (!std::isfinite(x) && (std::isnan(x) ? std::isnan(y) : x == y)) {
      if (bothNonFinite_++ == 0) {
        char buf[80];
        std::snprintf(buf, sizeof buf, ": element %lld is %s in both", (long long)i,
                      std::isnan(x) ? "nan"
                      : x > 0       ? "inf"
                                    : "-inf");
        firstNonFinite_ = what + buf;
      }
      continue;
    }
    double diff = std::fabs(x - y);
    if (std::isnan(diff))
      diff = INFINITY;
    maxAbsDiff_ = std::max(maxAbsDiff_, diff);
    ++compared_;
    // An infinity against anything but itself differs whatever the
    // tolerance (rtol times an infinite |x| would let every value pass).
    double allowed = tolerance_.atol + tolerance_.rtol * std::max(std::fabs(x), rms);
    if (fp16) {
      // fp16's step at max(|x|, RMS), as rtol's floor: 2^(e - 11) for a
      // magnitude in [2^(e-1), 2^e), 2^-24 below the normal range. A value
      // a difference brought near zero rounds as the values it came from.
      int e = 0;
      std::frexp(std::max(std::fabs(x), rms), &e);
      allowed += tolerance_.fp16Ulps * std::ldexp(1.0, std::max(e - 11, -24));
    }
    if (!std::isfinite(diff) || diff > allowed) {
      char buf[160];
      std::snprintf(buf, sizeof buf, ": element %lld is %.9g, was %.9g", (long long)i, y, x);
      fail(what + buf);
    }
  }
}

void Comparison::compareOutputs(const std::string &prefix, const std::vector<NamedTensor> &expected,
                                const std::vector<NamedTensor> &actual,
                                const std::set<std::string> &fp16Outputs) {
  for (const NamedTensor &e : expected) {
    const Tensor *found = nullptr;
    for (const NamedTensor &a : actual)
      if (a.name == e.name)
        found = &a.tensor;
    if (!found) {
      fail(prefix + "output '" + e.name + "': missing");
      continue;
    }
    compare(prefix + "output '" + e.name + "'", e.tensor, *found, fp16Outputs.count(e.name) > 0);
  }
}

} // namespace anefit::runtime
