//===- ReportTest.cpp - Graph layout, program graph and the HTML page -----===//
//
// What text cannot express: geometric properties of the layered layout, how
// a program is cut into chunks and repeated groups, and properties of the
// page that must hold for every model (each op once with its placement's
// class, every placement and verdict coloured, names escaped, deterministic).
//
//===----------------------------------------------------------------------===//
#include "ane/Checker.h"
#include "ir/AsmParser.h"
#include "report/GraphLayout.h"
#include "report/HtmlReport.h"
#include "report/ProgramGraph.h"
#include "report/Sources.h"
#include "support/Error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <set>

using namespace anefit;
using namespace anefit::report;

namespace {

std::unique_ptr<Model> parse(const std::string &text) {
  return parseModelText(text, "test.mil", nullptr);
}

size_t count(const std::string &s, const std::string &needle) {
  size_t n = 0;
  for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1))
    ++n;
  return n;
}

// --- Layout ---------------------------------------------------------------

/// Every edge runs downward, nodes of a row do not overlap.
void expectWellFormed(const std::vector<LayoutNode> &nodes, const std::vector<LayoutEdge> &edges,
                      const LayoutResult &r) {
  ASSERT_EQ(r.centers.size(), nodes.size());
  for (size_t e = 0; e < edges.size(); ++e) {
    EXPECT_LT(r.ranks[edges[e].from], r.ranks[edges[e].to]) << "edge " << e;
    ASSERT_GE(r.edgePoints[e].size(), 2u);
    for (size_t k = 1; k < r.edgePoints[e].size(); ++k)
      EXPECT_LT(r.edgePoints[e][k - 1].y, r.edgePoints[e][k].y) << "edge " << e;
  }
  for (size_t a = 0; a < nodes.size(); ++a)
    for (size_t b = a + 1; b < nodes.size(); ++b)
      if (r.ranks[a] == r.ranks[b]) {
        double gap =
            std::abs(r.centers[a].x - r.centers[b].x) - (nodes[a].width + nodes[b].width) / 2;
        EXPECT_GE(gap, 0) << "nodes " << a << " and " << b << " overlap";
      }
  for (size_t v = 0; v < nodes.size(); ++v) {
    EXPECT_GE(r.centers[v].x - nodes[v].width / 2, -1e-9);
    EXPECT_LE(r.centers[v].x + nodes[v].width / 2, r.width + 1e-9);
  }
}

TEST(GraphLayout, DiamondHasNoCrossingsAndRanksFollowEdges) {
  std::vector<LayoutNode> nodes(4, LayoutNode{100, 30});
  std::vector<LayoutEdge> edges = {{0, 1}, {0, 2}, {1, 3}, {2, 3}};
  LayoutResult r = layoutLayered(nodes, edges);
  expectWellFormed(nodes, edges, r);
  EXPECT_EQ(r.ranks[0], 0u);
  EXPECT_EQ(r.ranks[1], r.ranks[2]);
  EXPECT_EQ(r.ranks[3], 2u);
  EXPECT_EQ(r.crossings, 0u);
  // The join sits between its two inputs.
  EXPECT_GT(r.centers[3].x, std::min(r.centers[1].x, r.centers[2].x));
  EXPECT_LT(r.centers[3].x, std::max(r.centers[1].x, r.centers[2].x));
}

TEST(GraphLayout, BarycenterSweepsRemoveAvoidableCrossings) {
  // Two parallel chains given in an order that crosses: 0->3, 1->2 with 2,3 in
  // one row, plus 2->4, 3->5.
  std::vector<LayoutNode> nodes(6, LayoutNode{60, 20});
  std::vector<LayoutEdge> edges = {{0, 3}, {1, 2}, {2, 4}, {3, 5}};
  LayoutResult r = layoutLayered(nodes, edges);
  expectWellFormed(nodes, edges, r);
  EXPECT_EQ(r.crossings, 0u);
}

