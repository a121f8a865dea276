#!/usr/bin/env python3
"""Hostile variants of an observations file, for the readers' limits.

    hostile_json.py deep OUT             an object whose first key holds
                                         50,000 nested arrays, a key after it
    hostile_json.py wide OBS OUT KEYS    OBS with KEYS keys in one object
                                         (the host's)
    hostile_json.py edit OBS OUT EXPR    OBS with the Python statement EXPR
                                         applied to it as `o`
"""
import json
import sys


def main(argv):
    mode = argv[0]
    if mode == "deep":
        depth = 50000
        text = '{"deep": ' + "[" * depth + "]" * depth + ', "schema": "anefit.probe-observations/1"}'
        open(argv[1], "w").write(text)
        return
    with open(argv[1], encoding="utf-8") as f:
        o = json.load(f)
    if mode == "wide":
        o["host"] = {"k%07d" % i: "v" for i in range(int(argv[3]))}
    elif mode == "edit":
        exec(argv[3], {"o": o})
    else:
        raise SystemExit("hostile_json.py: unknown mode " + mode)
    with open(argv[2], "w", encoding="utf-8") as f:
        json.dump(o, f)


if __name__ == "__main__":
    main(sys.argv[1:])
