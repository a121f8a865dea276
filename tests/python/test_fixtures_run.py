"""`anefit run` reproduces the fixtures' reference outputs.

Only flags documented for the verb are used: `--input NAME=FILE.npy` and
`-o OUT.npz`, the output archive keyed by output name. Stateless fixtures are run
once; the state-as-IO fixture is run once per step, the host feeding each step's
returned state into the next, as a user of the fixed model would.
"""

import os

import numpy as np
import pytest

from conftest import fixture_info, fixture_names, fixture_package, fixture_steps, load_npz

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures")
STEPWISE = [n for n in fixture_names()
            if not fixture_info(n).get("stateful")]


def _run_once(tool, pkg, inputs, tmp_path, tag):
    args = ["run", pkg]
    for name, arr in inputs.items():
        f = tmp_path / f"{tag}_{name}.npy"
        np.save(f, arr)
        args += ["--input", f"{name}={f}"]
    out = tmp_path / f"{tag}_out.npz"
    args += ["-o", out]
    tool(*args, check=True)
    return load_npz(out)


@pytest.mark.parametrize("name", STEPWISE)
def test_run_matches_reference(name, anefit, tmp_path):
    info = fixture_info(name)
    pkg = fixture_package(name)
    if pkg is None:
        pytest.skip(f"{name}: package is generated on demand")
    inputs = load_npz(os.path.join(FIXTURES, name, "inputs.npz"))
    expected = load_npz(os.path.join(FIXTURES, name, "expected.npz"))
    in_steps = fixture_steps(inputs) if "steps" in info else [inputs]
    ex_steps = fixture_steps(expected) if "steps" in info else [expected]
    carried = None
    for k, (si, se) in enumerate(zip(in_steps, ex_steps)):
        feed = dict(si)
        if carried is not None:
            # the host carries the state: feed what the model returned last step
            for sname, m in info.get("state_map", {}).items():
                feed[m["input"]] = carried[m["output"]]
        got = _run_once(anefit, pkg, feed, tmp_path, f"step{k}")
        for oname in info["outputs"]:
            assert oname in got, f"{name}: output {oname} missing from anefit run's archive"
            assert got[oname].shape == se[oname].shape
            np.testing.assert_allclose(got[oname].astype(np.float64),
                                       se[oname].astype(np.float64),
                                       rtol=info["tolerance"]["rtol"],
                                       atol=info["tolerance"]["atol"],
                                       err_msg=f"{name} step {k} output {oname}")
        carried = got
