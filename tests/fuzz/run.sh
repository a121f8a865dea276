#!/bin/sh
# Builds the libFuzzer targets (clang, AddressSanitizer + UndefinedBehavior-
# Sanitizer) and runs each in turn, one process at a time.
#   tests/fuzz/run.sh [SECONDS_PER_TARGET] [BUILD_DIR]
# Environment:
#   RUNS=N      stop each target after N executions instead of after a time
#   TARGETS=... the targets to run (default: all), e.g. "anefit-fuzz-npz"
# Inputs are cut at a length per target (-max_len below), so a mutation of
# a large seed does not cost each execution a large parse; the probe kit
# target writes its kits under /dev/shm (ProbeKitFuzzer.cpp).
# Corpora grow under BUILD_DIR/fuzz-corpus/<target>, seeded from the committed
# corpus (tests/fuzz/corpus/<name>), the fixtures, the lit tests' MIL text and
# the hostile-input corpus; crashes are written to BUILD_DIR/fuzz-artifacts/.
# Measured on a 2-core machine shared with other builds (RUNS=1000000,
# -max_len as below): anefit-fuzz-probe (plans, observations) 1,000,000 runs
# in 1,759 s, anefit-fuzz-json 1,000,000 in 1,203 s, anefit-fuzz-etrecord
# 1,000,000 in 1,342 s, no finding. anefit-fuzz-probekit: 182 executions a
# second with its kits under /dev/shm against 49 on disk (60 s each, side by
# side); 81,916 executions, no finding (about 90 minutes short of 1,000,000).
# Prints each target's execution count. Exits non-zero if a target finds
# anything (a crash, a sanitizer report, a leak, a timeout, an allocation over
# the limits below).
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
    -DANEFIT_FUZZ=ON -DANEFIT_BUILD_BENCH=OFF -DANEFIT_BUILD_TESTS=ON >/dev/null
fi

all="anefit-fuzz-weightfile anefit-fuzz-manifest anefit-fuzz-pte anefit-fuzz-modelproto \
anefit-fuzz-miltext anefit-fuzz-npz anefit-fuzz-interpreter anefit-fuzz-probe anefit-fuzz-etrecord \
anefit-fuzz-json anefit-fuzz-probekit"
targets=${TARGETS:-$all}
# shellcheck disable=SC2086
ninja -C "$build" -j"$jobs" $targets

# Copies FILE into the corpus DIR; with a mode byte first for the targets that
# read one (the MIL text targets take their options from the first byte).
seed() {
  name=$(echo "$1" | sed "s|^$src/||; s|/|_|g")
  if [ "$3" = mode ]; then
    { printf '\000'; cat "$1"; } > "$2/seed-$name"
  else
    cp "$1" "$2/seed-$name"
  fi
}

status=0
mkdir -p "$build/fuzz-artifacts"
for t in $targets; do
  corpus="$build/fuzz-corpus/$t"
  seeds="$src/tests/fuzz/corpus/${t#anefit-fuzz-}"
  mkdir -p "$corpus"
  case $t in
  anefit-fuzz-modelproto)
    for m in "$src"/tests/fixtures/*/model.mlpackage/Data/com.apple.CoreML/model.mlmodel; do
      [ -f "$m" ] && seed "$m" "$corpus" raw
    done ;;
  anefit-fuzz-pte)
    for p in "$src"/tests/fixtures/pte/*.pte; do
      [ -f "$p" ] && seed "$p" "$corpus" raw
    done ;;
  anefit-fuzz-npz)
    for p in "$src"/tests/fixtures/*/*.npz "$src"/tests/lit/io/Inputs/hostile/*.npz; do
      [ -f "$p" ] && seed "$p" "$corpus" raw
    done ;;
  anefit-fuzz-probekit)
    for m in "$src"/tests/lit/probe/Inputs/*.mil; do
      seed "$m" "$corpus" raw
    done ;;
  anefit-fuzz-miltext | anefit-fuzz-interpreter)
    find "$src/tests/lit" -name '*.mil' | while read -r m; do
      seed "$m" "$corpus" mode
    done ;;
  esac
  # The readers' limits need no megabytes to reach: nesting past 128 takes
  # 129 bytes, a kit a few lines of MIL text. Without -max_len libFuzzer
  # takes the largest seed's length (300 KB for json).
  case $t in
  anefit-fuzz-json | anefit-fuzz-probe) maxlen="-max_len=16384" ;;
  anefit-fuzz-probekit | anefit-fuzz-etrecord) maxlen="-max_len=4096" ;;
  *) maxlen="" ;;
  esac
  if [ -n "${RUNS:-}" ]; then
    limit="-runs=$RUNS" what="$RUNS runs"
  else
    limit="-max_total_time=$seconds" what="${seconds}s"
  fi
  echo "== $t: $what"
  # -rss_limit_mb and -malloc_limit_mb catch allocations driven by sizes in
  # the input; the interpreter's own budget is 16 MiB (InterpreterFuzzer.cpp).
  # shellcheck disable=SC2046
  if ! "$build/tests/fuzz/$t" "$corpus" $( [ -d "$seeds" ] && echo "$seeds" ) \
      "$limit" $maxlen -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=20 \
      -artifact_prefix="$build/fuzz-artifacts/$t-" -print_final_stats=1 \
      2>"$build/fuzz-$t.log"; then
    status=1
    echo "   FOUND a problem, see $build/fuzz-$t.log and $build/fuzz-artifacts/"
  fi
  grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' \
    "$build/fuzz-$t.log" | sed 's/^/   /' || true
done
exit $status
