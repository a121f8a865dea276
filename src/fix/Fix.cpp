//===- Fix.cpp - Rewrite a model for the ANE and prove it -----------------===//
#include "fix/Fix.h"

#include "fix/Calibrate.h"
#include "ir/Clone.h"
#include "ir/Verifier.h"
#include "ops/OpVerifier.h"
#include "support/Error.h"
#include "transforms/Pass.h"
#include "transforms/Requantize.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <random>
#include <set>
#include <tuple>

namespace anefit {

std::vector<std::string> blockingRules(const ane::CheckReport &report) {
  std::vector<std::string> out;
  for (const ane::RuleInfo &r : ane::allRules())
    for (const ane::Finding &f : report.findings)
      if (f.rule == r.id &&
          (f.effect == ane::Effect::CompileFail || f.effect == ane::Effect::RuntimeFail ||
           (f.effect == ane::Effect::WrongNumerics &&
            r.confidence == ane::Confidence::AppleDocumented))) {
        out.emplace_back(r.code);
        break;
      }
  return out;
}

FixGoal parseFixGoal(std::string_view s) {
  if (s == "compile")
    return FixGoal::Compile;
  if (s == "ane")
    return FixGoal::Ane;
  throw InputError("--goal: expected compile or ane, found '" + std::string(s) + "'");
}

std::vector<std::string> requantizeChoices() {
  std::vector<std::string> out{"keep"};
  for (const RequantizeForm &f : requantizeForms())
    out.emplace_back(f.name);
  return out;
}

std::string parseRequantize(std::string_view s) {
  if (s == "keep" || findRequantizeForm(s))
    return std::string(s);
  throw InputError("requantize: expected keep, " + requantizeFormNames() + ", found '" +
                   std::string(s) + "'");
}

std::vector<std::string> residencyRules(const ane::CheckReport &report) {
  std::vector<std::string> out;
  for (const ane::RuleInfo &r : ane::allRules())
    for (const ane::Finding &f : report.findings)
      if (f.rule == r.id && (f.effect == ane::Effect::Fallback || f.effect == ane::Effect::Slow)) {
        out.emplace_back(r.code);
        break;
      }
  return out;
}

std::vector<Residency> residencyOf(const ane::CheckReport &report) {
  std::vector<Residency> out;
  for (const ane::FunctionReport &f : report.functions)
    out.push_back({f.name, f.ops.size(), f.aneOps, f.totalFlops, f.aneFlops, f.boundaries});
  return out;
}

namespace {

/// The value of `anefit fix --<option>` (FixOptions); "" when not given.
std::string askedValue(const FixOptions &options, std::string_view option) {
  if (option == "requantize" && options.requantize != "keep")
    return options.requantize;
  return "";
}

/// A parsed pipeline element written back as text ("name", or
/// "name{flag key=value}"), as parsePipeline reads it.
std::string pipelineText(const PipelineElement &e) {
  if (e.options.empty())
    return e.name;
  std::string opts;
  for (const auto &[k, v] : e.options)
    opts += (opts.empty() ? "" : " ") + (v == "true" ? k : k + "=" + v);
  return e.name + "{" + opts + "}";
}

const FixUse *fixUseOf(std::string_view pass) {
  for (const FixUse &u : fixUses())
    if (u.cliName == pass)
      return &u;
  return nullptr;
}

} // namespace

std::string fixPipeline(const FixOptions &options, const ane::CheckReport &before,
                        std::vector<std::string> *notRun) {
  if (!options.passes.empty())
    return options.passes;
  std::vector<std::string> rules = blockingRules(before);
  for (const std::string &r : residencyRules(before)) {
    // A pass the user asked for runs whatever the goal.
    bool asked = false;
    for (std::string_view p : passesRemoving(r))
      if (const FixUse *u = fixUseOf(p))
        asked = asked || (!u->askedBy.empty() && !askedValue(options, u->askedBy).empty());
    if (options.goal == FixGoal::Ane || asked)
      rules.push_back(r);
  }
  // A lossy form compresses dense weights too (weights=all): asked for, it
  // runs whether or not the model holds per-block weights.
  bool compress =
      !options.requantize.empty() && options.requantize != "keep" && options.requantize != "fp16";
  for (const FixUse &u : fixUses())
    if (compress && u.askedBy == "requantize")
      for (std::string_view r : u.removes)
        if (std::find(rules.begin(), rules.end(), r) == rules.end())
          rules.emplace_back(r);
  std::string picked;
  for (const PipelineElement &e : parsePipeline(pipelineRemoving(rules))) {
    std::string element = e.name;
    const FixUse *use = fixUseOf(e.name);
    if (use && !use->askedBy.empty()) {
      std::string value = askedValue(options, use->askedBy);
      if (value.empty()) {
        if (notRun)
          notRun->push_back(e.name +
                            ": it changes the model's values or size, so it runs only "
                            "when asked: --" +
                            std::string(use->askedBy));
        continue;
      }
      element += "{" + std::string(use->askedOption) + "=" + value;
      if (use->askedBy == "requantize" && compress)
        element += " weights=all";
      if (use->askedBy == "requantize" && options.budget)
        element += " budget=" + std::to_string(options.budget);
      element += "}";
    } else {
      element = pipelineText(e);
    }
    picked += (picked.empty() ? "" : ",") + element;
  }
  // Only clean-up passes left: nothing to do.
  bool any = false;
  for (const PipelineElement &e : parsePipeline(picked))
    if (const FixUse *u = fixUseOf(e.name))
      any = any || !u->isCleanup();
  return any ? picked : std::string();
}

namespace {

/// A model stepped beside the original: a rewrite of it (or the original
/// itself), the state map its moved states follow, and its precision.
struct Counterpart {
  const Model *model;
  const StateMap *map;
  runtime::Precision precision;
};

/// Steps every function of `original` at `precision` and its counterparts
/// in `others` for `steps` steps on the same random inputs, and calls
/// `each(at, outs, so)` after every step: `at` names the function and step,
/// `outs[0]` holds the original's outputs and `outs[i]` those of
/// `others[i - 1]`, `so` is the original's stepper (whose states moved
/// states are compared with).
template <class Each>
void stepTogether(const Model &original, runtime::Precision precision,
                  const std::vector<Counterpart> &others, int64_t steps, uint64_t seed, Each each) {
  std::mt19937_64 rng(seed);
  for (const auto &fnPtr : original.program->functions) {
    const Function &fo = *fnPtr;
    FunctionDescription desc = original.description.describe(fo.name);
    // The original keeps every state in the interpreter; a rewrite keeps
    // only the states it did not move, the others go around the host loop
    // of its state map. What the host itself carries (ExecuTorch's buffer
    // write-back around a .pte delegate) goes around for every model.
    runtime::CarryMap hostO = steps > 1 ? runtime::hostCarries(original, fo) : runtime::CarryMap{};
    std::vector<std::string> carried;
    for (const runtime::Carry &c : hostO)
      carried.push_back(c.input);
    auto options = [&](runtime::Precision p) {
      runtime::StepperOptions run;
      run.run.precision = p;
      // fp16 mode proves with the exact products: where the kernels would
      // put x on a grid for speed (runtime::roundedProductsTakeGrid16), a
      // rewrite that keeps the device's values would differ by the grid.
      run.run.exactProducts = p == runtime::Precision::FP16;
      run.run.source = original.sourcePath; // errors name the model's file
      return run;
    };
    runtime::Stepper so(fo, hostO, options(precision));
    std::vector<std::unique_ptr<runtime::Stepper>> steppers;
    for (const Counterpart &c : others) {
      const Function *ff = c.model->program->findFunction(fo.name);
      if (!ff)
        throw InputError("fix: function '" + fo.name + "' is missing after the rewrite");
      runtime::CarryMap host =
          steps > 1 ? runtime::hostCarries(*c.model, *ff) : runtime::CarryMap{};
      runtime::CarryMap moved = runtime::carriesFromStateMap(*c.map, *ff);
      host.insert(host.end(), moved.begin(), moved.end());
      steppers.push_back(std::make_unique<runtime::Stepper>(*ff, host, options(c.precision)));
    }
    for (int64_t step = 0; step < steps; ++step) {
      runtime::TensorMap inputs = runtime::randomInputs(fo, desc, rng, carried);
      std::vector<std::vector<runtime::NamedTensor>> outs{so.step(inputs)};
      for (auto &s : steppers)
        outs.push_back(s->step(inputs));
      each(fo.name + ": step " + std::to_string(step) + ": ", outs, so);
    }
  }
}

/// The widest float output (last axis) of `outs`: an LLM's logits.
std::string widestOutput(const std::vector<runtime::NamedTensor> &outs) {
  std::string name;
  int64_t widest = 1;
  for (const runtime::NamedTensor &t : outs)
    if (isFloat(t.tensor.dtype()) && t.tensor.rank() >= 1 &&
        t.tensor.dim(t.tensor.rank() - 1) > widest) {
      widest = t.tensor.dim(t.tensor.rank() - 1);
      name = t.name;
    }
  return name;
}

} // namespace

runtime::Comparison compareRewrite(const Model &original, const Model &fixed, const StateMap &map,
                                   int64_t steps, uint64_t seed, runtime::Tolerance tolerance,
                                   runtime::Precision precision, FixVerification *error) {
  runtime::Comparison cmp(tolerance);
  // Outputs declared fp16 (caches written back, fp16 logits): the
  // tolerance's fp16Ulps apply to them and to the states they write.
  std::set<std::string> fp16Outputs;
  if (original.program)
    for (const auto &fn : original.program->functions)
      for (const Value *v : fn->body->outputs)
        if (v->type.isTensor() && v->type.dtype() == DType::F16)
          fp16Outputs.insert(v->name);
  GapMeter meter;
  stepTogether(original, precision, {{&fixed, &map, precision}}, steps, seed,
               [&](const std::string &at,
                   const std::vector<std::vector<runtime::NamedTensor>> &outs,
                   const runtime::Stepper &so) {
                 cmp.compareOutputs(at, outs[0], outs[1], fp16Outputs);
                 if (error)
                   meter.add(outs[0], outs[1]);
                 for (const StateMapEntry &e : map.entries) {
                   const runtime::Tensor *was = so.states().find(e.state);
                   for (const runtime::NamedTensor &nt : outs[1])
                     if (was && nt.name == e.output)
                       cmp.compare(at + "state '" + e.state + "'", *was, nt.tensor,
                                   fp16Outputs.count(e.output) > 0);
                 }
               });
  if (error) {
    // The widest float output of the first function: an LLM's logits.
    PrecisionGap gap = meter.finish(steps);
    error->top1Output = gap.widest;
    error->top1Agree = gap.top1Agree;
    error->top1Rows = gap.rows;
    error->meanAbsDiff = gap.meanAbsDiff;
    error->relError = gap.relError;
  }
  return cmp;
}

void GapMeter::add(const std::vector<runtime::NamedTensor> &outR,
                   const std::vector<runtime::NamedTensor> &outM) {
  PrecisionGap &gap = gap_;
  if (gap.widest.empty())
    gap.widest = widestOutput(outR);
  for (const runtime::NamedTensor &x : outR)
    for (const runtime::NamedTensor &y : outM) {
      if (x.name != y.name || !isFloat(x.tensor.dtype()) || x.tensor.shape() != y.tensor.shape())
        continue;
      std::vector<float> u = x.tensor.toFloats(), v = y.tensor.toFloats();
      bool widest = x.name == gap.widest;
      for (size_t i = 0; i < u.size(); ++i) {
        if (!std::isfinite(u[i]))
          continue;
        ++gap.compared;
        if (!std::isfinite(v[i])) {
          ++gap.nonFinite;
          gap.widestLost = gap.widestLost || widest;
          continue;
        }
        double d = std::fabs(static_cast<double>(u[i]) - v[i]);
        sumAbs_ += d;
        gap.maxAbsDiff = std::max(gap.maxAbsDiff, d);
        if (widest) {
          err2_ += d * d;
          norm2_ += static_cast<double>(u[i]) * u[i];
        }
      }
      if (!widest || u.empty())
        continue;
      auto last = static_cast<std::ptrdiff_t>(x.tensor.dim(x.tensor.rank() - 1));
      for (size_t r = 0; r + static_cast<size_t>(last) <= u.size();
           r += static_cast<size_t>(last)) {
        auto rowU = u.begin() + static_cast<std::ptrdiff_t>(r);
        auto rowV = v.begin() + static_cast<std::ptrdiff_t>(r);
        auto [minU, maxU] = std::minmax_element(rowU, rowU + last);
        auto [minV, maxV] = std::minmax_element(rowV, rowV + last);
        // One value across a row of many: what an overflowed norm leaves
        // (rsqrt(inf) = 0 times anything).
        if (last > 1 && *minV == *maxV && *minU != *maxU)
          ++gap.collapsedRows;
        gap.top1Agree += std::max_element(rowU, rowU + last) - rowU ==
                         std::max_element(rowV, rowV + last) - rowV;
        ++gap.rows;
      }
    }
}

PrecisionGap GapMeter::finish(int64_t steps) const {
  PrecisionGap gap = gap_;
  gap.measured = true;
  gap.steps = steps;
  size_t finite = gap.compared - gap.nonFinite;
  gap.meanAbsDiff = finite ? sumAbs_ / static_cast<double>(finite) : 0;
  gap.relError = norm2_ > 0 ? std::sqrt(err2_ / norm2_) : (err2_ > 0 ? INFINITY : 0);
  return gap;
}

std::pair<PrecisionGap, PrecisionGap> measurePrecisionGaps(const Model &original,
                                                           const Model &fixed, const StateMap &map,
                                                           int64_t steps, uint64_t seed) {
  // One fp32 run of the original serves as the reference of both.
  GapMeter before, after;
  StateMap none;
  stepTogether(
      original, runtime::Precision::FP32,
      {{&original, &none, runtime::Precision::FP16}, {&fixed, &map, runtime::Precision::FP16}},
      steps, seed,
      [&](const std::string &, const std::vector<std::vector<runtime::NamedTensor>> &outs,
          const runtime::Stepper &) {
        before.add(outs[0], outs[1]);
        after.add(outs[0], outs[2]);
      });
  return {before.finish(steps), after.finish(steps)};
}

namespace {

/// A point of ANE share: rewrites add a few cheap ops on either side, which
/// is not worth a warning or another form (our threshold).
constexpr double kShareSlack = 0.01;

/// Runs one pipeline element on `model`.
PassResult runElement(Model &model, const std::string &element, const PassContext &context) {
  PassManager pm;
  pm.addPipeline(element, context);
  return pm.run(model);
}

/// The pipeline runs requantize to a lossy form (its `to`, auto by default).
bool requantizesLossily(const std::string &pipeline) {
  for (const PipelineElement &e : parsePipeline(pipeline))
    if (e.name == "requantize") {
      auto it = e.options.find("to");
      if (it == e.options.end() || it->second != "fp16")
        return true;
    }
  return false;
}

/// The text a fix measures quality on: the user's (FixOptions::textTokens),
/// or the model's own.
struct GateText {
  std::vector<int64_t> tokens;
  int64_t window = 0;
  int64_t tokenizerVocab = 0;
  std::string name;
};

/// The text's run of `model` at `precisions`, `who` ("the original") in
/// FixOptions::stepProgress.
QualityResult measureOnText(const Model &model, const GateText &text,
                            std::vector<runtime::Precision> precisions, const FixOptions &options,
                            const std::string &who, CalibrationRecorder *recorder = nullptr) {
  QualityOptions q;
  if (options.stepProgress)
    q.progress = [&, precisions](size_t run, int64_t done, int64_t total) {
      options.stepProgress(who + " on " + text.name + " at " +
                               (precisions[run] == runtime::Precision::FP16 ? "fp16" : "fp32"),
                           done, total);
    };
  q.tokens = text.tokens;
  q.tokenizerVocab = text.tokenizerVocab;
  q.window = text.window;
  q.precisions = std::move(precisions);
  if (recorder)
    q.opResults = recorder->hook();
  return measureQuality(model, q);
}

ane::CheckOptions checkOptions(const FixOptions &options) {
  ane::CheckOptions c;
  c.chip = options.target.chip;
  c.os = options.target.os;
  c.computeUnits = options.target.computeUnits;
  return c;
}

} // namespace

Diagnostics residencyDrops(const ane::CheckReport &beforeReport,
                           const ane::CheckReport &afterReport) {
  Diagnostics out;
  std::vector<Residency> before = residencyOf(beforeReport), after = residencyOf(afterReport);
  for (size_t f = 0; f < before.size() && f < after.size(); ++f) {
    const Residency &a = before[f], &b = after[f];
    double shareA = a.flops > 0 ? a.aneFlops / a.flops : 0;
    double shareB = b.flops > 0 ? b.aneFlops / b.flops : 0;
    if (shareB >= shareA - kShareSlack)
      continue;
    std::string rules;
    for (const ane::RuleInfo &r : ane::allRules()) {
      auto fires = [&](const ane::CheckReport &rep) {
        return std::any_of(rep.findings.begin(), rep.findings.end(), [&](const ane::Finding &x) {
          return x.rule == r.id && x.function == a.function;
        });
      };
      if (fires(afterReport) && !fires(beforeReport))
        rules +=
            (rules.empty() ? "" : ", ") + std::string(r.code) + " (" + std::string(r.title) + ")";
    }
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "the rewrite lowers the predicted ANE share of FLOPs from %.1f%% to %.1f%%",
                  100 * shareA, 100 * shareB);
    out.push_back({Diagnostic::Severity::Warning, a.function, "",
                   std::string(buf) + (rules.empty() ? "" : "; newly found: " + rules)});
  }
  return out;
}

