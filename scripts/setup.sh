#!/usr/bin/env bash
# Installs what anefit needs on a Debian bookworm machine (as root or with
# sudo) and builds it in build/.
#
#   scripts/setup.sh          the `anefit` program only: the Debian packages
#                             that build it, then the libraries and the CLI
#                             (what the README's first command needs)
#   scripts/setup.sh --all    everything: also a Python virtual environment in
#                             .venv with the test tools (coremltools, numpy,
#                             lit, pytest, tokenizers) and the Python package's build tools
#                             (nanobind, scikit-build-core), headless Chromium
#                             for the test that renders the HTML report, and
#                             the tests, benchmarks and the `anefit` Python
#                             package (build/python, see python/CMakeLists.txt)
#
#   ANEFIT_BUILD_TYPE=Debug scripts/setup.sh
#   ANEFIT_SANITIZE=ON scripts/setup.sh --all  (AddressSanitizer + UBSan build, no benchmarks)
#   ANEFIT_WERROR=ON scripts/setup.sh          (warnings in anefit's code are errors)
#   ANEFIT_BUILD_DIR=build-asan ...            (another build directory; default build)
#   ANEFIT_EXECUTORCH=1 scripts/setup.sh --all (also ExecuTorch in .venv-executorch, so the
#                                               tests load .pte files in ExecuTorch's runtime)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
all=0
case "${1:-}" in
  "") ;;
  --all) all=1 ;;
  *) echo "setup: usage: scripts/setup.sh [--all]" >&2; exit 2 ;;
esac
build_dir=${ANEFIT_BUILD_DIR:-build}
build_type=${ANEFIT_BUILD_TYPE:-RelWithDebInfo}
sanitize=${ANEFIT_SANITIZE:-OFF}
werror=${ANEFIT_WERROR:-OFF}
bench=ON
if [ "$sanitize" = ON ]; then bench=OFF; fi

sudo_cmd=""
if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi

debian_packages=(
  build-essential cmake ninja-build pkg-config git ccache
  libprotobuf-dev protobuf-compiler
  nlohmann-json3-dev libcli11-dev
  libopenblas-dev zlib1g-dev
  python3
)
if [ "$all" = 1 ]; then
  debian_packages+=(libgtest-dev libgmock-dev libbenchmark-dev llvm-14-tools clang-format-14 python3-venv python3-pip python3-dev chromium fonts-dejavu-core)
fi
missing=()
for p in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

if [ "$all" = 1 ]; then
  # Python tools live in a virtual environment so the system Python stays untouched.
  if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv"
    python3 -m venv .venv
  fi
  if ! .venv/bin/python -c "import coremltools, numpy, lit, pytest, nanobind, scikit_build_core, tokenizers" \
      2>/dev/null; then
    echo "setup: installing Python packages into .venv"
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -r scripts/requirements.txt
  fi

  # ExecuTorch's runtime alone (its wheel, 19 MB, without PyTorch): the Core ML
  # backend library (src/executorch) is built against it, and the C++ tests
  # run the committed programs in it. The version is the one pinned for the
  # full environment below.
  executorch_pin=$(grep -E '^executorch==' scripts/requirements-executorch.txt)
  if ! .venv/bin/python -c "import importlib.util as u; assert u.find_spec('executorch')" \
      2>/dev/null; then
    echo "setup: installing ExecuTorch's runtime ($executorch_pin, without PyTorch) into .venv"
    .venv/bin/python -m pip install -q --no-deps "$executorch_pin"
  fi

  # Optional: ExecuTorch (with PyTorch, large) as the external validator of .pte outputs.
  executorch_python=""
  if [ "${ANEFIT_EXECUTORCH:-0}" = 1 ]; then
    if [ ! -x .venv-executorch/bin/python ]; then
      echo "setup: creating .venv-executorch"
      python3 -m venv .venv-executorch
    fi
    if ! .venv-executorch/bin/python -c "import executorch.runtime, coremltools" 2>/dev/null; then
      echo "setup: installing ExecuTorch into .venv-executorch"
      .venv-executorch/bin/python -m pip install -q --upgrade pip
      .venv-executorch/bin/python -m pip install -q -r scripts/requirements-executorch.txt
    fi
    executorch_python="$root/.venv-executorch/bin/python"
  fi
fi

# ccache keyed on paths relative to the checkout, so a second build tree of
# the same flags (the wheel of scripts/test_wheel.sh) reuses these objects.
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=true
if [ "$all" = 1 ]; then
  cmake -S . -B "$build_dir" -G Ninja \
    -DCMAKE_BUILD_TYPE="$build_type" \
    -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
    -DANEFIT_BUILD_TESTS=ON -DANEFIT_BUILD_PYTHON=ON \
    -DANEFIT_EXECUTORCH_PYTHON="$executorch_python" \
    -DANEFIT_SANITIZE="$sanitize" \
    -DANEFIT_WERROR="$werror" \
    -DANEFIT_BUILD_BENCH="$bench" \
    -DPython3_EXECUTABLE="$root/.venv/bin/python" \
    -DLIT_EXECUTABLE="$root/.venv/bin/lit" >/dev/null
  cmake --build "$build_dir" -j "$(nproc)"
  echo "setup: built $build_dir (the program, the Python package, the tests)"
else
  # The program alone: no tests, benchmarks or Python package to configure
  # or compile (a later `--all` turns them on in the same tree and reuses
  # every object built here).
  cmake -S . -B "$build_dir" -G Ninja \
    -DCMAKE_BUILD_TYPE="$build_type" \
    -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
    -DANEFIT_BUILD_TESTS=OFF -DANEFIT_BUILD_BENCH=OFF -DANEFIT_BUILD_PYTHON=OFF \
    -DANEFIT_SANITIZE="$sanitize" \
    -DANEFIT_WERROR="$werror" >/dev/null
  cmake --build "$build_dir" -j "$(nproc)" --target anefit
  echo "setup: built $build_dir/tools/anefit/anefit (scripts/setup.sh --all builds the tests too)"
fi
