"""Makes the hostile inputs of the bad-input corpus that are too large, or
too close to a real fixture, to commit as files.

    make_hostile.py KIND OUT [SRC]

KIND
  dup-results SRC_PKG   a copy of a package whose split op declares the
                        same result name twice (its uses follow the name)
  short-blob SRC_PKG    a copy whose first weight blob holds half the bytes
                        its tensor needs
  pte-json-type SRC     a copy of a .pte whose Core ML payload index has a
                        string where a size belongs
  pte-nul-name SRC      ... whose method name "forward" holds a NUL byte
  pte-esc-name SRC      ... holds a terminal escape sequence
  pte-latin1-name SRC   ... holds a byte that is not UTF-8
  npz-claim             an .npz whose deflated member of about 1 KB claims
                        to inflate to 4 GiB
  npz-ratio             an .npz whose 100 KB deflated member really inflates
                        to 100 MiB of zeros
  npz-steps             an .npz with one array, step999999/x
  npz-overclaim         a deflated member that claims 64 bytes more than it
                        inflates to (its array claims them too)
  npz-underclaim        a deflated member that inflates to 64 bytes more
                        than it claims
  npz-compressed        a good deflated .npz of x (1, 1, 64) fp32, 0..63
  deep-blocks N         MIL text with N nested cond blocks
  long-line             MIL text with a 70 MiB line (an op name)
  big-literal           MIL text with a list literal of 100001 values
Only OUT is written.
"""
import os
import shutil
import struct
import sys
import zipfile
import zlib

kind, out = sys.argv[1:3]
src = sys.argv[3] if len(sys.argv) > 3 else None


def copy_package():
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(src, out)
    return os.path.join(out, "Data", "com.apple.CoreML")


def replace_bytes(path, old, new, count=-1):
    assert len(old) == len(new), "same length keeps every offset"
    data = open(path, "rb").read()
    assert old in data, old
    open(path, "wb").write(data.replace(old, new, count))


def npy_header(descr, shape):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join("%d, " % d for d in shape))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode()


def write_stored_npz(members):
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for name, data in members:
            z.writestr(name, data)


def deflated_member(name, raw, claimed_size=None):
    """A zip with one deflated member; `claimed_size` replaces the real
    uncompressed size in both headers."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    comp = c.compress(raw) + c.flush()
    size = len(raw) if claimed_size is None else claimed_size
    crc = zlib.crc32(raw)
    usize32, extra_local, extra_central = size, b"", b""
    if size >= 0xFFFFFFFF:
        usize32 = 0xFFFFFFFF
        extra_local = struct.pack("<HHQQ", 1, 16, size, len(comp))
        extra_central = struct.pack("<HHQ", 1, 8, size)
    fname = name.encode()
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 8, 0, 0x21, crc,
                        len(comp), usize32, len(fname), len(extra_local))
    local += fname + extra_local + comp
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 8, 0, 0x21, crc,
                          len(comp), usize32, len(fname), len(extra_central), 0, 0, 0, 0, 0)
    central += fname + extra_central
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(local), 0)
    open(out, "wb").write(local + central + end)


if kind == "dup-results":
    model = os.path.join(copy_package(), "model.mlmodel")
    replace_bytes(model, b"split_bcx_1", b"split_bcx_0")
elif kind == "short-blob":
    weights = os.path.join(copy_package(), "weights", "weight.bin")
    with open(weights, "r+b") as f:
        f.seek(64 + 8)
        size = struct.unpack("<Q", f.read(8))[0]
        f.seek(64 + 8)
        f.write(struct.pack("<Q", size // 2 // 64 * 64))
elif kind.startswith("pte-"):
    shutil.copyfile(src, out)
    if kind == "pte-json-type":
        data = bytearray(open(out, "rb").read())
        # The index is written backwards: '"size": 1234' reads '4321 :"ezis"'.
        at = data.rfind(b':"ezis"')
        assert at > 3 and data[at - 3:at].isdigit(), "no 3-digit size to replace"
        data[at - 3:at] = b'"7"'
        open(out, "wb").write(data)
    else:
        name = {"pte-nul-name": b"for\x00ard", "pte-esc-name": b"f\x1b[31md",
                "pte-latin1-name": b"forw\xe4rd"}[kind]
        # The first "forward" is the method's name in the program table.
        replace_bytes(out, b"forward", name, 1)
elif kind == "npz-claim":
    deflated_member("x.npy", npy_header("<f4", (4,)) + b"\0" * 16, claimed_size=4 << 30)
elif kind == "npz-ratio":
    n = (100 << 20) // 4
    deflated_member("x.npy", npy_header("<f4", (n,)) + b"\0" * (4 * n))
elif kind == "npz-overclaim":
    raw = npy_header("<f4", (1, 1, 80)) + b"\0" * 256
    deflated_member("x.npy", raw, claimed_size=len(raw) + 64)
elif kind == "npz-underclaim":
    raw = npy_header("<f4", (1, 1, 64)) + b"\0" * 256
    deflated_member("x.npy", raw + b"\0" * 64, claimed_size=len(raw))
elif kind == "npz-compressed":
    deflated_member("x.npy", npy_header("<f4", (1, 1, 64)) +
                    b"".join(struct.pack("<f", i) for i in range(64)))
elif kind == "npz-steps":
    write_stored_npz([("step999999/x.npy", npy_header("<f4", (1, 1, 64)) + b"\0" * 256)])
elif kind == "deep-blocks":
    depth = int(sys.argv[3])

    def nested(i):
        if i == depth:
            return ""
        return ("%%c%d: (bool)(Scalar) = cond(pred=%%p, name=\"c%d\")\n" % (i, i) +
                " t%d() {\n%s } -> (%%p)\n e%d() {\n } -> (%%p)\n" % (i, nested(i + 1), i))

    open(out, "w").write("main[CoreML8](%p: (bool)(Scalar)) {\n  block0() {\n" + nested(0) +
                         "  } -> (%p)\n}\n")
elif kind == "long-line":
    open(out, "w").write(
        "main[CoreML8](%x: (1,fp32)(Tensor)) {\n  block0() {\n"
        "    %y: (1,fp32)(Tensor) = relu(x=%x, name=\"" + "a" * (70 << 20) + "\")\n"
        "  } -> (%y)\n}\n")
elif kind == "big-literal":
    open(out, "w").write(
        "main[CoreML8](%x: (1,fp32)(Tensor)) {\n  block0() {\n"
        "    %y: (1,fp32)(Tensor) = add(x=%x, y=[" + "1, " * 100000 + "1], name=\"y\")\n"
        "  } -> (%y)\n}\n")
else:
    sys.exit("unknown kind " + kind)
