//===- Patterns.h - The rewrite patterns passes share -----------*- C++ -*-===//
//
// Folding and simplification patterns (used by canonicalize and, locally, by
// state-to-io) and the helper that reads static slice bounds.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "transforms/PatternRewriter.h"

#include <optional>
#include <unordered_set>
#include <vector>

namespace anefit {

/// Normalised bounds of a slice_by_index / slice_update: per dim [begin, end)
/// with unit stride, masks applied and negative indices resolved.
struct StaticSlice {
  std::vector<int64_t> begin;
  std::vector<int64_t> end;
};

/// Bounds of `op` (slice_by_index or slice_update) over a value of static
/// `shape`, if begin/end are constants, stride is 1 and nothing is squeezed.
std::optional<StaticSlice> staticSliceBounds(const Operation &op,
                                             const std::vector<int64_t> &shape);

/// Constant folding and identity forwarding: shape of a static tensor,
/// integer arithmetic, gather/concat/slice of integer constants, identity.
void populateFoldPatterns(PatternList &patterns);

/// slice_by_index of a concat that reads inside one concat operand.
void populateSliceOfConcatPatterns(PatternList &patterns);

/// slice_update with constant bounds that differ from the whole value along
/// one axis -> concat of the kept slices and the update. When `only` is not
/// null, only those ops are rewritten.
std::unique_ptr<RewritePattern>
createStaticSliceUpdatePattern(const std::unordered_set<const Operation *> *only = nullptr);

/// slice_update writing one row at a runtime position (begin = concat of
/// zeros and one int32 position) -> select(equal(iota, pos), update, x), so
/// no runtime-indexed write remains. When `only` is not null, only those ops.
std::unique_ptr<RewritePattern>
createMaskedSliceUpdatePattern(const std::unordered_set<const Operation *> *only = nullptr);

} // namespace anefit
