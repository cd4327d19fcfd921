"""attnsim's conversions against ml_dtypes (and numpy's float16), through a `convert` command.

Usage: mldtypes_compare_test.py EXE [--all]

EXE is the `attnsim` executable: `convert --to FMT --round MODE --overflow POLICY --nan-encoding
ENC --in F --out F` and `--decode` (the raw-file contract of experiments/README.md).

Exit 0 when attnsim's ml_dtypes-equivalent policies agree bit for bit on every input, 1 on any
disagreement, 77 (CTest SKIP_RETURN_CODE) when numpy or ml_dtypes is not importable. Inputs: every
FP32 upper half with ten low halves (on, below and above the bf16/fp16 rounding points, plus one
random; 655,360 values, specials included), and every code of every format for the decodes.
With --all (label exhaustive): all 2^32 FP32 inputs.

It also counts, by category, where ml_dtypes' astype and CUDA's cvt.rn.satfinite convention
(attnsim {rne, saturate, cuda}) differ: a documented convention difference, not a bug (see
tests/formats/README.md). Every such difference must fall in a named category (finite overflow,
Inf input, NaN sign, NaN payload); anything else fails the test.

Why fp16 uses `--nan-encoding ieee` with one tolerance: ml_dtypes has no float16, so the library
side is numpy's float16, which keeps the NaN sign and the top 10 payload bits (as attnsim's
`ieee` encoding does) but does not set the quiet bit of a signalling NaN (0x7f800001 -> 0x7c01,
numpy's npy_floatbits_to_halfbits), where IEEE 754 6.2 and attnsim quiet it (0x7e00). For
signalling-NaN inputs only, fp16 is compared by NaN-ness and sign; quiet NaNs must match bit for
bit. Under attnsim's `ml_dtypes` encoding (fixed 0x7e00/0xfe00) every NaN with a non-zero top
payload would differ from numpy instead; the count is printed.
"""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import ml_dtypes
except ImportError as e:  # pragma: no cover
    print("skipping: %s (python3 -m pip install numpy ml_dtypes)" % e)
    sys.exit(77)

if len(sys.argv) < 2 or not os.path.exists(sys.argv[1]):
    print("usage: mldtypes_compare_test.py ATTNSIM_EXE [--all]")
    sys.exit(2)
exe = sys.argv[1]
exhaustive = "--all" in sys.argv[2:]
# The raw files go through memory where the machine has a RAM file system: the --all sweep moves
# about 80 GB through `attnsim convert` (a page-cache file system would write it back to disk).
shm = "/dev/shm"
tmp = tempfile.mkdtemp(prefix="attnsim_mld_",
                       dir=shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None)
atexit.register(shutil.rmtree, tmp, ignore_errors=True)
print("ml_dtypes %s, numpy %s" % (ml_dtypes.__version__, np.__version__))


def attnsim(args, data, out_dtype):
    src, dst = os.path.join(tmp, "in.bin"), os.path.join(tmp, "out.bin")
    data.tofile(src)
    subprocess.run([exe, "convert"] + args + ["--in", src, "--out", dst], check=True)
    out = np.fromfile(dst, dtype=out_dtype)
    assert out.size == data.size, "attnsim wrote %d values for %d inputs" % (out.size, data.size)
    return out


hi = np.repeat(np.arange(65536, dtype=np.uint32), 10) << 16
lows = np.array([0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0], dtype=np.uint32)
bits = hi | np.tile(lows, 65536)
bits[9::10] = hi[9::10] | (np.random.default_rng(1).integers(0, 65536, 65536, dtype=np.uint32))
x = bits.view(np.float32)

# name, library type, storage, sign bit, attnsim policy equal to that library's astype
formats = [
    ("e4m3fn", ml_dtypes.float8_e4m3fn, np.uint8, 0x80, ["--overflow", "nan", "--nan-encoding", "ml_dtypes"]),
    ("e5m2", ml_dtypes.float8_e5m2, np.uint8, 0x80, ["--overflow", "inf", "--nan-encoding", "ml_dtypes"]),
    ("bf16", ml_dtypes.bfloat16, np.uint16, 0x8000, ["--overflow", "inf", "--nan-encoding", "ml_dtypes"]),
    ("fp16", np.float16, np.uint16, 0x8000, ["--overflow", "inf", "--nan-encoding", "ieee"]),
]
CUDA = ["--round", "rne", "--overflow", "saturate", "--nan-encoding", "cuda"]


def compare(name, xs, lib, ours, sign):
    """Mismatch mask; fp16 signalling-NaN inputs compared by NaN-ness and sign (see docstring)."""
    differ = lib != ours
    if name == "fp16":
        xb = xs.view(np.uint32)
        snan_in = np.isnan(xs) & ((xb & 0x00400000) == 0)
        lib_nan = ((lib & 0x7C00) == 0x7C00) & ((lib & 0x3FF) != 0)
        ours_nan = ((ours & 0x7C00) == 0x7C00) & ((ours & 0x3FF) != 0)
        tolerated = differ & snan_in & lib_nan & ours_nan & ((lib & sign) == (ours & sign))
        return differ & ~tolerated, int(tolerated.sum())
    return differ, 0


