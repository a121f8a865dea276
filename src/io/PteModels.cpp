//===- PteModels.cpp - Core ML models inside ExecuTorch programs ----------===//
//
// Reads each Core ML delegate payload of a .pte straight from the mapped
// file: the flattened directory gives Manifest.json, the model protobuf and
// the weight file as spans, and the weight file is served from memory, so
// nothing is unpacked to disk. Weight-file names are resolved with the same
// rules as for packages on disk.
//
// Writing puts a new model into a payload: the package's files are laid out
// as for a package on disk, the small ones in memory and the weight file in
// a nameless scratch file beside the output (nothing to leave behind on an
// interrupt), and the payload is rebuilt from the old payload's other files
// (ExecuTorch's metadata.json with a fresh identifier, debug info) plus the
// new package's files, streamed into the program copy. The delegate's interface must not change:
// ExecuTorch passes the delegate its arguments by position, named in metadata.json.
//
//===----------------------------------------------------------------------===//
#include "io/MilProto.h"
#include "io/ModelIO.h"
#include "io/Package.h"
#include "io/Pte.h"
#include "io/WeightFile.h"
#include "ir/Verifier.h"
#include "support/DType.h"
#include "support/Error.h"
#include "support/FileSystem.h"
#include "support/Json.h"
#include "support/Text.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>

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
  nlohmann::json j;
  try {
    j = parseJson(asText(bytes), "debug handle map");
  } catch (const InputError &) {
    return out; // nested too deep: provenance lost, like any malformed mapping
  }
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

/// Names from a metadata.json entry ({"inputNames": [...], "outputNames": [...]}).
std::vector<std::string> namesOf(const nlohmann::json &entry, const char *key) {
  std::vector<std::string> out;
  if (entry.is_object() && entry.contains(key) && entry[key].is_array())
    for (const auto &n : entry[key])
      if (n.is_string())
        out.push_back(n.get<std::string>());
  return out;
}

/// The payload's metadata.json (ExecuTorch's names of the delegate's
/// arguments); null when the payload has none, discarded when it is not JSON.
nlohmann::json readMetadata(const std::vector<FlatFile> &files, const std::string &label) {
  const FlatFile *file = findFile(files, "metadata.json");
  return file ? parseJson(asText(file->data), label, "metadata.json") : nlohmann::json();
}

/// The entry of `metadata` that names the arguments of `method`: its
/// "methods" entry for a multifunction payload, else the whole object; null
/// when a multifunction payload has no entry for it.
const nlohmann::json *metadataEntry(const nlohmann::json &metadata, const std::string &method) {
  if (!metadata.is_object() || !metadata.contains("methods"))
    return &metadata;
  const nlohmann::json &methods = metadata["methods"];
  return methods.is_object() && methods.contains(method) ? &methods[method] : nullptr;
}

/// ExecuTorch's write-back around delegate `d` (PteFile::delegateIO), by the
/// Core ML names of metadata.json, into model.hostWriteBacks; a form that
/// cannot be read goes to model.hostWriteBackError.
void readWriteBacks(const PteFile &pte, const PteDelegate &d, const std::vector<FlatFile> &files,
                    const std::string &label, Model &model) {
  nlohmann::json metadata;
  try {
    metadata = readMetadata(files, label);
  } catch (const InputError &e) {
    model.hostWriteBackError = e.what();
    return;
  }
  std::string method = d.functionName.empty() ? d.method : d.functionName;
  const nlohmann::json *entry = metadataEntry(metadata, method);
  if (!entry) {
    model.hostWriteBackError = label + ": metadata.json has no entry for method '" + method + "'";
    return;
  }
  std::vector<std::string> ins = namesOf(*entry, "inputNames");
  std::vector<std::string> outs = namesOf(*entry, "outputNames");
  if (!metadata.is_object() || (ins.empty() && outs.empty())) {
    model.hostWriteBackError = label + ": metadata.json does not name the delegate's arguments";
    return;
  }
  PteDelegateIO io = pte.delegateIO(d, ins.size(), outs.size());
  if (!io.unmappable.empty()) {
    model.hostWriteBackError = label + ": " + io.unmappable;
    return;
  }
  std::string function;
  if (model.program && model.program->functions.size() > 1)
    function = method;
  else if (Function *f = model.defaultFunction())
    function = f->name;
  for (const PteWriteBack &w : io.writeBacks)
    model.hostWriteBacks.push_back(HostWriteBack{function, outs[w.output], ins[w.input],
                                                 "ExecuTorch " + w.via + " into " +
                                                     (w.methodInput ? "method input" : "buffer") +
                                                     " value " + std::to_string(w.value)});
}

