//===- KvWriteStatic.cpp - Runtime-position cache writes become blends ----===//
//
// Exporters write a KV cache one decode step at a time: slice_update of the
// cache at the runtime position. The ANE compiler crashes on writes whose
// bounds come from run-time values (ANE-STATE-006). Here such a write
// becomes static: select(hit, update, cache), where `hit` is a one-hot mask
// along the written axis, made by comparing the position with a constant
// table of row numbers in fp16. fp16 holds integers exactly only up to 2048,
// so a longer axis compares a split position (hi = p / 2048, lo = p - 2048 hi)
// with split tables instead. The mask has the length of the axis and
// broadcasts over the other axes, so the cost is one pass over the cache per
// written row. The pass kv-write-static and state-to-io's masked-updates both
// use this one rewrite.
//
//===----------------------------------------------------------------------===//
#include "transforms/Builders.h"
#include "transforms/PassImpl.h"
#include "transforms/Patterns.h"

#include "support/DType.h"
#include "support/IntMath.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace anefit {

namespace {

/// Largest integer magnitude fp16 holds exactly together with all smaller
/// ones (2^11): tables and positions within it compare exactly in fp16.
constexpr int64_t kExactF16 = 2048;
/// Base of the split position: lo in [0, kSplitBase) and hi = p / kSplitBase
/// both stay exact in fp16 for axes up to kExactF16 * kSplitBase rows.
constexpr int64_t kSplitBase = 2048;
/// Bound vectors are a few elements; never trace through bigger constants.
constexpr uint64_t kMaxBoundElements = 64;
constexpr int kMaxTraceDepth = 16;

int64_t elementCount(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// Element `index` of an integer vector as exporters build slice bounds: a
/// constant, or element `index` of the run-time value `value`.
struct IntElement {
  std::optional<int64_t> constant;
  Value *value = nullptr;
  int64_t index = 0;
};

const Constant *smallConst(const Constant *c) {
  if (!c || !c->isTensorLike() || c->numElements() > kMaxBoundElements)
    return nullptr;
  DType t = c->type.dtype();
  return isInteger(t) || t == DType::Bool ? c : nullptr;
}

const Constant *constValue(const Value *v) {
  if (!v || !v->definingOp || v->definingOp->type != "const")
    return nullptr;
  return smallConst(v->definingOp->attribute("val"));
}

/// Constant bounds of a slice_by_index of a rank-1 value (masks, squeeze and
/// any stride): the source element of result element `index`.
std::optional<int64_t> sliceSource(const Operation &op, int64_t length, int64_t index) {
  const Constant *b = smallConst(op.constInput("begin"));
  if (!b || b->numElements() != 1)
    return std::nullopt;
  auto flag = [&](std::string_view param) -> std::optional<int64_t> {
    if (!op.input(param))
      return 0;
    const Constant *c = smallConst(op.constInput(param));
    if (!c || c->numElements() != 1)
      return std::nullopt;
    return c->elementAsInt(0);
  };
  auto stride = op.input("stride") ? flag("stride") : std::optional<int64_t>(1);
  auto beginMask = flag("begin_mask");
  auto squeeze = flag("squeeze_mask");
  if (!stride || !beginMask || !squeeze || *stride == 0)
    return std::nullopt;
  int64_t begin = b->elementAsInt(0);
  if (*beginMask)
    begin = *stride > 0 ? 0 : length - 1;
  else if (begin < 0)
    begin += length;
  if (*squeeze && index != 0)
    return std::nullopt;
  int64_t i = begin + index * *stride;
  if (i < 0 || i >= length)
    return std::nullopt;
  return i;
}

/// Traces element `index` of integer value `v` through const, concat,
/// expand_dims / squeeze / reshape / identity, gather and slice_by_index
/// with constant indices. Casts end the trace: the run-time element is the
/// value the bound vector is made of.
std::optional<IntElement> traceElement(Value *v, int64_t index, int depth = 0) {
  if (!v || !v->type.isTensor() || !isInteger(v->type.dtype()))
    return std::nullopt;
  auto shape = v->type.staticShape();
  if (!shape || index < 0 || index >= elementCount(*shape))
    return std::nullopt;
  IntElement leaf{std::nullopt, v, index};
  Operation *op = v->definingOp;
  if (!op || depth > kMaxTraceDepth)
    return leaf;
  if (op->type == "const") {
    if (const Constant *c = constValue(v))
      return IntElement{c->elementAsInt(index), nullptr, 0};
    return std::nullopt;
  }
  if (op->type == "concat" && shape->size() == 1) {
    const Constant *axis = smallConst(op->constInput("axis"));
    const Constant *inter = smallConst(op->constInput("interleave"));
    const OpInput *values = op->input("values");
    if (!axis || (axis->elementAsInt(0) != 0 && axis->elementAsInt(0) != -1) ||
        (inter && inter->elementAsInt(0)) || !values)
      return leaf;
    int64_t offset = 0;
    for (const Binding &b : values->bindings) {
      const Constant *c = b.isValue() ? constValue(b.value) : smallConst(b.constant.get());
      int64_t count;
      if (c) {
        count = static_cast<int64_t>(c->numElements());
      } else if (b.isValue()) {
        auto part = b.value->type.staticShape();
        if (!part || part->size() > 1)
          return leaf;
        count = elementCount(*part);
      } else {
        return leaf;
      }
      if (index < offset + count)
        return c ? IntElement{c->elementAsInt(index - offset), nullptr, 0}
                 : traceElement(b.value, index - offset, depth + 1);
      offset += count;
    }
    return leaf;
  }
  if (op->type == "expand_dims" || op->type == "squeeze" || op->type == "reshape" ||
      op->type == "identity") {
    // Row-major element order is the same on both sides of these ops.
    Value *x = op->inputValue("x");
    auto xs = x ? x->type.staticShape() : std::nullopt;
    if (xs && elementCount(*xs) == elementCount(*shape) && x->type.dtype() == v->type.dtype())
      return traceElement(x, index, depth + 1);
    return leaf;
  }
  if (op->type == "gather" && shape->size() <= 1) {
    Value *x = op->inputValue("x");
    const Constant *idx = smallConst(op->constInput("indices"));
    auto xs = x ? x->type.staticShape() : std::nullopt;
    if (!idx || !xs || xs->size() != 1 || x->type.dtype() != v->type.dtype())
      return leaf;
    if (op->input("axis")) {
      const Constant *axis = smallConst(op->constInput("axis"));
      if (!axis || (axis->elementAsInt(0) != 0 && axis->elementAsInt(0) != -1))
        return leaf;
    }
    if (op->input("batch_dims")) {
      const Constant *bd = smallConst(op->constInput("batch_dims"));
      if (!bd || bd->elementAsInt(0) != 0)
        return leaf;
    }
    int64_t i = idx->elementAsInt(static_cast<uint64_t>(index));
    if (i < 0)
      i += (*xs)[0];
    if (i < 0 || i >= (*xs)[0])
      return leaf;
    return traceElement(x, i, depth + 1);
  }
  if (op->type == "slice_by_index" && shape->size() <= 1) {
    Value *x = op->inputValue("x");
    auto xs = x ? x->type.staticShape() : std::nullopt;
    if (!xs || xs->size() != 1 || x->type.dtype() != v->type.dtype())
      return leaf;
    if (auto i = sliceSource(*op, (*xs)[0], index))
      return traceElement(x, *i, depth + 1);
    return leaf;
  }
  return leaf;
}

/// True if every value of `from` is a value of `to` (a cast between them
/// changes no number).
bool castIsExact(DType from, DType to) {
  if (!isInteger(from) || !isInteger(to))
    return false;
  int fb = dtypeBits(from), tb = dtypeBits(to);
  bool fs = dtypeKind(from) == DTypeKind::Signed, ts = dtypeKind(to) == DTypeKind::Signed;
  if (fs == ts)
    return tb >= fb;
  return !fs && ts && tb > fb; // unsigned into a wider signed type
}

/// The earliest value holding the same single number as `v`, walking back
/// through reshapes and exact integer casts. Exporters narrow the position
/// to (u)int16 for the ANE before widening it back to int32 for the bounds;
/// the narrow value converts to fp16 without an int32 op.
Value *exactSource(Value *v) {
  for (int depth = 0; v && v->definingOp && depth < kMaxTraceDepth; ++depth) {
    Operation *op = v->definingOp;
    Value *x = op->inputValue("x");
    if (!x || !x->type.isTensor())
      break;
    auto xs = x->type.staticShape();
    if (!xs || elementCount(*xs) != 1)
      break;
    bool view = op->type == "squeeze" || op->type == "expand_dims" || op->type == "reshape" ||
                op->type == "identity";
    if (view && x->type.dtype() == v->type.dtype()) {
      v = x;
    } else if (op->type == "cast" && castIsExact(x->type.dtype(), v->type.dtype())) {
      v = x;
    } else {
      break;
    }
  }
  return v;
}

/// A slice_update that writes rows [p, p + rows) of `axis` at a run-time
/// position p and a constant sub-range (often all) of every other axis; or,
/// with axis -1, constant starts and a run-time end (a static write).
struct RuntimeWrite {
  int64_t axis = -1;
  IntElement position;
  int64_t rows = 0;
  std::vector<int64_t> regionBegin, regionEnd; ///< whole along `axis`
  std::vector<int64_t> squeezed;               ///< axes the update lacks
  bool matmul = false; ///< rows placed by a one-hot matmul, not a chain of selects
};

/// Matches `op`; on failure sets `why` when the op does write at a run-time
/// position (so callers can say why it was left alone).
std::optional<RuntimeWrite> matchRuntimeWrite(const Operation &op, int64_t chainRows,
                                              std::string &why) {
  why.clear();
  if (op.type != "slice_update" || op.outputs.size() != 1)
    return std::nullopt;
  Value *x = op.inputValue("x");
  Value *update = op.inputValue("update");
  Value *begin = op.inputValue("begin");
  const Constant *beginConst = smallConst(op.constInput("begin"));
  if (!x || !update || (!begin && !beginConst) || (beginConst && op.constInput("end")))
    return std::nullopt; // constant bounds: canonicalize's static rewrite
  auto shape = x->type.staticShape();
  auto ushape = update->type.staticShape();
  int64_t rank = shape ? static_cast<int64_t>(shape->size()) : 0;
  int64_t beginLength = -1;
  if (beginConst) {
    beginLength = static_cast<int64_t>(beginConst->numElements());
  } else if (auto bshape = begin->type.staticShape(); bshape && bshape->size() == 1) {
    beginLength = (*bshape)[0];
  }
  if (!shape || !ushape || beginLength != rank) {
    why = "the cache, update or begin has no static shape";
    return std::nullopt;
  }
  DType t = x->type.dtype();
  if (t != DType::F16 && t != DType::F32 && t != DType::I32 && t != DType::Bool) {
    why = "select takes fp16, fp32, int32 or bool, not " + std::string(dtypeName(t));
    return std::nullopt;
  }
  auto flags = [&](std::string_view param) -> std::optional<std::vector<int64_t>> {
    if (!op.input(param))
      return std::vector<int64_t>(rank, 0);
    const Constant *c = smallConst(op.constInput(param));
    if (!c || static_cast<int64_t>(c->numElements()) != rank)
      return std::nullopt;
    return c->asInts();
  };
  auto beginMask = flags("begin_mask");
  auto squeeze = flags("squeeze_mask");
  if (!beginMask || !squeeze) {
    why = "begin_mask or squeeze_mask is not constant";
    return std::nullopt;
  }
  if (op.input("stride")) {
    auto stride = flags("stride");
    if (!stride || *stride != std::vector<int64_t>(rank, 1)) {
      why = "the stride is not a constant 1";
      return std::nullopt;
    }
  }

  RuntimeWrite w;
  std::vector<std::optional<int64_t>> starts(rank);
  for (int64_t d = 0; d < rank; ++d) {
    if ((*beginMask)[d]) {
      starts[d] = 0;
      continue;
    }
    auto e = beginConst ? std::optional<IntElement>(IntElement{beginConst->elementAsInt(d)})
                        : traceElement(begin, d);
    if (!e) {
      why = "begin element " + std::to_string(d) + " cannot be traced";
      return std::nullopt;
    }
    if (e->constant) {
      starts[d] = e->constant;
    } else if (w.axis >= 0) {
      why = "the position is run-time along two axes";
      return std::nullopt;
    } else {
      w.axis = d;
      w.position = *e;
    }
  }
  // Every start constant: with constant ends canonicalize makes the write
  // static; a run-time end (slice_scatter's minimum(end, n)) can only be
  // start + rows in a valid write, so it is static too.
  if (w.axis < 0 && op.constInput("end"))
    return std::nullopt;

  // The update lacks the squeezed axes; the rest match its dims in order.
  std::vector<int64_t> extent(rank);
  size_t k = 0;
  for (int64_t d = 0; d < rank; ++d) {
    if ((*squeeze)[d]) {
      extent[d] = 1;
      w.squeezed.push_back(d);
    } else if (k < ushape->size()) {
      extent[d] = (*ushape)[k++];
    } else {
      k = ushape->size() + 1;
    }
  }
  if (k != ushape->size()) {
    why = "the update shape does not fit the slice";
    return std::nullopt;
  }
  w.regionBegin.assign(rank, 0);
  w.regionEnd = *shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (d == w.axis)
      continue;
    int64_t b = *starts[d];
    if (b < 0)
      b += (*shape)[d];
    if (b < 0 || b + extent[d] > (*shape)[d] || extent[d] < 1) {
      why = "the constant bounds of axis " + std::to_string(d) + " leave the cache";
      return std::nullopt;
    }
    w.regionBegin[d] = b;
    w.regionEnd[d] = b + extent[d];
  }
  if (w.axis < 0)
    return w;
  w.rows = extent[w.axis];
  if (w.rows < 1 || w.rows > (*shape)[w.axis]) {
    why = "the update has " + std::to_string(w.rows) + " rows along axis " + std::to_string(w.axis);
    return std::nullopt;
  }
  // More rows than a chain of selects should take go through a one-hot
  // matmul, which places rows along one of the last two axes of a float
  // cache.
  w.matmul = w.rows > chainRows;
  if (w.matmul && (w.axis < rank - 2 || (t != DType::F16 && t != DType::F32))) {
    why = "the update writes " + std::to_string(w.rows) +
          " rows (more than chain-rows=" + std::to_string(chainRows) + ") along axis " +
          std::to_string(w.axis) +
          ", which the one-hot matmul cannot place (it needs one of the last two axes of an "
          "fp16 or fp32 cache)";
    return std::nullopt;
  }
  return w;
}

/// The rewrite of one function: matched writes in block order, with the
/// position conversions and masks they share built once.
class RuntimeWriteRewriter {
public:
  RuntimeWriteRewriter(Function &fn, int64_t chainRows)
      : fn_(fn), uses_(fn), rw_(fn, uses_), chainRows_(chainRows) {}

