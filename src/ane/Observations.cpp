//===- Observations.cpp - What a Mac observed of a probe kit --------------===//
//
// The plan and observation files (nlohmann-json), the walk of the plan's
// decision tree with observed outcomes, and the observation laid over a
// check report.
//
//===----------------------------------------------------------------------===//
#include "ane/Observations.h"

#include "ir/AsmPrinter.h"
#include "support/Error.h"
#include "support/FileSystem.h"
#include "support/Json.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <set>

namespace anefit::ane {

/// Files are read into nlohmann::json (keys found in log n); the plan is
/// written from an ordered_json (keys in the schema's order).
using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

std::string programHash(const Model &model) {
  std::string text = modelToString(model);
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "fnv1a64:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

bool outcomeFails(std::string_view outcome) {
  return outcome == "off-ane" || outcome == "load-failed" || outcome == "predict-failed" ||
         outcome == "timeout" || outcome == "crashed";
}

std::optional<Level> observedFailureLevel(const Observation &o) {
  if (!outcomeFails(o.originalOutcome))
    return std::nullopt;
  return o.originalOutcome == "predict-failed" ? Level::RuntimeFail : Level::CompileFail;
}

namespace {

/// Reads fields of one JSON object, each failure one line naming the place.
struct Reader {
  const std::string &origin;
  std::string place;
  const json &j;

  [[noreturn]] void fail(const std::string &key, const std::string &expected) const {
    const json *v = j.is_object() && j.contains(key) ? &j.at(key) : nullptr;
    std::string found = v ? dumpJson(*v) : "nothing";
    if (found.size() > 60)
      found = found.substr(0, 57) + "...";
    failExpected(origin, place.empty() ? key : place + "." + key, expected, found);
  }
  std::string str(const std::string &key, bool required = true) const {
    if (j.is_object() && j.contains(key) && j.at(key).is_string())
      return j.at(key).get<std::string>();
    if (!required && (!j.is_object() || !j.contains(key) || j.at(key).is_null()))
      return {};
    fail(key, "a string");
  }
  std::vector<std::string> strings(const std::string &key) const {
    std::vector<std::string> out;
    if (!j.is_object() || !j.contains(key))
      return out;
    if (!j.at(key).is_array())
      fail(key, "an array of strings");
    for (const json &s : j.at(key)) {
      if (!s.is_string())
        fail(key, "an array of strings");
      out.push_back(s.get<std::string>());
    }
    return out;
  }
  int64_t integer(const std::string &key, int64_t fallback) const {
    if (!j.is_object() || !j.contains(key) || j.at(key).is_null())
      return fallback;
    if (!j.at(key).is_number_integer())
      fail(key, "an integer");
    return j.at(key).get<int64_t>();
  }
  const json &array(const std::string &key) const {
    if (!j.is_object() || !j.contains(key) || !j.at(key).is_array())
      fail(key, "an array");
    return j.at(key);
  }
  Reader at(const json &child, const std::string &key, size_t i) const {
    return {origin, (place.empty() ? "" : place + ".") + key + "[" + std::to_string(i) + "]",
            child};
  }
};

const ProbeVariant *findVariant(const ProbeModelPlan &m, const std::string &name) {
  for (const ProbeVariant &v : m.variants)
    if (v.name == name)
      return &v;
  return nullptr;
}

const ProbeSuspect *findSuspect(const ProbeModelPlan &m, const std::string &id) {
  for (const ProbeSuspect &s : m.suspects)
    if (s.id == id)
      return &s;
  return nullptr;
}

json parseObject(std::string_view text, const std::string &origin, std::string_view schema) {
  json j = parseJson(text, origin);
  if (j.is_discarded() || !j.is_object())
    failExpected(origin, "", "a JSON object", "malformed JSON");
  Reader r{origin, "", j};
  if (r.str("schema") != schema)
    r.fail("schema", "\"" + std::string(schema) + "\"");
  return j;
}

ProbePlan planFromJson(const json &j, const std::string &origin, const std::string &place) {
  Reader r{origin, place, j};
  ProbePlan plan;
  plan.source = r.str("source", false);
  const json &models = r.array("models");
  for (size_t i = 0; i < models.size(); ++i) {
    Reader m = r.at(models[i], "models", i);
    ProbeModelPlan mp;
    mp.label = m.str("label", false);
    mp.programHash = m.str("program_hash");
    mp.predictedVerdict = m.str("predicted_verdict", false);
    mp.treeDepth = static_cast<size_t>(std::max<int64_t>(0, m.integer("tree_depth", 0)));
    const json &suspects = m.array("suspects");
    for (size_t s = 0; s < suspects.size(); ++s) {
      Reader x = m.at(suspects[s], "suspects", s);
      ProbeSuspect ps;
      ps.id = x.str("id");
      ps.rules = x.strings("rules");
      ps.pattern = x.str("pattern", false);
      ps.level = x.str("level", false);
      ps.pass = x.str("pass", false);
      ps.ops = static_cast<size_t>(std::max<int64_t>(0, x.integer("ops", 0)));
      ps.firstOp = x.str("first_op", false);
      ps.note = x.str("note", false);
      mp.suspects.push_back(std::move(ps));
    }
    const json &variants = m.array("variants");
    for (size_t v = 0; v < variants.size(); ++v) {
      Reader x = m.at(variants[v], "variants", v);
      ProbeVariant pv;
      pv.name = x.str("name");
      pv.role = x.str("role");
      pv.path = x.str("path", false);
      pv.keeps = x.strings("keeps");
      pv.pipeline = x.str("pipeline", false);
      pv.programHash = x.str("program_hash", false);
      pv.note = x.str("note", false);
      for (const std::string &id : pv.keeps)
        if (!findSuspect(mp, id))
          x.fail("keeps", "suspects of this model's plan");
      mp.variants.push_back(std::move(pv));
    }
    const json &nodes = m.array("nodes");
    for (size_t n = 0; n < nodes.size(); ++n) {
      Reader x = m.at(nodes[n], "nodes", n);
      ProbeNode pn;
      pn.variant = x.str("variant", false);
      // Checked as read, before narrowing: 2^32 + 1 is not node 1, and -1
      // is not null.
      auto nodeIndex = [&](const char *key) {
        int64_t k = x.integer(key, -1);
        bool given = x.j.is_object() && x.j.contains(key) && !x.j.at(key).is_null();
        if ((given && k < 0) || k >= static_cast<int64_t>(nodes.size()) ||
            k == static_cast<int64_t>(n))
          x.fail(key, "a node index of this tree, not its own, or null");
        return static_cast<int>(k);
      };
      pn.bad = nodeIndex("bad");
      pn.good = nodeIndex("good");
      pn.conclusion = x.str("conclusion", false);
      pn.suspects = x.strings("suspects");
      pn.confirm = x.strings("confirm");
      if (pn.variant.empty() == pn.conclusion.empty())
        x.fail("variant", "either a variant to compile or a conclusion");
      // Every name a node gives is one of this model's plan: a culprit the
      // suspects do not hold would be reported as found.
      if (!pn.variant.empty() && !findVariant(mp, pn.variant))
        x.fail("variant", "a variant of this model's plan");
      for (const std::string &id : pn.suspects)
        if (!findSuspect(mp, id))
          x.fail("suspects", "suspects of this model's plan");
      for (const std::string &name : pn.confirm)
        if (!findVariant(mp, name))
          x.fail("confirm", "variants of this model's plan");
      mp.nodes.push_back(std::move(pn));
    }
    if (mp.nodes.empty())
      m.fail("nodes", "at least the root node");
    plan.models.push_back(std::move(mp));
  }
  return plan;
}

ordered_json planToJson(const ProbePlan &plan) {
  ordered_json j;
  j["schema"] = kProbePlanSchema;
  j["source"] = plan.source;
  j["models"] = ordered_json::array();
  for (const ProbeModelPlan &m : plan.models) {
    ordered_json mj;
    mj["label"] = m.label;
    mj["program_hash"] = m.programHash;
    mj["predicted_verdict"] = m.predictedVerdict;
    mj["tree_depth"] = m.treeDepth;
    mj["suspects"] = ordered_json::array();
    for (const ProbeSuspect &s : m.suspects) {
      ordered_json sj = {{"id", s.id},
                         {"rules", s.rules},
                         {"level", s.level},
                         {"ops", s.ops},
                         {"first_op", s.firstOp}};
      if (!s.pattern.empty())
        sj["pattern"] = s.pattern;
      sj["pass"] = s.pass.empty() ? ordered_json() : ordered_json(s.pass);
      if (!s.note.empty())
        sj["note"] = s.note;
      mj["suspects"].push_back(std::move(sj));
    }
    mj["variants"] = ordered_json::array();
    for (const ProbeVariant &v : m.variants) {
      ordered_json vj = {{"name", v.name}, {"role", v.role}, {"path", v.path}, {"keeps", v.keeps}};
      vj["pipeline"] = v.pipeline;
      vj["program_hash"] = v.programHash;
      if (!v.note.empty())
        vj["note"] = v.note;
      mj["variants"].push_back(std::move(vj));
    }
    mj["nodes"] = ordered_json::array();
    for (const ProbeNode &n : m.nodes) {
      ordered_json nj;
      if (!n.variant.empty()) {
        nj["variant"] = n.variant;
        nj["bad"] = n.bad < 0 ? ordered_json() : ordered_json(n.bad);
        nj["good"] = n.good < 0 ? ordered_json() : ordered_json(n.good);
      } else {
        nj["conclusion"] = n.conclusion;
        nj["suspects"] = n.suspects;
        nj["confirm"] = n.confirm;
      }
      mj["nodes"].push_back(std::move(nj));
    }
    j["models"].push_back(std::move(mj));
  }
  return j;
}

std::string fileText(const std::string &path) {
  std::vector<uint8_t> bytes = readFileBytes(path);
  return std::string(bytes.begin(), bytes.end());
}

} // namespace

ProbePlan parseProbePlan(std::string_view text, const std::string &origin) {
  return planFromJson(parseObject(text, origin, kProbePlanSchema), origin, "");
}

ProbePlan readProbePlan(const std::string &path) { return parseProbePlan(fileText(path), path); }

std::string renderProbePlan(const ProbePlan &plan) { return dumpJson(planToJson(plan), 2) + "\n"; }

ProbeObservations readObservations(const std::string &path) {
  return parseObservations(fileText(path), path);
}

ProbeObservations parseObservations(std::string_view text, const std::string &path) {
  json j = parseObject(text, path, kProbeObservationsSchema);
  Reader r{path, "", j};
  ProbeObservations obs;
  obs.path = path;
  if (j.contains("host")) {
    if (!j["host"].is_object())
      r.fail("host", "an object of strings");
    for (const auto &[k, v] : j["host"].items())
      if (v.is_string())
        obs.host[k] = v.get<std::string>();
  }
  if (!j.contains("plan") || !j["plan"].is_object())
    r.fail("plan", "the kit's plan (an object)");
  obs.plan = planFromJson(j["plan"], path, "plan");
  const json &runs = r.array("runs");
  for (size_t i = 0; i < runs.size(); ++i) {
    Reader x = r.at(runs[i], "runs", i);
    VariantRun run;
    int64_t model = x.integer("model", 0);
    if (model < 0 || model >= static_cast<int64_t>(obs.plan.models.size()))
      x.fail("model", "an index into plan.models");
    run.model = static_cast<size_t>(model);
    run.variant = x.str("variant");
    if (!findVariant(obs.plan.models[run.model], run.variant))
      x.fail("variant", "a variant of the plan");
    run.outcome = x.str("outcome");
    static const std::set<std::string> outcomes = {
        "ane", "ran", "off-ane", "load-failed", "predict-failed", "timeout", "crashed", "invalid"};
    if (!outcomes.count(run.outcome))
      x.fail("outcome", "one of ane, ran, off-ane, load-failed, predict-failed, timeout, "
                        "crashed, invalid");
    run.error = x.str("error", false);
    run.sha256 = x.str("sha256", false);
    const json &rj = runs[i];
    if (rj.contains("seconds") && rj["seconds"].is_number())
      run.seconds = rj["seconds"].get<double>();
    if (rj.contains("max_abs_diff_vs_cpu") && rj["max_abs_diff_vs_cpu"].is_number())
      run.maxAbsDiffVsCpu = rj["max_abs_diff_vs_cpu"].get<double>();
    if (rj.contains("devices")) {
      Reader d = {path, x.place, rj["devices"]};
      if (!rj["devices"].is_object())
        x.fail("devices", "an object of op counts");
      run.aneOps = static_cast<size_t>(std::max<int64_t>(0, d.integer("ane", 0)));
      run.cpuOps = static_cast<size_t>(std::max<int64_t>(0, d.integer("cpu", 0)));
      run.gpuOps = static_cast<size_t>(std::max<int64_t>(0, d.integer("gpu", 0)));
    }
    if (rj.contains("op_devices")) {
      if (!rj["op_devices"].is_object())
        x.fail("op_devices", "an object of op name -> device");
      for (const auto &[k, v] : rj["op_devices"].items())
        if (v.is_string())
          run.opDevices[k] = v.get<std::string>();
    }
    obs.runs.push_back(std::move(run));
  }
  return obs;
}

Observation concludeProbe(const ProbeObservations &obs, size_t m) {
  const ProbeModelPlan &plan = obs.plan.models.at(m);
  Observation o;
  o.observationsPath = obs.path;
  o.host = obs.host;
  auto runOf = [&](const std::string &variant) -> const VariantRun * {
    const VariantRun *last = nullptr;
    for (const VariantRun &r : obs.runs)
      if (r.model == m && r.variant == variant)
        last = &r;
    return last;
  };
  if (const VariantRun *orig = runOf("original")) {
    o.originalOutcome = orig->outcome;
    o.originalError = orig->error;
    o.maxAbsDiffVsCpu = orig->maxAbsDiffVsCpu;
    o.observedAneOps = orig->aneOps;
  }

  // The walk: the same tree the runner followed.
  std::set<int> visited;
  int at = 0;
  const ProbeNode *end = nullptr;
  while (at >= 0 && at < static_cast<int>(plan.nodes.size()) && visited.insert(at).second) {
    const ProbeNode &n = plan.nodes[at];
    if (n.variant.empty()) {
      end = &n;
      break;
    }
    const VariantRun *run = runOf(n.variant);
    if (!run || run->outcome == "invalid")
      break;
    o.path.emplace_back(n.variant, run->outcome);
    at = outcomeFails(run->outcome) ? n.bad : n.good;
  }
  if (end) {
    o.conclusion = end->conclusion;
    if (end->conclusion == "culprit")
      o.culprits = end->suspects;
  }

  // Each suspect: what the tree, the variants that ran with it and its
  // sub-program say.
  for (const ProbeSuspect &s : plan.suspects) {
    SuspectVerdict v;
    v.suspect = s.id;
    v.rules = s.rules;
    v.pattern = s.pattern;
    v.predicted = s.level;
    bool ranWithIt = false;
    for (const ProbeVariant &pv : plan.variants) {
      const VariantRun *run = pv.role == "slice" ? nullptr : runOf(pv.name);
      if (run && run->outcome != "invalid" && !outcomeFails(run->outcome) &&
          std::count(pv.keeps.begin(), pv.keeps.end(), s.id))
        ranWithIt = true;
    }
    if (const VariantRun *slice = runOf("slice-" + s.id))
      v.alone = slice->outcome;
    bool failsAlone = !v.alone.empty() && outcomeFails(v.alone) && v.alone != "off-ane";
    if (std::count(o.culprits.begin(), o.culprits.end(), s.id))
      v.observed = "culprit";
    else if (ranWithIt)
      v.observed = "not a cause";
    else if (failsAlone)
      v.observed = "fails alone";
    else if (v.alone == "ane" || v.alone == "ran")
      v.observed = "runs alone";
    else if (v.alone == "off-ane")
      v.observed = "inconclusive";
    else
      v.observed = "not tested";
    bool failed = v.observed == "culprit" || v.observed == "fails alone";
    bool ran = v.observed == "not a cause" || v.observed == "runs alone";
    if (s.level == "compile-fail" || s.level == "runtime-fail")
      v.agreement = failed ? "right" : ran ? "wrong: predicted a failure" : "unknown";
    else if (s.level == "at-risk")
      v.agreement = failed ? "right: the risk is real"
                    : ran  ? "at risk, but it runs here"
                           : "unknown";
    else
      v.agreement = failed ? "right to flag the pattern" : ran ? "a working case now" : "unknown";
    o.suspects.push_back(std::move(v));
  }
  // No removable suspect explains the failure: the sub-programs that fail
  // alone are the culprits.
  if (o.conclusion == "unnamed")
    for (const SuspectVerdict &v : o.suspects)
      if (v.observed == "fails alone")
        o.culprits.push_back(v.suspect);
  return o;
}

size_t applyObservations(CheckReport &report, const Model &model, const ProbeObservations &obs,
                         size_t position) {
  std::string hash = programHash(model);
  size_t m = obs.plan.models.size();
  for (size_t i = 0; i < obs.plan.models.size(); ++i)
    if (obs.plan.models[i].programHash == hash && (m == obs.plan.models.size() || i == position))
      m = i;
  if (m == obs.plan.models.size()) {
    std::string kit = obs.plan.models.empty() ? "none" : obs.plan.models[0].programHash;
    if (obs.plan.models.size() > 1)
      kit += " and " + std::to_string(obs.plan.models.size() - 1) + " more";
    throw InputError::at(obs.path, "plan.models",
                         "observed another model: expected program hash " + hash + " (" +
                             report.modelPath + "), found " + kit);
  }
  auto o = std::make_shared<Observation>(concludeProbe(obs, m));
  o->predictedVerdict = report.verdict;

  // Which rules the Mac cleared, and which it named.
  std::set<std::string> refutedRules, culpritRules;
  for (const SuspectVerdict &v : o->suspects) {
    if (v.observed == "not a cause" || v.observed == "runs alone")
      refutedRules.insert(v.rules.begin(), v.rules.end());
    if (v.observed == "culprit" || v.observed == "fails alone")
      culpritRules.insert(v.rules.begin(), v.rules.end());
  }
  for (const std::string &r : culpritRules)
    refutedRules.erase(r);
  std::vector<Finding> kept;
  for (Finding &f : report.findings) {
    std::string code(ruleInfo(f.rule).code);
    bool blocking = f.effect >= Effect::CompileFail;
    if (blocking && refutedRules.count(code))
      continue;
    if (blocking && culpritRules.count(code)) {
      f.certainty = Certainty::Confirmed;
      f.observed = "observed: the culprit of the compile on " +
                   (o->host.count("chip") ? o->host.at("chip") : std::string("a Mac"));
    }
    kept.push_back(std::move(f));
  }
  // A run of the original settles every blocking finding: it ran, or it
  // failed (named or not).
  bool ran = !o->originalOutcome.empty() && !outcomeFails(o->originalOutcome);
  if (ran)
    std::erase_if(kept, [](const Finding &f) { return f.effect >= Effect::CompileFail; });
  report.findings = std::move(kept);

  bool failed = !o->originalOutcome.empty() && outcomeFails(o->originalOutcome);
  for (FunctionReport &fr : report.functions) {
    if (ran && (fr.verdict == Verdict::AneFails || fr.verdict == Verdict::AtRisk)) {
      bool anyOff = std::any_of(fr.ops.begin(), fr.ops.end(),
                                [](const OpReport &op) { return op.placement != Placement::Ane; });
      fr.verdict = fr.aneOps == 0 && !fr.ops.empty() ? Verdict::NoAne
                   : anyOff                          ? Verdict::Partial
                                                     : Verdict::Ane;
    } else if (failed) {
      fr.verdict = Verdict::AneFails;
    }
  }
  report.verdict = Verdict::Ane;
  for (const FunctionReport &fr : report.functions)
    report.verdict = std::max(report.verdict, fr.verdict);

  // Placement, op by op, where the Mac's compute plan said.
  for (const VariantRun &r : obs.runs) {
    if (r.model != m || r.variant != "original" || r.opDevices.empty())
      continue;
    for (const FunctionReport &fr : report.functions)
      for (const OpReport &op : fr.ops) {
        auto d = r.opDevices.find(op.name);
        if (d == r.opDevices.end())
          continue;
        ++o->opsObserved;
        if ((d->second == "ane") == (op.placement == Placement::Ane))
          ++o->placementAgrees;
      }
  }
  report.observation = std::move(o);
  return m;
}

} // namespace anefit::ane