TEST(GraphLayout, LongEdgesBendInEveryRowTheyPass) {
  // A chain of four and a skip edge from its head to its tail.
  std::vector<LayoutNode> nodes(4, LayoutNode{80, 30});
  std::vector<LayoutEdge> edges = {{0, 1}, {1, 2}, {2, 3}, {0, 3}};
  LayoutResult r = layoutLayered(nodes, edges);
  expectWellFormed(nodes, edges, r);
  EXPECT_EQ(r.edgePoints[3].size(), 4u); // source, two bends, target
}

TEST(GraphLayout, SourcesArePulledDownNextToTheirUser) {
  // 0->1->2->3 and an input 4 read only by 3: it sits in the row above 3.
  std::vector<LayoutNode> nodes(5, LayoutNode{80, 30});
  std::vector<LayoutEdge> edges = {{0, 1}, {1, 2}, {2, 3}, {4, 3}};
  LayoutResult r = layoutLayered(nodes, edges);
  expectWellFormed(nodes, edges, r);
  EXPECT_EQ(r.ranks[4] + 1, r.ranks[3]);
}

TEST(GraphLayout, PinnedPortsStayAtTheTopAndBottom) {
  std::vector<LayoutNode> nodes = {
      {0, 0, true, false}, {80, 30}, {80, 30}, {80, 30}, {0, 0, false, true}};
  // The top port feeds the chain's head and its tail (a residual edge).
  std::vector<LayoutEdge> edges = {{0, 1}, {0, 3}, {1, 2}, {2, 3}, {3, 4}};
  LayoutResult r = layoutLayered(nodes, edges);
  expectWellFormed(nodes, edges, r);
  EXPECT_EQ(r.ranks[0], 0u);
  for (uint32_t v = 1; v < 4; ++v)
    EXPECT_LT(r.ranks[v], r.ranks[4]);
  EXPECT_DOUBLE_EQ(r.centers[0].y, 0); // zero-height port rows
  EXPECT_DOUBLE_EQ(r.centers[4].y, r.height);
}

TEST(GraphLayout, CyclesAndBadIndicesDoNotHang) {
  std::vector<LayoutNode> nodes(3, LayoutNode{50, 20});
  std::vector<LayoutEdge> edges = {{0, 1}, {1, 2}, {2, 0}, {1, 1}, {0, 7}};
  LayoutResult r = layoutLayered(nodes, edges);
  EXPECT_EQ(r.centers.size(), 3u);
  EXPECT_TRUE(r.edgePoints[4].empty());
  EXPECT_TRUE(layoutLayered({}, {}).centers.empty());
}

TEST(GraphLayout, IsDeterministic) {
  std::vector<LayoutNode> nodes;
  std::vector<LayoutEdge> edges;
  for (uint32_t i = 0; i < 200; ++i) {
    nodes.push_back(LayoutNode{40.0 + (i * 7) % 50, 20});
    if (i > 0)
      edges.push_back({(i * 13) % i, i});
    if (i > 3)
      edges.push_back({i - 3, i});
  }
  LayoutResult a = layoutLayered(nodes, edges), b = layoutLayered(nodes, edges);
  expectWellFormed(nodes, edges, a);
  for (size_t v = 0; v < nodes.size(); ++v) {
    EXPECT_EQ(a.centers[v].x, b.centers[v].x);
    EXPECT_EQ(a.centers[v].y, b.centers[v].y);
  }
}

// --- Program graph ----------------------------------------------------------