  RuntimeWriteResult run(const std::unordered_set<const Operation *> *only);

private:
  /// One run-time position and the forms it was converted to.
  struct Position {
    Value *scalar = nullptr; ///< a one-element int value holding it
    Value *source = nullptr; ///< exactSource(scalar)
    bool mayBeNegative = true;
    bool small = false; ///< |p| <= 255: exact in fp16 whatever the axis
    Value *f16 = nullptr, *hi16 = nullptr, *lo16 = nullptr;
  };

  Function &fn_;
  UseMap uses_;
  PatternRewriter rw_;
  int64_t chainRows_;
  RuntimeWriteResult result_;
  std::map<std::pair<Value *, int64_t>, Position> positions_;
  std::map<std::tuple<Value *, int64_t, int64_t, int64_t, int64_t, int64_t>, Value *> masks_;
  std::map<std::tuple<Value *, int64_t, int64_t, int64_t>, Value *> placements_;

  Position &position(const IntElement &e);
  /// Bool tensor of `shape`: element k holds p == starts[k] for a
  /// non-negative position, p == starts[k] - n for a negative one (counted
  /// from the end); nullopt entries never hold. Exact for every valid p.
  /// `tag` tells the tables and intermediate ops apart; the result is named
  /// `name`.
  Value *compare(Position &p, Operation &at, int64_t n, const std::vector<int64_t> &shape,
                 const std::vector<std::optional<int64_t>> &starts, const std::string &tag,
                 const std::string &name);
  /// The one-hot mask of update row `row` along `axis` of a rank-`rank`
  /// cache of n rows: cache row i takes it when i - row is the position.
  Value *mask(const IntElement &e, Operation &at, int64_t n, int64_t rank, int64_t axis,
              int64_t row);
  /// The (n, rows) one-hot matrix: element (i, j) holds when update row j
  /// lands on cache row i.
  Value *placement(const IntElement &e, Operation &at, int64_t n, int64_t rows);
  Value *table(Operation &at, std::string_view hint, const std::vector<int64_t> &shape,
               const std::vector<int64_t> &values);
  /// The op before which ops computing on `v` go so that they follow v's
  /// definition (integer position math stays beside the model's own).
  Operation &after(Value *v);
  Value *cast(Operation &at, Value *x, DType to, std::string_view hint);
  Value *binary(Operation &at, std::string type, Value *x, Value *y, std::string_view hint);
  Value *select(Operation &at, Value *cond, Value *a, Value *b, std::string_view hint);
  void rewrite(Operation &op, const RuntimeWrite &w);
};

Operation &RuntimeWriteRewriter::after(Value *v) {
  Block &body = *fn_.body;
  if (v->definingOp && v->definingOp->parent == &body) {
    int64_t i = body.indexOf(v->definingOp);
    // The op defining a position always has a user after it.
    return *body.ops.at(static_cast<size_t>(i + 1));
  }
  return *body.ops.front();
}

Value *RuntimeWriteRewriter::cast(Operation &at, Value *x, DType to, std::string_view hint) {
  Value *dtype = rw_.createConst(at, std::string(hint) + "_dtype",
                                 Constant::scalarString(std::string(dtypeName(to))));
  Type t = Type::tensor(to, x->type.shape());
  if (to == DType::I32 || x->type.dtype() == DType::I32)
    ++result_.cpuOps; // casts to or from int32 run off the ANE (ANE-DTYPE-002)
  return rw_.create(at, "cast", hint, {{"x", {x}}, {"dtype", {dtype}}}, {t})->output(0);
}

Value *RuntimeWriteRewriter::binary(Operation &at, std::string type, Value *x, Value *y,
                                    std::string_view hint) {
  if (x->type.dtype() == DType::I32)
    ++result_.cpuOps;
  Type t = x->type.rank() >= y->type.rank() ? x->type : y->type;
  return rw_.create(at, std::move(type), hint, {{"x", {x}}, {"y", {y}}}, {t})->output(0);
}

Value *RuntimeWriteRewriter::select(Operation &at, Value *cond, Value *a, Value *b,
                                    std::string_view hint) {
  // Operands broadcast; the widest one gives the result shape.
  Type t = b->type;
  if (a->type.rank() > t.rank())
    t = a->type;
  return rw_.create(at, "select", hint, {{"cond", {cond}}, {"a", {a}}, {"b", {b}}}, {t})->output(0);
}

Value *RuntimeWriteRewriter::table(Operation &at, std::string_view hint,
                                   const std::vector<int64_t> &shape,
                                   const std::vector<int64_t> &values) {
  std::vector<uint16_t> bits;
  bits.reserve(values.size());
  for (int64_t v : values)
    bits.push_back(floatToHalf(static_cast<float>(v)));
  return rw_.createConst(at, hint, Constant::fromF16Bits(std::move(bits), shape));
}

RuntimeWriteRewriter::Position &RuntimeWriteRewriter::position(const IntElement &e) {
  auto key = std::make_pair(e.value, e.index);
  auto it = positions_.find(key);
  if (it != positions_.end())
    return it->second;
  Position p;
  p.scalar = e.value;
  if (elementCount(*e.value->type.staticShape()) != 1) {
    // Element `index` of a position vector: slice it out next to it.
    Operation &pos = after(e.value);
    Value *b = createIntConst(rw_, pos, e.value->name + "_at_begin", {e.index});
    Value *end = createIntConst(rw_, pos, e.value->name + "_at_end", {e.index + 1});
    p.scalar = rw_.create(pos, "slice_by_index", e.value->name + "_at",
                          {{"x", {e.value}}, {"begin", {b}}, {"end", {end}}},
                          {Type::tensor(e.value->type.dtype(), std::vector<int64_t>{1})})
                   ->output(0);
    if (e.value->type.dtype() == DType::I32)
      ++result_.cpuOps;
  }
  p.source = exactSource(p.scalar);
  DType st = p.source->type.dtype();
  p.mayBeNegative = dtypeKind(st) == DTypeKind::Signed;
  p.small = dtypeBits(st) <= 8;
  return positions_.emplace(key, p).first->second;
}

Value *RuntimeWriteRewriter::compare(Position &p, Operation &at, int64_t n,
                                     const std::vector<int64_t> &shape,
                                     const std::vector<std::optional<int64_t>> &starts,
                                     const std::string &tag, const std::string &name) {
  std::string base = p.scalar->name;
  Type maskType = Type::tensor(DType::Bool, shape);
  bool split = n > kExactF16 && !p.small;
  if (!split && !p.f16) {
    // A narrow source converts on the ANE, next to its first use; an int32
    // one is a CPU op and stays beside the position's definition.
    Operation &pos = p.source->type.dtype() == DType::I32 ? after(p.source) : at;
    p.f16 = cast(pos, p.source, DType::F16, base + "_fp16");
  }
  if (split && !p.hi16) {
    // hi = floor(p / B), lo = p - B * hi: scalar int32 math, after which both
    // halves are exact in fp16 (|hi| <= n / B + 1, 0 <= lo < B). It starts
    // from the earliest exact value, next to the model's own position math
    // (ExecuTorch narrows the input to uint16 for its gathers first thing),
    // so it joins that CPU segment and the late re-widening can go.
    Value *p32 = p.source;
    Operation &pos = after(p32);
    if (p32->type.dtype() != DType::I32)
      p32 = cast(pos, p32, DType::I32, base + "_int32");
    Value *b = createIntConst(rw_, pos, base + "_split_base", {kSplitBase}, /*scalar=*/true);
    Value *hi = binary(pos, "floor_div", p32, b, base + "_hi");
    Value *lo =
        binary(pos, "sub", p32, binary(pos, "mul", hi, b, base + "_hi_scaled"), base + "_lo");
    p.hi16 = cast(pos, hi, DType::F16, base + "_hi_fp16");
    p.lo16 = cast(pos, lo, DType::F16, base + "_lo_fp16");
  }
  if (split)
    ++result_.splitMasks;

  // A never-matching entry holds n (Form A: no valid position is n) or a hi
  // half past the last one.
  auto oneSide = [&](bool fromEnd, const std::string &opName) -> Value * {
    std::string tableTag = tag + (fromEnd ? "_from_end" : "");
    std::vector<int64_t> t(starts.size());
    for (size_t k = 0; k < t.size(); ++k)
      t[k] = starts[k] ? *starts[k] - (fromEnd ? n : 0) : n;
    auto equal = [&](const std::vector<int64_t> &values, Value *pos, const std::string &suffix,
                     const std::string &eqName) {
      Value *rows = table(at, base + "_rows" + suffix + tableTag, shape, values);
      return rw_.create(at, "equal", eqName, {{"x", {rows}}, {"y", {pos}}}, {maskType})->output(0);
    };
    if (!split)
      return equal(t, p.f16, "", opName);
    int64_t hiSentinel = floorDiv(n - 1, kSplitBase) + 1;
    std::vector<int64_t> his(t.size()), los(t.size());
    for (size_t k = 0; k < t.size(); ++k) {
      his[k] = starts[k] ? floorDiv(t[k], kSplitBase) : hiSentinel;
      los[k] = starts[k] ? t[k] - kSplitBase * his[k] : 0;
    }
    Value *hiHit = equal(his, p.hi16, "_hi", opName + "_hi");
    Value *loHit = equal(los, p.lo16, "_lo", opName + "_lo");
    // hi and lo both equal, without logical_and (which has no ANE path).
    return select(at, hiHit, loHit, hiHit, opName);
  };
  if (!p.mayBeNegative)
    return oneSide(false, name);
  Value *fromStart = oneSide(false, base + "_at_row" + tag);
  Value *fromEnd = oneSide(true, base + "_at_row_from_end" + tag);
  // Either one, without logical_or.
  return select(at, fromStart, fromStart, fromEnd, name);
}

Value *RuntimeWriteRewriter::mask(const IntElement &e, Operation &at, int64_t n, int64_t rank,
                                  int64_t axis, int64_t row) {
  auto key = std::make_tuple(e.value, e.index, n, rank, axis, row);
  if (auto it = masks_.find(key); it != masks_.end())
    return it->second;
  Position &p = position(e);
  std::vector<int64_t> shape(rank, 1);
  shape[axis] = n;
  // Rows i < row cannot take update row `row` (no valid position).
  std::vector<std::optional<int64_t>> starts(n);
  for (int64_t i = row; i < n; ++i)
    starts[i] = i - row;
  std::string tag = row ? "_" + std::to_string(row) : "";
  Value *hit = compare(p, at, n, shape, starts, tag, p.scalar->name + "_hit" + tag);
  masks_[key] = hit;
  return hit;
}

Value *RuntimeWriteRewriter::placement(const IntElement &e, Operation &at, int64_t n,
                                       int64_t rows) {
  auto key = std::make_tuple(e.value, e.index, n, rows);
  if (auto it = placements_.find(key); it != placements_.end())
    return it->second;
  Position &p = position(e);
  std::vector<std::optional<int64_t>> starts(n * rows);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i && j < rows; ++j)
      starts[i * rows + j] = i - j;
  Value *hit = compare(p, at, n, {n, rows}, starts, "_places", p.scalar->name + "_places");
  placements_[key] = hit;
  return hit;
}

