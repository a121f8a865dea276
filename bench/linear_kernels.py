#!/usr/bin/env python3
"""The weight kernels alone: one `linear` of a decode step (one row of x) per weight form and ISA.

A decode step is a chain of matrix-vector products; its speed is the speed of
the kernel that reads each weight form. This benchmark isolates them: for each
form (the forms of bench/run_lfm2_350m.py: fp16 rows, int4 blockwise with one
fp16 scale per 32 inputs, a 16-entry fp16 palette per 16 output channels, and
lut6/lut8: 64/256 entries, what `anefit fix --requantize lut6|lut8` writes) it
builds two programs of chained square linears and times one step of each with
anefit-bench, on each instruction set the CPU runs:

  stream   distinct weights, 1 GB or more of stored bytes in all
           (--stream-mb): past any last-level cache, so the rate is the one
           a full-size export sees
  cache    one weight of about 1 MB stored (--cache-kb), used by every
           linear: it stays in the core's L2 cache, so the rate is the
           kernel's own instruction rate

and prints the stored weight bytes each reads per second, the stream rate
against the read bandwidth anefit-bench measures in the same run (the bound),
the stream rate against the cache rate (how much the memory costs the
kernel), and, when int4 is among the forms, each form's time per stored byte
against int4's in the same round (the median of the rounds' ratios). The forms, ISAs and places run in turn, round after round, so a drift
of the machine's speed touches all of them.

    python3 bench/linear_kernels.py --bench build/bench/anefit-bench \\
        [--forms fp16,int4,lut4,lut6,lut8] [--isas avx2,best] [--threads 1] [--rounds 3]

An ISA may carry how the AVX-512 kernels prefetch (anefit-bench --prefetch):
`--isas avx2,best/on,best/off` compares the CPU's choice both ways.

Only numpy is needed to build the programs.
"""

import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import isa as machine_isa  # noqa: E402
from run_lfm2_350m import (Emitter, WeightFile, bench_step, emit_weight,  # noqa: E402
                           read_bandwidth)
from scratch import scratch_dir  # noqa: E402

STREAM_K = 4096         # a streaming linear's weight is STREAM_K x STREAM_K
CACHE_LINEARS = 256
STORED_BITS = {"fp16": 16.0, "int4": 4.0 + 16.0 / 32, "lut4": 4.0, "lut6": 6.0, "lut8": 8.0}


def build(workdir, form, k, linears, distinct):
    """model.mil of `linears` chained [1, k] -> [1, k] linears; returns the weight bytes a step
    reads. The weight is normal with std 1/sqrt(k), so the values neither grow nor fade."""
    read = linears * k * k * STORED_BITS[form] / 8
    if os.path.exists(os.path.join(workdir, "model.mil")):
        return read  # built by an earlier run into the same --workdir
    os.makedirs(os.path.join(workdir, "weights"), exist_ok=True)
    rng = np.random.default_rng(0)
    w = (rng.standard_normal([k, k], dtype=np.float32) / np.sqrt(k)).astype(np.float16)
    wf = WeightFile(os.path.join(workdir, "weights", "weight.bin"))
    e = Emitter(wf)
    x = "%x"
    weight = None
    for i in range(linears):
        if distinct or weight is None:
            weight = emit_weight(e, {f"w{i}": w}, f"w{i}", form, True)
        x = e.op([1, k], "fp32", f"linear(x={x}, weight={weight})")
    wf.close()
    text = f"main[CoreML8](%x: {Emitter.ty([1, k], 'fp32')}) {{\n  block0() {{\n"
    text += "\n".join(e.lines) + f"\n  }} -> ({x})\n}}\n"
    with open(os.path.join(workdir, "model.mil"), "w") as f:
        f.write(text)
    return read


