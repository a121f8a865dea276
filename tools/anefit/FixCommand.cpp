//===- FixCommand.cpp - anefit fix: make a model ANE-friendly -------------===//
//
// Runs a pass pipeline (by default state-to-io with keep-largest, then
// clean-up) on a model, prints what changed and the check summary before and
// after, proves the rewrite by running original and fixed models side by side
// in the interpreter (the host loop of the state map), and writes the fixed
// model plus its state map.
//
//===----------------------------------------------------------------------===//
#include "Command.h"

#include "ane/Checker.h"
#include "io/ModelIO.h"
#include "ir/Verifier.h"
#include "runtime/Interpreter.h"
#include "runtime/RandomInput.h"
#include "support/Error.h"
#include "transforms/Pass.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>

namespace anefit::cli {
namespace {

namespace fs = std::filesystem;

struct FixOptions {
  std::string model;
  std::string output;
  std::string passes;
  bool verify = true;
  bool noVerify = false;
  int64_t steps = 8;
  uint64_t seed = 0;
  double atol = 1e-4;
  double rtol = 1e-3;
};

/// Verification runs every function's weights through the interpreter; above
/// this size it is off unless --verify asks for it.
constexpr uint64_t kAutoVerifyWeightBytes = uint64_t(2) << 30;

/// "main: ane-fails, 231/240 ops on the ANE, 5 states, 2 compile-fail findings".
std::string checkSummary(const ane::CheckReport &report) {
  std::string out;
  for (const ane::FunctionReport &f : report.functions) {
    size_t blocking = 0;
    for (const ane::Finding &fd : report.findings)
      if (fd.function == f.name &&
          (fd.effect == ane::Effect::CompileFail || fd.effect == ane::Effect::RuntimeFail))
        ++blocking;
    out += "  " + f.name + ": " + std::string(ane::verdictName(f.verdict)) + ", " +
           std::to_string(f.aneOps) + "/" + std::to_string(f.ops.size()) + " ops on the ANE, " +
           std::to_string(f.states) + " state" + (f.states == 1 ? "" : "s") + ", " +
           std::to_string(blocking) + " compile/runtime-fail finding" + (blocking == 1 ? "" : "s") +
           "\n";
  }
  return out;
}

/// Writes `text` to `path` through a temporary sibling renamed into place.
void writeFileAtomically(const std::string &path, const std::string &text) {
  fs::path tmp = path + ".tmp-anefit";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      throw InputError::at(path, "", "cannot open the file for writing");
    out << text;
    if (!out.flush())
      throw InputError::at(path, "", "could not write the file");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw InputError::at(path, "", "cannot move the file into place");
  }
}

struct VerifyOutcome {
  bool ok = true;
  double maxAbsDiff = 0;
  size_t compared = 0;
  std::string firstMismatch;
};

/// Compares `a` (original) and `b` (fixed) element by element.
void compare(const std::string &what, const runtime::Tensor &a, const runtime::Tensor &b,
             const FixOptions &opts, VerifyOutcome &out) {
  if (a.shape() != b.shape()) {
    if (out.ok)
      out.firstMismatch = what + ": shape " + runtime::shapeStr(a.shape()) + " became " +
                          runtime::shapeStr(b.shape());
    out.ok = false;
    return;
  }
  for (int64_t i = 0; i < a.numElements(); ++i) {
    double x = a.floatAt(i), y = b.floatAt(i);
    if (std::isnan(x) && std::isnan(y))
      continue;
    double diff = std::fabs(x - y);
    if (std::isnan(diff))
      diff = INFINITY;
    out.maxAbsDiff = std::max(out.maxAbsDiff, diff);
    ++out.compared;
    if (diff > opts.atol + opts.rtol * std::fabs(x)) {
      if (out.ok) {
        char buf[160];
        std::snprintf(buf, sizeof buf, ": element %lld is %.9g, was %.9g", (long long)i, y, x);
        out.firstMismatch = what + buf;
      }
      out.ok = false;
    }
  }
}

/// Runs original and fixed functions side by side for opts.steps steps on
/// the same random inputs; moved states go around the host loop the state
/// map describes, kept states stay in the interpreter's state context.
VerifyOutcome verifyRewrite(const Model &original, const Model &fixed, const StateMap &map,
                            const FixOptions &opts) {
  VerifyOutcome outcome;
  std::mt19937_64 rng(opts.seed);
  for (const auto &fnPtr : original.program->functions) {
    const Function &fo = *fnPtr;
    const Function *ff = fixed.program->findFunction(fo.name);
    if (!ff)
      throw InputError("fix: function '" + fo.name + "' is missing after the rewrite");
    FunctionDescription desc = original.description.describe(fo.name);
    runtime::Interpreter io(fo), ifx(*ff);
    runtime::StateContext so, sf;
    so.initialize(fo);
    sf.initialize(*ff);
    runtime::TensorMap carried;
    for (const StateMapEntry &e : map.entries)
      if (ff->findInput(e.input))
        carried[e.input] = runtime::Tensor::zeros(runtime::computeDType(e.dtype), e.shape);

    for (int64_t step = 0; step < opts.steps; ++step) {
      runtime::TensorMap inputs;
      for (const auto &in : fo.inputs) {
        if (in->type.isState())
          continue;
        const FeatureDescription *fd = nullptr;
        for (const FeatureDescription &f : desc.inputs)
          if (f.name == in->name)
            fd = &f;
        inputs[in->name] = runtime::randomInput(*in, fd, rng);
      }
      std::vector<runtime::NamedTensor> outO = io.run(inputs, so);
      // Core ML stores a state in its declared dtype, while the interpreter
      // keeps fp32; round the original's states the way the fixed model's
      // outputs are rounded, so both carry the same values to the next step.
      for (const auto &in : fo.inputs)
        if (in->type.isState())
          if (const runtime::Tensor *t = so.find(in->name))
            so.set(fo, in->name, t->convertTo(in->type.dtype()));
      runtime::TensorMap fixedInputs = inputs;
      for (auto &[name, t] : carried)
        fixedInputs[name] = t;
      std::vector<runtime::NamedTensor> outF = ifx.run(fixedInputs, sf);
      for (const auto &in : ff->inputs)
        if (in->type.isState())
          if (const runtime::Tensor *t = sf.find(in->name))
            sf.set(*ff, in->name, t->convertTo(in->type.dtype()));
      std::map<std::string, const runtime::Tensor *> byName;
      for (const runtime::NamedTensor &nt : outF)
        byName[nt.name] = &nt.tensor;
      std::string at = fo.name + ": step " + std::to_string(step) + ": ";
      for (const runtime::NamedTensor &nt : outO) {
        auto it = byName.find(nt.name);
        if (it == byName.end())
          throw InputError("fix: output '" + nt.name + "' of " + fo.name +
                           " is missing after the rewrite");
        compare(at + "output '" + nt.name + "'", nt.tensor, *it->second, opts, outcome);
      }
      for (const StateMapEntry &e : map.entries) {
        auto it = byName.find(e.output);
        const runtime::Tensor *was = so.find(e.state);
        if (it == byName.end() || !was)
          continue;
        compare(at + "state '" + e.state + "'", *was, *it->second, opts, outcome);
        carried[e.input] = it->second->clone();
      }
    }
  }
  return outcome;
}

int runFix(const FixOptions &opts) {
  if (opts.steps < 1)
    throw InputError("--steps: expected a positive count, found " + std::to_string(opts.steps));
  if (fs::path(opts.output).lexically_normal() == fs::path(opts.model).lexically_normal())
    throw InputError("-o: expected a path other than the input, found '" + opts.output + "'");

  std::unique_ptr<Model> original = loadModel(opts.model);
  std::unique_ptr<Model> fixed = loadModel(opts.model);

  PassManager pm;
  pm.addPipeline(opts.passes.empty() ? std::string(kDefaultFixPipeline) : opts.passes);

  ane::CheckReport before = ane::checkModel(*original);
  PassResult result = pm.run(*fixed);

  std::cout << "fix: " << opts.model << " -> " << opts.output << "\n";
  if (result.changes.empty())
    std::cout << "  no changes\n";
  for (const std::string &c : result.changes)
    std::cout << "  " << c << "\n";
  for (const Diagnostic &d : result.diagnostics)
    std::cout << "  " << d.str() << "\n";

  Diagnostics problems = verifyModel(*fixed);
  if (hasErrors(problems)) {
    for (const Diagnostic &d : problems)
      std::cerr << d.str() << "\n";
    std::cerr << "anefit: error: the rewritten model does not verify; nothing written\n";
    return kExitFindings;
  }

  ane::CheckReport after = ane::checkModel(*fixed);
  std::cout << "check before:\n" << checkSummary(before) << "check after:\n" << checkSummary(after);

  bool verify = !opts.noVerify && (opts.verify || before.weightBytes <= kAutoVerifyWeightBytes);
  std::optional<VerifyOutcome> outcome;
  if (verify) {
    try {
      outcome = verifyRewrite(*original, *fixed, result.stateMap, opts);
    } catch (const InputError &e) {
      // An op without a kernel (or similar) should not keep users from a
      // rewrite they did not ask to verify; an explicit --verify insists.
      if (opts.verify)
        throw;
      std::cout << "verify: skipped: " << e.what() << "\n";
    }
  }
  if (outcome) {
    const VerifyOutcome &v = *outcome;
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "verify: %lld steps, %zu values compared, max abs diff %.3g (atol %g, rtol %g)",
                  (long long)opts.steps, v.compared, v.maxAbsDiff, opts.atol, opts.rtol);
    std::cout << buf << (v.ok ? ": same outputs\n" : ": DIFFERENT\n");
    if (!v.ok) {
      std::cerr << "anefit: error: the fixed model differs from the original: " << v.firstMismatch
                << "; nothing written\n";
      return kExitFindings;
    }
  } else if (!verify) {
    std::cout << "verify: skipped\n";
  }

