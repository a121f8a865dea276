//===- IntMath.h - Integer division and indices as MIL defines them -*- C++ -*-===//
//
// The integer helpers the kernels, type inference and the constant folds
// share, so that each computes a floor division or a negative index the
// same way.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>

namespace anefit {

/// a / b rounded toward negative infinity (numpy's //); b must not be 0.
template <std::integral T> constexpr T floorDiv(T a, T b) {
  T q = a / b;
  if (a % b != 0 && (a < 0) != (b < 0))
    --q;
  return q;
}

/// a / b rounded toward positive infinity; b must not be 0.
template <std::integral T> constexpr T ceilDiv(T a, T b) {
  T q = a / b;
  if (a % b != 0 && (a < 0) == (b < 0))
    ++q;
  return q;
}

/// An index into `size` elements, counted from the end when negative (-1
/// is the last): in [0, size), or nullopt outside [-size, size).
constexpr std::optional<int64_t> normalizeIndex(int64_t index, int64_t size) {
  int64_t i = index < 0 ? index + size : index;
  if (i < 0 || i >= size)
    return std::nullopt;
  return i;
}

} // namespace anefit
