#!/usr/bin/env bash
# Cross-compiles anefit for aarch64 Linux (arm64) on a Debian bookworm x86-64
# machine into build-aarch64/, and runs the unit tests there under qemu-user.
#
#   scripts/build_aarch64.sh        (as root or with sudo; nothing else needed first)
#
# The compiler is Debian's g++-aarch64-linux-gnu; the libraries anefit links
# (protobuf, OpenBLAS, zlib) and GoogleTest are Debian's arm64 packages,
# installed beside the machine's own through multiarch (dpkg
# --add-architecture arm64). The protobuf compiler is the machine's
# (protobuf-compiler, the version of libprotobuf-dev:arm64). Header-only
# libraries (nlohmann-json, CLI11) serve both architectures.
#
# The test programs run under qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR,
# with the cross toolchain's C and C++ libraries); every CPU qemu emulates
# has NEON, so the NEON kernels are tested against the portable ones there.
# OpenBLAS is held to one thread: the threads it starts when it loads did
# not get going under qemu-user (a program's start took minutes).
# The Python package, the benchmarks and the ExecuTorch backend are left out,
# and so are the lit and Python suites (they run the host's Python tools).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build_dir=${ANEFIT_AARCH64_BUILD_DIR:-build-aarch64}
jobs=$(nproc)
triple=aarch64-linux-gnu

sudo_cmd=""
if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  echo "aarch64: adding Debian's arm64 architecture (multiarch)"
  $sudo_cmd dpkg --add-architecture arm64
  rm -f "$root/$build_dir/.apt-updated"
fi
packages=(build-essential cmake ninja-build pkg-config ccache python3 g++-$triple qemu-user-static
          protobuf-compiler nlohmann-json3-dev libcli11-dev
          libprotobuf-dev:arm64 libopenblas-dev:arm64 zlib1g-dev:arm64 libgtest-dev:arm64)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "aarch64: installing Debian packages: ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi
# The protobuf compiler generates code for the runtime of its own version.
host_protobuf=$(dpkg-query -W -f='${Version}' protobuf-compiler)
arm_protobuf=$(dpkg-query -W -f='${Version}' libprotobuf-dev:arm64)
if [ "$host_protobuf" != "$arm_protobuf" ]; then
  echo "aarch64: protobuf-compiler is $host_protobuf but libprotobuf-dev:arm64 is $arm_protobuf" >&2
  exit 1
fi

launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=true
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
start=$(date +%s)
echo "aarch64: building $build_dir with $($triple-g++ --version | head -n 1)"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
  -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
  -DCMAKE_C_COMPILER=$triple-gcc -DCMAKE_CXX_COMPILER=$triple-g++ \
  -DCMAKE_LIBRARY_ARCHITECTURE=$triple \
  -DCMAKE_CROSSCOMPILING_EMULATOR="env;OPENBLAS_NUM_THREADS=1;qemu-aarch64-static;-L;/usr/$triple" \
  -DProtobuf_PROTOC_EXECUTABLE="$(command -v protoc)" \
  -DANEFIT_BUILD_TESTS=ON -DANEFIT_BUILD_PYTHON=OFF -DANEFIT_BUILD_BENCH=OFF \
  -DANEFIT_EXECUTORCH=OFF >/dev/null
cmake --build "$build_dir" -j "$jobs"
build_seconds=$(($(date +%s) - start))

$triple-readelf -h "$build_dir/tools/anefit/anefit" | grep -q 'Machine: *AArch64' ||
  { echo "aarch64: $build_dir/tools/anefit/anefit is not an aarch64 program" >&2; exit 1; }
# The program runs: it checks the bundled example (at-risk, exit 0).
report=$(OPENBLAS_NUM_THREADS=1 qemu-aarch64-static -L "/usr/$triple" \
  "$build_dir/tools/anefit/anefit" check examples/lfm2_shortconv.mlpackage)
grep -q 'at-risk' <<<"$report"

echo "aarch64: the unit tests under qemu-aarch64"
test_start=$(date +%s)
ctest --test-dir "$build_dir" -j "$jobs" --output-on-failure -E '^(format|docs|layers|python)$'
echo "aarch64: build ${build_seconds} s, tests $(($(date +%s) - test_start)) s"
