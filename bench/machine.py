"""The machine a benchmark ran on, as its output names it."""

import platform

# anefit-bench --isa: the kernels' instruction sets (runtime/kernels/Isa.h), and
# "best", the CPU's own.
KERNEL_ISAS = ["portable", "neon", "avx2", "avx2vnni", "avx512", "avx512vnni", "best"]


def isa():
    """The widest x86 vector extension the CPU reports (or the machine's architecture)."""
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        pass
    words = set(flags.split())
    if "avx512f" in words:
        return "AVX-512 (avx512f" + (", avx512_vnni)" if "avx512_vnni" in words else ")")
    if "avx2" in words:
        return "AVX2 (" + ", ".join(f for f in ("fma", "f16c") if f in words) + "), no AVX-512"
    return platform.machine()
