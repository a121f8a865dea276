"""Writes a weight file (storage version 2) holding one fp16 blob of SIZE
bytes at metadata offset 64, its data a hole: the file takes no disk space.

    sparse_weight.py OUT SIZE
"""
import struct
import sys

out, size = sys.argv[1], int(sys.argv[2])
with open(out, "wb") as f:
    f.write(struct.pack("<II", 1, 2).ljust(64, b"\0"))
    # sentinel, dtype code (1: fp16), size in bytes, data offset, padding bits
    f.write(struct.pack("<IIQQQ", 0xDEADBEEF, 1, size, 128, 0).ljust(64, b"\0"))
    f.truncate(128 + size)
