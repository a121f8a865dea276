"""The one weight counter (src/ops/Weights.h) against coremltools' own sizes.

A small program is compressed by coremltools' own optimizers (4-bit blockwise,
8-bit per-channel, 4-bit palettized, sparse) and saved. coremltools' view of
the saved package is the reference: the stored size is what its milproto
loader types each const as (sub-byte dtypes packed), cross-checked with the
sizes its blob writer recorded in weight.bin; the dense size is what the
constexpr ops decompress to. `show`, `check` and `split` must report the same
numbers."""

import json
import os
import struct

import numpy as np
import pytest

from conftest import have_coremltools

BLOB_SENTINEL = 0xDEADBEEF


def build(tmp_path, scheme):
    import coremltools as ct
    import coremltools.optimize.coreml as cto
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    rng = np.random.default_rng(7)
    w1 = rng.standard_normal((256, 512)).astype(np.float16)
    w2 = rng.standard_normal((512, 256)).astype(np.float16)
    if scheme == "sparse":
        w1[:, ::2] = 0
        w2[::2, :] = 0

    @mb.program(input_specs=[mb.TensorSpec((1, 512), dtype=types.fp16)],
                opset_version=ct.target.iOS18)
    def prog(x):
        y = mb.linear(x=x, weight=w1, name="proj")
        return mb.linear(x=y, weight=w2, name="proj2")

    model = ct.convert(prog, minimum_deployment_target=ct.target.iOS18,
                       compute_precision=ct.precision.FLOAT16)
    if scheme == "blockwise4":
        op = cto.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int4",
                                         granularity="per_block", block_size=32,
                                         weight_threshold=1)
        model = cto.linear_quantize_weights(model, cto.OptimizationConfig(global_config=op))
    elif scheme == "perchannel8":
        op = cto.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8",
                                         granularity="per_channel", weight_threshold=1)
        model = cto.linear_quantize_weights(model, cto.OptimizationConfig(global_config=op))
    elif scheme == "palettized4":
        op = cto.OpPalettizerConfig(mode="kmeans", nbits=4, weight_threshold=1)
        model = cto.palettize_weights(model, cto.OptimizationConfig(global_config=op))
    elif scheme == "sparse":
        op = cto.OpThresholdPrunerConfig(threshold=1e-3, minimum_sparsity_percentile=0.1,
                                         weight_threshold=1)
        model = cto.prune_weights(model, cto.OptimizationConfig(global_config=op))
    path = str(tmp_path / f"{scheme}.mlpackage")
    model.save(path)
    return path


def coremltools_sizes(path):
    """(stored, dense) bytes as coremltools sees the saved package."""
    import coremltools as ct
    from coremltools.converters.mil.frontend.milproto.load import load as milload
    from coremltools.converters.mil.mil import types

    spec = ct.utils.load_spec(path)
    weights = os.path.join(path, "Data", "com.apple.CoreML", "weights")
    prog = milload(spec, specification_version=spec.specificationVersion,
                   file_weights_dir=weights)

    def nbytes(var):
        bits = types.type_mapping.nptype_from_builtin(var.dtype)  # noqa: F841 (valid dtype)
        width = {"int4": 4, "uint4": 4, "int2": 2, "uint2": 2, "int1": 1, "uint1": 1,
                 "int3": 3, "uint3": 3, "uint6": 6, "int6": 6}.get(
                     types.builtin_to_string(var.dtype))
        n = int(np.prod(var.shape)) if var.shape else 1
        if width is None:
            width = np.dtype(types.nptype_from_builtin(var.dtype)).itemsize * 8
        return (n * width + 7) // 8

    stored = dense = 0
    ops = list(prog.functions["main"].operations)
    for op in ops:
        if op.op_type == "const" and types.builtin_to_string(op.outputs[0].dtype) != "str":
            stored += nbytes(op.outputs[0])
    for op in ops:
        if op.op_type == "const" or op.op_type.startswith("constexpr_"):
            continue
        for var in op.inputs.values():
            for v in var if isinstance(var, (list, tuple)) else [var]:
                producer = v.op
                if producer is not None and (producer.op_type == "const" or
                                             producer.op_type.startswith("constexpr_")):
                    if producer.op_type.startswith("constexpr_") or v.rank > 0:
                        dense += nbytes(v)
    return stored, dense


def blob_bytes(path):
    """Sum of the data sizes coremltools' blob writer recorded in weight.bin."""
    with open(os.path.join(path, "Data", "com.apple.CoreML", "weights", "weight.bin"),
              "rb") as f:
        data = f.read()
    count = struct.unpack_from("<I", data, 0)[0]
    total, offset = 0, 64
    for _ in range(count):
        sentinel, _dtype, size, data_offset = struct.unpack_from("<IIQQ", data, offset)
        assert sentinel == BLOB_SENTINEL
        total += size
        offset = (data_offset + size + 63) // 64 * 64
    return total


@pytest.mark.parametrize("scheme", ["blockwise4", "perchannel8", "palettized4", "sparse"])
def test_show_check_split_agree_with_coremltools(anefit, tmp_path, scheme):
    if not have_coremltools():
        pytest.skip("coremltools is not installed")
    path = build(tmp_path, scheme)
    stored, dense = coremltools_sizes(path)
    assert stored < dense, "the program should be compressed"

    show = json.loads(anefit("show", path, "--json").stdout)["parameters"]
    proc = anefit("check", path, "--json")
    assert proc.returncode in (0, 1), proc.stderr
    check = json.loads(proc.stdout)
    plan_path = str(tmp_path / "plan.json")
    proc = anefit("split", path, "--plan", plan_path)
    assert proc.returncode == 0, proc.stderr
    with open(plan_path) as f:
        plan = json.load(f)

    # Every weight of these programs is a blob, so the blobs coremltools wrote
    # add up to the stored size too.
    assert blob_bytes(path) == stored
    assert show["bytes"] == stored
    assert show["denseBytes"] == dense
    assert check["weightBytes"] == stored
    assert check["denseWeightBytes"] == dense
    assert check["functions"][0]["weightBytes"] == stored
    assert plan["weightBytes"] == stored
    assert plan["denseWeightBytes"] == dense
    schemes = {s["scheme"] for s in show["byScheme"]}
    expected = {"blockwise4": "blockwise", "perchannel8": "per-channel",
                "palettized4": "palettized", "sparse": "sparse"}[scheme]
    assert expected in schemes, show["byScheme"]
