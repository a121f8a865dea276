"""anefit.executorch.register_backend's refusals, which need no PyTorch: each
is one message that says what to do; and, where ExecuTorch and PyTorch are
installed, the installed package's backend registered and running a program
(the build tree's backend against ExecuTorch's own tests is in
test_executorch_backend.py)."""
import importlib.util
import os
import sys

import pytest


def test_a_backend_path_that_does_not_exist_is_named(anefit_py, monkeypatch):
    import anefit.executorch as ae

    monkeypatch.setenv("ANEFIT_EXECUTORCH_BACKEND", "/nonexistent/libanefit_executorch.so")
    assert ae.backend_library() == "/nonexistent/libanefit_executorch.so"
    with pytest.raises(RuntimeError, match=r"ANEFIT_EXECUTORCH_BACKEND=/nonexistent/"
                                           r"libanefit_executorch.so: no such file"):
        ae.register_backend()


def test_macos_is_refused(anefit_py, monkeypatch):
    import anefit.executorch as ae

    monkeypatch.setattr(sys, "platform", "darwin")
    with pytest.raises(RuntimeError, match="on macOS ExecuTorch's own CoreMLBackend"):
        ae.register_backend()


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None,
                    reason="PyTorch is importable here: the registration runs "
                           "(test_executorch_backend.py)")
def test_without_pytorch_it_says_what_it_needs(anefit_py, monkeypatch):
    import anefit.executorch as ae

    if ae.backend_library() is None:
        with pytest.raises(RuntimeError, match="has no ExecuTorch backend library"):
            ae.register_backend()
    else:
        with pytest.raises(ImportError, match="needs ExecuTorch's runtime with PyTorch"):
            ae.register_backend()


# With ExecuTorch's runtime and PyTorch in this Python (scripts/test_wheel.sh's
# environment: ExecuTorch and PyTorch from PyPI, then `pip install <checkout>`
# with no option), the package carries a backend built against that very
# runtime: registered, it runs a committed Core ML program.
_RUNTIME = (importlib.util.find_spec("torch") is not None
            and importlib.util.find_spec("executorch") is not None)
needs_runtime = pytest.mark.skipif(
    not _RUNTIME, reason="executorch is not importable with PyTorch here (scripts/test_wheel.sh's "
                         "ExecuTorch environment runs these)")


@needs_runtime
def test_another_executorch_version_is_named_with_the_command_that_fixes_it(anefit_py,
                                                                            monkeypatch):
    import executorch.version

    import anefit.executorch as ae

    assert ae.backend_library() is not None, (
        "ExecuTorch is installed here, but the installed anefit has no backend library: "
        "the build did not find the environment's ExecuTorch")
    built = executorch.version.__version__.split("+")[0]
    monkeypatch.setattr(executorch.version, "__version__", "0.9.0")
    with pytest.raises(RuntimeError) as info:
        ae.register_backend()
    message = str(info.value)
    assert f"was built against ExecuTorch {built}; this environment has ExecuTorch 0.9.0" in message
    assert "-m pip install --force-reinstall --no-deps --no-cache-dir " in message
    assert f"pip install executorch=={built}" in message


@needs_runtime
def test_the_registered_backend_runs_a_core_ml_program_as_anefit_run(anefit, anefit_py, tmp_path):
    import numpy as np
    import torch
    from executorch.runtime import Runtime

    import anefit.executorch as ae
    from conftest import FIXTURES_DIR, decode_inputs, load_npz

    path = ae.register_backend()
    assert path == ae.backend_library()
    pte = os.path.join(FIXTURES_DIR, "pte", "lfm2_export_llm_4w.pte")
    program = Runtime.get().load_program(pte)
    (vocab,) = program.load_method("get_vocab_size").execute([])
    inputs = decode_inputs(tmp_path / "inputs.npz", int(vocab), 2)
    method = program.load_method("forward")
    got = []
    for k in range(2):
        tokens = torch.tensor(inputs[f"step{k}/tokens"], dtype=torch.long)
        pos = torch.tensor(inputs[f"step{k}/attn_options_input_pos"], dtype=torch.long)
        (logits,) = method.execute([tokens, pos])
        got.append(logits.numpy())
    assert got[0].shape == (1, int(vocab)) and np.isfinite(got[0]).all()

    # The same steps in anefit's own stepper: the same numbers.
    run = anefit("run", pte, "--inputs", tmp_path / "inputs.npz", "-o", tmp_path / "ours.npz")
    assert run.returncode == 0, run.stderr
    ours = load_npz(tmp_path / "ours.npz")
    (name,) = [n.split("/", 1)[1] for n in ours
               if n.startswith("step0/") and ours[n].size == int(vocab)]
    for k in range(2):
        assert np.array_equal(ours[f"step{k}/{name}"].reshape(got[k].shape), got[k]), k
