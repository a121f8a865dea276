//===- Report.cpp - Rendering check reports and the rules table -----------===//
//
// Text groups findings by rule, most severe first; JSON and SARIF carry the
// same data for machines. docs/rules.md is rulesMarkdown() verbatim (a unit
// test fails when the committed file is stale).
//
//===----------------------------------------------------------------------===//
#include "report/Report.h"
#include "report/Sources.h"

#include "transforms/Pass.h"

#include "support/Text.h"
#include "support/Units.h"

#include "ane/Observations.h"
#include "ane/Remedies.h"
#include "ane/RuleOps.h"
#include "support/Json.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace anefit::ane {

/// The remedies of every finding of `list`, each once, in table order.
static std::vector<const Remedy *> distinctRemedies(const std::vector<const Finding *> &list) {
  std::vector<const Remedy *> out;
  for (const Finding *f : list)
    for (const Remedy *r : remediesFor(*f))
      if (std::find(out.begin(), out.end(), r) == out.end())
        out.push_back(r);
  std::sort(out.begin(), out.end());
  return out;
}

using Json = nlohmann::ordered_json;

namespace {

std::string percent(double part, double whole) {
  if (whole <= 0)
    return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * part / whole);
  return buf;
}

const char *levelColor(Level l) {
  switch (l) {
  case Level::RuntimeFail:
  case Level::CompileFail:
    return "\033[1;31m";
  case Level::AtRisk:
    return "\033[1;38;5;208m";
  case Level::WrongNumerics:
    return "\033[1;35m";
  case Level::Fallback:
    return "\033[1;33m";
  case Level::Slow:
    return "\033[36m";
  }
  return "";
}

const char *verdictColor(Verdict v) {
  switch (v) {
  case Verdict::AneFails:
    return "\033[1;31m";
  case Verdict::AtRisk:
    return "\033[1;38;5;208m";
  case Verdict::WrongNumerics:
    return "\033[1;35m";
  case Verdict::Ane:
    return "\033[1;32m";
  case Verdict::Partial:
  case Verdict::NoAne:
    return "\033[1;33m";
  }
  return "";
}

/// "https://... [together] "quote" (what it shows)".
std::string caseText(const EvidenceCase &c) {
  std::string out = std::string(c.url.empty() ? "ours" : c.url) + " [" +
                    std::string(evidenceCertaintyName(c.certainty)) + "]";
  if (!c.quote.empty())
    out += " \"" + std::string(c.quote) + "\"";
  if (!c.what.empty())
    out += " (" + std::string(c.what) + ")";
  return out;
}

std::string verdictSentence(const FunctionReport &f, ComputeUnits cu) {
  std::string off = cu == ComputeUnits::All ? "CPU/GPU" : "CPU";
  switch (f.verdict) {
  case Verdict::AneFails:
    return "ANE compile or first prediction predicted to FAIL; Core ML then runs the model on " +
           off + " or fails to load it (" + percent((double)f.aneOps, (double)f.ops.size()) +
           " of ops would otherwise be placed on the ANE)";
  case Verdict::NoAne:
    return "nothing runs on the ANE; the whole function is placed on " + off;
  case Verdict::AtRisk:
    return "AT RISK: a compile or first-prediction failure rule fires, but public evidence of "
           "working models contests it for this case; settle it on a Mac (see each at-risk "
           "finding). Otherwise " +
           percent((double)f.aneOps, (double)f.ops.size()) + " of ops are placed on the ANE";
  case Verdict::WrongNumerics:
    return "WRONG NUMBERS: at the ANE's fp16 the outputs are lost where fp32's are not "
           "(measured, see ANE-NUM-001 and the numerics section); " +
           percent((double)f.aneOps, (double)f.ops.size()) + " of ops are placed on the ANE";
  case Verdict::Partial:
    return "runs partly on the ANE: " + percent((double)f.aneOps, (double)f.ops.size()) +
           " of ops, " + percent(f.aneFlops, f.totalFlops) + " of FLOPs; the rest on " + off;
  case Verdict::Ane:
    return "runs entirely on the ANE";
  }
  return "";
}

/// "1 segment", "2 segments", "0 boundaries".
std::string plural(size_t n, std::string_view noun) {
  std::string s = std::to_string(n) + " " + std::string(noun);
  if (n == 1)
    return s;
  return noun.back() == 'y' ? s.substr(0, s.size() - 1) + "ies" : s + "s";
}

/// "coverage: 12/15 ops (80 %), 91 % of FLOPs have working evidence;
/// unverified: linear fp16 weight=... (113 ops, risky), ...".
std::string coverageSentence(const FunctionReport &f) {
  std::string out = "coverage: " + std::to_string(f.coveredOps) + "/" +
                    std::to_string(f.ops.size()) + " ops (" +
                    percent((double)f.coveredOps, (double)f.ops.size()) + "), " +
                    percent(f.coveredFlops, f.totalFlops) +
                    " of FLOPs have a working case in the evidence corpus";
  if (f.unverified.empty())
    return out;
  out += "; unverified: ";
  constexpr size_t kShown = 4;
  for (size_t i = 0; i < f.unverified.size() && i < kShown; ++i) {
    const UnverifiedPattern &u = f.unverified[i];
    out +=
        (i ? ", " : "") + u.pattern + " (" + plural(u.ops, "op") + (u.risky ? ", risky" : "") + ")";
  }
  if (f.unverified.size() > kShown)
    out += " and " + std::to_string(f.unverified.size() - kShown) + " more";
  return out;
}

std::string osLabel(TargetOs os) { return std::string(osName(os)); }

} // namespace

