"""`anefit check` and `anefit rules` from the command line: exit codes, the JSON
report (schema anefit.check/2), the issue-3 fixture cases and the weight file
never being read."""

import json
import os
import shutil

import pytest

from conftest import REPO_ROOT, fixture_package


def report_of(anefit, path, *args):
    proc = anefit("check", path, "--json", *args)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def rule_ids(report):
    return {f["rule"] for f in report["findings"]}


def test_lfm2_shortconv_is_at_risk_for_state_reasons(anefit):
    """One narrow conv state: every public failure of such a state had a KV
    state beside it, so the state rules are contested: at-risk, exit 0 by
    default and 1 with --fail-on at-risk."""
    path = fixture_package("lfm2_shortconv")
    if path is None:
        pytest.skip("fixture missing")
    code, report = report_of(anefit, path)
    assert code == 0
    assert report_of(anefit, path, "--fail-on", "at-risk")[0] == 1
    assert report["schema"] == "anefit.check/2"
    assert report["verdict"] == "at-risk"
    top = report["findings"][0]
    assert top["rule"].startswith("ANE-STATE-")
    assert top["effect"] in ("compile-fail", "runtime-fail")
    assert top["level"] == "at-risk" and top["certainty"] == "contested"
    assert all(c["quote"] is not None and c["certainty"] for c in top["failEvidence"])
    assert "`anefit fix` runs state-to-io" in top["fix"]
    assert "state-to-io" in top["fixPasses"]
    assert {"ANE-STATE-004", "ANE-STATE-005"} <= rule_ids(report)
    placements = {p["name"]: p for p in report["functions"][0]["placement"]}
    assert placements["read_conv_state"]["placement"] == "ane"
    assert placements["read_conv_state"]["atRisk"]


def test_state_as_io_has_no_state_finding(anefit):
    path = fixture_package("lfm2_shortconv_io")
    if path is None:
        pytest.skip("fixture missing")
    code, report = report_of(anefit, path)
    assert code == 0, report["findings"]
    assert not [r for r in rule_ids(report) if r.startswith("ANE-STATE-")]
    assert report["verdict"] != "ane-fails"


def test_cache_input_written_at_runtime_position_is_at_risk(anefit):
    """The real ExecuTorch export shape: the KV caches are plain delegate inputs
    written in-graph at the input position. Contested, so at-risk: exit 0 by
    default, 1 with --fail-on at-risk, both sides' evidence in the report."""
    path = os.path.join(REPO_ROOT, "tests", "fixtures", "pte", "lfm2_coreml_nostate.pte")
    code, report = report_of(anefit, path)
    assert code == 0
    assert report["verdict"] == "at-risk"
    hits = [f for f in report["findings"] if f["rule"] == "ANE-STATE-006"]
    assert len(hits) == 2
    for f in hits:
        assert f["opType"] == "slice_update"
        assert f["level"] == "at-risk" and f["certainty"] == "contested"
        assert f["effect"] == "compile-fail"
        assert f["failEvidence"] and f["passEvidence"]
        assert "Anemll" in f["contradiction"] and "MLComputePlan" in f["settle"]
    code, _ = report_of(anefit, path, "--fail-on", "at-risk")
    assert code == 1


def test_same_report_without_weight_file(anefit, tmp_path):
    path = fixture_package("lfm2_shortconv")
    if path is None:
        pytest.skip("fixture missing")
    copy = tmp_path / "model.mlpackage"
    shutil.copytree(path, copy)
    removed = [p for p in copy.rglob("weight.bin")]
    assert removed
    for p in removed:
        p.unlink()
    a = anefit("check", path, "--json")
    b = anefit("check", str(copy), "--json")
    assert a.returncode == b.returncode
    ja, jb = json.loads(a.stdout), json.loads(b.stdout)
    ja.pop("model"), jb.pop("model")
    assert ja == jb


def test_fail_on_threshold_and_usage_errors(anefit):
    path = fixture_package("lfm2_shortconv_io")
    if path is None:
        pytest.skip("fixture missing")
    assert anefit("check", path).returncode == 0
    # The state-as-IO block still has fallbacks or slow findings below compile-fail.
    assert anefit("check", path, "--fail-on", "slow").returncode == 1
    bad = anefit("check", path, "--chip", "m9")
    assert bad.returncode == 2 and "--chip" in bad.stderr and "\n" == bad.stderr[-1]
    assert anefit("check", path, "--fail-on", "crash").returncode == 2
    assert anefit("check", path, "--function", "nope").returncode == 2
    assert anefit("check", os.path.join(REPO_ROOT, "no-such-model.mlpackage")).returncode == 2

