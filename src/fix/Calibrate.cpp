//===- Calibrate.cpp - What each weight's layer reads, measured -----------===//
#include "fix/Calibrate.h"

#include "runtime/ModelRun.h"
#include "support/DType.h"

#include <algorithm>

namespace anefit {

CalibrationRecorder::CalibrationRecorder(const Function &fn) {
  std::map<const Value *, std::shared_ptr<InputMoment>> byActivation;
  for (const auto &op : fn.body->ops) {
    std::optional<WeightInput> wi = weightInputOf(*op);
    if (!wi)
      continue;
    const Value *x = op->inputValue(wi->activation);
    const Value *w = op->inputValue(wi->weight);
    if (!x || !w || !w->definingOp)
      continue;
    std::vector<Value *> operands = op->operandValues();
    auto it = std::find(operands.begin(), operands.end(), x);
    if (it == operands.end())
      continue;
    Layer layer{w->definingOp->name, static_cast<size_t>(it - operands.begin()), wi->activationAxis,
                wi->weightAxis, nullptr};
    // A linear (weight (out, in), x's last axis): its input's second moment.
    if (wi->weightAxis == 1 && wi->activationAxis == -1 && !moments_.count(layer.weight)) {
      std::shared_ptr<InputMoment> &m = byActivation[x];
      if (!m) {
        m = std::make_shared<InputMoment>();
        layer.moment = m; // the first reader records it
      }
      moments_[layer.weight] = m;
    }
    layers_[op.get()] = std::move(layer);
  }
}

std::function<void(const Operation &, const std::vector<const runtime::Tensor *> &,
                   const std::vector<const runtime::Tensor *> &)>
CalibrationRecorder::hook() {
  return [this](const Operation &op, const std::vector<const runtime::Tensor *> &,
                const std::vector<const runtime::Tensor *> &operands) {
    auto it = layers_.find(&op);
    if (it == layers_.end() || it->second.operand >= operands.size() ||
        !operands[it->second.operand])
      return;
    const Layer &layer = it->second;
    const runtime::Tensor &x = *operands[layer.operand];
    if (!isFloat(x.dtype()) || x.rank() < 1)
      return;
    int64_t rank = x.rank();
    int64_t axis = layer.activationAxis < 0 ? rank + layer.activationAxis : layer.activationAxis;
    if (axis < 0 || axis >= rank)
      return;
    int64_t channels = x.dim(axis), inner = 1;
    for (int64_t a = axis + 1; a < rank; ++a)
      inner *= x.dim(a);
    std::vector<float> v = x.toFloats();
    if (channels == 0 || v.empty())
      return;
    ChannelEnergy &e = sums_[layer.weight];
    if (e.energy.empty()) {
      e.axis = layer.weightAxis;
      e.energy.assign(static_cast<size_t>(channels), 0.0);
    }
    if (static_cast<int64_t>(e.energy.size()) != channels)
      return; // read by layers of another width: the first one's counts
    int64_t outer = static_cast<int64_t>(v.size()) / (channels * inner);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t c = 0; c < channels; ++c) {
        const float *p = v.data() + (o * channels + c) * inner;
        double s = 0;
        for (int64_t i = 0; i < inner; ++i)
          s += static_cast<double>(p[i]) * p[i];
        e.energy[static_cast<size_t>(c)] += s;
      }
    e.rows += outer * inner;
    if (layer.moment && inner == 1) {
      InputMoment &m = *layer.moment;
      if (m.channels == 0)
        m.channels = channels;
      if (m.channels == channels)
        m.add(v.data(), outer);
    }
  };
}

WeightCalibration CalibrationRecorder::finish(std::string source, bool random) const {
  WeightCalibration out;
  out.source = std::move(source);
  out.random = random;
  for (const auto &[name, sum] : sums_) {
    ChannelEnergy e = sum;
    if (e.rows > 0)
      for (double &x : e.energy)
        x /= static_cast<double>(e.rows);
    auto m = moments_.find(name);
    if (m != moments_.end() && m->second->rows > 0 &&
        m->second->channels == static_cast<int64_t>(e.energy.size()))
      e.moment = m->second;
    out.weights.emplace(name, std::move(e));
  }
  return out;
}

void addHeldOut(WeightCalibration &calibration, const WeightCalibration &heldOut,
                std::string source) {
  bool any = false;
  for (auto &[name, e] : calibration.weights) {
    auto it = heldOut.weights.find(name);
    if (!e.moment || it == heldOut.weights.end() || !it->second.moment ||
        it->second.moment->channels != e.moment->channels)
      continue;
    e.heldOut = it->second.moment;
    any = true;
  }
  if (any)
    calibration.heldOutSource = std::move(source);
}

WeightCalibration calibrateOnRandomInputs(const Model &model, const std::string &function,
                                          int64_t steps, uint64_t seed) {
  runtime::ModelRunOptions o;
  o.function = function;
  o.random = true;
  o.seed = seed;
  o.steps = steps;
  o.run.source = model.sourcePath;
  const Function *fn =
      function.empty() ? model.defaultFunction() : model.program->findFunction(function);
  if (!fn)
    return {};
  CalibrationRecorder recorder(*fn);
  o.run.opResults = recorder.hook();
  runtime::ModelRun run(model, std::move(o));
  for (int64_t k = 0; k < run.steps(); ++k)
    run.next();
  return recorder.finish("random inputs, seed " + std::to_string(seed) + ", " +
                             std::to_string(steps) + " steps",
                         true);
}

} // namespace anefit
