#!/usr/bin/env python3
"""One decode step of an LFM2-350M-shaped model: `anefit run` against an eager baseline.

The model has LFM2-350M's shape: 16 layers at D = 1024 (10 short-conv blocks and 6
GQA attention blocks with 16 query / 8 KV heads of 64, in LFM2's order), SwiGLU MLPs
of width 4608, vocabulary 65536 with the LM head tied to the embedding, fp16
weights (random, seeded), the conv states and a 128-slot KV cache as Core ML
states. It is written as MIL text plus a weight.bin blob file, so building it
needs only numpy.

The baseline runs the same step eagerly in fp32 on the same machine: PyTorch when it
is importable (torch.nn.functional, CPU), else numpy (both call an optimized BLAS for
the matmuls). The
benchmark reports the time of one decode step for both, their ratio, and anefit's
peak resident memory against the weight bytes.

    python3 bench/run_lfm2_350m.py --anefit build/tools/anefit/anefit [--steps 4]

Both sides use one thread unless BENCH_THREADS says otherwise (0 = library defaults).
"""

import os

# Threads for both sides, fixed before numpy loads its BLAS: on a shared machine
# oversubscribed BLAS threads spin and distort both wall and CPU time.
# BENCH_THREADS=0 leaves the libraries' defaults.
_THREADS = os.environ.get("BENCH_THREADS", "1")
if _THREADS != "0":
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = _THREADS

import argparse  # noqa: E402
import resource  # noqa: E402
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np  # noqa: E402

D, LAYERS, FFN, VOCAB = 1024, 16, 4608, 65536
HEADS, KV_HEADS, HEAD_DIM, CACHE = 16, 8, 64, 128
ATTENTION_LAYERS = {2, 5, 8, 10, 12, 14}
EPS = 1e-5


class WeightFile:
    """Appends fp16 blobs in MIL blob storage v2 layout (64-byte aligned records)."""

    def __init__(self, path):
        self.f = open(path, "wb")
        self.f.write(b"\0" * 64)
        self.count = 0
        self.end = 64

    def add(self, array):
        data = np.ascontiguousarray(array, dtype=np.float16).tobytes()
        offset = (self.end + 63) // 64 * 64
        self.f.seek(offset)
        self.f.write(struct.pack("<IIQQQ", 0xDEADBEEF, 1, len(data), offset + 64, 0))
        self.f.write(b"\0" * 32)
        self.f.write(data)
        self.end = offset + 64 + len(data)
        self.count += 1
        return offset

    def close(self):
        self.f.seek(0)
        self.f.write(struct.pack("<II", self.count, 2))
        self.f.close()


class Program:
    """Emits MIL text for the step and keeps the weights for the baseline."""

    def __init__(self, weights, rng):
        self.lines, self.weights, self.rng, self.wf, self.n = [], {}, rng, weights, 0

    def weight(self, name, shape, scale):
        w = (self.rng.standard_normal(shape, dtype=np.float32) * scale).astype(np.float16)
        off = self.wf.add(w)
        self.weights[name] = w
        dims = ", ".join(map(str, shape))
        self.lines.append(f'    %{name}: ({dims}, fp16)(Tensor) = const(val=BLOBFILE('
                          f'path="@model_path/weights/weight.bin", offset={off}), name="{name}")')
        return f"%{name}"

    def op(self, shape, dtype, text):
        self.n += 1
        name = f"v{self.n}"
        dims = ", ".join(map(str, shape))
        self.lines.append(f'    %{name}: ({dims}{", " if dims else ""}{dtype})(Tensor) = '
                          f'{text[:-1]}, name="{name}")')
        return f"%{name}"

    def rmsnorm(self, x, w, shape):
        sq = self.op(shape, "fp16", f"mul(x={x}, y={x})")
        red = list(shape[:-1]) + [1]
        mean = self.op(red, "fp16", f"reduce_mean(x={sq}, axes=[-1], keep_dims=True)")
        var = self.op(red, "fp16", f"add(x={mean}, y={EPS})")
        inv = self.op(red, "fp16", f"rsqrt(x={var})")
        xn = self.op(shape, "fp16", f"mul(x={x}, y={inv})")
        return self.op(shape, "fp16", f"mul(x={xn}, y={w})")


