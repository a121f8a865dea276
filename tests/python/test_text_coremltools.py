"""anefit-opt reads the text coremltools prints for a program (str(prog)).

Programs are built with coremltools' MIL builder and printed by coremltools
itself; anefit-opt must parse every one, keep every op, and print text that
parses back to the same text. Programs whose constants all have at most 10
elements print them inline and must parse strictly; larger constants are
hidden by coremltools and need --allow-undefined.

Needs ANEFIT_OPT_BIN (set by ctest) and coremltools; skips without them.
"""

import os
import re
import subprocess

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")
from coremltools.converters.mil import Builder as mb  # noqa: E402
from coremltools.converters.mil.mil import types  # noqa: E402
from coremltools.converters.mil.mil.types.symbolic import is_symbolic  # noqa: E402,F401
from coremltools.converters.mil.mil import get_new_symbol  # noqa: E402

OPT = os.environ.get("ANEFIT_OPT_BIN", "")


def run_opt(text, *args):
    return subprocess.run([OPT, *args, "-"], input=text, capture_output=True, text=True,
                          timeout=60)


def prog_relu():
    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 2, 3))])
    def prog(x):
        return mb.relu(x=x, name="relu_0")
    return prog


def prog_elementwise_literals():
    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3)), mb.TensorSpec(shape=(3,))],
                opset_version=ct.target.iOS17)
    def prog(x, b):
        y = mb.add(x=x, y=1.5)
        y = mb.mul(x=y, y=b)
        y = mb.reduce_sum(x=y, axes=[1], keep_dims=True)
        y = mb.cast(x=y, dtype="fp16")
        s = mb.shape(x=x)
        z = mb.reshape(x=x, shape=[3, 2])
        parts = mb.split(x=z, num_splits=3, axis=0)
        c = mb.concat(values=[parts[0], parts[1]], axis=1, interleave=False)
        return y, s, c
    return prog


def prog_state():
    @mb.program(input_specs=[mb.TensorSpec((1, 4), dtype=types.fp16),
                             mb.StateTensorSpec((1, 8), dtype=types.fp16)],
                opset_version=ct.target.iOS18)
    def prog(x, k_cache):
        r = mb.read_state(input=k_cache)
        u = mb.slice_update(x=r, update=x, begin=[0, 0], end=[1, 4])
        return mb.coreml_update_state(state=k_cache, value=u)
    return prog


def prog_control_flow():
    @mb.program(input_specs=[mb.TensorSpec(shape=(2,)), mb.TensorSpec(shape=(1,))])
    def prog(x, a):
        p = mb.greater(x=mb.reduce_sum(x=x), y=0.0)
        c = mb.cond(pred=p, _true_fn=lambda: mb.add(x=x, y=1.0),
                    _false_fn=lambda: mb.sub(x=x, y=1.0))

        def cond_fn(i):
            return mb.less(x=i, y=[10.0])

        def body_fn(i):
            return mb.add(x=i, y=[1.0])

        w = mb.while_loop(_cond=cond_fn, _body=body_fn, loop_vars=(a,))
        return c, w
    return prog


def prog_symbolic():
    s0 = get_new_symbol()

    @mb.program(input_specs=[mb.TensorSpec(shape=(s0, 4))])
    def prog(x):
        y = mb.softmax(x=x, axis=-1)
        return mb.transpose(x=y, perm=[1, 0])
    return prog


def prog_weights():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 4)).astype(np.float32)
    b = rng.standard_normal((8,)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 4))])
    def prog(x):
        y = mb.linear(x=x, weight=w, bias=b)
        y = mb.gelu(x=y, mode="TANH_APPROXIMATION")
        return mb.layer_norm(x=y, axes=[-1], epsilon=1e-5)
    return prog


def prog_conv():
    w = np.ones((4, 1, 3), dtype=np.float16)

    @mb.program(input_specs=[mb.TensorSpec((1, 4, 8), dtype=types.fp16)],
                opset_version=ct.target.iOS17)
    def prog(x):
        y = mb.conv(x=x, weight=w, groups=4, pad_type="valid", strides=[1], dilations=[1])
        return mb.sigmoid(x=y)
    return prog


# (builder, needs --allow-undefined because constants are hidden)
PROGRAMS = {
    "relu": (prog_relu, False),
    "elementwise_literals": (prog_elementwise_literals, False),
    "state": (prog_state, False),
    "control_flow": (prog_control_flow, False),
    "symbolic": (prog_symbolic, False),
    "weights": (prog_weights, True),
    "conv": (prog_conv, True),
}


def non_const_op_names(prog):
    names = []

    def walk(block):
        for op in block.operations:
            if op.op_type != "const":
                names.append(op.name)
            for b in op.blocks:
                walk(b)

    for f in prog.functions.values():
        walk(f)
    return names


@pytest.fixture(scope="module")
def opt():
    if not OPT or not os.path.exists(OPT):
        pytest.skip("ANEFIT_OPT_BIN not set or anefit-opt not built")
    return OPT


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_anefit_opt_parses_coremltools_print(opt, name):
    build, hidden = PROGRAMS[name]
    prog = build()
    text = str(prog)
    args = ["--allow-undefined"] if hidden else []
    res = run_opt(text, *args)
    assert res.returncode == 0, f"anefit-opt failed on:\n{text}\n{res.stderr}"
    out = res.stdout
    for op_name in non_const_op_names(prog):
        assert f'name="{op_name}"' in out, f"op {op_name} lost:\n{out}"
    # The printed form is a fixpoint.
    again = run_opt(out, *args)
    assert again.returncode == 0, again.stderr
    assert again.stdout == out
    if hidden:
        strict = run_opt(text)
        assert strict.returncode == 2
        assert re.search(r"<stdin>:\d+:\d+: undefined value '%", strict.stderr), strict.stderr


def test_state_program_keeps_state_and_opset(opt):
    out = run_opt(str(prog_state()), "--verify").stdout
    assert "main[CoreML8](" in out
    assert "(1, 8, fp16)(State)" in out
    assert '"specificationVersion":9' in out
    assert '"state":[{"name":"k_cache"' in out
