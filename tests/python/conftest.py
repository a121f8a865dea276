"""Shared pytest fixtures and helpers for anefit's Python tests.

Binaries come from the environment that ctest sets (tests/CMakeLists.txt):
  ANEFIT_BIN        path of the `anefit` executable
  ANEFIT_OPT_BIN    path of the `anefit-opt` executable
  ANEFIT_BUILD_DIR  the CMake build directory
  ANEFIT_PYTHON     "1" when the build made the Python package; PYTHONPATH then
                    points at it (a wheel installed into the interpreter works too)
A skip fails instead (pytest_runtest_makereport, pytest_make_collect_report) unless
its reason names one of the few optional things (_MAY_SKIP): the ExecuTorch
runtime, schemas that are not available offline, a Python package the build
did not make. Anything else - a binary, a verb, coremltools, a committed or
generated fixture - the build always has, and a skip would hide its absence.
The Python package, once the build says it made it, must import.

Helpers other test files use:
  FIXTURES_DIR, fixture_names(), fixture_info(name), fixture_package(name),
  load_npz(path), load_with_coremltools(path) -> LoadedModel,
  program_op_types(prog), run_anefit(...) via the `anefit` fixture,
  decode_inputs(path, vocab, steps) and assert_steps_alike(...) for .pte fixes.
"""

import functools
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES_DIR = os.path.join(REPO_ROOT, "tests", "fixtures")
GENERATED_DIR = os.path.join(FIXTURES_DIR, "generated")
EXAMPLES_DIR = os.path.join(REPO_ROOT, "examples")

# The only reasons a test may skip for: what a build may lack by design.
_MAY_SKIP = re.compile(r"executorch is not importable|not available offline|"
                       r"PyTorch is importable here|"
                       r"could not import 'jsonschema'|"
                       r"the anefit Python package is not built or installed")


def _skip_reason(report):
    if isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])
    return str(report.longrepr)


