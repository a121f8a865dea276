//===- HtmlReport.cpp - The check report as one self-contained page -------===//
//
// Writes the page in one pass: the header (verdict, residency, options) as
// HTML, each function's graph as SVG chunk by chunk (each chunk laid out on
// its own, so a 2,000-op program is many small layouts), collapsed boxes for
// repeated groups, then the data the script needs as JSON, then the inline
// CSS and script (assets/, compiled in). Names from the model are escaped
// everywhere; nothing refers to a resource outside the file.
//
//===----------------------------------------------------------------------===//
#include "report/HtmlReport.h"

#include "io/ModelIO.h"
#include "io/Package.h"
#include "ir/TorchNames.h"
#include "partition/PlanJson.h"
#include "report/GraphLayout.h"
#include "report/ProgramGraph.h"
#include "report/Report.h"
#include "support/Error.h"
#include "support/Json.h"
#include "support/Units.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

namespace anefit::report {

namespace assets {
extern const std::string_view kReportCss;
extern const std::string_view kReportJs;
} // namespace assets

namespace {

using Json = nlohmann::json;

// --- Text helpers --------------------------------------------------------

void appendEscaped(std::string &out, std::string_view s) {
  for (char c : s) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    case '\'':
      out += "&#39;";
      break;
    default:
      out += c;
    }
  }
}

std::string esc(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  appendEscaped(out, s);
  return out;
}

/// A name usable in a CSS class: lower-case letters, digits and '-'.
std::string cssName(std::string_view s) {
  std::string out;
  for (char c : s)
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-')
               ? static_cast<char>(std::tolower(static_cast<unsigned char>(c)))
               : '-';
  return out;
}

std::string num(double v, int decimals = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

/// A coordinate to one decimal ("12", "-3.5"), without printf: the page
/// holds tens of thousands of them.
std::string coord(double v) {
  long long tenths = std::llround(v * 10);
  std::string s;
  if (tenths < 0) {
    s += '-';
    tenths = -tenths;
  }
  s += std::to_string(tenths / 10);
  if (tenths % 10) {
    s += '.';
    s += static_cast<char>('0' + tenths % 10);
  }
  return s;
}

std::string percent(double part, double whole) {
  return whole > 0 ? num(100.0 * part / whole, 1) + "%" : "-";
}

/// Copies JSON text into a <script type="application/json"> element:
/// whitespace outside strings dropped, and every '<' written as \u003c, so
/// no name can end the element ("</script") or change how it is parsed
/// ("<!--"). The text must be valid JSON (nlohmann's output is).
void appendScriptJson(std::string &out, std::string_view json) {
  out.reserve(out.size() + json.size());
  bool inString = false;
  for (size_t i = 0; i < json.size(); ++i) {
    char c = json[i];
    if (inString) {
      if (c == '\\' && i + 1 < json.size()) {
        out += c;
        out += json[++i];
        continue;
      }
      if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      continue;
    }
    if (c == '<')
      out += "\\u003c";
    else
      out += c;
  }
}

/// Shortens `s` to at most `max` characters (UTF-8 aware), with an ellipsis.
std::string clip(const std::string &s, size_t max) {
  size_t chars = 0, i = 0;
  for (; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && ++chars > max)
      break;
  if (i >= s.size())
    return s;
  size_t cut = i;
  // Leave room for the ellipsis.
  while (cut > 0 && (static_cast<unsigned char>(s[cut - 1]) & 0xC0) == 0x80)
    --cut;
  if (cut > 0)
    --cut;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80)
    --cut;
  return s.substr(0, cut) + "\xE2\x80\xA6";
}

size_t utf8Length(const std::string &s) {
  size_t n = 0;
  for (char c : s)
    n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

/// "(1, 1, 8192, fp16)" -> "(1,1,8192,fp16)".
std::string compactShape(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), ' '), s.end());
  return s;
}

/// How an op is shown: its placement, or "at-risk" when a contested failure
/// rule points at it (the checker's OpReport::atRisk). The one place the
/// page turns the checker's per-op facts into a colour.
std::string_view shownPlacement(const ane::OpReport &o) {
  return o.atRisk ? std::string_view("at-risk") : ane::placementName(o.placement);
}

// --- Node geometry (monospace labels make widths predictable) -------------

constexpr double kCharWidth = 6.7; ///< 11px monospace
constexpr double kOpHeight = 34;
constexpr double kIoHeight = 20;
constexpr size_t kOpChars = 30;
constexpr size_t kIoChars = 28;
constexpr double kBoxWidth = 380;
constexpr double kBoxHeight = 66;

double textWidth(const std::string &s, double pad) {
  return static_cast<double>(utf8Length(s)) * kCharWidth + pad;
}

// --- Per-function drawing -------------------------------------------------

struct DrawNode {
  enum class Kind : uint8_t { Op, Port, Input, State, Ref, Output } kind;
  size_t op = kNone;            ///< Op: the op; Ref: the producer
  const Value *value = nullptr; ///< Input, State, Ref
  std::string label;
  bool write = false; ///< State: written by its op (drawn below it)
};

struct FunctionContext {
  const ane::FunctionReport *fr = nullptr;
  const FunctionGraph *graph = nullptr;
  std::vector<size_t> segmentOf;               ///< per op
  std::vector<std::vector<size_t>> findingsOf; ///< per op: indices into report.findings
  std::vector<std::string> worstEffect;        ///< per op, "" if no finding
  std::vector<std::string> outputLabel;        ///< per op: second line of the node
  /// Codes of the rules with a finding on the whole function.
  std::set<std::string> wideRules;
  /// Per chunk: entered through a port at its top, its entry value made in
  /// the chunk above or passing through it.
  std::vector<bool> entered;
};

bool onAne(const FunctionContext &ctx, size_t op) {
  return ctx.fr->segments[ctx.segmentOf[op]].onAne;
}

void pathThrough(std::string &out, const std::vector<LayoutPoint> &pts) {
  out += "M" + coord(pts[0].x) + " " + coord(pts[0].y);
  for (size_t i = 1; i < pts.size(); ++i) {
    const LayoutPoint &a = pts[i - 1], &b = pts[i];
    double dy = (b.y - a.y) / 2;
    out += "C" + coord(a.x) + " " + coord(a.y + dy) + " " + coord(b.x) + " " + coord(b.y - dy) +
           " " + coord(b.x) + " " + coord(b.y);
  }
}

