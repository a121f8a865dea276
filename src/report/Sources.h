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
#include "partition/Partitioner.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace anefit::report {

/// The join of one Core ML model (a delegate of a .pte) to the ETRecord of
/// the export it came from: each op to its edge node, the innermost frame
/// outside PyTorch, the module and, for an op whose output ExecuTorch writes
/// back into a buffer (or that reads one), the buffer. Holds references to
/// both; they must outlive it.
class SourceJoin {
public:
  /// Throws InputError when the ETRecord is of another program: some op's
  /// debug handles differ from every delegate map of the record, or the
  /// model (named `modelName` in the message) has none to join by.
  SourceJoin(const Model &model, const ETRecord &record, std::string sourceRoot,
             const std::string &modelName);

  /// Where `op` comes from; `note` says why when no line is known.
  ane::Finding::Source of(const Operation &op) const;
  /// The same for an op known only by its debug handles (`op` may be null:
  /// then no buffer is looked for).
  ane::Finding::Source of(const std::vector<int64_t> &handles, const Operation *op) const;

private:
  const Model &model_;
  const ETRecord &record_;
  std::string sourceRoot_;
  std::map<std::string, std::string> writes_; ///< graph output -> buffer written
};

/// `source` as the JSON object findings[].source holds (docs/check.md).
nlohmann::ordered_json sourceJson(const ane::Finding::Source &source);

/// The places in the user's source behind some ops, most ops first.
struct SourceSites {
  /// One entry per source line and module group, "sdpa.py:461
  /// layers.*.attention (12 ops)", at most the limit asked for.
  std::vector<std::string> places;
  size_t more = 0; ///< places left out
  /// "and 2 more places" ("" when none was left out).
  std::string moreText() const {
    return more ? "and " + std::to_string(more) + " more place" + (more == 1 ? "" : "s") : "";
  }
};
/// The places of `sources` (one per op), at most `limit` of them.
SourceSites sourceSites(const std::vector<ane::Finding::Source> &sources, size_t limit = 3);

/// The split plan as JSON (partition::renderPlanJson, indented by 2) with
/// every op's `source` (`split --etrecord`). `join` joins the model planned.
std::string renderPlanJsonWithSources(const partition::Plan &plan, const partition::CostModel &cost,
                                      bool withFiles, const SourceJoin &join);

/// "short_conv.py:77" (or the note when there is no line).
std::string sourceLine(const ane::Finding::Source &source);
/// The module path with its layer indices made one ("layers.3.conv" ->
/// "layers.*.conv"): the code a model repeats per layer, as one group.
std::string moduleGroup(std::string_view modulePath);

/// Fills Finding::source of every finding of `report` (a check of
/// `model`, a Core ML delegate of the program `record` was exported with).
/// Paths are shown relative to `sourceRoot` (relativeSource). Throws
/// InputError when the ETRecord is of another program: some op's debug
/// handles differ from every delegate map of the record, or the model has
/// none to join by.
void attachSources(ane::CheckReport &report, const Model &model, const ETRecord &record,
                   const std::string &sourceRoot = {});

/// A node-data overlay for Google's Model Explorer over the ETRecord's
/// graph (its ETRecord adapter shows ExecuTorch's devtools graph, whose node
/// ids are the FX node names with "_" appended): for every
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
