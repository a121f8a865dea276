//===- Baseline.cpp - Compare a model's check against a recorded one ------===//
#include "report/Baseline.h"

#include "report/Report.h"
#include "support/Error.h"
#include "support/FileSystem.h"
#include "support/Json.h"
#include "support/Text.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>

namespace anefit::report {
namespace {

using Json = nlohmann::json;
/// What anefit writes keeps its keys in the order written (Report.cpp).
using OJson = nlohmann::ordered_json;

/// The check report schemas a baseline may be (Report.h).
std::string schemasText() {
  return "\"" + std::string(ane::kCheckSchema) + "\" or \"" +
         std::string(ane::kCheckProgramSchema) + "\" (the report of `anefit check --json`)";
}

/// "an array", "a string", "null": what a JSON value is, for a message.
std::string kindOf(const Json &v) {
  std::string name = v.type_name();
  if (v.is_null())
    return name;
  return (name[0] == 'a' || name[0] == 'o' ? "an " : "a ") + name;
}

/// Reads fields of one JSON object, failing with the file and the field's
/// place ("delegates[1].findings[3].level").
struct Fields {
  const std::string &origin;
  std::string place;
  const Json &j;

  std::string at(std::string_view key) const {
    return place.empty() ? std::string(key) : place + "." + std::string(key);
  }
  [[noreturn]] void fail(std::string_view key, const std::string &expected) const {
    std::string found = "nothing";
    if (j.is_object() && j.contains(key))
      found = kindOf(j[std::string(key)]);
    failExpected(origin, at(key), expected, found);
  }
  std::string str(std::string_view key, bool required = true) const {
    auto it = j.find(key);
    if (it == j.end() && !required)
      return {};
    if (it == j.end() || !it->is_string())
      fail(key, "a string");
    return it->get<std::string>();
  }
  double number(std::string_view key) const {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number() || !std::isfinite(it->get<double>()) ||
        it->get<double>() < 0)
      fail(key, "a number at least 0");
    return it->get<double>();
  }
  size_t count(std::string_view key) const {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_unsigned())
      fail(key, "a count (an integer at least 0)");
    return it->get<size_t>();
  }
  const Json &array(std::string_view key) const {
    auto it = j.find(key);
    if (it == j.end() || !it->is_array())
      fail(key, "an array");
    return *it;
  }
  Fields element(const Json &e, std::string_view key, size_t i) const {
    std::string p = at(key) + "[" + std::to_string(i) + "]";
    if (!e.is_object())
      failExpected(origin, p, "an object", kindOf(e));
    return Fields{origin, p, e};
  }
};

