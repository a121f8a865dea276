//===- Probe.h - The bisection kit a Mac runs ------------------*- C++ -*-===//
//
// `anefit probe`: for a model whose check predicts (or fails to predict) an
// ANE failure, writes the experiment that settles it on a Mac. The suspects
// are the model's blocking findings, grouped by the fix pass that removes
// them, and the risky patterns no working case of the corpus holds; the
// variants are the model, the model with every removable suspect removed,
// with one removed, with all but one removed, and per suspect the smallest
// sub-program that still holds it (its op and the integer arithmetic that
// feeds its indices, other operands as function inputs). A decision tree
// orders the compiles so the culprit is named in about log2(suspects) + 2
// compiles, plus one sub-program check. The kit holds the packages, the
// plan (plan.json, ane/Observations.h), a README with the plan in words
// and the runner script (run_probe.py) that writes the observations
// `check --observations` reads.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ane/Checker.h"
#include "ane/Observations.h"
#include "ir/Model.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace anefit::probe {

/// The runner script the kit carries (run_probe.py, compiled in).
std::string_view runnerScript();

/// One model's part of a kit: its plan and the variants to write, in the
/// order of plan.variants (null for a variant that could not be made; its
/// note says why).
struct ModelKit {
  ane::ProbeModelPlan plan;
  std::vector<std::unique_ptr<Model>> variants;
};

/// Plans the kit of `model` (checked as `report`); variant packages are
/// named `<prefix><variant>.mlpackage`. Runs the fix passes on copies (the
/// weights must be open for passes that rewrite them). Throws InputError.
ModelKit planModelKit(const Model &model, const ane::CheckReport &report, const std::string &prefix,
                      const ane::CheckOptions &target = {});

/// The kit's README: the model, its suspects, the plan in words, how to run
/// it and what comes back.
std::string kitReadme(const ane::ProbePlan &plan, const std::vector<uint64_t> &bytesPerModel);

struct ProbeOptions {
  /// The target the suspects are predicted for (chip, OS, compute units).
  ane::CheckOptions target;
  /// Replace an existing kit directory's files (never an input).
  bool force = false;
  /// Called as each stage starts ("check", "variants", "write <name>").
  std::function<void(std::string_view stage)> progress;
};

struct ProbeResult {
  ane::ProbePlan plan;
  std::string dir;
  std::vector<std::string> written; ///< files and packages, relative to dir
  uint64_t bytes = 0;               ///< the kit's size
};

/// Writes the kit of the model at `modelPath` (.mlpackage, .mlmodel, .mil,
/// or a .pte: each Core ML delegate) into the directory `dir`. Throws
/// InputError (bad input, an output inside an input, an existing kit without
/// `force`).
ProbeResult writeProbeKit(const std::string &modelPath, const std::string &dir,
                          const ProbeOptions &options = {});

} // namespace anefit::probe
