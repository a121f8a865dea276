#!/usr/bin/env bash
# The pages of docs/ generated from the tables, each made by a built program:
#
#   docs/ops.md     anefit-opt --list-ops      from src/ops/Ops.def
#   docs/passes.md  anefit-opt --list-passes   from src/transforms/Passes.def
#   docs/rules.md   anefit rules --format markdown --evidence tests/fixtures/evidence
#                   from src/ane/AneRules.def, RuleEvidence.def and the evidence corpus
#
#   scripts/generated_docs.sh [BUILD_DIR]          rewrites the pages that differ
#   scripts/generated_docs.sh --check [BUILD_DIR]  changes nothing; names each page that
#                                                  differs, with the diff, and exits 1
#                                                  (the ctest test `docs`)
#
# BUILD_DIR defaults to build/; ANEFIT_BIN and ANEFIT_OPT_BIN name the programs instead.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
check=0
if [ "${1:-}" = --check ]; then
  check=1
  shift
fi
build=${1:-$root/build}
anefit=${ANEFIT_BIN:-$build/tools/anefit/anefit}
opt=${ANEFIT_OPT_BIN:-$build/tools/anefit-opt/anefit-opt}
for p in "$anefit" "$opt"; do
  if [ ! -x "$p" ]; then
    echo "generated_docs: $p is not built (ninja -C ${build#"$root"/} anefit anefit-opt)" >&2
    exit 2
  fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$opt" --list-ops >"$tmp/ops.md"
"$opt" --list-passes >"$tmp/passes.md"
"$anefit" rules --format markdown --evidence "$root/tests/fixtures/evidence" >"$tmp/rules.md"

differ=0
for page in ops passes rules; do
  doc="$root/docs/$page.md"
  if cmp -s "$tmp/$page.md" "$doc"; then
    continue
  fi
  if [ "$check" = 1 ]; then
    echo "docs/$page.md differs from what the table generates (run scripts/generated_docs.sh):"
    diff -u "$doc" "$tmp/$page.md" | head -40 || true
    differ=1
  else
    cp "$tmp/$page.md" "$doc"
    echo "generated_docs: wrote docs/$page.md"
  fi
done
exit "$differ"