/// `layers` blocks of [norm-like chain, matmul, residual add] reading a mask
/// made once before them, each block's mask read far from where it is made.
std::string layeredProgram(int layers) {
  std::string s = "main[CoreML8](%x: (1, 8, 8, fp16)(Tensor), %w: (1, 8, 8, fp16)(Tensor)) {\n"
                  "  block0() {\n"
                  "    %mask: (1, 8, 8, fp16)(Tensor) = exp(x=%w, name=\"mask\")\n"
                  "    %h0: (1, 8, 8, fp16)(Tensor) = relu(x=%x, name=\"embed\")\n";
  for (int i = 0; i < layers; ++i) {
    std::string k = std::to_string(i), h = "%h" + k, n = "%h" + std::to_string(i + 1);
    s += "    %a" + k + ": (1, 8, 8, fp16)(Tensor) = mul(x=" + h + ", y=" + h + ", name=\"sq" + k +
         "\")\n";
    s += "    %b" + k + ": (1, 8, 8, fp16)(Tensor) = sqrt(x=%a" + k + ", name=\"root" + k + "\")\n";
    s += "    %c" + k + ": (1, 8, 8, fp16)(Tensor) = matmul(x=%b" + k + ", y=%w, name=\"mm" + k +
         "\")\n";
    s += "    %d" + k + ": (1, 8, 8, fp16)(Tensor) = add(x=%c" + k + ", y=%mask, name=\"masked" +
         k + "\")\n";
    s += "    %e" + k + ": (1, 8, 8, fp16)(Tensor) = softmax(x=%d" + k + ", axis=-1, name=\"sm" +
         k + "\")\n";
    s += "    %f" + k + ": (1, 8, 8, fp16)(Tensor) = mul(x=%e" + k + ", y=%b" + k +
         ", name=\"gate" + k + "\")\n";
    s += "    %g" + k + ": (1, 8, 8, fp16)(Tensor) = tanh(x=%f" + k + ", name=\"act" + k + "\")\n";
    s += "    %q" + k + ": (1, 8, 8, fp16)(Tensor) = sigmoid(x=%g" + k + ", name=\"sig" + k +
         "\")\n";
    s += "    " + n + ": (1, 8, 8, fp16)(Tensor) = add(x=" + h + ", y=%q" + k + ", name=\"res" + k +
         "\")\n";
  }
  s += "  } -> (%h" + std::to_string(layers) + ")\n}\n";
  return s;
}

TEST(ProgramGraph, RepeatedBlocksBecomeGroupsOfOneShape) {
  auto model = parse(layeredProgram(4));
  ane::CheckReport report = ane::checkModel(*model);
  const Function &fn = *model->program->functions.front();
  FunctionGraph g = buildFunctionGraph(fn, report.functions.front());
  ASSERT_EQ(g.ops.size(), 2u + 4 * 9);
  ASSERT_EQ(g.groups.size(), 4u);
  for (size_t k = 0; k < 4; ++k) {
    const Group &grp = g.groups[k];
    EXPECT_EQ(grp.shape, 0u);
    EXPECT_EQ(g.ops[grp.firstOp].op->name, "sq" + std::to_string(k));
    EXPECT_EQ(g.ops[grp.lastOp].op->name, "res" + std::to_string(k));
    // Each block is entered by the residual stream alone, drawn as a port:
    // the mask, read by every block far from where it is made, is not.
    const Chunk &first = g.chunks[grp.firstChunk];
    ASSERT_NE(first.entry, nullptr);
    EXPECT_EQ(first.entry->name, "h" + std::to_string(k));
  }
  // The mask op and the embedding come before the first group.
  EXPECT_EQ(g.groups.front().firstOp, 2u);
  // Users and producers are linked both ways.
  const GraphOp &masked = g.ops[g.opByName.at("masked0")];
  ASSERT_EQ(masked.preds.size(), 2u);
  EXPECT_EQ(g.ops[masked.preds[0]].op->name, "mask");
  EXPECT_EQ(g.ops[g.opByName.at("mask")].succs.size(), 4u);
  EXPECT_EQ(g.ops.back().returned, std::vector<std::string>{"h4"});
}

TEST(ProgramGraph, NoGroupsWithoutRepetition) {
  auto model = parse(layeredProgram(1));
  ane::CheckReport report = ane::checkModel(*model);
  FunctionGraph g =
      buildFunctionGraph(*model->program->functions.front(), report.functions.front());
  EXPECT_TRUE(g.groups.empty());
  EXPECT_FALSE(g.chunks.empty());
  // Chunks tile the ops in order.
  size_t next = 0;
  for (const Chunk &c : g.chunks) {
    EXPECT_EQ(c.firstOp, next);
    next = c.lastOp + 1;
  }
  EXPECT_EQ(next, g.ops.size());
}

