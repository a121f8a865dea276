//===- Evidence.h - Grade the checker on public repro cases -----*- C++ -*-===//
//
// The evidence corpus (tests/fixtures/evidence/cases.json and the case files
// it names) holds public observations of models on the ANE, failing and
// working, each rebuilt as a small model with its source, a quote and how the
// outcome was established. The corpus is split by source project into the
// part the rules were written from and a held-out part they never saw. This
// grades the checker's verdict on each case against the public outcome and
// renders the tables docs/rules.md prints, per part.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ane/Checker.h"
#include "ane/Coverage.h"

#include <functional>
#include <memory>
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

/// Which part of the corpus a case is in (by its source project).
enum class CorpusPart : uint8_t {
  Derive,  ///< the rules were written from these projects' reports
  HeldOut, ///< no rule was written or narrowed from these projects' reports
  Fresh,   ///< held out too: the latest sweep's projects, scored apart from HeldOut
};
/// The number of CorpusPart values (for per-part tables).
inline constexpr size_t kCorpusParts = 3;
/// "derive", "held-out", "held-out (fresh)".
std::string_view corpusPartName(CorpusPart p);

struct CorpusCase {
  std::string name;
  std::string file; ///< model path relative to the corpus directory ("" if not rebuilt)
  Outcome outcome = Outcome::Works;
  std::string rule;           ///< the rule the case bounds (may be empty for sweep cases)
  std::string source;         ///< public URL
  std::string what;           ///< what the source shows
  std::string verdict;        ///< the verdict `check` is pinned to give (may be empty)
  std::string op;             ///< the op the outcome is about (may be empty)
  std::string project = {};   ///< the split key: owner/repo or host (from `source` when absent)
  std::string quote = {};     ///< verbatim from the source
  std::string certainty = {}; ///< isolated, together, statement, inferred
  /// reported (the model reproduces the report), approximate (parts guessed,
  /// `what` says which) or guess (no reported model: never scored).
  std::string rebuilt = "reported";
  /// Per-op placement where the source reports it: op name -> ane, cpu, gpu.
  std::vector<std::pair<std::string, std::string>> placement = {};
  CorpusPart part = CorpusPart::Derive;
};

/// Parses one case file (schema "anefit.evidence/1" or "/2"); throws
/// InputError naming `path` on malformed input.
std::vector<CorpusCase> parseCorpusCases(std::string_view json, const std::string &path);

/// The split key of a source URL: "owner/repo" on GitHub, else the host.
std::string corpusProject(const std::string &url);

/// Reads `dir`/cases.json, the case files its "groups" name, and its
/// "heldout" and "fresh" project lists, which set each case's part (a project
/// on both lists is an error). Throws InputError.
std::vector<CorpusCase> loadCorpus(const std::string &dir);

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
  /// Reported per-op placements the prediction agrees with, of those found.
  size_t placementAgreed = 0, placementCompared = 0;
};

/// Grades one case from the checker's report on its model.
EvidenceResult gradeEvidence(const CorpusCase &c, const CheckReport &report);

/// Loads a model of the corpus by path (the caller owns model loading; weights
/// need not be opened).
using CorpusLoader = std::function<std::unique_ptr<Model>(const std::string &)>;

/// The patterns of the working cases of the corpus: of the derive part only
/// (`derivePartOnly`), or of all of it (the built-in Coverage.def).
Coverage corpusCoverage(const std::string &dir, const std::vector<CorpusCase> &cases,
                        const CorpusLoader &load, bool derivePartOnly);

/// Loads the corpus (loadCorpus) and grades every rebuilt case, each checked
/// with the coverage of the derive part's working cases, so that the held-out
/// part is judged on what the rules and the coverage could have known.
/// Throws InputError.
std::vector<EvidenceResult> gradeCorpus(const std::string &dir, const CorpusLoader &load,
                                        const std::vector<RuleId> &ignore = {});

/// The "Evidence corpus" section of docs/rules.md: the score per part
/// (observed failures missed, caught as at-risk, caught as ane-fails; working
/// models called at-risk or ane-fails; op placement agreement) and every case
/// with its source, certainty, verdict and grade.
/// `withoutCoverage`, when given, is the same corpus graded without
/// ANE-COV-001: its score rows show what the coverage rule costs and buys.
std::string evidenceMarkdown(const std::vector<EvidenceResult> &results,
                             const std::vector<EvidenceResult> &withoutCoverage = {});

/// docs/rules.md's corpus section for the corpus in `dir`: graded with and
/// without ANE-COV-001.
std::string corpusMarkdown(const std::string &dir, const CorpusLoader &load);

} // namespace anefit::ane
