//===- Checker.cpp - Predict ANE placement and failures -------------------===//
//
// Gathers facts per function, runs every applicable rule, turns the findings
// into a placement per op, then cuts the function into ANE and CPU/GPU
// segments and decides a verdict. Only types are read, never weight data.
//
//===----------------------------------------------------------------------===//
#include "ane/Checker.h"

#include "ane/Coverage.h"
#include "ane/RuleContext.h"
#include "ir/TorchNames.h"
#include "ops/OpRegistry.h"

#include "ops/Weights.h"
#include "support/Error.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

namespace anefit::ane {

std::string_view placementName(Placement p) {
  switch (p) {
  case Placement::Ane:
    return "ane";
  case Placement::CpuGpu:
    return "cpu-gpu";
  case Placement::BlocksAneCompile:
    return "blocks-ane-compile";
  }
  return "";
}

std::string_view verdictName(Verdict v) {
  switch (v) {
  case Verdict::Ane:
    return "ane";
  case Verdict::Partial:
    return "partial";
  case Verdict::NoAne:
    return "no-ane";
  case Verdict::AtRisk:
    return "at-risk";
  case Verdict::WrongNumerics:
    return "wrong-numerics";
  case Verdict::AneFails:
    return "ane-fails";
  }
  return "";
}

bool CheckReport::hasFindingAtLeast(Effect threshold) const {
  for (const Finding &f : findings)
    if (f.effect >= threshold)
      return true;
  return false;
}

bool CheckReport::hasFindingAtLeast(Level threshold) const {
  for (const Finding &f : findings)
    if (f.level() >= threshold)
      return true;
  return false;
}

namespace {

bool isConstLike(const Operation &op) { return opHasTrait(op.type, OpTrait::ConstLike); }

double elems(const Type &t) {
  auto n = t.numElements();
  return n ? (double)*n : 0;
}

const Type *typeOf(const Operation &op, std::string_view param) {
  const OpInput *in = op.input(param);
  if (!in || in->bindings.size() != 1)
    return nullptr;
  const Binding &b = in->bindings[0];
  return b.isValue() ? &b.value->type : (b.constant ? &b.constant->type : nullptr);
}

/// Estimated floating-point operations of one op (multiply-add = 2).
double estimateFlops(const Operation &op) {
  if (op.outputs.empty())
    return 0;
  double out = elems(op.output()->type);
  auto shape = [&](std::string_view p) -> std::vector<int64_t> {
    const Type *t = typeOf(op, p);
    auto s = t ? t->staticShape() : std::nullopt;
    return s ? *s : std::vector<int64_t>{};
  };
  if (op.type == "conv" || op.type == "conv_transpose") {
    std::vector<int64_t> w = shape("weight");
    if (w.size() < 2)
      return out;
    double k = 1;
    for (size_t i = 1; i < w.size(); ++i)
      k *= (double)w[i];
    if (op.type == "conv_transpose") {
      const Type *x = typeOf(op, "x");
      return x ? 2 * elems(*x) * k : out;
    }
    return 2 * out * k;
  }
  if (op.type == "linear") {
    std::vector<int64_t> w = shape("weight");
    return w.size() == 2 ? 2 * out * (double)w[1] : out;
  }
  if (op.type == "matmul") {
    std::vector<int64_t> x = shape("x");
    if (x.empty())
      return out;
    const Constant *tx = op.constInput("transpose_x");
    bool t = tx && tx->kind == Constant::Kind::Tensor && tx->numElements() == 1 &&
             tx->elementAsInt(0) != 0;
    double k = (double)(t && x.size() >= 2 ? x[x.size() - 2] : x.back());
    return 2 * out * k;
  }
  if (op.type == "scaled_dot_product_attention") {
    std::vector<int64_t> q = shape("query"), k = shape("key");
    if (q.size() < 2 || k.size() < 2)
      return out;
    double batch = 1;
    for (size_t i = 0; i + 2 < q.size(); ++i)
      batch *= (double)q[i];
    return 4 * batch * (double)q[q.size() - 2] * (double)k[k.size() - 2] * (double)q.back();
  }
  return out;
}

/// The top-level op of the function body that contains `op`.
const Operation *topLevel(const Operation *op, const Block *body) {
  while (op && op->parent != body && op->parent && op->parent->parentOp)
    op = op->parent->parentOp;
  return op;
}

std::string typesOf(const Operation &op) {
  std::string s;
  for (const Value *v : op.operandValues()) {
    if (v->definingOp && isConstLike(*v->definingOp))
      continue;
    s += (s.empty() ? "" : ", ") + v->name + ": " + v->type.shapeStr();
  }
  std::string r;
  for (const auto &v : op.outputs)
    r += (r.empty() ? "" : ", ") + v->type.shapeStr();
  return s + (r.empty() ? "" : " -> " + r);
}

FunctionFacts gatherFacts(const Model &model, const Function &fn, const CheckOptions &options,
                          const WeightCount &modelWeights) {
  FunctionFacts f;
  f.model = &model;
  f.function = &fn;
  f.description = model.description.describe(fn.name);
  f.options = options;
  f.chip = &chipInfo(options.chip);
  f.modelWeights = modelWeights;
  for (const auto &in : fn.inputs)
    if (in->type.isState())
      f.states.push_back(in.get());
  walk(*fn.body, [&](const Operation &op) {
    for (const Value *v : op.operandValues()) {
      auto &u = f.users[v];
      if (u.empty() || u.back() != &op)
        u.push_back(&op);
      if (v->type.isState())
        f.stateOps[v].push_back(&op);
    }
  });
  return f;
}

/// Places the compute ops of `fn` from the findings and cuts segments.
void place(FunctionReport &r, const Function &fn, const std::vector<RawFinding> &raw,
           std::unordered_map<const Operation *, size_t> &index) {
  std::vector<const Operation *> ops;
  for (const auto &op : fn.body->ops)
    if (!isConstLike(*op)) {
      index[op.get()] = r.ops.size();
      ops.push_back(op.get());
      r.ops.push_back(OpReport{
          op.get(), op->name, op->type, Placement::Ane, {}, estimateFlops(*op), false, {}, false});
    }
  auto decide = [&](const Operation *op, const RawFinding &f) {
    if (f.effect < Effect::Fallback || f.effect == Effect::WrongNumerics)
      return;
    auto it = index.find(topLevel(op, fn.body.get()));
    if (it == index.end())
      return;
    OpReport &o = r.ops[it->second];
    if (f.effect >= Effect::CompileFail && !f.contested.empty()) {
      // Contested: the op stays where Core ML would put it, flagged.
      o.atRisk = true;
      if (std::find(o.rules.begin(), o.rules.end(), f.rule) == o.rules.end())
        o.rules.push_back(f.rule);
      return;
    }
    Placement p = f.effect >= Effect::CompileFail ? Placement::BlocksAneCompile : Placement::CpuGpu;
    if (p > o.placement || o.placement == Placement::Ane)
      o.placement = std::max(o.placement, p);
    if (std::find(o.rules.begin(), o.rules.end(), f.rule) == o.rules.end())
      o.rules.push_back(f.rule);
  };
  for (const RawFinding &f : raw) {
    if (f.wholeFunction)
      for (const Operation *op : ops)
        decide(op, f);
    if (f.op)
      decide(f.op, f);
    for (const Operation *op : f.related)
      decide(op, f);
  }
  // A rule that decided a milder placement than the op's final one did not decide it.
  for (OpReport &o : r.ops) {
    if (o.placement == Placement::BlocksAneCompile)
      o.rules.erase(
          std::remove_if(o.rules.begin(), o.rules.end(),
                         [](RuleId id) { return ruleInfo(id).effect < Effect::CompileFail; }),
          o.rules.end());
  }
  for (size_t i = 0; i < r.ops.size(); ++i) {
    const OpReport &o = r.ops[i];
    bool onAne = o.placement != Placement::CpuGpu;
    r.totalFlops += o.flops;
    if (o.placement == Placement::Ane) {
      ++r.aneOps;
      r.aneFlops += o.flops;
    }
    if (r.segments.empty() || r.segments.back().onAne != onAne)
      r.segments.push_back(Segment{onAne, false, false, i, i, 0, 0});
    Segment &s = r.segments.back();
    s.compileFails |= o.placement == Placement::BlocksAneCompile;
    s.atRisk |= onAne && o.atRisk;
    s.lastOp = i;
    ++s.opCount;
    s.flops += o.flops;
  }
  r.boundaries = r.segments.empty() ? 0 : r.segments.size() - 1;
}

/// Rules that judge the placed function (FunctionFacts::placed).
bool afterPlacement(RuleId id) {
  return id == RuleId::Boundaries || id == RuleId::UnverifiedPattern;
}

/// Flags the ANE ops (and their segments) that the contested findings of
/// the post-placement rules, from `raw[first]` on, point at.
void markAtRisk(FunctionReport &r, const std::unordered_map<const Operation *, size_t> &index,
                const std::vector<RawFinding> &raw, size_t first) {
  for (size_t i = first; i < raw.size(); ++i) {
    const RawFinding &f = raw[i];
    if (!f.op || f.contested.empty() || f.effect < Effect::CompileFail)
      continue;
    auto it = index.find(f.op);
    if (it == index.end())
      continue;
    OpReport &o = r.ops[it->second];
    o.atRisk = true;
    if (std::find(o.rules.begin(), o.rules.end(), f.rule) == o.rules.end())
      o.rules.push_back(f.rule);
    for (Segment &s : r.segments)
      if (s.onAne && s.firstOp <= it->second && it->second <= s.lastOp)
        s.atRisk = true;
  }
}

/// Each op's pattern, whether working evidence holds it, and the function's
/// coverage and unverified patterns.
void summarizeCoverage(FunctionReport &r, const Coverage &coverage) {
  std::map<std::string, UnverifiedPattern> unverified;
  for (OpReport &o : r.ops) {
    OpPattern p = opPattern(*o.op);
    o.pattern = p.key;
    o.covered = coverage.contains(p.key);
    if (o.covered) {
      ++r.coveredOps;
      r.coveredFlops += o.flops;
      continue;
    }
    UnverifiedPattern &u = unverified[p.key];
    u.pattern = p.key;
    u.risky = p.risky;
    ++u.ops;
    u.flops += o.flops;
  }
  for (auto &[key, u] : unverified)
    r.unverified.push_back(std::move(u));
  std::stable_sort(r.unverified.begin(), r.unverified.end(),
                   [](const UnverifiedPattern &a, const UnverifiedPattern &b) {
                     if (a.risky != b.risky)
                       return a.risky;
                     return a.ops > b.ops;
                   });
}

} // namespace

CheckReport checkModel(const Model &model, const CheckOptions &options) {
  CheckReport report;
  report.modelPath = model.sourcePath;
  report.origin = model.origin;
  report.options = options;
  if (!model.program)
    throw InputError::at(model.sourcePath, "model", "expected an ML Program, found none");
  const Program &program = *model.program;
  if (!options.function.empty() && !program.findFunction(options.function)) {
    std::string names;
    for (const auto &fn : program.functions)
      names += (names.empty() ? "" : ", ") + fn->name;
    failExpected(model.sourcePath, "--function", "one of: " + names, "'" + options.function + "'");
  }
  WeightCount weights = countWeights(program);
  report.weightBytes = weights.storedBytes;
  report.denseWeightBytes = weights.denseBytes;

  struct Keyed {
    Finding finding;
    size_t rule, function, op;
  };
  std::vector<Keyed> keyed;
  auto ignored = [&](RuleId id) {
    return std::find(options.ignore.begin(), options.ignore.end(), id) != options.ignore.end();
  };
  size_t fnIndex = 0;
  for (const auto &fn : program.functions) {
    if (!options.function.empty() && fn->name != options.function)
      continue;
    FunctionFacts facts = gatherFacts(model, *fn, options, weights);
    std::vector<RawFinding> raw;
    RuleContext ctx(facts, raw);
    for (const RuleInfo &rule : allRules())
      if (!afterPlacement(rule.id) && gateApplies(rule.gate, options.chip, options.os) &&
          !ignored(rule.id))
        runRule(rule.id, ctx);

    FunctionReport fr;
    fr.name = fn->name;
    WeightCount fnWeights = countWeights(program, fn.get());
    fr.weightBytes = fnWeights.storedBytes;
    fr.denseWeightBytes = fnWeights.denseBytes;
    fr.states = facts.states.size();
    std::unordered_map<const Operation *, size_t> index;
    place(fr, *fn, raw, index);

    facts.placed = &fr;
    size_t placedFindings = raw.size();
    for (RuleId rule : {RuleId::UnverifiedPattern, RuleId::Boundaries})
      if (!ignored(rule))
        runRule(rule, ctx);
    markAtRisk(fr, index, raw, placedFindings);
    summarizeCoverage(fr, options.coverage ? *options.coverage : builtinCoverage());

    // A contested failure outranks per-op fallbacks that leave no op on the
    // ANE (Core ML may still try the ANE), but not a rule that keeps the whole
    // function off it (compute units, dynamic shapes, model size).
    bool fails = false, atRisk = false, wholeOff = false;
    for (const RawFinding &f : raw) {
      if (f.effect >= Effect::CompileFail)
        (f.contested.empty() ? fails : atRisk) = true;
      wholeOff |= f.wholeFunction && f.effect == Effect::Fallback;
    }
    bool noAne = fr.aneOps == 0 && !fr.ops.empty();
    bool anyOff = std::any_of(fr.ops.begin(), fr.ops.end(),
                              [](const OpReport &o) { return o.placement != Placement::Ane; });
    fr.verdict = fails                            ? Verdict::AneFails
                 : noAne && (wholeOff || !atRisk) ? Verdict::NoAne
                 : atRisk                         ? Verdict::AtRisk
                 : anyOff                         ? Verdict::Partial
                                                  : Verdict::Ane;
    if (options.numerics && options.numerics->function == fn->name && options.numerics->diverged())
      fr.verdict = std::max(fr.verdict, Verdict::WrongNumerics);
    report.verdict = std::max(report.verdict, fr.verdict);

    for (const RawFinding &f : raw) {
      Finding out;
      out.rule = f.rule;
      out.effect = f.effect;
      out.certainty = f.contested.empty() ? Certainty::Confirmed : Certainty::Contested;
      out.contradiction = f.contested;
      out.function = fn->name;
      out.message = f.message;
      out.measured = f.measured;
      size_t opKey = 0;
      if (f.op) {
        out.op = f.op->name;
        out.opType = f.op->type;
        out.torchNode = torchNodeOf(f.op->name);
        if (!f.op->outputs.empty()) {
          auto handles = model.debugHandles.find(f.op->outputs.front()->name);
          if (handles != model.debugHandles.end())
            out.debugHandles = handles->second;
        }
        out.types = typesOf(*f.op);
        auto it = index.find(topLevel(f.op, fn->body.get()));
        opKey = it == index.end() ? 0 : it->second + 1;
      }
      keyed.push_back(Keyed{std::move(out), (size_t)f.rule, fnIndex, opKey});
    }
    report.functions.push_back(std::move(fr));
    ++fnIndex;
  }
  std::stable_sort(keyed.begin(), keyed.end(), [](const Keyed &a, const Keyed &b) {
    if (a.finding.level() != b.finding.level())
      return a.finding.level() > b.finding.level();
    // Within a rule and function, findings measured on the user's weights first.
    return std::tie(a.rule, a.function, b.finding.measured, a.op) <
           std::tie(b.rule, b.function, a.finding.measured, b.op);
  });
  for (Keyed &k : keyed)
    report.findings.push_back(std::move(k.finding));
  return report;
}

} // namespace anefit::ane