def _fail_unless_optional(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = _skip_reason(report)
        if not _MAY_SKIP.search(reason):
            report.outcome = "failed"
            report.longrepr = "skipped, but this must be there: " + reason


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_unless_optional(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    # A whole module skipped (importorskip at import time) counts the same.
    outcome = yield
    _fail_unless_optional(outcome.get_result())


# ---------------------------------------------------------------------------------
# Fixture files
# ---------------------------------------------------------------------------------

def fixture_names():
    """Names of the fixtures described by a tests/fixtures/<name>/fixture.json."""
    out = []
    for entry in sorted(os.listdir(FIXTURES_DIR)):
        if os.path.isfile(os.path.join(FIXTURES_DIR, entry, "fixture.json")):
            out.append(entry)
    return out


def fixture_info(name):
    with open(os.path.join(FIXTURES_DIR, name, "fixture.json")) as f:
        return json.load(f)


def fixture_package(name, generate=True):
    """Path of a fixture's model.mlpackage. Large packages live in
    tests/fixtures/generated/ (git-ignored); when one is missing it is generated on
    demand with scripts/gen_fixtures.sh (deterministic, so the committed files of
    the fixture do not change). None when it is missing and cannot be generated."""
    info = fixture_info(name)
    if info.get("package") == "generated":
        path = os.path.join(GENERATED_DIR, name, "model.mlpackage")
        if not os.path.isdir(path) and generate and have_coremltools():
            subprocess.run(["bash", os.path.join(REPO_ROOT, "scripts", "gen_fixtures.sh"), name],
                           check=False, capture_output=True, timeout=600,
                           env=dict(os.environ, PYTHON=sys.executable))
    else:
        path = os.path.join(FIXTURES_DIR, name, "model.mlpackage")
    return path if os.path.isdir(path) else None


def error_line(proc):
    """The one-line message of a failed `anefit` run, without its prefix."""
    assert proc.returncode == 2, proc.stderr
    return proc.stderr.strip().splitlines()[-1].removeprefix("anefit: error: ")


def load_npz(path):
    """Load a .npz into a plain dict {key: ndarray}."""
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def fixture_functions(name):
    """[(function, info dict with inputs/outputs/states, inputs path, expected path)].
    Single-function fixtures give one entry named "main" with inputs.npz/expected.npz;
    multi-function fixtures use those files for the default function and
    inputs.<function>.npz / expected.<function>.npz for the others."""
    info = fixture_info(name)
    d = os.path.join(FIXTURES_DIR, name)
    if "functions" not in info:
        return [("main", info, os.path.join(d, "inputs.npz"), os.path.join(d, "expected.npz"))]
    out = []
    for fn, fio in info["functions"].items():
        suffix = "" if fn == info["default_function"] else "." + fn
        out.append((fn, fio, os.path.join(d, f"inputs{suffix}.npz"),
                    os.path.join(d, f"expected{suffix}.npz")))
    return out


def fixture_steps(arrays):
    """Split step-keyed arrays ("step3/x", "step3/state/s") into a list per step of
    {rest_of_key: array}. Arrays without a step prefix come back as step 0."""
    steps = {}
    for key, val in arrays.items():
        if key.startswith("step") and "/" in key:
            idx, rest = key.split("/", 1)
            steps.setdefault(int(idx[4:]), {})[rest] = val
        else:
            steps.setdefault(0, {})[key] = val
    return [steps[i] for i in sorted(steps)]


# ---------------------------------------------------------------------------------
# coremltools as an external validator (Linux: load and parse only, no prediction)
# ---------------------------------------------------------------------------------

def _import_coremltools():
    try:
        import coremltools  # noqa: F401
        return coremltools
    except Exception:  # ImportError, or a broken install
        return None


def have_coremltools():
    return _import_coremltools() is not None


class LoadedModel:
    """What coremltools sees in a package: the protobuf spec and the pymil Program."""

    def __init__(self, path, spec, program):
        self.path = path
        self.spec = spec
        self.program = program

    @property
    def description(self):
        return self.spec.description

    def io(self):
        """{'inputs'|'outputs'|'states': {name: (shape tuple, dtype str)}} from the spec."""
        from coremltools.proto import Model_pb2

        names = {
            Model_pb2.ArrayFeatureType.FLOAT32: "fp32",
            Model_pb2.ArrayFeatureType.FLOAT16: "fp16",
            Model_pb2.ArrayFeatureType.INT32: "int32",
            Model_pb2.ArrayFeatureType.DOUBLE: "fp64",
        }

        def arr(t):
            return (tuple(int(s) for s in t.shape), names.get(t.dataType, str(t.dataType)))

        def io(d):
            return {
                "inputs": {f.name: arr(f.type.multiArrayType) for f in d.input},
                "outputs": {f.name: arr(f.type.multiArrayType) for f in d.output},
                "states": {f.name: arr(f.type.stateType.arrayType) for f in d.state},
            }

        d = self.spec.description
        if len(d.functions) == 0:
            return io(d)
        # multi-function model: the default function's description
        return io(next(f for f in d.functions if f.name == d.defaultFunctionName))

    def functions_io(self):
        """{function name: io()-style dict} for every function ("main" for a
        single-function model)."""
        d = self.spec.description
        if len(d.functions) == 0:
            return {"main": self.io()}
        saved = d.defaultFunctionName
        out = {}
        for f in d.functions:
            d.defaultFunctionName = f.name
            out[f.name] = self.io()
        d.defaultFunctionName = saved
        return out


def load_with_coremltools(path):
    """Load a .mlpackage (or a bare .mlmodel) the way an external validator can on
    Linux: ct.utils.load_spec for the protobuf, then coremltools' milproto loader
    for the ML Program, which parses every op and reads every weight blob.
    Raises on anything coremltools rejects. Skips the test when coremltools is absent."""
    ct = _import_coremltools()
    if ct is None:
        pytest.skip("coremltools is not installed")
    from coremltools.converters.mil.frontend.milproto.load import load as milproto_load

    spec = ct.utils.load_spec(str(path))
    program = None
    if spec.WhichOneof("Type") == "mlProgram":
        weights_dir = os.path.join(str(path), "Data", "com.apple.CoreML", "weights")
        if not os.path.isdir(weights_dir):
            weights_dir = ""
        program = milproto_load(spec, specification_version=spec.specificationVersion,
                                file_weights_dir=weights_dir)
    return LoadedModel(str(path), spec, program)


def program_op_types(program, with_const=True):
    """Histogram {op_type: count} over every function and nested block of a pymil Program."""
    hist = {}

    def walk(block):
        for op in block.operations:
            if with_const or op.op_type != "const":
                hist[op.op_type] = hist.get(op.op_type, 0) + 1
            for b in op.blocks:
                walk(b)

    for fn in program.functions.values():
        walk(fn)
    return dict(sorted(hist.items()))


def program_function_io(program):
    """{function: ([(input name, shape, dtype)], [output names])} for a pymil Program."""
    from coremltools.converters.mil.mil import types

    out = {}
    for fname, fn in program.functions.items():
        ins = []
        for n, v in fn.inputs.items():
            t = v.sym_type
            if types.is_state(t):
                t = t.wrapped_type()
                kind = "state"
            else:
                kind = "tensor"
            ins.append((n, kind, tuple(int(s) for s in v.shape), types.builtin_to_string(v.dtype)))
        out[fname] = (ins, [o.name for o in fn.outputs])
    return out


# ---------------------------------------------------------------------------------
# Binaries
# ---------------------------------------------------------------------------------

def _binary(env_var, default_rel):
    path = os.environ.get(env_var)
    if not path:
        build = os.environ.get("ANEFIT_BUILD_DIR", os.path.join(REPO_ROOT, "build"))
        path = os.path.join(build, default_rel)
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


class Tool:
    """A command-line binary: call it with arguments, get a CompletedProcess."""

    def __init__(self, path):
        self.path = path

    def __call__(self, *args, check=False, timeout=300, **kw):
        proc = subprocess.run([self.path, *map(str, args)], capture_output=True, text=True,
                              timeout=timeout, **kw)
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{self.path} {' '.join(map(str, args))} exited {proc.returncode}\n"
                f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
        return proc


@pytest.fixture(scope="session")
def anefit():
    path = _binary("ANEFIT_BIN", os.path.join("tools", "anefit", "anefit"))
    if path is None:
        pytest.skip("anefit binary not found (set ANEFIT_BIN or ANEFIT_BUILD_DIR)")
    return Tool(path)


@pytest.fixture(scope="session")
def anefit_opt():
    path = _binary("ANEFIT_OPT_BIN", os.path.join("tools", "anefit-opt", "anefit-opt"))
    if path is None:
        pytest.skip("anefit-opt binary not found (set ANEFIT_OPT_BIN or ANEFIT_BUILD_DIR)")
    return Tool(path)


@pytest.fixture(scope="session")
def anefit_py():
    """The `anefit` Python package (the build tree's, or an installed wheel)."""
    try:
        import anefit as package
    except ImportError as e:
        if os.environ.get("ANEFIT_PYTHON") == "1":
            raise  # built but not importable: that is a defect, not a skip
        pytest.skip(f"the anefit Python package is not built or installed ({e})")
    return package


@pytest.fixture(scope="session")
def coremltools():
    ct = _import_coremltools()
    if ct is None:
        pytest.skip("coremltools is not installed")
    return ct


@pytest.fixture(scope="session")
def lfm2_1p2b(tmp_path_factory, coremltools):
    """(package path, op count) of the LFM2.5-1.2B-shaped decode program
    (report_util.build_lfm2_1p2b), built once for the session: the report's HTML
    and browser tests read the same package."""
    from report_util import build_lfm2_1p2b
    return build_lfm2_1p2b(tmp_path_factory.mktemp("lfm2_1p2b"))


@pytest.fixture(scope="session")
def build_dir():
    path = os.environ.get("ANEFIT_BUILD_DIR")
    if not path or not os.path.isdir(path):
        pytest.skip("ANEFIT_BUILD_DIR is not set")
    return path


def pytest_configure(config):
    # coremltools prints warnings about its missing macOS-only native modules; keep
    # test output readable by making its progress bars quiet.
    os.environ.setdefault("TQDM_DISABLE", "1")
    if REPO_ROOT not in sys.path:
        sys.path.insert(0, REPO_ROOT)


# ---------------------------------------------------------------------------------
# ExecuTorch as an external validator of .pte files
# ---------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def executorch_python():
    """A Python that can import `executorch`: this one when it can, else the
    interpreter named by ANEFIT_EXECUTORCH_PYTHON. None when there is neither."""
    # The runtime alone (pip install --no-deps executorch, as CI installs it
    # for the C++ backend) imports without PyTorch only up to a point: ask
    # for what the tests use.
    here = subprocess.run([sys.executable, "-c", "import executorch.runtime"],
                          capture_output=True, text=True, timeout=300)
    if here.returncode == 0:
        return sys.executable
    path = os.environ.get("ANEFIT_EXECUTORCH_PYTHON")
    if not path:
        return None
    # Named (setup.sh with ANEFIT_EXECUTORCH=1 names it): a broken one fails
    # the test rather than skipping it.
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise AssertionError(f"ANEFIT_EXECUTORCH_PYTHON={path} is not an executable")
    probe = subprocess.run([path, "-c", "import executorch.runtime"], capture_output=True,
                           text=True, timeout=300)
    if probe.returncode != 0:
        raise AssertionError(f"ANEFIT_EXECUTORCH_PYTHON={path} cannot import executorch.runtime:\n"
                             f"{probe.stderr[-2000:]}")
    return path


def executorch_probe(*paths):
    """{path: report} from tests/python/executorch_probe.py: what ExecuTorch's own
    runtime and deserializer see in each .pte. Skips the test without ExecuTorch."""
    python = executorch_python()
    if python is None:
        pytest.skip("executorch is not importable (set ANEFIT_EXECUTORCH_PYTHON to a Python "
                    "that has it)")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "executorch_probe.py")
    proc = subprocess.run([python, script, *map(str, paths)], capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"executorch_probe failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout)


def decode_inputs(path, vocab, steps, seed=1):
    """`steps` decode steps of random tokens at positions 0, 1, ..., as a runner feeds them,
    written to `path` (an .npz of step<k>/tokens and step<k>/attn_options_input_pos)."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for k in range(steps):
        arrays[f"step{k}/tokens"] = rng.integers(0, vocab, size=(1, 1)).astype(np.int32)
        arrays[f"step{k}/attn_options_input_pos"] = np.array([k], dtype=np.int32)
    np.savez(path, **arrays)
    return arrays


def assert_steps_alike(label, precision, original, fixed):
    """The proof of a .pte fix, whichever way the two programs were stepped (`anefit
    run`, anefit.Session): `original` and `fixed` are their logits at each of the same
    decode steps (decode_inputs). The carried caches change the logits from step to
    step, and the programs agree in fp32 to a step of fp16 at the largest logit (the
    logits are fp16 outputs, and scale-norm's norm rounds apart from the original's
    by fp32 round-off, which can move a logit to the next fp16 value), or in fp16
    mode (every op rounded to fp16, as the ANE computes) to 1% of the largest logit."""
    assert len(fixed) == len(original)
    diff = max(float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
               for a, b in zip(original, fixed))
    scale = max(float(np.max(np.abs(a))) for a in original)
    print(f"{label} {precision}: max |diff logits| over {len(original)} steps = {diff:.3g} "
          f"(max |logit| {scale:.3g})")
    assert not np.array_equal(original[0], original[-1])
    assert diff <= (2.0**-10 if precision == "fp32" else 1e-2) * max(scale, 1.0)
