"""Structural checks of `anefit check --format html` and `split --format html` on
real models: the bundled example, the committed Core ML fixtures, the real
ExecuTorch .pte exports and the full-size LFM2.5-1.2B-shaped program.

For every page: each op of each function is drawn exactly once, classed by the
placement `check --json` gives it, and that class has the palette's colour;
the embedded check JSON is `check --json` itself; nothing refers to anything
outside the file except the rules' evidence links."""

import glob
import json
import os
import time

import pytest

from conftest import EXAMPLES_DIR, FIXTURES_DIR, REPO_ROOT
from report_util import Report

# The page shows one graph: a program with several Core ML delegates is shown
# one delegate at a time (here its second).
SEVERAL_DELEGATES = {"llama_coreml_multi.pte": "#1"}
MODELS = sorted(
    [os.path.join(EXAMPLES_DIR, "lfm2_shortconv.mlpackage")]
    + [p + SEVERAL_DELEGATES.get(os.path.basename(p), "")
       for p in glob.glob(os.path.join(FIXTURES_DIR, "pte", "*.pte"))]
    + [p for p in glob.glob(os.path.join(FIXTURES_DIR, "*", "model.mlpackage"))])


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


@pytest.fixture(scope="session")
def evidence_urls(anefit):
    """Every URL of the rules table: the evidence each way of every rule."""
    rules = json.loads(anefit("rules", "--json", check=True).stdout)["rules"]
    return {s for s in _strings(rules) if s.startswith(("http://", "https://"))}


def render(anefit, tmp_path, model, verb="check", *extra):
    out = tmp_path / f"{os.path.basename(model)}.{verb}.html"
    proc = anefit(verb, model, "--format", "html", "-o", out, *extra)
    assert proc.returncode in (0, 1), proc.stderr
    assert proc.stdout == "", "with -o nothing goes to stdout"
    return Report(out.read_text(encoding="utf-8")), out


def check_json(anefit, model):
    proc = anefit("check", model, "--json")
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def assert_structure(report, expected, evidence_urls):
    # The page carries the documented check report unchanged.
    assert report.check == expected
    nodes = report.op_nodes()
    assert sorted(nodes) == list(range(len(expected["functions"])))
    for f, fn in enumerate(expected["functions"]):
        # An ANE op a contested rule points at is shown at-risk.
        placement = ["at-risk" if o.get("atRisk") else o["placement"] for o in fn["placement"]]
        drawn = nodes[f]
        assert sorted(i for i, _ in drawn) == list(range(len(placement))), \
            f"function {fn['name']}: every op exactly once"
        for i, cls in drawn:
            assert f"p-{placement[i]}" in cls, f"op {i} of {fn['name']}: {cls} vs {placement[i]}"
        graph_fn = report.graph["functions"][f]
        assert [o["n"] for o in graph_fn["ops"]] == [o["name"] for o in fn["placement"]]
    # Every placement the checker can give has a colour, and the CSS and the
    # script's palette agree on it.
    for name in report.graph["placements"]:
        entry = report.graph["palette"]["placement"].get(name)
        assert entry, f"placement {name} has no palette row"
        assert report.colors[f"p-{name}"] == entry["color"]
    for name, entry in report.graph["palette"]["verdict"].items():
        assert report.colors[f"v-{name}"] == entry["color"]
    # Self-contained: no resource reference at all, and the only URLs are the
    # evidence links of the rules table.
    found, refs, css_urls = report.urls()
    assert refs == [], refs
    assert css_urls == [], css_urls
    assert found <= evidence_urls, found - evidence_urls
    assert "<link" not in report.text and "@import" not in report.text


@pytest.mark.parametrize("model", MODELS, ids=lambda p: os.path.relpath(p, REPO_ROOT))
def test_check_html_structure(anefit, tmp_path, evidence_urls, model):
    report, _ = render(anefit, tmp_path, model)
    assert_structure(report, check_json(anefit, model), evidence_urls)


def test_check_html_lfm2_1p2b(anefit, tmp_path, evidence_urls, lfm2_1p2b):
    pkg, _ = lfm2_1p2b
    t0 = time.perf_counter()
    report, path = render(anefit, tmp_path, pkg)
    seconds = time.perf_counter() - t0
    expected = check_json(anefit, pkg)
    assert_structure(report, expected, evidence_urls)
    size = os.path.getsize(path)
    print(f"1.2B-shaped report: {size / 1e6:.2f} MB, generated in {seconds * 1000:.0f} ms (one run)")
    assert size < 5_000_000
    # Sixteen layers found, ten short-conv and six attention, most collapsed.
    groups = report.graph["functions"][0]["groups"]
    assert [g["kind"] for g in groups].count("conv") == 10
    assert [g["kind"] for g in groups].count("attention") == 6
    assert sum(g["collapsed"] for g in groups) == 14


def test_split_html_embeds_the_plan(anefit, tmp_path, evidence_urls):
    model = os.path.join(EXAMPLES_DIR, "lfm2_shortconv.mlpackage")
    report, _ = render(anefit, tmp_path, model, "split")
    assert_structure(report, check_json(anefit, model), evidence_urls)
    plan = json.loads(anefit("split", model, "--json", check=True).stdout)
    snippet = report.split.pop("skipListSnippet")
    assert report.split == plan
    assert "skip_ops_for_coreml_delegation" in snippet
    assert '<section class="plan">' in report.text


def test_report_never_overwrites_the_model(anefit, tmp_path):
    model = os.path.join(FIXTURES_DIR, "pte", "lfm2_coreml_nostate.pte")
    copy = tmp_path / "m.pte"
    copy.write_bytes(open(model, "rb").read())
    before = copy.read_bytes()
    proc = anefit("check", copy, "--format", "html", "-o", copy)
    assert proc.returncode == 2
    assert "refusing to write over the input" in proc.stderr
    assert copy.read_bytes() == before
    pkg = tmp_path / "p.mlpackage"
    import shutil
    shutil.copytree(os.path.join(EXAMPLES_DIR, "lfm2_shortconv.mlpackage"), pkg)
    proc = anefit("check", pkg, "-o", pkg / "Manifest.json")
    assert proc.returncode == 2 and "refusing to write inside the input" in proc.stderr
