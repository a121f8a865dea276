//===- Sources.cpp - Findings joined to the user's source -----------------===//
#include "report/Sources.h"

#include "partition/PlanJson.h"

#include "support/Error.h"
#include "support/Json.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <set>

namespace anefit::report {
namespace {

/// The ops of `report` by "function/op name", as findings name them.
std::map<std::string, const Operation *> opsByFindingName(const ane::CheckReport &report) {
  std::map<std::string, const Operation *> ops;
  for (const ane::FunctionReport &fr : report.functions)
    for (const ane::OpReport &op : fr.ops)
      if (op.op)
        ops[fr.name + "/" + op.name] = op.op;
  return ops;
}

/// The name a buffer read goes by: the value's own, or, behind one cast
/// (coremltools' "..._to_fp16"), the cast's input's.
const std::string &nameBehindCast(const Value *v) {
  const Operation *d = v->definingOp;
  const Value *x = d && d->type == "cast" ? d->inputValue("x") : nullptr;
  return x ? x->name : v->name;
}

} // namespace

SourceJoin::SourceJoin(const Model &model, const ETRecord &record, std::string sourceRoot,
                       const std::string &modelName)
    : model_(model), record_(record), sourceRoot_(std::move(sourceRoot)) {
  if (model.debugHandles.empty())
    throw InputError::at(record.path, "",
                         "no op of " + modelName +
                             " carries an ExecuTorch debug handle to join by (the ETRecord "
                             "joins a .pte's Core ML delegates)");
  auto [agree, total] = delegateMapAgreement(record, model.debugHandles);
  if (agree != total)
    throw InputError::at(record.path, "delegate_map",
                         "expected the program of " + modelName + ": " +
                             std::to_string(total - agree) + " of its " + std::to_string(total) +
                             " Core ML ops have other debug handles in this ETRecord (another "
                             "export)");
  for (const auto &[buffer, output] : record.mutations)
    writes_[output] = buffer;
}

ane::Finding::Source SourceJoin::of(const std::vector<int64_t> &handles,
                                    const Operation *op) const {
  ane::Finding::Source src;
  if (handles.empty()) {
    src.note = "no ExecuTorch debug handle: an op Core ML's conversion added";
  } else {
    SourceOrigin origin = record_.originOf(handles);
    if (!origin.node) {
      src.note = "no node of the ETRecord has its debug handles";
    } else {
      src.node = origin.node->name;
      src.module = origin.node->modulePath;
      src.moduleType = origin.node->moduleType;
      if (origin.frame) {
        src.file = relativeSource(origin.frame->file, sourceRoot_);
        src.line = origin.frame->line;
        src.function = origin.frame->function;
        src.code = origin.frame->code;
      } else {
        src.note = "its node's stack holds only PyTorch's own frames";
      }
    }
  }
  if (!op)
    return src;
  for (const auto &out : op->outputs)
    if (auto w = writes_.find(out->name); w != writes_.end()) {
      src.buffer = w->second;
      src.writesBuffer = true;
    }
  if (src.buffer.empty())
    for (const Value *v : op->operandValues())
      if (!v->definingOp || v->definingOp->type == "cast")
        if (auto b = record_.bufferPath(nameBehindCast(v))) {
          src.buffer = *b;
          break;
        }
  return src;
}

ane::Finding::Source SourceJoin::of(const Operation &op) const {
  static const std::vector<int64_t> none;
  const std::vector<int64_t> *handles = &none;
  if (!op.outputs.empty())
    if (auto it = model_.debugHandles.find(op.outputs.front()->name);
        it != model_.debugHandles.end())
      handles = &it->second;
  return of(*handles, &op);
}

nlohmann::ordered_json sourceJson(const ane::Finding::Source &s) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (s.line > 0) {
    j["file"] = s.file;
    j["line"] = s.line;
    j["function"] = s.function;
    j["code"] = s.code;
  }
  if (!s.module.empty()) {
    j["module"] = s.module;
    j["moduleType"] = s.moduleType;
  }
  if (!s.node.empty())
    j["node"] = s.node;
  if (!s.buffer.empty()) {
    j["buffer"] = s.buffer;
    j["bufferAccess"] = s.writesBuffer ? "writes" : "reads";
  }
  if (!s.note.empty())
    j["note"] = s.note;
  return j;
}

