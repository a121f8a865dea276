//===- FixCommand.cpp - anefit fix: make a model ANE-friendly -------------===//
//
// Parses the options, runs fixFile (fix/FixFile.h: the pass pipeline,
// the check before and after, the proof in the interpreter, the fixed model
// and its state map written, or a .pte's Core ML payloads rewritten) and
// prints what it found.
//
//===----------------------------------------------------------------------===//
#include "Command.h"

#include "ane/AneRules.h"
#include "fix/FixFile.h"
#include "fix/Quality.h"
#include "io/ETRecord.h"
#include "io/ModelIO.h"
#include "report/Sources.h"
#include "runtime/Tensor.h"
#include "support/Error.h"
#include "support/Units.h"
#include "transforms/Pass.h"
#include "transforms/Requantize.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>

#include <unistd.h>

namespace anefit::cli {
namespace {

struct FixCliOptions {
  std::string model;
  std::string output;
  std::string passes;
  TargetCliOptions target;
  std::string goal = "compile";
  std::string requantize = "keep";
  double minTop1 = 0;
  double maxRelError = 0.05;
  bool verify = false;
  bool noVerify = false;
  int64_t steps = 8;
  uint64_t seed = 0;
  double atol = 1e-4;
  double rtol = 1e-3;
  bool force = false;
  bool allowFp16Divergence = false;
  bool allowNonFinite = false;
  std::string precision = "fp32";
  std::string maxMemory;
  std::string etrecord;
  std::string sourceRoot;
  std::string text;
  std::string tokenizer;
  int64_t maxTokens = kDefaultMaxTextTokens;
  int64_t window = 0;
  std::string budget;
  double maxPerplexityRise = kDefaultMaxPerplexityRise;
};

/// With --etrecord: the original model and the fixed one joined to the
/// user's source.
struct FixSources {
  const report::SourceJoin *before = nullptr;
  const report::SourceJoin *after = nullptr;
};

/// Where the findings of `report` that satisfy `pick` come from, one line
/// per place ("    at sdpa.py:461 layers.*.attention (6 ops)"); nothing
/// without --etrecord.
template <typename Pick>
void printSites(const report::SourceJoin *join, const ane::CheckReport &report, Pick pick) {
  if (!join)
    return;
  std::map<std::string, const Operation *> byName;
  for (const ane::FunctionReport &fr : report.functions)
    for (const ane::OpReport &op : fr.ops)
      if (op.op)
        byName[fr.name + "/" + op.name] = op.op;
  std::vector<ane::Finding::Source> sources;
  for (const ane::Finding &f : report.findings)
    if (!f.op.empty() && pick(f)) {
      auto it = byName.find(f.function + "/" + f.op);
      sources.push_back(join->of(f.debugHandles, it != byName.end() ? it->second : nullptr));
    }
  report::SourceSites sites = report::sourceSites(sources);
  for (const std::string &place : sites.places)
    std::cout << "    at " << place << "\n";
  if (sites.more)
    std::cout << "    " << sites.moreText() << "\n";
}

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
           (atRisk ? ", " + std::to_string(atRisk) + " at-risk" : std::string()) + ", weights " +
           humanBytes(f.weightBytes) + "\n";
  }
  return out;
}

std::string percent(double part, double whole) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", whole > 0 ? 100 * part / whole : 0.0);
  return buf;
}

