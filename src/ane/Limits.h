//===- Limits.h - Sizes the ANE rules measure, shared with the rewrites -*- C++ -*-===//
//
// The thresholds of the rules that the rewrites also size their output by:
// a rewrite that splits a projection must split it below the size the rule
// fires at, so both read the number here.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>

namespace anefit::ane {

/// ANE-CONV-006: bytes of one output row of a matmul/linear above which it
/// exceeds the kernel memory.
inline constexpr uint64_t kMatmulKernelMemoryBytes = 65536;

/// ANE-CONV-003 / ANE-QUANT-002: channels from which a depthwise conv is wide.
inline constexpr int64_t kWideDepthwiseChannels = 1024;

/// ANE-PROG-001: stored weight bytes above which the iPhone ANE does not take
/// the model (~1 GB; requantize's auto keeps the weights within it).
inline constexpr uint64_t kPhoneModelWeightBytes = 1000000000ull;

/// ANE-PROG-002: stored weight bytes past the observed single-package budget.
inline constexpr uint64_t kPackageWeightBytes = 1400000000ull;

} // namespace anefit::ane
