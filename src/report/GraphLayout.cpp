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

  // --- Topological order (Kahn, smallest index first); a node on a cycle is
  // taken when nothing else is ready, and its remaining in-edges are ignored.
  std::vector<std::vector<uint32_t>> succ(n), pred(n);
  for (const LayoutEdge &e : edges)
    if (e.from != e.to && e.from < n && e.to < n) {
      succ[e.from].push_back(e.to);
      pred[e.to].push_back(e.from);
    }
  std::vector<uint32_t> indegree(n), topo, position(n, UINT32_MAX);
  for (uint32_t v = 0; v < n; ++v)
    indegree[v] = static_cast<uint32_t>(pred[v].size());
  std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<>> ready;
  for (uint32_t v = 0; v < n; ++v)
    if (indegree[v] == 0)
      ready.push(v);
  uint32_t forced = 0;
  while (topo.size() < n) {
    if (ready.empty()) {
      while (position[forced] != UINT32_MAX || indegree[forced] == 0)
        ++forced;
      indegree[forced] = 0;
      ready.push(forced);
    }
    uint32_t v = ready.top();
    ready.pop();
    if (position[v] != UINT32_MAX)
      continue;
    position[v] = static_cast<uint32_t>(topo.size());
    topo.push_back(v);
    for (uint32_t s : succ[v])
      if (position[s] == UINT32_MAX && indegree[s] > 0 && --indegree[s] == 0)
        ready.push(s);
  }
  auto forward = [&](uint32_t u, uint32_t v) { return position[u] < position[v]; };

  // Distinct forward neighbours, for ranking.
  std::vector<std::vector<uint32_t>> fsucc(n), fpred(n);
  for (uint32_t u = 0; u < n; ++u)
    for (uint32_t v : succ[u])
      if (forward(u, v)) {
        fsucc[u].push_back(v);
        fpred[v].push_back(u);
      }
  for (auto *lists : {&fsucc, &fpred})
    for (auto &l : *lists) {
      std::sort(l.begin(), l.end());
      l.erase(std::unique(l.begin(), l.end()), l.end());
    }

  // --- Ranks: longest path, then pull nodes down next to their users when
  // that does not lengthen more edges than it shortens.
  std::vector<int64_t> rank(n, 0);
  for (uint32_t v : topo) {
    int64_t r = 0;
    for (uint32_t u : fpred[v])
      r = std::max(r, rank[u] + 1);
    rank[v] = (nodes[v].pinTop && fpred[v].empty()) ? 0 : r;
  }
  for (auto it = topo.rbegin(); it != topo.rend(); ++it) {
    uint32_t v = *it;
    if (nodes[v].pinTop || nodes[v].pinBottom || fsucc[v].empty() ||
        fpred[v].size() > fsucc[v].size())
      continue;
    int64_t lowest = INT64_MAX;
    for (uint32_t s : fsucc[v])
      lowest = std::min(lowest, rank[s]);
    if (lowest - 1 > rank[v])
      rank[v] = lowest - 1;
  }
  int64_t deepest = 0;
  for (uint32_t v = 0; v < n; ++v)
    if (!nodes[v].pinBottom)
      deepest = std::max(deepest, rank[v]);
  for (uint32_t v : topo)
    if (nodes[v].pinBottom) {
      int64_t r = deepest + 1;
      for (uint32_t u : fpred[v])
        r = std::max(r, rank[u] + 1);
      rank[v] = r;
    }
  // Drop empty rows.
  std::vector<int64_t> used(rank.begin(), rank.end());
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  for (uint32_t v = 0; v < n; ++v)
    rank[v] = std::lower_bound(used.begin(), used.end(), rank[v]) - used.begin();
  const size_t rows = used.size();

  // --- Bend points: a dummy node per row an edge passes.
  struct Item {
    bool dummy;
    uint32_t node; ///< real node, or for a dummy the edge's source
    double width, height;
    double order; ///< key for the initial ordering
  };
  std::vector<Item> items;
  std::vector<int64_t> itemRank;
  for (uint32_t v = 0; v < n; ++v) {
    items.push_back(Item{false, v, nodes[v].width, nodes[v].height, (double)position[v]});
    itemRank.push_back(rank[v]);
  }
  std::vector<std::vector<uint32_t>> chains(edges.size());
  std::vector<std::vector<uint32_t>> lpred(n), lsucc(n);
  for (size_t e = 0; e < edges.size(); ++e) {
    uint32_t u = edges[e].from, v = edges[e].to;
    if (u >= n || v >= n || u == v || rank[v] <= rank[u])
      continue;
    uint32_t prev = u;
    for (int64_t r = rank[u] + 1; r < rank[v]; ++r) {
      uint32_t d = static_cast<uint32_t>(items.size());
      items.push_back(Item{true, u, 0, 0, position[u] + 0.5});
      itemRank.push_back(r);
      lpred.emplace_back();
      lsucc.emplace_back();
      chains[e].push_back(d);
      lsucc[prev].push_back(d);
      lpred[d].push_back(prev);
      prev = d;
    }
    lsucc[prev].push_back(v);
    lpred[v].push_back(prev);
  }
  const size_t total = items.size();

  // --- Row order: barycenter sweeps, keeping the best ordering seen.
  std::vector<std::vector<uint32_t>> layer(rows);
  for (uint32_t i = 0; i < total; ++i)
    layer[itemRank[i]].push_back(i);
  for (auto &row : layer)
    std::stable_sort(row.begin(), row.end(),
                     [&](uint32_t a, uint32_t b) { return items[a].order < items[b].order; });
  std::vector<uint32_t> pos(total);
  auto renumber = [&] {
    for (auto &row : layer)
      for (uint32_t i = 0; i < row.size(); ++i)
        pos[row[i]] = i;
  };
  auto countCrossings = [&] {
    size_t c = 0;
    std::vector<std::pair<uint32_t, uint32_t>> pairs;
    for (size_t r = 0; r + 1 < rows; ++r) {
      pairs.clear();
      for (uint32_t a : layer[r])
        for (uint32_t b : lsucc[a])
          pairs.emplace_back(pos[a], pos[b]);
      c += crossingsBetween(pairs, layer[r + 1].size());
    }
    return c;
  };
  renumber();
  size_t best = countCrossings();
  auto bestLayer = layer;
  std::vector<double> key(total);
  auto sweep = [&](size_t r, const std::vector<std::vector<uint32_t>> &adj) {
    for (uint32_t a : layer[r]) {
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
    std::stable_sort(layer[r].begin(), layer[r].end(),
                     [&](uint32_t a, uint32_t b) { return key[a] < key[b]; });
    for (uint32_t i = 0; i < layer[r].size(); ++i)
      pos[layer[r][i]] = i;
  };
  for (int it = 0; it < options.orderSweeps && best > 0; ++it) {
    for (size_t r = 1; r < rows; ++r)
      sweep(r, lpred);
    for (size_t r = rows - 1; r-- > 0;)
      sweep(r, lsucc);
    size_t c = countCrossings();
    if (c < best) {
      best = c;
      bestLayer = layer;
    }
  }
  layer = std::move(bestLayer);
  renumber();
  result.crossings = best;

  // --- x placement.
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
  auto towards = [&](const std::vector<std::vector<uint32_t>> *a,
                     const std::vector<std::vector<uint32_t>> *b) {
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
      solveRow(r, towards(&lpred, last ? &lsucc : nullptr));
    for (size_t r = rows - 1; r-- > 0;)
      solveRow(r, towards(&lsucc, last ? &lpred : nullptr));
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
  result.width = maxX - minX;

  // --- y: rows as tall as their tallest node.
  std::vector<double> rowCenter(rows), rowHalf(rows, 0);
  for (uint32_t i = 0; i < total; ++i)
    rowHalf[itemRank[i]] = std::max(rowHalf[itemRank[i]], items[i].height / 2);
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
  result.height = top;

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
    for (uint32_t d : chains[e])
      pts.push_back({x[d], rowCenter[itemRank[d]]});
    pts.push_back({x[v], rowCenter[rank[v]] - (down ? 1 : -1) * nodes[v].height / 2});
  }
  return result;
}

} // namespace anefit::report