namespace {

/// The lines a finding's source adds under its op (`check --etrecord`).
std::string sourceText(const Finding::Source &s) {
  std::string out = "    source: ";
  if (s.line > 0) {
    out += s.file + ":" + std::to_string(s.line);
    if (!s.module.empty())
      out += " in " + s.module;
    if (!s.code.empty())
      out += ": " + s.code;
  } else {
    out += "none: " + s.note;
    if (!s.module.empty())
      out += " (module " + s.module + ")";
  }
  out += "\n";
  if (!s.buffer.empty())
    out += "    buffer: " + s.buffer +
           (s.writesBuffer ? " (ExecuTorch writes the op's output back into it)\n"
                           : " (the op reads it)\n");
  return out;
}

/// "observed on Apple M2, macOS 15.3 (observations.json)".
std::string observedWhere(const Observation &o) {
  auto get = [&](const char *k) {
    auto it = o.host.find(k);
    return it == o.host.end() ? std::string() : it->second;
  };
  std::string where = get("chip").empty() ? std::string("a Mac") : get("chip");
  if (!get("os").empty())
    where += ", " + get("os");
  return where + " (" + o.observationsPath + ")";
}

std::string conclusionSentence(const Observation &o) {
  if (o.originalOutcome.empty())
    return "the original was not observed: nothing is settled";
  if (o.conclusion == "no-failure")
    return "the original ran (" + o.originalOutcome +
           "): the predicted failures did not happen on this Mac";
  std::string named = joined(o.culprits, ", ");
  if (o.conclusion == "culprit")
    return "the original failed (" + o.originalOutcome + "); culprit: " + named;
  if (o.conclusion == "unnamed")
    return "the original failed (" + o.originalOutcome +
           ") and still fails with every removable suspect removed: " +
           (named.empty() ? std::string("no suspect's sub-program fails alone; the cause is one "
                                        "no rule names")
                          : "failing alone: " + named);
  return "the original failed (" + o.originalOutcome +
         "); the plan's walk stopped before a conclusion (a variant was not observed)";
}

/// The observation block of the text report: the conclusion, the walk, and
/// each suspect's prediction against the observation.
std::string observationText(const Observation &o) {
  std::string out = "\nobserved on " + observedWhere(o) + "\n  " + conclusionSentence(o) + "\n";
  if (!o.originalError.empty())
    out += "  error: " + o.originalError + "\n";
  if (!o.path.empty()) {
    out += "  compiled:";
    for (const auto &[variant, outcome] : o.path)
      out += " " + variant + " (" + outcome + ")";
    out += "\n";
  }
  if (o.opsObserved)
    out += "  placement: " + std::to_string(o.placementAgrees) + " of " +
           std::to_string(o.opsObserved) +
           " ops where the prediction and the Mac's compute plan agree (ANE or not); " +
           std::to_string(o.observedAneOps) + " ops observed on the ANE\n";
  if (o.maxAbsDiffVsCpu)
    out += "  numerics: outputs of CPU_AND_NE vs CPU_ONLY differ by at most " +
           std::to_string(*o.maxAbsDiffVsCpu) + "\n";
  if (!o.suspects.empty()) {
    out += "\n  | suspect | rules | predicted | observed | alone | prediction |\n"
           "  | --- | --- | --- | --- | --- | --- |\n";
    for (const SuspectVerdict &v : o.suspects) {
      std::string rules = joined(v.rules, ", ");
      if (!v.pattern.empty())
        rules += " `" + v.pattern + "`";
      out += "  | " + v.suspect + " | " + rules + " | " + v.predicted + " | " + v.observed + " | " +
             (v.alone.empty() ? std::string("-") : v.alone) + " | " + v.agreement + " |\n";
    }
  }
  return out;
}

Json observationJson(const Observation &o) {
  Json j;
  j["observations"] = o.observationsPath;
  j["host"] = o.host;
  j["original"] = o.originalOutcome;
  if (!o.originalError.empty())
    j["error"] = o.originalError;
  j["conclusion"] = o.conclusion;
  j["culprits"] = o.culprits;
  j["predictedVerdict"] = verdictName(o.predictedVerdict);
  Json path = Json::array();
  for (const auto &[variant, outcome] : o.path)
    path.push_back({{"variant", variant}, {"outcome", outcome}});
  j["compiled"] = path;
  Json suspects = Json::array();
  for (const SuspectVerdict &v : o.suspects) {
    Json sj = {{"suspect", v.suspect},   {"rules", v.rules}, {"predicted", v.predicted},
               {"observed", v.observed}, {"alone", v.alone}, {"agreement", v.agreement}};
    if (!v.pattern.empty())
      sj["pattern"] = v.pattern;
    suspects.push_back(sj);
  }
  j["suspects"] = suspects;
  j["opsObserved"] = o.opsObserved;
  j["placementAgrees"] = o.placementAgrees;
  j["observedAneOps"] = o.observedAneOps;
  if (o.maxAbsDiffVsCpu)
    j["maxAbsDiffVsCpu"] = *o.maxAbsDiffVsCpu;
  return j;
}

} // namespace

/// "numerics (measured): ..." lines of a report whose check ran
/// --numerics: the run, the outputs at fp16 against fp32, the ops diverging.
static std::string numericsText(const NumericsMeasurement &n) {
  char buf[600];
  std::snprintf(buf, sizeof buf,
                "\nnumerics (measured): function '%s' at fp16 (every op rounded) against fp32, "
                "%lld step%s on %s\n",
                n.function.c_str(), static_cast<long long>(n.steps), n.steps == 1 ? "" : "s",
                n.inputs.c_str());
  std::string out = buf;
  if (!n.widest.empty()) {
    char rel[32] = "inf";
    if (!std::isinf(n.outputRelError))
      std::snprintf(rel, sizeof rel, "%.2f%%", 100 * n.outputRelError);
    std::snprintf(buf, sizeof buf,
                  "  outputs: '%s': relative RMS error %s, top-1 agrees on %zu/%zu rows",
                  n.widest.c_str(), rel, n.top1Agree, n.rows);
    out += buf;
  } else {
    out += "  outputs: no float output";
  }
  if (n.outputNonFinite)
    out += "; " + std::to_string(n.outputNonFinite) + " values inf or NaN";
  if (n.collapsedRows)
    out += "; " + std::to_string(n.collapsedRows) + " rows collapsed to one value";
  out += n.diverged() ? ": WRONG\n" : "\n";
  size_t origins = 0;
  for (const MeasuredOp &m : n.ops)
    origins += m.origin;
  out += "  ops: " + std::to_string(n.divergentOps) + " of " + std::to_string(n.opsCompared) +
         " lose values or leave fp32 by more than " +
         std::to_string(std::lround(n.tolerance * 100)) + "%; " + std::to_string(origins) +
         " start a divergence that carries on (ANE-NUM-001)\n";
  return out;
}

