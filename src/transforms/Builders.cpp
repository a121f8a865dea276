//===- Builders.cpp - Creating the few ops rewrites emit ------------------===//
//
// Typed construction of const, concat and slice_by_index (Builders.h).
//
//===----------------------------------------------------------------------===//
#include "transforms/Builders.h"

namespace anefit {

Value *createIntConst(PatternRewriter &rw, Operation &pos, std::string_view hint,
                      const std::vector<int64_t> &values, bool scalar) {
  std::vector<int32_t> v32(values.begin(), values.end());
  std::vector<int64_t> shape;
  if (!scalar)
    shape.push_back(static_cast<int64_t>(values.size()));
  return rw.createConst(pos, hint, Constant::fromI32(std::move(v32), shape));
}

Value *createConcat(PatternRewriter &rw, Operation &pos, std::string_view hint,
                    const std::vector<Value *> &values, int64_t axis) {
  if (values.empty())
    return nullptr;
  if (values.size() == 1)
    return values[0];
  const Type &first = values[0]->type;
  if (!first.isTensor() || !first.hasRank() || axis < 0 || axis >= first.rank())
    return nullptr;
  std::vector<Dim> shape = first.shape();
  int64_t total = 0;
  bool staticAxis = true;
  for (Value *v : values) {
    const Type &t = v->type;
    if (!t.isTensor() || t.dtype() != first.dtype() || t.rank() != first.rank())
      return nullptr;
    const Dim &d = t.shape()[axis];
    if (d.isStatic())
      total += d.size;
    else
      staticAxis = false;
  }
  shape[axis] = staticAxis ? Dim::of(total) : Dim::unknown();
  Value *axisV = createIntConst(rw, pos, std::string(hint) + "_axis", {axis}, /*scalar=*/true);
  Value *interleave =
      rw.createConst(pos, std::string(hint) + "_interleave", Constant::scalarBool(false));
  Operation *op = rw.create(pos, "concat", hint,
                            {{"values", values}, {"axis", {axisV}}, {"interleave", {interleave}}},
                            {Type::tensor(first.dtype(), shape)});
  return op->output(0);
}

Value *createSlice(PatternRewriter &rw, Operation &pos, std::string_view hint, Value *x,
                   const std::vector<int64_t> &begin, const std::vector<int64_t> &end) {
  auto shape = x->type.staticShape();
  if (!shape || shape->size() != begin.size() || begin.size() != end.size())
    return nullptr;
  std::vector<int64_t> out(shape->size());
  bool whole = true;
  for (size_t i = 0; i < out.size(); ++i) {
    if (begin[i] < 0 || end[i] > (*shape)[i] || begin[i] > end[i])
      return nullptr;
    out[i] = end[i] - begin[i];
    whole = whole && out[i] == (*shape)[i];
  }
  if (whole)
    return x;
  Value *b = createIntConst(rw, pos, std::string(hint) + "_begin", begin);
  Value *e = createIntConst(rw, pos, std::string(hint) + "_end", end);
  Operation *op = rw.create(pos, "slice_by_index", hint, {{"x", {x}}, {"begin", {b}}, {"end", {e}}},
                            {Type::tensor(x->type.dtype(), out)});
  return op->output(0);
}

} // namespace anefit
