#!/usr/bin/env python3
"""Writes the recorded cases' inputs (FP16, fixed seeds) for turbo_attention.cu, one binary file
per case: int32 [B, Hq, Hkv, N, d, P], int32 bits_k[Hkv], int32 bits_v[Hkv], then fp16 q
[B,Hq,N,d], k [B,Hkv,N,d], v [B,Hkv,N,d] (little endian). Usage: gen_turbo_inputs.py OUTDIR"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
# Case e's input, committed with the recording it feeds (data/hw/h100/turbo/README.md).
SMOLLM2_SLICE = os.path.join(HERE, "..", "..", "data", "hw", "h100", "turbo",
                             "smollm2_layer15_320.npz")


def write(path, B, Hq, Hkv, N, d, P, bk, bv, q, k, v):
    with open(path, "wb") as f:
        np.array([B, Hq, Hkv, N, d, P] + list(bk) + list(bv), "<i4").tofile(f)
        for x in (q, k, v):
            np.ascontiguousarray(x, "<f2").tofile(f)


def rnd(seed, B, Hq, Hkv, N, d, sigma=1.0):
    r = np.random.default_rng(seed)
    return (r.standard_normal((B, Hq, N, d)) * sigma, r.standard_normal((B, Hkv, N, d)) * sigma,
            r.standard_normal((B, Hkv, N, d)) * sigma)


def main(out):
    os.makedirs(out, exist_ok=True)
    q, k, v = rnd(101, 1, 4, 2, 300, 64)
    write(f"{out}/a_gqa_d64.bin", 1, 4, 2, 300, 64, 130, [4, 2], [4, 2], q, k, v)
    q, k, v = rnd(102, 2, 2, 2, 200, 128)
    write(f"{out}/b_b2_d128.bin", 2, 2, 2, 200, 128, 64, [4, 4], [4, 4], q, k, v)
    q, k, v = rnd(103, 1, 3, 1, 257, 128)
    write(f"{out}/c_mqa_2bit.bin", 1, 3, 1, 257, 128, 100, [2], [2], q, k, v)
    # Outliers: 3 channels x10, tokens after P with huge values (the buffer clamps), and an
    # all-zero K block inside the prompt (stage-1 scale 0).
    q, k, v = rnd(104, 1, 2, 2, 280, 64)
    for x in (q, k, v):
        x[..., [5, 17, 40]] *= 10
    k[:, :, 64:128, :] = 0
    P = 150
    k[:, 0, P + 3, 7] = 3000.0
    k[:, 1, P + 20:P + 24, 11] = -2500.0
    v[:, 0, P + 70, :] = 900.0
    write(f"{out}/d_outliers.bin", 1, 2, 2, 280, 64, P, [4, 2], [2, 4], q, k, v)
    z = np.load(SMOLLM2_SLICE)
    write(f"{out}/e_smollm2_l15.bin", 1, 9, 3, 320, 64, 192, [4, 2, 4], [4, 2, 4],
          z["q"], z["k"], z["v"])


if __name__ == "__main__":
    main(sys.argv[1])
