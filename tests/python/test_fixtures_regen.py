"""The committed fixtures are what the generator makes today, byte for byte.

Regenerates a few fixtures into a temporary directory (ANEFIT_FIXTURES_OUT) and
compares every file with the committed one: this catches a generator change whose
fixtures were not regenerated, and any loss of determinism (seeds, zip dates,
package identifiers, coremltools' conversion date)."""

import filecmp
import os
import subprocess
import sys

import pytest

from conftest import EXAMPLES_DIR, FIXTURES_DIR, REPO_ROOT, have_coremltools

# Small and quick, and between them every fixture family's code path that the
# others share (short conv with and without state, the example copy, KV cache,
# multi-function packages, coremltools' weight compression).
CHECKED = ["lfm2_shortconv", "lfm2_shortconv_2layer", "kv_cache_slice_update", "cnn_small",
           "lfm2_shortconv_multifunction", "lfm2_shortconv_int8", "lfm2_shortconv_palettized"]


def _files(root):
    out = []
    for d, _, files in os.walk(root):
        out += [os.path.relpath(os.path.join(d, f), root) for f in files]
    return sorted(out)


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    if not have_coremltools():
        pytest.skip("coremltools is not installed")
    out = tmp_path_factory.mktemp("regen")
    env = dict(os.environ, ANEFIT_FIXTURES_OUT=str(out), TQDM_DISABLE="1")
    gen = os.path.join(REPO_ROOT, "tests", "fixtures", "gen", "gen_fixtures.py")
    proc = subprocess.run([sys.executable, gen, *CHECKED], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return str(out)


@pytest.mark.parametrize("name", CHECKED)
def test_regenerated_fixture_is_identical(name, regenerated):
    committed = os.path.join(FIXTURES_DIR, name)
    fresh = os.path.join(regenerated, name)
    assert _files(fresh) == _files(committed)
    assert len(_files(fresh)) >= 5
    for rel in _files(committed):
        assert filecmp.cmp(os.path.join(committed, rel), os.path.join(fresh, rel), shallow=False), \
            f"{name}/{rel} differs from a fresh generation: run scripts/gen_fixtures.sh"


def test_regenerated_example_is_identical(regenerated):
    committed = os.path.join(EXAMPLES_DIR, "lfm2_shortconv.mlpackage")
    fresh = os.path.join(regenerated, "examples", "lfm2_shortconv.mlpackage")
    assert _files(fresh) == _files(committed)
    for rel in _files(committed):
        assert filecmp.cmp(os.path.join(committed, rel), os.path.join(fresh, rel), shallow=False)
