#!/usr/bin/env python3
"""Turns what a Mac observed of a probe kit into evidence-corpus cases.

    python3 scripts/observation_to_cases.py OBSERVATIONS --kit KIT --source URL \\
        --anefit ANEFIT --out DIR [--project OWNER/REPO] [--group NAME]

OBSERVATIONS is the file the kit's run_probe.py wrote (anefit.probe-observations/1);
URL the public page where it was shared (an issue, a discussion): a case cites
its source. For every observed variant it writes DIR/<case>.mil (`anefit dump`
of the variant: weights referenced, never copied) and one case into
DIR/<group>.json (schema anefit.evidence/2, the sweep groups' form, see
tests/fixtures/evidence/README.md): the outcome and stage the runner saw, the
error line as the quote, `isolated` certainty for a sub-program (the suspect
alone) and `together` for a whole variant, the op placement the compute plan
reported for a sub-program's ops, and a `what` made from the plan to review by
hand before the group joins cases.json.
"""

import argparse
import json
import os
import re
import subprocess
import sys

STAGES = {"ane": "placement", "ran": "predict", "off-ane": "placement",
          "load-failed": "load", "predict-failed": "predict", "timeout": "load",
          "crashed": "load"}
OUTCOMES = {"ane": "works", "ran": "works", "off-ane": "falls-back", "load-failed": "fails",
            "predict-failed": "fails", "timeout": "fails", "crashed": "fails"}


def case_name(project, source, variant):
    slug = re.sub(r"[^a-z0-9]+", "-", project.lower()).strip("-")
    number = re.findall(r"(\d+)/?$", source)
    return f"{slug}_{number[0] if number else 'probe'}_{variant.replace('-', '_').lower()}"


def describe(model, variant, run, host):
    suspects = {s["id"]: s for s in model["suspects"]}
    kept = [suspects[k] for k in variant.get("keeps", []) if k in suspects]
    what = ", ".join(
        (s.get("pattern") or "/".join(s["rules"])) + f" ({s['ops']} ops)" for s in kept) or \
        "no suspect"
    where = ", ".join(x for x in (host.get("chip"), host.get("os")) if x) or "a Mac"
    role = {"original": "the model as reported", "fixed-all": "every removable suspect removed",
            "keep": "only these suspects left in", "drop": "one suspect removed",
            "slice": "the suspect's sub-program alone"}.get(variant["role"], variant["role"])
    text = (f"anefit probe of {model['label']}: {variant['name']} ({role}; holds {what}), "
            f"compiled with CPU_AND_NE on {where}: {run['outcome']}")
    if variant.get("pipeline"):
        text += f"; made by the passes {variant['pipeline']}"
    return text + "."


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("observations")
    parser.add_argument("--kit", required=True, help="the kit directory the runs are of")
    parser.add_argument("--source", required=True, help="public URL of the shared observation")
    parser.add_argument("--anefit", required=True, help="the anefit executable (for dump)")
    parser.add_argument("--out", required=True, help="directory for the group and its .mil files")
    parser.add_argument("--project", help="split key (owner/repo); default: from --source")
    parser.add_argument("--group", default="probe-observations")
    args = parser.parse_args(argv)

    with open(args.observations, encoding="utf-8") as f:
        obs = json.load(f)
    if obs.get("schema") != "anefit.probe-observations/1":
        print(f"observation_to_cases: {args.observations}: schema: expected "
              f"\"anefit.probe-observations/1\", found {obs.get('schema')!r}", file=sys.stderr)
        return 2
    project = args.project
    if not project:
        m = re.match(r"https?://github\.com/([^/]+/[^/]+)", args.source)
        project = m.group(1) if m else re.sub(r"^https?://([^/]+).*$", r"\1", args.source)
    os.makedirs(args.out, exist_ok=True)
    plan, host = obs["plan"], obs.get("host", {})
    cases = []
    for run in obs["runs"]:
        if run["outcome"] not in OUTCOMES:
            continue  # invalid: coremltools could not read it, not an ANE outcome
        model = plan["models"][run.get("model", 0)]
        variant = next(v for v in model["variants"] if v["name"] == run["variant"])
        name = case_name(project, args.source, f"{run.get('model', 0)}_{variant['name']}")
        mil = os.path.join(args.out, name + ".mil")
        text = subprocess.run([args.anefit, "dump", os.path.join(args.kit, variant["path"])],
                              check=True, capture_output=True, text=True).stdout
        with open(mil, "w", encoding="utf-8") as f:
            f.write(text)
        case = {"name": name, "file": os.path.relpath(mil, os.path.dirname(args.out)),
                "outcome": OUTCOMES[run["outcome"]], "stage": STAGES[run["outcome"]],
                "source": args.source, "project": project,
                "quote": run.get("error", ""),
                "certainty": "isolated" if variant["role"] == "slice" else "together",
                "what": describe(model, variant, run, host), "rebuilt": "reported"}
        if variant["role"] == "slice" and run.get("op_devices"):
            case["placement"] = dict(sorted(run["op_devices"].items()))
        cases.append(case)
    group = {"schema": "anefit.evidence/2", "group": args.group,
             "method": f"Observed with an anefit probe kit ({args.observations}) and shared at "
                       f"{args.source}; outcomes from run_probe.py, not from the report text.",
             "cases": cases}
    out = os.path.join(args.out, args.group + ".json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(group, f, indent=1)
        f.write("\n")
    print(f"observation_to_cases: {len(cases)} case(s) -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
