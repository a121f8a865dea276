//===- State.cpp - Output types of the state ops --------------------------===//
//
// read_state, write_state and coreml_update_state: a state input's element
// type, and the update's type checked against it.
//
//===----------------------------------------------------------------------===//
#include "ops/infer/InferUtil.h"

namespace anefit::infer {
namespace {

const Type *stateParam(InferCtx &c, std::string_view p) {
  const Type *s = c.type(p);
  if (!s) {
    c.fail("missing input '" + std::string(p) + "'");
    return nullptr;
  }
  if (!s->isState()) {
    c.fail("input '" + std::string(p) + "' is a " + s->kindStr() + ", expected a state");
    return nullptr;
  }
  return s;
}

Result readStateImpl(InferCtx &c) {
  const Type *s = stateParam(c, "input");
  if (!s)
    return std::nullopt;
  return one(s->elementType());
}

Result writeStateImpl(InferCtx &c) {
  const Type *s = stateParam(c, "input");
  const Type *d = s ? tensorParam(c, "data", false) : nullptr;
  if (!d)
    return std::nullopt;
  if (!typesCompatible(s->elementType(), *d))
    return c.fail("data " + typeText(*d) + " does not match state " + typeText(s->elementType()));
  return std::vector<Type>{};
}

Result updateStateImpl(InferCtx &c) {
  const Type *s = stateParam(c, "state");
  const Type *v = s ? tensorParam(c, "value", false) : nullptr;
  if (!v)
    return std::nullopt;
  if (!typesCompatible(s->elementType(), *v))
    return c.fail("value " + typeText(*v) + " does not match state " + typeText(s->elementType()));
  return one(*v);
}

} // namespace
} // namespace anefit::infer

namespace anefit {

ANEFIT_RULE(ReadState, readStateImpl(c))
ANEFIT_RULE(WriteState, writeStateImpl(c))
ANEFIT_RULE(UpdateState, updateStateImpl(c))

} // namespace anefit
