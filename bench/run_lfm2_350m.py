#!/usr/bin/env python3
"""One decode step of an ExecuTorch-exported LFM2-350M: anefit against PyTorch eager.

The model has the shape `export_llm` gives LFM2-350M for Core ML (context 512): 16
layers at D = 1024 (10 short-conv blocks and 6 GQA attention blocks with 16 query /
8 KV heads of 64, QK-norm, interleaved RoPE from gathered tables), SwiGLU MLPs of
width 4608, vocabulary 65536. Like the real export it has no Core ML state: the
conv states and the (1, 8, 512, 64) KV caches come in as fp32 inputs, are cast to
fp16, the KV caches are written in-graph by `slice_update` at the runtime position,
repeated per query head by `expand_dims` + `tile` + `reshape` and read by
`scaled_dot_product_attention` with a boolean mask gathered from a table; the new
buffers leave as fp16 outputs. Every linear carries the zero bias coremltools adds.
A state map in the model's header pairs each new buffer with its input, so a step
is timed as the export's host runs it: the outputs written back into the buffers
(ExecuTorch's copy_), the KV caches updated in place.

Three weight forms of the same random (seeded) weights, all written as MIL text
plus a weight.bin blob file (only numpy is needed to build them):

  fp16   dense fp16 weights, the LM head tied to the embedding (709 MB)
  int4   every projection and the LM head as constexpr_blockwise_shift_scale:
         int4 data, one fp16 scale per 32 inputs (the `qmode 4w` export)
  lut4   every projection and the LM head as constexpr_lut_to_dense: uint4
         indices, one 16-entry fp16 palette per 16 output channels
  lut6, lut8  the same with uint6 / uint8 indices and 64 / 256 entries (what
         `anefit fix --requantize lut6|lut8` writes), not built unless named

For each form the benchmark reports the time of one decode step (median over the
rounds), the weight bytes one step reads per second, that rate against the read
bandwidth the same number of threads gets on this machine (measured by
anefit-bench in the same run; with several thread counts, the ratio of the
bandwidths says how much more threads can give a memory-bound step), peak
resident memory against the weight bytes, and how much of the weight file the
page cache gives in 2 MB pages (weights stream faster through them; see
docs/run.md). PyTorch eager (fp32, the
dequantized weights) runs the same step when torch is importable; without torch
it is skipped. The forms and the baseline run in turn, round after round, so a
drift of the machine's speed touches all of them.

    python3 bench/run_lfm2_350m.py --bench build/bench/anefit-bench \\
        [--threads 1] [--rounds 3] [--forms fp16,int4,lut4]
    python3 bench/run_lfm2_350m.py --forms fp16,int4 --workdir DIR --build-only
        (DIR/fp16/model.mil, DIR/int4/model.mil for bench/run_exports.py)

The logits of every form are checked against the baseline (or, without torch,
against a numpy fp32 step) on one step.
"""

import os

_THREADS = os.environ.get("BENCH_THREADS", "1")
if _THREADS != "0":
    # Fixed before numpy loads its BLAS: oversubscribed threads distort timings.
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = _THREADS

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import KERNEL_ISAS  # noqa: E402
from scratch import scratch_dir  # noqa: E402

D, LAYERS, FFN, VOCAB = 1024, 16, 4608, 65536
HEADS, KV_HEADS, HEAD_DIM = 16, 8, 64
ATTENTION_LAYERS = {2, 5, 8, 10, 12, 14}
EPS = 1e-5
GROUP = 32       # int4: inputs per scale
LUT_GROUP = 16   # lut4: output channels per palette

BLOB_DTYPES = {"fp16": 1, "fp32": 2, "uint8": 3, "int8": 4, "int4": 8, "uint4": 11, "uint6": 13}
PALETTE_BITS = {"lut4": 4, "lut6": 6, "lut8": 8}  # the palettized forms' index widths


class WeightFile:
    """Appends blobs in MIL blob storage v2 layout (64-byte aligned records)."""

    def __init__(self, path):
        self.f = open(path, "wb")
        self.f.write(b"\0" * 64)
        self.count, self.end = 0, 64

    def add(self, data, dtype, elements):
        padding = 0
        if dtype in ("int4", "uint4", "uint6"):
            bits = 6 if dtype == "uint6" else 4
            padding = (8 - elements * bits % 8) % 8
        offset = (self.end + 63) // 64 * 64
        self.f.seek(offset)
        self.f.write(struct.pack("<IIQQQ", 0xDEADBEEF, BLOB_DTYPES[dtype], len(data), offset + 64,
                                 padding))
        self.f.write(b"\0" * 32)
        self.f.write(data)
        self.end = offset + 64 + len(data)
        self.count += 1
        return offset

    def close(self):
        self.f.seek(0)
        self.f.write(struct.pack("<II", self.count, 2))
        self.f.close()


