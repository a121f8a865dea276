//===- CoreMLBackend.cpp - anefit as ExecuTorch's Core ML backend ---------===//
//
// See CoreMLBackend.h. ExecuTorch's headers are compiled here and nowhere
// else; everything anefit does is a call into its libraries (io reads the
// payload, runtime steps the function).
//
//===----------------------------------------------------------------------===//
#include "executorch/CoreMLBackend.h"
#include "executorch/Internal.h"

#include "io/ModelIO.h"
#include "io/Pte.h"
#include "runtime/ModelRun.h"
#include "runtime/Stepper.h"
#include "support/DType.h"
#include "support/Error.h"
#include "support/FileSystem.h"

#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/core/event_tracer_hooks_delegate.h>
#include <executorch/runtime/core/exec_aten/util/tensor_util.h>
#include <executorch/runtime/platform/log.h>
#include <executorch/runtime/platform/platform.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace anefit::executorch_backend {

using executorch::aten::ScalarType;

thread_local std::string lastError;

std::optional<DType> dtypeOf(ScalarType t) {
  switch (t) {
  case ScalarType::Byte:
    return DType::U8;
  case ScalarType::Char:
    return DType::I8;
  case ScalarType::Short:
    return DType::I16;
  case ScalarType::Int:
    return DType::I32;
  case ScalarType::Long:
    return DType::I64;
  case ScalarType::Half:
    return DType::F16;
  case ScalarType::Float:
    return DType::F32;
  case ScalarType::Double:
    return DType::F64;
  case ScalarType::Bool:
    return DType::Bool;
  case ScalarType::BFloat16:
    return DType::BF16;
  default:
    return std::nullopt;
  }
}

std::string errorText(executorch::runtime::Error e) {
  char hex[16];
  std::snprintf(hex, sizeof hex, "0x%x", static_cast<unsigned>(e));
  return std::string("ExecuTorch error ") + hex + " (" + executorch::runtime::to_string(e) + ")";
}

int failWith(const std::string &text, char *message, size_t messageSize) {
  if (message && messageSize) {
    size_t n = std::min(text.size(), messageSize - 1);
    std::memcpy(message, text.data(), n);
    message[n] = '\0';
  }
  return 2;
}

std::optional<ScalarType> scalarTypeOf(DType t) {
  for (int i = 0; i <= static_cast<int>(ScalarType::BFloat16); ++i)
    if (dtypeOf(static_cast<ScalarType>(i)) == t)
      return static_cast<ScalarType>(i);
  return std::nullopt;
}

} // namespace anefit::executorch_backend

