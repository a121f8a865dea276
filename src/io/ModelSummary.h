//===- ModelSummary.h - What a model is made of ------------------*- C++ -*-===//
//
// The summary `anefit show` prints: specification version and the OS it
// needs, functions with their opsets, inputs, outputs and states, an op-type
// histogram, the weights (ops/Weights.h, the counter `check` and `split`
// use) and the weight files. Everything comes from the program and the types
// of its constants; weight data is never read and weight files are located
// but not opened.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "io/ModelIO.h"
#include "ir/Model.h"
#include "ops/Weights.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace anefit {

/// The OS releases that introduced a Core ML specification version.
struct SpecVersionInfo {
  int version;
  const char *iOS;
  const char *macOS;
};

/// The row of specification version `version`, or null when unknown.
const SpecVersionInfo *specVersionInfo(int version);
/// "iOS 18, macOS 15" for specification version 9; "unknown OS".
std::string minimumOSText(int specVersion);

/// One input, output or state: the description's, refined by the
/// program's type of the value where it exists (symbolic dims).
struct FeatureSummary {
  std::string name;
  std::string kind; ///< "tensor", "state", "int64", "double", "string", "other"
  std::string dtype;
  std::vector<Dim> shape;
  bool rankKnown = true;
  std::vector<std::vector<int64_t>> enumeratedShapes;
  std::vector<std::pair<uint64_t, int64_t>> shapeRange;
  bool optional = false;
};

struct FunctionSummary {
  std::string name;
  /// "CoreML8"; empty when the program does not say.
  std::string opset;
  bool isDefault = false;
  std::vector<FeatureSummary> inputs, outputs, states;
  uint64_t opCount = 0;
};

struct ModelSummary {
  std::string path;
  ModelFormat format = ModelFormat::Unknown;
  int specVersion = 0;
  std::string defaultFunction;
  std::vector<FunctionSummary> functions;
  std::vector<std::pair<std::string, uint64_t>> ops; ///< sorted by count, then name
  WeightCount weights;                               ///< stored and dense sizes (ops/Weights.h)
  struct WeightFileInfo {
    std::string name;              ///< as the program names it ("weights/weight.bin")
    std::string path;              ///< where it is; empty when the name cannot be resolved
    std::optional<uint64_t> bytes; ///< its size; nullopt when it is missing
  };
  std::vector<WeightFileInfo> weightFiles;
  Metadata metadata;
};

/// One input, output or state as a model's description declares it (the
/// kind, and for tensors and states the dtype, "unknown" when the
/// description's is not one MIL has, and the shape).
FeatureSummary summarizeFeature(const FeatureDescription &d);

/// Summarizes `model`, read from `path` (weight files are located from it).
ModelSummary summarizeModel(const Model &model, const std::string &path);

} // namespace anefit
