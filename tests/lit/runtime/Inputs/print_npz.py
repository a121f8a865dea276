"""Prints every array of an .npz as `name dtype shape values`, one per line, for FileCheck."""
import sys

import numpy as np

with np.load(sys.argv[1]) as data:
    for name in data.files:
        a = data[name]
        values = [round(float(v), 4) if a.dtype.kind == "f" else v for v in a.reshape(-1).tolist()]
        print(name, a.dtype, tuple(a.shape), values)