namespace {

using namespace anefit::executorch_backend;

namespace et = executorch::runtime;
using executorch::aten::ScalarType;
using ETensor = executorch::aten::Tensor;
using et::Error;

constexpr const char *kBackendName = "CoreMLBackend";

std::atomic<long> liveDelegates{0};
std::atomic<long> calls{0};

/// The options every delegate initialized after a register call runs with.
struct Options {
  anefit::runtime::Precision precision = anefit::runtime::Precision::FP32;
  int threads = 0;
  bool exactProducts = false;
};
std::mutex optionsMutex;
Options currentOptions;

Options options() {
  std::lock_guard<std::mutex> lock(optionsMutex);
  return currentOptions;
}

/// One Core ML delegate of a loaded method.
struct Delegate {
  std::string label;
  /// The payload's bytes, owned until destroy (the model's weights point
  /// into them).
  std::shared_ptr<et::FreeableBuffer> payload;
  anefit::CoreMLDelegatePayload model;
  const anefit::Function *fn = nullptr;
  /// Declared inputs and outputs in argument order.
  std::vector<const anefit::Value *> inputs;
  std::vector<const anefit::Value *> outputs;
  /// "<MIL output>:<MIL op>" per op that has ExecuTorch debug handles, the
  /// names its profiling events carry.
  std::map<const anefit::Operation *, std::string> eventNames;
  /// Steps the function; Core ML states persist in it between calls.
  std::unique_ptr<anefit::runtime::Stepper> stepper;
  /// While a call runs with an event tracer: what each op's time goes to.
  std::function<void(const anefit::Operation &, std::chrono::steady_clock::time_point,
                     std::chrono::steady_clock::time_point)>
      onOpTimed;
  std::mutex mutex;
};

/// The tensor anefit's interpreter takes for argument `t`, declared as `v`:
/// the runtime's bytes borrowed, converted to the declared dtype when they
/// differ (int64 token ids for an int32 input, fp32 for fp16).
anefit::runtime::Tensor inputTensor(const ETensor &t, const anefit::Value &v,
                                    const std::string &where) {
  std::optional<anefit::DType> dtype = dtypeOf(t.scalar_type());
  if (!dtype)
    throw anefit::InputError(where + ": scalar type " +
                             std::to_string(static_cast<int>(t.scalar_type())) +
                             " has no Core ML counterpart");
  anefit::runtime::Shape shape(t.sizes().begin(), t.sizes().end());
  anefit::runtime::Tensor borrowed =
      anefit::runtime::Tensor::borrow(*dtype, shape, t.const_data_ptr(), nullptr);
  anefit::DType declared = v.type.dtype();
  return borrowed.dtype() == declared ? borrowed : borrowed.convertTo(declared);
}

/// Writes `value` into output argument `t` in `t`'s scalar type, resizing a
/// dynamically shaped output.
void writeOutput(const anefit::runtime::Tensor &value, ETensor &t, const std::string &where) {
  std::optional<anefit::DType> dtype = dtypeOf(t.scalar_type());
  if (!dtype)
    throw anefit::InputError(where + ": scalar type " +
                             std::to_string(static_cast<int>(t.scalar_type())) +
                             " has no Core ML counterpart");
  if (t.numel() != value.numElements()) {
    std::vector<executorch::aten::SizesType> sizes(value.shape().begin(), value.shape().end());
    if (et::resize_tensor(t, {sizes.data(), sizes.size()}) != Error::Ok)
      throw anefit::InputError(where + ": expected " + anefit::runtime::shapeStr(value.shape()) +
                               " from the model, found " +
                               anefit::runtime::shapeStr({t.sizes().begin(), t.sizes().end()}) +
                               " in the program (not resizable)");
  }
  anefit::runtime::Tensor converted =
      value.dtype() == *dtype ? value.materialize() : value.convertTo(*dtype);
  std::memcpy(t.mutable_data_ptr(), converted.bytes(), converted.numBytes());
}

class AnefitCoreMLBackend final : public et::BackendInterface {
public:
  bool is_available() const override { return true; }

