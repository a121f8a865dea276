//===- FixCommand.cpp - anefit fix: make a model ANE-friendly -------------===//
//
// Parses the options, runs fixModel (transforms/Fix.h: the pass pipeline,
// the check before and after, the proof in the interpreter), prints what it
// found and writes the fixed model plus its state map.
//
//===----------------------------------------------------------------------===//
#include "Command.h"

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

int runFix(const FixCliOptions &opts) {
  if (opts.steps < 1)
    throw InputError("--steps: expected a positive count, found " + std::to_string(opts.steps));
  applyMaxMemory(opts.maxMemory);
  // The output policy (never an input, an existing output only with
  // --force), checked before the work and again when writing.
  OutputOptions policy;
  policy.force = opts.force;
  policy.allowStream = false;
  policy.kind =
      formatInfo(detectFormat(opts.output)).directory ? OutputKind::Directory : OutputKind::File;
  policy.alsoAvoid = {opts.model};
  fs::path parent = fs::path(opts.output).parent_path();
  if (!parent.empty())
    refuseInputOverlap(parent.string(), {opts.model}, /*around=*/false);
  std::unique_ptr<Model> original = loadModel(opts.model);
  std::error_code ec;
  if (!parent.empty())
    fs::create_directories(parent, ec);
  checkOutput(opts.output, policy);
  OutputOptions mapPolicy = policy;
  mapPolicy.kind = OutputKind::File;
  std::string mapPath = stateMapPathFor(opts.output);

  FixOptions options;
  options.passes = opts.passes;
  options.verify = opts.noVerify ? FixVerify::Never
                   : opts.verify ? FixVerify::Always
                                 : FixVerify::Auto;
  options.steps = opts.steps;
  options.seed = opts.seed;
  options.tolerance = {opts.atol, opts.rtol};
  options.precision = runtime::parsePrecision(opts.precision);
  FixResult result = fixModel(*original, options);

  std::cout << "fix: " << opts.model << " -> " << opts.output << "\n";
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
                  opts.rtol, options.precision == runtime::Precision::FP16 ? ", fp16 mode" : "");
    std::cout << buf << (v.comparison.ok() ? ": same outputs\n" : ": DIFFERENT\n");
    if (!v.comparison.ok()) {
      std::cerr << "anefit: error: the fixed model differs from the original: "
                << v.comparison.firstMismatch() << "; nothing written\n";
      return kExitFindings;
    }
    break;
  }
  }

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
                  "where to write the fixed model: " + formatExtensionsText(true))
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
