//===- SplitCommand.cpp - anefit split: partition between ANE and CPU -----===//
//
// Parses the options and runs splitModel (partition/Split.h: check, plan,
// region models, the proof in the interpreter); prints the plan as text, as
// JSON ("anefit.split/1"), as HTML or as the skip list for ExecuTorch's
// CoreMLPartitioner, and the outcome of each proof. The skip list of an
// ExecuTorch program with several Core ML delegates covers every delegate.
//
//===----------------------------------------------------------------------===//
#include "Command.h"

#include "io/ETRecord.h"
#include "io/ModelIO.h"
#include "partition/PlanJson.h"
#include "partition/Split.h"
#include "report/HtmlReport.h"
#include "report/Sources.h"
#include "support/Error.h"

#include <iomanip>
#include <iostream>
#include <optional>
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
  bool force = false;
  std::string maxMemory;
  bool json = false;
  bool skipList = false;
  bool verify = false;
  bool noAbsorb = false;
  int steps = 3;
  uint64_t seed = 0;
  double boundaryMs = partition::CostModel().boundaryMs;
  std::string etrecord;
  std::string sourceRoot;
};

void printText(std::ostream &os, const partition::Plan &plan, const report::SourceJoin *join) {
  os << std::fixed << std::setprecision(3);
  for (const auto &fp : plan.functions) {
    size_t ane = fp.aneRegions();
    os << "function " << fp.function << ": " << fp.regions.size() << " regions (" << ane << " ANE, "
       << fp.regions.size() - ane << " CPU), " << fp.boundaries.size() << " boundaries, estimated "
       << fp.planCostMs << " ms (CPU only " << fp.cpuOnlyCostMs << " ms)\n";
    for (const auto &r : fp.regions) {
      size_t absorbed = r.absorbedOps();
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
      // Where the CPU's ops come from: the lines to change or to keep out.
      if (join && r.target == partition::Target::Cpu) {
        std::vector<ane::Finding::Source> sources;
        for (const partition::PlacedOp &p : r.ops)
          sources.push_back(join->of(*p.op));
        report::SourceSites sites = report::sourceSites(sources);
        for (const std::string &place : sites.places)
          os << "    source: " << place << "\n";
        if (sites.more)
          os << "    source: " << sites.moreText() << "\n";
      }
    }
    for (const auto &b : fp.boundaries)
      os << "  boundary " << b.fromRegion << " -> " << b.toRegion << ": " << b.reason << "\n";
    for (const auto &w : fp.warnings)
      os << "  warning: " << w << "\n";
  }
  if (!plan.skipOps.empty() || !plan.partitionerArguments.empty() ||
      !plan.compileSpecArguments.empty()) {
    os << (!plan.compileSpecArguments.empty()
               ? "\nExecuTorch: export with these compile specs and CoreMLPartitioner "
                 "arguments:\n\n"
           : plan.partitionerArguments.empty()
               ? "\nExecuTorch: keep these ops out of the Core ML delegate:\n\n"
               : "\nExecuTorch: export with these CoreMLPartitioner arguments:\n\n")
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

int runSplit(const SplitCliOptions &o) {
  std::string format = o.json ? "json" : formatFor(o.format, o.output);
  if (format != "text" && format != "json" && format != "html")
    failExpected("", "--format", "text, json or html", "'" + format + "'");
  if (o.verify && o.emitDir.empty())
    throw InputError("--verify needs --emit-models DIR (it runs the emitted region models)");
  applyMaxMemory(o.maxMemory);
  if (!o.sourceRoot.empty() && o.etrecord.empty())
    failExpected("", "--source-root", "--etrecord", "no --etrecord");
  partition::SplitOptions split;
  split.function = o.function;
  split.partition.cost.boundaryMs = o.boundaryMs;
  split.partition.absorbSmallRegions = !o.noAbsorb;
  split.emitDir = o.emitDir;
  split.force = o.force;
  split.verify = o.verify;
  split.steps = o.steps;
  split.seed = o.seed;
  bool needWeights = !o.emitDir.empty() || o.verify;
  // Refuse a bad --plan or -o before the work.
  OutputOptions policy;
  policy.force = o.force;
  policy.alsoAvoid = {o.model};
  // The skip list of a program with several Core ML delegates covers them all:
  // the partitioner takes one list for the whole program.
  std::vector<std::unique_ptr<Model>> models;
  if (o.skipList && !needWeights && o.planOut.empty())
    models = loadModels(o.model, LoadOptions{.openWeights = false});
  if (models.size() > 1) {
    if (!o.output.empty())
      checkOutput(o.output, policy);
    std::vector<partition::Plan> plans;
    for (const std::unique_ptr<Model> &m : models)
      plans.push_back(partition::splitModel(*m, split).plan);
    std::string text = partition::skipListSnippet(partition::mergeExportAdvice(plans));
    if (o.output.empty())
      std::cout << text;
    else
      report::writeReportFile(*models[0], o.output, text, policy);
    return kExitOk;
  }
  std::unique_ptr<Model> model = models.empty()
                                     ? loadModel(o.model, LoadOptions{.openWeights = needWeights})
                                     : std::move(models[0]);
  std::optional<ETRecord> record;
  std::optional<report::SourceJoin> join;
  if (!o.etrecord.empty()) {
    record = readETRecord(o.etrecord);
    join.emplace(*model, *record, o.sourceRoot, o.model);
  }
  if (!o.planOut.empty())
    checkOutput(o.planOut, policy);
  if (!o.output.empty())
    checkOutput(o.output, policy);
  partition::SplitResult result = partition::splitModel(*model, split);
  const partition::PartitionOptions &options = split.partition;
  partition::Plan &plan = result.plan;
  ane::CheckReport &report = result.report;
  plan.modelPath = o.model;
  bool withFiles = !o.emitDir.empty();
  for (const partition::SplitVerification &v : result.verifications)
    std::cerr << "verify " << v.function << ": " << v.regions << " regions chained over " << v.steps
              << " steps, max |difference| = " << v.comparison.maxAbsDiff() << "\n";
  int exitCode = result.ok() ? kExitOk : kExitFindings;

  std::string json = partition::renderPlanJson(plan, options.cost, withFiles);
  if (join) {
    json = report::renderPlanJsonWithSources(plan, options.cost, withFiles, *join);
    report::attachSources(report, *model, *record, o.sourceRoot);
  }
  if (!o.planOut.empty())
    report::writeReportFile(*model, o.planOut, json, policy);
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
    printText(os, plan, join ? &*join : nullptr);
    text = os.str();
  }
  if (o.output.empty())
    std::cout << text;
  else
    report::writeReportFile(*model, o.output, text, policy);
  return exitCode;
}

} // namespace

