//===- Verifier.h - Structural checks of programs and models ----*- C++ -*-===//
//
// The structural rules every MIL program must follow, independent of what
// each op means: SSA names, definitions before uses, block outputs, op names,
// where state values may be used, known opsets; and for a model, that its
// description matches the functions. Op-specific type rules live in
// ops/OpVerifier.h.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/Model.h"
#include "support/Diagnostic.h"

namespace anefit {

/// Checks the structure of every function of `program`.
Diagnostics verifyProgram(const Program &program);

/// verifyProgram plus the consistency of the model's specification version
/// and description (inputs, outputs, states, default function) with the program.
Diagnostics verifyModel(const Model &model);

} // namespace anefit
