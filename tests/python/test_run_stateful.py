"""`anefit run --steps` reproduces the stateful fixtures step by step, states included.

Each stateful fixture is run once over all its steps: `--inputs inputs.npz` carries
one `step<k>/NAME` group per step and the archive written with `-o` holds
`step<k>/OUTPUT` and `step<k>/state/STATE` (the state after step k), the same key
convention as the fixture's expected.npz (tests/fixtures/README.md). fp32 mode is
held to the fixture's tolerance; fp16 mode (every op rounded to fp16, like the
Neural Engine) to a looser fp16 tolerance documented in docs/run.md.
"""

import os

import numpy as np
import pytest

from conftest import FIXTURES_DIR, fixture_info, fixture_names, fixture_package, load_npz

STATEFUL = [n for n in fixture_names() if fixture_info(n).get("stateful")]
STATELESS = [n for n in fixture_names() if not fixture_info(n).get("stateful")]

# fp16 mode: every intermediate is rounded to fp16, the reference is not; errors
# grow with depth, so the bound is relative to each array's scale.
FP16_RTOL = 5e-2
FP16_ATOL_SCALE = 2e-2


def _compare(got, expected, rtol, atol, what):
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                               rtol=rtol, atol=atol, err_msg=what)


def _run(tool, name, tmp_path, precision):
    pkg = fixture_package(name)
    if pkg is None:
        pytest.skip(f"{name}: package is not available")
    out = tmp_path / f"{name}_{precision}.npz"
    tool("run", pkg, "--inputs", os.path.join(FIXTURES_DIR, name, "inputs.npz"),
         "--precision", precision, "-o", out, check=True)
    return load_npz(out), load_npz(os.path.join(FIXTURES_DIR, name, "expected.npz"))


@pytest.mark.parametrize("name", STATEFUL)
def test_steps_match_reference_fp32(name, anefit, tmp_path):
    info = fixture_info(name)
    got, expected = _run(anefit, name, tmp_path, "fp32")
    tol = info["tolerance"]
    checked = 0
    for key, want in expected.items():
        assert key in got, f"{name}: {key} missing from anefit run's archive"
        _compare(got[key], want, tol["rtol"], tol["atol"], f"{name} {key}")
        checked += 1
    assert checked >= info["steps"], f"{name}: only {checked} arrays compared"


@pytest.mark.parametrize("name", STATEFUL + STATELESS)
def test_fp16_mode_within_fp16_tolerance(name, anefit, tmp_path):
    """fp16 mode stays within fp16's tolerance of the float64 reference, except
    on a fixture built to overflow fp16 (`fp16_overflows` in its fixture.json),
    where the run must show the overflow rather than hide it."""
    got, expected = _run(anefit, name, tmp_path, "fp16")
    overflows = fixture_info(name).get("fp16_overflows", False)
    for key, want in expected.items():
        assert key in got, f"{name}: {key} missing from anefit run's archive"
        scale = float(np.max(np.abs(want.astype(np.float64)))) if want.size else 1.0
        if overflows:
            assert not np.allclose(got[key].astype(np.float64), want.astype(np.float64),
                                   rtol=FP16_RTOL, atol=FP16_ATOL_SCALE * max(scale, 1e-3)), \
                f"{name} {key}: built to overflow fp16, yet fp16 mode matches the reference"
            continue
        _compare(got[key], want, FP16_RTOL, FP16_ATOL_SCALE * max(scale, 1e-3),
                 f"{name} {key} (fp16 mode)")


def test_states_start_at_given_value(anefit, tmp_path):
    """--state replaces the zero initial state: starting lfm2_shortconv at its
    state after step 3 and feeding step 4's input reproduces step 4."""
    name = "lfm2_shortconv"
    if name not in STATEFUL:
        pytest.skip(f"{name} fixture is absent")
    pkg = fixture_package(name)
    inputs = load_npz(os.path.join(FIXTURES_DIR, name, "inputs.npz"))
    expected = load_npz(os.path.join(FIXTURES_DIR, name, "expected.npz"))
    state = tmp_path / "state.npy"
    x = tmp_path / "x.npy"
    np.save(state, expected["step3/state/conv_state"])
    np.save(x, inputs["step4/x"])
    out = tmp_path / "out.npz"
    anefit("run", pkg, "--input", f"x={x}", "--state", f"conv_state={state}", "-o", out,
             check=True)
    got = load_npz(out)
    tol = fixture_info(name)["tolerance"]
    _compare(got["out"], expected["step4/out"], tol["rtol"], tol["atol"], "resumed step 4")
