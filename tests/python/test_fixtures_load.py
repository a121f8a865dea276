"""The committed model fixtures are what their fixture.json says, and coremltools
(as an external validator) loads them; once `anefit convert` exists, what anefit
writes back loads in coremltools with the same ops and I/O."""

import os
import re

import numpy as np
import pytest

from conftest import (
    EXAMPLES_DIR,
    fixture_functions,
    fixture_info,
    fixture_names,
    fixture_package,
    fixture_steps,
    load_npz,
    load_with_coremltools,
    program_function_io,
    program_op_types,
)

# Fixtures other parts of anefit rely on by name.
REQUIRED_FIXTURES = [
    "lfm2_shortconv",
    "lfm2_shortconv_2layer",
    "lfm2_shortconv_io",
    "kv_cache_slice_update",
    "llama_attention",
    "cnn_small",
    "vit_small",
    "lfm2_multilayer",
    "lfm2_shortconv_multifunction",
]

NAMES = fixture_names()
DTYPES = {"fp32": np.float32, "fp16": np.float16, "int32": np.int32}


def _package_or_skip(name):
    pkg = fixture_package(name)
    if pkg is None:
        pytest.skip(f"{name}: package is generated on demand (scripts/gen_fixtures.sh)")
    return pkg


def test_required_fixtures_exist():
    missing = [n for n in REQUIRED_FIXTURES if n not in NAMES]
    assert not missing, f"fixtures missing: {missing}"


@pytest.mark.parametrize("name", NAMES)
def test_fixture_files_present(name):
    d = os.path.join(os.path.dirname(__file__), "..", "fixtures", name)
    for f in ("inputs.npz", "expected.npz", "program.coremltools.txt", "fixture.json"):
        assert os.path.isfile(os.path.join(d, f)), f"{name}/{f} missing"
    info = fixture_info(name)
    if info["package"] == "committed":
        assert os.path.isfile(os.path.join(d, "model.mlpackage", "Manifest.json"))
        assert info["package_bytes"] <= 200 * 1024


@pytest.mark.parametrize("name", NAMES)
def test_loads_in_coremltools_with_declared_io(name):
    pkg = _package_or_skip(name)
    info = fixture_info(name)
    model = load_with_coremltools(pkg)
    assert model.spec.WhichOneof("Type") == "mlProgram"
    assert model.spec.specificationVersion == info["specification_version"]
    io = model.io()
    for kind in ("inputs", "outputs", "states"):
        want = {k: (tuple(v["shape"]), v["dtype"]) for k, v in info[kind].items()}
        assert io[kind] == want, f"{name}: {kind} differ"
    # The program parsed by the milproto loader agrees with the description,
    # function by function.
    fio = program_function_io(model.program)
    functions = {fn: fdesc for fn, fdesc, _, _ in fixture_functions(name)}
    assert sorted(fio) == sorted(functions)
    if "functions" in info:
        assert model.spec.description.defaultFunctionName == info["default_function"]
        assert model.functions_io() == {
            fn: {kind: {k: (tuple(v["shape"]), v["dtype"]) for k, v in fdesc[kind].items()}
                 for kind in ("inputs", "outputs", "states")}
            for fn, fdesc in functions.items()}
    for fn, fdesc in functions.items():
        ins, outs = fio[fn]
        assert sorted(n for n, *_ in ins) == sorted(list(fdesc["inputs"]) + list(fdesc["states"]))
        for n, kind, shape, dtype in ins:
            decl = fdesc["states"].get(n) or fdesc["inputs"][n]
            assert kind == ("state" if n in fdesc["states"] else "tensor")
            assert list(shape) == decl["shape"]
            assert dtype == decl["dtype"]
        assert outs == list(fdesc["outputs"])


@pytest.mark.parametrize("name", NAMES)
def test_op_histogram_matches(name):
    pkg = _package_or_skip(name)
    info = fixture_info(name)
    prog = load_with_coremltools(pkg).program
    assert program_op_types(prog) == info["ops"]


@pytest.mark.parametrize("name", NAMES)
def test_program_text_lists_every_non_const_op(name):
    """program.coremltools.txt is coremltools' own print of the program: one line per
    non-const op (coremltools does not print const ops)."""
    info = fixture_info(name)
    text = open(os.path.join(os.path.dirname(__file__), "..", "fixtures", name,
                             "program.coremltools.txt")).read()
    heads = re.findall(r"^(\w+)\[CoreML\d+\]\(", text, flags=re.M)
    assert sorted(heads) == sorted(fn for fn, *_ in fixture_functions(name))
    found = {}
    for m in re.finditer(r"\) = (\w+)\(", text):
        found[m.group(1)] = found.get(m.group(1), 0) + 1
    want = {k: v for k, v in info["ops"].items() if k != "const"}
    assert found == want


