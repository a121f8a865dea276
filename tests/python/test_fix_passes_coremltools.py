"""kv-write-static and decompose-sdpa on the real ExecuTorch exports, checked by
coremltools: the rewritten package loads through coremltools' own MIL loader (which
type-checks every op: the uint16 -> fp16 cast, the broadcasting selects and equals,
the grouped matmuls and reshapes), no slice_update or scaled_dot_product_attention is
left, and the signature (inputs, outputs, shapes, dtypes) is the original's.
"""

import os
import re

import numpy as np

import pytest

from conftest import FIXTURES_DIR, load_with_coremltools, program_op_types

EXPORTS = ["lfm2_coreml_nostate", "lfm2_export_llm_fp16", "lfm2_export_llm_4w"]


@pytest.mark.parametrize("name", EXPORTS)
def test_rewritten_export_loads_in_coremltools(anefit, tmp_path, name):
    pte = os.path.join(FIXTURES_DIR, "pte", f"{name}.pte")
    original = tmp_path / "original.mlpackage"
    fixed = tmp_path / "fixed.mlpackage"
    anefit("convert", pte, original, check=True)
    proc = anefit("fix", pte, "-o", fixed, "--passes", "kv-write-static,decompose-sdpa,canonicalize,dce",
                check=True)
    assert "slice_updates at a run-time position -> one-hot select blends" in proc.stdout

    before = load_with_coremltools(original)
    after = load_with_coremltools(fixed)
    ops_before = program_op_types(before.program, with_const=False)
    ops_after = program_op_types(after.program, with_const=False)
    assert ops_before.get("slice_update", 0) > 0
    assert "slice_update" not in ops_after
    assert "scaled_dot_product_attention" not in ops_after
    # one blend per KV write, one softmax per attention
    assert ops_after["select"] >= ops_before["slice_update"]
    assert ops_after["softmax"] == ops_before.get("scaled_dot_product_attention", 0)
    assert after.io() == before.io()


def _materialized(program, op_type):
    """{op name: dense value} of every `op_type` op, as coremltools decompresses it."""
    out = {}

    def walk(block):
        for op in block.operations:
            if op.op_type == op_type:
                out[op.name] = np.asarray(op.materialized_val_inference(), dtype=np.float64)
            for b in op.blocks:
                walk(b)

    for fn in program.functions.values():
        walk(fn)
    return out


@pytest.mark.parametrize("form", ["lut4", "lut6", "lut8"])
def test_palettized_weights_decompress_in_coremltools_as_reported(anefit, tmp_path, form):
    """requantize{to=lut4|lut6}: coremltools' own decompression of each palette
    (iOS18 constexpr_lut_to_dense semantics: palettes per group of rows,
    indices packed LSB-first, 6-bit ones across bytes) is
    compared with its decompression of the per-block weight it replaced. The
    relative RMS errors it measures are the ones fix reports."""
    pte = os.path.join(FIXTURES_DIR, "pte", "lfm2_export_llm_4w.pte")
    original = tmp_path / "original.mlpackage"
    fixed = tmp_path / "fixed.mlpackage"
    anefit("convert", pte, original, check=True)
    proc = anefit("fix", pte, "-o", fixed, "--passes", f"requantize{{to={form}}},dce",
                  "--max-rel-error", "1", "--max-ppl-rise", "10", check=True)
    m = re.search(r"weight error \(relative RMS\) mean ([0-9.]+)%, max ([0-9.]+)%", proc.stdout)
    assert m, proc.stdout
    reported_mean, reported_max = float(m.group(1)), float(m.group(2))

    before = _materialized(load_with_coremltools(original).program, "constexpr_blockwise_shift_scale")
    after = _materialized(load_with_coremltools(fixed).program, "constexpr_lut_to_dense")
    assert len(after) == 113 and set(after) <= set(before)
    errors = []
    for name, w in after.items():
        ref = before[name]
        assert w.shape == ref.shape, name
        errors.append(100 * np.sqrt(np.sum((w - ref) ** 2) / np.sum(ref ** 2)))
    assert abs(np.mean(errors) - reported_mean) < 0.01, (np.mean(errors), reported_mean)
    assert abs(np.max(errors) - reported_max) < 0.01, (np.max(errors), reported_max)


BYTES_TOKENIZER = os.path.join(os.path.dirname(__file__), "..", "lit", "runtime", "Inputs",
                               "bytes-tokenizer.json")


def _dense_weights(program):
    """{op name: value} of every const of rank 2 or more (the fp16 export's weights)."""
    out = {}

    def walk(block):
        for op in block.operations:
            if op.op_type == "const" and op.outputs[0].val is not None and \
                    np.ndim(op.outputs[0].val) >= 2:
                out[op.name] = np.asarray(op.outputs[0].val, dtype=np.float64)
            for b in op.blocks:
                walk(b)

    for fn in program.functions.values():
        walk(fn)
    return out


def _per_channel(program):
    """{op name: dense value} of each constexpr_blockwise_shift_scale (c8w/c4w)."""
    return _materialized(program, "constexpr_blockwise_shift_scale")


