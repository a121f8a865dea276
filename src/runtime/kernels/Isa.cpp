//===- Isa.cpp - The instruction set the kernels use ----------------------===//
#include "runtime/kernels/Isa.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace anefit::runtime {
namespace {

std::optional<KernelIsa> forcedIsa;
std::optional<bool> forcedPrefetch;

/// True on a CPU whose vendor string is AMD's.
bool cpuIsAmd() {
#if defined(__x86_64__)
  static const bool yes = [] {
    unsigned eax, ebx, ecx, edx;
    return __get_cpuid(0, &eax, &ebx, &ecx, &edx) && ebx == signature_AMD_ebx &&
           ecx == signature_AMD_ecx && edx == signature_AMD_edx;
  }();
  return yes;
#else
  return false;
#endif
}

} // namespace

bool cpuHasNeon() {
#if defined(__aarch64__)
  return true;
#else
  return false;
#endif
}

bool cpuHasAvx2() {
#if defined(__x86_64__)
  // F16C from CPUID leaf 1: clang 14's __builtin_cpu_supports does not know it.
  static const bool yes = [] {
    unsigned eax, ebx, ecx, edx;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
  }();
  return yes;
#else
  return false;
#endif
}

bool cpuHasAvx512() {
#if defined(__x86_64__)
  static const bool yes = cpuHasAvx2() && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return yes;
#else
  return false;
#endif
}

bool cpuHasAvx512Vnni() {
#if defined(__x86_64__)
  // CPUID leaf 7, ECX bit 11 (AVX512_VNNI).
  static const bool yes = [] {
    unsigned eax, ebx, ecx, edx;
    return cpuHasAvx512() && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 11));
  }();
  return yes;
#else
  return false;
#endif
}

bool cpuHasAvx512Vbmi() {
#if defined(__x86_64__)
  // CPUID leaf 7, ECX bit 1 (AVX512_VBMI).
  static const bool yes = [] {
    unsigned eax, ebx, ecx, edx;
    return cpuHasAvx512() && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 1));
  }();
  return yes;
#else
  return false;
#endif
}

bool cpuHasAvxVnni() {
#if defined(__x86_64__)
  // CPUID leaf 7, sub-leaf 1, EAX bit 4 (AVX-VNNI).
  static const bool yes = [] {
    unsigned eax, ebx, ecx, edx;
    return cpuHasAvx2() && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 4));
  }();
  return yes;
#else
  return false;
#endif
}

const char *kernelIsaName(KernelIsa isa) {
  switch (isa) {
  case KernelIsa::Portable:
    return "portable";
  case KernelIsa::Neon:
    return "neon";
  case KernelIsa::Avx2:
    return "avx2";
  case KernelIsa::Avx2Vnni:
    return "avx2vnni";
  case KernelIsa::Avx512:
    return "avx512";
  case KernelIsa::Avx512Vnni:
    return "avx512vnni";
  }
  return "?";
}

std::optional<KernelIsa> kernelIsaNamed(std::string_view name) {
  for (KernelIsa isa : {KernelIsa::Portable, KernelIsa::Neon, KernelIsa::Avx2, KernelIsa::Avx2Vnni,
                        KernelIsa::Avx512, KernelIsa::Avx512Vnni})
    if (name == kernelIsaName(isa))
      return isa;
  return std::nullopt;
}

std::optional<KernelIsa> environmentKernelIsa() {
  const char *env = std::getenv(kCpuEnvironmentVariable);
  if (!env || !*env || std::string_view(env) == "best")
    return std::nullopt;
  if (std::optional<KernelIsa> isa = kernelIsaNamed(env))
    return isa;
  throw std::invalid_argument(
      std::string(kCpuEnvironmentVariable) + "=" + env +
      ": expected portable, neon, avx2, avx2vnni, avx512, avx512vnni or best");
}

void setKernelIsaForTesting(std::optional<KernelIsa> isa) { forcedIsa = isa; }

bool kernelsTakeGrid16() { return kernelIsa() == KernelIsa::Avx2; }

bool roundedProductsTakeGrid16() {
  KernelIsa isa = kernelIsa();
  return isa == KernelIsa::Avx2 || isa == KernelIsa::Avx2Vnni;
}

bool kernelPrefetches() { return forcedPrefetch.value_or(!(cpuIsAmd() && cpuHasAvx512())); }

void setKernelPrefetchForTesting(std::optional<bool> on) { forcedPrefetch = on; }

KernelIsa kernelIsa() {
  KernelIsa best = cpuHasAvx512Vnni() ? KernelIsa::Avx512Vnni
                   : cpuHasAvx512()   ? KernelIsa::Avx512
                   : cpuHasAvxVnni()  ? KernelIsa::Avx2Vnni
                   : cpuHasAvx2()     ? KernelIsa::Avx2
                   : cpuHasNeon()     ? KernelIsa::Neon
                                      : KernelIsa::Portable;
  // Read once: the kernels ask at every call. A name the variable should not
  // hold leaves the best (the command line refuses it before it runs).
  static const std::optional<KernelIsa> environment = [] {
    try {
      return environmentKernelIsa();
    } catch (const std::invalid_argument &) {
      return std::optional<KernelIsa>();
    }
  }();
  std::optional<KernelIsa> cap = forcedIsa ? forcedIsa : environment;
  if (!cap || *cap >= best)
    return best;
  // NEON below an x86 CPU's best: the one set both families have.
  if (*cap == KernelIsa::Neon && !cpuHasNeon())
    return KernelIsa::Portable;
  // An AVX-512 CPU without AVX-VNNI runs Avx2Vnni's kernels as Avx2.
  return *cap == KernelIsa::Avx2Vnni && !cpuHasAvxVnni() ? KernelIsa::Avx2 : *cap;
}

} // namespace anefit::runtime
