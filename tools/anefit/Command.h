//===- Command.h - Shared plumbing for anefit verbs -------------*- C++ -*-===//
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>

namespace anefit::ane {
struct CheckOptions;
} // namespace anefit::ane

namespace anefit::cli {

/// Exit codes shared by every verb.
enum ExitCode : int {
  kExitOk = 0,         ///< success, no finding at or above the failure threshold
  kExitFindings = 1,   ///< the command worked and found problems
  kExitInputError = 2, ///< usage error or malformed input
};

struct VerbResult {
  int exitCode = kExitOk;
};

/// Runs `body`, turning InputError and other exceptions into a one-line
/// message on stderr ("anefit: error: ...") and exit code 2.
int runGuarded(const std::function<int()> &body);

/// True if stdout is a terminal and NO_COLOR is not set.
bool useColor();

/// Adds --max-memory SIZE to a verb that runs models in the interpreter.
void addMaxMemoryOption(CLI::App *cmd, std::string &value);
/// Sets the interpreter's memory budget from a --max-memory value ("8G",
/// "512M", "1073741824"); empty keeps the default. Throws InputError.
void applyMaxMemory(const std::string &value);

/// --text and --tokenizer come together (check --numerics, fix): one
/// without the other is an InputError naming the missing one.
void requireTextWithTokenizer(const std::string &text, const std::string &tokenizer);

/// The range checks of numeric options, made here for every verb: the text
/// is read whole as a number (no trailing characters, no clamping:
/// 99999999999999999999 is out of range, not INT64_MAX), NaN and the
/// infinities are refused, and the value must lie in [min, max]. Each
/// numeric option takes one with ->check().
CLI::Validator integerIn(int64_t min, int64_t max);
CLI::Validator unsignedIn(uint64_t min, uint64_t max);
CLI::Validator realIn(double min, double max);
/// A size option (--max-memory, --budget): the text must be one
/// MemoryBudget::parseLimit reads ("8G", "512M", "1073741824"); an empty
/// one, as from an unset shell variable, is refused, not taken as unset.
/// `example` names sizes in the message ("a size such as 1G, 500M or ...").
CLI::Validator sizeIn(std::string example);
/// Steps a verb steps a model for: 1 .. kMaxSteps.
inline constexpr int64_t kMaxSteps = 1000000000;
/// The largest tolerance or error bound an option takes (finite).
inline constexpr double kMaxTolerance = 1e30;

/// The target a verb predicts placement for: --chip, --os, --compute-units.
struct TargetCliOptions {
  std::string chip = "any";
  std::string os = "any";
  std::string computeUnits = "cpu_and_ne";
};
/// Adds the target options to a verb (check, fix).
void addTargetOptions(CLI::App *cmd, TargetCliOptions &target);
/// Sets the chip, OS and compute units of `options`; throws InputError for
/// an unknown spelling.
void applyTargetOptions(const TargetCliOptions &target, ane::CheckOptions &options);

/// The --format to use: `format` if given, else the one the -o file's
/// extension names (.json, .sarif, .html/.htm), else "text".
std::string formatFor(const std::string &format, const std::string &output);

/// Parses `argv` (argv[0] is the program name), runs the verb it names and
/// returns the exit code. Never throws: errors are printed as one line.
int runCommandLine(int argc, const char *const *argv);

/// "Convert between .mlpackage, .mlmodel and .mil; out of .pte, too": the
/// writable and the read-only formats of ModelFormats.def.
std::string convertSummary();

#define VERB(Name, Summary, Register) void Register(CLI::App &verb, VerbResult &result);
#include "Verbs.def"

} // namespace anefit::cli
