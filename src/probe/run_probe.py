#!/usr/bin/env python3
"""Compile an anefit probe kit's variants on a Mac and write what happened.

Written into every kit by `anefit probe` (docs/probe.md). It reads the kit's
plan.json and, for each variant the plan asks for, in a child process with a
timeout: compiles the package, loads it with compute units CPU_AND_NE (Core ML
compiles for the Neural Engine here), asks one prediction with seeded random
inputs, compares the outputs with a CPU_ONLY prediction, and records the
device of every op from MLComputePlan where the OS has it (macOS 14.4+). The
results go into one observations file (schema anefit.probe-observations/1)
for `anefit check MODEL --observations FILE`.

    python3 run_probe.py [KIT] [--all] [--timeout S] [-o observations.json]
    python3 run_probe.py [KIT] --validate     # what Linux does: checks the kit

Without --all the plan's decision tree picks the next variant from the
outcome of the last: the culprit is named in the fewest compiles. Needs
Python 3.9+, numpy and coremltools (8.0+ for MLComputePlan) on macOS.
"""

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

PLAN_SCHEMA = "anefit.probe-plan/1"
OBSERVATIONS_SCHEMA = "anefit.probe-observations/1"
FAILING = {"off-ane", "load-failed", "predict-failed", "timeout", "crashed"}


class KitError(Exception):
    """The kit is not one this runner can use (one line)."""


def load_plan(kit):
    path = os.path.join(kit, "plan.json")
    try:
        with open(path, encoding="utf-8") as f:
            plan = json.load(f)
    except (OSError, ValueError) as e:
        raise KitError(f"{path}: cannot read the plan: {e}") from e
    if not isinstance(plan, dict) or plan.get("schema") != PLAN_SCHEMA:
        raise KitError(f"{path}: schema: expected \"{PLAN_SCHEMA}\", found "
                       f"{plan.get('schema') if isinstance(plan, dict) else type(plan).__name__}")
    for i, model in enumerate(plan.get("models", [])):
        names = {v["name"] for v in model.get("variants", [])}
        for n, node in enumerate(model.get("nodes", [])):
            if "variant" in node and node["variant"] not in names:
                raise KitError(f"{path}: models[{i}].nodes[{n}]: names no variant of the plan")
    return plan


