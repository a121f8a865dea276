//===- Clone.h - Deep copies of operations and models -----------*- C++ -*-===//
//
// Copies an operation with its nested blocks into another place of a program
// (or another program), rewiring every operand through a map from old values
// to new ones, and copies whole models so a rewrite can work on a copy while
// the original stays as it was read. Constants and weight stores are shared,
// not copied: they are immutable.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"
#include "ir/Model.h"

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

/// Deep-copies a program: functions, their inputs, every block
/// specialization and attribute. Constants are shared with `program`.
std::unique_ptr<Program> cloneProgram(const Program &program);

/// Deep-copies a model: program, description, metadata, origin and debug
/// handles. Weight stores and constants are shared with `model`, so the copy
/// costs no weight bytes; the two can then be rewritten independently.
std::unique_ptr<Model> cloneModel(const Model &model);

} // namespace anefit
