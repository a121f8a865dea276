//===- HtmlReport.h - The check report as one self-contained page -*- C++ -*-===//
//
// `anefit check --format html` and `anefit split --format html`: a single
// HTML file, no network, its CSS and JavaScript inline, that shows the
// verdict and residency, each function's dataflow graph laid out top to
// bottom with every op coloured by its predicted placement (repeated blocks
// collapsible, zoom and pan), the details and findings of any op on click, a
// filterable findings table and, from `split`, the partition plan. The graph
// is laid out here (GraphLayout.h) and written as SVG; the page's script only
// stacks chunks, toggles groups and handles interaction. The embedded data
// are the documented JSON documents ("anefit.check/2", "anefit.split/1")
// plus the graph, so the page shows whatever fields they carry.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/FileSystem.h"

#include "ane/Checker.h"
#include "ir/Model.h"
#include "partition/Partitioner.h"

#include <string>
#include <string_view>
#include <vector>

namespace anefit::report {

struct HtmlOptions {
  /// The split plan to show (from `anefit split`), made from the same report.
  const partition::Plan *plan = nullptr;
  partition::CostModel cost;
  /// Functions with more ops than this open with their repeated blocks
  /// collapsed, except the first block of each shape.
  size_t collapseAbove = 160;
};

/// The page for `report` (ane::checkModel on `model`). Deterministic.
std::string renderHtml(const Model &model, const ane::CheckReport &report,
                       const HtmlOptions &options = {});

/// One colour of the report's palette (Palette.def).
struct PaletteEntry {
  std::string_view kind; ///< "placement", "verdict" or "effect"
  std::string_view name;
  std::string_view color;
  std::string_view label;
  std::string_view meaning;
};
std::vector<PaletteEntry> palette();
/// The palette entry for `name` of `kind`, or null.
const PaletteEntry *paletteEntry(std::string_view kind, std::string_view name);

/// Every placement an op can be shown with: the checker's placements in enum
/// order, then "at-risk" (an ANE op a contested failure rule points at).
std::vector<std::string_view> placementNames();
/// Every verdict the checker can give, in enum order.
std::vector<std::string_view> verdictNames();

/// Writes `text` to `path` under the output policy of support/FileSystem.h
/// (atomic; never over, inside or around the files `model` was read from or
/// another input; an existing file only with policy.force). Throws
/// InputError.
void writeReportFile(const Model &model, const std::string &path, std::string_view text,
                     const OutputOptions &policy = {});

} // namespace anefit::report
