"""FlashMLA's sm90 dense decode (bf16) as vLLM 0.26.0 ships it (vllm/_flashmla_C.abi3.so), as a
numpy model, stage by stage (source: FlashMLA csrc/ at the layout of deepseek-ai/FlashMLA main
9241ae3, which vLLM's fork vllm-project/FlashMLA a6ec2ba follows; see FLASHMLA_NOTES.md). The
_flashmla_C target is compiled with vLLM's plain VLLM_GPU_FLAGS (no --use_fast_math): exp2f is
ex2.approx.f32 without .ftz, log2f lg2.approx.f32, logf libdevice's, '/' IEEE div.rn, a*b+c
contracted to FFMA, no FTZ anywhere.

Launch (csrc/api/dense_decode.h dense_attn_decode_interface): s_q == 1 turns causal off; the
q_seq_per_hk = s_q*h_q query rows of a request (row = s_q_idx*h_q + head, one KV head) are
cut into m-blocks of 64 rows; num_sm_parts = 132 / ceil(s_q*h_q/64) CTAs per m-block, each one
partition of tile_scheduler_metadata (csrc/params.h DecodingSchedMeta: begin_req, end_req
(inclusive), begin_block, end_block (exclusive, in 64-key pages), begin_split, is_first_req_split,
is_last_req_split, pad). Per request of a partition (splitkv_mla.cuh
flash_fwd_splitkv_mla_kernel): blocks [start, end) with start = begin_block (first request) else
0, end = end_block (last request) else ceil(seqlen/64); split index num_splits[b] +
(begin_split if first request else 0); no split when the request is whole in this partition.
Rows are independent; every stage below is per row.

1. S = Q K^T per 64-key page (warpgroup_cooperative_qkt_gemm[_no_pipeline]): HGMMA 64x64x16 bf16
   with FP32 accumulation over the 576 channels, zero-initialised. Pages alternate between the
   two warpgroups, relative to the split's start: page start+2j is warpgroup 0's (k order: 64-wide
   tiles 0..8 = channels 0..575), page start+2j+1 warpgroup 1's (PHASE 1: tiles 4..8 then 0..3,
   i.e. channels 256..575 then 0..255).
2. Pairs (page 2j "0", page 2j+1 "1"; the last pair may lack page 1). Masking in the last pairs:
   key >= right border (min(seqlen - causal mask len, end*64); seqlen when not causal) -> -1e33.
   wg0_bunch_0: mx0 = max_row(S0) (quad shuffle max), cur0 = mx0 * c (c =
   float(double(scale) * M_LOG2E)), new0 = max(m, cur0) with m = sM (initially -1e30),
   a0 = ex2(m - new0); O_L *= a0; P0 = ex2(fma(S0, c, -new0)); per lane t (columns 8j+2t, 8j+2t+1)
   sum0 = sum_j (P0[8j+2t] + P0[8j+2t+1]) in j order; L0[t] = fma(L0[t], a0, sum0);
   O_L += bf16(P0) V0[:, 0:256] (HGMMA 64x256x16 chain, k = the 64 keys in order).
   wg1_bunch_0: cur1 = max_row(S1) * c, new1 = max(new0, cur1), a1 = ex2(new0 - new1);
   P1 = ex2(fma(S1, c, -new1)); c1 = a1 * a0; O_R *= c1; L1[t] = fma(L1[t], c1, sum1);
   O_R += bf16(P1) V1[:, 256:512]; then O_R += bf16(P0 * a1) V0[:, 256:512] (wg0_scale_rP0, sP0).
   wg0: O_L *= a1; L0 *= a1 (wg0_rescale_rO0); O_L += bf16(P1) V1[:, 0:256] (sP1).
   m = new1. A pair without page 1: S1 all -1e33, a1 = 1, no P1 V1 products.
3. Epilogue: per warpgroup L = (L[0] + L[1]) + (L[2] + L[3]) (shfl xor 1 then 2), L = L_wg0 +
   L_wg1 (sL_reduction_wksp), L := 1 when 0 or NaN. Whole request: o = bf16(O / L) (div.rn),
   lse = logf(L) + m / (float)M_LOG2E. Split: oaccum = O / L (FP32), lseaccum = log2f(L) + m.
4. Combine (csrc/smxx/decode/combine/combine.cu flash_fwd_mla_combine_kernel, only for requests
   with > 1 split; MAX_SPLITS = 160 for 132 parts, 96 for 66): max_lse over splits; per lane l
   sum_l = sum_i ex2(lse[i*32+l] - max_lse) (missing splits: ex2(-inf) = 0), then a butterfly
   shfl_xor 16, 8, 4, 2, 1; g = log2f(sum) + max_lse; lse = g / (float)M_LOG2E;
   w_s = ex2(lse_s - g); o = bf16(fma(w_s, oaccum_s, ...) over s = 0.. in order, from 0).
"""
import numpy as np

