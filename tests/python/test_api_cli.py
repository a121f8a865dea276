"""`python -m anefit` is the `anefit` command line, run in the Python process:
the same help, output and exit codes as the executable."""

import os
import subprocess
import sys

import pytest

from conftest import EXAMPLES_DIR

EXAMPLE = os.path.join(EXAMPLES_DIR, "lfm2_shortconv.mlpackage")

def python_m(*args):
    return subprocess.run([sys.executable, "-m", "anefit", *map(str, args)], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, NO_COLOR="1"))

@pytest.mark.parametrize("args", [["--help"], ["check", "--help"], ["run", "--help"]])
def test_help_is_the_executables(anefit_py, anefit, args):
    py = python_m(*args)
    cli = anefit(*args)
    assert py.returncode == cli.returncode == 0
    assert "Usage: anefit" in py.stdout
    assert py.stdout == cli.stdout.replace(anefit.path, "anefit")

def test_version(anefit_py):
    py = python_m("--version")
    assert py.returncode == 0 and py.stdout.strip() == f"anefit {anefit_py.__version__}"

def test_verbs_run_with_the_executables_output_and_exit_codes(anefit_py, anefit, tmp_path):
    for args, code in [(["check", EXAMPLE, "--json"], 0),
                       (["check", EXAMPLE, "--json", "--fail-on", "at-risk"], 1),
                       (["check", EXAMPLE, "--fail-on", "at-risk", "--compute-units",
                         "all"], 1),
                       (["show", EXAMPLE], 0),
                       (["rules"], 0)]:
        py = python_m(*args)
        cli = anefit(*args, env=dict(os.environ, NO_COLOR="1"))
        assert (py.returncode, py.stdout) == (cli.returncode, cli.stdout), args
        assert py.returncode == code

def test_errors_are_one_line_and_exit_2(anefit_py, tmp_path):
    py = python_m("check", tmp_path / "missing.mlpackage")
    assert py.returncode == 2
    assert py.stderr == f"anefit: error: {tmp_path / 'missing.mlpackage'}: no such file or " \
                        "directory\n"
    assert python_m("no-such-verb").returncode == 2

def test_main_returns_the_exit_code(anefit_py):
    from anefit import __main__
    assert callable(__main__.main)
    assert anefit_py._core.main(["anefit", "check", EXAMPLE, "--json", "--fail-on", "at-risk"]) == 1
