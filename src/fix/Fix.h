//===- Fix.h - Rewrite a model for the ANE and prove it ---------*- C++ -*-===//
//
// The library behind `anefit fix`: checks a model, runs a pass pipeline on a
// copy, verifies the copy's structure, checks it again and proves the
// rewrite by stepping original and rewritten model side by side in the
// interpreter, carrying moved states the way the state map tells a host to.
// Options in, a result out; nothing is printed or written (the caller saves
// `FixResult::fixed` and the state map where it wants).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ane/Checker.h"
#include "fix/Quality.h"
#include "ir/Model.h"
#include "ir/StateMap.h"
#include "runtime/Stepper.h"
#include "support/Diagnostic.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace anefit {

/// Whether fixModel steps both models in the interpreter.
enum class FixVerify {
  /// Verify when the weights are at most kAutoVerifyWeightBytes; a model the
  /// interpreter cannot run (an op without a kernel, ...) is skipped, not
  /// failed.
  Auto,
  /// Always verify; a model the interpreter cannot run is an InputError.
  Always,
  Never,
};

/// What `fix` picks passes for when FixOptions::passes is empty.
enum class FixGoal {
  /// The passes that remove blocking findings (compile-fail, runtime-fail):
  /// the model compiles for the ANE, changed as little as possible.
  Compile,
  /// Also the passes that bring ops placed off the ANE onto it (fallback and
  /// slow findings): most of the compute on the ANE, few boundaries.
  Ane,
};

/// "compile" / "ane" -> FixGoal; throws InputError otherwise.
FixGoal parseFixGoal(std::string_view s);

/// The values `--requantize` takes: "keep", then the requantize pass's
/// forms (transforms/RequantizeForms.def).
std::vector<std::string> requantizeChoices();

/// `s` if it is one of requantizeChoices(); throws InputError otherwise.
std::string parseRequantize(std::string_view s);

/// With a text (FixOptions::textTokens), a lossy rewrite is kept only when
/// its perplexity on the text, at fp32 and at fp16, is at most this share
/// above the original's at fp32 (ours: 10 %, the quality Apple's mixed
/// palettes keep against block int4 on WikiText-2, SmolLM2-1.7B: 13.41
/// against 14.17; `fix --max-ppl-rise`).
inline constexpr double kDefaultMaxPerplexityRise = 0.10;

/// Above this many weight bytes, FixVerify::Auto does not verify.
inline constexpr uint64_t kAutoVerifyWeightBytes = uint64_t(2) << 30;

/// fp16 steps an fp16-declared output or state of a rewrite may differ by
/// beyond --atol/--rtol (ours): a rewrite exact in real arithmetic moves an
/// fp32 result by a few fp32 steps, enough to round a cache entry written
/// back in fp16 to its neighbour; steps that read that entry move by about
/// as much again. Measured: SmolLM2-135M's 4w export after scale-norm,
/// cache entries 2 steps apart, perplexity within 0.02 %.
inline constexpr double kFp16OutputUlps = 2;

