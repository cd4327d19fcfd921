#!/usr/bin/env python3
"""Packs what cuda_check/sage/int4_attention.cu wrote (outputs.bin: every case's 16-bit outputs
[b][h][t][d] in turn) into data/hw/h100/sage/int4_h100.h5: per case, the FNV-1a digest of every
output row (o_rows) and, for the cases cases.txt marks full, the outputs themselves (o).
Usage: python3 pack_int4.py cases.txt outputs.bin operands.bin int4_h100.h5 [attr=value ...]"""
import os
import sys

import h5py
import numpy as np

from compact_sage import fnv_rows


def main(cases_txt, outputs, operands, dst, *attrs):
    o = np.fromfile(outputs, dtype=np.uint16)
    pos = 0
    with h5py.File(dst + ".tmp", "w") as w:
        for a in attrs:
            k, v = a.split("=", 1)
            w.attrs[k] = v
        # The digest of the operands the kernel read (the check regenerates and compares them).
        ops = np.fromfile(operands, dtype=np.uint8)
        w.attrs["operands_fnv1a"] = int(fnv_rows(ops.reshape(1, -1))[0])
        w.attrs["operands_bytes"] = ops.size
        for line in open(cases_txt):
            name, b, h, t, d, full = line.split()
            b, h, t, d = int(b), int(h), int(t), int(d)
            n = b * h * t * d
            x = o[pos:pos + n].reshape(b, h, t, d)
            pos += n
            g = w.create_group(name)
            g.create_dataset("o_rows", data=fnv_rows(x).ravel())
            if full == "1":
                g.create_dataset("o", data=x)
        assert pos == o.size, (pos, o.size)
    os.replace(dst + ".tmp", dst)


if __name__ == "__main__":
    main(*sys.argv[1:])
