#!/usr/bin/env python3
"""Checks that the libraries under src/ depend only downward.

The layers are the table under "## Layers" in docs/architecture.md (one
place). A file under src/<library>/ may include headers of libraries at a
lower layer only (and its own); a library's CMakeLists.txt may link
anefit_<library> targets of a lower layer only. Prints one line per
violation and exits 1 when there is any; 0 otherwise.

    python3 scripts/check_layers.py [REPO_ROOT]
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


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    layer = layers(root)
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
                for n, line in enumerate(lines, 1):
                    m = re.match(r'\s*#\s*include\s+"([a-z_]+)/', line)
                    if not m:
                        continue
                    dep = m.group(1)
                    if dep in layer and dep != lib and layer[dep] >= layer[lib]:
                        problems.append(
                            f"{rel}:{n}: {lib} (layer {layer[lib]}) includes {dep} "
                            f"(layer {layer[dep]}); expected a lower layer")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} dependencies reach up or sideways (docs/architecture.md, Layers)")
        return 1
    print(f"layers: {len(layer)} libraries, every include and link points down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