struct FixOptions {
  /// Pass pipeline (Pass.h syntax); empty picks the passes from the model's
  /// blocking findings (fixPipeline).
  std::string passes;
  /// The target the checks before, between and after the passes predict
  /// for (chip, OS, compute units); `function` and `ignore` are not used.
  ane::CheckOptions target;
  FixGoal goal = FixGoal::Compile;
  /// How per-block weights are rewritten (the requantize pass's `to`, one
  /// of requantizeChoices()); empty or "keep": they are not. With "auto",
  /// each weight takes the smallest form within the pass's
  /// error target, under the weight budget (`budget`). Lossy forms are
  /// never picked without it; they also rewrite the dense weights of
  /// linears, convs and matmuls (requantize weights=all), so a model
  /// without per-block weights (an fp16 export) is compressed the same way.
  std::string requantize;
  /// A real text's tokens (`fix --text T --tokenizer J`, readTextTokens):
  /// the original runs on them teacher-forced to calibrate requantize
  /// (WeightCalibration: each layer's input channel energies) and to give
  /// its perplexity; the fixed model is measured on them at fp32 and fp16.
  /// Empty: calibration on a seeded random draw, and the lossy gate on
  /// random steps (maxRelError, minTop1).
  std::vector<int64_t> textTokens;
  int64_t tokenizerVocab = 0;
  /// Tokens per window of the text (QualityOptions::window; 0: one run).
  int64_t textWindow = 0;
  /// The text's name, for messages.
  std::string textName;
  /// With a text, the lossy gate: perplexity at most this share above the
  /// original's (kDefaultMaxPerplexityRise).
  double maxPerplexityRise = kDefaultMaxPerplexityRise;
  /// requantize auto's budget of stored weight bytes (0: ANE-PROG-001's
  /// iPhone limit; the pass's `budget`).
  uint64_t budget = 0;
  /// A lossy rewrite (PassResult::lossy) is kept only when its widest
  /// output (an LLM's logits) stays within this relative RMS error of the
  /// original's ...
  double maxRelError = 0.05;
  /// ... and its top-1 agrees with the original's on at least this share of
  /// rows (0: not required; random-weight models have near ties).
  double minTop1 = 0;
  FixVerify verify = FixVerify::Auto;
  /// Write a rewrite whose outputs at the ANE's precision (fp16) are lost
  /// (PrecisionGap::diverged) where the original's at fp32 are not; by
  /// default such a rewrite is refused (FixResult::ok is false).
  bool allowFp16Divergence = false;
  /// Write a rewrite whose proof left output values uncompared because they
  /// are NaN (or the same infinity) in both models
  /// (runtime::Comparison::bothNonFinite); by default such a rewrite is
  /// refused (FixResult::ok is false): nothing shows it computes them right.
  bool allowNonFinite = false;
  /// Prediction steps compared, states carried between them (>= 1).
  int64_t steps = 8;
  /// Seed of the random inputs of the comparison.
  uint64_t seed = 0;
  /// The comparison's tolerance; fp16Ulps applies to outputs and states
  /// declared fp16 (kFp16OutputUlps).
  runtime::Tolerance tolerance{1e-4, 1e-3, kFp16OutputUlps};
  /// Interpreter precision of the comparison (fp16: every float op result
  /// rounded to fp16, as the ANE computes).
  runtime::Precision precision = runtime::Precision::FP32;
  /// Called as each stage starts ("check", "rewrite", "verify"); may be empty.
  std::function<void(std::string_view stage)> progress;
  /// Called after each step of the long runs, with what runs ("the original
  /// on the text at fp32", ...), steps done and steps; may be empty.
  std::function<void(std::string_view what, int64_t done, int64_t total)> stepProgress;
};

/// Two runs' outputs held against each other, step after step: a model
/// against a reference (fix's same-precision proof of a lossy rewrite), or
/// at the ANE's precision (every float op rounded to fp16) against the
/// fp32 the model means: how far the outputs move, and whether they are
/// lost (non-finite values, or rows of the widest output collapsed to one
/// value) where the reference's are not.
struct PrecisionGap {
  bool measured = false;
  int64_t steps = 0;
  double maxAbsDiff = 0;
  /// Mean |difference| over every element finite in both runs.
  double meanAbsDiff = 0;
  /// ||model - reference|| / ||reference|| over the elements of `widest`
  /// finite in both runs, every step.
  double relError = 0;
  /// Some element of `widest` finite in the reference is inf or NaN in the
  /// model.
  bool widestLost = false;
  std::string widest;
  size_t top1Agree = 0, rows = 0;
  /// Output elements finite at fp32 and inf or NaN at fp16.
  size_t nonFinite = 0;
  /// Rows of `widest` whose fp16 values are all one value (all zero, as an
  /// overflowed norm leaves them) while the fp32 row's are not.
  size_t collapsedRows = 0;
  /// Elements compared (finite in the reference).
  size_t compared = 0;

