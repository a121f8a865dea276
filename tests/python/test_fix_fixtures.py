"""`anefit fix` on the LFM2-style fixtures: the fixed package loads in coremltools, has
at most one Core ML state, carries its state map (file and metadata), and, run step by
step with the host loop the state map describes, gives the same outputs as the
original model and the PyTorch reference over every fixture step (>= 8).

The host loop here is driven from Python with one `anefit run` per step: moved states
go from `<state>_out` back into `<state>`, the kept Core ML state goes from the
`state/<name>` array of one run to `--state` of the next.
"""

import json
import os

import numpy as np
import pytest

from conftest import (FIXTURES_DIR, fixture_info, fixture_names, fixture_package,
                      fixture_steps, load_npz, load_with_coremltools)

CANDIDATES = ["lfm2_shortconv", "lfm2_shortconv_2layer", "lfm2_multilayer"]
FIXTURES = [n for n in CANDIDATES if n in fixture_names()]
# Conv-only fixtures must come out with no state finding that blocks the ANE compile.
CONV_ONLY = ["lfm2_shortconv", "lfm2_shortconv_2layer"]

# Separate `anefit run` calls store the kept state as fp16 between steps, a
# single stepped run keeps it in fp32: the two differ by fp16 rounding only.
SAME_RTOL = 1e-3
SAME_ATOL = 1e-3


@pytest.fixture(scope="module")
def fixed(anefit, tmp_path_factory):
    """name -> (original package, fixed package, fix stdout)."""
    out = {}
    base = tmp_path_factory.mktemp("fixed")
    for name in FIXTURES:
        pkg = fixture_package(name)
        if pkg is None:
            continue
        dst = base / f"{name}.mlpackage"
        proc = anefit("fix", pkg, "-o", dst, "--steps", "8", check=True)
        out[name] = (pkg, str(dst), proc.stdout)
    return out


def _get(fixed, name):
    if name not in fixed:
        pytest.skip(f"{name}: package is not available")
    return fixed[name]


@pytest.mark.parametrize("name", FIXTURES)
def test_fix_reports_and_verifies(fixed, name):
    _, dst, stdout = _get(fixed, name)
    assert "state-to-io: moved state" in stdout
    assert "check before:" in stdout and "check after:" in stdout
    assert "verify: 8 steps" in stdout and ": same outputs" in stdout
    assert os.path.isdir(dst)


@pytest.mark.parametrize("name", FIXTURES)
def test_fixed_package_loads_in_coremltools(fixed, name):
    pkg, dst, _ = _get(fixed, name)
    before = load_with_coremltools(pkg).io()
    model = load_with_coremltools(dst)
    io = model.io()
    assert len(io["states"]) <= 1, io["states"]
    with open(dst[: -len(".mlpackage")] + ".statemap.json") as f:
        statemap = json.load(f)
    assert statemap["schema"] == "anefit.statemap/1"
    meta = dict(model.description.metadata.userDefined)
    assert json.loads(meta["com.anefit.statemap"]) == statemap
    assert statemap["states"], "no state was moved"
    for entry in statemap["states"]:
        assert entry["state"] in before["states"]
        want = (tuple(entry["shape"]), entry["dtype"])
        assert before["states"][entry["state"]] == want
        assert io["inputs"][entry["input"]] == want
        assert io["outputs"][entry["output"]] == want
        assert entry["initial"] == "zeros"
    # Every original input and output is still there, unchanged.
    for kind in ("inputs", "outputs"):
        for feature, typ in before[kind].items():
            assert io[kind][feature] == typ


@pytest.mark.parametrize("name", [n for n in CONV_ONLY if n in FIXTURES])
def test_conv_only_fixture_has_no_blocking_state_finding(fixed, anefit, name):
    pkg, dst, _ = _get(fixed, name)

    def blocking(path):
        proc = anefit("check", path, "--format", "json")
        report = json.loads(proc.stdout)
        return [f["rule"] for f in report["findings"]
                if f["rule"].startswith("ANE-STATE") and f["effect"] in ("compile-fail",
                                                                        "runtime-fail")]

    assert blocking(pkg), f"{name}: the original should have a blocking state finding"
    assert blocking(dst) == []


