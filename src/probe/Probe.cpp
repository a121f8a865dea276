//===- Probe.cpp - The bisection kit a Mac runs ---------------------------===//
//
// Suspects from the check report, variants from the fix passes and the
// partitioner's region extraction, the decision tree, and the kit on disk.
//
//===----------------------------------------------------------------------===//
#include "probe/Probe.h"

#include "fix/Fix.h"
#include "io/ModelIO.h"
#include "ir/Clone.h"
#include "ir/Verifier.h"
#include "ops/OpRegistry.h"
#include "partition/Partitioner.h"
#include "support/DType.h"
#include "support/Error.h"
#include "support/FileSystem.h"
#include "support/Text.h"
#include "support/Units.h"
#include "transforms/Pass.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <sstream>

namespace anefit::probe {
namespace assets {
extern const std::string_view kRunProbePy;
} // namespace assets

std::string_view runnerScript() { return assets::kRunProbePy; }

namespace {

namespace fs = std::filesystem;

/// At most this many ops in a sub-program's index arithmetic.
constexpr size_t kMaxSliceOps = 64;
/// At most this many unverified patterns become suspects (risky first).
constexpr size_t kMaxPatternSuspects = 6;

bool isConstOp(const Operation *op) { return op && opHasTrait(op->type, OpTrait::ConstLike); }

struct SuspectOps {
  std::string function;
  std::vector<std::string> ops; ///< op names, program order not guaranteed
};

/// The ops of `function` of `model` named in `names`, in program order.
std::vector<const Operation *> opsNamed(const Model &model, const std::string &function,
                                        const std::set<std::string> &names) {
  std::vector<const Operation *> out;
  if (const Function *fn = model.program->findFunction(function))
    for (const auto &op : fn->body->ops)
      if (names.count(op->name))
        out.push_back(op.get());
  return out;
}

/// The smallest sub-program holding `targets`: the ops and the non-float
/// arithmetic that computes their integer and boolean operands (index and
/// shape math), other operands cut into function inputs, the targets'
/// results its outputs.
std::unique_ptr<Model> sliceAround(const Model &model, const std::string &function,
                                   const std::vector<const Operation *> &targets,
                                   std::string &why) {
  const Function *fn = model.program->findFunction(function);
  std::map<const Operation *, size_t> index;
  for (size_t i = 0; i < fn->body->ops.size(); ++i)
    index[fn->body->ops[i].get()] = i;
  for (const Operation *target : targets)
    if (!index.count(target)) {
      why = "the op is inside a nested block";
      return nullptr;
    }
  std::set<const Operation *> in(targets.begin(), targets.end());
  std::vector<const Operation *> work(targets.begin(), targets.end());
  while (!work.empty() && in.size() < kMaxSliceOps + targets.size()) {
    const Operation *op = work.back();
    work.pop_back();
    for (const Value *v : op->operandValues()) {
      const Operation *def = v->definingOp;
      if (!def || isConstOp(def) || in.count(def) || !index.count(def) || v->type.isState() ||
          isFloat(v->type.dtype()))
        continue;
      in.insert(def);
      work.push_back(def);
    }
  }
  std::vector<const Operation *> ops(in.begin(), in.end());
  std::sort(ops.begin(), ops.end(),
            [&](const Operation *a, const Operation *b) { return index[a] < index[b]; });

  partition::FunctionPlan plan;
  plan.function = function;
  partition::Region region;
  std::set<const Value *> seen;
  for (const Operation *op : ops) {
    partition::PlacedOp placed;
    placed.op = op;
    region.ops.push_back(std::move(placed));
    for (const Value *v : op->operandValues()) {
      if (in.count(v->definingOp) || isConstOp(v->definingOp) || !seen.insert(v).second)
        continue;
      (v->type.isState() ? region.states : region.inputs).push_back(v);
    }
  }
  for (const Operation *target : targets)
    for (const auto &out : target->outputs)
      region.outputs.push_back(out.get());
  plan.regions.push_back(std::move(region));
  return partition::extractRegion(model, plan, 0);
}

/// The suspects of one checked model: blocking findings by the pass that
/// removes them, blocking rules no pass removes, then risky unverified
/// patterns not already under a blocking finding.
std::vector<ane::ProbeSuspect> collectSuspects(const ane::CheckReport &report,
                                               std::map<std::string, SuspectOps> &opsOf) {
  std::vector<ane::ProbeSuspect> suspects;
  std::map<std::string, size_t> byKey; // pass name or rule code -> suspect index
  std::set<std::string> blamedOps;
  for (const ane::Finding &f : report.findings) {
    if (f.effect < ane::Effect::CompileFail)
      continue;
    std::string code(ane::ruleInfo(f.rule).code);
    std::string pass;
    for (std::string_view p : passesRemoving(code)) {
      pass = std::string(p);
      break;
    }
    std::string key = pass.empty() ? code : pass;
    auto [it, added] = byKey.emplace(key, suspects.size());
    if (added) {
      ane::ProbeSuspect s;
      s.id = "S" + std::to_string(suspects.size() + 1);
      s.pass = pass;
      s.level = std::string(ane::levelName(f.level()));
      suspects.push_back(std::move(s));
    }
    ane::ProbeSuspect &s = suspects[it->second];
    if (std::find(s.rules.begin(), s.rules.end(), code) == s.rules.end())
      s.rules.push_back(code);
    if (f.level() > ane::levelFromName(s.level).value_or(ane::Level::Slow))
      s.level = std::string(ane::levelName(f.level()));
    if (!f.op.empty()) {
      SuspectOps &so = opsOf[s.id];
      if (so.function.empty())
        so.function = f.function;
      if (so.function == f.function)
        so.ops.push_back(f.op);
      blamedOps.insert(f.function + "/" + f.op);
      ++s.ops;
    }
  }
  size_t patterns = 0;
  for (const ane::FunctionReport &fr : report.functions)
    for (const ane::UnverifiedPattern &u : fr.unverified) {
      if (!u.risky || patterns >= kMaxPatternSuspects)
        continue;
      std::vector<std::string> ops;
      bool allBlamed = true;
      for (const ane::OpReport &op : fr.ops)
        if (op.pattern == u.pattern && !op.covered) {
          ops.push_back(op.name);
          allBlamed = allBlamed && blamedOps.count(fr.name + "/" + op.name);
        }
      if (ops.empty() || allBlamed)
        continue;
      ane::ProbeSuspect s;
      s.id = "S" + std::to_string(suspects.size() + 1);
      s.pattern = u.pattern;
      s.rules = {"ANE-COV-001"};
      s.level = "unverified";
      s.ops = ops.size();
      opsOf[s.id] = {fr.name, ops};
      suspects.push_back(std::move(s));
      ++patterns;
    }
  return suspects;
}

} // namespace

ModelKit planModelKit(const Model &model, const ane::CheckReport &report, const std::string &prefix,
                      const ane::CheckOptions &target) {
  ModelKit kit;
  ane::ProbeModelPlan &plan = kit.plan;
  plan.label = model.origin.empty() ? model.sourcePath : model.origin;
  plan.programHash = ane::programHash(model);
  plan.predictedVerdict = std::string(ane::verdictName(report.verdict));
  std::map<std::string, SuspectOps> opsOf;
  plan.suspects = collectSuspects(report, opsOf);

  std::vector<std::string> removable;
  std::map<std::string, std::vector<std::string>> rulesOf;
  for (const ane::ProbeSuspect &s : plan.suspects) {
    rulesOf[s.id] = s.rules;
    if (!s.pass.empty())
      removable.push_back(s.id);
  }
  // The passes removing `rules`, run on a copy once per pipeline: the
  // check below and the variant that removes the same suspects share it.
  std::map<std::string, FixResult> rewrites;
  auto rewrite = [&](const std::vector<std::string> &rules) -> FixResult & {
    std::string pipeline = pipelineRemoving(rules);
    auto it = rewrites.find(pipeline);
    if (it == rewrites.end()) {
      FixOptions fo;
      fo.passes = pipeline;
      fo.verify = FixVerify::Never;
      fo.target = target;
      it = rewrites.emplace(pipeline, fixModel(model, fo)).first;
    }
    return it->second;
  };
  auto rulesRemoving = [&](const std::vector<std::string> &ids) {
    std::vector<std::string> rules;
    for (const std::string &id : ids)
      rules.insert(rules.end(), rulesOf[id].begin(), rulesOf[id].end());
    return rules;
  };
  // A pass may not match this model's form of the pattern (a write position
  // it cannot follow): what still fires after every pass ran is not
  // removable, and the plan must not count on it.
  if (!removable.empty()) {
    const FixResult &trial = rewrite(rulesRemoving(removable));
    std::set<std::string> left;
    for (const ane::Finding &f : trial.after.findings)
      if (f.effect >= ane::Effect::CompileFail)
        left.insert(std::string(ane::ruleInfo(f.rule).code));
    for (ane::ProbeSuspect &s : plan.suspects) {
      bool stays = std::any_of(s.rules.begin(), s.rules.end(),
                               [&](const std::string &r) { return left.count(r) > 0; });
      if (s.pass.empty() || (trial.verifies() && !stays))
        continue;
      s.note = s.pass + " does not remove it in this model";
      s.pass.clear();
      std::erase(removable, s.id);
    }
  }

  // A variant keeping `keep` of the removable suspects: the passes of the
  // others run on a copy.
  std::map<std::string, size_t> variantIndex;
  auto addVariant = [&](const std::string &name, const std::string &role,
                        const std::vector<std::string> &keep) {
    if (variantIndex.count(name))
      return;
    ane::ProbeVariant v;
    v.name = name;
    v.role = role;
    v.keeps = keep;
    std::vector<std::string> removed;
    for (const std::string &id : removable)
      if (std::find(keep.begin(), keep.end(), id) == keep.end())
        removed.push_back(id);
    std::unique_ptr<Model> made;
    if (removed.empty()) {
      made = cloneModel(model);
    } else {
      FixResult &fixed = rewrite(rulesRemoving(removed));
      v.pipeline = fixed.pipeline;
      if (!fixed.verifies())
        v.note = "not written: the passes made a program the verifier refuses";
      else
        made = cloneModel(*fixed.fixed);
    }
    if (made) {
      v.path = "models/" + prefix + name + ".mlpackage";
      v.programHash = ane::programHash(*made);
    }
    variantIndex[name] = plan.variants.size();
    plan.variants.push_back(std::move(v));
    kit.variants.push_back(std::move(made));
  };

  std::vector<std::string> all;
  for (const ane::ProbeSuspect &s : plan.suspects)
    all.push_back(s.id);
  std::vector<std::string> unremovable;
  for (const ane::ProbeSuspect &s : plan.suspects)
    if (s.pass.empty())
      unremovable.push_back(s.id);
  addVariant("original", "original", all);
  if (!removable.empty())
    addVariant("fixed-all", "fixed-all", unremovable);
  if (removable.size() >= 2)
    for (const std::string &id : removable) {
      addVariant("keep-" + id, "keep", {id});
      std::vector<std::string> rest;
      for (const std::string &o : removable)
        if (o != id)
          rest.push_back(o);
      addVariant("drop-" + id, "drop", rest);
    }

  // Sub-programs, one per suspect with ops: every op of a blocking rule's
  // findings (a rule may count them together), the first op of a pattern
  // (its ops hold weights; one is the pattern).
  for (ane::ProbeSuspect &s : plan.suspects) {
    auto so = opsOf.find(s.id);
    if (so == opsOf.end() || so->second.ops.empty())
      continue;
    std::set<std::string> names(so->second.ops.begin(), so->second.ops.end());
    std::vector<const Operation *> targets = opsNamed(model, so->second.function, names);
    if (targets.empty())
      continue;
    if (!s.pattern.empty())
      targets.resize(1);
    const Operation *op = targets.front();
    s.firstOp = op->name;
    ane::ProbeVariant v;
    v.name = "slice-" + s.id;
    v.role = "slice";
    v.keeps = {s.id};
    std::string why;
    std::unique_ptr<Model> made = sliceAround(model, so->second.function, targets, why);
    if (made) {
      std::string unwritable = unwritableReason(*made);
      if (!unwritable.empty()) {
        why = unwritable;
        made.reset();
      }
    }
    if (made) {
      v.path = "models/" + prefix + v.name + ".mlpackage";
      v.programHash = ane::programHash(*made);
      v.note = (targets.size() == 1 ? "op " + op->name
                                    : std::to_string(targets.size()) + " ops from " + op->name) +
               " (" + op->type + ") of function " + so->second.function;
    } else {
      v.note = "not written: " + why;
    }
    variantIndex[v.name] = plan.variants.size();
    plan.variants.push_back(std::move(v));
    kit.variants.push_back(std::move(made));
  }

  // The decision tree.
  auto written = [&](const std::string &name) {
    auto it = variantIndex.find(name);
    return it != variantIndex.end() && kit.variants[it->second] != nullptr;
  };
  auto slicesOf = [&](const std::vector<std::string> &ids) {
    std::vector<std::string> out;
    for (const std::string &id : ids)
      if (written("slice-" + id))
        out.push_back("slice-" + id);
    return out;
  };
  auto end = [&](const std::string &conclusion, const std::vector<std::string> &ids) {
    ane::ProbeNode n;
    n.conclusion = conclusion;
    n.suspects = ids;
    n.confirm = slicesOf(ids);
    plan.nodes.push_back(std::move(n));
    return static_cast<int>(plan.nodes.size() - 1);
  };
  auto test = [&](const std::string &variant) {
    ane::ProbeNode n;
    n.variant = variant;
    plan.nodes.push_back(std::move(n));
    return static_cast<int>(plan.nodes.size() - 1);
  };
  // Removing every suspect in `set` ran and keeping all of it failed: the
  // culprit is in it; halve it with a keep variant.
  std::function<int(const std::vector<std::string> &)> bisect =
      [&](const std::vector<std::string> &set) -> int {
    if (set.size() == 1)
      return end("culprit", set);
    std::vector<std::string> left(set.begin(), set.begin() + set.size() / 2);
    std::vector<std::string> right(set.begin() + set.size() / 2, set.end());
    std::string name = "keep-" + joined(left, "+");
    addVariant(name, "keep", left);
    int node = test(name);
    int bad = bisect(left);
    int good = bisect(right);
    plan.nodes[node].bad = bad;
    plan.nodes[node].good = good;
    return node;
  };
  int root = test("original");
  plan.nodes[root].good = end("no-failure", {});
  if (removable.empty()) {
    plan.nodes[root].bad = end("unnamed", unremovable);
  } else {
    int fixedAll = test("fixed-all");
    plan.nodes[root].bad = fixedAll;
    plan.nodes[fixedAll].bad = end("unnamed", unremovable);
    plan.nodes[fixedAll].good = bisect(removable);
  }
  std::function<size_t(int)> depth = [&](int n) -> size_t {
    if (n < 0 || plan.nodes[n].variant.empty())
      return 0;
    return 1 + std::max(depth(plan.nodes[n].bad), depth(plan.nodes[n].good));
  };
  plan.treeDepth = depth(0);
  return kit;
}

std::string kitReadme(const ane::ProbePlan &plan, const std::vector<uint64_t> &bytesPerModel) {
  std::ostringstream os;
  os << "# ANE probe kit for " << plan.source << "\n\n"
     << "Written by `anefit probe`. It settles on a Mac what `anefit check` could only "
        "predict: whether Core ML compiles this model for the Neural Engine, and if not, "
        "which suspect is the culprit.\n\n"
     << "## Run it on a Mac\n\n"
     << "    python3 -m pip install coremltools numpy\n"
     << "    python3 run_probe.py                 # follows the plan: the fewest compiles\n"
     << "    python3 run_probe.py --all           # every variant, for the corpus\n\n"
     << "Each variant is compiled, loaded with `CPU_AND_NE` and asked one prediction with "
        "random inputs in a child process with a timeout (`--timeout`, default 600 s); an ANE "
        "compiler crash takes only the child down. Where the OS has `MLComputePlan` (macOS "
        "14.4+), the device of every op is recorded. The runner writes `observations.json` "
        "(schema `anefit.probe-observations/1`). Bring it back:\n\n"
     << "    anefit check " << plan.source << " --observations observations.json\n\n"
     << "Observed outcomes replace the predictions, the culprit is named, and a table sets "
        "each suspect's prediction against what was observed: paste it into an issue.\n"
     << "On Linux, `python3 run_probe.py` validates the kit and says it needs macOS.\n";
  for (size_t m = 0; m < plan.models.size(); ++m) {
    const ane::ProbeModelPlan &mp = plan.models[m];
    os << "\n## Model " << m << ": " << mp.label << "\n\n"
       << "Predicted verdict: " << mp.predictedVerdict << "; program hash " << mp.programHash;
    if (m < bytesPerModel.size())
      os << "; variants written: " << humanBytes(bytesPerModel[m]);
    os << ".\n\n### Suspects\n\n";
    if (mp.suspects.empty())
      os << "None: no rule predicts a failure and every risky pattern has a working case. "
            "The original alone is compiled; if it fails, the cause is one no rule names.\n";
    else
      os << "| id | rules | predicted | ops | removed by | first op |\n"
         << "| --- | --- | --- | --- | --- | --- |\n";
    for (const ane::ProbeSuspect &s : mp.suspects) {
      std::string rules = joined(s.rules, ", ");
      if (!s.pattern.empty())
        rules += " (pattern `" + s.pattern + "`)";
      os << "| " << s.id << " | " << rules << " | " << s.level << " | " << s.ops << " | "
         << (!s.pass.empty()  ? "`" + s.pass + "`"
             : s.note.empty() ? std::string("no pass: sub-program only")
                              : s.note + ": sub-program only")
         << " | " << (s.firstOp.empty() ? "-" : "`" + s.firstOp + "`") << " |\n";
    }
    os << "\n### Variants\n\n| variant | what it is | package |\n| --- | --- | --- |\n";
    for (const ane::ProbeVariant &v : mp.variants) {
      std::string what = v.role == "original"    ? "the model as given"
                         : v.role == "fixed-all" ? "every removable suspect removed"
                         : v.role == "keep"      ? "only " + joined(v.keeps, "+") + " left in"
                         : v.role == "drop"      ? "only " + v.name.substr(5) + " removed"
                                                 : "the sub-program of " + joined(v.keeps, "+");
      if (!v.pipeline.empty())
        what += " (passes `" + v.pipeline + "`)";
      if (!v.note.empty())
        what += "; " + v.note;
      os << "| " << v.name << " | " << what << " | "
         << (v.path.empty() ? std::string("-") : "`" + v.path + "`") << " |\n";
    }
    os << "\n### The plan\n\n";
    std::function<void(int, int)> say = [&](int n, int indent) {
      if (n < 0)
        return;
      const ane::ProbeNode &node = mp.nodes[n];
      std::string pad(2 * indent, ' ');
      if (!node.variant.empty()) {
        os << pad << "- compile `" << node.variant << "`\n" << pad << "  - fails:\n";
        say(node.bad, indent + 2);
        os << pad << "  - runs on the ANE:\n";
        say(node.good, indent + 2);
        return;
      }
      os << pad << "- "
         << (node.conclusion == "no-failure" ? std::string("no failure: the predicted failures "
                                                           "do not happen on this Mac")
             : node.conclusion == "culprit"
                 ? "culprit: " + joined(node.suspects, ", ")
                 : std::string("not named by a removable suspect: the cause is ") +
                       (node.suspects.empty()
                            ? "one no rule names"
                            : "among " + joined(node.suspects, ", ") + ", or one no rule names"));
      if (!node.confirm.empty()) {
        os << "; then compile";
        for (const std::string &c : node.confirm)
          os << " `" << c << "`";
        os << " to see each suspect alone";
      }
      os << "\n";
    };
    say(0, 0);
    os << "\nAt most " << mp.treeDepth << (mp.treeDepth == 1 ? " compile names" : " compiles name")
       << " the culprit (the longest path of the plan), plus one sub-program "
          "check per suspect named.";
    os << " A sub-program holds the suspect's op and the integer arithmetic that computes its "
          "indices; every other operand is a function input. Core ML may place so small a "
          "program on the CPU: then its outcome is `off-ane` and says nothing about the "
          "suspect.\n";
  }
  // Names come from the model: no control character reaches the page.
  return escapeControls(os.str(), /*keepLayout=*/true);
}

ProbeResult writeProbeKit(const std::string &modelPath, const std::string &dir,
                          const ProbeOptions &options) {
  auto stage = [&](std::string_view s) {
    if (options.progress)
      options.progress(s);
  };
  ProbeResult result;
  result.dir = dir;
  std::vector<std::unique_ptr<Model>> models = loadModels(modelPath);
  refuseInputOverlap(dir, {modelPath}, /*around=*/false);
  // What is there decides what may be replaced: nothing, an empty directory,
  // or (with force) a kit. A directory of other files is never a kit's to
  // take.
  std::string trimmed = dir;
  while (trimmed.size() > 1 && trimmed.back() == '/')
    trimmed.pop_back();
  if (fs::path parent = fs::path(trimmed).parent_path(); !parent.empty()) {
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (ec)
      throw InputError::at(dir, "", "cannot create its parent directory: " + ec.message());
  }
  bool replace = false;
  if (FileKind kind = fileKindOf(trimmed); kind != FileKind::Missing && kind != FileKind::Directory)
    failExpected(dir, "", "a directory for the kit", fileKindName(kind));
  if (fileKindOf(trimmed) == FileKind::Directory) {
    std::error_code ec;
    bool empty = fs::is_empty(trimmed, ec);
    bool kit = fileKindOf((fs::path(trimmed) / "plan.json").string(), /*followLinks=*/false) !=
               FileKind::Missing;
    if (!empty && !kit)
      throw InputError::at(dir, "",
                           "expected a new or empty directory or a probe kit, found a directory "
                           "of other files (not replaced)");
    if (kit && !options.force)
      throw InputError::at(dir, "", "already holds a probe kit (plan.json); --force replaces it");
    replace = true;
  }
  result.plan.source = fs::path(modelPath).filename().string();
  std::vector<ModelKit> kits;
  for (size_t i = 0; i < models.size(); ++i) {
    stage("check");
    ane::CheckOptions target = options.target;
    ane::CheckReport report = ane::checkModel(*models[i], target);
    stage("variants");
    std::string prefix = models.size() > 1 ? "d" + std::to_string(i) + "-" : "";
    kits.push_back(planModelKit(*models[i], report, prefix, target));
    result.plan.models.push_back(kits.back().plan);
  }
  // The kit is assembled in a new directory beside `dir` and swapped in
  // whole: the old kit's files all go (none is mixed with the new plan), an
  // interrupt leaves the old kit as it was, and no link inside the old kit
  // is followed (only links are removed, never what they point to).
  OutputOptions out;
  out.force = replace;
  out.alsoAvoid = {modelPath};
  AtomicDirectory kitDir(trimmed, out);
  kitDir.addDirectory("models");
  std::vector<uint64_t> bytes;
  for (ModelKit &kit : kits) {
    uint64_t total = 0;
    for (size_t v = 0; v < kit.variants.size(); ++v) {
      const ane::ProbeVariant &pv = kit.plan.variants[v];
      if (!kit.variants[v] || pv.path.empty())
        continue;
      stage("write " + pv.name);
      std::string path = kitDir.tempPath(pv.path);
      saveModel(*kit.variants[v], path);
      result.written.push_back(pv.path);
      std::error_code ec;
      for (const auto &e : fs::recursive_directory_iterator(path, ec))
        if (e.is_regular_file(ec))
          total += e.file_size(ec);
    }
    bytes.push_back(total);
    result.bytes += total;
  }
  std::string planText = ane::renderProbePlan(result.plan);
  std::string readme = kitReadme(result.plan, bytes);
  kitDir.addFile("plan.json", planText);
  kitDir.addFile("README.md", readme);
  kitDir.addFile("run_probe.py", runnerScript());
  std::error_code ec;
  fs::permissions(kitDir.tempPath("run_probe.py"), fs::perms::owner_exec | fs::perms::group_exec,
                  fs::perm_options::add, ec);
  kitDir.commit();
  result.written.insert(result.written.end(), {"plan.json", "README.md", "run_probe.py"});
  result.bytes += planText.size() + readme.size() + runnerScript().size();
  return result;
}

} // namespace anefit::probe
