//===- ShowCommand.cpp - anefit show: a summary of a model ----------------===//
//
// Prints what a model is made of: specification version and the OS it needs,
// functions with their opsets, inputs, outputs and states, an op-type
// histogram, parameter counts by dtype and the weight files. Everything comes
// from the program and the types of its constants; weight data is never read
// (weight files are not even opened), so `show` is fast on any model size.
// The --json form is the stable schema "anefit.show/1" (docs/show.md).
//
//===----------------------------------------------------------------------===//
#include "Command.h"

#include "io/ModelIO.h"
#include "io/Package.h"
#include "io/Pte.h"
#include "ir/Model.h"
#include "ops/Weights.h"
#include "support/Error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace anefit::cli {
namespace {

constexpr const char *kSchema = "anefit.show/1";

/// The OS releases that introduced each Core ML specification version.
struct SpecVersionInfo {
  int version;
  const char *iOS;
  const char *macOS;
};
constexpr SpecVersionInfo kSpecVersions[] = {
    {1, "11", "10.13"}, {2, "11.2", "10.13.2"}, {3, "12", "10.14"}, {4, "13", "10.15"},
    {5, "14", "11"},    {6, "15", "12"},        {7, "16", "13"},    {8, "17", "14"},
    {9, "18", "15"},    {10, "26", "26"},
};

const SpecVersionInfo *specVersionInfo(int version) {
  for (const SpecVersionInfo &info : kSpecVersions)
    if (info.version == version)
      return &info;
  return nullptr;
}

std::string osText(int specVersion) {
  const SpecVersionInfo *info = specVersionInfo(specVersion);
  if (!info)
    return "unknown OS";
  return std::string("iOS ") + info->iOS + ", macOS " + info->macOS;
}

/// One input, output or state as shown.
struct Feature {
  std::string name;
  std::string kind; ///< "tensor", "state", "int64", "double", "string", "other"
  std::string dtype;
  std::vector<Dim> shape;
  bool rankKnown = true;
  std::vector<std::vector<int64_t>> enumeratedShapes;
  std::vector<std::pair<uint64_t, int64_t>> shapeRange;
  bool optional = false;
};

Feature fromDescription(const FeatureDescription &d) {
  Feature f;
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

/// The program's type is more precise than the description's (symbolic
/// dims); prefer it when the value exists.
void refineFromType(Feature &f, const Type &t) {
  if (!t.isTensor() && !t.isState())
    return;
  f.dtype = std::string(dtypeName(t.dtype()));
  f.rankKnown = t.hasRank();
  f.shape = t.shape();
}

std::string shapeText(const Feature &f) {
  if (!f.rankKnown)
    return "(*)";
  std::string s = "(";
  for (size_t i = 0; i < f.shape.size(); ++i)
    s += (i ? ", " : "") + f.shape[i].str();
  return s + ")";
}

std::string flexText(const Feature &f) {
  std::string s;
  if (!f.enumeratedShapes.empty()) {
    s += "enumerated shapes:";
    for (const auto &shape : f.enumeratedShapes) {
      s += " (";
      for (size_t i = 0; i < shape.size(); ++i)
        s += (i ? ", " : "") + std::to_string(shape[i]);
      s += ")";
    }
  }
  if (!f.shapeRange.empty()) {
    s += s.empty() ? "" : "; ";
    s += "shape range:";
    for (size_t i = 0; i < f.shapeRange.size(); ++i) {
      const auto &[lo, hi] = f.shapeRange[i];
      s += (i ? " x " : " ") + std::to_string(lo) + ".." + (hi < 0 ? "inf" : std::to_string(hi));
    }
  }
  return s;
}

json featureJson(const Feature &f) {
  json j;
  j["name"] = f.name;
  j["kind"] = f.kind;
  if (f.kind == "tensor" || f.kind == "state") {
    j["dtype"] = f.dtype;
    if (f.rankKnown) {
      json shape = json::array();
      for (const Dim &d : f.shape) {
        if (d.isStatic())
          shape.push_back(d.size);
        else
          shape.push_back(d.str());
      }
      j["shape"] = shape;
    } else {
      j["shape"] = nullptr;
    }
    if (!f.enumeratedShapes.empty())
      j["enumeratedShapes"] = f.enumeratedShapes;
    if (!f.shapeRange.empty()) {
      json ranges = json::array();
      for (const auto &[lo, hi] : f.shapeRange)
        ranges.push_back({lo, hi < 0 ? json(nullptr) : json(hi)});
      j["shapeRange"] = ranges;
    }
  }
  if (f.optional)
    j["optional"] = true;
  return j;
}

struct FunctionSummary {
  std::string name;
  std::string opset;
  bool isDefault = false;
  std::vector<Feature> inputs, outputs, states;
  uint64_t opCount = 0;
};

struct Summary {
  std::string path;
  ModelFormat format = ModelFormat::Unknown;
  int specVersion = 0;
  std::string defaultFunction;
  std::vector<FunctionSummary> functions;
  std::vector<std::pair<std::string, uint64_t>> ops; ///< sorted by count, then name
  WeightCount weights;                               ///< stored and dense sizes (ops/Weights.h)
  struct WeightFileInfo {
    std::string name;
    std::string path;
    std::optional<uint64_t> bytes;
  };
  std::vector<WeightFileInfo> weightFiles;
  Metadata metadata;
};

/// "@model_path" for a model path, to locate weight files without opening them.
std::string modelDirectory(const std::string &path, ModelFormat format) {
  if (format == ModelFormat::MLPackage)
    return openPackage(path).modelDir;
  return fs::path(path).parent_path().string();
}

Summary summarize(const Model &model, const std::string &path) {
  Summary s;
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
        Feature f = fromDescription(d);
        if (const Value *v = fn->findInput(d.name))
          refineFromType(f, v->type);
        fs.inputs.push_back(f);
      }
      for (const FeatureDescription &d : desc.states) {
        Feature f = fromDescription(d);
        if (const Value *v = fn->findInput(d.name))
          refineFromType(f, v->type);
        fs.states.push_back(f);
      }
      for (const FeatureDescription &d : desc.outputs) {
        Feature f = fromDescription(d);
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
    Summary::WeightFileInfo w;
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

json metadataJson(const Metadata &m) {
  json j;
  j["shortDescription"] = m.shortDescription;
  j["author"] = m.author;
  j["license"] = m.license;
  j["versionString"] = m.versionString;
  j["userDefined"] = json::object();
  for (const auto &[k, v] : m.userDefined)
    j["userDefined"][k] = v;
  return j;
}

json toJson(const Summary &s) {
  json j;
  j["schema"] = kSchema;
  j["path"] = s.path;
  j["format"] = formatInfo(s.format).name;
  j["specificationVersion"] = s.specVersion;
  const SpecVersionInfo *info = specVersionInfo(s.specVersion);
  j["minimumOS"] = info ? json{{"iOS", info->iOS}, {"macOS", info->macOS}} : json(nullptr);
  j["defaultFunction"] = s.defaultFunction;
  j["functions"] = json::array();
  for (const FunctionSummary &f : s.functions) {
    json fj;
    fj["name"] = f.name;
    fj["opset"] = f.opset;
    fj["isDefault"] = f.isDefault;
    for (auto [key, list] : {std::pair{"inputs", &f.inputs}, std::pair{"outputs", &f.outputs},
                             std::pair{"states", &f.states}}) {
      fj[key] = json::array();
      for (const Feature &feat : *list)
        fj[key].push_back(featureJson(feat));
    }
    fj["opCount"] = f.opCount;
    j["functions"].push_back(fj);
  }
  j["ops"] = json::array();
  for (const auto &[type, count] : s.ops)
    j["ops"].push_back({{"type", type}, {"count", count}});
  json pj;
  pj["count"] = s.weights.storedElements;
  pj["bytes"] = s.weights.storedBytes;
  pj["byDType"] = json::array();
  for (const auto &[dtype, p] : s.weights.byDType)
    pj["byDType"].push_back({{"dtype", dtype}, {"count", p.elements}, {"bytes", p.bytes}});
  pj["denseCount"] = s.weights.denseElements;
  pj["denseBytes"] = s.weights.denseBytes;
  pj["byScheme"] = json::array();
  for (size_t i = 0; i < kWeightSchemes; ++i)
    if (const WeightTally &t = s.weights.byScheme[i]; t.elements)
      pj["byScheme"].push_back({{"scheme", weightSchemeName(static_cast<WeightScheme>(i))},
                                {"count", t.elements},
                                {"bytes", t.bytes}});
  j["parameters"] = pj;
  j["weightFiles"] = json::array();
  for (const auto &w : s.weightFiles)
    j["weightFiles"].push_back({{"name", w.name},
                                {"path", w.path.empty() ? json(nullptr) : json(w.path)},
                                {"bytes", w.bytes ? json(*w.bytes) : json(nullptr)}});
  j["metadata"] = metadataJson(s.metadata);
  return j;
}

/// 1234567 -> "1,234,567".
std::string grouped(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return out;
}

std::string humanBytes(uint64_t n) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  std::ostringstream os;
  if (u == 0)
    os << n << " B";
  else
    os << std::fixed << std::setprecision(1) << v << " " << units[u];
  return os.str();
}

void printFeatures(std::ostream &os, const char *title, const std::vector<Feature> &features) {
  if (features.empty())
    return;
  os << "  " << title << ":\n";
  size_t width = 0;
  for (const Feature &f : features)
    width = std::max(width, f.name.size());
  for (const Feature &f : features) {
    os << "    " << std::left << std::setw(static_cast<int>(width)) << f.name << "  ";
    if (f.kind == "tensor" || f.kind == "state")
      os << shapeText(f) << " " << f.dtype;
    else
      os << f.kind;
    if (f.optional)
      os << " (optional)";
    std::string flex = flexText(f);
    if (!flex.empty())
      os << "  [" << flex << "]";
    os << "\n";
  }
}

void printText(const Summary &s, std::ostream &os) {
  os << "model: " << s.path << " (" << formatInfo(s.format).name << ")\n";
  os << "specification version: " << s.specVersion << " (" << osText(s.specVersion) << ")\n";
  if (!s.defaultFunction.empty())
    os << "default function: " << s.defaultFunction << "\n";
  for (const FunctionSummary &f : s.functions) {
    os << "function " << f.name << ": opset " << (f.opset.empty() ? "?" : f.opset);
    if (int n = opsetNumber(f.opset))
      os << " (" << osText(specVersionForOpset(n)) << ")";
    os << ", " << f.opCount << " ops" << (f.isDefault ? ", default" : "") << "\n";
    printFeatures(os, "inputs", f.inputs);
    printFeatures(os, "outputs", f.outputs);
    printFeatures(os, "states", f.states);
  }
  uint64_t total = 0;
  for (const auto &[type, count] : s.ops)
    total += count;
  os << "ops: " << total << " in " << s.ops.size() << " types\n";
  for (const auto &[type, count] : s.ops)
    os << "  " << std::right << std::setw(8) << count << "  " << type << "\n";
  const WeightCount &w = s.weights;
  os << "parameters: " << grouped(w.storedElements) << " (" << humanBytes(w.storedBytes)
     << " stored";
  if (w.compressed())
    os << ", " << humanBytes(w.denseBytes) << " decompressed";
  os << ")\n";
  for (const auto &[dtype, p] : w.byDType)
    os << "  " << std::left << std::setw(10) << dtype << std::right << std::setw(16)
       << grouped(p.elements) << "  " << humanBytes(p.bytes) << "\n";
  if (w.compressed()) {
    os << "  stored as:";
    const char *sep = " ";
    for (size_t i = 0; i < kWeightSchemes; ++i)
      if (const WeightTally &t = w.byScheme[i]; t.elements) {
        os << sep << weightSchemeName(static_cast<WeightScheme>(i)) << " " << grouped(t.elements)
           << " (" << humanBytes(t.bytes) << ")";
        sep = ", ";
      }
    os << "\n";
  }
  if (!s.weightFiles.empty()) {
    os << "weight files:\n";
    for (const auto &w : s.weightFiles) {
      os << "  " << w.name;
      if (!w.path.empty())
        os << " -> " << w.path;
      os << (w.bytes ? " (" + humanBytes(*w.bytes) + ")" : std::string(" (missing)")) << "\n";
    }
  }
  const Metadata &m = s.metadata;
  if (!m.shortDescription.empty() || !m.author.empty() || !m.license.empty() ||
      !m.versionString.empty() || !m.userDefined.empty()) {
    os << "metadata:\n";
    for (auto [key, value] :
         {std::pair{"description", &m.shortDescription}, std::pair{"author", &m.author},
          std::pair{"license", &m.license}, std::pair{"version", &m.versionString}})
      if (!value->empty())
        os << "  " << key << ": " << *value << "\n";
    for (const auto &[k, v] : m.userDefined)
      os << "  " << k << ": " << v << "\n";
  }
}

struct ShowOptions {
  std::string model;
  bool json = false;
};

/// A .pte without a "#N" selector: the program's methods and delegates, then
/// each Core ML delegate's model.
int showPte(const ShowOptions &opts) {
  std::shared_ptr<PteFile> pte = PteFile::open(opts.model);
  LoadOptions load;
  load.openWeights = false;
  std::vector<EmbeddedModel> models = loadPteModels(opts.model, load);
  if (opts.json) {
    json j;
    j["schema"] = "anefit.show-pte/1";
    j["path"] = opts.model;
    j["fileIdentifier"] = pte->fileIdentifier();
    j["methods"] = pte->methods();
    j["delegates"] = json::array();
    size_t coreml = 0;
    for (const PteDelegate &d : pte->delegates()) {
      json dj{{"method", d.method},
              {"index", d.indexInMethod},
              {"backend", d.backendId},
              {"location", d.location},
              {"compileSpecs", d.compileSpecs}};
      if (d.isCoreML()) {
        std::string selector = opts.model + "#" + std::to_string(coreml);
        dj["selector"] = selector;
        const Model &m = *models[coreml++].model;
        json wb = json::array();
        for (const HostWriteBack &w : m.hostWriteBacks)
          wb.push_back(
              {{"function", w.function}, {"output", w.output}, {"input", w.input}, {"how", w.how}});
        dj["writeBack"] = wb;
        if (!m.hostWriteBackError.empty())
          dj["writeBackError"] = m.hostWriteBackError;
        dj["model"] = toJson(summarize(m, selector));
      }
      j["delegates"].push_back(dj);
    }
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return kExitOk;
  }
  std::cout << "ExecuTorch program: " << opts.model << " (" << pte->fileIdentifier()
            << "), methods:";
  for (const std::string &m : pte->methods())
    std::cout << " " << m;
  std::cout << "\n";
  size_t coreml = 0;
  for (const PteDelegate &d : pte->delegates()) {
    std::cout << "  " << d.label();
    if (d.isCoreML())
      std::cout << " -> " << opts.model << "#" << coreml++;
    for (const auto &[k, v] : d.compileSpecs)
      if (k == "compute_units" || k == "min_deployment_target" || k == "model_compute_precision")
        std::cout << "  " << k << "=" << v;
    std::cout << "\n";
    if (!d.isCoreML())
      continue;
    const Model &m = *models[coreml - 1].model;
    if (!m.hostWriteBackError.empty())
      std::cout << "    write-back not readable: " << m.hostWriteBackError << "\n";
    else if (!m.hostWriteBacks.empty())
      std::cout << "    ExecuTorch writes " << m.hostWriteBacks.size()
                << " outputs back into inputs after each call:\n";
    for (const HostWriteBack &w : m.hostWriteBacks)
      std::cout << "      " << w.output << " -> " << w.input << "  (" << w.how << ")\n";
  }
  for (size_t i = 0; i < models.size(); ++i) {
    std::string selector = opts.model + "#" + std::to_string(i);
    std::cout << "\n";
    printText(summarize(*models[i].model, selector), std::cout);
  }
  return kExitOk;
}

int runShow(const ShowOptions &opts) {
  if (detectFormat(opts.model) == ModelFormat::Pte && !splitPteSelector(opts.model).second)
    return showPte(opts);
  LoadOptions load;
  load.openWeights = false; // show never reads weight data
  std::unique_ptr<Model> model = loadModel(opts.model, load);
  Summary s = summarize(*model, opts.model);
  if (opts.json)
    std::cout << toJson(s).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  else
    printText(s, std::cout);
  return kExitOk;
}

} // namespace

void registerShow(CLI::App &verb, VerbResult &result) {
  auto opts = std::make_shared<ShowOptions>();
  CLI::App *cmd = &verb;
  cmd->add_option("MODEL", opts->model, modelArgumentHelp())->required();
  cmd->add_flag("--json", opts->json, "Print JSON (schema anefit.show/1, see docs/show.md)");
  cmd->footer("Weight files are located but never read.");
  cmd->callback([opts, &result] { result.exitCode = runGuarded([&] { return runShow(*opts); }); });
}

} // namespace anefit::cli