@pytest.mark.parametrize("name", NAMES)
def test_npz_keys_match_io(name):
    """inputs.npz / expected.npz (and inputs.<function>.npz / expected.<function>.npz of a
    multi-function fixture) follow the key convention of tests/fixtures/README.md and
    carry arrays of the declared shapes and dtypes."""
    info = fixture_info(name)
    for fn, fdesc, in_path, ex_path in fixture_functions(name):
        inputs = load_npz(in_path)
        expected = load_npz(ex_path)
        if "steps" in info:
            in_steps = fixture_steps(inputs)
            ex_steps = fixture_steps(expected)
            want_steps = info.get("function_steps", {}).get(fn, info["steps"])
            assert len(in_steps) == len(ex_steps) == want_steps
            assert all(k.startswith("step") for k in list(inputs) + list(expected))
        else:
            in_steps, ex_steps = [inputs], [expected]
        for step_in, step_ex in zip(in_steps, ex_steps):
            assert set(step_in) == set(fdesc["inputs"])
            want_ex = set(fdesc["outputs"])
            if info.get("stateful"):
                want_ex |= {"state/" + s for s in fdesc["states"]}
            assert set(step_ex) == want_ex
            for k, v in step_in.items():
                assert list(v.shape) == fdesc["inputs"][k]["shape"], k
                assert v.dtype == DTYPES[fdesc["inputs"][k]["dtype"]], k
            for k, v in step_ex.items():
                decl = fdesc["states"][k[6:]] if k.startswith("state/") else fdesc["outputs"][k]
                assert list(v.shape) == decl["shape"], k
                assert v.dtype == DTYPES[decl["dtype"]], k
                assert np.all(np.isfinite(v)), k


def test_prefill_equals_decode_steps():
    """In the multi-function fixture, prefill over 4 tokens gives what 4 decode steps
    over the same tokens give (up to the fp16 rounding of the state between decode
    steps), and leaves the same state."""
    fns = {fn: (load_npz(i), load_npz(e))
           for fn, _, i, e in fixture_functions("lfm2_shortconv_multifunction")}
    dec_in, dec_ex = (fixture_steps(a) for a in fns["decode"])
    pre_in, pre_ex = (fixture_steps(a) for a in fns["prefill"])
    t = pre_in[0]["x"].shape[1]
    assert len(pre_in) * t == len(dec_in)
    tol = fixture_info("lfm2_shortconv_multifunction")["tolerance"]
    for k in range(len(pre_in)):
        xs = np.concatenate([dec_in[k * t + j]["x"] for j in range(t)], axis=1)
        np.testing.assert_array_equal(pre_in[k]["x"], xs)
        outs = np.concatenate([dec_ex[k * t + j]["out"] for j in range(t)], axis=1)
        np.testing.assert_allclose(pre_ex[k]["out"], outs, rtol=tol["rtol"], atol=tol["atol"])
        # the state after the prefill call holds the last two Bx columns, like decode's
        np.testing.assert_allclose(pre_ex[k]["state/conv_state"].astype(np.float64),
                                   dec_ex[k * t + t - 1]["state/conv_state"].astype(np.float64),
                                   rtol=1e-2, atol=1e-3)


def test_state_and_io_shortconv_agree():
    """The state-as-IO variant gives the very same outputs as the stateful block, and
    its returned state is the stateful block's state after the same step."""
    d = os.path.join(os.path.dirname(__file__), "..", "fixtures")
    st = fixture_steps(load_npz(os.path.join(d, "lfm2_shortconv", "expected.npz")))
    io_ex = fixture_steps(load_npz(os.path.join(d, "lfm2_shortconv_io", "expected.npz")))
    io_in = fixture_steps(load_npz(os.path.join(d, "lfm2_shortconv_io", "inputs.npz")))
    st_in = fixture_steps(load_npz(os.path.join(d, "lfm2_shortconv", "inputs.npz")))
    assert len(st) == len(io_ex) >= 8
    for k in range(len(st)):
        np.testing.assert_array_equal(st[k]["out"], io_ex[k]["out"])
        np.testing.assert_array_equal(st[k]["state/conv_state"], io_ex[k]["conv_state_out"])
        np.testing.assert_array_equal(st_in[k]["x"], io_in[k]["x"])
        # the host carries the state: the input state of step k is the output of k-1
        prev = np.zeros_like(io_in[0]["conv_state"]) if k == 0 else io_ex[k - 1]["conv_state_out"]
        np.testing.assert_array_equal(io_in[k]["conv_state"], prev)


