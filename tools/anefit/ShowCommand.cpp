//===- ShowCommand.cpp - anefit show: a summary of a model ----------------===//
//
// Prints the model summary of io/ModelSummary.h (specification version and
// the OS it needs, functions with their opsets, inputs, outputs and states,
// an op-type histogram, parameter counts by dtype and the weight files), and
// for an ExecuTorch program its methods, delegates and write-back first.
// Weight data is never read, so `show` is fast on any model size. The --json
// form is the stable schema "anefit.show/1" (docs/show.md).
//
//===----------------------------------------------------------------------===//
#include "Command.h"

#include "io/ModelIO.h"
#include "io/ModelSummary.h"
#include "io/Pte.h"
#include "ir/Model.h"
#include "ops/Weights.h"
#include "support/Json.h"
#include "support/Units.h"
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <sstream>

using json = nlohmann::ordered_json;

namespace anefit::cli {
namespace {

constexpr const char *kSchema = "anefit.show/1";

std::string shapeText(const FeatureSummary &f) {
  if (!f.rankKnown)
    return "(*)";
  std::string s = "(";
  for (size_t i = 0; i < f.shape.size(); ++i)
    s += (i ? ", " : "") + f.shape[i].str();
  return s + ")";
}

std::string flexText(const FeatureSummary &f) {
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

json featureJson(const FeatureSummary &f) {
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

json toJson(const ModelSummary &s) {
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
      for (const FeatureSummary &feat : *list)
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

void printFeatures(std::ostream &os, const char *title,
                   const std::vector<FeatureSummary> &features) {
  if (features.empty())
    return;
  os << "  " << title << ":\n";
  size_t width = 0;
  for (const FeatureSummary &f : features)
    width = std::max(width, f.name.size());
  for (const FeatureSummary &f : features) {
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

void printText(const ModelSummary &s, std::ostream &os) {
  os << "model: " << s.path << " (" << formatInfo(s.format).name << ")\n";
  os << "specification version: " << s.specVersion << " (" << minimumOSText(s.specVersion) << ")\n";
  if (!s.defaultFunction.empty())
    os << "default function: " << s.defaultFunction << "\n";
  for (const FunctionSummary &f : s.functions) {
    os << "function " << f.name << ": opset " << (f.opset.empty() ? "?" : f.opset);
    if (int n = opsetNumber(f.opset))
      os << " (" << minimumOSText(specVersionForOpset(n)) << ")";
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
        dj["model"] = toJson(summarizeModel(m, selector));
      }
      j["delegates"].push_back(dj);
    }
    std::cout << dumpJson(j, 2) << "\n";
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
    printText(summarizeModel(*models[i].model, selector), std::cout);
  }
  return kExitOk;
}

int runShow(const ShowOptions &opts) {
  if (detectFormat(opts.model) == ModelFormat::Pte && !splitPteSelector(opts.model).second)
    return showPte(opts);
  LoadOptions load;
  load.openWeights = false; // show never reads weight data
  std::unique_ptr<Model> model = loadModel(opts.model, load);
  ModelSummary s = summarizeModel(*model, opts.model);
  if (opts.json)
    std::cout << dumpJson(toJson(s), 2) << "\n";
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
