//===- OpVerifier.h - Checks ops against the registry ----------*- C++ -*-===//
//
// Checks every operation of a program against its registry row: known op,
// parameters present, constant where required, allowed dtypes, and declared
// output types agreeing with the inferred ones.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"
#include "support/Diagnostic.h"

namespace anefit {

/// For every op: known to the registry for the function's opset (else a Warning "unknown op 'foo'
/// loaded as opaque with its declared types"), required params present, no unknown params,
/// const-only params bound to constants, dtypes allowed, inferred output types compatible with the
/// declared ones (symbolic/unknown dims compatible with anything) - Error on mismatch naming op,
/// output, declared and inferred types.
/// Every state is bound only to a State parameter of a state op (read from
/// the op table); otherwise an Error naming the op and the parameter.
Diagnostics verifyOps(const Program &program);

/// Only the state-use check of verifyOps, for a program whose ops need no
/// other check (a rewrite's result).
Diagnostics verifyStateUses(const Program &program);

/// Reorders each op's inputs into the registry's parameter order (readers sort alphabetically).
/// Parameters the registry does not know keep their relative order after the known ones.
void canonicalizeInputOrder(Program &program);

} // namespace anefit
