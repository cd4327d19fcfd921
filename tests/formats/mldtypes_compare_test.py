"""attnsim's conversions against ml_dtypes (and numpy's float16), through `attnsim convert`.

Usage: mldtypes_compare_test.py ATTNSIM_EXE
Exit 0 when attnsim's ml_dtypes-equivalent policies agree bit for bit on every input, 1 on any
disagreement, 77 (CTest skip) when numpy or ml_dtypes is not importable. Inputs: every FP32
upper half with ten low halves (on, below and above the bf16/fp16 rounding points; 655,360
values, specials included), and every code of every format for the decodes. It also prints,
by category, where ml_dtypes and CUDA's saturating convention differ (a documented convention
difference, not a bug): see tests/formats/README.md.
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import ml_dtypes
except ImportError as e:  # pragma: no cover
    print("skipping: %s (pip install numpy ml_dtypes)" % e)
    sys.exit(77)

exe = sys.argv[1]
exhaustive = "--all" in sys.argv[2:]
tmp = tempfile.mkdtemp(prefix="attnsim_mld_")


def attnsim(args, data, out_dtype):
    src, dst = os.path.join(tmp, "in.bin"), os.path.join(tmp, "out.bin")
    data.tofile(src)
    subprocess.run([exe, "convert"] + args + ["--in", src, "--out", dst], check=True)
    return np.fromfile(dst, dtype=out_dtype)


hi = np.repeat(np.arange(65536, dtype=np.uint32), 10) << 16
lows = np.array([0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x5A5A], dtype=np.uint32)
bits = hi | np.tile(lows, 65536)
x = bits.view(np.float32)

formats = [
    # name, ml_dtypes/numpy type, storage, attnsim policy equal to that library's astype
    ("e4m3fn", ml_dtypes.float8_e4m3fn, np.uint8, ["--overflow", "nan", "--nan-encoding", "ml_dtypes"]),
    ("e5m2", ml_dtypes.float8_e5m2, np.uint8, ["--overflow", "inf", "--nan-encoding", "ml_dtypes"]),
    ("bf16", ml_dtypes.bfloat16, np.uint16, ["--overflow", "inf", "--nan-encoding", "ml_dtypes"]),
    ("fp16", np.float16, np.uint16, ["--overflow", "inf", "--nan-encoding", "ieee"]),
]

failures = 0
print("%-7s %-34s %10s %12s" % ("format", "attnsim policy", "inputs", "mismatches"))
for name, lib_t, store, policy in formats:
    with np.errstate(all="ignore"):
        lib = x.astype(lib_t).view(store)
    ours = attnsim(["--to", name, "--round", "rne"] + policy, x, store)
    differ = lib != ours
    if name == "fp16":
        # numpy keeps a signalling NaN signalling (payload shifted, lowest bit forced if it
        # empties: 0x7f800001 -> 0x7c01); IEEE 754 6.2 and attnsim's `ieee` encoding quiet it
        # (0x7e00). A documented convention difference: compare NaN-ness and sign there.
        nan_in = np.isnan(x)
        snan_diff = differ & nan_in
        same_class = ((lib & 0x7C00) == 0x7C00) & ((lib & 0x3FF) != 0) & ((lib & 0x8000) == (ours & 0x8000))
        differ = differ & ~(nan_in & same_class)
        print("        numpy float16 keeps signalling NaNs signalling: %d NaN inputs differ only in the quiet bit"
              % (snan_diff & same_class).sum())
    bad = np.nonzero(differ)[0]
    print("%-7s %-34s %10d %12d" % (name, " ".join(policy[1::2]), x.size, bad.size))
    for i in bad[:5]:
        print("   input 0x%08x: library 0x%x, attnsim 0x%x" % (bits[i], lib[i], ours[i]))
    failures += bad.size

    # Decodes of every code.
    codes = np.arange(1 << (8 * store().itemsize), dtype=store)
    lib_dec = codes.view(lib_t).astype(np.float32)
    our_dec = attnsim(["--to", name, "--decode"], codes, np.float32)
    same = (lib_dec.view(np.uint32) == our_dec.view(np.uint32)) | (
        np.isnan(lib_dec) & np.isnan(our_dec) & (np.signbit(lib_dec) == np.signbit(our_dec)))
    print("%-7s %-34s %10d %12d" % (name, "decode (NaN: NaN-ness and sign)", codes.size, (~same).sum()))
    failures += int((~same).sum())

    # Where ml_dtypes' astype and CUDA's cvt.rn.satfinite convention part ways.
    if name in ("e4m3fn", "e5m2"):
        cuda = attnsim(["--to", name, "--round", "rne", "--overflow", "saturate", "--nan-encoding", "cuda"], x, store)
        diff = lib != cuda
        cats = {
            "finite overflow": diff & np.isfinite(x) ,
            "+-Inf input": diff & np.isinf(x),
            "NaN input": diff & np.isnan(x),
        }
        print("        ml_dtypes astype vs CUDA satfinite: " +
              ", ".join("%s %d" % (k, v.sum()) for k, v in cats.items()))

if exhaustive:
    # All 2^32 FP32 inputs, in chunks of 2^25, against the same policies (label: exhaustive).
    chunk = 1 << 25
    for name, lib_t, store, policy in formats:
        bad_total = 0
        for start in range(0, 1 << 32, chunk):
            b = np.arange(start, start + chunk, dtype=np.uint64).astype(np.uint32)
            xc = b.view(np.float32)
            with np.errstate(all="ignore"):
                lib = xc.astype(lib_t).view(store)
            ours = attnsim(["--to", name, "--round", "rne"] + policy, xc, store)
            differ = lib != ours
            if name == "fp16":
                nan_in = np.isnan(xc)
                differ &= ~(nan_in & ((lib & 0x8000) == (ours & 0x8000)) & ((lib & 0x7C00) == 0x7C00) & ((lib & 0x3FF) != 0))
            n = int(differ.sum())
            if n and bad_total == 0:
                i = np.nonzero(differ)[0][0]
                print("   input 0x%08x: library 0x%x, attnsim 0x%x" % (b[i], lib[i], ours[i]))
            bad_total += n
        print("%-7s all 2^32 inputs: %d mismatches" % (name, bad_total))
        failures += bad_total

sys.exit(1 if failures else 0)