def package_sha256(path):
    """SHA-256 over a package's files: each relative path, then its bytes."""
    h = hashlib.sha256()
    if os.path.isfile(path):
        files = [(os.path.basename(path), path)]
    else:
        files = []
        for root, _, names in os.walk(path):
            for name in names:
                full = os.path.join(root, name)
                files.append((os.path.relpath(full, path).replace(os.sep, "/"), full))
        files.sort()
    for rel, full in files:
        h.update(rel.encode() + b"\0")
        with open(full, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def validate(kit, plan, load_specs=True):
    """Problems of the kit, one line each: missing packages, packages
    coremltools cannot read (when it is installed)."""
    problems = []
    try:
        import coremltools as ct  # noqa: F401
    except ImportError:
        ct = None
    for model in plan["models"]:
        for v in model["variants"]:
            if not v.get("path"):
                continue
            path = os.path.join(kit, v["path"])
            if not os.path.exists(path):
                problems.append(f"{v['path']}: missing")
                continue
            if ct is not None and load_specs:
                try:
                    ct.models.MLModel(path, skip_model_load=True)
                except Exception as e:  # coremltools raises many kinds
                    problems.append(f"{v['path']}: coremltools cannot read it: {e}")
    return problems


MULTIARRAY_DTYPES = {65568: "float32", 65552: "float16", 131104: "int32", 65600: "float64"}


def input_shape(array_type):
    """The shape to feed: the declared one, else the first enumerated shape,
    else each range's lower bound."""
    if list(array_type.shape):
        return [int(d) for d in array_type.shape]
    which = array_type.WhichOneof("ShapeFlexibility")
    if which == "enumeratedShapes" and array_type.enumeratedShapes.shapes:
        return [int(d) for d in array_type.enumeratedShapes.shapes[0].shape]
    if which == "shapeRange":
        return [max(1, int(r.lowerBound)) for r in array_type.shapeRange.sizeRanges]
    return [1]


def random_inputs(spec, seed=0):
    """Seeded random inputs for a model's description: floats in [-1, 1),
    integers in [0, 8) (token ids and positions stay in range)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    inputs = {}
    for feature in spec.description.input:
        kind = feature.type.WhichOneof("Type")
        if kind != "multiArrayType":
            raise KitError(f"input {feature.name}: {kind} inputs are not generated")
        array_type = feature.type.multiArrayType
        shape = input_shape(array_type)
        dtype = MULTIARRAY_DTYPES.get(array_type.dataType, "float32")
        if dtype == "int32":
            inputs[feature.name] = rng.integers(0, 8, size=shape, dtype=np.int32)
        else:
            inputs[feature.name] = rng.uniform(-1, 1, size=shape).astype(dtype)
    return inputs


def device_name(device):
    """'ane', 'cpu' or 'gpu' for a coremltools MLComputeDevice."""
    name = type(device).__name__
    return {"MLNeuralEngineComputeDevice": "ane", "MLCPUComputeDevice": "cpu",
            "MLGPUComputeDevice": "gpu"}.get(name, name)


def op_devices(compute_plan):
    """{op name (its first output): device} over every function's ops."""
    devices = {}
    program = compute_plan.model_structure.program
    if program is None:
        return devices

    def visit(block):
        for op in block.operations:
            usage = compute_plan.get_compute_device_usage_for_mlprogram_operation(op)
            if usage is not None and op.outputs:
                devices[op.outputs[0].name] = device_name(usage.preferred_compute_device)
            for inner in op.blocks:
                visit(inner)

    for function in program.functions.values():
        visit(function.block)
    return devices


def classify(result):
    """The outcome of a child's result dict (see run_variant)."""
    if result.get("stage") == "read":
        return "invalid"
    if result.get("stage") == "load":
        return "load-failed"
    if result.get("stage") == "predict":
        return "predict-failed"
    devices = result.get("devices")
    if devices is None:
        return "ran"
    return "ane" if devices.get("ane", 0) > 0 else "off-ane"


def run_variant(path, result, seed=0):
    """Runs in the child: compile, load on CPU_AND_NE, predict, compare with
    the CPU, read the compute plan, filling `result` as it goes (its
    "stage" says where a failure stopped it)."""
    import numpy as np
    import coremltools as ct

    result.update(stage="read", seconds={})
    start = time.monotonic()
    spec = ct.utils.load_spec(path)
    inputs = random_inputs(spec, seed)
    result["stage"] = "load"
    model = ct.models.MLModel(path, compute_units=ct.ComputeUnit.CPU_AND_NE)
    result["seconds"]["load"] = time.monotonic() - start
    result["stage"] = "predict"
    t = time.monotonic()
    state = model.make_state() if len(spec.description.state) else None
    outputs = model.predict(inputs, state=state) if state else model.predict(inputs)
    result["seconds"]["predict"] = time.monotonic() - t
    result["stage"] = "done"
    try:
        cpu = ct.models.MLModel(path, compute_units=ct.ComputeUnit.CPU_ONLY)
        cpu_state = cpu.make_state() if state else None
        reference = cpu.predict(inputs, state=cpu_state) if cpu_state else cpu.predict(inputs)
        diff = 0.0
        for name, value in outputs.items():
            a = np.asarray(value, dtype=np.float64)
            b = np.asarray(reference[name], dtype=np.float64)
            if a.shape == b.shape and a.size:
                diff = max(diff, float(np.nanmax(np.abs(a - b))))
        result["max_abs_diff_vs_cpu"] = diff
    except Exception as e:  # the comparison is extra; its failure is recorded
        result["compare_error"] = str(e).splitlines()[0] if str(e) else type(e).__name__
    try:
        from coremltools.models.compute_plan import MLComputePlan

        compiled = model.get_compiled_model_path()
        plan = MLComputePlan.load_from_path(compiled, compute_units=ct.ComputeUnit.CPU_AND_NE)
        devices = op_devices(plan)
        result["op_devices"] = devices
        result["devices"] = {d: sum(1 for v in devices.values() if v == d)
                             for d in ("ane", "cpu", "gpu")}
    except Exception as e:  # older OS or coremltools: placement unknown
        result["compute_plan_error"] = str(e).splitlines()[0] if str(e) else type(e).__name__


def observe(kit, variant, timeout):
    """Runs one variant in a child process; the observation record."""
    path = os.path.join(kit, variant["path"])
    record = {"variant": variant["name"], "sha256": package_sha256(path)}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        start = time.monotonic()
        try:
            child = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", path,
                                    "--result", out], capture_output=True, text=True,
                                   timeout=timeout)
        except subprocess.TimeoutExpired:
            record.update(outcome="timeout", error=f"no answer in {timeout} s",
                          seconds=time.monotonic() - start)
            return record
        record["seconds"] = time.monotonic() - start
        if not os.path.exists(out):
            tail = (child.stderr or "").strip().splitlines()[-1:] or [""]
            record.update(outcome="crashed",
                          error=f"exit {child.returncode}: {tail[0]}".strip())
            return record
        with open(out, encoding="utf-8") as f:
            result = json.load(f)
    record["outcome"] = classify(result)
    for key in ("error", "max_abs_diff_vs_cpu", "devices", "op_devices", "compute_plan_error",
                "compare_error"):
        if key in result:
            record[key] = result[key]
    record["stage_seconds"] = result.get("seconds", {})
    return record