  /// The fp16 outputs are lost somewhere the fp32 ones are not.
  bool diverged() const { return nonFinite > 0 || collapsedRows > 0; }
  /// relError as reported: infinity when `widest` lost values.
  double reportedRelError() const { return widestLost ? INFINITY : relError; }
};

/// Accumulates a PrecisionGap one step at a time: the reference's outputs
/// against the model's, matched by name; `widest` is the reference's widest
/// float output (an LLM's logits).
class GapMeter {
public:
  void add(const std::vector<runtime::NamedTensor> &reference,
           const std::vector<runtime::NamedTensor> &model);
  PrecisionGap finish(int64_t steps) const;

private:
  PrecisionGap gap_;
  double sumAbs_ = 0, err2_ = 0, norm2_ = 0;
};

/// Steps `original` at fp32 (the reference: the numbers the model means),
/// and at fp16 both `original` and `fixed` (rewritten from it, its moved
/// states carried as `map` says), for `steps` steps on the same random
/// inputs; returns the gap of each fp16 run to the reference (original's
/// first). Throws InputError when the interpreter cannot run either.
std::pair<PrecisionGap, PrecisionGap> measurePrecisionGaps(const Model &original,
                                                           const Model &fixed, const StateMap &map,
                                                           int64_t steps, uint64_t seed);

/// How the comparison of original and fixed model ended.
struct FixVerification {
  enum class Status {
    NotRun,    ///< off (FixVerify::Never, or Auto above the weight limit)
    Skipped,   ///< Auto, and the interpreter could not run the model
    Same,      ///< every output and moved state within tolerance
    Different, ///< see comparison.firstMismatch()
    /// A lossy rewrite: the error is measured, not held to the tolerance,
    /// and within FixOptions::maxRelError and minTop1.
    Measured,
    /// A lossy rewrite whose error exceeds FixOptions::maxRelError or whose
    /// top-1 agreement is below minTop1.
    TooLossy,
    /// A lossy rewrite that was not measured (Auto above the weight limit,
    /// or the interpreter could not run it): not safe to save. Only
    /// FixVerify::Never writes a lossy rewrite unmeasured.
    Unmeasured,
  };
  Status status = Status::NotRun;
  /// Status::Skipped and Unmeasured: why it was not run.
  std::string skipReason;
  int64_t steps = 0;
  runtime::Comparison comparison;
  /// When a pass wrote weights exactly as the device rounds them
  /// (PassResult::exactInFp16) and the rewrite is not lossy, the proof has
  /// two steps, each an equality where it holds: the original against the
  /// model after those passes alone (`roundedPasses`), in fp16 mode
  /// (`rounded`); then that model against the fixed one, in the requested
  /// precision (`comparison`).
  std::string roundedPasses;
  runtime::Comparison rounded;
  /// Output values the proof could not compare, NaN or the same infinity in
  /// both models: the more of `comparison`'s and `rounded`'s bothNonFinite
  /// (both steps of a two-step proof compare the same outputs).
  size_t nonFinite() const { return std::max(comparison.bothNonFinite(), rounded.bothNonFinite()); }
  /// Mean |difference| over every element compared.
  double meanAbsDiff = 0;
  /// The widest float output (an LLM's logits): rows whose argmax over the
  /// last axis is the same in both models, of `top1Rows`.
  std::string top1Output;
  size_t top1Agree = 0, top1Rows = 0;
  /// ||fixed - original|| / ||original|| over `top1Output`, every step.
  double relError = 0;
  /// The precision `comparison` ran in: FixOptions::precision, or fp32 when
  /// FixResult::exactInFp32Only.
  runtime::Precision precision = runtime::Precision::FP32;
  /// The original at the ANE's precision against itself at fp32 (what the
  /// model means), and the fixed model at the ANE's precision against the
  /// original at fp32: what the device would answer before and after.
  PrecisionGap originalAtFp16, fixedAtFp16;
  /// With a text: the original at fp32 and the fixed model at fp32 and
  /// fp16 teacher-forced through it (runs[0] of `original`; `fixed` has
  /// the fp32 run then the fp16 one). A lossy rewrite's status is judged
  /// on them (FixOptions::maxPerplexityRise) instead of relError/top1.
  bool textMeasured = false;
  /// The text they ran on: FixOptions::textName, or, without a text, the
  /// model's own (writeOwnText, a seed other than the calibration's).
  std::string textName;
  QualityResult original, fixed;
  /// Steps whose fixed top-1 equals the original's at fp32, per fixed run.
  std::vector<size_t> textAgree;
  /// fixed.runs[i].perplexity / original's - 1.
  std::vector<double> perplexityRise;
};

