//===- ModelIO.h - Reading and writing models in every format ---*- C++ -*-===//
//
// One entry point per direction. The format is chosen from the path, by the
// table of formats (ModelFormats.def):
//   *.mlpackage (directory)  Manifest.json + model protobuf + weight files
//   *.mlmodel                a bare Model protobuf
//   *.mil                    MIL text (ir/AsmParser.h)
//   *.pte                    an ExecuTorch program with Core ML delegates
// Readers never modify their input and refuse programs whose values are
// defined twice or used out of scope; writers follow the output policy of
// support/FileSystem.h. Every malformed input raises InputError.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/AsmParser.h"
#include "ir/Model.h"
#include "support/FileSystem.h"

#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace anefit {

enum class ModelFormat {
#define FORMAT(Id, name, extensions, directory, detect, load, save, note) Id,
#include "io/ModelFormats.def"
  Unknown,
};

/// One row of ModelFormats.def.
struct ModelFormatInfo {
  ModelFormat format;
  std::string_view name;       ///< "mlpackage"
  std::string_view extensions; ///< ".mlpackage" (several separated by spaces)
  bool directory;              ///< models of this format are directories
  bool writable;               ///< saveModel writes it
  std::string_view note;       ///< remark for help text, or empty
};

/// Every format, in table order.
std::span<const ModelFormatInfo> modelFormats();
/// The row of `format`; for Unknown a row named "unknown".
const ModelFormatInfo &formatInfo(ModelFormat format);

/// Which rows of ModelFormats.def a text names.
enum class FormatSet {
  Readable, ///< every format
  Writable, ///< the formats saveModel writes
  ReadOnly, ///< the formats that are only read
};

/// ".mlpackage, .mlmodel, .mil or .pte": the extensions of the formats of
/// `set`, the last two joined by `conjunction`.
std::string formatExtensionsText(FormatSet set, std::string_view conjunction = "or");
/// formatExtensionsText of the readable (or, with `writable`, the writable)
/// formats.
std::string formatExtensionsText(bool writable = false);
/// Help text for a model argument: "Model: .mlpackage, .mlmodel, .mil or .pte
/// (MODEL.pte#N: one Core ML delegate)".
std::string modelArgumentHelp();

/// Guesses the format from the path (and, for directories, their contents).
ModelFormat detectFormat(const std::string &path);

struct LoadOptions {
  /// When false, weight files are not opened (blob constants keep their
  /// BlobRef without a store). `check` uses this: it never reads weights.
  bool openWeights = true;
  /// With openWeights, a weight file that does not exist leaves its blob
  /// constants unresolved instead of failing (anefit-opt reads text whose
  /// weights may be elsewhere).
  bool allowMissingWeights = false;
  /// Read the path as this format whatever its name; Unknown: detect it.
  ModelFormat format = ModelFormat::Unknown;
  /// How MIL text is read (coremltools' print form).
  ParseOptions text = {};
  /// Refuse a program whose values are defined twice or used outside their
  /// scope (ir/Verifier.h verifyValueScopes). Only a verifier driver that
  /// reports such programs itself turns this off.
  bool checkScopes = true;
};

/// Reads MIL text held in memory; `origin` names it in messages and
/// `modelDir` is what "@model_path" stands for.
std::unique_ptr<Model> loadModelText(std::string_view text, const std::string &origin,
                                     const std::string &modelDir, const LoadOptions &options = {});

/// Reads a model. Throws InputError with file, place, expected and found.
/// For a .pte, the Core ML model of its only Core ML delegate; with several,
/// select one by its position with a "#N" suffix ("model.pte#1").
std::unique_ptr<Model> loadModel(const std::string &path, const LoadOptions &options = {});

/// The models `path` names: the one model of loadModel, except for an
/// ExecuTorch program named without "#N" that holds several Core ML
/// delegates: each of them, in program order (the order of "#N").
std::vector<std::unique_ptr<Model>> loadModels(const std::string &path,
                                               const LoadOptions &options = {});

