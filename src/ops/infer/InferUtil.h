//===- InferUtil.h - Helpers shared by the rule families --------*- C++ -*-===//
//
// The context every inference rule reads its op through (InferCtx), and the
// checked dim arithmetic and parameter readers several families use. Only the
// files of src/ops/infer include it; the rules' entry points, named by
// Ops.def, are defined with ANEFIT_RULE in each family's file.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/TypeInference.h"
#include "support/IntMath.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace anefit::infer {

using Result = std::optional<std::vector<Type>>;

/// Constants larger than this are not read for shape computation: shape-like
/// parameters are short, and a huge one would only be a malformed model.
constexpr uint64_t kMaxShapeConstElements = 1 << 16;

/// Element count of a static shape with overflow checking; nullopt if any
/// dim is not static or non-negative, or the product overflows.
std::optional<int64_t> checkedCount(const Type &t);

/// True if `c` is a small numeric tensor constant whose values may be read.
bool isSmallNumeric(const Constant *c);

class InferCtx {
public:
  InferCtx(const Operation &op, const OpDef &def, int ios, std::string &error)
      : op(op), def(def), ios(ios), error(error) {}

  const Operation &op;
  const OpDef &def;
  int ios;
  std::string &error;

  /// Records "optype: message" and returns an empty result.
  Result fail(const std::string &message) {
    error = op.type + ": " + message;
    return std::nullopt;
  }

  bool has(std::string_view p) const { return binding(p) || op.attribute(p); }

  /// The type of the first binding of `p` (value or constant), or null.
  const Type *type(std::string_view p) const {
    if (const Binding *b = binding(p))
      return b->isValue() ? &b->value->type : b->constant ? &b->constant->type : nullptr;
    if (const Constant *c = op.attribute(p))
      return &c->type;
    return nullptr;
  }

  /// Types of every binding of a variadic parameter.
  std::vector<const Type *> types(std::string_view p) const {
    std::vector<const Type *> out;
    if (const OpInput *in = op.input(p))
      for (const Binding &b : in->bindings) {
        if (b.isValue())
          out.push_back(&b.value->type);
        else if (b.constant)
          out.push_back(&b.constant->type);
      }
    return out;
  }

  /// The constant bound to `p` (immediate, const op output, or attribute).
  const Constant *constant(std::string_view p) const {
    if (const Constant *c = op.constInput(p))
      return c;
    return op.attribute(p);
  }

  /// Integer values of a small constant parameter; nullopt if not constant.
  std::optional<std::vector<int64_t>> ints(std::string_view p) const {
    const Constant *c = constant(p);
    if (!isSmallNumeric(c))
      return std::nullopt;
    try {
      return c->asInts();
    } catch (const std::exception &) {
      // A blob that cannot be read (missing weight file): treat as unknown.
      return std::nullopt;
    }
  }

  std::optional<std::vector<double>> doubles(std::string_view p) const {
    const Constant *c = constant(p);
    if (!isSmallNumeric(c))
      return std::nullopt;
    try {
      return c->asDoubles();
    } catch (const std::exception &) {
      return std::nullopt;
    }
  }

  /// A scalar integer parameter; `dflt` when absent, nullopt when present but not constant.
  std::optional<int64_t> intOr(std::string_view p, int64_t dflt) const {
    if (!has(p))
      return dflt;
    auto v = ints(p);
    if (!v || v->size() != 1)
      return std::nullopt;
    return (*v)[0];
  }

  std::optional<bool> boolOr(std::string_view p, bool dflt) const {
    auto v = intOr(p, dflt ? 1 : 0);
    if (!v)
      return std::nullopt;
    return *v != 0;
  }

  /// A scalar parameter; when absent, the default Ops.def gives it (nullopt
  /// when it gives none, or the value is not constant).
  std::optional<int64_t> intParam(std::string_view p) const {
    if (has(p))
      return intOr(p, 0);
    auto v = defaultAsNumber(def.paramDefault(p));
    if (!v)
      return std::nullopt;
    return static_cast<int64_t>(*v);
  }
  std::optional<bool> boolParam(std::string_view p) const {
    auto v = intParam(p);
    if (!v)
      return std::nullopt;
    return *v != 0;
  }
  std::optional<std::string> stringParam(std::string_view p) const {
    if (has(p))
      return stringOr(p, "");
    std::string_view text = def.paramDefault(p);
    if (text.empty())
      return std::nullopt;
    return std::string(text);
  }

  std::optional<std::string> stringOr(std::string_view p, std::string dflt) const {
    if (!has(p))
      return dflt;
    const Constant *c = constant(p);
    if (!c)
      return std::nullopt;
    return c->asString();
  }

private:
  const Binding *binding(std::string_view p) const {
    const OpInput *in = op.input(p);
    if (!in || in->bindings.empty())
      return nullptr;
    return &in->bindings[0];
  }
};

/// A shape as text: "(1, 64, 2)".
std::string shapeText(const std::vector<Dim> &shape);

std::string typeText(const Type &t);

/// A tensor-typed parameter with a known rank, or an error.
const Type *tensorParam(InferCtx &c, std::string_view p, bool needRank = true);

Result axisError(InferCtx &c, int64_t axis, int64_t rank);

std::optional<int64_t> mulChecked(int64_t a, int64_t b);
std::optional<int64_t> addChecked(int64_t a, int64_t b);

/// Dim `d` times static `k`: static stays static, anything else times 1 stays.
std::optional<Dim> dimTimes(const Dim &d, int64_t k);

/// The more precise of two dims that must be equal; nullopt if two static dims differ.
std::optional<Dim> unifyDims(const Dim &a, const Dim &b);

Result one(Type t);

/// Reads an int list parameter of length `n` with a default of `dflt` for each element.
std::optional<std::vector<int64_t>> intList(InferCtx &c, std::string_view p, size_t n, int64_t dflt,
                                            int64_t minValue);

/// Values of an int shape-like parameter, or the count when only its length is known.
struct ShapeArg {
  std::optional<std::vector<int64_t>> values;
  std::optional<int64_t> length;
};

ShapeArg shapeArg(InferCtx &c, std::string_view p);

/// Axes of a reduction: nullopt axes parameter means all axes.
std::optional<std::vector<bool>> reduceAxes(InferCtx &c, int64_t rank, std::string_view p);

} // namespace anefit::infer

/// Defines the entry point `infer<Name>` that Ops.def names: it makes the
/// rule's InferCtx `c` and returns `Body`, an expression over it.
#define ANEFIT_RULE(Name, Body)                                                                    \
  std::optional<std::vector<Type>> infer##Name(const Operation &op, const OpDef &def, int ios,     \
                                               std::string &error) {                               \
    using namespace infer;                                                                         \
    InferCtx c(op, def, ios, error);                                                               \
    return Body;                                                                                   \
  }
