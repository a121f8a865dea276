"""anefit.run and Session: numpy in and out of the reference interpreter.
Against PyTorch's reference outputs of the fixtures, against `anefit run` on
the same inputs (bit for bit), states and state-map carries stepped like a
host loop, a round trip for every dtype numpy shares with MIL, and bad input
as InputError."""

import os

import numpy as np
import pytest

from conftest import EXAMPLES_DIR, decode_inputs, fixture_info, fixture_package, fixture_steps, \
    load_npz, FIXTURES_DIR

EXAMPLE = os.path.join(EXAMPLES_DIR, "lfm2_shortconv.mlpackage")


def fixture_io(name):
    d = os.path.join(FIXTURES_DIR, name)
    return (fixture_info(name), fixture_steps(load_npz(os.path.join(d, "inputs.npz"))),
            fixture_steps(load_npz(os.path.join(d, "expected.npz"))))


def assert_close(got, want, tol, what):
    assert got.shape == want.shape, what
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                               rtol=tol["rtol"], atol=tol["atol"], err_msg=what)


def test_session_steps_a_stateful_fixture_like_pytorch(anefit_py):
    info, inputs, expected = fixture_io("lfm2_shortconv")
    session = anefit_py.Session(fixture_package("lfm2_shortconv"))
    assert session.function == "main" and session.carries == {}
    for k, (feed, want) in enumerate(zip(inputs, expected)):
        out = session.run(feed)
        assert set(out) == set(info["outputs"])
        assert_close(out["out"], want["out"], info["tolerance"], f"step {k}")
        assert_close(session.states["conv_state"], want["state/conv_state"], info["tolerance"],
                     f"step {k} state")
    assert session.steps == len(inputs)
    session.reset()
    assert session.steps == 0
    assert_close(session.run(inputs[0])["out"], expected[0]["out"], info["tolerance"], "reset")


def test_a_state_map_is_carried_like_a_host_does(anefit_py, anefit, tmp_path):
    fixed = tmp_path / "fixed.mlpackage"
    anefit("fix", EXAMPLE, "-o", fixed, check=True)
    original, rewritten = anefit_py.Session(EXAMPLE), anefit_py.Session(fixed)
    assert len(rewritten.carries) == 2 and original.carries == {}
    rng = np.random.default_rng(0)
    for k in range(4):
        x = rng.standard_normal((1, 1, 64)).astype(np.float32)
        a, b = original.run({"x": x}), rewritten.run({"x": x})
        np.testing.assert_allclose(a["out"], b["out"], rtol=1e-3, atol=1e-4, err_msg=f"step {k}")
    for state, (inp, out) in zip(sorted(original.states), sorted(rewritten.carries.items())):
        assert state in inp


def test_session_equals_anefit_run_bit_for_bit(anefit_py, anefit, tmp_path):
    rng = np.random.default_rng(1)
    steps = [{"x": rng.standard_normal((1, 1, 64)).astype(np.float32)} for _ in range(5)]
    init = {"layers_0_conv_state": rng.standard_normal((1, 64, 2)).astype(np.float16)}
    np.savez(tmp_path / "in.npz", **{f"step{k}/x": s["x"] for k, s in enumerate(steps)})
    np.save(tmp_path / "s0.npy", init["layers_0_conv_state"])
    for precision in ("fp32", "fp16"):
        out = tmp_path / f"out_{precision}.npz"
        anefit("run", EXAMPLE, "--inputs", tmp_path / "in.npz", "--precision", precision,
               "--state", f"layers_0_conv_state={tmp_path / 's0.npy'}", "-o", out, check=True)
        cli = load_npz(out)
        session = anefit_py.Session(EXAMPLE, precision=precision, states=init)
        for k, feed in enumerate(steps):
            got = session.run(feed)
            assert got["out"].dtype == cli[f"step{k}/out"].dtype
            assert np.array_equal(got["out"], cli[f"step{k}/out"]), (precision, k)
            for name, value in session.states.items():
                assert np.array_equal(value, cli[f"step{k}/state/{name}"]), (precision, k, name)
        last = anefit_py.run(EXAMPLE, steps, precision=precision, states=init)
        assert np.array_equal(last["out"], cli[f"step{len(steps) - 1}/out"])


