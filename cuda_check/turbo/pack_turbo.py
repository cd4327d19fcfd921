#!/usr/bin/env python3
"""Packs the inputs (CASE.bin, gen_turbo_inputs.py) and what `turbo_attention record` wrote
(CASE.out) into one HDF5 file read by tests/hw/turbo_h100_test.cpp. Per case group CASE:
  attrs  batch hq hkv n d prefill
  bits_k, bits_v        int32 [hkv]
  q, k, v               uint16 FP16 bit patterns [B,Hq,N,d] / [B,Hkv,N,d]
  o                     float32 [B,Hq,N,d] (rows < prefill: the prefill kernel; the rest: decode)
  cache/BH/...          per (batch, kv head) BH = b*Hkv + h after the last step: k_code v_code
                        uint8 [blocks*64][d], k_s k_z v_s v_z int8 [blocks][d], k_scale v_scale
                        float32 [blocks], buf_k buf_v int8 [buffer tokens][d], su_k su_v float32
Usage: pack_turbo.py DIR OUT.h5 [attr=value ...]"""
import glob
import os
import sys

import h5py
import numpy as np


def main(src, out, *attrs):
    kw = dict(compression="gzip", compression_opts=9, shuffle=True)
    with h5py.File(out, "w") as w:
        for a in attrs:
            k, v = a.split("=", 1)
            w.attrs[k] = v
        for fin in sorted(glob.glob(os.path.join(src, "*.bin"))):
            name = os.path.basename(fin)[:-4]
            raw = open(fin, "rb").read()
            B, Hq, Hkv, N, d, P = np.frombuffer(raw, "<i4", 6)
            bk = np.frombuffer(raw, "<i4", Hkv, 24)
            bv = np.frombuffer(raw, "<i4", Hkv, 24 + 4 * Hkv)
            off = 24 + 8 * Hkv
            nq, nk = B * Hq * N * d, B * Hkv * N * d
            q = np.frombuffer(raw, "<u2", nq, off).reshape(B, Hq, N, d)
            k = np.frombuffer(raw, "<u2", nk, off + 2 * nq).reshape(B, Hkv, N, d)
            v = np.frombuffer(raw, "<u2", nk, off + 2 * nq + 2 * nk).reshape(B, Hkv, N, d)
            g = w.create_group(name)
            for key, val in dict(batch=B, hq=Hq, hkv=Hkv, n=N, d=d, prefill=P).items():
                g.attrs[key] = int(val)
            g["bits_k"] = bk.astype(np.int32)
            g["bits_v"] = bv.astype(np.int32)
            for key, val in (("q", q), ("k", k), ("v", v)):
                g.create_dataset(key, data=val, **kw)
            res = open(os.path.join(src, name + ".out"), "rb").read()
            g.create_dataset("o", data=np.frombuffer(res, "<f4", nq).reshape(B, Hq, N, d), **kw)
            pos = 4 * nq
            for bh in range(B * Hkv):
                nblk, nbuf = np.frombuffer(res, "<i4", 2, pos)
                pos += 8
                c = g.create_group(f"cache/{bh}")

                def take(key, dt, count, shape):
                    nonlocal pos
                    arr = np.frombuffer(res, dt, count, pos).reshape(shape)
                    pos += arr.nbytes
                    c.create_dataset(key, data=arr, **kw)

                take("k_code", "u1", nblk * 64 * d, (nblk * 64, d))
                take("v_code", "u1", nblk * 64 * d, (nblk * 64, d))
                for key in ("k_s", "k_z", "v_s", "v_z"):
                    take(key, "i1", nblk * d, (nblk, d))
                take("k_scale", "<f4", nblk, (nblk,))
                take("v_scale", "<f4", nblk, (nblk,))
                take("buf_k", "i1", nbuf * d, (nbuf, d))
                take("buf_v", "i1", nbuf * d, (nbuf, d))
                take("su_k", "<f4", 1, (1,))
                take("su_v", "<f4", 1, (1,))
            assert pos == len(res), (name, pos, len(res))
            print(f"packed {name}: B={B} Hq={Hq} Hkv={Hkv} N={N} d={d} P={P} bits_k={list(bk)} bits_v={list(bv)}")
    print(f"{out}: {os.path.getsize(out)} bytes")


if __name__ == "__main__":
    main(*sys.argv[1:])
