#!/bin/sh
# Builds the libFuzzer targets with clang and runs each for a while.
#   tests/fuzz/run.sh [SECONDS_PER_TARGET] [BUILD_DIR]
# Corpora grow under BUILD_DIR/fuzz-corpus/<target>; crashes are written to
# BUILD_DIR/fuzz-artifacts/. Exits non-zero if a target finds a crash.
set -eu
seconds=${1:-60}
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${2:-$src/build-fuzz}
cxx=${CXX:-$(command -v clang++ || command -v clang++-14)}
cc=${CC:-$(command -v clang || command -v clang-14)}
jobs=${JOBS:-2}

# The compiler can only be chosen when the build directory is new: changing it
# later makes CMake drop its cache (and with it ANEFIT_FUZZ).
if [ -f "$build/CMakeCache.txt" ]; then
  cmake -S "$src" -B "$build" -DANEFIT_FUZZ=ON >/dev/null
else
  cmake -G Ninja -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" \
    -DANEFIT_FUZZ=ON -DANEFIT_BUILD_BENCH=OFF >/dev/null
fi

targets="anefit-fuzz-weightfile anefit-fuzz-manifest anefit-fuzz-pte"
if [ -f "$src/src/io/MilProto.cpp" ]; then
  targets="$targets anefit-fuzz-modelproto"
fi
# shellcheck disable=SC2086
ninja -C "$build" -j"$jobs" $targets

status=0
mkdir -p "$build/fuzz-artifacts"
for t in $targets; do
  corpus="$build/fuzz-corpus/$t"
  seeds="$src/tests/fuzz/corpus/${t#anefit-fuzz-}"
  mkdir -p "$corpus"
  # The committed fixtures are good seeds for the protobuf reader.
  if [ "$t" = anefit-fuzz-modelproto ]; then
    for m in "$src"/tests/fixtures/*/model.mlpackage/Data/com.apple.CoreML/model.mlmodel; do
      [ -f "$m" ] && cp "$m" "$corpus/seed-$(basename "$(dirname "$(dirname "$(dirname "$(dirname "$m")")")")").mlmodel"
    done
  fi
  # The real ExecuTorch exports seed the .pte reader.
  if [ "$t" = anefit-fuzz-pte ]; then
    for p in "$src"/tests/fixtures/pte/*.pte; do
      [ -f "$p" ] && cp "$p" "$corpus/seed-$(basename "$p")"
    done
  fi
  echo "== $t: ${seconds}s"
  # -rss_limit_mb catches allocations driven by sizes in the input.
  if ! "$build/tests/fuzz/$t" "$corpus" $( [ -d "$seeds" ] && echo "$seeds" ) \
      -max_total_time="$seconds" -rss_limit_mb=1024 -malloc_limit_mb=512 -timeout=10 \
      -artifact_prefix="$build/fuzz-artifacts/$t-" -print_final_stats=1 2>"$build/fuzz-$t.log"; then
    status=1
    echo "   FOUND a problem, see $build/fuzz-$t.log and $build/fuzz-artifacts/"
  fi
  grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' \
    "$build/fuzz-$t.log" | sed 's/^/   /' || true
done
exit $status
