"""anefit.executorch.register_backend's refusals, which need no PyTorch: each
is one message that says what to do (the registration itself is tested with
ExecuTorch's runtime in test_executorch_backend.py)."""
import importlib.util
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
