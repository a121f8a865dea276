"""Scratch directories for the benchmarks' models, removed when the process exits.

A benchmark given no directory of its own builds its models (hundreds of MB)
in one of these; pass --workdir or --out to keep them.
"""

import atexit
import shutil
import tempfile


def scratch_dir(prefix):
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path
