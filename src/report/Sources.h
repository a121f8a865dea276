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
#include <string_view>
#include <vector>

namespace anefit::report {

/// Fills Finding::source of every finding of `report` (a check of
/// `model`, a Core ML delegate of the program `record` was exported with).
/// Paths are shown relative to `sourceRoot` (relativeSource). Throws
/// InputError when the ETRecord is of another program: some op's debug
/// handles differ from every delegate map of the record, or the model has
/// none to join by.
void attachSources(ane::CheckReport &report, const Model &model, const ETRecord &record,
                   const std::string &sourceRoot = {});

/// A node-data overlay for Google's Model Explorer over the ETRecord's
/// graph (its ETRecord adapter names nodes after the FX nodes): for every
/// edge node behind an op of `report`, its predicted placement as the
/// value ("ane", "cpu-gpu", "blocks-ane-compile", "at-risk", or "mixed"
/// when its ops are placed differently) with the placement's colour from
/// the report's palette, the rules of its blocking findings appended. One
/// graph's node data (`results`, `name`), which Model Explorer applies to
/// the graph it shows (`--node_data_paths`). `reports[i]` is a check of
/// `models[i]`, every Core ML delegate of the program. JSON text.
std::string modelExplorerOverlay(const std::vector<const ane::CheckReport *> &reports,
                                 const std::vector<const Model *> &models, const ETRecord &record);

} // namespace anefit::report
