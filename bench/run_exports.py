#!/usr/bin/env python3
"""Decode steps of real exports: time, weight bytes per second against the bound, memory.

For each model given (an ExecuTorch `export_llm` .pte, an .mlpackage, MIL text),
anefit-bench runs one step with seeded random inputs (`--inputs random`) on each
thread count; the models run in turn, round after round, so a drift of the
machine's speed touches all of them. The read bandwidth of each thread count is
measured by anefit-bench in the same run, before and after the rounds (the best
pass counts); each step is set against the bound of its own thread count, and
the ratio of the bounds is the most more threads can give a memory-bound step.

The weight bytes one step reads come from the program's text (`anefit dump`,
which never reads weight data): every weight constant and every compressed
weight's stored parts (indices, data, scales, palettes) count as stored, except
that a table only indexed by `gather` (the token embedding, the mask and RoPE
tables of an export) counts as the one slice a step gathers.

    python3 bench/run_exports.py --bench build/bench/anefit-bench \\
        --anefit build/tools/anefit/anefit [--threads 1,2] [--spin on,off] \\
        [--isa avx2|avx512|best] [--exact-products] [--precision fp32,fp16] [--rounds 3] MODEL...

The last column is how much of the file the page cache gives in 2 MB pages:
the same export steps faster in them than in 4 KB pages (docs/run.md).

`--spin on,off` also steps each model on more than one thread with `--no-spin`
(idle threads sleep at once between parallel ops instead of polling for up to
50 us) and compares wall and CPU time per step with the default.

With several models, each after the first is set against the first: the step time
ratio, and the time per weight byte read (wall and CPU time, medians of the round
ratios), which compares the kernels of two weight forms of one model (int4 against
lut4/lut6/lut8 of bench/run_lfm2_350m.py --build-only, say) whatever bytes each reads.

`--precision fp32,fp16` steps each model in both modes of the interpreter
(anefit-bench --precision; fp16 rounds every op result to fp16), in turn within
each round, and gives the fp16 step against the fp32 one (medians of the round
ratios, wall and CPU time).

Make the full-size LFM2-350M exports with
`scripts/export_executorch_fixtures.py --set export_llm --config lfm2_350m`.
"""

import argparse
import math
import os
import re
import statistics
import subprocess
import sys

from machine import KERNEL_ISAS, isa as machine_isa
from run_lfm2_350m import bench_step, read_bandwidth

DTYPE_BITS = {"fp16": 16, "fp32": 32, "int32": 32, "int16": 16, "uint16": 16, "int8": 8,
              "uint8": 8, "bool": 8, "int4": 4, "uint4": 4, "uint3": 3, "uint2": 2, "uint1": 1,
              "uint6": 6}

TYPE = r"\(([\d, ]*),? ?(\w+)\)"
VALUE = re.compile(r"^\s*%(\S+): " + TYPE + r"\(Tensor\) = (\w+)\((.*)$")
INLINE_BLOB = re.compile(r"BLOBFILE\([^)]*\):" + TYPE)
GATHER_X = re.compile(r"\bx=%([\w.]+)")


def tensor_bytes(dims, dtype):
    n = math.prod(int(d) for d in dims.replace(" ", "").split(",") if d)
    return n * DTYPE_BITS[dtype] // 8


def weight_bytes_read(anefit, model):
    """(bytes one step reads, bytes stored) of the weights of `model`'s program."""
    text = subprocess.run([anefit, "dump", model], check=True, capture_output=True,
                          text=True).stdout
    consts, gathered, stored = {}, {}, 0
    for line in text.splitlines():
        m = VALUE.match(line)
        if not m:
            continue
        name, dims, dtype, op, rest = m.groups()
        if op == "const" and rest.startswith("val=BLOBFILE"):
            consts[name] = tensor_bytes(dims, dtype)
        elif op.startswith("constexpr_"):
            stored += sum(tensor_bytes(d, t) for d, t in INLINE_BLOB.findall(rest))
        elif op == "gather":
            x = GATHER_X.search(rest)
            if x:
                gathered.setdefault(x.group(1), []).append(tensor_bytes(dims, dtype))
    stored += sum(consts.values())
    read = stored
    for name, slices in gathered.items():
        if name in consts:
            read += sum(slices) - consts[name]
    return read, stored


