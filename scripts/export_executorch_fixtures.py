#!/usr/bin/env python3
"""Exports real ExecuTorch .pte files with Core ML delegates, for anefit's tests.

Two families of exports, both with random weights:

1. Through ExecuTorch's own LLM export entry point, `export_llm`
   (`python -m executorch.extension.llm.export.export_llm --config X.yaml`),
   with the Core ML configuration ExecuTorch users run for LFM2: iOS 18,
   `enable_state: True`, `preserve_sdpa: True`, `compute_units: cpu_and_ne`,
   fp16 compute; plus the same with `quantization.qmode: 4w`,
   `group_size: 32`. The model is ExecuTorch's LFM2 (`base.model_class
   lfm2_350m`, its llama Transformer with `layer_types`) in LFM2's 16-layer
   layout (attention at layers 2, 5, 8, 10, 12, 14; short-conv elsewhere),
   either small (committed) or at the full LFM2-350M configuration
   (`--config lfm2_350m`, for measurements; never committed).

     lfm2_export_llm_fp16.pte    the configuration above
     lfm2_export_llm_4w.pte      plus qmode 4w, group_size 32
     lfm2_export_llm_states.pte  the fp16 export with the Core ML partitioner
                                 taking over the mutable buffers as Core ML
                                 states (take_over_mutable_buffer=True)
     lfm2_recipe_ane_fp16.pte    the fp16 configuration through
                                 examples/lfm2_ane/lfm2_ane.py: export_llm's
                                 Python API with anefit's source rewrites of
                                 ShortConv and KVCacheCoreML
     lfm2_export_llm_xnnpack_8da4w.pte  made only when named with --only: the
                                 same checkpoint through ExecuTorch's XNNPACK
                                 recipe for LFM2 (qmode 8da4w, its SDPA with
                                 the KV cache), to compare CPU runtimes
                                 (bench/xnnpack_vs_run.py; never committed)

   ExecuTorch 1.0-1.5.1 hard-codes take_over_mutable_buffer=False in
   export_llm and reads neither `enable_state` nor `preserve_sdpa`, so the
   first two have no Core ML state: conv states and KV caches are delegate
   inputs/outputs written back by ExecuTorch. The states variant is the same
   export_llm pipeline (its Python API) with that one partitioner argument
   changed, since no config key reaches it.

   `--set remedies` makes the evidence behind src/ane/Remedies.def: the fp16
   configuration on LFM2's first three layers with one key changed
   (lfm2_remedy_ios17.pte: backend.coreml.ios 17; lfm2_remedy_c4w.pte:
   backend.coreml.quantize c4w; lfm2_remedy_keys_off.pte: enable_state and
   preserve_sdpa False, to show export_llm does not read them;
   lfm2_remedy_cpu_only.pte: compute_units cpu_only, export_llm's default).

2. Direct `to_edge_transform_and_lower` exports of a 4-layer LFM2 and a
   static-cache Llama (`--set direct`):

     lfm2_coreml_states.pte   take_over_mutable_buffer=True
     lfm2_coreml_nostate.pte  take_over_mutable_buffer=False
     llama_coreml_static.pte  the static-attention path, KV cache as plain I/O

3. A program with several Core ML delegates (`--set multi`): a 2-layer Llama
   lowered with skip_ops_for_coreml_delegation=["aten.silu.default"], so
   ExecuTorch runs silu between delegates (llama_coreml_multi.pte).

Needs torch, executorch (with hydra-core, omegaconf, safetensors) and
coremltools from PyPI; it is not part of the default test run. The small
outputs are committed under tests/fixtures/pte/ with manifest.json (versions,
configurations and the exact commands).

    python scripts/export_executorch_fixtures.py --out tests/fixtures/pte
    python scripts/export_executorch_fixtures.py --set export_llm --config lfm2_350m \\
        --context 512 --out /some/scratch/dir
"""
import argparse
import copy
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

import torch

# LFM2's layer layout (every dense LFM2/LFM2.5 below 2B): attention at 2, 5, 8, 10, 12, 14.
LFM2_LAYER_TYPES = ["full_attention" if i in (2, 5, 8, 10, 12, 14) else "conv" for i in range(16)]

