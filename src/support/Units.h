//===- Units.h - Sizes and operation counts as people read them -*- C++ -*-===//
//
// The one way every verb, report and pass prints a byte count or a FLOP
// count, so `show`, `check`, `fix` and the HTML report agree on a model.
// Decimal units (1 KB = 1000 bytes), as Core ML tools and Finder report
// sizes.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>

namespace anefit {

/// "512 B", "67.5 KB", "933.1 MB", "2.41 GB".
std::string humanBytes(uint64_t bytes);

/// "96 FLOP", "1.46 MFLOP", "2.41 GFLOP".
std::string humanFlops(double flops);

} // namespace anefit
