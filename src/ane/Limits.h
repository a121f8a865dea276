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

} // namespace anefit::ane
