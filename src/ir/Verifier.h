//===- Verifier.h - Structural checks of programs and models ----*- C++ -*-===//
//
// The structural rules every MIL program must follow, independent of what
// each op means: SSA names, definitions before uses, block outputs, op names,
// known opsets; and for a model, that its description matches the functions.
// What only the op table knows (parameters, types, which ops may take a
// state) lives in ops/OpVerifier.h.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Model.h"
#include "support/Diagnostic.h"

namespace anefit {

/// Checks the structure of every function of `program`.
Diagnostics verifyProgram(const Program &program);

/// Only the rules without which the IR cannot be used at all: every value
/// defined once, every use (and block output) after its definition and in
/// its scope, function names unique. Readers refuse programs that break
/// them, so no pass, interpreter or writer ever sees such a program.
Diagnostics verifyValueScopes(const Program &program);

/// Deepest nesting of blocks inside a function body that anefit reads and
/// writes. Deeper programs exceed protobuf's recursion limit on reading.
inline constexpr int kMaxBlockNesting = 32;

/// Why `model` cannot be written so that anefit (and Core ML) read it back,
/// or an empty string: value-scope errors, blocks nested deeper than
/// kMaxBlockNesting, names or strings that are not UTF-8, static shapes whose
/// element count overflows int64, constants holding fewer bytes than their
/// type needs (blob data included, when its store is open).
std::string unwritableReason(const Model &model);

/// verifyProgram plus the consistency of the model's specification version
/// and description (inputs, outputs, states, default function) with the program.
Diagnostics verifyModel(const Model &model);

} // namespace anefit
