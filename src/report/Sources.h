//===- Sources.h - Findings joined to the user's source ---------*- C++ -*-===//
//
// `check --etrecord`: each finding's op, through the ExecuTorch debug
// handles its .pte gives it, joined to the nodes of the export's ETRecord
// (io/ETRecord.h): the innermost Python frame outside PyTorch, the
// nn.Module path, and for an op whose output ExecuTorch writes back into a
// buffer (or that reads one), the buffer's module path.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ane/Checker.h"
#include "io/ETRecord.h"
#include "ir/Model.h"

#include <string>

namespace anefit::report {

/// Fills Finding::source of every finding of `report` (a check of
/// `model`, a Core ML delegate of the program `record` was exported with).
/// Paths are shown relative to `sourceRoot` (relativeSource). Throws
/// InputError when the ETRecord is of another program: some op's debug
/// handles differ from every delegate map of the record, or the model has
/// none to join by.
void attachSources(ane::CheckReport &report, const Model &model, const ETRecord &record,
                   const std::string &sourceRoot = {});

} // namespace anefit::report
