//===- Report.h - Rendering check reports and the rules table ---*- C++ -*-===//
//
// Text for people, JSON (schema "anefit.check/1", docs/check.md) and SARIF
// 2.1.0 for code-scanning tools; and the rules table as text, JSON and the
// Markdown of docs/rules.md. All output is deterministic.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ane/Checker.h"

#include <string>

namespace anefit::ane {

/// The JSON schema id written into every check report.
inline constexpr std::string_view kCheckSchema = "anefit.check/1";

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

/// The rules table: a plain listing, JSON, and docs/rules.md.
std::string rulesText();
std::string rulesJson();
std::string rulesMarkdown();

} // namespace anefit::ane
