#!/usr/bin/env python3
"""Per-token decode time of anefit's interpreter against ExecuTorch's XNNPACK, one run.

The same LFM2 checkpoint in three programs made by
`scripts/export_executorch_fixtures.py --set export_llm --config lfm2_350m`:

  lfm2_export_llm_fp16.pte           Core ML delegate, fp16 weights: anefit-bench
  lfm2_export_llm_4w.pte             Core ML delegate, int4 blocks of 32: anefit-bench
  lfm2_export_llm_xnnpack_8da4w.pte  ExecuTorch's XNNPACK recipe for LFM2 (8-bit dynamic
                                     activations, 4-bit weights; `--only` it by name):
                                     ExecuTorch's pip runtime (Python bindings)

anefit-bench steps each Core ML program with seeded random inputs, as
`bench/run_exports.py` does; the XNNPACK program runs in ExecuTorch's own Python
runtime (given by `--executorch-python`: torch and executorch from PyPI, with its
LLM custom ops and quantized kernels loaded), decoding one token per call at
successive positions after a warm-up. The programs run in turn, round after round,
on each thread count (XNNPACK's thread pool is set to the same count), so a drift of
the machine's speed touches all of them. The read bandwidth of each thread count is
measured in the same run; the machine's vector ISA is printed with the results.

    python3 bench/xnnpack_vs_run.py --bench build/bench/anefit-bench \\
        --anefit build/tools/anefit/anefit --executorch-python PYTHON \\
        --xnnpack DIR/lfm2_export_llm_xnnpack_8da4w.pte [--threads 1,2] [--rounds 3] [--isa avx2] \\
        DIR/lfm2_export_llm_fp16.pte DIR/lfm2_export_llm_4w.pte
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

from run_exports import weight_bytes_read
from run_lfm2_350m import bench_step
from machine import KERNEL_ISAS, isa
from run_lfm2_350m import read_bandwidth

# Run by --executorch-python: times `steps` single-token decode calls of an
# export_llm program (tokens [1, 1], input_pos [1]) after `warmup` calls.
XNNPACK_STEPS = r"""
import json, sys, time
import torch
from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401  (its SDPA, KV cache)
import executorch.kernels.quantized  # noqa: F401  (dynamic quantization ops)
from executorch.extension.pybindings import portable_lib
from executorch.runtime import Runtime

path, threads, warmup, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
portable_lib._unsafe_reset_threadpool(threads)
torch.set_num_threads(threads)
method = Runtime.get().load_program(path).load_method("forward")
token = torch.tensor([[1]], dtype=torch.long)
times = []
for pos in range(warmup + steps):
    start = time.perf_counter()
    method.execute([token, torch.tensor([pos], dtype=torch.long)])
    if pos >= warmup:
        times.append(time.perf_counter() - start)
print(json.dumps({"ms": 1e3 * sum(times) / len(times)}))
"""


def xnnpack_step(python, model, threads, warmup, steps):
    out = subprocess.run([python, "-c", XNNPACK_STEPS, model, str(threads), str(warmup),
                          str(steps)], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"ExecuTorch runtime failed on {model}:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+", help="Core ML export_llm programs anefit steps")
    ap.add_argument("--xnnpack", required=True, help="the XNNPACK 8da4w export_llm program")
    ap.add_argument("--executorch-python", required=True,
                    help="a Python with torch and executorch (pip) to run the XNNPACK program")
    ap.add_argument("--bench", default=os.environ.get("ANEFIT_BENCH", "build/bench/anefit-bench"))
    ap.add_argument("--anefit", default=os.environ.get("ANEFIT_BIN", "build/tools/anefit/anefit"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8, help="timed decode steps per round")
    ap.add_argument("--warmup", type=int, default=4, help="XNNPACK calls before the timed ones")
    ap.add_argument("--isa", default="best", choices=KERNEL_ISAS,
                    help="anefit's kernels (anefit-bench --isa): avx2 times the AVX2 kernels on "
                         "an AVX-512 CPU")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    bench, anefit = os.path.abspath(args.bench), os.path.abspath(args.anefit)

    sizes = {m: weight_bytes_read(anefit, m)[0] for m in args.models}
    bounds = {t: read_bandwidth(bench, threads=t)[0] for t in threads}
    names = [os.path.basename(m) for m in args.models] + [os.path.basename(args.xnnpack)]
    times = {(n, t): [] for n in names for t in threads}
    for _ in range(args.rounds):
        for t in threads:
            for m in args.models:
                step = bench_step(bench, m, "random", t, args.steps, args.isa)[0]
                times[(os.path.basename(m), t)].append(step)
            times[(names[-1], t)].append(
                xnnpack_step(args.executorch_python, args.xnnpack, t, args.warmup, args.steps))
    for t in threads:
        bounds[t] = max(bounds[t], read_bandwidth(bench, threads=t)[0])

    print(f"machine: {isa()}, {os.cpu_count()} CPUs; anefit kernels: --isa {args.isa}; "
          f"read bandwidth "
          + ", ".join(f"{bounds[t]:.1f} GB/s on {t} thread(s)" for t in threads))
    print(f"{args.rounds} rounds of {args.steps} decode steps, medians, ms per token")
    print(f"{'program':36s} {'engine':18s} " + " ".join(f"{f'{t} thr':>8s}" for t in threads)
          + "  % of bound")
    for m in args.models:
        n = os.path.basename(m)
        row = " ".join(f"{statistics.median(times[(n, t)]):8.1f}" for t in threads)
        pct = ", ".join(
            f"{100 * sizes[m] / bounds[t] / 1e6 / statistics.median(times[(n, t)]):.0f}%"
            for t in threads)
        print(f"{n[:36]:36s} {'anefit':18s} {row}  {pct}")
    row = " ".join(f"{statistics.median(times[(names[-1], t)]):8.1f}" for t in threads)
    print(f"{names[-1][:36]:36s} {'ExecuTorch XNNPACK':18s} {row}")
    for m in args.models:
        n = os.path.basename(m)
        for t in threads:
            pairs = [x / a for a, x in zip(times[(n, t)], times[(names[-1], t)])]
            print(f"XNNPACK / anefit {n}, {t} thread(s): {statistics.median(pairs):.2f}x "
                  f"(median of round ratios; above 1: anefit is faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
