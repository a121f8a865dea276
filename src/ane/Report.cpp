//===- Report.cpp - Rendering check reports and the rules table -----------===//
//
// Text groups findings by rule, most severe first; JSON and SARIF carry the
// same data for machines. docs/rules.md is rulesMarkdown() verbatim (a unit
// test fails when the committed file is stale).
//
//===----------------------------------------------------------------------===//
#include "ane/Report.h"

#include "ane/Remedies.h"

#include <nlohmann/json.hpp>

#include <algorithm>
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

std::string humanBytes(uint64_t b) {
  char buf[32];
  if (b >= 1000000000ull)
    std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1000000ull)
    std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  else if (b >= 1000ull)
    std::snprintf(buf, sizeof buf, "%.1f KB", b / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%llu B", (unsigned long long)b);
  return buf;
}

std::string humanFlops(double f) {
  char buf[32];
  if (f >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2f GFLOP", f / 1e9);
  else if (f >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2f MFLOP", f / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.0f FLOP", f);
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
  case Verdict::Ane:
    return "\033[1;32m";
  case Verdict::Partial:
  case Verdict::NoAne:
    return "\033[1;33m";
  }
  return "";
}

/// "https://... (what it shows)".
std::string caseText(const EvidenceCase &c) {
  return std::string(c.url) + (c.what.empty() ? "" : " (" + std::string(c.what) + ")");
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

std::string osLabel(TargetOs os) { return std::string(osName(os)); }

} // namespace

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
    out += "\nfunction " + paint("\033[1m", f.name) + ": " +
           paint(verdictColor(f.verdict), std::string(verdictName(f.verdict))) + "\n  " +
           verdictSentence(f, o.computeUnits) + "\n";
    out += "  " + std::to_string(f.ops.size()) + " ops (" + std::to_string(f.aneOps) +
           " placed on the ANE), " + humanFlops(f.totalFlops) + ", " +
           plural(f.segments.size(), "segment") + ", " + plural(f.boundaries, "boundary") + ", " +
           plural(f.states, "state") + ", weights " + humanBytes(f.weightBytes) +
           (f.denseWeightBytes > f.weightBytes
                ? " stored (" + humanBytes(f.denseWeightBytes) + " decompressed)"
                : std::string()) +
           "\n";
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
        out += "\n    " + f.types + "\n    ";
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
    out += "  fix: " + r.fixText() + "\n";
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
  out += "\nsummary: " + (summary.empty() ? std::string("no findings") : summary) + "; verdict " +
         std::string(verdictName(report.verdict)) + "\n";
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
    a.push_back({{"url", c.url}, {"what", c.what}});
  return a;
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
    Json ev = Json::array();
    for (std::string_view u : r.evidenceUrls())
      ev.push_back(u);
    fj["evidence"] = ev;
    fj["failEvidence"] = casesJson(r.failCases());
    fj["passEvidence"] = casesJson(r.passCases());
    if (f.certainty == Certainty::Contested) {
      fj["contradiction"] = f.contradiction;
      fj["settle"] = r.settleCheck();
    }
    fj["fix"] = r.fixText();
    fj["fixPasses"] = r.fixPasses();
    fj["remedies"] = remediesJson(report, f);
    findings.push_back(fj);
  }
  j["findings"] = findings;
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

/// error for uncontested failures, warning for at-risk, wrong numerics and
/// fallbacks, note for slow.
static const char *sarifLevel(Level l) {
  return l >= Level::CompileFail ? "error" : l == Level::Slow ? "note" : "warning";
}

static const char *sarifLevel(Effect e) { return sarifLevel(levelOf(e, Certainty::Confirmed)); }