def bench_linear(bench, model, threads, steps, variant):
    """Wall and CPU ms per step of anefit-bench on `model` with random inputs; `variant` is an
    ISA as anefit-bench --isa takes it, optionally /auto, /on or /off for its --prefetch."""
    isa, _, prefetch = variant.partition("/")
    return bench_step(bench, model, "random", threads, steps, isa, prefetch or "auto")[:2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", default=os.environ.get("ANEFIT_BENCH", "build/bench/anefit-bench"))
    ap.add_argument("--forms", default="fp16,int4,lut4")
    ap.add_argument("--isas", default="avx2,best",
                    help="kernel instruction sets, as anefit-bench --isa takes them")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4, help="timed steps per round")
    ap.add_argument("--stream-mb", type=int, default=1024,
                    help="stored weight MB a streaming step reads, at least")
    ap.add_argument("--cache-kb", type=int, default=1024,
                    help="stored KB of the cached weight, about (half a core's L2 or less)")
    ap.add_argument("--stream-k", type=int, default=STREAM_K,
                    help="a streaming linear's weight is K x K (a multiple of 32)")
    ap.add_argument("--workdir", help="where to build the programs (default: a temp dir); "
                    "a later run with the same --workdir reuses them")
    args = ap.parse_args()
    if args.stream_k < 32 or args.stream_k % 32 or args.stream_mb < 1 or args.cache_kb < 1:
        sys.exit("linear_kernels: --stream-k takes a positive multiple of 32, --stream-mb and "
                 "--cache-kb positive sizes")
    forms, isas = args.forms.split(","), args.isas.split(",")
    for f in forms:
        if f not in STORED_BITS:
            sys.exit(f"linear_kernels: unknown form '{f}' "
                     f"(expected one of {', '.join(STORED_BITS)})")
    workdir = args.workdir or scratch_dir("anefit-linear-")
    models = {}
    for form in forms:
        sk = args.stream_k
        per = sk * sk * STORED_BITS[form] / 8
        count = max(1, int(-(-(args.stream_mb << 20) // per)))
        d = os.path.join(workdir, f"{form}-stream-{sk}-{count}")
        models[form, "stream"] = (os.path.join(d, "model.mil"), build(d, form, sk, count, True))
        k = max(32, int(((args.cache_kb << 10) * 8 / STORED_BITS[form]) ** 0.5) // 32 * 32)
        d = os.path.join(workdir, f"{form}-cache-{k}")
        models[form, "cache"] = (os.path.join(d, "model.mil"),
                                 build(d, form, k, CACHE_LINEARS, False))
    bound, _ = read_bandwidth(args.bench, threads=args.threads)
    times = {(form, place, isa): [] for (form, place) in models for isa in isas}
    cpu = {key: [] for key in times}
    for _ in range(args.rounds):
        for (form, place), (path, _) in models.items():
            for isa in isas:
                wall, cms = bench_linear(args.bench, path, args.threads, args.steps, isa)
                times[form, place, isa].append(wall)
                cpu[form, place, isa].append(cms)
    bound = max(bound, read_bandwidth(args.bench, threads=args.threads)[0])
    print(f"machine: {machine_isa()}")
    print(f"one linear of one row of x, {args.threads} thread(s), {args.rounds} rounds of "
          f"{args.steps} steps, medians; read bandwidth (the bound) {bound:.1f} GB/s")
    base = "int4" if "int4" in forms else None

    def per_byte_vs_base(form, place, isa, clock):
        """Median over the rounds of the form's time per stored byte against int4's in the
        same round (same ISA and place): above 1, slower per byte than int4."""
        ratios = [(t / models[form, place][1]) / (tb / models[base, place][1])
                  for t, tb in zip(clock[form, place, isa], clock[base, place, isa])]
        return statistics.median(ratios)

    vs = f" {'vs int4: stream, cache (wall; CPU)':>36}" if base else ""
    print(f"{'form':6} {'isa':10} {'stream GB/s':>11} {'% of bound':>10} {'cache GB/s':>10} "
          f"{'stream/cache':>12}" + vs)
    for form in forms:
        for isa in isas:
            rate = {}
            for place in ("stream", "cache"):
                ms = statistics.median(times[form, place, isa])
                rate[place] = models[form, place][1] / (ms * 1e-3) / 1e9
            line = (f"{form:6} {isa:10} {rate['stream']:11.1f} {100 * rate['stream'] / bound:9.0f}% "
                    f"{rate['cache']:10.1f} {rate['stream'] / rate['cache']:12.2f}")
            if base:
                line += (f"   {per_byte_vs_base(form, 'stream', isa, times):5.2f}x, "
                         f"{per_byte_vs_base(form, 'cache', isa, times):5.2f}x "
                         f"({per_byte_vs_base(form, 'stream', isa, cpu):5.2f}x, "
                         f"{per_byte_vs_base(form, 'cache', isa, cpu):5.2f}x)")
            print(line)
    if base:
        print("vs int4: time per stored weight byte against int4's in the same round and ISA "
              "(median of the rounds' ratios), wall time and, in brackets, CPU time (which a "
              "machine busy with other work leaves closer to the kernel's own)")


if __name__ == "__main__":
    main()