SourceSites sourceSites(const std::vector<ane::Finding::Source> &sources, size_t limit) {
  std::map<std::string, size_t> count;
  std::vector<std::string> order; // first seen, for equal counts
  for (const ane::Finding::Source &src : sources) {
    std::string key = sourceLine(src);
    if (!src.module.empty())
      key += " " + moduleGroup(src.module);
    if (count[key]++ == 0)
      order.push_back(key);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](const std::string &a, const std::string &b) { return count[a] > count[b]; });
  SourceSites out;
  for (size_t i = 0; i < order.size() && i < limit; ++i)
    out.places.push_back(order[i] + " (" + std::to_string(count[order[i]]) +
                         (count[order[i]] == 1 ? " op)" : " ops)"));
  out.more = order.size() > limit ? order.size() - limit : 0;
  return out;
}

std::string renderPlanJsonWithSources(const partition::Plan &plan, const partition::CostModel &cost,
                                      bool withFiles, const SourceJoin &join) {
  nlohmann::ordered_json j =
      nlohmann::ordered_json::parse(partition::renderPlanJson(plan, cost, withFiles));
  for (size_t f = 0; f < plan.functions.size(); ++f)
    for (size_t r = 0; r < plan.functions[f].regions.size(); ++r) {
      const partition::Region &region = plan.functions[f].regions[r];
      nlohmann::ordered_json &ops = j["functions"][f]["regions"][r]["ops"];
      for (size_t k = 0; k < region.ops.size() && k < ops.size(); ++k)
        ops[k]["source"] = sourceJson(join.of(*region.ops[k].op));
    }
  return dumpJson(j, 2) + "\n";
}

std::string sourceLine(const ane::Finding::Source &source) {
  if (source.line <= 0)
    return source.note.empty() ? std::string("no source line") : source.note;
  return source.file + ":" + std::to_string(source.line);
}

