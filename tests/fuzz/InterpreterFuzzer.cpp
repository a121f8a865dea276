//===- InterpreterFuzzer.cpp - Fuzz the interpreter with fuzzed programs --===//
//
// Arbitrary MIL text is parsed; a program that every reader would accept
// (values in scope) is run: each function for two steps on seeded random
// inputs, states carried, in fp32 or fp16, under a memory budget of 16 MiB.
// A program must either be refused with an InputError (no kernel, bad
// shapes, an index out of range, over budget) or run; a crash, a sanitizer
// report, a hang or an allocation past -malloc_limit_mb is a finding.
//
//===----------------------------------------------------------------------===//
#include "ir/AsmParser.h"
#include "ir/Verifier.h"
#include "runtime/Stepper.h"
#include "support/Error.h"

#include <random>
#include <string_view>

using namespace anefit;

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  runtime::MemoryBudget::setLimit(uint64_t(16) << 20);
  return 0;
}

namespace {

/// Inputs of at most this many elements are made; bigger ones are the
/// budget's business, not worth the fuzzer's time.
constexpr int64_t kMaxInputElements = int64_t(1) << 16;

bool smallInputs(const Function &fn, const FunctionDescription &desc) {
  for (const auto &in : fn.inputs) {
    const Type &t = in->type;
    if (!t.hasRank())
      return false;
    int64_t n = 1;
    for (const Dim &d : t.shape()) {
      int64_t size = d.isStatic() ? d.size : 1;
      if (size < 0 || (size && n > kMaxInputElements / size))
        return false;
      n *= size;
    }
  }
  (void)desc;
  return true;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2)
    return 0;
  uint8_t mode = data[0];
  std::string_view text(reinterpret_cast<const char *>(data + 1), size - 1);
  WeightOpener noWeights = [](const std::string &) { return nullptr; };
  std::unique_ptr<Model> model;
  try {
    model = parseModelText(text, "fuzz.mil", noWeights);
  } catch (const InputError &) {
    return 0;
  }
  if (!model->program || hasErrors(verifyValueScopes(*model->program)))
    return 0;
  runtime::StepperOptions options;
  options.run.precision = mode & 1 ? runtime::Precision::FP16 : runtime::Precision::FP32;
  options.run.threads = 1;
  options.run.source = "fuzz.mil";
  size_t functions = 0;
  for (const auto &f : model->program->functions) {
    if (++functions > 4)
      break;
    FunctionDescription desc = model->description.describe(f->name);
    if (!smallInputs(*f, desc))
      continue;
    try {
      runtime::Stepper stepper(*f, {}, options);
      std::mt19937_64 rng(mode);
      for (int step = 0; step < 2; ++step) {
        runtime::TensorMap inputs = runtime::randomInputs(*f, desc, rng);
        for (const runtime::NamedTensor &out : stepper.step(inputs))
          if (!out.tensor.valid())
            __builtin_trap();
      }
      // Inputs handed over: kernels may write the ones the map alone held
      // (in place), and every output is widened where it can be.
      runtime::Interpreter interp(*f, options.run);
      std::vector<std::string> outs;
      for (const Value *v : f->body->outputs)
        outs.push_back(v->name);
      interp.widenOutputs(outs);
      runtime::StateContext states;
      for (const runtime::NamedTensor &out :
           interp.run(runtime::randomInputs(*f, desc, rng), states))
        if (!out.tensor.valid() ||
            (out.widened.valid() && out.widened.shape() != out.tensor.shape()))
          __builtin_trap();
    } catch (const InputError &) {
    }
  }
  return 0;
}
