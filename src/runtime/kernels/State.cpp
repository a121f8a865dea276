//===- State.cpp - Kernels of the Core ML state ops -----------------------===//
//
// read_state returns a state's current value; coreml_update_state and
// write_state replace it. The values live in the StateContext the caller
// passes to Interpreter::run, so they persist from one call to the next.
//
//===----------------------------------------------------------------------===//
#include "runtime/kernels/KernelUtil.h"

namespace anefit::runtime {

void readStateOp(KernelContext &ctx) { ctx.setOutput(0, ctx.stateOf("input")); }

void updateStateOp(KernelContext &ctx) {
  const Tensor &value = ctx.in("value");
  ctx.setState("state", value);
  if (ctx.numOutputs() > 0)
    ctx.setOutput(0, value);
}

void writeStateOp(KernelContext &ctx) {
  const Tensor &value = ctx.in("data");
  ctx.setState("input", value);
  if (ctx.numOutputs() > 0)
    ctx.setOutput(0, value);
}

} // namespace anefit::runtime
