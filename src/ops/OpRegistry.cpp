//===- OpRegistry.cpp - Every MIL op, its parameters and opsets -----------===//
//
// Expands Ops.def twice: once into one parameter array per row, once into the
// row table that points at them and at the row's inference rule.
//
//===----------------------------------------------------------------------===//
#include "ops/OpRegistry.h"
#include "ops/TypeInference.h"

#include "ir/IR.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>
#include <unordered_map>

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

std::string_view OpDef::paramDefault(std::string_view paramName) const {
  if (const ParamSpec *p = param(paramName))
    return p->defaultValue;
  const OpDef *newest = findAnyOp(name);
  const ParamSpec *p = newest ? newest->param(paramName) : nullptr;
  return p ? p->defaultValue : std::string_view();
}

std::optional<double> defaultAsNumber(std::string_view text) {
  if (text == "True")
    return 1.0;
  if (text == "False")
    return 0.0;
  std::string s(text);
  char *end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size())
    return std::nullopt;
  return v;
}

// The inference rules, defined in infer/<Family>.cpp (const and None in
// TypeInference.cpp).
#define OP_BEGIN(Name, Opset, Infer, Traits)                                                       \
  std::optional<std::vector<Type>> infer##Infer(const Operation &, const OpDef &, int,             \
                                                std::string &);
#define PARAM(...)
#define OP_END()
#include "ops/Ops.def"

namespace {

#define OP_BEGIN(Name, Opset, Infer, Traits) constexpr ParamSpec kParams_##Name##_##Opset[] = {
#define PARAM(Name, Kind, Optional, Const, Variadic, Domain, DTypes, Default)                      \
  {Name, Optional != 0, Const != 0, Variadic != 0, DTypes, Default, Domain, ParamKind::Kind},
#define OP_END()                                                                                   \
  }                                                                                                \
  ;
#include "ops/Ops.def"

// The traits column names OpTrait enumerators joined by '|'.
constexpr OpTrait None = OpTrait::None;
constexpr OpTrait ConstLike = OpTrait::ConstLike;
constexpr OpTrait StateRead = OpTrait::StateRead;
constexpr OpTrait StateWrite = OpTrait::StateWrite;
constexpr OpTrait View = OpTrait::View;
constexpr OpTrait DataMovement = OpTrait::DataMovement;

const OpDef kOps[] = {
#define OP_BEGIN(Name, Opset, Infer, Traits)                                                       \
  {#Name,                                                                                          \
   Opset,                                                                                          \
   kParams_##Name##_##Opset,                                                                       \
   std::string_view(#Infer) == "None" ? nullptr : &infer##Infer,                                   \
   #Infer,                                                                                         \
   static_cast<uint8_t>(Traits)},
#define PARAM(...)
#define OP_END()
#include "ops/Ops.def"
};

/// The rows of each op name, in table order.
const std::unordered_map<std::string_view, std::vector<const OpDef *>> &rowsByName() {
  static const auto index = [] {
    std::unordered_map<std::string_view, std::vector<const OpDef *>> m;
    for (const OpDef &def : kOps)
      m[def.name].push_back(&def);
    return m;
  }();
  return index;
}

} // namespace

const ParamSpec *OpDef::stateParam() const {
  for (const ParamSpec &p : params)
    if (p.kind == ParamKind::State)
      return &p;
  return nullptr;
}

const ParamSpec *OpDef::writtenValueParam() const {
  if (!has(OpTrait::StateWrite))
    return nullptr;
  for (const ParamSpec &p : params)
    if (p.kind == ParamKind::Tensor)
      return &p;
  return nullptr;
}

int OpDef::requiredIosVersion() const { return opset ? opset : kFirstIosWithStates; }

std::span<const OpDef> allOps() { return kOps; }

const OpDef *findOp(std::string_view type, int iosVersion) {
  const auto &index = rowsByName();
  auto it = index.find(type);
  if (it == index.end())
    return nullptr;
  const OpDef *best = nullptr;
  for (const OpDef *def : it->second)
    if (def->opset <= iosVersion && (!best || def->opset > best->opset))
      best = def;
  return best;
}

const OpDef *findAnyOp(std::string_view type) {
  return findOp(type, std::numeric_limits<int>::max());
}

bool opHasTrait(std::string_view type, OpTrait t) {
  const OpDef *def = findAnyOp(type);
  return def && def->has(t);
}

bool decompressesWeights(std::string_view type) {
  const OpDef *def = findAnyOp(type);
  if (!def || !def->has(OpTrait::ConstLike))
    return false;
  for (const ParamSpec &p : def->params)
    if (p.kind == ParamKind::Tensor)
      return true;
  return false;
}

std::string opNamesWithTrait(OpTrait t, std::string_view conjunction) {
  std::vector<std::string_view> names;
  for (const OpDef &def : kOps)
    if (def.has(t) && std::find(names.begin(), names.end(), def.name) == names.end())
      names.push_back(def.name);
  std::string text;
  for (size_t i = 0; i < names.size(); ++i)
    text += (i == 0                  ? std::string()
             : i + 1 == names.size() ? " " + std::string(conjunction) + " "
                                     : std::string(", ")) +
            std::string(names[i]);
  return text;
}

int iosVersionOfOpset(std::string_view opset) {
  int n = opsetNumber(opset);
  if (n < 5)
    return 0;
  // CoreML5 is iOS15; later opsets (CoreML9 = iOS26) add no ops beyond iOS18.
  return n >= 8 ? 18 : 10 + n;
}

} // namespace anefit
