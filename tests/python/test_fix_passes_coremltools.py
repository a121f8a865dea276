"""kv-write-static and decompose-sdpa on the real ExecuTorch exports, checked by
coremltools: the rewritten package loads through coremltools' own MIL loader (which
type-checks every op: the uint16 -> fp16 cast, the broadcasting selects and equals,
the grouped matmuls and reshapes), no slice_update or scaled_dot_product_attention is
left, and the signature (inputs, outputs, shapes, dtypes) is the original's.
"""

import os

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
