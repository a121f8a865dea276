//===- AsmPrinter.h - MIL text printer --------------------------*- C++ -*-===//
//
// Prints a Program (and, with a header line, a whole Model) in anefit's MIL
// text form: coremltools' `print(prog)` grammar extended so that the text holds
// everything the IR holds and parses back to the same IR (docs/mil-text.md).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Model.h"

#include <ostream>
#include <string>

namespace anefit {

struct PrintOptions {
  /// Print const ops. When false the output looks like coremltools' own
  /// print: const ops are hidden and small constants appear as literals at
  /// their uses. Such text still parses, but const ops are not recreated.
  bool printConsts = true;
};

/// Prints the functions of `program` (and a `program(...)` line when the
/// program carries a version, doc string or attributes).
void printProgram(const Program &program, std::ostream &os, const PrintOptions &options = {});

/// Prints the `// anefit model:` header line (specification version and
/// description as compact JSON) followed by the program.
void printModel(const Model &model, std::ostream &os);

/// printModel into a string.
std::string modelToString(const Model &model);

/// The text form of a type as used in value declarations, e.g.
/// "(1, is0, fp16)(Tensor)", "(fp32)(Scalar)", "List[2, (3,fp32)(Tensor)](List)".
std::string typeToText(const Type &type);

/// The text form of a constant as printed in an op argument (a literal, a
/// BLOBFILE reference, ... with a type suffix where the literal alone would
/// not say its type).
std::string constantToText(const Constant &constant);

} // namespace anefit