void RuntimeWriteRewriter::rewrite(Operation &op, const RuntimeWrite &w) {
  Value *x = op.inputValue("x");
  Value *update = op.inputValue("update");
  std::vector<int64_t> shape = *x->type.staticShape();
  int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<int64_t> ushape(rank);
  for (int64_t d = 0; d < rank; ++d)
    ushape[d] = d == w.axis ? w.rows : w.regionEnd[d] - w.regionBegin[d];
  if (!w.squeezed.empty()) {
    Value *axes = createIntConst(rw_, op, op.name + "_unsqueeze_axes", w.squeezed);
    update =
        rw_.create(op, "expand_dims", op.name + "_unsqueeze", {{"x", {update}}, {"axes", {axes}}},
                   {Type::tensor(update->type.dtype(), ushape)})
            ->output(0);
  }
  Value *current = update;
  bool whole = false;
  if (w.axis >= 0) {
    whole = w.regionBegin == std::vector<int64_t>(rank, 0) && w.regionEnd == shape;
    current = whole ? x : createSlice(rw_, op, op.name + "_region", x, w.regionBegin, w.regionEnd);
    if (w.matmul) {
      // placed = M @ rows (or rows @ M^T along the last axis): update row j
      // lands on cache row p + j, every other cache row gets 0; rows any
      // update row landed on take it, the others keep the cache. Exact for
      // finite updates (each placed value is 1 * u plus zeros).
      DType dt = x->type.dtype();
      Value *m = placement(w.position, op, shape[w.axis], w.rows);
      Value *mf = cast(op, m, dt, op.name + "_places");
      bool last = w.axis == rank - 1;
      Value *tx = rw_.createConst(op, op.name + "_transpose_x", Constant::scalarBool(false));
      Value *ty = rw_.createConst(op, op.name + "_transpose_y", Constant::scalarBool(last));
      std::vector<int64_t> placedShape = ushape;
      placedShape[w.axis] = shape[w.axis];
      Value *placed = rw_.create(op, "matmul", op.name + "_placed",
                                 {{"x", {last ? update : mf}},
                                  {"y", {last ? mf : update}},
                                  {"transpose_x", {tx}},
                                  {"transpose_y", {ty}}},
                                 {Type::tensor(dt, placedShape)})
                          ->output(0);
      Value *axes = createIntConst(rw_, op, op.name + "_any_axes", {-1});
      Value *keep = rw_.createConst(op, op.name + "_any_keep_dims", Constant::scalarBool(true));
      int64_t n = shape[w.axis];
      Value *any = rw_.create(op, "reduce_max", op.name + "_any",
                              {{"x", {mf}}, {"axes", {axes}}, {"keep_dims", {keep}}},
                              {Type::tensor(dt, std::vector<int64_t>{n, 1})})
                       ->output(0);
      std::vector<int64_t> hitShape(rank, 1);
      hitShape[w.axis] = n;
      Value *hitShapeV = createIntConst(rw_, op, op.name + "_hit_shape", hitShape);
      Value *anyRows =
          rw_.create(op, "reshape", op.name + "_any_rows", {{"x", {any}}, {"shape", {hitShapeV}}},
                     {Type::tensor(dt, hitShape)})
              ->output(0);
      Value *hit = cast(op, anyRows, DType::Bool, op.name + "_hit");
      current = select(op, hit, placed, current, op.name + "_blend");
    }
    for (int64_t j = 0; !w.matmul && j < w.rows; ++j) {
      Value *row = update;
      if (w.rows > 1) {
        std::vector<int64_t> b(rank, 0), e = ushape;
        b[w.axis] = j;
        e[w.axis] = j + 1;
        row = createSlice(rw_, op, op.name + "_row" + std::to_string(j), update, b, e);
      }
      Value *hit = mask(w.position, op, shape[w.axis], rank, w.axis, j);
      current = select(op, hit, row, current, op.name + "_blend");
    }
  }
  if (!whole) {
    // Write the blended region (or the update of a static write) back with
    // constant bounds; the static slice_update rewrite turns that into
    // concat + slice when it can.
    Value *b = createIntConst(rw_, op, op.name + "_region_begin", w.regionBegin);
    Value *e = createIntConst(rw_, op, op.name + "_region_end", w.regionEnd);
    Operation *write =
        rw_.create(op, "slice_update", op.name + "_write",
                   {{"x", {x}}, {"update", {current}}, {"begin", {b}}, {"end", {e}}}, {x->type});
    current = write->output(0);
    result_.staticWrites.insert(write);
  }
  std::vector<Value *> operands = op.operandValues();
  rw_.replaceOp(op, {current});
  eraseDeadProducers(rw_, std::move(operands));
  ++result_.rewritten;
}

