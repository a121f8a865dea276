#!/usr/bin/env bash
# Checks that every tracked C++ file is formatted as .clang-format says, with
# clang-format 14 (Debian bookworm's; other versions format differently).
# Prints the files that differ and exits 1; 0 when none does.
#
#   scripts/check_format.sh [REPO_ROOT]
set -euo pipefail
root="${1:-$(dirname "${BASH_SOURCE[0]}")/..}"
cd "$root"
tool=""
for t in clang-format-14 clang-format; do
  if command -v "$t" >/dev/null && "$t" --version | grep -q 'version 14\.'; then
    tool="$t"
    break
  fi
done
if [ -z "$tool" ]; then
  echo "check_format: clang-format 14 not found (scripts/setup.sh --all installs clang-format-14)"
  exit 1
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cpp' '*.h' | grep -v '^tests/fixtures/')
else
  mapfile -t files < <(find src tools python/src tests/unit tests/fuzz bench -name '*.cpp' -o -name '*.h')
fi
bad=0
for f in "${files[@]}"; do
  if ! "$tool" --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "$f: not formatted as .clang-format says (run: $tool -i $f)"
    bad=$((bad + 1))
  fi
done
if [ "$bad" -gt 0 ]; then
  echo "check_format: $bad of ${#files[@]} files differ"
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