  fs::path parent = fs::path(opts.output).parent_path();
  std::error_code ec;
  if (!parent.empty())
    fs::create_directories(parent, ec);
  saveModel(*fixed, opts.output);
  std::cout << "wrote " << opts.output << "\n";
  if (!result.stateMap.empty()) {
    std::string mapPath = stateMapPathFor(opts.output);
    writeFileAtomically(mapPath, result.stateMap.toJson() + "\n");
    std::cout << "wrote " << mapPath << " (feed each output back into its input; start from "
              << "zeros)\n";
  }
  return kExitOk;
}

} // namespace

void registerFix(CLI::App &parent, VerbResult &result) {
  auto opts = std::make_shared<FixOptions>();
  CLI::App *cmd = parent.add_subcommand(
      "fix", "Rewrite a model so the ANE takes it: Core ML states become inputs/outputs");
  cmd->add_option("MODEL", opts->model, "the model to fix (.mlpackage, .mlmodel, .mil)")
      ->required();
  cmd->add_option("-o,--output", opts->output, "where to write the fixed model")->required();
  cmd->add_option("--passes", opts->passes,
                  "pass pipeline (default: " + std::string(kDefaultFixPipeline) + ")");
  cmd->add_flag("--verify", opts->verify,
                "run original and fixed models in the interpreter and compare (default: on "
                "when the weights are under 2 GB)");
  cmd->add_flag("--no-verify", opts->noVerify, "skip the interpreter comparison");
  cmd->add_option("--steps", opts->steps, "prediction steps to compare (default 8)");
  cmd->add_option("--seed", opts->seed, "seed of the random inputs (default 0)");
  cmd->add_option("--atol", opts->atol, "absolute tolerance of the comparison (default 1e-4)");
  cmd->add_option("--rtol", opts->rtol, "relative tolerance of the comparison (default 1e-3)");
  cmd->footer("Passes:\n" + passHelpText() +
              "The state map (OUT.statemap.json, also in the model's metadata under "
              "com.anefit.statemap) tells the host which output feeds which input; see "
              "docs/host-loop.md.\nExit codes: 0 fixed (and verified), 1 the rewrite failed to "
              "verify, 2 usage or input error.");
  cmd->callback([opts, &result] { result.exitCode = runGuarded([&] { return runFix(*opts); }); });
}

} // namespace anefit::cli
