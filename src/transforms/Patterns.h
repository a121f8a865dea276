//===- Patterns.h - The rewrite patterns passes share -----------*- C++ -*-===//
//
// Folding and simplification patterns (used by canonicalize and, locally, by
// state-to-io) and the helper that reads static slice bounds.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "transforms/PatternRewriter.h"

#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
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

/// The value `op` squares with a float result: x of square(x), mul(x, x)
/// or pow(x, 2) (the exponent an immediate or a const); null otherwise. The
/// square a decomposed norm takes (scale-norm rewrites it, `check
/// --numerics` states its measured |x|).
Value *squaredValue(const Operation &op);

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

/// What rewriteRuntimeSliceUpdates did in one function.
struct RuntimeWriteResult {
  size_t rewritten = 0;  ///< slice_updates replaced by select blends
  size_t splitMasks = 0; ///< masks compared as hi/lo halves (axis > 2048 rows)
  size_t cpuOps = 0;     ///< int32 ops added on the position (off the ANE)
  /// Constant-bound slice_updates left for the static rewrite (used and
  /// cleared inside rewriteRuntimeSliceUpdates).
  std::unordered_set<const Operation *> staticWrites;
  /// Run-time-position slice_updates left alone: (op name, reason).
  std::vector<std::pair<std::string, std::string>> skipped;
};

/// The kv-write-static rewrite. Each top-level slice_update of `fn` (only
/// those in `only` when not null) that writes rows [p, p + L) of one axis at
/// a run-time position p and constant ranges of the other axes becomes, for
/// L <= chainRows, L selects of the update rows into the cache under one-hot
/// masks along that axis; for more rows along one of the last two axes of a
/// float cache, one matmul with the (n, L) one-hot placement matrix and one
/// select. Masks compare p in fp16 (exact for every valid position; hi/lo
/// halves past 2048 rows) and are shared by every write at one position.
RuntimeWriteResult rewriteRuntimeSliceUpdates(Function &fn,
                                              const std::unordered_set<const Operation *> *only,
                                              int64_t chainRows);

/// One line for PassResult::changes: "<prefix>: 2 slice_updates at a ...".
std::string describeRuntimeWrites(const std::string &prefix, const RuntimeWriteResult &r);

} // namespace anefit
