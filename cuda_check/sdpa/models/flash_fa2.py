"""PyTorch's vendored FlashAttention-2 forward (aten/src/ATen/native/transformers/cuda/flash_attn:
flash_fwd_kernel / flash_fwd_splitkv_kernel + flash_fwd_splitkv_combine_kernel) as torch 2.11's
sm_90 SASS computes it (sim/sdpa/README.md): HMMA.16816.F32 chains, KV blocks in descending order,
exp2f = ex2.approx.f32 (no .ftz) of fl(fl(s * scale_log2) - fl(m * scale_log2)) (UNFUSE_FMA: FMUL
then FADD), per-lane row sums with the rescale contracted into the first add of a block
(l = fma(l, alpha, p0) + p1 + ...), quad all-reduce xor 2 then xor 1, IEEE 1/l then a multiply."""
import numpy as np

from prims import (F32, block_fma_chain, decode16, encode16, ex2, expf, fast_logf, fma32, logf,
                   operand_exp)

LN2 = F32(0.6931471805599453094)


def traits(d, split):
    """(kBlockM, kBlockN) of the instantiation run_mha_fwd_hdimXX / splitkv picks on sm_90."""
    if split:
        return 64, (256 if d <= 64 else 128 if d <= 128 else 64)
    return {64: (128, 128), 96: (128, 64), 128: (128, 64), 256: (128, 64)}.get(d, (128, 64))


def num_splits(b, h, lq, lk, d, sms=132):
    """flash_api.cpp set_params_splitkv / num_splits_heuristic (2 x SMs, 128 max)."""
    block_n = 256 if d <= 64 else (128 if d <= 128 else 64)
    n_blocks = (lk + block_n - 1) // block_n
    m_blocks = (lq + 63) // 64
    bnm = b * h * m_blocks
    nsm = sms * 2
    if bnm >= 0.8 * nsm:
        return 1
    mx = min(128, nsm, n_blocks)
    eff = []
    cd = lambda a, b_: (a + b_ - 1) // b_
    elig = lambda s: s == 1 or cd(n_blocks, s) != cd(n_blocks, s - 1)
    best = 0.0
    for s in range(1, mx + 1):
        if not elig(s):
            eff.append(0.0)
            continue
        w = np.float32(bnm * s) / np.float32(nsm)
        e = float(np.float32(w / np.float32(np.ceil(w))))
        best = max(best, e)
        eff.append(e)
    for s in range(1, mx + 1):
        if elig(s) and eff[s - 1] >= 0.85 * best:
            return s
    return 1


