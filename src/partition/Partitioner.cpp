//===- Partitioner.cpp - Split functions between the ANE and the CPU ------===//
#include "partition/Partitioner.h"

#include "ane/Remedies.h"

#include "ir/AsmParser.h"
#include "ir/Clone.h"
#include "ir/TorchNames.h"
#include "ops/OpRegistry.h"
#include "support/Error.h"

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

namespace anefit::partition {
namespace {

double typeBytes(const Type &t) {
  if (!(t.isTensor() || t.isState()))
    return 0;
  auto n = t.numElements();
  if (!n)
    return 0;
  return static_cast<double>(storageBytes(t.dtype(), static_cast<uint64_t>(*n)));
}

/// Bytes an op moves: what it reads (activations and constants) and writes.
double opBytes(const Operation &op) {
  double bytes = 0;
  for (const OpInput &in : op.inputs)
    for (const Binding &b : in.bindings)
      bytes += b.isValue() ? typeBytes(b.value->type) : typeBytes(b.constant->type);
  for (const auto &out : op.outputs)
    bytes += typeBytes(out->type);
  return bytes;
}

double costMs(double flops, double bytes, double gflops, double gbps) {
  return std::max(flops / (gflops * 1e6), bytes / (gbps * 1e6));
}

/// Constants and weight decompression: copied into each region that reads
/// them, never placed.
bool isConst(const Operation *op) { return op && opHasTrait(op->type, OpTrait::ConstLike); }

/// Every value `op` (and its nested blocks) reads from outside itself.
void collectOperands(const Operation &op, std::vector<const Value *> &out) {
  std::set<const Value *> inner;
  std::function<void(const Operation &)> visit = [&](const Operation &o) {
    for (const Value *v : o.operandValues())
      if (!inner.count(v))
        out.push_back(v);
    for (const auto &b : o.blocks) {
      for (const auto &in : b->inputs)
        inner.insert(in.get());
      for (const auto &inner_op : b->ops) {
        visit(*inner_op);
        for (const auto &r : inner_op->outputs)
          inner.insert(r.get());
      }
      for (const Value *v : b->outputs)
        if (!inner.count(v))
          out.push_back(v);
    }
  };
  visit(op);
}

/// Runs of consecutive ops with the same target: (first, last) inclusive.
std::vector<std::pair<size_t, size_t>> runsOf(const std::vector<Target> &targets) {
  std::vector<std::pair<size_t, size_t>> runs;
  for (size_t i = 0; i < targets.size(); ++i) {
    if (runs.empty() || targets[runs.back().first] != targets[i])
      runs.emplace_back(i, i);
    else
      runs.back().second = i;
  }
  return runs;
}

std::string describeOp(const PlacedOp &p) {
  std::string s = p.op->type + " '" + p.op->name + "'";
  if (p.absorbed)
    return s + " is cheaper on the CPU than the boundaries around it";
  s += p.checkerPlacement == ane::Placement::BlocksAneCompile ? " would block the ANE compile"
                                                              : " falls back to the CPU";
  if (!p.rules.empty()) {
    s += " (";
    for (size_t i = 0; i < p.rules.size(); ++i)
      s += (i ? ", " : "") + p.rules[i];
    s += ")";
  }
  return s;
}

FunctionPlan planFunction(const Function &fn, const ane::FunctionReport &fr,
                          const PartitionOptions &options) {
  FunctionPlan plan;
  plan.function = fn.name;
  // The checker's per-op placement, in program order, is the starting point.
  // Its segments are not: an op that blocks the ANE compile sits in an ANE
  // segment (Core ML puts it there, then the compile fails), while a split
  // moves it to the CPU.
  std::vector<PlacedOp> ops;
  std::vector<Target> targets;
  for (const ane::OpReport &r : fr.ops) {
    if (!r.op || r.op->parentFunction() != &fn)
      throw InputError("split: the check report of '" + fn.name + "' is not of this model");
    PlacedOp p;
    p.op = r.op;
    p.bytes = opBytes(*r.op);
    p.checkerPlacement = r.placement;
    p.flops = r.flops;
    if (p.checkerPlacement != ane::Placement::Ane)
      for (ane::RuleId id : r.rules)
        p.rules.emplace_back(ane::ruleInfo(id).code);
    targets.push_back(p.checkerPlacement == ane::Placement::Ane ? Target::Ane : Target::Cpu);
    ops.push_back(std::move(p));
  }

  const CostModel &cm = options.cost;
  auto runCost = [&](size_t a, size_t b, Target t) {
    double c = 0;
    for (size_t i = a; i <= b; ++i)
      c += t == Target::Ane ? costMs(ops[i].flops, ops[i].bytes, cm.aneGflops, cm.aneGBps)
                            : costMs(ops[i].flops, ops[i].bytes, cm.cpuGflops, cm.cpuGBps);
    return c;
  };

  // Absorb ANE runs into the CPU while that saves more in boundaries than it
  // costs in compute; the best saving first, until none is left.
  if (options.absorbSmallRegions) {
    for (;;) {
      auto runs = runsOf(targets);
      double bestGain = 0;
      size_t best = runs.size();
      for (size_t r = 0; r < runs.size(); ++r) {
        auto [a, b] = runs[r];
        if (targets[a] != Target::Ane)
          continue;
        int saved = (r > 0 ? 1 : 0) + (r + 1 < runs.size() ? 1 : 0);
        double gain =
            saved * cm.boundaryMs + runCost(a, b, Target::Ane) - runCost(a, b, Target::Cpu);
        if (saved > 0 && gain > bestGain) {
          bestGain = gain;
          best = r;
        }
      }
      if (best == runs.size())
        break;
      for (size_t i = runs[best].first; i <= runs[best].second; ++i) {
        targets[i] = Target::Cpu;
        ops[i].absorbed = true;
      }
    }
  }

  // Regions, and where each op ended up.
  std::map<const Operation *, size_t> regionOf;
  for (auto [a, b] : runsOf(targets)) {
    Region region;
    region.index = plan.regions.size();
    region.target = targets[a];
    for (size_t i = a; i <= b; ++i) {
      regionOf[ops[i].op] = region.index;
      region.flops += ops[i].flops;
      region.ops.push_back(ops[i]);
    }
    region.costMs = runCost(a, b, region.target);
    plan.regions.push_back(std::move(region));
  }
  plan.cpuOnlyCostMs = ops.empty() ? 0 : runCost(0, ops.size() - 1, Target::Cpu);

  // Region inputs, states, and the values later regions (or the function) need.
  std::map<const Value *, std::set<size_t>> usedBy;
  std::map<const Value *, std::set<size_t>> stateUsers;
  for (Region &region : plan.regions) {
    std::set<const Value *> seen;
    for (const PlacedOp &p : region.ops) {
      std::vector<const Value *> operands;
      collectOperands(*p.op, operands);
      for (const Value *v : operands) {
        if (v->type.isState()) {
          if (std::find(region.states.begin(), region.states.end(), v) == region.states.end())
            region.states.push_back(v);
          stateUsers[v].insert(region.index);
          continue;
        }
        if (isConst(v->definingOp))
          continue;
        auto def = regionOf.find(v->definingOp);
        bool inside = def != regionOf.end() && def->second == region.index;
        if (!inside && seen.insert(v).second)
          region.inputs.push_back(v);
        usedBy[v].insert(region.index);
      }
    }
  }
  std::set<const Value *> returned(fn.body->outputs.begin(), fn.body->outputs.end());
  for (Region &region : plan.regions)
    for (const PlacedOp &p : region.ops)
      for (const auto &out : p.op->outputs) {
        const Value *v = out.get();
        auto users = usedBy.find(v);
        bool usedLater =
            users != usedBy.end() && std::any_of(users->second.begin(), users->second.end(),
                                                 [&](size_t r) { return r != region.index; });
        if (usedLater || returned.count(v))
          region.outputs.push_back(v);
      }
  for (const auto &[state, users] : stateUsers)
    if (users.size() > 1)
      plan.warnings.push_back("state '" + state->name + "' is used by " +
                              std::to_string(users.size()) +
                              " regions; split models cannot share a Core ML state: run "
                              "`anefit fix --passes state-to-io` first");

  // Boundaries and their reasons.
  for (size_t r = 0; r + 1 < plan.regions.size(); ++r) {
    const Region &from = plan.regions[r];
    const Region &to = plan.regions[r + 1];
    Boundary b;
    b.fromRegion = r;
    b.toRegion = r + 1;
    for (const Value *v : to.inputs) {
      auto def = regionOf.find(v->definingOp);
      if (def != regionOf.end() && def->second <= r)
        b.values.push_back(v->name);
    }
    const Region &cpu = to.target == Target::Cpu ? to : from;
    const PlacedOp *blamed = nullptr;
    for (const PlacedOp &p : cpu.ops)
      if (!p.absorbed) {
        blamed = &p;
        break;
      }
    const PlacedOp &why = blamed ? *blamed : cpu.ops.front();
    b.reason =
        (to.target == Target::Cpu ? "to the CPU: " : "back to the ANE after: ") + describeOp(why);
    plan.boundaries.push_back(std::move(b));
  }
  plan.planCostMs = plan.boundaries.size() * cm.boundaryMs;
  for (const Region &region : plan.regions)
    plan.planCostMs += region.costMs;
  return plan;
}

/// Appends the rule codes of `from` that `into` does not hold yet, in order.
void addRules(std::vector<std::string> &into, const std::vector<std::string> &from) {
  for (const std::string &r : from)
    if (std::find(into.begin(), into.end(), r) == into.end())
      into.push_back(r);
}

/// Adds `a` to `into`, or its rules to the same argument already there.
void addArgument(std::vector<PartitionerArgument> &into, const PartitionerArgument &a) {
  auto it = std::find_if(into.begin(), into.end(), [&](const PartitionerArgument &m) {
    return m.name == a.name && m.value == a.value;
  });
  if (it == into.end())
    into.push_back(a);
  else
    addRules(it->rules, a.rules);
}

} // namespace

std::string_view targetName(Target t) { return t == Target::Ane ? "ane" : "cpu"; }

size_t Region::absorbedOps() const {
  size_t n = 0;
  for (const PlacedOp &p : ops)
    n += p.absorbed;
  return n;
}

size_t FunctionPlan::aneRegions() const {
  size_t n = 0;
  for (const Region &r : regions)
    n += r.target == Target::Ane;
  return n;
}

Plan exportAdvice(const ane::CheckReport &report) {
  Plan plan;
  std::map<std::string, SkipOp> skips;
  for (const ane::FunctionReport &fr : report.functions)
    for (const ane::OpReport &op : fr.ops) {
      if (op.placement == ane::Placement::Ane)
        continue;
      // Program-wide rules (ANE-PROG-*: weight budgets, the delegate's
      // compute units) put every op off the ANE; keeping ops out of the
      // delegate changes none of them.
      std::vector<std::string> rules;
      for (ane::RuleId id : op.rules) {
        std::string code(ane::ruleInfo(id).code);
        if (!code.starts_with("ANE-PROG-"))
          rules.push_back(std::move(code));
      }
      if (rules.empty())
        continue;
      std::string aten = atenOpOf(op.name);
      if (aten.empty()) {
        plan.unmappedCpuOps.push_back(fr.name + "/" + op.name);
        continue;
      }
      SkipOp &s = skips[aten];
      s.atenOp = aten;
      s.milOps.push_back(op.name);
      addRules(s.rules, rules);
    }
  for (auto &[name, s] : skips)
    plan.skipOps.push_back(std::move(s));

  // Findings a partitioner or compile-spec argument removes at export
  // (ExecuTorch models).
  if (!report.origin.empty())
    for (const ane::Finding &f : report.findings)
      for (const ane::Remedy *r : ane::remediesFor(f)) {
        std::string code(ane::ruleInfo(f.rule).code);
        for (const ane::RemedyArgument &a : ane::remedyArguments(*r)) {
          if (r->where == ane::RemedyWhere::CompileSpec)
            addArgument(plan.compileSpecArguments,
                        {std::string(a.name), std::string(a.value), std::string(r->what), {code}});
          else if (a.name != "skip_ops_for_coreml_delegation")
            addArgument(plan.partitionerArguments,
                        {std::string(a.name), std::string(a.value), std::string(r->what), {code}});
        }
      }
  return plan;
}

Plan makePlan(const Model &model, const ane::CheckReport &report, const PartitionOptions &options) {
  Plan plan = exportAdvice(report);
  plan.modelPath = model.sourcePath;
  for (const ane::FunctionReport &fr : report.functions) {
    const Function *fn = model.program ? model.program->findFunction(fr.name) : nullptr;
    if (fn)
      plan.functions.push_back(planFunction(*fn, fr, options));
  }
  return plan;
}

Plan mergeExportAdvice(const std::vector<Plan> &plans) {
  Plan merged;
  std::map<std::string, SkipOp> skips;
  for (const Plan &plan : plans) {
    for (const SkipOp &s : plan.skipOps) {
      SkipOp &m = skips[s.atenOp];
      m.atenOp = s.atenOp;
      m.milOps.insert(m.milOps.end(), s.milOps.begin(), s.milOps.end());
      addRules(m.rules, s.rules);
    }
    for (const PartitionerArgument &a : plan.partitionerArguments)
      addArgument(merged.partitionerArguments, a);
    for (const PartitionerArgument &a : plan.compileSpecArguments)
      addArgument(merged.compileSpecArguments, a);
    merged.unmappedCpuOps.insert(merged.unmappedCpuOps.end(), plan.unmappedCpuOps.begin(),
                                 plan.unmappedCpuOps.end());
  }
  for (auto &[name, s] : skips)
    merged.skipOps.push_back(std::move(s));
  return merged;
}

std::unique_ptr<Model> extractRegion(const Model &model, const FunctionPlan &plan, size_t r) {
  if (r >= plan.regions.size())
    throw InputError("region " + std::to_string(r) + " out of range (" +
                     std::to_string(plan.regions.size()) + " regions)");
  const Function *src = model.program->findFunction(plan.function);
  if (!src)
    throw InputError("function '" + plan.function + "' not in the model");
  const Region &region = plan.regions[r];

  auto out = std::make_unique<Model>();
  out->program = std::make_unique<Program>();
  out->program->version = model.program->version;
  out->program->attributes = model.program->attributes;
  Function *fn = out->program->addFunction("main");
  fn->opset = src->opset;

  ValueMapping mapping;
  for (const Value *v : region.inputs)
    mapping[v] = fn->addInput(v->name, v->type);
  for (const Value *v : region.states)
    mapping[v] = fn->addInput(v->name, v->type);

  // Constants the region reads (and the constants a constexpr op reads),
  // copied in their original order.
  std::set<const Operation *> consts;
  std::vector<const Operation *> work;
  for (const PlacedOp &p : region.ops)
    work.push_back(p.op);
  while (!work.empty()) {
    const Operation *op = work.back();
    work.pop_back();
    std::vector<const Value *> operands;
    collectOperands(*op, operands);
    for (const Value *v : operands)
      if (isConst(v->definingOp) && consts.insert(v->definingOp).second)
        work.push_back(v->definingOp);
  }
  for (const auto &op : src->body->ops)
    if (consts.count(op.get()))
      fn->body->append(cloneOperation(*op, mapping));
  for (const PlacedOp &p : region.ops)
    fn->body->append(cloneOperation(*p.op, mapping));
  for (const Value *v : region.outputs)
    fn->body->outputs.push_back(mapping.at(v));

  synthesizeDescription(*out);
  out->specificationVersion = std::max(out->specificationVersion, model.specificationVersion);
  out->weightFiles = model.weightFiles;
  out->sourcePath = model.sourcePath + "#" + plan.function + "/region" + std::to_string(r);
  return out;
}

} // namespace anefit::partition
