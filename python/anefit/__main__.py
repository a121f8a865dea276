"""``python -m anefit VERB ...``: the ``anefit`` command line, in this process."""

import sys

from ._core import main as _main


def main() -> int:
    """Runs the command line with ``sys.argv`` and returns its exit code."""
    sys.stdout.flush()
    sys.stderr.flush()
    return _main(["anefit", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
