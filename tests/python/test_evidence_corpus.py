"""The evidence corpus (tests/fixtures/evidence) is made of real Core ML
packages: each loads in coremltools, has the op cases.json names, and gets the
verdict cases.json documents from `anefit check`."""

import json
import os

import pytest

from conftest import REPO_ROOT, load_with_coremltools, program_op_types

CORPUS = os.path.join(REPO_ROOT, "tests", "fixtures", "evidence")
with open(os.path.join(CORPUS, "cases.json")) as f:
    CASES = json.load(f)["cases"]


def op_names(prog):
    names = set()

    def walk(block):
        for op in block.operations:
            names.add(op.name)
            for b in op.blocks:
                walk(b)
    for fn in prog.functions.values():
        walk(fn)
    return names


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_corpus_model_loads_and_checks(anefit, case):
    path = os.path.join(CORPUS, case["file"])
    loaded = load_with_coremltools(path)
    assert program_op_types(loaded.program), case["name"]
    if "op" in case:
        assert case["op"] in op_names(loaded.program)
    proc = anefit("check", "--json", path)
    assert proc.returncode in (0, 1), proc.stderr
    assert json.loads(proc.stdout)["verdict"] == case["verdict"]