/// "main: ANE ops 83.1% -> 99.2%, FLOPs 10.6% -> 98.0%, boundaries 134 -> 2",
/// then a line per pass that changed a figure.
void printResidency(const FixResult &result) {
  if (result.stages.size() < 2)
    return;
  const std::vector<Residency> &first = result.stages.front().residency;
  const std::vector<Residency> &last = result.stages.back().residency;
  std::cout << "residency (predicted):\n";
  for (size_t f = 0; f < first.size() && f < last.size(); ++f) {
    const Residency &a = first[f], &b = last[f];
    std::cout << "  " << a.function << ": ops on the ANE " << percent(a.aneOps, a.ops) << " -> "
              << percent(b.aneOps, b.ops) << ", FLOPs " << percent(a.aneFlops, a.flops) << " -> "
              << percent(b.aneFlops, b.flops) << ", boundaries " << a.boundaries << " -> "
              << b.boundaries << "\n";
    for (size_t s = 1; s < result.stages.size(); ++s) {
      const std::vector<Residency> &prev = result.stages[s - 1].residency;
      const std::vector<Residency> &cur = result.stages[s].residency;
      if (f >= prev.size() || f >= cur.size())
        continue;
      const Residency &p = prev[f], &c = cur[f];
      if (p.aneOps == c.aneOps && p.boundaries == c.boundaries && p.ops == c.ops &&
          p.aneFlops == c.aneFlops)
        continue;
      std::cout << "    after " << result.stages[s].pass << ": " << percent(c.aneOps, c.ops)
                << " of ops, " << percent(c.aneFlops, c.flops) << " of FLOPs, " << c.boundaries
                << (c.boundaries == 1 ? " boundary\n" : " boundaries\n");
    }
  }
}

/// The fallback findings left after the rewrite, one line per rule with its
/// remedy: what fix could not move.
void printLeftOff(const FixResult &result, const FixSources &sources) {
  bool header = false;
  for (const ane::RuleInfo &r : ane::allRules()) {
    size_t n = 0;
    for (const ane::Finding &f : result.after.findings)
      n += f.rule == r.id && f.effect == ane::Effect::Fallback;
    if (!n)
      continue;
    if (!header)
      std::cout << "left off the ANE:\n";
    header = true;
    std::cout << "  " << r.code << " " << r.title << " (" << n << " finding" << (n == 1 ? "" : "s")
              << "): " << fixHint(r) << "\n";
    printSites(sources.after, result.after, [&](const ane::Finding &f) {
      return f.rule == r.id && f.effect == ane::Effect::Fallback;
    });
  }
}

/// "max abs diff 0.0123, mean 0.00101; 'logits': relative RMS error 0.4%,
/// top-1 agrees on 8/8 rows", and what was lost.
std::string gapText(const PrecisionGap &g) {
  if (g.compared == 0)
    return "nothing measured: no value of the original at fp32 is finite";
  char buf[300];
  std::snprintf(buf, sizeof buf, "max abs diff %.3g, mean %.3g", g.maxAbsDiff, g.meanAbsDiff);
  std::string out = buf;
  if (!g.widest.empty())
    out +=
        "; '" + g.widest + "': relative RMS error " +
        (std::isinf(g.reportedRelError()) ? std::string("inf") : percent(g.reportedRelError(), 1)) +
        ", top-1 agrees on " + std::to_string(g.top1Agree) + "/" + std::to_string(g.rows) + " rows";
  if (g.nonFinite)
    out += "; " + std::to_string(g.nonFinite) + " of " + std::to_string(g.compared) +
           " values inf or NaN";
  if (g.collapsedRows)
    out += "; " + std::to_string(g.collapsedRows) + " of " + std::to_string(g.rows) +
           " rows collapsed to one value";
  return out;
}

/// The two lines of the fp16 measurement (FixVerification::originalAtFp16,
/// fixedAtFp16), and on stderr why a diverged rewrite is not saved.
void printPrecisionGap(const FixResult &result, const FixCliOptions &opts) {
  const FixVerification &v = result.verification;
  if (!v.fixedAtFp16.measured)
    return;
  std::cout << "at the ANE's precision (fp16, every op rounded) against the original at fp32, "
            << v.fixedAtFp16.steps << " steps:\n";
  std::cout << "  original: " << gapText(v.originalAtFp16)
            << (v.originalAtFp16.diverged() ? ": LOST\n" : "\n");
  std::cout << "  fixed:    " << gapText(v.fixedAtFp16)
            << (v.fixedAtFp16.diverged() ? ": LOST\n" : "\n");
  if (result.fp16Refused)
    std::cerr << "anefit: error: at fp16 the fixed model's outputs are lost where the original's "
                 "at fp32 are not; nothing written (--allow-fp16-divergence writes it anyway)\n";
  else if (v.fixedAtFp16.diverged() && opts.allowFp16Divergence)
    std::cout << "  written anyway (--allow-fp16-divergence)\n";
}