# Model parameters in ExecuTorch's params.json form. `lfm2_350m` is LFM2-350M's
# published configuration; `small` keeps its layout and GQA at toy widths.
LFM2_PARAMS = {
    "small": {
        "dim": 64, "hidden_dim": 128, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 256,
    },
    "lfm2_350m": {
        "dim": 1024, "hidden_dim": 4608, "n_heads": 16, "n_kv_heads": 8, "vocab_size": 65536,
    },
    # LFM2(.5)-1.2B: the report's model (the architecture is the same for 2 and 2.5).
    "lfm2_1_2b": {
        "dim": 2048, "hidden_dim": 8192, "n_heads": 32, "n_kv_heads": 8, "vocab_size": 65536,
    },
}
LFM2_COMMON = {
    "ffn_dim_multiplier": 1, "n_layers": 16, "norm_eps": 1e-5, "rope_theta": 1000000.0,
    "use_scaled_rope": False, "use_hf_rope": True, "use_qk_norm": True,
    "qk_norm_before_rope": True, "layer_types": LFM2_LAYER_TYPES,
}
DEFAULT_CONTEXT = {"small": 32, "lfm2_350m": 512, "lfm2_1_2b": 2048}

EXPORT_LLM_MODULE = "executorch.extension.llm.export.export_llm"


# ---------------------------------------------------------------------------------
# export_llm exports
# ---------------------------------------------------------------------------------

def lfm2_params(config):
    return dict(LFM2_COMMON, **LFM2_PARAMS[config])


def random_checkpoint(params, context, seed, path):
    """A checkpoint in ExecuTorch's (meta) naming with seeded random weights:
    linear and conv weights ~ N(0, 1/fan_in), embeddings ~ N(0, 1), norm scales
    1 + N(0, 0.05). Built from ExecuTorch's own module so the names match."""
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    args = ModelArgs(**params, max_seq_len=context, max_context_len=context, use_kv_cache=True)
    with torch.device("meta"):
        model = construct_transformer(args)
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for name, p in model.named_parameters():
        shape = tuple(p.shape)
        if len(shape) == 1:
            t = 1.0 + 0.05 * torch.randn(shape, generator=gen)
        elif "embeddings" in name:
            t = torch.randn(shape, generator=gen)
        else:
            fan_in = 1
            for s in shape[1:]:
                fan_in *= s
            t = torch.randn(shape, generator=gen) / fan_in ** 0.5
        state[name] = t
    torch.save(state, path)


def export_llm_config(params_path, checkpoint_path, context, output_name, quantize,
                      etrecord=False, xnnpack=False):
    """The export_llm configuration (YAML-able dict) of one variant; with
    `etrecord`, export_llm also writes the ETRecord (debug.generate_etrecord); with
    `xnnpack`, ExecuTorch's XNNPACK 8da4w recipe instead of Core ML."""
    cfg = {
        "base": {
            "model_class": "lfm2_350m",
            "params": params_path,
            "checkpoint": checkpoint_path,
            "metadata": '{"get_bos_id": 1, "get_eos_ids":[7]}',
        },
        "model": {"use_kv_cache": True, "enable_dynamic_shape": False, "dtype_override": "fp32"},
        "export": {"max_seq_length": 1, "max_context_length": context, "output_name": output_name},
        "backend": {"coreml": {"enabled": True, "ios": 18, "enable_state": True,
                               "preserve_sdpa": True, "compute_units": "cpu_and_ne"}},
    }
    if quantize:
        cfg["quantization"] = {"qmode": "4w", "group_size": 32}
    if xnnpack:
        # The keys of ExecuTorch's LFM2 XNNPACK recipe (examples/models/lfm2/config/
        # lfm2_xnnpack_q8da4w.yaml): 8-bit dynamic activations, 4-bit weights, its
        # custom SDPA with the KV cache, on the same checkpoint and context.
        cfg["model"]["use_sdpa_with_kv_cache"] = True
        cfg["quantization"] = {"qmode": "8da4w"}
        cfg["backend"] = {"xnnpack": {"enabled": True, "extended_ops": True}}
    if etrecord:
        cfg["debug"] = {"generate_etrecord": True}
    return cfg


def write_yaml(cfg, path):
    from omegaconf import OmegaConf

    OmegaConf.save(OmegaConf.create(cfg), path)


