#!/usr/bin/env python3
"""Teacher-forced perplexity of an LLM .pte in ExecuTorch's own runtime, anefit as
its CoreMLBackend, at fp32 and at fp16 (every op rounded as the ANE computes):
the same measure as `anefit run --perplexity`, through the runtime an app ships.

Run with a Python that has torch and executorch (1.5.1 with torch 2.13) and this
anefit package on PYTHONPATH:

    perplexity_executorch.py PROGRAM.pte TEXT TOKENIZER.json [--max-tokens 300]
        [--precision fp32,fp16] [--json]

The text is tokenized by anefit.tokenize (the ids `anefit run --perplexity`
uses); `forward` gets each token and its position as int64, as ExecuTorch's
LLM runner feeds them, and its first output is taken as the logits.
"""
import argparse
import json
import math
import subprocess
import sys

import numpy as np


def one_run(program, ids, precision):
    """Mean NLL, top-1 hits and the top-1 of each step, in a process of its own
    (the backend's precision is fixed per process)."""
    code = f"""
import json, sys
import numpy as np
import anefit.executorch as ae
ae.register_backend(precision={precision!r})
import torch
from executorch.runtime import Runtime
ids = json.loads(sys.stdin.read())
method = Runtime.get().load_program({program!r}).load_method("forward")
nll, hits, top1 = 0.0, 0, []
for k in range(len(ids) - 1):
    (logits,) = method.execute([torch.tensor([[ids[k]]], dtype=torch.long),
                                torch.tensor([k], dtype=torch.long)])
    row = logits.float().numpy().reshape(-1, logits.shape[-1])[-1].astype(np.float64)
    if not np.all(np.isfinite(row)):
        nll = float("inf")
    else:
        m = row.max()
        nll += float(np.log(np.exp(row - m).sum()) + m - row[ids[k + 1]])
    arg = int(row.argmax())
    hits += arg == ids[k + 1]
    top1.append(arg)
print(json.dumps({{"nll": nll / (len(ids) - 1), "hits": hits, "top1": top1}}))
"""
    proc = subprocess.run([sys.executable, "-c", code], input=json.dumps(ids), text=True,
                          capture_output=True)
    if proc.returncode != 0:
        sys.exit(f"perplexity_executorch: the {precision} run failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("program")
    ap.add_argument("text")
    ap.add_argument("tokenizer")
    ap.add_argument("--max-tokens", type=int, default=300)
    ap.add_argument("--precision", default="fp32,fp16")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import anefit

    with open(args.text, encoding="utf-8") as f:
        ids = anefit.tokenize(args.tokenizer, f.read())[:args.max_tokens]
    if len(ids) < 2:
        sys.exit(f"perplexity_executorch: {args.text}: expected at least 2 tokens, found {len(ids)}")
    runs = {}
    for p in args.precision.split(","):
        r = one_run(args.program, ids, p)
        runs[p] = {"perplexity": math.exp(r["nll"]) if math.isfinite(r["nll"]) else None,
                   "top1_correct": r["hits"], "top1": r["top1"]}
    first = next(iter(runs.values()))["top1"]
    for r in runs.values():
        r["top1_agree_with_first"] = sum(a == b for a, b in zip(first, r.pop("top1")))
    if args.json:
        print(json.dumps({"program": args.program, "tokens": len(ids), "runs": runs}, indent=2))
        return
    print(f"perplexity in ExecuTorch's runtime: {args.program} on {args.text} ({len(ids)} tokens, "
          f"{len(ids) - 1} predicted, teacher-forced)")
    for p, r in runs.items():
        ppl = "inf" if r["perplexity"] is None else f"{r['perplexity']:.4g}"
        print(f"  {p}: perplexity {ppl}, top-1 is the next token on {r['top1_correct']}/"
              f"{len(ids) - 1}; top-1 agrees with the first run on {r['top1_agree_with_first']}/"
              f"{len(ids) - 1}")


if __name__ == "__main__":
    main()
