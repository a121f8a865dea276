//===- FixCommand.cpp - anefit fix: make a model ANE-friendly -------------===//
//
// Parses the options, runs fixModel (transforms/Fix.h: the pass pipeline,
// the check before and after, the proof in the interpreter), prints what it
// found and writes the fixed model plus its state map.
//
//===----------------------------------------------------------------------===//
#include "Command.h"

#include "ane/Remedies.h"
#include "io/ModelIO.h"
#include "support/Error.h"
#include "transforms/Fix.h"
#include "transforms/Pass.h"

#include <cstdio>
#include <filesystem>
#include <iostream>

namespace anefit::cli {
namespace {

namespace fs = std::filesystem;

struct FixCliOptions {
  std::string model;
  std::string output;
  std::string passes;
  bool verify = false;
  bool noVerify = false;
  int64_t steps = 8;
  uint64_t seed = 0;
  double atol = 1e-4;
  double rtol = 1e-3;
  bool force = false;
  std::string precision = "fp32";
  std::string maxMemory;
};

/// "main: ane-fails, 231/240 ops on the ANE, 5 states, 2 compile/runtime-fail
/// findings" (", 1 at-risk" when contested failures are left).
std::string checkSummary(const ane::CheckReport &report) {
  std::string out;
  for (const ane::FunctionReport &f : report.functions) {
    size_t blocking = 0, atRisk = 0;
    for (const ane::Finding &fd : report.findings)
      if (fd.function == f.name) {
        blocking += fd.level() >= ane::Level::CompileFail;
        atRisk += fd.level() == ane::Level::AtRisk;
      }
    out += "  " + f.name + ": " + std::string(ane::verdictName(f.verdict)) + ", " +
           std::to_string(f.aneOps) + "/" + std::to_string(f.ops.size()) + " ops on the ANE, " +
           std::to_string(f.states) + " state" + (f.states == 1 ? "" : "s") + ", " +
           std::to_string(blocking) + " compile/runtime-fail finding" + (blocking == 1 ? "" : "s") +
           (atRisk ? ", " + std::to_string(atRisk) + " at-risk" : std::string()) + "\n";
  }
  return out;
}

void createOutputParent(const std::string &output) {
  fs::path parent = fs::path(output).parent_path();
  std::error_code ec;
  if (!parent.empty())
    fs::create_directories(parent, ec);
}

/// Prints what fixModel did; kExitOk when the rewrite may be saved.
int report(const FixResult &result, const FixCliOptions &opts) {
  if (opts.passes.empty()) {
    std::string rules;
    for (const std::string &r : result.pickedFor)
      rules += (rules.empty() ? "" : ", ") + r;
    std::cout << "  passes: "
              << (result.pipeline.empty() ? std::string("none (no blocking finding a pass removes)")
                                          : result.pipeline + " (for " + rules + ")")
              << "\n";
  }
  if (result.changes.empty())
    std::cout << "  no changes\n";
  for (const std::string &c : result.changes)
    std::cout << "  " << c << "\n";
  for (const Diagnostic &d : result.diagnostics)
    std::cout << "  " << d.str() << "\n";

  if (!result.verifies()) {
    for (const Diagnostic &d : result.verifierDiagnostics)
      std::cerr << d.str() << "\n";
    std::cerr << "anefit: error: the rewritten model does not verify; nothing written\n";
    return kExitFindings;
  }
  std::cout << "check before:\n"
            << checkSummary(result.before) << "check after:\n"
            << checkSummary(result.after);

  const FixVerification &v = result.verification;
  switch (v.status) {
  case FixVerification::Status::NotRun:
    std::cout << "verify: skipped\n";
    break;
  case FixVerification::Status::Skipped:
    std::cout << "verify: skipped: " << v.skipReason << "\n";
    break;
  case FixVerification::Status::Same:
  case FixVerification::Status::Different: {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "verify: %lld steps, %zu values compared, max abs diff %.3g (atol %g, rtol %g%s)",
                  (long long)v.steps, v.comparison.compared(), v.comparison.maxAbsDiff(), opts.atol,
                  opts.rtol, opts.precision == "fp16" ? ", fp16 mode" : "");
    std::cout << buf << (v.comparison.ok() ? ": same outputs\n" : ": DIFFERENT\n");
    if (!v.comparison.ok()) {
      std::cerr << "anefit: error: the fixed model differs from the original: "
                << v.comparison.firstMismatch() << "; nothing written\n";
      return kExitFindings;
    }
    break;
  }
  }
  return kExitOk;
}

FixOptions fixOptions(const FixCliOptions &opts) {
  FixOptions options;
  options.passes = opts.passes;
  options.verify = opts.noVerify ? FixVerify::Never
                   : opts.verify ? FixVerify::Always
                                 : FixVerify::Auto;
  options.steps = opts.steps;
  options.seed = opts.seed;
  options.tolerance = {opts.atol, opts.rtol};
  options.precision = runtime::parsePrecision(opts.precision);
  return options;
}

/// `fix x.pte -o y.pte`: every Core ML delegate (or the one of "x.pte#N") is
/// fixed and proven as a model of its own, with ExecuTorch's buffer
/// write-back carried between steps; the rewrites must keep each delegate's
/// interface, and go into a copy of the program.
int runFixPte(const FixCliOptions &opts, const OutputOptions &policy) {
  auto [inPath, selector] = splitPteSelector(opts.model);
  if (detectFormat(inPath) != ModelFormat::Pte)
    throw InputError("-o " + opts.output + ": a .pte output is written from a .pte input; found '" +
                     opts.model + "' (write a .mlpackage instead)");
  std::vector<EmbeddedModel> models = loadPteModels(inPath);
  createOutputParent(opts.output);
  checkOutput(opts.output, policy);
  if (models.empty())
    throw InputError::at(inPath, "",
                         "no Core ML delegate in this ExecuTorch program; nothing to fix");
  if (selector && *selector >= models.size())
    failExpected(inPath, "delegate selector '#" + std::to_string(*selector) + "'",
                 "0 .. " + std::to_string(models.size() - 1), std::to_string(*selector));

  std::cout << "fix: " << opts.model << " -> " << opts.output << "\n";
  FixOptions options = fixOptions(opts);
  std::vector<std::unique_ptr<Model>> fixed(models.size());
  for (size_t i = 0; i < models.size(); ++i) {
    if (selector && *selector != i)
      continue;
    std::string where = inPath + "#" + std::to_string(i);
    std::cout << where << " (" << models[i].label << "):\n";
    FixResult result = fixModel(*models[i].model, options);
    if (int rc = report(result, opts); rc != kExitOk)
      return rc;
    std::string change = interfaceDifference(*models[i].model, *result.fixed);
    if (!change.empty()) {
      std::cerr << "anefit: error: " << where << ": the rewrite (" << result.pipeline
                << ") changes the Core ML delegate's interface (" << change
                << "), which the ExecuTorch program around it cannot follow; nothing written. "
                << (result.stateMap.empty() ? std::string("Run only passes that keep it.")
                                            : ane::stateRemedyText())
                << "\n";
      return kExitInputError;
    }
    fixed[i] = std::move(result.fixed);
  }
  std::vector<const Model *> replace;
  for (const auto &m : fixed)
    replace.push_back(m.get());
  SaveOptions save;
  save.force = opts.force;
  savePteModels(inPath, replace, opts.output, save);
  std::cout << "wrote " << opts.output
            << " (Core ML payloads rewritten; every other byte of the program kept)\n";
  return kExitOk;
}

int runFix(const FixCliOptions &opts) {
  if (opts.steps < 1)
    throw InputError("--steps: expected a positive count, found " + std::to_string(opts.steps));
  applyMaxMemory(opts.maxMemory);
  // The output policy (never an input, an existing output only with
  // --force), checked before the work and again when writing.
  auto [inPath, selector] = splitPteSelector(opts.model);
  OutputOptions policy;
  policy.force = opts.force;
  policy.allowStream = false;
  policy.kind =
      formatInfo(detectFormat(opts.output)).directory ? OutputKind::Directory : OutputKind::File;
  policy.alsoAvoid = {inPath};
  fs::path parent = fs::path(opts.output).parent_path();
  if (!parent.empty())
    refuseInputOverlap(parent.string(), {inPath}, /*around=*/false);
  if (detectFormat(opts.output) == ModelFormat::Pte)
    return runFixPte(opts, policy);

  std::unique_ptr<Model> original = loadModel(opts.model);
  createOutputParent(opts.output);
  checkOutput(opts.output, policy);
  OutputOptions mapPolicy = policy;
  mapPolicy.kind = OutputKind::File;
  std::string mapPath = stateMapPathFor(opts.output);

  FixResult result = fixModel(*original, fixOptions(opts));
  std::cout << "fix: " << opts.model << " -> " << opts.output << "\n";
  if (int rc = report(result, opts); rc != kExitOk)
    return rc;

  if (!result.stateMap.empty())
    checkOutput(mapPath, mapPolicy);
  SaveOptions save;
  save.force = opts.force;
  saveModel(*result.fixed, opts.output, save);
  std::cout << "wrote " << opts.output << "\n";
  if (!result.stateMap.empty()) {
    writeFileAtomically(mapPath, result.stateMap.toJson() + "\n", mapPolicy);
    std::cout << "wrote " << mapPath << " (feed each output back into its input; start from "
              << "zeros)\n";
  }
  return kExitOk;
}

} // namespace

