//===- ModelSummary.cpp - What a model is made of -------------------------===//
#include "io/ModelSummary.h"

#include "io/Package.h"
#include "support/Error.h"

#include <algorithm>
#include <filesystem>
#include <map>

namespace anefit {
namespace {

namespace fs = std::filesystem;

constexpr SpecVersionInfo kSpecVersions[] = {
    {1, "11", "10.13"}, {2, "11.2", "10.13.2"}, {3, "12", "10.14"}, {4, "13", "10.15"},
    {5, "14", "11"},    {6, "15", "12"},        {7, "16", "13"},    {8, "17", "14"},
    {9, "18", "15"},    {10, "26", "26"},
};

/// The program's type is more precise than the description's (symbolic
/// dims); prefer it when the value exists.
void refineFromType(FeatureSummary &f, const Type &t) {
  if (!t.isTensor() && !t.isState())
    return;
  f.dtype = std::string(dtypeName(t.dtype()));
  f.rankKnown = t.hasRank();
  f.shape = t.shape();
}

/// "@model_path" for a model path, to locate weight files without opening them.
std::string modelDirectory(const std::string &path, ModelFormat format) {
  if (format == ModelFormat::MLPackage)
    return openPackage(path).modelDir;
  return fs::path(path).parent_path().string();
}

} // namespace

const SpecVersionInfo *specVersionInfo(int version) {
  for (const SpecVersionInfo &info : kSpecVersions)
    if (info.version == version)
      return &info;
  return nullptr;
}

std::string minimumOSText(int specVersion) {
  const SpecVersionInfo *info = specVersionInfo(specVersion);
  if (!info)
    return "unknown OS";
  return std::string("iOS ") + info->iOS + ", macOS " + info->macOS;
}

FeatureSummary summarizeFeature(const FeatureDescription &d) {
  FeatureSummary f;
  f.name = d.name;
  f.optional = d.type.isOptional;
  switch (d.type.kind) {
  case FeatureType::Kind::MultiArray:
  case FeatureType::Kind::State: {
    f.kind = d.type.kind == FeatureType::Kind::State ? "state" : "tensor";
    auto dt = dtypeOfArrayDataType(d.type.dataType);
    f.dtype = dt ? std::string(dtypeName(*dt)) : "unknown";
    for (int64_t n : d.type.shape)
      f.shape.push_back(Dim::of(n));
    f.enumeratedShapes = d.type.enumeratedShapes;
    if (d.type.hasShapeRange)
      f.shapeRange = d.type.shapeRange;
    break;
  }
  case FeatureType::Kind::Int64:
    f.kind = "int64";
    break;
  case FeatureType::Kind::Double:
    f.kind = "double";
    break;
  case FeatureType::Kind::String:
    f.kind = "string";
    break;
  case FeatureType::Kind::Other:
    f.kind = "other";
    break;
  }
  return f;
}

ModelSummary summarizeModel(const Model &model, const std::string &path) {
  ModelSummary s;
  s.path = path;
  s.format = detectFormat(path);
  s.specVersion = model.specificationVersion;
  s.metadata = model.description.metadata;
  Function *def = model.defaultFunction();
  s.defaultFunction = def ? def->name : "";

  std::map<std::string, uint64_t> histogram;
  if (model.program) {
    for (const auto &fn : model.program->functions) {
      FunctionSummary fs;
      fs.name = fn->name;
      fs.opset = fn->opset;
      fs.isDefault = fn.get() == def;
      FunctionDescription desc = model.description.describe(fn->name);
      std::map<std::string, const Type *> outputTypes;
      for (const Value *v : fn->body->outputs)
        if (v)
          outputTypes[v->name] = &v->type;
      for (const FeatureDescription &d : desc.inputs) {
        FeatureSummary f = summarizeFeature(d);
        if (const Value *v = fn->findInput(d.name))
          refineFromType(f, v->type);
        fs.inputs.push_back(f);
      }
      for (const FeatureDescription &d : desc.states) {
        FeatureSummary f = summarizeFeature(d);
        if (const Value *v = fn->findInput(d.name))
          refineFromType(f, v->type);
        fs.states.push_back(f);
      }
      for (const FeatureDescription &d : desc.outputs) {
        FeatureSummary f = summarizeFeature(d);
        auto it = outputTypes.find(d.name);
        if (it != outputTypes.end())
          refineFromType(f, *it->second);
        fs.outputs.push_back(f);
      }
      walk(*fn->body, [&](const Operation &op) {
        ++fs.opCount;
        ++histogram[op.type];
      });
      s.functions.push_back(std::move(fs));
    }
    s.weights = countWeights(*model.program);
  }
  s.ops.assign(histogram.begin(), histogram.end());
  std::stable_sort(s.ops.begin(), s.ops.end(),
                   [](const auto &a, const auto &b) { return a.second > b.second; });

  std::string modelDir;
  try {
    modelDir = modelDirectory(path, s.format);
  } catch (const InputError &) {
  }
  for (const auto &[name, store] : model.weightFiles) {
    ModelSummary::WeightFileInfo w;
    w.name = name;
    try {
      w.path = resolveWeightPath(modelDir, name, path);
      std::error_code ec;
      uint64_t size = fs::file_size(w.path, ec);
      if (!ec)
        w.bytes = size;
    } catch (const InputError &) {
    }
    s.weightFiles.push_back(std::move(w));
  }
  return s;
}

} // namespace anefit
