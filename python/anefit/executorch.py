"""anefit for ExecuTorch export scripts.

Check every Core ML delegate of a lowered program, then lower again with the
partitioner arguments the check recommends::

    import anefit.executorch as ae
    from executorch.backends.apple.coreml.partition import CoreMLPartitioner

    reports = ae.check_program("model.pte")
    for report in reports:
        print(report.summary())
    partitioner = CoreMLPartitioner(**ae.partitioner_kwargs(reports),
                                    compile_specs=compile_specs)

Run Core ML programs in ExecuTorch's own runtime on any OS: two lines before
``Runtime.get()`` (or ExecuTorch's ``TextLLMRunner``) make every Core ML
delegate run on anefit's interpreter::

    import anefit.executorch as ae
    ae.register_backend()

    from executorch.runtime import Runtime
    method = Runtime.get().load_program("model.pte").load_method("forward")

Checking reads the ``.pte`` file itself and does not import ExecuTorch;
:func:`register_backend` imports it.
"""

from __future__ import annotations

import ast
import ctypes
import os
import sys
from typing import Dict, List, Optional, Sequence, Union

from ._core import Report, check, load_delegates, partitioner_keywords

__all__ = ["backend_library", "check_program", "partitioner_kwargs", "register_backend"]

def check_program(
    path: Union[str, "os.PathLike[str]"],
    chip: str = "any",
    os: str = "any",
    compute_units: str = "cpu_and_ne",
) -> List[Report]:
    """Checks every Core ML delegate of the ExecuTorch program at ``path``, in
    program order (``report.path`` is ``'program.pte#N'``).

    ``chip``, ``os`` and ``compute_units`` are those of :func:`anefit.check`.
    Raises :class:`anefit.InputError` for a malformed program or one without
    a Core ML delegate.
    """
    delegates = load_delegates(path, weights=False)
    if not delegates:
        from ._core import InputError

        raise InputError(f"{_text(path)}: expected a Core ML delegate, found none "
                         "(was the program lowered with CoreMLPartitioner?)")
    return [check(m, chip=chip, os=os, compute_units=compute_units) for m in delegates]


def partitioner_kwargs(reports: Union[Report, Sequence[Report]]) -> Dict[str, object]:
    """The ``CoreMLPartitioner`` arguments the reports recommend, to lower
    again with ``CoreMLPartitioner(**partitioner_kwargs(reports),
    compile_specs=...)``:

    - ``skip_ops_for_coreml_delegation``: the aten ops behind the ops the
      checker puts off the ANE (:attr:`Report.skip_ops_for_coreml_delegation`),
      sorted, each once; always given (an empty list when nothing needs to stay
      out);
    - every other argument a finding's ``CoreMLPartitioner`` remedy sets
      (:attr:`Finding.remedies`, the remedies table ``anefit check`` prints for
      a ``.pte``), e.g. ``take_over_mutable_buffer=False`` when a Core ML
      state fails; absent otherwise, so the partitioner's defaults stand.

    These are the arguments ``anefit split --skip-list`` writes for the same
    program, computed by the same code; the values come as Python source and
    are evaluated here. Remedies are named for models read from a ``.pte``
    (:func:`check_program`); a report on a ``.mlpackage`` contributes its skip
    list only.
    """
    if isinstance(reports, Report):
        reports = [reports]
    return {name: ast.literal_eval(value) for name, value in partitioner_keywords(list(reports))}


def _text(path: Union[str, "os.PathLike[str]"]) -> str:
    import os as _os

    return _os.fspath(path)


_BACKEND_LIBRARY = "libanefit_executorch.so"


def backend_library() -> Optional[str]:
    """The path of anefit's ExecuTorch backend library: ``$ANEFIT_EXECUTORCH_BACKEND``,
    else the one beside this package (present when anefit was built for an
    environment that had ExecuTorch's runtime); ``None`` when there is none."""
    env = os.environ.get("ANEFIT_EXECUTORCH_BACKEND")
    if env:
        return env
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), _BACKEND_LIBRARY)
    return here if os.path.exists(here) else None


def _packaged_backend_version() -> Optional[str]:
    """The ExecuTorch version the library beside this package was built
    against (``_executorch_build.py``, written with it), read without loading
    the library: a library of another version may not even load."""
    try:
        from ._executorch_build import EXECUTORCH_VERSION
    except ImportError:
        return None
    return EXECUTORCH_VERSION