from prims import F32, _special, block_fma_chain, decode16, encode16, fma32, operand_exp

M_LOG2E = F32(1.4426950408889634)
MAX_INIT_VAL_SM = F32(-1e30)
MAX_INIT_VAL = F32(-1e33)
PAGE = 64
TRACE = None  # set to a dict to collect intermediates (debugging)


def ex2(x):
    return _special("ex2", x, no_ftz=True)


def lg2(x):
    """lg2.approx.f32 (no .ftz): what log2f would be if it were the bare MUFU (not used)."""
    return _special("lg2", x, no_ftz=True)


def _b2f(u):
    return np.asarray(u, np.uint32).view(F32)


_LOG2F_COEF = (0xBE2C7F30, 0x3E2FCF2A, 0xBE374E43, 0x3E520BF4, 0xBE763C8B, 0x3E93BF99,
               0xBEB8AA49, 0x3EF6384A, 0xBF38AA3B)


def log2f(x):
    """CUDA's log2f (libdevice __nv_log2f), IEEE FMAs: numerics/special.cpp log2f_libdevice
    (there with FTZ FMAs, the same on these normal inputs): x < 2^-126 scaled by 2^23, exponent
    split at 0x3F3504F3, degree-10 polynomial in f = m - 1, e + (fma(f, log2e, f*(f*q)))."""
    x = np.asarray(x, F32)
    small = x < F32(2.0 ** -126)
    e0 = np.where(small, F32(-23), F32(0)).astype(F32)
    xs = np.where(small, (x * F32(8388608.0)).astype(F32), x).astype(F32)
    b = xs.view(np.uint32).astype(np.int64)
    ie = ((b - 0x3F3504F3) & 0xFFFFFFFF)
    ie = np.where(ie >= 2 ** 31, ie - 2 ** 32, ie) & -0x800000  # int32 & 0xFF800000
    f = (_b2f(((b - ie) & 0xFFFFFFFF).astype(np.uint32)) - F32(1)).astype(F32)
    e = fma32(ie.astype(F32), np.full(x.shape, F32(2.0 ** -23)), e0)
    q = np.full(x.shape, _b2f(0x3DC6B27F), F32)
    for cc in _LOG2F_COEF:
        q = fma32(q, f, np.full(x.shape, _b2f(cc), F32))
    r = (f * q).astype(F32)
    r = (f * r).astype(F32)
    r = fma32(f, np.full(x.shape, _b2f(0x3FB8AA3B), F32), r)
    res = (e + r).astype(F32)
    with np.errstate(invalid="ignore"):
        res = np.where(b >= 0x7F800000, fma32(xs, np.full(x.shape, F32(np.inf)),
                                             np.full(x.shape, F32(np.inf))), res)
    return res.astype(F32)


def logf(x):
    return _special("logf", x, no_ftz=True)


SCALE_FROM_DOUBLE = True
LANE_SUM_PAIRED = True
P_FUSED = True


def scale_log2(scale):
    if SCALE_FROM_DOUBLE:
        return F32(float(scale) * 1.4426950408889634074)
    return F32(float(F32(scale)) * 1.4426950408889634074)


ROT = np.r_[256:576, 0:256]  # warpgroup 1's k order (PHASE 1: tiles 4..8, 0..3)


def qk_scores(Q, eq, K, ek, rot):
    """S [R, N] for one warpgroup's pages: HGMMA chain over 576 channels in natural or rotated
    order (the k16 blocks of a 64-channel tile stay in order)."""
    if rot:
        Q, eq, K, ek = Q[:, ROT], eq[:, ROT], K[:, ROT], ek[:, ROT]
    C = np.zeros((Q.shape[0], K.shape[0]), F32)
    return block_fma_chain(Q, K, C, eq, ek)


