//===- ProbeFuzzer.cpp - Fuzz the probe plan and observations readers -----===//
//
// parseProbePlan and parseObservations must accept or reject any text with
// an InputError. An accepted plan must come back the same through its JSON
// form, and walking any accepted observation's trees must end (the walk
// follows node indices the reader bounded).
//
//===----------------------------------------------------------------------===//
#include "ane/Observations.h"

#include "support/Error.h"

#include <cstdlib>
#include <string_view>

using namespace anefit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view text(reinterpret_cast<const char *>(data), size);
  try {
    ane::ProbePlan plan = ane::parseProbePlan(text, "plan.json");
    std::string once = ane::renderProbePlan(plan);
    if (ane::renderProbePlan(ane::parseProbePlan(once, "again")) != once)
      std::abort();
  } catch (const InputError &) {
  }
  try {
    ane::ProbeObservations obs = ane::parseObservations(text, "observations.json");
    for (size_t m = 0; m < obs.plan.models.size(); ++m)
      (void)ane::concludeProbe(obs, m);
  } catch (const InputError &) {
  }
  return 0;
}
