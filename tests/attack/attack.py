#!/usr/bin/env python3
"""Attack campaign: mutated models and inputs through every verb of anefit.

Each run copies one committed fixture (a .mlpackage, a .mlmodel, MIL text, a
.pte or an .npz of inputs) into a fresh directory, mutates it (bytes, numbers,
lines, truncation; inside a package: model.mlmodel, Manifest.json or
weight.bin), and runs one verb on it with a timeout and an address-space
limit. Every run is classified:

  ok        exit 0, 1 or 2; on exit 2 stderr is one line naming the file
  crash     killed by a signal, or a sanitizer report, or an exit code not 0/1/2
  hang      still running after --timeout seconds (killed)
  escape    a file written, replaced or removed other than the named output
  multiline exit 2 with more (or less) than one line on stderr
  fileless  exit 2 with a line that names neither the file nor an option
  memory    peak resident memory above --max-rss-mb

Findings are copied with the command line to OUT/findings/<kind>-<n>/.

  python tests/attack/attack.py --anefit build/tools/anefit/anefit --runs 20000 \
      --out /tmp/attack --seed 1
"""

import argparse
import collections
import hashlib
import json
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")

INTERESTING = [0, 1, 2, 7, 8, 15, 16, 31, 32, 63, 64, 127, 128, 255, 256, 1023, 4096,
               65535, 65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**64 - 1]
TEXT_NUMBERS = ["0", "-1", "1", "2147483648", "4294967296", "9223372036854775807",
                "99999999999999999999", "-9223372036854775808", "1e308", "nan", "inf",
                "100000000", "65536", "3"]


# --- seeds ------------------------------------------------------------------

def seeds():
    """The committed inputs, by kind; small ones so a run takes milliseconds."""
    out = collections.defaultdict(list)
    for name in sorted(os.listdir(FIXTURES)):
        pkg = os.path.join(FIXTURES, name, "model.mlpackage")
        if os.path.isdir(pkg) and du(pkg) < 2 << 20:
            out["mlpackage"].append(pkg)
            spec = os.path.join(pkg, "Data", "com.apple.CoreML", "model.mlmodel")
            if os.path.getsize(spec) < 1 << 20:
                out["mlmodel"].append(spec)
        p = os.path.join(FIXTURES, name, "inputs.npz")
        if os.path.isdir(pkg) and os.path.isfile(p) and os.path.getsize(p) < 1 << 20:
            out["npz"].append(p)
    for f in sorted(os.listdir(os.path.join(FIXTURES, "pte"))):
        p = os.path.join(FIXTURES, "pte", f)
        if f.endswith(".pte") and os.path.getsize(p) < 1 << 20:
            out["pte"].append(p)
    for d, _, files in os.walk(os.path.join(ROOT, "tests", "lit")):
        for f in sorted(files):
            p = os.path.join(d, f)
            if f.endswith(".mil") and os.path.getsize(p) < 64 << 10:
                out["mil"].append(p)
    return out


