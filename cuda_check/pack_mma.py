"""Packs mma_probe's raw recordings into compressed HDF5 files for data/hw/.

Usage: python3 cuda_check/pack_mma.py WORKDIR OUT.h5 [OUT_SPECIAL.h5 [OUT_IGMMA.h5]]
                                      [--compare REF.h5] [--compare-special REF_SPECIAL.h5]
                                      [--out-f16acc OUT_F16ACC.h5]
One group per recording, named like the probe's file prefix (e.g. `sm90.hmma.f16.f32_k16`,
`sm90.hmma.f16.f32_k16_special`), with datasets a (uint8: M x K encodings per problem, row-major;
16-bit encodings little-endian, 4-bit packed two per byte, element 0 low), b (likewise for Bt,
N x K), c and d (uint32: M x N per problem; f32 bits, f16 bits or s32), tag (int32 generator id,
names in the file attribute `tags`), and attributes instr, M, N, K, problems, in_bits, acc.
Groups the manifest marks `special` (special operands, HGMMA) go to OUT_SPECIAL.h5 when given,
groups marked `igmma` (INT8 wgmma) to OUT_IGMMA.h5 when given (else with the special ones),
groups marked `f16acc` (FP8 wgmma with f16 accumulation, and the two-level "promoted" chains) to
OUT_F16ACC.h5 when given (else to OUT.h5). A promoted group (manifest field 11 > 0) has the
attribute promote (elements per chunk; C and D are then FP32 bits, acc 0); every group has it (0:
plain chain).
--compare REF.h5: for every group of OUT.h5 that REF.h5 also has, report whether a, b, c, d and tag
are identical (a re-recording of data/hw/h100/mma_h100.h5 must reproduce it bit for bit);
--compare-special REF_SPECIAL.h5 does the same for the groups of OUT_SPECIAL.h5.
"""
import os
import sys

import h5py
import numpy as np

args = sys.argv[1:]


def option(name):
    if name not in args:
        return None
    i = args.index(name)
    val = args[i + 1]
    del args[i : i + 2]
    return val


ref = option("--compare")
ref_special = option("--compare-special")
out_f16acc = option("--out-f16acc")
work, out = args[0], args[1]
out_special = args[2] if len(args) > 2 else None
out_igmma = args[3] if len(args) > 3 else None
lines = open(os.path.join(work, "mma_manifest.txt")).read().splitlines()
tags = [l for l in lines if l.startswith("# tags:")][0].split(":", 1)[1].split()
files = {}


def target(which):
    path = out
    if which == "f16acc" and out_f16acc:
        path = out_f16acc
    elif which == "igmma" and out_igmma:
        path = out_igmma
    elif which in ("special", "igmma") and out_special:
        path = out_special
    if path not in files:
        f = h5py.File(path + ".tmp", "w")
        f.attrs["tags"] = ",".join(tags)
        files[path] = f
    return files[path]


for line in lines:
    if line.startswith("#"):
        continue
    fields = line.split()
    kind, instr, M, N, K, P, in_bits, acc, prefix = fields[:9]
    which = fields[9] if len(fields) > 9 else "main"
    promote = int(fields[10]) if len(fields) > 10 else 0
    g = target(which).create_group(prefix)
    for name, dt in (("a", np.uint8), ("b", np.uint8), ("c", np.uint32), ("d", np.uint32), ("tag", np.int32)):
        data = np.fromfile(os.path.join(work, prefix + "." + name + ".bin"), dtype=dt)
        g.create_dataset(name, data=data, compression="gzip", compression_opts=9, shuffle=True)
    for key, val in (("instr", instr), ("M", int(M)), ("N", int(N)), ("K", int(K)), ("problems", int(P)),
                     ("in_bits", int(in_bits)), ("acc", int(acc)), ("promote", promote)):
        g.attrs[key] = val
for path, f in files.items():
    f.close()
    os.replace(path + ".tmp", path)
    print(f"{path}: {os.path.getsize(path)} bytes")


def compare(path, reference):
    with h5py.File(path) as new, h5py.File(reference) as old:
        same = 0
        for name in new:
            if name not in old:
                continue
            eq = all(np.array_equal(new[name][k][()], old[name][k][()]) for k in ("a", "b", "c", "d", "tag"))
            same += eq
            print(f"compare {name}: {'identical' if eq else 'DIFFERENT'} to {reference}")
        print(f"compare: {same} of {sum(1 for n in new if n in old)} shared groups identical to {reference}")


if ref and os.path.exists(out):
    compare(out, ref)
if ref_special and out_special and os.path.exists(out_special):
    compare(out_special, ref_special)
