"""scripts/check_layers.py: the repository passes, and a tree with an include
or a link that reaches up or sideways fails with one line per violation, in the
libraries and in their unit tests; the libraries a test binary links."""

import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "scripts", "check_layers.py")

TABLE = """# x

## Layers

| layer | library | holds |
| --- | --- | --- |
| 1 | `low` | below |
| 2 | `mid` | middle |
| 2 | `side` | beside mid |
| 3 | `high` | above |

## Next
"""


def tree(tmp_path, files, *args):
    """Runs the script on a tree of `files` (paths under src/, or under tests/
    when they start with "tests/")."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "architecture.md").write_text(TABLE)
    for rel, text in files.items():
        p = tmp_path / (rel if rel.startswith("tests/") else os.path.join("src", rel))
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return subprocess.run([sys.executable, SCRIPT, *args, str(tmp_path)], capture_output=True,
                          text=True)


def test_the_repository_depends_only_downward():
    proc = subprocess.run([sys.executable, SCRIPT, ROOT], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "every include and link points down" in proc.stdout


def test_downward_includes_and_links_pass(tmp_path):
    proc = tree(tmp_path, {
        "mid/A.cpp": '#include "low/B.h"\n#include "mid/C.h"\n',
        "mid/CMakeLists.txt": "target_link_libraries(anefit_mid PUBLIC anefit_low)\n",
    })
    assert proc.returncode == 0, proc.stdout


def test_upward_and_sideways_dependencies_fail(tmp_path):
    proc = tree(tmp_path, {
        "mid/A.cpp": '#include "high/B.h"\n',
        "mid/T.def": '#include "side/X.def"\n',
        "low/CMakeLists.txt": "# anefit_high in a comment is fine\n"
                              "target_link_libraries(anefit_low PRIVATE anefit_mid)\n",
        "other/D.h": "",
    })
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert "src/mid/A.cpp:1: mid (layer 2) includes high (layer 3); expected a lower layer" in lines
    assert "src/mid/T.def:1: mid (layer 2) includes side (layer 2); expected a lower layer" in lines
    assert ("src/low/CMakeLists.txt:2: anefit_low (layer 1) links anefit_mid (layer 2); "
            "expected a lower layer") in lines
    assert "src/other: not in the Layers table of docs/architecture.md" in lines
    assert lines[-1] == "4 dependencies reach up or sideways (docs/architecture.md, Layers)"


def test_unit_tests_include_their_layer_and_below(tmp_path):
    proc = tree(tmp_path, {
        "mid/A.h": "",
        "tests/unit/mid/ATest.cpp": '#include "mid/A.h"\n#include "side/S.h"\n'
                                    '#include "low/L.h"\n#include "Helper.h"\n',
        "tests/unit/mid/Helper.h": '#include "high/H.h"\n',
        "tests/unit/text/ParserTest.cpp": "",
    })
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "tests/unit/mid/Helper.h:1: a test of mid (layer 2) includes high (layer 3); "
        "expected its layer or a lower one",
        "tests/unit/text: not a library of the Layers table of docs/architecture.md (the unit "
        "tests of src/<library> are tests/unit/<library>)",
        "2 dependencies reach up or sideways (docs/architecture.md, Layers)",
    ]


def test_a_unit_test_binary_links_its_layer_and_below(tmp_path):
    proc = tree(tmp_path, {}, "--test-libraries", "mid")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "anefit_low;anefit_mid;anefit_side"
    (tmp_path / "unknown").mkdir()
    proc = tree(tmp_path / "unknown", {}, "--test-libraries", "nope")
    assert proc.returncode == 1
    assert proc.stderr.strip() == ("check_layers: expected a library of the Layers table of "
                                   "docs/architecture.md, found 'nope'")
