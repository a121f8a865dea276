//===- Stepper.h - Step a model like a host, and compare two runs -*- C++ -*-===//
//
// A host runs a stateful model step by step: it gives the inputs of each
// step, Core ML keeps the states, and the host itself moves some outputs back
// into inputs for the next step. `Stepper` does that on the reference
// interpreter for one function, or for a chain of functions that together
// play one (the regions of a split, run in order within a step, each reading
// earlier stages' outputs by name). `Comparison` holds two runs against each
// other, output by output and state by state.
//
// What the host moves between steps is a carry map: output name -> input
// name, with the value of the first step. The model decides it, not the
// stepper; each source below adds rows:
//   - the state map of a model fixed by state-to-io (ir/StateMap.h):
//     carriesFromStateMap(), or hostCarries() reading a model's metadata;
//   - a host that writes outputs back into buffers that are also inputs
//     (ExecuTorch's mutable-buffer write-back for a Core ML delegate): a new
//     source is one function returning CarryMap rows, called from
//     hostCarries() when the model comes with that contract.
// Within a step, a chain of functions needs no carry rows: a later stage's
// input takes the value of the same-named output of an earlier stage.
//
// `fix --verify`, `split --verify` and `run --steps` are built on this.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Model.h"
#include "ir/StateMap.h"
#include "runtime/Interpreter.h"

#include <cstdint>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace anefit::runtime {

/// One value the host moves from an output to an input between steps.
struct Carry {
  std::string output; ///< output (of any stage) whose value is carried
  std::string input;  ///< input that receives it on the next step
  /// The input's value on the first step; zeros of the input's declared
  /// shape and dtype when absent.
  std::optional<Tensor> initial;
  /// Who asked for the carry, for messages ("state map", ...).
  std::string source;
};
using CarryMap = std::vector<Carry>;

/// One row per moved state of `map` whose input `fn` declares; each starts at
/// zeros of the state's shape, as the state map's contract says.
CarryMap carriesFromStateMap(const StateMap &map, const Function &fn);

/// Every carry the model itself declares for function `fn`: the state map in
/// its metadata (StateMap::kMetadataKey), and for a model read from an
/// ExecuTorch .pte the program's write-back of delegate outputs into its
/// mutable buffers (Model::hostWriteBacks). Throws InputError on a malformed
/// state map, and when the .pte reader could not map the program's
/// write-back (Model::hostWriteBackError).
CarryMap hostCarries(const Model &model, const Function &fn);

struct StepperOptions {
  RunOptions run;
  /// Core ML keeps a state in its declared dtype between predictions, the
  /// interpreter in fp32; when true, states are rounded to their declared
  /// dtype after each step, as Core ML stores them.
  bool roundStates = true;
};

/// Runs a function (or a chain of functions) step after step with states
/// and carries kept between steps. The functions must outlive the stepper.
class Stepper {
public:
  /// Steps `fn`; `carries` name outputs and inputs of `fn`.
  explicit Stepper(const Function &fn, CarryMap carries = {}, StepperOptions options = {});
  /// Steps `chain` run in order within each step: a stage's input that is not
  /// given to step() takes the value of the same-named output of an earlier
  /// stage. States are shared by name across the stages. Throws InputError
  /// when a carry names no output or no input of the chain.
  explicit Stepper(std::vector<const Function *> chain, CarryMap carries = {},
                   StepperOptions options = {});
  ~Stepper();
  Stepper(const Stepper &) = delete;
  Stepper &operator=(const Stepper &) = delete;

  /// Runs one step. `inputs` name inputs of the chain (extra names are an
  /// error); carried inputs not in `inputs` take their carried value. Returns
  /// every stage's outputs in order (a chain's intermediate values included).
  /// A step that fails on its inputs may be retried; one that fails while
  /// running may have spent the carried values, and later steps then fail
  /// (start a new stepper).
  std::vector<NamedTensor> step(const TensorMap &inputs);

  /// Sets the value of state `name` before the first step (checked against
  /// its declaration in the first stage that declares it).
  void setState(const std::string &name, const Tensor &value);
  /// Current states (compute dtype) and the declared dtype of each.
  const StateContext &states() const { return states_; }
  /// State `name` in its declared dtype, or nullopt.
  std::optional<Tensor> stateValue(const std::string &name) const;
  /// Names of every state input of the chain, in declaration order.
  const std::vector<const Value *> &stateInputs() const { return stateInputs_; }
  /// Inputs of the chain that step() must be given (not produced by an
  /// earlier stage, not carried, not states), in declaration order.
  const std::vector<const Value *> &externalInputs() const { return externalInputs_; }
  const CarryMap &carries() const { return carries_; }
  /// True when a carry feeds input `input`.
  bool carriesInto(const std::string &input) const;
  int64_t stepsDone() const { return stepsDone_; }

private:
  /// One run of the chain on `values` (the step's inputs and the carried
  /// values, which a single function's interpreter takes).
  std::vector<NamedTensor> runChain(const TensorMap &inputs, TensorMap &values);

