"""The baseline gate from Python: anefit.baseline_json records what
`anefit check --save-baseline` records, anefit.compare_baseline decides and
renders what `anefit check --baseline` does (byte for byte: one library), and
its SARIF marks every result with a SARIF 2.1.0 baselineState."""

import json
import os

import pytest

from conftest import FIXTURES_DIR

MULTI = os.path.join(FIXTURES_DIR, "pte", "llama_coreml_multi.pte")

BASE = """main[CoreML8](%x: (1, 32, fp16)(Tensor)) {
  block0() {
    %a: (1, 32, fp16)(Tensor) = add(x=%x, y=1.0:fp16, name="a")
  } -> (%a)
}
"""

# The same function with a narrow state read: a new at-risk finding, and an
# int32 add that goes to the CPU.
WORSE = """main[CoreML8](%x: (1, 32, fp16)(Tensor), %i: (1, 32, int32)(Tensor), %s0: (1, 64, 2, fp16)(State)) {
  block0() {
    %a: (1, 32, fp16)(Tensor) = add(x=%x, y=1.0:fp16, name="a")
    %j: (1, 32, int32)(Tensor) = add(x=%i, y=1, name="j")
    %r0: (1, 64, 2, fp16)(Tensor) = read_state(input=%s0, name="r0")
  } -> (%a, %j, %r0)
}
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_record_and_gate_match_the_command_line(anefit_py, anefit, tmp_path):
    base = write(tmp_path, "base.mil", BASE)
    worse = write(tmp_path, "worse.mil", WORSE)
    record = tmp_path / "base.json"
    record.write_text(anefit_py.baseline_json(anefit_py.check(base)))
    assert record.read_text() == anefit("check", base, "--json").stdout

    gate = anefit_py.compare_baseline(anefit_py.check(worse), str(record))
    assert not gate.passed and gate.regressions > 0
    cli = anefit("check", worse, "--baseline", str(record))
    assert cli.returncode == 1
    assert gate.summary() == cli.stdout
    assert gate.to_json() == anefit("check", worse, "--baseline", str(record), "--json").stdout
    assert gate.to_sarif() == anefit("check", worse, "--baseline", str(record),
                                     "--format", "sarif").stdout

    same = anefit_py.compare_baseline(anefit_py.check(base), str(record))
    assert same.passed and same.regressions == 0 and same.improvements == 0

    # The other way round: everything the worse model had is gone.
    worse_record = tmp_path / "worse.json"
    worse_record.write_text(anefit_py.baseline_json(anefit_py.check(worse)))
    better = anefit_py.compare_baseline(anefit_py.check(base), str(worse_record))
    assert better.passed and better.improvements > 0
    assert "gone at-risk ANE-STATE-004" in better.summary()


def test_sarif_baseline_states(anefit_py, tmp_path):
    base = write(tmp_path, "base.mil", BASE)
    worse = write(tmp_path, "worse.mil", WORSE)
    record = tmp_path / "worse.json"
    record.write_text(anefit_py.baseline_json(anefit_py.check(worse)))
    # Against itself: every result unchanged, nothing absent.
    run = json.loads(anefit_py.compare_baseline(anefit_py.check(worse), str(record))
                     .to_sarif())["runs"][0]
    assert run["results"] and {r["baselineState"] for r in run["results"]} == {"unchanged"}
    assert run["invocations"][0]["exitCode"] == 0
    # The base model against it: its results (none) and the gone ones, absent.
    run = json.loads(anefit_py.compare_baseline(anefit_py.check(base), str(record))
                     .to_sarif())["runs"][0]
    states = [r["baselineState"] for r in run["results"]]
    assert states and set(states) == {"absent"}
    for r in run["results"]:
        # SARIF 2.1.0 3.27.9: a result whose kind is not "fail" has level "none".
        assert r["kind"] == "pass" and r["level"] == "none"
        assert r["ruleId"].startswith("ANE-")
        assert r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert run["properties"]["baseline"]["passed"] is True
    # Only the four values SARIF defines.
    record2 = tmp_path / "base.json"
    record2.write_text(anefit_py.baseline_json(anefit_py.check(base)))
    run = json.loads(anefit_py.compare_baseline(anefit_py.check(worse), str(record2))
                     .to_sarif())["runs"][0]
    assert {r["baselineState"] for r in run["results"]} <= {"new", "unchanged", "updated",
                                                           "absent"}
    assert "new" in {r["baselineState"] for r in run["results"]}
    assert run["invocations"][0]["exitCode"] == 1
    notes = run["invocations"][0]["toolExecutionNotifications"]
    assert any(n["level"] == "error" and "ops on the ANE" in n["message"]["text"] for n in notes)


def test_program_of_several_delegates(anefit_py, anefit, tmp_path):
    import anefit.executorch as ae

    reports = ae.check_program(MULTI)
    assert len(reports) > 1
    record = tmp_path / "multi.json"
    record.write_text(anefit_py.baseline_json(reports))
    assert json.loads(record.read_text())["schema"] == "anefit.check-program/1"
    assert record.read_text() == anefit("check", MULTI, "--json").stdout
    assert anefit_py.compare_baseline(reports, str(record)).passed
    # One delegate recorded, the program checked: the graph was split.
    one = tmp_path / "one.json"
    one.write_text(anefit_py.baseline_json(reports[0]))
    gate = anefit_py.compare_baseline(reports, str(one))
    assert not gate.passed
    assert "program: Core ML delegates 1 -> %d" % len(reports) in gate.summary()


def test_bad_baselines_raise_input_error(anefit_py, tmp_path):
    base = anefit_py.check(write(tmp_path, "base.mil", BASE))
    bad = write(tmp_path, "bad.json", "{")
    with pytest.raises(anefit_py.InputError, match="bad.json: expected a JSON check report"):
        anefit_py.compare_baseline(base, bad)
    with pytest.raises(anefit_py.InputError, match="fail_on"):
        anefit_py.compare_baseline(base, bad, fail_on="worse")
    with pytest.raises(anefit_py.InputError, match="residency_tolerance"):
        anefit_py.compare_baseline(base, bad, residency_tolerance=-1)