std::string moduleGroup(std::string_view modulePath) {
  std::string out;
  size_t start = 0;
  while (start <= modulePath.size()) {
    size_t dot = modulePath.find('.', start);
    std::string_view part = modulePath.substr(
        start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    bool index = !part.empty() && part.find_first_not_of("0123456789") == std::string_view::npos;
    if (start)
      out += '.';
    out += index ? std::string_view("*") : part;
    if (dot == std::string_view::npos)
      break;
    start = dot + 1;
  }
  return out;
}

void attachSources(ane::CheckReport &report, const Model &model, const ETRecord &record,
                   const std::string &sourceRoot) {
  SourceJoin join(model, record, sourceRoot, report.modelPath);
  // Each finding's op, for its operands and output.
  std::map<std::string, const Operation *> ops = opsByFindingName(report);
  for (ane::Finding &f : report.findings) {
    if (f.op.empty()) {
      ane::Finding::Source src;
      src.note = "a finding about the whole function";
      f.source = std::move(src);
      continue;
    }
    auto it = ops.find(f.function + "/" + f.op);
    f.source = join.of(f.debugHandles, it != ops.end() ? it->second : nullptr);
  }
}

namespace {

/// The report palette's colour of a placement name ("mixed": the at-risk
/// purple's neutral neighbour, grey).
std::string_view placementColor(std::string_view name) {
#define COLOR(Kind, Name, Colour, Label, What)                                                     \
  if (std::string_view(#Kind) == "Placement" && name == Name)                                      \
    return Colour;
#include "report/Palette.def"
  return "#9aa0a6";
}

/// Adds, per edge node of `record`, the placements and blocking rules of
/// the ops of `report` (a check of `model`) it became.
void addNodePlacements(const ane::CheckReport &report, const Model &model, const ETRecord &record,
                       std::map<std::string, std::set<std::string>> &nodePlacements,
                       std::map<std::string, std::set<std::string>> &nodeRules) {
  // MIL op (first output) -> its placement name.
  std::map<std::string, std::string> placement;
  for (const ane::FunctionReport &fr : report.functions)
    for (const ane::OpReport &op : fr.ops) {
      if (!op.op || op.op->outputs.empty())
        continue;
      placement[op.op->outputs.front()->name] =
          op.atRisk ? "at-risk" : std::string(ane::placementName(op.placement));
    }
  std::map<std::string, std::set<std::string>> blocking; // MIL op -> rule ids
  std::map<std::string, const Operation *> ops = opsByFindingName(report);
  for (const ane::Finding &f : report.findings)
    if (f.level() >= ane::Level::AtRisk && !f.op.empty())
      if (auto it = ops.find(f.function + "/" + f.op);
          it != ops.end() && !it->second->outputs.empty())
        blocking[it->second->outputs.front()->name].insert(std::string(ane::ruleInfo(f.rule).code));
  // Edge node -> the placements and rules of the MIL ops it became.
  for (const auto &[milOp, handles] : model.debugHandles) {
    auto p = placement.find(milOp);
    if (p == placement.end())
      continue; // a constant
    for (int64_t h : handles) {
      auto it = record.byHandle.find(h);
      if (it == record.byHandle.end())
        continue;
      for (size_t i : it->second) {
        const std::string &node = record.nodes[i].name;
        nodePlacements[node].insert(p->second);
        if (auto b = blocking.find(milOp); b != blocking.end())
          nodeRules[node].insert(b->second.begin(), b->second.end());
      }
    }
  }
}

} // namespace

namespace {

/// The ids Model Explorer's ETRecord adapter may give each edge node: ExecuTorch's devtools
/// graph (FXOperatorGraph) names a node after its FX node with "_" appended. A node whose
/// operator the viewing Python has not registered (a backend's own op, coreml.sdpa, without
/// the backend imported) is loaded as a stand-in that FX names after the operator's path
/// instead ("executorch_exir_dialects_edge_ops_coreml_sdpa_default_1"), numbered in graph
/// order; such nodes get both ids.
std::map<std::string, std::vector<std::string>> explorerIds(const ETRecord &record) {
  static constexpr std::string_view kAten = "executorch.exir.dialects.edge.ops.aten.";
  std::map<std::string, std::vector<std::string>> ids;
  std::map<std::string, size_t> seen; // stand-in name -> nodes named so far
  for (const EdgeNode &n : record.nodes) {
    std::vector<std::string> &mine = ids[n.name];
    mine.push_back(n.name + "_");
    if (n.target.empty() || n.target.compare(0, kAten.size(), kAten) == 0 ||
        n.target.find('.') == std::string::npos)
      continue;
    std::string base = n.target;
    std::replace(base.begin(), base.end(), '.', '_');
    size_t k = seen[base]++;
    mine.push_back(base + (k ? "_" + std::to_string(k) : std::string()) + "_");
  }
  return ids;
}

} // namespace

std::string modelExplorerOverlay(const std::vector<const ane::CheckReport *> &reports,
                                 const std::vector<const Model *> &models, const ETRecord &record) {
  std::map<std::string, std::vector<std::string>> ids = explorerIds(record);
  std::map<std::string, std::set<std::string>> nodePlacements, nodeRules;
  for (size_t m = 0; m < reports.size() && m < models.size(); ++m)
    addNodePlacements(*reports[m], *models[m], record, nodePlacements, nodeRules);
  nlohmann::ordered_json results = nlohmann::ordered_json::object();
  for (const auto &[node, places] : nodePlacements) {
    std::string value = places.size() == 1 ? *places.begin() : "mixed";
    std::string label = value;
    for (const std::string &r : nodeRules[node])
      label += " " + r;
    for (const std::string &id : ids[node])
      results[id] = {{"value", label}, {"bgColor", std::string(placementColor(value))}};
  }
  nlohmann::ordered_json out = {{"name", "anefit: predicted ANE placement"},
                                {"results", results},
                                {"showExpandedSummaryOnGroupNode", true}};
  return dumpJson(out, 2) + "\n";
}

} // namespace anefit::report
