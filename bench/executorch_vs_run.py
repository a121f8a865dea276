#!/usr/bin/env python3
"""Decode step time through ExecuTorch's runtime vs `anefit run`, side by side.

For each ExecuTorch program given, and each thread count, runs

    anefit run MODEL.pte --random --threads T --steps S               (the interpreter alone,
                                                                       the Stepper doing the
                                                                       buffer write-back)
    anefit run MODEL.pte --engine executorch --random --threads T --steps S
                                                                      (ExecuTorch's runtime,
                                                                       Core ML delegates on
                                                                       the interpreter)

with S = 1 and S = 1 + N: the difference over N is the time of one decode step,
loading and the first step (which reads the weights in) cancelled. The two
engines alternate within each round, round after round, so a drift of the
machine's speed touches both; the median of the rounds is reported, and the
ratio ExecuTorch / interpreter of the same round.

    python3 bench/executorch_vs_run.py --anefit build/tools/anefit/anefit \\
        [--threads 1,2] [--steps 16] [--rounds 3] MODEL.pte...

Needs an anefit built with ExecuTorch's runtime (src/executorch). Make the
full-size LFM2-350M exports with
`scripts/export_executorch_fixtures.py --set export_llm --config lfm2_350m`.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

from machine import isa


def seconds(cmd):
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"executorch_vs_run: {' '.join(cmd)} failed: {proc.stderr.strip()[-500:]}")
    return time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--anefit", required=True)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=16, help="decode steps timed (N)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("models", nargs="+")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    print(f"machine: {isa()}, {os.cpu_count()} CPUs; {args.steps} decode steps per run, "
          f"{args.rounds} rounds, median")
    print(f"{'model':<32} {'threads':>7} {'anefit run':>12} {'ExecuTorch':>12} {'ratio':>7}")
    for model in args.models:
        for t in threads:
            per = {"interpreter": [], "executorch": []}
            ratios = []
            for _ in range(args.rounds):
                this = {}
                for engine in ("interpreter", "executorch"):
                    base = [args.anefit, "run", model, "--random", "--threads", str(t),
                            "--engine", engine]
                    one = seconds(base + ["--steps", "1"])
                    many = seconds(base + ["--steps", str(1 + args.steps)])
                    this[engine] = (many - one) / args.steps
                    per[engine].append(this[engine])
                ratios.append(this["executorch"] / this["interpreter"])
            name = os.path.basename(model)
            print(f"{name:<32} {t:>7} {statistics.median(per['interpreter']) * 1e3:>9.1f} ms "
                  f"{statistics.median(per['executorch']) * 1e3:>9.1f} ms "
                  f"{statistics.median(ratios):>6.2f}x")


if __name__ == "__main__":
    main()
