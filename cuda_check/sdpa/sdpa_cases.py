"""The SDPA recordings' cases and inputs, without torch: the case list record_sdpa.py records on
the GPU, the lattice and designed inputs (float32 values the dtype represents exactly) and the row
digest the recordings store. The models (models/cases.py, models/check_recordings.py) and the FA3
input regeneration (cuda_check/fa3/record_fa3_inputs.py) import this module, so replaying the
recordings needs numpy and h5py only."""
import os
import sys

import numpy as np

# The lattice generator, shared with cuda_check/sage/record_sage.py (cuda_check/lattice.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lattice import M64, lattice_tensor, splitmix64  # noqa: E402,F401


def case(name, b, hq, hkv, lq, lk, d, causal, kind="lattice", seed=0, full=None,
         math_parts=False):
    return dict(name=name, b=b, hq=hq, hkv=hkv, lq=lq, lk=lk, d=d, causal=causal, kind=kind,
                seed=seed, full=full,
                math_parts=math_parts)


# Lengths are never multiples of any tile except where a split count is the point; the flash
# backend's split-KV heuristic (flash_api.cpp num_splits_heuristic, 2 x 132 SMs, block_n 256 for
# d <= 64 and 128 for d <= 128) picks: r512_h1 4 splits, r512_h16 2, r512_b2h16 and r77_b4h32 1
# (the plain flash_fwd_kernel), r1000 8.
CASES = [
    case("r77_d64", 1, 2, 2, 77, 77, 64, False, seed=11, math_parts=True),
    case("r200_d128_causal", 1, 2, 2, 200, 200, 128, True, seed=12, math_parts=True),
    case("r333_d64_causal", 2, 3, 3, 333, 333, 64, True, seed=13),
    case("r1000_d128", 1, 2, 2, 1000, 1000, 128, False, seed=14, full=[(0, 0)]),
    case("r1000_d128_causal", 1, 2, 2, 1000, 1000, 128, True, seed=15, full=[(0, 1)]),
    case("r77x333_d128_causal", 1, 1, 1, 77, 333, 128, True, seed=16),
    case("r333x200_d64_causal", 1, 2, 2, 333, 200, 64, True, seed=17),
    case("r333x200_d64", 1, 2, 2, 333, 200, 64, False, seed=18),
    case("gqa200_d128_causal", 1, 8, 2, 200, 200, 128, True, seed=19, full=[(0, 0), (0, 1), (0, 4), (0, 7)]),
    case("dec500_gqa_d128", 1, 8, 2, 1, 500, 128, False, seed=20, math_parts=True),
    case("dec4097_d128", 2, 4, 4, 1, 4097, 128, False, seed=21, math_parts=True),
    case("dec4097_gqa_d64", 1, 16, 2, 1, 4097, 64, False, seed=22),
    case("r512_h1_d128", 1, 1, 1, 512, 512, 128, False, seed=23),
    case("r512_h16_d128", 1, 16, 16, 512, 512, 128, False, seed=24, full=[(0, 0), (0, 15)]),
    case("r512_b2h16_d128", 2, 16, 16, 512, 512, 128, False, seed=25, full=[(0, 0), (1, 15)]),
    case("r77_b4h32_d64_causal", 4, 32, 32, 77, 77, 64, True, seed=26, full=[(0, 0), (3, 31)]),
    case("r200_d96", 1, 2, 2, 200, 200, 96, False, seed=27),
    case("r200_d256_causal", 1, 1, 1, 200, 200, 256, True, seed=28),
    case("sharp200_d128", 1, 2, 2, 200, 200, 128, False, kind="sharp", seed=29),
    case("sharp333_d64_causal", 1, 2, 2, 333, 333, 64, True, kind="sharp", seed=30),
    # Designed probes (inputs stored): see designed_inputs.
    case("uniform333_d128", 1, 1, 1, 4, 333, 128, False, kind="uniform", seed=31),
    case("uniform4097_d64", 1, 1, 1, 1, 4097, 64, False, kind="uniform", seed=32),
    case("cancel300_d128", 1, 4, 4, 2, 300, 128, False, kind="cancel", seed=33),
    case("cancel300_d64", 1, 4, 4, 2, 300, 64, False, kind="cancel", seed=34),
    case("exp2_d64", 1, 4, 4, 512, 2, 64, False, kind="exp", seed=35),
    case("exp2_d128", 1, 4, 4, 512, 2, 128, False, kind="exp", seed=36),
    case("onehot200_d128", 1, 2, 2, 64, 200, 128, False, kind="onehot", seed=37),
]


def uniform_hash(seed, salt, n):
    with np.errstate(over="ignore"):
        return splitmix64(np.uint64((seed * 0x9E3779B97F4A7C15 ^ salt) & M64) ^
                          np.arange(n, dtype=np.uint64))