/// The model of a payload's files (model.mlpackage inside a flattened
/// directory), its weights served from memory that `keepAlive` owns.
std::unique_ptr<Model> readPayloadModel(const std::vector<FlatFile> &files,
                                        std::shared_ptr<const void> keepAlive,
                                        const std::string &label, const LoadOptions &options) {
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
      store = WeightFile::fromBytes(f->data, label + ": " + path, keepAlive);
    stores[fileName] = store;
    return store;
  };
  std::unique_ptr<Model> model = parseModelProto(modelFile->data, label + ": " + modelPath, open);
  model->weightFiles = std::move(stores);
  if (const FlatFile *mapping = findFile(files, kDebugHandleMapping))
    model->debugHandles = readDebugHandles(mapping->data);
  return model;
}

EmbeddedModel loadEmbedded(const std::shared_ptr<PteFile> &pte, const PteDelegate &d,
                           size_t position, const LoadOptions &options) {
  std::string where = pte->path() + "#" + std::to_string(position);
  std::string label = where + " (" + d.label() + ")";
  std::vector<FlatFile> files = readFlattenedDirectory(pte->payload(d), label);
  EmbeddedModel em;
  em.method = d.method;
  em.delegateIndex = d.indexInMethod;
  em.label = d.label();
  em.compileSpecs = d.compileSpecs;
  em.model = readPayloadModel(files, pte, label, options);
  em.model->sourcePath = where;
  em.model->compileSpecs = d.compileSpecs;
  em.model->origin = "method " + d.method + ", delegate " + std::to_string(d.indexInMethod) + " (" +
                     d.backendId + ")" +
                     (d.functionName.empty() ? "" : ", function " + d.functionName);
  readWriteBacks(*pte, d, files, label, *em.model);
  return em;
}

std::string featureText(const FeatureDescription &f) {
  std::string shape;
  for (int64_t d : f.type.shape)
    shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  std::string dtype = "?";
  if (auto t = dtypeOfArrayDataType(f.type.dataType))
    dtype = std::string(dtypeName(*t));
  return "'" + f.name + "' (" + shape + (shape.empty() ? "" : ", ") + dtype + ")";
}

bool sameFeature(const FeatureDescription &a, const FeatureDescription &b) {
  return a.name == b.name && a.type.kind == b.type.kind && a.type.shape == b.type.shape &&
         a.type.dataType == b.type.dataType && a.type.enumeratedShapes == b.type.enumeratedShapes &&
         a.type.shapeRange == b.type.shapeRange && a.type.hasShapeRange == b.type.hasShapeRange;
}

/// First difference between two feature lists, or "".
std::string listDifference(const std::string &kind, const std::vector<FeatureDescription> &was,
                           const std::vector<FeatureDescription> &now) {
  size_t n = std::min(was.size(), now.size());
  for (size_t i = 0; i < n; ++i)
    if (!sameFeature(was[i], now[i]))
      return kind + " " + std::to_string(i) + " " + featureText(was[i]) + " became " +
             featureText(now[i]);
  if (now.size() > was.size())
    return kind + " " + featureText(now[n]) + " was added";
  if (was.size() > now.size())
    return kind + " " + featureText(was[n]) + " was removed";
  return "";
}

std::vector<std::string> featureNames(const std::vector<FeatureDescription> &features) {
  std::vector<std::string> out;
  for (const FeatureDescription &f : features)
    out.push_back(f.name);
  return out;
}

/// "executorch_" + a fresh lower-case UUID: Core ML's ExecuTorch runtime
/// caches compiled models by this identifier, so a changed payload needs a
/// new one or a device would run its cached compilation of the old model.
std::string freshIdentifier() { return "executorch_" + asciiLower(makeUuid()); }