/// One chunk's drawing before layout: the nodes to draw, their boxes, and
/// the edges between them (each pair once) with their CSS classes.
struct ChunkGraph {
  std::vector<DrawNode> draw;
  std::vector<LayoutNode> nodes;
  std::vector<LayoutEdge> edges;
  std::vector<std::string> edgeClass;
  std::set<std::pair<uint32_t, uint32_t>> seen;
  /// The ports the chunk is entered and left by (UINT32_MAX: none).
  uint32_t inPort = UINT32_MAX, outPort = UINT32_MAX;
  /// Per op of the chunk, its node.
  std::vector<uint32_t> nodeOf;
  /// Inputs and values made in other chunks: one node per chunk.
  std::map<const Value *, uint32_t> shared;

  uint32_t addNode(DrawNode d, double w, double h, bool top = false, bool bottom = false) {
    draw.push_back(std::move(d));
    nodes.push_back(LayoutNode{w, h, top, bottom});
    return static_cast<uint32_t>(nodes.size() - 1);
  }

  void addEdge(uint32_t a, uint32_t b, std::string cls) {
    if (!seen.insert({a, b}).second)
      return;
    edges.push_back({a, b});
    edgeClass.push_back(std::move(cls));
  }

  /// The node of `v` shared by every reader in the chunk, made on first use.
  uint32_t sharedNode(DrawNode::Kind kind, size_t op, const Value *v, double pad) {
    auto it = shared.find(v);
    if (it == shared.end()) {
      std::string label = clip(v->name, kIoChars);
      it =
          shared.emplace(v, addNode(DrawNode{kind, op, v, label}, textWidth(label, pad), kIoHeight))
              .first;
    }
    return it->second;
  }
};

/// The entry port (when the chunk is entered), one node per op, the exit
/// port (when the next chunk is entered from this one).
void addPortAndOpNodes(ChunkGraph &cg, const FunctionContext &ctx, size_t c, bool hasIn,
                       bool hasOut) {
  const FunctionGraph &g = *ctx.graph;
  const Chunk &chunk = g.chunks[c];
  if (hasIn)
    cg.inPort =
        cg.addNode(DrawNode{DrawNode::Kind::Port, kNone, chunk.entry, "", false}, 0, 0, true);
  cg.nodeOf.resize(chunk.lastOp - chunk.firstOp + 1);
  for (size_t i = chunk.firstOp; i <= chunk.lastOp; ++i) {
    const std::string &type = g.ops[i].op->type;
    double w =
        std::max(textWidth(clip(type, kOpChars), 18), textWidth(ctx.outputLabel[i], 18) * 0.88);
    cg.nodeOf[i - chunk.firstOp] = cg.addNode(DrawNode{DrawNode::Kind::Op, i, nullptr, "", false},
                                              std::clamp(w, 86.0, 240.0), kOpHeight);
  }
  if (hasOut)
    cg.outPort = cg.addNode(DrawNode{DrawNode::Kind::Port, kNone, g.chunks[c + 1].entry, "", false},
                            0, 0, false, true);
}

/// The edge into op `i` from operand `o`: from its producer in the chunk,
/// through the entry port, or from a shared input or reference node; a
/// state gets a node of its own, above a read and below a write.
void addOperandEdge(ChunkGraph &cg, const FunctionContext &ctx, size_t c, size_t i,
                    const Operand &o) {
  const FunctionGraph &g = *ctx.graph;
  const Chunk &chunk = g.chunks[c];
  uint32_t self = cg.nodeOf[i - chunk.firstOp];
  switch (o.source.kind) {
  case OperandSource::Kind::Op: {
    size_t j = o.source.op;
    if (j == i)
      break;
    if (g.ops[j].chunk == c)
      cg.addEdge(cg.nodeOf[j - chunk.firstOp], self, onAne(ctx, j) != onAne(ctx, i) ? "e x" : "e");
    else if (cg.inPort != UINT32_MAX && o.value == chunk.entry)
      cg.addEdge(cg.inPort, self, onAne(ctx, j) != onAne(ctx, i) ? "e x" : "e");
    else
      cg.addEdge(cg.sharedNode(DrawNode::Kind::Ref, j, o.value, 20), self, "e r");
    break;
  }
  case OperandSource::Kind::Input:
    cg.addEdge(cg.sharedNode(DrawNode::Kind::Input, kNone, o.value, 32), self, "e r");
    break;
  case OperandSource::Kind::State: {
    bool write = g.ops[i].op->type != "read_state" &&
                 std::find(g.ops[i].statesWritten.begin(), g.ops[i].statesWritten.end(), o.value) !=
                     g.ops[i].statesWritten.end();
    std::string label = clip(o.value->name, kIoChars);
    uint32_t s = cg.addNode(DrawNode{DrawNode::Kind::State, i, o.value, label, write},
                            textWidth(label, 47), kIoHeight);
    if (write)
      cg.addEdge(self, s, "e s");
    else
      cg.addEdge(s, self, "e s");
    break;
  }
  default:
    break;
  }
}

/// The nodes and edges of chunk `c`, ready for layout.
ChunkGraph buildChunkGraph(const FunctionContext &ctx, size_t c, bool hasIn, bool hasOut) {
  const FunctionGraph &g = *ctx.graph;
  const Chunk &chunk = g.chunks[c];
  ChunkGraph cg;
  addPortAndOpNodes(cg, ctx, c, hasIn, hasOut);
  for (size_t i = chunk.firstOp; i <= chunk.lastOp; ++i) {
    for (const Operand &o : g.ops[i].operands)
      addOperandEdge(cg, ctx, c, i, o);
    for (const std::string &name : g.ops[i].returned) {
      std::string label = clip(name, kIoChars);
      uint32_t out = cg.addNode(DrawNode{DrawNode::Kind::Output, i, nullptr, label},
                                textWidth(label, 37), kIoHeight);
      cg.addEdge(cg.nodeOf[i - chunk.firstOp], out, "e r");
    }
  }
  if (hasOut) {
    // The next chunk's entry is made here, or passes through from above.
    const Value *next = g.chunks[c + 1].entry;
    auto producer = g.opByName.find(next->definingOp->name);
    if (producer != g.opByName.end() && g.ops[producer->second].chunk == c)
      cg.addEdge(cg.nodeOf[producer->second - chunk.firstOp], cg.outPort, "e p");
    else if (hasIn)
      cg.addEdge(cg.inPort, cg.outPort, "e p");
  }
  return cg;
}

