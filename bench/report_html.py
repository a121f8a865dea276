#!/usr/bin/env python3
"""Benchmark the HTML report on LFM2.5-1.2B-shaped programs: generation, size, rendering.

Builds the full-size LFM2.5-1.2B decode program of bench/check_lfm2_1p2b.py
(16 layers, ~714 ops, sparse weight file) and a deeper one with the same
layers repeated to ~2,000 ops, then, side by side in one run:

  * generation: `anefit check M --json -o x.json` and `anefit check M
    --format html -o x.html`, alternated, each in a fresh process; median
    wall and CPU (user + sys) time, and the HTML / JSON ratio. With
    --callgrind, also instructions (valgrind), and the share spent in the
    C++ graph layout;
  * the page's size;
  * rendering in headless Chromium (scripts/headless_chromium.py), each load
    in a fresh tab with JavaScript on: time from navigation start to the
    second animation frame after the page's script has stacked the graph
    (the `data-painted` mark), DOMContentLoaded, and the script's own time.

Usage:
  python3 bench/report_html.py --anefit build/tools/anefit/anefit [--runs 7] [--callgrind]
"""
import argparse
import os
import pathlib
import re
import resource
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "scripts"))

import check_lfm2_1p2b  # noqa: E402
from scratch import scratch_dir  # noqa: E402
from headless_chromium import Chromium  # noqa: E402


def build(out_dir, repeat):
    """The 1.2B-shaped program with its 16 layers repeated `repeat` times."""
    layers = check_lfm2_1p2b.LAYERS
    try:
        check_lfm2_1p2b.LAYERS = layers * repeat
        d = pathlib.Path(out_dir) / f"x{repeat}"
        d.mkdir(parents=True, exist_ok=True)
        pkg, nops, _ = check_lfm2_1p2b.build_model(str(d))
    finally:
        check_lfm2_1p2b.LAYERS = layers
    return pkg


def run_timed(cmd):
    """Wall and CPU (user + sys, from the child's rusage) seconds of `cmd`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode not in (0, 1):
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def callgrind(cmd, out_dir):
    out = pathlib.Path(out_dir) / "callgrind.out"
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + cmd,
                   capture_output=True, check=False)
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", str(out)], capture_output=True,
                          text=True).stdout
    total = int(re.search(r"([\d,]+) \(100\.0%\)\s+PROGRAM TOTALS", text).group(1).replace(",", ""))
    layout = 0
    for line in text.splitlines():
        if "report::layoutLayered(" in line:
            layout = max(layout, int(line.split()[0].replace(",", "")))
    return total, layout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--anefit", default=os.environ.get("ANEFIT_BIN", "build/tools/anefit/anefit"))
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--loads", type=int, default=5, help="page loads per report")
    ap.add_argument("--callgrind", action="store_true", help="also count instructions with valgrind")
    ap.add_argument("--out", help="directory for models and reports (default: a temp dir, removed at exit)")
    args = ap.parse_args()
    out = pathlib.Path(args.out or scratch_dir("anefit-report-bench-"))
    anefit = str(pathlib.Path(args.anefit).resolve())

    models = {"1.2B (16 layers)": build(out, 1), "48 layers": build(out, 3)}
    pages = {}
    print("generation (fresh process each; median of %d, alternated):" % args.runs)
    for label, pkg in models.items():
        json_out, html_out = out / f"{label[:4]}.json", out / f"{label[:4]}.html"
        jw, jc, hw, hc = [], [], [], []
        for _ in range(args.runs):
            w, c = run_timed([anefit, "check", pkg, "--json", "-o", str(json_out), "--force"])
            jw.append(w), jc.append(c)
            w, c = run_timed([anefit, "check", pkg, "--format", "html", "-o", str(html_out), "--force"])
            hw.append(w), hc.append(c)
        html = html_out.read_text()
        nops = int(re.search(r'"ops":(\d+),"aneOps"', html).group(1))
        med = statistics.median
        print(f"  {label}: {nops} ops; check --json {med(jw) * 1000:.0f} ms wall, {med(jc) * 1000:.0f} ms CPU; "
              f"--format html {med(hw) * 1000:.0f} ms wall, {med(hc) * 1000:.0f} ms CPU; "
              f"ratio html/json wall {med(hw) / max(med(jw), 1e-3):.2f}x, CPU {med(hc) / max(med(jc), 1e-3):.2f}x; "
              f"page {html_out.stat().st_size / 1e6:.2f} MB")
        if args.callgrind:
            ji, _ = callgrind([anefit, "check", pkg, "--json", "-o", str(json_out), "--force"], out)
            hi, li = callgrind([anefit, "check", pkg, "--format", "html", "-o", str(html_out), "--force"], out)
            print(f"    instructions: json {ji / 1e6:.0f} M, html {hi / 1e6:.0f} M ({hi / ji:.2f}x), "
                  f"of which graph layout {li / 1e6:.1f} M ({100 * li / hi:.1f}%)")
        pages[label] = html_out

    print("rendering in headless Chromium (fresh tab each; median of %d):" % args.loads)
    with Chromium(width=1600, height=1000) as browser:
        for label, path in pages.items():
            painted, dcl, script, wall = [], [], [], []
            for _ in range(args.loads):
                t0 = time.perf_counter()
                page = browser.open(path.resolve().as_uri())
                p = float(page.wait_for("document.documentElement.getAttribute('data-painted')"))
                wall.append(time.perf_counter() - t0)
                t = page.evaluate("({d: performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd,"
                                  " s: anefitReport.initMs, n: document.querySelectorAll('g.op').length})")
                painted.append(p), dcl.append(t["d"]), script.append(t["s"])
                page.send("Page.close")
            med = statistics.median
            print(f"  {label}: {t['n']} op nodes; painted {med(painted):.0f} ms after navigation start "
                  f"(max {max(painted):.0f}), DOMContentLoaded {med(dcl):.0f} ms, script {med(script):.0f} ms; "
                  f"tab open to painted, as seen from outside: {med(wall) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
