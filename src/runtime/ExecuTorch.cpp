//===- ExecuTorch.cpp - ExecuTorch's runtime, reached at run time ---------===//
#include "runtime/ExecuTorch.h"

#include "runtime/ExecuTorchAbi.h"
#include "support/DType.h"
#include "support/Error.h"
#include "support/FileSystem.h"
#include "support/Random.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace anefit::runtime {

struct ExecuTorchEngine::Api {
  anefit_et_version_fn version = nullptr;
  anefit_et_run_fn run = nullptr;
};

namespace {

/// Where the library may be, most specific first.
std::vector<std::string> candidatePaths() {
  std::vector<std::string> out;
  if (const char *env = std::getenv("ANEFIT_EXECUTORCH_BACKEND"); env && *env)
    return {env};
#ifdef ANEFIT_EXECUTORCH_BACKEND_BUILT
  out.push_back(ANEFIT_EXECUTORCH_BACKEND_BUILT);
#endif
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    std::filesystem::path dir = exe.parent_path();
    out.push_back((dir / "libanefit_executorch.so").string());
    // The wheel: the program in <env>/bin, the package in
    // <env>/lib/pythonX.Y/site-packages/anefit.
    std::filesystem::path lib = dir.parent_path() / "lib";
    if (std::filesystem::is_directory(lib, ec))
      for (const auto &entry : std::filesystem::directory_iterator(lib, ec))
        if (entry.path().filename().string().rfind("python", 0) == 0)
          out.push_back(
              (entry.path() / "site-packages" / "anefit" / "libanefit_executorch.so").string());
  }
  return out;
}

struct RunContext {
  const ExecuTorchEngine::InputFn *input;
  std::vector<std::vector<Tensor>> *outputs;
  std::vector<Tensor> given; ///< keeps the step's inputs alive
  std::vector<Shape> shapes; ///< their shapes as int64
  std::string error;
};

int giveInput(void *context, int64_t step, size_t index, const anefit_et_tensor *declared,
              anefit_et_tensor *given) {
  auto *c = static_cast<RunContext *>(context);
  try {
    DeclaredInput in;
    in.index = index;
    std::optional<DType> dtype = dtypeFromName(declared->dtype);
    if (!dtype)
      throw InputError(std::string("input ") + std::to_string(index) + ": dtype '" +
                       declared->dtype + "' unknown");
    in.dtype = *dtype;
    in.shape.assign(declared->shape, declared->shape + declared->rank);
    if (index == 0)
      c->given.clear(), c->shapes.clear();
    Tensor t = (*c->input)(step, in).materialize();
    c->given.push_back(t);
    c->shapes.push_back(t.shape());
    const Tensor &kept = c->given.back();
    given->dtype = dtypeName(kept.dtype()).data();
    given->rank = kept.rank();
    given->shape = c->shapes.back().data();
    given->data = kept.bytes();
    return 0;
  } catch (const std::exception &e) {
    c->error = e.what();
    return 1;
  }
}

void takeOutput(void *context, int64_t step, size_t index, const anefit_et_tensor *value) {
  auto *c = static_cast<RunContext *>(context);
  std::optional<DType> dtype = dtypeFromName(value->dtype);
  if (!dtype)
    return;
  auto &outputs = *c->outputs;
  if (outputs.size() <= static_cast<size_t>(step))
    outputs.resize(static_cast<size_t>(step) + 1);
  Shape shape(value->shape, value->shape + value->rank);
  outputs[static_cast<size_t>(step)].push_back(
      Tensor::borrow(*dtype, shape, value->data, nullptr).clone());
}

} // namespace

