//===- RunBindings.cpp - anefit.run, Session and numpy tensors ------------===//
//
// Runs a model's function in the reference interpreter with numpy arrays in
// and out. An input array is used where it lies (C-contiguous arrays of a
// dtype the interpreter knows are borrowed, not copied, and kept alive while
// in use); an output tensor becomes a numpy array over the interpreter's own
// buffer. A Session keeps the model, the prepared interpreter and the states
// between calls, as a host loop does: nothing is reloaded or copied per call.
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"

#include "fix/Quality.h"
#include "io/Tokenizer.h"
#include "runtime/ModelRun.h"
#include "runtime/Stepper.h"
#include "runtime/ThreadPool.h"
#include "support/Error.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <mutex>
#include <variant>

namespace anefit::python {
namespace {

namespace dl = nb::dlpack;
using runtime::NamedTensor;
using runtime::Tensor;
using runtime::TensorMap;

/// Any CPU array, read in place (C order is asked for so the interpreter
/// can read it as one block; others are copied to C order on the way in).
using InArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

std::optional<DType> dtypeOfArray(dl::dtype t) {
  if (t.lanes != 1)
    return std::nullopt;
  switch (static_cast<dl::dtype_code>(t.code)) {
  case dl::dtype_code::Float:
    return t.bits == 16   ? std::optional(DType::F16)
           : t.bits == 32 ? std::optional(DType::F32)
           : t.bits == 64 ? std::optional(DType::F64)
                          : std::nullopt;
  case dl::dtype_code::Bfloat:
    return t.bits == 16 ? std::optional(DType::BF16) : std::nullopt;
  case dl::dtype_code::Int:
    return t.bits == 8    ? std::optional(DType::I8)
           : t.bits == 16 ? std::optional(DType::I16)
           : t.bits == 32 ? std::optional(DType::I32)
           : t.bits == 64 ? std::optional(DType::I64)
                          : std::nullopt;
  case dl::dtype_code::UInt:
    return t.bits == 8    ? std::optional(DType::U8)
           : t.bits == 16 ? std::optional(DType::U16)
           : t.bits == 32 ? std::optional(DType::U32)
           : t.bits == 64 ? std::optional(DType::U64)
                          : std::nullopt;
  case dl::dtype_code::Bool:
    return t.bits == 8 ? std::optional(DType::Bool) : std::nullopt;
  default:
    return std::nullopt;
  }
}

std::optional<dl::dtype> arrayDtypeOf(DType t) {
  auto make = [](dl::dtype_code code, int bits) {
    return dl::dtype{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
  };
  switch (t) {
  case DType::F16:
  case DType::F32:
  case DType::F64:
    return make(dl::dtype_code::Float, dtypeBits(t));
  case DType::I8:
  case DType::I16:
  case DType::I32:
  case DType::I64:
    return make(dl::dtype_code::Int, dtypeBits(t));
  case DType::U8:
  case DType::U16:
  case DType::U32:
  case DType::U64:
    return make(dl::dtype_code::UInt, dtypeBits(t));
  case DType::Bool:
    return make(dl::dtype_code::Bool, 8);
  default:
    return std::nullopt;
  }
}

/// `value` (an array, or anything numpy.asarray takes) as a tensor that
/// borrows the array's memory. `what` names it in errors.
Tensor tensorOf(nb::handle value, const std::string &what) {
  InArray array;
  if (!nb::try_cast(value, array)) {
    // Not an array: what numpy makes of it, in native byte order (DLPack,
    // through which arrays are read, has no byte order).
    nb::object converted = nb::module_::import_("numpy").attr("asarray")(value);
    nb::object dtype = converted.attr("dtype");
    if (!nb::cast<bool>(dtype.attr("isnative")))
      converted = converted.attr("astype")(dtype.attr("newbyteorder")("="));
    if (!nb::try_cast(converted, array))
      throw InputError(what + ": expected a numeric or bool array, found dtype " +
                       nb::cast<std::string>(nb::str(dtype)));
  }
  std::optional<DType> dtype = dtypeOfArray(array.dtype());
  if (!dtype) {
    std::string found = nb::hasattr(value, "dtype")
                            ? nb::cast<std::string>(nb::str(nb::object(value.attr("dtype"))))
                            : "code " + std::to_string(array.dtype().code) + " of " +
                                  std::to_string(array.dtype().bits) + " bits";
    throw InputError(what + ": expected a numeric or bool array, found dtype " + found);
  }
  runtime::Shape shape;
  for (size_t i = 0; i < array.ndim(); ++i)
    shape.push_back(static_cast<int64_t>(array.shape(i)));
  const void *data = array.data();
  // The tensor keeps the array (and through it the Python object) alive;
  // nanobind takes the GIL itself when the last reference goes.
  auto owner = std::shared_ptr<const void>(
      new InArray(std::move(array)), [](const void *p) { delete static_cast<const InArray *>(p); });
  return Tensor::borrow(*dtype, std::move(shape), data, std::move(owner));
}

TensorMap tensorsOf(const nb::dict &values, const char *what) {
  TensorMap out;
  for (auto [key, value] : values) {
    if (!nb::isinstance<nb::str>(key))
      throw InputError(std::string(what) + ": expected names (str) as keys, found " +
                       nb::cast<std::string>(nb::repr(key)));
    std::string name = nb::cast<std::string>(key);
    out[name] = tensorOf(value, std::string(what) + " '" + name + "'");
  }
  return out;
}

/// A numpy array over `t`'s own buffer. Types numpy lacks are widened as
/// .npy files do (bf16 and fp8 to fp32, sub-byte integers to int8/uint8).
nb::object numpyOf(Tensor t) {
  std::optional<dl::dtype> dtype = arrayDtypeOf(t.dtype());
  if (!dtype) {
    DType wider = isFloat(t.dtype())                            ? DType::F32
                  : dtypeKind(t.dtype()) == DTypeKind::Signed   ? DType::I8
                  : dtypeKind(t.dtype()) == DTypeKind::Unsigned ? DType::U8
                                                                : t.dtype();
    if (wider == t.dtype())
      throw InputError("cannot return a tensor of dtype " + std::string(dtypeName(t.dtype())) +
                       " as a numpy array");
    t = t.convertTo(wider);
    dtype = arrayDtypeOf(wider);
  }
  std::vector<size_t> shape(t.shape().begin(), t.shape().end());
  bool writable = t.isOwned();
  auto *held = new Tensor(std::move(t));
  nb::capsule owner(held, [](void *p) noexcept { delete static_cast<Tensor *>(p); });
  void *data = const_cast<uint8_t *>(held->bytes());
  if (writable)
    return nb::ndarray<nb::numpy>(data, shape.size(), shape.data(), owner, nullptr, *dtype).cast();
  return nb::ndarray<nb::numpy, nb::ro>(data, shape.size(), shape.data(), owner, nullptr, *dtype)
      .cast();
}

nb::dict numpyDict(std::vector<NamedTensor> tensors) {
  nb::dict out;
  for (NamedTensor &nt : tensors)
    out[nb::str(nt.name.c_str(), nt.name.size())] = numpyOf(std::move(nt.tensor));
  return out;
}

/// Checks for Ctrl-C now and then while the interpreter runs without the
/// GIL, so a long run can be interrupted like any Python call.
std::function<void(size_t, size_t)> interruptCheck() {
  using Clock = std::chrono::steady_clock;
  return [last = Clock::now()](size_t, size_t) mutable {
    auto now = Clock::now();
    if (now - last < std::chrono::milliseconds(50))
      return;
    last = now;
    nb::gil_scoped_acquire acquire;
    if (PyErr_CheckSignals() != 0)
      throw nb::python_error();
  };
}

/// A function of a model stepped like a host loop would step it: the
/// runtime's Stepper, with the carries the model declares (a fixed model's
/// state map).
class PySession {
public:
  PySession(PyModel model, const std::string &function, const std::string &precision,
            const std::optional<nb::dict> &states, int threads, bool spin, bool exactProducts)
      : model_(std::move(model)) {
    fn_ = &functionOf(model_, function);
    if (!model_.weightsOpen)
      throw InputError(model_.model->sourcePath +
                       ": the model was loaded with weights=False; load it with its weights "
                       "to run it");
    runtime::RunOptions run;
    run.precision = runtime::parsePrecision(precision);
    runtime::checkThreadCount(threads, "threads");
    run.threads = threads;
    run.spin = spin;
    run.exactProducts = exactProducts;
    run.progress = interruptCheck();
    run.source = model_.model->sourcePath;
    options_ = runtime::runStepperOptions(run);
    reset();
    if (states)
      setStates(*states);
  }

  const PyModel &model() const { return model_; }
  const Function &function() const { return *fn_; }

  nb::dict run(const nb::dict &inputs) {
    TensorMap feed = tensorsOf(inputs, "input");
    std::vector<NamedTensor> outputs;
    {
      nb::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mutex_);
      outputs = stepper_->step(feed);
    }
    return numpyDict(std::move(outputs));
  }

  nb::dict states() {
    std::vector<NamedTensor> out;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const Value *in : stepper_->stateInputs())
        if (std::optional<Tensor> t = stepper_->stateValue(in->name))
          out.push_back({in->name, std::move(*t)});
    }
    return numpyDict(std::move(out));
  }