std::string renderText(const CheckReport &report, const TextOptions &options) {
  auto paint = [&](const char *code, const std::string &s) {
    return options.color ? std::string(code) + s + "\033[0m" : s;
  };
  const CheckOptions &o = report.options;
  std::string out = "anefit check: " + (report.modelPath.empty() ? "<model>" : report.modelPath) +
                    " (chip " + std::string(chipInfo(o.chip).name) + ", os " + osLabel(o.os) +
                    ", compute units " + std::string(computeUnitsName(o.computeUnits)) + ")\n";
  if (!report.origin.empty())
    out += "  ExecuTorch program: " + report.origin + "\n";
  for (const FunctionReport &f : report.functions) {
    std::string sentence = verdictSentence(f, o.computeUnits);
    if (report.observation && !report.observation->originalOutcome.empty())
      sentence = (f.verdict == Verdict::AneFails
                      ? "ANE compile or first prediction observed to FAIL on " +
                            observedWhere(*report.observation)
                      : "observed to compile and run on " + observedWhere(*report.observation) +
                            "; predicted: " + sentence);
    out += "\nfunction " + paint("\033[1m", f.name) + ": " +
           paint(verdictColor(f.verdict), std::string(verdictName(f.verdict))) + "\n  " + sentence +
           "\n";
    out += "  " + std::to_string(f.ops.size()) + " ops (" + std::to_string(f.aneOps) +
           " placed on the ANE), " + humanFlops(f.totalFlops) + ", " +
           plural(f.segments.size(), "segment") + ", " + plural(f.boundaries, "boundary") + ", " +
           plural(f.states, "state") + ", weights " + humanBytes(f.weightBytes) +
           (f.denseWeightBytes > f.weightBytes
                ? " stored (" + humanBytes(f.denseWeightBytes) + " decompressed)"
                : std::string()) +
           "\n";
    out += "  " + coverageSentence(f) + "\n";
    for (size_t i = 0; i < f.segments.size() && i < options.maxSegments; ++i) {
      const Segment &s = f.segments[i];
      out += "  segment " + std::to_string(i + 1) + ": " + (s.onAne ? "ane" : "cpu-gpu") + " " +
             f.ops[s.firstOp].name + (s.opCount > 1 ? " .. " + f.ops[s.lastOp].name : "") + " (" +
             std::to_string(s.opCount) + (s.opCount == 1 ? " op, " : " ops, ") +
             humanFlops(s.flops) + ")" + (s.compileFails ? ", compile fails" : "") +
             (s.atRisk && !s.compileFails ? ", at risk" : "") + "\n";
    }
    if (f.segments.size() > options.maxSegments)
      out += "  ... and " + std::to_string(f.segments.size() - options.maxSegments) +
             " more segments\n";
    if (options.placement)
      for (const OpReport &o : f.ops) {
        out += "    " + std::string(placementName(o.placement)) + (o.atRisk ? " (at-risk)" : "") +
               "  " + o.type + " '" + o.name + "'";
        for (RuleId id : o.rules)
          out += " " + std::string(ruleInfo(id).code);
        out += "\n";
      }
  }
  // Group findings by rule; findings are already most severe first.
  std::vector<std::pair<RuleId, std::vector<const Finding *>>> groups;
  for (const Finding &f : report.findings) {
    if (groups.empty() || groups.back().first != f.rule ||
        groups.back().second.front()->level() != f.level())
      groups.push_back({f.rule, {}});
    groups.back().second.push_back(&f);
  }
  for (const auto &[id, list] : groups) {
    const RuleInfo &r = ruleInfo(id);
    Level l = list.front()->level();
    bool contested = list.front()->certainty == Certainty::Contested;
    out += "\n" + paint(levelColor(l), std::string(levelName(l))) + " " + std::string(r.code) +
           ": " + std::string(r.title) + " [" + std::string(confidenceName(r.confidence)) +
           (contested ? ", predicts " + std::string(effectName(list.front()->effect)) : "") + "]" +
           (list.size() > 1 ? " (" + std::to_string(list.size()) + " findings)" : "") + "\n";
    if (!list.front()->observed.empty())
      out += "  " + list.front()->observed + "\n";
    for (size_t i = 0; i < list.size() && i < options.maxPerRule; ++i) {
      const Finding &f = *list[i];
      out += "  " + f.function + ": ";
      if (!f.op.empty()) {
        out += f.opType + " '" + f.op + "'";
        if (!f.torchNode.empty())
          out += " (torch node " + f.torchNode + ")";
        for (size_t h = 0; h < f.debugHandles.size(); ++h)
          out += (h ? ", " : " [ExecuTorch debug handle ") + std::to_string(f.debugHandles[h]) +
                 (h + 1 == f.debugHandles.size() ? "]" : "");
        out += "\n";
        if (f.source)
          out += sourceText(*f.source);
        out += "    " + f.types + "\n    ";
      }
      out += f.message + "\n";
    }
    if (list.size() > options.maxPerRule)
      out += "  ... and " + std::to_string(list.size() - options.maxPerRule) + " more\n";
    auto fails = r.failCases();
    auto works = r.passCases();
    if (contested) {
      out += "  contested: " + list.front()->contradiction + "\n";
      for (const EvidenceCase &c : fails)
        out += "  fails: " + caseText(c) + "\n";
      for (const EvidenceCase &c : works)
        out += "  works: " + caseText(c) + "\n";
      out += "  settle: " + std::string(r.settleCheck()) + "\n";
    } else {
      if (!fails.empty())
        out += "  evidence: " + caseText(fails.front()) + "\n";
      if (!works.empty() && l >= Level::AtRisk)
        out += "  works: " + caseText(works.front()) + "\n";
    }
    out += "  fix: " + fixHint(r) + "\n";
    if (!report.origin.empty())
      for (const Remedy *rem : distinctRemedies(list))
        out += "  at export (" + std::string(remedyWhereName(rem->where)) +
               "): " + std::string(rem->setting) + ": " + std::string(rem->what) + "\n";
  }
  std::map<Level, size_t> counts;
  for (const Finding &f : report.findings)
    ++counts[f.level()];
  std::string summary;
  for (auto it = counts.rbegin(); it != counts.rend(); ++it)
    summary += (summary.empty() ? "" : ", ") + std::to_string(it->second) + " " +
               std::string(levelName(it->first));
  if (report.observation)
    out += observationText(*report.observation);
  if (report.options.numerics)
    out += numericsText(*report.options.numerics);
  out += "\nsummary: " + (summary.empty() ? std::string("no findings") : summary) + "; verdict " +
         std::string(verdictName(report.verdict)) +
         (report.observation && !report.observation->originalOutcome.empty() ? " (observed)" : "") +
         (report.options.numerics ? " (numerics measured)" : "") + "\n";
  return out;
}

/// The export-time remedies of a finding (Remedies.def), for reports on a
/// model read from an ExecuTorch program; empty for other models.
static Json remediesJson(const CheckReport &report, const Finding &f) {
  Json out = Json::array();
  if (report.origin.empty())
    return out;
  for (const Remedy *r : remediesFor(f))
    out.push_back({{"where", remedyWhereName(r->where)},
                   {"setting", r->setting},
                   {"what", r->what},
                   {"evidence", r->evidence}});
  return out;
}

