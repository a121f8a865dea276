"""ExecuTorch's own runtime executing Core ML programs on Linux through anefit's
backend (src/executorch): `Runtime.get().load_program(P).load_method("forward")`
runs the committed export_llm programs and their `anefit fix` outputs.

* original and fixed programs give the same logits over 8 decode steps, in fp32
  and in fp16 (every op rounded to fp16, as the ANE computes);
* each equals `anefit run` on the same program (the Stepper imitates exactly
  what ExecuTorch does around the delegate), and the fp16 export equals
  PyTorch eager within the fp16 model's error;
* the metadata methods answer what the export configured.

Needs a Python with torch and executorch (ANEFIT_EXECUTORCH_PYTHON) and an
anefit built where ExecuTorch's runtime was found (the backend library in the
package); with ExecuTorch named but no library, the tests fail.
"""
import json
import os
import subprocess

import numpy as np
import pytest

from conftest import FIXTURES_DIR, executorch_python, load_npz
from test_pte_fixtures import MANIFEST, decode_inputs

PTE_DIR = os.path.join(FIXTURES_DIR, "pte")
EXPORTS = ["lfm2_export_llm_fp16", "lfm2_export_llm_4w"]
STEPS = 8
HERE = os.path.dirname(os.path.abspath(__file__))


def run_with_backend(anefit_py, script, *args, timeout=900, text=True):
    """Runs tests/python/SCRIPT with the Python that has ExecuTorch and this
    anefit package (whose backend library it registers); the finished process."""
    python = executorch_python()
    if python is None:
        pytest.skip("executorch is not importable (set ANEFIT_EXECUTORCH_PYTHON)")
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(anefit_py.__file__)))
    assert os.path.exists(os.path.join(package_root, "anefit", "libanefit_executorch.so")), (
        "ExecuTorch is named but this anefit has no backend library: build it where "
        "ExecuTorch's runtime is installed")
    env = dict(os.environ, PYTHONPATH=package_root, TQDM_DISABLE="1")
    proc = subprocess.run([python, os.path.join(HERE, script), *map(str, args)], env=env,
                          capture_output=True, text=text, timeout=timeout)
    stderr = proc.stderr if text else proc.stderr.decode(errors="replace")
    assert proc.returncode == 0, stderr[-4000:]
    return proc


def run_in_executorch(anefit_py, inputs, out, precision, programs):
    run_with_backend(anefit_py, "executorch_backend_run.py", inputs, out, precision, *programs)
    return load_npz(out)


def max_diff(a, b):
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


