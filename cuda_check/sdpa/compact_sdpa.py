#!/usr/bin/env python3
"""Reduces the full SDPA / FA3 recordings (record_sdpa.py, cuda_check/fa3/record_fa3.py) to what
data/hw/h100/{sdpa,fa3}/ keeps: per output row the FNV-1a of its 16-bit patterns for every case,
backend and split setting, every LSE, the kernel names and the environment; in full only the
designed probes' outputs and inputs and the math backend's score/softmax matrices of the small
cases.
Usage: compact_sdpa.py sdpa OUT.h5 sdpa_fp16.h5 sdpa_bf16.h5
       compact_sdpa.py fa3 OUT.h5 fa3.h5
"""
import sys

import h5py
import numpy as np

DESIGNED = ("uniform", "cancel", "exp", "onehot")  # uniform: q = k = 0, V the lattice (not stored)
MATH_FULL = {"r77_d64", "dec500_gqa_d128"}


def copy_attrs(src, dst):
    for k, v in src.attrs.items():
        dst.attrs[k] = v


def sdpa(out, files):
    with h5py.File(out, "w") as w:
        for path in files:
            dname = "fp16" if "fp16" in path else "bf16"
            with h5py.File(path, "r") as f:
                if "env" not in w.attrs:
                    copy_attrs(f, w)
                    w.attrs["env"] = "see attributes"
                for case in f:
                    g = f[case]
                    o = w.create_group(f"{case}/{dname}")
                    copy_attrs(g, o)
                    for name, ds in g.items():
                        keep = (name.endswith("_rows") or name.startswith("lse_")
                                or (name in ("q", "k", "v") and g.attrs["kind"] != "uniform")
                                or (name.startswith("o_") and g.attrs["kind"] in DESIGNED)
                                or (name.startswith("math_") and case in MATH_FULL))
                        if keep:
                            o.create_dataset(name, data=ds[()], compression="gzip", shuffle=True,
                                             compression_opts=9)


def fa3(out, files):
    from sdpa_cases import fnv_rows  # noqa: F401  (rows already stored by the recorder)
    with h5py.File(out, "w") as w, h5py.File(files[0], "r") as f:
        copy_attrs(f, w)

        def visit(name, obj):
            if isinstance(obj, h5py.Group) and "o" in obj:
                o = w.create_group(name)
                copy_attrs(obj, o)
                for k in obj:
                    if k == "o" and obj.attrs["kind"] != "uniform":
                        continue
                    o.create_dataset(k, data=obj[k][()], compression="gzip", shuffle=True,
                                     compression_opts=9)
            elif isinstance(obj, h5py.Group) and "error" in obj.attrs:
                copy_attrs(obj, w.create_group(name))
        f.visititems(visit)


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    {"sdpa": sdpa, "fa3": fa3}[sys.argv[1]](sys.argv[2], sys.argv[3:])