def test_run_repeats_one_mapping_for_every_step(anefit_py):
    x = np.ones((1, 1, 64), np.float32)
    session = anefit_py.Session(EXAMPLE)
    for _ in range(3):
        want = session.run({"x": x})
    assert np.array_equal(anefit_py.run(EXAMPLE, {"x": x}, steps=3)["out"], want["out"])
    model = anefit_py.load(EXAMPLE)
    assert np.array_equal(anefit_py.run(model, {"x": x}, steps=3)["out"], want["out"])


IDENTITY = """main[CoreML8](%x: (2, 3, {dt})(Tensor)) {{
  block0() {{
    %y: (2, 3, {dt})(Tensor) = identity(x=%x, name="y")
  }} -> (%y)
}}
"""

DTYPES = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64, "int8": np.int8,
          "int16": np.int16, "int32": np.int32, "int64": np.int64, "uint8": np.uint8,
          "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64, "bool": np.bool_}


@pytest.mark.parametrize("dt", sorted(DTYPES))
def test_numpy_round_trip_for_every_dtype(anefit_py, tmp_path, dt):
    path = tmp_path / f"{dt}.mil"
    path.write_text(IDENTITY.format(dt=dt))
    rng = np.random.default_rng(2)
    if dt == "bool":
        x = rng.integers(0, 2, (2, 3)).astype(np.bool_)
    elif np.issubdtype(DTYPES[dt], np.integer):
        info = np.iinfo(DTYPES[dt])
        # Values the interpreter's int32 compute type holds.
        x = rng.integers(max(info.min, -2**31), min(info.max, 2**31 - 1), (2, 3),
                         dtype=np.int64).astype(DTYPES[dt])
    else:
        x = rng.standard_normal((2, 3)).astype(DTYPES[dt])
    before = x.copy()
    y = anefit_py.run(path, {"x": x})["y"]
    assert y.dtype == x.dtype and y.shape == x.shape
    if dt == "fp64":  # computed in fp32, like every float type
        np.testing.assert_array_equal(y, x.astype(np.float32).astype(np.float64))
    else:
        np.testing.assert_array_equal(y, x)
    assert np.array_equal(x, before), "the input array was changed"
    assert y.flags.writeable and not y.flags.owndata  # numpy views the interpreter's buffer
    y[...] = 0  # writing to it touches nothing of the interpreter's


def test_inputs_of_any_layout_and_kind_are_accepted(anefit_py, tmp_path):
    path = tmp_path / "fp32.mil"
    path.write_text(IDENTITY.format(dt="fp32"))
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    strided = base[:2, :3]  # not C-contiguous: copied to C order on the way in
    assert np.array_equal(anefit_py.run(path, {"x": strided})["y"], strided)
    assert np.array_equal(anefit_py.run(path, {"x": base.T[:3, :2].T})["y"], base[:2, :3])
    nested = [[1, 2, 3], [4, 5, 6]]  # numpy makes an int64 array of it
    with pytest.raises(anefit_py.InputError, match="expected dtype fp32, found int64"):
        anefit_py.run(path, {"x": nested})
    as_float = anefit_py.run(path, {"x": [[1.0, 2, 3], [4, 5, 6]]})["y"]
    assert as_float.tolist() == [[1, 2, 3], [4, 5, 6]]
    big_endian = np.arange(6, dtype=">f4").reshape(2, 3)
    assert np.array_equal(anefit_py.run(path, {"x": big_endian})["y"], big_endian)
    half = np.arange(6, dtype=np.float16).reshape(2, 3)  # fp16 for an fp32 input: same kind
    assert np.array_equal(anefit_py.run(path, {"x": half})["y"], half.astype(np.float32))


@pytest.mark.parametrize("feed,message", [
    ({"x": np.zeros((1, 1, 63), np.float32)}, r"input 'x': expected shape \(1, 1, 64, fp32\), found \[1, 1, 63\]"),
    ({"x": np.zeros((1, 1, 64), np.int32)}, "input 'x': expected dtype fp32, found int32"),
    ({"x": np.zeros((1, 1, 64), np.float32), "y": np.zeros(1)}, "unknown input 'y'"),
    ({}, "missing input 'x'"),
    ({"x": np.zeros((1, 1, 64), np.complex64)},
     "input 'x': expected a numeric or bool array, found dtype complex64"),
    ({"x": np.array(["a"])}, "input 'x': expected a numeric or bool array, found dtype <U1"),
    ({"x": object()}, "input 'x': expected a numeric or bool array, found dtype object"),
    ({1: np.zeros((1, 1, 64), np.float32)}, "expected names"),
])
def test_bad_inputs_raise_input_error(anefit_py, feed, message):
    session = anefit_py.Session(EXAMPLE)
    with pytest.raises(anefit_py.InputError, match=message):
        session.run(feed)
    # The session is still usable after an error.
    assert session.run({"x": np.zeros((1, 1, 64), np.float32)})["out"].shape == (1, 1, 64)


