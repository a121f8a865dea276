#!/usr/bin/env python3
"""PyTorch eager logits of a committed export_llm fixture, step by step.

Run with a Python that has torch and executorch (conftest.executorch_python):

    executorch_reference.py NAME INPUTS.npz OUT.npz

rebuilds the fixture's model from its manifest entry (tests/fixtures/pte/
manifest.json: params.json, context, seed) with ExecuTorch's own LFM2
definition and the seeded random weights of scripts/export_executorch_fixtures.py,
then runs it in eager mode with its KV caches and conv states kept in the
module between calls (what ExecuTorch's buffers do on a device) on
step<k>/tokens and step<k>/attn_options_input_pos, writing step<k>/logits.
"""
import json
import os
import sys
import tempfile

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))

import export_executorch_fixtures as fixtures  # noqa: E402


def main():
    name, inputs_path, out_path = sys.argv[1:4]
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    with open(os.path.join(REPO, "tests", "fixtures", "pte", "manifest.json")) as f:
        entry = json.load(f)[name]
    params = entry["params_json"]
    context = entry["config_yaml"]["export"]["max_context_length"]
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = os.path.join(tmp, "weights.pth")
        fixtures.random_checkpoint(params, context, entry.get("seed", 0), ckpt)
        state = torch.load(ckpt)
    args = ModelArgs(**params, max_seq_len=context, max_context_len=context, use_kv_cache=True,
                     enable_dynamic_shape=False)
    model = construct_transformer(args)
    missing, _ = model.load_state_dict(state, strict=False)
    assert not [k for k in missing if k.endswith(".weight")], missing
    model.eval()
    inputs = np.load(inputs_path)
    out = {}
    with torch.no_grad():
        for k in range(len([n for n in inputs.files if n.endswith("/tokens")])):
            tokens = torch.tensor(inputs[f"step{k}/tokens"], dtype=torch.long)
            pos = torch.tensor(inputs[f"step{k}/attn_options_input_pos"], dtype=torch.long)
            y = model(tokens, {"input_pos": pos})
            y = y[0] if isinstance(y, tuple) else y
            out[f"step{k}/logits"] = y.reshape(1, -1).numpy()
    np.savez(out_path, **out)


if __name__ == "__main__":
    main()