/// The edges as SVG paths; an op's end carries its index (data-u, data-v).
void drawEdges(std::string &svg, const ChunkGraph &cg, const LayoutResult &layout) {
  for (size_t e = 0; e < cg.edges.size(); ++e) {
    if (layout.edgePoints[e].empty())
      continue;
    svg += "<path class=\"" + cg.edgeClass[e] + "\"";
    const DrawNode &from = cg.draw[cg.edges[e].from], &to = cg.draw[cg.edges[e].to];
    if (from.kind == DrawNode::Kind::Op)
      svg += " data-u=\"" + std::to_string(from.op) + "\"";
    if (to.kind == DrawNode::Kind::Op)
      svg += " data-v=\"" + std::to_string(to.op) + "\"";
    svg += " d=\"";
    pathThrough(svg, layout.edgePoints[e]);
    svg += "\"/>\n";
  }
}

/// An op's box: its type, its output label, its name as a tooltip and a
/// badge with its number of findings coloured by the worst.
void drawOpNode(std::string &svg, const FunctionContext &ctx, size_t op, double w, double h,
                const std::string &at, const std::string &rect) {
  const ane::OpReport &o = ctx.fr->ops[op];
  const GraphOp &gop = ctx.graph->ops[op];
  svg += "<g class=\"op p-" + cssName(shownPlacement(o));
  if (!gop.statesRead.empty() || !gop.statesWritten.empty())
    svg += " st";
  svg += "\" data-i=\"" + std::to_string(op) + "\"" + at + ">" + rect + " rx=\"6\"/>";
  svg += "<text class=\"t\" y=\"-3\">" + esc(clip(gop.op->type, kOpChars)) + "</text>";
  svg += "<text class=\"s\" y=\"11\">" + esc(ctx.outputLabel[op]) + "</text><title>" +
         esc(gop.op->name) + "</title>";
  size_t nf = ctx.findingsOf[op].size();
  if (nf) {
    std::string bx = coord(w / 2 - 2), by = coord(-h / 2 + 2);
    svg += "<g class=\"badge e-" + cssName(ctx.worstEffect[op]) + "\" transform=\"translate(" + bx +
           "," + by + ")\"><circle r=\"8\"/><text y=\"3.5\">" +
           (nf > 99 ? std::string("99") : std::to_string(nf)) + "</text></g>";
  }
  svg += "</g>\n";
}

/// Node `k` at its place: an op, an input, output, state or reference box
/// (a port draws nothing).
void drawNode(std::string &svg, const FunctionContext &ctx, const ChunkGraph &cg,
              const LayoutResult &layout, size_t k) {
  const FunctionGraph &g = *ctx.graph;
  const DrawNode &d = cg.draw[k];
  const LayoutPoint &p = layout.centers[k];
  double w = cg.nodes[k].width, h = cg.nodes[k].height;
  std::string at = " transform=\"translate(" + coord(p.x) + "," + coord(p.y) + ")\"";
  std::string rect = "<rect x=\"" + coord(-w / 2) + "\" y=\"" + coord(-h / 2) + "\" width=\"" +
                     coord(w) + "\" height=\"" + coord(h) + "\"";
  switch (d.kind) {
  case DrawNode::Kind::Port:
    break;
  case DrawNode::Kind::Op:
    drawOpNode(svg, ctx, d.op, w, h, at, rect);
    break;
  case DrawNode::Kind::Input:
    svg += "<g class=\"io in\"" + at + ">" + rect + " rx=\"10\"/><text class=\"k\" x=\"" +
           coord(-w / 2 + 8) + "\" y=\"3.5\">in</text><text class=\"l\" x=\"" + coord(-w / 2 + 25) +
           "\" y=\"3.5\">" + esc(d.label) + "</text><title>model input " + esc(d.value->name) +
           ": " + esc(d.value->type.shapeStr()) + "</title></g>";
    break;
  case DrawNode::Kind::Output:
    svg += "<g class=\"io out\"" + at + ">" + rect + " rx=\"10\"/><text class=\"k\" x=\"" +
           coord(-w / 2 + 8) + "\" y=\"3.5\">out</text><text class=\"l\" x=\"" +
           coord(-w / 2 + 30) + "\" y=\"3.5\">" + esc(d.label) + "</text><title>model output " +
           esc(d.label) + "</title></g>";
    break;
  case DrawNode::Kind::State:
    svg += std::string("<g class=\"io sv ") + (d.write ? "w" : "r") + "\"" + at + ">" + rect +
           " rx=\"3\"/><text class=\"k\" x=\"" + coord(-w / 2 + 6) + "\" y=\"3.5\">" +
           (d.write ? "write" : "read") + "</text><text class=\"l\" x=\"" + coord(-w / 2 + 40) +
           "\" y=\"3.5\">" + esc(d.label) + "</text><title>state " + esc(d.value->name) + ": " +
           esc(d.value->type.shapeStr()) + (d.write ? ", written here" : ", read here") +
           "</title></g>";
    break;
  case DrawNode::Kind::Ref:
    svg += "<g class=\"io ref\" data-ref=\"" + std::to_string(d.op) + "\"" + at + ">" + rect +
           " rx=\"10\"/><text x=\"0\" y=\"3.5\">" + esc(d.label) + "</text><title>" +
           esc(d.value->name) + " from " + esc(g.ops[d.op].op->type) + " '" +
           esc(g.ops[d.op].op->name) + "' (click to go there)</title></g>";
    break;
  }
}