static Json casesJson(const std::vector<EvidenceCase> &cases) {
  Json a = Json::array();
  for (const EvidenceCase &c : cases)
    a.push_back({{"url", c.url},
                 {"certainty", evidenceCertaintyName(c.certainty)},
                 {"quote", c.quote},
                 {"what", c.what}});
  return a;
}

/// The share of a function's ops and FLOPs with working evidence, and the
/// patterns without.
static Json coverageJson(const FunctionReport &f) {
  Json unverified = Json::array();
  for (const UnverifiedPattern &u : f.unverified)
    unverified.push_back(
        {{"pattern", u.pattern}, {"risky", u.risky}, {"ops", u.ops}, {"flops", u.flops}});
  return {{"coveredOps", f.coveredOps},
          {"coveredOpFraction", f.ops.empty() ? 0.0 : (double)f.coveredOps / (double)f.ops.size()},
          {"coveredFlopFraction", f.totalFlops > 0 ? f.coveredFlops / f.totalFlops : 0.0},
          {"unverified", unverified}};
}

static Json optionsJson(const CheckOptions &o) {
  Json j;
  j["chip"] = chipInfo(o.chip).name;
  j["os"] = osName(o.os);
  j["computeUnits"] = computeUnitsName(o.computeUnits);
  if (!o.function.empty())
    j["function"] = o.function;
  return j;
}

std::string renderObservationJson(const Observation &observation) {
  return dumpJson(observationJson(observation), 2);
}

std::string renderJson(const CheckReport &report) {
  Json j;
  j["schema"] = kCheckSchema;
  j["tool"] = {{"name", "anefit"}, {"version", ANEFIT_VERSION}};
  j["model"] = report.modelPath;
  if (!report.origin.empty())
    j["origin"] = report.origin;
  j["options"] = optionsJson(report.options);
  j["verdict"] = verdictName(report.verdict);
  j["weightBytes"] = report.weightBytes;
  j["denseWeightBytes"] = report.denseWeightBytes;
  Json counts = Json::object();
  for (Level l : {Level::RuntimeFail, Level::CompileFail, Level::AtRisk, Level::WrongNumerics,
                  Level::Fallback, Level::Slow}) {
    size_t n = 0;
    for (const Finding &f : report.findings)
      n += f.level() == l;
    counts[std::string(levelName(l))] = n;
  }
  j["findingCounts"] = counts;
  if (const NumericsMeasurement *n = report.options.numerics.get()) {
    Json ops = Json::array();
    for (const MeasuredOp &m : n->ops)
      ops.push_back({{"function", m.function},
                     {"op", m.op},
                     {"origin", m.origin},
                     {"maxAbsIn", m.maxAbsIn},
                     {"maxAbsOut", m.maxAbsOut},
                     {"relError", std::isinf(m.relError) ? Json(nullptr) : Json(m.relError)},
                     {"nonFinite", m.nonFinite},
                     {"zeroed", m.zeroed},
                     {"elements", m.elements},
                     {"step", m.step}});
    j["numerics"] = {
        {"function", n->function},
        {"steps", n->steps},
        {"inputs", n->inputs},
        {"tolerance", n->tolerance},
        {"diverged", n->diverged()},
        {"outputs",
         {{"widest", n->widest},
          {"relError", std::isinf(n->outputRelError) ? Json(nullptr) : Json(n->outputRelError)},
          {"nonFinite", n->outputNonFinite},
          {"collapsedRows", n->collapsedRows},
          {"rows", n->rows},
          {"top1Agree", n->top1Agree}}},
        {"opsCompared", n->opsCompared},
        {"divergentOps", n->divergentOps},
        {"ops", ops}};
  }
  Json fns = Json::array();
  for (const FunctionReport &f : report.functions) {
    Json fj;
    fj["name"] = f.name;
    fj["verdict"] = verdictName(f.verdict);
    fj["ops"] = f.ops.size();
    fj["aneOps"] = f.aneOps;
    fj["flops"] = f.totalFlops;
    fj["aneFlops"] = f.aneFlops;
    fj["aneOpFraction"] = f.ops.empty() ? 0.0 : (double)f.aneOps / (double)f.ops.size();
    fj["aneFlopFraction"] = f.totalFlops > 0 ? f.aneFlops / f.totalFlops : 0.0;
    fj["states"] = f.states;
    fj["weightBytes"] = f.weightBytes;
    fj["denseWeightBytes"] = f.denseWeightBytes;
    fj["boundaries"] = f.boundaries;
    fj["coverage"] = coverageJson(f);
    Json segs = Json::array();
    for (const Segment &s : f.segments)
      segs.push_back({{"device", s.onAne ? "ane" : "cpu-gpu"},
                      {"compileFails", s.compileFails},
                      {"atRisk", s.atRisk},
                      {"firstOp", f.ops[s.firstOp].name},
                      {"lastOp", f.ops[s.lastOp].name},
                      {"ops", s.opCount},
                      {"flops", s.flops}});
    fj["segments"] = segs;
    Json ops = Json::array();
    for (const OpReport &o : f.ops) {
      Json oj = {{"name", o.name}, {"type", o.type}, {"placement", placementName(o.placement)}};
      Json rules = Json::array();
      for (RuleId id : o.rules)
        rules.push_back(ruleInfo(id).code);
      oj["rules"] = rules;
      oj["atRisk"] = o.atRisk;
      oj["flops"] = o.flops;
      oj["pattern"] = o.pattern;
      oj["covered"] = o.covered;
      ops.push_back(oj);
    }
    fj["placement"] = ops;
    fns.push_back(fj);
  }
  j["functions"] = fns;
  Json findings = Json::array();
  for (const Finding &f : report.findings) {
    const RuleInfo &r = ruleInfo(f.rule);
    Json fj = {{"rule", r.code},
               {"title", r.title},
               {"effect", effectName(f.effect)},
               {"level", levelName(f.level())},
               {"certainty", certaintyName(f.certainty)},
               {"confidence", confidenceName(r.confidence)},
               {"function", f.function}};
    if (!f.op.empty()) {
      fj["op"] = f.op;
      fj["opType"] = f.opType;
      fj["types"] = f.types;
      if (!f.torchNode.empty())
        fj["torchNode"] = f.torchNode;
      if (!f.debugHandles.empty())
        fj["debugHandles"] = f.debugHandles;
    }
    fj["message"] = f.message;
    if (f.source)
      fj["source"] = anefit::report::sourceJson(*f.source);
    if (!f.observed.empty())
      fj["observed"] = f.observed;
    Json ev = Json::array();
    for (std::string_view u : r.evidenceUrls())
      ev.push_back(u);
    fj["evidence"] = ev;
    fj["failEvidence"] = casesJson(r.failCases());
    fj["passEvidence"] = casesJson(r.passCases());
    fj["ours"] = casesJson(r.oursCases());
    if (f.certainty == Certainty::Contested) {
      fj["contradiction"] = f.contradiction;
      fj["settle"] = r.settleCheck();
    }
    fj["fix"] = fixHint(r);
    fj["fixPasses"] = passesRemoving(r.code);
    fj["remedies"] = remediesJson(report, f);
    findings.push_back(fj);
  }
  j["findings"] = findings;
  if (report.observation)
    j["observation"] = observationJson(*report.observation);
  return dumpJson(j, 2) + "\n";
}