  void setStates(const nb::dict &values) {
    TensorMap tensors = tensorsOf(values, "state");
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto &[name, t] : tensors)
      stepper_->setState(name, t);
  }

  /// A new stepper: states back to zero, carries to their first values.
  void reset() {
    auto stepper = std::make_unique<runtime::Stepper>(
        *fn_, runtime::hostCarries(*model_.model, *fn_), options_);
    std::lock_guard<std::mutex> lock(mutex_);
    stepper_ = std::move(stepper);
  }

  int64_t stepsDone() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stepper_->stepsDone();
  }

  std::map<std::string, std::string> carries() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::map<std::string, std::string> out;
    for (const runtime::Carry &c : stepper_->carries())
      out[c.input] = c.output;
    return out;
  }

private:
  PyModel model_;
  const Function *fn_ = nullptr;
  runtime::StepperOptions options_;
  std::unique_ptr<runtime::Stepper> stepper_;
  std::mutex mutex_;
};

PyModel modelOf(std::variant<PyModel, std::filesystem::path> target) {
  if (auto *m = std::get_if<PyModel>(&target))
    return *m;
  return loadPyModel(pathText(std::get<std::filesystem::path>(target)), true);
}

} // namespace

/// `anefit.perplexity`: `anefit run MODEL --perplexity TEXT --tokenizer TOK`.
nb::dict runPerplexity(std::variant<PyModel, std::filesystem::path> model,
                       const std::filesystem::path &text, const std::filesystem::path &tokenizer,
                       int64_t maxTokens, const std::optional<std::string> &function, int threads,
                       int64_t window) {
  runtime::checkThreadCount(threads, "threads");
  QualityOptions q;
  q.function = function.value_or("");
  readTextTokens(q, pathText(text), pathText(tokenizer), maxTokens);
  if (window == 1 || window < 0)
    throw InputError("window: expected 0 (one window) or at least 2 tokens, found " +
                     std::to_string(window));
  q.window = window;
  q.threads = threads;
  PyModel pm = modelOf(std::move(model));
  QualityResult r;
  {
    nb::gil_scoped_release release;
    r = measureQuality(*pm.model, q);
  }
  nb::dict out;
  out["function"] = r.function;
  out["token_input"] = r.tokenInput;
  out["position_input"] = r.positionInput;
  out["logits"] = r.logitsOutput;
  out["vocab"] = r.vocab;
  out["tokens"] = r.predicted + r.windows;
  out["windows"] = r.windows;
  out["predicted"] = r.predicted;
  for (const QualityRun &run : r.runs) {
    nb::dict d;
    d["perplexity"] = run.perplexity;
    d["nll"] = run.nll;
    d["top1_correct"] = run.top1Correct;
    d["top1_agree_with_fp32"] = run.agreeWithFirst;
    d["non_finite_steps"] = run.nonFiniteSteps;
    out[run.precision == runtime::Precision::FP16 ? "fp16" : "fp32"] = d;
  }
  return out;
}

