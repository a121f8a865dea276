//===- ModelIO.h - Reading and writing models in every format ---*- C++ -*-===//
//
// One entry point per direction. The format is chosen from the path:
//   *.mlpackage (directory)  Manifest.json + model protobuf + weight files
//   *.mlmodel                a bare Model protobuf
//   *.mil                    MIL text (ir/AsmParser.h)
//   *.pte                    an ExecuTorch program with Core ML delegates
// Readers never modify their input; writers write to a temporary sibling and
// rename it into place. Every malformed input raises InputError.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Model.h"

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace anefit {

enum class ModelFormat { MLPackage, MLModel, MilText, Pte, Unknown };

/// Guesses the format from the path (and, for directories, their contents).
ModelFormat detectFormat(const std::string &path);

struct LoadOptions {
  /// When false, weight files are not opened (blob constants keep their
  /// BlobRef without a store). `check` uses this: it never reads weights.
  bool openWeights = true;
};

/// Reads a model. Throws InputError with file, place, expected and found.
/// For a .pte, the Core ML model of its only Core ML delegate; with several,
/// select one by its position with a "#N" suffix ("model.pte#1").
std::unique_ptr<Model> loadModel(const std::string &path, const LoadOptions &options = {});

/// A Core ML model carried by an ExecuTorch program.
struct EmbeddedModel {
  std::string method;         ///< ExecuTorch method ("forward")
  uint32_t delegateIndex = 0; ///< position among the method's delegates
  std::string label;          ///< "forward/delegate 0 (CoreMLBackend)"
  std::map<std::string, std::string> compileSpecs;
  std::unique_ptr<Model> model;
};

/// Every Core ML delegate payload of the .pte at `path` (a flattened
/// directory holding model.mlpackage, or a CMJR reference into named data),
/// read from memory without unpacking files. Compiled payloads
/// (model.mlmodelc) are refused. Each model's sourcePath is "path#N" and its
/// debugHandles come from ExecuTorch's debug-handle mapping when present.
std::vector<EmbeddedModel> loadPteModels(const std::string &path, const LoadOptions &options = {});

struct SaveOptions {
  /// Replace an existing output.
  bool overwrite = true;
};

/// Writes `bytes` to `path` through a temporary sibling renamed into place,
/// so a failed write never leaves a half-written file. Throws InputError.
void writeFileAtomically(const std::string &path, std::string_view bytes);

/// Writes `model` to `path` in the format its extension names. Blob constants
/// are copied blob by blob from their source stores. Atomic: the result
/// appears under `path` only when complete. Throws InputError.
void saveModel(const Model &model, const std::string &path, const SaveOptions &options = {});

} // namespace anefit