/// One anefit.check/2 report (a model, or one delegate of a program).
void readCheckReport(const Fields &r, size_t delegate, GateRecord &out) {
  std::string schema = r.str("schema");
  if (schema != ane::kCheckSchema)
    failExpected(r.origin, r.at("schema"), "\"" + std::string(ane::kCheckSchema) + "\"",
                 "\"" + schema + "\"");
  auto it = r.j.find("options");
  if (it == r.j.end() || !it->is_object())
    r.fail("options", "an object (chip, os, computeUnits)");
  Fields o{r.origin, r.at("options"), *it};
  std::string chip = o.str("chip"), os = o.str("os"), units = o.str("computeUnits"),
              function = o.str("function", false);
  if (delegate == 0) {
    out.chip = chip;
    out.os = os;
    out.computeUnits = units;
    out.function = function;
  } else if (chip != out.chip || os != out.os || units != out.computeUnits ||
             function != out.function) {
    failExpected(r.origin, r.at("options"), "the options of the program's first delegate",
                 "other options");
  }
  const Json &functions = r.array("functions");
  for (size_t i = 0; i < functions.size(); ++i) {
    Fields f = r.element(functions[i], "functions", i);
    GateUnit u;
    u.delegate = delegate;
    u.function = f.str("name");
    u.ops = f.count("ops");
    u.aneOps = f.count("aneOps");
    u.flops = f.number("flops");
    u.aneFlops = f.number("aneFlops");
    u.boundaries = f.count("boundaries");
    if (u.aneOps > u.ops)
      failExpected(r.origin, f.at("aneOps"), "at most ops (" + std::to_string(u.ops) + ")",
                   std::to_string(u.aneOps));
    out.units.push_back(std::move(u));
  }
  const Json &findings = r.array("findings");
  for (size_t i = 0; i < findings.size(); ++i) {
    Fields f = r.element(findings[i], "findings", i);
    GateFinding g;
    g.delegate = delegate;
    g.rule = f.str("rule");
    std::string level = f.str("level");
    auto l = ane::levelFromName(level);
    if (!l)
      failExpected(r.origin, f.at("level"), "a level (" + joined(ane::levelNames(), ", ") + ")",
                   "'" + level + "'");
    g.level = *l;
    g.function = f.str("function");
    g.op = f.str("op", false);
    g.opType = f.str("opType", false);
    g.torchNode = f.str("torchNode", false);
    g.message = f.str("message");
    if (auto s = f.j.find("source"); s != f.j.end()) {
      if (!s->is_object())
        f.fail("source", "an object");
      Fields src{r.origin, f.at("source"), *s};
      if (auto line = s->find("line"); line != s->end()) {
        if (!line->is_number_integer() || line->get<int64_t>() < 0)
          src.fail("line", "a line number");
        g.line = line->get<int64_t>();
        g.file = src.str("file");
        g.code = src.str("code", false);
      }
      g.module = src.str("module", false);
    }
    out.findings.push_back(std::move(g));
  }
}

std::string percentText(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", v);
  return buf;
}

std::string numberText(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

double percentOf(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

/// A measure that moved the good way: fewer boundaries or delegates, a
/// larger share on the ANE.
bool isBetter(const MeasureChange &m) {
  bool fewerIsBetter = !m.percent;
  return fewerIsBetter ? m.after < m.before : m.after > m.before;
}

/// "main", or "model.pte#1 main" in a program of several delegates.
std::string whereOf(const GateRecord &r, size_t delegate, const std::string &function) {
  if (r.delegates <= 1)
    return function;
  return r.model + "#" + std::to_string(delegate) + " " + function;
}

/// "read_state 'r0' (torch node aten_index_put_default)".
std::string opText(const GateFinding &f) {
  return f.opType + " '" + f.op + "'" +
         (f.torchNode.empty() ? std::string() : " (torch node " + f.torchNode + ")");
}

/// The op name without its numbers: the '_'-separated parts that are all
/// digits dropped. "aten_index_put_default_3_cast_fp16" and
/// "aten_index_put_default_4_cast_fp16" are the same kind of node, numbered
/// by its place in the export.
std::string unnumbered(const std::string &name) {
  std::string out;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('_', start);
    if (end == std::string::npos)
      end = name.size();
    std::string_view part(name.data() + start, end - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c)) != 0;
    });
    if (!digits)
      out += (out.empty() ? "" : "_") + std::string(part);
    start = end + 1;
  }
  return out;
}

/// The keys a finding is matched by, strongest first; empty: no key of
/// that stage. Every key holds the rule and the function.
///  1. the PyTorch source (file name, module, the line's code, not its number):
///     lines move when code above them changes, the code of a line does not;
///  2. the op's name (what the user sees without an ETRecord);
///  3. the op's type and name without its number (an export numbers its
///     nodes in program order, so inserting one renumbers those after).
std::string stageKey(const GateFinding &f, int stage, bool byDelegate) {
  std::string k = (byDelegate ? std::to_string(f.delegate) : std::string()) + "|" + f.rule + "|" +
                  f.function + "|";
  switch (stage) {
  case 0:
    if (f.line <= 0)
      return {};
    // The file's name without its directory: --source-root shortens paths.
    return k + f.file.substr(f.file.find_last_of('/') + 1) + "|" + f.module + "|" + f.code + "|" +
           f.opType;
  case 1:
    return k + f.op;
  default:
    if (f.op.empty())
      return {};
    return k + f.opType + "|" + unnumbered(f.op);
  }
}

} // namespace

