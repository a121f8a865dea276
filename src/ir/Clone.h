//===- Clone.h - Deep copies of operations ----------------------*- C++ -*-===//
//
// Copies an operation with its nested blocks into another place of a program
// (or another program), rewiring every operand through a map from old values
// to new ones. Constants are shared, not copied: they are immutable.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <map>
#include <memory>

namespace anefit {

/// Old value -> its counterpart in the copy.
using ValueMapping = std::map<const Value *, Value *>;

/// Deep-copies `op`. Operands found in `mapping` are rewired; operands not in
/// it keep pointing at the original values (the caller maps them first when
/// copying into another program). The copy's outputs and nested block inputs
/// are added to `mapping`.
std::unique_ptr<Operation> cloneOperation(const Operation &op, ValueMapping &mapping);

} // namespace anefit
