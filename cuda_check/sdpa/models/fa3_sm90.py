"""FlashAttention-3's Hopper forward (Dao-AILab/flash-attention hopper/, built with its own
--use_fast_math) as its sm_90a SASS computes it (sim/fa3/README.md): kBlockM x kBlockN tiles
(tile_size.h), S by chained HGMMA k16 blocks (QGMMA k32 FP22 blocks for e4m3), KV blocks in
descending order, p = ex2.approx.ftz(fma.ftz(s, c, -fl(m c))), per-lane row sums, O = O*alpha
then O += P V, quad all-reduce xor 2 then 1, O * rcp.approx.ftz(l) (times v_descale for FP8).
The split-KV path writes each split's normalised O and LSE; FlashAttnFwdCombine merges them."""
import numpy as np

from prims import (F32, block_fma_chain, decode16, encode16, ex2_ftz, fadd_ftz, ffma_ftz, fmul_ftz,
                   lg2_ftz, operand_exp, rcp_ftz)

LN2 = F32(0.6931471805599453094)
LOG2E = F32(1.4426950216293334961)


def tile(d, dtype, causal):
    """tile_size.h tile_size_fwd_sm90 for the recorded instantiations (kBlockM, kBlockN)."""
    if dtype == "e4m3":
        return (128, 224) if d == 128 else (192, 160)
    if d == 128:
        return (128, 128) if causal else (128, 176)
    return (192, 128) if causal else (192, 192)