std::string_view baselineStateName(BaselineState s) {
  switch (s) {
  case BaselineState::New:
    return "new";
  case BaselineState::Unchanged:
    return "unchanged";
  case BaselineState::Updated:
    return "updated";
  case BaselineState::Absent:
    return "absent";
  }
  return "new";
}

GateRecord parseGateRecord(std::string_view text, const std::string &origin) {
  Json j = parseJson(text, origin);
  if (j.is_discarded() || !j.is_object())
    failExpected(origin, "", "a JSON check report (`anefit check --json`)",
                 j.is_discarded() ? "malformed JSON" : "a JSON " + std::string(j.type_name()));
  GateRecord out;
  out.origin = origin;
  Fields r{origin, "", j};
  auto schema = j.find("schema");
  if (schema == j.end() || !schema->is_string())
    r.fail("schema", schemasText());
  out.schema = schema->get<std::string>();
  if (out.schema == ane::kCheckSchema) {
    readCheckReport(r, 0, out);
  } else if (out.schema == ane::kCheckProgramSchema) {
    const Json &delegates = r.array("delegates");
    if (delegates.empty())
      r.fail("delegates", "at least one delegate's report");
    out.delegates = delegates.size();
    for (size_t i = 0; i < delegates.size(); ++i)
      readCheckReport(r.element(delegates[i], "delegates", i), i, out);
  } else {
    failExpected(origin, "schema", schemasText(), "\"" + out.schema + "\"");
  }
  out.model = r.str("model");
  out.verdict = r.str("verdict");
  if (auto tool = j.find("tool"); tool != j.end() && tool->is_object())
    if (auto v = tool->find("version"); v != tool->end() && v->is_string())
      out.toolVersion = v->get<std::string>();
  return out;
}

GateRecord readGateRecord(const std::string &path) {
  std::vector<uint8_t> bytes = readFileBytes(path);
  return parseGateRecord(
      std::string_view(reinterpret_cast<const char *>(bytes.data()), bytes.size()), path);
}

std::string baselineJson(const std::vector<ane::CheckReport> &reports,
                         std::string_view programPath) {
  return reports.size() == 1 ? ane::renderJson(reports[0])
                             : ane::renderProgramJson(reports, programPath);
}

GateRecord gateRecordOf(const std::vector<ane::CheckReport> &reports,
                        std::string_view programPath) {
  GateRecord r = parseGateRecord(baselineJson(reports, programPath), "this check");
  if (reports.size() > 1)
    r.model = std::string(programPath);
  return r;
}

bool GateResult::regressed() const { return regressions() > 0; }

size_t GateResult::regressions() const {
  size_t n = 0;
  for (const MeasureChange &m : measures)
    n += m.regression;
  for (const FindingChange &f : findings)
    n += f.regression;
  return n;
}

size_t GateResult::improvements() const {
  size_t n = 0;
  for (const MeasureChange &m : measures)
    n += !m.regression && isBetter(m);
  for (const FindingChange &f : findings)
    n += f.improvement;
  return n;
}

