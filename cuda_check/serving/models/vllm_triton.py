"""vLLM's Triton `unified_attention` (vLLM 0.26.0,
vllm/v1/attention/ops/triton_unified_attention.py; Triton 3.6 on an H100) bit for bit in numpy:
the 2D kernel (one program per q-block and KV head, the whole KV range), the 3D kernel (16 KV
segments per sequence) and `reduce_segments`, fp16/bf16, paged KV (the block table moves data
only), FP8 e4m3 KV with per-tensor scales, causal, sliding window, softcap and sinks. The
arithmetic and where each step is read from (PTX/SASS of the compiled kernels) are in
VLLM_NOTES.md."""
import os
import sys

import ml_dtypes
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
sys.path.insert(0, os.path.join(HERE, "..", "..", "sdpa", "models"))
sys.path.insert(0, os.path.join(HERE, ".."))

import prims  # noqa: E402
from prims import F32, block_fma_chain, decode16, encode16, fma32, operand_exp  # noqa: E402

LOG2E = np.uint32(0x3FB8AA3B).view(np.float32)  # tl.exp: mul.f32 x, 0f3FB8AA3B then ex2

try:  # the attnsim package of the build (in-process; prims.py runs the command line)
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
    import attnsim as _attnsim

    def ex2(x):
        """ex2.approx.f32 (no .ftz): FSETP.GEU x, -126, halve, MUFU.EX2, square."""
        x = np.ascontiguousarray(x, np.float32)
        return _attnsim.special("ex2", x.ravel(), ftz=False).reshape(x.shape)

    def rcp_ftz(x):
        x = np.ascontiguousarray(x, np.float32)
        return _attnsim.special("rcp", x.ravel(), ftz=True).reshape(x.shape)
except ImportError:  # pragma: no cover
    ex2, rcp_ftz = prims.ex2, prims.rcp_ftz


def div_full(a, b):
    """div.full.f32 as ptxas emits it (SASS: FSETP.GT |b| > 2^126 -> both * 0.25; FSETP.GEU
    |b| >= 2^-126 else both * 2^24; MUFU.RCP b; FMUL), numerics/special.cpp div_full."""
    a, b = np.broadcast_arrays(np.asarray(a, F32), np.asarray(b, F32))
    a, b = a.astype(F32).copy(), b.astype(F32).copy()
    with np.errstate(over="ignore", invalid="ignore"):
        big = np.abs(b) > F32(2.0 ** 126)
        small = np.abs(b) < F32(2.0 ** -126)
        a = np.where(big, a * F32(0.25), np.where(small, a * F32(2.0 ** 24), a)).astype(F32)
        b = np.where(big, b * F32(0.25), np.where(small, b * F32(2.0 ** 24), b)).astype(F32)
        return (rcp_ftz(b) * a).astype(F32)


def k_order(K, k_width):
    """The order of the reduction axis as the m16n8k16 instructions consume it. kWidth 2 (16-bit
    operands): natural k16 blocks. kWidth 4 (the dot operands when K/V are upcast from 8 bits,
    ttgir `dot_op<{..., kWidth = 4}>`): a thread loads 4 consecutive k (ld.shared.v2.b32) and gives
    the first pair to one instruction and the second to the next, so over each 32-wide k chunk
    the first instruction sums the k with k mod 4 < 2, the second the rest."""
    if k_width == 2 or K < 32:
        return None
    assert k_width == 4 and K % 32 == 0, (K, k_width)
    c = np.arange(32)
    one = np.concatenate([c[c % 4 < 2], c[c % 4 >= 2]])
    return np.concatenate([k0 + one for k0 in range(0, K, 32)])


def mma_chain(A, B, C, ea, eb, k_width):
    """tl.dot on sm_90 as Triton 3.6 lowers it here: mma.sync m16n8k16 (HMMA.16816.F32), C
    chained over the k16 instructions in order (prims.block_fma_chain per 16-product block)."""
    idx = k_order(A.shape[-1], k_width)
    if idx is not None:
        A, B, ea, eb = A[..., idx], B[..., idx], ea[..., idx], eb[..., idx]
    return block_fma_chain(A, B, C, ea, eb)


def tl_exp(x):
    """tl.exp(x) on fp32: mul.f32 by log2(e) (rounded), then ex2.approx.f32."""
    with np.errstate(invalid="ignore"):
        return ex2((np.asarray(x, F32) * LOG2E).astype(F32))


