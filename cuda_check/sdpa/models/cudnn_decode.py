"""cuDNN 9.19's decode SDPA (Lq = 1) on the H100, as its SASS computes it: the runtime-compiled
`cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35_16x128x{64,128}_1x4x1` kernel
(mma.sync HMMA.16816.F32, 128 threads = 4 warps, 16 query rows x 128 keys per tile) and, for long
KV, its split-KV form (strided tiles per split) merged by `cudnn::fusion::lean_reduction_kernel<false, false, false>`.
SASS: data/hw/h100/sdpa/cudnn_decode_sass.csv.gz (ncu source page; sections 0/1/4/7 the attention
kernels of the four shapes of cuda_check/sdpa/sass_targets.py --decode, the others lean_reduction).
Addresses below are the low 5 hex digits of section 0 (dec500 fp16 d128, unsplit variant) unless
said otherwise. Findings and match rates: CUDNN_DECODE_NOTES.md.

Work unit: one (batch, KV head); the G = Hq / Hkv query heads of a GQA group are rows of the
16-row Q tile (the split counts recorded in invariance_h100.h5 follow B * Hkv, not B * Hq). Rows
never mix, so each row below is computed on its own.

Per split (a range of 128-key tiles, ascending; the unsplit kernel has one split of all tiles):
 1. S = Q K^T by an HMMA.16816.F32 chain over d in k16 blocks, natural order, from C = 0
    (b3090..b36b0: 8 k-steps for d 128, B fragments LDSM'd at swizzle offsets ^0x20, ^0x40, ^0x60,
    then +0x4000). Warp w owns keys 32w..32w+31 of the tile (R146 = tile*128 + (tid & 0x60) +
    2*(tid & 3): the key index the masks test).
 2. s' = FMUL.FTZ(S, scale) with scale = c[0x3d8] (fl32(1/sqrt(d)), a float kernel parameter),
    keys >= Lk set to -inf (FSEL ... -INF), b36d0..b3b50.
 3. Tile max: per-thread FMNMX.FTZ over its 8 keys, SHFL.BFLY xor 1 then xor 2, then
    FMUL.FTZ(max, 1.4426950216293334961) and ATOMS.MAX.S32 (ATOMS.MIN for negative bit patterns)
    into a shared running max that is never reset inside the loop (b3e50..b3f20). After the
    barrier every thread reads m_new = max(m_old, max_j fl(fl(s_j*scale)*log2e)).
 4. x_j = FMUL.FTZ(s'_j, log2e); if m_new != -inf: x_j = FADD.FTZ(x_j, -m_new) (b3f50..b41a0);
    p_j = MUFU.EX2 (ex2.approx.ftz). alpha = ex2(fl(m_old - m_new)) (ex2(m_old) = 0 when
    m_new = -inf; m_old = -inf on the first tile).
    (Two roundings: fl(fl(s*scale)*log2e), where the sm90 prefill kernel uses fl(s*fl(scale*log2e)).)
 5. Row sum: each thread (warp w, quad lane t) adds its 8 p from 0 with FADD.FTZ in key order
    2t, 2t+1, 8+2t, 9+2t, 16+2t, 17+2t, 24+2t, 25+2t (of its warp's 32 keys; b41e0..b4470). The 4
    warps' partials of lane t go into one shared float zeroed every tile by an atomic add
    (ATOMS.CAST.SPIN loop with a plain, non-FTZ FADD, b48b0..b4960): S_t = ((b_w0 + b_w1) + b_w2)
    + b_w3 in the order the warps get there (WARP_ORDER below, fit per kernel). Then every thread does
    l_t = FFMA.FTZ(alpha, l_t, S_t) (b4a80).
 6. O_w = FMUL.FTZ(O_w, alpha) (b44a0..b4890: every tile, O_w starts at 0), P rounded to the input
    type (F2FP.PACK_AB), O_w = HMMA chain of P (keys 0-15 then 16-31 of the warp) times V onto O_w
    (b4b30..b5230): each warp keeps its own O over all d for its 32 keys.
Epilogue: O = (O_0 + O_2) + (O_1 + O_3) (FADD.FTZ through shared memory, warps 2/3 store, 0/1 add,
then warp 1 stores, warp 0 adds: b54b0..b6170); l = (l_0 + l_1) + (l_2 + l_3) over the quad
(SHFL.BFLY xor 1 then xor 2, b6190..b6220).
 - unsplit kernel: out = cvt.rn(FMUL.FTZ(O, rcp.approx.ftz(l))) (0 where l = 0), b6240..b6740;
   its LSE (the stats variant, not in the captured SASS) fits FFMA.FTZ(lg2(l), ln2, FMUL.FTZ(m, ln2)).
 - split kernel (section 1, c8fd0..c9d10): writes m_s = FMUL.FTZ(m, 0.69314718246459960938) (the
   max in natural-log units), l_s, and O_s unnormalised (float32).
lean_reduction_kernel (section 2, cc3c0..cd410), per output row, partials in split order:
   m = m_0, l = l_0, O = O_0; for each next split i: m' = FMNMX(m, m_i);
   if m' != -inf: a_i = ex2(FMUL.FTZ(FADD.FTZ(m_i, -m'), log2e)), a = ex2(FMUL.FTZ(FADD.FTZ(m, -m'),
   log2e)) else both 0; O = FFMA.FTZ(a, O, FMUL.FTZ(O_i, a_i)); l = FFMA.FTZ(a, l, FMUL.FTZ(l_i, a_i));
   m = m'. Then out = cvt.rn(FMUL.FTZ(rcp.approx.ftz(l), O)) (rcp only if l != 0, else 1) and
   LSE = FFMA.FTZ(lg2.approx.ftz(l), ln2, m) (cd360..cd3d0).
Split partition (read + fit): the split kernel's grid is (S splits, row blocks, batch); split x
starts at tile x and steps by the compiled constant S (section 1: R0 = CTAID.X * 128 + row,
`VIADD R25, R27, 0x20` then `ISETP.GE ... UR8` (n_tiles) for S = 32; 256 CTAs = 8 units x 32 for
dec4097_d128, 64 = 2 x 32 for dec4097_gqa_d64), tiles ascending inside a split; lean_reduction
merges the partials in split order 0, 1, ..., S-1 (its loop walks the partial index upwards: 31
merges per row for S = 32, sections 2/5). S per launch: n_splits_for (fit on every recorded launch).
"""
import numpy as np

