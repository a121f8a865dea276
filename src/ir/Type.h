//===- Type.h - Types of MIL values ----------------------------*- C++ -*-===//
//
// MIL values are tensors (rank 0 = scalar), states wrapping a tensor, lists,
// tuples and dictionaries. A tensor dimension is static, symbolic (a named
// unknown such as `is0`, shared between values), unknown, or variadic.
// Types are small value objects, compared structurally.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "support/DType.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace anefit {

/// One dimension of a tensor shape.
struct Dim {
  enum class Kind : uint8_t { Static, Symbolic, Unknown, Variadic };
  Kind kind = Kind::Static;
  int64_t size = 0;   ///< valid when kind == Static
  std::string symbol; ///< valid when kind == Symbolic (e.g. "is0")

  static Dim of(int64_t n) { return Dim{Kind::Static, n, {}}; }
  static Dim symbolic(std::string name) { return Dim{Kind::Symbolic, 0, std::move(name)}; }
  static Dim unknown() { return Dim{Kind::Unknown, 0, {}}; }
  static Dim variadic() { return Dim{Kind::Variadic, 0, {}}; }

  bool isStatic() const { return kind == Kind::Static; }
  bool operator==(const Dim &o) const {
    return kind == o.kind && size == o.size && symbol == o.symbol;
  }
  /// "4", "is0", "?" or "*".
  std::string str() const;
};

/// The type of a MIL value.
class Type {
public:
  enum class Kind : uint8_t { Tensor, State, List, Tuple, Dict };

  Type() = default;
  /// A tensor with known rank; an empty shape is a scalar.
  static Type tensor(DType dtype, std::vector<Dim> shape);
  static Type tensor(DType dtype, const std::vector<int64_t> &shape);
  static Type scalar(DType dtype) { return tensor(dtype, std::vector<Dim>{}); }
  /// A tensor whose rank is unknown (proto rank -1).
  static Type unranked(DType dtype);
  static Type state(Type wrapped);
  static Type list(Type element, Dim length);
  static Type tuple(std::vector<Type> elements);
  static Type dict(Type key, Type value);

  Kind kind() const { return kind_; }
  bool isTensor() const { return kind_ == Kind::Tensor; }
  bool isState() const { return kind_ == Kind::State; }
  bool isScalar() const { return isTensor() && rankKnown_ && shape_.empty(); }

  /// Tensor: its dtype. State: the wrapped tensor's dtype.
  DType dtype() const { return isState() ? elements_.at(0).dtype() : dtype_; }
  bool hasRank() const { return isState() ? elements_.at(0).hasRank() : rankKnown_; }
  int64_t rank() const { return isState() ? elements_.at(0).rank() : (int64_t)shape_.size(); }
  /// Tensor: its shape. State: the wrapped tensor's shape.
  const std::vector<Dim> &shape() const { return isState() ? elements_.at(0).shape() : shape_; }
  /// True if every dim is static.
  bool hasStaticShape() const;
  /// Static shape as integers; nullopt if any dim is not static or the rank is unknown.
  std::optional<std::vector<int64_t>> staticShape() const;
  /// Element count for a static shape; nullopt if not static, a dim is
  /// negative, or the count overflows int64.
  std::optional<int64_t> numElements() const;

  /// State: the wrapped tensor type. List: element type. Dict: key type.
  const Type &elementType() const { return elements_.at(0); }
  /// Dict: value type.
  const Type &valueType() const { return elements_.at(1); }
  /// Tuple: member types.
  const std::vector<Type> &elements() const { return elements_; }
  /// List: its length.
  const Dim &listLength() const { return listLength_; }

  /// Returns this tensor type with another dtype / shape (tensor only).
  Type withDType(DType t) const;
  Type withShape(std::vector<Dim> shape) const;

  bool operator==(const Type &o) const;
  bool operator!=(const Type &o) const { return !(*this == o); }

  /// coremltools' shape string: "(1, 3, fp32)", "(3,int32)", "(fp32)".
  std::string shapeStr() const;
  /// coremltools' type tag: "Tensor", "Scalar", "State", "List", "Tuple", "Dict".
  std::string kindStr() const;
  /// shapeStr() + "(" + kindStr() + ")", e.g. "(1, 8, fp16)(State)".
  std::string str() const;

private:
  Kind kind_ = Kind::Tensor;
  DType dtype_ = DType::F32;
  bool rankKnown_ = true;
  std::vector<Dim> shape_;
  std::vector<Type> elements_;
  Dim listLength_ = Dim::unknown();
};

/// `axis` of a tensor of rank `rank` counted from 0, a negative axis counting
/// from the end (-1 is the last dimension): in [0, rank), or nullopt when
/// `axis` is outside [-rank, rank). With `orRank`, `rank` itself (the place
/// after the last dimension, as flatten2d's axis) is in range too.
std::optional<int64_t> normalizeAxis(int64_t axis, int64_t rank, bool orRank = false);

} // namespace anefit