void registerFix(CLI::App &verb, VerbResult &result) {
  auto opts = std::make_shared<FixCliOptions>();
  CLI::App *cmd = &verb;
  cmd->add_option("MODEL", opts->model, modelArgumentHelp())->required();
  cmd->add_option("-o,--output", opts->output,
                  "where to write the fixed model: " + formatExtensionsText(true) +
                      ", or .pte for a .pte input (its Core ML payloads rewritten in place)")
      ->required();
  cmd->add_flag("--force", opts->force,
                "Replace the output (and its state map) if it exists (never the input)");
  addMaxMemoryOption(cmd, opts->maxMemory);
  cmd->add_option("--passes", opts->passes,
                  "pass pipeline (default: the passes that remove the model's blocking "
                  "findings; docs/passes.md)");
  cmd->add_flag("--verify", opts->verify,
                "run original and fixed models in the interpreter and compare (default: on "
                "when the weights are under 2 GB)");
  cmd->add_flag("--no-verify", opts->noVerify, "skip the interpreter comparison");
  cmd->add_option("--steps", opts->steps, "prediction steps to compare (default 8)");
  cmd->add_option("--seed", opts->seed, "seed of the random inputs (default 0)");
  cmd->add_option("--atol", opts->atol, "absolute tolerance of the comparison (default 1e-4)");
  cmd->add_option("--rtol", opts->rtol, "relative tolerance of the comparison (default 1e-3)");
  cmd->add_option("--precision", opts->precision,
                  "interpreter precision of the comparison: fp32 (default) or fp16 (every float "
                  "op rounded to fp16, as the ANE computes)");
  cmd->footer("Passes:\n" + passHelpText() +
              "The state map (OUT.statemap.json, also in the model's metadata under "
              "com.anefit.statemap) tells the host which output feeds which input; see "
              "docs/host-loop.md.\nExit codes: 0 fixed (and verified), 1 the rewrite failed to "
              "verify, 2 usage or input error.");
  cmd->callback([opts, &result] { result.exitCode = runGuarded([&] { return runFix(*opts); }); });
}

} // namespace anefit::cli
