//===- Canonicalize.cpp - Folding and simplification patterns -------------===//
//
// The patterns that clean up after rewrites: integer shape arithmetic folds to
// constants (so slice bounds computed from shapes become static), identities
// disappear, slices of concats read their operand directly, and constant-
// bound slice_updates become concat + slice_by_index. The canonicalize pass
// runs them all with the greedy driver.
//
//===----------------------------------------------------------------------===//
#include "transforms/Builders.h"
#include "transforms/PassImpl.h"
#include "transforms/Patterns.h"

#include "support/IntMath.h"

#include <algorithm>
#include <functional>

namespace anefit {

namespace {

/// Element count limit for folded constants: shape arithmetic is tiny, and
/// we never want to materialise weights.
constexpr int64_t kMaxFoldElements = 4096;

/// Integer constant bound to `param` as values plus shape, if any.
struct IntConst {
  std::vector<int64_t> values;
  std::vector<int64_t> shape;
};

std::optional<IntConst> intConst(const Operation &op, std::string_view param) {
  const Constant *c = op.constInput(param);
  if (!c || !c->isTensorLike() || !isInteger(c->type.dtype()))
    return std::nullopt;
  auto shape = c->type.staticShape();
  if (!shape || c->numElements() > kMaxFoldElements)
    return std::nullopt;
  return IntConst{c->asInts(), *shape};
}

bool isBodyOutput(const Value *v, const Function &fn) {
  return std::find(fn.body->outputs.begin(), fn.body->outputs.end(), v) != fn.body->outputs.end();
}

/// Replaces the single result of `op` with an int constant of the result's
/// dtype (int32 or int64 only).
bool replaceWithInts(Operation &op, PatternRewriter &rw, const std::vector<int64_t> &values,
                     const std::vector<int64_t> &shape) {
  if (op.outputs.size() != 1)
    return false;
  // A folded function output would change the output's producer into a
  // const; keep the op so the model interface stays as it was.
  if (isBodyOutput(op.output(0), rw.function()))
    return false;
  DType t = op.output(0)->type.dtype();
  Constant c;
  if (t == DType::I32)
    c = Constant::fromI32(std::vector<int32_t>(values.begin(), values.end()), shape);
  else if (t == DType::I64)
    c = Constant::fromI64(values, shape);
  else
    return false;
  Value *folded = rw.createConst(op, op.name + "_folded", std::move(c));
  rw.replaceOp(op, {folded});
  return true;
}

struct FoldShape : RewritePattern {
  FoldShape() : RewritePattern("shape") {}
  bool matchAndRewrite(Operation &op, PatternRewriter &rw) const override {
    Value *x = op.inputValue("x");
    if (!x || op.outputs.size() != 1)
      return false;
    auto shape = x->type.staticShape();
    if (!shape)
      return false;
    return replaceWithInts(op, rw, *shape, {static_cast<int64_t>(shape->size())});
  }
};

/// Elementwise integer binary ops with same-shape or scalar operands.
struct FoldIntBinary : RewritePattern {
  using Fn = std::function<std::optional<int64_t>(int64_t, int64_t)>;
  Fn fn;
  FoldIntBinary(std::string type, Fn fn) : RewritePattern(std::move(type)), fn(std::move(fn)) {}
  bool matchAndRewrite(Operation &op, PatternRewriter &rw) const override {
    auto x = intConst(op, "x");
    auto y = intConst(op, "y");
    if (!x || !y)
      return false;
    bool xs = x->values.size() == 1 && x->shape.size() <= 1;
    bool ys = y->values.size() == 1 && y->shape.size() <= 1;
    if (!(x->shape == y->shape || xs || ys))
      return false;
    const IntConst &big = (x->shape == y->shape || ys) ? *x : *y;
    std::vector<int64_t> out(big.values.size());
    for (size_t i = 0; i < out.size(); ++i) {
      auto r = fn(x->values[xs ? 0 : i], y->values[ys ? 0 : i]);
      if (!r)
        return false;
      out[i] = *r;
    }
    return replaceWithInts(op, rw, out, big.shape);
  }
};

/// Integer division rounding toward negative infinity; nullopt for /0.
std::optional<int64_t> foldFloorDiv(int64_t a, int64_t b) {
  if (b == 0)
    return std::nullopt;
  return floorDiv(a, b);
}

struct FoldGather : RewritePattern {
  FoldGather() : RewritePattern("gather") {}
  bool matchAndRewrite(Operation &op, PatternRewriter &rw) const override {
    auto x = intConst(op, "x");
    auto idx = intConst(op, "indices");
    if (!x || !idx || x->shape.size() != 1)
      return false;
    if (const Constant *axis = op.constInput("axis"))
      if (axis->asScalar().value_or(0) != 0)
        return false;
    std::vector<int64_t> out;
    int64_t n = x->shape[0];
    for (int64_t i : idx->values) {
      std::optional<int64_t> at = normalizeIndex(i, n);
      if (!at)
        return false;
      out.push_back(x->values[static_cast<size_t>(*at)]);
    }
    return replaceWithInts(op, rw, out, idx->shape);
  }
};

struct FoldConcat : RewritePattern {
  FoldConcat() : RewritePattern("concat") {}
  bool matchAndRewrite(Operation &op, PatternRewriter &rw) const override {
    const OpInput *values = op.input("values");
    if (!values || values->bindings.empty())
      return false;
    if (const Constant *inter = op.constInput("interleave"))
      if (inter->asScalar().value_or(0) != 0)
        return false;
    std::vector<int64_t> out;
    for (const Binding &b : values->bindings) {
      const Constant *c = b.isValue() ? (b.value->definingOp && b.value->definingOp->type == "const"
                                             ? b.value->definingOp->attribute("val")
                                             : nullptr)
                                      : b.constant.get();
      if (!c || !c->isTensorLike() || !isInteger(c->type.dtype()) || c->type.rank() > 1 ||
          c->numElements() > kMaxFoldElements)
        return false;
      auto vs = c->asInts();
      out.insert(out.end(), vs.begin(), vs.end());
    }
    return replaceWithInts(op, rw, out, {static_cast<int64_t>(out.size())});
  }
};

struct FoldSliceOfConst : RewritePattern {
  FoldSliceOfConst() : RewritePattern("slice_by_index") {}
  bool matchAndRewrite(Operation &op, PatternRewriter &rw) const override {
    auto x = intConst(op, "x");
    if (!x || x->shape.size() != 1)
      return false;
    auto s = staticSliceBounds(op, x->shape);
    if (!s)
      return false;
    std::vector<int64_t> out(x->values.begin() + s->begin[0], x->values.begin() + s->end[0]);
    return replaceWithInts(op, rw, out, {static_cast<int64_t>(out.size())});
  }
};

/// identity(x) -> x, unless the identity names a function output.
struct ForwardIdentity : RewritePattern {
  ForwardIdentity() : RewritePattern("identity") {}
  bool matchAndRewrite(Operation &op, PatternRewriter &rw) const override {
    Value *x = op.inputValue("x");
    if (!x || op.outputs.size() != 1 || isBodyOutput(op.output(0), rw.function()))
      return false;
    if (x->type != op.output(0)->type)
      return false;
    rw.replaceOp(op, {x});
    return true;
  }
};

/// slice_by_index(concat(a, b, ...)) reading inside one operand -> slice of it.
struct SliceOfConcat : RewritePattern {
  SliceOfConcat() : RewritePattern("slice_by_index", /*benefit=*/2) {}
  bool matchAndRewrite(Operation &op, PatternRewriter &rw) const override {
    Value *x = op.inputValue("x");
    if (!x || !x->definingOp || x->definingOp->type != "concat")
      return false;
    Operation &cat = *x->definingOp;
    auto shape = x->type.staticShape();
    if (!shape)
      return false;
    auto s = staticSliceBounds(op, *shape);
    const Constant *axisC = cat.constInput("axis");
    if (!s || !axisC || !axisC->asScalar())
      return false;
    if (const Constant *inter = cat.constInput("interleave"))
      if (inter->asScalar().value_or(0) != 0)
        return false;
    auto axis = normalizeAxis(static_cast<int64_t>(*axisC->asScalar()), (int64_t)shape->size());
    const OpInput *values = cat.input("values");
    if (!axis || !values)
      return false;
    int64_t offset = 0;
    for (const Binding &b : values->bindings) {
      if (!b.isValue())
        return false;
      auto part = b.value->type.staticShape();
      if (!part)
        return false;
      int64_t width = (*part)[*axis];
      if (s->begin[*axis] >= offset && s->end[*axis] <= offset + width) {
        std::vector<int64_t> begin = s->begin, end = s->end;
        begin[*axis] -= offset;
        end[*axis] -= offset;
        Value *v = createSlice(rw, op, op.name + "_part", b.value, begin, end);
        if (!v || v->type != op.output(0)->type)
          return false;
        rw.replaceOp(op, {v});
        return true;
      }
      offset += width;
    }
    return false;
  }
};

/// slice_update(x, update) with static bounds differing from x along one
/// axis only -> concat(slice(x, before), update, slice(x, after)). This is
/// how a rolled state buffer written at its last column becomes static.
struct StaticSliceUpdate : RewritePattern {
  const std::unordered_set<const Operation *> *only;
  explicit StaticSliceUpdate(const std::unordered_set<const Operation *> *only)
      : RewritePattern("slice_update"), only(only) {}
  bool matchAndRewrite(Operation &op, PatternRewriter &rw) const override {
    if (only && !only->count(&op))
      return false;
    Value *x = op.inputValue("x");
    Value *update = op.inputValue("update");
    if (!x || !update || op.outputs.size() != 1)
      return false;
    auto shape = x->type.staticShape();
    auto ushape = update->type.staticShape();
    if (!shape || !ushape || ushape->size() != shape->size())
      return false;
    auto s = staticSliceBounds(op, *shape);
    if (!s)
      return false;
    int64_t axis = -1;
    for (size_t i = 0; i < shape->size(); ++i) {
      if ((*ushape)[i] != s->end[i] - s->begin[i])
        return false;
      if (s->begin[i] == 0 && s->end[i] == (*shape)[i])
        continue;
      if (axis >= 0)
        return false; // partial along two axes: not a concat
      axis = static_cast<int64_t>(i);
    }
    if (axis < 0) {
      // The update covers everything: the result is the update itself.
      if (update->type != op.output(0)->type)
        return false;
      rw.replaceOp(op, {update});
      return true;
    }
    std::vector<Value *> parts;
    std::vector<int64_t> begin(shape->size(), 0), end = *shape;
    if (s->begin[axis] > 0) {
      end[axis] = s->begin[axis];
      parts.push_back(createSlice(rw, op, op.name + "_head", x, begin, end));
    }
    parts.push_back(update);
    if (s->end[axis] < (*shape)[axis]) {
      begin[axis] = s->end[axis];
      end[axis] = (*shape)[axis];
      parts.push_back(createSlice(rw, op, op.name + "_tail", x, begin, end));
    }
    for (Value *p : parts)
      if (!p)
        return false;
    Value *v = createConcat(rw, op, op.name + "_static", parts, axis);
    if (!v || v->type != op.output(0)->type)
      return false;
    rw.replaceOp(op, {v});
    return true;
  }
};

class CanonicalizePass : public Pass {
public:
  explicit CanonicalizePass(PassOptions) {}
  std::string_view name() const override { return "canonicalize"; }
  void run(Model &model, PassResult &result) override {
    PatternList patterns;
    populateFoldPatterns(patterns);
    populateSliceOfConcatPatterns(patterns);
    patterns.push_back(createStaticSliceUpdatePattern());
    for (auto &fn : model.program->functions) {
      GreedyResult r = applyPatternsGreedily(*fn, patterns);
      if (r.rewrites || r.erased)
        result.changes.push_back("canonicalize: " + fn->name + ": " + std::to_string(r.rewrites) +
                                 " rewrites, " + std::to_string(r.erased) + " dead ops removed");
    }
  }
};

class DeadCodeEliminationPass : public Pass {
public:
  explicit DeadCodeEliminationPass(PassOptions) {}
  std::string_view name() const override { return "dce"; }
  void run(Model &model, PassResult &result) override {
    // With no patterns, the driver only erases dead ops, revisiting the
    // producers of each erased op's operands, so whole dead chains go.
    PatternList none;
    for (auto &fn : model.program->functions) {
      GreedyResult r = applyPatternsGreedily(*fn, none);
      if (r.erased)
        result.changes.push_back("dce: " + fn->name + ": removed " + std::to_string(r.erased) +
                                 " unused ops");
    }
  }
};

} // namespace

std::optional<StaticSlice> staticSliceBounds(const Operation &op,
                                             const std::vector<int64_t> &shape) {
  const Constant *b = op.constInput("begin");
  const Constant *e = op.constInput("end");
  if (!b || !e)
    return std::nullopt;
  auto begin = b->asInts();
  auto end = e->asInts();
  size_t rank = shape.size();
  if (begin.size() != rank || end.size() != rank)
    return std::nullopt;
  auto mask = [&](std::string_view param) -> std::optional<std::vector<int64_t>> {
    const OpInput *in = op.input(param);
    if (!in)
      return std::vector<int64_t>(rank, 0);
    const Constant *c = op.constInput(param);
    if (!c)
      return std::nullopt;
    auto v = c->asInts();
    if (v.size() != rank)
      return std::nullopt;
    return v;
  };
  auto stride = mask("stride");
  auto beginMask = mask("begin_mask");
  auto endMask = mask("end_mask");
  auto squeeze = mask("squeeze_mask");
  if (!stride || !beginMask || !endMask || !squeeze)
    return std::nullopt;
  StaticSlice s;
  for (size_t i = 0; i < rank; ++i) {
    if (op.input("stride") && (*stride)[i] != 1)
      return std::nullopt;
    if ((*squeeze)[i])
      return std::nullopt;
    int64_t n = shape[i];
    int64_t lo = (*beginMask)[i] ? 0 : begin[i];
    int64_t hi = (*endMask)[i] ? n : end[i];
    if (lo < 0)
      lo += n;
    if (hi < 0)
      hi += n;
    lo = std::clamp<int64_t>(lo, 0, n);
    hi = std::clamp<int64_t>(hi, 0, n);
    if (hi < lo)
      return std::nullopt;
    s.begin.push_back(lo);
    s.end.push_back(hi);
  }
  return s;
}

void populateFoldPatterns(PatternList &patterns) {
  patterns.push_back(std::make_unique<FoldShape>());
  patterns.push_back(std::make_unique<FoldIntBinary>(
      "add", [](int64_t a, int64_t b) -> std::optional<int64_t> { return a + b; }));
  patterns.push_back(std::make_unique<FoldIntBinary>(
      "sub", [](int64_t a, int64_t b) -> std::optional<int64_t> { return a - b; }));
  patterns.push_back(std::make_unique<FoldIntBinary>(
      "mul", [](int64_t a, int64_t b) -> std::optional<int64_t> { return a * b; }));
  patterns.push_back(std::make_unique<FoldIntBinary>("floor_div", foldFloorDiv));
  patterns.push_back(std::make_unique<FoldIntBinary>(
      "maximum", [](int64_t a, int64_t b) -> std::optional<int64_t> { return std::max(a, b); }));
  patterns.push_back(std::make_unique<FoldIntBinary>(
      "minimum", [](int64_t a, int64_t b) -> std::optional<int64_t> { return std::min(a, b); }));
  patterns.push_back(std::make_unique<FoldGather>());
  patterns.push_back(std::make_unique<FoldConcat>());
  patterns.push_back(std::make_unique<FoldSliceOfConst>());
  patterns.push_back(std::make_unique<ForwardIdentity>());
}

void populateSliceOfConcatPatterns(PatternList &patterns) {
  patterns.push_back(std::make_unique<SliceOfConcat>());
}

std::unique_ptr<RewritePattern>
createStaticSliceUpdatePattern(const std::unordered_set<const Operation *> *only) {
  return std::make_unique<StaticSliceUpdate>(only);
}

std::unique_ptr<Pass> createCanonicalizePass(const PassOptions &options) {
  return std::make_unique<CanonicalizePass>(options);
}

std::unique_ptr<Pass> createDeadCodeEliminationPass(const PassOptions &options) {
  return std::make_unique<DeadCodeEliminationPass>(options);
}

} // namespace anefit
