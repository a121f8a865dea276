//===- GraphLayout.cpp - Layered drawing of a directed acyclic graph ------===//
//
// The four classic phases (rank, bend points, row order, x placement) kept
// small: ranking is longest path plus a greedy pull-down instead of network
// simplex, ordering is barycenter sweeps remembering the best ordering seen,
// and x placement is alternating neighbour averaging made feasible row by
// row with pool-adjacent-violators, which is exact for "stay in order, keep
// this spacing, be as close as possible to where your neighbours are".
//
//===----------------------------------------------------------------------===//
#include "report/GraphLayout.h"

#include <algorithm>
#include <numeric>
#include <queue>

namespace anefit::report {
namespace {

/// Number of crossings between two rows, from the edges' (upper, lower)
/// positions: inversions of the lower positions once sorted by upper.
size_t crossingsBetween(std::vector<std::pair<uint32_t, uint32_t>> &edges, size_t lowerSize) {
  std::sort(edges.begin(), edges.end());
  std::vector<uint32_t> tree(lowerSize + 1, 0);
  size_t crossings = 0, seen = 0;
  for (const auto &[upper, lower] : edges) {
    // Edges already seen that end strictly right of `lower` cross this one.
    size_t atMost = 0;
    for (size_t i = lower + 1; i > 0; i -= i & (~i + 1))
      atMost += tree[i];
    crossings += seen - atMost;
    for (size_t i = lower + 1; i <= lowerSize; i += i & (~i + 1))
      ++tree[i];
    ++seen;
  }
  return crossings;
}

/// Weighted isotonic regression with spacing: x[i] >= x[i-1] + gap[i] and
/// sum weight[i] * (x[i] - want[i])^2 minimal. gap[0] is ignored.
void placeRow(const std::vector<double> &want, const std::vector<double> &weight,
              const std::vector<double> &gap, std::vector<double> &x) {
  size_t n = want.size();
  std::vector<double> offset(n, 0);
  for (size_t i = 1; i < n; ++i)
    offset[i] = offset[i - 1] + gap[i];
  struct Pool {
    double sum, weight;
    size_t count;
  };
  std::vector<Pool> pools;
  for (size_t i = 0; i < n; ++i) {
    pools.push_back(Pool{weight[i] * (want[i] - offset[i]), weight[i], 1});
    while (pools.size() > 1) {
      Pool &b = pools.back(), &a = pools[pools.size() - 2];
      if (a.sum / a.weight <= b.sum / b.weight)
        break;
      a.sum += b.sum;
      a.weight += b.weight;
      a.count += b.count;
      pools.pop_back();
    }
  }
  size_t i = 0;
  for (const Pool &p : pools)
    for (size_t k = 0; k < p.count; ++k, ++i)
      x[i] = p.sum / p.weight + offset[i];
}

/// The graph's edges as adjacency lists (self-loops and edges to unknown
/// nodes dropped) and an order in which every edge not closing a cycle
/// points forward.
struct TopoOrder {
  std::vector<std::vector<uint32_t>> succ, pred;
  std::vector<uint32_t> topo;     ///< nodes in order
  std::vector<uint32_t> position; ///< per node, its place in `topo`

