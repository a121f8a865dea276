//===- CommandLine.cpp - The anefit command line, as a library ------------===//
//
// A thin driver: every verb lives in its own <Verb>Command.cpp and registers
// itself through Verbs.def. The `anefit` executable and `python -m anefit`
// both call runCommandLine.
//
//===----------------------------------------------------------------------===//
#include "Command.h"

#include "ane/Checker.h"

#include "runtime/Tensor.h"
#include "runtime/kernels/Isa.h"
#include "support/Error.h"
#include "support/FileSystem.h"
#include "support/Text.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <stdexcept>
#include <unistd.h>

namespace anefit::cli {

int runGuarded(const std::function<int()> &body) {
  // Messages hold names from files: one printable line each.
  auto report = [](std::string_view message) {
    std::cout.flush();
    std::cerr << "anefit: error: " << oneLine(message) << "\n";
    return kExitInputError;
  };
  try {
    // Everything the verb reads is remembered; no output may go over it.
    InputScope inputs;
    return body();
  } catch (const InputError &e) {
    return report(e.what());
  } catch (const std::bad_alloc &) {
    // The interpreter reports its own (with the op); this one came from
    // elsewhere: a reader, a rewrite, a report.
    return report("out of memory outside the interpreter (reading, rewriting or writing); "
                  "--max-memory bounds only the interpreter's tensors");
  } catch (const std::exception &e) {
    return report(e.what());
  }
}

namespace {

/// "-1", "0.5", "1e-3" as the options' messages quote them.
std::string numberText(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

template <class T> CLI::Validator wholeInteger(T min, T max) {
  std::string range = "an integer in " + std::to_string(min) + " .. " + std::to_string(max);
  return CLI::Validator(
      [min, max, range](std::string &text) -> std::string {
        T v{};
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec == std::errc() && end == text.data() + text.size() && v >= min && v <= max)
          return {};
        return "expected " + range + ", found '" + oneLine(text, 64) + "'";
      },
      range);
}

} // namespace

void requireTextWithTokenizer(const std::string &text, const std::string &tokenizer) {
  if (text.empty() != tokenizer.empty())
    failExpected("", text.empty() ? "--tokenizer" : "--text",
                 text.empty() ? "--text TEXT beside it" : "--tokenizer TOKENIZER.json beside it",
                 "none");
}

CLI::Validator integerIn(int64_t min, int64_t max) { return wholeInteger<int64_t>(min, max); }

CLI::Validator unsignedIn(uint64_t min, uint64_t max) { return wholeInteger<uint64_t>(min, max); }

CLI::Validator realIn(double min, double max) {
  std::string range = "a number in " + numberText(min) + " .. " + numberText(max);
  return CLI::Validator(
      [min, max, range](std::string &text) -> std::string {
        const char *begin = text.c_str();
        char *end = nullptr;
        errno = 0;
        double v = text.empty() || std::isspace(static_cast<unsigned char>(text[0]))
                       ? NAN
                       : std::strtod(begin, &end);
        if (end == begin + text.size() && std::isfinite(v) && v >= min && v <= max)
          return {};
        return "expected " + range + ", found '" + oneLine(text, 64) + "'";
      },
      range);
}

CLI::Validator sizeIn(std::string example) {
  return CLI::Validator(
      [example](std::string &text) -> std::string {
        if (runtime::MemoryBudget::parseLimit(text))
          return {};
        return "expected " + example + ", found '" + oneLine(text, 64) + "'";
      },
      example);
}

void addMaxMemoryOption(CLI::App *cmd, std::string &value) {
  cmd->add_option("--max-memory", value,
                  "Most memory the interpreter's tensors may take at once, e.g. 4G or 512M "
                  "(default: 3/4 of the memory available)")
      ->check(sizeIn("a size such as 8G, 512M or 1048576"));
}

void addTargetOptions(CLI::App *cmd, TargetCliOptions &t) {
  std::string chips;
  for (const ane::ChipInfo &c : ane::allChips())
    chips += (chips.empty() ? "" : ", ") + std::string(c.name);
  cmd->add_option("--chip", t.chip, "Target chip: " + chips)->capture_default_str();
  cmd->add_option("--os", t.os, "Target OS: any, ios17, ios18, ios26")->capture_default_str();
  cmd->add_option("--compute-units", t.computeUnits, "Compute units: cpu_and_ne, all")
      ->capture_default_str();
}

void applyTargetOptions(const TargetCliOptions &t, ane::CheckOptions &options) {
  auto chip = ane::chipFromName(t.chip);
  if (!chip) {
    std::string chips;
    for (const ane::ChipInfo &c : ane::allChips())
      chips += (chips.empty() ? "" : ", ") + std::string(c.name);
    failExpected("", "--chip", "one of: " + chips, "'" + t.chip + "'");
  }
  options.chip = *chip;
  auto os = ane::osFromName(t.os);
  if (!os)
    failExpected("", "--os", "one of: any, ios17, ios18, ios26", "'" + t.os + "'");
  options.os = *os;
  auto cu = ane::computeUnitsFromName(t.computeUnits);
  if (!cu)
    failExpected("", "--compute-units", "cpu_and_ne or all", "'" + t.computeUnits + "'");
  options.computeUnits = *cu;
}

void applyMaxMemory(const std::string &value) {
  if (value.empty())
    return;
  std::optional<uint64_t> bytes = runtime::MemoryBudget::parseLimit(value);
  if (!bytes)
    failExpected("", "--max-memory", "a size such as 8G, 512M or 1048576", "'" + value + "'");
  runtime::MemoryBudget::setLimit(*bytes);
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

int runCommandLine(int argc, const char *const *argv) {
  CLI::App app{"anefit: will your Core ML model run on the Apple Neural Engine?\n"
               "Checks, fixes, splits and runs Core ML ML Programs on any OS."};
  app.set_version_flag("--version", "anefit " ANEFIT_VERSION);
  app.require_subcommand(1);
  app.footer("Run 'anefit VERB --help' for the options of a verb.\n"
             "Exit codes: 0 ok, 1 findings at or above the failure threshold, 2 usage or "
             "input error.");
  // Names from models reach the terminal only escaped (support/Text.h); once
  // per process, since a library caller may run the command line again.
  static std::once_flag installed;
  std::call_once(installed, [] {
    TerminalSafeBuffer::install(std::cout, useColor());
    TerminalSafeBuffer::install(std::cerr, false);
  });
  // The kernels' cap (runtime/kernels/Isa.h): a name it cannot hold is
  // refused here, once, rather than ignored by the kernels.
  try {
    runtime::environmentKernelIsa();
  } catch (const std::invalid_argument &e) {
    std::cerr << "anefit: error: " << oneLine(e.what()) << "\n";
    return kExitInputError;
  }
  VerbResult result;
#define VERB(Name, Summary, Register) Register(*app.add_subcommand(#Name, Summary), result);
#include "Verbs.def"
  try {
    app.parse(argc, argv);
  } catch (const CLI::ValidationError &e) {
    // A value out of its range (integerIn, realIn, IsMember): one line, as
    // every other input error.
    std::cerr << "anefit: error: " << oneLine(e.what()) << "\n";
    return kExitInputError;
  } catch (const CLI::ParseError &e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitInputError;
  }
  return result.exitCode;
}

} // namespace anefit::cli
