#!/usr/bin/env bash
# Builds the anefit wheel from this checkout the way a user does (`pip wheel .`,
# build isolation), installs it into a fresh virtual environment, and checks
# the installed package from outside the source tree: the `anefit` program of
# the wheel, `import anefit`, `python -m anefit`, and the Python API tests
# (tests/python/test_api_*.py) run against the installed package and program.
# Prints the wheel's size, the build time and the import time.
#
#   scripts/test_wheel.sh              (after scripts/setup.sh: the Debian packages)
#   PYTHON=python3.12 scripts/test_wheel.sh
#
# The build directory (build/wheel/, pyproject.toml) is kept, so a second run
# rebuilds only what changed; ccache is used when installed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}
work="$root/build/wheel-test"
rm -rf "$work"
mkdir -p "$work"

echo "wheel: creating a fresh virtual environment with $("$python" --version)"
"$python" -m venv "$work/venv"
venv_python="$work/venv/bin/python"
"$venv_python" -m pip install -q --upgrade pip

if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
fi
echo "wheel: building (pip wheel .)"
start=$(date +%s)
"$venv_python" -m pip wheel -q --no-deps -w "$work/dist" "$root" >"$work/build.log" 2>&1 || {
  tail -n 40 "$work/build.log"
  echo "wheel: the build failed; its log is $work/build.log" >&2
  exit 1
}
build_seconds=$(($(date +%s) - start))
wheel=$(ls "$work"/dist/anefit-*.whl)

echo "wheel: installing $(basename "$wheel") and pytest into the fresh environment"
"$venv_python" -m pip install -q "$wheel" pytest

# From outside the source tree, so only the installed package can be imported.
cd "$work"
anefit_bin="$work/venv/bin/anefit"
[ "$(head -c 4 "$anefit_bin" | tail -c 3)" = ELF ] ||
  { echo "wheel: $anefit_bin is not a native executable" >&2; exit 1; }
set +e
"$anefit_bin" check "$root/examples/lfm2_shortconv.mlpackage" >"$work/check.txt"
code=$?
set -e
grep -q "ane-fails" "$work/check.txt"
[ "$code" = 1 ] || { echo "wheel: anefit check exited $code, expected 1" >&2; exit 1; }
verdict=$("$venv_python" -c "import anefit; print(anefit.check('$root/examples/lfm2_shortconv.mlpackage').verdict)")
[ "$verdict" = ane-fails ] || { echo "wheel: verdict '$verdict', expected ane-fails" >&2; exit 1; }
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

echo "wheel: the Python API tests against the installed package"
ANEFIT_PYTHON=1 ANEFIT_BIN="$anefit_bin" "$venv_python" -m pytest -q -p no:cacheprovider \
  "$root"/tests/python/test_api_*.py
