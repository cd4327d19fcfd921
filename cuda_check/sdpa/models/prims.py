"""Bit-exact numpy building blocks of the SDPA / FA3 kernel models (sim/sdpa/README.md): 16-bit
decoding, the Hopper tensor-core block FMA (numerics/block_fma.cpp: HMMA.16816.F32 and
HGMMA.64xNx16.F32 are the same block: 16 products + C, a 25-bit window below the largest exponent,
every term truncated, the sum truncated to FP32), and the H100's MUFU ex2 / rcp / lg2 through the
attnsim command line (numerics/special's table models, equal to the hardware on all 2^32 inputs).
"""
import os
import subprocess
import tempfile

import ml_dtypes
import numpy as np

ATTNSIM = os.environ.get("ATTNSIM", os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                                 "build", "experiments", "attnsim"))
F32 = np.float32


def decode16(bits, fmt):
    """uint16 patterns -> float64 values (exact)."""
    dt = np.float16 if fmt == "fp16" else ml_dtypes.bfloat16
    return np.asarray(bits, np.uint16).view(dt).astype(np.float64)


def encode16(x, fmt):
    """float32 -> uint16 patterns, round to nearest even (cvt.rn.f16/bf16.f32; NaN canonical)."""
    x = np.asarray(x, np.float32)
    dt = np.float16 if fmt == "fp16" else ml_dtypes.bfloat16
    b = x.astype(dt).view(np.uint16).copy()
    b[np.isnan(x)] = 0x7FFF
    return b


def operand_exp(v, fmt):
    """Exponent of each operand's unit bit as the block FMA aligns it (subnormals: the format's
    emin; zeros: a very small number so that their products never set the alignment)."""
    emin = -14 if fmt == "fp16" else -126
    a = np.abs(v)
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.where(a > 0, a, 1.0))).astype(np.int64)
    e = np.maximum(e, emin)
    return np.where(a > 0, e, -20000)


def rz_f32(v):
    """float64 values with at most 53 significant bits -> float32 rounded toward zero, subnormals
    kept, overflow to +-Inf (the block FMA's result; a zero is +0)."""
    v = np.asarray(v, np.float64)
    a = np.abs(v)
    m, E = np.frexp(a)  # a = m 2^E, m in [0.5, 1)
    e = np.maximum(E - 1, -126)
    q = np.trunc(np.ldexp(a, 23 - e))
    r = np.ldexp(q, e - 23)
    out = np.where(r >= 2.0 ** 128, np.inf, r) * np.sign(v)
    out = np.where(out == 0, 0.0, out)  # never -0
    return out.astype(np.float32)


def block_fma_chain(A, B, C, ea, eb, k_block=16):
    """D = A B^T + C through chained block FMAs over k in natural order, 16 products per block.
    A [..., M, K], B [..., N, K] exact float64 values; ea, eb their operand exponents; C [..., M, N]
    float32. Finite operands only (the recorded inputs are finite)."""
    K = A.shape[-1]
    D = np.asarray(C, np.float32)
    for k0 in range(0, K, k_block):
        a = A[..., :, None, k0:k0 + k_block]
        b = B[..., None, :, k0:k0 + k_block]
        p = a * b  # exact: at most 22 significant bits
        pe = ea[..., :, None, k0:k0 + k_block] + eb[..., None, :, k0:k0 + k_block]
        pe = np.where(p != 0, pe, -20000)
        Cd = D.astype(np.float64)
        ac = np.abs(Cd)
        with np.errstate(divide="ignore"):
            ce = np.floor(np.log2(np.where(ac > 0, ac, 1.0))).astype(np.int64)
        ce = np.where(ac > 0, np.maximum(ce, -126), -20000)
        max_e = np.maximum(np.maximum(pe.max(axis=-1), ce), -133)
        scale = np.ldexp(1.0, 25 - max_e)
        terms = np.trunc(p * scale[..., None])
        acc = terms.sum(axis=-1) + np.trunc(Cd * scale)
        D = rz_f32(np.ldexp(acc, max_e - 25))
    return D


def _special(fn, x, no_ftz=False):
    x = np.ascontiguousarray(x, np.float32)
    with tempfile.TemporaryDirectory() as d:
        i, o = os.path.join(d, "i.f32"), os.path.join(d, "o.f32")
        x.ravel().tofile(i)
        cmd = [ATTNSIM, "special", "--fn", fn, "--in", i, "--out", o] + (["--no-ftz"] if no_ftz else [])
        subprocess.run(cmd, check=True)
        return np.fromfile(o, np.float32).reshape(x.shape)


def ex2_ftz(x):
    return _special("ex2", x)


def ex2(x):
    return _special("ex2", x, no_ftz=True)


def rcp_ftz(x):
    return _special("rcp", x)