/// What the script needs of a laid-out chunk: its size, its group, its
/// ports' places and each op's centre.
Json chunkJson(const Chunk &chunk, const ChunkGraph &cg, const LayoutResult &layout) {
  Json j;
  j["w"] = std::llround(layout.width);
  j["h"] = std::llround(layout.height);
  j["g"] = chunk.group == kNone ? Json(nullptr) : Json(chunk.group);
  if (cg.inPort != UINT32_MAX) {
    j["in"] = std::llround(layout.centers[cg.inPort].x);
    j["iy"] = std::llround(layout.centers[cg.inPort].y);
  }
  if (cg.outPort != UINT32_MAX) {
    j["out"] = std::llround(layout.centers[cg.outPort].x);
    j["oy"] = std::llround(layout.centers[cg.outPort].y);
  }
  std::vector<long long> ys;
  for (size_t i = chunk.firstOp; i <= chunk.lastOp; ++i) {
    const LayoutPoint &p = layout.centers[cg.nodeOf[i - chunk.firstOp]];
    ys.push_back(std::llround(p.x));
    ys.push_back(std::llround(p.y));
  }
  j["xy"] = ys;
  return j;
}

/// Lays out chunk `c` and appends its SVG; returns the chunk's JSON.
Json drawChunk(std::string &svg, const FunctionContext &ctx, size_t c) {
  const FunctionGraph &g = *ctx.graph;
  bool hasIn = ctx.entered[c];
  bool hasOut = c + 1 < g.chunks.size() && ctx.entered[c + 1];
  ChunkGraph cg = buildChunkGraph(ctx, c, hasIn, hasOut);
  LayoutResult layout = layoutLayered(cg.nodes, cg.edges);

  svg += "<g class=\"chunk\" data-c=\"" + std::to_string(c) + "\">\n";
  drawEdges(svg, cg, layout);
  for (size_t k = 0; k < cg.draw.size(); ++k)
    drawNode(svg, ctx, cg, layout, k);
  svg += "</g>\n";
  return chunkJson(g.chunks[c], cg, layout);
}

/// The collapsed box of group `k`: title, a placement bar, the rules.
void drawGroupBox(std::string &svg, const FunctionContext &ctx, size_t k,
                  const std::string &label) {
  const FunctionGraph &g = *ctx.graph;
  const Group &grp = g.groups[k];
  std::map<std::string_view, size_t> byPlacement;
  std::map<std::string, size_t> rules;
  std::set<std::string> states;
  size_t total = grp.lastOp - grp.firstOp + 1;
  for (size_t i = grp.firstOp; i <= grp.lastOp; ++i) {
    const ane::OpReport &o = ctx.fr->ops[i];
    ++byPlacement[shownPlacement(o)];
    for (ane::RuleId r : o.rules)
      ++rules[std::string(ane::ruleInfo(r).code)];
    for (const Value *v : g.ops[i].statesRead)
      states.insert(v->name);
    for (const Value *v : g.ops[i].statesWritten)
      states.insert(v->name);
  }
  double w = kBoxWidth, h = kBoxHeight;
  svg += "<g class=\"gbox\" data-g=\"" + std::to_string(k) + "\"><rect class=\"f\" x=\"" +
         coord(-w / 2) + "\" y=\"0\" width=\"" + coord(w) + "\" height=\"" + coord(h) +
         "\" rx=\"8\"/>";
  std::string count = std::to_string(total) + " ops";
  if (!states.empty())
    count +=
        " \xC2\xB7 " + std::to_string(states.size()) + (states.size() == 1 ? " state" : " states");
  svg += "<text class=\"gt\" x=\"" + coord(-w / 2 + 12) + "\" y=\"18\">\xE2\x96\xB8 " + esc(label) +
         "</text><text class=\"gn\" x=\"" + coord(w / 2 - 12) + "\" y=\"18\">" + count + "</text>";
  // Placement bar, in enum order so colours keep their places.
  double x = -w / 2 + 12, barW = w - 24;
  for (std::string_view p : placementNames()) {
    auto it = byPlacement.find(p);
    if (it == byPlacement.end())
      continue;
    double pw = barW * static_cast<double>(it->second) / static_cast<double>(total);
    svg += "<rect class=\"bar p-" + cssName(p) + "\" x=\"" + coord(x) + "\" y=\"26\" width=\"" +
           coord(std::max(pw, 2.0)) + "\" height=\"10\"><title>" + std::to_string(it->second) +
           " " + esc(p) + "</title></rect>";
    x += pw;
  }
  // The rules that place this block's ops, its own before the function-wide
  // ones every block shares (those are in the side panel).
  std::vector<std::tuple<bool, size_t, std::string>> ranked;
  for (const auto &[code, n] : rules)
    ranked.emplace_back(ctx.wideRules.count(code) > 0, n, code);
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto &a, const auto &b) {
    return std::get<0>(a) != std::get<0>(b) ? !std::get<0>(a) : std::get<1>(a) > std::get<1>(b);
  });
  std::string why;
  for (const auto &[wide, n, code] : ranked) {
    std::string item = code + (wide ? "" : " \xC3\x97" + std::to_string(n));
    if (utf8Length(why) + utf8Length(item) + 2 > 54) {
      why += ", \xE2\x80\xA6";
      break;
    }
    why += (why.empty() ? "" : ", ") + item;
  }
  if (why.empty())
    why = "every op on the ANE";
  svg += "<text class=\"gr\" x=\"" + coord(-w / 2 + 12) + "\" y=\"51\">" + esc(why) + "</text>";
  svg += "</g>\n";
}

std::string groupLabel(const Group &grp, size_t index) {
  return "layer " + std::to_string(index) + (grp.kind.empty() ? "" : " \xC2\xB7 " + grp.kind);
}