void registerSplit(CLI::App &verb, VerbResult &result) {
  auto o = std::make_shared<SplitCliOptions>();
  CLI::App *cmd = &verb;
  cmd->add_option("MODEL", o->model, modelArgumentHelp())->required();
  cmd->add_option("--function", o->function, "Split only this function");
  cmd->add_option("--format", o->format,
                  "Output: text, json (the anefit.split/1 plan) or html (the check report with "
                  "the plan: regions, costs, skip list). Default: from the -o extension, else "
                  "text");
  cmd->add_option("-o,--output", o->output, "Write the output to this file instead of stdout");
  cmd->add_option("--plan", o->planOut,
                  "Also write the plan (anefit.split/1 JSON) to this file, whatever --format");
  cmd->add_flag("--json", o->json, "Same as --format json");
  addMaxMemoryOption(cmd, o->maxMemory);
  cmd->add_flag("--force", o->force,
                "Replace -o, --plan and region packages if they exist (never an input)");
  cmd->add_flag("--skip-list", o->skipList,
                "Print only the CoreMLPartitioner snippet with skip_ops_for_coreml_delegation (for "
                "a .pte with several Core ML delegates, one list for all of them)");
  cmd->add_option("--emit-models", o->emitDir,
                  "Write each region as DIR/<fn>_region<k>_<target>"
                  ".mlpackage");
  cmd->add_flag("--verify", o->verify,
                "Run the original and the chained regions in the interpreter on random inputs "
                "and fail (exit 1) on any difference; needs --emit-models");
  cmd->add_option("--steps", o->steps, "Steps for --verify (states carried)")
      ->capture_default_str()
      ->check(integerIn(1, 1000));
  cmd->add_option("--seed", o->seed, "Random seed for --verify")
      ->capture_default_str()
      ->check(unsignedIn(0, UINT64_MAX));
  cmd->add_option("--boundary-ms", o->boundaryMs, "Cost of one ANE <-> CPU boundary, in ms")
      ->capture_default_str()
      ->check(realIn(0, 1000));
  cmd->add_option("--etrecord", o->etrecord,
                  "The export's ETRecord (export_llm +debug.generate_etrecord=true): each CPU "
                  "region names the PyTorch source lines and modules of its ops; the JSON plan "
                  "gives every op its source; the HTML report's op panel shows it");
  cmd->add_option("--source-root", o->sourceRoot,
                  "With --etrecord: show source paths relative to this directory");
  cmd->add_flag("--no-absorb", o->noAbsorb,
                "Keep every ANE-able op on the ANE, whatever the boundaries cost");
  cmd->footer("The plan format is documented in docs/split.md. Exit codes: 0 ok, 1 verification "
              "found a difference, 2 usage or input error.");
  cmd->callback([o, &result] { result.exitCode = runGuarded([&] { return runSplit(*o); }); });
}

} // namespace anefit::cli
