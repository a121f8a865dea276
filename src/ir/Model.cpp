//===- Model.cpp - A Core ML model: description plus ML Program -----------===//
#include "ir/Model.h"

namespace anefit {

std::optional<DType> dtypeOfArrayDataType(ArrayDataType t) {
  switch (t) {
  case ArrayDataType::Float32:
    return DType::F32;
  case ArrayDataType::Double:
    return DType::F64;
  case ArrayDataType::Int32:
    return DType::I32;
  case ArrayDataType::Int8:
    return DType::I8;
  case ArrayDataType::Float16:
    return DType::F16;
  default:
    return std::nullopt;
  }
}

std::optional<ArrayDataType> arrayDataTypeOf(DType t) {
  switch (t) {
  case DType::F32:
    return ArrayDataType::Float32;
  case DType::F64:
    return ArrayDataType::Double;
  case DType::I32:
    return ArrayDataType::Int32;
  case DType::I8:
    return ArrayDataType::Int8;
  case DType::F16:
    return ArrayDataType::Float16;
  default:
    return std::nullopt;
  }
}

FunctionDescription ModelDescription::describe(std::string_view name) const {
  for (const FunctionDescription &f : functions)
    if (f.name == name)
      return f;
  FunctionDescription d;
  d.name = std::string(name);
  d.inputs = inputs;
  d.outputs = outputs;
  d.states = states;
  d.predictedFeatureName = predictedFeatureName;
  d.predictedProbabilitiesName = predictedProbabilitiesName;
  return d;
}

Function *Model::defaultFunction() const {
  if (!program || program->functions.empty())
    return nullptr;
  if (!description.defaultFunctionName.empty())
    if (Function *f = program->findFunction(description.defaultFunctionName))
      return f;
  if (Function *f = program->findFunction("main"))
    return f;
  return program->functions.front().get();
}

} // namespace anefit
