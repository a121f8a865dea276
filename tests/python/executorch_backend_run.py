#!/usr/bin/env python3
"""ExecuTorch's own Python runtime running Core ML programs through anefit's backend.

Run with a Python that has torch and executorch, and this anefit package on
PYTHONPATH (conftest.executorch_python):

    executorch_backend_run.py INPUTS.npz OUT.npz PRECISION PROGRAM.pte...

registers anefit as ExecuTorch's CoreMLBackend (anefit.executorch.register_backend)
and, per program i, loads `forward` with Runtime.get() and executes it on
step<k>/tokens and step<k>/attn_options_input_pos (int64, as ExecuTorch's runner
feeds them), writing i/step<k>/logits; and the values of the program's metadata
methods as i/meta/<method>.
"""
import sys

import numpy as np


def main():
    inputs_path, out_path, precision, *programs = sys.argv[1:]
    import anefit.executorch as ae

    ae.register_backend(precision=precision)
    import torch
    from executorch.runtime import Runtime

    inputs = np.load(inputs_path)
    steps = len([n for n in inputs.files if n.endswith("/tokens")])
    runtime = Runtime.get()
    out = {}
    for i, path in enumerate(programs):
        program = runtime.load_program(path)
        for name in sorted(program.method_names):
            if name != "forward":
                (value,) = program.load_method(name).execute([])
                out[f"{i}/meta/{name}"] = np.array(value)
        method = program.load_method("forward")
        for k in range(steps):
            tokens = torch.tensor(inputs[f"step{k}/tokens"], dtype=torch.long)
            pos = torch.tensor(inputs[f"step{k}/attn_options_input_pos"], dtype=torch.long)
            (logits,) = method.execute([tokens, pos])
            out[f"{i}/step{k}/logits"] = logits.numpy()
    np.savez(out_path, **out)


if __name__ == "__main__":
    main()
