#!/usr/bin/env python3
"""One decode step of the LFM2-350M-shaped model: the Python API against `anefit run`.

The model is the one bench/run_lfm2_350m.py builds (16 layers at D = 1024, fp16
weights, conv and KV states as Core ML states). Both sides run the same steps
on the same inputs, each in a child process of its own, one thread unless
BENCH_THREADS says otherwise:

  * `anefit run MODEL --inputs steps.npz`: per-step time from the difference of
    a (1 + N)-step and a 1-step run, so loading is not counted (as
    run_lfm2_350m.py measures it);
  * `anefit.Session(MODEL).run(inputs)` in Python: the model loaded once, one
    warm-up step, then N steps timed one by one (their mean is comparable with
    the CLI's difference; the median is printed too).

The pair is run --repeats times, alternating, and the ratio of each pair is
reported with the median ratio: Python per-step time / CLI per-step time (1.00
means equal; the goal is at most 1.05). Peak RSS of both children and the last
step's logits (which must be bit-identical) are compared too.

    python3 bench/python_run_lfm2_350m.py --anefit build/tools/anefit/anefit \\
        --pythonpath build/python [--steps 6] [--repeats 3]
"""

import os

_THREADS = os.environ.get("BENCH_THREADS", "1")
if _THREADS != "0":
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = _THREADS

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_lfm2_350m as lfm2  # noqa: E402

# The Python side, run in a child so that its peak RSS is its own.
PYTHON_SIDE = r"""
import json, os, resource, sys, time
import numpy as np
import anefit
model_path, steps_npz, steps, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
with np.load(steps_npz) as z:
    feeds = [{k.split("/", 1)[1]: z[k] for k in z.files if k.startswith(f"step{s}/")}
             for s in range(steps + 1)]
t0 = time.perf_counter()
session = anefit.Session(model_path)
loaded = time.perf_counter() - t0
session.run(feeds[0])  # warm-up: the first step touches every weight page
times, cpu = [], []
for feed in feeds[1:]:
    c = resource.getrusage(resource.RUSAGE_SELF)
    s = time.perf_counter()
    outputs = session.run(feed)
    times.append(time.perf_counter() - s)
    d = resource.getrusage(resource.RUSAGE_SELF)
    cpu.append(d.ru_utime + d.ru_stime - c.ru_utime - c.ru_stime)
np.save(out, next(iter(outputs.values())))
print(json.dumps({"times": times, "cpu": cpu, "load": loaded,
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def python_side(args, model, npz, out):
    env = dict(os.environ)
    if args.pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.pythonpath,
                                                          env.get("PYTHONPATH")]))
    proc = subprocess.run([args.python, "-c", PYTHON_SIDE, model, npz, str(args.steps), out],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"the Python side failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


def cli_side(args, model, workdir, npz):
    """Per-step wall and CPU seconds of `anefit run`, and its peak RSS."""
    one = os.path.join(workdir, "one.npz")
    with np.load(npz) as z:
        np.savez(one, **{k: z[k] for k in z.files if k.startswith("step0/")})
    out = os.path.join(workdir, "cli_out.npz")
    t1, c1, _ = lfm2.measure([args.anefit, "run", model, "--inputs", one])
    tn, cn, rss = lfm2.measure([args.anefit, "run", model, "--inputs", npz, "-o", out])
    return (tn - t1) / args.steps, (cn - c1) / args.steps, rss, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--anefit", default=os.environ.get("ANEFIT_BIN", "build/tools/anefit/anefit"))
    ap.add_argument("--pythonpath", default=os.environ.get("ANEFIT_PYTHONPATH", "build/python"),
                    help="where `import anefit` finds the package ('' for an installed one)")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--steps", type=int, default=6, help="timed decode steps per run")
    ap.add_argument("--repeats", type=int, default=3, help="CLI/Python pairs, alternating")
    ap.add_argument("--workdir", help="where to build the model (default: a temp dir)")
    args = ap.parse_args()
    args.anefit = os.path.abspath(args.anefit)
    workdir = args.workdir or tempfile.mkdtemp(prefix="anefit-pybench-")
    _, weight_bytes, logits = lfm2.build(workdir, 0)
    model = os.path.join(workdir, "model.mil")
    npz = os.path.join(workdir, "steps.npz")
    np.savez(npz, **{f"step{k}/{n}": a for k in range(args.steps + 1)
                     for n, a in lfm2.step_inputs(k).items()})
    print(f"model: {weight_bytes / 2**20:.0f} MiB of fp16 weights; {args.steps} steps per run, "
          f"{args.repeats} pairs, threads: {_THREADS if _THREADS != '0' else 'default'}")

    ratios, cpu_ratios = [], []
    for r in range(args.repeats):
        cli_step, cli_cpu, cli_rss, cli_out = cli_side(args, model, workdir, npz)
        py_out = os.path.join(workdir, "py_logits.npy")
        py = python_side(args, model, npz, py_out)
        py_mean = statistics.mean(py["times"])
        py_cpu = statistics.mean(py["cpu"])
        ratios.append(py_mean / cli_step)
        cpu_ratios.append(py_cpu / cli_cpu)
        print(f"pair {r}: anefit run {cli_step * 1e3:7.1f} ms/step wall {cli_cpu * 1e3:7.1f} CPU | "
              f"Session.run {py_mean * 1e3:7.1f} ms/step wall (median "
              f"{statistics.median(py['times']) * 1e3:.1f}) {py_cpu * 1e3:7.1f} CPU | "
              f"ratio {ratios[-1]:.3f} wall, {cpu_ratios[-1]:.3f} CPU")
    with np.load(cli_out) as z:
        same = np.array_equal(z[f"step{args.steps}/{logits}"], np.load(py_out))
    print(f"Python / CLI per-step time, median of {args.repeats}: "
          f"{statistics.median(ratios):.3f} wall, {statistics.median(cpu_ratios):.3f} CPU")
    print(f"Python load (Session creation): {py['load'] * 1e3:.0f} ms")
    print(f"peak RSS: anefit run {cli_rss / 2**20:.0f} MiB, Python {py['rss'] / 2**20:.0f} MiB "
          f"({py['rss'] / weight_bytes:.2f}x weight bytes)")
    print(f"last step's logits bit-identical: {same}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
