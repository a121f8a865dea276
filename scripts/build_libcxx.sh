#!/usr/bin/env bash
# Builds anefit with clang++ and LLVM's libc++ (the compiler and C++ library
# of macOS) in build-libcxx/, and runs the unit and lit suites there.
#
#   scripts/build_libcxx.sh         (after scripts/setup.sh --all: .venv with lit)
#
# Debian's C++ libraries are built against GCC's libstdc++, whose std::string
# and containers are not libc++'s: a program built with libc++ cannot link them.
# What anefit links of them is therefore built here, with clang++ and libc++,
# from Debian's own sources, into build-libcxx/deps (kept for the next run):
#   - protobuf's lite runtime (the only part anefit uses), from Debian's source
#     package of the installed libprotobuf-dev, so that it is the version of the
#     protoc that generates the schema's code (apt-get source, through a deb-src
#     list of the machine's own Debian mirrors kept in build-libcxx/deps);
#   - GoogleTest, from the sources libgtest-dev installs in /usr/src/googletest.
# Header-only libraries (nlohmann-json, CLI11) and C libraries (OpenBLAS, zlib)
# are used as Debian ships them. Google Benchmark is not built (benchmarks are
# not tests: ANEFIT_BUILD_BENCH=OFF), nor the ExecuTorch backend
# (ANEFIT_EXECUTORCH=OFF): ExecuTorch's runtime from PyPI is built with
# libstdc++, and a libc++ backend would put both C++ libraries in one process.
#
# The Python package is built too; the Python tests are left to the g++ build
# (their subject is not the C++ library).
#
# CI runs it (.ci/run) and removes build-libcxx after.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build_dir=${ANEFIT_LIBCXX_BUILD_DIR:-build-libcxx}
deps="$root/$build_dir/deps"
jobs=$(nproc)

sudo_cmd=""
if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi
packages=(clang libc++-dev libc++abi-dev dpkg-dev libgtest-dev libprotobuf-dev protobuf-compiler)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "libcxx: installing Debian packages: ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi
[ -x .venv/bin/lit ] || { echo "libcxx: run scripts/setup.sh --all first (.venv/bin/lit)" >&2; exit 1; }

export CC=clang CXX=clang++
libcxx_flags="-stdlib=libc++"
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=true
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
start=$(date +%s)

# protobuf's lite runtime with libc++, of the installed protoc's version.
# (The machine's own architecture: with multiarch, another's may be installed.)
protobuf_version=$(dpkg-query -W -f='${Version}' "libprotobuf-dev:$(dpkg --print-architecture)")
protobuf_lite="$deps/protobuf-build/libprotobuf-lite.a"
if [ ! -f "$protobuf_lite" ] || [ "$(cat "$deps/protobuf.version" 2>/dev/null)" != "$protobuf_version" ]; then
  echo "libcxx: protobuf $protobuf_version's lite runtime from Debian's source package"
  rm -rf "$deps/apt" "$deps/protobuf-src" "$deps/protobuf-build" "$deps/protobuf.version"
  mkdir -p "$deps/apt/sources" "$deps/apt/lists/partial" "$deps/download"
  # The machine's Debian sources as deb-src, in a list of our own: the
  # system's apt configuration is left as it is.
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
      >"$deps/apt/sources/debian-src.sources"
  fi
  if [ -f /etc/apt/sources.list ]; then
    sed -n 's/^deb \(.*\)$/deb-src \1/p' /etc/apt/sources.list >"$deps/apt/sources/debian-src.list"
  fi
  apt_options=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$deps/apt/sources"
               -o "Dir::State::Lists=$deps/apt/lists" -o APT::Sandbox::User=root)
  apt-get -qq "${apt_options[@]}" update
  (cd "$deps/download" && apt-get -qq "${apt_options[@]}" source --download-only \
    "protobuf=$protobuf_version" >/dev/null)
  dpkg-source --no-check -x "$deps"/download/protobuf_*.dsc "$deps/protobuf-src" >/dev/null
  cmake -S "$deps/protobuf-src" -B "$deps/protobuf-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "${launcher[@]}" -DCMAKE_CXX_FLAGS="$libcxx_flags" -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
    -Dprotobuf_BUILD_TESTS=OFF -Dprotobuf_BUILD_PROTOC_BINARIES=OFF \
    -Dprotobuf_BUILD_SHARED_LIBS=OFF -Dprotobuf_WITH_ZLIB=OFF >/dev/null
  cmake --build "$deps/protobuf-build" -j "$jobs" --target libprotobuf-lite >/dev/null
  echo "$protobuf_version" >"$deps/protobuf.version"
  rm -rf "$deps/download" "$deps/apt" "$deps"/protobuf_*.orig.tar.*
