//===- Package.h - The .mlpackage directory container -----------*- C++ -*-===//
//
// A .mlpackage is a directory: Manifest.json names the items stored under
// Data/, one of which is the root model protobuf; its weight files sit in a
// weights/ directory next to it (formats.md §1). This file validates the
// manifest, locates the model and its weights without ever letting a path
// leave the package, and writes new packages atomically.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "io/WeightFile.h"
#include "support/FileSystem.h"

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace anefit {

/// The validated contents of Manifest.json.
struct Manifest {
  struct Item {
    std::string identifier;
    std::string author;
    std::string description;
    std::string name;
    std::string path; ///< relative to Data/, normalised
  };
  std::string fileFormatVersion;
  std::string rootModelIdentifier;
  std::vector<Item> items; ///< in identifier order

  /// The item named by rootModelIdentifier (always present after parsing).
  const Item &rootItem() const;
};

/// Parses and validates Manifest.json text: a version no newer than 1.0.0,
/// entries with the four string keys, every path relative and inside Data/,
/// and rootModelIdentifier naming an entry. `fileName` is used in messages.
/// Throws InputError.
Manifest parseManifest(std::string_view text, const std::string &fileName);

/// Where the parts of a package on disk are.
struct PackageLayout {
  std::string root;       ///< the package directory
  std::string modelFile;  ///< Data/<root item path>: the model protobuf
  std::string modelDir;   ///< directory of modelFile, what "@model_path" names
  std::string weightsDir; ///< modelDir/weights
  Manifest manifest;
};

/// True if `path` is a directory holding a Manifest.json.
bool isPackageDirectory(const std::string &path);

/// Reads and validates the package at `dir` and locates its model file,
/// which must exist inside the package (symbolic links included). Throws
/// InputError. Does not read the model or the weights.
PackageLayout openPackage(const std::string &dir);

/// Resolves a weight-file name used by a program ("@model_path/weights/
/// weight.bin") against `modelDir`, the directory "@model_path" stands for.
/// The result must lie in modelDir/weights; names that escape it, or that do
/// not start with "@model_path/", throw an InputError naming `referrer`.
std::string resolveWeightPath(const std::string &modelDir, const std::string &fileName,
                              const std::string &referrer);

/// Fills a package's files. It gets a writer for weights/weight.bin and
/// returns the serialized model protobuf; if no blob was appended the weight
/// file is left out (the weights/ directory is kept).
using PackageContentWriter = std::function<std::string(WeightWriter &weights)>;

/// A package's files as writePackage lays them out, for containers that
/// hold a package without a directory (a .pte payload): the small files in
/// memory, the weight file written elsewhere through a sink.
struct PackageFiles {
  /// Path inside the package -> bytes: Manifest.json and the model protobuf.
  std::vector<std::pair<std::string, std::string>> small;
  /// Path of the weight file inside the package, empty if no blob was
  /// appended (the weight file is then left out).
  std::string weightFile;
};

/// Lays out a package's content: `writeContent` appends blobs through a
/// WeightWriter feeding `weightSink` (named `weightName` in messages) and
/// returns the model protobuf. Throws InputError.
PackageFiles buildPackageFiles(const PackageContentWriter &writeContent,
                               const WeightWriter::Sink &weightSink, const std::string &weightName);

/// Writes a package to `dest` under the output policy (support/FileSystem.h):
/// everything goes to a temporary sibling directory that is swapped into
/// place when complete (an existing `dest` is replaced only with
/// options.force). On failure or interrupt the temporary directory is
/// removed and `dest` is untouched. Throws InputError.
void writePackage(const std::string &dest, const PackageContentWriter &writeContent,
                  const OutputOptions &options = {});

/// A fresh random (version 4) UUID in upper case, as Manifest identifiers.
std::string makeUuid();

/// True if `a` and `b` name the same file or directory, or `b` lies inside
/// the directory `a` (compared after resolving symbolic links; `b` need not
/// exist yet). Used to refuse writing over a model that is being read.
bool pathContains(const std::string &a, const std::string &b);

} // namespace anefit
