//===- Pass.h - Passes, pass options and the pass manager ------*- C++ -*-===//
//
// A pass rewrites a whole Model (description included: state-to-io changes
// the model's inputs and outputs). Passes are named in Passes.def; a pipeline
// is a comma-separated list of names with options in braces, e.g.
// "state-to-io{keep-largest output-suffix=_next},canonicalize,dce". The
// PassManager parses such a string, runs the passes in order and collects
// what each one changed, for `anefit fix` and `anefit-opt` to print.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ane/AneRules.h"
#include "ir/Model.h"
#include "ir/StateMap.h"
#include "support/Diagnostic.h"

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace anefit {

/// How an option's value is written.
enum class PassOptionKind { Flag, String, List, Int };

/// One PASS_OPTION row of Passes.def.
struct PassOptionInfo {
  std::string_view name;
  PassOptionKind kind;
  std::string_view defaultValue;
  std::string_view help;
};

/// One PASS row of Passes.def with its options.
struct PassInfo {
  std::string_view cliName;
  std::string_view summary;
  std::string_view description;
  std::string_view before;
  std::string_view after;
  std::vector<PassOptionInfo> options;
  /// Options the before/after example runs with (PASS_EXAMPLE_OPTIONS);
  /// empty: the defaults.
  std::string_view exampleOptions;
};

/// One PASS_FIX row of Passes.def: how `anefit fix` picks a pass.
struct FixUse {
  std::string_view cliName;
  /// Options fix runs the pass with ("keep-largest").
  std::string_view options;
  /// Rule ids whose blocking findings the pass removes; empty for clean-up.
  std::vector<std::string_view> removes;
  bool isCleanup() const { return removes.empty(); }
  /// PASS_ASKED: the `anefit fix` option without which the pass is not run
  /// ("requantize"), and the pass option it sets; empty for other passes.
  std::string_view askedBy;
  std::string_view askedOption;
  /// "name" or "name{options}".
  std::string pipelineElement() const;
};

/// Every PASS_FIX row, in table order.
const std::vector<FixUse> &fixUses();
/// The passes that remove rule `ruleId`, in table order (for fix hints).
std::vector<std::string_view> passesRemoving(std::string_view ruleId);
/// The pipeline that removes the rules `ruleIds` (the blocking findings of a
/// model): every pass whose PASS_FIX row names one of them, in table order
/// with its options, then the clean-up passes; empty when no pass removes
/// any of them.
std::string pipelineRemoving(const std::vector<std::string> &ruleIds);

/// The rule's remedy text followed by the passes that apply it: "... (`anefit
/// fix` runs kv-write-static)" for a blocking rule; "... (`anefit fix --goal
/// ane` runs split-projection)" for a fallback or slow one, with the options
/// a pass run only when asked needs ("--goal ane --requantize ..."); "...
/// (`anefit fix --passes decompose-sdpa`)" for the others. The remedy alone
/// when no pass applies it.
std::string fixHint(const ane::RuleInfo &rule);

/// Every registered pass, in table order.
const std::vector<PassInfo> &passRegistry();
/// The row for `cliName`, or null.
const PassInfo *findPass(std::string_view cliName);

struct WeightCalibration; // transforms/Calibration.h

/// What a pipeline's passes may read besides the model and their options:
/// measurements of the model the fix driver made (passes never run a model).
struct PassContext {
  /// The input statistics of the layers that read each weight (requantize
  /// fits palettes and chooses forms by them); null: none measured.
  const WeightCalibration *calibration = nullptr;
};

/// Option values of one pass instance, checked against its table row. Values
/// not given on the command line take the row's default.
class PassOptions {
public:
  PassOptions() = default;
  PassOptions(const PassInfo &info, std::map<std::string, std::string> given);
  /// What the pipeline was given to read (empty when nothing).
  const PassContext &context() const { return context_; }
  void setContext(const PassContext &context) { context_ = context; }

  bool flag(std::string_view name) const;
  std::string string(std::string_view name) const;
  std::vector<std::string> list(std::string_view name) const;
  int64_t integer(std::string_view name) const;
  /// True if the option was given explicitly.
  bool given(std::string_view name) const;

private:
  const PassInfo *info_ = nullptr;
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> given_;
  PassContext context_;
  const std::string &raw(std::string_view name) const;
};

/// What running passes produced besides the rewritten model.
struct PassResult {
  /// One human-readable line per change ("state-to-io: moved state 'conv' ...").
  std::vector<std::string> changes;
  /// Warnings and notes about the program (never errors: bad input throws).
  Diagnostics diagnostics;
  /// Moved states, filled by state-to-io.
  StateMap stateMap;
  /// A pass changed values beyond floating-point rounding (requantize to
  /// fewer levels): the rewrite no longer claims the same outputs; `fix`
  /// measures the error instead.
  bool lossy = false;
  /// A pass wrote weights as the device materializes them (fp16 values of a
  /// decompressed weight the interpreter's fp32 mode keeps unrounded): the
  /// rewrite is exact as the device computes, so `fix` compares in fp16.
  bool exactInFp16 = false;
  /// A pass computes the same values in real arithmetic by other fp16
  /// roundings (scale-norm: x scaled before the square): equal to the
  /// original up to fp32 rounding, not to fp16's. `fix` proves it in fp32
  /// and measures the fp16 program against the original at fp32.
  bool exactInFp32Only = false;
};

class Pass {
public:
  virtual ~Pass() = default;
  virtual std::string_view name() const = 0;
  /// Rewrites `model`; records what it did in `result`. Throws InputError for
  /// bad options or input (unknown state names, ...).
  virtual void run(Model &model, PassResult &result) = 0;
};

/// Builds a pass from its table name and options; throws InputError for an
/// unknown pass or option, listing the known ones.
std::unique_ptr<Pass> createPass(std::string_view cliName,
                                 const std::map<std::string, std::string> &options = {},
                                 const PassContext &context = {});

/// One parsed element of a pipeline string.
struct PipelineElement {
  std::string name;
  std::map<std::string, std::string> options;
};

/// Parses "a{k=v flag},b" into elements. Options are separated by spaces;
/// a bare option name means "=true". Throws InputError naming the column of
/// the first problem.
std::vector<PipelineElement> parsePipeline(std::string_view text);

/// Runs passes in order on a model.
class PassManager {
public:
  /// Appends the passes of a pipeline string (see parsePipeline).
  void addPipeline(std::string_view text, const PassContext &context = {});
  size_t size() const { return passes_.size(); }

  /// Runs every pass; function output names present before a pass are kept
  /// (a pass may add outputs, never rename existing ones).
  PassResult run(Model &model);

private:
  std::vector<std::unique_ptr<Pass>> passes_;
};

/// Help text listing every pass with its summary and options (for --help).
std::string passHelpText();

/// A pass run on its own before/after example of Passes.def.
struct PassExampleRun {
  std::string got;  ///< the pass's result on `before`
  std::string want; ///< `after` as parsed and printed
  bool matches() const { return got == want; }
};

/// Parses the example of `info`, runs its pass on `before` and prints both
/// programs the same way (constants as literals at their uses, so an example
/// may write them either way). Throws InputError naming the pass when an
/// example does not parse.
PassExampleRun runPassExample(const PassInfo &info);

/// docs/passes.md, generated from Passes.def (`anefit-opt --list-passes`;
/// scripts/generated_docs.sh writes and checks the file).
std::string passesMarkdown();

} // namespace anefit
