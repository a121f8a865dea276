//===- OpRegistry.h - Every MIL op, its parameters and opsets --*- C++ -*-===//
//
// The op registry: one row per (op, opset in which it was introduced or
// changed), generated into Ops.def. Readers, the verifier, the checker and the
// interpreter look ops up here by name and the function's opset.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/DType.h"

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace anefit {

class Operation;
class Type;

/// What a parameter accepts.
enum class ParamKind : uint8_t {
  Tensor,    ///< a tensor or scalar (several for variadic parameters)
  State,     ///< a state<tensor> value
  List,      ///< a list value (or a constant list)
  Any,       ///< tensor, list or dictionary (identity)
  Attribute, ///< carried as an op attribute, not an input (const's "val")
};

/// One parameter of an op.
struct ParamSpec {
  std::string_view name;
  bool optional;
  bool constOnly;
  bool variadic;
  /// Allowed dtypes joined by '|' ("fp16|fp32"); empty when any dtype is fine.
  std::string_view dtypes;
  /// Default of an optional parameter as text ("valid", "1e-5"); empty if none.
  std::string_view defaultValue;
  /// Type-domain id ("T", "U"): parameters with the same id share one dtype.
  /// Empty for parameters with their own fixed dtype list.
  std::string_view domain;
  ParamKind kind;

  /// True if `t` is in `dtypes` (or `dtypes` is empty).
  bool allows(DType t) const;
};

struct OpDef;

/// Infers the output types of `op` defined by `def` at `iosVersion`; nullopt
/// with `error` set when the inputs are inconsistent.
using InferFn = std::optional<std::vector<Type>> (*)(const Operation &op, const OpDef &def,
                                                     int iosVersion, std::string &error);

struct OpDef {
  std::string_view name;
  /// 15..18 for the opset that introduced or changed the op; 0 for the coreml
  /// dialect (coreml_update_state) and proto-only ops (write_state).
  int opset;
  std::span<const ParamSpec> params;
  /// Output-type inference; null when the op keeps its declared types.
  InferFn infer;
  /// Name of the inference rule ("Conv", "Binary", "None"), for docs.
  std::string_view inferName;

  /// The parameter called `name`, or null.
  const ParamSpec *param(std::string_view name) const;
};

/// The newest definition of `type` whose opset <= iosVersion (15..18).
/// Dialect and proto-only ops (opset 0) are found at every version.
const OpDef *findOp(std::string_view type, int iosVersion);
/// Every row of the table, in table order.
std::span<const OpDef> allOps();
/// "CoreML5" -> 15 ... "CoreML8" -> 18, "CoreML9" -> 18 (iOS26 adds no ops); 0 if unknown.
int iosVersionOfOpset(std::string_view opset);

} // namespace anefit