def run_export_llm_cli(yaml_path, workdir):
    """`python -m executorch.extension.llm.export.export_llm --config X.yaml`, as users run it."""
    cmd = [sys.executable, "-m", EXPORT_LLM_MODULE, "--config", os.path.basename(yaml_path)]
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-8000:])
        raise SystemExit(f"export_llm failed ({proc.returncode}) on {yaml_path}")


def run_export_llm_api_states(yaml_path, workdir):
    """export_llm's Python API (export_llama on the same LlmConfig the CLI builds)
    with the Core ML partitioner taking over the mutable buffers as states."""
    from omegaconf import OmegaConf

    from executorch.examples.models.llama import export_llama_lib
    from executorch.extension.llm.export.config.llm_config import LlmConfig

    original = export_llama_lib.get_coreml_partitioner

    def take_over(*args, **kwargs):
        partitioner = original(*args, **kwargs)
        partitioner.take_over_mutable_buffer = True
        return partitioner

    merged = OmegaConf.merge(OmegaConf.structured(LlmConfig), OmegaConf.load(yaml_path))
    config = OmegaConf.to_object(merged)
    cwd = os.getcwd()
    export_llama_lib.get_coreml_partitioner = take_over
    try:
        os.chdir(workdir)
        export_llama_lib.export_llama(config)
    finally:
        os.chdir(cwd)
        export_llama_lib.get_coreml_partitioner = original


# Evidence for the export-time remedies (src/ane/Remedies.def): the fp16
# configuration with one key changed, on the first three LFM2 layers (conv,
# conv, attention), which hold one of every pattern the remedies are about.
REMEDY_VARIANTS = {
    "lfm2_remedy_ios17": {"backend": {"coreml": {"ios": 17}}},
    "lfm2_remedy_c4w": {"backend": {"coreml": {"quantize": "c4w"}}},
    "lfm2_remedy_keys_off": {"backend": {"coreml": {"enable_state": False,
                                                    "preserve_sdpa": False}}},
    # export_llm's default compute units (LlmConfig: cpu_only), written out.
    "lfm2_remedy_cpu_only": {"backend": {"coreml": {"compute_units": "cpu_only"}}},
}
REMEDY_LAYERS = 3


def merged(base, over):
    out = dict(base)
    for k, v in over.items():
        out[k] = merged(base.get(k, {}), v) if isinstance(v, dict) else v
    return out


EXPORT_LLM_VARIANTS = {
    # name: (quantize, take_over_mutable_buffer)
    "lfm2_export_llm_fp16": (False, False),
    "lfm2_export_llm_4w": (True, False),
    "lfm2_export_llm_states": (False, True),
}
# The fp16 configuration exported through examples/lfm2_ane/lfm2_ane.py: export_llm's
# Python API with anefit's source rewrites of ShortConv and KVCacheCoreML.
RECIPE_VARIANT = "lfm2_recipe_ane_fp16"
RECIPE_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "examples", "lfm2_ane", "lfm2_ane.py")


def run_recipe(yaml_path, workdir):
    """`python examples/lfm2_ane/lfm2_ane.py --config X.yaml`, as its README says."""
    proc = subprocess.run([sys.executable, RECIPE_SCRIPT, "--config", yaml_path], cwd=workdir)
    if proc.returncode:
        raise SystemExit(f"{RECIPE_SCRIPT} failed ({proc.returncode}) on {yaml_path}")
# Made only when named with --only: ExecuTorch's own CPU path on the same
# checkpoint, for bench/xnnpack_vs_run.py (never committed).
XNNPACK_VARIANT = "lfm2_export_llm_xnnpack_8da4w"


