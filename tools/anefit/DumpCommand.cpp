//===- DumpCommand.cpp - anefit dump: a model as MIL text -----------------===//
//
// Prints a model's program in anefit's MIL text form (docs/mil-text.md),
// header included, so the text parses back to the same model. Weight files
// are not opened: blob constants print as BLOBFILE references.
//
//===----------------------------------------------------------------------===//
#include "Command.h"

#include "io/ModelIO.h"
#include "ir/AsmPrinter.h"
#include "support/Error.h"

#include <iostream>
#include <memory>
#include <sstream>

namespace anefit::cli {
namespace {

struct DumpOptions {
  std::string model;
  std::string output;
  bool hideConsts = false;
  bool force = false;
};

int runDump(const DumpOptions &opts) {
  LoadOptions load;
  load.openWeights = false;
  OutputOptions out;
  out.force = opts.force;
  out.alsoAvoid = {opts.model};
  bool toStdout = opts.output.empty() || opts.output == "-";
  if (!toStdout)
    checkOutput(opts.output, out); // before the work: a refusal costs nothing
  std::unique_ptr<Model> model = loadModel(opts.model, load);
  std::ostringstream text;
  if (opts.hideConsts) {
    PrintOptions print;
    print.printConsts = false;
    if (model->program)
      printProgram(*model->program, text, print);
  } else {
    printModel(*model, text);
  }
  if (toStdout)
    std::cout << text.str();
  else
    writeFileAtomically(opts.output, text.str(), out);
  return kExitOk;
}

} // namespace

void registerDump(CLI::App &verb, VerbResult &result) {
  auto opts = std::make_shared<DumpOptions>();
  CLI::App *cmd = &verb;
  cmd->add_option("MODEL", opts->model, modelArgumentHelp())->required();
  cmd->add_option("-o,--output", opts->output, "Write the text to this file (default: stdout)");
  cmd->add_flag("--force", opts->force, "Replace the output file if it exists (never an input)");
  cmd->add_flag("--hide-consts", opts->hideConsts,
                "Print like coremltools: no header, const ops hidden, small constants inline "
                "(for reading; such text does not parse back to the same model)");
  cmd->footer("The text parses back with anefit-opt or anefit convert (docs/mil-text.md). "
              "Weight files are not read.");
  cmd->callback([opts, &result] { result.exitCode = runGuarded([&] { return runDump(*opts); }); });
}

} // namespace anefit::cli
