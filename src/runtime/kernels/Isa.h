//===- Isa.h - The instruction set the kernels use --------------*- C++ -*-===//
//
// The one place the weight kernels' instruction set is chosen: the best the
// CPU has (AVX-512, AVX2 with FMA and F16C, or portable C++), unless a test or
// a benchmark caps it. Every vector kernel asks kernelIsa() at the call, so a
// capped run takes the portable or AVX2 paths on any machine that has them.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <optional>

namespace anefit::runtime {

/// Instruction sets of the kernels (fp16 rows, fused compressed rows, dot
/// products, fp16 conversions), in increasing order.
enum class KernelIsa { Portable, Avx2, Avx512 };
/// The set the kernels use: the best this CPU has, unless a test chose one.
KernelIsa kernelIsa();
/// Makes the kernels use `isa` (capped at what the CPU has); tests compare
/// every path with the portable one. std::nullopt goes back to the best.
void setKernelIsaForTesting(std::optional<KernelIsa> isa);
/// True when the CPU runs the AVX2 kernels (AVX2, FMA, F16C).
bool cpuHasAvx2();
/// True when the CPU runs the AVX-512 kernels (AVX-512 F, BW, VL).
bool cpuHasAvx512();

} // namespace anefit::runtime
