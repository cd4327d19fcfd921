"""cuDNN 9.19's runtime-compiled SDPA forward for sm_90 (cudnn_generated_fort_native_sdpa_sm90_
flash_fprop_wgmma_f16_knob_7_64x128x{64,128}), as its SASS computes it (sim/sdpa/README.md):
64-query x 128-key tiles, S by chained HGMMA k16 blocks from zero, the max in scaled units,
p = ex2.approx.ftz(fl(c s) - m) with FMUL.FTZ and FADD.FTZ (no FMA), per-lane block sums then
l = fma(alpha, l, s_blk), O *= alpha then O += P V (P rounded to the input type), quad butterfly
(xor 1 then 2), O * rcp.approx.ftz(l)."""
import numpy as np

from prims import (F32, block_fma_chain, decode16, encode16, ex2_ftz, fadd_ftz, ffma_ftz, fmul_ftz,
                   lg2_ftz, operand_exp, rcp_ftz)

LOG2E = F32(1.4426950216293334961)  # fl32(log2 e), the FMUL.FTZ immediate


def attention_head(q, k, v, fmt, causal, scale=None, bq=64, bk=128, kv_order="asc",
                   lane_combine="xor1_then_xor2", want_state=False):
    """One (batch, head): q [Lq, d], k/v [Lk, d] as 16-bit patterns. Returns output bits [Lq, d]
    and the final (m, l) per row."""
    Lq, d = q.shape
    Lk = k.shape[0]
    if scale is None:
        scale = F32(1.0 / np.sqrt(d))
    c = fmul_ftz(np.array([scale], F32), np.array([LOG2E], F32))[0]
    Q, K, V = decode16(q, fmt), decode16(k, fmt), decode16(v, fmt)
    eq, ek, ev = operand_exp(Q, fmt), operand_exp(K, fmt), operand_exp(V, fmt)
    out = np.zeros((Lq, d), np.uint16)
    ms = np.zeros(Lq, F32)
    ls = np.zeros(Lq, F32)
    nblk = (Lk + bk - 1) // bk
    order = range(nblk) if kv_order == "asc" else range(nblk - 1, -1, -1)
    for r0 in range(0, Lq, bq):
        rows = np.arange(r0, min(Lq, r0 + bq))
        nr = len(rows)
        m = np.full(nr, -np.inf, F32)
        lane = np.zeros((nr, 4), F32)
        O = np.zeros((nr, d), F32)
        for j in order:
            k0 = j * bk
            kv = np.arange(k0, min(Lk, k0 + bk))
            if causal and kv[0] > rows[-1]:
                continue
            S = block_fma_chain(Q[rows], K[kv], np.zeros((nr, len(kv)), F32), eq[rows], ek[kv])
            Sf = np.full((nr, bk), -np.inf, F32)
            Sf[:, :len(kv)] = S
            if causal:
                cols = k0 + np.arange(bk)
                Sf[cols[None, :] > rows[:, None]] = -np.inf
            rmax = Sf.max(axis=1)
            m_new = np.maximum(fmul_ftz(np.full(nr, c, F32), rmax), m)
            live = m_new != -np.inf
            alpha = ex2_ftz(np.where(live, fadd_ftz(m, -m_new), m))
            m_use = np.where(live, m_new, F32(0))
            x = fadd_ftz(fmul_ftz(np.full(Sf.shape, c, F32), Sf), -m_use[:, None])
            p = ex2_ftz(x)
            for t in range(4):
                cols = np.array([8 * jj + 2 * t + e for jj in range(bk // 8) for e in (0, 1)])
                s = np.zeros(nr, F32)
                for cc in cols:
                    s = fadd_ftz(s, p[:, cc])
                lane[:, t] = ffma_ftz(alpha, lane[:, t], s)
            O = fmul_ftz(O, alpha[:, None])
            P = decode16(encode16(p, fmt), fmt)
            Vt = np.zeros((d, bk))
            Vt[:, :len(kv)] = V[kv].T
            evt = np.full((d, bk), -20000, np.int64)
            evt[:, :len(kv)] = ev[kv].T
            O = block_fma_chain(P, Vt, O, operand_exp(P, fmt), evt)
            m = m_new
        if lane_combine == "xor1_then_xor2":
            l = fadd_ftz(fadd_ftz(lane[:, 0], lane[:, 1]), fadd_ftz(lane[:, 2], lane[:, 3]))
        else:
            l = fadd_ftz(fadd_ftz(lane[:, 0], lane[:, 2]), fadd_ftz(lane[:, 1], lane[:, 3]))
        inv = np.where(l != 0, rcp_ftz(np.where(l != 0, l, F32(1))), l)
        out[rows] = encode16(fmul_ftz(O, inv[:, None]), fmt)
        ms[rows], ls[rows] = m, l
    return (out, ms, ls) if want_state else out


LN2 = F32(0.6931471805599453094)


def lse_of(m, l):
    """The LSE the stats output holds: fma(m, ln 2, fl(lg2.approx.ftz(l) * ln 2)) (m in log2
    units), -inf for l = 0 (`__logf`, `max * ln2` contracted into one FFMA.FTZ)."""
    from prims import ffma_ftz, fmul_ftz, lg2_ftz
    bad = l == 0
    logl = fmul_ftz(lg2_ftz(np.where(bad, F32(1), l)), np.full_like(l, LN2))
    return np.where(bad, F32(-np.inf), ffma_ftz(m, np.full_like(m, LN2), logl)).astype(F32)
