//===- OpRegistry.cpp - Every MIL op, its parameters and opsets -----------===//
//
// Expands Ops.def twice: once into one parameter array per row, once into the
// row table that points at them and at the row's inference rule.
//
//===----------------------------------------------------------------------===//
#include "ops/OpRegistry.h"
#include "ops/TypeInference.h"

#include "ir/IR.h"

namespace anefit {

bool ParamSpec::allows(DType t) const {
  if (dtypes.empty())
    return true;
  std::string_view name = dtypeName(t);
  std::string_view rest = dtypes;
  while (!rest.empty()) {
    size_t bar = rest.find('|');
    if (rest.substr(0, bar) == name)
      return true;
    if (bar == std::string_view::npos)
      break;
    rest.remove_prefix(bar + 1);
  }
  return false;
}

const ParamSpec *OpDef::param(std::string_view paramName) const {
  for (const ParamSpec &p : params)
    if (p.name == paramName)
      return &p;
  return nullptr;
}

// The inference rules, defined in TypeInference.cpp.
#define OP_BEGIN(Name, Opset, Infer)                                                               \
  std::optional<std::vector<Type>> infer##Infer(const Operation &, const OpDef &, int,             \
                                                std::string &);
#define PARAM(...)
#define OP_END()
#include "ops/Ops.def"

namespace {

#define OP_BEGIN(Name, Opset, Infer) constexpr ParamSpec kParams_##Name##_##Opset[] = {
#define PARAM(Name, Kind, Optional, Const, Variadic, Domain, DTypes, Default)                      \
  {Name, Optional != 0, Const != 0, Variadic != 0, DTypes, Default, Domain, ParamKind::Kind},
#define OP_END()                                                                                   \
  }                                                                                                \
  ;
#include "ops/Ops.def"

const OpDef kOps[] = {
#define OP_BEGIN(Name, Opset, Infer)                                                               \
  {#Name, Opset, kParams_##Name##_##Opset,                                                         \
   std::string_view(#Infer) == "None" ? nullptr : &infer##Infer, #Infer},
#define PARAM(...)
#define OP_END()
#include "ops/Ops.def"
};

} // namespace

std::span<const OpDef> allOps() { return kOps; }

const OpDef *findOp(std::string_view type, int iosVersion) {
  // The table is small (~230 rows) and lookups happen once per op per pass,
  // so a linear scan keeps the table the single source of truth.
  const OpDef *best = nullptr;
  for (const OpDef &def : kOps) {
    if (def.name != type || def.opset > iosVersion)
      continue;
    if (!best || def.opset > best->opset)
      best = &def;
  }
  return best;
}

int iosVersionOfOpset(std::string_view opset) {
  int n = opsetNumber(opset);
  if (n < 5)
    return 0;
  // CoreML5 is iOS15; later opsets (CoreML9 = iOS26) add no ops beyond iOS18.
  return n >= 8 ? 18 : 10 + n;
}

} // namespace anefit