GateResult compareToBaseline(const GateRecord &baseline, const GateRecord &current,
                             const GateOptions &options) {
  const std::string &file = baseline.origin;
  auto sameOption = [&](const char *name, const std::string &b, const std::string &c) {
    if (b != c)
      failExpected(file, std::string("options.") + name,
                   (c.empty() ? std::string("none") : "'" + c + "'") +
                       " (this check's; a baseline holds only for the options it was checked "
                       "with)",
                   b.empty() ? std::string("none") : "'" + b + "'");
  };
  sameOption("chip", baseline.chip, current.chip);
  sameOption("os", baseline.os, current.os);
  sameOption("computeUnits", baseline.computeUnits, current.computeUnits);
  sameOption("function", baseline.function, current.function);

  GateResult out;
  out.baseline = baseline;
  out.current = current;
  out.options = options;
  bool paired = baseline.delegates == current.delegates;
  out.programTotals = !paired;

  // The functions of each delegate: the same names, or it is another model.
  auto functionsOf = [](const GateRecord &r, size_t d) {
    std::vector<std::string> names;
    for (const GateUnit &u : r.units)
      if (u.delegate == d)
        names.push_back(u.function);
    std::sort(names.begin(), names.end());
    return names;
  };
  if (paired) {
    for (size_t d = 0; d < current.delegates; ++d) {
      std::vector<std::string> b = functionsOf(baseline, d), c = functionsOf(current, d);
      if (b != c)
        failExpected(file,
                     (baseline.delegates > 1 ? "delegates[" + std::to_string(d) + "]." : "") +
                         "functions",
                     "the functions of " + current.model + " (" + joined(c, ", ") + ")",
                     joined(b, ", ") + " (a record of another model?)");
    }
  }

  auto addMeasures = [&](const std::string &where, const GateUnit &b, const GateUnit &c) {
    auto shareMeasure = [&](const char *what, double bPart, double bWhole, double cPart,
                            double cWhole) {
      double before = percentOf(bPart, bWhole), after = percentOf(cPart, cWhole);
      if (std::fabs(after - before) < 1e-9)
        return;
      out.measures.push_back(
          {where, what, before, after, true, after < before - options.residencyTolerance - 1e-9});
    };
    shareMeasure("FLOPs on the ANE", b.aneFlops, b.flops, c.aneFlops, c.flops);
    shareMeasure("ops on the ANE", (double)b.aneOps, (double)b.ops, (double)c.aneOps,
                 (double)c.ops);
    if (b.boundaries != c.boundaries)
      out.measures.push_back({where, "boundaries", (double)b.boundaries, (double)c.boundaries,
                              false, c.boundaries > b.boundaries});
  };
  if (paired) {
    for (const GateUnit &c : current.units)
      for (const GateUnit &b : baseline.units)
        if (b.delegate == c.delegate && b.function == c.function)
          addMeasures(whereOf(current, c.delegate, c.function), b, c);
  } else {
    // Delegates cannot be paired once the partitioner split the graph
    // differently: the program's totals are compared.
    out.measures.push_back({"program", "Core ML delegates", (double)baseline.delegates,
                            (double)current.delegates, false,
                            current.delegates > baseline.delegates});
    auto total = [](const GateRecord &r) {
      GateUnit t;
      for (const GateUnit &u : r.units) {
        t.ops += u.ops;
        t.aneOps += u.aneOps;
        t.flops += u.flops;
        t.aneFlops += u.aneFlops;
        t.boundaries += u.boundaries;
      }
      return t;
    };
    addMeasures("program", total(baseline), total(current));
  }

  // Findings: matched stage by stage (stageKey), first come first paired
  // among equal keys; what is left is new (current) or absent (baseline).
  std::vector<std::optional<size_t>> match(current.findings.size());
  std::vector<bool> taken(baseline.findings.size(), false);
  for (int stage = 0; stage < 3; ++stage) {
    std::map<std::string, std::deque<size_t>> open;
    for (size_t i = 0; i < baseline.findings.size(); ++i)
      if (!taken[i])
        if (std::string k = stageKey(baseline.findings[i], stage, paired); !k.empty())
          open[k].push_back(i);
    for (size_t i = 0; i < current.findings.size(); ++i) {
      if (match[i])
        continue;
      std::string k = stageKey(current.findings[i], stage, paired);
      auto it = k.empty() ? open.end() : open.find(k);
      if (it == open.end() || it->second.empty())
        continue;
      match[i] = it->second.front();
      taken[it->second.front()] = true;
      it->second.pop_front();
    }
  }
  for (size_t i = 0; i < current.findings.size(); ++i) {
    const GateFinding &c = current.findings[i];
    FindingChange ch;
    ch.now = i;
    if (!match[i]) {
      ch.state = BaselineState::New;
      ch.regression = c.level >= options.failOn;
    } else {
      const GateFinding &b = baseline.findings[*match[i]];
      ch.before = match[i];
      bool same = b.level == c.level && b.message == c.message;
      ch.state = same ? BaselineState::Unchanged : BaselineState::Updated;
      ch.regression = c.level > b.level && c.level >= options.failOn;
      ch.improvement = c.level < b.level;
    }
    out.findings.push_back(ch);
  }
  for (size_t i = 0; i < baseline.findings.size(); ++i)
    if (!taken[i]) {
      FindingChange ch;
      ch.state = BaselineState::Absent;
      ch.before = i;
      ch.improvement = true;
      out.findings.push_back(ch);
    }
  return out;
}

