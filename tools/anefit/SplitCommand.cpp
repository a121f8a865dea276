//===- SplitCommand.cpp - anefit split: partition between ANE and CPU -----===//
//
// Runs the checker, partitions each function into ANE and CPU regions with
// the cost model of src/partition, and reports why each boundary exists.
// Emits the plan as JSON ("anefit.split/1"), the skip list for ExecuTorch's
// CoreMLPartitioner, and optionally each region as its own .mlpackage, proven
// equal to the original by running both in the interpreter.
//
//===----------------------------------------------------------------------===//
#include "Command.h"

#include "ane/Checker.h"
#include "io/ModelIO.h"
#include "partition/Partitioner.h"
#include "partition/PlanJson.h"
#include "report/HtmlReport.h"
#include "runtime/Interpreter.h"
#include "runtime/RandomInput.h"
#include "support/Error.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>

namespace anefit::cli {
namespace {

struct SplitCliOptions {
  std::string model;
  std::string function;
  std::string planOut;
  std::string output;
  std::string format;
  std::string emitDir;
  bool json = false;
  bool skipList = false;
  bool verify = false;
  bool noAbsorb = false;
  int steps = 3;
  uint64_t seed = 0;
  double boundaryMs = partition::CostModel().boundaryMs;
};

void printText(std::ostream &os, const partition::Plan &plan) {
  os << std::fixed << std::setprecision(3);
  for (const auto &fp : plan.functions) {
    size_t ane = 0;
    for (const auto &r : fp.regions)
      ane += r.target == partition::Target::Ane;
    os << "function " << fp.function << ": " << fp.regions.size() << " regions (" << ane << " ANE, "
       << fp.regions.size() - ane << " CPU), " << fp.boundaries.size() << " boundaries, estimated "
       << fp.planCostMs << " ms (CPU only " << fp.cpuOnlyCostMs << " ms)\n";
    for (const auto &r : fp.regions) {
      size_t absorbed = 0;
      for (const auto &p : r.ops)
        absorbed += p.absorbed;
      os << "  region " << r.index << "  " << partition::targetName(r.target) << "  "
         << r.ops.size() << " ops";
      if (absorbed)
        os << " (" << absorbed << " absorbed)";
      os << "  " << r.inputs.size() << " in, " << r.outputs.size() << " out";
      if (!r.states.empty())
        os << ", " << r.states.size() << " states";
      if (uint64_t w = partition::regionWeights(r).storedBytes)
        os << ", " << w << " weight bytes";
      os << "  ~" << r.costMs << " ms\n";
    }
    for (const auto &b : fp.boundaries)
      os << "  boundary " << b.fromRegion << " -> " << b.toRegion << ": " << b.reason << "\n";
    for (const auto &w : fp.warnings)
      os << "  warning: " << w << "\n";
  }
  if (!plan.skipOps.empty()) {
    os << "\nExecuTorch: keep these ops out of the Core ML delegate:\n\n"
       << partition::skipListSnippet(plan);
  } else {
    os << "\nExecuTorch: no op needs skip_ops_for_coreml_delegation.\n";
  }
  if (!plan.unmappedCpuOps.empty()) {
    os << "\nCPU ops without a PyTorch node name (not in the skip list):";
    for (const auto &n : plan.unmappedCpuOps)
      os << " " << n;
    os << "\n";
  }
}

/// Runs the original function and its regions chained in plan order on the
/// same random inputs for `steps` steps, states carried across steps; returns
/// the largest absolute output difference.
double verifyChain(const Model &model, const partition::FunctionPlan &fp,
                   const std::vector<std::unique_ptr<Model>> &regions, int steps, uint64_t seed) {
  const Function &fn = *model.program->findFunction(fp.function);
  // Values crossing a boundary take their declared dtype; with every op
  // rounded to fp16 (as the ANE computes) that cast is exact, so the chain
  // must reproduce the original bit for bit.
  runtime::RunOptions runOptions;
  runOptions.precision = runtime::Precision::FP16;
  runtime::Interpreter original(fn, runOptions);
  std::vector<std::unique_ptr<runtime::Interpreter>> chain;
  for (const auto &m : regions)
    chain.push_back(
        std::make_unique<runtime::Interpreter>(*m->program->functions.front(), runOptions));
  runtime::StateContext originalStates, chainStates;
  FunctionDescription desc = model.description.describe(fn.name);
  std::mt19937_64 rng(seed);
  double worst = 0;
  for (int step = 0; step < steps; ++step) {
    runtime::TensorMap feed;
    for (const auto &in : fn.inputs) {
      if (in->type.isState())
        continue;
      const FeatureDescription *fd = nullptr;
      for (const auto &d : desc.inputs)
        if (d.name == in->name)
          fd = &d;
      feed[in->name] = runtime::randomInput(*in, fd, rng);
    }
    auto expected = original.run(feed, originalStates);
    runtime::TensorMap values = feed;
    for (auto &interp : chain) {
      runtime::TensorMap regionFeed;
      for (const auto &in : interp->function().inputs)
        if (!in->type.isState())
          regionFeed[in->name] = values.at(in->name);
      for (auto &out : interp->run(regionFeed, chainStates))
        values[out.name] = std::move(out.tensor);
    }
    for (const auto &e : expected) {
      auto it = values.find(e.name);
      if (it == values.end())
        throw InputError("split verification: output '" + e.name + "' not produced by any region");
      auto a = e.tensor.toFloats(), b = it->second.toFloats();
      if (a.size() != b.size())
        throw InputError("split verification: output '" + e.name + "' changed shape");
      for (size_t i = 0; i < a.size(); ++i) {
        double d = std::fabs(static_cast<double>(a[i]) - b[i]);
        if (std::isnan(a[i]) != std::isnan(b[i]))
          d = INFINITY;
        if (!(std::isnan(a[i]) && std::isnan(b[i])))
          worst = std::max(worst, d);
      }
    }
  }
  return worst;
}

int runSplit(const SplitCliOptions &o) {
  std::string format = o.json ? "json" : formatFor(o.format, o.output);
  if (format != "text" && format != "json" && format != "html")
    failExpected("", "--format", "text, json or html", "'" + format + "'");
  bool needWeights = !o.emitDir.empty() || o.verify;
  std::unique_ptr<Model> model = loadModel(o.model, LoadOptions{.openWeights = needWeights});
  ane::CheckOptions checkOptions;
  checkOptions.function = o.function;
  ane::CheckReport report = ane::checkModel(*model, checkOptions);

  partition::PartitionOptions options;
  options.cost.boundaryMs = o.boundaryMs;
  options.absorbSmallRegions = !o.noAbsorb;
  partition::Plan plan = partition::makePlan(*model, report, options);
  plan.modelPath = o.model;
  bool withFiles = !o.emitDir.empty();

  int exitCode = kExitOk;
  if (withFiles) {
    std::filesystem::create_directories(o.emitDir);
    for (const auto &fp : plan.functions) {
      std::vector<std::unique_ptr<Model>> regions;
      for (size_t r = 0; r < fp.regions.size(); ++r) {
        regions.push_back(partition::extractRegion(*model, fp, r));
        saveModel(*regions.back(),
                  (std::filesystem::path(o.emitDir) / partition::regionFileName(fp, fp.regions[r]))
                      .string());
      }
      if (o.verify) {
        double worst = verifyChain(*model, fp, regions, o.steps, o.seed);
        std::cerr << "verify " << fp.function << ": " << fp.regions.size()
                  << " regions chained over " << o.steps << " steps, max |difference| = " << worst
                  << "\n";
        if (worst > 0)
          exitCode = kExitFindings;
      }
    }
  } else if (o.verify) {
    throw InputError("--verify needs --emit-models DIR (it runs the emitted region models)");
  }

  std::string json = partition::renderPlanJson(plan, options.cost, withFiles);
  if (!o.planOut.empty())
    report::writeReportFile(*model, o.planOut, json);
  std::string text;
  if (o.skipList) {
    text = partition::skipListSnippet(plan);
  } else if (format == "json") {
    text = json;
  } else if (format == "html") {
    report.modelPath = o.model;
    text = report::renderHtml(*model, report,
                              report::HtmlOptions{.plan = &plan, .cost = options.cost});
  } else {
    std::ostringstream os;
    printText(os, plan);
    text = os.str();
  }
  if (o.output.empty())
    std::cout << text;
  else
    report::writeReportFile(*model, o.output, text);
  return exitCode;
}

} // namespace

void registerSplit(CLI::App &parent, VerbResult &result) {
  auto o = std::make_shared<SplitCliOptions>();
  CLI::App *cmd = parent.add_subcommand(
      "split", "Partition a model between ANE and CPU; emit a plan, split models and an "
               "ExecuTorch skip list");
  cmd->add_option("MODEL", o->model, "Model: .mlpackage, .mlmodel, .mil or .pte")->required();
  cmd->add_option("--function", o->function, "Split only this function");
  cmd->add_option("--format", o->format,
                  "Output: text, json (the anefit.split/1 plan) or html (the check report with "
                  "the plan: regions, costs, skip list). Default: from the -o extension, else "
                  "text");
  cmd->add_option("-o,--output", o->output, "Write the output to this file instead of stdout");
  cmd->add_option("--plan", o->planOut,
                  "Also write the plan (anefit.split/1 JSON) to this file, whatever --format");
  cmd->add_flag("--json", o->json, "Same as --format json");
  cmd->add_flag("--skip-list", o->skipList,
                "Print only the CoreMLPartitioner snippet with skip_ops_for_coreml_delegation");
  cmd->add_option("--emit-models", o->emitDir,
                  "Write each region as DIR/<fn>_region<k>_<target>"
                  ".mlpackage");
  cmd->add_flag("--verify", o->verify,
                "Run the original and the chained regions in the interpreter on random inputs "
                "and fail (exit 1) on any difference; needs --emit-models");
  cmd->add_option("--steps", o->steps, "Steps for --verify (states carried)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--seed", o->seed, "Random seed for --verify")->capture_default_str();
  cmd->add_option("--boundary-ms", o->boundaryMs, "Cost of one ANE <-> CPU boundary, in ms")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1000.0));
  cmd->add_flag("--no-absorb", o->noAbsorb,
                "Keep every ANE-able op on the ANE, whatever the boundaries cost");
  cmd->footer("The plan format is documented in docs/split.md. Exit codes: 0 ok, 1 verification "
              "found a difference, 2 usage or input error.");
  cmd->callback([o, &result] { result.exitCode = runGuarded([&] { return runSplit(*o); }); });
}

} // namespace anefit::cli
