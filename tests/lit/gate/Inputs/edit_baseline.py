"""Makes the baseline of another state of the model's source from a
`check --json --etrecord` report, for baseline-pte.test.

  earlier IN OUT: every source line 7 lower (the current source has 7 lines
      more above them), the ops behind them renamed (the export numbered its
      nodes otherwise), and the first ANE-STATE-006 finding not there yet.
  renamed IN OUT: the ANE-CONV-009 findings of the first 12 linears gone,
      the other ops renumbered by 1000 (a report without sources).
  extra IN OUT: one ANE-STATE-006 finding more, in a layer the current model
      does not have (gone now).
"""
import copy
import json
import sys

mode, src, dst = sys.argv[1:4]
with open(src) as f:
    report = json.load(f)
findings = report["findings"]
if mode == "earlier":
    for f in findings:
        source = f.get("source", {})
        if source.get("line"):
            source["line"] -= 7
            f["op"] = "old_" + f["op"]
    first = next(f for f in findings if f["rule"] == "ANE-STATE-006")
    findings.remove(first)
elif mode == "renamed":
    import re
    conv = [f for f in findings if f["rule"] == "ANE-CONV-009"]
    for f in conv[:12]:
        findings.remove(f)
    for f in findings:
        if f.get("op"):
            f["op"] = re.sub(r"_(\d+)_", lambda m: "_%d_" % (int(m.group(1)) + 1000), f["op"])
elif mode == "extra":
    extra = copy.deepcopy(next(f for f in findings if f["rule"] == "ANE-STATE-006"))
    extra["op"] = "aten_index_put_default_99_cast_fp16"
    extra["source"]["module"] = "layers.9.attention"
    findings.append(extra)
else:
    sys.exit("mode: expected earlier or extra, found " + mode)
with open(dst, "w") as f:
    json.dump(report, f, indent=2)
