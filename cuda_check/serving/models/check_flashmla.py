#!/usr/bin/env python3
"""Replays the FlashMLA sm90 dense decode recordings (record_flashmla.py ->
data/hw/h100/serving/flashmla_h100.h5) through the numpy model flashmla_sm90.py, with the split
plan the recording holds (tile_scheduler_metadata, num_splits), and prints per case the output
elements and LSE values equal to the recording bit for bit. Exit status 0 only if all match.
Usage: python3 cuda_check/serving/models/check_flashmla.py [H5] [--only a,b]"""
import argparse
import json
import os
import sys
import time

import h5py
import ml_dtypes
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "sdpa", "models"))
sys.path.insert(0, os.path.join(HERE, "..", ".."))

from lattice import lattice_tensor  # noqa: E402
from prims import decode16, encode16  # noqa: E402
from flashmla_sm90 import dense_decode, dense_decode_fp8  # noqa: E402

DEFAULT = os.path.join(HERE, "..", "..", "..", "data", "hw", "h100", "serving",
                       "flashmla_h100.h5")
D = 576


def inputs(c):
    b, s_q, h_q, lens = c["b"], c["s_q"], c["h_q"], c["seq_lens"]
    q = decode16(encode16(lattice_tensor(c["seed"], 0, (b, s_q, h_q, D)), "bf16"), "bf16")
    kv = decode16(encode16(lattice_tensor(c["seed"], 1, (sum(lens), D)), "bf16"), "bf16")
    return q, kv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("h5", nargs="?", default=DEFAULT)
    ap.add_argument("--only", default=None)
    a = ap.parse_args()
    only = set(a.only.split(",")) if a.only else None
    all_ok = True
    with h5py.File(a.h5, "r") as f:
        for name in f:
            if only and name not in only:
                continue
            g = f[name]
            c = {k: json.loads(v) for k, v in g.attrs.items() if isinstance(v, str)}
            t = time.time()
            meta, ns = g["tile_scheduler_metadata"][()], g["num_splits"][()]
            if c["fp8"]:
                q8 = g["q_e4m3"][()].view(ml_dtypes.float8_e4m3fn).astype(np.float64)
                kv8 = g["kv_e4m3"][()].view(ml_dtypes.float8_e4m3fn).astype(np.float64)
                o, lse = dense_decode_fp8(q8, kv8, c["seq_lens"], c["s_q"], c["h_q"], c["scale"],
                                          c["q_scale"], c["k_scale"], meta, ns)
            else:
                q, kv = inputs(c)
                o, lse = dense_decode(q, kv, c["seq_lens"], c["s_q"], c["h_q"], c["scale"],
                                      meta, ns)
            ref_o = g["o"][()]
            ref_lse = g["lse"][()].view(np.float32).reshape(json.loads(g.attrs["lse_shape"]))
            eo = o == ref_o
            el = lse.view(np.uint32) == ref_lse.view(np.uint32)
            ok = bool(eo.all() and el.all())
            all_ok &= ok
            print(f"{name:24s} o {int(eo.sum()):7d}/{eo.size:7d} ({100 * eo.mean():6.2f} %)  "
                  f"lse {int(el.sum()):4d}/{el.size:4d}  splits "
                  f"{np.diff(g['num_splits'][()]).tolist()}  [{time.time() - t:.1f} s]",
                  flush=True)
    print("ALL MATCH" if all_ok else "MISMATCHES")
    sys.exit(0 if all_ok else 1)


if __name__ == "__main__":
    main()