/// What requantize was fitted to: the text, or the seeded draw it falls
/// back to (said as such).
void printCalibration(const FixResult &result) {
  const FixCalibration &c = result.calibration;
  if (!c.failed.empty()) {
    std::cout << "  calibration: not run (" << c.failed
              << "); palettes fitted to the weights alone\n";
    return;
  }
  if (!c.done)
    return;
  std::cout << "  calibration: " << c.source
            << ": the input channel energies of the layers reading " << c.weights << " weight"
            << (c.weights == 1 ? "" : "s");
  if (c.ownText)
    std::cout << " (no --text: the model's own text; --text and --tokenizer calibrate on a text "
                 "you choose)";
  if (c.random)
    std::cout << " (no --text: a seeded random draw, the last resort; --text and --tokenizer "
                 "calibrate on real tokens)";
  std::cout << "\n";
  if (!c.gateFailed.empty())
    std::cout << "  the lossy rewrite is judged on random steps: the model could not write a text "
                 "to judge it on ("
              << c.gateFailed << ")\n";
  if (c.ownText && !c.ownTextShortenedBy.empty())
    std::cout << "  its sequences end at the program's context, " << c.ownTextWindow
              << " tokens (the next step: " << c.ownTextShortenedBy << ")\n";
}

/// The text's perplexities: the original at fp32, the fixed model at fp32
/// and fp16, each fixed run's rise and top-1 agreement with the original.
void printTextQuality(const FixResult &result, const FixCliOptions &opts) {
  const FixVerification &v = result.verification;
  if (!v.textMeasured || v.original.runs.empty())
    return;
  const QualityRun &o = v.original.runs.front();
  auto ppl = [](double p) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", p);
    return std::string(std::isfinite(p) ? buf : "inf");
  };
  long long n = v.original.predicted;
  int64_t windows = v.original.windows;
  std::cout << "on " << v.textName << " (" << n + windows << " tokens, "
            << (windows > 1 ? "in " + std::to_string(windows) + " windows, " : std::string()) << n
            << " predicted, teacher-forced):\n";
  std::cout << "  original fp32: perplexity " << ppl(o.perplexity)
            << ", top-1 is the next token on " << o.top1Correct << "/" << n << "\n";
  for (size_t i = 0; i < v.fixed.runs.size(); ++i) {
    const QualityRun &f = v.fixed.runs[i];
    char rise[48];
    std::snprintf(rise, sizeof rise, "%+.1f%%", 100 * v.perplexityRise[i]);
    std::cout << "  fixed " << (f.precision == runtime::Precision::FP16 ? "fp16" : "fp32")
              << ": perplexity " << ppl(f.perplexity) << " ("
              << (std::isfinite(v.perplexityRise[i]) ? std::string(rise) : std::string("inf"))
              << "), top-1 is the next token on " << f.top1Correct << "/" << n
              << ", agrees with the original's on " << v.textAgree[i] << "/" << n << "\n";
  }
  if (result.lossy)
    std::cout << "  lossy rewrite judged on the text: perplexity at most "
              << percent(opts.maxPerplexityRise, 1) << " above the original's (--max-ppl-rise)"
              << (v.status == FixVerification::Status::TooLossy ? ": EXCEEDED\n" : ": met\n");
  if (v.status == FixVerification::Status::TooLossy)
    std::cerr << "anefit: error: the lossy rewrite's perplexity on " << v.textName
              << " exceeds --max-ppl-rise; nothing written\n";
}

/// The values NaN (or the same infinity) in both models, which a
/// comparison cannot hold to a tolerance: counted and named, never passed
/// over in silence.
void printNonFinite(const runtime::Comparison &c) {
  if (c.bothNonFinite())
    std::cout << "  " << c.bothNonFinite() << (c.bothNonFinite() == 1 ? " value" : " values")
              << " inf or NaN in both models, not compared (first: " << c.firstNonFinite() << ")\n";
}