namespace {

std::string measureText(const MeasureChange &m, double tolerance) {
  std::string s = m.where + ": " + m.what + " ";
  if (m.percent) {
    char delta[48];
    std::snprintf(delta, sizeof delta, " (%+.2f pt", m.after - m.before);
    s += percentText(m.before) + " -> " + percentText(m.after) + delta;
    if (m.after < m.before) {
      char tol[48];
      std::snprintf(tol, sizeof tol, "; tolerance %g pt", tolerance);
      s += tol;
    }
    s += ")";
  } else {
    s += numberText(m.before) + " -> " + numberText(m.after);
  }
  return s;
}

std::string sourceText(const GateFinding &f) {
  if (f.line <= 0)
    return {};
  std::string s = "source: " + f.file + ":" + std::to_string(f.line);
  if (!f.module.empty())
    s += " in " + f.module;
  if (!f.code.empty())
    s += ": " + f.code;
  return s;
}

std::string findingText(const GateRecord &r, const GateFinding &f) {
  return f.rule + " in " + whereOf(r, f.delegate, f.function) + ": " +
         (f.op.empty() ? std::string() : opText(f) + ": ") + f.message;
}

} // namespace

std::string renderGateText(const GateResult &g, size_t maxPerRule) {
  std::string out = "baseline gate: " + g.current.model + " against " + g.baseline.origin +
                    " (recorded for " + g.baseline.model + ")\n";
  if (g.baseline.toolVersion != g.current.toolVersion)
    out += "  note: recorded by anefit " +
           (g.baseline.toolVersion.empty() ? std::string("of unknown version")
                                           : g.baseline.toolVersion) +
           ", checked by anefit " + g.current.toolVersion +
           ": what changed in the rules between them shows as differences\n";
  size_t unchanged = 0;
  auto line = [&](const char *tag, const std::string &text, const GateFinding *f) {
    out += std::string("  ") + tag + ": " + text + "\n";
    if (f)
      if (std::string s = sourceText(*f); !s.empty())
        out += "      " + s + "\n";
  };
  for (const MeasureChange &m : g.measures) {
    line(m.regression  ? "worse"
         : isBetter(m) ? "better"
                       : "changed",
         measureText(m, g.options.residencyTolerance), nullptr);
  }
  std::string gateLevel(ane::levelName(g.options.failOn));
  // Every regression is listed; the other changes up to maxPerRule per
  // kind of change and rule, then counted ("... and 105 more").
  std::map<std::string, size_t> shown;
  std::vector<std::pair<std::string, size_t>> more; // "better: gone slow ANE-CONV-009", count
  auto listed = [&](bool regression, const std::string &kind) {
    if (regression || ++shown[kind] <= maxPerRule)
      return true;
    auto it = std::find_if(more.begin(), more.end(), [&](auto &m) { return m.first == kind; });
    if (it == more.end())
      more.emplace_back(kind, 1);
    else
      ++it->second;
    return false;
  };
  for (const FindingChange &ch : g.findings) {
    const GateFinding *now = ch.now ? &g.current.findings[*ch.now] : nullptr;
    const GateFinding *before = ch.before ? &g.baseline.findings[*ch.before] : nullptr;
    switch (ch.state) {
    case BaselineState::Unchanged:
      ++unchanged;
      break;
    case BaselineState::New: {
      std::string what = "new " + std::string(ane::levelName(now->level)) + " " + now->rule;
      if (listed(ch.regression, std::string(ch.regression ? "worse" : "changed") + ": " + what))
        line(ch.regression ? "worse" : "changed",
             "new " + std::string(ane::levelName(now->level)) + " " + findingText(g.current, *now) +
                 (ch.regression ? "" : " (below the gate's level, " + gateLevel + ")"),
             now);
      break;
    }
    case BaselineState::Updated: {
      const char *tag = ch.regression ? "worse" : ch.improvement ? "better" : "changed";
      std::string change = now->level == before->level
                               ? "reason changed: " + std::string(ane::levelName(now->level))
                               : std::string(ane::levelName(before->level)) + " -> " +
                                     std::string(ane::levelName(now->level));
      if (listed(ch.regression, std::string(tag) + ": " + change + " " + now->rule))
        line(tag, change + " " + findingText(g.current, *now), now);
      break;
    }
    case BaselineState::Absent: {
      std::string what = "gone " + std::string(ane::levelName(before->level));
      if (listed(false, "better: " + what + " " + before->rule))
        line("better", what + " " + findingText(g.baseline, *before), before);
      break;
    }
    }
  }
  for (const auto &[kind, count] : more) {
    size_t colon = kind.find(": ");
    out += "  " + kind.substr(0, colon) + ": ... and " + std::to_string(count) + " more " +
           kind.substr(colon + 2) + "\n";
  }
  if (unchanged)
    out += "  unchanged: " + std::to_string(unchanged) + " finding" + (unchanged == 1 ? "" : "s") +
           "\n";
  if (g.baseline.verdict != g.current.verdict)
    out += "  verdict: " + g.baseline.verdict + " -> " + g.current.verdict + "\n";
  size_t worse = g.regressions(), better = g.improvements();
  auto n = [](size_t k, const char *noun) {
    return std::to_string(k) + " " + noun + (k == 1 ? "" : "s");
  };
  if (worse)
    out += "gate: failed: " + n(worse, "regression") + " against " + g.baseline.origin + " (" +
           n(better, "improvement") + ")\n";
  else
    out += "gate: passed: nothing got worse against " + g.baseline.origin + " (" +
           n(better, "improvement") + ")\n";
  return out;
}