from prims import (F32, block_fma_chain, decode16, encode16, ex2_ftz, fadd_ftz, ffma_ftz, fmul_ftz,
                   lg2_ftz, operand_exp, rcp_ftz)

LOG2E = F32(1.4426950216293334961)  # FMUL.FTZ immediate
LN2 = F32(0.69314718246459960938)  # FMUL.FTZ / FFMA.FTZ immediate
BK = 128
# Order in which the 4 warps' atomic adds reach the per-lane tile sum (a race in principle; fit per
# kernel, and only the unordered first pair matters): d 128 {0, 2} then 1 then 3, d 64 {3, 2} then
# 1 then 0 (CUDNN_DECODE_NOTES.md).
WARP_ORDER = {128: (0, 2, 1, 3), 64: (3, 2, 1, 0)}


def n_splits_for(units, lk, d):
    """Partials per row (the split kernel's compiled stride S; 1 = the unsplit kernel) for `units`
    = batch x KV heads rows of work. Fit (NOTES): recorded S = 32 for 8 and 2 units of 4,097 keys,
    the unsplit kernel for 2 units of 500 keys and for 128 or more units of 2,048-4,096 keys."""
    nt = -(-lk // BK)
    if nt < 8 or units >= 128:
        return 1
    s = 1
    while s * 2 <= min(32, 256 // units, nt):
        s *= 2
    return s


def fadd_rn(a, b):
    """FADD (no .ftz) as the atomic CAS loop does it."""
    return (np.asarray(a, F32) + np.asarray(b, F32)).astype(F32)


def lane_cols(t):
    """A quad lane's 8 key columns within its warp's 32 keys, in its summation order."""
    return [8 * jj + 2 * t + e for jj in range(4) for e in (0, 1)]


def split_tiles(n_tiles, n_splits):
    """Split s of the split kernel takes tiles s, s + S, s + 2S, ... (ascending; the loop adds the
    compiled constant S to the tile index: section 1 c5fc0 `VIADD R25, R27, 0x20` for S = 32)."""
    return [list(range(s, n_tiles, n_splits)) for s in range(min(n_splits, n_tiles))]


def split_pass(Q, K, V, fmt, tiles, scale, warp_order):
    """The tiles `tiles` (in order) of the decode kernel for a batch of units: Q [U, R, d], K/V [U, Lk, d] as
    exact float64 values. Returns m (log2 units) [U, R], l [U, R], O [U, R, d] float32 (unnormalised)."""
    U, R, d = Q.shape
    Lk = K.shape[1]
    eq, ek, ev = operand_exp(Q, fmt), operand_exp(K, fmt), operand_exp(V, fmt)
    m = np.full((U, R), -np.inf, F32)
    lane = np.zeros((U, R, 4), F32)
    O = np.zeros((4, U, R, d), F32)
    sc = F32(scale)
    wo = np.broadcast_to(np.asarray(warp_order, np.int64).reshape(-1, 4), (U, 4))
    for j in tiles:
        k0 = j * BK
        n = min(Lk, k0 + BK) - k0
        Kt = np.zeros((U, BK, d))
        Kt[:, :n] = K[:, k0:k0 + n]
        ekt = np.full((U, BK, d), -20000, np.int64)
        ekt[:, :n] = ek[:, k0:k0 + n]
        S = block_fma_chain(Q, Kt, np.zeros((U, R, BK), F32), eq, ekt)
        s1 = fmul_ftz(S, np.full(S.shape, sc, F32))
        s1[:, :, n:] = -np.inf
        x = fmul_ftz(s1, np.full(S.shape, LOG2E, F32))
        m_new = np.maximum(m, x.max(axis=2))
        live = m_new != -np.inf
        xs = np.where(live[..., None], fadd_ftz(x, -np.where(live, m_new, F32(0))[..., None]), x)
        a_arg = np.where(live, fadd_ftz(m, -np.where(live, m_new, F32(0))), m)
        e = ex2_ftz(np.concatenate([xs.reshape(-1), a_arg.reshape(-1)]))
        p = e[:xs.size].reshape(xs.shape)
        alpha = e[xs.size:].reshape(m.shape)
        for t in range(4):
            b = np.zeros((4, U, R), F32)
            for w in range(4):
                for c in lane_cols(t):
                    b[w] = fadd_ftz(b[w], p[:, :, 32 * w + c])
            tot = np.zeros((U, R), F32)
            for i in range(4):
                tot = fadd_rn(tot, b[wo[:, i], np.arange(U)])
            lane[:, :, t] = ffma_ftz(alpha, lane[:, :, t], tot)
        P = decode16(encode16(p, fmt), fmt)
        eP = operand_exp(P, fmt)
        for w in range(4):
            Ow = fmul_ftz(O[w], alpha[..., None])
            kk = np.arange(k0 + 32 * w, k0 + 32 * w + 32)
            ok = kk < Lk
            Vt = np.zeros((U, d, 32))
            evt = np.full((U, d, 32), -20000, np.int64)
            Vt[:, :, ok] = np.swapaxes(V[:, kk[ok]], 1, 2)
            evt[:, :, ok] = np.swapaxes(ev[:, kk[ok]], 1, 2)
            O[w] = block_fma_chain(P[:, :, 32 * w:32 * w + 32], Vt, Ow,
                                   eP[:, :, 32 * w:32 * w + 32], evt)
        m = m_new
    Osum = fadd_ftz(fadd_ftz(O[0], O[2]), fadd_ftz(O[1], O[3]))
    l = fadd_ftz(fadd_ftz(lane[..., 0], lane[..., 1]), fadd_ftz(lane[..., 2], lane[..., 3]))
    return m, l, Osum


def normalise(O, l, fmt):
    nz = l != 0
    inv = np.where(nz, rcp_ftz(np.where(nz, l, F32(1))), F32(0))
    return encode16(fmul_ftz(O, inv[..., None]), fmt)


def lean_merge(parts, fmt):
    """lean_reduction_kernel: parts = [(m_nat, l, O), ...] in merge order; returns (out bits, LSE)."""
    m, l, O = parts[0]
    for mi, li, Oi in parts[1:]:
        mn = np.maximum(m, mi)
        live = mn != -np.inf
        z = np.where(live, mn, F32(0))
        args = np.concatenate([fmul_ftz(fadd_ftz(mi, -z), np.full(mi.shape, LOG2E, F32)).ravel(),
                               fmul_ftz(fadd_ftz(m, -z), np.full(m.shape, LOG2E, F32)).ravel()])
        e = ex2_ftz(args)
        ai = np.where(live, e[:mi.size].reshape(mi.shape), F32(0))
        a = np.where(live, e[mi.size:].reshape(m.shape), F32(0))
        O = ffma_ftz(np.broadcast_to(a[..., None], O.shape), O, fmul_ftz(Oi, ai[..., None]))
        l = ffma_ftz(a, l, fmul_ftz(li, ai))
        m = mn
    nz = l != 0
    inv = np.where(nz, rcp_ftz(np.where(nz, l, F32(1))), F32(1))
    out = encode16(fmul_ftz(np.broadcast_to(inv[..., None], O.shape), O), fmt)
    lg = lg2_ftz(np.where(nz, l, F32(1)))
    lse = np.where(nz, ffma_ftz(lg, np.full(lg.shape, LN2, F32), m), F32(-np.inf)).astype(F32)
    return out, lse


def lse_unsplit(m, l):
    """LSE of the unsplit kernel: FFMA.FTZ(lg2.approx.ftz(l), ln2, FMUL.FTZ(m, ln2)), the
    lean_reduction form on the max the split epilogue writes (fit: 8 of 8 dec500 values per dtype;
    the sm90 prefill form fma(m, ln2, fl(lg2(l) ln2)) misses 1)."""
    nz = l != 0
    lg = lg2_ftz(np.where(nz, l, F32(1)))
    mn = fmul_ftz(m, np.full(m.shape, LN2, F32))
    return np.where(nz, ffma_ftz(lg, np.full(lg.shape, LN2, F32), mn), F32(-np.inf)).astype(F32)


def decode(q, k, v, fmt, n_splits=1, scale=None, warp_order=None, merge_order="asc"):
    """Decode attention for q [B, Hq, 1, d], k/v [B, Hkv, Lk, d] (16-bit patterns) with the unsplit
    kernel (n_splits = 1) or the split kernel with n_splits partials per row + lean_reduction.
    Returns out [B, Hq, 1, d] uint16 and LSE [B, Hq, 1] float32."""
    B, Hq, Lq, d = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    assert Lq == 1
    G = Hq // Hkv
    if scale is None:
        scale = F32(1.0 / np.sqrt(d))
    if warp_order is None:
        warp_order = WARP_ORDER.get(d, (0, 2, 1, 3))
    U = B * Hkv
    Q = decode16(q, fmt).reshape(U, G, d)
    K = decode16(k, fmt).reshape(U, Lk, d)
    V = decode16(v, fmt).reshape(U, Lk, d)
    nt = -(-Lk // BK)
    if n_splits <= 1:
        m, l, O = split_pass(Q, K, V, fmt, range(nt), scale, warp_order)
        out = normalise(O, l, fmt)
        lse = lse_unsplit(m, l)
    else:
        parts = []
        for tiles in split_tiles(nt, n_splits):
            m, l, O = split_pass(Q, K, V, fmt, tiles, scale, warp_order)
            parts.append((fmul_ftz(m, np.full(m.shape, LN2, F32)), l, O))
        if merge_order == "desc":
            parts = parts[::-1]
        out, lse = lean_merge(parts, fmt)
    return out.reshape(B, Hq, 1, d), lse.reshape(B, Hq, 1)
