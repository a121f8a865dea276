# lit configuration: every *.mil / *.test file under tests/lit is a test.
import os
import lit.formats

config.name = "anefit"
# lit's internal shell (pipes, redirections, `not`, `;`, `&&`) is enough and
# behaves the same on every platform; newer lit refuses execute_external.
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mil", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.anefit_obj_root, "tests", "lit")
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py.in"]

for d in config.anefit_tools_dirs:
    config.environment["PATH"] = d + os.pathsep + config.environment.get("PATH", "")
config.environment["PATH"] = (
    os.path.dirname(config.filecheck) + os.pathsep + config.environment["PATH"])
config.environment["NO_COLOR"] = "1"

# AddressSanitizer reserves terabytes of address space, so a test cannot cap
# it with `ulimit -v`: %{memlimit} is that cap, empty under the sanitizers,
# where such tests give the budget with --max-memory (%if asan) instead.
if getattr(config, "anefit_sanitize", "").upper() in ("ON", "1", "TRUE", "YES"):
    config.available_features.add("asan")
    config.substitutions.append(("%{memlimit}", ""))
else:
    config.substitutions.append(("%{memlimit}", "ulimit -v 4000000;"))
# anefit was built with ExecuTorch's runtime (src/executorch): `fix` on a .pte
# also proves the output in it, and `run --engine executorch` runs.
if getattr(config, "anefit_executorch", "").upper() in ("ON", "1", "TRUE", "YES"):
    config.available_features.add("executorch")
# The CPU runs anefit's AVX2 kernels (AVX2, FMA, F16C): tests of those paths
# (ANEFIT_CPU=avx2) need them.
try:
    with open("/proc/cpuinfo") as f:
        cpu_flags = set(f.read().split())
    if {"avx2", "fma", "f16c"} <= cpu_flags:
        config.available_features.add("avx2")
except OSError:
    pass
config.substitutions.append(("%FileCheck", config.filecheck))
config.substitutions.append(("%python", config.python))
config.substitutions.append(("%fixtures", os.path.join(config.anefit_src_root, "tests", "fixtures")))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
