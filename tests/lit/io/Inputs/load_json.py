"""Each file loads as JSON, holds no raw control character, and has a string
that names the op (or function) of control-names.mil (control-function.mil)
with its control characters intact."""
import json
import sys

NAME = "o\x1b[31m\x07\x7f\x9b2J"


def strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from strings(v)


for path in sys.argv[1:]:
    raw = open(path, "rb").read()
    for b in (b"\x1b", b"\x07", b"\x7f", b"\xc2\x9b"):
        assert b not in raw, (path, b)
    doc = json.loads(raw.decode("utf-8"))
    assert any(NAME in s for s in strings(doc)), path