def rows_pass(S_fn, V, ev, pfmt, nr, d, blocks, bk, Lk, mask_fn, c, offset, rowsum_fma=True):
    m = np.full(nr, -np.inf, F32)
    lane = np.zeros((nr, 4), F32)
    O = np.zeros((nr, d), F32)
    first = True
    for j in blocks:
        k0 = j * bk
        nk = min(Lk, k0 + bk) - k0
        Sf = np.full((nr, bk), -np.inf, F32)
        Sf[:, :nk] = S_fn(k0, nk)
        Sf = mask_fn(Sf, k0)
        bmax = Sf.max(axis=1)
        if first:
            m_new = bmax
            alpha = np.ones(nr, F32)
        else:
            m_new = np.maximum(m, bmax)
            cur = np.where(m_new == -np.inf, F32(0), m_new)
            alpha = ex2_ftz(fmul_ftz(fadd_ftz(m, -cur), np.full(nr, c, F32)))
        ms = np.where(m_new == -np.inf, F32(0), fmul_ftz(m_new, np.full(nr, c, F32)))
        if offset:
            ms = np.where(m_new == -np.inf, F32(0), ffma_ftz(m_new, np.full(nr, c, F32), np.full(nr, -offset, F32)))
        x = ffma_ftz(Sf, np.full(Sf.shape, c, F32), np.broadcast_to(-ms[:, None], Sf.shape).astype(F32))
        p = ex2_ftz(x)
        for t in range(4):
            cols = [8 * jj + 2 * t + e for jj in range(bk // 8) for e in (0, 1)]
            if first:
                s = p[:, cols[0]].copy()
            elif rowsum_fma:
                s = ffma_ftz(lane[:, t], alpha, p[:, cols[0]])
            else:
                s = fadd_ftz(fmul_ftz(lane[:, t], alpha), p[:, cols[0]])
            for cc in cols[1:]:
                s = fadd_ftz(s, p[:, cc])
            lane[:, t] = s
        if not first:
            O = fmul_ftz(O, alpha[:, None])
        O = pv(O, p, V, ev, pfmt, k0, nk, bk, d)
        m = m_new
        first = False
    return O, m, lane


def pv(O, p, V, ev, pfmt, k0, nk, bk, d):
    if pfmt == "e4m3":
        import ml_dtypes
        P8 = np.clip(p, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
        Vt = np.zeros((d, bk))
        Vt[:, :nk] = V[k0:k0 + nk].T
        return qgmma_chain(P8, Vt, O)
    P = decode16(encode16(p, pfmt), pfmt)
    Vt = np.zeros((d, bk))
    Vt[:, :nk] = V[k0:k0 + nk].T
    evt = np.full((d, bk), -20000, np.int64)
    evt[:, :nk] = ev[k0:k0 + nk].T
    return block_fma_chain(P, Vt, O, operand_exp(P, pfmt), evt)


def e4m3_exp(v):
    a = np.abs(v)
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.where(a > 0, a, 1.0))).astype(np.int64)
    e = np.maximum(e, -6)
    return np.where(a > 0, e, -20000)


def qgmma_chain(A, B, C):
    """FP8 wgmma with FP32 accumulation (QGMMA): 32-product blocks + C, 13-bit window, truncated
    terms, the sum truncated to 13 fraction bits (numerics/block_fma kHopperQgmmaF32)."""
    ea, eb = e4m3_exp(A), e4m3_exp(B)
    K = A.shape[-1]
    D = np.asarray(C, np.float32)
    for k0 in range(0, K, 32):
        a = A[:, None, k0:k0 + 32]
        b = B[None, :, k0:k0 + 32]
        p = a * b
        pe = ea[:, None, k0:k0 + 32] + eb[None, :, k0:k0 + 32]
        pe = np.where(p != 0, pe, -20000)
        Cd = D.astype(np.float64)
        ac = np.abs(Cd)
        with np.errstate(divide="ignore"):
            ce = np.floor(np.log2(np.where(ac > 0, ac, 1.0))).astype(np.int64)
        ce = np.where(ac > 0, np.maximum(ce, -126), -20000)
        max_e = np.maximum(np.maximum(pe.max(axis=-1), ce), -133)
        scale = np.ldexp(1.0, 13 - max_e)  # window: 23 + neab = 13 fraction bits below max_e
        acc = np.trunc(p * scale[..., None]).sum(axis=-1) + np.trunc(Cd * scale)
        D = rz_bits(np.ldexp(acc, max_e - 13), 13)
    return D


def rz_bits(v, man):
    v = np.asarray(v, np.float64)
    a = np.abs(v)
    m_, E = np.frexp(a)
    e = np.maximum(E - 1, -126)
    q = np.trunc(np.ldexp(a, man - e))
    r = np.ldexp(q, e - man)
    out = np.where(r >= 2.0 ** 128, np.inf, r) * np.sign(v)
    out = np.where(out == 0, 0.0, out)
    return out.astype(np.float32)


def attention_head(q, k, v, fmt, causal, n_split=1, scale=None, descale=(1.0, 1.0, 1.0),
                   want_lse=False, rowsum_fma=True):
    Lq, d = q.shape
    Lk = k.shape[0]
    if scale is None:
        scale = F32(1.0 / np.sqrt(d))
    c = F32(np.float64(F32(scale)) * np.log2(np.e))  # host: float(softmax_scale * M_LOG2E)
    if fmt == "e4m3":
        import ml_dtypes
        Q = np.asarray(q).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
        K = np.asarray(k).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
        V = np.asarray(v).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
        c = fmul_ftz(fmul_ftz(np.array([c], F32), np.array([descale[0]], F32)),
                     np.array([descale[1]], F32))[0]
        offset, pfmt, ofmt = F32(8), "e4m3", "bf16"
        eq = ek = ev = None
    else:
        Q, K, V = decode16(q, fmt), decode16(k, fmt), decode16(v, fmt)
        eq, ek, ev = operand_exp(Q, fmt), operand_exp(K, fmt), operand_exp(V, fmt)
        offset, pfmt, ofmt = F32(0), fmt, fmt
    bq, bk = tile(d, fmt, causal)
    out = np.zeros((Lq, d), np.uint16)
    lse_all = np.zeros(Lq, F32)
    for r0 in range(0, Lq, bq):
        rows = np.arange(r0, min(Lq, r0 + bq))
        nr = len(rows)
        n_max = (Lk + bk - 1) // bk
        if causal:
            n_max = min(n_max, (r0 + bq + Lk - Lq + bk - 1) // bk)
        if fmt == "e4m3":
            S_fn = lambda k0, nk: qgmma_chain(Q[rows], K[k0:k0 + nk], np.zeros((nr, nk), F32))
        else:
            S_fn = lambda k0, nk: block_fma_chain(Q[rows], K[k0:k0 + nk], np.zeros((nr, nk), F32),
                                                  eq[rows], ek[k0:k0 + nk])

        def mask_fn(Sf, k0):
            if causal:
                cols = k0 + np.arange(bk)
                Sf = Sf.copy()
                Sf[cols[None, :] > rows[:, None] + (Lk - Lq)] = -np.inf
            return Sf
        splits = split_ranges(n_max, n_split, (Lk + bk - 1) // bk)
        parts, lses = [], []
        for lo, hi in splits:
            if lo >= hi:
                parts.append(np.zeros((nr, d), F32))
                lses.append(np.full(nr, -np.inf, F32))
                continue
            O, m, lane = rows_pass(S_fn, V, ev, pfmt, nr, d, range(hi - 1, lo - 1, -1), bk, Lk,
                                   mask_fn, c, offset, rowsum_fma)
            Of, lse = finalize(O, m, lane, c, descale[2], offset)
            parts.append(Of)
            lses.append(lse)
        if len(splits) == 1:
            Of, lse = parts[0], lses[0]
        else:
            Of, lse = combine(np.stack(parts), np.stack(lses))
        out[rows] = encode16(Of, ofmt)
        lse_all[rows] = lse
    return (out, lse_all) if want_lse else out


def split_ranges(n_max, n_split, n_total):
    if n_split <= 1:
        return [(0, n_max)]
    per = (n_total + n_split - 1) // n_split
    return [(s * per, min(n_max, (s + 1) * per)) for s in range(n_split)]


def finalize(O, m, lane, c, v_descale, offset):
    l = fadd_ftz(fadd_ftz(lane[:, 0], lane[:, 2]), fadd_ftz(lane[:, 1], lane[:, 3]))
    bad = (l == 0) | np.isnan(l)
    inv = np.where(bad, F32(0), rcp_ftz(np.where(bad, F32(1), l)))
    sc = fmul_ftz(inv, np.full_like(inv, F32(v_descale)))
    ls = l if not offset else fmul_ftz(l, np.full_like(l, F32(1.0 / 256)))
    cl = fmul_ftz(np.array([c], F32), np.array([LN2], F32))[0]
    logl = fmul_ftz(lg2_ftz(np.where(bad, F32(1), ls)), np.full_like(ls, LN2))
    lse = np.where(bad, F32(-np.inf), ffma_ftz(m, np.full_like(m, cl), logl))
    return fmul_ftz(O, sc[:, None]), lse


def combine(parts, lses):
    """FlashAttnFwdCombine (UNVERIFIED details: one split per lane of 32, butterfly xor 16..1)."""
    ns = parts.shape[0]
    mx = lses.max(axis=0)
    mx = np.where(mx == -np.inf, F32(0), mx).astype(F32)
    sc = [ex2_ftz(fmul_ftz(fadd_ftz(lses[s], -mx), np.full_like(mx, LOG2E))) for s in range(ns)]
    lanes = sc + [np.zeros_like(mx)] * (32 - ns)
    lanes = [fadd_ftz(np.zeros_like(mx), x) for x in lanes]
    h = 16
    while h >= 1:
        lanes = [fadd_ftz(lanes[j], lanes[j ^ h]) for j in range(32)]
        h //= 2
    tot = lanes[0]
    bad = (tot == 0) | np.isnan(tot)
    lse = ffma_ftz(lg2_ftz(np.where(bad, F32(1), tot)), np.full_like(tot, LN2), mx)
    inv = np.where(bad, F32(0), rcp_ftz(np.where(bad, F32(1), tot)))
    O = np.zeros(parts.shape[1:], F32)
    for s in range(ns):
        w = fmul_ftz(sc[s], inv)
        O = np.where(w[:, None] > 0, ffma_ftz(np.broadcast_to(w[:, None], O.shape).astype(F32), parts[s], O), O)
    return O, lse


def num_splits(b, hq, hkv, lq, lk, d, dtype, causal, num_sm=132):
    """flash_api get_num_splits + heuristics.h num_splits_heuristic (PackGQA rows for Split)."""
    bm, bn = tile(d, dtype, causal)
    n_blocks = (lk + bn - 1) // bn
    m_blocks = (lq * (hq // hkv) + bm - 1) // bm
    size_kv = lk * 2 * d * (1 if dtype == "e4m3" else 2)
    total = b * hkv * m_blocks
    if total >= 0.8 * num_sm:
        l2 = 50 * 1024 * 1024
        if size_kv > l2 and m_blocks >= num_sm * 2 and not causal:
            return min((size_kv + l2 - 1) // l2, 128)
        return 1
    if n_blocks <= 4:
        return 1
    mx = min(128, num_sm, n_blocks)
    eff = []
    for s in range(1, mx + 1):
        w = np.float32(total * s) / np.float32(num_sm)
        eff.append(float(np.float32(w / np.float32(np.ceil(w)))))
    best = max(eff)
    for s in range(1, mx + 1):
        if eff[s - 1] >= 0.85 * best:
            return s
    return 1
