//===- OpRegistry.h - Every MIL op, its parameters and opsets --*- C++ -*-===//
//
// The op registry: one row per (op, opset in which it was introduced or
// changed), hand-edited in Ops.def. Readers, the verifier, the checker, the
// partitioner, the passes and the interpreter look ops up here by name and
// the function's opset, and ask the table what kind of op an op is (its
// traits) instead of listing op names of their own.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/DType.h"

#include <cstdint>
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

/// What kind of op an op is; the traits column of Ops.def (see there).
enum class OpTrait : uint8_t {
  None = 0,
  ConstLike = 1 << 0,
  StateRead = 1 << 1,
  StateWrite = 1 << 2,
  View = 1 << 3,
  DataMovement = 1 << 4,
};
constexpr OpTrait operator|(OpTrait a, OpTrait b) {
  return static_cast<OpTrait>(static_cast<uint8_t>(a) | static_cast<uint8_t>(b));
}

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
  /// OpTrait bits.
  uint8_t traits = 0;

  /// The parameter called `name`, or null.
  const ParamSpec *param(std::string_view name) const;
  /// The value parameter `name` takes when absent, as Ops.def writes it
  /// ("1e-5", "False", "valid"): this row's default, or for a parameter an
  /// older row does not have, the newest row's. Empty when there is none.
  std::string_view paramDefault(std::string_view name) const;
  bool has(OpTrait t) const { return (traits & static_cast<uint8_t>(t)) != 0; }
  /// The parameter that takes a state (kind State), or null.
  const ParamSpec *stateParam() const;
  /// For a StateWrite op, the parameter whose value is written (its first
  /// Tensor parameter); null otherwise.
  const ParamSpec *writtenValueParam() const;
  /// The lowest iOS version whose opset defines the op as this row does:
  /// the row's opset, or kFirstIosWithStates for the coreml dialect and
  /// proto-only state ops.
  int requiredIosVersion() const;
};

/// States (and the ops on them) exist from iOS18.
inline constexpr int kFirstIosWithStates = 18;

/// The newest definition of `type` whose opset <= iosVersion (15..18).
/// Dialect and proto-only ops (opset 0) are found at every version.
const OpDef *findOp(std::string_view type, int iosVersion);
/// Every row of the table, in table order.
std::span<const OpDef> allOps();
/// The newest row of `type` at any version, or null (for questions whose
/// answer does not depend on the opset, such as traits).
const OpDef *findAnyOp(std::string_view type);
/// True if op type `type` has trait `t`; false for unknown ops.
bool opHasTrait(std::string_view type, OpTrait t);
/// True if op type `type` is const-like and reads tensor parameters: it
/// decompresses a weight at load time (constexpr_*), where a constant
/// (const) holds its value as an attribute. False for unknown ops.
bool decompressesWeights(std::string_view type);
/// The names of every op with one of the traits `t`, in table order, each
/// once, as prose: "read_state, write_state and coreml_update_state" (with
/// `conjunction` "and").
std::string opNamesWithTrait(OpTrait t, std::string_view conjunction = "and");
/// A default of Ops.def read as a number ("1e-5", "0.", "-1"; True and
/// False as 1 and 0); nullopt for text that is not one ("valid",
/// "[1] * spatial_rank").
std::optional<double> defaultAsNumber(std::string_view text);
/// "CoreML5" -> 15 ... "CoreML8" -> 18, "CoreML9" -> 18 (iOS26 adds no ops); 0 if unknown.
int iosVersionOfOpset(std::string_view opset);

} // namespace anefit
