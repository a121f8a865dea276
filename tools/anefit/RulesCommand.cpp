//===- RulesCommand.cpp - anefit rules: the ANE rules table ---------------===//
//
// Lists the rules `anefit check` applies, from the same table the checker
// runs (src/ane/AneRules.def): a plain listing, JSON, or the Markdown that is
// committed as docs/rules.md.
//
//===----------------------------------------------------------------------===//
#include "Command.h"

#include "ane/Report.h"
#include "support/Error.h"

#include <iostream>
#include <memory>

namespace anefit::cli {
namespace {

struct RulesCliOptions {
  std::string format = "text";
  bool json = false;
};

int runRules(const RulesCliOptions &o) {
  std::string format = o.json ? "json" : o.format;
  if (format == "text")
    std::cout << ane::rulesText();
  else if (format == "json")
    std::cout << ane::rulesJson();
  else if (format == "markdown")
    std::cout << ane::rulesMarkdown();
  else
    failExpected("", "--format", "text, json or markdown", "'" + format + "'");
  return kExitOk;
}

} // namespace

void registerRules(CLI::App &parent, VerbResult &result) {
  auto o = std::make_shared<RulesCliOptions>();
  CLI::App *cmd = parent.add_subcommand("rules", "List the ANE rules that 'check' applies");
  cmd->add_option("--format", o->format, "Output: text, json or markdown (docs/rules.md)")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Same as --format json");
  cmd->callback([o, &result] { result.exitCode = runGuarded([&] { return runRules(*o); }); });
}

} // namespace anefit::cli