/// The payload of `d` with its model replaced by `model`: the old payload's
/// files outside model.mlpackage's Manifest.json and Data/, the new package
/// (its weight file written to `weights`, which must outlive the result),
/// and metadata.json with a fresh identifier.
ByteChunks rebuildPayload(const PteFile &pte, const PteDelegate &d, const std::string &label,
                          const Model &model, ScratchFile &weights) {
  std::span<const uint8_t> payload = pte.payload(d);
  std::vector<FlatFile> files = readFlattenedDirectory(payload, label);
  std::string rootName = flattenedDirectoryRootName(payload, label);

  // metadata.json: the names ExecuTorch binds the delegate's arguments to.
  const FlatFile *metadataFile = findFile(files, "metadata.json");
  if (!metadataFile)
    failExpected(label, "payload", "metadata.json", "no such file");
  std::string metadataText(asText(metadataFile->data));
  auto metadata = parseJson(metadataText, label, "metadata.json");
  if (metadata.is_discarded() || !metadata.is_object() || !metadata.contains("identifier") ||
      !metadata["identifier"].is_string())
    failExpected(label, "metadata.json", "a JSON object with a string \"identifier\"",
                 "something else");
  std::string method = d.functionName.empty() ? d.method : d.functionName;
  bool multifunction = metadata.contains("methods");
  const nlohmann::json *entry = metadataEntry(metadata, method);
  for (const auto &fnPtr : model.program->functions) {
    const std::string &fn = fnPtr->name;
    if (multifunction ? fn != method : fnPtr.get() != model.defaultFunction())
      continue;
    if (!entry)
      failExpected(label, "metadata.json", "an entry for method '" + method + "'", "none");
    FunctionDescription desc = model.description.describe(fn);
    std::vector<std::string> ins = featureNames(desc.inputs);
    std::vector<std::string> outs = featureNames(desc.outputs);
    if (ins != namesOf(*entry, "inputNames") || outs != namesOf(*entry, "outputNames"))
      throw InputError::at(label, "function " + fn,
                           "the model's inputs/outputs no longer match the names ExecuTorch "
                           "passes the delegate (metadata.json); not written");
  }
  std::string oldId = metadata["identifier"].get<std::string>();
  std::string quoted = "\"" + oldId + "\"";
  size_t at = metadataText.find(quoted);
  if (at == std::string::npos)
    failExpected(label, "metadata.json", "the identifier as a plain JSON string", "an escaped one");
  metadataText.replace(at, quoted.size(), "\"" + freshIdentifier() + "\"");

  std::string why = unwritableReason(model);
  if (!why.empty())
    throw InputError::at(label, "", "cannot write this model: " + why);
  PackageFiles package = buildPackageFiles(
      [&](WeightWriter &w) { return serializeModelProto(model, &w); },
      [&](uint64_t offset, std::span<const uint8_t> bytes) { weights.writeAt(offset, bytes); },
      label);

  std::vector<FlatFileOut> out;
  for (const FlatFile &f : files) {
    if (f.path == "metadata.json" || f.path == "model.mlpackage/Manifest.json" ||
        f.path.rfind("model.mlpackage/Data/", 0) == 0)
      continue;
    FlatFileOut o{f.path, {}};
    o.data.addBorrowed(f.data);
    out.push_back(std::move(o));
  }
  FlatFileOut meta{"metadata.json", {}};
  meta.data.addOwned(std::move(metadataText));
  out.push_back(std::move(meta));
  std::vector<FlatFileOut> packageFiles;
  for (auto &[path, bytes] : package.small) {
    FlatFileOut o{std::string(kPackageDir) + path, {}};
    o.data.addOwned(std::move(bytes));
    packageFiles.push_back(std::move(o));
  }
  if (!package.weightFile.empty()) {
    FlatFileOut o{std::string(kPackageDir) + package.weightFile, {}};
    o.data.addBorrowed(weights.bytes());
    packageFiles.push_back(std::move(o));
  }
  std::sort(packageFiles.begin(), packageFiles.end(),
            [](const FlatFileOut &a, const FlatFileOut &b) { return a.path < b.path; });
  for (FlatFileOut &o : packageFiles)
    out.push_back(std::move(o));
  return writeFlattenedDirectory(rootName, std::move(out));
}

} // namespace

std::string interfaceDifference(const Model &original, const Model &rewritten) {
  std::vector<std::string> names;
  for (const auto &f : original.program->functions)
    names.push_back(f->name);
  for (const auto &f : rewritten.program->functions)
    if (std::find(names.begin(), names.end(), f->name) == names.end())
      return "function '" + f->name + "' was added";
  for (const std::string &fn : names) {
    if (!rewritten.program->findFunction(fn))
      return "function '" + fn + "' was removed";
    FunctionDescription was = original.description.describe(fn);
    FunctionDescription now = rewritten.description.describe(fn);
    for (auto [kind, a, b] : {std::tuple{"input", &was.inputs, &now.inputs},
                              std::tuple{"output", &was.outputs, &now.outputs},
                              std::tuple{"state", &was.states, &now.states}}) {
      std::string diff = listDifference(kind, *a, *b);
      if (!diff.empty())
        return (names.size() > 1 ? fn + ": " : "") + diff;
    }
  }
  return "";
}