void bindRun(nb::module_ &m) {
  m.def("perplexity", &runPerplexity, nb::arg("model"), nb::arg("text"), nb::arg("tokenizer"),
        nb::arg("max_tokens") = 300, nb::arg("function") = nb::none(), nb::arg("threads") = 0,
        nb::arg("window") = 0,
        "Measures an LLM decode program on real text, as ``anefit run MODEL --perplexity TEXT "
        "--tokenizer TOKENIZER`` does: the text's first ``max_tokens`` tokens (the model's "
        "byte-level BPE ``tokenizer.json``) teacher-forced at positions 0, 1, ..., once at fp32 "
        "(what the model means) and once at the ANE's fp16; with ``window`` (``--window``) in "
        "windows of that many tokens, each from position 0 with fresh caches. Returns a dict: "
        "the inputs and logits found, ``tokens``, ``windows``, ``predicted``, and per precision "
        "(``'fp32'``, ``'fp16'``) "
        "``perplexity``, ``nll``, ``top1_correct`` (top-1 is the next token), "
        "``top1_agree_with_fp32`` and ``non_finite_steps``.");
  m.def(
      "tokenize",
      [](const std::filesystem::path &tokenizer, const std::string &text) {
        return Tokenizer::read(pathText(tokenizer)).encode(text);
      },
      nb::arg("tokenizer"), nb::arg("text"),
      "The ids of ``text`` by a byte-level BPE ``tokenizer.json``, as :func:`perplexity` reads "
      "them (no special token added).");

  nb::class_<PySession>(
      m, "Session",
      "One function of a model, stepped like a host loop steps it: the prepared interpreter, the "
      "Core ML states and the values a fixed model's state map carries from outputs to inputs "
      "stay between calls. Weights are used in place; nothing is reloaded per call.")
      .def(
          "__init__",
          [](PySession *self, std::variant<PyModel, std::filesystem::path> model,
             const std::optional<std::string> &function, const std::string &precision,
             const std::optional<nb::dict> &states, int threads, bool spin, bool exactProducts) {
            new (self) PySession(modelOf(std::move(model)), function.value_or(""), precision,
                                 states, threads, spin, exactProducts);
          },
          nb::arg("model"), nb::arg("function") = nb::none(), nb::arg("precision") = "fp32",
          nb::arg("states") = nb::none(), nb::arg("threads") = 0, nb::arg("spin") = true,
          nb::arg("exact_products") = false,
          "``model``: a :class:`Model` or a path. ``function``: default function when None. "
          "``precision``: ``'fp32'``, or ``'fp16'`` to round every op's float result to fp16 as "
          "the ANE does. ``states``: initial Core ML state values by name (zeros otherwise). "
          "``threads``: threads the kernels use, the caller's included (0: every core). "
          "``spin=False``: idle threads sleep at once between parallel ops instead of polling "
          "for up to 50 us (no CPU time spent waiting, a wake-up per parallel op); like "
          "``anefit run --no-spin``. ``exact_products=True``: int4 products stay fp32-grade "
          "in linears the model declares fp16 (``anefit run --exact-products``; otherwise "
          "CPUs with AVX2 but neither AVX-512 nor AVX-VNNI put x on a 16-bit grid per block "
          "of 32 there; at fp16, CPUs with AVX2 but not AVX-512 do, the weights kept as the "
          "fp16 values the device holds).")
      .def("run", &PySession::run, nb::arg("inputs"),
           nb::sig("def run(self, inputs: dict[str, numpy.typing.ArrayLike]) -> "
                   "dict[str, numpy.ndarray]"),
           "Runs one step. ``inputs`` maps every tensor input (inputs a state map carries may "
           "be left out) to an array; C-contiguous arrays are read in place. Returns the "
           "outputs by name as numpy arrays in their declared dtypes, over the interpreter's "
           "own buffers. A step refused for its inputs can be tried again; after one that failed "
           "while running (an interrupt, an index out of range), the carried values are gone: "
           "call :meth:`reset`.")
      .def_prop_ro("states", &PySession::states,
                   nb::sig("def states(self) -> dict[str, numpy.ndarray]"),
                   "Current Core ML state values by name, in their declared dtypes (copies).")
      .def("set_states", &PySession::setStates, nb::arg("values"),
           nb::sig("def set_states(self, values: dict[str, numpy.typing.ArrayLike]) -> None"),
           "Sets Core ML states by name, checked against their declarations.")
      .def("reset", &PySession::reset,
           "Forgets the states and carried values: the next run is a first step again.")
      .def_prop_ro("steps", &PySession::stepsDone, "Steps run since creation or reset().")
      .def_prop_ro("carries", &PySession::carries,
                   "Inputs fed from outputs between steps (the state map of a fixed model), as "
                   "{input: output}.")
      .def_prop_ro(
          "function", [](const PySession &s) { return s.function().name; },
          "The function it runs.");
}

} // namespace anefit::python
