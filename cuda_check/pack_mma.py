"""Packs mma_probe's raw recordings into one compressed HDF5 file for data/hw/.

Usage: python3 cuda_check/pack_mma.py WORKDIR OUT.h5
One group per recording, named like the probe's file prefix (e.g. `sm90.hmma.f16.f32_k16`), with
datasets a (uint8: M x K encodings per problem, row-major; 16-bit encodings little-endian, 4-bit
packed two per byte, element 0 low), b (likewise for Bt, N x K), c and d (uint32: M x N per
problem; f32 bits, f16 bits or s32), tag (int32 generator id, names in the file attribute
`tags`), and attributes instr, M, N, K, problems, in_bits, acc.
"""
import os
import sys

import h5py
import numpy as np

work, out = sys.argv[1], sys.argv[2]
lines = open(os.path.join(work, "mma_manifest.txt")).read().splitlines()
tags = [l for l in lines if l.startswith("# tags:")][0].split(":", 1)[1].split()
tmp = out + ".tmp"
with h5py.File(tmp, "w") as f:
    f.attrs["tags"] = ",".join(tags)
    for line in lines:
        if line.startswith("#"):
            continue
        kind, instr, M, N, K, P, in_bits, acc, prefix = line.split()
        g = f.create_group(prefix)
        for name, dt in (("a", np.uint8), ("b", np.uint8), ("c", np.uint32), ("d", np.uint32), ("tag", np.int32)):
            data = np.fromfile(os.path.join(work, prefix + "." + name + ".bin"), dtype=dt)
            g.create_dataset(name, data=data, compression="gzip", compression_opts=6, shuffle=True)
        for key, val in (("instr", instr), ("M", int(M)), ("N", int(N)), ("K", int(K)), ("problems", int(P)),
                         ("in_bits", int(in_bits)), ("acc", int(acc))):
            g.attrs[key] = val
os.replace(tmp, out)
