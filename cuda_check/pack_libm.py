"""Packs libm_probe's recording (cuda_check/run_libm.sh OUTDIR) into one HDF5 file for data/hw/.

Usage: python3 cuda_check/pack_libm.py OUTDIR OUT.h5
Datasets: `input` (65,536 uint32 FP32 bit patterns, the probe's adversarial sample); one group per
build (`plain`: nvcc -O3, `ftz`: -ftz=true, `fast`: --use_fast_math) holding `expf`, `logf`,
`__expf`, `__logf` (uint32 result bit patterns on `input`); `digests` (12 x 256 uint64 bit patterns
stored as int64, rows in
the order plain, ftz, fast x expf, logf, __expf, __logf; entry c is the sum mod 2^64 of
splitmix64(x << 32 | out(x)) over x in [c * 2^24, (c + 1) * 2^24), over the GPU's outputs for all
2^32 inputs). gzip level 9 + shuffle. Root attributes give the GPU, driver, CUDA and commit from
the probe's log.
"""
import os
import re
import sys

import h5py
import numpy as np

run, out = sys.argv[1], sys.argv[2]
builds = {"plain": "-O3", "ftz": "-O3 -ftz=true", "fast": "-O3 --use_fast_math"}
fns = ["expf", "logf", "__expf", "__logf"]
n = 65536
raw = np.fromfile(os.path.join(run, "libm_sample.bin"), dtype="<u4")
assert raw.size == n * 13, raw.size
raw = raw.reshape(13, n)
digests = np.fromfile(os.path.join(run, "libm_digests.bin"), dtype="<u8")
assert digests.size == 12 * 256, digests.size
log = open(os.path.join(run, "libm_probe_log.txt")).read()
gz = dict(compression="gzip", compression_opts=9, shuffle=True)
tmp = out + ".tmp"
with h5py.File(tmp, "w") as f:
    f.create_dataset("input", data=raw[0], **gz)
    for b, (build, flags) in enumerate(builds.items()):
        g = f.create_group(build)
        g.attrs["nvcc"] = flags + " -gencode=arch=compute_90a,code=sm_90a"
        for k, fn in enumerate(fns):
            g.create_dataset(fn, data=raw[1 + 4 * b + k], **gz)
    # int64 holding the uint64 bit patterns, so that readers with only a signed 64-bit path
    # (experiments/io/hdf5_io.hpp read_i64) get them unchanged.
    d = f.create_dataset("digests", data=digests.reshape(12, 256).view("<i8"))
    d.attrs["rows"] = ", ".join("%s/%s" % (b, fn) for b in builds for fn in fns)
    d.attrs["hash"] = ("entry c: sum mod 2^64 of splitmix64(x << 32 | out) over x in "
                       "[c * 2^24, (c + 1) * 2^24)")
    f.attrs["gpu"] = re.search(r"^gpu (.*?) sm_", log, re.M).group(1)
    f.attrs["driver"] = re.search(r"^[^,\n]+, ([0-9.]+), [0-9]+ MiB", log, re.M).group(1)
    f.attrs["cuda"] = re.search(r"^Cuda compilation tools, (.*)$", log, re.M).group(1)
    f.attrs["commit"] = re.search(r"^commit: (\S+)", log, re.M).group(1)
    f.attrs["dirty"] = re.search(r"^dirty: (.*)$", log, re.M).group(1)
os.replace(tmp, out)
