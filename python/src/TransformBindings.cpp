//===- TransformBindings.cpp - anefit.fix and anefit.split ----------------===//
//
// `fix` and `split` run the libraries behind `anefit fix` and `anefit split`
// (fix/Fix.h and FixFile.h, partition/Split.h) and return what they
// found as objects: the pipeline, the changes, the checks before and after
// and the proof in the interpreter (per Core ML delegate for a .pte); the
// plan, its skip list for ExecuTorch's CoreMLPartitioner and the proof of
// each split. Outputs follow the command
// line's output policy (atomic, never over or inside an input).
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"

#include "fix/Fix.h"
#include "fix/FixFile.h"
#include "fix/Quality.h"
#include "io/ETRecord.h"
#include "io/ModelIO.h"
#include "partition/PlanJson.h"
#include "partition/Split.h"
#include "probe/Probe.h"
#include "report/Sources.h"
#include "runtime/Tensor.h"
#include "support/Error.h"
#include "support/FileSystem.h"

#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <variant>

namespace anefit::python {
namespace {

namespace fs = std::filesystem;
using ModelArg = std::variant<PyModel, fs::path>;

PyModel modelOf(const ModelArg &target, bool openWeights) {
  if (auto *m = std::get_if<PyModel>(&target)) {
    if (openWeights && !m->weightsOpen)
      throw InputError(m->model->sourcePath +
                       ": the model was loaded with weights=False; load it with its weights");
    return *m;
  }
  return loadPyModel(pathText(std::get<fs::path>(target)), openWeights);
}

std::string verificationName(FixVerification::Status s) {
  switch (s) {
  case FixVerification::Status::NotRun:
    return "not-run";
  case FixVerification::Status::Skipped:
    return "skipped";
  case FixVerification::Status::Same:
    return "same";
  case FixVerification::Status::Different:
    return "different";
  case FixVerification::Status::Measured:
    return "measured";
  case FixVerification::Status::TooLossy:
    return "too-lossy";
  case FixVerification::Status::Unmeasured:
    return "unmeasured";
  }
  return "not-run";
}

std::vector<std::string> diagnosticLines(const Diagnostics &ds) {
  std::vector<std::string> out;
  for (const Diagnostic &d : ds)
    out.push_back(d.str());
  return out;
}

/// What `fix` returns; the fixed model is shared with the Model it exposes.
struct PyFixResult {
  std::string path;
  std::string pipeline;
  std::vector<std::string> pickedFor;
  std::vector<std::string> changes;
  std::vector<std::string> diagnostics;
  std::vector<std::string> verifierDiagnostics;
  std::string stateMapJson;
  std::map<std::string, std::string> carries; ///< input fed from output
  std::string verification;
  std::string skipReason;
  int64_t steps = 0;
  size_t compared = 0;
  size_t nonFinite = 0;
  std::string firstNonFinite;
  double maxAbsDiff = 0;
  double meanAbsDiff = 0;
  std::string top1Output;
  size_t top1Agree = 0, top1Rows = 0;
  double relError = 0;
  bool lossy = false;
  std::string roundedPasses;
  double roundedMaxAbsDiff = 0;
  std::vector<std::string> notRun;
  /// Per stage ("check", then each pass): per function its residency.
  std::vector<nb::dict> residency;
  std::string firstMismatch;
  bool verifies = false;
  bool ok = false;
  nb::object before;
  nb::object after;
  nb::object model;
  std::optional<std::string> output;
  std::optional<std::string> stateMapPath;
  /// FixVerification::originalAtFp16 / fixedAtFp16 (None when not measured).
  nb::object originalAtFp16;
  nb::object fixedAtFp16;
  bool fp16Refused = false;
  bool nonFiniteRefused = false;
  /// fix(text=...): the perplexities on the text (None without one).
  nb::object text;
  /// What requantize was fitted to (None when it did not run lossily).
  nb::object calibration;
};

/// A PrecisionGap as a dict; None when it was not measured.
nb::object gapObject(const PrecisionGap &g) {
  if (!g.measured)
    return nb::none();
  nb::dict d;
  d["steps"] = g.steps;
  d["max_abs_diff"] = g.maxAbsDiff;
  d["mean_abs_diff"] = g.meanAbsDiff;
  d["output"] = g.widest;
  d["rel_error"] = g.reportedRelError();
  d["top1_agree"] = g.top1Agree;
  d["rows"] = g.rows;
  d["non_finite"] = g.nonFinite;
  d["collapsed_rows"] = g.collapsedRows;
  d["values_compared"] = g.compared;
  d["diverged"] = g.diverged();
  return d;
}

FixVerify verifyOption(const nb::handle &verify) {
  if (nb::isinstance<nb::bool_>(verify))
    return nb::cast<bool>(verify) ? FixVerify::Always : FixVerify::Never;
  if (nb::isinstance<nb::str>(verify) && nb::cast<std::string>(verify) == "auto")
    return FixVerify::Auto;
  failExpected("", "verify", "True, False or 'auto'", nb::cast<std::string>(nb::repr(verify)));
}

std::string
passesOption(const std::variant<std::monostate, std::string, std::vector<std::string>> &p) {
  if (auto *s = std::get_if<std::string>(&p))
    return *s;
  std::string out;
  if (auto *list = std::get_if<std::vector<std::string>>(&p))
    for (const std::string &name : *list)
      out += (out.empty() ? "" : ",") + name;
  return out;
}

/// The Python view of one fixModel result; `original` is the model fixed.
/// The ETRecord and source root of `etrecord=` / `source_root=`.
struct SourceArgs {
  std::optional<ETRecord> record;
  std::string root;
};

SourceArgs sourceArgs(const std::optional<fs::path> &etrecord,
                      const std::optional<fs::path> &sourceRoot) {
  if (sourceRoot && !etrecord)
    throw InputError("source_root: expected etrecord= as well, found none");
  SourceArgs a;
  if (etrecord)
    a.record = readETRecord(pathText(*etrecord));
  if (sourceRoot)
    a.root = pathText(*sourceRoot);
  return a;
}

PyFixResult fixResultObject(FixResult result, std::shared_ptr<const Model> original,
                            const SourceArgs &sources) {
  std::shared_ptr<const Model> fixed(std::move(result.fixed));
  // Findings in the user's source: before on the original, after on the
  // fixed model (it keeps the debug handles of the ops no pass replaced).
  if (sources.record) {
    report::attachSources(result.before, *original, *sources.record, sources.root);
    if (result.verifies() && fixed)
      report::attachSources(result.after, *fixed, *sources.record, sources.root);
  }
  PyFixResult r;
  r.path = original->sourcePath;
  r.pipeline = result.pipeline;
  r.pickedFor = result.pickedFor;
  r.changes = result.changes;
  r.diagnostics = diagnosticLines(result.diagnostics);
  r.verifierDiagnostics = diagnosticLines(result.verifierDiagnostics);
  r.verifies = result.verifies();
  r.ok = result.ok();
  if (!result.stateMap.empty())
    r.stateMapJson = result.stateMap.toJson();
  for (const StateMapEntry &e : result.stateMap.entries)
    r.carries[e.input] = e.output;
  const FixVerification &v = result.verification;
  r.verification = verificationName(v.status);
  r.skipReason = v.skipReason;
  r.steps = v.steps;
  if (v.status != FixVerification::Status::NotRun && v.status != FixVerification::Status::Skipped) {
    r.compared = v.comparison.compared();
    r.nonFinite = v.nonFinite();
    r.firstNonFinite =
        v.rounded.bothNonFinite() ? v.rounded.firstNonFinite() : v.comparison.firstNonFinite();
    r.maxAbsDiff = v.comparison.maxAbsDiff();
    r.meanAbsDiff = v.meanAbsDiff;
    r.top1Output = v.top1Output;
    r.top1Agree = v.top1Agree;
    r.top1Rows = v.top1Rows;
    r.relError = v.relError;
    r.roundedPasses = v.roundedPasses;
    r.roundedMaxAbsDiff = v.rounded.maxAbsDiff();
    if (!v.rounded.ok())
      r.firstMismatch = v.rounded.firstMismatch();
    if (!v.comparison.ok() && v.status == FixVerification::Status::Different)
      r.firstMismatch = v.comparison.firstMismatch();
  }
  r.lossy = result.lossy;
  r.notRun = result.notRun;
  r.originalAtFp16 = gapObject(v.originalAtFp16);
  r.fixedAtFp16 = gapObject(v.fixedAtFp16);
  r.fp16Refused = result.fp16Refused;
  r.nonFiniteRefused = result.nonFiniteRefused;
  r.text = nb::none();
  if (v.textMeasured && !v.original.runs.empty()) {
    nb::dict t;
    t["name"] = v.textName;
    t["predicted"] = v.original.predicted;
    t["original_fp32"] = v.original.runs[0].perplexity;
    t["original_top1"] = v.original.runs[0].top1Correct;
    const char *names[] = {"fixed_fp32", "fixed_fp16"};
    for (size_t i = 0; i < v.fixed.runs.size() && i < 2; ++i) {
      nb::dict run;
      run["perplexity"] = v.fixed.runs[i].perplexity;
      run["top1"] = v.fixed.runs[i].top1Correct;
      if (i < v.textAgree.size())
        run["agrees_with_original"] = v.textAgree[i];
      if (i < v.perplexityRise.size())
        run["rise"] = v.perplexityRise[i];
      t[names[i]] = std::move(run);
    }
    r.text = std::move(t);
  }
  r.calibration = nb::none();
  if (result.calibration.done || !result.calibration.failed.empty()) {
    nb::dict c;
    c["source"] = result.calibration.source;
    c["random"] = result.calibration.random;
    c["own_text"] = result.calibration.ownText;
    c["own_text_tokens"] = result.calibration.ownTextTokens;
    c["held_out_tokens"] = result.calibration.heldOutTokens;
    c["weights"] = result.calibration.weights;
    c["failed"] = result.calibration.failed;
    r.calibration = std::move(c);
  }
  for (const FixStage &stage : result.stages)
    for (const Residency &res : stage.residency) {
      nb::dict d;
      d["stage"] = stage.pass;
      d["function"] = res.function;
      d["ops"] = res.ops;
      d["ane_ops"] = res.aneOps;
      d["flops"] = res.flops;
      d["ane_flops"] = res.aneFlops;
      d["boundaries"] = res.boundaries;
      r.residency.push_back(std::move(d));
    }
  r.before = reportObject(std::move(result.before), std::move(original));
  r.after = r.verifies ? reportObject(std::move(result.after), fixed) : nb::none();
  r.model = nb::cast(PyModel{fixed, true, {}});
  return r;
}

/// What `fix` returns for a .pte written from a .pte.
struct PyProgramFixResult {
  std::vector<PyFixResult> delegates;
  bool ok = false;
  std::optional<std::string> output;
};

/// `fix(x.pte, y.pte)`: fix/FixFile.h fixFile, as `anefit fix x.pte
/// -o y.pte`; an in-memory delegate is fixed from the program it was read
/// from.
PyProgramFixResult fixProgram(const ModelArg &target, const std::string &output,
                              const FixOptions &options, bool force, const SourceArgs &sources) {
  std::string input = std::holds_alternative<PyModel>(target)
                          ? std::get<PyModel>(target).model->sourcePath
                          : pathText(std::get<fs::path>(target));
  FixFileOptions file;
  file.force = force;
  FixFileResult result;
  {
    nb::gil_scoped_release release;
    result = fixFile(input, output, options, file);
  }
  PyProgramFixResult p;
  for (FixedModel &m : result.models)
    p.delegates.push_back(fixResultObject(std::move(m.result), std::move(m.original), sources));
  p.ok = result.ok();
  if (result.ok())
    p.output = result.output;
  return p;
}

nb::object runFix(const ModelArg &target, const std::optional<fs::path> &out,
                  const std::variant<std::monostate, std::string, std::vector<std::string>> &passes,
                  nb::handle verify, int64_t steps, uint64_t seed, double atol, double rtol,
                  const std::string &precision, bool force, const std::string &goal,
                  const std::string &requantize, double maxRelError, double minTop1,
                  const std::string &chip, const std::string &os, const std::string &computeUnits,
                  const std::optional<fs::path> &etrecord,
                  const std::optional<fs::path> &sourceRoot, bool allowFp16Divergence,
                  bool allowNonFinite, const std::optional<fs::path> &text,
                  const std::optional<fs::path> &tokenizer, int64_t maxTokens, double maxPplRise,
                  const std::optional<std::string> &budget, int64_t window) {
  SourceArgs sources = sourceArgs(etrecord, sourceRoot);
  if (steps < 1)
    throw InputError("steps: expected a positive count, found " + std::to_string(steps));
  FixOptions options;
  options.passes = passesOption(passes);
  options.verify = verifyOption(verify);
  options.steps = steps;
  options.seed = seed;
  options.tolerance.atol = atol;
  options.tolerance.rtol = rtol;
  options.precision = runtime::parsePrecision(precision);
  options.goal = parseFixGoal(goal);
  applyTarget(chip, os, computeUnits, options.target);
  options.requantize = parseRequantize(requantize);
  options.minTop1 = minTop1;
  options.maxRelError = maxRelError;
  options.allowFp16Divergence = allowFp16Divergence;
  options.allowNonFinite = allowNonFinite;
  // text, tokenizer, max_tokens, max_ppl_rise and budget as fix's --text,
  // --tokenizer, --max-tokens, --max-ppl-rise and --budget.
  if (text.has_value() != tokenizer.has_value())
    throw InputError(text ? "text: expected tokenizer= beside it, found none"
                          : "tokenizer: expected text= beside it, found none");
  if (text) {
    QualityOptions q;
    readTextTokens(q, pathText(*text), pathText(*tokenizer), maxTokens);
    options.textTokens = std::move(q.tokens);
    options.tokenizerVocab = q.tokenizerVocab;
    options.textName = pathText(*text);
    if (window == 1 || window < 0)
      throw InputError("window: expected 0 (one window) or at least 2 tokens, found " +
                       std::to_string(window));
    options.textWindow = window;
  }
  if (!(maxPplRise >= 0))
    throw InputError("max_ppl_rise: expected a non-negative share, found " +
                     std::to_string(maxPplRise));
  options.maxPerplexityRise = maxPplRise;
  if (budget) {
    std::optional<uint64_t> bytes = runtime::MemoryBudget::parseLimit(*budget);
    if (!bytes || !*bytes)
      throw InputError("budget: expected a size such as 1G, 500M or 123456789, found '" + *budget +
                       "'");
    options.budget = *bytes;
  }
  std::string output = out ? pathText(*out) : std::string();
  if (!output.empty() && detectFormat(output) == ModelFormat::Pte)
    return nb::cast(fixProgram(target, output, options, force, sources));
  PyModel original = modelOf(target, /*openWeights=*/true);

  // The output policy of `anefit fix -o`, checked before the work.
  OutputOptions policy;
  std::string stateMapPath;
  if (!output.empty()) {
    policy = fixOutputPolicy(original.model->sourcePath, output, force);
    prepareFixOutput(output, policy);
  }

  FixResult result;
  {
    nb::gil_scoped_release release;
    result = fixModel(*original.model, options);
    // Written only when safe: it verifies and the proof found no difference.
    if (!output.empty() && result.ok())
      stateMapPath = writeFixedModel(result, output, policy);
  }
  PyFixResult r = fixResultObject(std::move(result), original.model, sources);
  if (!output.empty() && r.ok)
    r.output = output;
  if (!stateMapPath.empty())
    r.stateMapPath = stateMapPath;
  return nb::cast(std::move(r));
}

/// What `split` returns.
struct PySplitPlan {
  std::string json;
  std::string skipSnippet;
  std::vector<std::string> skipOps;
  std::vector<std::string> unmappedCpuOps;
  std::vector<std::string> writtenModels;
  /// Per function: {"function", "regions", "ane_regions", "boundaries", "plan_ms", "cpu_only_ms"}
  std::vector<nb::dict> functions;
  std::vector<nb::dict> verifications;
  bool ok = true;
  nb::object report;
};

PySplitPlan runSplit(const ModelArg &target, const std::optional<std::string> &function,
                     const std::optional<fs::path> &emitDir, bool verify, int64_t steps,
                     uint64_t seed, double boundaryMs, bool absorb, bool force,
                     const std::optional<fs::path> &etrecord,
                     const std::optional<fs::path> &sourceRoot) {
  SourceArgs sources = sourceArgs(etrecord, sourceRoot);
  if (steps < 1)
    throw InputError("steps: expected a positive count, found " + std::to_string(steps));
  if (verify && !emitDir)
    throw InputError("verify=True needs emit_dir (it runs the emitted region models)");
  partition::SplitOptions options;
  options.function = function.value_or("");
  options.partition.cost.boundaryMs = boundaryMs;
  options.partition.absorbSmallRegions = absorb;
  options.emitDir = emitDir ? pathText(*emitDir) : std::string();
  options.force = force;
  options.verify = verify;
  options.steps = steps;
  options.seed = seed;
  PyModel model = modelOf(target, /*openWeights=*/emitDir.has_value());

  partition::SplitResult result;
  {
    nb::gil_scoped_release release;
    result = partition::splitModel(*model.model, options);
  }
  // As the command line names it: the path given, else where the model was read.
  result.plan.modelPath = std::holds_alternative<fs::path>(target)
                              ? pathText(std::get<fs::path>(target))
                              : model.model->sourcePath;
  PySplitPlan p;
  if (sources.record) {
    report::SourceJoin join(*model.model, *sources.record, sources.root, result.plan.modelPath);
    p.json = report::renderPlanJsonWithSources(result.plan, options.partition.cost,
                                               emitDir.has_value(), join);
    report::attachSources(result.report, *model.model, *sources.record, sources.root);
  } else {
    p.json = partition::renderPlanJson(result.plan, options.partition.cost, emitDir.has_value());
  }
  p.skipSnippet = partition::skipListSnippet(result.plan);
  for (const partition::SkipOp &op : result.plan.skipOps)
    p.skipOps.push_back(op.atenOp);
  p.unmappedCpuOps = result.plan.unmappedCpuOps;
  p.writtenModels = result.writtenModels;
  for (const partition::FunctionPlan &fp : result.plan.functions) {
    nb::dict f;
    f["function"] = fp.function;
    f["regions"] = fp.regions.size();
    f["ane_regions"] = fp.aneRegions();
    f["boundaries"] = fp.boundaries.size();
    f["plan_ms"] = fp.planCostMs;
    f["cpu_only_ms"] = fp.cpuOnlyCostMs;
    p.functions.push_back(std::move(f));
  }
  for (const partition::SplitVerification &v : result.verifications) {
    nb::dict d;
    d["function"] = v.function;
    d["regions"] = v.regions;
    d["steps"] = v.steps;
    d["max_abs_diff"] = v.comparison.maxAbsDiff();
    d["ok"] = v.comparison.ok();
    p.verifications.push_back(std::move(d));
  }
  p.ok = result.ok();
  p.report = reportObject(std::move(result.report), model.model);
  return p;
}

} // namespace

void bindTransform(nb::module_ &m) {
  nb::class_<PyFixResult>(m, "FixResult",
                          "What :func:`fix` did: the passes, the changes, the checks before and "
                          "after, and the proof in the interpreter.")
      .def_ro("path", &PyFixResult::path,
              "Where the fixed model was read (``'x.pte#0'`` for a delegate of a program).")
      .def_ro("pipeline", &PyFixResult::pipeline,
              "The pass pipeline that ran; empty when no pass was picked.")
      .def_ro("picked_for", &PyFixResult::pickedFor,
              "Without ``passes``: the rules of the blocking findings the picked passes remove.")
      .def_ro("changes", &PyFixResult::changes, "One line per change the passes made.")
      .def_ro("diagnostics", &PyFixResult::diagnostics, "The passes' notes and warnings.")
      .def_ro("verifier_diagnostics", &PyFixResult::verifierDiagnostics,
              "The structural verifier's findings on the rewritten model.")
      .def_ro("verifies", &PyFixResult::verifies,
              "The rewritten model passed the structural verifier.")
      .def_ro("ok", &PyFixResult::ok,
              "It verifies and the interpreter found no difference: safe to use. Nothing is "
              "written otherwise.")
      .def_ro("verification", &PyFixResult::verification,
              "How the interpreter comparison ended: ``'same'``, ``'different'``, "
              "``'measured'`` (a lossy rewrite within ``max_rel_error`` and ``min_top1``), "
              "``'too-lossy'``, ``'unmeasured'`` (a lossy rewrite ``verify='auto'`` could not "
              "measure: not written; ``verify='never'`` writes it unmeasured), "
              "``'skipped'`` (``verify='auto'`` and the interpreter could not run the model) or "
              "``'not-run'``.")
      .def_ro("skip_reason", &PyFixResult::skipReason,
              "Why the comparison was skipped; empty otherwise.")
      .def_ro("steps", &PyFixResult::steps, "Prediction steps compared.")
      .def_ro("values_compared", &PyFixResult::compared, "Values compared over all steps.")
      .def_ro("non_finite", &PyFixResult::nonFinite,
              "Output values NaN (or the same infinity) in both models: not compared, so the "
              "rewrite is not proven there.")
      .def_ro("first_non_finite", &PyFixResult::firstNonFinite,
              "The first of them (\"main: step 0: output 'y': element 0 is nan in both\"); empty "
              "when none.")
      .def_ro("non_finite_refused", &PyFixResult::nonFiniteRefused,
              "``non_finite`` is not 0 and ``allow_non_finite`` was not given: not ``ok``, "
              "nothing written.")
      .def_ro("max_abs_diff", &PyFixResult::maxAbsDiff,
              "Largest absolute difference between original and fixed outputs.")
      .def_ro("mean_abs_diff", &PyFixResult::meanAbsDiff,
              "Mean absolute difference between original and fixed outputs.")
      .def_ro("top1_output", &PyFixResult::top1Output,
              "The widest float output (an LLM's logits), whose top-1 agreement is measured.")
      .def_ro("top1_agree", &PyFixResult::top1Agree,
              "Rows of ``top1_output`` whose argmax is the same in both models.")
      .def_ro("top1_rows", &PyFixResult::top1Rows, "Rows of ``top1_output`` compared.")
      .def_ro("rel_error", &PyFixResult::relError,
              "Relative RMS error of ``top1_output`` over every step compared.")
      .def_ro("rounded_passes", &PyFixResult::roundedPasses,
              "Passes that wrote weights exactly as the device rounds them (``requantize`` to "
              "fp16); when set, the proof compared the original with the model after them alone "
              "in fp16 mode (``rounded_max_abs_diff``), then that model with the fixed one.")
      .def_ro("rounded_max_abs_diff", &PyFixResult::roundedMaxAbsDiff,
              "Largest difference of the first step of a two-step proof; 0 when equal.")
      .def_ro("original_at_fp16", &PyFixResult::originalAtFp16,
              nb::sig("def original_at_fp16(self) -> dict[str, object] | None"),
              "The original at the ANE's precision (fp16, every op rounded) against itself at "
              "fp32, what the model means: ``max_abs_diff``, ``mean_abs_diff``, ``output`` (the "
              "widest), ``rel_error``, ``top1_agree`` of ``rows``, ``non_finite``, "
              "``collapsed_rows``, ``diverged``; None when not verified.")
      .def_ro("fixed_at_fp16", &PyFixResult::fixedAtFp16,
              nb::sig("def fixed_at_fp16(self) -> dict[str, object] | None"),
              "The fixed model at fp16 against the original at fp32, the same keys.")
      .def_ro("text", &PyFixResult::text, nb::sig("def text(self) -> dict[str, object] | None"),
              "With ``text=``: ``predicted`` (tokens predicted), ``original_fp32`` and "
              "``original_top1`` (the original's perplexity and top-1 hits), and "
              "``fixed_fp32``, ``fixed_fp16``: ``perplexity``, ``top1``, "
              "``agrees_with_original``, ``rise`` (share above the original's). None without "
              "a text.")
      .def_ro("calibration", &PyFixResult::calibration,
              nb::sig("def calibration(self) -> dict[str, object] | None"),
              "What a lossy ``requantize`` was fitted to: ``source``, ``random`` (a seeded "
              "draw, no text), ``weights``, ``failed`` (why it could not run). None otherwise.")
      .def_ro("fp16_refused", &PyFixResult::fp16Refused,
              "The fixed model's fp16 outputs are lost (``fixed_at_fp16['diverged']``) and "
              "``allow_fp16_divergence`` was not given: not ``ok``, nothing written.")
      .def_ro("lossy", &PyFixResult::lossy,
              "A pass changed values beyond rounding (``requantize`` other than fp16): the "
              "error is measured instead of held to ``atol``/``rtol``.")
      .def_ro("not_run", &PyFixResult::notRun,
              "Passes the goal called for that were not run, each with why.")
      .def_ro("residency", &PyFixResult::residency,
              nb::sig("def residency(self) -> list[dict[str, object]]"),
              "Predicted placement before the rewrite (``stage`` 'check') and after each "
              "pass: per function ``ops``, ``ane_ops``, ``flops``, ``ane_flops``, "
              "``boundaries``.")
      .def_ro("first_mismatch", &PyFixResult::firstMismatch,
              "The first value out of tolerance; empty when none.")
      .def_ro("carries", &PyFixResult::carries,
              "The state map: for each input a moved state became, the output to feed back "
              "into it after every prediction (``{input: output}``; start from zeros).")
      .def_ro("state_map_json", &PyFixResult::stateMapJson,
              "The state map as the JSON ``anefit fix`` writes beside the model; empty when "
              "no state moved.")
      .def_ro("before", &PyFixResult::before, nb::sig("def before(self) -> Report"),
              "The check of the original model.")
      .def_ro("after", &PyFixResult::after, nb::sig("def after(self) -> Report | None"),
              "The check of the rewritten model; None when it does not verify.")
      .def_ro("model", &PyFixResult::model, nb::sig("def model(self) -> Model"),
              "The rewritten model (in memory; :meth:`Model.save` writes it).")
      .def_ro("output", &PyFixResult::output,
              "Where the rewritten model was written; None when ``out`` was None or it was not "
              "safe to write.")
      .def_ro("state_map_path", &PyFixResult::stateMapPath,
              "Where the state map was written; None when no state moved or nothing was "
              "written.")
      .def("__repr__", [](const PyFixResult &r) {
        return "<anefit.FixResult pipeline='" + r.pipeline + "' verification=" + r.verification +
               " ok=" + (r.ok ? "True" : "False") + ">";
      });

  nb::class_<PyProgramFixResult>(
      m, "ProgramFixResult",
      "What :func:`fix` did to an ExecuTorch program (a ``.pte`` written from a ``.pte``): one "
      ":class:`FixResult` per Core ML delegate fixed.")
      .def_ro("delegates", &PyProgramFixResult::delegates,
              "One :class:`FixResult` per Core ML delegate, in program order (its ``path`` is "
              "``'x.pte#N'``); fixing stops at the first that is not ``ok``.")
      .def_ro("ok", &PyProgramFixResult::ok,
              "Every delegate's rewrite verifies and gives the same outputs: the program was "
              "written.")
      .def_ro("output", &PyProgramFixResult::output,
              "Where the program was written; None when it was not safe to write.")
      .def("__repr__", [](const PyProgramFixResult &r) {
        return "<anefit.ProgramFixResult delegates=" + std::to_string(r.delegates.size()) +
               " ok=" + (r.ok ? "True" : "False") + ">";
      });

  m.def("fix", &runFix, nb::arg("model"), nb::arg("out") = nb::none(),
        nb::arg("passes") = nb::none(), nb::arg("verify") = true, nb::arg("steps") = 8,
        nb::arg("seed") = 0, nb::arg("atol") = 1e-4, nb::arg("rtol") = 1e-3,
        nb::arg("precision") = "fp32", nb::arg("force") = false, nb::arg("goal") = "compile",
        nb::arg("requantize") = "keep", nb::arg("max_rel_error") = 0.05, nb::arg("min_top1") = 0.0,
        nb::arg("chip") = "any", nb::arg("os") = "any", nb::arg("compute_units") = "cpu_and_ne",
        nb::arg("etrecord") = nb::none(), nb::arg("source_root") = nb::none(),
        nb::arg("allow_fp16_divergence") = false, nb::arg("allow_non_finite") = false,
        nb::arg("text") = nb::none(), nb::arg("tokenizer") = nb::none(),
        nb::arg("max_tokens") = 300, nb::arg("max_ppl_rise") = kDefaultMaxPerplexityRise,
        nb::arg("budget") = nb::none(), nb::arg("window") = 0,
        nb::sig("def fix(model: Model | str | os.PathLike[str], out: str | os.PathLike[str] | "
                "None = None, passes: str | list[str] | None = None, verify: bool | str = True, "
                "steps: int = 8, seed: int = 0, atol: float = 0.0001, rtol: float = 0.001, "
                "precision: str = 'fp32', force: bool = False, goal: str = 'compile', "
                "requantize: str = 'keep', max_rel_error: float = 0.05, min_top1: float = 0.0, "
                "chip: str = 'any', os: str = "
                "'any', compute_units: str = 'cpu_and_ne', etrecord: str | os.PathLike[str] | "
                "None = None, source_root: str | os.PathLike[str] | None = None, "
                "allow_fp16_divergence: bool = False, allow_non_finite: bool = False, "
                "text: str | os.PathLike[str] | None = None, tokenizer: str | "
                "os.PathLike[str] | None = None, max_tokens: int = 300, max_ppl_rise: float = "
                "0.1, budget: str | None = None, window: int = 0) -> FixResult | ProgramFixResult"),
        "Rewrites a copy of the model so the ANE takes it, as ``anefit fix`` does, and proves "
        "the rewrite by stepping original and rewritten model side by side in the interpreter "
        "(``steps`` predictions, states carried, random inputs from ``seed``, within "
        "``atol``/``rtol``). ``passes``: a pipeline (``'kv-write-static,decompose-sdpa'`` or a "
        "list), default the passes that remove the model's blocking findings; with ``goal='ane'`` "
        "also those that move ops placed off the ANE onto it. ``requantize``: what per-block "
        "weights become: ``'keep'`` or one of the requantize pass's forms (``'fp16'``, "
        "``'lut4'``, ...: ``anefit fix --help`` and docs/passes.md list them); a lossy "
        "rewrite is judged by its perplexity on a text (``max_ppl_rise``): the one given as "
        "``text``, else, for an LLM decode program, text the model writes itself (it is "
        "calibrated on another it writes); any other program's is kept when its widest output "
        "stays within ``max_rel_error`` (relative RMS) and its top-1 agrees on ``min_top1`` of "
        "rows. ``chip``, ``os``, ``compute_units``: the "
        "target the checks predict for, as in :func:`check`. Both models are also measured at "
        "the ANE's precision (fp16) against the original at fp32 (``original_at_fp16``, "
        "``fixed_at_fp16``); a rewrite whose fp16 outputs are lost is refused unless "
        "``allow_fp16_divergence``; one whose outputs are NaN in both models, where nothing "
        "is compared, unless ``allow_non_finite``. "
        "``verify``: "
        "True (an interpreter error raises InputError), False, or ``'auto'`` (as the command "
        "line: under 2 GB of weights, skipped when the interpreter cannot run the model). "
        "``out``: where to write the rewritten model (``.mlpackage``, ``.mlmodel``, ``.mil``) "
        "and its state map, only when the result is ``ok``; never over an input, an existing "
        "output only with ``force``. A ``.pte`` ``out`` from a ``.pte`` model (``'x.pte'``, "
        "``'x.pte#N'`` for one delegate, or a delegate :class:`Model`) fixes each Core ML "
        "delegate as a model of its own, ExecuTorch's buffer write-back carried through the "
        "proof, and writes a copy of the program with the rewritten payloads (every other "
        "byte kept); it returns a :class:`ProgramFixResult`, and a rewrite that changes a "
        "delegate's interface raises InputError. ``etrecord``: the export's ETRecord; the "
        "findings of ``before`` and ``after`` get their PyTorch ``source`` (``source_root`` "
        "shortens the paths). ``text`` and ``tokenizer`` (a tokenizer.json), ``max_tokens``, "
        "``max_ppl_rise``, ``budget``, ``window``: as ``anefit fix --text --tokenizer "
        "--max-tokens --max-ppl-rise --budget --window``: the original runs on the text's tokens "
        "teacher-forced to "
        "calibrate ``requantize`` (input energies, and each linear's inputs for error feedback) "
        "and a lossy rewrite is judged by its perplexity on the text (``text`` of the result); "
        "``budget`` (``'1G'``, ``'500M'``, bytes) bounds ``requantize='auto'``'s weights.");

  nb::class_<PySplitPlan>(m, "SplitPlan",
                          "What :func:`split` planned: ANE and CPU regions per function, the "
                          "skip list for ExecuTorch, the proof of each split.")
      .def_ro("skip_ops_for_coreml_delegation", &PySplitPlan::skipOps,
              "The aten ops to pass to ``CoreMLPartitioner(skip_ops_for_coreml_delegation=...)`` "
              "so ExecuTorch keeps them out of the Core ML delegate.")
      .def_ro("unmapped_cpu_ops", &PySplitPlan::unmappedCpuOps,
              "Ops planned on the CPU whose names carry no PyTorch node (not in the skip list).")
      .def_ro("written_models", &PySplitPlan::writtenModels,
              "Region models written to ``emit_dir``, in plan order.")
      .def_ro("functions", &PySplitPlan::functions,
              nb::sig("def functions(self) -> list[dict[str, object]]"),
              "Per function: ``function``, ``regions``, ``ane_regions``, ``boundaries``, "
              "``plan_ms`` and ``cpu_only_ms`` (the cost model's estimates).")
      .def_ro("verifications", &PySplitPlan::verifications,
              nb::sig("def verifications(self) -> list[dict[str, object]]"),
              "With ``verify=True``, per function: ``function``, ``regions``, ``steps``, "
              "``max_abs_diff``, ``ok`` (the region chain reproduced the function bit for bit "
              "in fp16).")
      .def_ro("ok", &PySplitPlan::ok, "No proof found a difference.")
      .def_ro("report", &PySplitPlan::report, nb::sig("def report(self) -> Report"),
              "The check the plan was made from.")
      .def(
          "to_json", [](const PySplitPlan &p) { return p.json; },
          "The plan as JSON, schema ``anefit.split/1`` (``anefit split --json``).")
      .def(
          "skip_list", [](const PySplitPlan &p) { return p.skipSnippet; },
          "Python for ExecuTorch's CoreMLPartitioner with the skip list, each op commented "
          "with the rules that blamed it (``anefit split --skip-list``).")
      .def("__repr__", [](const PySplitPlan &p) {
        return "<anefit.SplitPlan functions=" + std::to_string(p.functions.size()) +
               " skip_ops=" + std::to_string(p.skipOps.size()) + ">";
      });

  m.def(
      "probe",
      [](const std::filesystem::path &model, const std::filesystem::path &output,
         const std::string &chip, const std::string &os, const std::string &computeUnits,
         bool force) {
        probe::ProbeOptions options;
        applyTarget(chip, os, computeUnits, options.target);
        options.force = force;
        probe::ProbeResult result;
        {
          nb::gil_scoped_release release;
          result = probe::writeProbeKit(pathText(model), pathText(output), options);
        }
        return nb::module_::import_("json").attr("loads")(ane::renderProbePlan(result.plan));
      },
      nb::arg("model"), nb::arg("output"), nb::arg("chip") = "any", nb::arg("os") = "any",
      nb::arg("compute_units") = "cpu_and_ne", nb::arg("force") = false,
      "Writes the kit that settles an ANE failure on a Mac, as ``anefit probe MODEL -o "
      "OUTPUT`` does (docs/probe.md): the variants, ``plan.json``, ``README.md`` and "
      "``run_probe.py``. Returns the plan (``anefit.probe-plan/1``) as a dict; "
      ":func:`check` with ``observations=`` reads back what the Mac observed.");

  m.def("split", &runSplit, nb::arg("model"), nb::arg("function") = nb::none(),
        nb::arg("emit_dir") = nb::none(), nb::arg("verify") = false, nb::arg("steps") = 3,
        nb::arg("seed") = 0, nb::arg("boundary_ms") = partition::CostModel().boundaryMs,
        nb::arg("absorb") = true, nb::arg("force") = false, nb::arg("etrecord") = nb::none(),
        nb::arg("source_root") = nb::none(),
        "Plans how to split the model between the ANE and the CPU, as ``anefit split`` does: "
        "the checker's placement grouped into regions, small ANE runs absorbed into the CPU "
        "when the boundaries cost more (``boundary_ms`` each; ``absorb=False`` keeps them). "
        "``emit_dir``: write each region as a model of its own; ``verify=True`` then steps the "
        "region chain against the original in fp16 (bit for bit). ``etrecord``: the export's "
        "ETRecord; every op of the plan's JSON gets its PyTorch ``source`` and the report's "
        "findings theirs (``source_root`` shortens the paths).");
}

} // namespace anefit::python