/// What requantize was fitted to (FixResult::calibration).
struct FixCalibration {
  bool done = false;
  /// Where the inputs came from ("text.txt's first 300 tokens, teacher-forced").
  std::string source;
  /// A seeded random draw: the last resort without a text, for a program
  /// that is not an LLM decode step.
  bool random = false;
  /// Without a text, an LLM decode step is calibrated on text it wrote
  /// itself (writeOwnText): its tokens, sequences and steps.
  bool ownText = false;
  int64_t ownTextTokens = 0, ownTextWindow = 0;
  /// Why its sequences are shorter than asked (OwnText::shortenedBy).
  std::string ownTextShortenedBy;
  /// Tokens of the text it wrote for held-out rows (ChannelEnergy::heldOut,
  /// by which auto chooses); 0 without.
  int64_t heldOutTokens = 0;
  /// Why the model could not write the text the lossy gate reads (the
  /// random steps judged the rewrite instead); empty if it did.
  std::string gateFailed;
  /// Weights whose layers' input energies were measured.
  size_t weights = 0;
  /// Why calibration could not run (the interpreter cannot run the model);
  /// requantize then fits the weights alone.
  std::string failed;
};

/// Where one function's compute is predicted to run.
struct Residency {
  std::string function;
  size_t ops = 0, aneOps = 0;
  double flops = 0, aneFlops = 0;
  size_t boundaries = 0;
};

/// The residency of every function of a check report.
std::vector<Residency> residencyOf(const ane::CheckReport &report);

/// A warning per function whose predicted ANE share of FLOPs is more than
/// a point lower in `after` (a check of the rewritten model) than in
/// `before` (a rewrite can grow weights past a size rule), naming the rules
/// `after` newly breaks. fixModel adds them to FixResult::diagnostics.
Diagnostics residencyDrops(const ane::CheckReport &before, const ane::CheckReport &after);

/// One step of the rewrite: the residency after a pass ("check" for the
/// model before any).
struct FixStage {
  std::string pass;
  std::vector<Residency> residency;
};

struct FixResult {
  /// The rewritten copy (the input model is never changed).
  std::unique_ptr<Model> fixed;
  /// The pipeline that ran (empty: no pass was picked).
  std::string pipeline;
  /// Without FixOptions::passes: the rules of the model's blocking findings
  /// (compile-fail or runtime-fail, confirmed or at-risk) that the picked
  /// passes remove, one entry per rule; empty with FixOptions::passes.
  std::vector<std::string> pickedFor;
  /// One line per change the passes made, and their notes and warnings.
  std::vector<std::string> changes;
  Diagnostics diagnostics;
  /// Moved states (empty when no state moved).
  StateMap stateMap;
  /// The structural verifier's findings on `fixed`; with an error, `after`
  /// and `verification` are not computed and the rewrite must not be saved.
  Diagnostics verifierDiagnostics;
  ane::CheckReport before;
  ane::CheckReport after;
  /// Residency before the rewrite and after each pass of the pipeline.
  std::vector<FixStage> stages;
  /// A pass changed values beyond rounding (PassResult::lossy).
  bool lossy = false;
  /// A pass is equal to the original only up to fp32 rounding
  /// (PassResult::exactInFp32Only): equality is proven in fp32 whatever
  /// FixOptions::precision says, and the fp16 program is measured
  /// (FixVerification::fixedAtFp16).
  bool exactInFp32Only = false;
  /// The passes that wrote weights exactly as the device holds them
  /// (PassResult::exactInFp16), as pipeline elements; see
  /// FixVerification::rounded.
  std::vector<std::string> roundedPasses;
  /// Passes the goal called for but fixModel did not run, with why ("
  /// requantize: lossy, run only with --requantize").
  std::vector<std::string> notRun;
  FixVerification verification;
  /// requantize's calibration, when a lossy requantize ran.
  FixCalibration calibration;