TEST(ProgramGraph, StatesAreReadOrWrittenAndInputsKnown) {
  auto model = parse(R"(main[CoreML8](%x: (1, 64, 2, fp16)(Tensor), %s: (1, 64, 2, fp16)(State)) {
  block0() {
    %r: (1, 64, 2, fp16)(Tensor) = read_state(input=%s, name="read")
    %y: (1, 64, 2, fp16)(Tensor) = add(x=%x, y=%r, name="sum")
    write_state(data=%y, input=%s, name="write")
  } -> (%y)
}
)");
  ane::CheckReport report = ane::checkModel(*model);
  FunctionGraph g =
      buildFunctionGraph(*model->program->functions.front(), report.functions.front());
  ASSERT_EQ(g.ops.size(), 3u);
  EXPECT_EQ(g.ops[0].statesRead.size(), 1u);
  EXPECT_TRUE(g.ops[0].statesWritten.empty());
  EXPECT_EQ(g.ops[2].statesWritten.size(), 1u);
  EXPECT_TRUE(g.ops[2].statesRead.empty());
  ASSERT_EQ(g.ops[1].inputs.size(), 1u);
  EXPECT_EQ(g.ops[1].inputs[0]->name, "x");
  EXPECT_EQ(g.ops[1].returned, std::vector<std::string>{"y"});
}

TEST(ProgramGraph, RejectsAReportOfAnotherFunction) {
  auto a = parse(layeredProgram(2)), b = parse(layeredProgram(3));
  ane::CheckReport report = ane::checkModel(*b);
  EXPECT_THROW(buildFunctionGraph(*a->program->functions.front(), report.functions.front()),
               InputError);
}

// --- The page -----------------------------------------------------------------

TEST(HtmlReport, EveryOpOnceWithItsPlacementClass) {
  auto model = parse(layeredProgram(3));
  ane::CheckReport report = ane::checkModel(*model);
  std::string html = renderHtml(*model, report);
  const ane::FunctionReport &fr = report.functions.front();
  for (size_t i = 0; i < fr.ops.size(); ++i) {
    std::string id = "\" data-i=\"" + std::to_string(i) + "\" transform=";
    EXPECT_EQ(count(html, id), 1u) << "op " << i;
    std::string shown =
        fr.ops[i].atRisk ? "at-risk" : std::string(ane::placementName(fr.ops[i].placement));
    std::string node = "<g class=\"op p-" + shown;
    size_t at = html.find(id);
    ASSERT_NE(at, std::string::npos);
    size_t start = html.rfind("<g class=\"op ", at);
    EXPECT_EQ(html.compare(start, node.size(), node), 0) << "op " << i;
  }
  EXPECT_EQ(count(html, "<g class=\"op "), fr.ops.size());
  EXPECT_EQ(renderHtml(*model, report), html) << "not deterministic";
}

TEST(HtmlReport, EveryPlacementAndVerdictHasAColour) {
  // A new placement or verdict in the checker needs a row in Palette.def.
  std::vector<std::string_view> placements = placementNames(), verdicts = verdictNames();
  EXPECT_GE(placements.size(), 3u);
  EXPECT_GE(verdicts.size(), 4u);
  for (std::string_view p : placements)
    EXPECT_NE(paletteEntry("placement", p), nullptr) << "placement " << p;
  for (std::string_view v : verdicts)
    EXPECT_NE(paletteEntry("verdict", v), nullptr) << "verdict " << v;
  for (ane::Effect e : {ane::Effect::Slow, ane::Effect::Fallback, ane::Effect::WrongNumerics,
                        ane::Effect::CompileFail, ane::Effect::RuntimeFail})
    EXPECT_NE(paletteEntry("effect", ane::effectName(e)), nullptr) << ane::effectName(e);
  for (unsigned l = 0; l <= static_cast<unsigned>(ane::Level::RuntimeFail); ++l)
    EXPECT_NE(paletteEntry("effect", ane::levelName(static_cast<ane::Level>(l))), nullptr)
        << ane::levelName(static_cast<ane::Level>(l));
  EXPECT_NE(std::find(placements.begin(), placements.end(), "at-risk"), placements.end());
  std::regex colour("#[0-9a-f]{6}");
  for (const PaletteEntry &e : palette())
    EXPECT_TRUE(std::regex_match(std::string(e.color), colour)) << e.name;
}

