"""The suite's skip policy (conftest.py): a test may skip only for something a
build lacks by design (the ExecuTorch runtime, an offline schema); a skip for
anything else - a missing fixture, binary or module - is a failure, also when
a whole module skips at import. Checked by running pytest on small test files
under this directory's conftest.py."""

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))

ALLOWED = '''
import pytest

def test_executorch():
    pytest.skip("executorch is not importable (set ANEFIT_EXECUTORCH_PYTHON)")

def test_offline_schema():
    pytest.skip("the SARIF 2.1.0 schema is not available offline")

def test_runs():
    assert True
'''

FORBIDDEN = '''
import pytest

def test_fixture_missing():
    pytest.skip("fixture missing")

def test_fixture_absent():
    pytest.skip("lfm2_multilayer fixture is absent")

def test_generated():
    pytest.skip("big: package is generated on demand")
'''

FORBIDDEN_MODULE = '''
import pytest

pytest.importorskip("anefit_no_such_module")

def test_never_runs():
    assert True
'''


def run_pytest(tmp_path, files):
    shutil.copy(os.path.join(HERE, "conftest.py"), tmp_path / "conftest.py")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    report = tmp_path / "report.xml"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"--junitxml={report}", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcomes[case.get("name") or case.get("classname")] = kinds[0] if kinds else "passed"
    return proc.returncode, outcomes, proc.stdout + proc.stderr


def test_optional_things_may_skip(tmp_path):
    rc, outcomes, out = run_pytest(tmp_path, {"test_allowed.py": ALLOWED})
    assert rc == 0, out
    assert outcomes == {"test_executorch": "skipped", "test_offline_schema": "skipped",
                        "test_runs": "passed"}, out


def test_a_skip_for_anything_else_fails(tmp_path):
    rc, outcomes, out = run_pytest(tmp_path, {"test_forbidden.py": FORBIDDEN})
    assert rc == 1, out
    assert outcomes == {"test_fixture_missing": "failure", "test_fixture_absent": "failure",
                        "test_generated": "failure"}, out
    assert "skipped, but this must be there" in out and "is generated on demand" in out


def test_a_module_skipped_at_import_fails(tmp_path):
    rc, outcomes, out = run_pytest(tmp_path, {"test_module.py": FORBIDDEN_MODULE})
    assert rc != 0, out
    assert list(outcomes.values()) == ["error"], out
    assert "anefit_no_such_module" in out


def test_no_tests_collected_fails(tmp_path):
    rc, outcomes, out = run_pytest(tmp_path, {"test_empty.py": "X = 1\n"})
    assert rc == 5, out  # ctest counts any non-zero exit as a failure
    assert outcomes == {}, out
