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

#include <memory>
#include <string>

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
std::unique_ptr<Model> loadModel(const std::string &path, const LoadOptions &options = {});

struct SaveOptions {
  /// Replace an existing output.
  bool overwrite = true;
};

/// Writes `model` to `path` in the format its extension names. Blob constants
/// are copied blob by blob from their source stores. Atomic: the result
/// appears under `path` only when complete. Throws InputError.
void saveModel(const Model &model, const std::string &path, const SaveOptions &options = {});

} // namespace anefit