def export_llm_set(out, config, context, seed, only, etrecord=False):
    params = lfm2_params(config)
    made = {}
    with tempfile.TemporaryDirectory(prefix="anefit-export-llm-") as work:
        params_path = os.path.join(work, "params.json")
        with open(params_path, "w") as f:
            json.dump(params, f, indent=2)
        ckpt = os.path.join(work, "random_weights.pth")
        random_checkpoint(params, context, seed, ckpt)
        variants = dict(EXPORT_LLM_VARIANTS)
        variants[RECIPE_VARIANT] = (False, False)
        if XNNPACK_VARIANT in only:
            variants[XNNPACK_VARIANT] = (False, False)
        for name, (quantize, take_over) in variants.items():
            if only and name not in only:
                continue
            output_name = name + ".pte"
            cfg = export_llm_config("params.json", "random_weights.pth", context, output_name,
                                    quantize, etrecord, xnnpack=name == XNNPACK_VARIANT)
            yaml_path = os.path.join(work, name + ".yaml")
            write_yaml(cfg, yaml_path)
            if name == RECIPE_VARIANT:
                run_recipe(yaml_path, work)
                how = f"python examples/lfm2_ane/lfm2_ane.py --config {name}.yaml"
            elif take_over:
                run_export_llm_api_states(yaml_path, work)
                how = ("export_llm's Python API: export_llama_lib.export_llama(LlmConfig from "
                       f"{name}.yaml) with get_coreml_partitioner's CoreMLPartitioner set to "
                       "take_over_mutable_buffer=True")
            else:
                run_export_llm_cli(yaml_path, work)
                how = f"python -m {EXPORT_LLM_MODULE} --config {name}.yaml"
            target = os.path.join(out, output_name)
            shutil.move(os.path.join(work, output_name), target + ".tmp")
            os.replace(target + ".tmp", target)
            if etrecord:
                # export_llm writes it as etrecord.bin in its working directory.
                shutil.move(os.path.join(work, "etrecord.bin"), os.path.join(out, name + ".etrecord"))
            made[name] = {
                "entry_point": "export_llm",
                "command": how,
                "config_yaml": cfg,
                "params_json": params,
                "weights": f"random, seed {seed}: linear/conv ~ N(0, 1/fan_in), embeddings ~ "
                           "N(0, 1), norm scales 1 + N(0, 0.05)",
                "seed": seed,
                "take_over_mutable_buffer": take_over,
                "recipe": name == RECIPE_VARIANT,
                "model_config": config,
                "bytes": os.path.getsize(target),
            }
            print(f"wrote {target} ({os.path.getsize(target)} bytes)", file=sys.stderr)
    return made


def remedy_set(out, seed, only):
    params = lfm2_params("small")
    params["n_layers"] = REMEDY_LAYERS
    params["layer_types"] = params["layer_types"][:REMEDY_LAYERS]
    context = DEFAULT_CONTEXT["small"]
    made = {}
    with tempfile.TemporaryDirectory(prefix="anefit-export-llm-") as work:
        with open(os.path.join(work, "params.json"), "w") as f:
            json.dump(params, f, indent=2)
        random_checkpoint(params, context, seed, os.path.join(work, "random_weights.pth"))
        for name, over in REMEDY_VARIANTS.items():
            if only and name not in only:
                continue
            output_name = name + ".pte"
            cfg = merged(export_llm_config("params.json", "random_weights.pth", context,
                                           output_name, False), over)
            write_yaml(cfg, os.path.join(work, name + ".yaml"))
            run_export_llm_cli(os.path.join(work, name + ".yaml"), work)
            target = os.path.join(out, output_name)
            shutil.move(os.path.join(work, output_name), target + ".tmp")
            os.replace(target + ".tmp", target)
            made[name] = {
                "entry_point": "export_llm",
                "purpose": "remedy evidence",
                "command": f"python -m {EXPORT_LLM_MODULE} --config {name}.yaml",
                "config_yaml": cfg,
                "params_json": params,
                "weights": f"random, seed {seed}",
                "seed": seed,
                "take_over_mutable_buffer": False,
                "model_config": "small",
                "bytes": os.path.getsize(target),
            }
            print(f"wrote {target} ({os.path.getsize(target)} bytes)", file=sys.stderr)
    return made


# ---------------------------------------------------------------------------------
# Direct CoreMLPartitioner exports (4-layer LFM2, static-cache Llama)
# ---------------------------------------------------------------------------------

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


def coreml_partitioner(take_over_mutable_buffer, skip_ops=()):
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
        skip_ops_for_coreml_delegation=list(skip_ops),
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


