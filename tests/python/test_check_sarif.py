"""`anefit check --format sarif` is SARIF 2.1.0. When a copy of the official
schema is available offline (ANEFIT_SARIF_SCHEMA=path to sarif-schema-2.1.0.json)
the output is validated against it with jsonschema; otherwise the structure that
the schema and GitHub code scanning require is checked field by field."""

import json
import os

import pytest

from conftest import FIXTURES_DIR, fixture_package


@pytest.fixture(scope="module")
def sarif(anefit):
    path = fixture_package("lfm2_shortconv")
    if path is None:
        pytest.skip("fixture missing")
    proc = anefit("check", path, "--format", "sarif", "--fail-on", "at-risk")
    assert proc.returncode == 1, proc.stderr
    return json.loads(proc.stdout)


def test_validates_against_official_schema(sarif):
    schema_path = os.environ.get("ANEFIT_SARIF_SCHEMA")
    if not schema_path or not os.path.isfile(schema_path):
        pytest.skip("the SARIF 2.1.0 schema is not available offline (set ANEFIT_SARIF_SCHEMA)")
    jsonschema = pytest.importorskip("jsonschema")
    with open(schema_path) as f:
        jsonschema.validate(sarif, json.load(f))


def test_required_structure(sarif):
    assert sarif["version"] == "2.1.0"
    assert sarif["$schema"].endswith("sarif-2.1.0.json")
    assert len(sarif["runs"]) == 1
    run = sarif["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "anefit"
    rule_ids = [r["id"] for r in driver["rules"]]
    assert len(rule_ids) == len(set(rule_ids))
    for rule in driver["rules"]:
        assert rule["shortDescription"]["text"]
        assert rule["defaultConfiguration"]["level"] in ("error", "warning", "note")
    assert run["results"], "the LFM2 block has findings"
    for res in run["results"]:
        assert res["ruleId"] == rule_ids[res["ruleIndex"]]
        assert res["level"] in ("error", "warning", "note", "none")
        assert res["message"]["text"]
        loc = res["locations"][0]
        assert loc["physicalLocation"]["artifactLocation"]["uri"]
        assert loc["physicalLocation"]["region"]["startLine"] >= 1
        assert loc["logicalLocations"][0]["fullyQualifiedName"].startswith("main")
    # The block's one narrow state is contested: a warning, not an error.
    assert any(r["ruleId"].startswith("ANE-STATE-") and r["level"] == "warning"
               for r in run["results"])
    assert run["properties"]["coverage"][0]["function"] == "main"
    assert "unverified" in run["properties"]["coverage"][0]["coverage"]


@pytest.fixture(scope="module")
def sarif_sources(anefit):
    """The export_llm fixture with its ETRecord: results on Python lines."""
    pte = os.path.join(FIXTURES_DIR, "pte", "lfm2_export_llm_4w_et.pte")
    proc = anefit("check", pte, "--etrecord", pte[:-4] + ".etrecord", "--source-root",
                  "/src/executorch", "--format", "sarif")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_sources_validate_against_official_schema(sarif_sources):
    schema_path = os.environ.get("ANEFIT_SARIF_SCHEMA")
    if not schema_path or not os.path.isfile(schema_path):
        pytest.skip("the SARIF 2.1.0 schema is not available offline (set ANEFIT_SARIF_SCHEMA)")
    jsonschema = pytest.importorskip("jsonschema")
    with open(schema_path) as f:
        jsonschema.validate(sarif_sources, json.load(f))


def test_results_sit_on_the_python_line(sarif_sources):
    results = sarif_sources["runs"][0]["results"]
    placed = [r for r in results if "source" in r["properties"]]
    assert placed, "the export's findings have sources"
    for res in placed:
        source = res["properties"]["source"]
        physical = res["locations"][0]["physicalLocation"]
        if "line" in source:
            assert physical["artifactLocation"]["uri"] == source["file"]
            assert physical["region"]["startLine"] == source["line"] >= 1
            assert not source["file"].startswith("/"), "relative to --source-root"
    writes = [r for r in placed if r["ruleId"] == "ANE-STATE-006"]
    assert len(writes) == 12
    assert {r["properties"]["source"]["file"] for r in writes} == {
        "examples/models/llama/source_transformation/sdpa.py"}
    assert {r["properties"]["source"]["buffer"] for r in writes} == {
        f"layers.{n}.attention.kv_cache.{kv}_cache" for n in (2, 5, 8, 10, 12, 14)
        for kv in "kv"}