/// error for uncontested failures, warning for at-risk, wrong numerics and
/// fallbacks, note for slow.
static const char *sarifLevel(Level l) {
  return l >= Level::CompileFail ? "error" : l == Level::Slow ? "note" : "warning";
}

static const char *sarifLevel(Effect e) { return sarifLevel(levelOf(e, Certainty::Confirmed)); }

namespace {

/// "`conv`, `conv_transpose`" (with ticks) or "conv, conv_transpose":
/// the op types an op rule looks at; "every op but gather, ..." for one
/// that skips some; empty for a rule that sees every op.
std::string ruleOpsText(const RuleInfo &r, bool ticks) {
  auto names = [&](std::span<const std::string_view> types) {
    std::vector<std::string> out;
    for (std::string_view t : types)
      out.push_back(ticks ? "`" + std::string(t) + "`" : std::string(t));
    return joined(out, ", ");
  };
  if (auto skips = ruleSkippedOpTypes(r.id); !skips.empty())
    return "every op but " + names(skips);
  return names(ruleOpTypes(r.id));
}

Json sarifRules() {
  Json rules = Json::array();
  for (const RuleInfo &r : allRules()) {
    auto urls = r.evidenceUrls();
    Json rule = {
        {"id", r.code},
        {"name", std::string(r.code)},
        {"shortDescription", {{"text", r.title}}},
        {"fullDescription",
         {{"text",
           std::string(r.title) + " (" + std::string(effectName(r.effect)) + ", " +
               std::string(confidenceName(r.confidence)) + "). Matches: " + std::string(r.scope) +
               (ruleOpsText(r, false).empty() ? "" : "; ops: " + ruleOpsText(r, false)) + "."}}},
        {"help", {{"text", "Fix: " + fixHint(r)}}},
        {"defaultConfiguration", {{"level", sarifLevel(r.effect)}}},
        {"properties",
         {{"effect", effectName(r.effect)},
          {"confidence", confidenceName(r.confidence)},
          {"appliesTo", gateDescription(r.gate)},
          {"tags", Json::array({"ane", std::string(effectName(r.effect))})}}}};
    if (!urls.empty())
      rule["helpUri"] = urls.front();
    rules.push_back(rule);
  }
  return rules;
}

/// Appends the SARIF results of `report`'s findings to `results`.
void appendSarifResults(const CheckReport &report, Json &results) {
  std::string uri = report.modelPath.empty() ? "model" : report.modelPath;
  for (const Finding &f : report.findings) {
    std::string where = f.function + (f.op.empty() ? "" : "/" + f.op);
    Json logical = {{"name", f.op.empty() ? f.function : f.op},
                    {"fullyQualifiedName", where},
                    {"kind", f.op.empty() ? "function" : "member"}};
    Json result = {
        {"ruleId", ruleInfo(f.rule).code},
        {"ruleIndex", (size_t)f.rule},
        {"level", sarifLevel(f.level())},
        {"message",
         {{"text", where + ": " + f.message +
                       (f.certainty == Certainty::Contested
                            ? " [at-risk: " + f.contradiction +
                                  "; settle: " + std::string(ruleInfo(f.rule).settleCheck()) + "]"
                            : std::string())}}},
        {"locations",
         Json::array({{{"physicalLocation",
                        {{"artifactLocation", {{"uri", uri}}}, {"region", {{"startLine", 1}}}}},
                       {"logicalLocations", Json::array({logical})}}})},
        {"partialFingerprints",
         {{"anefitLocation/v1", std::string(ruleInfo(f.rule).code) + ":" + where}}},
        {"properties",
         {{"effect", effectName(f.effect)},
          {"level", levelName(f.level())},
          {"certainty", certaintyName(f.certainty)},
          {"opType", f.opType}}}};
    // With an ETRecord the result sits on the PyTorch line behind the op,
    // where code scanning annotates the model's source.
    if (f.source && f.source->line > 0) {
      result["locations"][0]["physicalLocation"] = {{"artifactLocation", {{"uri", f.source->file}}},
                                                    {"region", {{"startLine", f.source->line}}}};
      result["properties"]["source"] = anefit::report::sourceJson(*f.source);
    }
    Json remedies = remediesJson(report, f);
    if (!remedies.empty()) {
      result["properties"]["remedies"] = remedies;
      std::string text = result["message"]["text"].get<std::string>();
      for (const Json &rem : remedies)
        text += " At export (" + rem["where"].get<std::string>() +
                "): " + rem["setting"].get<std::string>() + ".";
      result["message"]["text"] = text;
    }
    results.push_back(result);
  }
}

std::string sarifLog(Json results, Json properties) {
  Json run = {{"tool",
               {{"driver",
                 {{"name", "anefit"},
                  {"version", ANEFIT_VERSION},
                  {"informationUri", "https://github.com/anefit/anefit"},
                  {"rules", sarifRules()}}}}},
              {"results", std::move(results)},
              {"properties", std::move(properties)}};
  Json j = {{"$schema", "https://json.schemastore.org/sarif-2.1.0.json"},
            {"version", "2.1.0"},
            {"runs", Json::array({run})}};
  return dumpJson(j, 2) + "\n";
}

/// The worst verdict of `reports`.
Verdict worstVerdict(const std::vector<CheckReport> &reports) {
  Verdict v = Verdict::Ane;
  for (const CheckReport &r : reports)
    v = std::max(v, r.verdict);
  return v;
}

} // namespace

std::string renderSarif(const CheckReport &report) {
  Json results = Json::array();
  appendSarifResults(report, results);
  Json coverage = Json::array();
  for (const FunctionReport &f : report.functions)
    coverage.push_back({{"function", f.name}, {"coverage", coverageJson(f)}});
  return sarifLog(std::move(results),
                  {{"verdict", verdictName(report.verdict)}, {"coverage", coverage}});
}