/// "same outputs" only where every value was compared.
const char *sameText(const runtime::Comparison &c) {
  if (!c.ok())
    return ": DIFFERENT\n";
  if (!c.bothNonFinite())
    return ": same outputs\n";
  return c.compared() ? ": same where compared, the rest unproven\n"
                      : ": nothing compared, every value inf or NaN in both\n";
}

/// On stderr why a proof with uncompared values is not saved, or that it
/// was written anyway.
void printNonFiniteVerdict(const FixResult &result, const FixCliOptions &opts) {
  size_t n = result.verification.nonFinite();
  if (result.nonFiniteRefused)
    std::cerr << "anefit: error: " << n << " output value" << (n == 1 ? " is" : "s are")
              << " inf or NaN in both models, where the rewrite is not proven; nothing written "
                 "(--allow-non-finite writes it anyway)\n";
  else if (n && opts.allowNonFinite)
    std::cout << "  written anyway (--allow-non-finite)\n";
}

/// Prints what fixModel did, and on stderr why a rewrite that is not ok()
/// is not saved.
void report(const FixResult &result, const FixCliOptions &opts, const FixSources &sources) {
  if (opts.passes.empty()) {
    std::string rules;
    for (const std::string &r : result.pickedFor)
      rules += (rules.empty() ? "" : ", ") + r;
    std::cout << "  passes: "
              << (result.pipeline.empty() ? std::string("none (no blocking finding a pass removes)")
                                          : result.pipeline + " (for " + rules + ")")
              << "\n";
    // Where the blocking findings the passes remove come from.
    printSites(sources.before, result.before, [&](const ane::Finding &f) {
      std::string_view code = ane::ruleInfo(f.rule).code;
      return (f.level() >= ane::Level::AtRisk || f.effect == ane::Effect::WrongNumerics) &&
             std::find(result.pickedFor.begin(), result.pickedFor.end(), code) !=
                 result.pickedFor.end();
    });
  }
  for (const std::string &n : result.notRun)
    std::cout << "  not run: " << n << "\n";
  if (result.changes.empty())
    std::cout << "  no changes\n";
  printCalibration(result);
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
  printResidency(result);
  printLeftOff(result, sources);

  const FixVerification &v = result.verification;
  switch (v.status) {
  case FixVerification::Status::NotRun:
    std::cout << "verify: skipped\n";
    break;
  case FixVerification::Status::Skipped:
    std::cout << "verify: skipped: " << v.skipReason << "\n";
    break;
  case FixVerification::Status::Unmeasured:
    std::cout << "verify: not run: " << v.skipReason << "\n";
    std::cerr << "anefit: error: a lossy rewrite is written only with its error measured; "
                 "nothing written (--verify with room to run it measures it, --no-verify "
                 "writes it unmeasured)\n";
    break;
  case FixVerification::Status::Same:
  case FixVerification::Status::Different: {
    auto line = [&](const runtime::Comparison &c, const char *what, bool fp16) {
      char buf[300];
      std::snprintf(buf, sizeof buf,
                    "verify%s: %lld steps, %zu values compared, max abs diff %.3g (atol %g, rtol "
                    "%g%s)",
                    what, (long long)v.steps, c.compared(), c.maxAbsDiff(), opts.atol, opts.rtol,
                    fp16 ? ", fp16 mode" : "");
      std::cout << buf << sameText(c);
      printNonFinite(c);
      if (!c.ok())
        std::cerr << "anefit: error: the fixed model differs from the original: "
                  << c.firstMismatch() << "; nothing written\n";
    };
    if (!v.roundedPasses.empty()) {
      // Two equalities, each where it holds (FixVerification::rounded).
      std::string first = " " + v.roundedPasses + " (weights as the device rounds them)";
      line(v.rounded, first.c_str(), true);
      if (!v.rounded.ok())
        break;
      line(v.comparison, " the other passes against it", v.precision == runtime::Precision::FP16);
      break;
    }
    line(v.comparison, "", v.precision == runtime::Precision::FP16);
    if (result.exactInFp32Only && opts.precision == "fp16")
      std::cout << "  (held equal in fp32: a pass computes the same values by other fp16 "
                   "roundings; at fp16 it is measured against the original below)\n";
    break;
  }
  case FixVerification::Status::Measured:
  case FixVerification::Status::TooLossy: {
    char buf[400];
    std::snprintf(buf, sizeof buf,
                  "verify: %lld steps, %zu values compared; lossy rewrite, error measured: max abs "
                  "diff %.3g, mean abs diff %.3g%s",
                  (long long)v.steps, v.comparison.compared(), v.comparison.maxAbsDiff(),
                  v.meanAbsDiff, v.precision == runtime::Precision::FP16 ? " (fp16 mode)" : "");
    std::cout << buf;
    if (v.top1Rows) {
      std::cout << "; '" << v.top1Output << "': relative RMS error " << percent(v.relError, 1)
                << " (allowed " << percent(opts.maxRelError, 1) << "), top-1 agrees on "
                << v.top1Agree << "/" << v.top1Rows << " rows ("
                << percent(double(v.top1Agree), double(v.top1Rows));
      if (opts.minTop1 > 0)
        std::cout << ", required " << percent(opts.minTop1, 1);
      std::cout << ")";
    }
    std::cout << "\n";
    printNonFinite(v.comparison);
    if (v.status == FixVerification::Status::TooLossy && !v.textMeasured)
      std::cerr << "anefit: error: the lossy rewrite's error exceeds --max-rel-error or "
                   "--min-top1; nothing written (--requantize fp16 is exact)\n";
    break;
  }
  }
  printNonFiniteVerdict(result, opts);
  printPrecisionGap(result, opts);
  printTextQuality(result, opts);
}