/// Per op: the findings on it and the worst one's level; the rules with a
/// finding on the whole function.
void mapFindings(FunctionContext &ctx, const ane::CheckReport &report) {
  const ane::FunctionReport &fr = *ctx.fr;
  const FunctionGraph &g = *ctx.graph;
  const size_t n = g.ops.size();
  ctx.findingsOf.assign(n, {});
  ctx.worstEffect.assign(n, "");
  std::vector<int> worst(n, -1);
  for (size_t f = 0; f < report.findings.size(); ++f) {
    const ane::Finding &finding = report.findings[f];
    if (finding.function != fr.name)
      continue;
    if (finding.op.empty()) {
      ctx.wideRules.insert(std::string(ane::ruleInfo(finding.rule).code));
      continue;
    }
    auto it = g.opByName.find(finding.op);
    if (it == g.opByName.end())
      continue;
    ctx.findingsOf[it->second].push_back(f);
    // Severity is the finding's level: its effect, or at-risk when contested.
    if (static_cast<int>(finding.level()) > worst[it->second]) {
      worst[it->second] = static_cast<int>(finding.level());
      ctx.worstEffect[it->second] = std::string(ane::levelName(finding.level()));
    }
  }
}

/// Per op, the second line of its node: the state it writes or reads, or
/// the shape of its first output.
void labelOutputs(FunctionContext &ctx) {
  const FunctionGraph &g = *ctx.graph;
  ctx.outputLabel.assign(g.ops.size(), "");
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const GraphOp &gop = g.ops[i];
    std::string s;
    if (!gop.statesWritten.empty())
      s = "\xE2\x86\x92 " + gop.statesWritten.front()->name;
    else if (!gop.statesRead.empty())
      s = "\xE2\x86\x90 " + gop.statesRead.front()->name;
    else if (!gop.op->outputs.empty())
      s = compactShape(gop.op->outputs.front()->type.shapeStr());
    ctx.outputLabel[i] = clip(s, kOpChars + 4);
  }
}

/// Per chunk: whether a port enters it, its entry value made in the chunk
/// above or passing through that one.
void markEnteredChunks(FunctionContext &ctx) {
  const FunctionGraph &g = *ctx.graph;
  ctx.entered.assign(g.chunks.size(), false);
  for (size_t c = 1; c < g.chunks.size(); ++c) {
    const Value *entry = g.chunks[c].entry;
    if (!entry || !entry->definingOp)
      continue;
    auto producer = g.opByName.find(entry->definingOp->name);
    bool madeAbove = producer != g.opByName.end() &&
                     g.ops[producer->second].op == entry->definingOp &&
                     g.ops[producer->second].chunk == c - 1;
    ctx.entered[c] = madeAbove || (ctx.entered[c - 1] && g.chunks[c - 1].entry == entry);
  }
}

/// What the drawing of function `fr` (as graph `g`) needs to know per op.
FunctionContext makeContext(const ane::FunctionReport &fr, const FunctionGraph &g,
                            const ane::CheckReport &report) {
  FunctionContext ctx;
  ctx.fr = &fr;
  ctx.graph = &g;
  ctx.segmentOf.assign(g.ops.size(), 0);
  for (size_t s = 0; s < fr.segments.size(); ++s)
    for (size_t i = fr.segments[s].firstOp; i <= fr.segments[s].lastOp && i < g.ops.size(); ++i)
      ctx.segmentOf[i] = s;
  mapFindings(ctx, report);
  labelOutputs(ctx);
  markEnteredChunks(ctx);
  return ctx;
}

/// Op `i` as the details panel shows it.
Json opJson(const Model &model, const FunctionContext &ctx, size_t i) {
  const ane::OpReport &o = ctx.fr->ops[i];
  const GraphOp &gop = ctx.graph->ops[i];
  Json oj;
  oj["n"] = o.name;
  oj["t"] = o.type;
  oj["p"] = shownPlacement(o);
  Json rules = Json::array();
  for (ane::RuleId r : o.rules)
    rules.push_back(ane::ruleInfo(r).code);
  oj["r"] = rules;
  oj["f"] = o.flops;
  oj["s"] = ctx.segmentOf[i];
  oj["c"] = gop.chunk;
  Json in = Json::array();
  for (const Operand &od : gop.operands) {
    static constexpr const char *kinds[] = {"op", "input", "state", "const", "inner"};
    Json src = od.source.kind == OperandSource::Kind::Op ? Json(od.source.op) : Json(nullptr);
    in.push_back(Json::array({od.param, od.value->name, od.value->type.shapeStr(),
                              kinds[static_cast<int>(od.source.kind)], src}));
  }
  oj["in"] = in;
  Json out = Json::array();
  for (const auto &v : gop.op->outputs)
    out.push_back(Json::array({v->name, v->type.shapeStr()}));
  oj["out"] = out;
  std::string torch = torchNodeOf(o.name);
  if (!torch.empty())
    oj["tn"] = torch;
  if (!gop.op->outputs.empty()) {
    auto h = model.debugHandles.find(gop.op->outputs.front()->name);
    if (h != model.debugHandles.end())
      oj["dh"] = h->second;
  }
  if (!gop.returned.empty())
    oj["ret"] = gop.returned;
  auto names = [](const std::vector<const Value *> &vs) {
    Json a = Json::array();
    for (const Value *v : vs)
      a.push_back(v->name);
    return a;
  };
  if (!gop.statesRead.empty())
    oj["sr"] = names(gop.statesRead);
  if (!gop.statesWritten.empty())
    oj["sw"] = names(gop.statesWritten);
  if (!gop.succs.empty())
    oj["u"] = gop.succs;
  return oj;
}

/// Which groups open collapsed: in a big function all but the first of
/// each shape, so one instance of every layer kind stays in view.
std::vector<bool> collapsedGroups(const FunctionGraph &g, const HtmlOptions &options) {
  std::vector<bool> collapsed(g.groups.size(), false);
  if (g.ops.size() > options.collapseAbove) {
    std::set<size_t> shown;
    for (size_t k = 0; k < g.groups.size(); ++k)
      collapsed[k] = !shown.insert(g.groups[k].shape).second;
  }
  return collapsed;
}

