#!/usr/bin/env python3
"""Interrupts `anefit probe MODEL -o KIT --force` with SIGTERM after several
delays and checks what is left each time: one whole kit (its packages are
the ones its plan names, old or new), and nothing beside it.

    interrupt_probe.py KIT MODEL [ARGS...]
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time


def check(kit):
    with open(os.path.join(kit, "plan.json"), encoding="utf-8") as f:
        plan = json.load(f)
    named = sorted(v["path"] for m in plan["models"] for v in m["variants"] if v["path"])
    held = sorted("models/" + p for p in os.listdir(os.path.join(kit, "models")))
    assert held == named, (held, named)
    parent = os.path.dirname(os.path.abspath(kit))
    left = [e for e in os.listdir(parent) if ".tmp-" in e or ".old-" in e]
    assert not left, left


def main(argv):
    kit, rest = argv[0], argv[1:]
    anefit = shutil.which("anefit")
    for delay in (0.05, 0.1, 0.2, 0.4, 0.8, 1.6):
        p = subprocess.Popen([anefit, "probe", *rest, "-o", kit, "--force"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        p.send_signal(signal.SIGTERM)
        p.wait()
        check(kit)
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1:])