std::shared_ptr<ExecuTorchEngine> ExecuTorchEngine::load(std::string *why) {
  std::vector<std::string> paths = candidatePaths();
  std::string tried;
  for (const std::string &path : paths) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      tried += (tried.empty() ? "" : ", ") + path;
      continue;
    }
    void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      if (why)
        *why = "the ExecuTorch backend library " + path + " does not load: " + dlerror();
      return nullptr;
    }
    auto api = std::make_unique<Api>();
    api->version =
        reinterpret_cast<anefit_et_version_fn>(dlsym(handle, "anefit_executorch_version"));
    api->run = reinterpret_cast<anefit_et_run_fn>(dlsym(handle, "anefit_executorch_run"));
    if (!api->version || !api->run) {
      if (why)
        *why = path + " is not anefit's ExecuTorch backend library (no anefit_executorch_run)";
      dlclose(handle);
      return nullptr;
    }
    std::shared_ptr<ExecuTorchEngine> engine(new ExecuTorchEngine());
    engine->api_ = std::move(api);
    engine->path_ = path;
    engine->handle_ = handle;
    return engine;
  }
  if (why) {
    // Say what was looked for and how to point at it; "built without" only
    // when this build made no library.
#ifdef ANEFIT_EXECUTORCH_BACKEND_BUILT
    *why = "no ExecuTorch backend library where anefit looks (" + tried +
           "): this build made one; put libanefit_executorch.so beside the program or set "
           "ANEFIT_EXECUTORCH_BACKEND to its path";
#else
    *why = "no ExecuTorch backend library (" + (tried.empty() ? std::string("none") : tried) +
           "): this anefit was built without ExecuTorch's runtime; pip install executorch and "
           "build again, or set ANEFIT_EXECUTORCH_BACKEND to a libanefit_executorch.so";
#endif
  }
  return nullptr;
}

ExecuTorchEngine::~ExecuTorchEngine() {
  // The library stays loaded: ExecuTorch's registry keeps pointing at its
  // backend for the life of the process.
}

std::string ExecuTorchEngine::version() const { return api_->version(); }

std::vector<std::vector<Tensor>> ExecuTorchEngine::run(const std::string &program,
                                                       const std::string &method, int64_t steps,
                                                       const RunOptions &options,
                                                       const InputFn &input) const {
  // anefit's input policy first (a regular file, readable; one line
  // otherwise): ExecuTorch's loader would wait forever on a FIFO.
  MappedFile::open(program);
  std::vector<std::vector<Tensor>> outputs;
  RunContext context{&input, &outputs, {}, {}, {}};
  char message[2048] = {0};
  const char *precision = options.precision == Precision::FP16 ? "fp16" : "fp32";
  int rc = api_->run(program.c_str(), method.c_str(), steps, precision, options.threads,
                     options.exactProducts ? 1 : 0, giveInput, takeOutput, &context, message,
                     sizeof message);
  if (rc == 1)
    throw InputError(program + ": method '" + method + "': " + context.error);
  if (rc != 0)
    throw InputError(message);
  return outputs;
}

std::optional<int64_t> ExecuTorchEngine::metadataInt(const std::string &program,
                                                     const std::string &method) const {
  try {
    std::vector<std::vector<Tensor>> out =
        run(program, method, 1, RunOptions{}, [](int64_t, const DeclaredInput &) -> Tensor {
          throw InputError("a metadata method takes no inputs");
        });
    if (out.size() == 1 && out[0].size() == 1 && out[0][0].numElements() == 1 &&
        isInteger(out[0][0].dtype()))
      return out[0][0].intAt(0);
  } catch (const InputError &) {
  }
  return std::nullopt;
}

Tensor llmDecodeInput(int64_t step, const DeclaredInput &in, int64_t vocab, std::mt19937_64 &rng) {
  int64_t n = numElementsOf(in.shape);
  if (isInteger(in.dtype)) {
    bool position = in.shape.size() <= 1;
    int64_t width = in.shape.size() == 2 ? in.shape[1] : 1;
    std::vector<int32_t> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      values[static_cast<size_t>(i)] = static_cast<int32_t>(
          position ? step * width + i : uniformInt(rng, 0, std::max<int64_t>(vocab, 1) - 1));
    return Tensor::fromI32(std::move(values), in.shape).convertTo(in.dtype);
  }
  if (isFloat(in.dtype)) {
    std::vector<float> values(static_cast<size_t>(n));
    for (float &v : values)
      v = uniformFloat(rng, -1.0f, 1.0f);
    return Tensor::fromF32(std::move(values), in.shape).convertTo(in.dtype);
  }
  return Tensor::zeros(in.dtype, in.shape);
}

Tensor LlmDecodeInputs::operator()(int64_t step, const DeclaredInput &in) {
  auto key = std::make_pair(step, in.index);
  auto it = drawn_.find(key);
  if (it == drawn_.end())
    it = drawn_.emplace(key, llmDecodeInput(step, in, vocab_, rng_)).first;
  return it->second;
}

const Tensor *LlmDecodeInputs::drawn(int64_t step, size_t index) const {
  auto it = drawn_.find({step, index});
  return it == drawn_.end() ? nullptr : &it->second;
}

} // namespace anefit::runtime
