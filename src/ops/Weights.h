//===- Weights.h - Count a program's weights from their types ---*- C++ -*-===//
//
// The one weight counter behind `show`, `check` and `split`. It sizes every
// weight constant from its type alone (data is never read), counting a
// compressed weight twice over: as stored (the indices, lookup tables, scales,
// offsets and masks a constexpr_* op decompresses, each at its own dtype) and
// as the dense tensor the consuming op reads once decompression is folded at
// compile time. A blob is counted once however many functions or ops bind it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>

namespace anefit {

/// How a weight is stored, from the constexpr op that decompresses it.
enum class WeightScheme : uint8_t {
  Dense,      ///< a plain const, read as stored
  Palettized, ///< constexpr_lut_to_dense (n-bit indices into a lookup table)
  Sparse,     ///< constexpr_sparse_to_dense, *_to_sparse, sparse blockwise (bit mask + values)
  Blockwise,  ///< constexpr_blockwise_shift_scale with scales per block of an axis
  PerChannel, ///< linear quantization with one scale per output channel (or per tensor)
  Cast,       ///< constexpr_cast (stored in a narrower float type)
};
inline constexpr size_t kWeightSchemes = 6;
/// "dense", "palettized", "sparse", "blockwise", "per-channel", "cast".
std::string_view weightSchemeName(WeightScheme s);

/// The scheme of the weight `op` produces: Dense for a const (or any op that
/// is not constexpr_*); for constexpr_blockwise_shift_scale, Blockwise when a
/// scale dim lies strictly between 1 and the data's dim, else PerChannel.
WeightScheme weightSchemeOf(const Operation &op);

struct WeightTally {
  uint64_t elements = 0;
  uint64_t bytes = 0;
};

/// Weight sizes of a program or of one function.
struct WeightCount {
  /// Bytes as stored in the model (what the package weighs and what the
  /// compile budgets measured on devices refer to).
  uint64_t storedBytes = 0;
  uint64_t storedElements = 0;
  /// Bytes of the decompressed tensors the compute ops read (the weights the
  /// ANE holds when a chip folds decompression to fp16 at compile time).
  uint64_t denseBytes = 0;
  uint64_t denseElements = 0;
  /// Stored sizes by dtype name ("fp16", "int4", ...).
  std::map<std::string, WeightTally> byDType;
  /// Stored sizes by scheme, indexed by WeightScheme.
  std::array<WeightTally, kWeightSchemes> byScheme{};

  /// True if some weight is stored compressed.
  bool compressed() const { return storedBytes != byScheme[0].bytes; }
};

/// Counts the weights of every function of `program`, or of `only` when given
/// (blobs shared between functions then count for each function that binds them).
WeightCount countWeights(const Program &program, const Function *only = nullptr);

/// Counts the weights the compute ops `ops` read (the const and constexpr ops
/// feeding them, followed through decompression chains), e.g. one region of a
/// split plan.
WeightCount countWeightsOf(std::span<const Operation *const> ops);

} // namespace anefit