def _rebuild_command() -> str:
    """The command that builds this anefit again in this environment, from the
    source pip recorded (``direct_url.json``) when there is one."""
    source = "<anefit source>"
    try:
        import json
        from importlib import metadata

        text = metadata.distribution("anefit").read_text("direct_url.json")
        url = json.loads(text).get("url", "") if text else ""
        if url.startswith("file://"):
            from urllib.parse import unquote, urlparse

            source = unquote(urlparse(url).path)
        elif url:
            source = url
    except Exception:  # noqa: BLE001 (metadata of an uninstalled build tree: the placeholder)
        pass
    return (f"{sys.executable} -m pip install --force-reinstall --no-deps "
            f"--no-cache-dir {source}")


def register_backend(precision: str = "fp32", threads: int = 0,
                     exact_products: bool = False) -> str:
    """Registers anefit as ``CoreMLBackend`` in the ExecuTorch runtime of this
    process, so that ``Runtime.get()``, ``Method.execute`` and ExecuTorch's LLM
    runner run every Core ML delegate on anefit's interpreter (ExecuTorch runs
    the rest of the program, and writes its buffers back). Call it before the
    program is loaded; calling it again changes the options of delegates
    loaded afterwards.

    ``precision`` is ``"fp32"`` (as ``anefit run``) or ``"fp16"`` (every float
    result rounded to fp16, as the Neural Engine computes); ``threads`` the
    interpreter's threads (0: every core); ``exact_products`` as ``anefit run
    --exact-products`` (no grid for speed: the products ``anefit fix`` proves
    fp16 mode with). Returns the library's path.

    The library is built with anefit, against the ExecuTorch runtime of the
    environment anefit is installed into (``pip install`` after ExecuTorch).
    Raises ``RuntimeError`` on macOS (ExecuTorch registers Core ML itself),
    when the library is missing (anefit was installed before ExecuTorch),
    when it was built against another ExecuTorch version than the one
    installed, and when the runtime refuses it; each message gives the
    command that fixes it. ``ImportError`` without ExecuTorch.
    """
    if sys.platform == "darwin":
        raise RuntimeError("register_backend: on macOS ExecuTorch's own CoreMLBackend runs Core ML "
                           "delegates on the device; anefit's backend is for other systems")
    path = backend_library()
    if path is None:
        raise RuntimeError("register_backend: this anefit has no ExecuTorch backend library: it "
                           "was built where ExecuTorch's runtime was not installed. Install "
                           "executorch first, then build anefit again in this environment: "
                           f"{_rebuild_command()} (or set ANEFIT_EXECUTORCH_BACKEND to a "
                           "libanefit_executorch.so)")
    if not os.path.isfile(path):
        raise RuntimeError(f"register_backend: ANEFIT_EXECUTORCH_BACKEND={path}: no such file")
    try:
        from executorch.version import __version__ as installed_full
    except ImportError as e:
        raise ImportError("register_backend needs ExecuTorch's runtime with PyTorch (pip install "
                          f"executorch): {e}") from e
    installed = installed_full.split("+")[0]

    def mismatch(built: str) -> RuntimeError:
        return RuntimeError(f"register_backend: {path} was built against ExecuTorch {built}; this "
                            f"environment has ExecuTorch {installed}. Build anefit again for "
                            f"this one: {_rebuild_command()}; or go back to ExecuTorch {built}: "
                            f"pip install executorch=={built}")

    packaged = _packaged_backend_version() if "ANEFIT_EXECUTORCH_BACKEND" not in os.environ else None
    if packaged is not None and packaged != installed:
        raise mismatch(packaged)
    try:
        from executorch.extension.pybindings import portable_lib  # noqa: F401  (loads the runtime)
    except ImportError as e:
        raise ImportError("register_backend needs ExecuTorch's runtime with PyTorch (pip install "
                          f"executorch): {e}") from e
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise RuntimeError(f"register_backend: {path} does not load ({e}); build anefit again in "
                           f"this environment: {_rebuild_command()}") from e
    lib.anefit_executorch_version.restype = ctypes.c_char_p
    built = lib.anefit_executorch_version().decode()
    if installed != built:
        raise mismatch(built)
    lib.anefit_executorch_register.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int,
                                               ctypes.c_char_p, ctypes.c_size_t]
    message = ctypes.create_string_buffer(1024)
    if lib.anefit_executorch_register(precision.encode(), int(threads), int(bool(exact_products)),
                                      message, len(message)):
        raise RuntimeError("register_backend: " + message.value.decode(errors="replace"))
    return path