namespace {

OJson findingJson(const GateRecord &r, const GateFinding &f) {
  OJson j = {{"rule", f.rule},
             {"level", ane::levelName(f.level)},
             {"where", whereOf(r, f.delegate, f.function)},
             {"function", f.function},
             {"message", f.message}};
  if (!f.op.empty()) {
    j["op"] = f.op;
    j["opType"] = f.opType;
  }
  if (f.line > 0)
    j["source"] = {{"file", f.file}, {"line", f.line}, {"code", f.code}, {"module", f.module}};
  return j;
}

OJson measuresJson(const GateResult &g) {
  OJson a = OJson::array();
  for (const MeasureChange &m : g.measures)
    a.push_back({{"where", m.where},
                 {"what", m.what},
                 {"before", m.before},
                 {"after", m.after},
                 {"unit", m.percent ? "%" : "count"},
                 {"regression", m.regression}});
  return a;
}

} // namespace

std::string renderGateJson(const GateResult &g) {
  OJson j;
  j["schema"] = "anefit.gate/1";
  j["baseline"] = g.baseline.origin;
  j["model"] = g.current.model;
  j["passed"] = !g.regressed();
  j["regressions"] = g.regressions();
  j["improvements"] = g.improvements();
  j["residencyTolerance"] = g.options.residencyTolerance;
  j["failOn"] = ane::levelName(g.options.failOn);
  j["verdict"] = {{"before", g.baseline.verdict}, {"after", g.current.verdict}};
  j["measures"] = measuresJson(g);
  OJson findings = OJson::array();
  for (const FindingChange &ch : g.findings) {
    const GateFinding &f = ch.now ? g.current.findings[*ch.now] : g.baseline.findings[*ch.before];
    OJson fj = findingJson(ch.now ? g.current : g.baseline, f);
    fj["baselineState"] = baselineStateName(ch.state);
    if (ch.state == BaselineState::Updated)
      fj["levelBefore"] = ane::levelName(g.baseline.findings[*ch.before].level);
    fj["regression"] = ch.regression;
    fj["improvement"] = ch.improvement;
    findings.push_back(std::move(fj));
  }
  j["findings"] = std::move(findings);
  return dumpJson(j, 2) + "\n";
}

