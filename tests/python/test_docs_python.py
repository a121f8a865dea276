"""docs/python.md's export -> check -> re-export script, run as written with
a Python that has ExecuTorch (and this anefit package): it must print what
the page says it prints."""

import os
import re
import subprocess

from conftest import REPO_ROOT, executorch_python

import pytest

DOC = os.path.join(REPO_ROOT, "docs", "python.md")
SECTION = "## From export to check to re-export (ExecuTorch)"


def doc_blocks():
    text = open(DOC, encoding="utf-8").read()
    section = text[text.index(SECTION):]
    blocks = re.findall(r"```(\w*)\n(.*?)```", section, re.S)
    script = next(body for lang, body in blocks if lang == "python")
    printed = next(body for lang, body in blocks if lang == "")
    return script, printed


def test_the_page_has_the_script_and_its_output():
    script, printed = doc_blocks()
    assert "ae.partitioner_kwargs(reports)" in script and "ae.check_program" in script
    assert printed.strip()


def test_export_check_reexport_script_prints_what_the_page_says(anefit_py, tmp_path):
    python = executorch_python()
    if python is None:
        pytest.skip("executorch is not importable (set ANEFIT_EXECUTORCH_PYTHON to a Python "
                    "that has it)")
    script, printed = doc_blocks()
    (tmp_path / "example.py").write_text(script)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(anefit_py.__file__)))
    env = dict(os.environ, PYTHONPATH=package_root, TQDM_DISABLE="1")
    proc = subprocess.run([python, "example.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.splitlines() == printed.strip().splitlines()
    assert (tmp_path / "shortconv.pte").is_file() and (tmp_path / "shortconv_fixed.pte").is_file()
