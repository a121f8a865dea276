//===- anefit-opt.cpp - MIL text in, passes, MIL text out -----------------===//
//
// The driver most lit tests use: reads MIL text (or any model anefit reads),
// optionally verifies it and runs a pipeline of passes, and prints the result
// as MIL text or writes a package. Exit codes: 0 ok, 1 verifier errors,
// 2 usage or input errors.
//
//===----------------------------------------------------------------------===//
#include "ir/AsmParser.h"
#include "ir/AsmPrinter.h"
#include "ir/Verifier.h"
#include "support/Error.h"

#ifdef ANEFIT_HAVE_IO
#include "io/WeightFile.h"
#endif
#ifdef ANEFIT_HAVE_MODEL_IO
#include "io/ModelIO.h"
#endif
#ifdef ANEFIT_HAVE_OPS
#include "ops/OpDocs.h"
#include "ops/OpVerifier.h"
#endif
#ifdef ANEFIT_HAVE_TRANSFORMS
#include "transforms/Pass.h"
#endif

#include <CLI/CLI.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

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
};

/// Weight files named "@model_path/..." are looked up next to the text file
/// (in the current directory for stdin); missing files leave blobs unresolved.
WeightOpener weightOpenerFor(const fs::path &modelDir) {
  return [modelDir](const std::string &fileName) -> std::shared_ptr<const BlobStore> {
#ifdef ANEFIT_HAVE_IO
    constexpr std::string_view kPrefix = "@model_path/";
    if (fileName.rfind(kPrefix, 0) != 0)
      return nullptr;
    fs::path path = modelDir / fileName.substr(kPrefix.size());
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
      return nullptr;
    return WeightFile::open(path.string());
#else
    (void)modelDir;
    (void)fileName;
    return nullptr;
#endif
  };
}

std::unique_ptr<Model> readInput(const std::string &input, const ParseOptions &parseOptions) {
  if (input == "-") {
    std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    return parseModelText(text, "<stdin>", weightOpenerFor(fs::current_path()), parseOptions);
  }
  fs::path path(input);
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw InputError::at(input, "", "no such file or directory");
  // Anything that is not a known model format is read as MIL text.
  bool isText = path.extension() == ".mil" || !fs::is_directory(path, ec);
#ifdef ANEFIT_HAVE_MODEL_IO
  ModelFormat format = detectFormat(input);
  isText = format == ModelFormat::MilText || (format == ModelFormat::Unknown && isText);
  if (!isText)
    return loadModel(input);
#endif
  if (!isText)
    throw InputError::at(input, "", "expected MIL text (.mil); this build reads no packages");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw InputError::at(input, "", "cannot open the file for reading");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::path dir = path.has_parent_path() ? path.parent_path() : fs::current_path();
  return parseModelText(text, input, weightOpenerFor(dir), parseOptions);
}

/// Prints diagnostics; returns true if any is an error.
bool report(const Diagnostics &diags) {
  for (const Diagnostic &d : diags)
    std::cerr << d.str() << "\n";
  return hasErrors(diags);
}

/// Verification: structure, model description, and op rules when built in.
Diagnostics verifyAll(const Model &model) {
  Diagnostics diags = verifyModel(model);
#ifdef ANEFIT_HAVE_OPS
  // Op rules assume a structurally sound program.
  if (!hasErrors(diags) && model.program) {
    Diagnostics ops = verifyOps(*model.program);
    diags.insert(diags.end(), ops.begin(), ops.end());
  }
#endif
  return diags;
}

/// Runs the pass pipeline (e.g. "state-to-io{keep-largest},canonicalize").
void runPasses(Model &model, const std::string &pipeline) {
  if (pipeline.empty())
    return;
#ifdef ANEFIT_HAVE_TRANSFORMS
  PassManager pm;
  pm.addPipeline(pipeline);
  PassResult result = pm.run(model);
  for (const std::string &change : result.changes)
    std::cerr << "note: " << change << "\n";
  report(result.diagnostics);
#else
  (void)model;
  throw InputError::at("--passes", "", "this build has no passes; cannot run '" + pipeline + "'");
#endif
}

