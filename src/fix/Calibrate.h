//===- Calibrate.h - What each weight's layer reads, measured ---*- C++ -*-===//
//
// Requantize fits its palettes and picks its forms by the error a layer's
// output takes, which needs what the layer reads: the energy E[x_c^2] of
// each input channel of every linear, conv and matmul with a stored weight
// (transforms/Calibration.h). A CalibrationRecorder collects it from the
// interpreter's op results while the original runs (RunOptions::opResults),
// on the user's text teacher-forced through an LLM (fix --text, the run
// that also gives the original's perplexity) or, as the last resort, on a
// seeded random draw. Linears' inputs are also kept whole, for their second
// moment (InputMoment: bounded by the smaller of the rows and H).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Model.h"
#include "runtime/Interpreter.h"
#include "transforms/Calibration.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace anefit {

class CalibrationRecorder {
public:
  /// Records the layers of `fn`.
  explicit CalibrationRecorder(const Function &fn);
  /// The hook to set as RunOptions::opResults of the runs to record.
  std::function<void(const Operation &, const std::vector<const runtime::Tensor *> &,
                     const std::vector<const runtime::Tensor *> &)>
  hook();
  /// The energies recorded so far, by weight op name.
  WeightCalibration finish(std::string source, bool random) const;

private:
  struct Layer {
    std::string weight; ///< the op making the weight
    size_t operand = 0; ///< the activation's index in operandValues()
    int activationAxis = -1;
    int weightAxis = 1;
    /// A linear's input second moment, added to by the first layer (in
    /// program order) that reads the activation; null for the others.
    std::shared_ptr<InputMoment> moment;
  };
  std::map<const Operation *, Layer> layers_;
  std::map<std::string, ChannelEnergy> sums_;
  /// By weight: the second moment of what its (first) linear reads.
  std::map<std::string, std::shared_ptr<InputMoment>> moments_;
};

/// Sets each weight's ChannelEnergy::heldOut in `calibration` to the second
/// moment `heldOut` recorded for it (another run of the same layers, on
/// inputs the calibration never saw), where both have one of one width.
void addHeldOut(WeightCalibration &calibration, const WeightCalibration &heldOut,
                std::string source);

/// The seeded-draw calibration: `steps` steps of `function` (empty: the
/// default) on random inputs from `seed`, states and host carries kept.
/// Throws InputError when the interpreter cannot run it.
WeightCalibration calibrateOnRandomInputs(const Model &model, const std::string &function,
                                          int64_t steps, uint64_t seed);

} // namespace anefit