TEST(HtmlReport, NamesCannotBreakOutOfTheirElements) {
  auto model = parse(R"(main[CoreML8](%x: (1, 8, fp16)(Tensor)) {
  block0() {
    %y: (1, 8, fp16)(Tensor) = relu(x=%x, name="</script><script>alert(1)</script>")
    %z: (1, 8, fp16)(Tensor) = sigmoid(x=%y, name="<b onmouseover='x'>&")
  } -> (%z)
}
)");
  ane::CheckReport report = ane::checkModel(*model);
  report.modelPath = "<img src=x onerror=alert(1)>";
  std::string html = renderHtml(*model, report);
  // The JSON blocks hold no '<' at all; outside them every name is escaped.
  std::string outside;
  size_t at = 0;
  int blocks = 0;
  for (size_t open;
       (open = html.find("<script type=\"application/json\"", at)) != std::string::npos; ++blocks) {
    size_t body = html.find('>', open) + 1, end = html.find("</script>", body);
    ASSERT_NE(end, std::string::npos);
    EXPECT_EQ(html.substr(body, end - body).find('<'), std::string::npos);
    outside += html.substr(at, body - at);
    at = end;
  }
  outside += html.substr(at);
  EXPECT_EQ(blocks, 2);
  EXPECT_EQ(outside.find("<script>alert"), std::string::npos);
  EXPECT_EQ(outside.find("<b onmouseover"), std::string::npos);
  EXPECT_EQ(outside.find("<img src=x"), std::string::npos);
  EXPECT_NE(outside.find("&lt;b onmouseover=&#39;x&#39;&gt;&amp;"), std::string::npos);
  EXPECT_EQ(count(html, "<script"), 3u); // two JSON blocks and the page's script
  EXPECT_EQ(count(html, "</script>"), 3u);
}

TEST(Sources, ModuleGroupsMakeLayerIndicesOne) {
  EXPECT_EQ(report::moduleGroup("layers.3.conv"), "layers.*.conv");
  EXPECT_EQ(report::moduleGroup("layers.12.attention.kv_cache"), "layers.*.attention.kv_cache");
  EXPECT_EQ(report::moduleGroup("tok_embeddings"), "tok_embeddings");
  EXPECT_EQ(report::moduleGroup("blocks.0.1.mlp"), "blocks.*.*.mlp");
  EXPECT_EQ(report::moduleGroup("layer2x.conv"), "layer2x.conv"); // only whole parts
  EXPECT_EQ(report::moduleGroup(""), "");
}

TEST(Sources, SitesCountOpsPerLineAndModuleGroup) {
  auto src = [](const char *file, int64_t line, const char *module) {
    ane::Finding::Source s;
    s.file = file;
    s.line = line;
    s.module = module;
    return s;
  };
  ane::Finding::Source none;
  none.note = "no ExecuTorch debug handle: an op Core ML's conversion added";
  std::vector<ane::Finding::Source> sources = {src("sdpa.py", 461, "layers.2.attention"),
                                               src("rope.py", 383, ""),
                                               src("sdpa.py", 461, "layers.5.attention"),
                                               src("sdpa.py", 462, "layers.2.attention"),
                                               none,
                                               src("sdpa.py", 461, "layers.8.attention")};
  report::SourceSites sites = report::sourceSites(sources, 2);
  ASSERT_EQ(sites.places.size(), 2u);
  EXPECT_EQ(sites.places[0], "sdpa.py:461 layers.*.attention (3 ops)");
  // Ties keep the order first seen.
  EXPECT_EQ(sites.places[1], "rope.py:383 (1 op)");
  EXPECT_EQ(sites.more, 2u);
  sites = report::sourceSites(sources, 10);
  EXPECT_EQ(sites.more, 0u);
  EXPECT_EQ(sites.places.back(), std::string(none.note) + " (1 op)");
}

} // namespace