/// A Core ML model carried by an ExecuTorch program.
struct EmbeddedModel {
  std::string method;         ///< ExecuTorch method ("forward")
  uint32_t delegateIndex = 0; ///< position among the method's delegates
  std::string label;          ///< "forward/delegate 0 (CoreMLBackend)"
  std::map<std::string, std::string> compileSpecs;
  std::unique_ptr<Model> model;
};

/// A Core ML delegate payload as ExecuTorch hands it to its backend's init:
/// the model, and the Core ML names ExecuTorch binds the delegate's arguments
/// by (its metadata.json), inputs then outputs in argument order.
struct CoreMLDelegatePayload {
  std::unique_ptr<Model> model;
  /// The function the delegate runs (a multifunction package's function for
  /// the method; otherwise the model's default).
  std::string function;
  std::vector<std::string> inputNames;
  std::vector<std::string> outputNames;
};

/// Reads a Core ML delegate payload held in memory: an inmemoryfs flattened
/// directory holding model.mlpackage and metadata.json. `keepAlive` owns the
/// bytes (weights are read where they lie, never copied); `label` names the
/// payload in messages; `method` picks the entry of a multifunction
/// payload's metadata. Throws InputError (a compiled model.mlmodelc, missing
/// files, metadata that does not name the arguments, or names the model does
/// not declare).
CoreMLDelegatePayload readCoreMLPayload(std::span<const uint8_t> payload,
                                        std::shared_ptr<const void> keepAlive,
                                        const std::string &label, const std::string &method = "",
                                        const LoadOptions &options = {});

/// "model.pte#2" -> ("model.pte", 2): a path naming one Core ML delegate of
/// an ExecuTorch program; other paths come back unchanged with no selector.
std::pair<std::string, std::optional<size_t>> splitPteSelector(const std::string &path);

/// Every Core ML delegate payload of the .pte at `path` (a flattened
/// directory holding model.mlpackage, or a CMJR reference into named data),
/// read from memory without unpacking files. Compiled payloads
/// (model.mlmodelc) are refused. Each model's sourcePath is "path#N" and its
/// debugHandles come from ExecuTorch's debug-handle mapping when present.
std::vector<EmbeddedModel> loadPteModels(const std::string &path, const LoadOptions &options = {});

/// How `rewritten`'s interface (functions; per function the inputs, outputs
/// and states with names, shapes and types, in order) differs from
/// `original`'s: the first difference as text, or "" when they match. A
/// .pte delegate's rewrite must keep it.
std::string interfaceDifference(const Model &original, const Model &rewritten);

struct SaveOptions {
  /// Replace an existing output (the --force of every verb).
  bool force = false;
};

/// Writes `model` to `path` in the format its extension names (a writable
/// row of ModelFormats.def), under the output policy of support/FileSystem.h
/// (never over, inside or around an input; an existing output only with
/// `force`). Refuses a model the readers could not read back (ir/Verifier.h
/// unwritableReason). Blob constants are copied blob by blob from their
/// source stores. Atomic: the result appears under `path` only when
/// complete. Throws InputError.
void saveModel(const Model &model, const std::string &path, const SaveOptions &options = {});

/// Writes a copy of the .pte at `inPath` to `outPath` in which Core ML
/// delegate i (the position "#i" of loadPteModels) carries `models[i]`
/// instead of its model (null, or past the end of `models`: unchanged).
/// The rest of the program is copied byte for byte (Pte.h,
/// writePteWithSegments). Delegates that share one payload (multi-method
/// weight sharing) take the model given for the first of them. Throws
/// InputError when a model's inputs or outputs differ from the names
/// ExecuTorch binds (metadata.json), for inline payloads, and on bad input.
/// The output goes through the output policy of support/FileSystem.h.
void savePteModels(const std::string &inPath, const std::vector<const Model *> &models,
                   const std::string &outPath, const SaveOptions &options = {});

} // namespace anefit
