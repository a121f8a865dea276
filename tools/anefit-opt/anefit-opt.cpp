//===- anefit-opt.cpp - MIL text in, passes, MIL text out -----------------===//
//
// The driver most lit tests use: reads MIL text (or any model anefit reads),
// optionally verifies it and runs a pipeline of passes, and prints the result
// as MIL text or writes a package. Exit codes: 0 ok, 1 verifier errors,
// 2 usage or input errors.
//
//===----------------------------------------------------------------------===//
#include "io/ModelIO.h"
#include "ir/AsmParser.h"
#include "ir/AsmPrinter.h"
#include "ir/Verifier.h"
#include "ops/OpDocs.h"
#include "ops/OpVerifier.h"
#include "support/Error.h"
#include "support/FileSystem.h"
#include "transforms/Pass.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>

namespace fs = std::filesystem;
using namespace anefit;

namespace {

enum ExitCode : int { kExitOk = 0, kExitVerifyFailed = 1, kExitInputError = 2 };

struct Options {
  std::string input;
  std::string output;
  bool verify = false;
  std::string passes;
  std::string emit = "mil";
  bool allowUndefined = false;
  bool splitInputFile = false;
  bool force = false;
};

/// Reads the input through io::loadModel. Anything that is not a known model
/// format is read as MIL text (coremltools' print output is often a .txt);
/// weight files of text that are not next to it leave their blobs
/// unresolved, so passes still run on text copied out of a package.
std::unique_ptr<Model> readInput(const std::string &input, bool allowUndefined) {
  LoadOptions options;
  options.text.allowUndefinedValues = allowUndefined;
  // This driver reports broken value scopes itself (--verify, process()).
  options.checkScopes = false;
  if (input == "-") {
    std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    options.allowMissingWeights = true;
    return loadModelText(text, "<stdin>", fs::current_path().string(), options);
  }
  ModelFormat format = detectFormat(input);
  FileKind kind = fileKindOf(input);
  if (format == ModelFormat::MilText ||
      (format == ModelFormat::Unknown && kind != FileKind::Missing &&
       kind != FileKind::Directory)) {
    options.format = ModelFormat::MilText;
    options.allowMissingWeights = true;
  }
  return loadModel(input, options);
}

/// Prints diagnostics; returns true if any is an error.
bool report(const Diagnostics &diags) {
  for (const Diagnostic &d : diags)
    std::cerr << d.str() << "\n";
  return hasErrors(diags);
}

/// Verification: structure, model description, and op rules.
Diagnostics verifyAll(const Model &model) {
  Diagnostics diags = verifyModel(model);
  // Op rules assume a structurally sound program.
  if (!hasErrors(diags) && model.program) {
    Diagnostics ops = verifyOps(*model.program);
    diags.insert(diags.end(), ops.begin(), ops.end());
  }
  return diags;
}

/// Runs the pass pipeline (e.g. "state-to-io{keep-largest},canonicalize").
void runPasses(Model &model, const std::string &pipeline) {
  if (pipeline.empty())
    return;
  PassManager pm;
  pm.addPipeline(pipeline);
  PassResult result = pm.run(model);
  for (const std::string &change : result.changes)
    std::cerr << "note: " << change << "\n";
  report(result.diagnostics);
}

/// Verifies, runs the passes, verifies again; returns an exit code.
int process(Model &model, const Options &opts) {
  if (opts.verify && report(verifyAll(model)))
    return kExitVerifyFailed;
  // Without --verify, a program whose values are defined twice or used out
  // of scope is malformed input, as for every other reader: no pass or
  // writer may see it.
  if (model.program)
    for (const Diagnostic &d : verifyValueScopes(*model.program))
      if (d.severity == Diagnostic::Severity::Error)
        throw InputError::at(model.sourcePath, "", "malformed program: " + d.str().substr(7));
  runPasses(model, opts.passes);
  if (opts.verify && !opts.passes.empty() && report(verifyAll(model)))
    return kExitVerifyFailed;
  return kExitOk;
}

/// --split-input-file: each part of a MIL text file between lines
/// `// -----` is a test case of its own, processed and printed in turn (the
/// parts joined by the same line). A part's errors do not stop the others;
/// line numbers stay those of the whole file.
int runSplit(const Options &opts) {
  if (opts.emit != "mil")
    throw InputError::at("--split-input-file", "", "works with --emit mil only");
  fs::path path(opts.input);
  std::string text;
  if (opts.input == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    text = std::string(MappedFile::open(opts.input)->text());
  }
  fs::path dir =
      opts.input != "-" && path.has_parent_path() ? path.parent_path() : fs::current_path();
  LoadOptions options;
  options.text.allowUndefinedValues = opts.allowUndefined;
  options.allowMissingWeights = true;
  options.checkScopes = false;
  std::vector<std::string> parts = splitInputFile(text);
  int worst = kExitOk;
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i)
      out += std::string(kSplitMarker) + "\n";
    try {
      std::unique_ptr<Model> model = loadModelText(
          parts[i], opts.input == "-" ? "<stdin>" : opts.input, dir.string(), options);
      int code = process(*model, opts);
      worst = std::max(worst, code);
      if (code == kExitOk)
        out += modelToString(*model);
    } catch (const InputError &e) {
      std::cerr << "anefit-opt: error: " << e.what() << "\n";
      worst = std::max<int>(worst, kExitInputError);
    }
  }
  if (opts.output.empty() || opts.output == "-")
    std::cout << out;
  else
    writeFileAtomically(opts.output, out, OutputOptions::withForce(opts.force));
  return worst;
}