def lane_sums(P):
    """Per lane t (0..3): sum_j (P[8j+2t] + P[8j+2t+1]), j = 0..7 in order (cur_sum in
    wg0_bunch_0 / wg1_bunch_0)."""
    R = P.shape[0]
    out = np.zeros((R, 4), F32)
    for t in range(4):
        s = np.zeros(R, F32)
        for j in range(8):
            if LANE_SUM_PAIRED:
                s = (s + (P[:, 8 * j + 2 * t] + P[:, 8 * j + 2 * t + 1])).astype(F32)
            else:
                s = ((s + P[:, 8 * j + 2 * t]).astype(F32) + P[:, 8 * j + 2 * t + 1]).astype(F32)
        out[:, t] = s
    return out


def pv(O, Pbits, V, ev):
    """O += P V for one 64-key page and one 256-wide half: HGMMA 64x256x16, k = keys in order."""
    P = decode16(Pbits, "bf16")
    return block_fma_chain(P, V.T, O, operand_exp(P, "bf16"), ev.T)


def run_split(Q, eq, Kall, ekall, seqlen, start, end, border, c):
    """One request's blocks [start, end) in one CTA. Q [R, 576] exact values, Kall [Lk, 576].
    Returns (O [R, 512] FP32 unnormalised, m [R], L [R]) at the end of the main loop."""
    R = Q.shape[0]
    nb = end - start
    npairs = (nb + 1) // 2
    k0, k1 = start * PAGE, min(end * PAGE, seqlen)
    # keys of the split, padded to whole pages (OOB: zero V, masked S)
    Npad = nb * PAGE
    K = np.zeros((Npad, 576))
    ek = np.full((Npad, 576), -20000, np.int64)
    K[:k1 - k0] = Kall[k0:k1]
    ek[:k1 - k0] = ekall[k0:k1]
    S = np.zeros((R, Npad), F32)
    page_of = np.arange(Npad) // PAGE
    for par in (0, 1):
        sel = (page_of % 2) == par
        if sel.any():
            S[:, sel] = qk_scores(Q, eq, K[sel], ek[sel], par == 1)
    key = k0 + np.arange(Npad)
    valid = key[None, :] < border[:, None]
    S = np.where(valid, S, MAX_INIT_VAL).astype(F32)
    # pad to whole pairs: a missing page 1 is all MAX_INIT_VAL
    Sp = np.full((R, npairs * 2 * PAGE), MAX_INIT_VAL, F32)
    Sp[:, :Npad] = S
    Sb = Sp.reshape(R, npairs, 2, PAGE)
    # running maxima: independent of the exponentials
    m = np.full(R, MAX_INIT_VAL_SM, F32)
    news, sargs = [], []
    for j in range(npairs):
        cur0 = (Sb[:, j, 0].max(axis=1) * c).astype(F32)
        new0 = np.maximum(m, cur0)
        cur1 = (Sb[:, j, 1].max(axis=1) * c).astype(F32)
        new1 = np.maximum(new0, cur1)
        sargs.append(((m - new0).astype(F32), (new0 - new1).astype(F32)))
        news.append((new0, new1))
        m = new1
    # all exponentials in one call
    new_arr = np.stack([np.stack(n, axis=1) for n in news], axis=1)  # [R, npairs, 2]
    if P_FUSED:
        pargs = fma32(Sb, np.full(Sb.shape, c, F32), -np.broadcast_to(new_arr[..., None], Sb.shape))
    else:
        pargs = ((Sb * c).astype(F32) - new_arr[..., None]).astype(F32)
    sa = np.stack([np.stack(s, axis=1) for s in sargs], axis=1)  # [R, npairs, 2]
    ex = ex2(np.concatenate([pargs.ravel(), sa.ravel()]))
    Pall = ex[:pargs.size].reshape(Sb.shape)
    Aall = ex[pargs.size:].reshape(sa.shape)
    V = K[:, :512]
    ev = ek[:, :512]
    Vp = np.zeros((npairs * 2 * PAGE, 512))
    evp = np.full((npairs * 2 * PAGE, 512), -20000, np.int64)
    Vp[:Npad], evp[:Npad] = V, ev
    OL = np.zeros((R, 256), F32)
    OR = np.zeros((R, 256), F32)
    L0 = np.zeros((R, 4), F32)
    L1 = np.zeros((R, 4), F32)
    for j in range(npairs):
        has1 = 2 * j + 1 < nb
        a0, a1 = Aall[:, j, 0], Aall[:, j, 1]
        P0, P1 = Pall[:, j, 0], Pall[:, j, 1]
        r0 = slice(2 * j * PAGE, (2 * j + 1) * PAGE)
        r1 = slice((2 * j + 1) * PAGE, (2 * j + 2) * PAGE)
        # warpgroup 0, bunch 0
        OL = (OL * a0[:, None]).astype(F32)
        L0 = fma32(L0, np.broadcast_to(a0[:, None], L0.shape), lane_sums(P0))
        OL = pv(OL, encode16(P0, "bf16"), Vp[r0, :256], evp[r0, :256])
        # warpgroup 1, bunch 0
        c1 = (a1 * a0).astype(F32)
        s1 = lane_sums(P1) if has1 else np.zeros((R, 4), F32)
        OR = (OR * c1[:, None]).astype(F32)
        L1 = fma32(L1, np.broadcast_to(c1[:, None], L1.shape), s1)
        if has1:
            OR = pv(OR, encode16(P1, "bf16"), Vp[r1, 256:], evp[r1, 256:])
        sP0 = encode16((P0 * a1[:, None]).astype(F32), "bf16")
        OR = pv(OR, sP0, Vp[r0, 256:], evp[r0, 256:])
        if has1:
            OL = (OL * a1[:, None]).astype(F32)
            L0 = (L0 * a1[:, None]).astype(F32)
            OL = pv(OL, encode16(P1, "bf16"), Vp[r1, :256], evp[r1, :256])
    q0 = ((L0[:, 0] + L0[:, 1]).astype(F32) + (L0[:, 2] + L0[:, 3]).astype(F32)).astype(F32)
    q1 = ((L1[:, 0] + L1[:, 1]).astype(F32) + (L1[:, 2] + L1[:, 3]).astype(F32)).astype(F32)
    L = (q0 + q1).astype(F32)
    return np.concatenate([OL, OR], axis=1), m, L


