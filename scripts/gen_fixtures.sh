#!/usr/bin/env bash
# Regenerate the model fixtures under tests/fixtures/ (and examples/lfm2_shortconv.mlpackage)
# with fixed seeds. Needs python3 with coremltools and numpy (scripts/requirements.txt).
#   scripts/gen_fixtures.sh                 every fixture
#   scripts/gen_fixtures.sh NAME [NAME...]  only these
# Packages too large to commit are written to tests/fixtures/generated/ (git-ignored).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
export TQDM_DISABLE=1
cd "$root"
exec "${PYTHON:-python3}" tests/fixtures/gen/gen_fixtures.py "$@"
