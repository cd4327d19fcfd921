#!/usr/bin/env python3
"""Packs the raw output of cuda_check/ftz_probe.cu into data/hw/h100/ftz/ftz_h100.h5.

Usage: python3 pack_ftz.py PROBE_OUTDIR OUT.h5 [ENV.txt]
Datasets: digests [6][28] int64 (the uint64 chunk digests of numerics/digest.hpp, bit for bit, per
operation in tests/hw/ftz_cases.hpp kOpNames order and per 2^20 cases), sample_index [n] uint32
(the case indices of the sample), sample_out [n][6] uint32 (every operation's output bits).
"""
import sys

import h5py
import numpy as np

OPS = ["mul.rn.f32", "mul.rn.ftz.f32", "fma.rn.f32", "fma.rn.ftz.f32", "add.rn.f32", "add.rn.ftz.f32"]


def main():
    src, out = sys.argv[1], sys.argv[2]
    dig = np.fromfile(f"{src}/ftz_digests.bin", np.uint64).reshape(len(OPS), -1)
    idx = np.fromfile(f"{src}/ftz_sample_index.bin", np.uint32)
    smp = np.fromfile(f"{src}/ftz_sample_out.bin", np.uint32).reshape(-1, len(OPS))
    order = np.argsort(idx, kind="stable")  # the GPU wrote the sample in atomic order
    with h5py.File(out, "w") as f:
        f.create_dataset("digests", data=dig.view(np.int64))
        f.create_dataset("sample_index", data=idx[order], compression="gzip", shuffle=True)
        f.create_dataset("sample_out", data=smp[order], compression="gzip", shuffle=True)
        f.attrs["ops"] = ",".join(OPS)
        f.attrs["cases"] = int(dig.shape[1]) << 20
        if len(sys.argv) > 3:
            f.attrs["env"] = open(sys.argv[3]).read()


if __name__ == "__main__":
    main()
