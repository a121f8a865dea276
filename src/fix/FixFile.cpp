//===- FixFile.cpp - Fix a model file into a model file -------------------===//
#include "fix/FixFile.h"

#include "ane/Remedies.h"
#include "io/ModelIO.h"
#include "ir/StateMap.h"
#include "runtime/ExecuTorch.h"
#include "runtime/Stepper.h"
#include "support/Error.h"

#include <filesystem>
#include <functional>

namespace anefit {
namespace {

namespace fs = std::filesystem;

/// Fixes `model`, hands the result to the callback and keeps it.
FixedModel &fixOne(FixFileResult &out, std::string where, std::string label,
                   std::shared_ptr<const Model> model, const FixOptions &options,
                   const FixFileOptions &file) {
  FixedModel m;
  m.where = std::move(where);
  m.label = std::move(label);
  m.result = fixModel(*model, options);
  m.original = std::move(model);
  out.models.push_back(std::move(m));
  if (file.onFixed)
    file.onFixed(out.models.back());
  return out.models.back();
}

/// Runs the original program and the one written in ExecuTorch's runtime
/// (ProgramProof); on a difference where every delegate's proof was exact,
/// removes the output.
void proveInExecuTorch(const std::string &inPath, FixFileResult &out, const FixOptions &options) {
  ProgramProof &proof = out.executorch;
  bool exact = true, rounded = false, fp32Only = false;
  for (const FixedModel &m : out.models) {
    FixVerification::Status s = m.result.verification.status;
    if (s == FixVerification::Status::NotRun || s == FixVerification::Status::Skipped)
      return; // nothing proven by the stepper: nothing to hold ExecuTorch to
    exact = exact && s == FixVerification::Status::Same;
    rounded = rounded || !m.result.verification.roundedPasses.empty();
    fp32Only = fp32Only || m.result.exactInFp32Only;
  }
  // Weights rewritten as the device rounds them are equal only in fp16, a
  // norm scaled before its square only in fp32: together the two programs
  // are equal at no one precision, and the run is measured, not held equal
  // (each step was proven on its own by the stepper).
  if (rounded && fp32Only) {
    exact = false;
    proof.mixedPrecisions = true;
  }
  if (options.progress)
    options.progress("executorch");
  std::string why;
  std::shared_ptr<runtime::ExecuTorchEngine> engine = runtime::ExecuTorchEngine::load(&why);
  if (!engine) {
    proof.status = ProgramProof::Status::Skipped;
    proof.skipReason = why;
    return;
  }
  proof.engine = "ExecuTorch " + engine->version();
  proof.steps = options.steps;
  int64_t vocab = engine->metadataInt(inPath, "get_vocab_size").value_or(0);
  runtime::LlmDecodeInputs inputs(vocab, options.seed);
  auto input = std::ref(inputs);
  // Weights rewritten as the device rounds them (requantize to fp16) are the
  // same program only where every value is rounded to fp16: fp16 mode.
  runtime::RunOptions run;
  run.precision = rounded    ? runtime::Precision::FP16
                  : fp32Only ? runtime::Precision::FP32
                             : options.precision;
  proof.fp16 = run.precision == runtime::Precision::FP16;
  // As the stepper proves fp16 mode (fix/Fix.cpp): with the exact products,
  // not a grid the kernels would put x on for speed.
  run.exactProducts = proof.fp16;
  std::vector<std::vector<runtime::Tensor>> before, after;
  try {
    before = engine->run(inPath, "forward", options.steps, run, input);
  } catch (const InputError &e) {
    proof.status = ProgramProof::Status::Skipped;
    proof.skipReason = std::string("ExecuTorch cannot run the original program: ") + e.what();
    return;
  }
  after = engine->run(out.output, "forward", options.steps, run, input);
  runtime::Comparison c(options.tolerance);
  for (size_t k = 0; k < before.size(); ++k) {
    std::string step = "forward: step " + std::to_string(k) + ": output ";
    if (k >= after.size() || after[k].size() != before[k].size()) {
      c.fail(step + "count differs");
      continue;
    }
    for (size_t o = 0; o < before[k].size(); ++o)
      c.compare(step + std::to_string(o), before[k][o], after[k][o],
                before[k][o].dtype() == DType::F16);
  }
  proof.compared = c.compared();
  proof.nonFinite = c.bothNonFinite();
  proof.firstNonFinite = c.firstNonFinite();
  proof.maxAbsDiff = c.maxAbsDiff();
  if (!c.ok() && !exact) {
    proof.status = ProgramProof::Status::Measured;
    return;
  }
  proof.status = c.ok() ? ProgramProof::Status::Same : ProgramProof::Status::Different;
  if (!c.ok()) {
    proof.firstMismatch = c.firstMismatch();
    std::error_code ec;
    fs::remove(out.output, ec);
    out.output.clear();
  }
}

/// A .pte from a .pte: each selected Core ML delegate fixed on its own, the
/// rewrites written into a copy of the program.
FixFileResult fixProgram(const std::string &input, const std::string &output,
                         const OutputOptions &policy, const FixOptions &options,
                         const FixFileOptions &file) {
  auto [inPath, selector] = splitPteSelector(input);
  if (detectFormat(inPath) != ModelFormat::Pte)
    throw InputError("-o " + output + ": a .pte output is written from a .pte input; found '" +
                     input + "' (write a .mlpackage instead)");
  std::vector<EmbeddedModel> models = loadPteModels(inPath);
  prepareFixOutput(output, policy);
  if (models.empty())
    throw InputError::at(inPath, "",
                         "no Core ML delegate in this ExecuTorch program; nothing to fix");
  if (selector && *selector >= models.size())
    failExpected(inPath, "delegate selector '#" + std::to_string(*selector) + "'",
                 "0 .. " + std::to_string(models.size() - 1), std::to_string(*selector));

  FixFileResult out;
  out.program = true;
  std::vector<const Model *> replace(models.size(), nullptr);
  for (size_t i = 0; i < models.size(); ++i) {
    if (selector && *selector != i)
      continue;
    FixedModel &m = fixOne(out, inPath + "#" + std::to_string(i), models[i].label,
                           std::move(models[i].model), options, file);
    if (!m.result.ok())
      return out;
    std::string change = interfaceDifference(*m.original, *m.result.fixed);
    if (!change.empty())
      throw InputError(m.where + ": the rewrite (" + m.result.pipeline +
                       ") changes the Core ML delegate's interface (" + change +
                       "), which the ExecuTorch program around it cannot follow; nothing "
                       "written. " +
                       (m.result.stateMap.empty() ? std::string("Run only passes that keep it.")
                                                  : ane::stateRemedyText()));
    replace[i] = m.result.fixed.get();
  }
  SaveOptions save;
  save.force = file.force;
  savePteModels(inPath, replace, output, save);
  out.output = output;
  proveInExecuTorch(inPath, out, options);
  return out;
}

} // namespace

OutputOptions fixOutputPolicy(const std::string &input, const std::string &output, bool force) {
  OutputOptions policy;
  policy.force = force;
  policy.allowStream = false;
  policy.kind =
      formatInfo(detectFormat(output)).directory ? OutputKind::Directory : OutputKind::File;
  policy.alsoAvoid = {splitPteSelector(input).first};
  fs::path parent = fs::path(output).parent_path();
  if (!parent.empty())
    refuseInputOverlap(parent.string(), policy.alsoAvoid, /*around=*/false);
  return policy;
}

void prepareFixOutput(const std::string &output, const OutputOptions &policy) {
  fs::path parent = fs::path(output).parent_path();
  std::error_code ec;
  if (!parent.empty())
    fs::create_directories(parent, ec);
  checkOutput(output, policy);
}

std::string writeFixedModel(const FixResult &result, const std::string &output,
                            const OutputOptions &policy) {
  OutputOptions mapPolicy = policy;
  mapPolicy.kind = OutputKind::File;
  std::string mapPath = stateMapPathFor(output);
  if (!result.stateMap.empty())
    checkOutput(mapPath, mapPolicy);
  SaveOptions save;
  save.force = policy.force;
  saveModel(*result.fixed, output, save);
  if (result.stateMap.empty())
    return "";
  writeFileAtomically(mapPath, result.stateMap.toJson() + "\n", mapPolicy);
  return mapPath;
}

FixFileResult fixFile(const std::string &input, const std::string &output,
                      const FixOptions &options, const FixFileOptions &file) {
  // The output policy, checked before the work and again when writing.
  OutputOptions policy = fixOutputPolicy(input, output, file.force);
  if (detectFormat(output) == ModelFormat::Pte)
    return fixProgram(input, output, policy, options, file);

  std::shared_ptr<const Model> original = loadModel(input);
  prepareFixOutput(output, policy);
  FixFileResult out;
  FixedModel &m = fixOne(out, input, "", std::move(original), options, file);
  if (!m.result.ok())
    return out;
  out.stateMapPath = writeFixedModel(m.result, output, policy);
  out.output = output;
  return out;
}

} // namespace anefit
