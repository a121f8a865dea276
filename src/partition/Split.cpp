//===- Split.cpp - Check, partition, emit and prove a split ---------------===//
#include "partition/Split.h"

#include "io/ModelIO.h"
#include "partition/PlanJson.h"
#include "support/Error.h"

#include <filesystem>
#include <random>
#include <set>

namespace anefit::partition {

runtime::Comparison compareRegionChain(const Model &model, const FunctionPlan &fp,
                                       const std::vector<std::unique_ptr<Model>> &regions,
                                       int64_t steps, uint64_t seed) {
  const Function *fn = model.program->findFunction(fp.function);
  if (!fn)
    throw InputError("function '" + fp.function + "' not in the model");
  // Values crossing a boundary take their declared dtype; with every op
  // rounded to fp16 (as the ANE computes) that cast is exact, so the chain
  // must reproduce the original bit for bit.
  runtime::StepperOptions options;
  options.run.precision = runtime::Precision::FP16;
  options.run.source = model.sourcePath;
  std::vector<const Function *> chain;
  for (const auto &m : regions)
    chain.push_back(m->program->functions.front().get());
  // What the host carries between steps (ExecuTorch's buffer write-back
  // around a .pte delegate) goes around the original and the chain alike.
  runtime::CarryMap carries = steps > 1 ? runtime::hostCarries(model, *fn) : runtime::CarryMap{};
  std::vector<std::string> carried;
  for (const runtime::Carry &c : carries)
    carried.push_back(c.input);
  runtime::Stepper original(*fn, carries, options), split(chain, carries, options);
  FunctionDescription desc = model.description.describe(fn->name);
  std::mt19937_64 rng(seed);
  runtime::Comparison cmp;
  for (int64_t step = 0; step < steps; ++step) {
    runtime::TensorMap feed = runtime::randomInputs(*fn, desc, rng, carried);
    std::vector<runtime::NamedTensor> expected = original.step(feed);
    // Inputs no region reads are not fed to the chain; an output that is an
    // input passed through is found among the inputs.
    runtime::TensorMap chainFeed;
    for (const Value *in : split.externalInputs())
      if (feed.count(in->name))
        chainFeed[in->name] = feed.at(in->name);
    std::vector<runtime::NamedTensor> actual = split.step(chainFeed);
    for (const auto &[name, t] : feed)
      actual.push_back({name, t});
    cmp.compareOutputs(fn->name + ": step " + std::to_string(step) + ": ", expected, actual);
  }
  return cmp;
}

SplitResult splitModel(const Model &model, const SplitOptions &options) {
  if (options.steps < 1)
    throw InputError("split: expected a positive step count, found " +
                     std::to_string(options.steps));
  ane::CheckOptions checkOptions;
  checkOptions.function = options.function;
  SplitResult result;
  result.report = ane::checkModel(model, checkOptions);
  result.plan = makePlan(model, result.report, options.partition);
  result.plan.modelPath = model.sourcePath;
  if (options.emitDir.empty() && !options.verify)
    return result;
  if (!options.emitDir.empty()) {
    // Every region file is checked before any is written: distinct names
    // (two function names may make the same file name), no directory
    // created inside an input.
    std::set<std::string> names;
    refuseInputOverlap(options.emitDir, {model.sourcePath}, /*around=*/false);
    for (const FunctionPlan &fp : result.plan.functions)
      for (const Region &r : fp.regions)
        if (!names.insert(regionFileName(fp, r)).second)
          throw InputError::at(options.emitDir, "",
                               "two regions would both be written as " + regionFileName(fp, r) +
                                   " (function names that differ only in characters not "
                                   "allowed in file names); split one function at a time");
    std::error_code ec;
    std::filesystem::create_directories(options.emitDir, ec);
    if (ec)
      throw InputError::at(options.emitDir, "", "cannot create directory: " + ec.message());
  }
  SaveOptions save;
  save.force = options.force;
  for (const FunctionPlan &fp : result.plan.functions) {
    std::vector<std::unique_ptr<Model>> regions;
    for (size_t r = 0; r < fp.regions.size(); ++r) {
      regions.push_back(extractRegion(model, fp, r));
      if (options.emitDir.empty())
        continue;
      std::string path =
          (std::filesystem::path(options.emitDir) / regionFileName(fp, fp.regions[r])).string();
      saveModel(*regions.back(), path, save);
      result.writtenModels.push_back(path);
    }
    if (options.verify)
      result.verifications.push_back(
          {fp.function, fp.regions.size(), options.steps,
           compareRegionChain(model, fp, regions, options.steps, options.seed)});
  }
  return result;
}

} // namespace anefit::partition
