//===- Recurrent.cpp - Output types of gru, rnn and lstm ------------------===//
//
// The recurrent layers: sequence and final states from x and weight_hh.
//
//===----------------------------------------------------------------------===//
#include "ops/infer/InferUtil.h"

namespace anefit::infer {
namespace {

/// gru, rnn, lstm: x is [seq, batch, input]; the hidden size is weight_hh's
/// last dim (it multiplies the hidden state in every variant).
Result recurrentImpl(InferCtx &c) {
  const Type *x = tensorParam(c, "x");
  const Type *whh = x ? tensorParam(c, "weight_hh") : nullptr;
  if (!whh)
    return std::nullopt;
  if (x->rank() != 3)
    return c.fail("x rank " + std::to_string(x->rank()) + " is not 3 (seq, batch, input)");
  if (whh->rank() != 2)
    return c.fail("weight_hh rank " + std::to_string(whh->rank()) + " is not 2");
  auto direction = c.stringParam("direction");
  auto outputSequence = c.boolParam("output_sequence");
  if (!direction || !outputSequence)
    return c.fail("'direction' and 'output_sequence' must be constants");
  int64_t factor = *direction == "bidirectional" ? 2 : 1;
  if (factor == 2 && c.op.type != "lstm")
    return c.fail("direction 'bidirectional' is only supported by lstm");
  auto hidden = dimTimes(whh->shape()[1], factor);
  if (!hidden)
    return c.fail("hidden size overflows");
  const Dim &seq = x->shape()[0], &batch = x->shape()[1];
  std::vector<Type> outs{
      Type::tensor(x->dtype(), {*outputSequence ? seq : Dim::of(1), batch, *hidden}),
      Type::tensor(x->dtype(), {batch, *hidden})};
  if (c.op.type == "lstm")
    outs.push_back(Type::tensor(x->dtype(), {batch, *hidden}));
  return outs;
}

} // namespace
} // namespace anefit::infer

namespace anefit {

ANEFIT_RULE(Recurrent, recurrentImpl(c))

} // namespace anefit