/// The line of the program's run in ExecuTorch's runtime (ProgramProof).
void printProgramProof(const ProgramProof &p) {
  char buf[400];
  switch (p.status) {
  case ProgramProof::Status::NotRun:
    return;
  case ProgramProof::Status::Skipped:
    std::cout << "verify in ExecuTorch: skipped: " << p.skipReason << "\n";
    return;
  case ProgramProof::Status::Same:
  case ProgramProof::Status::Different:
  case ProgramProof::Status::Measured:
    std::snprintf(buf, sizeof buf,
                  "verify in %s's runtime: original and fixed program, %lld steps of 'forward', "
                  "%zu values compared, max abs diff %.3g%s",
                  p.engine.c_str(), (long long)p.steps, p.compared, p.maxAbsDiff,
                  p.fp16 ? " (fp16 mode)" : "");
    std::cout << buf
              << (p.status == ProgramProof::Status::Same
                      ? (p.nonFinite ? ": same where compared, the rest unproven\n"
                                     : ": same outputs\n")
                  : p.status == ProgramProof::Status::Different ? ": DIFFERENT\n"
                  : p.mixedPrecisions
                      ? " (measured: the fp16 weights are equal at fp16 and scale-norm at fp32, "
                        "each proven above; together at neither)\n"
                      : " (lossy rewrite, measured)\n");
    if (p.nonFinite)
      std::cout << "  " << p.nonFinite << (p.nonFinite == 1 ? " value" : " values")
                << " inf or NaN in both programs, not compared (first: " << p.firstNonFinite
                << ")\n";
    if (p.status == ProgramProof::Status::Different)
      std::cerr << "anefit: error: in ExecuTorch's runtime the fixed program differs from the "
                   "original: "
                << p.firstMismatch << "; nothing written\n";
    return;
  }
}