def du(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


# --- mutations --------------------------------------------------------------

def mutate_bytes(data, rng):
    data = bytearray(data)
    for _ in range(rng.choice([1, 1, 1, 2, 3, 8])):
        op = rng.randrange(7)
        n = len(data)
        if n == 0:
            data += bytes([rng.randrange(256)])
            continue
        i = rng.randrange(n)
        if op == 0:  # flip bits
            data[i] ^= 1 << rng.randrange(8)
        elif op == 1:  # a random byte
            data[i] = rng.randrange(256)
        elif op == 2:  # an interesting little-endian integer
            width = rng.choice([1, 2, 4, 8])
            v = rng.choice(INTERESTING) % (1 << (8 * width))
            data[i:i + width] = v.to_bytes(width, "little")
        elif op == 3:  # truncate
            del data[rng.randrange(n):]
        elif op == 4:  # delete a slice
            del data[i:i + rng.randrange(1, 64)]
        elif op == 5:  # duplicate a slice
            j = min(n, i + rng.randrange(1, 256))
            data[i:i] = data[i:j]
        else:  # a varint-like run of 0xff
            data[i:i] = b"\xff" * rng.randrange(1, 11)
    return bytes(data)


def mutate_text(data, rng):
    text = data.decode("utf-8", "replace")
    for _ in range(rng.choice([1, 1, 2, 3])):
        op = rng.randrange(6)
        lines = text.split("\n")
        if op == 0:  # a number token becomes an extreme
            nums = list(re.finditer(r"-?\d+(\.\d+)?", text))
            if nums:
                m = rng.choice(nums)
                text = text[:m.start()] + rng.choice(TEXT_NUMBERS) + text[m.end():]
        elif op == 1 and lines:  # drop a line
            del lines[rng.randrange(len(lines))]
            text = "\n".join(lines)
        elif op == 2 and lines:  # duplicate a line
            i = rng.randrange(len(lines))
            lines.insert(i, lines[i])
            text = "\n".join(lines)
        elif op == 3:  # a name becomes hostile
            names = list(re.finditer(r"%[A-Za-z_][A-Za-z0-9_]*", text))
            if names:
                m = rng.choice(names)
                bad = rng.choice(['%"../../x"', '%"/abs/x"', '%"a\x1b[31mb"', "%" + "a" * 5000,
                                  '%"\xff\xfe"', names[0].group(0)])
                text = text[:m.start()] + bad + text[m.end():]
        elif op == 4:  # a token from elsewhere
            toks = re.findall(r"\S+", text)
            if toks and text:
                i = rng.randrange(len(text))
                text = text[:i] + " " + rng.choice(toks) + " " + text[i:]
        else:
            return mutate_bytes(text.encode(), rng)
    return text.encode("utf-8", "surrogateescape")


def mutate_file(path, rng):
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith((".mil", ".json")) and rng.random() < 0.7:
        data = mutate_text(data, rng)
    else:
        data = mutate_bytes(data, rng)
    with open(path, "wb") as f:
        f.write(data)


# --- runs -------------------------------------------------------------------

def snapshot(root):
    """Every path under root with its size and content hash."""
    out = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(d, name)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
            elif os.path.isdir(p):
                out[rel] = ("dir",)
            else:
                with open(p, "rb") as f:
                    out[rel] = ("file", hashlib.sha1(f.read()).hexdigest())
    return out


def plan(kind, model, rng):
    """A verb and its arguments for a model of this kind (relative paths)."""
    verbs = [
        ["show"], ["show", "--json"], ["check"], ["check", "--json"], ["dump"],
        ["dump", "-o", "out/out.mil"], ["convert", model, "out/out.mlpackage"],
        ["convert", model, "out/out.mil"], ["convert", model, "out/out.mlmodel"],
        ["fix", "-o", "out/fixed.mlpackage", "--no-verify"],
        ["fix", "-o", "out/fixed.mlpackage", "--steps", "2", "--max-memory", "512M"],
        ["run", "--random", "--steps", "2", "--max-memory", "512M", "-o", "out/out.npz",
         "--threads", "1"],
        ["split", "--json"], ["split", "--emit-models", "out/regions", "--max-memory", "512M"],
        ["split", "--verify", "--steps", "2", "--max-memory", "512M"],
    ]
    if model.endswith(".pte"):
        # A .pte is also fixed into a .pte: the payloads rebuilt in place.
        verbs += [["fix", "-o", "out/fixed.pte", "--no-verify"],
                  ["fix", "-o", "out/fixed.pte", "--steps", "2", "--max-memory", "512M"]]
    v = list(rng.choice(verbs))
    if v[0] == "convert":
        return v, [v[2]]
    args = [v[0], model] + v[1:]
    outputs = [a for a in v if a.startswith("out/")]
    return args, outputs


def run_one(anefit, args, cwd, timeout, max_as):
    def limits():
        os.setsid()
        resource.setrlimit(resource.RLIMIT_AS, (max_as, max_as))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    env = dict(os.environ, ASAN_OPTIONS="exitcode=99:detect_leaks=1",
               UBSAN_OPTIONS="halt_on_error=1:exitcode=99")
    with open(os.path.join(cwd, ".stderr"), "wb") as err, \
            open(os.path.join(cwd, ".stdout"), "wb") as out:
        p = subprocess.Popen([anefit] + args, cwd=cwd, stdout=out, stderr=err,
                             stdin=subprocess.DEVNULL, preexec_fn=limits, env=env)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                os.killpg(p.pid, signal.SIGKILL)
                _, status, usage = os.wait4(p.pid, 0)
                p.returncode = None
                return None, b"", usage.ru_maxrss
            time.sleep(0.002)
    rc = os.waitstatus_to_exitcode(status)
    p.returncode = rc
    with open(os.path.join(cwd, ".stderr"), "rb") as f:
        stderr = f.read()
    return rc, stderr, usage.ru_maxrss


def side_outputs(output):
    """What a verb writes beside a named output by design: the state map of a
    fixed model, the weights of a .mil."""
    base, ext = os.path.splitext(output)
    if ext == ".mlpackage":
        return [output, base + ".statemap.json"]
    if ext == ".mil":
        d, name = os.path.split(base)
        return [output, os.path.join(d, "weights", name + ".bin"), os.path.join(d, "weights")]
    return [output]


def classify(rc, stderr, rss_kb, names, args, before, after, outputs, max_rss_mb):
    if rc is None:
        return "hang"
    if rc < 0 or rc not in (0, 1, 2) or b"Sanitizer" in stderr or b"runtime error:" in stderr:
        return "crash"
    changed = []
    for rel in set(before) | set(after):
        if os.path.basename(rel) in (".stderr", ".stdout"):
            continue
        if before.get(rel) != after.get(rel):
            if not any(rel == o or rel.startswith(o + "/") or o.startswith(rel + "/")
                       for o in outputs):
                changed.append(rel)
    if changed:
        return "escape"
    if rss_kb > max_rss_mb * 1024:
        return "memory"
    if rc == 2:
        lines = stderr.decode("utf-8", "replace").rstrip("\n").split("\n")
        if len(lines) != 1 or not lines[0]:
            return "multiline"
        if not any(n in lines[0] for n in names) and "--" not in lines[0]:
            return "fileless"
    return "ok"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--anefit", required=True)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="directory for the summary and the findings")
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--max-as-mb", type=int, default=8192, help="address-space limit of a run")
    ap.add_argument("--max-rss-mb", type=int, default=1024,
                    help="peak resident memory counted as a finding")
    ap.add_argument("--kinds", default="mlpackage,mlmodel,mil,pte,npz")
    a = ap.parse_args()

    anefit = os.path.abspath(a.anefit)
    rng = random.Random(a.seed)
    pool = seeds()
    kinds = [k for k in a.kinds.split(",") if pool.get(k)]
    os.makedirs(os.path.join(a.out, "findings"), exist_ok=True)
    counts = collections.Counter()
    by_verb = collections.Counter()
    exits = collections.Counter()
    started = time.monotonic()
    for n in range(a.runs):
        kind = rng.choice(kinds)
        seed = rng.choice(pool[kind])
        work = tempfile.mkdtemp(prefix="run-", dir=a.out)
        box = os.path.join(work, "box")
        os.makedirs(os.path.join(box, "out"))
        if kind == "npz":
            # A mutated input archive for a model that reads it.
            pkg_dir = os.path.dirname(seed)
            shutil.copytree(os.path.join(pkg_dir, "model.mlpackage"),
                            os.path.join(box, "model.mlpackage"))
            shutil.copy(seed, os.path.join(box, "inputs.npz"))
            mutate_file(os.path.join(box, "inputs.npz"), rng)
            model = "model.mlpackage"
            args = ["run", model, "--inputs", "inputs.npz", "--max-memory", "512M",
                    "--threads", "1", "-o", "out/out.npz"]
            outputs = ["out/out.npz"]
            names = ["inputs.npz", model]
        else:
            ext = {"mlpackage": ".mlpackage", "mlmodel": ".mlmodel", "mil": ".mil",
                   "pte": ".pte"}[kind]
            model = "model" + ext
            dst = os.path.join(box, model)
            if kind == "mlpackage":
                shutil.copytree(seed, dst)
                inner = rng.choice(["Data/com.apple.CoreML/model.mlmodel", "Manifest.json",
                                    "Data/com.apple.CoreML/weights/weight.bin"])
                if os.path.exists(os.path.join(dst, inner)):
                    mutate_file(os.path.join(dst, inner), rng)
            else:
                shutil.copy(seed, dst)
                mutate_file(dst, rng)
            args, outputs = plan(kind, model, rng)
            names = [model]
        before = snapshot(work)
        rc, stderr, rss = run_one(anefit, args, box, a.timeout, a.max_as_mb << 20)
        after = snapshot(work)
        outs = ["box/" + s for o in outputs for s in side_outputs(o)]
        # An error may name the model or any file of it (a package's weight.bin).
        names = names + outputs + sorted(
            {os.path.basename(k) for k in before if before[k][0] == "file"})
        verdict = classify(rc, stderr, rss, names, args, before, after, outs, a.max_rss_mb)
        counts[verdict] += 1
        by_verb[(args[0], verdict)] += 1
        exits[str(rc)] += 1
        if verdict != "ok":
            keep = os.path.join(a.out, "findings", "%s-%d" % (verdict, n))
            shutil.copytree(work, keep, symlinks=True, ignore=shutil.ignore_patterns("out"))
            with open(os.path.join(keep, "command.txt"), "w") as f:
                f.write("seed: %s\ncwd: box\nanefit %s\nexit: %s\n" %
                        (os.path.relpath(seed, ROOT), " ".join(args), rc))
        shutil.rmtree(work, ignore_errors=True)
        if (n + 1) % 500 == 0:
            print("%d runs, %.0f s: %s" % (n + 1, time.monotonic() - started, dict(counts)),
                  flush=True)
    summary = {
        "runs": a.runs, "seed": a.seed, "seconds": round(time.monotonic() - started),
        "verdicts": dict(counts), "exits": dict(exits),
        "by_verb": {"%s %s" % k: v for k, v in sorted(by_verb.items())},
    }
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary, indent=2))
    return 0 if counts["ok"] == a.runs else 1


if __name__ == "__main__":
    sys.exit(main())
