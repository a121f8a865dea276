//===- SplitProjection.cpp - Wide projections in ANE-sized pieces ---------===//
//
// A linear whose output row exceeds the ANE's matmul kernel memory
// (ANE-CONV-006: an LLM's vocabulary projection) becomes linears over
// consecutive row ranges of its weight, each within that limit and the
// tensor extent every chip takes (ANE-SHAPE-002), joined by a
// concat along the last axis that keeps the original result's name. Each
// piece's weight is the same rows of the same stored form (a const, or a
// constexpr_blockwise_shift_scale with its scales and offsets cut at the
// same rows, or a constexpr_lut_to_dense with its palettes cut at the same
// row groups), so the result is exactly the original's. A weight the
// embedding's gather also reads (tied embeddings) is not stored twice: the
// gather becomes one gather per piece, each at the token's row within its
// piece, and selects that pick the piece holding the row.
//
//===----------------------------------------------------------------------===//
#include "ane/AneRules.h"
#include "ane/Limits.h"
#include "support/DType.h"
#include "support/Error.h"
#include "transforms/Builders.h"
#include "transforms/PassImpl.h"
#include "transforms/WeightData.h"

#include <algorithm>
#include <numeric>

namespace anefit {
namespace {

class SplitProjectionPass : public Pass {
public:
  explicit SplitProjectionPass(const PassOptions &options) {
    int64_t b = options.integer("max-bytes");
    if (b < 0)
      throw InputError("split-projection: option 'max-bytes': expected a non-negative count, "
                       "found " +
                       std::to_string(b));
    if (b > 0)
      maxBytes_ = static_cast<uint64_t>(b);
  }
  std::string_view name() const override { return "split-projection"; }
  void run(Model &model, PassResult &result) override;

private:
  /// A piece of a split weight: rows [begin, end) as `value`.
  struct Piece {
    Value *value;
    int64_t begin, end;
  };
  /// Splits `op`; "" on success, else why it was left. `shared` says what
  /// became of the weight's other readers.
  std::string split(Operation &op, PatternRewriter &rw, size_t &pieces, std::string &shared);
  uint64_t maxBytes_ = ane::kMatmulKernelMemoryBytes;
  std::shared_ptr<OwnedBlobs> store_ = newWeightStore("split-projection");
};

/// True if `op` is a gather of rows (axis 0, no batch dims) of `w` at
/// int32 indices: what the pieces of `w` can serve.
bool gathersRowsOf(const Operation &op, const Value *w) {
  if (op.type != "gather" || op.inputValue("x") != w || op.outputs.size() != 1)
    return false;
  const Value *idx = op.inputValue("indices");
  if (!idx || idx->type.dtype() != DType::I32 || !idx->type.hasRank())
    return false;
  int64_t rank = w->type.rank();
  const Constant *axis = op.constInput("axis");
  const Constant *batch = op.constInput("batch_dims");
  if ((op.input("axis") && !axis) || (op.input("batch_dims") && !batch))
    return false;
  int64_t a = axis ? axis->asScalar().value_or(-1) : 0;
  return (a == 0 || a == -rank) && (!batch || batch->asScalar().value_or(-1) == 0);
}

/// Replaces gather `g` of rows of a weight of `rows` rows by gathers of its
/// pieces: the index made non-negative as coremltools makes it, then per
/// piece the row within the piece (clamped, so every gather is in range) and
/// selects, last piece first, keeping the gather of the piece whose rows
/// hold the index. Every result element is the same row element.
/// The first op of the function's body after `g` that reads its result, if
/// every reader is an op of the body; else `g`. The selects go there: next
/// to what reads the row (on the ANE in an LLM), not among the gathers.
Operation &firstReader(Operation &g, PatternRewriter &rw) {
  std::vector<Operation *> readers;
  for (const Use &u : rw.uses().uses(g.output()))
    if (!u.isBlockOutput())
      readers.push_back(u.user);
  bool after = false;
  for (auto &op : rw.function().body->ops) {
    if (op.get() == &g)
      after = true;
    else if (after && std::find(readers.begin(), readers.end(), op.get()) != readers.end())
      return *op;
  }
  return g;
}

/// True if `idx` is already made non-negative for `rows` rows the way
/// coremltools lowers an embedding: select(cond=greater_equal(t, 0), a=t,
/// b=add(t, rows)).
bool madeNonNegative(const Value *idx, int64_t rows) {
  const Operation *sel = idx->definingOp;
  if (!sel || sel->type != "select")
    return false;
  const Value *t = sel->inputValue("a");
  const Value *cond = sel->inputValue("cond"), *wrapped = sel->inputValue("b");
  const Operation *ge = cond ? cond->definingOp : nullptr;
  const Operation *add = wrapped ? wrapped->definingOp : nullptr;
  if (!t || !ge || !add || ge->type != "greater_equal" || add->type != "add" ||
      ge->inputValue("x") != t || add->inputValue("x") != t)
    return false;
  const Constant *zero = ge->constInput("y"), *n = add->constInput("y");
  return zero && n && zero->numElements() == 1 && n->numElements() == 1 &&
         zero->asScalar() == std::optional<double>(0.0) &&
         n->asScalar() == std::optional<double>(static_cast<double>(rows));
}

void gatherFromPieces(Operation &g, PatternRewriter &rw, const std::vector<Value *> &pieces,
                      const std::vector<std::pair<int64_t, int64_t>> &ranges, int64_t rows) {
  Value *idx = g.inputValue("indices");
  Operation &reader = firstReader(g, rw);
  Type boolType = idx->type.withDType(DType::Bool);
  std::string base = g.name;
  auto scalar = [&](std::string_view hint, int64_t v) {
    return createIntConst(rw, g, base + std::string(hint), {v}, /*scalar=*/true);
  };
  auto binary = [&](std::string type, std::string_view hint, Value *x, Value *y, Type t) {
    return rw.create(g, std::move(type), base + std::string(hint), {{"x", {x}}, {"y", {y}}}, {t})
        ->output();
  };
  Value *at = idx;
  if (!madeNonNegative(idx, rows)) {
    Value *nonNegative = binary("greater_equal", "_nonneg", idx, scalar("_zero", 0), boolType);
    Value *wrapped = binary("add", "_wrapped", idx, scalar("_rows", rows), idx->type);
    at = rw.create(g, "select", base + "_index",
                   {{"cond", {nonNegative}}, {"a", {idx}}, {"b", {wrapped}}}, {idx->type})
             ->output();
  }
  Value *axis = scalar("_axis", 0);
  Value *batch = scalar("_batch_dims", 0);
  Value *validate = rw.createConst(g, base + "_validate_indices", Constant::scalarBool(false));
  std::vector<Value *> gathered;
  for (size_t p = 0; p < pieces.size(); ++p) {
    std::string tag = "_part" + std::to_string(p);
    auto [b, e] = ranges[p];
    Value *local = at;
    if (b > 0) {
      local = binary("sub", tag + "_row", local, scalar(tag + "_begin", b), idx->type);
      local = binary("maximum", tag + "_low", local, scalar(tag + "_first", 0), idx->type);
    }
    if (p + 1 < pieces.size())
      local = binary("minimum", tag + "_high", local, scalar(tag + "_last", e - b - 1), idx->type);
    gathered.push_back(rw.create(g, "gather", base + tag,
                                 {{"x", {pieces[p]}},
                                  {"indices", {local}},
                                  {"axis", {axis}},
                                  {"batch_dims", {batch}},
                                  {"validate_indices", {validate}}},
                                 {g.output()->type})
                           ->output());
  }
  // The condition gains the row's axis, so it broadcasts over the row.
  Value *last = createIntConst(rw, reader, base + "_row_axis", {-1});
  std::vector<Dim> condShape = idx->type.shape();
  condShape.push_back(Dim::of(1));
  Value *result = gathered.back();
  for (size_t p = pieces.size() - 1; p-- > 0;) {
    std::string tag = "_part" + std::to_string(p);
    Value *end = createIntConst(rw, reader, base + tag + "_end", {ranges[p].second}, true);
    Value *in =
        rw.create(reader, "less", base + tag + "_in", {{"x", {at}}, {"y", {end}}}, {boolType})
            ->output();
    Value *cond = rw.create(reader, "expand_dims", base + tag + "_in_rows",
                            {{"x", {in}}, {"axes", {last}}}, {Type::tensor(DType::Bool, condShape)})
                      ->output();
    result =
        rw.create(reader, "select", base + tag + "_pick",
                  {{"cond", {cond}}, {"a", {gathered[p]}}, {"b", {result}}}, {g.output()->type})
            ->output();
  }
  rw.replaceOpKeepingNames(g, result);
}

std::string SplitProjectionPass::split(Operation &op, PatternRewriter &rw, size_t &pieces,
                                       std::string &shared) {
  Value *out = op.output();
  auto outShape = out->type.staticShape();
  Value *x = op.inputValue("x");
  Value *wv = op.inputValue("weight");
  Operation *wop = wv ? wv->definingOp : nullptr;
  if (!outShape || outShape->empty() || !x || !wop)
    return "its output shape is not static or its weight is not an op's result";
  int64_t n = outShape->back();
  uint64_t elem = static_cast<uint64_t>(dtypeBits(out->type.dtype())) / 8;
  // Each piece within the kernel memory and within the tensor extent every
  // chip takes (ANE-SHAPE-002, the conservative "any" row of Chips.def).
  uint64_t maxRows =
      std::min<uint64_t>(maxBytes_ / std::max<uint64_t>(elem, 1),
                         static_cast<uint64_t>(ane::chipInfo(ane::Chip::Any).axisLimit));
  auto ws = wv->type.staticShape();
  if (!ws || ws->size() != 2 || (*ws)[0] != n)
    return "its weight is not a static (out, in) matrix";

  // Rows per scale row of a quantized weight: pieces must not cut a block.
  int64_t align = maxRows >= 64 ? 64 : 1;
  const Constant *wconst = nullptr, *data = nullptr, *scale = nullptr, *offset = nullptr;
  int64_t scaleRows = 1;
  if (wop->type == "const") {
    wconst = wop->attribute("val");
    if (!wconst || !wconst->isTensorLike())
      return "its weight const holds no tensor";
  } else if (wop->type == "constexpr_blockwise_shift_scale" ||
             (wop->type == "constexpr_lut_to_dense" && wop->input("lut") &&
              !wop->input("vector_axis"))) {
    // The palette of an iOS18 lut, [row groups, 1, entries, 1], is cut at
    // row groups as a scale is at its rows.
    bool lut = wop->type == "constexpr_lut_to_dense";
    data = paramConstant(*wop, lut ? "indices" : "data");
    scale = paramConstant(*wop, lut ? "lut" : "scale");
    offset = lut ? nullptr : paramConstant(*wop, "offset");
    auto ss = scale ? scale->type.staticShape() : std::nullopt;
    if (!data || !ss || ss->empty() || ((*ss)[0] != 1 && n % (*ss)[0]) || (lut && ss->size() != 4))
      return "its weight's data or scale is not constant";
    scaleRows = (*ss)[0];
    if (scaleRows > 1)
      align = std::lcm(align, n / scaleRows);
  } else {
    return "weights made by '" + wop->type + "' are not split";
  }
  int64_t count = static_cast<int64_t>((static_cast<uint64_t>(n) + maxRows - 1) / maxRows);
  int64_t chunk = (n + count - 1) / count;
  chunk = (chunk + align - 1) / align * align;
  if (static_cast<uint64_t>(chunk) > maxRows)
    chunk = static_cast<int64_t>(maxRows) / align * align;
  if (chunk < 1)
    return "no piece size fits the kernel memory and the weight's blocks";

  const Constant *bias = op.constInput("bias");
  if (op.input("bias") && !bias)
    return "its bias is not constant";
  // The weight's other readers: gathers of its rows read the pieces instead
  // (the pieces are then made where the weight is, before every reader);
  // any other reader keeps the weight, stored twice.
  std::vector<Operation *> readers;
  bool reroute = true;
  for (Operation *u : rw.uses().users(wv))
    if (u != &op) {
      readers.push_back(u);
      reroute = reroute && gathersRowsOf(*u, wv);
    }
  reroute = reroute && !readers.empty();
  Operation &at = reroute ? *wop : op;
  std::vector<Value *> parts, weights;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int64_t b = 0; b < n; b += chunk) {
    int64_t e = std::min(n, b + chunk);
    std::string tag = "_part" + std::to_string(parts.size());
    Value *w = nullptr;
    if (wconst) {
      auto c = sliceRows(store_, *wconst, b, e);
      if (!c)
        return "its weight rows are not whole bytes";
      w = rw.createConst(at, wop->name + tag, **c);
    } else {
      auto cut = [&](const Constant *c, bool perRow) -> std::optional<ConstantRef> {
        if (!perRow) // one scale for every row: shared as it is
          return std::make_shared<const Constant>(*c);
        int64_t per = n / scaleRows;
        return sliceRows(store_, *c, b / per, e / per);
      };
      auto d = sliceRows(store_, *data, b, e);
      auto s = cut(scale, scaleRows > 1);
      std::optional<ConstantRef> o;
      if (offset)
        o = cut(offset, scaleRows > 1);
      if (!d || !s || (offset && !o))
        return "its quantized rows are not whole bytes";
      Operation *q = rw.create(at, wop->type, wop->name + tag, {},
                               {Type::tensor(wv->type.dtype(), {e - b, (*ws)[1]})});
      bool lut = wop->type == "constexpr_lut_to_dense";
      q->setInput(lut ? "indices" : "data", Binding::of(*d));
      q->setInput(lut ? "lut" : "scale", Binding::of(*s));
      if (o)
        q->setInput("offset", Binding::of(*o));
      w = q->output();
    }
    std::vector<NewInput> inputs = {{"x", {x}}, {"weight", {w}}};
    std::vector<int64_t> shape = *outShape;
    shape.back() = e - b;
    Operation *piece = rw.create(op, "linear", op.name + tag, std::move(inputs),
                                 {Type::tensor(out->type.dtype(), shape)});
    if (bias) {
      auto bc = sliceRows(store_, *bias, b, e);
      if (!bc)
        return "its bias rows are not whole bytes";
      piece->setInput("bias", Binding::of(*bc));
    }
    parts.push_back(piece->output());
    weights.push_back(w);
    ranges.emplace_back(b, e);
  }
  Value *cat =
      createConcat(rw, op, op.name + "_concat", parts, static_cast<int64_t>(outShape->size()) - 1);
  if (!cat)
    return "the pieces cannot be concatenated";
  // The concat takes the linear's names: consumers, function outputs and
  // ExecuTorch's debug-handle map keep referring to them.
  rw.replaceOpKeepingNames(op, cat);
  pieces = parts.size();
  if (reroute) {
    for (Operation *g : readers)
      gatherFromPieces(*g, rw, weights, ranges, n);
    shared = "; its " + std::to_string(readers.size()) +
             " gather(s) of the shared weight read the pieces, so it is stored once";
  } else if (!readers.empty()) {
    shared = "; the weight's other readers (" + readers.front()->type +
             " first) keep it, so its rows are stored twice";
  }
  return "";
}

void SplitProjectionPass::run(Model &model, PassResult &result) {
  for (auto &fn : model.program->functions) {
    UseMap uses(*fn);
    PatternRewriter rw(*fn, uses);
    std::vector<Operation *> wide;
    for (auto &op : fn->body->ops) {
      if (op->type != "linear" || op->outputs.empty())
        continue;
      auto s = op->output()->type.staticShape();
      uint64_t elem = static_cast<uint64_t>(dtypeBits(op->output()->type.dtype())) / 8;
      if (s && !s->empty() && static_cast<uint64_t>(s->back()) * elem > maxBytes_)
        wide.push_back(op.get());
    }
    for (Operation *op : wide) {
      std::string name = op->name;
      int64_t width = op->output()->type.staticShape()->back();
      size_t pieces = 0;
      std::string shared;
      std::string why = split(*op, rw, pieces, shared);
      if (!why.empty()) {
        result.diagnostics.push_back(
            {Diagnostic::Severity::Warning, fn->name, name, "wide linear left as is: " + why});
        continue;
      }
      result.changes.push_back("split-projection: " + fn->name + ": linear '" + name +
                               "' (output " + std::to_string(width) + ") -> " +
                               std::to_string(pieces) + " linears joined by concat" + shared);
    }
  }
}

} // namespace

std::unique_ptr<Pass> createSplitProjectionPass(const PassOptions &options) {
  return std::make_unique<SplitProjectionPass>(options);
}

} // namespace anefit
