#!/usr/bin/env python3
"""Packs what `amla_decode record DIR` wrote (DIR/amla_record.bin, DIR/amla_cases.txt) into the
recording data/hw/h100/amla/amla_h100.h5 that tests/hw/amla_h100_test.cpp reads.

Per case (group CASE, attributes batch, g, s, input_fnv1a) and kernel (CASE/amla, CASE/base):
  out       uint16 [B*G][512]  the bf16 output bits
  rows      uint32 [B*G][4]    FP32 bits of m, l, n, S16 per row (base: n = 0, S16 = 1)
  raw       uint32 [B*G][512]  the FP32 O before the epilogue (cases listed in `--raw-full`)
  raw_rows  uint32 [B*G]       else FNV-1a of each row of raw O, every NaN as 0x7FFFFFFF

Usage: python3 pack_amla.py DIR OUT.h5 --raw-full NAME,NAME,... [attr=value ...]"""
import os
import sys

import h5py
import numpy as np

DV = 512


def fnv_rows_u32(x):
    """FNV-1a (32-bit) of each row's little-endian bytes (tests/hw/amla_cases.hpp amla_fnv1a)."""
    b = np.ascontiguousarray(x.astype("<u4")).view(np.uint8).reshape(x.shape[0], -1)
    h = np.full(x.shape[0], 0x811C9DC5, dtype=np.uint64)
    for k in range(b.shape[1]):
        h = ((h ^ b[:, k]) * 0x01000193) & 0xFFFFFFFF
    return h.astype(np.uint32)


def canonical(x):
    nan = ((x & 0x7F800000) == 0x7F800000) & ((x & 0x007FFFFF) != 0)
    return np.where(nan, np.uint32(0x7FFFFFFF), x)


def main(src, dst, *rest):
    raw_full, attrs = set(), []
    i = 0
    while i < len(rest):
        if rest[i] == "--raw-full":
            raw_full = set(rest[i + 1].split(","))
            i += 2
        else:
            attrs.append(rest[i])
            i += 1
    blob = open(os.path.join(src, "amla_record.bin"), "rb").read()
    pos = 0

    def take(dtype, n):
        nonlocal pos
        a = np.frombuffer(blob, dtype=dtype, count=n, offset=pos)
        pos += a.nbytes
        return a

    kw = dict(compression="gzip", compression_opts=9, shuffle=True)
    with h5py.File(dst + ".tmp", "w") as w:
        for a in attrs:
            k, v = a.split("=", 1)
            w.attrs[k] = v
        for line in open(os.path.join(src, "amla_cases.txt")):
            name, b, g, s, digest = line.split()
            rows = int(b) * int(g)
            grp = w.create_group(name)
            grp.attrs["batch"], grp.attrs["g"], grp.attrs["s"] = int(b), int(g), int(s)
            grp.attrs["input_fnv1a"] = int(digest)
            for kernel in ("amla", "base"):
                out = take("<u2", rows * DV).reshape(rows, DV)
                raw = take("<u4", rows * DV).reshape(rows, DV)
                st = take("<u4", rows * 4).reshape(rows, 4)
                k = grp.create_group(kernel)
                k.create_dataset("out", data=out, **kw)
                k.create_dataset("rows", data=st, **kw)
                if name in raw_full:
                    k.create_dataset("raw", data=raw, **kw)
                else:
                    k.create_dataset("raw_rows", data=fnv_rows_u32(canonical(raw)), **kw)
        assert pos == len(blob), (pos, len(blob))
    os.replace(dst + ".tmp", dst)


if __name__ == "__main__":
    main(*sys.argv[1:])
