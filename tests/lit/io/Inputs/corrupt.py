"""Makes a damaged copy of a model package for the bad-input tests.

    corrupt.py KIND SRC_PACKAGE DST_PACKAGE

KIND: sentinel, offset-past-end, dtype, truncate-weights, no-weights,
truncate-model. Only the copy is changed.
"""
import os
import shutil
import struct
import sys

kind, src, dst = sys.argv[1:4]
shutil.rmtree(dst, ignore_errors=True)
shutil.copytree(src, dst)
model_dir = os.path.join(dst, "Data", "com.apple.CoreML")
weights = os.path.join(model_dir, "weights", "weight.bin")
model = os.path.join(model_dir, "model.mlmodel")


def patch(path, offset, fmt, value):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(struct.pack(fmt, value))


if kind == "sentinel":
    patch(weights, 64, "<I", 0)
elif kind == "offset-past-end":
    # The first blob claims more data than the file holds.
    patch(weights, 64 + 8, "<Q", 1 << 40)
elif kind == "dtype":
    # fp16 -> int16: same element width, different type.
    patch(weights, 64 + 4, "<I", 6)
elif kind == "truncate-weights":
    size = os.path.getsize(weights)
    with open(weights, "r+b") as f:
        f.truncate(size - 10)
elif kind == "no-weights":
    os.remove(weights)
elif kind == "truncate-model":
    with open(model, "r+b") as f:
        f.truncate(300)
else:
    sys.exit("unknown kind " + kind)