@pytest.mark.parametrize("form", ["lut4", "lut8"])
def test_calibrated_palettes_of_dense_weights_decompress_as_reported(anefit, tmp_path, form):
    """fix --requantize lutN --text T on an fp16 export (no per-block weights):
    its dense linear weights become palettes fitted by k-means weighted by
    the input channel energies measured on T, indices chosen by error
    feedback through the inputs' second moment. coremltools decompresses each
    to values whose relative RMS error against the original fp16 weight is
    the one fix reports."""
    pte = os.path.join(FIXTURES_DIR, "pte", "lfm2_export_llm_fp16.pte")
    text = tmp_path / "text.txt"
    text.write_text("The quick brown fox jumps over the lazy dog.")
    original = tmp_path / "original.mlpackage"
    fixed = tmp_path / "fixed.mlpackage"
    anefit("convert", pte, original, check=True)
    proc = anefit("fix", pte, "-o", fixed, "--requantize", form, "--text", text, "--tokenizer",
                  BYTES_TOKENIZER, "--max-tokens", "30", "--max-ppl-rise", "10",
                  "--max-rel-error", "10", check=True)
    assert "teacher-forced: the input channel energies of the layers reading" in proc.stdout, proc.stdout
    assert "indices by error feedback on 113 linears" in proc.stdout, proc.stdout
    m = re.search(r"weight error \(relative RMS\) mean ([0-9.]+)%, max ([0-9.]+)%", proc.stdout)
    assert m, proc.stdout
    reported_mean, reported_max = float(m.group(1)), float(m.group(2))

    before = _dense_weights(load_with_coremltools(original).program)
    after = _materialized(load_with_coremltools(fixed).program, "constexpr_lut_to_dense")
    assert after and set(after) <= set(before)
    errors = []
    for name, w in after.items():
        ref = before[name]
        assert w.shape == ref.shape, name
        errors.append(100 * np.sqrt(np.sum((w - ref) ** 2) / np.sum(ref ** 2)))
    assert abs(np.mean(errors) - reported_mean) < 0.01, (np.mean(errors), reported_mean)
    assert abs(np.max(errors) - reported_max) < 0.01, (np.max(errors), reported_max)


def test_auto_mixed_forms_decompress_as_reported(anefit, tmp_path):
    """fix --requantize auto on the 4-bit export: each weight takes its own
    form (palettes of several sizes, per-channel integers, fp16); coremltools
    decompresses every one of them to values whose error against the
    per-block weight it replaced is the weight error fix reports for it."""
    pte = os.path.join(FIXTURES_DIR, "pte", "lfm2_export_llm_4w.pte")
    original = tmp_path / "original.mlpackage"
    fixed = tmp_path / "fixed.mlpackage"
    anefit("convert", pte, original, check=True)
    proc = anefit("fix", pte, "-o", fixed, "--passes",
                  "requantize{to=auto max-error=0.09},dce", "--max-rel-error", "10",
                  "--max-ppl-rise", "10", check=True)
    found = re.findall(r"requantize: auto: '([^']+)' -> (\S+) \([0-9.]+ bits per weight, "
                       r"weight error ([0-9.]+)%", proc.stdout)
    choices = {name: (form, float(err)) for name, form, err in found}
    assert len(choices) > 10, proc.stdout
    forms = {f for f, _ in choices.values()}
    assert len(forms) >= 2, forms  # mixed

    before = _materialized(load_with_coremltools(original).program,
                           "constexpr_blockwise_shift_scale")
    program = load_with_coremltools(fixed).program
    after = _materialized(program, "constexpr_lut_to_dense")
    after.update(_per_channel(program))
    checked = 0
    for name, (form, reported) in choices.items():
        if form.startswith("fp16"):
            continue
        w, ref = after[name], before[name]
        assert w.shape == ref.shape, name
        err = 100 * np.sqrt(np.sum((w - ref) ** 2) / np.sum(ref ** 2))
        assert abs(err - reported) < 0.01, (name, form, err, reported)
        checked += 1
    assert checked > 10


def test_tied_embedding_palette_decompresses_for_the_gather_and_the_head(anefit, tmp_path):
    """requantize weights=all on a tied embedding (tests/lit/transforms/
    requantize-tied.mil): the one palettized weight is what both the gather
    and the LM head read in the package coremltools loads, and it decompresses
    to values whose error against the original is the one fix reports."""
    mil = os.path.join(os.path.dirname(__file__), "..", "lit", "transforms",
                       "requantize-tied.mil")
    original = tmp_path / "original.mlpackage"
    fixed = tmp_path / "fixed.mlpackage"
    anefit("convert", mil, original, check=True)
    proc = anefit("fix", mil, "-o", fixed, "--passes", "requantize{to=lut4 weights=all},dce",
                  "--max-rel-error", "10", check=True)
    m = re.search(r"weight error \(relative RMS\) mean ([0-9.]+)%, max ([0-9.]+)% \('tied'\)",
                  proc.stdout)
    assert m, proc.stdout
    program = load_with_coremltools(fixed).program
    after = _materialized(program, "constexpr_lut_to_dense")
    assert set(after) == {"tied"}, after.keys()
    ref = _dense_weights(load_with_coremltools(original).program)["tied"]
    err = 100 * np.sqrt(np.sum((after["tied"] - ref) ** 2) / np.sum(ref ** 2))
    assert abs(err - float(m.group(1))) < 0.01, (err, m.group(1))
    readers = {}
    for fn in program.functions.values():
        for op in fn.operations:
            for name, var in op.inputs.items():
                if getattr(var, "op", None) is not None and var.op.name == "tied":
                    readers[op.op_type] = name
    assert readers == {"gather": "x", "linear": "weight"}, readers