def test_shortconv_state_rolls():
    """The recorded conv state is the short-conv roll: column 0 of step k's state is
    column 1 of step k-1's state."""
    d = os.path.join(os.path.dirname(__file__), "..", "fixtures")
    for name, states in (("lfm2_shortconv", ["conv_state"]),
                         ("lfm2_shortconv_2layer", ["layers_0_conv_state", "layers_1_conv_state"])):
        ex = fixture_steps(load_npz(os.path.join(d, name, "expected.npz")))
        for s in states:
            for k in range(1, len(ex)):
                prev, cur = ex[k - 1]["state/" + s], ex[k]["state/" + s]
                np.testing.assert_array_equal(cur[..., 0], prev[..., 1])
                assert np.any(cur[..., 1] != 0)


def test_bundled_example_is_the_2layer_fixture():
    pkg = os.path.join(EXAMPLES_DIR, "lfm2_shortconv.mlpackage")
    if not os.path.isdir(pkg):
        pytest.fail("examples/lfm2_shortconv.mlpackage is missing")
    model = load_with_coremltools(pkg)
    io = model.io()
    assert len(io["states"]) >= 2
    for shape, dtype in io["states"].values():
        assert shape[0] == 1 and shape[2] == 2 and dtype == "fp16"
    ref = load_with_coremltools(fixture_package("lfm2_shortconv_2layer"))
    assert io == ref.io()
    assert program_op_types(model.program) == program_op_types(ref.program)


# ---------------------------------------------------------------------------------
# anefit convert: package -> MIL text -> package, checked by coremltools
# ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_anefit_convert_round_trip(name, anefit, tmp_path):
    pkg = _package_or_skip(name)
    mil = tmp_path / "model.mil"
    out = tmp_path / "roundtrip.mlpackage"
    anefit("convert", pkg, mil, check=True)
    assert mil.stat().st_size > 0
    anefit("convert", mil, out, check=True)
    original = load_with_coremltools(pkg)
    written = load_with_coremltools(out)
    assert written.io() == original.io()
    assert program_op_types(written.program, with_const=False) ==\
        program_op_types(original.program, with_const=False)
    assert program_function_io(written.program) == program_function_io(original.program)
    # the input package is never modified
    assert fixture_package(name) == pkg


def _readme_rows():
    """{fixture name: (inputs cell, states cell, outputs cell)} from the table in
    tests/fixtures/README.md."""
    path = os.path.join(os.path.dirname(__file__), "..", "fixtures", "README.md")
    rows = {}
    for line in open(path):
        m = re.match(r"^\| `(\w+)` \|", line)
        if not m:
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        assert len(cells) == 5, line
        rows[m.group(1)] = (cells[2], cells[3], cells[4])
    return rows


def _readme_features(cell):
    """[(name, shape, dtype)] from a README cell like "`x` (1,1,64) fp32, `pos` (1,) int32";
    several names may share one shape: "`a`, `b` (1,2) fp16"."""
    if cell == "none":
        return []
    out = []
    pending = []
    for m in re.finditer(r"`(\w+)`|\(([\d, ]*)\)\s*(fp16|fp32|int32)", cell):
        if m.group(1):
            pending.append(m.group(1))
        else:
            shape = [int(v) for v in m.group(2).replace(" ", "").split(",") if v]
            out += [(n, shape, m.group(3)) for n in pending]
            pending = []
    assert not pending, f"README cell names without a shape: {cell}"
    return out


def test_readme_table_matches_fixtures():
    rows = _readme_rows()
    assert sorted(rows) == sorted(NAMES)
    for name, cells in rows.items():
        info = fixture_info(name)
        for cell, kind in zip(cells, ("inputs", "states", "outputs")):
            got = sorted(_readme_features(cell))
            want = sorted((n, v["shape"], v["dtype"]) for n, v in info[kind].items())
            assert got == want, f"README row {name}, {kind}: {got} != {want}"
