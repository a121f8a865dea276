//===- ExecuTorch.h - ExecuTorch's runtime, reached at run time -*- C++ -*-===//
//
// anefit runs a .pte in ExecuTorch's own runtime through its backend library
// (src/executorch: ExecuTorch's Module loads the program, runs its ops and
// writes its buffers back; each Core ML delegate runs on the interpreter).
// That library exists only where ExecuTorch's runtime was found at build
// time, so anefit's programs load it when asked (`run --engine executorch`,
// `fix --verify` on a .pte) and say why when they cannot.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/Interpreter.h"
#include "runtime/Tensor.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace anefit::runtime {

/// A method input as the program declares it.
struct DeclaredInput {
  size_t index = 0;
  DType dtype = DType::F32;
  Shape shape;
};

class ExecuTorchEngine {
public:
  /// The backend library: $ANEFIT_EXECUTORCH_BACKEND, else the one this build
  /// made, else one installed beside the program (the Python package's). Null
  /// with `why` set ("no ExecuTorch backend library: ...") when there is
  /// none or it does not load.
  static std::shared_ptr<ExecuTorchEngine> load(std::string *why);
  ~ExecuTorchEngine();

  /// The ExecuTorch version the library was built against.
  std::string version() const;
  const std::string &libraryPath() const { return path_; }

  /// Input `in` of step `step`.
  using InputFn = std::function<Tensor(int64_t step, const DeclaredInput &in)>;
  /// Runs `method` of the program at `program` for `steps` steps in
  /// ExecuTorch's runtime; the Core ML delegates run with `options`'
  /// precision, threads and exactProducts. Returns each step's outputs in the method's
  /// order (numbers, as metadata methods return, as rank-0 tensors). Throws
  /// InputError with ExecuTorch's error and the backend's message.
  std::vector<std::vector<Tensor>> run(const std::string &program, const std::string &method,
                                       int64_t steps, const RunOptions &options,
                                       const InputFn &input) const;
  /// The number an LLM program's metadata method returns ("get_vocab_size"),
  /// or nullopt when the program has no such method.
  std::optional<int64_t> metadataInt(const std::string &program, const std::string &method) const;

private:
  ExecuTorchEngine() = default;
  struct Api;
  std::unique_ptr<Api> api_;
  std::string path_;
  void *handle_ = nullptr;
};

/// Inputs of an LLM program by ExecuTorch's conventions (export_llm's
/// `forward(tokens, input_pos)`: an integer input of shape [1, n] is token
/// ids, drawn from `rng` below `vocab`; an integer input of shape [1] or []
/// is the position, the step times n): what `run --engine executorch` and
/// `fix --verify` give a decode program. Other inputs are drawn as
/// randomInput would. Returns the values a step's InputFn gives.
Tensor llmDecodeInput(int64_t step, const DeclaredInput &in, int64_t vocab, std::mt19937_64 &rng);

/// llmDecodeInput as an ExecuTorchEngine::InputFn whose values are drawn
/// once per (step, input) from `seed`: two runs given it (an original and a
/// fixed program) see the same inputs.
class LlmDecodeInputs {
public:
  LlmDecodeInputs(int64_t vocab, uint64_t seed) : vocab_(vocab), rng_(seed) {}
  Tensor operator()(int64_t step, const DeclaredInput &in);
  /// The value given for input `index` of `step`, or null if none was.
  const Tensor *drawn(int64_t step, size_t index) const;

private:
  int64_t vocab_;
  std::mt19937_64 rng_;
  std::map<std::pair<int64_t, size_t>, Tensor> drawn_;
};

} // namespace anefit::runtime