  et::Result<et::DelegateHandle *> init(et::BackendInitContext &context,
                                        et::FreeableBuffer *processed,
                                        et::ArrayRef<et::CompileSpec> specs) const override {
    std::string method = context.get_method_name() ? context.get_method_name() : "forward";
    std::string label = "anefit " + std::string(kBackendName) + " (method " + method + ")";
    try {
      auto delegate = std::make_unique<Delegate>();
      delegate->label = label;
      delegate->payload = std::make_shared<et::FreeableBuffer>(std::move(*processed));
      std::span<const uint8_t> bytes(static_cast<const uint8_t *>(delegate->payload->data()),
                                     delegate->payload->size());
      std::string function = method;
      if (std::optional<anefit::CoreMLPayloadReference> ref =
              anefit::coreMLPayloadReference(bytes, label)) {
        // Multi-method weight sharing: the payload is in the named data.
        const et::NamedDataMap *named = context.get_named_data_map();
        if (!named)
          throw anefit::InputError(label + ": the payload refers to named data '" + ref->key +
                                   "', and the program has none");
        et::Result<et::FreeableBuffer> data = named->get_data(ref->key.c_str());
        if (!data.ok())
          throw anefit::InputError(label + ": named data '" + ref->key + "' cannot be read (" +
                                   errorText(data.error()) + ")");
        delegate->payload->Free();
        delegate->payload = std::make_shared<et::FreeableBuffer>(std::move(data.get()));
        bytes = {static_cast<const uint8_t *>(delegate->payload->data()),
                 delegate->payload->size()};
        if (!ref->functionName.empty())
          function = ref->functionName;
      }
      // Where the runtime memory-maps the program (Module's Mmap mode), the
      // weights stream from the mapping as from anefit's own.
      anefit::adviseHugePages(bytes.data(), bytes.size());
      delegate->model = anefit::readCoreMLPayload(bytes, delegate->payload, label, function);
      delegate->fn = delegate->model.model->program->findFunction(delegate->model.function);
      for (const std::string &name : delegate->model.inputNames)
        delegate->inputs.push_back(delegate->fn->findInput(name));
      for (const std::string &name : delegate->model.outputNames)
        for (const anefit::Value *v : delegate->fn->body->outputs)
          if (v->name == name) {
            delegate->outputs.push_back(v);
            break;
          }
      for (const auto &op : delegate->fn->body->ops)
        if (!op->outputs.empty() && delegate->model.model->debugHandles.count(op->output()->name))
          delegate->eventNames[op.get()] = op->output()->name + ":" + op->type;
      static std::once_flag unitsSaid;
      for (const et::CompileSpec &spec : specs)
        if (std::strcmp(spec.key, "compute_units") == 0)
          std::call_once(unitsSaid, [&] {
            ET_LOG(Info,
                   "%s: compute_units '%.*s' has no meaning on the CPU interpreter (said once)",
                   label.c_str(), static_cast<int>(spec.value.nbytes),
                   static_cast<const char *>(spec.value.buffer));
          });
      Options opts = options();
      anefit::runtime::RunOptions run;
      run.precision = opts.precision;
      run.threads = opts.threads;
      run.exactProducts = opts.exactProducts;
      run.source = label;
      // States kept as `anefit run` keeps them (runStepperOptions).
      anefit::runtime::StepperOptions stepperOptions = anefit::runtime::runStepperOptions(run);
      // Ops are timed only for a method that has an event tracer (ExecuTorch
      // gives init and execute the method's own): without one, no clock is
      // read per op.
      if (context.event_tracer())
        stepperOptions.run.opTimed =
            [d = delegate.get()](const anefit::Operation &op,
                                 std::chrono::steady_clock::time_point start,
                                 std::chrono::steady_clock::time_point end) {
              if (d->onOpTimed)
                d->onOpTimed(op, start, end);
            };
      // Constructing the stepper prepares the interpreter: an op without a
      // kernel fails here, at init, not at the first call.
      delegate->stepper = std::make_unique<anefit::runtime::Stepper>(
          *delegate->fn, anefit::runtime::CarryMap{}, stepperOptions);
      ++liveDelegates;
      return delegate.release();
    } catch (const anefit::InputError &e) {
      ET_LOG(Error, "%s", e.what());
      lastError = e.what();
      return Error::DelegateInvalidCompatibility;
    } catch (const std::bad_alloc &) {
      ET_LOG(Error, "%s: out of memory", label.c_str());
      return Error::MemoryAllocationFailed;
    } catch (const std::exception &e) {
      ET_LOG(Error, "%s: %s", label.c_str(), e.what());
      return Error::Internal;
    }
  }

