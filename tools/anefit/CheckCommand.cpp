//===- CheckCommand.cpp - anefit check: ANE preflight ---------------------===//
//
// Loads a model without opening its weight files and runs the ANE checker
// (src/ane) on it: per-op placement, per-function verdict and findings with
// reasons, evidence and fixes, as text, JSON ("anefit.check/2", docs/check.md)
// or SARIF 2.1.0. An ExecuTorch program with several Core ML delegates is
// checked delegate by delegate. Exit code 1 when a finding reaches --fail-on.
//
//===----------------------------------------------------------------------===//
#include "Command.h"

#include "ane/Checker.h"
#include "ane/Observations.h"
#include "fix/Numerics.h"
#include "fix/Quality.h"
#include "io/ModelIO.h"
#include "report/Baseline.h"
#include "report/HtmlReport.h"
#include "report/Report.h"
#include "report/Sources.h"
#include "runtime/Npy.h"
#include "support/Error.h"
#include "support/Text.h"

#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <set>

namespace anefit::cli {
namespace {

struct CheckCliOptions {
  std::string model;
  TargetCliOptions target;
  std::string failOn = "compile-fail";
  bool failOnGiven = false;
  std::string baseline;
  std::string saveBaseline;
  double residencyTolerance = 0;
  bool toleranceGiven = false;
  std::string format;
  std::string output;
  bool force = false;
  bool json = false;
  bool placement = false;
  std::string function;
  std::vector<std::string> ignore;
  std::string observations;
  std::string etrecord;
  std::string sourceRoot;
  std::string modelExplorer;
  bool numerics = false;
  std::string inputsNpz;
  std::string text;
  std::string tokenizer;
  int64_t steps = 0;
  uint64_t seed = 0;
};

/// `--numerics`: runs the model at fp32 and fp16 (fix/Numerics.h) and
/// returns what the checker reads of it.
std::shared_ptr<const ane::NumericsMeasurement> measure(const Model &model,
                                                        const CheckCliOptions &o) {
  NumericsOptions n;
  n.run.function = o.function;
  n.run.random = true;
  n.run.seed = o.seed;
  if (!o.text.empty()) {
    // A real text, teacher-forced: token k at position k, --steps tokens
    // predicted (8 by default).
    QualityOptions q;
    readTextTokens(q, o.text, o.tokenizer, (o.steps ? o.steps : 8) + 1);
    TeacherForcing tf = teacherForcedInputs(model, o.function, q.tokens, q.tokenizerVocab);
    n.run.function = tf.function;
    n.run.inputs = std::move(tf.inputs);
    n.run.steps = tf.steps;
    n.inputsText = o.text + "'s first " + std::to_string(tf.steps + 1) +
                   " tokens at positions 0.." + std::to_string(tf.steps - 1) + " ('" +
                   tf.tokenInput + "'" +
                   (tf.positionInput.empty() ? "" : ", '" + tf.positionInput + "'") + ")";
    return std::make_shared<const ane::NumericsMeasurement>(measureNumerics(model, n));
  }
  if (!o.inputsNpz.empty())
    n.run.inputs.addArchive(runtime::readNpz(o.inputsNpz), o.inputsNpz);
  n.run.steps = o.steps ? o.steps : (o.inputsNpz.empty() ? 8 : 0);
  n.run.missingInputHint = "give it in --inputs, or leave it to the seeded draw";
  n.inputsText = o.inputsNpz.empty() ? "random inputs, seed " + std::to_string(o.seed)
                                     : o.inputsNpz + " (inputs it does not give: random, seed " +
                                           std::to_string(o.seed) + ")";
  return std::make_shared<const ane::NumericsMeasurement>(measureNumerics(model, n));
}

int runCheck(const CheckCliOptions &o) {
  ane::CheckOptions options;
  applyTargetOptions(o.target, options);
  ane::Level failOn = ane::parseLevel(o.failOn, "--fail-on");
  std::string format = o.json ? "json" : formatFor(o.format, o.output);
  if (format != "text" && format != "json" && format != "sarif" && format != "html")
    failExpected("", "--format", "text, json, sarif or html", "'" + format + "'");
  options.function = o.function;
  for (const std::string &code : o.ignore) {
    auto rule = ane::ruleFromCode(code);
    if (!rule)
      failExpected("", "--ignore", "a rule id such as ANE-COV-001 (`anefit rules` lists them)",
                   "'" + code + "'");
    options.ignore.push_back(*rule);
  }

  if (!o.numerics && (!o.inputsNpz.empty() || o.steps || o.seed || !o.text.empty()))
    failExpected("",
                 !o.inputsNpz.empty() ? "--inputs"
                 : !o.text.empty()    ? "--text"
                 : o.steps            ? "--steps"
                                      : "--seed",
                 "--numerics (they set its run)", "no --numerics");
  if (o.baseline.empty() && o.toleranceGiven)
    failExpected("", "--residency-tolerance", "--baseline (it sets the gate's tolerance)",
                 "no --baseline");
  if (!o.baseline.empty() && format == "html")
    failExpected("", "--format", "text, json or sarif with --baseline (the gate's differences)",
                 "html");
  requireTextWithTokenizer(o.text, o.tokenizer);
  if (!o.text.empty() && !o.inputsNpz.empty())
    failExpected("", "--text", "either --text or --inputs", "both");
  // The checker reads types only; not opening the weight files proves it.
  // --numerics runs the model, so it opens them.
  std::vector<std::unique_ptr<Model>> models =
      loadModels(o.model, LoadOptions{.openWeights = o.numerics});
  if (models.size() > 1 && format == "html")
    throw InputError::at(o.model, "",
                         "holds " + std::to_string(models.size()) +
                             " Core ML delegates and an HTML report shows one; pick one as " +
                             o.model + "#0 .. " + o.model + "#" +
                             std::to_string(models.size() - 1));
  OutputOptions policy;
  policy.force = o.force;
  policy.alsoAvoid = {o.model};
  if (!o.output.empty())
    checkOutput(o.output, policy); // before the work
  std::optional<ETRecord> record;
  if (!o.etrecord.empty())
    record = readETRecord(o.etrecord);
  if (!o.modelExplorer.empty()) {
    if (!record)
      failExpected("", "--model-explorer", "--etrecord (the overlay is over its graph)",
                   "no --etrecord");
    // One file each: with --force one would silently replace the other.
    std::error_code ec;
    if (!o.output.empty() && std::filesystem::weakly_canonical(o.output, ec) ==
                                 std::filesystem::weakly_canonical(o.modelExplorer, ec))
      failExpected("", "--model-explorer", "a file other than the report's (-o)",
                   "'" + o.modelExplorer + "' for both");
    checkOutput(o.modelExplorer, OutputOptions{.force = o.force, .alsoAvoid = {o.model}});
  }
  if (!o.saveBaseline.empty()) {
    std::error_code ec;
    if (!o.output.empty() && std::filesystem::weakly_canonical(o.output, ec) ==
                                 std::filesystem::weakly_canonical(o.saveBaseline, ec))
      failExpected("", "--save-baseline", "a file other than the report's (-o)",
                   "'" + o.saveBaseline + "' for both");
    checkOutput(o.saveBaseline, OutputOptions{.force = o.force, .alsoAvoid = {o.model}});
  }
  // A baseline that cannot be compared fails before the work, in one line.
  std::optional<report::GateRecord> baseline;
  if (!o.baseline.empty())
    baseline = report::readGateRecord(o.baseline);
  std::optional<ane::ProbeObservations> observed;
  if (!o.observations.empty())
    observed = ane::readObservations(o.observations);
  std::vector<ane::CheckReport> reports;
  std::set<size_t> observedModels;
  for (size_t i = 0; i < models.size(); ++i) {
    if (o.numerics)
      options.numerics = measure(*models[i], o);
    reports.push_back(ane::checkModel(*models[i], options));
    reports.back().modelPath = models.size() > 1 ? o.model + "#" + std::to_string(i) : o.model;
    if (observed)
      observedModels.insert(ane::applyObservations(reports.back(), *models[i], *observed, i));
    if (record)
      report::attachSources(reports.back(), *models[i], *record, o.sourceRoot);
  }
  // Every model the kit planned is one of those checked, unless one delegate
  // was picked (MODEL#N): observations of a larger program are another's.
  if (observed && !splitPteSelector(o.model).second)
    for (size_t m = 0; m < observed->plan.models.size(); ++m)
      if (!observedModels.count(m))
        throw InputError::at(o.observations, "plan.models[" + std::to_string(m) + "]",
                             "expected only models of " + o.model +
                                 ", found one it does not "
                                 "hold (program hash " +
                                 observed->plan.models[m].programHash + ")");
  if (!o.modelExplorer.empty()) {
    std::vector<const ane::CheckReport *> checked;
    std::vector<const Model *> checkedModels;
    for (size_t i = 0; i < models.size(); ++i) {
      checked.push_back(&reports[i]);
      checkedModels.push_back(models[i].get());
    }
    writeFileAtomically(o.modelExplorer,
                        report::modelExplorerOverlay(checked, checkedModels, *record),
                        OutputOptions{.force = o.force, .alsoAvoid = {o.model}});
  }
  if (!o.saveBaseline.empty())
    writeFileAtomically(o.saveBaseline, report::baselineJson(reports, o.model),
                        OutputOptions{.force = o.force, .alsoAvoid = {o.model}});
  if (baseline) {
    // The gate: the exit code says whether anything got worse against the
    // record, whatever the findings it already held.
    report::GateOptions gate{.residencyTolerance = o.residencyTolerance,
                             .failOn = o.failOnGiven ? failOn : ane::Level::AtRisk};
    report::GateResult result =
        report::compareToBaseline(*baseline, report::gateRecordOf(reports, o.model), gate);
    std::string text = format == "json"    ? report::renderGateJson(result)
                       : format == "sarif" ? report::renderGateSarif(reports, o.model, result)
                                           : report::renderGateText(result);
    if (o.output.empty())
      std::cout << text;
    else
      report::writeReportFile(*models[0], o.output, text, policy);
    return result.regressed() ? kExitFindings : kExitOk;
  }
  ane::TextOptions textOptions{.color = useColor() && o.output.empty(), .placement = o.placement};
  std::string text;
  if (reports.size() > 1)
    text = format == "json"    ? ane::renderProgramJson(reports, o.model)
           : format == "sarif" ? ane::renderProgramSarif(reports, o.model)
                               : ane::renderProgramText(reports, o.model, textOptions);
  else
    text = format == "json"    ? ane::renderJson(reports[0])
           : format == "sarif" ? ane::renderSarif(reports[0])
           : format == "html"  ? report::renderHtml(*models[0], reports[0])
                               : ane::renderText(reports[0], textOptions);
  if (o.output.empty())
    std::cout << text;
  else
    report::writeReportFile(*models[0], o.output, text, policy);
  bool findings = false;
  for (const ane::CheckReport &r : reports) {
    findings = findings || r.hasFindingAtLeast(failOn);
    // An observed failure counts whether or not a rule named it.
    if (r.observation)
      if (auto observed = ane::observedFailureLevel(*r.observation))
        findings = findings || *observed >= failOn;
  }
  return findings ? kExitFindings : kExitOk;
}

} // namespace

void registerCheck(CLI::App &verb, VerbResult &result) {
  auto o = std::make_shared<CheckCliOptions>();
  CLI::App *cmd = &verb;
  cmd->add_option("MODEL", o->model, modelArgumentHelp())->required();
  addTargetOptions(cmd, o->target);
  CLI::Option *failOn =
      cmd->add_option("--fail-on", o->failOn,
                      "Exit 1 when a finding is at least this severe: " +
                          joined(ane::levelNames(/*notes=*/true), ", ") +
                          ". With --baseline: a new finding (or one whose level rose) at least "
                          "this severe fails the gate (default there: at-risk)")
          ->capture_default_str();
  cmd->add_option("--format", o->format,
                  "Output: text, json (anefit.check/2), sarif, or html (one self-contained page: "
                  "the graph coloured by placement, findings, details). Default: from the -o "
                  "extension (.json, .sarif, .html), else text");
  cmd->add_option("-o,--output", o->output, "Write the report to this file instead of stdout");
  cmd->add_flag("--json", o->json, "Same as --format json");
  cmd->add_flag("--force", o->force, "Replace the -o file if it exists (never an input)");
  cmd->add_option("--function", o->function, "Check only this function");
  cmd->add_option("--ignore", o->ignore,
                  "Rule ids not to apply (repeatable), e.g. ANE-COV-001 once a Mac has settled "
                  "the unverified patterns");
  cmd->add_option("--observations", o->observations,
                  "What a Mac observed of this model's probe kit (`anefit probe`, "
                  "docs/probe.md): observed outcomes replace predictions, the culprit is named")
      ->check(CLI::ExistingFile);
  cmd->add_option("--etrecord", o->etrecord,
                  "The export's ETRecord (export_llm +debug.generate_etrecord=true): each "
                  "finding names the PyTorch source line, module and buffer behind its op")
      ->check(CLI::ExistingFile);
  cmd->add_option("--source-root", o->sourceRoot,
                  "With --etrecord: show source paths relative to this directory (also matched "
                  "by name inside the exporting machine's paths)");
  cmd->add_option("--model-explorer", o->modelExplorer,
                  "With --etrecord: also write a Model Explorer node-data overlay (JSON) of "
                  "each edge node's predicted placement, for --node_data_paths");
  cmd->add_flag("--numerics", o->numerics,
                "Also run the model (weights read) at fp32 and at the ANE's fp16 on sample "
                "inputs and measure where fp16 leaves fp32: ANE-NUM-001 names the ops where it "
                "starts, ANE-DTYPE-005 states each square's largest |x|, and the verdict is "
                "wrong-numerics when the outputs are lost");
  cmd->add_option("--inputs", o->inputsNpz,
                  "With --numerics: inputs from a .npz (NAME for every step, step<k>/NAME for "
                  "step k); inputs it does not give are drawn from --seed")
      ->check(CLI::ExistingFile);
  cmd->add_option("--text", o->text,
                  "With --numerics: run an LLM decode program on this text's tokens "
                  "(--tokenizer), token k at position k, instead of a random draw")
      ->check(CLI::ExistingFile);
  cmd->add_option("--tokenizer", o->tokenizer,
                  "With --text: the model's tokenizer.json (byte-level BPE)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--steps", o->steps,
                  "With --numerics: steps to run, states carried (default 8, or the steps of "
                  "--inputs)")
      ->check(integerIn(1, kMaxSteps));
  cmd->add_option("--seed", o->seed, "With --numerics: seed of the random inputs (default 0)")
      ->check(unsignedIn(0, UINT64_MAX));
  cmd->add_option("--baseline", o->baseline,
                  "Gate against a recorded check (--json -o B.json or --save-baseline B.json): "
                  "exit 1 when the ANE share of ops or FLOPs drops, boundaries or Core ML "
                  "delegates grow, or a new at-risk or blocking finding appears; prints the "
                  "differences (text, json, or sarif with baselineState)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--save-baseline", o->saveBaseline,
                  "Also record this check as a baseline (the JSON report) in this file");
  CLI::Option *tolerance =
      cmd->add_option("--residency-tolerance", o->residencyTolerance,
                      "With --baseline: percentage points the ANE share of ops or FLOPs of a "
                      "function may drop before the gate fails (default 0)")
          ->check(realIn(0, 100));
  cmd->add_flag("--placement", o->placement,
                "Text output: also list every op with its predicted placement and rules");
  cmd->footer("Weight files are never opened (but with --numerics). Rules: 'anefit rules' or "
              "docs/rules.md.\n"
              "Exit codes: 0 no finding at or above --fail-on, 1 findings, 2 usage or input "
              "error. With --baseline: 0 nothing got worse, 1 something did, 2 a baseline "
              "that is not a check report of this model with these options.");
  cmd->callback([o, &result, failOn, tolerance] {
    o->failOnGiven = failOn->count() > 0;
    o->toleranceGiven = tolerance->count() > 0;
    result.exitCode = runGuarded([&] { return runCheck(*o); });
  });
}

} // namespace anefit::cli
