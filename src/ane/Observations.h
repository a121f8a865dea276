//===- Observations.h - What a Mac observed of a probe kit ------*- C++ -*-===//
//
// `anefit probe` writes a kit of variants of a model and a plan for bisecting
// its suspects (probe/Probe.h); the kit's runner compiles them on a Mac and
// writes an observations file ("anefit.probe-observations/1", docs/probe.md).
// This header reads that file, walks the plan's decision tree with the
// observed outcomes to name the culprit, and lays the observation over a
// check report: observed failures replace predicted ones, findings the Mac
// refuted leave the verdict, and each suspect's prediction is set against
// what was observed.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ane/Checker.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace anefit::ane {

/// Schema ids of the kit's plan and of the runner's observations.
inline constexpr std::string_view kProbePlanSchema = "anefit.probe-plan/1";
inline constexpr std::string_view kProbeObservationsSchema = "anefit.probe-observations/1";

/// A model's identity across files: FNV-1a (64 bits) of its MIL text, as
/// "fnv1a64:<16 hex digits>". Reads types and weight references only.
std::string programHash(const Model &model);

/// One suspect of a kit: a pass that removes some of the model's blocking
/// rules (removable), or a rule or unverified pattern no pass removes,
/// tested only in its sub-program.
struct ProbeSuspect {
  std::string id;                 ///< "S1"
  std::vector<std::string> rules; ///< rule ids behind it
  std::string pattern;            ///< an unverified coverage pattern; empty for a rule
  std::string level;              ///< predicted level ("at-risk", "compile-fail", "unverified")
  std::string pass;               ///< the fix pass that removes it; empty: not removable
  size_t ops = 0;                 ///< ops it fires on
  std::string firstOp;            ///< the first of them in program order
  std::string note;               ///< why a pass that names its rules does not remove it
};

/// One node of the plan's decision tree: compile `variant`, go to `bad` when
/// it fails (or runs with no op on the ANE) and to `good` when it runs on
/// the ANE; or an end, which names a conclusion and the sub-programs that
/// confirm it.
struct ProbeNode {
  std::string variant; ///< empty for an end node
  int bad = -1, good = -1;
  /// End nodes: "no-failure" (the original runs), "culprit" (the suspects
  /// named), "unnamed" (every removable suspect removed, still failing).
  std::string conclusion;
  std::vector<std::string> suspects;
  std::vector<std::string> confirm; ///< sub-program variants run after this end
};

struct ProbeVariant {
  std::string name;               ///< "original", "fixed-all", "keep-S1", "drop-S2", "slice-S3"
  std::string role;               ///< original, fixed-all, keep, drop, slice
  std::string path;               ///< the package, relative to the kit
  std::vector<std::string> keeps; ///< suspects still in it (slice: the one it holds)
  std::string pipeline;           ///< the passes that made it from the original
  std::string programHash;
  std::string note; ///< why it was not written, or what it holds
};

/// The plan of one Core ML model of the kit (one delegate of a .pte).
struct ProbeModelPlan {
  std::string label; ///< "forward/delegate 0 (CoreMLBackend)", or the model path
  std::string programHash;
  std::string predictedVerdict;
  std::vector<ProbeSuspect> suspects;
  std::vector<ProbeVariant> variants;
  std::vector<ProbeNode> nodes; ///< node 0 is the root
  /// Compiles on the longest path of the tree, sub-program checks excluded.
  size_t treeDepth = 0;
};

struct ProbePlan {
  std::string source; ///< the model the kit was made from, as given
  std::vector<ProbeModelPlan> models;
};

/// What the runner observed of one variant.
struct VariantRun {
  size_t model = 0; ///< index into ProbePlan::models
  std::string variant;
  /// "ane" (ran, some op on the ANE), "ran" (ran, placement unknown: no
  /// MLComputePlan), "off-ane" (ran with no op on the ANE), "load-failed",
  /// "predict-failed", "timeout", "crashed", "invalid" (coremltools refused
  /// the package before any compile).
  std::string outcome;
  std::string error;
  std::string sha256;
  double seconds = 0;
  size_t aneOps = 0, cpuOps = 0, gpuOps = 0;
  /// The outputs' largest |difference| between CPU_AND_NE and CPU_ONLY.
  std::optional<double> maxAbsDiffVsCpu;
  std::map<std::string, std::string> opDevices; ///< op name -> "ane", "cpu", "gpu"
};

struct ProbeObservations {
  std::string path;
  std::map<std::string, std::string> host; ///< os, chip, python, coremltools
  ProbePlan plan;
  std::vector<VariantRun> runs;
};

/// Reads the plan of a kit (plan.json) or an observations file. Throws
/// InputError (one line: file, place, expected vs found).
ProbePlan readProbePlan(const std::string &path);
ProbePlan parseProbePlan(std::string_view json, const std::string &origin);
std::string renderProbePlan(const ProbePlan &plan);
ProbeObservations readObservations(const std::string &path);
ProbeObservations parseObservations(std::string_view json, const std::string &origin);

/// True when an outcome says the variant did not run on the ANE.
bool outcomeFails(std::string_view outcome);

/// One suspect's prediction against what was observed.
struct SuspectVerdict {
  std::string suspect;
  std::vector<std::string> rules;
  std::string pattern;
  std::string predicted; ///< its level
  /// The outcome of its sub-program ("" when not run).
  std::string alone;
  /// "culprit" (named by the tree), "not a cause" (a variant holding it
  /// ran), "fails alone" / "runs alone" (its sub-program), "inconclusive"
  /// (its sub-program ran off the ANE), "not tested".
  std::string observed;
  /// Right, wrong or unknown, as the prediction-vs-observation table says.
  std::string agreement;
};

/// The conclusion for one model of the plan.
struct Observation {
  std::string observationsPath;
  std::map<std::string, std::string> host;
  std::string originalOutcome; ///< empty: the original was not observed
  std::string originalError;
  std::string conclusion;            ///< the end node reached ("" when the walk stopped early)
  std::vector<std::string> culprits; ///< suspect ids
  std::vector<SuspectVerdict> suspects;
  /// Variants run, in the order the tree visited them, with their outcomes.
  std::vector<std::pair<std::string, std::string>> path;
  /// Ops of the original whose device the Mac reported: how many, and how
  /// many the prediction placed the same way (ANE or not).
  size_t opsObserved = 0, placementAgrees = 0;
  size_t observedAneOps = 0;
  std::optional<double> maxAbsDiffVsCpu;
  /// The predicted verdict the observation replaced.
  Verdict predictedVerdict = Verdict::Ane;
};

/// The level of an observed failure of the original (`--fail-on`): a
/// failed prediction runtime-fail, any other failure compile-fail; none
/// when it ran or was not observed.
std::optional<Level> observedFailureLevel(const Observation &o);

/// Walks model `m`'s tree with the observed outcomes.
Observation concludeProbe(const ProbeObservations &obs, size_t m);

/// Lays `obs` over `report` (a check of the model the kit was made from,
/// matched by programHash(model)): the conclusion is stored in
/// report.observation; findings of refuted suspects leave report.findings
/// (kept in Observation::suspects); culprit findings become confirmed and
/// say so; the verdicts follow the observation. `position` is the model's
/// place among the delegates of its program: identical delegates have the
/// same hash, and the plan's model at that place is taken when it matches.
/// Throws InputError when no model of the plan has the model's program hash.
/// Returns the index of the plan's model that was laid over the report.
size_t applyObservations(CheckReport &report, const Model &model, const ProbeObservations &obs,
                         size_t position = 0);

} // namespace anefit::ane
