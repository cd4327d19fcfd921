"""The inputs of cuda_check/fa3/record_fa3.py's cases as bit patterns [B, H, L, d], regenerated
without torch (lattice values of cuda_check/sdpa/record_sdpa.py, rounded like torch's casts)."""
import os
import sys

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdpa"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdpa", "models"))
from prims import encode16  # noqa: E402


def _cases():
    import ast
    src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "record_fa3.py")).read()
    start = src.index("CASES = [")
    end = src.index("]\n", start) + 1
    return {c[0]: c for c in ast.literal_eval(src[start + len("CASES = "):end])}


CASES = _cases()


def inputs(name, dname):
    from sdpa_cases import lattice_tensor
    _, b, hq, hkv, lq, lk, d, causal, kind, seed = CASES[name]
    if kind == "uniform":
        q = np.zeros((b, hq, lq, d), np.float32)
        k = np.zeros((b, hkv, lk, d), np.float32)
        v = lattice_tensor(seed, 3, (b, hkv, lk, d))
    else:
        q = lattice_tensor(seed, 1, (b, hq, lq, d))
        k = lattice_tensor(seed, 2, (b, hkv, lk, d))
        v = lattice_tensor(seed, 3, (b, hkv, lk, d))
        if kind == "sharp":
            q, k = q * np.float32(4), k * np.float32(4)
    if dname == "e4m3":
        return tuple(x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8) for x in (q, k, v))
    return tuple(encode16(x, dname) for x in (q, k, v))