RuntimeWriteResult RuntimeWriteRewriter::run(const std::unordered_set<const Operation *> *only) {
  std::vector<Operation *> writes;
  for (auto &op : fn_.body->ops)
    if (op->type == "slice_update" && (!only || only->count(op.get())))
      writes.push_back(op.get());
  // In block order, so a mask built before the first write that needs it
  // is defined before every later one.
  for (Operation *op : writes) {
    if (rw_.isErased(op))
      continue;
    std::string why;
    auto w = matchRuntimeWrite(*op, chainRows_, why);
    if (w)
      rewrite(*op, *w);
    else if (!why.empty())
      result_.skipped.push_back({op->name, why});
  }
  return result_;
}

class KvWriteStaticPass : public Pass {
public:
  explicit KvWriteStaticPass(PassOptions options) : options_(std::move(options)) {}
  std::string_view name() const override { return "kv-write-static"; }
  void run(Model &model, PassResult &result) override {
    int64_t chainRows = options_.integer("chain-rows");
    for (auto &fn : model.program->functions) {
      RuntimeWriteResult r = rewriteRuntimeSliceUpdates(*fn, nullptr, chainRows);
      if (r.rewritten)
        result.changes.push_back(describeRuntimeWrites("kv-write-static: " + fn->name, r));
      for (const auto &[op, why] : r.skipped)
        result.diagnostics.push_back({Diagnostic::Severity::Warning, fn->name, op,
                                      "slice_update at a run-time position left as is: " + why});
    }
  }

private:
  PassOptions options_;
};

} // namespace