  /// The rewritten model passed the structural verifier.
  bool verifies() const { return !hasErrors(verifierDiagnostics); }
  /// Safe to save: it verifies, the comparison did not find a difference,
  /// compared every output value (unless FixOptions::allowNonFinite), and at
  /// the ANE's precision its outputs are not lost (unless
  /// FixOptions::allowFp16Divergence said to keep it anyway).
  bool ok() const {
    return verifies() && verification.status != FixVerification::Status::Different &&
           verification.status != FixVerification::Status::TooLossy &&
           verification.status != FixVerification::Status::Unmeasured && !fp16Refused &&
           !nonFiniteRefused;
  }
  /// The fixed model's fp16 outputs are lost and the options did not allow it.
  bool fp16Refused = false;
  /// Output values NaN (or the same infinity) in both models were left
  /// uncompared by the proof and the options did not allow it.
  bool nonFiniteRefused = false;
};

/// The findings of `report` that keep the model from compiling, running or
/// answering right on the ANE: compile-fail and runtime-fail, confirmed or
/// at-risk, and wrong-numerics of a cause Apple documents (fp16's range:
/// ANE-DTYPE-004, ANE-DTYPE-005); their rule ids, each once, in table
/// order. fix removes them under every goal.
std::vector<std::string> blockingRules(const ane::CheckReport &report);

/// The rules of `report`'s findings that keep ops off the ANE without
/// failing it (fallback, slow), each once, in table order.
std::vector<std::string> residencyRules(const ane::CheckReport &report);

/// The pipeline fixModel runs for `options` on a model whose check report is
/// `before`: FixOptions::passes when given; else the passes whose PASS_FIX
/// row in Passes.def removes a rule of `before` the goal calls for
/// (pipelineRemoving): the blocking rules, under FixGoal::Ane also the
/// residency rules; requantize only with FixOptions::requantize (then with
/// to=<it>). Empty when no pass is called for. `notRun`, when given, gets
/// the passes left out and why.
std::string fixPipeline(const FixOptions &options, const ane::CheckReport &before,
                        std::vector<std::string> *notRun = nullptr);

/// Rewrites a copy of `model` for the ANE and proves it. Throws InputError on
/// bad options or input (an unknown pass, a state name matching nothing, an
/// interpreter error under FixVerify::Always).
FixResult fixModel(const Model &model, const FixOptions &options = {});

/// Steps every function of `original` and its counterpart in `fixed` for
/// `steps` steps on the same random inputs, moved states carried as `map`
/// says; compares each output and each moved state (the original's state
/// against the fixed model's output). With `error`, also fills its mean
/// |difference| and top-1 agreement. Throws InputError when the
/// interpreter cannot run either model or a function is missing.
runtime::Comparison compareRewrite(const Model &original, const Model &fixed, const StateMap &map,
                                   int64_t steps, uint64_t seed, runtime::Tolerance tolerance,
                                   runtime::Precision precision = runtime::Precision::FP32,
                                   FixVerification *error = nullptr);

} // namespace anefit
