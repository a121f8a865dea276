#!/usr/bin/env python3
"""ExecuTorch's Inspector on a run through anefit's backend.

Run with a Python that has torch, executorch and coremltools, and this anefit
package on PYTHONPATH (conftest.executorch_python):

    executorch_inspect.py block DIR
    executorch_inspect.py lfm2 DIR

`block` exports a depthwise conv and a linear (the ops of LFM2's short conv)
to a Core ML program with its ETRecord; `lfm2` makes the export_llm fp16
fixture again with its ETRecord (scripts/export_executorch_fixtures.py
--etrecord). Either program runs twice in ExecuTorch's runtime with ETDump on
and anefit as CoreMLBackend, and the script prints, as JSON, the Inspector's
delegate events of the last run: name, op types, average time and stack
trace of each (for `block`, with the lines of this file where the model's
forward calls the conv and the linear).
"""
import json
import os
import sys

import torch


class ShortConvBlock(torch.nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.conv = torch.nn.Conv1d(dim, dim, 3, groups=dim)
        self.proj = torch.nn.Linear(dim, 2 * dim)

    def forward(self, x):  # (1, dim, 8)
        y = self.conv(x)  # CONV LINE
        return self.proj(y.transpose(1, 2))  # LINEAR LINE


def export_block(out):
    """block.pte and its ETRecord; the example input."""
    import coremltools as ct
    from executorch.backends.apple.coreml.compiler import CoreMLBackend
    from executorch.backends.apple.coreml.partition import CoreMLPartitioner
    from executorch.exir import to_edge_transform_and_lower

    torch.manual_seed(0)
    model = ShortConvBlock().eval()
    example = (torch.randn(1, 16, 8),)
    specs = CoreMLBackend.generate_compile_specs(
        minimum_deployment_target=ct.target.iOS18, compute_precision=ct.precision.FLOAT16,
        compute_unit=ct.ComputeUnit.CPU_AND_NE)
    edge = to_edge_transform_and_lower(torch.export.export(model, example),
                                       partitioner=[CoreMLPartitioner(compile_specs=specs)],
                                       generate_etrecord=True)
    program = edge.to_executorch()
    pte, etrecord = os.path.join(out, "block.pte"), os.path.join(out, "etrecord.bin")
    with open(pte, "wb") as f:
        f.write(program.buffer)
    program.get_etrecord().save(etrecord)
    return pte, etrecord, [example, example]


def export_lfm2(out):
    """The export_llm fp16 fixture made again with its ETRecord; two decode steps."""
    import subprocess

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    subprocess.run([sys.executable, os.path.join(repo, "scripts", "export_executorch_fixtures.py"),
                    "--set", "export_llm", "--only", "lfm2_export_llm_fp16", "--etrecord",
                    "--out", out], check=True, capture_output=True)
    steps = [(torch.tensor([[3]]), torch.tensor([k])) for k in range(2)]
    return (os.path.join(out, "lfm2_export_llm_fp16.pte"),
            os.path.join(out, "lfm2_export_llm_fp16.etrecord"), steps)


def main():
    mode, out = sys.argv[1], sys.argv[2]
    pte, etrecord, steps = export_block(out) if mode == "block" else export_lfm2(out)

    import anefit.executorch as ae

    ae.register_backend()
    from executorch.devtools import Inspector
    from executorch.runtime import Runtime

    loaded = Runtime.get().load_program(pte, enable_etdump=True)
    method = loaded.load_method("forward")
    for inputs in steps:
        method.execute(inputs)
    etdump = os.path.join(out, "etdump.etdp")
    loaded.write_etdump_result_to_file(etdump, os.path.join(out, "debug.bin"))

    inspector = Inspector(etdump_path=etdump, etrecord=etrecord)
    events = []
    for block in inspector.event_blocks:
        events = [{"name": e.name, "backend": e.delegate_backend_name,
                   "op_types": list(e.op_types or []),
                   "avg_ms": e.perf_data.avg if e.perf_data else None,
                   "stack": str(e.stack_traces)}
                  for e in block.events if e.delegate_backend_name]
    lines = open(__file__).read().splitlines()
    print(json.dumps({"file": os.path.basename(__file__), "events": events,
                      "conv_line": 1 + next(i for i, l in enumerate(lines) if "# CONV LINE" in l),
                      "linear_line": 1 + next(i for i, l in enumerate(lines)
                                              if "# LINEAR LINE" in l)}))


if __name__ == "__main__":
    main()
