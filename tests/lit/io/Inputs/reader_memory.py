"""Peak memory of one of anefit's readers against the size of its input.

    reader_memory.py make READER DIR [SCALE]
    reader_memory.py measure READER DIR BOUND

`make` writes a small and a large input for READER into DIR (SCALE, default
1, multiplies the large one's size) with the anefit command that reads them.
`measure` runs that command on each (the same command, only the input
differs) and prints how much more the large run's peak resident memory is
than the small one's, as a multiple of how much larger its input is; it
exits 1 when the multiple is over BOUND (docs/files.md states each reader's).
The inputs are the worst cases found for each reader (the most memory per
byte), not typical files.

The two steps are two processes: a child's peak resident memory (wait4's
ru_maxrss) counts what its parent held when it forked, and `make` holds the
inputs it wrote. `measure` imports nothing large.

READER is one of: mil-ops, mil-literals, modelproto, pte, npz, observations,
etrecord, etrecord-map, manifest, weights, tokenizer.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile

step, reader, work = sys.argv[1], sys.argv[2], sys.argv[3]
here = os.path.dirname(os.path.abspath(__file__))
src = os.path.abspath(os.path.join(here, "..", "..", "..", ".."))
fixtures = os.path.join(src, "tests", "fixtures")
os.makedirs(work, exist_ok=True)


def path(name):
    return os.path.join(work, name)


def write(name, text):
    with open(path(name), "w", encoding="utf-8") as f:
        f.write(text)
    return path(name)


def peak_kb(argv):
    """The peak resident set of one run of argv, in KiB (its exit status is
    not judged: several commands fail after reading, on purpose)."""
    with open(os.devnull, "wb") as null:
        p = subprocess.Popen(argv, stdout=null, stderr=subprocess.PIPE)
        err = p.stderr.read()
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = status
    return usage.ru_maxrss, err.decode(errors="replace").strip().splitlines()[-1:]


def mil_ops(name, n):
    """n ops of one short line each: the IR's cost per op."""
    lines = ["main[CoreML8](%v0: (1, 4, fp16)(Tensor)) {", "  block0() {"]
    for i in range(1, n + 1):
        lines.append(f'    %v{i}: (1, 4, fp16)(Tensor) = relu(x=%v{i - 1}, name="v{i}")')
    lines += [f"  }} -> (%v{n})", "}"]
    return write(name, "\n".join(lines) + "\n")


def mil_literals(name, n):
    """n constants of 65536 one-digit fp64 values: 8 bytes per 2 of text."""
    row = ",".join(["1"] * 65536)
    lines = ["main[CoreML8](%x: (1, fp16)(Tensor)) {", "  block0() {"]
    for i in range(n):
        lines.append(f'    %c{i}: (65536, fp64)(Tensor) = const(val=[{row}], name="c{i}")')
    lines += ["  } -> (%x)", "}"]
    return write(name, "\n".join(lines) + "\n")


def modelproto(name, n):
    """The ops of mil_ops as a Core ML package; its size is model.mlmodel's."""
    text = mil_ops(name + ".mil", n)
    out = path(name + ".mlpackage")
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run(["anefit", "convert", text, out], check=True, stdout=subprocess.DEVNULL)
    return out


def observations(name, n):
    """A flat array of empty objects, the JSON that takes the most once read."""
    return write(name, '{"schema": "anefit.probe-observations/1", "x": [' +
                 ",".join(["{}"] * n) + "]}")


