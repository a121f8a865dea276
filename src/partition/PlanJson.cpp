//===- PlanJson.cpp - The split plan as JSON and as an ExecuTorch snippet -===//
#include "partition/PlanJson.h"

#include "support/FileSystem.h"

#include "ops/Weights.h"
#include "support/Json.h"

#include <nlohmann/json.hpp>

#include <sstream>

namespace anefit::partition {
namespace {

nlohmann::json valueList(const std::vector<const Value *> &values) {
  nlohmann::json a = nlohmann::json::array();
  for (const Value *v : values)
    a.push_back({{"name", v->name}, {"type", v->type.str()}});
  return a;
}

} // namespace

std::string regionFileName(const FunctionPlan &fp, const Region &r) {
  // Function names come from the model: one safe path component.
  return safeFileName(fp.function) + "_region" + std::to_string(r.index) + "_" +
         std::string(targetName(r.target)) + ".mlpackage";
}

std::string skipListSnippet(const Plan &plan) {
  std::ostringstream os;
  auto argument = [&](const PartitionerArgument &a) {
    os << "    " << a.argument() << ",  # ";
    for (size_t i = 0; i < a.rules.size(); ++i)
      os << (i ? ", " : "") << a.rules[i];
    os << ": " << a.what << "\n";
  };
  if (!plan.compileSpecArguments.empty()) {
    // ct.ComputeUnit and friends: the arguments are written as coremltools
    // users write them.
    os << "import coremltools as ct\n"
       << "from executorch.backends.apple.coreml.compiler import CoreMLBackend\n";
  }
  os << "from executorch.backends.apple.coreml.partition import CoreMLPartitioner\n\n";
  if (!plan.compileSpecArguments.empty()) {
    os << "compile_specs = CoreMLBackend.generate_compile_specs(\n";
    for (const PartitionerArgument &a : plan.compileSpecArguments)
      argument(a);
    os << "    # and your other arguments, as before\n)\n";
  }
  os << "partitioner = CoreMLPartitioner(\n"
     << "    compile_specs=compile_specs,"
     << (plan.compileSpecArguments.empty() ? "  # as before" : "") << "\n";
  for (const PartitionerArgument &a : plan.partitionerArguments)
    argument(a);
  os << "    skip_ops_for_coreml_delegation=[\n";
  for (const auto &s : plan.skipOps) {
    os << "        \"" << s.atenOp << "\",  # ";
    for (size_t i = 0; i < s.rules.size(); ++i)
      os << (i ? ", " : "") << s.rules[i];
    os << "\n";
  }
  os << "    ],\n)\n";
  return os.str();
}

std::vector<std::pair<std::string, std::string>> partitionerKeywords(const Plan &plan) {
  std::vector<std::string> names;
  for (const SkipOp &s : plan.skipOps)
    names.push_back(s.atenOp);
  // A JSON array of strings is a Python list literal.
  std::vector<std::pair<std::string, std::string>> out = {
      {"skip_ops_for_coreml_delegation", dumpJson(nlohmann::json(names))}};
  for (const PartitionerArgument &a : plan.partitionerArguments)
    out.emplace_back(a.name, a.value);
  return out;
}

WeightCount regionWeights(const Region &r) {
  std::vector<const Operation *> ops;
  for (const auto &p : r.ops)
    ops.push_back(p.op);
  return countWeightsOf(ops);
}

std::string renderPlanJson(const Plan &plan, const CostModel &cm, bool withFiles, int indent) {
  nlohmann::json j;
  j["schema"] = kPlanSchema;
  j["model"] = plan.modelPath;
  std::vector<const Operation *> all;
  for (const auto &fp : plan.functions)
    for (const auto &r : fp.regions)
      for (const auto &p : r.ops)
        all.push_back(p.op);
  WeightCount weights = countWeightsOf(all);
  j["weightBytes"] = weights.storedBytes;
  j["denseWeightBytes"] = weights.denseBytes;
  j["costModel"] = {{"aneGflops", cm.aneGflops},
                    {"aneGBps", cm.aneGBps},
                    {"cpuGflops", cm.cpuGflops},
                    {"cpuGBps", cm.cpuGBps},
                    {"boundaryMs", cm.boundaryMs}};
  j["functions"] = nlohmann::json::array();
  for (const auto &fp : plan.functions) {
    nlohmann::json f;
    f["function"] = fp.function;
    f["planCostMs"] = fp.planCostMs;
    f["cpuOnlyCostMs"] = fp.cpuOnlyCostMs;
    f["regions"] = nlohmann::json::array();
    for (const auto &r : fp.regions) {
      nlohmann::json rj;
      rj["index"] = r.index;
      rj["target"] = targetName(r.target);
      rj["costMs"] = r.costMs;
      rj["flops"] = r.flops;
      WeightCount rw = regionWeights(r);
      rj["weightBytes"] = rw.storedBytes;
      rj["denseWeightBytes"] = rw.denseBytes;
      rj["inputs"] = valueList(r.inputs);
      rj["outputs"] = valueList(r.outputs);
      rj["states"] = valueList(r.states);
      if (withFiles)
        rj["model"] = regionFileName(fp, r);
      rj["ops"] = nlohmann::json::array();
      for (const auto &p : r.ops)
        rj["ops"].push_back({{"name", p.op->name},
                             {"type", p.op->type},
                             {"checker", ane::placementName(p.checkerPlacement)},
                             {"rules", p.rules},
                             {"absorbed", p.absorbed}});
      f["regions"].push_back(rj);
    }
    f["boundaries"] = nlohmann::json::array();
    for (const auto &b : fp.boundaries)
      f["boundaries"].push_back(
          {{"from", b.fromRegion}, {"to", b.toRegion}, {"values", b.values}, {"reason", b.reason}});
    f["warnings"] = fp.warnings;
    j["functions"].push_back(f);
  }
  j["skipOps"] = nlohmann::json::array();
  std::vector<std::string> names;
  for (const auto &s : plan.skipOps) {
    j["skipOps"].push_back({{"aten", s.atenOp}, {"coremlOps", s.milOps}, {"rules", s.rules}});
    names.push_back(s.atenOp);
  }
  j["skip_ops_for_coreml_delegation"] = names;
  j["partitionerArguments"] = nlohmann::json::array();
  for (const PartitionerArgument &a : plan.partitionerArguments)
    j["partitionerArguments"].push_back(
        {{"argument", a.argument()}, {"rules", a.rules}, {"what", a.what}});
  j["compileSpecArguments"] = nlohmann::json::array();
  for (const PartitionerArgument &a : plan.compileSpecArguments)
    j["compileSpecArguments"].push_back(
        {{"argument", a.argument()}, {"rules", a.rules}, {"what", a.what}});
  j["unmappedCpuOps"] = plan.unmappedCpuOps;
  return dumpJson(j, indent) + (indent >= 0 ? "\n" : "");
}

} // namespace anefit::partition
