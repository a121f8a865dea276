//===- GraphLayout.h - Layered drawing of a directed acyclic graph -*- C++ -*-===//
//
// A Sugiyama-style layout, top to bottom: nodes get ranks (rows) from the
// longest path, pulled down next to their users where that shortens edges;
// edges spanning several rows get bend points; rows are ordered by barycenter
// sweeps that keep the ordering with the fewest crossings; x positions come
// from alternating passes that pull each node toward its neighbours, solved
// per row as a weighted isotonic regression with minimum spacing. It knows
// nothing of MIL: the report builds one small graph per program chunk.
// Every step is linear or n log n in nodes plus bend points.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace anefit::report {

struct LayoutPoint {
  double x = 0;
  double y = 0;
};

struct LayoutNode {
  double width = 0;
  double height = 0;
  /// Keep the node in the first row (e.g. the port a chunk is entered by).
  bool pinTop = false;
  /// Keep the node in the last row, below every other node.
  bool pinBottom = false;
};

struct LayoutEdge {
  uint32_t from = 0;
  uint32_t to = 0;
};

struct LayoutOptions {
  double nodeGap = 22; ///< horizontal space between two nodes of a row
  double bendGap = 8;  ///< horizontal space next to an edge's bend point
  double rowGap = 26;  ///< vertical space between rows
  int orderSweeps = 6; ///< barycenter passes (each one down and one up)
  int placeSweeps = 8; ///< x-alignment passes
};

struct LayoutResult {
  /// Node centres; the drawing spans [0, width] x [0, height].
  std::vector<LayoutPoint> centers;
  std::vector<uint32_t> ranks;
  /// Per edge: source bottom, bend points, target top.
  std::vector<std::vector<LayoutPoint>> edgePoints;
  double width = 0;
  double height = 0;
  size_t crossings = 0; ///< edge crossings of the chosen row ordering
};

/// Lays out `nodes` and `edges` (a DAG; an edge closing a cycle is drawn but
/// does not constrain ranks). Deterministic.
LayoutResult layoutLayered(const std::vector<LayoutNode> &nodes,
                           const std::vector<LayoutEdge> &edges, const LayoutOptions &options = {});

} // namespace anefit::report