/// Draws every group's collapsed box; returns the groups' JSON.
Json drawGroups(std::string &svg, const FunctionContext &ctx, const HtmlOptions &options) {
  const FunctionGraph &g = *ctx.graph;
  std::vector<bool> collapsed = collapsedGroups(g, options);
  Json groups = Json::array();
  for (size_t k = 0; k < g.groups.size(); ++k) {
    const Group &grp = g.groups[k];
    std::string label = groupLabel(grp, k);
    drawGroupBox(svg, ctx, k, label);
    groups.push_back({{"label", label},
                      {"kind", grp.kind},
                      {"shape", grp.shape},
                      {"c0", grp.firstChunk},
                      {"c1", grp.lastChunk},
                      {"o0", grp.firstOp},
                      {"o1", grp.lastOp},
                      {"collapsed", collapsed[k]},
                      {"w", kBoxWidth},
                      {"h", kBoxHeight}});
  }
  return groups;
}

/// The function's segments, inputs and outputs, as the script reads them.
void addSegmentsAndIo(Json &fj, const ane::FunctionReport &fr, const Function &fn) {
  Json segs = Json::array();
  for (const ane::Segment &s : fr.segments)
    segs.push_back({{"ane", s.onAne},
                    {"fails", s.compileFails},
                    {"risk", s.atRisk},
                    {"o0", s.firstOp},
                    {"o1", s.lastOp},
                    {"flops", s.flops}});
  Json inputs = Json::array();
  for (const auto &in : fn.inputs)
    inputs.push_back(
        {{"name", in->name}, {"type", in->type.shapeStr()}, {"state", in->type.isState()}});
  Json outputs = Json::array();
  for (const Value *v : fn.body->outputs)
    if (v)
      outputs.push_back({{"name", v->name}, {"type", v->type.shapeStr()}});
  fj["segments"] = std::move(segs);
  fj["inputs"] = std::move(inputs);
  fj["outputs"] = std::move(outputs);
}

/// Everything about one function: its SVG and its JSON.
void renderFunction(std::string &svg, Json &fj, const Model &model, const ane::CheckReport &report,
                    size_t fnIndex, const HtmlOptions &options) {
  const ane::FunctionReport &fr = report.functions[fnIndex];
  const Function *fn = model.program->findFunction(fr.name);
  if (!fn)
    throw InputError("report: function '" + fr.name + "' is not in the model");
  FunctionGraph g = buildFunctionGraph(*fn, fr);
  FunctionContext ctx = makeContext(fr, g, report);

  Json ops = Json::array();
  for (size_t i = 0; i < g.ops.size(); ++i)
    ops.push_back(opJson(model, ctx, i));
  Json nested = Json::object();
  for (const auto &[name, i] : g.opByName)
    if (g.ops[i].op->name != name)
      nested[name] = i;

  svg += "<g class=\"fn\" data-f=\"" + std::to_string(fnIndex) + "\">";
  Json chunks = Json::array();
  for (size_t c = 0; c < g.chunks.size(); ++c)
    chunks.push_back(drawChunk(svg, ctx, c));
  Json groups = drawGroups(svg, ctx, options);
  svg += "</g>";

  fj["name"] = fr.name;
  fj["ops"] = std::move(ops);
  fj["nested"] = std::move(nested);
  fj["chunks"] = std::move(chunks);
  fj["groups"] = std::move(groups);
  addSegmentsAndIo(fj, fr, *fn);
}

// --- Header ---------------------------------------------------------------

std::string chip(std::string_view kind, std::string_view name) {
  const PaletteEntry *e = paletteEntry(kind, name);
  std::string cls = std::string(kind == "verdict" ? "v-" : kind == "effect" ? "e-" : "p-");
  return "<span class=\"chip " + cls + cssName(name) + "\">" + esc(e ? e->label : name) + "</span>";
}

std::string bar(double part, double whole) {
  double pct = whole > 0 ? 100.0 * part / whole : 0;
  return "<span class=\"meter\"><span style=\"width:" + num(pct, 1) + "%\"></span></span>";
}

/// The share of ops with a working case in the evidence corpus, and the
/// unverified patterns in the cell's title.
std::string coverageCell(const ane::FunctionReport &fr) {
  std::string title;
  for (const ane::UnverifiedPattern &u : fr.unverified)
    title += (title.empty() ? "unverified: " : "; ") + u.pattern + " (" + std::to_string(u.ops) +
             (u.risky ? ", risky" : "") + ")";
  size_t risky = 0;
  for (const ane::UnverifiedPattern &u : fr.unverified)
    risky += u.risky;
  return "<span title=\"" + esc(title) + "\">" +
         bar(static_cast<double>(fr.coveredOps), static_cast<double>(fr.ops.size())) + "<b>" +
         percent(static_cast<double>(fr.coveredOps), static_cast<double>(fr.ops.size())) +
         "</b> of ops" +
         (risky ? ", " + std::to_string(risky) + " risky pattern" + (risky == 1 ? "" : "s") +
                      " unverified"
                : std::string()) +
         "</span>";
}

