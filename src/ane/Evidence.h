//===- Evidence.h - Grade the checker on public repro cases -----*- C++ -*-===//
//
// The evidence corpus (tests/fixtures/evidence/cases.json) pairs, per rule,
// the smallest model reproducing a publicly reported failure with the
// smallest reproducing a publicly reported working case. This grades the
// checker's verdict on each case against the public outcome and renders the
// confusion table docs/rules.md prints (known failures caught, known-working
// models passed).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ane/Checker.h"

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace anefit::ane {

/// What the public source reports for a case.
enum class Outcome : uint8_t {
  Fails,         ///< the ANE compile or first prediction fails
  FallsBack,     ///< an op (or the model) is placed off the ANE
  WrongNumerics, ///< runs on the ANE with wrong results
  Works,         ///< runs on the ANE
};
/// "fails", "falls-back", "wrong-numerics", "works".
std::string_view outcomeName(Outcome o);

struct CorpusCase {
  std::string name;
  std::string file; ///< model path relative to the corpus directory
  Outcome outcome = Outcome::Works;
  std::string rule;    ///< the rule the case bounds
  std::string source;  ///< public URL
  std::string what;    ///< what the source shows
  std::string verdict; ///< the verdict `check` is expected to give
  std::string op;      ///< the op the outcome is about (may be empty)
};

/// Parses cases.json (schema "anefit.evidence/1"); throws InputError naming
/// `path` on malformed input.
std::vector<CorpusCase> parseCorpusCases(std::string_view json, const std::string &path);

/// How the checker did on one case.
enum class Grade : uint8_t {
  Caught,        ///< a known failure predicted as ane-fails, fallback or wrong numerics
  CaughtAtRisk,  ///< a known failure predicted at-risk
  Missed,        ///< a known failure predicted to run
  Passed,        ///< a known-working case predicted to run (ane or partial)
  AtRisk,        ///< a known-working case predicted at-risk
  FalseFallback, ///< a known-working case (or its op) predicted off the ANE
  FalseAlarm,    ///< a known-working case predicted ane-fails
};
std::string_view gradeName(Grade g);

struct EvidenceResult {
  CorpusCase c;
  Verdict verdict = Verdict::Ane;
  Grade grade = Grade::Passed;
  /// The contradicting evidence of every at-risk finding (empty strings mean
  /// an at-risk finding named none).
  std::vector<std::string> contradictions;
};

/// Grades one case from the checker's report on its model.
EvidenceResult gradeEvidence(const CorpusCase &c, const CheckReport &report);

/// Reads `dir`/cases.json and grades every case; `check` loads and checks the
/// model at a path (the caller owns model loading). Throws InputError.
std::vector<EvidenceResult>
gradeCorpus(const std::string &dir, const std::function<CheckReport(const std::string &)> &check);

/// The "Evidence corpus" section of docs/rules.md: the confusion table and
/// every case with its source, expected and actual verdict and grade.
std::string evidenceMarkdown(const std::vector<EvidenceResult> &results);

} // namespace anefit::ane
