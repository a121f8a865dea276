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
# qemu-aarch64 runs the C library's loader as the program and the loader
# runs the test: when qemu (7.2, Debian bookworm) loads a dynamically linked
# program's interpreter itself, the program's first pthread_create never
# returns (a three-line std::thread program hangs; built -static, or started
# through the loader as here, it runs). Started through the loader, OpenBLAS's
# threads and anefit's thread pool run as they do natively.
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
sysroot=/usr/$triple
emulator=(qemu-aarch64-static -L "$sysroot" "$sysroot/lib/ld-linux-aarch64.so.1" --library-path "$sysroot/lib")
start=$(date +%s)
echo "aarch64: building $build_dir with $($triple-g++ --version | head -n 1)"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
  -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
  -DCMAKE_C_COMPILER=$triple-gcc -DCMAKE_CXX_COMPILER=$triple-g++ \
  -DCMAKE_LIBRARY_ARCHITECTURE=$triple \
  -DCMAKE_CROSSCOMPILING_EMULATOR="$(IFS=";"; echo "${emulator[*]}")" \
  -DProtobuf_PROTOC_EXECUTABLE="$(command -v protoc)" \
  -DANEFIT_BUILD_TESTS=ON -DANEFIT_BUILD_PYTHON=OFF -DANEFIT_BUILD_BENCH=OFF \
  -DANEFIT_EXECUTORCH=OFF >/dev/null
cmake --build "$build_dir" -j "$jobs"
build_seconds=$(($(date +%s) - start))

$triple-readelf -h "$build_dir/tools/anefit/anefit" | grep -q 'Machine: *AArch64' ||
  { echo "aarch64: $build_dir/tools/anefit/anefit is not an aarch64 program" >&2; exit 1; }
# The program runs: it checks the bundled example (at-risk, exit 0).
report=$("${emulator[@]}" "$build_dir/tools/anefit/anefit" check examples/lfm2_shortconv.mlpackage)
grep -q 'at-risk' <<<"$report"

echo "aarch64: the unit tests under qemu-aarch64"
test_start=$(date +%s)
# Two tests look at the process itself, which under qemu-user is qemu's:
# qemu-user (7.2) acknowledges madvise(MADV_HUGEPAGE) without passing it on,
# so no mapping shows the "hg" flag; and RLIMIT_AS limits qemu's own address
# space, while the death test's re-execution of the aarch64 program needs a
# binfmt_misc handler that a container may not have.
ctest --test-dir "$build_dir" -j "$jobs" --output-on-failure \
  -E '^(format|docs|layers|python|MappedFile.AdvisesHugePagesForLargeFiles|ThreadPool.RunsOnTheWorkersThatStartWhenTheSystemRefusesMore)$'
echo "aarch64: build ${build_seconds} s, tests $(($(date +%s) - test_start)) s"
