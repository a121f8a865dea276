//===- RulesCommand.cpp - anefit rules: the ANE rules table ---------------===//
//
// Lists the rules `anefit check` applies, from the same table the checker
// runs (src/ane/AneRules.def): a plain listing, JSON, or the Markdown that is
// committed as docs/rules.md.
//
//===----------------------------------------------------------------------===//
#include "Command.h"

#include "ane/Evidence.h"
#include "ane/Report.h"
#include "io/ModelIO.h"
#include "support/Error.h"

#include <iostream>
#include <memory>

namespace anefit::cli {
namespace {

struct RulesCliOptions {
  std::string format = "text";
  bool json = false;
  std::string evidence;
};

/// The evidence-corpus section: every case checked as `anefit check` would.
std::string corpusSection(const std::string &dir) {
  auto results = ane::gradeCorpus(dir, [](const std::string &path) {
    std::unique_ptr<Model> model = loadModel(path, LoadOptions{.openWeights = false});
    return ane::checkModel(*model);
  });
  return ane::evidenceMarkdown(results);
}

int runRules(const RulesCliOptions &o) {
  std::string format = o.json ? "json" : o.format;
  if (format == "text")
    std::cout << ane::rulesText();
  else if (format == "json")
    std::cout << ane::rulesJson();
  else if (format == "markdown")
    std::cout << ane::rulesMarkdown(o.evidence.empty() ? std::string() : corpusSection(o.evidence));
  else
    failExpected("", "--format", "text, json or markdown", "'" + format + "'");
  return kExitOk;
}

} // namespace

void registerRules(CLI::App &verb, VerbResult &result) {
  auto o = std::make_shared<RulesCliOptions>();
  CLI::App *cmd = &verb;
  cmd->add_option("--format", o->format, "Output: text, json or markdown (docs/rules.md)")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Same as --format json");
  cmd->add_option("--evidence", o->evidence,
                  "Markdown: also check the evidence corpus in this directory (cases.json) and "
                  "print its confusion table, as docs/rules.md does");
  cmd->callback([o, &result] { result.exitCode = runGuarded([&] { return runRules(*o); }); });
}

} // namespace anefit::cli
