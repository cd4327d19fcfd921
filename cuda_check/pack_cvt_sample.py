"""Packs cvt_probe's raw sample outputs into one compressed HDF5 file for data/hw/.

Usage: python3 cuda_check/pack_cvt_sample.py WORKDIR OUT.h5
Datasets: `input` (uint32 FP32 bit patterns) and one per instruction, named by the probe's short
name, stored at the instruction's natural width (uint8 for FP8/int8, uint16 for bf16/fp16, uint32
for FP32 results), gzip + shuffle. Attribute `instruction` holds the PTX spelling.
"""
import json
import os
import sys

import h5py
import numpy as np

work, out = sys.argv[1], sys.argv[2]
summary = json.load(open(os.path.join(work, "cvt_summary.json")))
widths = {"e4m3": np.uint8, "e5m2": np.uint8, "s8": np.uint8, "bf16": np.uint16, "f16": np.uint16}
tmp = out + ".tmp"
with h5py.File(tmp, "w") as f:
    inp = np.fromfile(os.path.join(work, "cvt_sample_inputs.bin"), dtype="<u4")
    f.create_dataset("input", data=inp, compression="gzip", shuffle=True)
    for op in summary["ops"]:
        raw = np.fromfile(os.path.join(work, "cvt_sample_%s.bin" % op["file"]), dtype="<u4")
        dtype = widths.get(op["file"].split("_")[0], np.uint32)
        if dtype != np.uint32:
            assert int(raw.max()) <= np.iinfo(dtype).max, op["file"]
        ds = f.create_dataset(op["file"], data=raw.astype(dtype), compression="gzip", shuffle=True)
        ds.attrs["instruction"] = op["name"]
    for key in ("gpu", "sm", "driver", "runtime"):
        f.attrs[key] = summary[key]
os.replace(tmp, out)
