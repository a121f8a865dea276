//===- TypeInference.h - Output types of MIL ops ---------------*- C++ -*-===//
//
// Computes the output types of an operation from the types of its bound
// values and the values of its constant parameters, following the op's
// registry row. Symbolic dims flow through where they can; where a size
// cannot be computed the dim is unknown.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"
#include "ops/OpRegistry.h"

#include <optional>
#include <string>
#include <vector>

namespace anefit {

/// Output types inferred from the op's inputs (types of bound values and constants), or nullopt
/// with `error` set ("conv: weight rank 3 does not match x rank 4"). Unknown op -> nullopt, error
/// "". A known op without an inference rule yields its declared output types.
std::optional<std::vector<Type>> inferOutputTypes(const Operation &op, int iosVersion,
                                                  std::string &error);

/// True if a value declared as `declared` may hold what inference computed as
/// `inferred`: same kind and dtype, and per dim equal unless either dim is not
/// static; an unknown rank matches any rank.
bool typesCompatible(const Type &declared, const Type &inferred);

/// Numpy broadcasting of two shapes; nullopt with `error` set on a mismatch of
/// two static dims other than 1.
std::optional<std::vector<Dim>> broadcastShapes(const std::vector<Dim> &a,
                                                const std::vector<Dim> &b, std::string &error);

/// The dtype of a binary elementwise op on `a` and `b`: equal dtypes stay, a
/// float wins over an integer, the wider of two floats or two integers wins.
DType promoteDTypes(DType a, DType b);

/// The element type a cast's `dtype` string names, as Core ML reads it: the
/// table's names ("fp16", "int32"), the numpy spellings frontends write
/// ("float16", "float32"), and the 64-bit targets Core ML narrows to 32 bits
/// ("int64", "fp64", "float64"). nullopt for anything else. Type inference
/// and the interpreter's cast kernel both ask here.
std::optional<DType> castTargetDType(std::string_view name);

} // namespace anefit
