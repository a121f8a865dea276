#!/usr/bin/env python3
"""ExecuTorch's LFM2, rewritten at its source for the Apple Neural Engine.

Two methods of ExecuTorch's own modules are replaced while the model is
exported; the weights, buffers, checkpoint names and the program's inputs and
outputs stay as they are:

- ``ShortConv.forward`` (examples/models/lfm2/short_conv.py): the depthwise
  convolution over the conv state and the new column is written as its taps,
  ``w[:, 0] * s0 + w[:, 1] * s1 + w[:, 2] * x``. anefit predicts a depthwise
  conv this wide off the ANE (ANE-CONV-003 for 2048 channels); multiplies
  and adds run on it. The conv state is still a buffer: ExecuTorch passes it
  in and writes the delegate's new state back, as before.
- ``KVCacheCoreML.update`` (examples/models/llama/source_transformation/
  sdpa.py): the key and value rows are blended in with element-wise multiplies
  and adds on a one-hot mask of the position, instead of ``index_put_`` at a
  position known only at run time (ANE-STATE-006, at risk: the pattern of the failing
  ``ANECCompile()`` report, see ``anefit rules ANE-STATE-006``).

Both give the same numbers as the original up to float summation order
(tests/python/test_lfm2_recipe.py compares them in eager mode over decode
steps; ``anefit check`` on the export shows which findings are gone).

Use it in place of ``python -m executorch.extension.llm.export.export_llm``:

    python examples/lfm2_ane/lfm2_ane.py --config lfm2_coreml.yaml [key=value ...]

or, from your own export code::

    import lfm2_ane
    with lfm2_ane.rewrites():
        export_llama_lib.export_llama(config)

The rewrites target decode with one token per call (``export.max_seq_length:
1``, ``model.enable_dynamic_shape: False``), the static-shape form Core ML
exports use.
"""
import argparse
import contextlib

import torch


def short_conv_forward(self, x: torch.Tensor) -> torch.Tensor:
    """ShortConv.forward with the depthwise conv as its taps."""
    batch_size, seqlen, dim = x.size()
    assert batch_size == 1, "batch_size must be 1"

    B = self.B_proj(x).transpose(-1, -2)  # (batch_size, dim, seq_len)
    C = self.C_proj(x).transpose(-1, -2)
    x = self.x_proj(x).transpose(-1, -2)
    Bx = torch.cat([self.conv_state, B * x], dim=-1)  # (batch_size, dim, seq_len + L_cache - 1)
    with torch.no_grad():
        self.conv_state.copy_(Bx[..., -(self.L_cache - 1):])

    # self.conv(Bx) of a depthwise Conv1d without padding, tap by tap:
    # out[:, c, t] = sum_k weight[c, 0, k] * Bx[:, c, t + k].
    weight = self.conv.weight  # (dim, 1, L_cache)
    conv_out = Bx[..., 0:seqlen] * weight[:, :, 0]
    for k in range(1, self.L_cache):
        conv_out = conv_out + Bx[..., k:k + seqlen] * weight[:, :, k]
    if self.conv.bias is not None:
        conv_out = conv_out + self.conv.bias[:, None]

    y = (C * conv_out).transpose(-1, -2).contiguous()  # (batch_size, seq_len, dim)
    return self.out_proj(y)


def kv_cache_update(self, input_pos: torch.Tensor, k_val: torch.Tensor, v_val: torch.Tensor):
    """KVCacheCoreML.update without a write at a run-time position: the new row
    is blended in where the position's one-hot mask is 1.

    cache * (1 - hit) + row * hit is the cache where hit is 0 and the row where
    it is 1, exactly, for finite values. A multiply broadcasts the row over the
    context axis as the ANE's element-wise ops do; torch.where would be lowered
    with explicit tiles (slow tile factors, ANE-CONV-008)."""
    assert k_val.size(2) == 1, (
        "the blend writes one position per call: export with export.max_seq_length 1")
    positions = torch.arange(self.max_context_length, dtype=k_val.dtype)
    hit = (positions == input_pos.to(k_val.dtype)).to(k_val.dtype).view(1, 1, -1, 1)
    keep = 1.0 - hit
    k_out = self.k_cache * keep + k_val * hit
    v_out = self.v_cache * keep + v_val * hit
    with torch.no_grad():
        self.k_cache.copy_(k_out)
        self.v_cache.copy_(v_out)
    return k_out, v_out


@contextlib.contextmanager
def rewrites():
    """Replaces the two methods for the duration of the block (an export, an
    eager comparison); the classes are restored afterwards."""
    from executorch.examples.models.lfm2.short_conv import ShortConv
    from executorch.examples.models.llama.source_transformation.sdpa import KVCacheCoreML

    saved = (ShortConv.forward, KVCacheCoreML.update)
    ShortConv.forward = short_conv_forward
    KVCacheCoreML.update = kv_cache_update
    try:
        yield
    finally:
        ShortConv.forward, KVCacheCoreML.update = saved


def main():
    ap = argparse.ArgumentParser(
        description="export_llm with anefit's LFM2 rewrites for the Apple Neural Engine")
    ap.add_argument("--config", required=True, help="export_llm configuration (YAML)")
    ap.add_argument("overrides", nargs="*", help="key=value overrides, as export_llm takes them")
    opts = ap.parse_args()

    from omegaconf import OmegaConf

    from executorch.examples.models.llama import export_llama_lib
    from executorch.extension.llm.export.config.llm_config import LlmConfig

    merged = OmegaConf.merge(OmegaConf.structured(LlmConfig), OmegaConf.load(opts.config),
                             OmegaConf.from_dotlist(opts.overrides))
    config = OmegaConf.to_object(merged)
    with rewrites():
        export_llama_lib.export_llama(config)


if __name__ == "__main__":
    main()