@pytest.mark.parametrize("name", FIXTURES)
def test_host_loop_matches_original_and_reference(fixed, anefit, name, tmp_path):
    pkg, dst, _ = _get(fixed, name)
    info = fixture_info(name)
    inputs_path = os.path.join(FIXTURES_DIR, name, "inputs.npz")
    steps_in = fixture_steps(load_npz(inputs_path))
    assert len(steps_in) >= 8
    expected = fixture_steps(load_npz(os.path.join(FIXTURES_DIR, name, "expected.npz")))

    orig_out = tmp_path / "orig.npz"
    anefit("run", pkg, "--inputs", inputs_path, "-o", orig_out, check=True)
    original = fixture_steps(load_npz(orig_out))

    with open(dst[: -len(".mlpackage")] + ".statemap.json") as f:
        statemap = json.load(f)
    carried = {e["input"]: np.zeros(e["shape"], dtype=np.dtype(
        {"fp16": "float16", "fp32": "float32", "int32": "int32"}[e["dtype"]]))
        for e in statemap["states"]}
    kept = {}
    tol = info["tolerance"]
    compared = 0
    for k, step_inputs in enumerate(steps_in):
        npz = tmp_path / f"in{k}.npz"
        np.savez(npz, **step_inputs, **carried)
        args = ["run", dst, "--inputs", npz, "-o", tmp_path / f"out{k}.npz"]
        for state_name, value in kept.items():
            path = tmp_path / f"state{k}_{state_name}.npy"
            np.save(path, value)
            args += ["--state", f"{state_name}={path}"]
        anefit(*args, check=True)
        got = load_npz(tmp_path / f"out{k}.npz")
        for key, value in original[k].items():
            if key.startswith("state/"):
                state = key[len("state/"):]
                entry = next((e for e in statemap["states"] if e["state"] == state), None)
                key = entry["output"] if entry else key
            assert key in got, f"{name} step {k}: {key} missing"
            np.testing.assert_allclose(got[key].astype(np.float64), value.astype(np.float64),
                                       rtol=SAME_RTOL, atol=SAME_ATOL,
                                       err_msg=f"{name} step {k} {key}")
            compared += 1
        for key, want in expected[k].items():
            if key.startswith("state/"):
                continue
            np.testing.assert_allclose(got[key].astype(np.float64), want.astype(np.float64),
                                       rtol=tol["rtol"], atol=tol["atol"],
                                       err_msg=f"{name} step {k} {key} vs reference")
        for e in statemap["states"]:
            carried[e["input"]] = got[e["output"]]
        kept = {key[len("state/"):]: v for key, v in got.items() if key.startswith("state/")}
    assert compared >= 8


def test_moving_every_state_clears_the_multilayer_model(anefit, tmp_path):
    """With every state moved (KV caches too), their runtime-position writes become
    one-hot blends: no blocking state finding is left, and the fix still verifies."""
    if "lfm2_multilayer" not in FIXTURES or fixture_package("lfm2_multilayer") is None:
        pytest.skip("lfm2_multilayer is not available")
    dst = tmp_path / "all.mlpackage"
    proc = anefit("fix", fixture_package("lfm2_multilayer"), "-o", dst, "--passes",
                "state-to-io,canonicalize,dce", check=True)
    assert ": same outputs" in proc.stdout
    report = json.loads(anefit("check", dst, "--format", "json", check=False).stdout)
    blocking = [f for f in report["findings"] if f["effect"] in ("compile-fail", "runtime-fail")]
    assert blocking == []
    assert load_with_coremltools(dst).io()["states"] == {}
