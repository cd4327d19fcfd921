#!/usr/bin/env python3
"""Replays the FlexAttention recordings (data/hw/h100/serving/flex_h100.h5, made by
cuda_check/serving/record_serving_triton.py) through attnsim's `flex` method (the Python package
of the build) and prints, per case, how many output elements, rows and LSE values equal the
H100's bit for bit. Usage: python3 cuda_check/serving/models/check_flex.py [H5] [--method M]
[--only a,b]; exit 0 when every case it ran matched in full."""
import argparse
import json
import os
import sys

import h5py
import ml_dtypes
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(ROOT, "build", "python"))
import attnsim  # noqa: E402
from serving_cases import FLEX_CASES, flex_inputs  # noqa: E402

DT = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("h5", nargs="?", default=os.path.join(ROOT, "data", "hw", "h100", "serving",
                                                          "flex_h100.h5"))
    ap.add_argument("--method", default="flex")
    ap.add_argument("--only", default=None)
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    ok_all = True
    with h5py.File(args.h5, "r") as f:
        for c in FLEX_CASES:
            if only and c["name"] not in only:
                continue
            if c["name"] not in f:
                print(f"{c['name']}: not recorded")
                continue
            g = f[c["name"]]
            dt = DT[c["dtype"]]
            if "q" in g:
                q, k, v = (g[n][()].view(dt) for n in ("q", "k", "v"))
            else:
                q32, k32, v32, _ = flex_inputs(c)
                q, k, v = q32.astype(dt), k32.astype(dt), v32.astype(dt)
            causal = c["mask"] in ("causal", "window")
            method = args.method
            if method == "flex" and (c["window"] or c["softcap"]):
                method += f":window={c['window']},softcap={c['softcap']:g}"
            try:
                r = attnsim.attention(q, k, v, method=method, causal=causal, sm_scale=c["scale"])
            except Exception as e:  # a case the method refuses
                print(f"{c['name']}: refused: {e}")
                continue
            o_hw = g["o"][()]
            o_sim = np.asarray(r.o).view(np.uint16).reshape(o_hw.shape)
            eq = o_sim == o_hw
            rows = eq.all(axis=-1)
            lse_hw = g["lse"][()]
            lse_sim = np.asarray(r.lse, np.float32).reshape(lse_hw.shape)
            leq = lse_sim.view(np.uint32) == lse_hw.view(np.uint32)
            full = eq.all() and leq.all()
            ok_all &= bool(full)
            print(f"{c['name']}: O {eq.sum()}/{eq.size} elements, {rows.sum()}/{rows.size} rows; "
                  f"LSE {leq.sum()}/{leq.size}" + ("" if full else "  <-- differs"))
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
