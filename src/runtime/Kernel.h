//===- Kernel.h - What a kernel sees of the op it runs ----------*- C++ -*-===//
//
// Kernels are free functions `void xyz(KernelContext &ctx)` listed in
// Kernels.def. The context hands them the op's inputs as tensors, its const
// parameters with the op spec's defaults, and takes their results. Inputs are
// in compute dtype (fp32, int32, bool) unless a kernel asks for the raw
// tensor (fp16 weights read in place, quantized constexpr data) or for the
// value as held (lazyIn: a compressed weight or repeated view, see
// LAZY_INPUT in Kernels.def).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"
#include "runtime/Interpreter.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace anefit::runtime {

/// What an op binds to one of its parameters, found once per op (not per
/// run): the input, else the attribute, and the constant either holds.
struct ParamBinding {
  std::string name;
  /// The parameter as an input, or null.
  const OpInput *input = nullptr;
  /// The attribute of that name when there is no such input, or null.
  const Constant *attribute = nullptr;
  /// The constant bound (immediate, const op output or attribute), or null.
  const Constant *constant = nullptr;
  /// `constant` read as integers, once it has been asked for.
  bool intsRead = false;
  std::vector<int64_t> ints;

  bool present() const { return input != nullptr || attribute != nullptr; }
  /// Resolves `param` of `op`.
  static ParamBinding of(const Operation &op, std::string_view param);
};

class KernelContext {
public:
  virtual ~KernelContext() = default;
  const Operation &op;
  explicit KernelContext(const Operation &op) : op(op) {}

  /// True if parameter `param` is bound (as an input or, for constexpr ops
  /// written before iOS18, as an attribute).
  bool has(std::string_view param) const { return binding(param).present(); }
  /// The constant bound to `param` (immediate, const op output or attribute), or null.
  const Constant *constParam(std::string_view param) const { return binding(param).constant; }
  /// How `param` is bound; the reference stays valid while the op runs.
  virtual ParamBinding &binding(std::string_view param) const = 0;
  /// Input `param` in compute dtype; throws InputError if absent.
  virtual const Tensor &in(std::string_view param) = 0;
  /// Input `param` as stored (fp16 constants stay fp16, int8 stays int8).
  virtual const Tensor &raw(std::string_view param) = 0;
  /// Input `param` as held: lazy values of the kinds the op's LAZY_INPUT rows
  /// name stay lazy (anything else is as from raw()).
  virtual const Tensor &lazyIn(std::string_view param) = 0;
  /// Input `param` in compute dtype as a tensor the kernel may overwrite: the
  /// input's own bytes when no one else can read them any more, else a copy.
  virtual Tensor takeOrCopy(std::string_view param) = 0;
  /// All bindings of a variadic parameter, in compute dtype.
  virtual std::vector<const Tensor *> variadic(std::string_view param) = 0;
  /// The state value bound to `param` (read_state's input).
  virtual const Tensor &stateOf(std::string_view param) = 0;
  /// Replaces the state bound to `param`.
  virtual void setState(std::string_view param, Tensor value) = 0;

  // Parameters (usually const). An absent parameter takes the default the op
  // table (ops/Ops.def) states for it; absent without one, the kernel fails
  // ("required parameter 'axis' is missing").
  int64_t intArg(std::string_view param);
  float floatArg(std::string_view param);
  bool boolArg(std::string_view param);
  std::string strArg(std::string_view param);
  // The same with a default the op table cannot state because it depends on
  // the op at hand (split's num_splits from its outputs, an axis that is
  // absent for per-tensor quantization). Not for constants: those belong in
  // Ops.def.
  int64_t intArg(std::string_view param, int64_t dflt);
  float floatArg(std::string_view param, float dflt);
  bool boolArg(std::string_view param, bool dflt);
  std::string strArg(std::string_view param, std::string_view dflt);
  std::optional<int64_t> intArgOpt(std::string_view param);
  std::vector<int64_t> intsArg(std::string_view param);
  std::vector<bool> boolsArg(std::string_view param);

  /// True when every reader of output 0 takes lazy values of `kind`, so the
  /// kernel may return one instead of dense bytes.
  virtual bool outputMayBeLazy(LazyKind kind) const = 0;
  /// The run's options (precision, threads).
  virtual const RunOptions &options() const = 0;

  /// Declared type of output i.
  /// Fails (InputError) when the op declares fewer results: a kernel never
  /// reads past what the program gave it.
  const Type &outputType(size_t i = 0) const {
    if (i >= op.outputs.size())
      failMissingOutput(i);
    return op.outputs[i]->type;
  }
  size_t numOutputs() const { return op.outputs.size(); }
  virtual void setOutput(size_t i, Tensor t) = 0;

  /// Throws InputError "op 'NAME' (TYPE): MESSAGE".
  [[noreturn]] void fail(const std::string &message) const;
  /// fail() with "declares N results; the kernel needs result I".
  [[noreturn]] void failMissingOutput(size_t i) const;
  /// Normalizes a possibly negative axis against `rank`, failing if out of range.
  int64_t axis(int64_t a, int64_t rank, std::string_view what = "axis") const;

private:
  /// The default Ops.def gives `param` of this op; fails when it has none.
  std::string_view tableDefault(std::string_view param) const;
  /// The same read as a number (True/False as 1/0).
  double tableNumber(std::string_view param) const;
};

using KernelFn = void (*)(KernelContext &);

#define KERNEL(OpType, Fn) void Fn(KernelContext &ctx);
#include "runtime/Kernels.def"

} // namespace anefit::runtime
