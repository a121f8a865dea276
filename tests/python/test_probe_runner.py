"""The probe kit's runner (src/probe/run_probe.py, written into every kit),
as far as Linux exercises it: the kit it validates, the inputs it makes from
coremltools' specs, how it reads coremltools' compute-plan objects, the
child process it runs each variant in, the tree it walks, and the
observations file `anefit check --observations` reads back. Compiling for
the Neural Engine needs macOS; that path is untested here (docs/probe.md).
"""

import importlib.util
import json
import os
import shutil
import sys

import numpy as np
import pytest

from conftest import REPO_ROOT

THREE = os.path.join(REPO_ROOT, "tests", "lit", "probe", "Inputs", "three-suspects.mil")
EXPORT_4W = os.path.join(REPO_ROOT, "tests", "fixtures", "pte", "lfm2_export_llm_4w.pte")


def make_kit(anefit, model, out, *extra):
    anefit("probe", model, "-o", out, *extra, check=True)
    return out


def import_runner(kit):
    spec = importlib.util.spec_from_file_location("run_probe_" + os.path.basename(kit),
                                                  os.path.join(kit, "run_probe.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def kit3(anefit, tmp_path_factory):
    return make_kit(anefit, THREE, str(tmp_path_factory.mktemp("probe") / "kit3"), "--os", "ios18")


@pytest.fixture(scope="module")
def kit_export(anefit, tmp_path_factory):
    return make_kit(anefit, EXPORT_4W, str(tmp_path_factory.mktemp("probe") / "kit"))


@pytest.fixture(scope="module")
def runner(kit3):
    return import_runner(kit3)


def test_kit_carries_the_repository_runner(kit3):
    with open(os.path.join(kit3, "run_probe.py"), encoding="utf-8") as f:
        shipped = f.read()
    with open(os.path.join(REPO_ROOT, "src", "probe", "run_probe.py"), encoding="utf-8") as f:
        source = f.read()
    assert shipped == source
    assert os.access(os.path.join(kit3, "run_probe.py"), os.X_OK)


def test_every_package_loads_in_coremltools(coremltools, runner, kit3, kit_export):
    for kit in (kit3, kit_export):
        plan = runner.load_plan(kit)
        assert runner.validate(kit, plan) == []
        for model in plan["models"]:
            for v in model["variants"]:
                assert v["path"], v
                mlmodel = coremltools.models.MLModel(os.path.join(kit, v["path"]),
                                                     skip_model_load=True)
                assert mlmodel.get_spec().WhichOneof("Type") == "mlProgram"


def test_validate_names_a_missing_package(runner, kit3, tmp_path):
    copy = str(tmp_path / "kit")
    shutil.copytree(kit3, copy)
    shutil.rmtree(os.path.join(copy, "models", "keep-S2.mlpackage"))
    problems = runner.validate(copy, runner.load_plan(copy), load_specs=False)
    assert problems == ["models/keep-S2.mlpackage: missing"]
    assert runner.main([copy]) == 2


def test_load_plan_refuses_other_files(runner, kit3, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "plan.json").write_text('{"schema": "anefit.check/2"}')
    with pytest.raises(runner.KitError, match=r"schema: expected \"anefit.probe-plan/1\""):
        runner.load_plan(str(bad))
    plan = json.load(open(os.path.join(kit3, "plan.json")))
    plan["models"][0]["nodes"][0]["variant"] = "keep-S7"
    (bad / "plan.json").write_text(json.dumps(plan))
    with pytest.raises(runner.KitError, match=r"models\[0\].nodes\[0\]: names no variant"):
        runner.load_plan(str(bad))
    (bad / "plan.json").write_text("{")
    with pytest.raises(runner.KitError, match="cannot read the plan"):
        runner.load_plan(str(bad))


def test_random_inputs_follow_the_description(coremltools, runner, kit_export):
    spec = coremltools.utils.load_spec(os.path.join(kit_export, "models", "original.mlpackage"))
    inputs = runner.random_inputs(spec, seed=3)
    again = runner.random_inputs(spec, seed=3)
    assert list(inputs) == [f.name for f in spec.description.input]
    for feature in spec.description.input:
        array = inputs[feature.name]
        assert list(array.shape) == list(feature.type.multiArrayType.shape)
        np.testing.assert_array_equal(array, again[feature.name])
    assert inputs["tokens"].dtype == np.int32 and inputs["tokens"].max() < 8
    assert inputs["b_layers_0_conv_conv_state"].dtype == np.float32
    slice_spec = coremltools.utils.load_spec(
        os.path.join(kit_export, "models", "slice-S1.mlpackage"))
    assert runner.random_inputs(slice_spec)["aten_permute_copy_default_10_cast_fp16"].dtype == \
        np.float16


def test_input_shape_of_flexible_inputs(coremltools, runner):
    ft = coremltools.proto.FeatureTypes_pb2
    enumerated = ft.ArrayFeatureType()
    enumerated.enumeratedShapes.shapes.add().shape.extend([1, 16])
    enumerated.enumeratedShapes.shapes.add().shape.extend([1, 32])
    assert runner.input_shape(enumerated) == [1, 16]
    ranged = ft.ArrayFeatureType()
    for lo, hi in ((0, 1), (8, -1)):
        r = ranged.shapeRange.sizeRanges.add()
        r.lowerBound, r.upperBound = lo, hi
    assert runner.input_shape(ranged) == [1, 8]


def test_classify(runner):
    assert runner.classify({"stage": "read", "error": "x"}) == "invalid"
    assert runner.classify({"stage": "load"}) == "load-failed"
    assert runner.classify({"stage": "predict"}) == "predict-failed"
    assert runner.classify({"stage": "done"}) == "ran"
    assert runner.classify({"stage": "done", "devices": {"ane": 0, "cpu": 3}}) == "off-ane"
    assert runner.classify({"stage": "done", "devices": {"ane": 2, "cpu": 3}}) == "ane"


def test_op_devices_reads_coremltools_compute_plan_objects(runner):
    from coremltools.models import compute_device as cd
    from coremltools.models import compute_plan as cp

    def op(name, kind, blocks=()):
        return cp.MLModelStructureProgramOperation(
            inputs={}, operator_name=kind, blocks=list(blocks), __proxy__=None,
            outputs=[cp.MLModelStructureProgramNamedValueType(name=name, type=None)])

    inner = cp.MLModelStructureProgramBlock(inputs=[], operations=[op("z", "mul")],
                                            output_names=["z"])
    block = cp.MLModelStructureProgramBlock(
        inputs=[], operations=[op("x", "linear"), op("y", "gather"), op("w", "while", [inner])],
        output_names=["w"])
    program = cp.MLModelStructureProgram(
        functions={"main": cp.MLModelStructureProgramFunction(inputs=[], block=block)})
    devices = {"x": cd.MLNeuralEngineComputeDevice, "y": cd.MLCPUComputeDevice,
               "w": cd.MLCPUComputeDevice, "z": cd.MLGPUComputeDevice}

    class Plan:
        model_structure = cp.MLModelStructure(neuralnetwork=None, program=program, pipeline=None)

        def get_compute_device_usage_for_mlprogram_operation(self, operation):
            device = object.__new__(devices[operation.outputs[0].name])
            return cp.MLComputePlanDeviceUsage(preferred_compute_device=device,
                                               supported_compute_devices=[device])

    assert runner.op_devices(Plan()) == {"x": "ane", "y": "cpu", "w": "cpu", "z": "gpu"}


def test_walk_follows_the_tree(runner, kit3):
    model = runner.load_plan(kit3)["models"][0]
    outcomes = {"original": "load-failed", "fixed-all": "ane", "keep-S1": "ane",
                "keep-S2": "crashed", "slice-S2": "load-failed"}
    seen = runner.walk(model, lambda v: outcomes.get(v["name"], "ane"))
    assert seen == ["original", "fixed-all", "keep-S1", "keep-S2", "slice-S2"]
    assert runner.walk(model, lambda v: "ane") == ["original"]
    everything = runner.walk(model, lambda v: "ane", run_all=True)
    assert sorted(everything) == sorted(v["name"] for v in model["variants"])


def test_child_process_reports_the_failure(runner, kit3):
    """Off macOS coremltools reads the package but cannot predict: the child
    records the stage it stopped in, and the parent turns it into an outcome."""
    plan = runner.load_plan(kit3)
    variant = plan["models"][0]["variants"][0]
    record = runner.observe(kit3, variant, timeout=120)
    assert record["variant"] == "original"
    assert record["outcome"] == "predict-failed", record
    assert "macOS" in record["error"], record
    assert len(record["sha256"]) == 64
    assert record["sha256"] == runner.package_sha256(os.path.join(kit3, variant["path"]))
    assert runner.observe(kit3, variant, timeout=0.001)["outcome"] == "timeout"


def test_linux_validates_and_says_it_needs_macos(runner, kit3, capsys):
    assert runner.main([kit3]) == 0
    out = capsys.readouterr().out
    assert "run_probe: the kit is valid: 1 model(s), 11 packages" in out
    assert "needs macOS" in out


def test_observations_flow_back_into_check(anefit, runner, kit3, tmp_path, monkeypatch):
    """The runner's file, as it writes it on a Mac (the compiles replaced by
    chosen outcomes), read back by `anefit check --observations`."""
    outcomes = {"original": "load-failed", "fixed-all": "ane", "keep-S1": "load-failed",
                "slice-S1": "load-failed"}

    def fake_observe(kit, variant, timeout):
        return {"variant": variant["name"], "outcome": outcomes.get(variant["name"], "ane"),
                "sha256": runner.package_sha256(os.path.join(kit, variant["path"])),
                "seconds": 0.5, "devices": {"ane": 1, "cpu": 0, "gpu": 0}}

    monkeypatch.setattr(runner, "observe", fake_observe)
    monkeypatch.setattr(runner.sys, "platform", "darwin")
    out = str(tmp_path / "observations.json")
    assert runner.main([kit3, "-o", out]) == 0
    observations = json.load(open(out))
    assert observations["schema"] == "anefit.probe-observations/1"
    assert [r["variant"] for r in observations["runs"]] == ["original", "fixed-all", "keep-S1",
                                                            "slice-S1"]
    proc = anefit("check", "--os", "ios18", THREE, "--observations", out, "--json")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["observation"]["conclusion"] == "culprit"
    assert report["observation"]["culprits"] == ["S1"]
    assert report["verdict"] == "ane-fails"


def test_observations_become_corpus_cases(anefit, runner, kit3, tmp_path, monkeypatch):
    """scripts/observation_to_cases.py: one case per observed variant, the
    sub-programs isolated, each with its program as MIL text."""
    outcomes = {"original": "load-failed", "fixed-all": "ane", "keep-S1": "load-failed",
                "slice-S1": "load-failed"}

    def fake_observe(kit, variant, timeout):
        record = {"variant": variant["name"], "outcome": outcomes[variant["name"]],
                  "sha256": "0" * 64, "seconds": 0.5}
        if variant["name"] == "original":
            record["error"] = "Error compiling model: ANECCompile() FAILED"
        if variant["name"] == "slice-S1":
            record["op_devices"] = {"o1": "ane"}
        return record

    monkeypatch.setattr(runner, "observe", fake_observe)
    monkeypatch.setattr(runner.sys, "platform", "darwin")
    out = str(tmp_path / "observations.json")
    assert runner.main([kit3, "-o", out]) == 0
    script = os.path.join(REPO_ROOT, "scripts", "observation_to_cases.py")
    group_dir = tmp_path / "sweep" / "someone-model"
    proc = __import__("subprocess").run(
        [sys.executable, script, out, "--kit", kit3, "--anefit", anefit.path, "--out",
         str(group_dir), "--source", "https://github.com/someone/model/issues/7"],
        capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    group = json.load(open(group_dir / "probe-observations.json"))
    assert group["schema"] == "anefit.evidence/2"
    cases = {c["name"]: c for c in group["cases"]}
    original = cases["someone-model_7_0_original"]
    assert original["outcome"] == "fails" and original["stage"] == "load"
    assert original["certainty"] == "together"
    assert original["quote"] == "Error compiling model: ANECCompile() FAILED"
    assert original["project"] == "someone/model"
    sliced = cases["someone-model_7_0_slice_s1"]
    assert sliced["certainty"] == "isolated" and sliced["placement"] == {"o1": "ane"}
    assert cases["someone-model_7_0_fixed_all"]["outcome"] == "works"
    for case in group["cases"]:
        mil = str(tmp_path / "sweep" / case["file"])
        anefit("show", mil, check=True)


def test_python_api_probe_and_observations(anefit_py, tmp_path):
    """anefit.probe writes the kit and returns its plan; anefit.check reads
    the observations back (the file written as the lit tests write theirs)."""
    kit = str(tmp_path / "kit")
    plan = anefit_py.probe(THREE, kit, os="ios18")
    assert plan["schema"] == "anefit.probe-plan/1"
    assert plan["models"][0]["tree_depth"] == 4
    assert [s["rules"] for s in plan["models"][0]["suspects"]] == [
        ["ANE-ATTN-002"], ["ANE-STATE-003"], ["ANE-STATE-006"]]
    observe = os.path.join(REPO_ROOT, "tests", "lit", "probe", "Inputs", "observe.py")
    proc = __import__("subprocess").run(
        [sys.executable, observe, kit, "original=load-failed", "fixed-all=ane", "keep-S1=ane",
         "keep-S2=load-failed"], capture_output=True, text=True, check=True)
    obs = tmp_path / "observations.json"
    obs.write_text(proc.stdout)
    report = anefit_py.check(THREE, os="ios18", observations=str(obs))
    assert report.verdict == "ane-fails"
    assert report.observation["culprits"] == ["S2"]
    assert report.observation["conclusion"] == "culprit"
    assert anefit_py.check(THREE, os="ios18").observation is None
    with pytest.raises(anefit_py.InputError, match="observed another model"):
        anefit_py.check(EXPORT_4W, observations=str(obs))