def build(workdir, seed):
    os.makedirs(os.path.join(workdir, "weights"), exist_ok=True)
    wf = WeightFile(os.path.join(workdir, "weights", "weight.bin"))
    p = Program(wf, np.random.default_rng(seed))
    h1 = [1, 1, D]
    emb = p.weight("embed", [VOCAB, D], 0.02)
    x = p.op(h1, "fp16", f"gather(x={emb}, indices=%token, axis=0)")
    states = []
    for i in range(LAYERS):
        pre = f"l{i}_"
        xn = p.rmsnorm(x, p.weight(pre + "op_norm", [D], 0.1), h1)
        if i in ATTENTION_LAYERS:
            q = p.op(h1, "fp16", f"linear(x={xn}, weight={p.weight(pre + 'q', [D, D], 0.02)})")
            k = p.op([1, 1, KV_HEADS * HEAD_DIM], "fp16",
                     f"linear(x={xn}, weight={p.weight(pre + 'k', [KV_HEADS * HEAD_DIM, D], 0.02)})")
            v = p.op([1, 1, KV_HEADS * HEAD_DIM], "fp16",
                     f"linear(x={xn}, weight={p.weight(pre + 'v', [KV_HEADS * HEAD_DIM, D], 0.02)})")
            # GQA: the 2 query heads of each KV head become the query length.
            qh = p.op([1, KV_HEADS, 2, HEAD_DIM], "fp16",
                      f"reshape(x={q}, shape=[1, {KV_HEADS}, 2, {HEAD_DIM}])")
            kh = p.op([1, KV_HEADS, 1, HEAD_DIM], "fp16",
                      f"reshape(x={k}, shape=[1, {KV_HEADS}, 1, {HEAD_DIM}])")
            vh = p.op([1, KV_HEADS, 1, HEAD_DIM], "fp16",
                      f"reshape(x={v}, shape=[1, {KV_HEADS}, 1, {HEAD_DIM}])")
            cache_shape = [1, KV_HEADS, CACHE, HEAD_DIM]
            caches = []
            for kind, new in (("k", kh), ("v", vh)):
                st = f"%{pre}{kind}_cache"
                states.append((st, cache_shape))
                old = p.op(cache_shape, "fp16", f"read_state(input={st})")
                upd = p.op(cache_shape, "fp16",
                           f"slice_update(x={old}, update={new}, begin=%kv_begin, end=%kv_end)")
                caches.append(p.op(cache_shape, "fp16",
                                   f"coreml_update_state(state={st}, value={upd})"))
            att = p.op([1, KV_HEADS, 2, HEAD_DIM], "fp16",
                       f"scaled_dot_product_attention(query={qh}, key={caches[0]}, "
                       f"value={caches[1]}, attn_mask=%mask)")
            flat = p.op(h1, "fp16", f"reshape(x={att}, shape=[1, 1, {D}])")
            y = p.op(h1, "fp16", f"linear(x={flat}, weight={p.weight(pre + 'o', [D, D], 0.02)})")
        else:
            h = p.op([1, 1, 3 * D], "fp16",
                     f"linear(x={xn}, weight={p.weight(pre + 'in_proj', [3 * D, D], 0.02)})")
            ht = p.op([1, 3 * D, 1], "fp16", f"transpose(x={h}, perm=[0, 2, 1])")
            parts = [f"%{pre}b", f"%{pre}c", f"%{pre}xx"]
            p.lines.append(f"    {parts[0]}: (1, {D}, 1, fp16)(Tensor), {parts[1]}: (1, {D}, 1, fp16)"
                           f"(Tensor), {parts[2]}: (1, {D}, 1, fp16)(Tensor) = split(x={ht}, "
                           f'num_splits=3, axis=1, name="{pre}split")')
            bx = p.op([1, D, 1], "fp16", f"mul(x={parts[0]}, y={parts[2]})")
            st = f"%{pre}conv_state"
            states.append((st, [1, D, 2]))
            old = p.op([1, D, 2], "fp16", f"read_state(input={st})")
            cat = p.op([1, D, 3], "fp16", f"concat(values=({old}, {bx}), axis=2)")
            new = p.op([1, D, 2], "fp16",
                       f"slice_by_index(x={cat}, begin=[0, 0, 1], end=[1, {D}, 3])")
            p.op([1, D, 2], "fp16", f"coreml_update_state(state={st}, value={new})")
            conv = p.op([1, D, 1], "fp16",
                        f"conv(x={cat}, weight={p.weight(pre + 'conv', [D, 1, 3], 0.3)}, groups={D})")
            yc = p.op([1, D, 1], "fp16", f"mul(x={parts[1]}, y={conv})")
            yt = p.op(h1, "fp16", f"transpose(x={yc}, perm=[0, 2, 1])")
            y = p.op(h1, "fp16",
                     f"linear(x={yt}, weight={p.weight(pre + 'out_proj', [D, D], 0.02)})")
        x = p.op(h1, "fp16", f"add(x={x}, y={y})")
        xn = p.rmsnorm(x, p.weight(pre + "ffn_norm", [D], 0.1), h1)
        g = p.op([1, 1, FFN], "fp16", f"linear(x={xn}, weight={p.weight(pre + 'w1', [FFN, D], 0.02)})")
        u = p.op([1, 1, FFN], "fp16", f"linear(x={xn}, weight={p.weight(pre + 'w3', [FFN, D], 0.02)})")
        a = p.op([1, 1, FFN], "fp16", f"silu(x={g})")
        m = p.op([1, 1, FFN], "fp16", f"mul(x={a}, y={u})")
        y = p.op(h1, "fp16", f"linear(x={m}, weight={p.weight(pre + 'w2', [D, FFN], 0.02)})")
        x = p.op(h1, "fp16", f"add(x={x}, y={y})")
    xn = p.rmsnorm(x, p.weight("final_norm", [D], 0.1), h1)
    logits = p.op([1, 1, VOCAB], "fp16", f"linear(x={xn}, weight={emb})")
    wf.close()
    args = ["%token: (1, 1, int32)(Tensor)", "%kv_begin: (4, int32)(Tensor)",
            "%kv_end: (4, int32)(Tensor)", f"%mask: (1, 1, 1, {CACHE}, fp16)(Tensor)"]
    args += [f"{s}: ({', '.join(map(str, shp))}, fp16)(State)" for s, shp in states]
    text = "main[CoreML8](" + ",\n              ".join(args) + ") {\n  block0() {\n"
    text += "\n".join(p.lines) + f"\n  }} -> ({logits})\n}}\n"
    with open(os.path.join(workdir, "model.mil"), "w") as f:
        f.write(text)
    return p.weights, os.path.getsize(os.path.join(workdir, "weights", "weight.bin")), logits[1:]