def test_bad_options_raise_input_error(anefit_py):
    with pytest.raises(anefit_py.InputError, match="fp8"):
        anefit_py.Session(EXAMPLE, precision="fp8")
    with pytest.raises(anefit_py.InputError, match="steps"):
        anefit_py.run(EXAMPLE, {"x": np.zeros((1, 1, 64), np.float32)}, steps=0)
    with pytest.raises(anefit_py.InputError, match="nope"):
        anefit_py.Session(EXAMPLE, states={"nope": np.zeros((1, 64, 2), np.float16)})
    with pytest.raises(anefit_py.InputError, match="layers_0_conv_state"):
        anefit_py.Session(EXAMPLE, states={"layers_0_conv_state": np.zeros((1, 64, 3))})
    with pytest.raises(TypeError):
        anefit_py.Session(EXAMPLE).run([np.zeros((1, 1, 64), np.float32)])


def test_exact_products_is_the_cli_flag(anefit_py, anefit, tmp_path):
    # exact_products=True keeps int4 products fp32-grade in linears the model
    # declares fp16 (off: CPUs with AVX2 but not AVX-512 put x on a 16-bit
    # grid per block of 32 there): the binding and `anefit run
    # --exact-products` give the same bits, step after step, on the
    # committed 4w export (int4 blocks of 32, fp16 linears).
    model = os.path.join(FIXTURES_DIR, "pte", "lfm2_export_llm_4w.pte")
    arrays = decode_inputs(tmp_path / "in.npz", 256, 3)
    session = anefit_py.Session(model, exact_products=True)
    logits = [session.run(dict(s))["aten_linear_default_112"] for s in fixture_steps(arrays)]
    anefit("run", model, "--inputs", tmp_path / "in.npz", "--exact-products", "-o",
           tmp_path / "out.npz", check=True)
    cli = load_npz(tmp_path / "out.npz")
    for k, got in enumerate(logits):
        assert np.array_equal(cli[f"step{k}/aten_linear_default_112"], got), k
    last = anefit_py.run(model, fixture_steps(arrays), exact_products=True)
    assert np.array_equal(last["aten_linear_default_112"], logits[-1])


def test_threads_and_spinning_change_no_bit(anefit_py, anefit, tmp_path):
    # Work is split over rows, never inside a sum; how idle threads wait
    # changes when they start, not what they compute.
    info, inputs, _ = fixture_io("lfm2_shortconv_d2048")
    model = fixture_package("lfm2_shortconv_d2048")
    runs = {}
    for threads, spin in ((1, True), (2, True), (2, False)):
        session = anefit_py.Session(model, threads=threads, spin=spin)
        runs[(threads, spin)] = [session.run(feed)["out"] for feed in inputs]
    for key, outs in runs.items():
        for k, (got, want) in enumerate(zip(outs, runs[(1, True)])):
            assert np.array_equal(got, want), (key, k)
    last = anefit_py.run(model, inputs, threads=2, spin=False)
    assert np.array_equal(last["out"], runs[(1, True)][-1])
    np.savez(tmp_path / "in.npz", **{f"step{k}/{n}": v for k, feed in enumerate(inputs)
                                     for n, v in feed.items()})
    anefit("run", model, "--inputs", tmp_path / "in.npz", "--threads", "2", "--no-spin", "-o",
           tmp_path / "out.npz", check=True)
    cli = load_npz(tmp_path / "out.npz")
    assert np.array_equal(cli[f"step{len(inputs) - 1}/out"], runs[(1, True)][-1])
    for bad in (-1, 1025):
        with pytest.raises(anefit_py.InputError,
                           match=f"threads: expected a count from 0 \\(every core\\) to 1024, found {bad}"):
            anefit_py.Session(model, threads=bad)
