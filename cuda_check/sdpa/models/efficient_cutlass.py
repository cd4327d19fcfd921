"""PyTorch's memory-efficient SDPA backend (the xformers/CUTLASS kernel
aten/src/ATen/native/transformers/cuda/mem_eff_attention/kernel_forward.h, fmha_cutlassF_*_sm80,
AttentionKernel<..., kSupportsBias = true>) as torch 2.11's sm_90 SASS computes it
(sim/sdpa/README.md): kQueriesPerBlock x kKeysPerBlock tiles, KV blocks ascending, S and P V by
HMMA.1688.F32 chains (8-product blocks), every score fl(fl(acc * scale) * fl(log2 e)) (the bias
path's `accum = p.scale * accum`, then iterative_softmax's `1.0f * kLog2e`) before the max,
p = ex2.approx.f32(fl(s - m)), per MM0 column warp (32 keys) and quad lane a sum from 0 in column
order, quad xor 1 then 2, s' = ((s' * alpha) + w0) + w1 + ... in warp order; the register-file
kernels (kMaxK <= kKeysPerBlock) O * alpha then O += P V, out = O * fl(1/s'); the _gmem kernel
(d > 128) each block's P V from zero landed by MemoryEfficientAttentionNormalize on the FP32
output buffer; LSE = fl(m / fl(log2 e)) + logf(s')."""
import numpy as np

from prims import F32, block_fma_chain, decode16, encode16, ex2, expf, fma32, logf, operand_exp

LOG2E = F32(1.4426950408889634074)


def tiles(d):
    """(kQueriesPerBlock, kKeysPerBlock, warps along N of MM0: WarpShape 32x32, so kKeysPerBlock /
    32) of the instantiation for head dim d."""
    if d <= 64:
        return 64, 64, 2
    if d <= 128:
        return 64, 128, 4
    return 32, 128, 4


def attention_head(q, k, v, fmt, causal, scale=None, k_block=8, want_lse=False):
    Lq, d = q.shape
    Lk = k.shape[0]
    if scale is None:
        scale = F32(1.0 / np.sqrt(d))
    Q, K, V = decode16(q, fmt), decode16(k, fmt), decode16(v, fmt)
    eq, ek, ev = operand_exp(Q, fmt), operand_exp(K, fmt), operand_exp(V, fmt)
    bq, bk, wn = tiles(d)
    gmem = d > 128  # the 32x128_gmem instantiation (kMaxK 65536)
    out = np.zeros((Lq, d), np.uint16)
    lse_all = np.zeros(Lq, F32)
    for r0 in range(0, Lq, bq):
        rows = np.arange(r0, min(Lq, r0 + bq))
        nr = len(rows)
        mi = np.full(nr, -np.inf, F32)
        sp = np.zeros(nr, F32)
        O = np.zeros((nr, d), F32)
        first = True
        # advance_to_block: a causal tile's keys end at query_start + kQueriesPerBlock
        n_keys = min(Lk, r0 + bq) if causal else Lk
        for k0 in range(0, n_keys, bk):
            nk = min(n_keys, k0 + bk) - k0
            last = k0 + bk >= n_keys
            S = block_fma_chain(Q[rows], K[k0:k0 + nk], np.zeros((nr, nk), F32), eq[rows],
                                ek[k0:k0 + nk], k_block=k_block)
            Sf = np.full((nr, bk), -np.inf, F32)
            Sf[:, :nk] = ((S * F32(scale)).astype(F32) * LOG2E).astype(F32)
            if causal:
                cols = k0 + np.arange(bk)
                Sf[cols[None, :] > rows[:, None]] = -np.inf
            valid = np.arange(bk)[None, :] < nk
            new = np.maximum(mi, np.where(valid, Sf, -np.inf).max(axis=1))
            changed = mi < new
            alpha = np.where(changed, ex2((mi - new).astype(F32)), F32(1))
            sp = np.where(changed, (sp * alpha).astype(F32), sp)
            if not first and not gmem:
                O = (O * alpha[:, None]).astype(F32)
            mi = new
            p = np.where(valid, ex2((Sf - mi[:, None]).astype(F32)), F32(0)).astype(F32)
            # per warp along N: its columns, per lane t its 2 columns of every n8 tile, 0 + ...
            span = bk // wn
            tot = sp.copy()
            for w in range(wn):
                lanes = []
                for t in range(4):
                    s = np.zeros(nr, F32)
                    for j in range(span // 8):
                        for e in (0, 1):
                            s = (s + p[:, w * span + 8 * j + 2 * t + e]).astype(F32)
                    lanes.append(s)
                wsum = ((lanes[0] + lanes[1]).astype(F32) + (lanes[2] + lanes[3]).astype(F32)).astype(F32)
                tot = (tot + wsum).astype(F32)
            sp = tot
            P = decode16(encode16(p, fmt), fmt)
            Vt = np.zeros((d, bk))
            Vt[:, :nk] = V[k0:k0 + nk].T
            evt = np.full((d, bk), -20000, np.int64)
            evt[:, :nk] = ev[k0:k0 + nk].T
            if not gmem:
                O = block_fma_chain(P, Vt, O, operand_exp(P, fmt), evt, k_block=k_block)
            else:
                # kMaxK > kKeysPerBlock: the block's P V from zero, then the epilogue
                # MemoryEfficientAttentionNormalize against the FP32 output_accum buffer:
                # D = fma(a, acc, fl(fl(a * rescale) * source)), a = 1/s' in the last block, else 1.
                blk = block_fma_chain(P, Vt, np.zeros((nr, d), F32), operand_exp(P, fmt), evt,
                                      k_block=k_block)
                a = (F32(1) / np.where(sp == 0, F32(1), sp)).astype(F32) if last else np.ones(nr, F32)
                if first:
                    O = (blk * a[:, None]).astype(F32)
                else:
                    beta = (a * alpha).astype(F32)
                    O = fma32(np.broadcast_to(a[:, None], blk.shape), blk,
                              (O * beta[:, None]).astype(F32))
            first = False
        if gmem:
            out[rows] = encode16(O, fmt)
        else:
            inv = (F32(1) / sp).astype(F32)
            out[rows] = encode16((O * inv[:, None]).astype(F32), fmt)
        lse_all[rows] = ((mi / LOG2E).astype(F32) + logf(sp)).astype(F32)
    return (out, lse_all) if want_lse else out