def butterfly_sum(x):
    """x [..., 32] per lane -> the value every lane holds after shfl_xor 16, 8, 4, 2, 1 adds."""
    x = np.asarray(x, F32).copy()
    lanes = np.arange(32)
    for off in (16, 8, 4, 2, 1):
        x = (x + x[..., lanes ^ off]).astype(F32)
    return x[..., 0]


def dense_decode(q, kv, seq_lens, s_q, h_q, scale, meta, num_splits, num_sm_parts=None):
    """q [b, s_q, h_q, 576] and kv rows [sum seq_lens, 576] as exact float64 values (bf16);
    meta [num_sm_parts, 8], num_splits [b+1] as recorded. Returns (o bf16 bits
    [b, s_q, h_q, 512], lse float32 [b, h_q, s_q])."""
    b = q.shape[0]
    R = s_q * h_q
    causal = s_q > 1
    c = scale_log2(scale)
    offs = np.r_[0, np.cumsum(seq_lens)]
    nparts = meta.shape[0]
    max_splits = 32
    for ms in (32, 64, 96, 128, 160):
        if nparts <= ms:
            max_splits = ms
            break
    o = np.zeros((b, s_q, h_q, 512), np.uint16)
    lse = np.zeros((b, h_q, s_q), F32)
    acc = {}  # split_idx -> (O [R,512], lse2 [R])
    Qr = q.reshape(b, R, 576)  # row = s_q_idx*h_q + head
    eqs = operand_exp(Qr, "bf16")
    Ks = [kv[offs[i]:offs[i + 1]] for i in range(b)]
    eks = [operand_exp(k, "bf16") for k in Ks]
    rows = np.arange(R)
    mask_len = (s_q - rows // h_q - 1) if causal else np.zeros(R, np.int64)
    for p in range(nparts):
        br, er, bb, eb, bs, f_split, l_split = (int(x) for x in meta[p, :7])
        if br >= b:
            continue
        for bi in range(br, er + 1):
            L_k = seq_lens[bi]
            start = bb if bi == br else 0
            end = eb if bi == er else -(-L_k // PAGE)
            no_split = (not f_split) if bi == br else ((not l_split) if bi == er else True)
            n_split_idx = bs if bi == br else 0
            if causal:
                # common mask: the m-block's last row (row 63, or 0 when out of range)
                common = []
                nmb = -(-R // 64)
                ends = np.zeros(R, np.int64)
                for mb in range(nmb):
                    g = mb * 64 + 63
                    cm = (s_q - g // h_q - 1) if g < R else 0
                    lb = -(-(L_k - cm) // PAGE)
                    e2 = min(end, lb) if bi == er else lb
                    ends[mb * 64:(mb + 1) * 64] = e2
                    common.append(e2)
                assert len(set(common)) == 1, "per-m-block ends differ: not modelled"
                end = common[0]
                border = np.minimum(L_k - mask_len, end * PAGE)
            else:
                border = np.full(R, L_k, np.int64)
            if start >= end:
                raise NotImplementedError("empty block range")
            O, m, L = run_split(Qr[bi], eqs[bi], Ks[bi], eks[bi], L_k, start, end, border, c)
            L = np.where((L == 0) | np.isnan(L), F32(1), L).astype(F32)
            On = (O / L[:, None]).astype(F32)
            if no_split:
                o[bi] = encode16(On, "bf16").reshape(s_q, h_q, 512)
                ls = (logf(L) + (m / M_LOG2E).astype(F32)).astype(F32)
                lse[bi] = ls.reshape(s_q, h_q).T
            else:
                split_idx = int(num_splits[bi]) + n_split_idx
                acc[split_idx] = (On, (log2f(L) + m).astype(F32))
                if TRACE is not None:
                    TRACE.setdefault("split", {})[split_idx] = dict(O=O, m=m, L=L, bi=bi)
    # combine
    for bi in range(b):
        s0, s1 = int(num_splits[bi]), int(num_splits[bi + 1])
        n = s1 - s0
        if n == 1:
            continue
        Os = np.stack([acc[s][0] for s in range(s0, s1)])  # [n, R, 512]
        ls = np.stack([acc[s][1] for s in range(s0, s1)])  # [n, R]
        mx = ls.max(axis=0)
        mx = np.where(mx == -np.inf, F32(0), mx).astype(F32)
        nl = -(-max_splits // 32)
        local = np.full((nl * 32, R), -np.inf, F32)
        local[:n] = ls
        e = ex2((local - mx[None, :]).astype(F32)).reshape(nl, 32, R)
        lane = np.zeros((32, R), F32)
        for i in range(nl):
            lane = (lane + e[i]).astype(F32)
        ssum = butterfly_sum(lane.T)  # [R]
        if TRACE is not None:
            TRACE.setdefault("combine", {})[bi] = dict(ls=ls, mx=mx, lane=lane, ssum=ssum, Os=Os)
        g = (log2f(ssum) + mx).astype(F32)
        g = np.where((ssum == 0) | (ssum == -np.inf), F32(np.inf), g).astype(F32)
        lse[bi] = (g / M_LOG2E).astype(F32).reshape(s_q, h_q).T
        w = ex2((ls - g[None, :]).astype(F32))  # [n, R]
        res = np.zeros((R, 512), F32)
        for s in range(n):
            res = fma32(np.broadcast_to(w[s][:, None], res.shape), Os[s], res)
        o[bi] = encode16(res, "bf16").reshape(s_q, h_q, 512)
    return o, lse


# ---------------------------------------------------------------------------------------------
# FP8 KV cache: vllm/_flashmla_extension_C (csrc/extension/sm90/dense_fp8/, FlashMLA PR #54),
# compiled WITH --use_fast_math (flashmla.cmake VLLM_FLASHMLA_GPU_FLAGS): exp2f / expf / logf /
# '/' become ex2.approx.ftz / ex2.ftz(x*log2e) / lg2.approx.ftz*ln2 / rcp.approx.ftz + FMUL, all
# FP32 arithmetic .ftz.

FP8_ROWSUM_FMA = True   # row_sum *= scale; row_sum += p0 contracted to one FFMA
FP8_LSE_FMA = True      # row_max * scale + __logf(sum) as one FFMA
FP8_QUAD_XOR2_FIRST = True  # Allreduce<4>: shfl_xor 2 then 1
FP8_DIV_APPROX = True   # descale_k / sum as FMUL.FTZ(descale_k, rcp.approx.ftz(sum))


def _fp8_prims():
    from prims import ex2_ftz, fadd_ftz, fmul_ftz, ftz, lg2_ftz, rcp_ftz

    def ffma_ftz(a, b, c):  # FFMA.FTZ: flushed operands, one rounding, subnormal result -> 0
        return ftz(fma32(ftz(a), ftz(b), ftz(c)))
    return ex2_ftz, fadd_ftz, ffma_ftz, fmul_ftz, lg2_ftz, rcp_ftz


def fp8_split(Q8, K8, seqlen, nb_min, nb_max, c2, sc, dk):
    """flash_fwd_mla_kernel.h compute_attn_1rowblock_splitkv_mla for one request's blocks
    [nb_min, nb_max), descending. Q8 [R, 576], K8 [Lk, 576] exact e4m3 values (not descaled).
    c2 = scale_softmax_log2*dq*dk, sc = scale_softmax*dq*dk. Returns (O normalised FP32, lse)."""
    from fa3_sm90 import qgmma_chain
    import ml_dtypes
    ex2_ftz, fadd_ftz, ffma_ftz, fmul_ftz, lg2_ftz, rcp_ftz = _fp8_prims()
    R = Q8.shape[0]
    O = np.zeros((R, 512), F32)
    mx = None
    lanes = np.zeros((R, 4), F32)
    first = True
    for nbk in range(nb_max - 1, nb_min - 1, -1):
        k0 = nbk * PAGE
        nk = min(seqlen, k0 + PAGE) - k0
        Kb = np.zeros((PAGE, 576))
        Kb[:nk] = K8[k0:k0 + nk]
        S = qgmma_chain(Q8, Kb, np.zeros((R, PAGE), F32))
        if first:  # the masking step (non-causal): col >= seqlen - n_block*64
            S[:, nk:] = -np.inf
        bmax = S.max(axis=1).astype(F32)
        if first:
            mnew = bmax
            alpha = np.zeros(R, F32)
        else:
            mnew = np.maximum(mx, bmax)
            alpha = ex2_ftz(fmul_ftz(fadd_ftz(mx, -mnew), np.full(R, c2, F32)))
        ms = fmul_ftz(mnew, np.full(R, c2, F32))
        p = ex2_ftz(ffma_ftz(S, np.full(S.shape, c2, F32),
                             np.broadcast_to(-ms[:, None], S.shape).astype(F32)))
        for t in range(4):
            cols = [8 * j + 2 * t + e for j in range(8) for e in (0, 1)]
            if first:
                s = p[:, cols[0]].copy()
            elif FP8_ROWSUM_FMA:
                s = ffma_ftz(lanes[:, t], alpha, p[:, cols[0]])
            else:
                s = fadd_ftz(fmul_ftz(lanes[:, t], alpha), p[:, cols[0]])
            for cc in cols[1:]:
                s = fadd_ftz(s, p[:, cc])
            lanes[:, t] = s
        O = fmul_ftz(O, np.broadcast_to(alpha[:, None], O.shape).astype(F32))
        P8 = np.clip(p, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
        Vt = np.zeros((512, PAGE))
        Vt[:, :nk] = K8[k0:k0 + nk, :512].T
        O = qgmma_chain(P8, Vt, O)
        mx = mnew
        first = False
    # normalize_softmax_lse: quad all-reduce xor 2 then xor 1
    if FP8_QUAD_XOR2_FIRST:
        L = fadd_ftz(fadd_ftz(lanes[:, 0], lanes[:, 2]), fadd_ftz(lanes[:, 1], lanes[:, 3]))
    else:
        L = fadd_ftz(fadd_ftz(lanes[:, 0], lanes[:, 1]), fadd_ftz(lanes[:, 2], lanes[:, 3]))
    if FP8_DIV_APPROX:
        inv = fmul_ftz(np.full(R, dk, F32), rcp_ftz(L))
    else:
        inv = (F32(dk) / L).astype(F32)
    lg = fmul_ftz(lg2_ftz(L), np.full(R, F32(0.6931471805599453), F32))
    if FP8_LSE_FMA:
        lse = ffma_ftz(mx, np.full(R, sc, F32), lg)
    else:
        lse = fadd_ftz(fmul_ftz(mx, np.full(R, sc, F32)), lg)
    On = fmul_ftz(O, np.broadcast_to(inv[:, None], O.shape).astype(F32))
    return On, lse


def fast_expf(x):
    ex2_ftz, _, _, fmul_ftz, _, _ = _fp8_prims()
    return ex2_ftz(fmul_ftz(x, np.full(np.shape(x), F32(1.4426950408889634), F32)))


def fast_logf(x):
    _, _, _, fmul_ftz, lg2_ftz, _ = _fp8_prims()
    return fmul_ftz(lg2_ftz(x), np.full(np.shape(x), F32(0.6931471805599453), F32))


def dense_decode_fp8(q8, kv8, seq_lens, s_q, h_q, scale, q_scale, k_scale, meta, num_splits):
    """q8 [b, s_q, h_q, 576], kv8 rows [sum seq_lens, 576]: exact e4m3 values; meta
    [num_sm_parts, 8] (begin_req, begin_seqlen, end_req, end_seqlen, begin_split, pad x3:
    flash_fwd_mla_metadata.cu), num_splits [b+1]. Returns (o bf16 bits, lse [b, h_q, s_q])."""
    _, fadd_ftz, ffma_ftz, fmul_ftz, _, _ = _fp8_prims()
    assert s_q == 1, "causal FP8 not modelled"
    b = q8.shape[0]
    R = s_q * h_q
    dq, dk = F32(q_scale), F32(k_scale)
    c2 = fmul_ftz(fmul_ftz(np.array(scale_log2(scale), F32), dq), dk)
    sc = fmul_ftz(fmul_ftz(np.array(F32(scale), F32), dq), dk)
    offs = np.r_[0, np.cumsum(seq_lens)]
    nparts = meta.shape[0]
    max_splits = next(ms for ms in (32, 64, 96, 128, 160) if nparts <= ms)
    o = np.zeros((b, s_q, h_q, 512), np.uint16)
    lse = np.zeros((b, h_q, s_q), F32)
    acc = {}
    Qr = q8.reshape(b, R, 576)
    for p in range(nparts):
        bi0, bsl, ei, esl, bs = (int(x) for x in meta[p, :5])
        if bi0 >= b or bi0 < 0:
            continue
        for bi in range(bi0, ei + 1):
            L_k = seq_lens[bi]
            nmin = bsl // PAGE if bi == bi0 else 0
            nmax = -(-esl // PAGE) if bi == ei else -(-L_k // PAGE)
            nosplit = nmin == 0 and nmax == -(-L_k // PAGE)
            On, ls = fp8_split(Qr[bi], kv8[offs[bi]:offs[bi + 1]], L_k, nmin, nmax, c2, sc, dk)
            if nosplit:
                o[bi] = encode16(On, "bf16").reshape(s_q, h_q, 512)
                lse[bi] = ls.reshape(s_q, h_q).T
            else:
                acc[int(num_splits[bi]) + (bs if bi == bi0 else 0)] = (On, ls)
    for bi in range(b):
        s0, s1 = int(num_splits[bi]), int(num_splits[bi + 1])
        n = s1 - s0
        if n <= 1:
            continue
        Os = np.stack([acc[s][0] for s in range(s0, s1)])
        ls = np.stack([acc[s][1] for s in range(s0, s1)])
        mx = ls.max(axis=0)
        mx = np.where(mx == -np.inf, F32(0), mx).astype(F32)
        nl = -(-max_splits // 32)
        local = np.full((nl * 32, R), -np.inf, F32)
        local[:n] = ls
        e = fast_expf(fadd_ftz(local, -np.broadcast_to(mx[None, :], local.shape))).reshape(nl, 32, R)
        lane = np.zeros((32, R), F32)
        for i in range(nl):
            lane = fadd_ftz(lane, e[i])
        x = lane.T.copy()
        lanes_ = np.arange(32)
        for off in (16, 8, 4, 2, 1):
            x = fadd_ftz(x, x[:, lanes_ ^ off])
        ssum = x[:, 0]
        if TRACE is not None:
            TRACE.setdefault("combine8", {})[bi] = dict(ls=ls, mx=mx, ssum=ssum, lane=lane, e=e)
        g = fadd_ftz(fast_logf(ssum), mx)
        g = np.where((ssum == 0) | np.isnan(ssum), F32(np.inf), g).astype(F32)
        lse[bi] = g.reshape(s_q, h_q).T
        w = fast_expf(fadd_ftz(ls, -np.broadcast_to(g[None, :], ls.shape)))
        res = np.zeros((R, 512), F32)
        for s in range(n):
            res = ffma_ftz(np.broadcast_to(w[s][:, None], res.shape).astype(F32), Os[s], res)
        o[bi] = encode16(res, "bf16").reshape(s_q, h_q, 512)
    return o, lse