def etrecord(name, n):
    """An edge program of n nodes holding only a debug handle (the least text
    that makes the reader keep a node), deflated to the 32 times the archive
    it may inflate to."""
    nodes = ",".join('{"metadata":{"debug_handle":%d}}' % (i % 10) for i in range(n))
    program = '{"graph_module": {"graph": {"nodes": [' + nodes + ']}}}'
    out = path(name)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("ETRECORD_V0", "")
        z.writestr("edge_dialect_exported_program/forward", program)
        # Stored padding, so the deflated program stays within 32 times the
        # archive.
        z.writestr(zipfile.ZipInfo("pad_state_dict"), b"\0" * (len(program) // 30))
    return out


def etrecord_map(name, n):
    """A delegate map of n ops with a handle each (what the reader keeps; it
    builds nothing else of the member), deflated to the 32 times the archive
    it may inflate to."""
    program = '{"graph_module": {"graph": {"nodes": []}}}'
    dmap = ('{"forward": {"0": {"delegate_map": {' +
            ",".join('"%x:0":[%d]' % (i, i % 10) for i in range(n)) + "}}}}")
    out = path(name)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("ETRECORD_V0", "")
        z.writestr("edge_dialect_exported_program/forward", program)
        z.writestr("delegate_map", dmap)
        z.writestr(zipfile.ZipInfo("pad_state_dict"), b"\0" * (len(dmap) // 30))
    return out


def manifest(name, n):
    """The cnn_small package with n more (unused) entries in Manifest.json."""
    out = path(name)
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(os.path.join(fixtures, "cnn_small", "model.mlpackage"), out)
    with open(os.path.join(out, "Manifest.json")) as f:
        m = json.load(f)
    for i in range(n):
        m["itemInfoEntries"]["%032x" % i] = {"author": "a", "description": "d", "name": "n%d" % i,
                                             "path": "com.apple.CoreML/x%d" % i}
    with open(os.path.join(out, "Manifest.json"), "w") as f:
        json.dump(m, f, separators=(",", ":"))
    return out


def weights(name, n):
    import numpy as np

    """A .mil whose fp16 weight of n x 64 values is in a weight file; its
    size is the weight file's."""
    d = path(name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "weights"))
    size = n * 64 * 2
    with open(os.path.join(d, "weights", "weight.bin"), "wb") as f:
        f.write(struct.pack("<II", 1, 2).ljust(64, b"\0"))
        f.write(struct.pack("<IIQQQ", 0xDEADBEEF, 1, size, 128, 0).ljust(64, b"\0"))
        f.write(np.full(n * 64, 0.5, np.float16).tobytes())
    with open(os.path.join(d, "model.mil"), "w") as f:
        f.write(f"""main[CoreML8](%x: (1, 64, fp16)(Tensor)) {{
  block0() {{
    %w: ({n}, 64, fp16)(Tensor) = const(val=BLOBFILE(path="@model_path/weights/weight.bin", offset=64), name="w")
    %y: (1, {n}, fp16)(Tensor) = linear(x=%x, weight=%w, name="y")
  }} -> (%y)
}}
""")
    return os.path.join(d, "model.mil")


def tokenizer(name, n):
    """A byte-level BPE tokenizer.json with n more vocabulary entries and
    merges (short ones: the most entries per byte)."""
    with open(os.path.join(src, "tests", "lit", "runtime", "Inputs", "bytes-tokenizer.json"),
              encoding="utf-8") as f:
        t = json.load(f)
    vocab, merges = t["model"]["vocab"], t["model"]["merges"]
    base = len(vocab)
    letters = "abcdefghijklmnopqrstuvwxyz"
    for i in range(n):
        a, b = letters[i % 26], letters[(i // 26) % 26]
        word = "%s%s%d" % (a, b, i)
        vocab[word] = base + i
        merges.append("%s%s %d" % (a, b, i))
    return write(name, json.dumps(t, separators=(",", ":"), ensure_ascii=False))


def npz(name, n):
    """An uncompressed .npz of one fp32 member of n values; the model's input
    has another name, so the command stops once it is read."""
    import numpy as np

    out = path(name)
    np.savez(out, z=np.full(n, 0.5, np.float32))
    return out




def measure():
    with open(path(reader + ".spec.json")) as f:
        spec = json.load(f)
    bound = float(sys.argv[4])
    small_kb, _ = peak_kb(spec["small"])
    large_kb, last = peak_kb(spec["large"])
    extra = (large_kb - small_kb) * 1024
    grown = spec["large_size"] - spec["small_size"]
    multiple = extra / grown
    print("%s: input %.1f MB more, peak RSS %.1f MB more: %.2f times the input (bound %g)%s" %
          (reader, grown / 1e6, extra / 1e6, multiple, bound,
           "; it ended: " + last[0] if last else ""))
    sys.exit(0 if multiple <= bound else 1)


if step == "measure":
    measure()
    sys.exit(0)
scale = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
clean = write("clean.mil", """main[CoreML8](%x: (1, 4, fp16)(Tensor)) {
  block0() {
    %y: (1, 4, fp16)(Tensor) = add(x=%x, y=%x, name="y")
  } -> (%y)
}
""")
text = write("text.txt", "The quick brown fox jumps over the lazy dog.")
pte = os.path.join(fixtures, "pte", "lfm2_export_llm_4w_et.pte")

# reader: (make(name, n), small n, large n, the command, the file whose size counts)
readers = {
    "mil-ops": (mil_ops, 100, 100000, lambda f: ["anefit", "show", f], None),
    "mil-literals": (mil_literals, 1, 48, lambda f: ["anefit", "show", f], None),
    "modelproto": (modelproto, 100, 100000, lambda f: ["anefit", "show", f],
                   lambda f: os.path.join(f, "Data", "com.apple.CoreML", "model.mlmodel")),
    "pte": (None, 0, 0, lambda f: ["anefit", "check", f], None),
    "npz": (npz, 16, 8 << 20, lambda f: ["anefit", "run", clean, "--inputs", f], None),
    "observations": (observations, 10, 2000000,
                     lambda f: ["anefit", "check", clean, "--observations", f], None),
    "etrecord": (etrecord, 10, 200000, lambda f: ["anefit", "check", pte, "--etrecord", f], None),
    "etrecord-map": (etrecord_map, 10, 2000000,
                     lambda f: ["anefit", "check", pte, "--etrecord", f], None),
    "manifest": (manifest, 10, 8000, lambda f: ["anefit", "show", f],
                 lambda f: os.path.join(f, "Manifest.json")),
    "weights": (weights, 16, 1 << 18, lambda f: ["anefit", "run", f, "--random"],
                lambda f: os.path.join(os.path.dirname(f), "weights", "weight.bin")),
    "tokenizer": (tokenizer, 10, 500000,
                  lambda f: ["anefit", "run", clean, "--perplexity", text, "--tokenizer", f], None),
}
make, small_n, large_n, command, sized = readers[reader]
if reader == "pte":
    # The reader maps the program and reads the Core ML payloads' protobufs:
    # the largest committed program against the smallest.
    small = os.path.join(fixtures, "pte", "lfm2_remedy_c4w.pte")
    large = os.path.join(fixtures, "pte", "lfm2_recipe_ane_fp16.pte")
else:
    ext = {"mil-ops": ".mil", "mil-literals": ".mil", "npz": ".npz", "observations": ".json",
           "etrecord": ".etrecord", "etrecord-map": ".etrecord", "manifest": ".mlpackage", "tokenizer": ".json"}.get(reader, "")
    small = make("small-" + reader + ext, small_n)
    large = make("large-" + reader + ext, int(large_n * scale))
size = (lambda f: os.path.getsize(sized(f) if sized else f))
with open(path(reader + ".spec.json"), "w") as f:
    json.dump({"small": command(small), "large": command(large), "small_size": size(small),
               "large_size": size(large)}, f)