FixOptions fixOptions(const FixCliOptions &opts) {
  FixOptions options;
  // The long runs (a text, the model's own) count their steps on a
  // terminal.
  if (isatty(STDERR_FILENO))
    options.stepProgress = [](std::string_view what, int64_t done, int64_t total) {
      if (done % 16 == 0 || done == total)
        std::cerr << "\r\033[K" << what << ": " << done << "/" << total << " steps"
                  << (done == total ? "\n" : "") << std::flush;
    };
  options.passes = opts.passes;
  applyTargetOptions(opts.target, options.target);
  options.goal = parseFixGoal(opts.goal);
  options.requantize = opts.requantize;
  options.minTop1 = opts.minTop1;
  options.maxRelError = opts.maxRelError;
  options.verify = opts.noVerify ? FixVerify::Never
                   : opts.verify ? FixVerify::Always
                                 : FixVerify::Auto;
  options.steps = opts.steps;
  options.seed = opts.seed;
  options.tolerance.atol = opts.atol;
  options.tolerance.rtol = opts.rtol;
  options.precision = runtime::parsePrecision(opts.precision);
  options.allowFp16Divergence = opts.allowFp16Divergence;
  options.maxPerplexityRise = opts.maxPerplexityRise;
  if (!opts.budget.empty()) {
    std::optional<uint64_t> bytes = runtime::MemoryBudget::parseLimit(opts.budget);
    if (!bytes || !*bytes)
      failExpected("", "--budget", "a size such as 1G, 500M or 123456789", "'" + opts.budget + "'");
    options.budget = *bytes;
  }
  requireTextWithTokenizer(opts.text, opts.tokenizer);
  if (!opts.text.empty()) {
    QualityOptions q;
    readTextTokens(q, opts.text, opts.tokenizer, opts.maxTokens);
    options.textTokens = std::move(q.tokens);
    options.textWindow = opts.window;
    options.tokenizerVocab = q.tokenizerVocab;
    options.textName = opts.text;
  }
  options.allowNonFinite = opts.allowNonFinite;
  return options;
}

