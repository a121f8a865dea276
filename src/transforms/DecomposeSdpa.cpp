//===- DecomposeSdpa.cpp - Attention as matmul, softmax, matmul -----------===//
//
// scaled_dot_product_attention gives wrong results on the iOS 26 ANE
// (ANE-ATTN-001) and two long-context ones in a function break its ANE
// compile (ANE-ATTN-002). This pass writes each one as the ops it is made
// of, with the mask kept and the softmax safe in fp16. K and V repeated for
// grouped-query attention (expand_dims, tile, reshape: torch's
// repeat_interleave) are used unrepeated: the query heads of one group are
// stacked as rows, so the cache is read once per KV head and no rank-5
// tensor remains.
//
//===----------------------------------------------------------------------===//
#include "transforms/Builders.h"
#include "transforms/PassImpl.h"

#include "support/DType.h"

#include <cmath>

namespace anefit {

namespace {

/// Score given to masked-out keys: finite (the ANE softmax mishandles -inf,
/// ANE-DTYPE-004) and far enough below any real score that exp() of it,
/// after the max is subtracted, is 0 in fp16 and fp32.
constexpr float kMaskedScore = -1.0e4f;

std::optional<std::vector<int64_t>> shapeOf(const Value *v) {
  return v && v->type.isTensor() ? v->type.staticShape() : std::nullopt;
}

/// K or V as the model repeated it for grouped-query attention:
/// reshape(tile(expand_dims(kv, axes=[2]), reps=[1, 1, G, 1, 1]),
/// [B, H * G, S, D]), i.e. head h reads KV head h / G.
struct Repeated {
  Value *kv = nullptr; ///< (B, H, S, D), unrepeated
  int64_t groups = 1;  ///< G
};

std::optional<Repeated> matchRepeat(Value *v) {
  auto out = shapeOf(v);
  if (!out || out->size() != 4 || !v->definingOp || v->definingOp->type != "reshape")
    return std::nullopt;
  Value *tiled = v->definingOp->inputValue("x");
  if (!tiled || !tiled->definingOp || tiled->definingOp->type != "tile")
    return std::nullopt;
  const Constant *reps = tiled->definingOp->constInput("reps");
  Value *expanded = tiled->definingOp->inputValue("x");
  if (!reps || !expanded || !expanded->definingOp || expanded->definingOp->type != "expand_dims")
    return std::nullopt;
  const Constant *axes = expanded->definingOp->constInput("axes");
  Value *kv = expanded->definingOp->inputValue("x");
  auto in = shapeOf(kv);
  if (!axes || axes->numElements() != 1 || !in || in->size() != 4)
    return std::nullopt;
  int64_t axis = axes->elementAsInt(0);
  if (axis != 2 && axis != -3)
    return std::nullopt;
  std::vector<int64_t> r = reps->asInts();
  if (r.size() != 5 || r[0] != 1 || r[1] != 1 || r[3] != 1 || r[4] != 1 || r[2] < 1)
    return std::nullopt;
  std::vector<int64_t> want = {(*in)[0], (*in)[1] * r[2], (*in)[2], (*in)[3]};
  if (*out != want || kv->type.dtype() != v->type.dtype())
    return std::nullopt;
  return Repeated{kv, r[2]};
}

class DecomposeSdpaPass : public Pass {
public:
  explicit DecomposeSdpaPass(PassOptions) {}
  std::string_view name() const override { return "decompose-sdpa"; }
  void run(Model &model, PassResult &result) override;

private:
  /// Decomposes `op`; returns false (IR untouched) for a form it does not
  /// handle, with the reason in `why`.
  bool decompose(Operation &op, PatternRewriter &rw, bool &grouped, std::string &why);
};

Value *reshapeTo(PatternRewriter &rw, Operation &at, Value *x, const std::vector<int64_t> &shape,
                 const std::string &hint) {
  Value *s = createIntConst(rw, at, hint + "_shape", shape);
  return rw
      .create(at, "reshape", hint, {{"x", {x}}, {"shape", {s}}},
              {Type::tensor(x->type.dtype(), shape)})
      ->output(0);
}

bool DecomposeSdpaPass::decompose(Operation &op, PatternRewriter &rw, bool &grouped,
                                  std::string &why) {
  Value *q = op.inputValue("query");
  Value *k = op.inputValue("key");
  Value *v = op.inputValue("value");
  Value *mask = op.inputValue("attn_mask");
  auto qs = shapeOf(q), ks = shapeOf(k), vs = shapeOf(v);
  if (!qs || !ks || !vs || op.outputs.size() != 1 || (op.input("attn_mask") && !mask)) {
    why = "query, key, value or mask without a static shape";
    return false;
  }
  size_t rank = qs->size();
  if (rank < 3 || ks->size() != rank || vs->size() != rank) {
    why = "query, key and value must have one rank >= 3";
    return false;
  }
  DType dt = q->type.dtype();
  if ((dt != DType::F16 && dt != DType::F32) || k->type.dtype() != dt || v->type.dtype() != dt) {
    why = "query, key and value must be all fp16 or all fp32";
    return false;
  }
  int64_t l = (*qs)[rank - 2], e = (*qs)[rank - 1], s = (*ks)[rank - 2], ev = (*vs)[rank - 1];
  std::optional<std::vector<int64_t>> ms;
  if (mask) {
    ms = shapeOf(mask);
    DType mt = mask->type.dtype();
    if (!ms || ms->size() > rank || (mt != DType::Bool && !isFloat(mt))) {
      why = "the mask is not a static bool or float tensor of at most the query's rank";
      return false;
    }
  }

  // Grouped-query attention: both K and V repeated by the same factor, the
  // query of rank 4, and a mask that needs no per-head shuffling.
  // Copied out of the optionals (g++ 12 sees them as maybe uninitialized).
  Repeated rk, rv;
  bool repeated = false;
  if (rank == 4)
    if (auto mk = matchRepeat(k), mv = matchRepeat(v); mk && mv) {
      rk = *mk;
      rv = *mv;
      repeated = true;
    }
  std::vector<int64_t> full = *qs; // broadcast shape of the scores, in the query's batch
  full[rank - 1] = s;
  grouped = repeated && rk.groups == rv.groups && rk.groups > 1 &&
            shapeOf(rk.kv)->at(1) == shapeOf(rv.kv)->at(1);
  int64_t g = grouped ? rk.groups : 1;
  int64_t maskRows = 1, maskHeads = 1;
  if (grouped && ms) {
    // The mask's dims aligned to the scores (B, H, L, S) from the right.
    std::vector<int64_t> m4(4 - ms->size(), 1);
    m4.insert(m4.end(), ms->begin(), ms->end());
    maskHeads = m4[1];
    maskRows = m4[2];
    // A per-head mask regroups like the query only when it is whole along
    // rows and keys; other per-head broadcasts keep the repeated K and V.
    if (maskHeads != 1 && (ms->size() != 4 || maskRows != l || m4[3] != s))
      grouped = false;
  }

  std::string base = op.name;
  Value *key = k, *value = v, *query = q;
  std::vector<int64_t> scoreShape = full;
  if (grouped) {
    key = rk.kv;
    value = rv.kv;
    int64_t heads = (*qs)[1] / g;
    // Query heads h = kv * G + j become rows j * L + l of KV head kv.
    query = reshapeTo(rw, op, q, {(*qs)[0], heads, g * l, e}, base + "_q_groups");
    scoreShape = {(*qs)[0], heads, g * l, s};
  }

  // Q K^T / sqrt(E), the scale (MIL's and PyTorch's default, 1/sqrt of the
  // query's last dim) applied to Q first so the products stay in fp16 range.
  Value *scale = rw.createConst(
      op, base + "_scale",
      dt == DType::F16 ? Constant::fromF16Bits({floatToHalf(1.0f / std::sqrt(float(e)))}, {})
                       : Constant::scalarF32(1.0f / std::sqrt(float(e))));
  Value *qScaled =
      rw.create(op, "mul", base + "_q_scaled", {{"x", {query}}, {"y", {scale}}}, {query->type})
          ->output(0);
  Value *yes = rw.createConst(op, base + "_transpose_y", Constant::scalarBool(true));
  Value *no = rw.createConst(op, base + "_transpose_x", Constant::scalarBool(false));
  Type scoreType = Type::tensor(dt, scoreShape);
  Value *scores =
      rw.create(op, "matmul", base + "_scores",
                {{"x", {qScaled}}, {"y", {key}}, {"transpose_x", {no}}, {"transpose_y", {yes}}},
                {scoreType})
          ->output(0);

  if (mask) {
    Value *m = mask;
    if (grouped && maskRows == l && l > 1 && maskHeads == 1) {
      // One mask for every head, one row per query row: repeat its rows
      // for the G query heads stacked in a group.
      std::vector<Value *> copies(g, m);
      std::vector<int64_t> m4(4 - ms->size(), 1);
      m4.insert(m4.end(), ms->begin(), ms->end());
      m = reshapeTo(rw, op, m, m4, base + "_mask4");
      Value *axis = createIntConst(rw, op, base + "_mask_rows_axis", {2}, /*scalar=*/true);
      Value *inter =
          rw.createConst(op, base + "_mask_rows_interleave", Constant::scalarBool(false));
      m4[2] *= g;
      copies.assign(g, m);
      m = rw.create(op, "concat", base + "_mask_rows",
                    {{"values", copies}, {"axis", {axis}}, {"interleave", {inter}}},
                    {Type::tensor(mask->type.dtype(), m4)})
              ->output(0);
    } else if (grouped && maskHeads != 1) {
      m = reshapeTo(rw, op, m, {(*ms)[0], (*qs)[1] / g, g * l, s}, base + "_mask_groups");
    }
    if (mask->type.dtype() == DType::Bool) {
      // True keeps the score (MIL and PyTorch); masked keys get a finite
      // score that softmax turns into 0.
      Value *masked =
          rw.createConst(op, base + "_masked_score",
                         dt == DType::F16 ? Constant::fromF16Bits({floatToHalf(kMaskedScore)}, {})
                                          : Constant::scalarF32(kMaskedScore));
      scores = rw.create(op, "select", base + "_scores_masked",
                         {{"cond", {m}}, {"a", {scores}}, {"b", {masked}}}, {scoreType})
                   ->output(0);
    } else {
      if (m->type.dtype() != dt) {
        Value *dtype = rw.createConst(op, base + "_mask_dtype",
                                      Constant::scalarString(std::string(dtypeName(dt))));
        std::vector<int64_t> shape = *shapeOf(m);
        m = rw.create(op, "cast", base + "_mask_cast", {{"x", {m}}, {"dtype", {dtype}}},
                      {Type::tensor(dt, shape)})
                ->output(0);
      }
      scores =
          rw.create(op, "add", base + "_scores_masked", {{"x", {scores}}, {"y", {m}}}, {scoreType})
              ->output(0);
    }
  }

  // softmax(x) = softmax(x - max x): with the row max subtracted first every
  // exponent is <= 0, so no fp16 overflow whatever the softmax kernel does.
  std::vector<int64_t> rowShape = scoreShape;
  rowShape.back() = 1;
  Value *last = createIntConst(rw, op, base + "_row_axes", {-1});
  Value *keep = rw.createConst(op, base + "_row_keep_dims", Constant::scalarBool(true));
  Value *rowMax = rw.create(op, "reduce_max", base + "_row_max",
                            {{"x", {scores}}, {"axes", {last}}, {"keep_dims", {keep}}},
                            {Type::tensor(dt, rowShape)})
                      ->output(0);
  Value *shifted = rw.create(op, "sub", base + "_scores_shifted",
                             {{"x", {scores}}, {"y", {rowMax}}}, {scoreType})
                       ->output(0);
  Value *axis = createIntConst(rw, op, base + "_softmax_axis", {-1}, /*scalar=*/true);
  Value *weights =
      rw.create(op, "softmax", base + "_weights", {{"x", {shifted}}, {"axis", {axis}}}, {scoreType})
          ->output(0);
  std::vector<int64_t> outShape = scoreShape;
  outShape.back() = ev;
  Value *out =
      rw.create(op, "matmul", base + "_out",
                {{"x", {weights}}, {"y", {value}}, {"transpose_x", {no}}, {"transpose_y", {no}}},
                {Type::tensor(dt, outShape)})
          ->output(0);
  if (grouped)
    out = reshapeTo(rw, op, out, *shapeOf(op.output(0)), base + "_heads");
  std::vector<Value *> operands = op.operandValues();
  rw.replaceOp(op, {out});
  eraseDeadProducers(rw, std::move(operands));
  return true;
}

void DecomposeSdpaPass::run(Model &model, PassResult &result) {
  for (auto &fn : model.program->functions) {
    UseMap uses(*fn);
    PatternRewriter rw(*fn, uses);
    std::vector<Operation *> ops;
    for (auto &op : fn->body->ops)
      if (op->type == "scaled_dot_product_attention")
        ops.push_back(op.get());
    size_t done = 0, grouped = 0;
    for (Operation *op : ops) {
      bool isGrouped = false;
      std::string why;
      if (decompose(*op, rw, isGrouped, why)) {
        ++done;
        grouped += isGrouped;
      } else {
        result.diagnostics.push_back({Diagnostic::Severity::Warning, fn->name, op->name,
                                      "scaled_dot_product_attention left as is: " + why});
      }
    }
    if (done)
      result.changes.push_back(
          "decompose-sdpa: " + fn->name + ": " + std::to_string(done) +
          " scaled_dot_product_attention -> matmul, softmax, matmul" +
          (grouped ? " (" + std::to_string(grouped) + " with K and V unrepeated per KV head)"
                   : ""));
  }
}

} // namespace

std::unique_ptr<Pass> createDecomposeSdpaPass(const PassOptions &options) {
  return std::make_unique<DecomposeSdpaPass>(options);
}

} // namespace anefit