def lg2_ftz(x):
    return _special("lg2", x)


def ftz(x):
    """.ftz on a float32 result or operand: subnormals to zeros of their sign."""
    x = np.asarray(x, np.float32)
    return np.where(np.abs(x) < np.float32(2.0 ** -126), np.copysign(np.float32(0), x), x).astype(np.float32)


def fmul_ftz(a, b):
    """FMUL.FTZ (numerics/special fmul_ftz): flushed operands, RN product, tiny after rounding
    with an unbounded exponent -> zero."""
    a, b = ftz(a), ftz(b)
    p = a.astype(np.float64) * b.astype(np.float64)  # exact
    r = p.astype(np.float32)
    unb = (p * 2.0 ** 100).astype(np.float32)
    tiny = np.abs(unb) < np.float32(2.0 ** -26)
    return np.where(tiny, np.copysign(np.float32(0), r), r).astype(np.float32)


def fadd_ftz(a, b):
    """FADD.FTZ: flushed operands, RN sum (an exact tiny sum of normals), subnormal -> zero."""
    return ftz((ftz(a) + ftz(b)).astype(np.float32))


def ffma_ftz(a, b, c):
    """FFMA.FTZ via float64 (exact product; the sum rounded once to float32 through the
    round-to-odd-free path is exact enough only when |c| and a*b are within 2^29: checked by the
    caller's use, alpha*l + s with l, s positive)."""
    a, b, c = ftz(a), ftz(b), ftz(c)
    p = a.astype(np.float64) * b.astype(np.float64)
    s = p + c.astype(np.float64)
    # p has <= 48 bits, c 24: s is exact when the exponents are within 53 - 48 ... fall back to
    # exact rational rounding where float64 could round.
    r = s.astype(np.float32)
    bad = (s - c.astype(np.float64)) != p
    if np.any(bad):
        from fractions import Fraction
        idx = np.flatnonzero(bad.ravel())
        rf = r.ravel().copy()
        for i in idx:
            ex = Fraction(float(a.ravel()[i])) * Fraction(float(b.ravel()[i])) + Fraction(float(c.ravel()[i]))
            rf[i] = np.float32(_round_fraction_f32(ex))
        r = rf.reshape(r.shape)
    return ftz(r)


def _round_fraction_f32(x):
    from fractions import Fraction
    if x == 0:
        return 0.0
    s = -1 if x < 0 else 1
    a = abs(x)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    e = max(e, -126)
    q = a / Fraction(2) ** (e - 23)
    n = q.numerator // q.denominator
    r = q - n
    if r > Fraction(1, 2) or (r == Fraction(1, 2) and n & 1):
        n += 1
    return s * float(n) * 2.0 ** (e - 23)


def expf(x, ftz_=False):
    """CUDA's expf (libdevice, numerics/special expf_libdevice)."""
    return _special("expf", x, no_ftz=not ftz_)


def logf(x, ftz_=False):
    """CUDA's logf (libdevice, numerics/special logf_libdevice)."""
    return _special("logf", x, no_ftz=not ftz_)


def fast_logf(x, ftz_=False):
    """CUDA's __logf: lg2.approx then FMUL by ln 2 (numerics/special fast_logf)."""
    return _special("__logf", x, no_ftz=not ftz_)


def fma32(a, b, c):
    """fma.rn.f32 (no ftz), vectorised and exact: a*b is exact in float64, TwoSum gives
    a*b + c = s + e exactly, and float32(s) is the correctly rounded result except when s is a
    float32 midpoint (a float64 value) and e != 0, where the tie goes to e's side."""
    a, b, c = (np.asarray(x, np.float32) for x in (a, b, c))
    a, b, c = np.broadcast_arrays(a, b, c)
    p = a.astype(np.float64) * b.astype(np.float64)
    cd = c.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        s = p + cd
        pv = s - cd
        cv = s - pv
        e = (p - pv) + (cd - cv)
        r = s.astype(np.float32)
        # neighbours of r and the midpoint test
        up = np.nextafter(r, np.float32(np.inf))
        dn = np.nextafter(r, np.float32(-np.inf))
        rd = r.astype(np.float64)
        mid_up = (rd + up.astype(np.float64)) / 2
        mid_dn = (rd + dn.astype(np.float64)) / 2
        fix_up = (s == mid_up) & (e > 0)   # s rounded down onto r from a midpoint, exact above it
        fix_dn = (s == mid_dn) & (e < 0)
        fix_up2 = (s == mid_dn) & (e > 0) & (r.astype(np.float64) < s)  # cannot happen: r >= s
    r = np.where(fix_up & np.isfinite(s), up, r)
    r = np.where(fix_dn & np.isfinite(s), dn, r)
    return r.astype(np.float32)