def model_labels(models):
    """Each model's file name, with its folder where two files share a name (an export_llm
    file of each size)."""
    names = [os.path.basename(m) for m in models]
    return {m: os.path.join(os.path.basename(os.path.dirname(os.path.abspath(m))), n)
            if names.count(n) > 1 else n for m, n in zip(models, names)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+", help="models to step (.pte, .mlpackage, .mil)")
    ap.add_argument("--bench", default=os.environ.get("ANEFIT_BENCH", "build/bench/anefit-bench"))
    ap.add_argument("--anefit", default=os.environ.get("ANEFIT_BIN", "build/tools/anefit/anefit"))
    ap.add_argument("--threads", default="1", help="anefit threads; a list runs each (1,2)")
    ap.add_argument("--spin", default="on",
                    help="on, off or on,off: idle threads poll between ops (on, the default) or "
                         "sleep at once (off: anefit-bench --no-spin); off only matters for more "
                         "than one thread")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5, help="timed steps per round, model, threads")
    ap.add_argument("--isa", default="best", choices=KERNEL_ISAS,
                    help="the kernels' instruction set (anefit-bench --isa): avx2 times the AVX2 "
                         "kernels on an AVX-512 CPU, avx512 the AVX-512 ones without VNNI")
    ap.add_argument("--exact-products", action="store_true",
                    help="keep int4 products fp32-grade in linears declared fp16 (anefit-bench "
                         "--exact-products; without it the AVX2 kernels put x on a 16-bit grid "
                         "per block there)")
    ap.add_argument("--precision", default="fp32",
                    help="fp32, fp16 or fp32,fp16: the interpreter's mode (anefit-bench "
                         "--precision); both give the fp16 step against the fp32 one")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    precisions = args.precision.split(",")
    if any(p not in ("fp32", "fp16") for p in precisions):
        sys.exit(f"run_exports: --precision: expected fp32, fp16 or fp32,fp16, "
                 f"found '{args.precision}'")
    spins = [{"on": True, "off": False}[s] for s in args.spin.split(",")]
    # (threads, spin, precision) to run; one thread never waits for another.
    configs = [(t, s, p) for t in threads for s in (spins if t > 1 else [spins[0]])
               for p in precisions]
    bench, anefit = os.path.abspath(args.bench), os.path.abspath(args.anefit)

    sizes = {m: weight_bytes_read(anefit, m) for m in args.models}
    label = model_labels(args.models)
    passes = {t: [read_bandwidth(bench, threads=t)[0]] for t in threads}
    times = {(m, c): [] for m in args.models for c in configs}
    cpu = {(m, c): [] for m in args.models for c in configs}
    rss, pmd = {}, {}
    for _ in range(args.rounds):
        for c in configs:
            for m in args.models:
                ms, cms, peak, huge = bench_step(bench, m, "random", c[0], args.steps, args.isa,
                                                 spin=c[1], exact=args.exact_products,
                                                 precision=c[2])
                times[(m, c)].append(ms)
                cpu[(m, c)].append(cms)
                rss[m] = max(rss.get(m, 0), peak)
                pmd[m] = min(pmd.get(m, huge), huge)
    bounds = {}
    for t in threads:
        passes[t].append(read_bandwidth(bench, threads=t)[0])
        bounds[t] = max(passes[t])
        print(f"read bandwidth, {t} thread(s): {bounds[t]:.1f} GB/s (best of the passes before "
              f"and after: {passes[t][0]:.1f}, {passes[t][1]:.1f})")
    try:
        load = os.getloadavg()[0]
        print(f"load average (1 min) at the end: {load:.1f} on {os.cpu_count()} CPUs")
    except OSError:
        pass
    print(f"machine: {machine_isa()}; kernels: --isa {args.isa}"
          + (" --exact-products" if args.exact_products else ""))
    print(f"{args.rounds} rounds of {args.steps} steps, medians; wall ms/step and process CPU "
          f"ms/step")
    print(f"{'model':34s} {'thr':>3s} {'spin':>4s} {'prec':>4s} {'ms/step':>8s} {'CPU ms':>7s} "
          f"{'weights read':>13s} {'GB/s':>6s} {'% of bound':>10s} {'peak RSS':>9s} "
          f"{'RSS/stored':>10s} {'2 MB pages':>10s}")
    for c in configs:
        t = c[0]
        for m in args.models:
            ms = statistics.median(times[(m, c)])
            cms = statistics.median(cpu[(m, c)])
            read, stored = sizes[m]
            bound_ms = read / bounds[t] / 1e6
            print(f"{label[m][-34:]:34s} {t:3d} {'on' if c[1] else 'off':>4s} {c[2]:>4s} "
                  f"{ms:8.1f} {cms:7.1f} {read / 1e6:10.0f} MB {read / ms / 1e6:6.1f} "
                  f"{100 * bound_ms / ms:9.0f}% {rss[m] / 2**20:5.0f} MiB "
                  f"{rss[m] / stored:9.2f}x {100 * pmd[m] / os.path.getsize(m):9.0f}%")
    # Each thread count as first listed, in the first precision listed.
    base = {t: (t, spins[0], precisions[0]) for t in threads}
    if len(threads) > 1:
        print(f"read bandwidth, {threads[-1]} threads vs {threads[0]}: "
              f"{bounds[threads[-1]] / bounds[threads[0]]:.2f}x (the most a memory-bound step "
              f"can gain)")
        for m in args.models:
            for c in configs:
                if c[0] != threads[-1] or c[2] != precisions[0]:
                    continue
                pairs = [a / b for a, b in zip(times[(m, base[threads[0]])], times[(m, c)])]
                print(f"{label[m]}: {threads[-1]} threads (spin "
                      f"{'on' if c[1] else 'off'}) vs {threads[0]}: "
                      f"{statistics.median(pairs):.2f}x (median of round ratios)")
    if len(spins) > 1:
        for m in args.models:
            for t in threads:
                if t == 1:
                    continue
                on, off = (t, True, precisions[0]), (t, False, precisions[0])
                wall = [b / a for a, b in zip(times[(m, on)], times[(m, off)])]
                cpus = [b / a for a, b in zip(cpu[(m, on)], cpu[(m, off)])]
                print(f"{label[m]}, {t} threads, spin off vs on: wall "
                      f"{statistics.median(wall):.2f}x, CPU time {statistics.median(cpus):.2f}x "
                      f"(median of round ratios)")
    if len(precisions) > 1:
        for m in args.models:
            for c in configs:
                if c[2] != precisions[0]:
                    continue
                other = (c[0], c[1], precisions[1])
                wall = [b / a for a, b in zip(times[(m, c)], times[(m, other)])]
                cpus = [b / a for a, b in zip(cpu[(m, c)], cpu[(m, other)])]
                print(f"{label[m]}, {c[0]} thread(s): {precisions[1]} vs {precisions[0]}: wall "
                      f"{statistics.median(wall):.2f}x, CPU time {statistics.median(cpus):.2f}x "
                      f"(median of round ratios)")
    first = args.models[0]
    for m in args.models[1:]:
        for t in threads:
            pairs = [a / b for a, b in zip(times[(first, base[t])], times[(m, base[t])])]
            # Time per weight byte read, against the first model's: a compressed form's
            # kernel against another's, whatever the bytes each step reads.
            per = sizes[first][0] / sizes[m][0]
            wall = [b / a * per for a, b in zip(times[(first, base[t])], times[(m, base[t])])]
            cpus = [b / a * per for a, b in zip(cpu[(first, base[t])], cpu[(m, base[t])])]
            print(f"{label[first]} / {label[m]}, {t} thread(s): "
                  f"{statistics.median(pairs):.2f}x (median of round ratios); time per weight "
                  f"byte of {label[m]} vs {label[first]}: wall {statistics.median(wall):.2f}x, "
                  f"CPU {statistics.median(cpus):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
