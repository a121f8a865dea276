"""The LFM2 rewrite recipe (examples/lfm2_ane/lfm2_ane.py): ExecuTorch's own
LFM2 with ShortConv's depthwise conv written as its taps and KVCacheCoreML's
write at a run-time position written as a select.

* The committed export made through it (tests/fixtures/pte/lfm2_recipe_ane_fp16.pte,
  the fp16 export_llm configuration, same checkpoint) has none of the
  at-risk write findings of the plain export_llm file, the same interface
  and no new finding, so `check` no longer predicts a compile failure.
* In eager mode, the rewritten model gives the original's logits step by
  step, up to float summation order; and `anefit run` of the exported
  program gives PyTorch eager's logits of the original model (both need
  torch and executorch: ANEFIT_EXECUTORCH_PYTHON).
"""

import json
import os
import subprocess

import numpy as np
import pytest

from conftest import FIXTURES_DIR, decode_inputs, executorch_python, load_npz

PTE_DIR = os.path.join(FIXTURES_DIR, "pte")
RECIPE = "lfm2_recipe_ane_fp16"
ORIGINAL = "lfm2_export_llm_fp16"
REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "executorch_reference.py")


def pte(name):
    return os.path.join(PTE_DIR, name + ".pte")


def check_json(anefit, name):
    return json.loads(anefit("check", "--json", pte(name)).stdout)


def by_rule(report, level=None):
    out = {}
    for f in report["findings"]:
        if level is None or f["level"] == level:
            out[f["rule"]] = out.get(f["rule"], 0) + 1
    return out


def test_manifest_records_the_recipe_export():
    with open(os.path.join(PTE_DIR, "manifest.json")) as f:
        manifest = json.load(f)
    entry, original = manifest[RECIPE], manifest[ORIGINAL]
    assert entry["recipe"] is True
    assert "examples/lfm2_ane/lfm2_ane.py" in entry["command"]
    # The same model, checkpoint and export configuration as the plain export.
    assert entry["params_json"] == original["params_json"]
    assert entry["seed"] == original["seed"]
    config = dict(entry["config_yaml"])
    config["export"] = dict(config["export"], output_name=None)
    plain = dict(original["config_yaml"])
    plain["export"] = dict(plain["export"], output_name=None)
    assert config == plain


def test_recipe_export_keeps_the_interface(anefit):
    def interface(name):
        j = json.loads(anefit("show", "--json", pte(name)).stdout)
        fn = j["delegates"][0]["model"]["functions"][0]
        return ([(i["shape"], i["dtype"]) for i in fn["inputs"]],
                [(o["shape"], o["dtype"]) for o in fn["outputs"]])

    assert interface(RECIPE) == interface(ORIGINAL)


def test_recipe_export_has_no_predicted_compile_failure(anefit):
    original, recipe = check_json(anefit, ORIGINAL), check_json(anefit, RECIPE)
    # The plain export: KV writes at a run-time position, at risk.
    assert by_rule(original, "at-risk").get("ANE-STATE-006", 0) == 12
    assert original["verdict"] == "at-risk"
    # Through the recipe: no finding at or above at-risk is left.
    for level in ("at-risk", "compile-fail", "runtime-fail"):
        assert by_rule(recipe, level) == {}, level
    assert recipe["verdict"] == "partial"
    # No rule fires that did not fire on the plain export.
    assert set(by_rule(recipe)) <= set(by_rule(original))
    # And a CI gate on contested failures agrees.
    assert anefit("check", "--fail-on", "at-risk", pte(RECIPE)).returncode == 0
    assert anefit("check", "--fail-on", "at-risk", pte(ORIGINAL)).returncode == 1


def test_recipe_gives_the_original_logits_in_eager(tmp_path):
    python = executorch_python()
    if python is None:
        pytest.skip("executorch is not importable (set ANEFIT_EXECUTORCH_PYTHON)")
    inputs = tmp_path / "inputs.npz"
    decode_inputs(inputs, 256, 12, seed=0)
    proc = subprocess.run([python, REFERENCE, "recipe", ORIGINAL, str(inputs)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    diffs = json.loads(proc.stdout.strip().splitlines()[-1])
    print("max |original - rewritten| logits per step: " + ", ".join(f"{d:.3g}" for d in diffs))
    assert len(diffs) == 12
    # fp32 eager, logits of magnitude ~3: the taps sum in another order.
    assert max(diffs) < 1e-4


def test_recipe_export_runs_like_the_original_model(anefit, tmp_path):
    python = executorch_python()
    if python is None:
        pytest.skip("executorch is not importable (set ANEFIT_EXECUTORCH_PYTHON)")
    steps = 8
    inputs = tmp_path / "inputs.npz"
    decode_inputs(inputs, 256, steps, seed=0)
    ref = tmp_path / "ref.npz"
    # PyTorch eager of the original model (no rewrite), with its own buffers.
    proc = subprocess.run([python, REFERENCE, ORIGINAL, str(inputs), str(ref)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = load_npz(ref)
    out = tmp_path / "x.npz"
    run = anefit("run", pte(RECIPE), "--inputs", inputs, "-o", out)
    assert run.returncode == 0, run.stderr
    got = load_npz(out)
    fn = json.loads(anefit("show", "--json", pte(RECIPE)).stdout)
    logits = [o["name"] for o in fn["delegates"][0]["model"]["functions"][0]["outputs"]
              if o["shape"][-1] == 256]
    assert len(logits) == 1, logits
    diffs = [float(np.max(np.abs(got[f"step{k}/{logits[0]}"].reshape(1, -1) -
                                 expected[f"step{k}/logits"]))) for k in range(steps)]
    print("max |anefit run of the recipe export - PyTorch original| per step: " +
          ", ".join(f"{d:.3g}" for d in diffs))
    # fp16 compute and fp16 buffers, as for the plain export (test_pte_fixtures).
    assert max(diffs) < 5e-2
