//===- ControlFlow.cpp - Output types of cond and while_loop --------------===//
//
// Ops with nested blocks: cond's two branches must agree; while_loop
// returns what its body block does.
//
//===----------------------------------------------------------------------===//
#include "ops/infer/InferUtil.h"

namespace anefit::infer {
namespace {

Result condImpl(InferCtx &c) {
  if (c.op.blocks.size() != 2)
    return c.fail("has " + std::to_string(c.op.blocks.size()) + " blocks, expected 2");
  const Block &t = *c.op.blocks[0], &f = *c.op.blocks[1];
  if (t.outputs.size() != f.outputs.size())
    return c.fail("the true block returns " + std::to_string(t.outputs.size()) +
                  " values, the false block " + std::to_string(f.outputs.size()));
  std::vector<Type> out;
  for (size_t i = 0; i < t.outputs.size(); ++i) {
    const Type &a = t.outputs[i]->type, &b = f.outputs[i]->type;
    if (!typesCompatible(a, b) && !typesCompatible(b, a))
      return c.fail("branch result " + std::to_string(i) + " is " + a.str() +
                    " in the true block but " + b.str() + " in the false block");
    out.push_back(a);
  }
  return out;
}

Result whileLoopImpl(InferCtx &c) {
  if (c.op.blocks.size() != 2)
    return c.fail("has " + std::to_string(c.op.blocks.size()) + " blocks, expected 2");
  std::vector<Type> out;
  for (const Value *v : c.op.blocks[1]->outputs)
    out.push_back(v->type);
  return out;
}

} // namespace
} // namespace anefit::infer

namespace anefit {

ANEFIT_RULE(Cond, condImpl(c))
ANEFIT_RULE(WhileLoop, whileLoopImpl(c))

} // namespace anefit