/// Verifies, runs the passes, verifies again; returns an exit code.
int process(Model &model, const Options &opts) {
  if (opts.verify && report(verifyAll(model)))
    return kExitVerifyFailed;
  runPasses(model, opts.passes);
  if (opts.verify && !opts.passes.empty() && report(verifyAll(model)))
    return kExitVerifyFailed;
  return kExitOk;
}

/// --split-input-file: each part of a MIL text file between lines
/// `// -----` is a test case of its own, processed and printed in turn (the
/// parts joined by the same line). A part's errors do not stop the others;
/// line numbers stay those of the whole file.
int runSplit(const Options &opts, const ParseOptions &parseOptions) {
  if (opts.emit != "mil")
    throw InputError::at("--split-input-file", "", "works with --emit mil only");
  fs::path path(opts.input);
  std::string text;
  if (opts.input == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in)
      throw InputError::at(opts.input, "", "cannot open the file for reading");
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  fs::path dir =
      opts.input != "-" && path.has_parent_path() ? path.parent_path() : fs::current_path();
  std::vector<std::string> parts(1);
  std::istringstream lines(text);
  size_t lineNo = 0;
  for (std::string line; std::getline(lines, line); ++lineNo) {
    std::string trimmed = line;
    while (!trimmed.empty() && (trimmed.back() == '\r' || trimmed.back() == ' '))
      trimmed.pop_back();
    if (trimmed == "// -----") {
      // Blank lines keep the next part's line numbers those of the file.
      parts.emplace_back(lineNo + 1, '\n');
      continue;
    }
    parts.back() += line + "\n";
  }
  int worst = kExitOk;
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i)
      out += "// -----\n";
    try {
      std::unique_ptr<Model> model = parseModelText(
          parts[i], opts.input == "-" ? "<stdin>" : opts.input, weightOpenerFor(dir), parseOptions);
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
    writeFileAtomically(opts.output, out);
  return worst;
}

int run(const Options &opts) {
  ParseOptions parseOptions;
  parseOptions.allowUndefinedValues = opts.allowUndefined;
  if (opts.splitInputFile)
    return runSplit(opts, parseOptions);
  std::unique_ptr<Model> model = readInput(opts.input, parseOptions);
  if (int code = process(*model, opts))
    return code;
  if (opts.emit == "package") {
#ifdef ANEFIT_HAVE_MODEL_IO
    if (opts.output.empty())
      throw InputError::at("-o", "", "--emit package needs an output path");
    saveModel(*model, opts.output);
    return kExitOk;
#else
    throw InputError::at("--emit", "", "this build cannot write packages");
#endif
  }
  std::string text = modelToString(*model);
  if (opts.output.empty() || opts.output == "-")
    std::cout << text;
  else
    writeFileAtomically(opts.output, text);
  return kExitOk;
}

} // namespace

int main(int argc, char **argv) {
  CLI::App app{"anefit-opt: reads a model (MIL text or any format anefit reads), verifies it, "
               "runs passes and prints MIL text."};
  Options opts;
  CLI::Option *input =
      app.add_option("INPUT", opts.input, "MIL text, .mlpackage, .mlmodel or .pte; '-' for stdin");
#ifdef ANEFIT_HAVE_OPS
  // The op table as markdown needs no input; docs/ops.md is its output.
  bool listOps = false;
  CLI::Option *listOpsFlag =
      app.add_flag("--list-ops", listOps, "print the op table as markdown (docs/ops.md) and exit");
  input->excludes(listOpsFlag);
  listOpsFlag->excludes(input);
#endif
  app.add_option("-o,--output", opts.output, "where to write the result (default: stdout)");
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
#ifdef ANEFIT_HAVE_OPS
  if (listOps) {
    std::cout << opsMarkdown();
    return kExitOk;
  }
#endif
  if (input->count() == 0) {
    std::cerr << "INPUT is required\nRun with --help for more information.\n";
    return kExitInputError;
  }
  try {
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