void savePteModels(const std::string &inPath, const std::vector<const Model *> &models,
                   const std::string &outPath, const SaveOptions &options) {
  std::shared_ptr<PteFile> pte = PteFile::open(inPath);
  std::vector<const PteDelegate *> coreml;
  for (const PteDelegate &d : pte->delegates())
    if (d.isCoreML())
      coreml.push_back(&d);
  if (models.size() > coreml.size())
    throw InputError::at(inPath, "",
                         "holds " + std::to_string(coreml.size()) + " Core ML delegates, " +
                             std::to_string(models.size()) + " models given");
  OutputOptions output = OutputOptions::withForce(options.force);
  output.allowStream = false;
  output.alsoAvoid.push_back(inPath);
  checkOutput(outPath, output);

  // The new payloads' weight files, read while the output is written.
  std::vector<std::unique_ptr<ScratchFile>> scratch;
  std::map<uint32_t, ByteChunks> replacements;
  for (size_t i = 0; i < models.size(); ++i) {
    if (!models[i])
      continue;
    const PteDelegate &d = *coreml[i];
    std::string label = inPath + "#" + std::to_string(i) + " (" + d.label() + ")";
    std::optional<uint32_t> segment = pte->payloadSegment(d);
    if (!segment)
      throw InputError::at(label, "",
                           "the payload is stored inline in the program; anefit rewrites "
                           "payloads stored in segments (to_executorch's default, "
                           "extract_delegate_segments=True)");
    if (replacements.count(*segment))
      continue; // another delegate shares this payload (multi-method weight sharing)
    LoadOptions noWeights;
    noWeights.openWeights = false;
    EmbeddedModel original = loadEmbedded(pte, d, i, noWeights);
    std::string diff = interfaceDifference(*original.model, *models[i]);
    if (!diff.empty())
      throw InputError::at(label, "",
                           "the rewrite changes the delegate's interface (" + diff +
                               "), but the ExecuTorch program around it passes the old one; "
                               "not written");
    scratch.push_back(std::make_unique<ScratchFile>(outPath));
    replacements.emplace(*segment, rebuildPayload(*pte, d, label, *models[i], *scratch.back()));
  }
  writePteWithSegments(*pte, replacements, outPath, output);
}

CoreMLDelegatePayload readCoreMLPayload(std::span<const uint8_t> payload,
                                        std::shared_ptr<const void> keepAlive,
                                        const std::string &label, const std::string &method,
                                        const LoadOptions &options) {
  std::vector<FlatFile> files = readFlattenedDirectory(payload, label);
  CoreMLDelegatePayload out;
  out.model = readPayloadModel(files, std::move(keepAlive), label, options);
  out.model->sourcePath = label;
  nlohmann::json metadata = readMetadata(files, label);
  if (metadata.is_null())
    failExpected(label, "payload", "metadata.json (the names ExecuTorch binds by)", "no such file");
  if (!metadata.is_object())
    failExpected(label, "metadata.json", "a JSON object", "something else");
  const nlohmann::json *entry = metadataEntry(metadata, method);
  if (!entry)
    failExpected(label, "metadata.json", "an entry for method '" + method + "'", "none");
  // A multifunction payload runs the method's own function.
  std::string function = entry == &metadata ? "" : method;
  out.inputNames = namesOf(*entry, "inputNames");
  out.outputNames = namesOf(*entry, "outputNames");
  if (out.outputNames.empty())
    failExpected(label, "metadata.json", "\"outputNames\" naming the delegate's outputs", "none");
  const Program *program = out.model->program.get();
  if (!program || program->functions.empty())
    throw InputError::at(label, "", "the model has no ML program to run");
  if (function.empty() || program->functions.size() == 1)
    function = out.model->defaultFunction()->name;
  const Function *fn = program->findFunction(function);
  if (!fn)
    failExpected(label, "model", "a function '" + function + "'", "none");
  out.function = function;
  for (const std::string &name : out.inputNames)
    if (!fn->findInput(name))
      failExpected(label, "metadata.json input '" + name + "'",
                   "an input of function '" + function + "'", "none of that name");
  for (const std::string &name : out.outputNames)
    if (std::none_of(fn->body->outputs.begin(), fn->body->outputs.end(),
                     [&](const Value *v) { return v->name == name; }))
      failExpected(label, "metadata.json output '" + name + "'",
                   "an output of function '" + function + "'", "none of that name");
  return out;
}

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
  return asciiLower(path.substr(path.size() - 4)) == ".pte";
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