def walk(model, run_one, run_all=False):
    """Follows the plan's tree for one model: run_one(variant) -> outcome.
    Returns the variant names run, in order. With run_all, every variant."""
    variants = {v["name"]: v for v in model["variants"]}
    done = {}

    def run(name):
        if name not in done and variants.get(name, {}).get("path"):
            done[name] = run_one(variants[name])
        return done.get(name)

    if run_all:
        for name in variants:
            run(name)
        return list(done)
    nodes = model["nodes"]
    at, seen = 0, set()
    while 0 <= at < len(nodes) and at not in seen:
        seen.add(at)
        node = nodes[at]
        if "variant" not in node:
            for name in node.get("confirm", []):
                run(name)
            break
        outcome = run(node["variant"])
        if outcome is None or outcome == "invalid":
            break
        nxt = node.get("bad") if outcome in FAILING else node.get("good")
        at = -1 if nxt is None else nxt
    return list(done)


def host():
    info = {"os": "macOS " + platform.mac_ver()[0] if sys.platform == "darwin"
            else platform.platform(), "python": platform.python_version(),
            "machine": platform.machine()}
    try:
        info["chip"] = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"],
                                      capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    try:
        import coremltools as ct

        info["coremltools"] = ct.__version__
    except ImportError:
        pass
    return info


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kit", nargs="?", default=os.path.dirname(os.path.abspath(__file__)),
                        help="the kit directory (default: this script's)")
    parser.add_argument("--all", action="store_true", help="run every variant, not the plan")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per variant")
    parser.add_argument("-o", "--output", help="observations file (default: "
                        "KIT/observations.json)")
    parser.add_argument("--validate", action="store_true",
                        help="only check the kit (what happens off macOS)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.one:
        result = {}
        try:
            run_variant(args.one, result)
        except BaseException as e:  # the parent reads the stage it failed in
            result["error"] = (str(e).splitlines() or [type(e).__name__])[0]
        with open(args.result, "w", encoding="utf-8") as f:
            json.dump(result, f)
        return 0

    try:
        plan = load_plan(args.kit)
    except KitError as e:
        print(f"run_probe: error: {e}", file=sys.stderr)
        return 2
    problems = validate(args.kit, plan)
    for p in problems:
        print(f"run_probe: error: {p}", file=sys.stderr)
    if problems:
        return 2
    count = sum(1 for m in plan["models"] for v in m["variants"] if v.get("path"))
    if args.validate or sys.platform != "darwin":
        print(f"run_probe: the kit is valid: {len(plan['models'])} model(s), {count} packages")
        if sys.platform != "darwin":
            print("run_probe: compiling for the Neural Engine needs macOS with Core ML; run this "
                  "script there (docs/probe.md)")
        return 0

    runs = []
    for index, model in enumerate(plan["models"]):
        def run_one(variant, index=index):
            print(f"run_probe: {variant['name']} ...", end="", flush=True)
            record = observe(args.kit, variant, args.timeout)
            record["model"] = index
            runs.append(record)
            print(f" {record['outcome']}", flush=True)
            return record["outcome"]

        walk(model, run_one, args.all)
    observations = {"schema": OBSERVATIONS_SCHEMA, "host": host(), "plan": plan, "runs": runs}
    out = args.output or os.path.join(args.kit, "observations.json")
    with open(out + ".tmp", "w", encoding="utf-8") as f:
        json.dump(observations, f, indent=1)
    os.replace(out + ".tmp", out)
    print(f"run_probe: {len(runs)} variant(s) observed; wrote {out}")
    print(f"run_probe: next: anefit check {plan.get('source', 'MODEL')} --observations {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