@pytest.fixture(scope="module")
def eager(tmp_path_factory):
    """{name: (inputs.npz, PyTorch eager logits)} for the decode inputs."""
    python = executorch_python()
    if python is None:
        pytest.skip("executorch is not importable (set ANEFIT_EXECUTORCH_PYTHON)")
    d = tmp_path_factory.mktemp("eager")
    out = {}
    for name in EXPORTS:
        inputs = d / f"{name}.inputs.npz"
        decode_inputs(inputs, MANIFEST[name]["params_json"]["vocab_size"], STEPS)
        ref = d / f"{name}.ref.npz"
        proc = subprocess.run([python, os.path.join(HERE, "executorch_reference.py"), name,
                               str(inputs), str(ref)], capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[name] = (inputs, load_npz(ref))
    return out


@pytest.mark.parametrize("name", EXPORTS)
def test_executorch_runs_original_and_fixed_alike(anefit, anefit_py, eager, tmp_path, name):
    x = os.path.join(PTE_DIR, name + ".pte")
    y = tmp_path / (name + ".fixed.pte")
    fix = anefit("fix", x, "-o", y)
    assert fix.returncode == 0, fix.stdout + fix.stderr
    inputs, expected = eager[name]
    report = []
    for precision in ("fp32", "fp16"):
        got = run_in_executorch(anefit_py, inputs, tmp_path / f"{precision}.npz", precision, [x, y])
        original = [got[f"0/step{k}/logits"] for k in range(STEPS)]
        fixed = [got[f"1/step{k}/logits"] for k in range(STEPS)]
        fix_diff = max(max_diff(a, b) for a, b in zip(original, fixed))
        eager_diff = max(max_diff(a, expected[f"step{k}/logits"]) for k, a in enumerate(original))
        report.append(f"{precision}: original vs fixed {fix_diff:.3g}, vs PyTorch {eager_diff:.3g}")
        # The passes fix picks for these exports are exact: bit-equal through
        # ExecuTorch's runtime as through anefit's stepper.
        assert fix_diff == 0.0, report
        # fp16 weights and casts: ~1e-2 on logits of ~3 (test_pte_fixtures).
        # The 4w export's weights are 4-bit: the unquantized eager model is
        # not its reference, and its distance is only reported.
        if name == "lfm2_export_llm_fp16":
            assert eager_diff < (5e-2 if precision == "fp32" else 1e-1), report
    print(f"{name}: " + "; ".join(report))

    # anefit's own stepper does what ExecuTorch does around the delegate.
    ours = tmp_path / "ours.npz"
    run = anefit("run", x, "--inputs", inputs, "-o", ours)
    assert run.returncode == 0, run.stderr
    mine = load_npz(ours)
    logits = [n for n in mine if n.startswith("step0/") and mine[n].size ==
              MANIFEST[name]["params_json"]["vocab_size"]]
    assert len(logits) == 1, logits
    out_name = logits[0].split("/", 1)[1]
    got = load_npz(tmp_path / "fp32.npz")
    assert max(max_diff(mine[f"step{k}/{out_name}"].reshape(1, -1), got[f"0/step{k}/logits"])
               for k in range(STEPS)) == 0.0


def test_metadata_methods_answer_as_on_a_device(anefit_py, eager, tmp_path):
    name = "lfm2_export_llm_fp16"
    inputs, _ = eager[name]
    got = run_in_executorch(anefit_py, inputs, tmp_path / "meta.npz", "fp32",
                            [os.path.join(PTE_DIR, name + ".pte")])
    entry = MANIFEST[name]
    assert int(got["0/meta/get_vocab_size"]) == entry["params_json"]["vocab_size"]
    assert int(got["0/meta/get_n_layers"]) == entry["params_json"]["n_layers"]
    assert int(got["0/meta/get_max_context_len"]) == \
        entry["config_yaml"]["export"]["max_context_length"]
    assert bool(got["0/meta/use_kv_cache"]) is True


def test_llm_runner_generates_the_eager_models_greedy_tokens(anefit, anefit_py, tmp_path):
    """ExecuTorch's TextLLMRunner, through the backend, generates 16 greedy
    tokens from the fp16 export: the eager model's greedy tokens (with fp16
    weights and compute the logits differ by ~1e-2, far below the gaps
    between the top logits of these steps; a tie would show here)."""
    name, prompt, count = "lfm2_export_llm_fp16", 37, 16
    proc = run_with_backend(anefit_py, "executorch_generate.py",
                            os.path.join(PTE_DIR, name + ".pte"), tmp_path / "tokenizer.json",
                            prompt, count, text=False)
    python = executorch_python()
    text = proc.stdout.decode()
    generated = text[:text.index("PyTorchObserver")].strip()
    import importlib.util
    spec = importlib.util.spec_from_file_location("executorch_generate",
                                                  os.path.join(HERE, "executorch_generate.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    vocab = MANIFEST[name]["params_json"]["vocab_size"]
    by_text = {gen.token_text(i, vocab): i for i in range(vocab)}
    runner_tokens = [by_text[generated[i:i + 2]] for i in range(0, len(generated), 2)]

    # The export's end-of-sequence id, from its metadata method (in ExecuTorch).
    meta = anefit("run", os.path.join(PTE_DIR, name + ".pte"), "--engine", "executorch",
                  "--function", "get_eos_ids", "--json")
    assert meta.returncode == 0, meta.stderr
    eos = int(json.loads(meta.stdout)["results"][0]["outputs"][0]["min"])
    proc = subprocess.run([python, os.path.join(HERE, "executorch_reference.py"), "greedy", name,
                           str(prompt), str(count), str(eos)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    eager_tokens = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"{name}: runner {runner_tokens}, eager {eager_tokens}")
    assert len(runner_tokens) == count
    assert runner_tokens == eager_tokens


def test_inspector_attributes_backend_time_to_the_pytorch_source(anefit_py, tmp_path):
    """One profiling event per op, under the payload's debug key: ExecuTorch's
    own Inspector, given the ETRecord, attributes the delegate's time to the
    PyTorch ops and to the lines of the model's source that made them."""
    proc = run_with_backend(anefit_py, "executorch_inspect.py", "block", tmp_path)
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    events = {e["name"]: e for e in report["events"]}
    conv = [e for n, e in events.items() if n.endswith(":conv")]
    linear = [e for n, e in events.items() if n.endswith(":linear")]
    assert len(conv) == 1 and len(linear) == 1, sorted(events)
    assert conv[0]["op_types"] == ["aten.conv1d.default"]
    assert linear[0]["op_types"] == ["aten.linear.default"]
    for event, line in ((conv[0], report["conv_line"]), (linear[0], report["linear_line"])):
        assert event["backend"] == "CoreMLBackend"
        assert event["avg_ms"] is not None and event["avg_ms"] > 0
        assert f'{report["file"]}", line {line}' in event["stack"], event["stack"]
    # The delegate call itself is there too, covering all three ops.
    assert "DELEGATE_CALL" in events


def test_inspector_attributes_the_lfm2_exports_time_to_short_conv_py(anefit_py, tmp_path):
    """The same on LFM2 as export_llm makes it (+debug.generate_etrecord=true):
    the depthwise convs and the short conv's projections land on the lines of
    ExecuTorch's examples/models/lfm2/short_conv.py, the attention's on
    attention.py, the feed-forward's on llama_transformer.py."""
    proc = run_with_backend(anefit_py, "executorch_inspect.py", "lfm2", tmp_path, timeout=1800)
    events = json.loads(proc.stdout.strip().splitlines()[-1])["events"]
    import re

    def files(e):
        return {f for f, _ in re.findall(r'File "[^"]*/(\w+\.py)", line (\d+)', e["stack"])}

    convs = [e for e in events if e["name"].endswith(":conv")]
    linears = [e for e in events if e["name"].endswith(":linear")]
    assert len(convs) == 10  # one depthwise conv per short-conv layer
    assert all(e["op_types"] == ["aten.conv1d.default"] and "short_conv.py" in files(e)
               for e in convs)
    assert all(e["op_types"] == ["aten.linear.default"] for e in linears)
    assert any("short_conv.py" in files(e) for e in linears)
    assert any("attention.py" in files(e) for e in linears)
    assert all(e["avg_ms"] is not None for e in convs + linears)
