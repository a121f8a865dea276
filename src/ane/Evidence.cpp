//===- Evidence.cpp - Grade the checker on public repro cases -------------===//
//
// A known failure is caught when the verdict says it will not run as is
// (ane-fails, at-risk, a fallback of its op, or a wrong-numerics finding); a
// known-working case passes when the verdict is ane or partial and its op
// stays on the ANE.
//
//===----------------------------------------------------------------------===//
#include "ane/Evidence.h"

#include "support/Error.h"

#include <nlohmann/json.hpp>

#include <array>
#include <fstream>
#include <sstream>

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

std::vector<CorpusCase> parseCorpusCases(std::string_view text, const std::string &path) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    failExpected(path, "cases.json", "a JSON object", "malformed JSON");
  if (j.value("schema", "") != "anefit.evidence/1")
    failExpected(path, "schema", "\"anefit.evidence/1\"", j.value("schema", "none"));
  const auto &cases = j.find("cases");
  if (cases == j.end() || !cases->is_array())
    failExpected(path, "cases", "an array", "none");
  std::vector<CorpusCase> out;
  for (size_t i = 0; i < cases->size(); ++i) {
    const nlohmann::json &c = (*cases)[i];
    std::string where = "cases[" + std::to_string(i) + "]";
    auto str = [&](const char *key, bool required) -> std::string {
      auto it = c.find(key);
      if (it != c.end() && it->is_string())
        return it->get<std::string>();
      if (required)
        failExpected(path, where + "." + key, "a string", "none");
      return {};
    };
    if (!c.is_object())
      failExpected(path, where, "an object", c.type_name());
    CorpusCase e;
    e.name = str("name", true);
    e.file = str("file", true);
    e.rule = str("rule", true);
    e.source = str("source", true);
    e.what = str("what", true);
    e.verdict = str("verdict", true);
    e.op = str("op", false);
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

std::vector<EvidenceResult>
gradeCorpus(const std::string &dir, const std::function<CheckReport(const std::string &)> &check) {
  std::string path = dir + "/cases.json";
  std::ifstream in(path, std::ios::binary);
  if (!in)
    failExpected(path, "evidence corpus", "a readable cases.json", "no such file");
  std::stringstream text;
  text << in.rdbuf();
  std::vector<EvidenceResult> out;
  for (const CorpusCase &c : parseCorpusCases(text.str(), path))
    out.push_back(gradeEvidence(c, check(dir + "/" + c.file)));
  return out;
}

std::string evidenceMarkdown(const std::vector<EvidenceResult> &results) {
  size_t fails = 0, caught = 0, caughtRisk = 0, missed = 0;
  size_t works = 0, passed = 0, atRisk = 0, offAne = 0, alarms = 0;
  for (const EvidenceResult &r : results) {
    bool known = r.c.outcome != Outcome::Works;
    (known ? fails : works)++;
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
  auto n = [](size_t v) { return std::to_string(v); };
  std::string md =
      "## Evidence corpus\n\n"
      "`tests/fixtures/evidence/` holds, per rule with public evidence, the smallest model "
      "reproducing a reported failure and the smallest reproducing a reported working case, "
      "built by `gen_evidence.py` (coremltools' MIL builder) from the public descriptions. "
      "`anefit check` is run on every one (tests/unit/ane/EvidenceTest.cpp, which also fails "
      "when this section is stale). A known failure is caught when the verdict is `ane-fails` "
      "or `at-risk`, when its op is predicted off the ANE (fallback cases) or when a "
      "wrong-numerics finding fires; a known-working model passes when the verdict is `ane` or "
      "`partial` and its op stays on the ANE.\n\n"
      "| " +
      n(results.size()) +
      " cases | caught | caught as at-risk | missed |\n|---|---|---|---|\n"
      "| known failures (" +
      n(fails) + ") | " + n(caught) + " | " + n(caughtRisk) + " | " + n(missed) +
      " |\n\n"
      "| | passed | at-risk | called off the ANE | called ane-fails |\n|---|---|---|---|---|\n"
      "| known working (" +
      n(works) + ") | " + n(passed) + " | " + n(atRisk) + " | " + n(offAne) + " | " + n(alarms) +
      " |\n\n"
      "| case | public outcome | rule | source | verdict | grade |\n|---|---|---|---|---|---|\n";
  for (const EvidenceResult &r : results)
    md += "| " + r.c.name + " | " + std::string(outcomeName(r.c.outcome)) + ": " + r.c.what +
          " | " + r.c.rule + " | <" + r.c.source + "> | " + std::string(verdictName(r.verdict)) +
          " | " + std::string(gradeName(r.grade)) + " |\n";
  return md;
}

} // namespace anefit::ane
