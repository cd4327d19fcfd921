#!/usr/bin/env python3
"""Records the public SageAttention entry points with their non-default options on this GPU, in
compact form (per-row FNV-1a digests of the 16-bit outputs), for tests/hw/sage_h100_test.cpp:
  sm80_fp16_smoothv   sageattn_qk_int8_pv_fp16_cuda(pv_accum_dtype="fp16", smooth_v=True)
                      (quant.py sub_mean; the epilogue's __hadd2 of the mean)
  sm89_fp32_smoothv   sageattn_qk_int8_pv_fp8_cuda(pv_accum_dtype="fp32", smooth_v=True)
                      (MeanScaleKernel<64, true>: the mean in the kernel's order, fuse_v_mean)
  sm80_fp32_perwarp   sageattn_qk_int8_pv_fp16_cuda(qk_quant_gran="per_warp")
  sm89_perwarp        sageattn_qk_int8_pv_fp8_cuda(qk_quant_gran="per_warp")
  sm90_perwarp        sageattn_qk_int8_pv_fp8_cuda_sm90(qk_quant_gran="per_warp")
                      (per_warp: the CUDA QuantInt8Kernel instead of the Triton per-thread one)
for the cases of cases.json named on the command line, in fp16 and bf16. Like record_sage.py it
imports an installed `sageattention` package and neither ships nor builds it.
Usage: python3 record_sage_options.py --manifest cases.json --cases a,b,... --out options.h5
"""
import argparse
import json
import os

import h5py
import numpy as np
import torch

import sageattention as sa
from record_sage import DTYPES, bits16, load_case
from compact_sage import fnv_rows

PATHS = [
    ("sm80_fp16_smoothv", sa.sageattn_qk_int8_pv_fp16_cuda, {"pv_accum_dtype": "fp16", "smooth_v": True}),
    ("sm89_fp32_smoothv", sa.sageattn_qk_int8_pv_fp8_cuda, {"pv_accum_dtype": "fp32", "smooth_v": True}),
    ("sm80_fp32_perwarp", sa.sageattn_qk_int8_pv_fp16_cuda, {"qk_quant_gran": "per_warp"}),
    ("sm89_perwarp", sa.sageattn_qk_int8_pv_fp8_cuda, {"qk_quant_gran": "per_warp"}),
    ("sm90_perwarp", sa.sageattn_qk_int8_pv_fp8_cuda_sm90, {"qk_quant_gran": "per_warp"}),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    want = a.cases.split(",")
    cases = [c for c in json.load(open(a.manifest))["cases"] if c["name"] in want]
    with h5py.File(a.out + ".tmp", "w") as w:
        w.attrs["gpu"] = torch.cuda.get_device_name(0)
        w.attrs["torch"] = str(torch.__version__)
        w.attrs["paths"] = ",".join(p for p, _, _ in PATHS)
        for case in cases:
            q32, k32, v32 = load_case(case)
            for dname, dtype in DTYPES.items():
                g = w.create_group(f"{case['name']}/{dname}")
                q, k, v = (torch.from_numpy(x).cuda().to(dtype) for x in (q32, k32, v32))
                rows = []
                for pname, fn, kw in PATHS:
                    try:
                        o = fn(q, k, v, tensor_layout="HND", is_causal=bool(case["causal"]), **kw)
                        torch.cuda.synchronize()
                        rows.append(fnv_rows(bits16(o)).ravel())
                    except Exception as e:
                        g.attrs[f"error_{pname}"] = f"{type(e).__name__}: {e}"[:500]
                        rows.append(np.zeros(q.shape[0] * q.shape[1] * q.shape[2], np.uint32))
                g.create_dataset("o_rows", data=np.stack(rows))
            print("recorded", case["name"], flush=True)
    os.replace(a.out + ".tmp", a.out)


if __name__ == "__main__":
    main()
