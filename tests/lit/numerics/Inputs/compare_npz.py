"""compare_npz.py ACTUAL.npz EXPECTED.npz NAME: prints how far ACTUAL's array
NAME is from EXPECTED's (max abs diff, rows whose argmax agrees), or that it
is all zero."""
import sys

import numpy as np

actual = np.load(sys.argv[1])[sys.argv[3]].astype(np.float64)
expected = np.load(sys.argv[2])[sys.argv[3]].astype(np.float64)
if not np.any(actual):
    print(f"{sys.argv[3]}: all zero")
else:
    a = actual.reshape(-1, actual.shape[-1])
    e = expected.reshape(-1, expected.shape[-1])
    same = int(np.sum(a.argmax(-1) == e.argmax(-1)))
    print(f"{sys.argv[3]}: max abs diff {np.abs(a - e).max():.4f}, rows {same}/{len(a)} same argmax")