  Error execute(et::BackendExecutionContext &context, et::DelegateHandle *handle,
                et::Span<et::EValue *> args) const override {
    auto *d = static_cast<Delegate *>(handle);
    std::lock_guard<std::mutex> lock(d->mutex);
    ++calls;
    size_t want = d->inputs.size() + d->outputs.size();
    if (args.size() != want) {
      lastError = d->label + ": expected " + std::to_string(want) + " arguments (" +
                  std::to_string(d->inputs.size()) + " inputs, " +
                  std::to_string(d->outputs.size()) + " outputs), found " +
                  std::to_string(args.size());
      ET_LOG(Error, "%s", lastError.c_str());
      return Error::InvalidArgument;
    }
    try {
      anefit::runtime::TensorMap inputs;
      for (size_t i = 0; i < args.size(); ++i) {
        const anefit::Value *v =
            i < d->inputs.size() ? d->inputs[i] : d->outputs[i - d->inputs.size()];
        std::string where = d->label + ": argument " + std::to_string(i) + " ('" + v->name + "')";
        if (!args[i] || !args[i]->isTensor())
          throw anefit::InputError(where + ": expected a tensor, found another value");
        if (i < d->inputs.size())
          inputs[v->name] = inputTensor(args[i]->toTensor(), *v, where);
      }
      et::EventTracer *tracer = context.event_tracer();
      std::chrono::steady_clock::time_point base = std::chrono::steady_clock::now();
      et_timestamp_t baseTicks = et::pal_current_ticks();
      et_tick_ratio_t ratio = et::pal_ticks_to_ns_multiplier();
      auto ticks = [&](std::chrono::steady_clock::time_point t) {
        int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t - base).count();
        return static_cast<et_timestamp_t>(baseTicks + ns * ratio.denominator / ratio.numerator);
      };
      std::vector<std::pair<std::string, std::pair<et_timestamp_t, et_timestamp_t>>> events;
      std::vector<anefit::runtime::NamedTensor> outputs;
      if (tracer && !d->eventNames.empty())
        d->onOpTimed = [&](const anefit::Operation &op, std::chrono::steady_clock::time_point start,
                           std::chrono::steady_clock::time_point end) {
          auto it = d->eventNames.find(&op);
          if (it != d->eventNames.end())
            events.push_back({it->second, {ticks(start), ticks(end)}});
        };
      struct Reset {
        Delegate *d;
        ~Reset() { d->onOpTimed = nullptr; }
      } reset{d};
      outputs = d->stepper->step(inputs);
      for (const auto &[name, span] : events)
        et::event_tracer_log_profiling_delegate(
            tracer, name.c_str(), static_cast<et::DebugHandle>(et::kUnsetDelegateDebugIntId),
            span.first, span.second);
      for (size_t o = 0; o < d->outputs.size(); ++o) {
        const anefit::Value *v = d->outputs[o];
        size_t arg = d->inputs.size() + o;
        std::string where =
            d->label + ": argument " + std::to_string(arg) + " (output '" + v->name + "')";
        const anefit::runtime::Tensor *value = nullptr;
        for (const anefit::runtime::NamedTensor &t : outputs)
          if (t.name == v->name)
            value = &t.tensor;
        if (!value)
          throw anefit::InputError(where + ": the model did not produce it");
        writeOutput(*value, args[arg]->toTensor(), where);
      }
      return Error::Ok;
    } catch (const anefit::InputError &e) {
      ET_LOG(Error, "%s", e.what());
      lastError = e.what();
      return Error::InvalidArgument;
    } catch (const std::bad_alloc &) {
      ET_LOG(Error, "%s: out of memory", d->label.c_str());
      return Error::MemoryAllocationFailed;
    } catch (const std::exception &e) {
      ET_LOG(Error, "%s: %s", d->label.c_str(), e.what());
      return Error::Internal;
    }
  }

  void destroy(et::DelegateHandle *handle) const override {
    if (!handle)
      return;
    delete static_cast<Delegate *>(handle);
    --liveDelegates;
  }
};

AnefitCoreMLBackend backendInstance;

} // namespace

ANEFIT_EXECUTORCH_API int anefit_executorch_register(const char *precision, int threads,
                                                     int exactProducts, char *message,
                                                     size_t messageSize) {
  auto fail = [&](const std::string &text) { return failWith(text, message, messageSize); };
  Options opts;
  try {
    opts.precision = anefit::runtime::parsePrecision(precision ? precision : "fp32");
  } catch (const anefit::InputError &e) {
    return fail(e.what());
  }
  if (threads < 0)
    return fail("threads: expected 0 (every core) or more, found " + std::to_string(threads));
  opts.threads = threads;
  opts.exactProducts = exactProducts != 0;
  {
    std::lock_guard<std::mutex> lock(optionsMutex);
    currentOptions = opts;
  }
  et::BackendInterface *existing = et::get_backend_class(kBackendName);
  if (existing == &backendInstance)
    return 0;
  if (existing)
    return fail(std::string("another backend is registered as ") + kBackendName +
                " in this ExecuTorch runtime (on macOS, ExecuTorch's own)");
  Error e = et::register_backend({kBackendName, &backendInstance});
  if (e != Error::Ok)
    return fail(std::string("ExecuTorch refused to register ") + kBackendName + " (error " +
                std::to_string(static_cast<int>(e)) + ")");
  return 0;
}

ANEFIT_EXECUTORCH_API const char *anefit_executorch_version() { return ANEFIT_EXECUTORCH_VERSION; }

ANEFIT_EXECUTORCH_API long anefit_executorch_live_delegates() { return liveDelegates.load(); }

ANEFIT_EXECUTORCH_API long anefit_executorch_calls() { return calls.load(); }
