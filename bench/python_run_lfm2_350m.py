#!/usr/bin/env python3
"""One decode step of the LFM2-350M-shaped model: the Python API against `anefit run`.

The model is the one bench/run_lfm2_350m.py builds (16 layers at D = 1024, fp16
weights, the export_llm shape: conv and KV buffers as inputs and outputs). Both sides run the same steps
on the same inputs, each in a child process of its own, on one thread unless
BENCH_THREADS says otherwise (`anefit run --threads`, `Session(threads=)`; 0 is
every core):

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
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_lfm2_350m as lfm2  # noqa: E402
from scratch import scratch_dir  # noqa: E402

# The Python side, run in a child so that its peak RSS is its own.
PYTHON_SIDE = r"""
import json, os, resource, sys, time
import numpy as np
import anefit
model_path, steps_npz, steps, out, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
threads = int(sys.argv[6])
with np.load(steps_npz) as z:
    feeds = [{k.split("/", 1)[1]: z[k] for k in z.files if k.startswith(f"step{s}/")}
             for s in range(steps + 1)]
t0 = time.perf_counter()
session = anefit.Session(model_path, threads=threads)
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
np.save(out, outputs[name])
print(json.dumps({"times": times, "cpu": cpu, "load": loaded,
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def python_side(args, model, npz, out, name):
    env = dict(os.environ)
    if args.pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.pythonpath,
                                                          env.get("PYTHONPATH")]))
    proc = subprocess.run([args.python, "-c", PYTHON_SIDE, model, npz, str(args.steps), out, name,
                           _THREADS],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"the Python side failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


def measure(cmd):
    """Wall and CPU seconds of one run of `cmd`, and its peak RSS in bytes."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as proc:
        _, err = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err.decode()}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return wall, cpu, after.ru_maxrss * 1024


def cli_side(args, model, workdir, npz):
    """Per-step wall and CPU seconds of `anefit run`, and its peak RSS."""
    one = os.path.join(workdir, "one.npz")
    with np.load(npz) as z:
        np.savez(one, **{k: z[k] for k in z.files if k.startswith("step0/")})
    out = os.path.join(workdir, "cli_out.npz")
    threads = ["--threads", _THREADS]
    t1, c1, _ = measure([args.anefit, "run", model, "--inputs", one] + threads)
    tn, cn, rss = measure([args.anefit, "run", model, "--inputs", npz] + threads)
    # The outputs, for the comparison, from a run of its own: writing every
    # step's buffers to an archive is not part of a step.
    measure([args.anefit, "run", model, "--inputs", npz, "-o", out, "--force"])
    return (tn - t1) / args.steps, (cn - c1) / args.steps, rss, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--anefit", default=os.environ.get("ANEFIT_BIN", "build/tools/anefit/anefit"))
    ap.add_argument("--pythonpath", default=os.environ.get("ANEFIT_PYTHONPATH", "build/python"),
                    help="where `import anefit` finds the package ('' for an installed one)")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--steps", type=int, default=6, help="timed decode steps per run")
    ap.add_argument("--repeats", type=int, default=3, help="CLI/Python pairs, alternating")
    ap.add_argument("--workdir", help="where to build the model (default: a temp dir, removed at exit)")
    args = ap.parse_args()
    args.anefit = os.path.abspath(args.anefit)
    workdir = args.workdir or scratch_dir("anefit-pybench-")
    ws = lfm2.random_weights(0, lfm2.LAYERS)
    inputs, outputs, weight_bytes = lfm2.build(workdir, ws, "fp16", lfm2.LAYERS, 512)
    logits = outputs[-1]
    model = os.path.join(workdir, "model.mil")
    npz = os.path.join(workdir, "steps.npz")
    np.savez(npz, **{f"step{k}/{n}": a for k in range(args.steps + 1)
                     for n, a in lfm2.step_inputs(inputs, 300 + k, k + 1).items()})
    print(f"model: {weight_bytes / 2**20:.0f} MiB of fp16 weights; {args.steps} steps per run, "
          f"{args.repeats} pairs, threads: {_THREADS if _THREADS != '0' else 'default'}")

    ratios, cpu_ratios = [], []
    for r in range(args.repeats):
        cli_step, cli_cpu, cli_rss, cli_out = cli_side(args, model, workdir, npz)
        py_out = os.path.join(workdir, "py_logits.npy")
        py = python_side(args, model, npz, py_out, logits)
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