void renderHeader(std::string &out, const ane::CheckReport &report, const HtmlOptions &options) {
  const PaletteEntry *v = paletteEntry("verdict", ane::verdictName(report.verdict));
  out += "<header><div class=\"top\"><div class=\"title\"><h1>anefit " +
         std::string(options.plan ? "split" : "check") + "</h1><code class=\"model\">" +
         esc(report.modelPath) + "</code>";
  if (!report.origin.empty())
    out += "<span class=\"origin\">" + esc(report.origin) + "</span>";
  out += "</div><div class=\"verdict v-" + cssName(ane::verdictName(report.verdict)) +
         "\"><span class=\"vlabel\">" + esc(v ? v->label : ane::verdictName(report.verdict)) +
         "</span><span class=\"vtext\">" + esc(v ? v->meaning : "") + "</span></div></div>";

  const ane::CheckOptions &o = report.options;
  out += "<div class=\"opts\">target <b>" + esc(ane::chipInfo(o.chip).display) +
         "</b> \xC2\xB7 OS <b>" + esc(ane::osName(o.os)) + "</b> \xC2\xB7 compute units <b>" +
         esc(ane::computeUnitsName(o.computeUnits)) + "</b>";
  if (!o.function.empty())
    out += " \xC2\xB7 function <b>" + esc(o.function) + "</b>";
  out += " \xC2\xB7 weights <b>" + humanBytes(report.weightBytes) + "</b> (never read)</div>";

  out += "<table class=\"fnstats\"><thead><tr><th>function</th><th>verdict</th><th>ops on the "
         "ANE</th><th>FLOPs on the ANE</th><th>segments</th><th>boundaries</th><th>states</th>"
         "<th>weights</th><th>working evidence</th><th>program (each op coloured by "
         "placement)</th></tr></thead><tbody>";
  for (size_t f = 0; f < report.functions.size(); ++f) {
    const ane::FunctionReport &fr = report.functions[f];
    out +=
        "<tr data-f=\"" + std::to_string(f) + "\"><td><code>" + esc(fr.name) + "</code></td><td>" +
        chip("verdict", ane::verdictName(fr.verdict)) + "</td><td>" +
        bar(static_cast<double>(fr.aneOps), static_cast<double>(fr.ops.size())) + "<b>" +
        std::to_string(fr.aneOps) + "</b> / " + std::to_string(fr.ops.size()) + " (" +
        percent(static_cast<double>(fr.aneOps), static_cast<double>(fr.ops.size())) + ")</td><td>" +
        bar(fr.aneFlops, fr.totalFlops) + "<b>" + percent(fr.aneFlops, fr.totalFlops) + "</b> of " +
        humanFlops(fr.totalFlops) + "</td><td>" + std::to_string(fr.segments.size()) + "</td><td>" +
        std::to_string(fr.boundaries) + "</td><td>" + std::to_string(fr.states) + "</td><td>" +
        humanBytes(fr.weightBytes) + "</td><td>" + coverageCell(fr) + "</td><td class=\"strip\">";
    // The program strip: runs of equal placement in program order.
    size_t total = std::max<size_t>(fr.ops.size(), 1);
    out += "<svg viewBox=\"0 0 1000 14\" preserveAspectRatio=\"none\">";
    for (size_t i = 0; i < fr.ops.size();) {
      size_t j = i;
      while (j + 1 < fr.ops.size() && shownPlacement(fr.ops[j + 1]) == shownPlacement(fr.ops[i]))
        ++j;
      double x0 = 1000.0 * static_cast<double>(i) / static_cast<double>(total);
      double x1 = 1000.0 * static_cast<double>(j + 1) / static_cast<double>(total);
      out += "<rect class=\"p-" + cssName(shownPlacement(fr.ops[i])) + "\" data-i=\"" +
             std::to_string(i) + "\" x=\"" + num(x0, 2) + "\" width=\"" +
             num(std::max(x1 - x0, 1.5), 2) + "\" height=\"14\"/>";
      i = j + 1;
    }
    out += "</svg></td></tr>";
  }
  out += "</tbody></table>";

  // Legend with counts, and finding counts per effect.
  std::map<std::string_view, size_t> placed;
  for (const ane::FunctionReport &fr : report.functions)
    for (const ane::OpReport &op : fr.ops)
      ++placed[shownPlacement(op)];
  out += "<div class=\"legend\">";
  for (std::string_view p : placementNames()) {
    const PaletteEntry *e = paletteEntry("placement", p);
    auto it = placed.find(p);
    out += "<span class=\"key p-" + cssName(p) + "\" title=\"" + esc(e ? e->meaning : "") +
           "\"><i></i>" + esc(e ? e->label : p) + " <b>" +
           std::to_string(it == placed.end() ? 0 : it->second) + "</b></span>";
  }
  out += "<span class=\"sep\"></span><span class=\"key io-key\"><i class=\"in\"></i>model "
         "input/output</span><span class=\"key io-key\"><i class=\"sv\"></i>state read/write"
         "</span><span class=\"key io-key\"><i class=\"x\"></i>ANE \xE2\x86\x94 CPU boundary</span>"
         "</div></header>";
}

} // namespace

// --- Palette ----------------------------------------------------------------

std::vector<PaletteEntry> palette() {
  return {
#define COLOR(Kind, Name, Color, Label, Meaning) {#Kind, Name, Color, Label, Meaning},
#include "report/Palette.def"
  };
}

const PaletteEntry *paletteEntry(std::string_view kind, std::string_view name) {
  static const std::vector<PaletteEntry> table = [] {
    std::vector<PaletteEntry> t = palette();
    for (PaletteEntry &e : t)
      e.kind = e.kind == "Placement" ? "placement" : e.kind == "Verdict" ? "verdict" : "effect";
    return t;
  }();
  for (const PaletteEntry &e : table)
    if (e.kind == kind && e.name == name)
      return &e;
  return nullptr;
}

// The enums are contiguous from zero (uint8_t-based) and their name
// functions return "" past the last value, so a new value shows up here
// without a change.
std::vector<std::string_view> placementNames() {
  std::vector<std::string_view> names;
  for (unsigned i = 0; i < 256; ++i) {
    std::string_view s = ane::placementName(static_cast<ane::Placement>(i));
    if (s.empty())
      break;
    names.push_back(s);
  }
  names.push_back("at-risk");
  return names;
}

std::vector<std::string_view> verdictNames() {
  std::vector<std::string_view> names;
  for (unsigned i = 0; i < 256; ++i) {
    std::string_view s = ane::verdictName(static_cast<ane::Verdict>(i));
    if (s.empty())
      break;
    names.push_back(s);
  }
  return names;
}

// --- The page -----------------------------------------------------------------