def _rows_pass(Q, K, V, eq, ek, ev, rows, n_lo, n_hi, bk, causal_shift, scale_log2, fmt, Lk):
    """The tile loop of compute_attn_1rowblock(_splitkv) over KV blocks [n_lo, n_hi) in
    descending order: returns acc_o, row_max, lane sums [nr, 4]."""
    nr, d = len(rows), Q.shape[1]
    m = np.full(nr, -np.inf, F32)
    lane = np.zeros((nr, 4), F32)
    O = np.zeros((nr, d), F32)
    first = True
    for j in range(n_hi - 1, n_lo - 1, -1):
        k0 = j * bk
        kv = np.arange(k0, min(Lk, k0 + bk))
        S = block_fma_chain(Q[rows], K[kv], np.zeros((nr, len(kv)), F32), eq[rows], ek[kv])
        Sf = np.full((nr, bk), -np.inf, F32)
        Sf[:, :len(kv)] = S
        if causal_shift is not None:  # bottom-right: key col > row + (Lk - Lq) masked
            cols = k0 + np.arange(bk)
            Sf[cols[None, :] > rows[:, None] + causal_shift] = -np.inf
        bmax = Sf.max(axis=1)
        if first:
            m_new = bmax
        else:
            m_new = np.maximum(m, bmax)
            cur = np.where(m_new == -np.inf, F32(0), m_new)
            alpha = ex2(((m - cur).astype(F32) * scale_log2).astype(F32))
            O = (O * alpha[:, None]).astype(F32)
        max_scaled = np.where(m_new == -np.inf, F32(0), (m_new * scale_log2).astype(F32))
        x = ((Sf * scale_log2).astype(F32) - max_scaled[:, None]).astype(F32)
        p = ex2(x)
        for t in range(4):
            cols = [8 * jj + 2 * t + e for jj in range(bk // 8) for e in (0, 1)]
            if first:
                s = p[:, cols[0]].copy()
            else:  # row_sum *= alpha; row_sum += p0 contracted into one FFMA
                s = (lane[:, t].astype(np.float64) * alpha.astype(np.float64) +
                     p[:, cols[0]].astype(np.float64)).astype(F32)
                s = _fix_fma(lane[:, t], alpha, p[:, cols[0]], s)
            for cc in cols[1:]:
                s = (s + p[:, cc]).astype(F32)
            lane[:, t] = s
        P = decode16(encode16(p, fmt), fmt)
        Vt = np.zeros((d, bk))
        Vt[:, :len(kv)] = V[kv].T
        evt = np.full((d, bk), -20000, np.int64)
        evt[:, :len(kv)] = ev[kv].T
        O = block_fma_chain(P, Vt, O, operand_exp(P, fmt), evt)
        m = m_new
        first = False
    return O, m, lane


def _fix_fma(a, b, c, r):
    """float64 fma(a, b, c) rounded to float32 can double-round; redo those exactly."""
    from prims import ffma_ftz  # exact path (inputs here are never subnormal)
    p = a.astype(np.float64) * b.astype(np.float64)
    s = p + c.astype(np.float64)
    bad = (s - c.astype(np.float64)) != p
    if np.any(bad):
        r = r.copy()
        r[bad] = ffma_ftz(a[bad], b[bad], c[bad])
    return r


def _finish(O, m, lane, scale, split):
    l = ((lane[:, 0] + lane[:, 2]).astype(F32) + (lane[:, 1] + lane[:, 3]).astype(F32)).astype(F32)
    bad = (l == 0) | np.isnan(l)
    inv = np.where(bad, F32(1), (F32(1) / np.where(bad, F32(1), l)).astype(F32))
    logl = fast_logf(np.where(bad, F32(1), l))  # __logf: lg2.approx.f32, FMUL by ln 2
    lse = fma32(m, np.full_like(m, scale), logl)  # contracted: max * scale + __logf(sum)
    lse = np.where(bad, F32(-np.inf) if split else F32(np.inf), lse)
    return (O * inv[:, None]).astype(F32), lse


def attention_head(q, k, v, fmt, causal, n_split=1, scale=None, want_lse=False):
    Lq, d = q.shape
    Lk = k.shape[0]
    if scale is None:
        scale = F32(1.0 / np.sqrt(d))
    scale_log2 = F32(np.float64(scale) * np.log2(np.e))  # host: float * M_LOG2E in double
    Q, K, V = decode16(q, fmt), decode16(k, fmt), decode16(v, fmt)
    eq, ek, ev = operand_exp(Q, fmt), operand_exp(K, fmt), operand_exp(V, fmt)
    split = n_split > 1
    bq, bk = traits(d, split)
    out = np.zeros((Lq, d), np.uint16)
    lse_all = np.zeros(Lq, F32)
    shift = (Lk - Lq) if causal else None
    for r0 in range(0, Lq, bq):
        rows = np.arange(r0, min(Lq, r0 + bq))
        n_max = (Lk + bk - 1) // bk
        if causal:
            n_max = min(n_max, (r0 + bq + Lk - Lq + bk - 1) // bk)
        if not split:
            O, m, lane = _rows_pass(Q, K, V, eq, ek, ev, rows, 0, n_max, bk, shift, scale_log2, fmt, Lk)
            Of, lse = _finish(O, m, lane, scale, False)
            out[rows] = encode16(Of, fmt)
            lse_all[rows] = lse
            continue
        n_total = (Lk + bk - 1) // bk
        per = (n_total + n_split - 1) // n_split
        parts, lses = [], []
        for s in range(n_split):
            lo, hi = s * per, min(n_max, (s + 1) * per)
            if lo >= hi:
                parts.append(np.zeros((len(rows), d), F32))
                lses.append(np.full(len(rows), -np.inf, F32))
                continue
            O, m, lane = _rows_pass(Q, K, V, eq, ek, ev, rows, lo, hi, bk, shift, scale_log2, fmt, Lk)
            Of, lse = _finish(O, m, lane, scale, True)
            parts.append(Of)
            lses.append(lse)
        Of, lse = combine(np.stack(parts), np.stack(lses))
        out[rows] = encode16(Of, fmt)
        lse_all[rows] = lse
    return (out, lse_all) if want_lse else out


def combine(parts, lses):
    """flash_fwd_splitkv_combine_kernel: lse_max over the splits, sum of expf(lse_s - lse_max)
    (libdevice expf, IEEE branch) per thread over l, then the xor butterfly over the
    kRowsPerLoadTranspose split lanes (T/2 first), lse = logf(sum) + lse_max (FADD), scales
    expf(lse_s - lse), O = fma(scale_s, O_s, O) in split order from 0."""
    ns = parts.shape[0]
    log_max = max(1, int(np.ceil(np.log2(ns))))
    kmax = 1 << log_max
    d = parts.shape[2]
    kblockm = 4 if d % 128 == 0 else (8 if d % 64 == 0 else 16)
    T = min(128 // kblockm, kmax)
    nl = (kmax * kblockm + 127) // 128
    L = np.full((kmax, lses.shape[1]), -np.inf, F32)
    L[:ns] = lses
    mx = L.max(axis=0)
    mx = np.where(mx == -np.inf, F32(0), mx).astype(F32)
    per = []
    for j in range(T):
        s = None
        for l_ in range(nl):
            sp = l_ * T + j
            e = expf((L[sp] - mx).astype(F32)) if sp < kmax else np.zeros_like(mx)
            s = e if s is None else (s + e).astype(F32)
        per.append(s)
    h = T // 2
    while h >= 1:
        per = [(per[j] + per[j ^ h]).astype(F32) for j in range(T)]
        h //= 2
    tot = per[0]
    bad = (tot == 0) | np.isnan(tot)
    lse = np.where(bad, F32(np.inf), (logf(np.where(bad, F32(1), tot)) + mx).astype(F32))
    O = np.zeros(parts.shape[1:], F32)
    for sp in range(ns):
        sc = expf((lses[sp] - lse).astype(F32))
        O = fma32(sc[:, None], parts[sp], O)
    return O, lse