failures = 0
table = []
print("%-7s %-40s %10s %12s" % ("format", "attnsim policy", "inputs", "mismatches"))
for name, lib_t, store, sign, policy in formats:
    with np.errstate(all="ignore"):
        lib = x.astype(lib_t).view(store)
    ours = attnsim(["--to", name, "--round", "rne"] + policy, x, store)
    differ, tolerated = compare(name, x, lib, ours, sign)
    bad = np.nonzero(differ)[0]
    print("%-7s %-40s %10d %12d" % (name, "rne " + " ".join(policy[1::2]), x.size, bad.size))
    for i in bad[:5]:
        print("   input 0x%08x: library 0x%x, attnsim 0x%x" % (bits[i], lib[i], ours[i]))
    if name == "fp16":
        ml_enc = attnsim(["--to", name, "--round", "rne", "--overflow", "inf", "--nan-encoding", "ml_dtypes"], x, store)
        print("        numpy float16 leaves %d signalling NaN inputs signalling (compared by NaN-ness and sign);"
              " under attnsim's ml_dtypes encoding %d NaN inputs would differ (payload)" %
              (tolerated, int((ml_enc != lib).sum())))
    failures += bad.size

    # Decodes of every code: bit for bit for non-NaN; NaN by NaN-ness and sign (payload
    # differences are counted and printed).
    codes = np.arange(1 << (8 * np.dtype(store).itemsize), dtype=np.uint64).astype(store)
    lib_dec = codes.view(lib_t).astype(np.float32)
    our_dec = attnsim(["--to", name, "--decode"], codes, np.float32)
    both_nan = np.isnan(lib_dec) & np.isnan(our_dec)
    same = (lib_dec.view(np.uint32) == our_dec.view(np.uint32)) | (
        both_nan & (np.signbit(lib_dec) == np.signbit(our_dec)))
    payload = both_nan & (lib_dec.view(np.uint32) != our_dec.view(np.uint32))
    print("%-7s %-40s %10d %12d   (NaN codes whose FP32 payload differs: %d)" %
          (name, "decode (NaN: NaN-ness and sign)", codes.size, int((~same).sum()), int(payload.sum())))
    failures += int((~same).sum())

    # ml_dtypes astype vs CUDA satfinite, by category.
    cuda = attnsim(["--to", name] + CUDA, x, store)
    diff = lib != cuda
    finite = np.isfinite(x)
    mag_mask = sign - 1
    cats = {
        "finite overflow": diff & finite,
        "Inf input": diff & np.isinf(x),
        "NaN sign": np.isnan(x) & ((lib & sign) != (cuda & sign)),
        "NaN payload": np.isnan(x) & ((lib & mag_mask) != (cuda & mag_mask)),
    }
    # A finite input may differ only where ml_dtypes overflowed (Inf/NaN) and CUDA clamped.
    max_code = {"e4m3fn": 0x7E, "e5m2": 0x7B, "bf16": 0x7F7F, "fp16": 0x7BFF}[name]
    lib_special = (lib & mag_mask) > max_code  # Inf or NaN
    unexplained = diff & finite & ~(((cuda & mag_mask) == max_code) & lib_special)
    counts = {k: int(v.sum()) for k, v in cats.items()}
    table.append((name, x.size, counts, int((diff & np.isnan(x)).sum())))
    print("        ml_dtypes astype vs CUDA satfinite: " + ", ".join("%s %d" % kv for kv in counts.items()) +
          ", unexplained %d" % int(unexplained.sum()))
    failures += int(unexplained.sum())

print("\nml_dtypes astype vs attnsim CUDA satfinite {rne, saturate, cuda}, %d inputs per format:" % x.size)
print("| format | finite overflow | Inf input | NaN sign | NaN payload | NaN inputs differing |")
print("|---|---|---|---|---|---|")
for name, n, c, nan_any in table:
    print("| %s | %d | %d | %d | %d | %d |" % (name, c["finite overflow"], c["Inf input"], c["NaN sign"],
                                             c["NaN payload"], nan_any))

CHUNK = 1 << 25


def sweep_chunk(job):
    """One format on the inputs [start, start + CHUNK): the mismatches and the first one."""
    global tmp
    fi, start = job
    name, lib_t, store, sign, policy = formats[fi]
    b = np.arange(CHUNK, dtype=np.uint32) + np.uint32(start)
    xc = b.view(np.float32)
    with np.errstate(all="ignore"):
        lib = xc.astype(lib_t).view(store)
    tmp = os.path.join(tmp_root, "w%d" % os.getpid())  # each worker its own raw files
    os.makedirs(tmp, exist_ok=True)
    ours = attnsim(["--to", name, "--round", "rne"] + policy, xc, store)
    differ, _ = compare(name, xc, lib, ours, sign)
    n = int(differ.sum())
    first = None
    if n:
        i = np.nonzero(differ)[0][0]
        first = (int(b[i]), int(lib[i]), int(ours[i]))
    return n, first


tmp_root = tmp
if exhaustive:
    # All 2^32 FP32 inputs, in chunks of 2^25, against the same policies (label: exhaustive), the
    # chunks on every core (the library's astype and the comparisons are single-threaded numpy).
    import concurrent.futures
    import multiprocessing
    workers = max(1, min(len(os.sched_getaffinity(0)), 8))
    ctx = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        for fi, (name, lib_t, store, sign, policy) in enumerate(formats):
            bad_total = 0
            for n, first in pool.map(sweep_chunk, [(fi, s) for s in range(0, 1 << 32, CHUNK)]):
                if n and bad_total == 0:
                    print("   input 0x%08x: library 0x%x, attnsim 0x%x" % first)
                bad_total += n
            print("%-7s all 2^32 inputs: %d mismatches" % (name, bad_total))
            failures += bad_total

print("FAIL: %d" % failures if failures else "PASS")
sys.exit(1 if failures else 0)
