"""Breaks the reversed JSON index at the end of a .pte's last segment.

The Core ML payload is the file's last segment and ends with its directory
index written backwards ('...{:"sedon"{'); overwriting the final '{' with a
space leaves an index that no longer parses.
"""
import sys

data = bytearray(open(sys.argv[1], "rb").read())
marker = data.rfind(b'[:"sedon"{')
assert marker > 0, "no reversed index found"
data[marker + len(b'[:"sedon"{') - 1] = ord(" ")
open(sys.argv[2], "wb").write(data)