std::string renderGateSarif(const std::vector<ane::CheckReport> &reports,
                            std::string_view programPath, const GateResult &g) {
  OJson log = OJson::parse(reports.size() == 1 ? ane::renderSarif(reports[0])
                                               : ane::renderProgramSarif(reports, programPath));
  OJson &run = log["runs"][0];
  OJson &results = run["results"];
  // The results are the current findings in report order, as the record's.
  for (const FindingChange &ch : g.findings)
    if (ch.now && *ch.now < results.size())
      results[*ch.now]["baselineState"] = baselineStateName(ch.state);
  for (const FindingChange &ch : g.findings) {
    if (ch.state != BaselineState::Absent)
      continue;
    const GateFinding &f = g.baseline.findings[*ch.before];
    std::string where = f.function + (f.op.empty() ? "" : "/" + f.op);
    std::string uri = f.line > 0
                          ? f.file
                          : (g.current.delegates > 1 && g.baseline.delegates == g.current.delegates
                                 ? g.current.model + "#" + std::to_string(f.delegate)
                                 : g.current.model);
    OJson result = {
        {"ruleId", f.rule},
        {"kind", "pass"},
        {"level", "none"},
        {"baselineState", "absent"},
        {"message",
         {{"text", "No longer found (was " + std::string(ane::levelName(f.level)) +
                       " in the baseline): " + where + ": " + f.message}}},
        {"locations",
         OJson::array({{{"physicalLocation",
                         {{"artifactLocation", {{"uri", uri}}},
                          {"region", {{"startLine", f.line > 0 ? f.line : 1}}}}},
                        {"logicalLocations",
                         OJson::array({{{"name", f.op.empty() ? f.function : f.op},
                                        {"fullyQualifiedName", where},
                                        {"kind", f.op.empty() ? "function" : "member"}}})}}})},
        {"partialFingerprints", {{"anefitLocation/v1", f.rule + ":" + where}}},
        {"properties", {{"level", ane::levelName(f.level)}, {"opType", f.opType}}}};
    if (auto rule = ane::ruleFromCode(f.rule))
      result["ruleIndex"] = static_cast<size_t>(*rule);
    results.push_back(std::move(result));
  }
  OJson notes = OJson::array();
  for (const MeasureChange &m : g.measures)
    notes.push_back({{"level", m.regression ? "error" : "note"},
                     {"message", {{"text", measureText(m, g.options.residencyTolerance)}}}});
  run["invocations"] = OJson::array({{{"executionSuccessful", true},
                                      {"exitCode", g.regressed() ? 1 : 0},
                                      {"toolExecutionNotifications", notes}}});
  run["properties"]["baseline"] = {{"file", g.baseline.origin},
                                   {"passed", !g.regressed()},
                                   {"regressions", g.regressions()},
                                   {"improvements", g.improvements()},
                                   {"residencyTolerance", g.options.residencyTolerance},
                                   {"failOn", ane::levelName(g.options.failOn)},
                                   {"verdictBefore", g.baseline.verdict},
                                   {"measures", measuresJson(g)}};
  return dumpJson(log, 2) + "\n";
}

} // namespace anefit::report
