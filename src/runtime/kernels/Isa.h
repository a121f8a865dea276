//===- Isa.h - The instruction set the kernels use --------------*- C++ -*-===//
//
// The one place the weight kernels' instruction set is chosen: the best the
// CPU has (AVX-512 with or without VNNI, AVX2 with FMA and F16C, NEON on
// aarch64, or portable C++), unless a test or
// a benchmark caps it. Every vector kernel asks kernelIsa() at the call, so a
// capped run takes the portable or AVX2 paths on any machine that has them.
// Whether the AVX-512 kernels prefetch their weight stream in software is
// chosen here too, by CPU, from what was measured on each.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <optional>
#include <string_view>

namespace anefit::runtime {

/// Instruction sets of the kernels (fp16 rows, fused compressed rows, dot
/// products, fp16 conversions), in increasing order. Avx2Vnni is AVX2 with
/// the 256-bit 8-bit dot products of AVX-VNNI (Intel cores since 2021 without
/// AVX-512, AMD Zen 5), Avx512Vnni AVX-512 with its own (VNNI): the
/// int4/uint4 blocks of 32 take them. An AVX-512 CPU may lack AVX-VNNI:
/// Avx2Vnni asked of it gives Avx2. Neon is aarch64's Advanced SIMD with its
/// fp16 conversions (every aarch64 CPU has both); a CPU has it or the x86
/// sets, never both, so Neon asked of an x86 CPU gives Portable and an x86
/// set asked of an aarch64 CPU gives Neon.
enum class KernelIsa { Portable, Neon, Avx2, Avx2Vnni, Avx512, Avx512Vnni };
/// The set the kernels use: the best this CPU has, capped by the environment
/// variable ANEFIT_CPU (a name kernelIsaNamed knows, or "best") and by a
/// test's or a benchmark's choice (setKernelIsaForTesting), which goes first.
KernelIsa kernelIsa();
/// The name of the environment variable that caps the kernels' set.
inline constexpr const char *kCpuEnvironmentVariable = "ANEFIT_CPU";
/// The cap ANEFIT_CPU names: nullopt when it is unset, empty or "best".
/// Throws std::invalid_argument (a one-line message) for any other name.
std::optional<KernelIsa> environmentKernelIsa();
/// Makes the kernels use `isa` (capped at what the CPU has); tests compare
/// every path with the portable one. std::nullopt goes back to the best.
void setKernelIsaForTesting(std::optional<KernelIsa> isa);
/// True when int4/uint4 blocks of 32 in a product whose result is fp16
/// (ProductGrade::Fp16, RunOptions::exactProducts off) put x on a 16-bit
/// grid per block: the kernels are AVX2 without AVX-VNNI or AVX-512, whose
/// exact-grade forms are not instruction-bound.
bool kernelsTakeGrid16();
/// True when, in fp16 mode, int4/uint4 blocks of 32 with fp16 scales in a
/// product whose result is fp16 (RunOptions::exactProducts off) put x on
/// the same 16-bit grid, the weights kept as the fp16 values the device
/// holds: AVX2 with or without AVX-VNNI, where the exact-grade form (a
/// table lookup per weight) is instruction-bound.
bool roundedProductsTakeGrid16();
/// True when the CPU runs the NEON kernels (an aarch64 CPU).
bool cpuHasNeon();
/// True when the CPU runs the AVX2 kernels (AVX2, FMA, F16C).
bool cpuHasAvx2();
/// True when the CPU runs the AVX-512 kernels (AVX-512 F, BW, VL).
bool cpuHasAvx512();
/// True when the CPU also has AVX-512 VNNI.
bool cpuHasAvx512Vnni();
/// True when the CPU also has AVX-512 VBMI (byte permutes across a 512-bit
/// register: Ice Lake and later Intel cores, AMD Zen 4 and later): the
/// AVX-512 kernels of 6- and 8-bit palettes take them, other AVX-512 CPUs
/// read those palettes with the AVX2 kernel.
bool cpuHasAvx512Vbmi();
/// True when the CPU runs the AVX2 kernels and has AVX-VNNI (VEX-encoded
/// VPDPBUSD on 256-bit registers).
bool cpuHasAvxVnni();
/// The name `anefit-bench --isa` and the tests give `isa` ("portable",
/// "neon", "avx2", "avx2vnni", "avx512", "avx512vnni"), and the set of a name
/// (nullopt: none).
const char *kernelIsaName(KernelIsa isa);
std::optional<KernelIsa> kernelIsaNamed(std::string_view name);

/// Whether the AVX-512 weight kernels (fp16 rows, int4/uint4 blocks of 32) prefetch
/// the rows they stream, a few KB ahead, unless a test or a benchmark chose.
/// Measured on decode-sized products that stream weights from memory:
///   - Intel (a Xeon of 2023, Emerald Rapids): the hardware prefetcher alone
///     leaves a core at 55-65 % of its read bandwidth on fp16 rows; with the
///     prefetch they reach 87-97 % (1.4-1.6x a step), the int4 words 1.4-1.5x.
///   - AMD Zen 4: the hardware prefetcher alone streams faster; the prefetch
///     made an LFM2-350M-shaped fp16 step 1.27x slower on one thread.
/// So: off on AMD CPUs with AVX-512 (Zen 4 and later), on everywhere else.
/// The AVX2 kernels always prefetch (tuned on an AVX2-only EPYC, +5-15 %).
bool kernelPrefetches();
/// Makes the AVX-512 kernels prefetch or not; std::nullopt goes back to the
/// CPU's choice. Results do not depend on it.
void setKernelPrefetchForTesting(std::optional<bool> on);

} // namespace anefit::runtime
