//===- Fix.cpp - Rewrite a model for the ANE and prove it -----------------===//
#include "transforms/Fix.h"

#include "ir/Clone.h"
#include "ir/Verifier.h"
#include "ops/OpVerifier.h"
#include "support/Error.h"
#include "transforms/Pass.h"

#include <random>

namespace anefit {

std::vector<std::string> blockingRules(const ane::CheckReport &report) {
  std::vector<std::string> out;
  for (const ane::RuleInfo &r : ane::allRules())
    for (const ane::Finding &f : report.findings)
      if (f.rule == r.id &&
          (f.effect == ane::Effect::CompileFail || f.effect == ane::Effect::RuntimeFail)) {
        out.emplace_back(r.code);
        break;
      }
  return out;
}

std::string fixPipeline(const FixOptions &options, const ane::CheckReport &before) {
  if (!options.passes.empty())
    return options.passes;
  return pipelineRemoving(blockingRules(before));
}

runtime::Comparison compareRewrite(const Model &original, const Model &fixed, const StateMap &map,
                                   int64_t steps, uint64_t seed, runtime::Tolerance tolerance,
                                   runtime::Precision precision) {
  runtime::Comparison cmp(tolerance);
  std::mt19937_64 rng(seed);
  for (const auto &fnPtr : original.program->functions) {
    const Function &fo = *fnPtr;
    const Function *ff = fixed.program->findFunction(fo.name);
    if (!ff)
      throw InputError("fix: function '" + fo.name + "' is missing after the rewrite");
    FunctionDescription desc = original.description.describe(fo.name);
    // The original keeps every state in the interpreter; the fixed model
    // keeps only the states it did not move, the others go around the host
    // loop of the state map. What the host itself carries (ExecuTorch's
    // buffer write-back around a .pte delegate) goes around for both.
    runtime::CarryMap hostO = steps > 1 ? runtime::hostCarries(original, fo) : runtime::CarryMap{};
    runtime::CarryMap hostF = steps > 1 ? runtime::hostCarries(fixed, *ff) : runtime::CarryMap{};
    runtime::CarryMap moved = runtime::carriesFromStateMap(map, *ff);
    hostF.insert(hostF.end(), moved.begin(), moved.end());
    std::vector<std::string> carried;
    for (const runtime::Carry &c : hostO)
      carried.push_back(c.input);
    runtime::StepperOptions run;
    run.run.precision = precision;
    run.run.source = original.sourcePath; // errors name the model's file
    runtime::Stepper so(fo, hostO, run), sf(*ff, hostF, run);
    for (int64_t step = 0; step < steps; ++step) {
      runtime::TensorMap inputs = runtime::randomInputs(fo, desc, rng, carried);
      std::vector<runtime::NamedTensor> outO = so.step(inputs);
      std::vector<runtime::NamedTensor> outF = sf.step(inputs);
      std::string at = fo.name + ": step " + std::to_string(step) + ": ";
      cmp.compareOutputs(at, outO, outF);
      for (const StateMapEntry &e : map.entries) {
        const runtime::Tensor *was = so.states().find(e.state);
        for (const runtime::NamedTensor &nt : outF)
          if (was && nt.name == e.output)
            cmp.compare(at + "state '" + e.state + "'", *was, nt.tensor);
      }
    }
  }
  return cmp;
}

FixResult fixModel(const Model &model, const FixOptions &options) {
  if (options.steps < 1)
    throw InputError("fix: expected a positive step count, found " + std::to_string(options.steps));
  if (!model.program)
    throw InputError(model.sourcePath + ": expected an ML Program, found a model without one");
  auto stage = [&](std::string_view name) {
    if (options.progress)
      options.progress(name);
  };
  FixResult result;
  stage("check");
  result.before = ane::checkModel(model);

  stage("rewrite");
  result.pipeline = fixPipeline(options, result.before);
  if (options.passes.empty())
    for (const std::string &rule : blockingRules(result.before))
      if (!passesRemoving(rule).empty())
        result.pickedFor.push_back(rule);
  PassManager pm;
  if (!result.pipeline.empty())
    pm.addPipeline(result.pipeline);
  result.fixed = cloneModel(model);
  PassResult passes = pm.run(*result.fixed);
  result.changes = std::move(passes.changes);
  result.diagnostics = std::move(passes.diagnostics);
  result.stateMap = std::move(passes.stateMap);

  result.verifierDiagnostics = verifyModel(*result.fixed);
  if (result.verifies() && result.fixed->program) {
    Diagnostics states = verifyStateUses(*result.fixed->program);
    result.verifierDiagnostics.insert(result.verifierDiagnostics.end(), states.begin(),
                                      states.end());
  }
  if (!result.verifies())
    return result;
  stage("check");
  result.after = ane::checkModel(*result.fixed);

  bool verify =
      options.verify == FixVerify::Always ||
      (options.verify == FixVerify::Auto && result.before.weightBytes <= kAutoVerifyWeightBytes);
  if (!verify)
    return result;
  stage("verify");
  FixVerification &v = result.verification;
  v.steps = options.steps;
  try {
    v.comparison = compareRewrite(model, *result.fixed, result.stateMap, options.steps,
                                  options.seed, options.tolerance, options.precision);
    v.status =
        v.comparison.ok() ? FixVerification::Status::Same : FixVerification::Status::Different;
  } catch (const InputError &e) {
    // An op without a kernel (or similar) should not keep users from a
    // rewrite they did not ask to verify; FixVerify::Always insists.
    if (options.verify == FixVerify::Always)
      throw;
    v.status = FixVerification::Status::Skipped;
    v.skipReason = e.what();
  }
  return result;
}

} // namespace anefit
