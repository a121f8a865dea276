//===- ProbeCommand.cpp - anefit probe: the kit that settles it on a Mac --===//
//
// Parses the options and runs writeProbeKit (probe/Probe.h): the model's
// suspects, the variants that bisect them, the plan, the README and the
// runner script, written into one directory; prints what it wrote and what
// to run on the Mac.
//
//===----------------------------------------------------------------------===//
#include "Command.h"

#include "ane/Checker.h"
#include "io/ModelIO.h"
#include "probe/Probe.h"
#include "support/Text.h"
#include "support/Units.h"

#include <iostream>
#include <memory>

namespace anefit::cli {
namespace {

struct ProbeCliOptions {
  std::string model;
  std::string output;
  TargetCliOptions target;
  bool force = false;
  bool json = false;
};

int runProbe(const ProbeCliOptions &o) {
  probe::ProbeOptions options;
  applyTargetOptions(o.target, options.target);
  options.force = o.force;
  options.progress = [](std::string_view stage) {
    if (stage.starts_with("write "))
      std::cerr << "anefit probe: " << stage << "\n";
  };
  probe::ProbeResult result = probe::writeProbeKit(o.model, o.output, options);
  if (o.json) {
    std::cout << ane::renderProbePlan(result.plan);
    return kExitOk;
  }
  std::cout << "anefit probe: " << o.model << " -> " << o.output << " (" << humanBytes(result.bytes)
            << ")\n";
  for (size_t m = 0; m < result.plan.models.size(); ++m) {
    const ane::ProbeModelPlan &mp = result.plan.models[m];
    size_t packages = 0;
    for (const ane::ProbeVariant &v : mp.variants)
      packages += !v.path.empty();
    std::cout << "\nmodel " << m << ": " << mp.label << " (predicted " << mp.predictedVerdict
              << ")\n";
    for (const ane::ProbeSuspect &s : mp.suspects) {
      std::cout << "  suspect " << s.id << ": " << joined(s.rules, ", ");
      if (!s.pattern.empty())
        std::cout << " (" << s.pattern << ")";
      std::cout << " [" << s.level << "], " << s.ops << (s.ops == 1 ? " op, " : " ops, ")
                << (!s.pass.empty()  ? "removed by " + s.pass
                    : s.note.empty() ? std::string("no pass removes it")
                                     : s.note)
                << "\n";
    }
    if (mp.suspects.empty())
      std::cout << "  no suspect: the kit compiles the original alone\n";
    std::cout << "  " << packages << (packages == 1 ? " package" : " packages")
              << "; the plan names the culprit in at most " << mp.treeDepth
              << (mp.treeDepth == 1 ? " compile" : " compiles")
              << ", plus one sub-program check per culprit\n";
  }
  std::cout << "\non a Mac: python3 " << o.output << "/run_probe.py   (README.md in the kit)\n"
            << "then:     anefit check " << o.model << " --observations " << o.output
            << "/observations.json\n";
  return kExitOk;
}

} // namespace

void registerProbe(CLI::App &verb, VerbResult &result) {
  auto o = std::make_shared<ProbeCliOptions>();
  CLI::App *cmd = &verb;
  cmd->add_option("MODEL", o->model, modelArgumentHelp())->required();
  cmd->add_option("-o,--output", o->output, "The kit's directory (created)")->required();
  addTargetOptions(cmd, o->target);
  cmd->add_flag("--force", o->force, "Replace the files of an existing kit (never an input)");
  cmd->add_flag("--json", o->json, "Print the plan (anefit.probe-plan/1) instead of a summary");
  cmd->footer("The kit holds the variants as .mlpackage, plan.json, README.md and run_probe.py;\n"
              "docs/probe.md says what to run on a Mac and how the observations come back.\n"
              "Exit codes: 0 kit written, 2 usage or input error.");
  cmd->callback([o, &result] { result.exitCode = runGuarded([&] { return runProbe(*o); }); });
}

} // namespace anefit::cli
