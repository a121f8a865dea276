#!/usr/bin/env python3
"""Writes an observations file for a probe kit, as run_probe.py would on a
Mac, with outcomes the test gives: observation files written for the tests,
not observed on any Mac.

    observe.py KIT [N:]VARIANT=OUTCOME[:ERROR] ... > obs.json

N is the model's index in the plan (a delegate of a .pte), 0 when absent.

OUTCOME is one of run_probe.py's (ane, ran, off-ane, load-failed,
predict-failed, timeout, crashed, invalid).
"""
import json
import os
import sys


def main(argv):
    kit, rest = argv[0], argv[1:]
    with open(os.path.join(kit, "plan.json"), encoding="utf-8") as f:
        plan = json.load(f)
    runs = []
    for arg in rest:
        variant, _, outcome = arg.partition("=")
        outcome, _, error = outcome.partition(":")
        model, _, name = variant.rpartition(":")
        run = {"model": int(model or 0), "variant": name, "outcome": outcome, "seconds": 1.0,
               "sha256": "0" * 64}
        if error:
            run["error"] = error
        runs.append(run)
    observations = {"schema": "anefit.probe-observations/1",
                    "host": {"os": "macOS 15.5", "chip": "Apple M1 (test observation)",
                             "coremltools": "9.0", "python": "3.11"},
                    "plan": plan, "runs": runs}
    json.dump(observations, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
