"""PyTorch's math SDPA backend (attention.cpp _scaled_dot_product_attention_math) on the H100 as the
recorded kernels compute it (sim/sdpa/README.md): fp16/bf16 inputs upcast to float32, both
operands multiplied by fl(sqrt(1/sqrt(d))), S by cuBLAS FP32 GEMM (sm80_xmma_gemm_f32f32 ... ffma:
one FFMA chain per output over k in natural order from 0), the causal mask added (-inf), the
softmax of softmax_warp_forward (rows <= 1024: element j on lane j % 32 (WARP_SIZE = min(next
pow2, 32)), per-lane sums in iteration order, butterfly xor 16..1 for the max and the sum, expf,
IEEE division), O = P V by cuBLAS FP32 GEMM (FFMA chain over keys), cast to the input type."""
import numpy as np

from prims import F32, decode16, encode16, expf, fma32


def chain(A, B):
    M, K = A.shape
    acc = np.zeros((M, B.shape[0]), F32)
    for k in range(K):
        acc = fma32(A[:, k][:, None], B[:, k][None, :], acc)
    return acc


def softmax_warp(S):
    """softmax_warp_forward<float, float, float, log2_elements>: one row per warp (or two)."""
    M, N = S.shape
    ws = min(1 << int(np.ceil(np.log2(max(N, 1)))), 32)
    iters = (1 << int(np.ceil(np.log2(max(N, 1))))) // ws
    E = np.full((M, ws * iters), -np.inf, F32)
    E[:, :N] = S
    lanes = E.reshape(M, iters, ws)  # element it*ws + lane
    mx = lanes[:, 0, :].copy()
    for it in range(1, iters):
        mx = np.maximum(mx, lanes[:, it, :])
    off = ws // 2
    while off > 0:
        mx = np.maximum(mx, mx[:, np.arange(ws) ^ off])
        off //= 2
    m = mx[:, 0]
    ex = expf((E - m[:, None]).astype(F32))
    exl = ex.reshape(M, iters, ws)
    sm = np.zeros((M, ws), F32)
    for it in range(iters):
        sm = (sm + exl[:, it, :]).astype(F32)
    off = ws // 2
    while off > 0:
        sm = (sm + sm[:, np.arange(ws) ^ off]).astype(F32)
        off //= 2
    tot = sm[:, 0]
    return (ex[:, :N] / tot[:, None]).astype(F32)


def attention_head(q, k, v, fmt, causal, want_parts=False):
    Lq, d = q.shape
    Lk = k.shape[0]
    sf = F32(np.sqrt(1.0 / np.sqrt(d)))
    Qs = (decode16(q, fmt).astype(F32) * sf).astype(F32)
    Ks = (decode16(k, fmt).astype(F32) * sf).astype(F32)
    S = chain(Qs, Ks)
    if causal:
        S = np.where(np.arange(Lk)[None, :] > np.arange(Lq)[:, None], F32(-np.inf), S).astype(F32)
    P = softmax_warp(S)
    O = chain(P, decode16(v, fmt).astype(F32).T.copy())
    out = encode16(O, fmt)
    return (out, S, P) if want_parts else out
