//===- RulesCommand.cpp - anefit rules: the ANE rules table ---------------===//
//
// Lists the rules `anefit check` applies, from the same table the checker
// runs (src/ane/AneRules.def): a plain listing, JSON, or the Markdown that is
// committed as docs/rules.md.
//
//===----------------------------------------------------------------------===//
#include "Command.h"

#include "ane/Evidence.h"
#include "io/ModelIO.h"
#include "report/Report.h"
#include "support/Error.h"

#include <iostream>
#include <memory>

namespace anefit::cli {
namespace {

struct RulesCliOptions {
  std::string format = "text";
  bool json = false;
  std::string evidence;
  std::vector<std::string> ids;
};

std::unique_ptr<Model> loadCorpusModel(const std::string &path) {
  return loadModel(path, LoadOptions{.openWeights = false});
}

/// The evidence-corpus section: every case checked as `anefit check` would.
std::string corpusSection(const std::string &dir) {
  return ane::corpusMarkdown(dir, loadCorpusModel);
}

int runRules(const RulesCliOptions &o) {
  std::string format = o.json ? "json" : o.format;
  if (!o.ids.empty()) {
    if (format != "text")
      failExpected("", "--format", "text with rule ids", "'" + format + "'");
    std::string out;
    for (const std::string &id : o.ids) {
      auto rule = ane::ruleFromCode(id);
      if (!rule)
        failExpected("", "RULE", "a rule id such as ANE-STATE-006 (`anefit rules` lists them)",
                     "'" + id + "'");
      out += (out.empty() ? "" : "\n") + ane::ruleText(ane::ruleInfo(*rule));
    }
    std::cout << out;
    return kExitOk;
  }
  if (format == "text")
    std::cout << ane::rulesText();
  else if (format == "json")
    std::cout << ane::rulesJson();
  else if (format == "coverage") {
    if (o.evidence.empty())
      failExpected("", "--format coverage", "--evidence DIR", "none");
    std::cout << ane::coverageTable(ane::corpusCoverage(o.evidence, ane::loadCorpus(o.evidence),
                                                        loadCorpusModel,
                                                        /*derivePartOnly=*/false));
  } else if (format == "markdown")
    std::cout << ane::rulesMarkdown(o.evidence.empty() ? std::string() : corpusSection(o.evidence));
  else
    failExpected("", "--format", "text, json, markdown or coverage", "'" + format + "'");
  return kExitOk;
}

} // namespace

void registerRules(CLI::App &verb, VerbResult &result) {
  auto o = std::make_shared<RulesCliOptions>();
  CLI::App *cmd = &verb;
  cmd->add_option("--format", o->format,
                  "Output: text, json, markdown (docs/rules.md) or coverage (src/ane/Coverage.def, "
                  "from --evidence)")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Same as --format json");
  cmd->add_option("RULE", o->ids,
                  "Rule ids to show in full: scope, effect, and every piece of evidence with its "
                  "side, certainty and quote");
  cmd->add_option("--evidence", o->evidence,
                  "Markdown: also check the evidence corpus in this directory (cases.json) and "
                  "print its confusion table, as docs/rules.md does");
  cmd->callback([o, &result] { result.exitCode = runGuarded([&] { return runRules(*o); }); });
}

} // namespace anefit::cli