# ---------------------------------------------------------------------------------------------
# The launcher (unified_attention): 2D or 3D, BLOCK_M / BLOCK_Q, TILE_SIZE.
def launch_params(hq, hkv, d, max_seqlen_q, num_seqs, window, elem_size, seq_threshold_3d,
                  segments=16):
    qpk = hq // hkv
    block_m = 16 if qpk <= 16 else 1 << (qpk - 1).bit_length()
    block_q = block_m // qpk
    sw = window if window > 0 else 0
    gemma3 = sw == 1024 and d in (128, 256)
    tile_prefill = 32
    tile_decode = 32 if gemma3 else (16 if elem_size >= 2 else 32)
    use_3d = not (max_seqlen_q > 1 or num_seqs > seq_threshold_3d)
    return dict(qpk=qpk, block_m=block_m, block_q=block_q, use_3d=use_3d,
                tile=tile_decode if use_3d else tile_prefill, tile_decode=tile_decode,
                segments=segments if use_3d else 1, d_pad=1 << (d - 1).bit_length())


def loop_bounds(context_len, seq_len, qlen, qb, seg, tiles_per_seg, tile, block_m, block_q, qpk,
                window, is_3d):
    """compute_tile_loop_bounds (triton_attention_helpers.py) for causal attention."""
    mspl = min(context_len + qb * block_q + (block_m - 1) // qpk + 1, seq_len)
    num_tiles = -(-mspl // tile)
    t0, t1 = 0, num_tiles
    if window > 0:
        lo = qb * block_q
        hi = min(lo + (block_m - 1) // qpk, qlen - 1)
        first = context_len + lo - window + 1
        last = context_len + hi
        t0 = max(0, int(np.trunc(first / tile)))  # arith.divsi truncates; max(0, .) hides it
        t1 = min(last // tile + 1, num_tiles)
    if is_3d:
        return max(seg * tiles_per_seg, t0), min((seg + 1) * tiles_per_seg, t1), mspl
    return t0, t1, mspl


def row_sum(p, tile):
    """tl.sum(P, axis=1) on the mma layout (warpsPerCTA [1, 4], 16x8 per warp): per thread
    p[8w+2t] + p[8w+2t+1]; quad butterfly xor 2 then xor 1 -> (s0 + s2) + (s1 + s3); across the
    warps through shared memory, butterfly xor 2 then xor 1 over lanes holding warps 0..3 ->
    (W0 + W2) + (W1 + W3); a 16-key tile has 2 distinct warps (2, 3 replicate 0, 1): W0 + W1."""
    nw = tile // 8
    q = p.reshape(p.shape[:-1] + (nw, 4, 2))
    s = (q[..., 0] + q[..., 1]).astype(F32)                  # [..., w, t]
    W = ((s[..., 0] + s[..., 2]).astype(F32) + (s[..., 1] + s[..., 3]).astype(F32)).astype(F32)
    if nw == 4:
        return ((W[..., 0] + W[..., 2]).astype(F32) +
                (W[..., 1] + W[..., 3]).astype(F32)).astype(F32)
    if nw == 2:
        return (W[..., 0] + W[..., 1]).astype(F32)
    raise ValueError(tile)


def softcap_fn(S, cap):
    """apply_softcap: Sdiv = S / cap (div.full); p1 = exp(Sdiv); p2 = exp(0 - Sdiv) (FADD RZ, -x);
    cap * (p1 - p2) / (p1 + p2): FADD, FMUL, FADD, div.full (no contraction possible)."""
    cap = F32(cap)
    sd = div_full(S, cap)
    p1 = tl_exp(sd)
    p2 = tl_exp((F32(0) - sd).astype(F32))
    num = (cap * (p1 - p2).astype(F32)).astype(F32)
    den = (p1 + p2).astype(F32)
    return div_full(num, den)


def program(Qb, eq, K, ek, V, ev, qpos, row_ok, context_len, t0, t1, mspl, tile, scale, fmt,
            window, softcap, M0, k_width=2):
    """One program's tile loop, vectorised over the KV heads: Qb [H, 16, d] exact values, K/V
    [H, seq_len, d] exact values of the dequantised tiles; returns acc [H, 16, d], M, L [H, 16]."""
    H, BM, d = Qb.shape
    n = K.shape[1]
    M = np.broadcast_to(np.asarray(M0, F32), (H, BM)).astype(F32).copy()
    L = np.ones((H, BM), F32)
    acc = np.zeros((H, BM, d), F32)
    qabs = context_len + qpos
    with np.errstate(invalid="ignore", over="ignore"):
        for j in range(t0, t1):
            keys = j * tile + np.arange(tile)
            loaded = keys < mspl                                  # tile_mask: other=0.0
            kidx = np.minimum(keys, n - 1)
            Kt = np.where(loaded[None, :, None], K[:, kidx], 0.0)
            ekt = np.where(loaded[None, :, None], ek[:, kidx], -20000)
            D = mma_chain(Qb, Kt, np.zeros((H, BM, tile), F32), eq, ekt, k_width)
            S = (F32(scale) * D).astype(F32)                      # fma.rn(scale, D, 0)
            if softcap:
                S = softcap_fn(S, softcap)
            ok = row_ok[:, None] & (keys[None, :] <= qabs[:, None])
            if window > 0:
                ok &= (qabs[:, None] - keys[None, :]) < window
            S = np.where(ok[None], S, F32(-np.inf)).astype(F32)
            m = np.maximum(M, S.max(axis=-1))
            m = np.where(m > -np.inf, m, F32(0)).astype(F32)
            P = tl_exp((S - m[..., None]).astype(F32))
            lj = row_sum(P, tile)
            alpha = tl_exp((M - m).astype(F32))
            L = fma32(L, alpha, lj)                               # fma.rn(L, alpha, l_j)
            acc = (acc * alpha[..., None]).astype(F32)
            P16 = decode16(encode16(P, fmt), fmt)
            Vt = np.where(loaded[None, :, None], V[:, kidx], 0.0)
            evt = np.where(loaded[None, :, None], ev[:, kidx], -20000)
            acc = mma_chain(P16, np.swapaxes(Vt, 1, 2), acc, operand_exp(P16, fmt),
                            np.swapaxes(evt, 1, 2), k_width)
            M = m
    return acc, M, L


def reduce_segments(acc, M, L):
    """reduce_segments for one (token, head): acc [S, d], M, L [S] with masked segments at
    (0, -inf, 0). 4 warps x 32 lanes, 16 segments, d = 128 (4 columns per lane)."""
    nseg, d = acc.shape
    assert nseg == 16 and d == 128, (nseg, d)
    with np.errstate(invalid="ignore"):
        mx = M.max()
        e = tl_exp((M - mx).astype(F32))
    # overall_expsum, 1D layout (lane l holds segment l & 15): bfly 8 contracted into an FFMA
    # u_l = fma(e_l, L_l, fl(e_{l^8} L_{l^8})), then bfly 4, 2, 1 adds; lanes 0-7 and 8-15 differ.
    prod = (e * L).astype(F32)
    u = fma32(e, L, prod[np.arange(16) ^ 8])

    def tree(b):
        v = [(u[b + i] + u[b + i + 4]).astype(F32) for i in range(4)]
        return ((v[0] + v[2]).astype(F32) + (v[1] + v[3]).astype(F32)).astype(F32)
    es = {0: tree(0), 8: tree(8)}
    # acc_sum: warp w holds segments w, w+4, w+8, w+12 (4 columns per lane):
    # T_w = fma(e12, o12, fma(e8, o8, fma(e0, o0, fl(e4 o4)))), then (T0 + T2) + (T1 + T3).
    T = []
    for w in range(4):
        t = (e[w + 4] * acc[w + 4]).astype(F32)
        t = fma32(e[w], acc[w], t)
        t = fma32(e[w + 8], acc[w + 8], t)
        t = fma32(e[w + 12], acc[w + 12], t)
        T.append(t)
    s = ((T[0] + T[2]).astype(F32) + (T[1] + T[3]).astype(F32)).astype(F32)
    # Column c is divided in lane c // 4, whose expsum is the 0-7 half's if (c // 4) & 8 == 0.
    lane = np.arange(d) // 4
    den = np.where((lane & 8) == 0, es[0], es[8]).astype(F32)
    out = div_full(s, den)
    return np.where(den == 0, F32(0), out).astype(F32)


def kv_values(c, inp, store=None):
    """Exact values of the K and V tiles as the kernel feeds them to the MMA ([sum seq_lens, hkv,
    d]) and their operand exponents. FP8 per tensor: (e4m3 -> f32 * scale) -> Q's dtype, RN."""
    fmt = c["dtype"]
    if c["kv"] == "e4m3":
        out = []
        for name, sc in (("k", c["k_scale"]), ("v", c["v_scale"])):
            if store is not None and f"{name}_e4m3" in store:
                b = np.asarray(store[f"{name}_e4m3"], np.uint8)
            else:  # (x.float() / scale).to(float8_e4m3fn): IEEE division, RNE
                x = decode16(encode16(inp[name], fmt), fmt).astype(F32)
                b = (x / F32(sc)).astype(F32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
            f = b.view(ml_dtypes.float8_e4m3fn).astype(F32)
            deq = (f * F32(sc)).astype(F32)                       # mul.f32 by tl.load(scale)
            out.append(decode16(encode16(deq, fmt), fmt))         # cvt.rn.bf16x2.f32
        return out[0], out[1]
    return decode16(encode16(inp["k"], fmt), fmt), decode16(encode16(inp["v"], fmt), fmt)


def unified_attention(c, inp, store=None):
    """The output [T, hq, d] as uint16 patterns, as recorded by record_serving_triton.py's call
    (causal, window_size (W-1, 0), seq_threshold_3D = 128 // hkv, 16 segments)."""
    fmt = c["dtype"]
    hq, hkv, d = c["hq"], c["hkv"], c["d"]
    qlens, slens = inp["query_lens"], inp["seq_lens"]
    lp = launch_params(hq, hkv, d, max(qlens), len(slens), c["window"], 2, 128 // hkv)
    qpk, BM, BQ, tile = lp["qpk"], lp["block_m"], lp["block_q"], lp["tile"]
    Q = decode16(encode16(inp["q"], fmt), fmt)                    # [T, hq, d]
    Kall, Vall = kv_values(c, inp, store)
    scale = F32(c["scale"])
    sinks = inp["sinks"].astype(F32) if c["sinks"] else None
    window = c["window"]
    k_width = 4 if c["kv"] == "e4m3" else 2
    softcap = F32(c["softcap"]) if c["softcap"] else None
    T = Q.shape[0]
    out = np.zeros((T, hq, d), np.uint16)
    cu = inp["cu_seqlens_q"]
    koff = np.concatenate([[0], np.cumsum(slens)])
    r = np.arange(BM)
    heads = np.arange(hkv)[:, None] * qpk + (r % qpk)[None, :]   # [H, 16]
    for s, (qlen, slen) in enumerate(zip(qlens, slens)):
        ctx = slen - qlen
        K = np.swapaxes(Kall[koff[s]:koff[s + 1]], 0, 1)           # [H, n, d]
        V = np.swapaxes(Vall[koff[s]:koff[s + 1]], 0, 1)
        ek, ev = operand_exp(K, fmt), operand_exp(V, fmt)
        for qb in range(-(-qlen // BQ)):
            qpos = qb * BQ + r // qpk
            row_ok = qpos < qlen
            tok = cu[s] + np.minimum(qpos, qlen - 1)
            Qb = np.where(row_ok[None, :, None], Q[tok[None, :], heads], 0.0)   # [H, 16, d]
            eq = operand_exp(Qb, fmt)
            M0 = sinks[heads] if sinks is not None else F32(-np.inf)
            if not lp["use_3d"]:
                t0, t1, mspl = loop_bounds(ctx, slen, qlen, qb, 0, 0, tile, BM, BQ, qpk, window,
                                           False)
                acc, M, L = program(Qb, eq, K, ek, V, ev, qpos, row_ok, ctx, t0, t1, mspl, tile,
                                    scale, fmt, window, softcap, M0, k_width)
                o = div_full(acc, L[..., None])                    # acc / L: div.full.f32
                for i in np.flatnonzero(row_ok):
                    out[tok[i], heads[:, i]] = encode16(o[:, i], fmt)
                continue
            nseg = lp["segments"]
            tps = -(-slen // (nseg * tile))
            act = -(-slen // (tps * tile))
            accs = np.zeros((nseg, hkv, BM, d), F32)
            Ms = np.full((nseg, hkv, BM), -np.inf, F32)
            Ls = np.zeros((nseg, hkv, BM), F32)
            for g in range(act):
                t0, t1, mspl = loop_bounds(ctx, slen, qlen, qb, g, tps, tile, BM, BQ, qpk,
                                           window, True)
                m0 = M0 if g == 0 else F32(-np.inf)               # sinks: segment 0 only
                accs[g], Ms[g], Ls[g] = program(Qb, eq, K, ek, V, ev, qpos, row_ok, ctx, t0, t1,
                                                mspl, tile, scale, fmt, window, softcap, m0,
                                                k_width)
            for i in np.flatnonzero(row_ok):
                for h in range(hkv):
                    o = reduce_segments(accs[:, h, i], Ms[:, h, i], Ls[:, h, i])
                    out[tok[i], heads[h, i]] = encode16(o, fmt)
    return out
