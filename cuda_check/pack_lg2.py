"""Packs the lg2.approx.ftz.f32 recordings into the table numerics/special.cpp loads.

Reads the two recorded tables T0[m] = lg2(1.m) (ex2_lg2_tables_h100.h5, `lg2_table`) and
T1[m] = lg2(0.5 * 1.m) (lg2_half_table_h100.h5, `lg2_half_table`). The H100 computes e + L(m) in
fixed point with 36 fraction bits and truncates the magnitude to FP32, negating negative sums by
bitwise complement (cuda_check/special_probe.cu, 0 mismatches over all 2^32 inputs). So T0 is
L(m) truncated to 24 significant bits and T1 is 2^36 - L(m) - 1 (in units of 2^-36) truncated to
24 significant bits: together they confine L(m) to an interval [lo, hi), and any value in it gives
the H100's result at every exponent (a result at exponent e depends only on L's bits above
T0's or T1's last bit). x = 1 gives 0 (a special case of the unit); T1[0] puts L(0) in [2^-24, 2^-23).

Output lg2_approx_ftz_l36.bin: one value X[m] in [lo, hi) per mantissa (units of 2^-36), coded as
residuals r = X[m] - P[m] from a prediction P of the values already decoded: with s the lowest set
bit of m, P = X[m-s] + X[m-2s] - X[m-3s] when m >= 3s (exact for a function linear in the bits of
m, which the unit's fine structure nearly is), else 2 X[m-1] - X[m-2] (m >= 2), X[0] (m = 1), 0
(m = 0). X[m] is P clamped into [lo, hi), so r = 0 for 78% of the entries. Each r is written as
the Elias gamma code of zigzag(r) + 1 (zigzag: 2r for r >= 0, -2r - 1 for r < 0): n zero bits,
then the n + 1 bits of the value, most significant first; stream bit i is bit i % 8 of byte i / 8.

Usage, from the repository root: python3 cuda_check/pack_lg2.py
"""
import h5py
import numpy as np

D = "data/hw/h100/"


def fixed36(bits):
    """FP32 bit patterns (positive or negative, finite, magnitude < 2) as integers in units of 2^-36
    (exact: every recorded value is a multiple of 2^-36), and the unit of their last bit."""
    b = bits.astype(np.int64) & 0x7FFFFFFF
    e = b >> 23
    sig = np.where(b != 0, (b & 0x7FFFFF) | 0x800000, 0)
    sh = e - 114  # value = sig * 2^(e - 150) = sig * 2^(sh) * 2^-36
    v = np.where(sh >= 0, sig << np.maximum(sh, 0), sig >> np.maximum(-sh, 0))
    assert np.all(np.where(sh < 0, (sig & ((1 << np.maximum(-sh, 0)) - 1)) == 0, True))
    ulp = np.where(sh >= 0, 1 << np.maximum(sh, 0), 1)
    return v, ulp


def main():
    t0 = h5py.File(D + "ex2_lg2_tables_h100.h5")["lg2_table"][()].astype(np.uint32)
    t1 = h5py.File(D + "lg2_half_table_h100.h5")["lg2_half_table"][()].astype(np.uint32)
    assert np.all(t1 >> 31 == 1)
    v0, u0 = fixed36(t0)
    v1, u1 = fixed36(t1)
    lo = np.maximum(v0, (1 << 36) - v1 - u1)  # T0: L in [v0, v0 + u0)
    hi = np.minimum(v0 + u0, (1 << 36) - v1)  # T1: 2^36 - L - 1 in [v1, v1 + u1)
    lo[0], hi[0] = (1 << 36) - v1[0] - u1[0], (1 << 36) - v1[0]  # x = 1 -> 0 is a special case
    assert np.all(lo < hi)
    lo, hi = lo.tolist(), hi.tolist()
    n = len(lo)
    x = [0] * n
    out = bytearray()
    acc = nacc = 0
    zeros = 0
    for m in range(n):
        s = m & -m
        if m == 0:
            p = 0
        elif m >= 3 * s:
            p = x[m - s] + x[m - 2 * s] - x[m - 3 * s]
        elif m >= 2:
            p = 2 * x[m - 1] - x[m - 2]
        else:
            p = x[0]
        xm = min(max(p, lo[m]), hi[m] - 1)
        x[m] = xm
        r = xm - p
        zeros += r == 0
        v = (2 * r if r >= 0 else -2 * r - 1) + 1
        nb = v.bit_length()
        # n - 1 zeros, then v MSB first: as an integer written LSB-first, reverse v's bits.
        code = int(bin(v)[2:][::-1], 2) << (nb - 1)
        acc |= code << nacc
        nacc += 2 * nb - 1
        while nacc >= 8:
            out.append(acc & 0xFF)
            acc >>= 8
            nacc -= 8
    if nacc:
        out.append(acc & 0xFF)
    with open(D + "lg2_approx_ftz_l36.bin", "wb") as f:
        f.write(out)
    print(f"{len(out)} bytes, {zeros} of {n} residuals zero")


if __name__ == "__main__":
    main()