/// --check-pass-examples: one line per pass; a differing example is shown.
int checkPassExamples() {
  int code = kExitOk;
  for (const PassInfo &p : passRegistry()) {
    try {
      PassExampleRun r = runPassExample(p);
      if (r.matches()) {
        std::cout << p.cliName << ": the example rewrites as documented\n";
        continue;
      }
      std::cout << p.cliName << ": DIFFERENT from the documented 'after'\n--- got:\n"
                << r.got << "--- documented:\n"
                << r.want;
    } catch (const InputError &e) {
      std::cout << p.cliName << ": the example does not parse: " << e.what() << "\n";
    }
    code = kExitVerifyFailed;
  }
  return code;
}

int run(const Options &opts) {
  if (opts.splitInputFile)
    return runSplit(opts);
  std::unique_ptr<Model> model = readInput(opts.input, opts.allowUndefined);
  if (int code = process(*model, opts))
    return code;
  if (opts.emit == "package") {
    if (opts.output.empty())
      throw InputError::at("-o", "", "--emit package needs an output path");
    SaveOptions save;
    save.force = opts.force;
    saveModel(*model, opts.output, save);
    return kExitOk;
  }
  std::string text = modelToString(*model);
  if (opts.output.empty() || opts.output == "-")
    std::cout << text;
  else
    writeFileAtomically(opts.output, text, OutputOptions::withForce(opts.force));
  return kExitOk;
}

} // namespace

int main(int argc, char **argv) {
  CLI::App app{"anefit-opt: reads a model (MIL text or any format anefit reads), verifies it, "
               "runs passes and prints MIL text."};
  Options opts;
  CLI::Option *input = app.add_option(
      "INPUT", opts.input, "MIL text (any name), " + formatExtensionsText() + "; '-' for stdin");
  // The op table as markdown needs no input; docs/ops.md is its output.
  bool listOps = false;
  CLI::Option *listOpsFlag =
      app.add_flag("--list-ops", listOps, "print the op table as markdown (docs/ops.md) and exit");
  input->excludes(listOpsFlag);
  listOpsFlag->excludes(input);
  // So does the pass table; docs/passes.md is its output.
  bool listPasses = false;
  CLI::Option *listPassesFlag = app.add_flag(
      "--list-passes", listPasses, "print the pass table as markdown (docs/passes.md) and exit");
  input->excludes(listPassesFlag);
  listPassesFlag->excludes(input);
  // Each pass of Passes.def run on its own before/after example.
  bool checkExamples = false;
  CLI::Option *checkExamplesFlag = app.add_flag(
      "--check-pass-examples", checkExamples,
      "run every pass on the 'before' example of its Passes.def row, compare with 'after', and "
      "exit (1 when one differs)");
  input->excludes(checkExamplesFlag);
  app.add_option("-o,--output", opts.output, "where to write the result (default: stdout)");
  app.add_flag("--force", opts.force, "replace the output if it exists (never the input)");
  app.add_flag("--verify", opts.verify,
               "check the program and description; print diagnostics, exit 1 on errors");
  app.add_option("--passes", opts.passes,
                 "comma-separated pipeline of passes, e.g. 'state-to-io{keep-largest},dce'");
  app.add_flag("--allow-undefined", opts.allowUndefined,
               "read coremltools' print output, whose large constants are hidden: undefined "
               "%names become const ops without a value");
  app.add_flag("--split-input-file", opts.splitInputFile,
               "treat each part of a MIL text file between lines '// -----' as a separate "
               "input; print the results joined by the same line");
  app.add_option("--emit", opts.emit, "output form: mil (text) or package")
      ->check(CLI::IsMember({"mil", "package"}));
  app.footer("Exit codes: 0 ok, 1 verifier errors, 2 usage or input error.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitInputError;
  }
  if (listOps) {
    std::cout << opsMarkdown();
    return kExitOk;
  }
  if (listPasses) {
    std::cout << passesMarkdown();
    return kExitOk;
  }
  if (checkExamples)
    return checkPassExamples();
  if (input->count() == 0) {
    std::cerr << "INPUT is required\nRun with --help for more information.\n";
    return kExitInputError;
  }
  try {
    InputScope inputs; // every input is remembered; no output may go over one
    return run(opts);
  } catch (const InputError &e) {
    std::cerr << "anefit-opt: error: " << e.what() << "\n";
  } catch (const std::bad_alloc &) {
    std::cerr << "anefit-opt: error: out of memory\n";
  } catch (const std::exception &e) {
    std::cerr << "anefit-opt: error: " << e.what() << "\n";
  }
  return kExitInputError;
}