def pack_bits6(values):
    """6-bit values (0..63) packed LSB-first: every 4 values in 3 bytes."""
    flat = values.reshape(-1).astype(np.uint32)
    n = flat.size
    flat = np.append(flat, np.zeros((-n) % 4, np.uint32)).reshape(-1, 4)
    word = flat[:, 0] | (flat[:, 1] << 6) | (flat[:, 2] << 12) | (flat[:, 3] << 18)
    out = np.stack([word & 0xFF, (word >> 8) & 0xFF, (word >> 16) & 0xFF], axis=1)
    return out.astype(np.uint8).reshape(-1)[:(n * 6 + 7) // 8].tobytes()


def pack_nibbles(values):
    """4-bit values (0..15) packed two per byte, the first in the low nibble."""
    flat = values.reshape(-1).astype(np.uint8)
    if flat.size % 2:
        flat = np.append(flat, np.uint8(0))
    return (flat[0::2] | (flat[1::2] << 4)).tobytes()


def quantize_int4(w):
    """Symmetric int4 per row and group of GROUP inputs: (q, fp16 scale, dequantized)."""
    n, k = w.shape
    g = w.astype(np.float32).reshape(n, k // GROUP, GROUP)
    scale = (np.abs(g).max(axis=2) / 7.0).astype(np.float16)
    s = np.maximum(scale.astype(np.float32), np.float32(1e-8))[:, :, None]
    q = np.clip(np.rint(g / s), -8, 7).astype(np.int8)
    deq = (q.astype(np.float32) * scale.astype(np.float32)[:, :, None]).reshape(n, k)
    return q.reshape(n, k), scale, deq


def palettize(w, bits=4):
    """A uniform 2^bits-entry palette per LUT_GROUP output channels: (indices, lut,
    dequantized)."""
    n, k = w.shape
    entries = 1 << bits
    g = w.astype(np.float32).reshape(n // LUT_GROUP, LUT_GROUP * k)
    lo, hi = g.min(axis=1, keepdims=True), g.max(axis=1, keepdims=True)
    lut = (lo + (hi - lo) * np.linspace(0, 1, entries, dtype=np.float32)[None, :]).astype(
        np.float16)
    step = np.maximum(hi - lo, 1e-8) / (entries - 1)
    idx = np.clip(np.rint((g - lo) / step), 0, entries - 1).astype(np.uint8)
    deq = np.take_along_axis(lut.astype(np.float32), idx.astype(np.int64), axis=1).reshape(n, k)
    return idx.reshape(n, k), lut.reshape(n // LUT_GROUP, 1, entries, 1), deq


def random_weights(seed, layers):
    """Dense fp16 weights of the whole model, by name."""
    rng = np.random.default_rng(seed)

    def w(shape, scale):
        return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(np.float16)

    ws = {"embed": w([VOCAB, D], 0.02), "final_norm": (1 + w([D], 0.1)).astype(np.float16)}
    for i in range(layers):
        p = f"l{i}_"
        ws[p + "op_norm"] = (1 + w([D], 0.1)).astype(np.float16)
        ws[p + "ffn_norm"] = (1 + w([D], 0.1)).astype(np.float16)
        if i in ATTENTION_LAYERS:
            ws[p + "q"] = w([D, D], 0.02)
            ws[p + "k"] = w([KV_HEADS * HEAD_DIM, D], 0.02)
            ws[p + "v"] = w([KV_HEADS * HEAD_DIM, D], 0.02)
            ws[p + "o"] = w([D, D], 0.02)
            ws[p + "q_norm"] = (1 + w([HEAD_DIM], 0.1)).astype(np.float16)
            ws[p + "k_norm"] = (1 + w([HEAD_DIM], 0.1)).astype(np.float16)
        else:
            for name in ("b", "c", "x", "out"):
                ws[p + name] = w([D, D], 0.02)
            ws[p + "conv"] = w([D, 1, 3], 0.3)
        ws[p + "w1"] = w([FFN, D], 0.02)
        ws[p + "w3"] = w([FFN, D], 0.02)
        ws[p + "w2"] = w([D, FFN], 0.02)
    return ws


def rope_tables(context):
    inv = 1.0 / (1e6 ** (np.arange(0, HEAD_DIM, 2, dtype=np.float64) / HEAD_DIM))
    ang = np.arange(context, dtype=np.float64)[:, None] * inv[None, :]
    return np.cos(ang).astype(np.float16), np.sin(ang).astype(np.float16)


class Emitter:
    """Writes the MIL text of the step: one line per op, constants in weight.bin."""

    def __init__(self, wf):
        self.wf, self.lines, self.n = wf, [], 0
        self.read_bytes = 0  # weight bytes one step reads

    def name(self, prefix="v"):
        self.n += 1
        return f"{prefix}{self.n}"

    @staticmethod
    def ty(shape, dtype):
        if not shape:
            return f"({dtype})(Scalar)"
        dims = ", ".join(map(str, shape))
        return f"({dims}, {dtype})(Tensor)" if len(shape) > 1 else f"({dims},{dtype})(Tensor)"

    def blob(self, name, array, dtype, read=True):
        shape = list(array.shape)
        if dtype in ("int4", "uint4"):
            data = pack_nibbles(array.astype(np.int8).view(np.uint8) & 0xF)
        elif dtype == "uint6":
            data = pack_bits6(array)
        else:
            data = np.ascontiguousarray(array).tobytes()
        off = self.wf.add(data, dtype, int(np.prod(shape)))
        if read:
            self.read_bytes += len(data)
        self.lines.append(f'    %{name}: {self.ty(shape, dtype)} = const(val=BLOBFILE('
                          f'path="@model_path/weights/weight.bin", offset={off}), name="{name}")')
        return f"%{name}"

    def const(self, value, shape, dtype):
        name = self.name("c")
        self.lines.append(f'    %{name}: {self.ty(shape, dtype)} = const(val={value}, name="{name}")')
        return f"%{name}"

    def op(self, shape, dtype, text, name=None):
        name = name or self.name()
        self.lines.append(f'    %{name}: {self.ty(shape, dtype)} = {text[:-1]}, name="{name}")')
        return f"%{name}"

    def string(self, text):
        return self.const('"' + text + '"', [], "string")

    def ints(self, values):
        return self.const("[" + ", ".join(map(str, values)) + "]", [len(values)], "int32")

    def bools(self, values):
        return self.const("[" + ", ".join("True" if v else "False" for v in values) + "]",
                          [len(values)], "bool")


def emit_weight(e, ws, name, form, quantize):
    """A linear weight in the given form: the const or constexpr value's reference."""
    w = ws[name]
    n, k = w.shape
    if form == "fp16" or not quantize:
        return e.blob(name, w, "fp16")
    if form == "int4":
        q, scale, _ = quantize_int4(w)
        data = e.blob(name + "_data", q, "int4")
        sc = e.blob(name + "_scale", scale, "fp16")
        return e.op([n, k], "fp16", f"constexpr_blockwise_shift_scale(data={data}, scale={sc})",
                    name=name)
    bits = PALETTE_BITS[form]
    idx, lut, _ = palettize(w, bits)
    ind = e.blob(name + "_indices", idx, {4: "uint4", 6: "uint6", 8: "uint8"}[bits])
    lt = e.blob(name + "_lut", lut, "fp16")
    return e.op([n, k], "fp16", f"constexpr_lut_to_dense(indices={ind}, lut={lt})", name=name)


def dense_of(ws, name, form):
    """The dense fp32 values a form's weight stands for (what PyTorch multiplies with)."""
    w = ws[name]
    if form == "fp16" or w.ndim != 2 or name == "embed":
        return w.astype(np.float32)
    return quantize_int4(w)[2] if form == "int4" else palettize(w, PALETTE_BITS[form])[2]


def build(workdir, ws, form, layers, context):
    """Writes model.mil and weights/weight.bin; returns (input names, output names, bytes read)."""
    os.makedirs(os.path.join(workdir, "weights"), exist_ok=True)
    wf = WeightFile(os.path.join(workdir, "weights", "weight.bin"))
    e = Emitter(wf)
    h = [1, 1, D]
    emb = e.blob("embed", ws["embed"], "fp16", read=False)
    e.read_bytes += 2 * D  # the gathered row
    mask_table = e.blob("mask_table", np.tril(np.ones((context, context), np.int8)), "int8",
                        read=False)
    cos_t, sin_t = rope_tables(context)
    cos_tab = e.blob("freqs_cos", cos_t, "fp16", read=False)
    sin_tab = e.blob("freqs_sin", sin_t, "fp16", read=False)
    zero_bias = {}

    def bias(n):
        if n not in zero_bias:
            zero_bias[n] = e.blob(f"bias_{n}", np.zeros([n], np.float16), "fp16")
        return zero_bias[n]

    def linear(x, name, out_shape, quantize=True):
        w = emit_weight(e, ws, name, form, quantize)
        return e.op(out_shape, "fp16", f"linear(x={x}, weight={w}, bias={bias(out_shape[-1])})")

    def rmsnorm(x, wname, shape):
        sq = e.op(shape, "fp16", f"mul(x={x}, y={x})")
        red = list(shape[:-1]) + [1]
        mean = e.op(red, "fp16", f"reduce_mean(x={sq}, axes={e.ints([-1])}, "
                                 f"keep_dims={e.const('True', [], 'bool')})")
        var = e.op(red, "fp16", f"add(x={mean}, y={e.const('1e-05', [], 'fp16')})")
        inv = e.op(red, "fp16", f"rsqrt(x={var})")
        xn = e.op(shape, "fp16", f"mul(x={x}, y={inv})")
        return e.op(shape, "fp16", f"mul(x={xn}, y={e.blob(wname, ws[wname], 'fp16')})")

    def rope(t, heads, cos4, sin4):
        pairs = [1, 1, heads, HEAD_DIM // 2, 2]
        half = [1, 1, heads, HEAD_DIM // 2]
        v = e.op(pairs, "fp16", f"reshape(x={t}, shape={e.ints([1, 1, heads, -1, 2])})")
        parts = []
        for k in range(2):
            s = e.op(pairs[:-1] + [1], "fp16",
                     f"slice_by_index(x={v}, begin={e.ints([0, 0, 0, 0, k])}, "
                     f"end={e.ints([1, 1, heads, HEAD_DIM // 2, k + 1])}, "
                     f"end_mask={e.bools([True, True, True, True, False])})")
            parts.append(e.op(half, "fp16", f"squeeze(x={s}, axes={e.ints([4])})"))
        re_, im = parts
        a = e.op(half, "fp16", f"mul(x={re_}, y={cos4})")
        b = e.op(half, "fp16", f"mul(x={im}, y={sin4})")
        c = e.op(half, "fp16", f"mul(x={re_}, y={sin4})")
        d = e.op(half, "fp16", f"mul(x={im}, y={cos4})")
        out_re = e.op(half, "fp16", f"sub(x={a}, y={b})")
        out_im = e.op(half, "fp16", f"add(x={c}, y={d})")
        st = e.op(pairs, "fp16", f"stack(values=({out_re}, {out_im}), axis={e.const('-1', [], 'int32')})")
        return e.op([1, 1, heads, HEAD_DIM], "fp16",
                    f"reshape(x={st}, shape={e.ints([1, 1, heads, HEAD_DIM])})")

    inputs = [("tokens", [1, 1], "int32"), ("input_pos", [1], "int32")]
    outputs = []
    # Token and position handling as the export has it.
    tok = e.op([1, 1], "int32", f"cast(x=%tokens, dtype={e.string('int32')})")
    nonneg = e.op([1, 1], "bool", f"greater_equal(x={tok}, y={e.const('0', [], 'int32')})")
    wrapped = e.op([1, 1], "int32", f"add(x={tok}, y={e.const(str(VOCAB), [], 'int32')})")
    idx = e.op([1, 1], "int32", f"select(cond={nonneg}, a={tok}, b={wrapped})")
    x = e.op(h, "fp16", f"gather(x={emb}, indices={idx}, axis={e.const('0', [], 'int32')}, "
                        f"batch_dims={e.const('0', [], 'int32')})")
    mask8 = e.op([1, context], "int8", f"gather(x={mask_table}, indices=%input_pos, "
                                       f"axis={e.const('0', [], 'int32')})")
    mask = e.op([1, context], "bool", f"cast(x={mask8}, dtype={e.string('bool')})")
    cos = e.op([1, HEAD_DIM // 2], "fp16", f"gather(x={cos_tab}, indices=%input_pos, axis={e.const('0', [], 'int32')})")
    sin = e.op([1, HEAD_DIM // 2], "fp16", f"gather(x={sin_tab}, indices=%input_pos, axis={e.const('0', [], 'int32')})")
    cos4 = e.op([1, 1, 1, HEAD_DIM // 2], "fp16", f"reshape(x={cos}, shape={e.ints([1, 1, 1, HEAD_DIM // 2])})")
    sin4 = e.op([1, 1, 1, HEAD_DIM // 2], "fp16", f"reshape(x={sin}, shape={e.ints([1, 1, 1, HEAD_DIM // 2])})")
    pos = e.op([], "int32", f"squeeze(x=%input_pos)")
    pos1 = e.op([], "int32", f"add(x={pos}, y={e.const('1', [], 'int32')})")
    zero = e.const("0", [], "int32")
    kv_begin = e.op([4], "int32", f"concat(values=({zero}, {zero}, {pos}, {zero}), "
                                  f"axis={e.const('0', [], 'int32')})")
    kv_end = e.op([4], "int32", f"concat(values=({e.const('1', [], 'int32')}, "
                                f"{e.const(str(KV_HEADS), [], 'int32')}, {pos1}, "
                                f"{e.const(str(HEAD_DIM), [], 'int32')}), axis={e.const('0', [], 'int32')})")
    fp16 = e.string("fp16")
    cache_shape = [1, KV_HEADS, context, HEAD_DIM]
    for i in range(layers):
        p = f"l{i}_"
        xn = rmsnorm(x, p + "op_norm", h)
        if i in ATTENTION_LAYERS:
            q = linear(xn, p + "q", h)
            k = linear(xn, p + "k", [1, 1, KV_HEADS * HEAD_DIM])
            v = linear(xn, p + "v", [1, 1, KV_HEADS * HEAD_DIM])
            qh = e.op([1, 1, HEADS, HEAD_DIM], "fp16", f"reshape(x={q}, shape={e.ints([1, 1, HEADS, HEAD_DIM])})")
            kh = e.op([1, 1, KV_HEADS, HEAD_DIM], "fp16", f"reshape(x={k}, shape={e.ints([1, 1, KV_HEADS, HEAD_DIM])})")
            vh = e.op([1, 1, KV_HEADS, HEAD_DIM], "fp16", f"reshape(x={v}, shape={e.ints([1, 1, KV_HEADS, HEAD_DIM])})")
            qn = rmsnorm(qh, p + "q_norm", [1, 1, HEADS, HEAD_DIM])
            kn = rmsnorm(kh, p + "k_norm", [1, 1, KV_HEADS, HEAD_DIM])
            qr = rope(qn, HEADS, cos4, sin4)
            kr = rope(kn, KV_HEADS, cos4, sin4)
            caches = {}
            for kind, t in (("v", vh), ("k", kr)):
                inp = f"{p}{kind}_cache"
                inputs.append((inp, cache_shape, "fp32"))
                tt = e.op([1, KV_HEADS, 1, HEAD_DIM], "fp16", f"transpose(x={t}, perm={e.ints([0, 2, 1, 3])})")
                r3 = e.op([KV_HEADS, 1, HEAD_DIM], "fp16", f"reshape(x={tt}, shape={e.ints([KV_HEADS, 1, HEAD_DIM])})")
                upd = e.op([1, KV_HEADS, 1, HEAD_DIM], "fp16", f"expand_dims(x={r3}, axes={e.ints([0])})")
                old = e.op(cache_shape, "fp16", f"cast(x=%{inp}, dtype={fp16})")
                new = e.op(cache_shape, "fp16",
                           f"slice_update(x={old}, update={upd}, begin={kv_begin}, end={kv_end}, "
                           f"begin_mask={e.bools([True, True, False, True])}, "
                           f"end_mask={e.bools([True, True, False, True])}, "
                           f"squeeze_mask={e.bools([False] * 4)}, stride={e.ints([1, 1, 1, 1])})",
                           name=f"{p}{kind}_cache_out")
                outputs.append(new[1:])
                ex = e.op([1, KV_HEADS, 1, context, HEAD_DIM], "fp16", f"expand_dims(x={new}, axes={e.ints([2])})")
                rep = HEADS // KV_HEADS
                tl = e.op([1, KV_HEADS, rep, context, HEAD_DIM], "fp16",
                          f"tile(x={ex}, reps={e.ints([1, 1, rep, 1, 1])})")
                caches[kind] = e.op([1, HEADS, context, HEAD_DIM], "fp16",
                                    f"reshape(x={tl}, shape={e.ints([1, HEADS, context, HEAD_DIM])})")
            qt = e.op([1, HEADS, 1, HEAD_DIM], "fp16", f"transpose(x={qr}, perm={e.ints([0, 2, 1, 3])})")
            att = e.op([1, HEADS, 1, HEAD_DIM], "fp16",
                       f"scaled_dot_product_attention(query={qt}, key={caches['k']}, "
                       f"value={caches['v']}, attn_mask={mask})")
            at = e.op([1, 1, HEADS, HEAD_DIM], "fp16", f"transpose(x={att}, perm={e.ints([0, 2, 1, 3])})")
            flat = e.op(h, "fp16", f"reshape(x={at}, shape={e.ints(h)})")
            y = linear(flat, p + "o", h)
        else:
            b = linear(xn, p + "b", h)
            c = linear(xn, p + "c", h)
            xx = linear(xn, p + "x", h)
            bx = e.op(h, "fp16", f"mul(x={b}, y={xx})")
            inp = f"{p}conv_state"
            inputs.append((inp, [1, D, 2], "fp32"))
            st = e.op([1, D, 2], "fp16", f"cast(x=%{inp}, dtype={fp16})")
            bxt = e.op([1, D, 1], "fp16", f"transpose(x={bx}, perm={e.ints([0, 2, 1])})")
            cat = e.op([1, D, 3], "fp16", f"concat(values=({st}, {bxt}), axis={e.const('-1', [], 'int32')}, "
                                          f"interleave={e.const('False', [], 'bool')})")
            new = e.op([1, D, 2], "fp16", f"slice_by_index(x={cat}, begin={e.ints([0, 0, 1])}, "
                                          f"end={e.ints([1, D, 1])}, end_mask={e.bools([True] * 3)})",
                       name=f"{p}conv_state_out")
            outputs.append(new[1:])
            conv = e.op([1, D, 1], "fp16",
                        f"conv(x={cat}, weight={e.blob(p + 'conv', ws[p + 'conv'], 'fp16')}, "
                        f"groups={e.const(str(D), [], 'int32')}, pad_type={e.string('valid')})")
            cr = e.op(h, "fp16", f"reshape(x={conv}, shape={e.ints(h)})")
            y0 = e.op(h, "fp16", f"mul(x={c}, y={cr})")
            y = linear(y0, p + "out", h)
        x = e.op(h, "fp16", f"add(x={x}, y={y})")
        xn = rmsnorm(x, p + "ffn_norm", h)
        g = linear(xn, p + "w1", [1, 1, FFN])
        u = linear(xn, p + "w3", [1, 1, FFN])
        a = e.op([1, 1, FFN], "fp16", f"silu(x={g})")
        m = e.op([1, 1, FFN], "fp16", f"mul(x={a}, y={u})")
        y = linear(m, p + "w2", h)
        x = e.op(h, "fp16", f"add(x={x}, y={y})")
    last = e.op([1, D], "fp16", f"slice_by_index(x={x}, begin={e.ints([0, 0, 0])}, end={e.ints([1, 1, D])}, "
                                f"squeeze_mask={e.bools([False, True, False])})")
    xn = rmsnorm(last, "final_norm", [1, D])
    if form == "fp16":
        # The LM head is the embedding itself (tied weights, one constant).
        head = emb
        e.read_bytes += VOCAB * D * 2
    else:
        ws["lm_head"] = ws["embed"]
        head = emit_weight(e, ws, "lm_head", form, True)
    logits = e.op([1, VOCAB], "fp16", f"linear(x={xn}, weight={head}, bias={bias(VOCAB)})",
                  name="logits")
    outputs.append(logits[1:])
    wf.close()
    args = [f"%{n}: {Emitter.ty(s, t)}" for n, s, t in inputs]
    # A host steps the export with its buffers written back: each new conv
    # state and KV cache goes into its input for the next step (ExecuTorch's
    # copy_ of the delegate's outputs). The model says so with a state map,
    # which anefit-bench and `anefit run` carry like the .pte's write-back.
    states = [{"state": n, "input": n, "output": n + "_out", "shape": s, "dtype": "fp32"}
              for n, s, t in inputs if n.endswith(("_cache", "_state"))]
    statemap = json.dumps({"schema": "anefit.statemap/1", "states": states},
                          separators=(",", ":"))
    header = {"description": {"metadata": {"userDefined": {"com.anefit.statemap": statemap}}}}
    text = "// anefit model: " + json.dumps(header, separators=(",", ":")) + "\n"
    text += "main[CoreML8](" + ",\n              ".join(args) + ") {\n  block0() {\n"
    text += "\n".join(e.lines) + "\n  } -> (" + ", ".join("%" + o for o in outputs) + ")\n}\n"
    with open(os.path.join(workdir, "model.mil"), "w") as f:
        f.write(text)
    return inputs, outputs, e.read_bytes


def step_inputs(inputs, pos, seed):
    """One step's inputs: the buffers hold random fp16-exact values before `pos`."""
    rng = np.random.default_rng(seed)
    feed = {}
    for name, shape, dtype in inputs:
        if name == "tokens":
            feed[name] = np.array([[pos * 7919 % VOCAB]], np.int32)
        elif name == "input_pos":
            feed[name] = np.array([pos], np.int32)
        else:
            a = (rng.standard_normal(shape, dtype=np.float32) * 0.5).astype(np.float16)
            if name.endswith("_cache"):
                a[:, :, pos:] = 0
            feed[name] = a.astype(np.float32)
    return feed


class TorchStep:
    """The same step in fp32, eagerly, with PyTorch (or numpy when torch is absent)."""

    def __init__(self, ws, form, layers, context):
        try:
            import torch
        except ImportError:
            torch = None
        self.torch, self.layers, self.context = torch, layers, context
        names = list(ws)
        dense = {n: dense_of(ws, n, form) for n in names if n != "lm_head"}
        dense["lm_head"] = dense_of(ws, "lm_head", form) if form != "fp16" else dense["embed"]
        if torch is not None:
            if _THREADS != "0":
                torch.set_num_threads(int(_THREADS))
            dense = {k: torch.from_numpy(v) for k, v in dense.items()}
        self.w = dense
        cos, sin = rope_tables(context)
        self.cos, self.sin = cos.astype(np.float32), sin.astype(np.float32)

    @property
    def name(self):
        return f"PyTorch {self.torch.__version__} eager" if self.torch else "numpy (no torch)"

    def step(self, feed):
        if self.torch is not None:
            with self.torch.inference_mode():
                return self._step(feed, self.torch).numpy()
        return self._step(feed, None)

    def _step(self, feed, torch):
        T = torch
        w, pos = self.w, int(feed["input_pos"][0])

        def arr(a):
            return T.from_numpy(np.ascontiguousarray(a)) if T else a

        def lin(x, name):
            return T.nn.functional.linear(x, w[name]) if T else x @ w[name].T

        def rms(x, name):
            inv = 1.0 / (((x * x).mean(-1, keepdims=True) if not T else (x * x).mean(-1, keepdim=True)) + EPS) ** 0.5
            return x * inv * w[name]

        def sigmoid(x):
            return T.sigmoid(x) if T else 1 / (1 + np.exp(-x))

        def rope(t, heads):
            t = t.reshape(heads, HEAD_DIM // 2, 2)
            c, s = arr(self.cos[pos]), arr(self.sin[pos])
            re_, im = t[..., 0], t[..., 1]
            out = (re_ * c - im * s, re_ * s + im * c)
            return (T.stack(out, -1) if T else np.stack(out, -1)).reshape(heads, HEAD_DIM)

        x = w["embed"][int(feed["tokens"][0, 0])].reshape(1, D)
        for i in range(self.layers):
            p = f"l{i}_"
            xn = rms(x, p + "op_norm")
            if i in ATTENTION_LAYERS:
                q = rms(lin(xn, p + "q").reshape(HEADS, HEAD_DIM), p + "q_norm")
                k = rms(lin(xn, p + "k").reshape(KV_HEADS, HEAD_DIM), p + "k_norm")
                v = lin(xn, p + "v").reshape(KV_HEADS, HEAD_DIM)
                q, k = rope(q, HEADS), rope(k, KV_HEADS)
                kc = arr(feed[p + "k_cache"][0].copy())
                vc = arr(feed[p + "v_cache"][0].copy())
                kc[:, pos], vc[:, pos] = k, v
                rep = HEADS // KV_HEADS
                kr = kc.repeat_interleave(rep, 0) if T else np.repeat(kc, rep, 0)
                vr = vc.repeat_interleave(rep, 0) if T else np.repeat(vc, rep, 0)
                s = (q[:, None, :] @ kr.transpose(1, 2) if T else q[:, None, :] @ kr.transpose(0, 2, 1))
                s = s[:, 0] * (HEAD_DIM ** -0.5)
                s[:, pos + 1:] = -np.inf
                s = T.softmax(s, -1) if T else np.exp(s - s.max(-1, keepdims=True))
                if not T:
                    s = s / s.sum(-1, keepdims=True)
                o = (s[:, None, :] @ vr)[:, 0].reshape(1, D)
                y = lin(o, p + "o")
            else:
                b, c, xx = lin(xn, p + "b"), lin(xn, p + "c"), lin(xn, p + "x")
                st = arr(feed[p + "conv_state"][0])
                bx = (b * xx).reshape(D, 1)
                cat = T.cat([st, bx], 1) if T else np.concatenate([st, bx], 1)
                conv = (cat * w[p + "conv"].reshape(D, 3)).sum(1)
                y = lin((c.reshape(D) * conv).reshape(1, D), p + "out")
            x = x + y
            xn = rms(x, p + "ffn_norm")
            g = lin(xn, p + "w1")
            x = x + lin(g * sigmoid(g) * lin(xn, p + "w3"), p + "w2")
        return lin(rms(x, "final_norm"), "lm_head")


def run_json(cmd):
    out = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr}")
    return json.loads(out.stdout)


def bench_step(bench, model, feed_npz, threads, steps, isa="best", prefetch="auto", spin=True,
               exact=False, precision="fp32"):
    """Wall and CPU ms per step (mean of `steps`), peak RSS and the model's bytes mapped with
    2 MB pages, of anefit-bench on one model (feed_npz may be "random"; isa, prefetch,
    spin=False, exact=True and precision are anefit-bench's --isa, --prefetch, --no-spin,
    --exact-products and --precision)."""
    r = run_json([bench, "--model", model, "--inputs", feed_npz, "--threads", str(threads),
                  "--steps", str(steps), "--isa", isa, "--prefetch", prefetch,
                  "--precision", precision, "--benchmark_filter=^step", "--benchmark_format=json"]
                 + ([] if spin else ["--no-spin"]) + (["--exact-products"] if exact else []))
    b = r["benchmarks"][0]
    return b["real_time"], b["cpu_time"], b["peak_rss_bytes"], b.get("pmd_mapped_bytes", 0)


def read_bandwidth(bench, passes=5, threads=1):
    """Best read rate (GB/s) of `threads` threads over `passes` repetitions, and the passes."""
    r = run_json([bench, f"--benchmark_filter=^read_bandwidth/threads:{threads}/",
                  "--benchmark_format=json", f"--benchmark_repetitions={passes}"])
    runs = [b for b in r["benchmarks"] if b.get("run_type") == "iteration"]
    if not runs:
        sys.exit(f"anefit-bench has no read_bandwidth/threads:{threads} (more threads than cores?)")
    return max(b["bytes_per_second"] for b in runs) / 1e9, passes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", default=os.environ.get("ANEFIT_BENCH", "build/bench/anefit-bench"),
                    help="the anefit-bench binary")
    ap.add_argument("--anefit", default=os.environ.get("ANEFIT_BIN", "build/tools/anefit/anefit"),
                    help="the anefit binary (for the numeric cross-check)")
    ap.add_argument("--forms", default="fp16,int4,lut4")
    ap.add_argument("--threads", default="1", help="anefit threads; a list runs each (1,2)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8, help="timed steps per round and form")
    ap.add_argument("--layers", type=int, default=LAYERS)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--pos", type=int, default=300, help="decode position of the timed step")
    ap.add_argument("--workdir", help="where to build the models (default: a temp dir, removed at exit)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-baseline", action="store_true", help="skip PyTorch eager")
    ap.add_argument("--build-only", action="store_true",
                    help="build the models (and inputs.npz) into --workdir and stop, for "
                         "run_exports.py to step them")
    ap.add_argument("--isa", default="best", choices=KERNEL_ISAS,
                    help="instruction set of anefit's weight kernels (default: the best the CPU has)")
    args = ap.parse_args()
    forms = args.forms.split(",")
    for f in forms:
        if f not in ("fp16", "int4") and f not in PALETTE_BITS:
            sys.exit(f"run_lfm2_350m: unknown form '{f}' (expected fp16, int4, "
                     f"{', '.join(PALETTE_BITS)})")
    threads = [int(t) for t in args.threads.split(",")]
    if args.build_only and not args.workdir:
        sys.exit("run_lfm2_350m: --build-only needs --workdir (a temp dir is removed at exit)")
    workdir = args.workdir or scratch_dir("anefit-bench-")
    bench = os.path.abspath(args.bench)

    t0 = time.perf_counter()
    ws = random_weights(args.seed, args.layers)
    built = {}
    for form in forms:
        d = os.path.join(workdir, form)
        inputs, outputs, read = build(d, ws, form, args.layers, args.context)
        built[form] = (os.path.join(d, "model.mil"), read, outputs)
    feed = step_inputs(inputs, args.pos, args.seed + 1)
    feed_npz = os.path.join(workdir, "inputs.npz")
    np.savez(feed_npz, **feed)
    print(f"models: {workdir} ({', '.join(forms)}), built in {time.perf_counter() - t0:.1f} s")
    if args.build_only:
        return

    bounds = {t: read_bandwidth(bench, threads=t)[0] for t in threads}
    for t, gbs in bounds.items():
        print(f"read bandwidth, {t} thread(s): {gbs:.1f} GB/s (anefit-bench "
              f"read_bandwidth/threads:{t}, best of 5)")

    baseline = None
    if not args.no_baseline:
        baseline = TorchStep(ws, forms[0], args.layers, args.context)
        if baseline.torch is None:
            print("PyTorch is not installed: the eager baseline is skipped")
            baseline = None

    times = {(f, t): [] for f in forms for t in threads}
    cpu = {(f, t): [] for f in forms for t in threads}
    rss, pmd = {}, {}
    base_times = []
    for r in range(args.rounds):
        for t in threads:
            for form in forms:
                ms, cms, peak, huge = bench_step(bench, built[form][0], feed_npz, t, args.steps,
                                                 args.isa)
                times[(form, t)].append(ms)
                cpu[(form, t)].append(cms)
                rss[form] = max(rss.get(form, 0), peak)
                pmd[form] = min(pmd.get(form, huge), huge)
        if baseline:
            baseline.step(feed)
            for _ in range(args.steps):
                s = time.perf_counter()
                baseline.step(feed)
                base_times.append((time.perf_counter() - s) * 1e3)

    print(f"\nLFM2-350M decode step, export_llm shape, context {args.context}, position {args.pos}; "
          f"{args.rounds} rounds of {args.steps} steps, medians; kernels: {args.isa}")
    print(f"{'form':6s} {'thr':>3s} {'ms/step':>8s} {'CPU ms':>7s} {'weights read':>13s} "
          f"{'GB/s':>6s} {'% of bound':>10s} {'peak RSS':>9s} {'RSS/weights':>11s} "
          f"{'2 MB pages':>10s}")
    for t in threads:
        for form in forms:
            ms = statistics.median(times[(form, t)])
            cms = statistics.median(cpu[(form, t)])
            read = built[form][1]
            wfile = os.path.getsize(os.path.join(os.path.dirname(built[form][0]), "weights",
                                                 "weight.bin"))
            gbs = read / ms / 1e6
            bound_ms = read / bounds[t] / 1e6
            print(f"{form:6s} {t:3d} {ms:8.1f} {cms:7.1f} {read / 1e6:10.0f} MB {gbs:6.1f} "
                  f"{100 * bound_ms / ms:9.0f}% {rss[form] / 2**20:6.0f} MiB "
                  f"{rss[form] / wfile:10.2f}x {100 * pmd[form] / wfile:9.0f}%")
    if len(threads) > 1:
        lo, hi = threads[0], threads[-1]
        print(f"read bandwidth, {hi} threads vs {lo}: {bounds[hi] / bounds[lo]:.2f}x (the most "
              f"a memory-bound step can gain)")
        for form in forms:
            a, b = statistics.median(times[(form, lo)]), statistics.median(times[(form, hi)])
            print(f"{form}: {hi} threads vs {lo}: {a / b:.2f}x")
    if baseline:
        bms = statistics.median(base_times)
        print(f"{baseline.name} (fp32, {_THREADS} thread(s)): {bms:.1f} ms/step; anefit "
              + ", ".join(f"{f} {bms / statistics.median(times[(f, threads[0])]):.2f}x" for f in forms)
              + " faster")

    # Numerics: each form's logits against the eager step on the same dense weights.
    for form in forms:
        ref = TorchStep(ws, form, args.layers, args.context).step(feed).reshape(-1)
        out = os.path.join(workdir, f"out_{form}.npz")
        subprocess.run([os.path.abspath(args.anefit), "run", built[form][0], "--inputs", feed_npz,
                        "-o", out, "--force"], check=True, capture_output=True)
        with np.load(out) as z:
            got = z["logits"].astype(np.float32).reshape(-1)
        err = float(np.max(np.abs(got - ref))) / float(np.max(np.abs(ref)))
        print(f"{form}: max |anefit - eager| / max |logits| = {err:.2e}")


if __name__ == "__main__":
    main()
