"""`check --etrecord --model-explorer`: the overlay against the graph Model
Explorer shows for the ETRecord, built by ExecuTorch's own adapter
(etrecord-adapter-model-explorer, in the ExecuTorch environment:
ANEFIT_EXECUTORCH_PYTHON, requirements-executorch.txt)."""

import json
import os
import subprocess

import pytest

from conftest import FIXTURES_DIR, executorch_python

PTE = os.path.join(FIXTURES_DIR, "pte", "lfm2_export_llm_4w_et.pte")
ETRECORD = os.path.join(FIXTURES_DIR, "pte", "lfm2_export_llm_4w_et.etrecord")
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model_explorer_nodes.py")


def test_overlay_names_nodes_of_the_adapters_graph(anefit, tmp_path):
    python = executorch_python()
    if python is None:
        pytest.skip("executorch is not importable (set ANEFIT_EXECUTORCH_PYTHON)")
    overlay = tmp_path / "overlay.json"
    anefit("check", PTE, "--etrecord", ETRECORD, "--model-explorer", overlay, check=True)
    proc = subprocess.run([python, SCRIPT, ETRECORD, str(overlay)], capture_output=True,
                          text=True, timeout=900)
    if proc.returncode == 3:
        pytest.skip("the ExecuTorch environment has no etrecord-adapter-model-explorer")
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = json.loads(proc.stdout.strip().splitlines()[-1])
    assert list(shown["graphs"]) == ["forward"]
    nodes = set(shown["graphs"]["forward"])
    results = json.loads(overlay.read_text())["results"]
    # 829 edge nodes are behind the delegate's ops; each is found among the
    # nodes Model Explorer shows, once. A node of an operator outside aten
    # has two ids in the overlay: its own, and the stand-in's a viewer gives
    # it when that operator is not registered there. Here the 6 Core ML SDPA
    # nodes are shown as stand-ins, the 113 torchao dequantize nodes (their
    # operator registered) under their own names.
    shown_ids = set(results) & nodes
    assert len(shown_ids) == 829
    extra = set(results) - nodes
    sdpa = {"coreml_sdpa_default_" + s for s in ("", "1_", "2_", "3_", "4_", "5_")}
    assert sdpa <= extra
    stand_ins = extra - sdpa
    assert len(stand_ins) == 113
    assert all(i.startswith("executorch_exir_dialects_edge_ops_torchao_dequantize_affine_default")
               for i in stand_ins)
    assert "aten_index_put_default_" in results
    assert "executorch_exir_dialects_edge_ops_coreml_sdpa_default_5_" in shown_ids
    assert shown["loaded_results"] == len(results)
    assert shown["round_trip_equal"]
