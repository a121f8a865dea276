"""The reference outputs in expected.npz belong to the model in model.mlpackage.

expected.npz is computed by the fixture generator from the PyTorch-style numpy
modules in tests/fixtures/gen/reference.py. Here the package is loaded back through
coremltools (load_spec + milproto loader: the weights come from weight.bin, the ops
from the protobuf) and executed by a small, separate numpy evaluator of the MIL ops
the fixtures use. Both must agree closely; that checks the package's weights, op
wiring and op semantics against the module-level reference.

The evaluator keeps values in float64 and rounds to fp16 only where the program
stores fp16 data: `cast` to fp16 and the write of an fp16 state. This is the same
rounding the reference applies, so agreement is near float64 precision.
"""

import math
import os

import numpy as np
import pytest

from conftest import (
    fixture_functions,
    fixture_info,
    fixture_names,
    fixture_package,
    fixture_steps,
    load_npz,
    load_with_coremltools,
)

NAMES = fixture_names()
FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures")


# ---------------------------------------------------------------------------------
# A small MIL evaluator (numpy)
# ---------------------------------------------------------------------------------

def _pads(pad_type, pad, in_sizes, kernel, strides, dilations):
    n = len(in_sizes)
    if pad_type == "valid":
        return [(0, 0)] * n
    if pad_type == "custom":
        return [(int(pad[2 * i]), int(pad[2 * i + 1])) for i in range(n)]
    if pad_type == "same":
        out = []
        for i in range(n):
            eff = (kernel[i] - 1) * dilations[i] + 1
            o = math.ceil(in_sizes[i] / strides[i])
            total = max((o - 1) * strides[i] + eff - in_sizes[i], 0)
            out.append((total // 2, total - total // 2))
        return out
    raise NotImplementedError(pad_type)


def _conv(x, weight, bias, strides, pad_type, pad, dilations, groups):
    """N-d grouped convolution by gathering windows (sliding_window_view) and einsum."""
    nsp = x.ndim - 2
    strides = list(strides) if strides is not None else [1] * nsp
    dilations = list(dilations) if dilations is not None else [1] * nsp
    kernel = weight.shape[2:]
    pads = _pads(pad_type, pad, x.shape[2:], kernel, strides, dilations)
    x = np.pad(x, [(0, 0), (0, 0)] + pads)
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    win = np.lib.stride_tricks.sliding_window_view(x, eff, axis=tuple(range(2, 2 + nsp)))
    sl = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides) +\
        tuple(slice(None, None, d) for d in dilations)
    win = win[sl]                                     # [N, C, *out, *k]
    cout, cin_g = weight.shape[0], weight.shape[1]
    n = x.shape[0]
    # split channels into groups: windows [N, G, Cin/G, *out, *k], weights [G, Cout/G, Cin/G, *k]
    xs = win.reshape((n, groups, cin_g) + win.shape[2:])
    ws = weight.reshape((groups, cout // groups, cin_g) + tuple(kernel))
    if nsp == 1:
        y = np.einsum("ngcok,gmck->ngmo", xs, ws)
    else:
        y = np.einsum("ngcopkl,gmckl->ngmop", xs, ws)
    y = y.reshape((n, cout) + y.shape[3:])
    if bias is not None:
        y = y + bias.reshape((1, -1) + (1,) * nsp)
    return y


def _pool(x, kernel, strides, kind):
    win = np.lib.stride_tricks.sliding_window_view(x, tuple(kernel), axis=(2, 3))
    win = win[:, :, ::strides[0], ::strides[1]]
    return win.max(axis=(-2, -1)) if kind == "max" else win.mean(axis=(-2, -1))


def _softmax(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _slices(begin, end, shape):
    return tuple(slice(int(b), int(e)) for b, e in zip(begin, end))


_DTYPES = {"fp16": np.float16, "fp32": np.float32, "int32": np.int32, "bool": bool}


class MilEvaluator:
    """Runs the main function of a pymil Program on numpy inputs, states persisting."""

    def __init__(self, program, function="main"):
        self.fn = program.functions[function]
        self.states = {}
        self._consts = {}
        from coremltools.converters.mil.mil import types

        for name, var in self.fn.inputs.items():
            if types.is_state(var.sym_type):
                self.states[name] = np.zeros(var.shape, dtype=np.float64)

    def run(self, inputs):
        env = {}
        for name, var in self.fn.inputs.items():
            if name in self.states:
                env[name] = name                      # a state is referred to by name
            else:
                env[name] = np.asarray(inputs[name])
                if env[name].dtype.kind == "f":
                    env[name] = env[name].astype(np.float64)

        def val(v):
            if v is None:
                return None
            if isinstance(v, (list, tuple)):
                return [val(e) for e in v]
            if v.name in env:
                return env[v.name]
            if v.val is not None:
                a = np.asarray(v.val)
                return a.astype(np.float64) if a.dtype.kind == "f" else a
            raise KeyError(v.name)

        for op in self.fn.operations:
            a = {k: val(v) for k, v in op.inputs.items()}
            outs = self._op(op, a)
            if not isinstance(outs, (list, tuple)):
                outs = [outs]
            for var, o in zip(op.outputs, outs):
                env[var.name] = o
        return {v.name: env[v.name] for v in self.fn.outputs}

    def _op(self, op, a):
        t = op.op_type
        if t == "const":
            key = op.outputs[0].name
            if key not in self._consts:          # weights are converted once, not per step
                c = np.asarray(op.outputs[0].val)
                self._consts[key] = c.astype(np.float64) if c.dtype.kind == "f" else c
            return self._consts[key]
        if t == "cast":
            dt = _DTYPES[str(a["dtype"])]
            r = a["x"].astype(dt)
            return r.astype(np.float64) if r.dtype.kind == "f" else r
        if t == "linear":
            y = a["x"] @ a["weight"].T
            return y + a["bias"] if a.get("bias") is not None else y
        if t == "matmul":
            x, y = a["x"], a["y"]
            if a.get("transpose_x"):
                x = np.swapaxes(x, -1, -2)
            if a.get("transpose_y"):
                y = np.swapaxes(y, -1, -2)
            return np.matmul(x, y)
        if t in ("add", "mul", "sub", "real_div"):
            f = {"add": np.add, "mul": np.multiply, "sub": np.subtract, "real_div": np.divide}[t]
            return f(a["x"], a["y"])
        if t == "less_equal":
            return np.less_equal(a["x"], a["y"])
        if t == "select":
            return np.where(a["cond"], a["a"], a["b"])
        if t == "transpose":
            return np.transpose(a["x"], [int(p) for p in a["perm"]])
        if t == "reshape":
            return np.reshape(a["x"], [int(s) for s in a["shape"]])
        if t == "tile":
            return np.tile(a["x"], [int(r) for r in a["reps"]])
        if t == "split":
            n = int(a["num_splits"])
            return np.split(a["x"], n, axis=int(a["axis"]))
        if t == "concat":
            return np.concatenate(a["values"], axis=int(a["axis"]))
        if t == "slice_by_index":
            return a["x"][_slices(a["begin"], a["end"], a["x"].shape)]
        if t == "slice_update":
            r = np.array(a["x"], copy=True)
            r[_slices(a["begin"], a["end"], r.shape)] = a["update"]
            return r
        if t == "read_state":
            return self.states[a["input"]]
        if t == "coreml_update_state":
            from coremltools.converters.mil.mil import types

            name = a["state"]
            value = a["value"]
            if types.builtin_to_string(op.outputs[0].dtype) == "fp16":
                value = value.astype(np.float16).astype(np.float64)
            self.states[name] = value
            return value
        if t == "gather":
            return np.take(a["x"], a["indices"].astype(np.int64), axis=int(a["axis"]))
        if t == "range_1d":
            return np.arange(int(a["start"]), int(a["end"]), int(a["step"]), dtype=np.int32)
        if t == "rsqrt":
            return 1.0 / np.sqrt(a["x"] + float(a.get("epsilon", 1e-12)))
        if t == "reduce_mean":
            return np.mean(a["x"], axis=tuple(int(x) for x in a["axes"]),
                           keepdims=bool(a["keep_dims"]))
        if t == "softmax":
            return _softmax(a["x"], int(a["axis"]))
        if t == "relu":
            return np.maximum(a["x"], 0)
        if t == "silu":
            return a["x"] / (1 + np.exp(-a["x"]))
        if t == "gelu":
            assert str(a.get("mode", "EXACT")) == "EXACT"
            erf = np.vectorize(math.erf)
            return 0.5 * a["x"] * (1 + erf(a["x"] / math.sqrt(2)))
        if t == "conv":
            return _conv(a["x"], a["weight"], a.get("bias"), a.get("strides"),
                         str(a.get("pad_type", "valid")), a.get("pad"), a.get("dilations"),
                         int(a.get("groups", 1)))
        if t == "batch_norm":
            shp = (1, -1) + (1,) * (a["x"].ndim - 2)
            return (a["x"] - a["mean"].reshape(shp)) / np.sqrt(
                a["variance"].reshape(shp) + float(a["epsilon"])) * a["gamma"].reshape(shp) +\
                a["beta"].reshape(shp)
        if t in ("max_pool", "avg_pool"):
            assert str(a["pad_type"]) == "valid"
            return _pool(a["x"], [int(k) for k in a["kernel_sizes"]],
                         [int(s) for s in a["strides"]], t[:3])
        if t == "layer_norm":
            axes = tuple(int(x) for x in a["axes"])
            mu = a["x"].mean(axis=axes, keepdims=True)
            var = ((a["x"] - mu) ** 2).mean(axis=axes, keepdims=True)
            return (a["x"] - mu) / np.sqrt(var + float(a["epsilon"])) * a["gamma"] + a["beta"]
        if t == "scaled_dot_product_attention":
            q, k, v = a["query"], a["key"], a["value"]
            s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
            m = a.get("attn_mask")
            if m is not None:
                s = np.where(m, s, -np.inf) if m.dtype == bool else s + m
            return _softmax(s, -1) @ v
        if t == "constexpr_blockwise_shift_scale":
            # dense = (data - offset) * scale, scale/offset repeated over each block
            data = a["data"].astype(np.float64)
            def expand(p):
                for ax in range(data.ndim):
                    p = np.repeat(p, data.shape[ax] // p.shape[ax], axis=ax)
                return p
            off = a.get("offset")
            if off is not None:
                data = data - expand(off.astype(np.float64))
            dense = data * expand(a["scale"])
            # the op's output is an fp16 (or fp32) tensor: the weights are stored rounded
            from coremltools.converters.mil.mil import types
            dt = _DTYPES[types.builtin_to_string(op.outputs[0].dtype)]
            return dense.astype(dt).astype(np.float64)
        if t == "constexpr_lut_to_dense":
            # lut [G0, ..., G(r-1), palette, vector]; each axis of indices is split in
            # groups, and an element takes its group's palette entry
            idx = a["indices"].astype(np.int64)
            lut = a["lut"]
            assert lut.shape[-1] == 1, "vector palettes are not used by the fixtures"
            grid = np.indices(idx.shape)
            group = tuple(grid[ax] // (idx.shape[ax] // lut.shape[ax]) for ax in range(idx.ndim))
            return lut[group + (idx, 0)]
        raise NotImplementedError(f"evaluator has no kernel for {t}")


# ---------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------

def _load(name):
    pkg = fixture_package(name)
    if pkg is None:
        pytest.skip(f"{name}: package is generated on demand")
    return load_with_coremltools(pkg).program


@pytest.mark.parametrize("name", NAMES)
def test_package_reproduces_expected(name):
    _check_program_against_expected(name, _load(name))


@pytest.mark.parametrize("name", NAMES)
def test_anefit_round_trip_keeps_the_numbers(name, anefit, tmp_path):
    """What `anefit convert` writes (package -> MIL text -> package) computes the same
    outputs: weights, constants and op wiring survive the text form exactly."""
    pkg = fixture_package(name)
    if pkg is None:
        pytest.skip(f"{name}: package is generated on demand")
    mil = tmp_path / "model.mil"
    out = tmp_path / "back.mlpackage"
    anefit("convert", pkg, mil, check=True)
    anefit("convert", mil, out, check=True)
    _check_program_against_expected(name, load_with_coremltools(out).program)


def _check_program_against_expected(name, prog):
    info = fixture_info(name)
    worst = 0.0
    checked = 0
    for fn, fdesc, in_path, ex_path in fixture_functions(name):
        ev = MilEvaluator(prog, fn)            # every function starts from zero states
        inputs = load_npz(in_path)
        expected = load_npz(ex_path)
        in_steps = fixture_steps(inputs) if "steps" in info else [inputs]
        ex_steps = fixture_steps(expected) if "steps" in info else [expected]
        for k, (si, se) in enumerate(zip(in_steps, ex_steps)):
            outs = ev.run(si)
            for oname in fdesc["outputs"]:
                want = se[oname].astype(np.float64)
                got = outs[oname].astype(se[oname].dtype).astype(np.float64)
                scale = max(1.0, float(np.max(np.abs(want))))
                err = float(np.max(np.abs(got - want))) / scale
                worst = max(worst, err)
                checked += 1
                assert err < 1e-5, f"{name} {fn} step {k} output {oname}: max rel error {err}"
            for sname in fdesc["states"] if info.get("stateful") else []:
                want = se["state/" + sname]
                got = ev.states[sname].astype(np.float16)
                # fp16 storage: allow one fp16 ulp where float64 sums differ in the last bit
                np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                           rtol=2 ** -10, atol=2 ** -24,
                                           err_msg=f"{name} {fn} step {k} state {sname}")
    assert checked >= 1
    assert worst < 1e-5


def test_shortconv_decode_formula():
    """lfm2.md's decode form of the short conv (three multiply-adds per channel,
    new_state = [s1, Bx]) applied to the weights read back from the package gives
    the recorded outputs."""
    prog = _load("lfm2_shortconv")
    consts = {op.outputs[0].name: op.outputs[0].val
              for op in prog.functions["main"].operations if op.op_type == "const"}
    consts = {k: np.asarray(v, np.float64) for k, v in consts.items()
              if isinstance(v, np.ndarray) and v.dtype.kind == "f"}
    w_in = consts["in_proj_weight_0"]
    w_conv = consts["conv_weight_0"][:, 0, :]
    w_out = consts["out_proj_weight_0"]
    d = w_out.shape[0]
    inputs = fixture_steps(load_npz(os.path.join(FIXTURES, "lfm2_shortconv", "inputs.npz")))
    expected = fixture_steps(load_npz(os.path.join(FIXTURES, "lfm2_shortconv", "expected.npz")))
    s0 = np.zeros(d)
    s1 = np.zeros(d)
    for step_in, step_ex in zip(inputs, expected):
        x = step_in["x"].astype(np.float16).astype(np.float64).reshape(d)
        bcx = w_in @ x
        b, c, xv = bcx[:d], bcx[d:2 * d], bcx[2 * d:]
        bx = b * xv
        conv = w_conv[:, 0] * s0 + w_conv[:, 1] * s1 + w_conv[:, 2] * bx
        out = w_out @ (c * conv)
        s0, s1 = s1, bx.astype(np.float16).astype(np.float64)
        np.testing.assert_allclose(out, step_ex["out"].reshape(d), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(np.stack([s0, s1], -1).astype(np.float16),
                                      step_ex["state/conv_state"][0])