namespace {

Json sarifRules() {
  Json rules = Json::array();
  for (const RuleInfo &r : allRules()) {
    auto urls = r.evidenceUrls();
    Json rule = {{"id", r.code},
                 {"name", std::string(r.code)},
                 {"shortDescription", {{"text", r.title}}},
                 {"fullDescription",
                  {{"text", std::string(r.title) + " (" + std::string(effectName(r.effect)) + ", " +
                                std::string(confidenceName(r.confidence)) +
                                "). Matches: " + std::string(r.scope) + "."}}},
                 {"help", {{"text", "Fix: " + r.fixText()}}},
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
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
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
  return sarifLog(std::move(results), {{"verdict", verdictName(report.verdict)}});
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
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string renderProgramSarif(const std::vector<CheckReport> &reports,
                               std::string_view programPath) {
  Json results = Json::array();
  Json delegates = Json::array();
  for (const CheckReport &r : reports) {
    appendSarifResults(r, results);
    delegates.push_back({{"model", r.modelPath}, {"verdict", verdictName(r.verdict)}});
  }
  return sarifLog(std::move(results), {{"verdict", verdictName(worstVerdict(reports))},
                                       {"program", std::string(programPath)},
                                       {"delegates", std::move(delegates)}});
}

std::string rulesText() {
  std::string out;
  for (const RuleInfo &r : allRules())
    out += std::string(r.code) + "  " + std::string(effectName(r.effect)) + "  " +
           std::string(confidenceName(r.confidence)) + "  " + std::string(r.title) + "\n";
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
                     {"effect", effectName(r.effect)},
                     {"confidence", confidenceName(r.confidence)},
                     {"appliesTo", gateDescription(r.gate)},
                     {"evidencePath", evidencePathName(r.path)},
                     {"evidence", ev},
                     {"failEvidence", casesJson(r.failCases())},
                     {"passEvidence", casesJson(r.passCases())},
                     {"settle", r.settleCheck()},
                     {"fix", r.fixText()},
                     {"fixPasses", r.fixPasses()}});
  }
  Json j = {{"schema", "anefit.rules/2"}, {"rules", rules}};
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string rulesMarkdown(std::string_view corpusSection) {
  auto cell = [](std::string_view s) {
    std::string out;
    for (char c : s)
      out += c == '|' ? std::string("\\|") : std::string(1, c);
    return out;
  };
  auto link = [](const EvidenceCase &c) {
    return "<" + std::string(c.url) + ">" + (c.what.empty() ? "" : ": " + std::string(c.what));
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
      "Every rule carries its evidence both ways: the public cases that **fail** and the "
      "known-working cases that **bound** it (each predicate is narrowed to what the failing "
      "evidence shows and what the working evidence excludes). A compile or runtime failure is "
      "**confirmed** when nothing public contradicts it for the case at hand; it is "
      "**contested** when working evidence covers the case too, or when the failure was only "
      "measured off the public Core ML path (the **path** column: `core-ml`, `core-ai` for "
      "Apple's Core AI stack, `direct` for the private in-memory compiler). A contested "
      "failure gives the finding level and the verdict **at-risk**, with both sides' evidence "
      "and the check on a Mac that settles it.\n\n"
      "Levels, most severe first: runtime-fail > compile-fail > at-risk > wrong-numerics > "
      "fallback > slow; `--fail-on LEVEL` exits 1 when a finding is at least that severe. "
      "Verdicts, most severe first: `ane-fails` (a confirmed failure), `at-risk`, `no-ane`, "
      "`partial`, `ane`. **Confidence**: `apple-documented` (Apple docs, coremltools source or "
      "Apple-owned repositories), `measured` (a third party measured it with a reproducible "
      "setup), `folklore` (single anecdote; none are encoded yet).\n\n"
      "| id | title | effect | confidence | path | applies to |\n"
      "|---|---|---|---|---|---|\n";
  for (const RuleInfo &r : allRules())
    md += "| [" + std::string(r.code) + "](#" + std::string(r.code) + ") | " + cell(r.title) +
          " | " + std::string(effectName(r.effect)) + " | " +
          std::string(confidenceName(r.confidence)) + " | " +
          std::string(evidencePathName(r.path)) + " | " + std::string(gateDescription(r.gate)) +
          " |\n";
  md += "\n## Rules\n";
  for (const RuleInfo &r : allRules()) {
    md += "\n### " + std::string(r.code) + "\n\n**" + std::string(r.title) + "** (" +
          std::string(effectName(r.effect)) + ", " + std::string(confidenceName(r.confidence)) +
          ", failing evidence on the " + std::string(evidencePathName(r.path)) + " path, " +
          (r.kind == RuleKind::Function ? "per function" : "per op") + ")\n\n";
    md += "- matches: " + std::string(r.scope) + "\n";
    for (const EvidenceCase &c : r.failCases())
      md += "- fails: " + link(c) + "\n";
    auto works = r.passCases();
    if (works.empty())
      md += "- works: no public working case bounds this rule beyond its own threshold\n";
    for (const EvidenceCase &c : works)
      md += "- works: " + link(c) + "\n";
    if (r.effect >= Effect::CompileFail)
      md += "- settle an at-risk finding: " + std::string(r.settleCheck()) + "\n";
    md += "- fix: " + r.fixText() + "\n";
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
        "## How the state rules were narrowed\n\n"
        "The state rules caused every false alarm a held-out check of public cases found, so "
        "they were rebuilt from the cases on both sides:\n\n"
        "- **What the measured state failures share is a narrow state.** coremltools#2631 "
        "fails with one recurrent state of width 270 and works at 256. The LFM2 failures "
        "(ExecuTorch#19635, CoreML-LLM's bisection) all carry a short-conv state whose innermost "
        "dim is 2 or 3 (padding it to 16 did not help; it was never padded to 32), and "
        "CoreML-LLM's failing three-state Qwen3.5 build had a conv state of the same kind. So "
        "the width rules (ANE-STATE-003/004) carry the verdict and the count rules are narrowed "
        "around them.\n"
        "- **Counting states.** Two aligned KV states (Gemma 4) ship on the iPhone ANE, so "
        "ANE-STATE-002 fires only when one of the two states is narrow. Three or more states "
        "failed in every measured case, each with a narrow state among them; an unmerged Anemll "
        "pull request reports 48 states (conv states included) running on an M1 without "
        "publishing shapes or a placement read-out. ANE-STATE-001 is therefore confirmed when "
        "a narrow state is present and at-risk when all states are aligned. That report alone "
        "is not taken to contest the narrow-state failures, which three sources measured and "
        "bisected.\n"
        "- **Recurrent writes.** Any recurrent state is computed from its old value; "
        "coremltools#2631's working width-256 model is one. ANE-STATE-005 fires only for a "
        "narrow (innermost < 32) state rolled through a chain of ops, the LFM2 shape.\n"
        "- **Runtime write positions (ANE-STATE-006).** The failing evidence is the Core AI "
        "compiler (coreai-torch#6), another front end. Through classic Core ML, `slice_update` "
        "at a runtime int32 position into a single KV state is what Anemll and CoreML-LLM ship on "
        "the ANE, so a write into a state is not flagged (with many states, ANE-STATE-001 speaks "
        "for the program). A cache carried as a plain function input and written in-graph at a "
        "runtime position (the real ExecuTorch `export_llm` shape, "
        "`take_over_mutable_buffer=False`) is at-risk: no public Core ML case shows that shape "
        "running on the ANE, the one public report of it (ExecuTorch#19635) failed with other "
        "suspects in the same graph, and the same op does run when it writes a state. Compiling "
        "it on a Mac settles it; moving the write to the host avoids the question.\n\n"
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
        "- **Unpredictable failures.** Shape-specific compile OOMs (ExecuTorch#8439), a 667 MB "
        "program whose ANE compile fails at load (coremltools#2758) and a 5568x5568 input "
        "(coremltools#2247) have no isolated cause; no rule claims them.\n\n"
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
        "above 64 rows.\n"
        "- W8A8 (ANE-QUANT-004): one iPhone ANE compile rejected quantize/dequantize, Apple "
        "documents int8-int8 compute on A17 Pro/M4; always at-risk.\n"
        "- RangeDim inputs: the ExecuTorch partitioner docs and coremltools#2370 keep them off "
        "the ANE, one older Xcode report (coremltools#1909) saw a RangeDim model on the ANE; "
        "ANE-SHAPE-004 follows the documented behaviour.\n";
  return md;
}

} // namespace anefit::ane
