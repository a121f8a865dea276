//===- TypeInference.cpp - Output types of MIL ops ------------------------===//
//
// One inference rule per op family, named in Ops.def. Every rule reads its
// inputs through InferCtx, which looks parameters up in the op's inputs (and,
// for const and pre-iOS18 constexpr ops, in its attributes), reads constant
// values only when they are small, and does overflow-checked dim arithmetic so
// absurd shapes become errors rather than crashes. The rules live in
// infer/<Family>.cpp (element-wise, linear, reduction, shape, indexing,
// constexpr, state, recurrent, control flow); this file holds the shared
// shape and dtype rules, const and the entry point.
//
//===----------------------------------------------------------------------===//
#include "ops/TypeInference.h"

#include "ops/infer/InferUtil.h"

#include <algorithm>

namespace anefit {

using infer::Result;
using infer::shapeText;

std::optional<std::vector<Dim>> broadcastShapes(const std::vector<Dim> &a,
                                                const std::vector<Dim> &b, std::string &error) {
  size_t n = std::max(a.size(), b.size());
  std::vector<Dim> out(n);
  for (size_t i = 0; i < n; ++i) {
    const Dim *da = i < n - a.size() ? nullptr : &a[i - (n - a.size())];
    const Dim *db = i < n - b.size() ? nullptr : &b[i - (n - b.size())];
    if (!da || !db) {
      out[i] = da ? *da : *db;
      continue;
    }
    if (da->isStatic() && da->size == 1) {
      out[i] = *db;
    } else if (db->isStatic() && db->size == 1) {
      out[i] = *da;
    } else if (da->isStatic() && db->isStatic()) {
      if (da->size != db->size) {
        error = "shapes " + shapeText(a) + " and " + shapeText(b) + " do not broadcast";
        return std::nullopt;
      }
      out[i] = *da;
    } else if (da->isStatic() || db->isStatic()) {
      // A non-static dim against a static one other than 1 must equal it.
      out[i] = da->isStatic() ? *da : *db;
    } else {
      out[i] = *da == *db ? *da : Dim::unknown();
    }
  }
  return out;
}

DType promoteDTypes(DType a, DType b) {
  if (a == b)
    return a;
  if (isFloat(a) != isFloat(b))
    return isFloat(a) ? a : b;
  if (a == DType::Bool)
    return b;
  if (b == DType::Bool)
    return a;
  return dtypeBits(a) >= dtypeBits(b) ? a : b;
}

bool typesCompatible(const Type &declared, const Type &inferred) {
  if (declared.kind() != inferred.kind())
    return false;
  switch (declared.kind()) {
  case Type::Kind::Tensor:
    break;
  case Type::Kind::State:
    return typesCompatible(declared.elementType(), inferred.elementType());
  case Type::Kind::List:
  case Type::Kind::Dict:
    return declared.elements().size() == inferred.elements().size();
  case Type::Kind::Tuple:
    if (declared.elements().size() != inferred.elements().size())
      return false;
    for (size_t i = 0; i < declared.elements().size(); ++i)
      if (!typesCompatible(declared.elements()[i], inferred.elements()[i]))
        return false;
    return true;
  }
  if (declared.dtype() != inferred.dtype())
    return false;
  if (!declared.hasRank() || !inferred.hasRank())
    return true;
  const auto &ds = declared.shape();
  const auto &is = inferred.shape();
  // A variadic dim stands for any number of dims.
  auto variadic = [](const std::vector<Dim> &s) {
    return std::any_of(s.begin(), s.end(),
                       [](const Dim &d) { return d.kind == Dim::Kind::Variadic; });
  };
  if (variadic(ds) || variadic(is))
    return true;
  if (ds.size() != is.size())
    return false;
  for (size_t i = 0; i < ds.size(); ++i)
    if (ds[i].isStatic() && is[i].isStatic() && ds[i].size != is[i].size)
      return false;
  return true;
}

//===----------------------------------------------------------------------===//
// Rule entry points named by Ops.def (the others are in infer/<Family>.cpp)
//===----------------------------------------------------------------------===//

Result inferNone(const Operation &, const OpDef &, int, std::string &) { return std::nullopt; }

Result inferConst(const Operation &op, const OpDef &, int, std::string &error) {
  const Constant *val = op.attribute("val");
  if (!val) {
    error = op.type + ": missing attribute 'val'";
    return std::nullopt;
  }
  return infer::one(val->type);
}

std::optional<std::vector<Type>> inferOutputTypes(const Operation &op, int iosVersion,
                                                  std::string &error) {
  error.clear();
  const OpDef *def = findOp(op.type, iosVersion);
  if (!def)
    return std::nullopt;
  if (!def->infer) {
    std::vector<Type> declared;
    for (const auto &v : op.outputs)
      declared.push_back(v->type);
    return declared;
  }
  try {
    auto types = def->infer(op, *def, iosVersion, error);
    if (!types && error.empty()) {
      // An input of unknown rank: nothing more precise than the declaration.
      std::vector<Type> declared;
      for (const auto &v : op.outputs)
        declared.push_back(v->type);
      return declared;
    }
    return types;
  } catch (const std::exception &e) {
    // Reading a constant can fail on a malformed weight file; report, never crash.
    error = op.type + ": " + e.what();
    return std::nullopt;
  }
}

} // namespace anefit