std::string renderProgramText(const std::vector<CheckReport> &reports, std::string_view programPath,
                              const TextOptions &options) {
  std::string out;
  for (const CheckReport &r : reports)
    out += renderText(r, options) + "\n";
  out += "program " + std::string(programPath) + ": " + std::to_string(reports.size()) +
         " Core ML delegates; verdict " + std::string(verdictName(worstVerdict(reports))) +
         " (the worst delegate's)\n";
  return out;
}

std::string renderProgramJson(const std::vector<CheckReport> &reports,
                              std::string_view programPath) {
  Json j;
  j["schema"] = kCheckProgramSchema;
  j["tool"] = {{"name", "anefit"}, {"version", ANEFIT_VERSION}};
  j["model"] = std::string(programPath);
  j["verdict"] = verdictName(worstVerdict(reports));
  Json delegates = Json::array();
  for (const CheckReport &r : reports)
    delegates.push_back(Json::parse(renderJson(r)));
  j["delegates"] = std::move(delegates);
  return dumpJson(j, 2) + "\n";
}

std::string renderProgramSarif(const std::vector<CheckReport> &reports,
                               std::string_view programPath) {
  Json results = Json::array();
  Json delegates = Json::array();
  for (const CheckReport &r : reports) {
    appendSarifResults(r, results);
    Json coverage = Json::array();
    for (const FunctionReport &f : r.functions)
      coverage.push_back({{"function", f.name}, {"coverage", coverageJson(f)}});
    delegates.push_back(
        {{"model", r.modelPath}, {"verdict", verdictName(r.verdict)}, {"coverage", coverage}});
  }
  return sarifLog(std::move(results), {{"verdict", verdictName(worstVerdict(reports))},
                                       {"program", std::string(programPath)},
                                       {"delegates", std::move(delegates)}});
}

/// Whether the rule can call a model ane-fails: a failing case observed in
/// isolation, on the Core ML path (RuleContext::report contests the rest).
static bool confirmsFailures(const RuleInfo &r) {
  return r.path == EvidencePath::CoreMl && r.failureIsolated();
}

std::string_view strongestFailure(const RuleInfo &rule) {
  auto fails = rule.failCases();
  if (fails.empty())
    return "none";
  EvidenceCertainty best = EvidenceCertainty::Inferred;
  for (const EvidenceCase &c : fails)
    best = std::min(best, c.certainty);
  return evidenceCertaintyName(best);
}

std::string rulesText() {
  std::string out;
  for (const RuleInfo &r : allRules())
    out += std::string(r.code) + "  " + std::string(effectName(r.effect)) + "  " +
           std::string(confidenceName(r.confidence)) + "  failure " +
           std::string(strongestFailure(r)) + "  " + std::string(r.title) + "\n";
  return out;
}

std::string ruleText(const RuleInfo &r) {
  std::string out = std::string(r.code) + ": " + std::string(r.title) + "\n";
  out += "  effect " + std::string(effectName(r.effect)) + ", " +
         std::string(confidenceName(r.confidence)) + ", failing evidence on the " +
         std::string(evidencePathName(r.path)) + " path, " +
         (r.kind == RuleKind::Function ? "per function" : "per op") + ", " +
         std::string(gateDescription(r.gate)) + "\n";
  out += "  matches: " + std::string(r.scope) + "\n";
  if (std::string ops = ruleOpsText(r, false); !ops.empty())
    out += "  ops: " + ops + "\n";
  if (r.effect >= Effect::CompileFail)
    out += std::string("  verdict: ") +
           (confirmsFailures(r)
                ? "ane-fails (a failure observed for the pattern alone)"
                : "at-risk at most (no failure observed for the pattern alone on Core ML)") +
           "\n";
  for (const EvidenceCase &c : r.failCases())
    out += "  fails: " + caseText(c) + "\n";
  for (const EvidenceCase &c : r.passCases())
    out += "  works: " + caseText(c) + "\n";
  for (const EvidenceCase &c : r.oursCases())
    out += "  ours: " + std::string(c.what) + "\n";
  if (r.effect >= Effect::CompileFail)
    out += "  settle: " + std::string(r.settleCheck()) + "\n";
  out += "  fix: " + fixHint(r) + "\n";
  return out;
}

std::string rulesJson() {
  Json rules = Json::array();
  for (const RuleInfo &r : allRules()) {
    Json ev = Json::array();
    for (std::string_view u : r.evidenceUrls())
      ev.push_back(u);
    rules.push_back({{"id", r.code},
                     {"title", r.title},
                     {"kind", r.kind == RuleKind::Op ? "op" : "function"},
                     {"scope", r.scope},
                     {"ops", ruleOpTypes(r.id)},
                     {"skipsOps", ruleSkippedOpTypes(r.id)},
                     {"effect", effectName(r.effect)},
                     {"confidence", confidenceName(r.confidence)},
                     {"appliesTo", gateDescription(r.gate)},
                     {"evidencePath", evidencePathName(r.path)},
                     {"evidence", ev},
                     {"failEvidence", casesJson(r.failCases())},
                     {"passEvidence", casesJson(r.passCases())},
                     {"ours", casesJson(r.oursCases())},
                     {"failureIsolated", r.failureIsolated()},
                     {"settle", r.settleCheck()},
                     {"fix", fixHint(r)},
                     {"fixPasses", passesRemoving(r.code)}});
  }
  Json certainties = Json::array();
  for (auto c : {EvidenceCertainty::Isolated, EvidenceCertainty::Together,
                 EvidenceCertainty::Statement, EvidenceCertainty::Inferred})
    certainties.push_back(
        {{"name", evidenceCertaintyName(c)}, {"meaning", evidenceCertaintyDescription(c)}});
  Json j = {{"schema", "anefit.rules/3"}, {"certainties", certainties}, {"rules", rules}};
  return dumpJson(j, 2) + "\n";
}

