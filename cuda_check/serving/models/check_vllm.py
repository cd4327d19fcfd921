#!/usr/bin/env python3
"""Replays the vLLM unified_attention recordings (record_serving_triton.py ->
data/hw/h100/serving/vllm_triton_h100.h5) through the numpy model vllm_triton.py and prints, per
case, the output elements and (token, head) rows equal to the recording bit for bit.
Usage: python3 cuda_check/serving/models/check_vllm.py [H5] [--only a,b] [--regen-fp8] [--probe]
(--regen-fp8: FP8 caches regenerated from the lattice instead of the recorded e4m3 bytes;
--probe: the designed reduce_segments probes of probe_vllm_reduce.py, default H5
data/hw/h100/serving/vllm_probe_h100.h5)."""
import argparse
import json
import os
import sys
import time

import h5py

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

from probe_vllm_reduce import PROBE_CASES, probe_inputs  # noqa: E402
from serving_cases import VLLM_CASES, vllm_inputs  # noqa: E402
from vllm_triton import launch_params, unified_attention  # noqa: E402

DEFAULT = os.path.join(HERE, "..", "..", "..", "data", "hw", "h100", "serving",
                       "vllm_triton_h100.h5")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("h5", nargs="?", default=DEFAULT)
    ap.add_argument("--only", default=None)
    ap.add_argument("--regen-fp8", action="store_true")
    ap.add_argument("--probe", action="store_true")
    a = ap.parse_args()
    cases, make_inputs = (PROBE_CASES, probe_inputs) if a.probe else (VLLM_CASES, vllm_inputs)
    if a.probe and a.h5 == DEFAULT:
        a.h5 = DEFAULT.replace("vllm_triton_h100.h5", "vllm_probe_h100.h5")
    only = set(a.only.split(",")) if a.only else None
    tot_e = tot_ok = 0
    with h5py.File(a.h5, "r") as f:
        for c in cases:
            if only and c["name"] not in only:
                continue
            if c["name"] not in f:
                print(f"{c['name']:44s} not recorded")
                continue
            g = f[c["name"]]
            inp = make_inputs(c)
            store = None if a.regen_fp8 else {k: g[k][()] for k in ("k_e4m3", "v_e4m3") if k in g}
            t = time.time()
            o = unified_attention(c, inp, store)
            ref = g["o"][()]
            eq = o == ref
            rows = eq.all(axis=-1)
            lp = launch_params(c["hq"], c["hkv"], c["d"], max(inp["query_lens"]),
                               len(inp["seq_lens"]), c["window"], 2, 128 // c["hkv"])
            path = f"3D tile {lp['tile']}" if lp["use_3d"] else f"2D tile {lp['tile']}"
            ks = json.loads(g.attrs["kernels"])
            assert lp["use_3d"] == any("reduce_segments" in k for k in ks), (c["name"], ks)
            print(f"{c['name']:44s} {path:10s} BLOCK_Q {lp['block_q']:2d}  elements "
                  f"{int(eq.sum()):7d}/{eq.size:7d} ({100 * eq.mean():6.2f} %)  rows "
                  f"{int(rows.sum()):5d}/{rows.size:5d}  [{time.time() - t:.1f} s]", flush=True)
            tot_e += eq.size
            tot_ok += int(eq.sum())
    print(f"total elements equal: {tot_ok}/{tot_e}")


if __name__ == "__main__":
    main()