  bool forward(uint32_t u, uint32_t v) const { return position[u] < position[v]; }
};

/// Kahn's algorithm, smallest index first; a node on a cycle is taken when
/// nothing else is ready, and its remaining in-edges are ignored.
TopoOrder topologicalOrder(uint32_t n, const std::vector<LayoutEdge> &edges) {
  TopoOrder order;
  order.succ.resize(n);
  order.pred.resize(n);
  for (const LayoutEdge &e : edges)
    if (e.from != e.to && e.from < n && e.to < n) {
      order.succ[e.from].push_back(e.to);
      order.pred[e.to].push_back(e.from);
    }
  std::vector<uint32_t> indegree(n);
  order.position.assign(n, UINT32_MAX);
  for (uint32_t v = 0; v < n; ++v)
    indegree[v] = static_cast<uint32_t>(order.pred[v].size());
  std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<>> ready;
  for (uint32_t v = 0; v < n; ++v)
    if (indegree[v] == 0)
      ready.push(v);
  uint32_t forced = 0;
  while (order.topo.size() < n) {
    if (ready.empty()) {
      while (order.position[forced] != UINT32_MAX || indegree[forced] == 0)
        ++forced;
      indegree[forced] = 0;
      ready.push(forced);
    }
    uint32_t v = ready.top();
    ready.pop();
    if (order.position[v] != UINT32_MAX)
      continue;
    order.position[v] = static_cast<uint32_t>(order.topo.size());
    order.topo.push_back(v);
    for (uint32_t s : order.succ[v])
      if (order.position[s] == UINT32_MAX && indegree[s] > 0 && --indegree[s] == 0)
        ready.push(s);
  }
  return order;
}

/// Distinct forward neighbours of each node, for ranking.
struct ForwardNeighbours {
  std::vector<std::vector<uint32_t>> succ, pred;
};

ForwardNeighbours forwardNeighbours(const TopoOrder &order) {
  const size_t n = order.succ.size();
  ForwardNeighbours fw;
  fw.succ.resize(n);
  fw.pred.resize(n);
  for (uint32_t u = 0; u < n; ++u)
    for (uint32_t v : order.succ[u])
      if (order.forward(u, v)) {
        fw.succ[u].push_back(v);
        fw.pred[v].push_back(u);
      }
  for (auto *lists : {&fw.succ, &fw.pred})
    for (auto &l : *lists) {
      std::sort(l.begin(), l.end());
      l.erase(std::unique(l.begin(), l.end()), l.end());
    }
  return fw;
}

/// Ranks: longest path, then nodes pulled down next to their users when
/// that does not lengthen more edges than it shortens; pinned-bottom nodes
/// below everything else; empty rows dropped. Sets `rows`.
std::vector<int64_t> rankNodes(const std::vector<LayoutNode> &nodes, const TopoOrder &order,
                               const ForwardNeighbours &fw, size_t &rows) {
  const size_t n = nodes.size();
  std::vector<int64_t> rank(n, 0);
  for (uint32_t v : order.topo) {
    int64_t r = 0;
    for (uint32_t u : fw.pred[v])
      r = std::max(r, rank[u] + 1);
    rank[v] = (nodes[v].pinTop && fw.pred[v].empty()) ? 0 : r;
  }
  for (auto it = order.topo.rbegin(); it != order.topo.rend(); ++it) {
    uint32_t v = *it;
    if (nodes[v].pinTop || nodes[v].pinBottom || fw.succ[v].empty() ||
        fw.pred[v].size() > fw.succ[v].size())
      continue;
    int64_t lowest = INT64_MAX;
    for (uint32_t s : fw.succ[v])
      lowest = std::min(lowest, rank[s]);
    if (lowest - 1 > rank[v])
      rank[v] = lowest - 1;
  }
  int64_t deepest = 0;
  for (uint32_t v = 0; v < n; ++v)
    if (!nodes[v].pinBottom)
      deepest = std::max(deepest, rank[v]);
  for (uint32_t v : order.topo)
    if (nodes[v].pinBottom) {
      int64_t r = deepest + 1;
      for (uint32_t u : fw.pred[v])
        r = std::max(r, rank[u] + 1);
      rank[v] = r;
    }
  // Drop empty rows.
  std::vector<int64_t> used(rank.begin(), rank.end());
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  for (uint32_t v = 0; v < n; ++v)
    rank[v] = std::lower_bound(used.begin(), used.end(), rank[v]) - used.begin();
  rows = used.size();
  return rank;
}

/// A node of the layered graph: a real node or an edge's bend point.
struct Item {
  bool dummy;
  uint32_t node; ///< real node, or for a dummy the edge's source
  double width, height;
  double order; ///< key for the initial ordering
};

/// The graph with a bend point (a dummy item) in every row an edge passes:
/// its edges then join adjacent rows only.
struct LayeredGraph {
  std::vector<Item> items; ///< the real nodes first, by index
  std::vector<int64_t> itemRank;
  std::vector<std::vector<uint32_t>> chains; ///< per edge, its bend points
  std::vector<std::vector<uint32_t>> lpred, lsucc;
};

LayeredGraph insertBendPoints(const std::vector<LayoutNode> &nodes,
                              const std::vector<LayoutEdge> &edges,
                              const std::vector<int64_t> &rank, const TopoOrder &order) {
  const uint32_t n = static_cast<uint32_t>(nodes.size());
  LayeredGraph lg;
  for (uint32_t v = 0; v < n; ++v) {
    lg.items.push_back(Item{false, v, nodes[v].width, nodes[v].height, (double)order.position[v]});
    lg.itemRank.push_back(rank[v]);
  }
  lg.chains.resize(edges.size());
  lg.lpred.resize(n);
  lg.lsucc.resize(n);
  for (size_t e = 0; e < edges.size(); ++e) {
    uint32_t u = edges[e].from, v = edges[e].to;
    if (u >= n || v >= n || u == v || rank[v] <= rank[u])
      continue;
    uint32_t prev = u;
    for (int64_t r = rank[u] + 1; r < rank[v]; ++r) {
      uint32_t d = static_cast<uint32_t>(lg.items.size());
      lg.items.push_back(Item{true, u, 0, 0, order.position[u] + 0.5});
      lg.itemRank.push_back(r);
      lg.lpred.emplace_back();
      lg.lsucc.emplace_back();
      lg.chains[e].push_back(d);
      lg.lsucc[prev].push_back(d);
      lg.lpred[d].push_back(prev);
      prev = d;
    }
    lg.lsucc[prev].push_back(v);
    lg.lpred[v].push_back(prev);
  }
  return lg;
}

using Rows = std::vector<std::vector<uint32_t>>;

/// Sets `pos` to each item's place in its row.
void renumber(const Rows &layer, std::vector<uint32_t> &pos) {
  for (const auto &row : layer)
    for (uint32_t i = 0; i < row.size(); ++i)
      pos[row[i]] = i;
}

size_t countCrossings(const Rows &layer, const LayeredGraph &lg, const std::vector<uint32_t> &pos) {
  size_t c = 0;
  std::vector<std::pair<uint32_t, uint32_t>> pairs;
  for (size_t r = 0; r + 1 < layer.size(); ++r) {
    pairs.clear();
    for (uint32_t a : layer[r])
      for (uint32_t b : lg.lsucc[a])
        pairs.emplace_back(pos[a], pos[b]);
    c += crossingsBetween(pairs, layer[r + 1].size());
  }
  return c;
}

/// Reorders `row` by the mean place of each item's neighbours in `adj`
/// (an item without any keeps its place).
void sortByBarycenter(std::vector<uint32_t> &row, const Rows &adj, std::vector<uint32_t> &pos,
                      std::vector<double> &key) {
  for (uint32_t a : row) {
    const auto &nb = adj[a];
    if (nb.empty()) {
      key[a] = pos[a];
      continue;
    }
    double s = 0;
    for (uint32_t b : nb)
      s += pos[b];
    key[a] = s / (double)nb.size();
  }
  std::stable_sort(row.begin(), row.end(), [&](uint32_t a, uint32_t b) { return key[a] < key[b]; });
  for (uint32_t i = 0; i < row.size(); ++i)
    pos[row[i]] = i;
}

/// Row order: barycenter sweeps down and up, keeping the ordering with the
/// fewest crossings seen (their number in `crossings`).
Rows orderRows(const LayeredGraph &lg, size_t rows, const LayoutOptions &options,
               size_t &crossings) {
  const size_t total = lg.items.size();
  Rows layer(rows);
  for (uint32_t i = 0; i < total; ++i)
    layer[lg.itemRank[i]].push_back(i);
  for (auto &row : layer)
    std::stable_sort(row.begin(), row.end(),
                     [&](uint32_t a, uint32_t b) { return lg.items[a].order < lg.items[b].order; });
  std::vector<uint32_t> pos(total);
  renumber(layer, pos);
  size_t best = countCrossings(layer, lg, pos);
  auto bestLayer = layer;
  std::vector<double> key(total);
  for (int it = 0; it < options.orderSweeps && best > 0; ++it) {
    for (size_t r = 1; r < rows; ++r)
      sortByBarycenter(layer[r], lg.lpred, pos, key);
    for (size_t r = rows - 1; r-- > 0;)
      sortByBarycenter(layer[r], lg.lsucc, pos, key);
    size_t c = countCrossings(layer, lg, pos);
    if (c < best) {
      best = c;
      bestLayer = layer;
    }
  }
  crossings = best;
  return bestLayer;
}

/// x placement: rows packed left, then sweeps that pull each item toward
/// the mean x of its neighbours, each row solved by placeRow; shifted so the
/// drawing starts at 0 (its width in `width`).
std::vector<double> placeColumns(const LayeredGraph &lg, const Rows &layer,
                                 const LayoutOptions &options, double &width) {
  const auto &items = lg.items;
  const size_t total = items.size(), rows = layer.size();
  std::vector<double> x(total, 0);
  auto gapBetween = [&](uint32_t a, uint32_t b) {
    double g = items[a].dummy && items[b].dummy   ? options.bendGap
               : items[a].dummy || items[b].dummy ? (options.nodeGap + options.bendGap) / 2
                                                  : options.nodeGap;
    return (items[a].width + items[b].width) / 2 + g;
  };
  std::vector<double> want, weight, gap, placed;
  auto solveRow = [&](size_t r, auto &&desired) {
    const auto &row = layer[r];
    want.assign(row.size(), 0);
    weight.assign(row.size(), 0);
    gap.assign(row.size(), 0);
    placed.assign(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) {
      desired(row[i], want[i], weight[i]);
      if (i > 0)
        gap[i] = gapBetween(row[i - 1], row[i]);
    }
    placeRow(want, weight, gap, placed);
    for (size_t i = 0; i < row.size(); ++i)
      x[row[i]] = placed[i];
  };
  for (size_t r = 0; r < rows; ++r)
    solveRow(r, [&](uint32_t, double &w, double &c) {
      w = 0;
      c = 1;
    });
  // Where a node wants to be: the mean x of its neighbours in `a` (and `b`).
  auto towards = [&](const Rows *a, const Rows *b) {
    return [&x, &items, a, b](uint32_t i, double &w, double &c) {
      double s = 0;
      size_t k = 0;
      for (uint32_t j : (*a)[i])
        s += x[j], ++k;
      if (b)
        for (uint32_t j : (*b)[i])
          s += x[j], ++k;
      w = k ? s / (double)k : x[i];
      // Bend points weigh more so that long edges run straight.
      c = (items[i].dummy ? 4.0 : 1.0) * (k ? 1.0 : 0.25);
    };
  };
  for (int it = 0; it < options.placeSweeps; ++it) {
    bool last = it + 2 >= options.placeSweeps;
    for (size_t r = 1; r < rows; ++r)
      solveRow(r, towards(&lg.lpred, last ? &lg.lsucc : nullptr));
    for (size_t r = rows - 1; r-- > 0;)
      solveRow(r, towards(&lg.lsucc, last ? &lg.lpred : nullptr));
  }
  double minX = 0, maxX = 0;
  bool any = false;
  for (uint32_t i = 0; i < total; ++i) {
    double lo = x[i] - items[i].width / 2, hi = x[i] + items[i].width / 2;
    minX = any ? std::min(minX, lo) : lo;
    maxX = any ? std::max(maxX, hi) : hi;
    any = true;
  }
  for (double &v : x)
    v -= minX;
  width = maxX - minX;
  return x;
}

/// y: each row's centre, rows as tall as their tallest item (the total in
/// `height`).
std::vector<double> placeRows(const LayeredGraph &lg, const Rows &layer,
                              const LayoutOptions &options, double &height) {
  const auto &items = lg.items;
  const size_t rows = layer.size();
  std::vector<double> rowCenter(rows), rowHalf(rows, 0);
  for (uint32_t i = 0; i < items.size(); ++i)
    rowHalf[lg.itemRank[i]] = std::max(rowHalf[lg.itemRank[i]], items[i].height / 2);
  // Rows of bend points keep some height; rows of zero-size ports none, and
  // half the gap next to them (two stacked chunks then look like one).
  std::vector<bool> portsOnly(rows);
  for (size_t r = 0; r < rows; ++r) {
    portsOnly[r] = std::all_of(layer[r].begin(), layer[r].end(), [&](uint32_t i) {
      return !items[i].dummy && items[i].width == 0 && items[i].height == 0;
    });
    if (!portsOnly[r])
      rowHalf[r] = std::max(rowHalf[r], 4.0);
  }
  double top = 0;
  for (size_t r = 0; r < rows; ++r) {
    if (r > 0)
      top += portsOnly[r] || portsOnly[r - 1] ? options.rowGap / 2 : options.rowGap;
    rowCenter[r] = top + rowHalf[r];
    top += 2 * rowHalf[r];
  }
  height = top;
  return rowCenter;
}

} // namespace

LayoutResult layoutLayered(const std::vector<LayoutNode> &nodes,
                           const std::vector<LayoutEdge> &edges, const LayoutOptions &options) {
  const uint32_t n = static_cast<uint32_t>(nodes.size());
  LayoutResult result;
  result.centers.assign(n, {});
  result.ranks.assign(n, 0);
  result.edgePoints.assign(edges.size(), {});
  if (n == 0)
    return result;

  TopoOrder order = topologicalOrder(n, edges);
  size_t rows = 0;
  std::vector<int64_t> rank = rankNodes(nodes, order, forwardNeighbours(order), rows);
  LayeredGraph lg = insertBendPoints(nodes, edges, rank, order);
  Rows layer = orderRows(lg, rows, options, result.crossings);
  std::vector<double> x = placeColumns(lg, layer, options, result.width);
  std::vector<double> rowCenter = placeRows(lg, layer, options, result.height);

  for (uint32_t v = 0; v < n; ++v) {
    result.centers[v] = {x[v], rowCenter[rank[v]]};
    result.ranks[v] = static_cast<uint32_t>(rank[v]);
  }
  for (size_t e = 0; e < edges.size(); ++e) {
    uint32_t u = edges[e].from, v = edges[e].to;
    if (u >= n || v >= n || u == v)
      continue;
    auto &pts = result.edgePoints[e];
    bool down = rank[v] > rank[u];
    pts.push_back({x[u], rowCenter[rank[u]] + (down ? 1 : -1) * nodes[u].height / 2});
    for (uint32_t d : lg.chains[e])
      pts.push_back({x[d], rowCenter[lg.itemRank[d]]});
    pts.push_back({x[v], rowCenter[rank[v]] - (down ? 1 : -1) * nodes[v].height / 2});
  }
  return result;
}

} // namespace anefit::report
