//===- Builders.h - Creating the few ops rewrites emit ----------*- C++ -*-===//
//
// Rewrites emit a handful of op types (const, concat, slice_by_index,
// identity). These helpers create them the way coremltools writes them
// (parameters bound to const ops) and compute their result types, so the
// rewritten program is typed without a round trip through type inference.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "transforms/PatternRewriter.h"

#include <cstdint>
#include <string_view>
#include <vector>

namespace anefit {

/// An int32 const (1-D of `values.size()`, or a scalar when `scalar`).
Value *createIntConst(PatternRewriter &rw, Operation &pos, std::string_view hint,
                      const std::vector<int64_t> &values, bool scalar = false);

/// concat(values, axis) along a non-negative `axis`; all values must be
/// ranked tensors of one dtype. Returns null if the types do not allow it.
Value *createConcat(PatternRewriter &rw, Operation &pos, std::string_view hint,
                    const std::vector<Value *> &values, int64_t axis);

/// slice_by_index(x, begin, end) with static bounds and unit stride; `x`
/// must have a static shape. Returns `x` itself when the slice is the whole.
Value *createSlice(PatternRewriter &rw, Operation &pos, std::string_view hint, Value *x,
                   const std::vector<int64_t> &begin, const std::vector<int64_t> &end);

} // namespace anefit
