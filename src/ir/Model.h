//===- Model.h - A Core ML model: description plus ML Program --*- C++ -*-===//
//
// The model-level envelope around a Program: specification version, the
// description of inputs/outputs/states (per function for multi-function
// models), metadata, and where the model came from. Feature types that anefit
// does not interpret (image, dictionary, sequence) keep their serialized
// protobuf bytes so they are written back unchanged.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace anefit {

/// ArrayFeatureType.ArrayDataType codes (formats.md §2).
enum class ArrayDataType : int32_t {
  Invalid = 0,
  Float32 = 65568,
  Double = 65600,
  Int32 = 131104,
  Int8 = 131080,
  Float16 = 65552,
};

/// Converts between ArrayDataType and DType; nullopt when there is no match.
std::optional<DType> dtypeOfArrayDataType(ArrayDataType t);
std::optional<ArrayDataType> arrayDataTypeOf(DType t);

struct FeatureType {
  enum class Kind : uint8_t { MultiArray, State, Int64, Double, String, Other };
  Kind kind = Kind::MultiArray;
  // MultiArray / State (the state's wrapped array):
  std::vector<int64_t> shape;
  ArrayDataType dataType = ArrayDataType::Invalid;
  std::vector<std::vector<int64_t>> enumeratedShapes; ///< ShapeFlexibility.enumeratedShapes
  /// ShapeFlexibility.shapeRange: (lower, upper) per dim; upper < 0 = unbounded.
  std::vector<std::pair<uint64_t, int64_t>> shapeRange;
  bool hasShapeRange = false;
  /// Serialized default-value / other oneof members we carry but do not interpret.
  std::optional<int32_t> intDefaultValue;
  std::optional<float> floatDefaultValue;
  std::optional<double> doubleDefaultValue;
  /// Kind::Other: the serialized FeatureType message, written back unchanged.
  std::string rawProto;
  bool isOptional = false;

  bool hasFlexibleShape() const { return !enumeratedShapes.empty() || hasShapeRange; }
};

struct FeatureDescription {
  std::string name;
  std::string shortDescription;
  FeatureType type;
};

struct FunctionDescription {
  std::string name;
  std::vector<FeatureDescription> inputs;
  std::vector<FeatureDescription> outputs;
  std::vector<FeatureDescription> states;
  std::string predictedFeatureName;
  std::string predictedProbabilitiesName;
};

struct Metadata {
  std::string shortDescription;
  std::string versionString;
  std::string author;
  std::string license;
  std::map<std::string, std::string> userDefined;
};

struct ModelDescription {
  std::vector<FeatureDescription> inputs;
  std::vector<FeatureDescription> outputs;
  std::vector<FeatureDescription> states;
  std::string predictedFeatureName;
  std::string predictedProbabilitiesName;
  std::vector<FeatureDescription> trainingInputs;
  std::vector<FunctionDescription> functions;
  std::string defaultFunctionName;
  Metadata metadata;

  /// Description of function `name`: from `functions` for multi-function
  /// models, else the top-level inputs/outputs/states (any name matches).
  FunctionDescription describe(std::string_view name) const;
};

/// A value the host program around the model copies from an output back into
/// an input after every prediction, so the next one sees it: ExecuTorch's
/// write-back of a mutable buffer around a Core ML delegate.
struct HostWriteBack {
  std::string function; ///< the model function it applies to
  std::string output;
  std::string input;
  /// How the host does it ("ExecuTorch aten::copy_ into buffer value 12").
  std::string how;
};

class Model {
public:
  int32_t specificationVersion = 0;
  ModelDescription description;
  bool isUpdatable = false;
  std::unique_ptr<Program> program;
  /// File or directory the model was read from (for messages); empty if built.
  std::string sourcePath;
  /// Weight files by the name the program uses ("@model_path/weights/weight.bin").
  std::map<std::string, std::shared_ptr<const BlobStore>> weightFiles;
  /// Where inside its container the model sits, e.g. "method forward,
  /// delegate 0 (CoreMLBackend)" for a .pte payload; empty otherwise.
  std::string origin;
  /// ExecuTorch debug handles by op output name, for models read from a .pte
  /// (they link an op back to the PyTorch node it was lowered from).
  std::map<std::string, std::vector<int64_t>> debugHandles;
  /// For models read from a .pte: the delegate's compile specs as ExecuTorch
  /// stores them ("compute_units" -> "cpu_only", "min_deployment_target" -> "9").
  std::map<std::string, std::string> compileSpecs;
  /// For models read from a .pte: what ExecuTorch writes back between calls.
  std::vector<HostWriteBack> hostWriteBacks;
  /// Set when the program around the model has a form whose write-back anefit
  /// cannot read: why (stepping such a model like a device is refused).
  std::string hostWriteBackError;

  /// The function named by defaultFunctionName, else "main", else the first.
  Function *defaultFunction() const;
};

} // namespace anefit