def designed_inputs(c, dname):
    """The designed probes, in float32 values every one of which the dtype represents exactly."""
    b, hq, hkv, lq, lk, d, seed = c["b"], c["hq"], c["hkv"], c["lq"], c["lk"], c["d"], c["seed"]
    q = np.zeros((b, hq, lq, d), np.float32)
    k = np.zeros((b, hkv, lk, d), np.float32)
    v = np.zeros((b, hkv, lk, d), np.float32)
    kind = c["kind"]
    if kind == "uniform":
        # q = 0: every score 0, every p exactly 1, l = Lk; O = sum(V) / Lk in the kernel's order.
        v[:] = lattice_tensor(seed, 3, v.shape)
    elif kind == "cancel":
        # q = 0 (p = 1); in column j of V, +B at key a_j, -B at b_j, s at c_j, 0 elsewhere: O_j
        # tells in which order and grouping the P.V accumulation met the three.
        big = {"fp16": [2.0 ** 14, 2.0 ** 14, 2.0 ** 10, 2.0 ** 4],
               "bf16": [2.0 ** 20, 2.0 ** 14, 2.0 ** 10, 2.0 ** 4]}[dname]
        small = {"fp16": [2.0 ** -12, 2.0 ** -9, 2.0 ** -14, 2.0 ** -20],
                 "bf16": [2.0 ** -5, 2.0 ** -11, 2.0 ** -14, 2.0 ** -20]}[dname]
        for h in range(hkv):
            u = uniform_hash(seed, 0xCA00 + h, 3 * d)
            for j in range(d):
                pos = []
                for t in range(3):
                    p = int(u[3 * j + t] % np.uint64(lk))
                    while p in pos:
                        p = (p + 1) % lk
                    pos.append(p)
                v[0, h, pos[0], j] = big[h]
                v[0, h, pos[1], j] = -big[h]
                v[0, h, pos[2], j] = small[h] * (1 + (j % 4) / 4.0)
    elif kind == "exp":
        # Two keys: k0 = 0 (score 0), k1 = e_0 (score x_i); q_i = (x_i, 0, ...). V = (e_0, e_1 +
        # big e_2): O_i0 = p0 / l, O_i1 = p1 / l, O_i2 = p1 big / l (p1 far below 1, subnormal
        # p in bf16), LSE = the kernel's log-sum-exp of (0, x_i * scale).
        ranges = [(-8.0, 8.0), (-64.0, 64.0), (-900.0, -500.0), (-1400.0, -900.0)]
        for h in range(hq):
            lo, hi = ranges[h % 4]
            u = uniform_hash(seed, 0xE400 + h, lq).astype(np.float64) / 2.0 ** 64
            x = lo + (hi - lo) * u
            q[0, h, :, 0] = x
        k[0, :, 1, 0] = 1.0
        v[0, :, 0, 0] = 1.0
        v[0, :, 1, 1] = 1.0
        v[0, :, 1, 2] = 2.0 ** 15 if dname == "fp16" else 2.0 ** 100  # p1 * big: tiny p visible
    elif kind == "onehot":
        # Query i selects keys by exact scores: q_i = 8 e_(i mod 8); key j = e_(j mod 8) * t_j with
        # t_j from {0, 1/2, 1, 2} so scores take 4 exact values per row; V lattice.
        for i in range(lq):
            q[0, :, i, i % 8] = 8.0
        t = np.array([0.0, 0.5, 1.0, 2.0], np.float32)
        u = uniform_hash(seed, 0x0E00, lk)
        for j in range(lk):
            k[0, :, j, j % 8] = t[int(u[j] % np.uint64(4))]
        v[:] = lattice_tensor(seed, 3, v.shape)
    else:
        raise ValueError(kind)
    return q, k, v


def inputs(c, dname):
    shape_q = (c["b"], c["hq"], c["lq"], c["d"])
    shape_kv = (c["b"], c["hkv"], c["lk"], c["d"])
    if c["kind"] in ("lattice", "sharp"):
        q = lattice_tensor(c["seed"], 1, shape_q)
        k = lattice_tensor(c["seed"], 2, shape_kv)
        v = lattice_tensor(c["seed"], 3, shape_kv)
        if c["kind"] == "sharp":  # scores 16x larger: many p underflow, the max matters
            q, k = q * np.float32(4), k * np.float32(4)
        return q, k, v, False
    q, k, v = designed_inputs(c, dname)
    return q, k, v, True


def fnv_rows(a):
    """FNV-1a (32-bit) over the bytes of each row of the last axis, in little-endian order."""
    a = np.ascontiguousarray(a)
    rows = a.reshape(-1, a.shape[-1]).view(np.uint8)
    h = np.full(rows.shape[0], 0x811C9DC5, dtype=np.uint64)
    for j in range(rows.shape[1]):
        h = ((h ^ rows[:, j].astype(np.uint64)) * np.uint64(0x01000193)) & np.uint64(0xFFFFFFFF)
    return h.astype(np.uint32).reshape(a.shape[:-1])