def direct_set(out, only):
    tokens = torch.tensor([[1]], dtype=torch.long)
    example = (tokens, {"input_pos": torch.tensor([0], dtype=torch.long)})
    layer_types = ["conv", "conv", "full_attention", "conv"]
    made = {}

    for name, take_over in [("lfm2_coreml_states", True), ("lfm2_coreml_nostate", False)]:
        if only and name not in only:
            continue
        model = build(lfm2_args(4, layer_types), seed=0)
        export(model, example, coreml_partitioner(take_over), os.path.join(out, name + ".pte"))
        made[name] = {"layer_types": layer_types, "take_over_mutable_buffer": take_over}

    if only and "llama_coreml_static" not in only:
        return made
    # A Llama-style model with its KV cache as plain inputs/outputs: ExecuTorch's
    # static-attention path (the transformer rewritten to take and return caches).
    try:
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
               os.path.join(out, "llama_coreml_static.pte"))
        made["llama_coreml_static"] = {"attention_type": "static_mha", "cache_len": 15}
    except Exception as e:  # the static path moves often between releases
        print(f"static llama export skipped: {type(e).__name__}: {e}", file=sys.stderr)
    return made


MULTI_SKIP_OPS = ["aten.silu.default"]


def multi_set(out, only):
    """A 2-layer Llama lowered with one op kept out of Core ML
    (skip_ops_for_coreml_delegation, as users write it or as the partitioner
    does for an op coremltools cannot convert): ExecuTorch runs the skipped op
    between Core ML delegates, so the program holds several of them."""
    if only and "llama_coreml_multi" not in only:
        return {}
    from executorch.examples.models.llama.model_args import ModelArgs

    args = ModelArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=128, vocab_size=256,
                     max_seq_len=16, max_context_len=16, use_kv_cache=True,
                     enable_dynamic_shape=False)
    model = build(args, seed=2)
    example = (torch.tensor([[1]], dtype=torch.long),
               {"input_pos": torch.tensor([0], dtype=torch.long)})
    path = os.path.join(out, "llama_coreml_multi.pte")
    export(model, example, coreml_partitioner(False, MULTI_SKIP_OPS), path)
    return {"llama_coreml_multi": {"skip_ops_for_coreml_delegation": MULTI_SKIP_OPS,
                                   "take_over_mutable_buffer": False, "seed": 2,
                                   "bytes": os.path.getsize(path)}}


# ---------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--set", choices=["all", "export_llm", "remedies", "direct", "multi"], default="all",
                    help="which family of exports to make (default: all)")
    ap.add_argument("--config", choices=sorted(LFM2_PARAMS), default="small",
                    help="LFM2 size of the export_llm exports (default: small; lfm2_350m is "
                         "LFM2-350M's configuration, for measurements, never committed)")
    ap.add_argument("--context", type=int, default=None,
                    help="max_context_length of the export_llm exports (default: 32 small, "
                         "512 lfm2_350m)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", action="append", default=[],
                    help="export only this variant (repeatable)")
    ap.add_argument("--etrecord", action="store_true",
                    help="export_llm also writes each variant's ETRecord, as NAME.etrecord "
                         "(debug.generate_etrecord; large for full-size models, never committed)")
    opts = ap.parse_args()
    if opts.config != "small" and opts.set == "all":
        opts.set = "export_llm"
    context = opts.context or DEFAULT_CONTEXT[opts.config]
    out = os.path.abspath(opts.out)
    os.makedirs(out, exist_ok=True)

    manifest_path = os.path.join(out, "manifest.json")
    manifest = {}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)

    if opts.set in ("all", "direct"):
        manifest.update(direct_set(out, opts.only))
    if opts.set in ("all", "export_llm"):
        manifest.update(export_llm_set(out, opts.config, context, opts.seed, opts.only,
                                       opts.etrecord))
    if opts.set in ("all", "remedies"):
        manifest.update(remedy_set(out, opts.seed, opts.only))
    if opts.set in ("all", "multi"):
        manifest.update(multi_set(out, opts.only))

    import coremltools
    from executorch import version as et_version

    manifest["_versions"] = {"torch": torch.__version__, "executorch": et_version.__version__,
                             "coremltools": coremltools.__version__}
    argv = ["python", "scripts/export_executorch_fixtures.py"] + sys.argv[1:]
    # A run with --only made some files of the set: its command is kept apart.
    key = opts.set + "".join(" --only " + o for o in opts.only)
    manifest.setdefault("_commands", {})[key] = " ".join(shlex.quote(a) for a in argv)
    with open(manifest_path + ".tmp", "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(manifest_path + ".tmp", manifest_path)


if __name__ == "__main__":
    main()