std::string rulesMarkdown(std::string_view corpusSection) {
  auto cell = [](std::string_view s) {
    std::string out;
    for (char c : s)
      out += c == '|' ? std::string("\\|") : std::string(1, c);
    return out;
  };
  auto link = [&](const EvidenceCase &c) {
    std::string out =
        "<" + std::string(c.url) + "> [" + std::string(evidenceCertaintyName(c.certainty)) + "]";
    if (!c.quote.empty())
      out += " \"" + cell(c.quote) + "\"";
    if (!c.what.empty())
      out += " — " + cell(c.what);
    return out;
  };
  std::string md =
      "# ANE preflight rules\n\n"
      "<!-- Generated by `anefit rules --format markdown --evidence tests/fixtures/evidence` from "
      "src/ane/AneRules.def and the evidence corpus; do not edit by hand. -->\n\n"
      "`anefit check` applies these rules to every function of a Core ML ML Program. "
      "Each rule predicts an **effect** if the model runs with compute units that include "
      "the Neural Engine:\n\n"
      "| effect | meaning |\n|---|---|\n"
      "| runtime-fail | compiles, then fails at the first prediction (e.g. status 0x1d) |\n"
      "| compile-fail | the ANE compile of the segment fails (`ANECCompile() FAILED`): load "
      "error, crash, or silent whole-model fallback |\n"
      "| wrong-numerics | runs on the ANE with wrong results |\n"
      "| fallback | the op (or the whole function) is placed on CPU/GPU |\n"
      "| slow | stays on the ANE but pays padding, copies or boundary costs |\n\n"
      "Every rule carries its evidence both ways, each piece from `src/ane/RuleEvidence.def` "
      "with a short verbatim quote and how its outcome was established: the public cases "
      "that **fail** and the known-working cases that **bound** the rule, and, marked **ours**, "
      "every threshold or scope of the rule that no source states. The certainty scale:\n\n"
      "| certainty | meaning |\n|---|---|\n"
      "| isolated | observed for this pattern alone (an A/B where only it changed, or a model "
      "whose only suspect it is) |\n"
      "| together | observed only on models with other suspects |\n"
      "| statement | a maintainer's or author's statement without a log |\n"
      "| inferred | our inference from indirect evidence |\n\n"
      "A compile or runtime failure is **confirmed** (verdict `ane-fails`) only when a failing "
      "case was observed for the rule's own pattern in isolation, on the public Core ML path, "
      "and nothing public contradicts it for the case at hand. Otherwise it is **contested**: "
      "the failure was observed only together with other suspects or only stated, working "
      "evidence covers the case too, or it was measured off the public Core ML path (the "
      "**path** column: `core-ml`, `core-ai` for Apple's Core AI stack, `direct` for the "
      "private in-memory compiler). A contested failure gives the finding level and the verdict "
      "**at-risk**, with both sides' evidence and the check on a Mac that settles it.\n\n"
      "Levels, most severe first: " +
      joined(levelNames(), " > ") +
      "; `--fail-on LEVEL` exits 1 when a finding is at least that severe. "
      "Verdicts, most severe first: `ane-fails` (a confirmed failure), `at-risk`, `no-ane`, "
      "`partial`, `ane`. **Confidence**: `apple-documented` (Apple docs, coremltools source or "
      "Apple-owned repositories), `measured` (a third party measured it with a reproducible "
      "setup), `folklore` (single anecdote; none are encoded yet).\n\n"
      "| id | title | effect | confidence | failure observed | path | applies to |\n"
      "|---|---|---|---|---|---|---|\n";
  for (const RuleInfo &r : allRules())
    md += "| [" + std::string(r.code) + "](#" + std::string(r.code) + ") | " + cell(r.title) +
          " | " + std::string(effectName(r.effect)) + " | " +
          std::string(confidenceName(r.confidence)) + " | " + std::string(strongestFailure(r)) +
          " | " + std::string(evidencePathName(r.path)) + " | " +
          std::string(gateDescription(r.gate)) + " |\n";
  md += "\n## Rules\n";
  for (const RuleInfo &r : allRules()) {
    md += "\n### " + std::string(r.code) + "\n\n**" + std::string(r.title) + "** (" +
          std::string(effectName(r.effect)) + ", " + std::string(confidenceName(r.confidence)) +
          ", failing evidence on the " + std::string(evidencePathName(r.path)) + " path, " +
          (r.kind == RuleKind::Function ? "per function" : "per op") + ")\n\n";
    md += "- matches: " + std::string(r.scope) + "\n";
    if (std::string ops = ruleOpsText(r, true); !ops.empty())
      md += "- ops: " + ops + "\n";
    for (const EvidenceCase &c : r.failCases())
      md += "- fails: " + link(c) + "\n";
    auto works = r.passCases();
    if (works.empty())
      md += "- works: no public working case bounds this rule beyond its own threshold\n";
    for (const EvidenceCase &c : works)
      md += "- works: " + link(c) + "\n";
    for (const EvidenceCase &c : r.oursCases())
      md += "- ours: " + cell(c.what) + "\n";
    if (r.effect >= Effect::CompileFail)
      md += std::string("- verdict: ") +
            (confirmsFailures(r)
                 ? "`ane-fails` where nothing public contradicts it for the case"
                 : "`at-risk` at most: no failure observed for the pattern alone on Core ML") +
            "\n";
    if (r.effect >= Effect::CompileFail)
      md += "- settle an at-risk finding: " + std::string(r.settleCheck()) + "\n";
    md += "- fix: " + fixHint(r) + "\n";
  }
  if (!corpusSection.empty())
    md += "\n" + std::string(corpusSection);
  md += "\n## Targets\n\n"
        "`--chip` selects the capabilities rules key on (the public sources disagree on which "
        "chips share an ANE generation, so rules use capabilities, not names):\n\n"
        "| chip | phone | axis limit | fp16 conv kernel (w x h) | texture engine | sin/cos |\n"
        "|---|---|---|---|---|---|\n";
  for (const ChipInfo &c : allChips())
    md += "| " + std::string(c.name) + " | " + (c.phone ? "yes" : "no") + " | " +
          std::to_string(c.axisLimit) + " | " + std::to_string(c.kernelWidth) + " x " +
          std::to_string(c.kernelHeight) + " | " + (c.texture ? "yes" : "no") + " | " +
          (c.sinCos ? "native" : "no") + " |\n";
  md += "\n`any` (the default) is the conservative union: every gated rule applies with the "
        "smallest limits. `--os any` likewise applies the iOS 26 rules.\n\n"
        "## The state rules, re-examined\n\n"
        "A review of each state rule against its sources (the quotes are in the rows above) "
        "found that only one state failure was observed for its pattern alone:\n\n"
        "- **ANE-STATE-002** is the one A/B: CoreML-LLM's LFM2 bisection (macOS 26.0.1) runs "
        "with the KV state alone and with the conv window as a plain input/output, and fails "
        "at the first prediction (0x1d, after compiling) with the window as a second state, "
        "read-only, padded to 16 or rank 3 alike. Narrowness itself is not isolated (no second "
        "state of 32 or wider was tried); two aligned KV states (Gemma 4) ship on the iPhone.\n"
        "- **ANE-STATE-001, -003, -004, -005 and -007 are at-risk at most.** The only three-state "
        "failure (Qwen3.5) also writes with slice_update and its source blames the combination; "
        "the width pair of coremltools#2631 (270 fails, 256 works) changes every activation's "
        "width too; every narrow-state failure had a second (KV) state and failed at prediction, "
        "not compile; ExecuTorch#21855's error (\"must be an MLState\") comes from ExecuTorch's "
        "runtime, not the ANE; the 128-row write of coremltools#2553 has no runtime position, "
        "and its working variant changed four things at once (64 rows is Anemll's prefill "
        "default, a floor, not a measured limit).\n"
        "- **Runtime write positions (ANE-STATE-006).** No public source shows a cache passed as "
        "a plain function input and written at a runtime position, failing or working. The "
        "isolated failures (coreai-torch#6, coreai-models#5) are writes into a *state* on Apple's "
        "Core AI stack; through classic Core ML the same write into a KV state ships (Anemll, "
        "CoreML-LLM). The rule stays at-risk for the plain-input form, the scope marked ours: "
        "it is the pattern of the real ExecuTorch `export_llm` export, whose one public report "
        "(ExecuTorch#19635) failed with other suspects in the same graph. Compiling it on a Mac "
        "settles it; moving the write to the host avoids the question.\n"
        "- **ANE-STATE-008 to -011 are at-risk always.** Each rests on one model whose "
        "failure had other suspects: a window shifted by slice and concat (Bonsai/Qwen3, tied "
        "embeddings too; Gemma 4 ships the shift), a slice of a state returned as an output "
        "and a multifunction prefill (Gemma 4 on the iPhone; the Mac runs both), a rank-5 "
        "state (coremltools#2325, layout not published).\n\n"
        "## Weights\n\n"
        "`show`, `check` and `split` share one weight counter (src/ops/Weights.h). It counts "
        "compressed weights as stored (palettized indices and lookup tables, sparse masks and "
        "values, blockwise and per-channel quantized data, scales and offsets, each at its own "
        "dtype) and as the dense tensors the compute ops read once decompression is folded. "
        "ANE-PROG-001/002 judge the stored size: the measured iPhone budgets are package sizes "
        "(a 900 MB int4 package compiled on the ANE where the 1.8 GB int8 package of the same "
        "model did not).\n\n"
        "## Left out on purpose\n\n"
        "- **Direct-path artefacts.** Findings from the private `_ANEInMemoryModel` / "
        "`_ANECompiler` path with hand-written MIL (concat and gelu rejected, equal-sized "
        "alphabetically bound I/O surfaces, named transpose flags, a ~49 KB minimum surface, "
        "~100 compiles per process, loaded-program limits) come from that plumbing and do not "
        "happen through Core ML, which uses concat and gelu routinely. Encoding them would flag "
        "healthy models. A rule that predicts a failure seen only off the Core ML path reports "
        "at-risk, never ane-fails.\n"
        "- **Value-dependent compiler failures** (identical blocks, specific weight values) "
        "cannot be predicted from types and shapes; compile and load the model with "
        "`cpu_and_ne` to be sure.\n"
        "- **Legacy NeuralNetwork-format rules** (pooling kernel > 13, upsample factor > 2) are "
        "folklore from the old format and do not apply to ML Programs.\n"
        "- **State dims other than the innermost.** coremltools#2631 measured a non-multiple-of-32 "
        "width; shipping KV caches with 8 heads run on the ANE, so only the innermost dim is a "
        "rule (ANE-STATE-003/004).\n"
        "- **Unpredictable failures.** Shape-specific compile OOMs (ExecuTorch#8439: a static "
        "Llama 1B at seq 128 fails where 130, 256 and 512 compile) and a 667 MB program whose "
        "ANE compile fails at load (coremltools#2758) have no isolated cause; no rule claims "
        "them. The 5568x5568 input of coremltools#2247 is at-risk under ANE-SHAPE-010, whose "
        "plane threshold is ours.\n\n"
        "## Known conflicts in the evidence\n\n"
        "- Kernel-width limits differ between sources (13 vs 15 vs 16); the chip table uses 13 "
        "for the oldest family and 16 after.\n"
        "- Gather: one coremltools comment says it stays on the ANE, placement reports show it on "
        "CPU; the rule fires only for runtime indices.\n"
        "- Depthwise conv is native per the direct-path tables but was CPU-placed at 1024 "
        "channels in one iOS 26 audit; ANE-CONV-003 fires from 1024 channels up.\n"
        "- Slice-update size (ANE-STATE-007): coremltools#2553 failed writing 128 rows into a KV "
        "state and ran with 16/32, but changed projections, cache rank and head dim at the same "
        "time, and Anemll prefills 64 rows at a runtime position on the ANE; the rule is at-risk "
        "above 64 rows, a threshold that is ours.\n"
        "- W8A8 (ANE-QUANT-004): one iPhone ANE compile rejected quantize/dequantize, Apple "
        "documents int8-int8 compute on A17 Pro/M4; always at-risk.\n"
        "- RangeDim inputs: the ExecuTorch partitioner docs and coremltools#2370 keep them off "
        "the ANE, one older Xcode report (coremltools#1909) saw a RangeDim model on the ANE; "
        "ANE-SHAPE-004 follows the documented behaviour.\n"
        "- KV state written at a runtime position: Anemll and CoreML-LLM ship it on the ANE; "
        "FluidInference/mobius#77 (Qwen3-0.6B, M5 Pro, coremltools 9) and CoreML-LLM's first "
        "dual-state Gemma 4 build (error -14, later compiling with coremltools 9) failed the "
        "ANE compile, and an ExecuTorch maintainer calls the update unsupported (PR#7616). No "
        "published difference separates them, so no rule flags the plain write; its variants "
        "with evidence are rules (rank 5: ANE-STATE-011, a shifted window: -008, a slice "
        "returned: -009, a multifunction prefill: -010).\n"
        "- Softplus and log-sum-exp placement: on an M4 softplus reaches the ANE and computes "
        "wrong above x ~ 10.4 (ANE-DTYPE-006), an M2 Pro keeps it on the CPU (ANE-OP-012), and "
        "the M4 reports keep both on the CPU in smaller graphs: the cost model's choice, which "
        "no rule predicts.\n"
        "- A lookup table rescaled by constexpr_blockwise_shift_scale (ANE-QUANT-005) aborts "
        "the macOS 26 ANE load (coremltools PR#2688), CoreML-LLM reports it compiling; "
        "always at-risk.\n";
  return md;
}

} // namespace anefit::ane