int runFix(const FixCliOptions &opts) {
  applyMaxMemory(opts.maxMemory);
  if (!opts.sourceRoot.empty() && opts.etrecord.empty())
    failExpected("", "--source-root", "--etrecord", "no --etrecord");
  std::optional<ETRecord> record;
  if (!opts.etrecord.empty())
    record = readETRecord(opts.etrecord);
  FixFileOptions file;
  file.force = opts.force;
  bool first = true;
  file.onFixed = [&](const FixedModel &m) {
    if (first)
      std::cout << "fix: " << opts.model << " -> " << opts.output << "\n";
    first = false;
    if (!m.label.empty())
      std::cout << m.where << " (" << m.label << "):\n";
    std::optional<report::SourceJoin> before, after;
    if (record && m.original) {
      before.emplace(*m.original, *record, opts.sourceRoot, m.where);
      if (m.result.fixed)
        after.emplace(*m.result.fixed, *record, opts.sourceRoot, m.where);
    }
    report(m.result, opts, FixSources{before ? &*before : nullptr, after ? &*after : nullptr});
  };
  FixFileResult result = fixFile(opts.model, opts.output, fixOptions(opts), file);
  printProgramProof(result.executorch);
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
  cmd->add_option("--etrecord", opts->etrecord,
                  "The export's ETRecord (export_llm +debug.generate_etrecord=true): the "
                  "blocking findings the passes remove and the fallbacks left are named by "
                  "PyTorch source line and module");
  cmd->add_option("--source-root", opts->sourceRoot,
                  "With --etrecord: show source paths relative to this directory");
  addMaxMemoryOption(cmd, opts->maxMemory);
  cmd->add_option("--passes", opts->passes,
                  "pass pipeline (default: the passes that remove the model's blocking "
                  "findings; docs/passes.md)");
  addTargetOptions(cmd, opts->target);
  cmd->add_option("--goal", opts->goal,
                  "compile (default): the passes that remove blocking findings; ane: also the "
                  "passes that move ops placed off the ANE onto it (split-projection, "
                  "depthwise-taps, ...)")
      ->check(CLI::IsMember({"compile", "ane"}));
  std::string forms = "per-block quantized weights (ANE-QUANT-001): keep (default): as they are";
  for (const RequantizeForm &f : requantizeForms())
    forms += "; " + std::string(f.name) + ": " + std::string(f.help);
  forms += " (every form but keep and fp16 also compresses dense weights of linears, convs and "
           "matmuls)";
  cmd->add_option("--requantize", opts->requantize, forms)
      ->check(CLI::IsMember(requantizeChoices()));
  cmd->add_option("--text", opts->text,
                  "A text the model should read well (an LLM decode program, with "
                  "--tokenizer): the original runs on its tokens teacher-forced to calibrate "
                  "--requantize (each layer's input channel energies), and the fixed model's "
                  "perplexity on it at fp32 and fp16 judges a lossy rewrite (--max-ppl-rise). "
                  "Without it an LLM writes its own text, from --seed, for both (" +
                      std::to_string(kDefaultOwnTextTokens) + " tokens to calibrate on, " +
                      std::to_string(kDefaultMaxTextTokens) +
                      " others to judge on); any other program is calibrated on a seeded random "
                      "draw and judged on random steps");
  cmd->add_option("--tokenizer", opts->tokenizer,
                  "With --text: the model's tokenizer.json (byte-level BPE)");
  cmd->add_option("--max-tokens", opts->maxTokens,
                  "With --text: tokens of the text used (default " +
                      std::to_string(kDefaultMaxTextTokens) + ")")
      ->check(integerIn(2, kMaxSteps));
  cmd->add_option("--window", opts->window,
                  "With --text: read the text in windows of this many tokens, each from "
                  "position 0 with fresh caches (a text longer than the program's context; "
                  "default: one window)")
      ->check(integerIn(2, kMaxSteps));
  cmd->add_option("--max-ppl-rise", opts->maxPerplexityRise,
                  "A lossy rewrite is written only when its perplexity on the text (or the "
                  "model's own), "
                  "at fp32 and at fp16, is at most this share above the original's at fp32 "
                  "(default " +
                      std::to_string(kDefaultMaxPerplexityRise).substr(0, 4) + ", ours)")
      ->check(realIn(0, kMaxTolerance));
  cmd->add_option("--budget", opts->budget,
                  "--requantize auto: the largest stored weight size (1G, 500M, bytes; default "
                  "ANE-PROG-001's ~1 GB iPhone limit); each layer takes the smallest form within "
                  "the error target, and smaller ones where the weights would exceed it")
      ->check(sizeIn("a size such as 1G, 500M or 123456789"));
  cmd->add_option("--max-rel-error", opts->maxRelError,
                  "a lossy rewrite (--requantize other than fp16) is written only when its widest "
                  "output (an LLM's logits) stays within this relative RMS error of the "
                  "original's over the verified steps (default 0.05)")
      ->check(realIn(0, kMaxTolerance));
  cmd->add_option("--min-top1", opts->minTop1,
                  "... and the top-1 of that output agrees with the original's on at least this "
                  "share of rows (default 0: reported, not required)")
      ->check(realIn(0, 1));
  cmd->add_flag("--verify", opts->verify,
                "run original and fixed models in the interpreter and compare (default: on "
                "when the weights are under 2 GB)");
  cmd->add_flag("--no-verify", opts->noVerify, "skip the interpreter comparison");
  cmd->add_flag("--allow-fp16-divergence", opts->allowFp16Divergence,
                "write the model even when its outputs at the ANE's precision (fp16) are lost "
                "(inf, NaN or collapsed rows) where the original's at fp32 are not");
  cmd->add_flag("--allow-non-finite", opts->allowNonFinite,
                "write the model even when output values are inf or NaN in both models, where "
                "the comparison cannot prove the rewrite");
  cmd->add_option("--steps", opts->steps, "prediction steps to compare (default 8)")
      ->check(integerIn(1, kMaxSteps));
  cmd->add_option("--seed", opts->seed, "seed of the random inputs (default 0)")
      ->check(unsignedIn(0, UINT64_MAX));
  cmd->add_option("--atol", opts->atol, "absolute tolerance of the comparison (default 1e-4)")
      ->check(realIn(0, kMaxTolerance));
  cmd->add_option("--rtol", opts->rtol,
                  "relative tolerance of the comparison, of each value or of its output's RMS "
                  "where larger (default 1e-3)")
      ->check(realIn(0, kMaxTolerance));
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
