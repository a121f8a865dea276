//===- FixCommand.cpp - anefit fix: make a model ANE-friendly -------------===//
//
// Parses the options, runs fixFile (transforms/FixFile.h: the pass pipeline,
// the check before and after, the proof in the interpreter, the fixed model
// and its state map written, or a .pte's Core ML payloads rewritten) and
// prints what it found.
//
//===----------------------------------------------------------------------===//
#include "Command.h"

#include "io/ModelIO.h"
#include "support/Error.h"
#include "transforms/FixFile.h"
#include "transforms/Pass.h"

#include <cstdio>
#include <iostream>

namespace anefit::cli {
namespace {

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

/// Prints what fixModel did, and on stderr why a rewrite that is not ok()
/// is not saved.
void report(const FixResult &result, const FixCliOptions &opts) {
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
    return;
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
    }
    break;
  }
  }
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

int runFix(const FixCliOptions &opts) {
  if (opts.steps < 1)
    throw InputError("--steps: expected a positive count, found " + std::to_string(opts.steps));
  applyMaxMemory(opts.maxMemory);
  FixFileOptions file;
  file.force = opts.force;
  bool first = true;
  file.onFixed = [&](const FixedModel &m) {
    if (first)
      std::cout << "fix: " << opts.model << " -> " << opts.output << "\n";
    first = false;
    if (!m.label.empty())
      std::cout << m.where << " (" << m.label << "):\n";
    report(m.result, opts);
  };
  FixFileResult result = fixFile(opts.model, opts.output, fixOptions(opts), file);
  if (!result.ok())
    return kExitFindings;
  if (result.program) {
    std::cout << "wrote " << result.output
              << " (Core ML payloads rewritten; every other byte of the program kept)\n";
    return kExitOk;
  }
  std::cout << "wrote " << result.output << "\n";
  if (!result.stateMapPath.empty())
    std::cout << "wrote " << result.stateMapPath
              << " (feed each output back into its input; start from zeros)\n";
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
