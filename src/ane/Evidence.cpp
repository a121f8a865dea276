//===- Evidence.cpp - Grade the checker on public repro cases -------------===//
//
// A known failure is caught when the verdict says it will not run as is
// (ane-fails, at-risk, a fallback of its op, or a wrong-numerics finding); a
// known-working case passes when the verdict is ane or partial and its op
// stays on the ANE.
//
//===----------------------------------------------------------------------===//
#include "ane/Evidence.h"

#include "ane/AneRules.h"
#include "support/Error.h"
#include "support/FileSystem.h"
#include "support/Json.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>

namespace anefit::ane {

static constexpr std::array<std::string_view, 4> kOutcomes = {"fails", "falls-back",
                                                              "wrong-numerics", "works"};

std::string_view outcomeName(Outcome o) { return kOutcomes[static_cast<size_t>(o)]; }

std::string_view gradeName(Grade g) {
  switch (g) {
  case Grade::Caught:
    return "caught";
  case Grade::CaughtAtRisk:
    return "caught (at-risk)";
  case Grade::Missed:
    return "MISSED";
  case Grade::Passed:
    return "passed";
  case Grade::AtRisk:
    return "at-risk";
  case Grade::FalseFallback:
    return "called off the ANE";
  case Grade::FalseAlarm:
    return "FALSE ALARM (ane-fails)";
  }
  return "";
}

std::string_view corpusPartName(CorpusPart p) {
  switch (p) {
  case CorpusPart::Derive:
    return "derive";
  case CorpusPart::HeldOut:
    return "held-out";
  case CorpusPart::Fresh:
    return "held-out (fresh)";
  }
  return "";
}

/// "owner/repo" of a GitHub URL, else the URL's host.
std::string corpusProject(const std::string &url) {
  std::string rest = url;
  for (std::string_view scheme : {"https://", "http://"})
    if (rest.rfind(scheme, 0) == 0)
      rest = rest.substr(scheme.size());
  size_t slash = rest.find('/');
  std::string host = rest.substr(0, slash);
  if ((host == "github.com" || host == "www.github.com") && slash != std::string::npos) {
    std::string path = rest.substr(slash + 1);
    size_t first = path.find('/');
    if (first == std::string::npos)
      return path;
    size_t second = path.find('/', first + 1);
    return path.substr(0, second);
  }
  return host;
}

static nlohmann::json parseObject(std::string_view text, const std::string &path) {
  nlohmann::json j = parseJson(text, path);
  if (j.is_discarded() || !j.is_object())
    failExpected(path, "cases file", "a JSON object", "malformed JSON");
  std::string schema = j.value("schema", "");
  if (schema != "anefit.evidence/1" && schema != "anefit.evidence/2")
    failExpected(path, "schema", "\"anefit.evidence/2\"", schema.empty() ? "none" : schema);
  return j;
}

/// The cases of one parsed case file.
static std::vector<CorpusCase> casesOf(const nlohmann::json &j, const std::string &path) {
  bool v1 = j.value("schema", "") == "anefit.evidence/1";
  const auto &cases = j.find("cases");
  if (cases == j.end() || !cases->is_array())
    failExpected(path, "cases", "an array", "none");
  std::vector<CorpusCase> out;
  for (size_t i = 0; i < cases->size(); ++i) {
    const nlohmann::json &c = (*cases)[i];
    std::string where = "cases[" + std::to_string(i) + "]";
    if (!c.is_object())
      failExpected(path, where, "an object", c.type_name());
    auto str = [&](const char *key, bool required) -> std::string {
      auto it = c.find(key);
      if (it != c.end() && it->is_string())
        return it->get<std::string>();
      if (required)
        failExpected(path, where + "." + key, "a string", "none");
      return {};
    };
    CorpusCase e;
    e.name = str("name", true);
    e.file = str("file", true);
    e.rule = str("rule", v1);
    e.source = str("source", true);
    e.what = str("what", true);
    e.verdict = str("verdict", v1);
    e.op = str("op", false);
    e.project = str("project", false);
    if (e.project.empty())
      e.project = corpusProject(e.source);
    e.quote = str("quote", !v1);
    e.certainty = str("certainty", !v1);
    if (!e.certainty.empty() && !evidenceCertaintyFromName(e.certainty))
      failExpected(path, where + ".certainty", "isolated, together, statement or inferred",
                   "'" + e.certainty + "'");
    std::string rebuilt = str("rebuilt", false);
    if (!rebuilt.empty()) {
      if (rebuilt != "reported" && rebuilt != "approximate" && rebuilt != "guess")
        failExpected(path, where + ".rebuilt", "reported, approximate or guess",
                     "'" + rebuilt + "'");
      e.rebuilt = rebuilt;
    }
    if (auto pl = c.find("placement"); pl != c.end()) {
      if (!pl->is_object())
        failExpected(path, where + ".placement", "an object of op name -> ane, cpu or gpu",
                     pl->type_name());
      for (const auto &[op, dev] : pl->items()) {
        std::string d = dev.is_string() ? dev.get<std::string>() : std::string();
        if (d != "ane" && d != "cpu" && d != "gpu")
          failExpected(path, where + ".placement." + op, "ane, cpu or gpu", dumpJson(dev));
        e.placement.emplace_back(op, d);
      }
    }
    std::string outcome = str("outcome", true);
    bool known = false;
    for (size_t k = 0; k < kOutcomes.size(); ++k)
      if (kOutcomes[k] == outcome) {
        e.outcome = static_cast<Outcome>(k);
        known = true;
      }
    if (!known)
      failExpected(path, where + ".outcome", "fails, falls-back, wrong-numerics or works",
                   "'" + outcome + "'");
    if (e.file.find("..") != std::string::npos || (!e.file.empty() && e.file[0] == '/'))
      failExpected(path, where + ".file", "a path inside the corpus", "'" + e.file + "'");
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<CorpusCase> parseCorpusCases(std::string_view text, const std::string &path) {
  return casesOf(parseObject(text, path), path);
}

/// A case file's text: a regular file (a FIFO or a directory is refused,
/// never waited on), read with the support module's input checks.
static std::string readText(const std::string &path) {
  std::vector<uint8_t> bytes = readFileBytes(path);
  return std::string(bytes.begin(), bytes.end());
}

std::vector<CorpusCase> loadCorpus(const std::string &dir) {
  std::string path = dir + "/cases.json";
  std::string text = readText(path);
  nlohmann::json top = parseObject(text, path);
  std::vector<CorpusCase> cases = casesOf(top, path);
  if (auto groups = top.find("groups"); groups != top.end()) {
    if (!groups->is_array())
      failExpected(path, "groups", "an array of case files", groups->type_name());
    for (const auto &g : *groups) {
      std::string rel = g.is_string() ? g.get<std::string>() : std::string();
      if (rel.empty() || rel.find("..") != std::string::npos || rel[0] == '/')
        failExpected(path, "groups", "case files inside the corpus", dumpJson(g));
      std::string groupPath = dir + "/" + rel;
      for (CorpusCase &c : parseCorpusCases(readText(groupPath), groupPath))
        cases.push_back(std::move(c));
    }
  }
  auto projects = [&](const char *key) {
    std::vector<std::string> out;
    if (auto h = top.find(key); h != top.end()) {
      if (!h->is_array())
        failExpected(path, key, "an array of projects", h->type_name());
      for (const auto &p : *h)
        if (p.is_string())
          out.push_back(p.get<std::string>());
    }
    return out;
  };
  auto listed = [](const std::vector<std::string> &list, const std::string &project) {
    return std::find(list.begin(), list.end(), project) != list.end();
  };
  std::vector<std::string> heldOut = projects("heldout"), fresh = projects("fresh");
  for (const std::string &p : fresh)
    if (listed(heldOut, p))
      failExpected(path, "fresh", "projects not already held out", "'" + p + "' on both lists");
  std::vector<std::string> names;
  for (CorpusCase &c : cases) {
    if (std::find(names.begin(), names.end(), c.name) != names.end())
      failExpected(path, "case " + c.name, "unique case names", "a second case of that name");
    names.push_back(c.name);
    if (listed(heldOut, c.project))
      c.part = CorpusPart::HeldOut;
    else if (listed(fresh, c.project))
      c.part = CorpusPart::Fresh;
  }
  return cases;
}

/// The op named `name` in any function, or null.
static const OpReport *findOp(const CheckReport &r, const std::string &name) {
  for (const FunctionReport &f : r.functions)
    for (const OpReport &o : f.ops)
      if (o.name == name)
        return &o;
  return nullptr;
}

EvidenceResult gradeEvidence(const CorpusCase &c, const CheckReport &report) {
  EvidenceResult r;
  r.c = c;
  r.verdict = report.verdict;
  for (const Finding &f : report.findings)
    if (f.certainty == Certainty::Contested)
      r.contradictions.push_back(f.contradiction);
  for (const auto &[name, device] : c.placement)
    if (const OpReport *o = findOp(report, name)) {
      ++r.placementCompared;
      r.placementAgreed += (o->placement == Placement::Ane) == (device == "ane");
    }
  const OpReport *op = c.op.empty() ? nullptr : findOp(report, c.op);
  bool opOff = op && op->placement != Placement::Ane;
  switch (c.outcome) {
  case Outcome::Fails:
    r.grade = report.verdict == Verdict::AneFails ? Grade::Caught
              : report.verdict == Verdict::AtRisk ? Grade::CaughtAtRisk
                                                  : Grade::Missed;
    break;
  case Outcome::FallsBack: {
    bool caught = report.verdict == Verdict::NoAne || report.verdict == Verdict::AneFails || opOff;
    if (c.op.empty())
      caught |= report.verdict == Verdict::Partial;
    r.grade = caught                              ? Grade::Caught
              : report.verdict == Verdict::AtRisk ? Grade::CaughtAtRisk
                                                  : Grade::Missed;
    break;
  }
  case Outcome::WrongNumerics: {
    bool caught = report.verdict == Verdict::AneFails;
    for (const Finding &f : report.findings)
      caught |= f.effect == Effect::WrongNumerics;
    r.grade = caught ? Grade::Caught : Grade::Missed;
    break;
  }
  case Outcome::Works:
    r.grade = report.verdict == Verdict::AneFails ? Grade::FalseAlarm
              : report.verdict == Verdict::AtRisk ? Grade::AtRisk
              : report.verdict == Verdict::NoAne || opOff || (op && op->atRisk)
                  ? Grade::FalseFallback
                  : Grade::Passed;
    break;
  }
  return r;
}

Coverage corpusCoverage(const std::string &dir, const std::vector<CorpusCase> &cases,
                        const CorpusLoader &load, bool derivePartOnly) {
  Coverage c;
  for (const CorpusCase &e : cases)
    if (e.outcome == Outcome::Works && e.rebuilt != "guess" && !e.file.empty() &&
        (!derivePartOnly || e.part == CorpusPart::Derive)) {
      std::unique_ptr<Model> model = load(dir + "/" + e.file);
      if (model->program)
        c.add(*model->program);
    }
  return c;
}

std::vector<EvidenceResult> gradeCorpus(const std::string &dir, const CorpusLoader &load,
                                        const std::vector<RuleId> &ignore) {
  std::vector<CorpusCase> cases = loadCorpus(dir);
  Coverage derive = corpusCoverage(dir, cases, load, /*derivePartOnly=*/true);
  CheckOptions options;
  options.coverage = &derive;
  options.ignore = ignore;
  std::vector<EvidenceResult> out;
  for (const CorpusCase &c : cases)
    if (!c.file.empty())
      out.push_back(gradeEvidence(c, checkModel(*load(dir + "/" + c.file), options)));
  return out;
}

namespace {

/// The score of one part of the corpus.
struct Score {
  size_t fails = 0, caught = 0, caughtRisk = 0, missed = 0;
  size_t works = 0, passed = 0, atRisk = 0, offAne = 0, alarms = 0;
  size_t placementAgreed = 0, placementCompared = 0;

  void add(const EvidenceResult &r) {
    (r.c.outcome == Outcome::Works ? works : fails)++;
    placementAgreed += r.placementAgreed;
    placementCompared += r.placementCompared;
    switch (r.grade) {
    case Grade::Caught:
      ++caught;
      break;
    case Grade::CaughtAtRisk:
      ++caughtRisk;
      break;
    case Grade::Missed:
      ++missed;
      break;
    case Grade::Passed:
      ++passed;
      break;
    case Grade::AtRisk:
      ++atRisk;
      break;
    case Grade::FalseFallback:
      ++offAne;
      break;
    case Grade::FalseAlarm:
      ++alarms;
      break;
    }
  }
};

std::string cellText(std::string_view s) {
  std::string out;
  for (char c : s)
    out += c == '|' ? std::string("\\|") : c == '\n' ? std::string(" ") : std::string(1, c);
  return out;
}

} // namespace

std::string corpusMarkdown(const std::string &dir, const CorpusLoader &load) {
  return evidenceMarkdown(gradeCorpus(dir, load),
                          gradeCorpus(dir, load, {RuleId::UnverifiedPattern}));
}

std::string evidenceMarkdown(const std::vector<EvidenceResult> &results,
                             const std::vector<EvidenceResult> &withoutCoverage) {
  std::array<Score, kCorpusParts> parts, bare;
  size_t guesses = 0;
  for (const EvidenceResult &r : results) {
    if (r.c.rebuilt == "guess") {
      ++guesses;
      continue;
    }
    parts[static_cast<size_t>(r.c.part)].add(r);
  }
  for (const EvidenceResult &r : withoutCoverage)
    if (r.c.rebuilt != "guess")
      bare[static_cast<size_t>(r.c.part)].add(r);
  auto n = [](size_t v) { return std::to_string(v); };
  auto row = [&](std::string_view name, const Score &s) {
    return "| " + std::string(name) + " | " + n(s.fails) + " | " + n(s.caught) + " | " +
           n(s.caughtRisk) + " | " + n(s.missed) + " | " + n(s.works) + " | " + n(s.passed) +
           " | " + n(s.atRisk) + " | " + n(s.offAne) + " | " + n(s.alarms) + " | " +
           (s.placementCompared ? n(s.placementAgreed) + "/" + n(s.placementCompared) : "-") +
           " |\n";
  };
  auto scoreRows = [&](std::string_view suffix) {
    const std::array<Score, kCorpusParts> &scores = suffix.empty() ? parts : bare;
    std::string rows;
    for (size_t p = 0; p < kCorpusParts; ++p)
      rows += row(std::string(corpusPartName(static_cast<CorpusPart>(p))) + std::string(suffix),
                  scores[p]);
    return rows;
  };
  std::string md =
      "## Evidence corpus\n\n"
      "`tests/fixtures/evidence/` holds public observations of models on the ANE, failing and "
      "working, each rebuilt as a small model (`gen_evidence.py` packages, and MIL text for the "
      "sweep under `sweep/`, whose method its README states) with its source, a verbatim quote "
      "and how the outcome was established. The corpus is split by source project: the "
      "**derive** part holds the projects the rules were written from, the **held-out** part "
      "projects no rule was written or narrowed from (the list in `cases.json`, fixed before "
      "the rules were revised), and the **held-out (fresh)** part the projects of the latest "
      "sweep (the `fresh` list, added before any rule was looked at against them, scored "
      "apart so the older held-out score stays comparable). `anefit check` is run on every "
      "rebuilt case "
      "(tests/unit/ane/EvidenceTest.cpp, which also fails when this section is stale). An "
      "observed failure is caught when the verdict is `ane-fails`, or `at-risk`, when its op "
      "is predicted off the ANE (fallback cases) or when a wrong-numerics finding fires; a "
      "working model passes when the verdict is `ane` or `partial` and its op stays on the "
      "ANE. Cases built from a guess rather than a reported model (" +
      n(guesses) +
      ") are listed but never scored.\n\n"
      "| part | observed failures | caught (ane-fails, fallback, numerics) | caught as at-risk | "
      "missed | working | passed | called at-risk | called off the ANE | called ane-fails | "
      "op placement agreed |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n" +
      scoreRows("") +
      (withoutCoverage.empty() ? std::string() : scoreRows(", without ANE-COV-001")) +
      (withoutCoverage.empty()
           ? std::string()
           : "\nThe coverage rule (ANE-COV-001, the patterns of the derive part's working cases; "
             "[check.md](check.md#coverage-what-the-evidence-has-seen)) is the policy chosen for "
             "unseen patterns: the rows without it show what it buys (observed failures caught "
             "as at-risk) and what it costs (working models called at-risk) on each part.\n") +
      "\n| case | project | part | public outcome | certainty | verdict | grade |\n"
      "|---|---|---|---|---|---|---|\n";
  for (const EvidenceResult &r : results)
    md += "| " + r.c.name + " | [" + r.c.project + "](" + r.c.source + ") | " +
          (r.c.rebuilt == "guess" ? std::string("guess") : std::string(corpusPartName(r.c.part))) +
          " | " + std::string(outcomeName(r.c.outcome)) + ": " + cellText(r.c.what) + " | " +
          (r.c.certainty.empty() ? std::string("-") : r.c.certainty) + " | " +
          std::string(verdictName(r.verdict)) + " | " + std::string(gradeName(r.grade)) + " |\n";
  return md;
}

} // namespace anefit::ane
