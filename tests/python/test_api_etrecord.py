"""anefit.check(pte, etrecord=...): each finding's source, through the Python
API, on the export_llm fixture and its ETRecord."""

import json
import os

import pytest

from conftest import FIXTURES_DIR

PTE = os.path.join(FIXTURES_DIR, "pte", "lfm2_export_llm_4w_et.pte")
ETRECORD = os.path.join(FIXTURES_DIR, "pte", "lfm2_export_llm_4w_et.etrecord")


def test_findings_carry_their_source(anefit_py):
    report = anefit_py.check(PTE, etrecord=ETRECORD)
    writes = [f for f in report.findings if f.rule == "ANE-STATE-006"]
    assert len(writes) == 12
    first = writes[0].source
    assert first["file"] == "executorch/examples/models/llama/source_transformation/sdpa.py"
    assert first["line"] in (461, 462)
    assert first["module"] == "layers.2.attention"
    assert first["buffer"].startswith("layers.2.attention.kv_cache.")
    whole = [f for f in report.findings if not f.op]
    assert whole and all(f.source["note"] == "a finding about the whole function" for f in whole)
    assert all(f.source is None for f in anefit_py.check(PTE).findings)


def test_source_root_and_refusals(anefit_py):
    report = anefit_py.check(PTE, etrecord=ETRECORD, source_root="/home/me/executorch")
    files = {f.source["file"] for f in report.findings if f.source and f.source["line"]}
    assert "examples/models/llama/norm.py" in files
    other = os.path.join(FIXTURES_DIR, "pte", "lfm2_export_llm_4w.pte")
    with pytest.raises(anefit_py.InputError, match="another export"):
        anefit_py.check(other, etrecord=ETRECORD)


def test_writes_and_reads_of_buffers(anefit_py):
    report = anefit_py.check(PTE, etrecord=ETRECORD)
    writes = [f for f in report.findings if f.rule == "ANE-STATE-006"]
    # The K/V writes' outputs are what ExecuTorch copies back into the caches.
    assert all(f.source["writes_buffer"] for f in writes)


def test_split_and_fix_take_the_etrecord(anefit_py, tmp_path):
    plan = anefit_py.split(PTE, etrecord=ETRECORD, source_root="/src/executorch")
    ops = [o for r in json.loads(plan.to_json())["functions"][0]["regions"] for o in r["ops"]]
    assert ops and all("source" in o for o in ops)
    slice_op = next(o for o in ops if o["name"] == "aten_slice_copy_tensor_cast_fp16")
    assert slice_op["source"]["file"] == "examples/models/lfm2/short_conv.py"
    assert slice_op["source"]["buffer"] == "layers.0.conv.conv_state"
    assert slice_op["source"]["bufferAccess"] == "writes"
    assert any(f.source for f in plan.report.findings)

    result = anefit_py.fix(PTE, tmp_path / "fixed.pte", etrecord=ETRECORD, verify=False)
    before = [f for f in result.delegates[0].before.findings if f.rule == "ANE-STATE-006"]
    assert len(before) == 12 and all(f.source["line"] in (461, 462) for f in before)
    after = result.delegates[0].after
    gathers = [f for f in after.findings if f.rule == "ANE-OP-007"]
    assert gathers and all(f.source is not None for f in gathers)

    with pytest.raises(anefit_py.InputError, match="source_root: expected etrecord"):
        anefit_py.split(PTE, source_root="/src")
