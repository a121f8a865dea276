#!/usr/bin/env bash
# Builds the anefit wheel from this checkout the way a user does (`pip wheel .`,
# build isolation), installs it into a fresh virtual environment, and checks
# the installed package from outside the source tree: the `anefit` program of
# the wheel, `import anefit`, `python -m anefit`, and the Python API tests
# (tests/python/test_api_*.py) run against the installed package and program.
# Prints the wheel's size, the build time and the import time.
#
# Then what an ExecuTorch user does: a second fresh environment with ExecuTorch
# and PyTorch from PyPI (the pins of scripts/requirements-executorch.txt), then
# `pip install <checkout>` with no option: the build finds that environment's
# ExecuTorch and the package carries the Core ML backend built against it, and
# register_backend() runs a committed Core ML program in ExecuTorch's runtime
# (tests/python/test_api_executorch_backend.py). PyTorch's wheels are large
# (about 5 GB installed): the environment is removed afterwards, and pip's cache
# is not used unless PIP_CACHE_DIR is set.
#
#   scripts/test_wheel.sh              (after scripts/setup.sh --all: the Debian packages)
#   PYTHON=python3.12 scripts/test_wheel.sh
#   ANEFIT_WHEEL_EXECUTORCH=0 scripts/test_wheel.sh   (without the ExecuTorch environment)
#
# The C++ is compiled once: the wheel is built with the flags of the
# scripts/setup.sh --all build (ANEFIT_BUILD_TYPE, RelWithDebInfo by default) in a
# build tree beside it (build-wheel-TYPE/, as deep as build/), so ccache, keyed on
# paths relative to the checkout, serves every object setup.sh compiled; only
# the extension's own sources and nanobind are compiled again. The wheel a
# user builds (`pip wheel .`) is the same package in Release; measure that
# one with ANEFIT_WHEEL_BUILD_TYPE=Release.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}
build_type=${ANEFIT_WHEEL_BUILD_TYPE:-${ANEFIT_BUILD_TYPE:-RelWithDebInfo}}
work="$root/build/wheel-test"
rm -rf "$work"
mkdir -p "$work"

echo "wheel: creating a fresh virtual environment with $("$python" --version)"
"$python" -m venv "$work/venv"
venv_python="$work/venv/bin/python"
"$venv_python" -m pip install -q --upgrade pip

# The compilers of the setup.sh build (ccache keys on the compiler's name:
# c++ and g++ do not share objects).
cache="$root/${ANEFIT_BUILD_DIR:-build}/CMakeCache.txt"
if [ -f "$cache" ]; then
  export CC="${CC:-$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$cache")}"
  export CXX="${CXX:-$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$cache")}"
fi
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=true CCACHE_STATSLOG="$work/ccache.log"
fi
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
# The fresh environment has no ExecuTorch: the wheel has no backend library.
echo "wheel: building (pip wheel ., $build_type)"
start=$(date +%s)
"$venv_python" -m pip wheel -q --no-deps -w "$work/dist" \
  -C cmake.build-type="$build_type" -C build-dir="$root/build-wheel-$build_type" -C install.strip=true \
  "$root" >"$work/build.log" 2>&1 || {
  tail -n 40 "$work/build.log"
  echo "wheel: the build failed; its log is $work/build.log" >&2
  exit 1
}
build_seconds=$(($(date +%s) - start))
if [ -n "${CCACHE_STATSLOG:-}" ] && [ -f "$CCACHE_STATSLOG" ]; then
  echo "wheel: compiler cache: $(grep -cE '^(direct|preprocessed)_cache_hit$' "$CCACHE_STATSLOG")" \
       "objects reused, $(grep -c '^cache_miss$' "$CCACHE_STATSLOG") compiled"
fi
wheel=$(ls "$work"/dist/anefit-*.whl)

echo "wheel: installing $(basename "$wheel") and pytest into the fresh environment"
"$venv_python" -m pip install -q "$wheel" pytest

# From outside the source tree, so only the installed package can be imported.
cd "$work"
anefit_bin="$work/venv/bin/anefit"
[ "$(head -c 4 "$anefit_bin" | tail -c 3)" = ELF ] ||
  { echo "wheel: $anefit_bin is not a native executable" >&2; exit 1; }
set +e
"$anefit_bin" check --fail-on at-risk "$root/examples/lfm2_shortconv.mlpackage" >"$work/check.txt"
code=$?
set -e
grep -q "verdict at-risk" "$work/check.txt"
[ "$code" = 1 ] || { echo "wheel: anefit check --fail-on at-risk exited $code, expected 1" >&2; exit 1; }
verdict=$("$venv_python" -c "import anefit; print(anefit.check('$root/examples/lfm2_shortconv.mlpackage').verdict)")
[ "$verdict" = at-risk ] || { echo "wheel: verdict '$verdict', expected at-risk" >&2; exit 1; }
"$venv_python" -m anefit --help | grep -q "Usage: anefit"

