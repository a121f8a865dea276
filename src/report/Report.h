//===- Report.h - Rendering check reports and the rules table ---*- C++ -*-===//
//
// Text for people, JSON (schema "anefit.check/2", docs/check.md) and SARIF
// 2.1.0 for code-scanning tools; and the rules table as text, JSON and the
// Markdown of docs/rules.md. All output is deterministic.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ane/Checker.h"

#include <string>
#include <string_view>
#include <vector>

namespace anefit::ane {

/// The JSON schema id written into every check report.
/// Version 2: verdict `at-risk`, finding level/certainty and both sides'
/// evidence; `ane-fails` now means an uncontested failure.
inline constexpr std::string_view kCheckSchema = "anefit.check/2";
/// The JSON schema id of a program's reports: every Core ML delegate of an
/// ExecuTorch program, each an anefit.check/2 report, in program order.
inline constexpr std::string_view kCheckProgramSchema = "anefit.check-program/1";

struct TextOptions {
  bool color = false;
  /// Findings printed per rule before "... and N more".
  size_t maxPerRule = 8;
  /// Segments listed per function before "... and N more".
  size_t maxSegments = 12;
  /// Also print every op with its placement and deciding rules.
  bool placement = false;
};

std::string renderText(const CheckReport &report, const TextOptions &options = {});
std::string renderJson(const CheckReport &report);
std::string renderSarif(const CheckReport &report);
/// The `observation` object of the JSON report (what a Mac observed of
/// the model's probe kit, ane/Observations.h).
std::string renderObservationJson(const Observation &observation);

/// The reports of every Core ML delegate of the program at `programPath`, in
/// program order (each report's modelPath names its delegate, "p.pte#N"):
/// each delegate's text report then one line with the program's verdict (the
/// worst delegate's); JSON "anefit.check-program/1" holding each delegate's
/// anefit.check/2 report; SARIF with one run whose results name their
/// delegate as the artifact.
std::string renderProgramText(const std::vector<CheckReport> &reports, std::string_view programPath,
                              const TextOptions &options = {});
std::string renderProgramJson(const std::vector<CheckReport> &reports,
                              std::string_view programPath);
std::string renderProgramSarif(const std::vector<CheckReport> &reports,
                               std::string_view programPath);

/// The rules table: a plain listing, JSON, and docs/rules.md.
std::string rulesText();
/// One rule in full: scope, effect, and every piece of evidence with its
/// side, certainty and quote (`anefit rules ID`).
std::string ruleText(const RuleInfo &rule);
/// "isolated", "together", ...: the strongest certainty among a rule's
/// failing cases, or "none".
std::string_view strongestFailure(const RuleInfo &rule);
std::string rulesJson();
/// docs/rules.md; `corpusSection` (the evidence-corpus confusion table,
/// Evidence.h) is placed after the rules when given.
std::string rulesMarkdown(std::string_view corpusSection = {});

} // namespace anefit::ane
