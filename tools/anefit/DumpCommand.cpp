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

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

namespace fs = std::filesystem;

namespace anefit::cli {
namespace {

struct DumpOptions {
  std::string model;
  std::string output;
  bool hideConsts = false;
};

/// Writes through a temporary sibling renamed into place, so a failed dump
/// never leaves a half-written file behind.
void writeAtomically(const std::string &path, const std::string &text) {
  fs::path target(path);
  fs::path tmp = target;
  tmp += ".tmp-anefit-dump";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      throw InputError::at(path, "", "cannot open the output for writing");
    out << text;
    if (!out.flush())
      throw InputError::at(path, "", "could not write the output");
  }
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw InputError::at(path, "", "cannot move the output into place: " + ec.message());
  }
}

int runDump(const DumpOptions &opts) {
  LoadOptions load;
  load.openWeights = false;
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
  if (opts.output.empty() || opts.output == "-")
    std::cout << text.str();
  else
    writeAtomically(opts.output, text.str());
  return kExitOk;
}

} // namespace

void registerDump(CLI::App &parent, VerbResult &result) {
  auto opts = std::make_shared<DumpOptions>();
  CLI::App *cmd = parent.add_subcommand("dump", "Print a model's program as MIL text");
  cmd->add_option("MODEL", opts->model, "Model: .mlpackage, .mlmodel, .pte or .mil")->required();
  cmd->add_option("-o,--output", opts->output, "Write the text to this file (default: stdout)");
  cmd->add_flag("--hide-consts", opts->hideConsts,
                "Print like coremltools: no header, const ops hidden, small constants inline "
                "(for reading; such text does not parse back to the same model)");
  cmd->footer("The text parses back with anefit-opt or anefit convert (docs/mil-text.md). "
              "Weight files are not read.");
  cmd->callback([opts, &result] { result.exitCode = runGuarded([&] { return runDump(*opts); }); });
}

} // namespace anefit::cli