# Import time: median of 5 fresh interpreters, less an empty interpreter's.
import_ms=$("$venv_python" - <<'PY'
import statistics, subprocess, sys, time
def median(code):
    runs = []
    for _ in range(5):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        runs.append(time.perf_counter() - t)
    return statistics.median(runs)
print(f"{(median('import anefit') - median('pass')) * 1e3:.0f}")
PY
)
size=$(stat -c %s "$wheel")
echo "wheel: $(basename "$wheel"): $((size / 1024)) KiB; built in ${build_seconds} s;" \
     "import anefit: ${import_ms} ms"

[ ! -e "$work/venv/lib/python"*/site-packages/anefit/libanefit_executorch.so ] ||
  { echo "wheel: a wheel built without ExecuTorch carries a backend library" >&2; exit 1; }

echo "wheel: the Python API tests against the installed package"
ANEFIT_PYTHON=1 ANEFIT_BIN="$anefit_bin" "$venv_python" -m pytest -q -p no:cacheprovider \
  "$root"/tests/python/test_api_*.py

if [ "${ANEFIT_WHEEL_EXECUTORCH:-1}" = 0 ]; then
  echo "wheel: the ExecuTorch environment is left out (ANEFIT_WHEEL_EXECUTORCH=0)"
  exit 0
fi

# An ExecuTorch user's environment, then anefit installed into it as they do.
# PyTorch's wheels take about 5.4 GB installed and as much again while pip
# unpacks them: on a machine without that room the stage says so and stops
# here, rather than fail half-way with the disk full.
free_mb=$(df -Pm "$work" | awk 'NR == 2 {print $4}')
if [ "${free_mb:-0}" -lt 11000 ]; then
  echo "wheel: the ExecuTorch environment is left out: it needs about 11000 MB free beside" \
    "$work, found ${free_mb} MB"
  exit 0
fi
et_venv="$work/venv-executorch"
et_python="$et_venv/bin/python"
cache_option=()
if [ -z "${PIP_CACHE_DIR:-}" ]; then cache_option=(--no-cache-dir); fi
pins=()
while read -r pin; do pins+=("$pin"); done < <(grep -E '^(executorch|torch)==' "$root/scripts/requirements-executorch.txt")
echo "wheel: a fresh environment with ${pins[*]} from PyPI"
"$python" -m venv "$et_venv"
"$et_python" -m pip install -q "${cache_option[@]}" --upgrade pip
start=$(date +%s)
"$et_python" -m pip install -q "${cache_option[@]}" "${pins[@]}" pytest >"$work/executorch-install.log" 2>&1 || {
  tail -n 20 "$work/executorch-install.log"; echo "wheel: installing ${pins[*]} failed" >&2; exit 1; }
install_seconds=$(($(date +%s) - start))
echo "wheel: ${pins[*]} installed in ${install_seconds} s, $(du -sm "$et_venv" | cut -f1) MiB"

# `pip install <checkout>`, nothing else on its command line. The environment
# only points the build at the tree and flags of the wheel above (scikit-build-core
# reads SKBUILD_* settings from it), so ccache and that tree serve every object
# but the backend's; a user's build is the same in Release, from scratch.
echo "wheel: pip install <checkout> into it"
start=$(date +%s)
SKBUILD_CMAKE_BUILD_TYPE="$build_type" SKBUILD_BUILD_DIR="$root/build-wheel-$build_type" \
  SKBUILD_INSTALL_STRIP=true "$et_python" -m pip install "${cache_option[@]}" "$root" \
  >"$work/executorch-build.log" 2>&1 || {
  tail -n 40 "$work/executorch-build.log"; echo "wheel: pip install <checkout> failed" >&2; exit 1; }
built_against=$(cd "$work" && "$et_python" -c "from anefit._executorch_build import EXECUTORCH_VERSION as v; print(v)" 2>/dev/null) ||
  { echo "wheel: pip install <checkout> built no ExecuTorch backend in an environment with ExecuTorch" >&2; exit 1; }
echo "wheel: built and installed in $(($(date +%s) - start)) s, the backend against ExecuTorch $built_against"

echo "wheel: register_backend() and Core ML programs in ExecuTorch's runtime"
et_anefit="$et_venv/bin/anefit"
ANEFIT_PYTHON=1 ANEFIT_BIN="$et_anefit" TQDM_DISABLE=1 "$et_python" -m pytest -q -p no:cacheprovider \
  "$root/tests/python/test_api_executorch_backend.py" -rs >"$work/executorch-tests.txt" 2>&1 || {
  cat "$work/executorch-tests.txt"; exit 1; }
tail -n 1 "$work/executorch-tests.txt"
! grep -q "SKIPPED.*executorch is not importable" "$work/executorch-tests.txt" ||
  { cat "$work/executorch-tests.txt"; echo "wheel: the backend tests skipped in the ExecuTorch environment" >&2; exit 1; }
# The installed program finds the backend in the installed package, and the
# backend finds ExecuTorch's runtime in the package beside it.
"$et_anefit" run "$root/tests/fixtures/pte/lfm2_export_llm_4w.pte" --engine executorch \
  --random --steps 2 2>/dev/null >"$work/executorch.txt"
grep -q "Core ML delegates on anefit's interpreter" "$work/executorch.txt"
grep -q "output0 (1, 256, fp32)" "$work/executorch.txt"
echo "wheel: the installed program ran a Core ML .pte in ExecuTorch's runtime"
rm -rf "$et_venv"
