//===- ProgramGraph.cpp - A checked function as a graph to draw -----------===//
//
// Chunks come from liveness in program order: a cut after op c is a place
// where at most one value produced before it is still needed after it
// (values read by many ops, like rotary tables and masks, are ignored, and
// values only returned by the function do not stay live, nor do values
// first read far below where they are made). Groups come from
// the chunks' op-type signatures: the most frequent signature ends a group,
// so that a transformer's [mixer, feed-forward] pairs become one group each,
// whatever mix of mixers (attention, short conv) the layers use.
//
//===----------------------------------------------------------------------===//
#include "report/ProgramGraph.h"

#include "support/Error.h"

#include <algorithm>
#include <functional>
#include <set>
#include <unordered_map>

namespace anefit::report {
namespace {

void addUnique(std::vector<const Value *> &list, const Value *v) {
  if (std::find(list.begin(), list.end(), v) == list.end())
    list.push_back(v);
}

void sortUnique(std::vector<size_t> &v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

/// True if the op types of [s0, s1] appear in order within [b0, b1], and
/// [b0, b1] has at most `ratio` times as many ops.
bool containsInOrder(const FunctionGraph &g, size_t b0, size_t b1, size_t s0, size_t s1,
                     double ratio) {
  double big = static_cast<double>(b1 - b0 + 1), small = static_cast<double>(s1 - s0 + 1);
  if (big < small || big > ratio * small)
    return false;
  size_t j = s0;
  for (size_t i = b0; i <= b1 && j <= s1; ++i)
    if (g.ops[i].op->type == g.ops[j].op->type)
      ++j;
  return j > s1;
}

/// The op-type signature of chunks [first, last] as one string per chunk.
std::string signature(const FunctionGraph &g, const Chunk &c) {
  std::string s;
  for (size_t i = c.firstOp; i <= c.lastOp; ++i)
    s += g.ops[i].op->type + ",";
  return s;
}

void findGroups(FunctionGraph &g, size_t minAnchorOps) {
  const size_t n = g.chunks.size();
  std::map<std::string, size_t> ids;
  std::vector<size_t> sig(n);
  for (size_t c = 0; c < n; ++c)
    sig[c] = ids.emplace(signature(g, g.chunks[c]), ids.size()).first->second;
  std::vector<size_t> count(ids.size(), 0), first(ids.size(), kNone);
  for (size_t c = 0; c < n; ++c) {
    ++count[sig[c]];
    if (first[sig[c]] == kNone)
      first[sig[c]] = c;
  }
  // The anchor: the most frequent signature; on a tie the one that starts
  // later, so that a group ends with it (mixer, then feed-forward).
  size_t anchor = kNone;
  std::vector<size_t> opsOf(ids.size(), 0);
  for (size_t c = 0; c < n; ++c)
    opsOf[sig[c]] = g.chunks[c].lastOp - g.chunks[c].firstOp + 1;
  for (size_t s = 0; s < ids.size(); ++s)
    if (opsOf[s] < minAnchorOps)
      continue;
    else if (anchor == kNone || count[s] > count[anchor] ||
             (count[s] == count[anchor] && first[s] > first[anchor]))
      anchor = s;
  if (anchor == kNone || count[anchor] < 2)
    return;
  std::vector<size_t> at;
  for (size_t c = 0; c < n; ++c)
    if (sig[c] == anchor)
      at.push_back(c);

  // Groups after the first run from one anchor to the next.
  std::vector<std::pair<size_t, size_t>> spans;
  for (size_t k = 1; k < at.size(); ++k)
    spans.emplace_back(at[k - 1] + 1, at[k]);
  // The first group is the longest later group's shape that ends at the
  // first anchor; whatever precedes it (embedding, preamble) stays apart.
  // Its first chunk may carry extra ops (exporters hoist rotary table
  // lookups and views into the first layer): the expected op types must
  // appear in it in order, and be at least half of it.
  auto contains = [&](const Chunk &big, const Chunk &small) {
    return containsInOrder(g, big.firstOp, big.lastOp, small.firstOp, small.lastOp, 2);
  };
  auto shapeOf = [&](size_t a, size_t b) {
    return std::vector<size_t>(sig.begin() + (long)a, sig.begin() + (long)b + 1);
  };
  size_t start = at[0], firstShape = kNone;
  for (size_t k = 0; k < spans.size(); ++k) {
    auto [a, b] = spans[k];
    size_t len = b - a + 1;
    if (len > at[0] + 1 || len <= at[0] - start + 1)
      continue;
    size_t s0 = at[0] + 1 - len;
    bool same = contains(g.chunks[s0], g.chunks[a]);
    for (size_t i = 1; same && i < len; ++i)
      same = sig[s0 + i] == sig[a + i];
    if (same)
      start = s0, firstShape = k;
  }
  spans.insert(spans.begin(), {start, at[0]});

  // Tiny repeated chunks (a cast, a reshape) are not worth collapsing.
  size_t ops = 0;
  for (const auto &[a, b] : spans)
    ops += g.chunks[b].lastOp - g.chunks[a].firstOp + 1;
  if (ops < 8 * spans.size())
    return;

  std::map<std::vector<size_t>, size_t> shapes;
  for (size_t k = 0; k < spans.size(); ++k) {
    auto [a, b] = spans[k];
    Group grp;
    grp.firstChunk = a;
    grp.lastChunk = b;
    grp.firstOp = g.chunks[a].firstOp;
    grp.lastOp = g.chunks[b].lastOp;
    // The first group takes the shape it was matched to.
    auto [ma, mb] = k == 0 && firstShape != kNone ? spans[firstShape + 1] : spans[k];
    grp.shape = shapes.emplace(shapeOf(ma, mb), shapes.size()).first->second;
    for (size_t c = a; c <= b; ++c)
      g.chunks[c].group = g.groups.size();
    g.groups.push_back(grp);
  }

  // Shapes that differ by a few ops (the first attention layer computing
  // the cache positions the others reuse) are one kind of layer.
  std::vector<size_t> rep(shapes.size(), kNone), canon(shapes.size(), kNone);
  for (size_t k = 0; k < g.groups.size(); ++k)
    if (rep[g.groups[k].shape] == kNone)
      rep[g.groups[k].shape] = k;
  size_t kinds = 0;
  std::vector<size_t> canonRep;
  for (size_t s = 0; s < shapes.size(); ++s) {
    const Group &a = g.groups[rep[s]];
    for (size_t t = 0; t < canonRep.size() && canon[s] == kNone; ++t) {
      const Group &b = g.groups[canonRep[t]];
      if (containsInOrder(g, a.firstOp, a.lastOp, b.firstOp, b.lastOp, 1.25) ||
          containsInOrder(g, b.firstOp, b.lastOp, a.firstOp, a.lastOp, 1.25))
        canon[s] = t;
    }
    if (canon[s] == kNone) {
      canon[s] = kinds++;
      canonRep.push_back(rep[s]);
    }
  }
  for (Group &grp : g.groups)
    grp.shape = canon[grp.shape];

  // A hint for each shape when several differ: what sets it apart.
  if (kinds < 2)
    return;
  std::vector<std::set<std::string>> typesOf(kinds);
  for (const Group &grp : g.groups)
    for (size_t i = grp.firstOp; i <= grp.lastOp; ++i)
      typesOf[grp.shape].insert(g.ops[i].op->type);
  std::vector<std::string> hints(kinds);
  for (size_t s = 0; s < kinds; ++s) {
    const auto &t = typesOf[s];
    if (t.count("scaled_dot_product_attention") || t.count("softmax"))
      hints[s] = "attention";
    else if (t.count("conv"))
      hints[s] = "conv";
    else
      for (const std::string &type : t)
        if (std::all_of(typesOf.begin(), typesOf.end(),
                        [&](const auto &o) { return &o == &t || !o.count(type); })) {
          hints[s] = type;
          break;
        }
  }
  for (Group &grp : g.groups)
    grp.kind = hints[grp.shape];
}

} // namespace

FunctionGraph buildFunctionGraph(const Function &fn, const ane::FunctionReport &fr,
                                 const GraphOptions &options) {
  FunctionGraph g;
  g.function = &fn;
  std::unordered_map<const Operation *, size_t> indexOf;
  std::set<const Operation *> consts;
  for (const auto &op : fn.body->ops) {
    size_t k = g.ops.size();
    if (k < fr.ops.size() && op->name == fr.ops[k].name && op->type == fr.ops[k].type) {
      indexOf[op.get()] = k;
      g.ops.push_back(GraphOp{op.get(), {}, {}, {}, {}, {}, {}, {}, 0});
    } else {
      consts.insert(op.get());
    }
  }
  if (g.ops.size() != fr.ops.size())
    throw InputError("report: the check report of function '" + fn.name +
                     "' does not match its body (op '" +
                     (g.ops.size() < fr.ops.size() ? fr.ops[g.ops.size()].name : std::string()) +
                     "' not found in order)");

  const size_t n = g.ops.size();
  for (size_t i = 0; i < n; ++i) {
    const Operation &top = *g.ops[i].op;
    g.opByName.emplace(top.name, i);
    for (const auto &b : top.blocks)
      walk(static_cast<const Block &>(*b),
           [&](const Operation &inner) { g.opByName.emplace(inner.name, i); });
  }

  // Operands, with where each comes from. Values defined inside an op's own
  // nested blocks are its business; values they capture from outside count.
  for (size_t i = 0; i < n; ++i) {
    GraphOp &gop = g.ops[i];
    std::set<const Value *> inner;
    std::function<void(const Operation &, const std::string &)> visit =
        [&](const Operation &o, const std::string &prefix) {
          for (const OpInput &in : o.inputs)
            for (size_t b = 0; b < in.bindings.size(); ++b) {
              const Value *v = in.bindings[b].value;
              if (!v || inner.count(v))
                continue;
              Operand operand;
              operand.param =
                  prefix + in.name + (in.bindings.size() > 1 ? "[" + std::to_string(b) + "]" : "");
              operand.value = v;
              const Operation *def = v->definingOp;
              if (def) {
                auto it = indexOf.find(def);
                operand.source.kind = it != indexOf.end() ? OperandSource::Kind::Op
                                      : consts.count(def) ? OperandSource::Kind::Const
                                                          : OperandSource::Kind::Inner;
                if (it != indexOf.end())
                  operand.source.op = it->second;
              } else if (v->ownerBlock == fn.body.get()) {
                operand.source.kind =
                    v->type.isState() ? OperandSource::Kind::State : OperandSource::Kind::Input;
              } else {
                operand.source.kind = OperandSource::Kind::Inner;
              }
              switch (operand.source.kind) {
              case OperandSource::Kind::Op:
                if (operand.source.op != i)
                  gop.preds.push_back(operand.source.op);
                break;
              case OperandSource::Kind::Input:
                addUnique(gop.inputs, v);
                break;
              case OperandSource::Kind::State:
                addUnique(o.type == "read_state" ? gop.statesRead : gop.statesWritten, v);
                break;
              default:
                break;
              }
              gop.operands.push_back(std::move(operand));
            }
          for (const auto &b : o.blocks) {
            for (const auto &in : b->inputs)
              inner.insert(in.get());
            for (const auto &nested : b->ops) {
              visit(*nested, nested->type + ".");
              for (const auto &r : nested->outputs)
                inner.insert(r.get());
            }
          }
        };
    visit(*gop.op, "");
    sortUnique(gop.preds);
    for (size_t p : gop.preds)
      g.ops[p].succs.push_back(i);
  }
  for (const Value *v : fn.body->outputs)
    if (v && v->definingOp) {
      auto it = indexOf.find(v->definingOp);
      if (it != indexOf.end())
        g.ops[it->second].returned.push_back(v->name);
    }

  // What flows across the cut after each op: how many values (and, when
  // only one, which) produced at or before it are read soon after it. A
  // value next read far below (a mask made in the first layer and read by
  // every attention, a rotary table from the preamble) is drawn as a
  // reference where it is read, so it does not hold layers together.
  if (n == 0)
    return g;
  std::unordered_map<const Value *, std::vector<size_t>> users;
  for (size_t i = 0; i < n; ++i)
    for (const Operand &o : g.ops[i].operands)
      if (o.source.kind == OperandSource::Kind::Op && o.source.op != i) {
        auto &u = users[o.value];
        if (u.empty() || u.back() != i)
          u.push_back(i);
      }
  std::vector<const Value *> valueById;
  std::unordered_map<const Value *, int64_t> idOf;
  std::vector<int64_t> liveCount(n + 1, 0), liveIdSum(n + 1, 0);
  for (size_t i = 0; i < n; ++i)
    for (const auto &out : g.ops[i].op->outputs) {
      auto it = users.find(out.get());
      if (it == users.end() || it->second.size() >= options.broadcastUsers)
        continue;
      int64_t id = static_cast<int64_t>(valueById.size());
      valueById.push_back(out.get());
      idOf[out.get()] = id;
      // Between consecutive reads u[j-1] < u[j], the value counts on the
      // cuts c in [u[j] - nearUse, u[j] - 1] (and after its definition).
      size_t prev = i;
      for (size_t u : it->second) {
        if (u <= prev)
          continue;
        size_t from = std::max(prev, u > options.nearUse ? u - options.nearUse : 0);
        liveCount[from] += 1, liveCount[u] -= 1;
        liveIdSum[from] += id, liveIdSum[u] -= id;
        prev = u;
      }
    }
  // The value a chunk is entered by (the residual stream) counts until its
  // last read, however far: the ops up to the residual add stay together.
  auto nearAt = [&](const std::vector<size_t> &u, size_t c) {
    auto next = std::upper_bound(u.begin(), u.end(), c);
    return next != u.end() && *next - c <= options.nearUse;
  };
  std::vector<Chunk> raw;
  int64_t count = 0, idSum = 0;
  Chunk cur;
  const std::vector<size_t> *entryUsers = nullptr;
  for (size_t c = 0; c + 1 < n; ++c) {
    count += liveCount[c];
    idSum += liveIdSum[c];
    int64_t k = count, sum = idSum;
    if (entryUsers && c < entryUsers->back() && !nearAt(*entryUsers, c))
      k += 1, sum += idOf.at(cur.entry);
    if (k <= 1) {
      cur.lastOp = c;
      raw.push_back(cur);
      cur = Chunk{c + 1, c + 1, k == 1 ? valueById[(size_t)sum] : nullptr, kNone};
      entryUsers = cur.entry ? &users.at(cur.entry) : nullptr;
    }
  }
  cur.lastOp = n - 1;
  raw.push_back(cur);

  g.chunks = std::move(raw);
  for (size_t c = 0; c < g.chunks.size(); ++c)
    for (size_t i = g.chunks[c].firstOp; i <= g.chunks[c].lastOp; ++i)
      g.ops[i].chunk = c;
  findGroups(g, options.minAnchorOps);
  return g;
}

} // namespace anefit::report
