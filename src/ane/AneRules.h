//===- AneRules.h - The ANE preflight rules table ---------------*- C++ -*-===//
//
// The rules `anefit check` applies, generated from AneRules.def, and the
// target description (chip, OS, compute units) that gates them. Everything
// that prints a rule (CLI help, `anefit rules`, docs/rules.md, SARIF) reads
// this table.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace anefit::ane {

/// What a rule predicts when it fires, from least to most severe; `--fail-on`
/// compares with this order. A runtime failure ranks above a compile failure
/// because nothing before the first prediction reveals it.
enum class Effect : uint8_t { Slow, Fallback, WrongNumerics, CompileFail, RuntimeFail };

/// How well the evidence behind a rule is established.
enum class Confidence : uint8_t { AppleDocumented, Measured, Folklore };

/// Whether a rule is checked once per operation or once per function.
enum class RuleKind : uint8_t { Op, Function };

/// Which targets a rule applies to.
enum class Gate : uint8_t { All, Phone, NoTexture, NoSinCos, Ios26 };

/// The compiler path a rule's failing evidence was measured on. Three tool
/// chains reach the same silicon; only classic Core ML is what `check` models.
enum class EvidencePath : uint8_t {
  CoreMl, ///< coremltools -> Core ML with MLComputeUnits (what the checker targets)
  CoreAi, ///< Apple's Core AI stack (coreai-torch / coreai-build)
  Direct, ///< the private in-memory ANE compiler used by reverse-engineering projects
};
/// "core-ml", "core-ai", "direct".
std::string_view evidencePathName(EvidencePath p);

/// How sure a finding is. A contested failure makes the verdict `at-risk`.
enum class Certainty : uint8_t {
  Confirmed, ///< the failing evidence covers this case and nothing public contradicts it
  Contested, ///< public working evidence covers this case too, or the failure was seen off Core ML
};
std::string_view certaintyName(Certainty c);

/// A finding's severity for `--fail-on`, SARIF levels and exit codes: its
/// effect, with a contested failure ranked `at-risk`, between wrong numerics
/// and a compile failure.
enum class Level : uint8_t { Slow, Fallback, WrongNumerics, AtRisk, CompileFail, RuntimeFail };
/// "slow", "fallback", "wrong-numerics", "at-risk", "compile-fail", "runtime-fail".
std::string_view levelName(Level l);
std::optional<Level> levelFromName(std::string_view name);
/// Every level's name, most severe first: what `--fail-on` (and Python's
/// `fail_on`) takes. With `notes`, a name that needs it says what it means:
/// "at-risk (a contested failure)".
std::vector<std::string> levelNames(bool notes = false);
/// The level called `name`; otherwise throws InputError "OPTION: expected
/// one of: runtime-fail, ..., slow, found 'NAME'" (the names of levelNames).
Level parseLevel(const std::string &name, const std::string &option);
Level levelOf(Effect e, Certainty c);

enum class RuleId : uint16_t {
#define ANE_RULE(Enum, Code, Kind, Effect, Conf, Gate, Path, Title, Scope, Settle, Fix) Enum,
#include "ane/AneRules.def"
};

/// Which side of a rule a piece of evidence is on.
enum class EvidenceSide : uint8_t {
  Fails, ///< the pattern fails, falls back or computes wrong numbers
  Works, ///< the pattern runs on the ANE: the case bounds the rule
  Ours,  ///< a threshold or scope of the rule no source states
};
/// "fails", "works", "ours".
std::string_view evidenceSideName(EvidenceSide s);

/// How a piece of evidence established its outcome, strongest first.
enum class EvidenceCertainty : uint8_t {
  Isolated,  ///< observed for this pattern alone
  Together,  ///< observed only on models with other suspects
  Statement, ///< a maintainer's or author's statement without a log
  Inferred,  ///< our inference from indirect evidence
};
/// "isolated", "together", "statement", "inferred".
std::string_view evidenceCertaintyName(EvidenceCertainty c);
std::optional<EvidenceCertainty> evidenceCertaintyFromName(std::string_view name);
/// One line for people: "observed in isolation", ...
std::string_view evidenceCertaintyDescription(EvidenceCertainty c);

/// One public case behind a rule (a row of RuleEvidence.def).
struct EvidenceCase {
  RuleId rule;
  EvidenceSide side;
  EvidenceCertainty certainty;
  std::string_view url;   ///< empty for a threshold that is ours
  std::string_view quote; ///< verbatim, at most two sentences; empty when unread
  std::string_view what;  ///< what it shows, in our words
};

/// Every row of RuleEvidence.def, in table order.
std::span<const EvidenceCase> allEvidence();

struct RuleInfo {
  RuleId id;
  std::string_view code; ///< stable id, "ANE-STATE-001"
  RuleKind kind;
  Effect effect; ///< default effect; a finding may state a milder one
  Confidence confidence;
  Gate gate;
  EvidencePath path; ///< where the failing evidence was measured
  std::string_view title;
  std::string_view scope;  ///< what the rule matches, for people
  std::string_view settle; ///< the Mac check that settles an at-risk finding
  std::string_view fix;

  /// Its rows of RuleEvidence.def on each side.
  std::vector<EvidenceCase> failCases() const;
  std::vector<EvidenceCase> passCases() const;
  std::vector<EvidenceCase> oursCases() const;
  /// True when a failing case was observed for the pattern alone: only then
  /// may a compile or runtime failure of the rule be reported uncontested.
  bool failureIsolated() const;
  /// The failing-evidence URLs one by one.
  std::vector<std::string_view> evidenceUrls() const;
  /// `settle`, or the generic compile-and-plan check when the row has none.
  std::string_view settleCheck() const;
};

/// Every rule, in table order.
std::span<const RuleInfo> allRules();
const RuleInfo &ruleInfo(RuleId id);
/// Looks a rule up by its stable id; nullopt if unknown.
std::optional<RuleId> ruleFromCode(std::string_view code);

/// "compile-fail", "runtime-fail", "wrong-numerics", "fallback", "slow".
std::string_view effectName(Effect e);
std::optional<Effect> effectFromName(std::string_view name);
/// "apple-documented", "measured", "folklore".
std::string_view confidenceName(Confidence c);
/// Describes a gate for people ("all targets", "iPhone/iPad chips", ...).
std::string_view gateDescription(Gate g);

enum class Chip : uint8_t {
#define CHIP(Enum, Name, Display, Phone, Axis, KW, KH, Texture, SinCos) Enum,
#include "ane/Chips.def"
};

struct ChipInfo {
  Chip chip;
  std::string_view name;    ///< option spelling, "m4"
  std::string_view display; ///< "M4"
  bool phone;
  int64_t axisLimit;
  int64_t kernelWidth;
  int64_t kernelHeight;
  bool texture;
  bool sinCos;
};

std::span<const ChipInfo> allChips();
const ChipInfo &chipInfo(Chip c);
std::optional<Chip> chipFromName(std::string_view name);

/// Target OS. `Any` is conservative: OS-gated rules apply.
enum class TargetOs : uint8_t { Any, Ios17, Ios18, Ios26 };
std::string_view osName(TargetOs os);
std::optional<TargetOs> osFromName(std::string_view name);

/// The compute units the app will request.
enum class ComputeUnits : uint8_t { CpuAndNe, All };
std::string_view computeUnitsName(ComputeUnits cu);
std::optional<ComputeUnits> computeUnitsFromName(std::string_view name);

/// True if a rule with gate `g` applies to this chip and OS.
bool gateApplies(Gate g, Chip chip, TargetOs os);

} // namespace anefit::ane
