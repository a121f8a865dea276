//===- ModelRun.cpp - Run one function of a model, step by step -----------===//
#include "runtime/ModelRun.h"

#include "runtime/Convert.h"
#include "runtime/RandomInput.h"
#include "support/Error.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>
#include <vector>

namespace anefit::runtime {

std::optional<std::pair<int64_t, std::string>> parseStepKey(const std::string &key) {
  if (key.rfind("step", 0) != 0)
    return std::nullopt;
  size_t slash = key.find('/');
  if (slash == std::string::npos || slash == 4)
    return std::nullopt;
  std::string num = key.substr(4, slash - 4);
  if (num.size() > 9 || num.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::make_pair(std::stoll(num), key.substr(slash + 1));
}

int64_t RunInputs::perStepCount() const {
  return perStep.empty() ? 0 : perStep.rbegin()->first + 1;
}

void RunInputs::addArchive(std::vector<NamedTensor> arrays, const std::string &from) {
  if (!from.empty())
    origin = from;
  for (NamedTensor &nt : arrays) {
    if (auto sk = parseStepKey(nt.name)) {
      fromArchive.insert(sk->second);
      perStep[sk->first][sk->second] = std::move(nt.tensor);
    } else {
      fromArchive.insert(nt.name);
      shared[nt.name] = std::move(nt.tensor);
    }
  }
}

void RunInputs::checkSteps(int64_t steps) const {
  if (perStep.empty())
    return;
  int64_t last = perStep.rbegin()->first;
  std::string key = "step" + std::to_string(last) + "/" + perStep.rbegin()->second.begin()->first;
  std::string where = origin.empty() ? "inputs" : origin;
  // With a step count given, later keys are simply not used.
  if (steps == 0 && static_cast<int64_t>(perStep.size()) != last + 1) {
    int64_t missing = 0;
    while (perStep.count(missing))
      ++missing;
    throw InputError::at(where, "'" + key + "'",
                         "steps 0 to " + std::to_string(last) + " have no arrays for step " +
                             std::to_string(missing) +
                             "; give every step its arrays, or the step count with --steps");
  }
}

bool RunInputs::gives(const std::string &name, int64_t step) const {
  if (shared.count(name))
    return true;
  auto it = perStep.find(step);
  return it != perStep.end() && it->second.count(name);
}

ModelRun::ModelRun(const Model &model, ModelRunOptions options)
    : options_(std::move(options)), rng_(options_.seed) {
  if (options_.steps < 0)
    throw InputError("expected a positive step count, found " + std::to_string(options_.steps));
  if (!model.program || model.program->functions.empty())
    throw InputError(model.sourcePath + ": expected an ML Program, found a model without one "
                                        "(anefit run executes ML Programs only)");
  fn_ = options_.function.empty() ? model.defaultFunction()
                                  : model.program->findFunction(options_.function);
  if (!fn_) {
    std::string names;
    for (const auto &f : model.program->functions)
      names += (names.empty() ? "" : ", ") + f->name;
    throw InputError(model.sourcePath + ": no function '" + options_.function +
                     "' (functions: " + names + ")");
  }
  desc_ = model.description.describe(fn_->name);
  options_.inputs.checkSteps(options_.steps);
  int64_t perStep = options_.inputs.perStepCount();
  steps_ = options_.steps ? options_.steps : std::max<int64_t>(perStep, 1);
  stepped_ = steps_ > 1 || perStep > 0;

  // A model fixed by state-to-io carries its state map, an ExecuTorch
  // delegate its write-back: the host feeds each output back into its input,
  // starting from zeros. Do that for inputs the caller does not give, so a
  // run steps it like a host; a single step starts from zeros too (the first
  // call of a decoder with empty caches).
  CarryMap carries;
  for (Carry &c : hostCarries(model, *fn_))
    if (!options_.inputs.gives(c.input, 0))
      carries.push_back(std::move(c));

  RunOptions run = options_.run;
  if (run.source.empty())
    run.source = model.sourcePath;
  stepper_ = std::make_unique<Stepper>(*fn_, std::move(carries), runStepperOptions(run));
  for (const auto &[name, value] : options_.initialStates)
    stepper_->setState(name, value);
}

ModelRun::~ModelRun() = default;

void ModelRun::give(int64_t step, TensorMap inputs) {
  if (step < next_)
    throw std::logic_error("ModelRun::give: step " + std::to_string(step) + " has run");
  TensorMap &slot = options_.inputs.perStep[step];
  for (auto &[name, t] : inputs)
    slot[name] = std::move(t);
}

StepRecord ModelRun::next() {
  int64_t k = next_;
  TensorMap feed = options_.inputs.shared;
  auto given = options_.inputs.perStep.find(k);
  if (given != options_.inputs.perStep.end())
    for (const auto &[name, t] : given->second)
      feed[name] = t;
  std::set<std::string> declared;
  for (const auto &in : fn_->inputs)
    if (!in->type.isState()) {
      declared.insert(in->name);
      if (!feed.count(in->name) && !stepper_->carriesInto(in->name) && options_.random) {
        const FeatureDescription *fd = nullptr;
        for (const FeatureDescription &d : desc_.inputs)
          if (d.name == in->name)
            fd = &d;
        feed[in->name] = randomInput(*in, fd, rng_);
      }
    }
  // Unknown names first: a misspelt name would otherwise surface as a
  // missing input.
  for (const auto &[name, t] : feed)
    if (!declared.count(name)) {
      std::string names;
      for (const std::string &d : declared)
        names += (names.empty() ? "" : ", ") + d;
      std::string message = "function '" + fn_->name + "': unknown input '" + name +
                            "' (inputs: " + (names.empty() ? "none" : names) + ")";
      // An array of an archive is named with the archive.
      if (options_.inputs.fromArchive.count(name) && !options_.inputs.origin.empty())
        throw InputError::at(options_.inputs.origin, "", message);
      throw InputError(message);
    }
  for (const auto &in : fn_->inputs)
    if (!in->type.isState() && !feed.count(in->name) && !stepper_->carriesInto(in->name))
      throw InputError("missing input '" + in->name + "' of type " + in->type.str() +
                       (stepped_ ? " for step " + std::to_string(k) : "") + "; " +
                       options_.missingInputHint);

  StepRecord record;
  record.step = k;
  record.outputs = stepper_->step(feed);
  for (const Value *st : stepper_->stateInputs())
    if (auto t = stepper_->stateValue(st->name))
      record.states.push_back({st->name, std::move(*t)});
  ++next_;
  return record;
}

StepperOptions runStepperOptions(const RunOptions &run) {
  StepperOptions options;
  options.run = run;
  // Like Core ML's own prediction calls, states keep the interpreter's
  // values between steps; only the reported states are in declared dtype.
  options.roundStates = false;
  return options;
}

namespace {

/// Running min, max, sum and counts of the values seen so far.
struct StatsAccumulator {
  TensorStats s;
  double mn = INFINITY, mx = -INFINITY, sum = 0;

  void add(double v) {
    if (std::isnan(v)) {
      ++s.nans;
      return;
    }
    if (std::isinf(v))
      ++s.infs;
    else
      sum += v, ++s.finite;
    mn = std::min(mn, v);
    mx = std::max(mx, v);
  }

  /// p[0, n) a block at a time: a block with no NaN or infinity (the common
  /// case) takes a tight loop with four independent sums; any other add().
  void addFloats(const float *p, int64_t n) {
    bool allFinite = true;
    for (int64_t i = 0; i < n; ++i)
      allFinite &= std::isfinite(p[i]);
    if (!allFinite) {
      for (int64_t i = 0; i < n; ++i)
        add(p[i]);
      return;
    }
    float lo = p[0], hi = p[0];
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      s0 += p[i], s1 += p[i + 1], s2 += p[i + 2], s3 += p[i + 3];
      lo = std::min({lo, p[i], p[i + 1], p[i + 2], p[i + 3]});
      hi = std::max({hi, p[i], p[i + 1], p[i + 2], p[i + 3]});
    }
    for (; i < n; ++i) {
      s0 += p[i];
      lo = std::min(lo, p[i]);
      hi = std::max(hi, p[i]);
    }
    sum += (s0 + s1) + (s2 + s3);
    mn = std::min(mn, double(lo));
    mx = std::max(mx, double(hi));
    s.finite += n;
  }

  TensorStats result() const {
    TensorStats out = s;
    out.min = mn;
    out.max = mx;
    out.mean = s.finite ? sum / static_cast<double>(s.finite) : NAN;
    return out;
  }
};

} // namespace

TensorStats statsOf(const Tensor &t) {
  StatsAccumulator acc;
  Tensor dense = t.materialize();
  int64_t n = dense.numElements();
  if (dense.dtype() == DType::F32 || dense.dtype() == DType::F16) {
    // Floats a block at a time (fp16 widened into a small buffer): the
    // outputs of every step of a decode loop go through here.
    constexpr int64_t kBlock = 4096;
    std::vector<float> buf(dense.dtype() == DType::F16 ? size_t(std::min(n, kBlock)) : 0);
    for (int64_t b = 0; b < n; b += kBlock) {
      int64_t m = std::min(kBlock, n - b);
      if (dense.dtype() == DType::F16)
        halfToFloatN(dense.data<uint16_t>() + b, buf.data(), m);
      acc.addFloats(dense.dtype() == DType::F16 ? buf.data() : dense.data<float>() + b, m);
    }
  } else {
    for (int64_t i = 0; i < n; ++i)
      acc.add(isFloat(dense.dtype()) ? dense.floatAt(i) : static_cast<double>(dense.intAt(i)));
  }
  return acc.result();
}

} // namespace anefit::runtime
