//===- AsmParser.h - MIL text parser ----------------------------*- C++ -*-===//
//
// Reads anefit's MIL text form (what AsmPrinter.h prints) and the text
// coremltools prints for a program (`print(prog)`), into a Model. Every
// problem is an InputError "FILE:LINE:COL: message"; nesting depth is bounded
// so no input can exhaust the stack. docs/mil-text.md is the grammar.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Model.h"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace anefit {

/// Parses a whole model. With a `// anefit model:` header line the
/// specification version and description come from it; without one they are
/// synthesized from the program (tensor inputs -> multi-array inputs, state
/// inputs -> states, block outputs -> outputs, specification version = opset
/// number + 1). BLOBFILE constants are resolved through `openWeights` (which
/// may be null, leaving them without a store). Throws InputError.
std::unique_ptr<Model> parseModelText(std::string_view text, const std::string &fileName,
                                      const WeightOpener &openWeights);

struct ParseOptions {
  /// Accept `%name` references to values the text never defines, as in
  /// coremltools' print output, which hides const ops and shows constants of
  /// more than 10 elements by name. Each such name becomes a const op without
  /// a value, of unknown type, at the start of its function (the verifier
  /// reports it). Off by default: an undefined name is an error.
  bool allowUndefinedValues = false;
};

/// parseModelText with options.
std::unique_ptr<Model> parseModelText(std::string_view text, const std::string &fileName,
                                      const WeightOpener &openWeights, const ParseOptions &options);

/// Fills in `model.specificationVersion` and `model.description` from its
/// program as parseModelText does for text without a header.
void synthesizeDescription(Model &model);

/// The line that separates the test cases of one MIL text file
/// (`anefit-opt --split-input-file`, as MLIR's).
inline constexpr std::string_view kSplitMarker = "// -----";

/// Splits `text` at every line that is kSplitMarker (trailing spaces and a
/// '\r' allowed). Each part starts with as many blank lines as lines precede
/// it, so a parser reports the line numbers of the whole file. Text without
/// a marker is one part.
std::vector<std::string> splitInputFile(std::string_view text);

} // namespace anefit