fi

# GoogleTest with libc++, from the sources Debian ships.
if [ ! -f "$deps/gtest/lib/cmake/GTest/GTestConfig.cmake" ]; then
  echo "libcxx: GoogleTest from /usr/src/googletest"
  rm -rf "$deps/gtest-build"
  cmake -S /usr/src/googletest -B "$deps/gtest-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "${launcher[@]}" -DCMAKE_CXX_FLAGS="$libcxx_flags" -DCMAKE_INSTALL_PREFIX="$deps/gtest" \
    >/dev/null
  cmake --build "$deps/gtest-build" -j "$jobs" >/dev/null
  cmake --install "$deps/gtest-build" >/dev/null
  rm -rf "$deps/gtest-build"
fi
deps_seconds=$(($(date +%s) - start))

# anefit. FindProtobuf wants the full library as well: the lite one stands
# for it (anefit links protobuf::libprotobuf-lite only; proto/CMakeLists.txt).
echo "libcxx: building $build_dir with $(clang++ --version | head -n 1) and libc++"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
  -DCMAKE_CXX_FLAGS="$libcxx_flags" \
  -DProtobuf_INCLUDE_DIR="$deps/protobuf-src/src" \
  -DProtobuf_LITE_LIBRARY="$protobuf_lite" -DProtobuf_LIBRARY="$protobuf_lite" \
  -DProtobuf_PROTOC_EXECUTABLE="$(command -v protoc)" \
  -DCMAKE_PREFIX_PATH="$deps/gtest" \
  -DANEFIT_BUILD_TESTS=ON -DANEFIT_BUILD_PYTHON=ON -DANEFIT_BUILD_BENCH=OFF -DANEFIT_EXECUTORCH=OFF \
  -DPython3_EXECUTABLE="$root/.venv/bin/python" -DLIT_EXECUTABLE="$root/.venv/bin/lit" >/dev/null
cmake --build "$build_dir" -j "$jobs"
build_seconds=$(($(date +%s) - start - deps_seconds))

# Every object is libc++'s: no library of the build needs libstdc++.
for binary in "$build_dir/tools/anefit/anefit" "$build_dir"/python/anefit/_core*.so; do
  if ldd "$binary" | grep -q 'libstdc++'; then
    echo "libcxx: $binary links libstdc++" >&2
    exit 1
  fi
  ldd "$binary" | grep -q 'libc++.so' || { echo "libcxx: $binary does not link libc++" >&2; exit 1; }
done
# The Python package built with libc++ imports and checks a model.
PYTHONPATH="$build_dir/python" .venv/bin/python -c \
  "import anefit; assert anefit.check('examples/lfm2_shortconv.mlpackage').verdict == 'at-risk'"

echo "libcxx: the unit and lit suites"
test_start=$(date +%s)
ctest --test-dir "$build_dir" -j "$jobs" --output-on-failure -E '^(python|format|docs|layers)$'
echo "libcxx: dependencies ${deps_seconds} s, build ${build_seconds} s," \
     "tests $(($(date +%s) - test_start)) s"
