//===- Interpreter.h - Reference interpreter for MIL programs ---*- C++ -*-===//
//
// Runs one function of a Program on the CPU: named input tensors in, named
// output tensors out, Core ML states kept in a StateContext that persists
// across calls so a stateful model can be stepped like Core ML would. Kernels
// compute in fp32 (fp16 tensors widened); Precision::FP16 rounds every float
// op result to fp16 as the Neural Engine's fp16 pipeline does. The verbs that
// prove rewrites (`fix --verify`, `split`) use this API directly.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"
#include "runtime/Tensor.h"

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace anefit::runtime {

class OpProfile;

enum class Precision { FP32, FP16 };

/// "fp32" / "fp16" -> Precision; throws InputError otherwise.
Precision parsePrecision(std::string_view s);

struct RunOptions {
  Precision precision = Precision::FP32;
  /// Threads kernels may use (the caller's thread included); 0 = every core
  /// the process may run on.
  int threads = 0;
  /// Idle threads poll for the next parallel op for up to 50 us before they
  /// sleep; false makes them sleep at once (no CPU time between ops, a
  /// wake-up per parallel op). See ThreadScope.
  bool spin = true;
  /// Keep every product with int4 weights fp32-grade. False lets a linear
  /// whose result the model declares fp16 put x on a 16-bit grid per block
  /// of 32 where that is the faster kernel (ProductGrade::Fp16: AVX2 CPUs
  /// without AVX-512 or AVX-VNNI), each x moved by at most 2^-15 of its
  /// block's largest |x|, 16 times finer than fp16 there.
  bool exactProducts = false;
  /// Compressed weights (constexpr_* results) read by linear, matmul, conv
  /// and gather are decoded where they are read, never expanded whole. False
  /// expands them like any other value (to compare the two).
  bool decodeInPlace = true;
  /// Bytes of values computed from constants alone (an expanded weight read
  /// by an op that cannot decode it in place, constants converted to fp32)
  /// kept from one run to the next; what does not fit is recomputed each run.
  uint64_t foldCacheBytes = uint64_t(2) << 30;
  /// Called after each top-level op with (ops done, total ops); may be empty.
  std::function<void(size_t, size_t)> progress;
  /// When set, every run adds the time of each op to its op type's row and
  /// its own time to the total (`anefit run --profile`); null reads no clock.
  /// It must outlive the Interpreter.
  OpProfile *profile = nullptr;
  /// Called after each top-level op the run computed (not for a value kept
  /// from an earlier run) with the op and when it started and ended; may be
  /// empty. A delegate logs one profiling event per op with it.
  std::function<void(const Operation &, std::chrono::steady_clock::time_point,
                     std::chrono::steady_clock::time_point)>
      opTimed;
  /// Called after each top-level op the run computed, with its results as
  /// the run's later ops will read them (rounded to fp16 in FP16 mode) and
  /// its operands (in Operation::operandValues order; an operand the op
  /// updated in place holds the update). Values decoded lazily (compressed
  /// weights) are passed as they are; one that is not available is null.
  /// May be empty.
  std::function<void(const Operation &, const std::vector<const Tensor *> &results,
                     const std::vector<const Tensor *> &operands)>
      opResults;
  /// The file the function was read from; every error the interpreter
  /// raises starts with it ("model.mil: function 'main': op ...").
  std::string source;
};

/// Tensors by name (inputs, states).
using TensorMap = std::map<std::string, Tensor>;

struct NamedTensor {
  std::string name;
  Tensor tensor;
  /// For an output named in Interpreter::widenOutputs: the same values in
  /// the compute dtype (fp32 for an fp16 output), when the run had them to
  /// give; empty otherwise.
  Tensor widened = {};
};

/// The current values of a function's states, by state input name. Values
/// are kept in the interpreter's compute dtype (fp32 for float states).
class StateContext {
public:
  /// Gives every state input of `fn` that has no value yet a zero tensor of
  /// its declared shape. Throws InputError for a state without static shape.
  void initialize(const Function &fn);
  /// Sets state `name`, checking it against `fn`'s declaration (name exists,
  /// shape equal, dtype kind compatible) and converting to the compute dtype.
  void set(const Function &fn, const std::string &name, const Tensor &value);
  /// Sets a state without checks (used by the interpreter itself).
  void setUnchecked(const std::string &name, Tensor value) { states_[name] = std::move(value); }
  /// The value of state `name`, or null.
  const Tensor *find(const std::string &name) const;
  const TensorMap &all() const { return states_; }
  void clear() { states_.clear(); }

private:
  TensorMap states_;
};

struct InterpreterPlan;

/// Executes one function. The Program (and its weight files) must outlive the
/// Interpreter; results are owned tensors independent of both.
class Interpreter {
public:
  /// Prepares `fn` (value slots, liveness). Throws InputError if an op has no
  /// kernel, naming the op and its type.
  explicit Interpreter(const Function &fn, RunOptions options = {});
  ~Interpreter();
  Interpreter(const Interpreter &) = delete;
  Interpreter &operator=(const Interpreter &) = delete;

  /// Runs the function once. `inputs` must name every tensor input of the
  /// function with a matching shape and a dtype of the same kind (float
  /// values may be given for fp16 inputs and vice versa); states come from
  /// and go back to `states` (missing states start at zero). Outputs carry
  /// the function's declared output dtypes. Throws InputError on bad inputs
  /// and on runtime errors of kernels (index out of range, ...).
  std::vector<NamedTensor> run(const TensorMap &inputs, StateContext &states);
  /// Same, taking the inputs once they are checked: a tensor the map alone
  /// held may be written in place by the op that reads it last (a KV cache
  /// updated by slice_update without a copy). An input error leaves `inputs`
  /// as it was; once the run starts, each value taken is an empty tensor in
  /// `inputs`, also when the run fails.
  std::vector<NamedTensor> run(TensorMap &&inputs, StateContext &states);
  /// Same, for a function without states.
  std::vector<NamedTensor> run(const TensorMap &inputs);

  /// Outputs whose values the caller also wants in the compute dtype (a
  /// host that writes an fp16 output back into an fp32 input): the run gives
  /// them in NamedTensor::widened when it can without a copy, converting
  /// both forms in one pass.
  void widenOutputs(const std::vector<std::string> &names);

  const Function &function() const { return fn_; }
  /// Bytes of the values computed from constants alone that this
  /// interpreter keeps for its next runs (RunOptions::foldCacheBytes).
  uint64_t keptBytes() const;
  const RunOptions &options() const { return options_; }

private:
  /// Runs the plan on `inputs`, sharing their tensors; or taking them (moved
  /// into the run's values) when `owned` is that same map, the caller's to give.
  std::vector<NamedTensor> runSteps(const TensorMap &inputs, TensorMap *owned,
                                    StateContext &states);
  /// Rethrows the error being handled with RunOptions::source in front.
  [[noreturn]] void rethrowWithSource() const;

  const Function &fn_;
  RunOptions options_;
  std::unique_ptr<InterpreterPlan> plan_;
};

/// True if the interpreter has a kernel for op type `opType`.
bool hasKernel(std::string_view opType);
/// Every op type with a kernel, sorted.
std::vector<std::string> kernelOpTypes();

} // namespace anefit::runtime