RuntimeWriteResult rewriteRuntimeSliceUpdates(Function &fn,
                                              const std::unordered_set<const Operation *> *only,
                                              int64_t chainRows) {
  RuntimeWriteResult r = RuntimeWriteRewriter(fn, chainRows).run(only);
  if (!r.staticWrites.empty()) {
    PatternList patterns;
    patterns.push_back(createStaticSliceUpdatePattern(&r.staticWrites));
    applyPatternsGreedily(fn, patterns);
    r.staticWrites.clear();
  }
  return r;
}

std::string describeRuntimeWrites(const std::string &prefix, const RuntimeWriteResult &r) {
  std::string s = prefix + ": " + std::to_string(r.rewritten) + " slice_update" +
                  (r.rewritten == 1 ? "" : "s") +
                  " at a run-time position -> one-hot select blend" + (r.rewritten == 1 ? "" : "s");
  if (r.splitMasks)
    s += "; positions past 2048 compared as hi/lo halves";
  if (r.cpuOps)
    s += "; " + std::to_string(r.cpuOps) + " scalar int32 op" + (r.cpuOps == 1 ? "" : "s") +
         " on the position run on the CPU (ANE-DTYPE-002)";
  return s;
}

std::unique_ptr<Pass> createKvWriteStaticPass(const PassOptions &options) {
  return std::make_unique<KvWriteStaticPass>(options);
}

} // namespace anefit
