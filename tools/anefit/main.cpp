//===- main.cpp - The anefit command-line program -------------------------===//
//
// A thin driver: every verb lives in its own <Verb>Command.cpp and registers
// itself through Verbs.def.
//
//===----------------------------------------------------------------------===//
#include "Command.h"

#include "support/Error.h"
#include "support/FileSystem.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <unistd.h>

namespace anefit::cli {

int runGuarded(const std::function<int()> &body) {
  try {
    // Everything the verb reads is remembered; no output may go over it.
    InputScope inputs;
    return body();
  } catch (const InputError &e) {
    std::cerr << "anefit: error: " << e.what() << "\n";
    return kExitInputError;
  } catch (const std::bad_alloc &) {
    std::cerr << "anefit: error: out of memory\n";
    return kExitInputError;
  } catch (const std::exception &e) {
    std::cerr << "anefit: error: " << e.what() << "\n";
    return kExitInputError;
  }
}

bool useColor() {
  const char *noColor = std::getenv("NO_COLOR");
  return isatty(fileno(stdout)) && !(noColor && *noColor);
}

std::string formatFor(const std::string &format, const std::string &output) {
  if (!format.empty())
    return format;
  std::string ext = std::filesystem::path(output).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (ext == ".json")
    return "json";
  if (ext == ".sarif")
    return "sarif";
  if (ext == ".html" || ext == ".htm")
    return "html";
  return "text";
}

} // namespace anefit::cli

int main(int argc, char **argv) {
  using namespace anefit::cli;
  CLI::App app{"anefit: will your Core ML model run on the Apple Neural Engine?\n"
               "Checks, fixes, splits and runs Core ML ML Programs on any OS."};
  app.set_version_flag("--version", "anefit 0.1.0");
  app.require_subcommand(1);
  app.footer("Run 'anefit VERB --help' for the options of a verb.\n"
             "Exit codes: 0 ok, 1 findings at or above the failure threshold, 2 usage or "
             "input error.");
  VerbResult result;
#define VERB(Name, Summary, Register) Register(app, result);
#include "Verbs.def"
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitInputError;
  }
  return result.exitCode;
}
