#!/usr/bin/env python3
"""Checks that the libraries under src/ and their unit tests depend only downward.

The layers are the table under "## Layers" in docs/architecture.md (one
place). A file under src/<library>/ may include headers of libraries at a
lower layer only (and its own); a library's CMakeLists.txt may link
anefit_<library> targets of a lower layer only. The unit tests of a library
(tests/unit/<library>/) may include headers of its layer and below (a test
of the checker loads its fixtures with io, beside it), and their binary links
only those libraries: tests/CMakeLists.txt asks this script which
(--test-libraries). Prints one line per violation and exits 1 when there is
any; 0 otherwise.

    python3 scripts/check_layers.py [REPO_ROOT]
    python3 scripts/check_layers.py --test-libraries AREA [REPO_ROOT]
"""

import os
import re
import sys


def layers(root):
    """{library: layer} from the Layers table of docs/architecture.md."""
    path = os.path.join(root, "docs", "architecture.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    table = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    out = {}
    for m in re.finditer(r"^\| (\d+) \| `([a-z_]+)` \|", table, re.M):
        out[m.group(2)] = int(m.group(1))
    if not out:
        sys.exit(f"{path}: expected a Layers table of '| N | `library` | ... |' rows, found none")
    return out


def includes(path):
    """(line number, library) of each `#include "<library>/..."` of a file."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f.read().splitlines(), 1):
            m = re.match(r'\s*#\s*include\s+"([a-z_]+)/', line)
            if m:
                yield n, m.group(1)


def test_libraries(layer, area):
    """The anefit_ targets the unit tests of library `area` link: every library
    of its layer and below; the ExecuTorch backend (a shared library built only
    beside ExecuTorch's runtime) only for its own tests."""
    return [f"anefit_{lib}" for lib in sorted(layer, key=lambda l: (layer[l], l))
            if layer[lib] <= layer[area] and (lib != "executorch" or area == "executorch")]


def check_tests(root, layer, problems):
    """tests/unit/<library>/: one folder per library, each file including
    libraries of its layer and below."""
    unit = os.path.join(root, "tests", "unit")
    if not os.path.isdir(unit):
        return
    for area in sorted(os.listdir(unit)):
        if not os.path.isdir(os.path.join(unit, area)):
            continue
        if area not in layer:
            problems.append(f"tests/unit/{area}: not a library of the Layers table of "
                            "docs/architecture.md (the unit tests of src/<library> are "
                            "tests/unit/<library>)")
            continue
        for dirpath, _, files in os.walk(os.path.join(unit, area)):
            for name in sorted(files):
                if not name.endswith((".h", ".cpp")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                for n, dep in includes(path):
                    if dep in layer and layer[dep] > layer[area]:
                        problems.append(
                            f"{rel}:{n}: a test of {area} (layer {layer[area]}) includes {dep} "
                            f"(layer {layer[dep]}); expected its layer or a lower one")


def main():
    args = sys.argv[1:]
    area = None
    if args[:1] == ["--test-libraries"]:
        if len(args) < 2:
            sys.exit("check_layers: --test-libraries needs a library name")
        area, args = args[1], args[2:]
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), ".."))
    layer = layers(root)
    if area is not None:
        if area not in layer:
            sys.exit(f"check_layers: expected a library of the Layers table of "
                     f"docs/architecture.md, found '{area}'")
        print(";".join(test_libraries(layer, area)))
        return 0
    src = os.path.join(root, "src")
    problems = []
    for lib in sorted(os.listdir(src)):
        if not os.path.isdir(os.path.join(src, lib)):
            continue
        if lib not in layer:
            problems.append(f"src/{lib}: not in the Layers table of docs/architecture.md")
            continue
        for dirpath, _, files in os.walk(os.path.join(src, lib)):
            for name in sorted(files):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    lines = f.read().splitlines()
                if name == "CMakeLists.txt":
                    for n, line in enumerate(lines, 1):
                        if line.lstrip().startswith("#"):
                            continue
                        for dep in re.findall(r"\banefit_([a-z_]+)\b", line):
                            if dep in layer and dep != lib and layer[dep] >= layer[lib]:
                                problems.append(
                                    f"{rel}:{n}: anefit_{lib} (layer {layer[lib]}) links "
                                    f"anefit_{dep} (layer {layer[dep]}); expected a lower layer")
                    continue
                if not name.endswith((".h", ".cpp", ".def")):
                    continue
                for n, dep in includes(path):
                    if dep in layer and dep != lib and layer[dep] >= layer[lib]:
                        problems.append(
                            f"{rel}:{n}: {lib} (layer {layer[lib]}) includes {dep} "
                            f"(layer {layer[dep]}); expected a lower layer")
    check_tests(root, layer, problems)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} dependencies reach up or sideways (docs/architecture.md, Layers)")
        return 1
    print(f"layers: {len(layer)} libraries and their unit tests, every include and link points "
          "down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