  std::vector<const Function *> chain_;
  std::vector<std::unique_ptr<Interpreter>> interpreters_;
  CarryMap carries_;
  StepperOptions options_;
  StateContext states_;
  TensorMap carried_;                ///< input name -> value for the next step
  std::vector<DType> carriedDTypes_; ///< declared dtype of each carry's input
  std::vector<const Value *> stateInputs_;
  std::vector<const Value *> externalInputs_;
  int64_t stepsDone_ = 0;
  /// A step failed after the interpreter had taken the carried values.
  bool carriedLost_ = false;
};

/// Random values for every tensor input of `fn` not in `skip`, in
/// declaration order from `rng` (randomInput per input, shapes from `desc`).
TensorMap randomInputs(const Function &fn, const FunctionDescription &desc, std::mt19937_64 &rng,
                       const std::vector<std::string> &skip = {});

struct Tolerance {
  double atol = 0;
  double rtol = 0;
  /// Units in the last place an element of an fp16 tensor may differ by,
  /// beyond atol and rtol: a value stored in fp16 (a cache written back, an
  /// fp16 output) rounds to a neighbour when its fp32 computation moves by
  /// a fraction of an fp16 step, and later steps that read it widen that.
  double fp16Ulps = 0;
};

/// Two runs held against each other: |expected - actual| <= atol + rtol *
/// max(|expected|, RMS of the expected tensor) (+ fp16Ulps fp16 steps at
/// that magnitude for an fp16 tensor) per element. The RMS floor
/// is for elements a long sum brought near zero: their rounding error is
/// that of the terms summed, of the tensor's size (a logit of 0.005 among
/// logits of RMS 1 moves by 1e-4 when the sum's order changes). A value
/// NaN in both, or the same infinity in both, is not compared (it holds no
/// difference to measure): counted and its first place kept, so a report
/// names it; NaN or an infinity against anything else is an infinite
/// difference.
class Comparison {
public:
  explicit Comparison(Tolerance tolerance = {}) : tolerance_(tolerance) {}

  /// Compares one value; `what` names it in the first mismatch ("main: step
  /// 3: output 'y'"). A shape change is a mismatch. `storedFp16`: the value
  /// is declared fp16 (the interpreter holds it in fp32), so the tolerance's
  /// fp16Ulps apply.
  void compare(const std::string &what, const Tensor &expected, const Tensor &actual,
               bool storedFp16 = false);
  /// Compares every output of `expected` with the same-named one of
  /// `actual`; one missing from `actual` is a mismatch. `prefix` starts each
  /// name ("main: step 3: "); `fp16Outputs` names those declared fp16.
  void compareOutputs(const std::string &prefix, const std::vector<NamedTensor> &expected,
                      const std::vector<NamedTensor> &actual,
                      const std::set<std::string> &fp16Outputs = {});
  /// Records a mismatch that is not about values (a missing output, ...).
  void fail(const std::string &what);

  bool ok() const { return ok_; }
  /// Largest |difference| over every element compared (infinity for NaN
  /// against a number).
  double maxAbsDiff() const { return maxAbsDiff_; }
  /// Elements compared (NaN pairs are not counted).
  size_t compared() const { return compared_; }
  /// Elements NaN in both or the same infinity in both (not compared, not a
  /// mismatch): a report names them, or "0 values compared" would read as a
  /// proof.
  size_t bothNonFinite() const { return bothNonFinite_; }
  /// The first of them: "main: step 0: output 'y': element 3 is nan in
  /// both"; empty when none.
  const std::string &firstNonFinite() const { return firstNonFinite_; }
  /// The first mismatch: "main: step 3: output 'y': element 7 is 0.5, was
  /// 0.25"; empty while ok().
  const std::string &firstMismatch() const { return firstMismatch_; }
  const Tolerance &tolerance() const { return tolerance_; }

private:
  Tolerance tolerance_;
  bool ok_ = true;
  double maxAbsDiff_ = 0;
  size_t compared_ = 0;
  size_t bothNonFinite_ = 0;
  std::string firstMismatch_;
  std::string firstNonFinite_;
};

} // namespace anefit::runtime
