"""anefit.check(pte, etrecord=...): each finding's source, through the Python
API, on the export_llm fixture and its ETRecord."""

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
