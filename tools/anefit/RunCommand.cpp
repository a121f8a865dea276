//===- RunCommand.cpp - anefit run: execute a model on the CPU ------------===//
//
// Loads a model, binds inputs from .npy/.npz files (or random values), runs
// one function through the reference interpreter once or step by step with
// its Core ML states carried over, prints a summary of every output and
// optionally writes outputs and states to an .npz archive.
//
//===----------------------------------------------------------------------===//
#include "Command.h"

#include "io/ModelIO.h"
#include "runtime/Interpreter.h"
#include "runtime/Npy.h"
#include "runtime/RandomInput.h"
#include "support/Error.h"
#include "ir/StateMap.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <unistd.h>

namespace anefit::cli {
namespace {

using runtime::NamedTensor;
using runtime::Tensor;

struct RunOptions {
  std::string model;
  std::string function;
  std::vector<std::string> inputs;
  std::string inputsNpz;
  bool random = false;
  uint64_t seed = 0;
  int64_t steps = 0;
  std::vector<std::string> states;
  std::string precision = "fp32";
  std::string output;
};

/// Splits "NAME=FILE".
std::pair<std::string, std::string> splitAssignment(const std::string &s, const char *flag) {
  size_t eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
    throw InputError(std::string(flag) + ": expected NAME=FILE.npy, found '" + s + "'");
  return {s.substr(0, eq), s.substr(eq + 1)};
}

/// "step<k>/<name>" -> (k, name); nullopt for keys without a step prefix.
std::optional<std::pair<int64_t, std::string>> stepKey(const std::string &key) {
  if (key.rfind("step", 0) != 0)
    return std::nullopt;
  size_t slash = key.find('/');
  if (slash == std::string::npos || slash == 4)
    return std::nullopt;
  std::string num = key.substr(4, slash - 4);
  if (num.size() > 9 || num.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::make_pair(std::stoll(num), key.substr(slash + 1));
}

std::string typeText(const Tensor &t) {
  std::string s = "(";
  for (int64_t d : t.shape())
    s += std::to_string(d) + ", ";
  return s + std::string(dtypeName(t.dtype())) + ")";
}

/// "name (1, 8, fp32)  min -1.2 max 3.4 mean 0.01  nan 0 inf 0".
void printSummary(std::ostream &os, const std::string &name, const Tensor &t) {
  double mn = INFINITY, mx = -INFINITY, sum = 0;
  int64_t nans = 0, infs = 0, finite = 0;
  for (int64_t i = 0; i < t.numElements(); ++i) {
    double v = isFloat(t.dtype()) ? t.floatAt(i) : static_cast<double>(t.intAt(i));
    if (std::isnan(v)) {
      ++nans;
      continue;
    }
    if (std::isinf(v))
      ++infs;
    mn = std::min(mn, v);
    mx = std::max(mx, v);
    if (std::isfinite(v))
      sum += v, ++finite;
  }
  char buf[256];
  if (finite + infs == 0)
    std::snprintf(buf, sizeof buf, "  %s %s  no finite values  nan %lld inf %lld", name.c_str(),
                  typeText(t).c_str(), (long long)nans, (long long)infs);
  else
    std::snprintf(buf, sizeof buf, "  %s %s  min %.6g max %.6g mean %.6g  nan %lld inf %lld",
                  name.c_str(), typeText(t).c_str(), mn, mx, finite ? sum / finite : NAN,
                  (long long)nans, (long long)infs);
  os << buf << "\n";
}

int runRun(const RunOptions &opts) {
  runtime::Precision precision = runtime::parsePrecision(opts.precision);
  if (opts.steps < 0)
    throw InputError("--steps: expected a positive count, found " + std::to_string(opts.steps));
  std::unique_ptr<Model> model = loadModel(opts.model);
  if (!model->program || model->program->functions.empty())
    throw InputError(opts.model + ": expected an ML Program, found a model without one "
                                  "(anefit run executes ML Programs only)");
  const Function *fn = opts.function.empty() ? model->defaultFunction()
                                             : model->program->findFunction(opts.function);
  if (!fn) {
    std::string names;
    for (const auto &f : model->program->functions)
      names += (names.empty() ? "" : ", ") + f->name;
    throw InputError(opts.model + ": no function '" + opts.function + "' (functions: " + names +
                     ")");
  }
  FunctionDescription desc = model->description.describe(fn->name);

  // Inputs: per step from --inputs (step<k>/NAME or NAME), for every step
  // from --input, the rest at random with --random.
  std::map<int64_t, runtime::TensorMap> perStep;
  runtime::TensorMap shared;
  int64_t npzSteps = 0;
  if (!opts.inputsNpz.empty())
    for (NamedTensor &nt : runtime::readNpz(opts.inputsNpz)) {
      if (auto sk = stepKey(nt.name)) {
        perStep[sk->first][sk->second] = std::move(nt.tensor);
        npzSteps = std::max(npzSteps, sk->first + 1);
      } else {
        shared[nt.name] = std::move(nt.tensor);
      }
    }
  for (const std::string &s : opts.inputs) {
    auto [name, file] = splitAssignment(s, "--input");
    shared[name] = runtime::readNpy(file);
  }
  int64_t steps = opts.steps ? opts.steps : std::max<int64_t>(npzSteps, 1);
  bool stepped = steps > 1 || npzSteps > 0;

  runtime::StateContext states;
  for (const std::string &s : opts.states) {
    auto [name, file] = splitAssignment(s, "--state");
    states.set(*fn, name, runtime::readNpy(file));
  }

  runtime::RunOptions ropts;
  ropts.precision = precision;
  bool tty = isatty(fileno(stderr));
  auto started = std::chrono::steady_clock::now();
  if (tty)
    ropts.progress = [&, last = std::chrono::steady_clock::time_point()](size_t done,
                                                                         size_t total) mutable {
      auto now = std::chrono::steady_clock::now();
      if (now - started < std::chrono::seconds(1) || now - last < std::chrono::milliseconds(200))
        return;
      last = now;
      std::fprintf(stderr, "\r  running op %zu/%zu", done, total);
      if (done == total)
        std::fprintf(stderr, "\r%40s\r", "");
    };
  runtime::Interpreter interp(*fn, ropts);

  // A model fixed by state-to-io carries its state map: the host feeds each
  // moved state's output back into its input, starting from zeros. Do that
  // here for inputs the user did not give, so --steps runs it like a host.
  std::map<std::string, std::string> carried; // input <- output
  auto mapText = model->description.metadata.userDefined.find(StateMap::kMetadataKey);
  if (mapText != model->description.metadata.userDefined.end()) {
    StateMap map = StateMap::fromJson(mapText->second, opts.model);
    for (const StateMapEntry &e : map.entries) {
      const Value *in = fn->findInput(e.input);
      bool given = shared.count(e.input) || (perStep.count(0) && perStep.at(0).count(e.input));
      if (!in || given)
        continue;
      auto shape = in->type.staticShape();
      if (!shape)
        continue;
      shared[e.input] =
          Tensor::zeros(in->type.dtype(), runtime::Shape(shape->begin(), shape->end()));
      carried[e.input] = e.output;
    }
    if (!carried.empty())
      std::cout << "state map: carrying " << carried.size()
                << " moved state(s) from output to input, starting from zeros\n";
  }

  std::mt19937_64 rng(opts.seed);
  std::vector<NamedTensor> archive;
  std::cout << "function " << fn->name << ", " << steps << (steps == 1 ? " step" : " steps")
            << ", precision " << opts.precision << "\n";
  for (int64_t k = 0; k < steps; ++k) {
    runtime::TensorMap feed = shared;
    for (auto &[name, t] : perStep[k])
      feed[name] = t;
    std::set<std::string> declared;
    for (const auto &in : fn->inputs)
      if (!in->type.isState()) {
        declared.insert(in->name);
        if (!feed.count(in->name) && opts.random) {
          const FeatureDescription *fd = nullptr;
          for (const FeatureDescription &d : desc.inputs)
            if (d.name == in->name)
              fd = &d;
          feed[in->name] = runtime::randomInput(*in, fd, rng);
        }
      }
    // Unknown names first: a misspelt name would otherwise surface as a
    // missing input.
    for (const auto &[name, t] : feed)
      if (!declared.count(name)) {
        std::string names;
        for (const std::string &d : declared)
          names += (names.empty() ? "" : ", ") + d;
        throw InputError("function '" + fn->name + "': unknown input '" + name +
                         "' (inputs: " + (names.empty() ? "none" : names) + ")");
      }
    if (!opts.random)
      for (const auto &in : fn->inputs)
        if (!in->type.isState() && !feed.count(in->name))
          throw InputError("missing input '" + in->name + "' of type " + in->type.str() +
                           (stepped ? " for step " + std::to_string(k) : "") +
                           "; give it with --input NAME=FILE.npy, --inputs FILE.npz or --random");
    std::vector<NamedTensor> outs = interp.run(feed, states);
    std::string prefix = stepped ? "step" + std::to_string(k) + "/" : "";
    if (stepped)
      std::cout << "step " << k << "\n";
    for (NamedTensor &o : outs) {
      printSummary(std::cout, o.name, o.tensor);
      for (const auto &[input, output] : carried)
        if (output == o.name)
          shared[input] = o.tensor;
      archive.push_back({prefix + o.name, std::move(o.tensor)});
    }
    for (const auto &in : fn->inputs)
      if (in->type.isState())
        if (const Tensor *t = states.find(in->name)) {
          Tensor declaredT = t->convertTo(in->type.dtype());
          if (k + 1 == steps)
            printSummary(std::cout, "state " + in->name, declaredT);
          archive.push_back({prefix + "state/" + in->name, std::move(declaredT)});
        }
  }
  if (!opts.output.empty()) {
    runtime::writeNpz(opts.output, archive);
    std::cout << "wrote " << archive.size() << " arrays to " << opts.output << "\n";
  }
  return kExitOk;
}

} // namespace

void registerRun(CLI::App &parent, VerbResult &result) {
  auto opts = std::make_shared<RunOptions>();
  CLI::App *cmd = parent.add_subcommand("run", "Run a model on the CPU with the reference "
                                               "interpreter, states included");
  cmd->add_option("MODEL", opts->model, "Model: .mlpackage, .mlmodel or .mil")->required();
  cmd->add_option("--function", opts->function, "Function to run (default: the model's default)");
  cmd->add_option("--input", opts->inputs, "Input from a .npy file: NAME=FILE.npy (repeatable)");
  cmd->add_option("--inputs", opts->inputsNpz,
                  ".npz of inputs: NAME, or step<k>/NAME for step k of a --steps run");
  cmd->add_flag("--random", opts->random, "Fill inputs not given with random values");
  cmd->add_option("--seed", opts->seed, "Seed for --random (default 0)");
  cmd->add_option("--steps", opts->steps,
                  "Run N steps, carrying Core ML states from step to step (default: 1, or the "
                  "number of step<k>/ groups in --inputs)");
  cmd->add_option("--state", opts->states,
                  "Initial value of a state: NAME=FILE.npy (repeatable; default zeros)");
  cmd->add_option("--precision", opts->precision,
                  "fp32 (default) or fp16: round every op's float result to fp16 like the ANE");
  cmd->add_option("-o,--output", opts->output,
                  "Write outputs (and states) to an .npz: NAME, or step<k>/NAME and "
                  "step<k>/state/NAME for stepped runs");
  cmd->footer("Exit codes: 0 ran, 2 bad model, bad input or an op without a kernel.");
  cmd->callback([opts, &result] { result.exitCode = runGuarded([&] { return runRun(*opts); }); });
}

} // namespace anefit::cli