def step_inputs(step):
    mask = np.where(np.arange(CACHE) <= step, 0, -np.inf).astype(np.float16).reshape(1, 1, 1, CACHE)
    return {"token": np.array([[step * 7 % VOCAB]], np.int32),
            "kv_begin": np.array([0, 0, step, 0], np.int32),
            "kv_end": np.array([1, KV_HEADS, step + 1, HEAD_DIM], np.int32), "mask": mask}


class NumpyBaseline:
    """The same step in fp32, eagerly, with numpy (BLAS matmuls)."""

    name = "numpy"

    def __init__(self, weights):
        self.w = {k: v.astype(np.float32) for k, v in weights.items()}
        self.state = {}

    def rms(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * w

    def step(self, inp):
        w = self.w
        x = w["embed"][inp["token"][0, 0]].reshape(1, D)
        pos = int(inp["kv_begin"][2])
        mask = inp["mask"].astype(np.float32).reshape(1, CACHE)
        for i in range(LAYERS):
            pre = f"l{i}_"
            xn = self.rms(x, w[pre + "op_norm"])
            if i in ATTENTION_LAYERS:
                q = (xn @ w[pre + "q"].T).reshape(KV_HEADS, 2, HEAD_DIM)
                k = (xn @ w[pre + "k"].T).reshape(KV_HEADS, HEAD_DIM)
                v = (xn @ w[pre + "v"].T).reshape(KV_HEADS, HEAD_DIM)
                kc = self.state.setdefault(pre + "k", np.zeros((KV_HEADS, CACHE, HEAD_DIM), np.float32))
                vc = self.state.setdefault(pre + "v", np.zeros((KV_HEADS, CACHE, HEAD_DIM), np.float32))
                kc[:, pos], vc[:, pos] = k, v
                # A Python float keeps float32 (a numpy float64 scalar would promote).
                s = q @ kc.transpose(0, 2, 1) * (HEAD_DIM ** -0.5) + mask
                s = np.exp(s - s.max(-1, keepdims=True))
                s /= s.sum(-1, keepdims=True)
                y = (s @ vc).reshape(1, D) @ w[pre + "o"].T
            else:
                b, c, xx = np.split((xn @ w[pre + "in_proj"].T).reshape(3 * D), 3)
                st = self.state.setdefault(pre + "conv", np.zeros((D, 2), np.float32))
                cat = np.concatenate([st, (b * xx)[:, None]], axis=1)
                self.state[pre + "conv"] = cat[:, 1:].copy()
                conv = np.sum(cat * w[pre + "conv"].reshape(D, 3), axis=1)
                y = (c * conv).reshape(1, D) @ w[pre + "out_proj"].T
            x = x + y
            xn = self.rms(x, w[pre + "ffn_norm"])
            g = xn @ w[pre + "w1"].T
            m = g / (1 + np.exp(-g)) * (xn @ w[pre + "w3"].T)
            x = x + m @ w[pre + "w2"].T
        assert x.dtype == np.float32, x.dtype
        return self.rms(x, w["final_norm"]) @ w["embed"].T


class TorchBaseline:
    """The same step in fp32 with PyTorch eager (torch.nn.functional on the CPU)."""

    name = "torch"

    def __init__(self, weights):
        import torch

        self.torch = torch
        if _THREADS != "0":
            torch.set_num_threads(int(_THREADS))
        self.w = {k: torch.from_numpy(v.astype(np.float32)) for k, v in weights.items()}
        self.state = {}

    def rms(self, x, w):
        return x * self.torch.rsqrt((x * x).mean(-1, keepdim=True) + EPS) * w

    def step(self, inp):
        torch, w = self.torch, self.w
        F = torch.nn.functional
        with torch.inference_mode():
            x = w["embed"][int(inp["token"][0, 0])].reshape(1, D)
            pos = int(inp["kv_begin"][2])
            mask = torch.from_numpy(inp["mask"].astype(np.float32)).reshape(1, CACHE)
            for i in range(LAYERS):
                pre = f"l{i}_"
                xn = self.rms(x, w[pre + "op_norm"])
                if i in ATTENTION_LAYERS:
                    q = F.linear(xn, w[pre + "q"]).reshape(KV_HEADS, 2, HEAD_DIM)
                    k = F.linear(xn, w[pre + "k"]).reshape(KV_HEADS, HEAD_DIM)
                    v = F.linear(xn, w[pre + "v"]).reshape(KV_HEADS, HEAD_DIM)
                    kc = self.state.setdefault(pre + "k", torch.zeros(KV_HEADS, CACHE, HEAD_DIM))
                    vc = self.state.setdefault(pre + "v", torch.zeros(KV_HEADS, CACHE, HEAD_DIM))
                    kc[:, pos], vc[:, pos] = k, v
                    s = torch.softmax(q @ kc.transpose(1, 2) * (HEAD_DIM ** -0.5) + mask, dim=-1)
                    y = F.linear((s @ vc).reshape(1, D), w[pre + "o"])
                else:
                    b, c, xx = F.linear(xn, w[pre + "in_proj"]).reshape(3 * D).chunk(3)
                    st = self.state.setdefault(pre + "conv", torch.zeros(D, 2))
                    cat = torch.cat([st, (b * xx)[:, None]], dim=1)
                    self.state[pre + "conv"] = cat[:, 1:].clone()
                    conv = (cat * w[pre + "conv"].reshape(D, 3)).sum(1)
                    y = F.linear((c * conv).reshape(1, D), w[pre + "out_proj"])
                x = x + y
                xn = self.rms(x, w[pre + "ffn_norm"])
                x = x + F.linear(F.silu(F.linear(xn, w[pre + "w1"])) * F.linear(xn, w[pre + "w3"]),
                                 w[pre + "w2"])
            return F.linear(self.rms(x, w["final_norm"]), w["embed"]).numpy()


def measure(cmd):
    """Runs cmd; returns (wall seconds, CPU seconds, peak RSS bytes) of that child alone."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr.read().decode()}")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def cpu_seconds():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--anefit", default=os.environ.get("ANEFIT_BIN", "build-run/tools/anefit/anefit"))
    ap.add_argument("--steps", type=int, default=6, help="decode steps per timed run")
    ap.add_argument("--workdir", help="where to build the model (default: a temp dir)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="anefit-bench-")
    t0 = time.perf_counter()
    weights, weight_bytes, logits_name = build(workdir, args.seed)
    print(f"model: {workdir}/model.mil, {weight_bytes / 2**20:.0f} MiB of fp16 weights, "
          f"built in {time.perf_counter() - t0:.1f} s")

    # anefit: per-step time from the difference of an N-step and a 1-step run
    # (so loading the model is not counted); peak RSS of the N-step run.
    def timed(steps):
        feed = {f"step{k}/{n}": a for k in range(steps) for n, a in step_inputs(k).items()}
        npz = os.path.join(workdir, f"inputs{steps}.npz")
        np.savez(npz, **feed)
        return measure([os.path.abspath(args.anefit), "run", os.path.join(workdir, "model.mil"),
                        "--inputs", npz, "-o", os.path.join(workdir, f"out{steps}.npz")])
    t1, c1, _ = timed(1)
    tn, cn, rss = timed(1 + args.steps)
    anefit_step = (tn - t1) / args.steps
    anefit_cpu = (cn - c1) / args.steps

    try:
        import torch  # noqa: F401

        baseline_note = f"PyTorch {torch.__version__} eager, fp32"
        base = TorchBaseline(weights)
    except ImportError:
        baseline_note = "PyTorch is not installed; numpy (fp32, BLAS) is the eager baseline"
        base = NumpyBaseline(weights)
    del weights
    base.step(step_inputs(0))  # warm-up
    times, cpu0 = [], cpu_seconds()
    for k in range(1, 1 + args.steps):
        s = time.perf_counter()
        logits = base.step(step_inputs(k))
        times.append(time.perf_counter() - s)
    base_cpu = (cpu_seconds() - cpu0) / args.steps
    base_step = float(np.median(times))

    # Cross-check: anefit's logits of the last step against the baseline's.
    with np.load(os.path.join(workdir, f"out{1 + args.steps}.npz")) as z:
        got = z[f"step{args.steps}/{logits_name}"].astype(np.float32)
    err = float(np.max(np.abs(got.reshape(-1) - logits.reshape(-1)))) / float(np.max(np.abs(logits)))

    print(f"baseline: {baseline_note}; threads: {_THREADS if _THREADS != '0' else 'default'}")
    print(f"anefit run:  {anefit_step * 1e3:8.1f} ms/step wall, {anefit_cpu * 1e3:8.1f} ms/step CPU "
          f"(1 step {t1:.2f} s, {1 + args.steps} steps {tn:.2f} s, load included)")
    print(f"{base.name:11s}: {base_step * 1e3:8.1f} ms/step wall, {base_cpu * 1e3:8.1f} ms/step CPU "
          f"(median of {args.steps})")
    print(f"ratio (baseline / anefit): {base_step / anefit_step:.2f}x wall, "
          f"{base_cpu / anefit_cpu:.2f}x CPU")
    print(f"anefit peak RSS: {rss / 2**20:.0f} MiB = {rss / weight_bytes:.2f}x weight bytes")
    print(f"max |anefit - baseline| / max |logits| on the last step: {err:.2e}")


if __name__ == "__main__":
    main()
