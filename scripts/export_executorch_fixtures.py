#!/usr/bin/env python3
"""Exports real ExecuTorch .pte files with Core ML delegates, for anefit's tests.

Uses ExecuTorch's own LFM2 model definition (its llama Transformer with
`layer_types`, whose "conv" layers are ExecuTorch's ShortConvBlock) in a small
configuration with random weights, and ExecuTorch's CoreMLPartitioner with the
configuration of the original LFM2.5 report: iOS 18, states enabled,
compute_units cpu_and_ne, fp16 compute. Three variants:

  lfm2_coreml_states.pte   mutable buffers (conv states, KV caches) taken over
                           by Core ML as states (take_over_mutable_buffer=True)
  lfm2_coreml_nostate.pte  take_over_mutable_buffer=False: buffers stay in
                           ExecuTorch, the Core ML graphs see them as plain I/O
  llama_coreml_static.pte  a Llama-style model exported with its KV cache as
                           plain inputs/outputs (the static-cache path)

Needs torch, executorch, coremltools from PyPI; it is not part of the default
test run. The outputs are small and committed under tests/fixtures/pte/.

    python scripts/export_executorch_fixtures.py --out tests/fixtures/pte
"""
import argparse
import json
import os
import sys

import torch


def lfm2_args(n_layers, layer_types, dim=64, hidden=128, vocab=256, max_len=16):
    from executorch.examples.models.llama.model_args import ModelArgs

    return ModelArgs(
        dim=dim,
        n_layers=n_layers,
        n_heads=4,
        n_kv_heads=2,
        head_dim=dim // 4,
        hidden_dim=hidden,
        vocab_size=vocab,
        max_seq_len=max_len,
        max_context_len=max_len,
        use_kv_cache=True,
        enable_dynamic_shape=False,
        layer_types=layer_types,
        use_qk_norm=layer_types is not None,
        qk_norm_before_rope=True,
        norm_eps=1e-5,
    )


def build(args, seed):
    from executorch.examples.models.llama.llama_transformer import construct_transformer

    torch.manual_seed(seed)
    model = construct_transformer(args).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.05)
    return model


def coreml_partitioner(take_over_mutable_buffer):
    import coremltools as ct
    from executorch.backends.apple.coreml.compiler import CoreMLBackend
    from executorch.backends.apple.coreml.partition import CoreMLPartitioner

    specs = CoreMLBackend.generate_compile_specs(
        minimum_deployment_target=ct.target.iOS18,
        compute_precision=ct.precision.FLOAT16,
        compute_unit=ct.ComputeUnit.CPU_AND_NE,
        model_type=CoreMLBackend.MODEL_TYPE.MODEL,
    )
    return CoreMLPartitioner(
        compile_specs=specs,
        take_over_mutable_buffer=take_over_mutable_buffer,
        skip_ops_for_coreml_delegation=[],
    )


def export(model, example, partitioner, path):
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    with torch.no_grad():
        ep = torch.export.export(model, example, strict=False)
    edge = to_edge_transform_and_lower(
        ep,
        partitioner=[partitioner],
        compile_config=EdgeCompileConfig(_check_ir_validity=False),
    )
    prog = edge.to_executorch()
    with open(path + ".tmp", "wb") as f:
        prog.write_to_file(f)
    os.replace(path + ".tmp", path)
    return prog


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    opts = ap.parse_args()
    os.makedirs(opts.out, exist_ok=True)

    tokens = torch.tensor([[1]], dtype=torch.long)
    example = (tokens, {"input_pos": torch.tensor([0], dtype=torch.long)})
    layer_types = ["conv", "conv", "full_attention", "conv"]
    made = {}

    for name, take_over in [("lfm2_coreml_states", True), ("lfm2_coreml_nostate", False)]:
        model = build(lfm2_args(4, layer_types), seed=0)
        export(model, example, coreml_partitioner(take_over), os.path.join(opts.out, name + ".pte"))
        made[name] = {"layer_types": layer_types, "take_over_mutable_buffer": take_over}

    # A Llama-style model with its KV cache as plain inputs/outputs: ExecuTorch's
    # static-attention path (the transformer rewritten to take and return caches).
    try:
        import copy

        from executorch.examples.models.llama.model_args import ModelArgs
        from executorch.examples.models.llama.static_attention import (
            StaticAttentionIOManager,
            transform_attention_mha_to_static_attention,
        )

        args = ModelArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=128,
                         vocab_size=256, max_seq_len=16, max_context_len=16)
        mha = build(args, seed=1)
        static = transform_attention_mha_to_static_attention(
            mha, split_mha=False, inplace=False, use_conv2d=False, use_hf_rope=True).eval()
        static_args = copy.copy(args)
        static_args.attention_type = "static_mha"
        static_args.use_hf_rope = True
        mgr = StaticAttentionIOManager(static_args, input_len=1, cache_lens=15)
        static_example = (torch.tensor([[1]], dtype=torch.int32),
                          {"masks": mgr.masks, "freqs_cos_override": mgr.freqs_cos[:1],
                           "freqs_sin_override": mgr.freqs_sin[:1],
                           "in_cache_state": (mgr.k_caches, mgr.v_caches)})
        export(static, static_example, coreml_partitioner(False),
               os.path.join(opts.out, "llama_coreml_static.pte"))
        made["llama_coreml_static"] = {"attention_type": "static_mha", "cache_len": 15}
    except Exception as e:  # the static path moves often between releases
        print(f"static llama export skipped: {type(e).__name__}: {e}", file=sys.stderr)

    import coremltools
    from executorch import version as et_version

    made["_versions"] = {"torch": torch.__version__, "executorch": et_version.__version__,
                         "coremltools": coremltools.__version__}
    with open(os.path.join(opts.out, "manifest.json"), "w") as f:
        json.dump(made, f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
