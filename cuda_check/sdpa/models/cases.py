"""Loads the SDPA recordings (data/hw/h100/sdpa/ full recordings, or the compacted files) and the
inputs of each case, regenerated exactly as cuda_check/sdpa/record_sdpa.py made them."""
import json
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import sdpa_cases as rs  # noqa: E402
from prims import decode16, encode16  # noqa: E402

CASES = {c["name"]: c for c in rs.CASES}


def case_inputs(name, dname, group=None):
    """q, k, v as 16-bit patterns [B, H, L, d] (stored inputs when the recording has them)."""
    c = CASES[name]
    if group is not None and "q" in group:
        return group["q"][()], group["k"][()], group["v"][()]
    q32, k32, v32, _ = rs.inputs(c, dname)
    return encode16(q32, dname), encode16(k32, dname), encode16(v32, dname)


def recorded(path, name):
    f = h5py.File(path, "r")
    return f[name]


def full_heads(g):
    full = json.loads(g.attrs["full"])
    c = CASES[g.name.strip("/")]
    if full == "all":
        return [(b, h) for b in range(c["b"]) for h in range(c["hq"])]
    return [tuple(x) for x in full]