namespace {

/// The data the page's script reads besides the report: each function's
/// drawing data (its SVG appended to `svg`), the palette, the placements and
/// the rules.
Json pageData(std::string &svg, const Model &model, const ane::CheckReport &report,
              const HtmlOptions &options) {
  Json data;
  data["functions"] = Json::array();
  for (size_t f = 0; f < report.functions.size(); ++f) {
    Json fj;
    renderFunction(svg, fj, model, report, f, options);
    data["functions"].push_back(std::move(fj));
  }
  Json pal = Json::object();
  for (const char *kind : {"placement", "verdict", "effect"})
    pal[kind] = Json::object();
  for (const PaletteEntry &e : palette()) {
    std::string kind = e.kind == "Placement" ? "placement"
                       : e.kind == "Verdict" ? "verdict"
                                             : "effect";
    pal[kind][std::string(e.name)] = {
        {"color", e.color}, {"label", e.label}, {"meaning", e.meaning}};
  }
  data["palette"] = pal;
  data["placements"] = placementNames();
  Json rules = Json::object();
  for (const ane::RuleInfo &r : ane::allRules())
    rules[std::string(r.code)] = {{"title", r.title},
                                  {"function", r.kind == ane::RuleKind::Function},
                                  {"effect", ane::effectName(r.effect)}};
  data["rules"] = rules;
  return data;
}

/// The document's head: title, the inline CSS and a colour per palette entry.
void appendHead(std::string &out, const ane::CheckReport &report, const HtmlOptions &options) {
  std::string title = "anefit " + std::string(options.plan ? "split" : "check") + ": " +
                      (report.modelPath.empty() ? std::string("model") : report.modelPath);
  out += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
         "<meta name=\"generator\" content=\"anefit\"><title>" +
         esc(title) + "</title><style>";
  out += assets::kReportCss;
  for (const PaletteEntry &e : palette()) {
    std::string prefix = e.kind == "Placement" ? ".p-" : e.kind == "Verdict" ? ".v-" : ".e-";
    out += prefix + cssName(e.name) + "{--c:" + std::string(e.color) + "}";
  }
  out += "</style></head><body>";
}

/// The graph section (function tabs, toolbar, the drawing), the side panel,
/// the findings table, the plan section and the footer.
void appendBody(std::string &out, const ane::CheckReport &report, const HtmlOptions &options,
                const std::string &svg) {
  out += "<main><section class=\"graph\"><div class=\"toolbar\">";
  if (report.functions.size() > 1) {
    out += "<span class=\"tabs\">";
    for (size_t f = 0; f < report.functions.size(); ++f)
      out += "<button class=\"tab\" data-f=\"" + std::to_string(f) + "\">" +
             esc(report.functions[f].name) + "</button>";
    out += "</span>";
  }
  out += "<button data-act=\"fit\" title=\"fit the width (0)\">fit</button>"
         "<button data-act=\"in\" title=\"zoom in (+)\">+</button>"
         "<button data-act=\"out\" title=\"zoom out (-)\">\xE2\x88\x92</button>"
         "<button data-act=\"expand\">expand all</button>"
         "<button data-act=\"collapse\">collapse repeats</button>"
         "<input type=\"search\" class=\"find\" placeholder=\"find op, type or torch node\">"
         "<span class=\"hint\">drag to pan \xC2\xB7 wheel to scroll \xC2\xB7 ctrl+wheel to zoom"
         "</span></div><svg class=\"canvas\" role=\"img\" aria-label=\"dataflow graph\">"
         "<defs><marker id=\"arrow\" viewBox=\"0 0 8 8\" refX=\"7\" refY=\"4\" markerWidth=\"8\" "
         "markerHeight=\"8\" markerUnits=\"userSpaceOnUse\" orient=\"auto\"><path "
         "d=\"M0 0L8 4L0 8z\"/></marker></defs>"
         "<g class=\"viewport\">";
  out += svg;
  out += "</g></svg></section><aside class=\"panel\"></aside></main>"
         "<section class=\"findings\"><h2>Findings</h2><div class=\"filters\"></div>"
         "<div class=\"ftable-wrap\"><table "
         "class=\"ftable\"><thead><tr><th>effect</th><th>rule</th><th>confidence</th>"
         "<th>function</th><th>op</th><th>message</th></tr></thead><tbody></tbody></table></div>"
         "</section>";
  if (options.plan)
    out += "<section class=\"plan\"><h2>Split plan</h2><div class=\"plan-body\"></div></section>";
  out += "<footer>Generated by anefit. Predictions come from the rules table (anefit rules); "
         "evidence links open the public sources behind each rule.</footer>";
}

/// The JSON the script reads (the check report, the page data, the plan),
/// then the script itself.
void appendScripts(std::string &out, const ane::CheckReport &report, const HtmlOptions &options,
                   const Json &data) {
  out += "<script type=\"application/json\" id=\"anefit-check\">";
  appendScriptJson(out, ane::renderJson(report));
  out += "</script><script type=\"application/json\" id=\"anefit-graph\">";
  appendScriptJson(out, dumpJson(data));
  out += "</script>";
  if (options.plan) {
    out += "<script type=\"application/json\" id=\"anefit-split\">";
    // The plan as documented, then the snippet under a key of the page's own.
    std::string plan = partition::renderPlanJson(*options.plan, options.cost, false, -1);
    size_t end = plan.rfind('}');
    plan = plan.substr(0, end) +
           ",\"skipListSnippet\":" + dumpJson(Json(partition::skipListSnippet(*options.plan))) +
           "}";
    appendScriptJson(out, plan);
    out += "</script>";
  }
  out += "<script>";
  out += assets::kReportJs;
  out += "</script></body></html>\n";
}

} // namespace

std::string renderHtml(const Model &model, const ane::CheckReport &report,
                       const HtmlOptions &options) {
  if (!model.program)
    throw InputError::at(model.sourcePath, "model", "expected an ML Program, found none");
  std::string svg;
  Json data = pageData(svg, model, report, options);
  std::string out;
  out.reserve(svg.size() + (size_t(1) << 20));
  appendHead(out, report, options);
  renderHeader(out, report, options);
  appendBody(out, report, options, svg);
  appendScripts(out, report, options, data);
  return out;
}

void writeReportFile(const Model &model, const std::string &path, std::string_view text,
                     const OutputOptions &policy) {
  std::vector<std::string> inputs;
  if (!model.sourcePath.empty()) {
    // A payload of a .pte is named "file.pte#N".
    std::string source = model.sourcePath;
    size_t hash = source.rfind('#');
    if (hash != std::string::npos && source.find('/', hash) == std::string::npos)
      source.resize(hash);
    inputs.push_back(source);
  }
  for (const auto &[name, store] : model.weightFiles)
    if (store)
      inputs.push_back(store->path());
  OutputOptions options = policy;
  options.alsoAvoid.insert(options.alsoAvoid.end(), inputs.begin(), inputs.end());
  writeFileAtomically(path, text, options);
}

} // namespace anefit::report
