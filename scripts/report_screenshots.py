#!/usr/bin/env python3
"""Regenerates the HTML report screenshots in docs/ (shown in the README).

  docs/report-lfm2-1p2b.png   the full-size LFM2.5-1.2B-shaped program
                              (bench/check_lfm2_1p2b.py), every layer collapsed
                              into its box, the reasons in the side panel
  docs/report-example.png     the bundled example, a failing state op clicked

Needs the anefit binary, coremltools (to build the 1.2B-shaped program) and
headless Chromium. Usage:
  python3 scripts/report_screenshots.py [--anefit build/tools/anefit/anefit]
"""
import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "bench"))

from headless_chromium import Chromium  # noqa: E402

WIDTH, HEIGHT = 1600, 1000


def report(anefit, model, out, cwd):
    proc = subprocess.run([anefit, "check", model, "--format", "html", "-o", str(out)], cwd=cwd,
                          capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        sys.exit(proc.stderr)


def wheel_zoom(page, x, y, steps):
    """ctrl+wheel at (x, y), as a user zooms."""
    for _ in range(abs(steps)):
        page.send("Input.dispatchMouseEvent", {"type": "mouseWheel", "x": x, "y": y, "deltaX": 0,
                                               "deltaY": 100 if steps < 0 else -100, "modifiers": 2})


def click(page, selector):
    r = page.evaluate(f"(() => {{ const r = document.querySelector({selector!r}).getBoundingClientRect();"
                      " return [r.left + r.width / 2, r.top + r.height / 2]; })()")
    page.click(*r)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--anefit", default=str(ROOT / "build" / "tools" / "anefit" / "anefit"))
    args = ap.parse_args()
    anefit = str(pathlib.Path(args.anefit).resolve())
    work = pathlib.Path(tempfile.mkdtemp(prefix="anefit-shots-"))
    try:
        import check_lfm2_1p2b

        check_lfm2_1p2b.build_model(str(work))
        report(anefit, "lfm2_1p2b.mlpackage", work / "big.html", work)
        report(anefit, "examples/lfm2_shortconv.mlpackage", work / "example.html", ROOT)
        with Chromium(width=WIDTH, height=HEIGHT) as browser:
            page = browser.open((work / "big.html").as_uri())
            page.wait_for("document.documentElement.getAttribute('data-painted')")
            click(page, '.toolbar button[data-act="collapse"]')
            wheel_zoom(page, 560, 240, -2)
            time.sleep(0.3)
            (ROOT / "docs" / "report-lfm2-1p2b.png").write_bytes(page.screenshot())

            page = browser.open((work / "example.html").as_uri())
            page.wait_for("document.documentElement.getAttribute('data-painted')")
            page.evaluate("anefitReport.selectOp(0, 5)")  # bring the state read into view
            page.evaluate("document.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape'}))")
            click(page, 'g.op[data-i="5"] > rect')
            time.sleep(0.3)
            (ROOT / "docs" / "report-example.png").write_bytes(page.screenshot())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("wrote docs/report-lfm2-1p2b.png and docs/report-example.png")


if __name__ == "__main__":
    os.environ.setdefault("TQDM_DISABLE", "1")
    main()
