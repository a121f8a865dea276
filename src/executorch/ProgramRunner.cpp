//===- ProgramRunner.cpp - A .pte run step by step in ExecuTorch's runtime -===//
//
// anefit_executorch_run (CoreMLBackend.h): ExecuTorch's own Module loads the
// program (memory-mapped), plans its memory and runs each step; the Core ML
// delegates run on this library's backend. Inputs and outputs cross through
// the C interface of runtime/ExecuTorchAbi.h.
//
//===----------------------------------------------------------------------===//
#include "executorch/CoreMLBackend.h"
#include "executorch/Internal.h"

#include "support/DType.h"

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor_ptr.h>
#include <executorch/runtime/platform/platform.h>

#include <cstring>
#include <string>
#include <vector>

namespace {

namespace et = executorch::runtime;
using executorch::extension::module::Module;
using namespace anefit::executorch_backend;

struct Failure {
  std::string text;
};

/// ExecuTorch's first error-level log line on this thread since it was cleared. anefit's programs
/// say what failed in one line: the runtime's own lines are kept for it
/// instead of printed (its informational lines are dropped).
thread_local std::string runtimeError;

void keepRuntimeErrors(et_timestamp_t, et_pal_log_level_t level, const char *, const char *, size_t,
                       const char *message, size_t length) {
  if (level != kError && level != kFatal)
    return;
  std::string line(message, length);
  while (!line.empty() && (line.back() == '\n' || line.back() == ' '))
    line.pop_back();
  if (!line.empty() && runtimeError.empty())
    runtimeError = std::move(line);
}

/// ": <the backend's message>" or ": <ExecuTorch's first error line>", or "".
std::string cause() {
  const std::string &why = !lastError.empty() ? lastError : runtimeError;
  return why.empty() ? "" : ": " + why;
}

} // namespace

ANEFIT_EXECUTORCH_API int anefit_executorch_run(const char *program, const char *method,
                                                int64_t steps, const char *precision, int threads,
                                                int exactProducts, anefit_et_input_fn input,
                                                anefit_et_output_fn output, void *context,
                                                char *message, size_t messageSize) {
  std::string where = std::string(program) + ": method '" + method + "'";
  try {
    // Only anefit's own programs call this function (the Python package
    // runs ExecuTorch's runtime with its own log).
    static const bool quiet = et::register_pal(et::PalImpl::create(keepRuntimeErrors, __FILE__));
    (void)quiet;
    runtimeError.clear();
    char registerMessage[512] = {0};
    if (anefit_executorch_register(precision, threads, exactProducts, registerMessage,
                                   sizeof registerMessage))
      throw Failure{registerMessage};
    Module module(program, Module::LoadMode::Mmap);
    et::Result<et::MethodMeta> meta = module.method_meta(method);
    if (!meta.ok())
      throw Failure{where + ": " + errorText(meta.error()) + " reading the method" + cause()};
    lastError.clear();
    runtimeError.clear();
    if (et::Error e = module.load_method(method); e != et::Error::Ok)
      throw Failure{where + ": " + errorText(e) + " loading the method" + cause()};
    size_t numInputs = meta->num_inputs();
    for (int64_t step = 0; step < steps; ++step) {
      std::vector<et::EValue> values;
      std::vector<executorch::extension::TensorPtr> tensors;
      for (size_t i = 0; i < numInputs; ++i) {
        std::string arg = where + ": input " + std::to_string(i);
        et::Result<et::Tag> tag = meta->input_tag(i);
        if (!tag.ok() || *tag != et::Tag::Tensor)
          throw Failure{arg + ": expected a tensor input, found another kind of value"};
        et::Result<et::TensorInfo> info = meta->input_tensor_meta(i);
        if (!info.ok())
          throw Failure{arg + ": " + errorText(info.error())};
        std::optional<anefit::DType> dtype = dtypeOf(info->scalar_type());
        if (!dtype)
          throw Failure{arg + ": a scalar type anefit does not know"};
        std::vector<int64_t> shape(info->sizes().begin(), info->sizes().end());
        std::string dtypeName(anefit::dtypeName(*dtype));
        anefit_et_tensor declared{dtypeName.c_str(), static_cast<int64_t>(shape.size()),
                                  shape.data(), nullptr};
        anefit_et_tensor given{};
        if (input(context, step, i, &declared, &given) != 0)
          return 1;
        std::optional<anefit::DType> givenType =
            given.dtype ? anefit::dtypeFromName(given.dtype) : std::nullopt;
        std::optional<executorch::aten::ScalarType> scalar =
            givenType ? scalarTypeOf(*givenType) : std::nullopt;
        if (!scalar)
          throw Failure{arg + ": expected a dtype ExecuTorch has, found '" +
                        std::string(given.dtype ? given.dtype : "") + "'"};
        std::vector<executorch::aten::SizesType> sizes(given.shape, given.shape + given.rank);
        tensors.push_back(executorch::extension::make_tensor_ptr(
            std::move(sizes), const_cast<void *>(given.data), {}, {}, *scalar));
        values.emplace_back(*tensors.back());
      }
      lastError.clear();
      runtimeError.clear();
      et::Result<std::vector<et::EValue>> outputs = module.execute(method, values);
      if (!outputs.ok())
        throw Failure{where + ": step " + std::to_string(step) + ": " + errorText(outputs.error()) +
                      cause()};
      for (size_t o = 0; o < outputs->size(); ++o) {
        const et::EValue &v = (*outputs)[o];
        if (v.isInt() || v.isBool() || v.isDouble()) {
          // The metadata methods of an LLM program ("get_vocab_size").
          int64_t i = v.isInt() ? v.toInt() : 0;
          bool b = v.isBool() && v.toBool();
          double d = v.isDouble() ? v.toDouble() : 0;
          anefit_et_tensor value{v.isInt()    ? "int64"
                                 : v.isBool() ? "bool"
                                              : "fp64",
                                 0, nullptr,
                                 v.isInt()    ? static_cast<const void *>(&i)
                                 : v.isBool() ? static_cast<const void *>(&b)
                                              : static_cast<const void *>(&d)};
          output(context, step, o, &value);
          continue;
        }
        if (!v.isTensor())
          throw Failure{where + ": output " + std::to_string(o) +
                        ": expected a tensor or a number, found another kind of value"};
        const executorch::aten::Tensor &t = v.toTensor();
        std::optional<anefit::DType> dtype = dtypeOf(t.scalar_type());
        if (!dtype)
          throw Failure{where + ": output " + std::to_string(o) +
                        ": a scalar type anefit does not know"};
        std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
        std::string dtypeName(anefit::dtypeName(*dtype));
        anefit_et_tensor value{dtypeName.c_str(), static_cast<int64_t>(shape.size()), shape.data(),
                               t.const_data_ptr()};
        output(context, step, o, &value);
      }
    }
    return 0;
  } catch (const Failure &f) {
    return failWith(f.text, message, messageSize);
  }
}