FixResult fixModel(const Model &model, const FixOptions &options) {
  if (options.steps < 1)
    throw InputError("fix: expected a positive step count, found " + std::to_string(options.steps));
  if (!model.program)
    throw InputError(model.sourcePath + ": expected an ML Program, found a model without one");
  auto stage = [&](std::string_view name) {
    if (options.progress)
      options.progress(name);
  };
  FixResult result;
  stage("check");
  result.before = ane::checkModel(model, checkOptions(options));

  stage("rewrite");
  result.pipeline = fixPipeline(options, result.before, &result.notRun);
  if (options.passes.empty()) {
    std::vector<std::string> rules = blockingRules(result.before);
    for (const std::string &r : residencyRules(result.before))
      rules.push_back(r);
    for (const PipelineElement &e : parsePipeline(result.pipeline))
      for (const FixUse &u : fixUses())
        if (u.cliName == e.name)
          for (std::string_view r : u.removes)
            if (std::find(rules.begin(), rules.end(), r) != rules.end() &&
                std::find(result.pickedFor.begin(), result.pickedFor.end(), r) ==
                    result.pickedFor.end())
              result.pickedFor.emplace_back(r);
  }
  result.fixed = cloneModel(model);
  result.stages.push_back({"check", residencyOf(result.before)});

  // The original on the text (its perplexity, and requantize's
  // calibration when a lossy form runs), else a seeded draw to calibrate
  // on. A text or tokenizer that does not fit the model fails here, before
  // anything is rewritten.
  WeightCalibration calibration;
  bool lossyRequantize = requantizesLossily(result.pipeline);
  std::optional<QualityResult> originalText;
  GateText gate{options.textTokens, options.textWindow, options.tokenizerVocab, options.textName};
  if (!options.textTokens.empty() || lossyRequantize) {
    stage("calibrate");
    const Function *fn = model.defaultFunction();
    // Rows the fit never sees, for the output errors auto and the damping
    // are chosen by: text the model writes from another seed than the
    // calibration's and the gate's (with --text too: error feedback
    // flatters its fit on the text's own rows).
    auto addHeldOutRows = [&](int64_t window) {
      CalibrationRecorder held(*fn);
      OwnTextOptions check;
      check.seed = options.seed + 2;
      check.tokens = kHeldOutTokens;
      check.window = window;
      check.opResults = held.hook();
      if (options.stepProgress)
        check.progress = [&](int64_t done, int64_t total) {
          options.stepProgress("the original writing its own text to check the fit on", done,
                               total);
        };
      try {
        OwnText checkText = writeOwnText(model, check);
        addHeldOut(calibration, held.finish("", false),
                   std::to_string(checkText.tokens.size()) + " tokens the model wrote from seed " +
                       std::to_string(check.seed));
        result.calibration.heldOutTokens = static_cast<int64_t>(checkText.tokens.size());
      } catch (const InputError &) {
        // Not a decode step it can write with: auto chooses by the
        // calibration's own rows.
      }
    };
    if (!options.textTokens.empty()) {
      std::optional<CalibrationRecorder> recorder;
      if (fn && lossyRequantize)
        recorder.emplace(*fn);
      originalText = measureOnText(model, gate, {runtime::Precision::FP32}, options, "the original",
                                   recorder ? &*recorder : nullptr);
      if (recorder) {
        calibration = recorder->finish(
            options.textName + "'s first " + std::to_string(options.textTokens.size()) +
                " tokens, teacher-forced" +
                (originalText->windows > 1
                     ? " in " + std::to_string(originalText->windows) + " windows"
                     : std::string()),
            false);
        addHeldOutRows(kOwnTextWindow);
      }
    } else if (fn) {
      // No text: an LLM decode step writes its own, and is calibrated on
      // what it reads there; anything else on the seeded draw.
      CalibrationRecorder recorder(*fn);
      OwnTextOptions own;
      own.seed = options.seed;
      own.opResults = recorder.hook();
      std::string writing = "the original writing its own text to calibrate on";
      if (options.stepProgress)
        own.progress = [&](int64_t done, int64_t total) {
          options.stepProgress(writing, done, total);
        };
      std::optional<OwnText> text;
      try {
        text = writeOwnText(model, own);
      } catch (const InputError &) {
        // Not a decode step the model can write with: the seeded draw below.
      }
      if (text) {
        int64_t sequences =
            (static_cast<int64_t>(text->tokens.size()) + text->window - 1) / text->window;
        calibration = recorder.finish(
            std::to_string(text->tokens.size()) + " tokens the model wrote itself (" +
                std::to_string(sequences) + " sequences of up to " + std::to_string(text->window) +
                " from position 0, each token drawn from its " + std::to_string(kOwnTextTopK) +
                " likeliest; seed " + std::to_string(options.seed) + ")",
            false);
        result.calibration.ownText = true;
        result.calibration.ownTextTokens = static_cast<int64_t>(text->tokens.size());
        result.calibration.ownTextWindow = text->window;
        result.calibration.ownTextShortenedBy = text->shortenedBy;
        addHeldOutRows(text->window);
        // The lossy gate reads another text of its own, not the one the
        // palettes were fitted to (on that one feedback flatters them).
        own.seed = options.seed + 1;
        own.tokens = kDefaultMaxTextTokens;
        own.window = text->window;
        own.opResults = nullptr;
        writing = "the original writing its own text to judge on";
        try {
          OwnText held = writeOwnText(model, own);
          gate = {held.tokens, held.window, 0,
                  "its own text from seed " + std::to_string(own.seed)};
          originalText =
              measureOnText(model, gate, {runtime::Precision::FP32}, options, "the original");
        } catch (const InputError &e) {
          // Then the random steps judge it, as before there was a text.
          result.calibration.gateFailed = e.what();
        }
      } else {
        try {
          calibration = calibrateOnRandomInputs(model, "", options.steps, options.seed);
        } catch (const InputError &e) {
          result.calibration.failed = e.what();
        }
      }
    }
    if (lossyRequantize) {
      result.calibration.done = result.calibration.failed.empty();
      result.calibration.source = calibration.source;
      result.calibration.random = calibration.random;
      result.calibration.weights = calibration.weights.size();
    }
  }
  PassContext context;
  if (result.calibration.done)
    context.calibration = &calibration;
  // One pass at a time, so each pass's residency can be reported.
  std::string pipeline;
  for (const PipelineElement &e : parsePipeline(result.pipeline)) {
    std::string element = pipelineText(e);
    PassResult passes =
        runElement(*result.fixed, element, e.name == "requantize" ? context : PassContext{});
    pipeline += (pipeline.empty() ? "" : ",") + element;
    result.changes.insert(result.changes.end(), passes.changes.begin(), passes.changes.end());
    result.diagnostics.insert(result.diagnostics.end(), passes.diagnostics.begin(),
                              passes.diagnostics.end());
    result.stateMap.entries.insert(result.stateMap.entries.end(), passes.stateMap.entries.begin(),
                                   passes.stateMap.entries.end());
    result.stateMap.keptStates.insert(result.stateMap.keptStates.end(),
                                      passes.stateMap.keptStates.begin(),
                                      passes.stateMap.keptStates.end());
    result.lossy = result.lossy || passes.lossy;
    result.exactInFp32Only = result.exactInFp32Only || passes.exactInFp32Only;
    if (passes.exactInFp16)
      result.roundedPasses.push_back(element);
    if (!hasErrors(verifyModel(*result.fixed)))
      result.stages.push_back(
          {e.name, residencyOf(ane::checkModel(*result.fixed, checkOptions(options)))});
  }

  if (options.passes.empty())
    result.pipeline = pipeline;
  result.verifierDiagnostics = verifyModel(*result.fixed);
  if (result.verifies() && result.fixed->program) {
    Diagnostics states = verifyStateUses(*result.fixed->program);
    result.verifierDiagnostics.insert(result.verifierDiagnostics.end(), states.begin(),
                                      states.end());
  }
  if (!result.verifies())
    return result;
  stage("check");
  result.after = ane::checkModel(*result.fixed, checkOptions(options));
  for (Diagnostic &d : residencyDrops(result.before, result.after))
    result.diagnostics.push_back(std::move(d));

  bool verify =
      options.verify == FixVerify::Always ||
      (options.verify == FixVerify::Auto && result.before.weightBytes <= kAutoVerifyWeightBytes);
  if (!verify) {
    // A lossy rewrite is written unmeasured only when asked (Never).
    if (result.lossy && options.verify == FixVerify::Auto) {
      result.verification.status = FixVerification::Status::Unmeasured;
      result.verification.skipReason = "the weights are over 2 GB, where verify is off by default";
    }
    return result;
  }
  stage("verify");
  FixVerification &v = result.verification;
  v.steps = options.steps;
  try {
    const Model *baseline = &model;
    std::unique_ptr<Model> rounded;
    if (!result.roundedPasses.empty() && !result.lossy) {
      // Weights written at fp16 equal the original's only as the device
      // rounds them: prove that step in fp16 mode on its own, then the rest
      // against it in the precision asked for.
      PassManager pm;
      for (const std::string &e : result.roundedPasses) {
        pm.addPipeline(e);
        v.roundedPasses += (v.roundedPasses.empty() ? "" : ",") + e;
      }
      rounded = cloneModel(model);
      pm.run(*rounded);
      v.rounded = compareRewrite(model, *rounded, StateMap{}, options.steps, options.seed,
                                 options.tolerance, runtime::Precision::FP16);
      baseline = rounded.get();
    }
    // A rewrite equal only up to fp32 rounding is held equal in fp32; its
    // fp16 program is measured against the original at fp32 below.
    runtime::Precision precision =
        result.exactInFp32Only ? runtime::Precision::FP32 : options.precision;
    v.precision = precision;
    v.comparison = compareRewrite(*baseline, *result.fixed, result.stateMap, options.steps,
                                  options.seed, options.tolerance, precision, &v);
    if (!result.lossy)
      v.status = v.comparison.ok() && v.rounded.ok() ? FixVerification::Status::Same
                                                     : FixVerification::Status::Different;
    else
      v.status =
          v.relError <= options.maxRelError && static_cast<double>(v.top1Agree) >=
                                                   options.minTop1 * static_cast<double>(v.top1Rows)
              ? FixVerification::Status::Measured
              : FixVerification::Status::TooLossy;
    // Values NaN in both models hold no difference to measure: the rewrite
    // is not proven there.
    result.nonFiniteRefused = v.nonFinite() > 0 && !options.allowNonFinite;
    // The proofs above compare two programs at one precision. The ANE
    // computes in fp16 and the model means fp32: measure both programs
    // there, the original to show what the device would answer without the
    // rewrite, the fixed one to refuse a program whose fp16 outputs are lost.
    stage("verify at fp16");
    std::tie(v.originalAtFp16, v.fixedAtFp16) =
        measurePrecisionGaps(model, *result.fixed, result.stateMap, options.steps, options.seed);
    result.fp16Refused = v.fixedAtFp16.diverged() && !options.allowFp16Divergence;
    if (originalText) {
      // The quality that matters: the text's perplexity, the fixed model at
      // fp32 and at the ANE's fp16 against the original at fp32.
      stage("measure on the text");
      v.original = *originalText;
      v.fixed =
          measureOnText(*result.fixed, gate, {runtime::Precision::FP32, runtime::Precision::FP16},
                        options, "the fixed model");
      v.textMeasured = true;
      v.textName = gate.name;
      const QualityRun &o = v.original.runs.front();
      bool within = true;
      for (const QualityRun &f : v.fixed.runs) {
        size_t agree = 0;
        for (size_t k = 0; k < f.top1.size() && k < o.top1.size(); ++k)
          agree += f.top1[k] == o.top1[k];
        v.textAgree.push_back(agree);
        double rise = f.perplexity / o.perplexity - 1;
        if (!std::isfinite(rise))
          rise = INFINITY;
        v.perplexityRise.push_back(rise);
        within = within && rise <= options.maxPerplexityRise;
      }
      if (result.lossy)
        v.status = within ? FixVerification::Status::Measured : FixVerification::Status::TooLossy;
    }
  } catch (const InputError &e) {
    // An op without a kernel (or similar) should not keep users from a
    // rewrite they did not ask to verify; FixVerify::Always insists.
    if (options.verify == FixVerify::Always)
      throw;
    v.status =
        result.lossy ? FixVerification::Status::Unmeasured : FixVerification::Status::Skipped;
    v.skipReason = e.what();
  }
  return result;
}

} // namespace anefit
