//===- ModelRun.h - Run one function of a model, step by step ---*- C++ -*-===//
//
// The library behind `anefit run`: binds a function's inputs for each step
// (given for every step, given for one step, or random from a seed), starts
// states from zeros or given values, carries what the model's host contract
// says (hostCarries: the state map of a fixed model) for inputs the caller did
// not give, and steps the function with the Stepper. One step at a time, so a
// caller can report while a long run goes on.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Model.h"
#include "runtime/Stepper.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace anefit::runtime {

/// "step<k>/<name>" -> (k, name); nullopt for names without a step prefix.
std::optional<std::pair<int64_t, std::string>> parseStepKey(const std::string &key);

/// Input values of a stepped run.
struct RunInputs {
  /// Given for every step.
  TensorMap shared;
  /// Given for step k only (overriding `shared`).
  std::map<int64_t, TensorMap> perStep;
  /// 1 + the largest k of perStep (0 without per-step inputs).
  int64_t perStepCount() const;
  /// Adds an archive's arrays: "step<k>/NAME" to step k, "NAME" to every step.
  /// `origin` names the archive in messages.
  void addArchive(std::vector<NamedTensor> arrays, const std::string &origin = "");
  /// Where the per-step arrays came from, for messages.
  std::string origin;
  /// The input names the archive gave (without step<k>/), for messages.
  std::set<std::string> fromArchive;
  /// Without a step count (`steps` 0) the keys give it, so they must not
  /// skip a step: one "step999999/x" must not run a million steps. Throws
  /// InputError naming the archive and the key.
  void checkSteps(int64_t steps) const;
  /// True if `name` is given for step `step`.
  bool gives(const std::string &name, int64_t step) const;
};

struct ModelRunOptions {
  /// Function to run; empty: the model's default.
  std::string function;
  RunInputs inputs;
  /// Fill inputs not given with randomInput values from `seed`.
  bool random = false;
  uint64_t seed = 0;
  /// Steps to run; 0: the number of per-step groups, at least 1.
  int64_t steps = 0;
  /// Initial values of states by name (the others start at zero).
  TensorMap initialStates;
  /// Precision and progress of the interpreter.
  RunOptions run;
  /// Completes "missing input 'x' of type T[ for step k]; " in the error for
  /// an input neither given nor random.
  std::string missingInputHint = "give it, or ask for random inputs";
};

/// What one step produced.
struct StepRecord {
  int64_t step = 0;
  std::vector<NamedTensor> outputs;
  /// Every state after the step, in its declared dtype.
  std::vector<NamedTensor> states;
};

/// How `anefit run` (and the Python API's Session) step a function.
StepperOptions runStepperOptions(const RunOptions &run);

class ModelRun {
public:
  /// Resolves the function and the carries and sets the initial states.
  /// Throws InputError for a model without a program, an unknown function,
  /// a bad step count or a state that does not match its declaration.
  ModelRun(const Model &model, ModelRunOptions options);
  ~ModelRun();

  const Function &function() const { return *fn_; }
  int64_t steps() const { return steps_; }
  /// True when results are per step (several steps, or per-step inputs).
  bool stepped() const { return stepped_; }
  /// Carries in effect (the state map's, minus inputs the caller gives).
  const CarryMap &carries() const { return stepper_->carries(); }
  bool done() const { return next_ >= steps_; }

  /// Binds the inputs of the next step and runs it. Throws InputError for an
  /// unknown or missing input and for the interpreter's errors.
  StepRecord next();
  /// Sets the inputs of step `step` (not run yet) from what earlier steps
  /// gave, over any given before: a host that feeds a step's result back,
  /// as a sampler feeds the token it drew.
  void give(int64_t step, TensorMap inputs);

private:
  const Function *fn_ = nullptr;
  FunctionDescription desc_;
  ModelRunOptions options_;
  std::unique_ptr<Stepper> stepper_;
  std::mt19937_64 rng_;
  int64_t steps_ = 1;
  bool stepped_ = false;
  int64_t next_ = 0;
};

/// Summary numbers of a tensor, for reports.
struct TensorStats {
  double min = 0;
  double max = 0;
  double mean = 0; ///< over finite values; NaN when there is none
  int64_t nans = 0;
  int64_t infs = 0;
  int64_t finite = 0;
};
TensorStats statsOf(const Tensor &t);

} // namespace anefit::runtime
