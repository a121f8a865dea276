//===- ConvertCommand.cpp - anefit convert: change a model's container ----===//
//
// Loads a model in any readable format and writes it in the format the
// output path names (the writable rows of io/ModelFormats.def). An existing output is
// replaced only with --force, and never when it is the input itself.
//
//===----------------------------------------------------------------------===//
#include "Command.h"

#include "io/ModelIO.h"
#include "support/Error.h"

#include <filesystem>
#include <iostream>

namespace anefit::cli {
namespace {

struct ConvertOptions {
  std::string input;
  std::string output;
  bool force = false;
};

int runConvert(const ConvertOptions &opts) {
  // Checked before loading so a mistake costs nothing on a large model;
  // saveModel checks again against everything the model was read from.
  OutputOptions policy;
  policy.force = opts.force;
  policy.allowStream = false;
  policy.kind = detectFormat(opts.output) == ModelFormat::MLPackage ? OutputKind::Directory
                                                                    : OutputKind::File;
  policy.alsoAvoid = {opts.input};
  checkOutput(opts.output, policy);
  std::unique_ptr<Model> model = loadModel(opts.input);
  SaveOptions save;
  save.force = opts.force;
  saveModel(*model, opts.output, save);
  return kExitOk;
}

} // namespace

std::string convertSummary() {
  std::string readOnly = formatExtensionsText(FormatSet::ReadOnly, "and");
  return "Convert between " + formatExtensionsText(FormatSet::Writable, "and") +
         (readOnly.empty() ? std::string() : "; out of " + readOnly + ", too");
}

void registerConvert(CLI::App &verb, VerbResult &result) {
  auto opts = std::make_shared<ConvertOptions>();
  CLI::App *cmd = &verb;
  cmd->add_option("IN", opts->input, modelArgumentHelp())->required();
  cmd->add_option("OUT", opts->output,
                  "Output path; its extension picks the format: " + formatExtensionsText(true))
      ->required();
  cmd->add_flag("--force", opts->force, "Replace OUT if it exists (never the input)");
  cmd->footer("ML Programs with blob weights need .mlpackage (or .mil, which writes the "
              "weights to weights/<name>.bin beside it).");
  cmd->callback(
      [opts, &result] { result.exitCode = runGuarded([&] { return runConvert(*opts); }); });
}

} // namespace anefit::cli
