#!/usr/bin/env python3
"""PyTorch eager logits of a committed export_llm fixture, step by step.

Run with a Python that has torch and executorch (conftest.executorch_python):

    executorch_reference.py NAME INPUTS.npz OUT.npz
    executorch_reference.py greedy NAME PROMPT_ID N EOS
    executorch_reference.py recipe NAME INPUTS.npz

rebuilds the fixture's model from its manifest entry (tests/fixtures/pte/
manifest.json: params.json, context, seed) with ExecuTorch's own LFM2
definition and the seeded random weights of scripts/export_executorch_fixtures.py,
then runs it in eager mode with its KV caches and conv states kept in the
module between calls (what ExecuTorch's buffers do on a device) on
step<k>/tokens and step<k>/attn_options_input_pos, writing step<k>/logits; or,
with `greedy`, prints the N tokens it picks greedily after PROMPT_ID (a JSON list);
with `recipe`, runs the model twice on the same steps, as export_llm lowers it
for Core ML (KVCacheCoreML) and with examples/lfm2_ane/lfm2_ane.py's rewrites,
and prints the largest logits difference of each step (a JSON list).
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


def eager_model(name):
    """The fixture's model in eager mode, with its seeded random weights."""
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
    return model


def greedy(name, prompt_id, count, eos):
    """`count` tokens chosen greedily after the one-token prompt, as an LLM runner
    decodes: each token fed back at the next position; stops after `eos`."""
    model = eager_model(name)
    tokens, token = [], prompt_id
    with torch.no_grad():
        for k in range(count):
            y = model(torch.tensor([[token]], dtype=torch.long),
                      {"input_pos": torch.tensor([k], dtype=torch.long)})
            y = y[0] if isinstance(y, tuple) else y
            token = int(torch.argmax(y.reshape(-1)))
            tokens.append(token)
            if token == eos:
                break
    return tokens


def step_logits(model, inputs):
    """The model's logits of every step<k>/ of `inputs` (an npz), in order."""
    out = []
    with torch.no_grad():
        for k in range(len([n for n in inputs.files if n.endswith("/tokens")])):
            tokens = torch.tensor(inputs[f"step{k}/tokens"], dtype=torch.long)
            pos = torch.tensor(inputs[f"step{k}/attn_options_input_pos"], dtype=torch.long)
            y = model(tokens, {"input_pos": pos})
            y = y[0] if isinstance(y, tuple) else y
            out.append(y.reshape(1, -1))
    return out


def recipe_differences(name, inputs_path):
    """Per step, max |original - rewritten| of the logits (see the module doc)."""
    import copy

    from executorch.examples.models.llama.source_transformation.sdpa import (
        replace_kv_cache_with_coreml_kv_cache)

    sys.path.insert(0, os.path.join(REPO, "examples", "lfm2_ane"))
    import lfm2_ane

    original = replace_kv_cache_with_coreml_kv_cache(eager_model(name))
    rewritten = copy.deepcopy(original)
    inputs = np.load(inputs_path)
    expected = step_logits(original, inputs)
    with lfm2_ane.rewrites():
        got = step_logits(rewritten, inputs)
    return [float((a - b).abs().max()) for a, b in zip(expected, got)]


def main():
    if sys.argv[1] == "recipe":
        print(json.dumps(recipe_differences(sys.argv[2], sys.argv[3])))
        return
    if sys.argv[1] == "greedy":
        name, prompt_id, count, eos = sys.argv[2], *map(int, sys.argv[3:6])
        print(json.dumps(greedy(name, prompt_id, count, eos)))
        return
    name, inputs_path, out_path = sys.argv[1:4]
    logits = step_logits(eager_model(name), np.load(inputs_path))
    np.savez(out_path, **{f"step{k}/logits": y.numpy() for k, y in enumerate(logits)})


if __name__ == "__main__":
    main()
