//===- PteModels.cpp - Core ML models inside ExecuTorch programs ----------===//
//
// Reads each Core ML delegate payload of a .pte straight from the mapped
// file: the flattened directory gives Manifest.json, the model protobuf and
// the weight file as spans, and the weight file is served from memory, so
// nothing is unpacked to disk. Weight-file names are resolved with the same
// rules as for packages on disk.
//
//===----------------------------------------------------------------------===//
#include "io/MilProto.h"
#include "io/ModelIO.h"
#include "io/Package.h"
#include "io/Pte.h"
#include "io/WeightFile.h"
#include "support/Error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <optional>

namespace anefit {
namespace {

constexpr std::string_view kPackageDir = "model.mlpackage/";
constexpr std::string_view kDebugHandleMapping =
    "model.mlpackage/executorch_debug_handle_mapping.json";

const FlatFile *findFile(const std::vector<FlatFile> &files, std::string_view path) {
  for (const FlatFile &f : files)
    if (f.path == path)
      return &f;
  return nullptr;
}

std::string_view asText(std::span<const uint8_t> bytes) {
  return {reinterpret_cast<const char *>(bytes.data()), bytes.size()};
}

/// Op output name -> debug handles, from "mapping": {handle: [[..., {"Output": name}], ...]}.
std::map<std::string, std::vector<int64_t>> readDebugHandles(std::span<const uint8_t> bytes) {
  std::map<std::string, std::vector<int64_t>> out;
  auto j = nlohmann::json::parse(asText(bytes), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("mapping") || !j["mapping"].is_object())
    return out; // advisory data: a malformed mapping only loses provenance
  for (const auto &[handle, paths] : j["mapping"].items()) {
    char *end = nullptr;
    long long h = std::strtoll(handle.c_str(), &end, 10);
    if (handle.empty() || *end != '\0' || !paths.is_array())
      continue;
    for (const auto &path : paths) {
      if (!path.is_array() || path.empty() || !path.back().is_object())
        continue;
      const auto &leaf = path.back();
      if (leaf.contains("Output") && leaf["Output"].is_string())
        out[leaf["Output"].get<std::string>()].push_back(h);
    }
  }
  return out;
}

EmbeddedModel loadEmbedded(const std::shared_ptr<PteFile> &pte, const PteDelegate &d,
                           size_t position, const LoadOptions &options) {
  std::string where = pte->path() + "#" + std::to_string(position);
  std::string label = where + " (" + d.label() + ")";
  std::vector<FlatFile> files = readFlattenedDirectory(pte->payload(d), label);
  if (findFile(files, "model.mlmodelc/model.mil") ||
      findFile(files, "model.mlmodelc/coremldata.bin"))
    throw InputError::at(label, "",
                         "the payload is a compiled model (model.mlmodelc); anefit reads "
                         "model.mlpackage payloads: export with model_type 'model'");
  const FlatFile *manifestFile = findFile(files, "model.mlpackage/Manifest.json");
  if (!manifestFile)
    failExpected(label, "payload", "model.mlpackage/Manifest.json", "no such file");
  Manifest manifest = parseManifest(asText(manifestFile->data), label + ": Manifest.json");
  std::string modelPath = std::string(kPackageDir) + "Data/" + manifest.rootItem().path;
  const FlatFile *modelFile = findFile(files, modelPath);
  if (!modelFile)
    failExpected(label, "payload", modelPath, "no such file");
  std::string modelDir = std::filesystem::path(modelPath).parent_path().string();

  std::map<std::string, std::shared_ptr<const BlobStore>> stores;
  WeightOpener open = [&](const std::string &fileName) -> std::shared_ptr<const BlobStore> {
    std::string path = resolveWeightPath(modelDir, fileName, label);
    const FlatFile *f = findFile(files, path);
    if (!f)
      throw InputError::at(label, "weight file '" + fileName + "'",
                           "not in the payload (expected " + path + ")");
    std::shared_ptr<const BlobStore> store;
    if (options.openWeights)
      store = WeightFile::fromBytes(f->data, label + ": " + path, pte);
    stores[fileName] = store;
    return store;
  };
  EmbeddedModel em;
  em.method = d.method;
  em.delegateIndex = d.indexInMethod;
  em.label = d.label();
  em.compileSpecs = d.compileSpecs;
  em.model = parseModelProto(modelFile->data, label + ": " + modelPath, open);
  em.model->sourcePath = where;
  em.model->origin = "method " + d.method + ", delegate " + std::to_string(d.indexInMethod) + " (" +
                     d.backendId + ")" +
                     (d.functionName.empty() ? "" : ", function " + d.functionName);
  em.model->weightFiles = std::move(stores);
  if (const FlatFile *mapping = findFile(files, kDebugHandleMapping))
    em.model->debugHandles = readDebugHandles(mapping->data);
  return em;
}

} // namespace

std::vector<EmbeddedModel> loadPteModels(const std::string &path, const LoadOptions &options) {
  std::shared_ptr<PteFile> pte = PteFile::open(path);
  std::vector<EmbeddedModel> out;
  size_t position = 0;
  for (const PteDelegate &d : pte->delegates()) {
    if (!d.isCoreML())
      continue;
    out.push_back(loadEmbedded(pte, d, position++, options));
  }
  return out;
}

namespace {

bool endsWithPte(const std::string &path) {
  if (path.size() < 4)
    return false;
  std::string ext = path.substr(path.size() - 4);
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".pte";
}

} // namespace

std::pair<std::string, std::optional<size_t>> splitPteSelector(const std::string &path) {
  size_t hash = path.rfind('#');
  if (hash == std::string::npos || hash + 1 >= path.size() || hash + 8 < path.size())
    return {path, std::nullopt};
  std::string base = path.substr(0, hash);
  if (!endsWithPte(base) || path.find_first_not_of("0123456789", hash + 1) != std::string::npos)
    return {path, std::nullopt};
  return {base, std::stoul(path.substr(hash + 1))};
}

namespace formats {

bool detectPteSelector(const std::string &path) {
  return splitPteSelector(path).second.has_value();
}

std::unique_ptr<Model> loadPte(const std::string &path, const LoadOptions &options) {
  auto [ptePath, selector] = splitPteSelector(path);
  std::vector<EmbeddedModel> models = loadPteModels(ptePath, options);
  if (models.empty())
    throw InputError::at(ptePath, "", "no Core ML delegate in this ExecuTorch program");
  size_t pick = selector.value_or(0);
  if (!selector && models.size() > 1)
    throw InputError::at(ptePath, "",
                         "holds " + std::to_string(models.size()) +
                             " Core ML delegates; pick one as " + ptePath + "#0 .. " + ptePath +
                             "#" + std::to_string(models.size() - 1) + " ('anefit show " + ptePath +
                             "' lists them)");
  if (pick >= models.size())
    failExpected(ptePath, "delegate selector '#" + std::to_string(pick) + "'",
                 "0 .. " + std::to_string(models.size() - 1), std::to_string(pick));
  return std::move(models[pick].model);
}

} // namespace formats

} // namespace anefit
