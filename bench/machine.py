"""The machine a benchmark ran on, as its output names it."""

import platform


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
        return "AVX-512 (avx512f)"
    if "avx2" in words:
        return "AVX2 (" + ", ".join(f for f in ("fma", "f16c") if f in words) + "), no AVX-512"
    return platform.machine()
