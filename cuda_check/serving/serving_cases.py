"""The cases of the Triton serving-kernel recordings (record_serving_triton.py) and their inputs,
numpy only, so that the models can replay them without torch or a GPU.

Every value of a lattice input is cuda_check/lattice.py's lattice_tensor(seed, tensor, shape)
(tests/hw/sage_inputs.hpp lattice_value in C++), rounded to the case's dtype by round to nearest
even; tensors 0, 1, 2 are Q, K, V. vLLM cases lay Q out token-major [tokens, hq, d] and K/V as the
logical sequence-concatenated [sum of seq_lens, hkv, d]; the block table scatters them into the
paged cache."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lattice import M64, lattice_tensor, splitmix64  # noqa: E402,F401


def flex_case(name, dtype, b, hq, hkv, lq, lk, d, mask="none", window=0, softcap=0.0,
              scale=None, kind="lattice", seed=0):
    return dict(name=name, dtype=dtype, b=b, hq=hq, hkv=hkv, lq=lq, lk=lk, d=d, mask=mask,
                window=window, softcap=softcap, scale=scale, kind=kind, seed=seed)


# Prefill cases take the flex_attention template, one-query and short-query cases the
# flex_decoding template (as torch chooses: the recording's kernel names say which ran).
FLEX_CASES = [
    flex_case("pre512_causal_bf16_d128", "bf16", 1, 4, 4, 512, 512, 128, "causal", seed=101),
    flex_case("dec1000_bf16_d128", "bf16", 2, 8, 8, 1, 1000, 128, seed=102),
    flex_case("pre300_gqa_fp16_d64", "fp16", 1, 8, 2, 300, 300, 64, seed=103),
    flex_case("dec4097_gqa_fp16_d128", "fp16", 1, 32, 8, 1, 4097, 128, seed=104),
    flex_case("pre1000_window128_bf16_d128", "bf16", 1, 2, 2, 1000, 1000, 128, "window",
              window=128, seed=105),
    flex_case("pre333_causal_softcap30_bf16_d128", "bf16", 1, 2, 2, 333, 333, 128, "causal",
              softcap=30.0, seed=106),
    flex_case("dec777_gqa_softcap30_bf16_d128", "bf16", 1, 8, 2, 1, 777, 128, softcap=30.0,
              seed=107),
    flex_case("pre200_causal_scale0.1_fp16_d128", "fp16", 2, 2, 2, 200, 200, 128, "causal",
              scale=0.1, seed=108),
    flex_case("short16_gqa_bf16_d128", "bf16", 1, 8, 2, 16, 600, 128, seed=109),
    flex_case("uniform64x1000_bf16_d128", "bf16", 1, 2, 2, 64, 1000, 128, kind="uniform",
              seed=110),
    flex_case("pre777_causal_bf16_d64", "bf16", 1, 4, 4, 777, 777, 64, "causal", seed=111),
    flex_case("dec1000_fp16_d64", "fp16", 1, 4, 4, 1, 1000, 64, seed=112),
    # Batch invariance (issue 40): dec1000_bf16_d128's first sequence in batches of 1 and 16
    # (SPLIT_KV 2 x 132 // (batch x heads): 32 and 2), and a causal 4-query decode (a real split).
    flex_case("bi_dec1000_b1_bf16_d128", "bf16", 1, 8, 8, 1, 1000, 128, seed=102),
    flex_case("bi_dec1000_b16_bf16_d128", "bf16", 16, 8, 8, 1, 1000, 128, seed=102),
    flex_case("dec4x1000_causal_bf16_d128", "bf16", 1, 8, 8, 4, 1000, 128, "causal", seed=113),
]


def flex_inputs(c):
    """(q, k, v, store): float32 values (the dtype rounds them), store = inputs kept in the file."""
    qs = (c["b"], c["hq"], c["lq"], c["d"])
    ks = (c["b"], c["hkv"], c["lk"], c["d"])
    if c["kind"] == "lattice":
        return (lattice_tensor(c["seed"], 0, qs), lattice_tensor(c["seed"], 1, ks),
                lattice_tensor(c["seed"], 2, ks), False)
    if c["kind"] == "uniform":
        # q = 0: every score 0, every p exactly 1 (exp2(0)), l = Lk: O = the kernel's sum of V
        # in its accumulation order, / Lk.
        return (np.zeros(qs, np.float32), lattice_tensor(c["seed"], 1, ks),
                lattice_tensor(c["seed"], 2, ks), True)
    raise ValueError(c["kind"])


def vllm_case(name, dtype, hq, hkv, d, seqs, kv="auto", k_scale=1.0, v_scale=1.0, window=0,
              softcap=0.0, sinks=False, block_size=16, seed=0, q_of=None):
    """seqs: [(query_len, seq_len)], the query being the last query_len tokens of the sequence.
    q_of: (total_tokens_generated, take_last) — Q is the last rows of a larger lattice (a decode
    step whose query equals a prefill case's last row)."""
    return dict(name=name, dtype=dtype, hq=hq, hkv=hkv, d=d, seqs=[list(s) for s in seqs], kv=kv,
                k_scale=k_scale, v_scale=v_scale, window=window, softcap=softcap, sinks=sinks,
                block_size=block_size, seed=seed, scale=1.0 / float(np.sqrt(d)), q_of=q_of)


# vLLM's launcher takes the 3D (split-KV, 16 segments, reduce_segments) kernel when every query
# is at most 8 tokens, causal, and num_seqs * cdiv(max_seqlen_q, BLOCK_Q) <= 128 // hkv; the 2D
# kernel otherwise.
VLLM_CASES = [
    vllm_case("prefill_mixed_bf16_d128", "bf16", 8, 2, 128, [(37, 87), (1, 300), (100, 100)],
              seed=201),
    vllm_case("decode3d_bf16_d128", "bf16", 8, 2, 128, [(1, 97), (1, 500), (1, 1000), (1, 33)],
              seed=202),
    vllm_case("decode2d_fp16_d128", "fp16", 8, 8, 128,
              [(1, 40 + 37 * i) for i in range(20)], seed=203),
    vllm_case("prefill_fp8kv_bf16_d128", "bf16", 8, 2, 128, [(37, 87), (64, 200)], kv="e4m3",
              k_scale=0.05, v_scale=0.02, seed=204),
    vllm_case("decode3d_fp8kv_bf16_d128", "bf16", 8, 2, 128, [(1, 97), (1, 200), (1, 777)],
              kv="e4m3", k_scale=0.05, v_scale=0.02, seed=205),
    vllm_case("prefill_swa64_softcap30_sinks_bf16_d128", "bf16", 8, 2, 128, [(50, 150), (120, 120)],
              window=64, softcap=30.0, sinks=True, seed=206),
    vllm_case("decode3d_swa64_softcap30_sinks_bf16_d128", "bf16", 8, 2, 128, [(1, 150), (1, 300)],
              window=64, softcap=30.0, sinks=True, seed=207),
    vllm_case("prefill_fp16_d64", "fp16", 4, 4, 64, [(33, 33), (70, 200)], seed=208),
    # One sequence of 200 tokens: its prefill, and the decode step of its last token (same Q row,
    # same K/V): vllm #54035's question on the Triton kernel.
    vllm_case("pd_prefill200_bf16_d128", "bf16", 8, 2, 128, [(200, 200)], seed=209),
    vllm_case("pd_decode200_bf16_d128", "bf16", 8, 2, 128, [(1, 200)], seed=209, q_of=(200, 1)),
    vllm_case("pd_prefill200_fp8kv_bf16_d128", "bf16", 8, 2, 128, [(200, 200)], kv="e4m3",
              k_scale=0.05, v_scale=0.02, seed=210),
    vllm_case("pd_decode200_fp8kv_bf16_d128", "bf16", 8, 2, 128, [(1, 200)], kv="e4m3",
              k_scale=0.05, v_scale=0.02, seed=210, q_of=(200, 1)),
    # Batch invariance (issue 40): the same first sequence (500 keys, its Q row and K/V first in
    # the lattice) decoded in a batch of 4 (3D: 4 <= 128 // 2) and of 70 (2D: 70 > 64).
    vllm_case("bi_decode_batch4_bf16_d128", "bf16", 8, 2, 128,
              [(1, 500)] + [(1, 100 + 13 * i) for i in range(3)], seed=220),
    vllm_case("bi_decode_batch70_bf16_d128", "bf16", 8, 2, 128,
              [(1, 500)] + [(1, 100 + 13 * i) for i in range(69)], seed=220),
]


def block_table(seq_lens, block_size, seed):
    """(table [num_seqs, max_blocks] int32, num_blocks): a shuffled assignment of physical blocks
    (3 spare) to sequences of the given lengths; spare entries 0."""
    nblk = [(L + block_size - 1) // block_size for L in seq_lens]
    num_blocks = sum(nblk) + 3
    with np.errstate(over="ignore"):
        keys = splitmix64(np.uint64((seed * 0x9E3779B97F4A7C15 ^ 0xB10C) & M64) ^
                          np.arange(num_blocks, dtype=np.uint64))
    perm = np.argsort(keys, kind="stable").astype(np.int32)
    table = np.zeros((len(seq_lens), max(nblk)), np.int32)
    at = 0
    for s, m in enumerate(nblk):
        table[s, :m] = perm[at:at + m]
        at += m
    return table, num_blocks


def cache_slots(table, seq_lens, block_size):
    """The paged cache slot (physical block x block_size + offset) of every token of the
    sequence-concatenated K/V, sequences in order: where the block table puts each row."""
    slots = []
    for s, L in enumerate(seq_lens):
        j = np.arange(L)
        slots.append(table[s, j // block_size].astype(np.int64) * block_size + j % block_size)
    return np.concatenate(slots)


def vllm_inputs(c):
    """q [T, hq, d], k/v [sum seq_lens, hkv, d] (float32 lattice), block_table [num_seqs,
    max_blocks] int32 (a shuffled assignment of physical blocks; spare entries 0),
    cu_seqlens_q int32, seq_lens, query_lens, num_blocks, sinks float32 [hq]."""
    qlens = [s[0] for s in c["seqs"]]
    slens = [s[1] for s in c["seqs"]]
    T = sum(qlens)
    hq, hkv, d, bs, seed = c["hq"], c["hkv"], c["d"], c["block_size"], c["seed"]
    if c["q_of"]:
        total, last = c["q_of"]
        q = lattice_tensor(seed, 0, (total, hq, d))[total - last:]
    else:
        q = lattice_tensor(seed, 0, (T, hq, d))
    n = sum(slens)
    k = lattice_tensor(seed, 1, (n, hkv, d))
    v = lattice_tensor(seed, 2, (n, hkv, d))
    table, num_blocks = block_table(slens, bs, seed)
    cu = np.concatenate([[0], np.cumsum(qlens)]).astype(np.int32)
    sinks = (lattice_tensor(seed, 3, (hq,)) * np.float32(2.0)).astype(np.float32)
    return dict(q=q, k=k, v=v, block_table=table, cu_seqlens_q=cu, seq_lens=slens,
                query_lens=qlens, num_blocks=num_blocks, sinks=sinks)


def vllm_fa3_case(name, dtype, hq, hkv, d, seqs, kv="auto", q_scale=0.05, k_scale=0.05,
                  v_scale=0.02, splits=1, block_size=16, seed=0, q_of=None):
    """A case of vLLM's FlashAttention-3 fork (record_vllm_fa3.py), in vLLM's calling convention
    (vllm/v1/attention/backends/flash_attn.py): varlen queries, paged K/V (block_size 16, K and V
    packed in one cache row as vLLM lays them out), causal. kv="e4m3": the FP8 KV cache, the query
    quantized to e4m3 as vLLM's attention layer does, per-tensor scales expanded to
    (num_seqs, hkv) descales. splits: the num_splits argument (1: one pass, as under
    VLLM_BATCH_INVARIANT; 0: the fork's own heuristic with get_scheduler_metadata, as vLLM without
    CUDA graphs)."""
    c = vllm_case(name, dtype, hq, hkv, d, seqs, kv=kv, k_scale=k_scale, v_scale=v_scale,
                  block_size=block_size, seed=seed, q_of=q_of)
    c.update(q_scale=q_scale, splits=splits)
    return c


def _fa3_pd(L, kv, seed, dtype="bf16"):
    """vllm #54035: one sequence of L tokens, its prefill and the decode step of its last token
    (the same Q row, the same K/V)."""
    tag = "fp8" if kv == "e4m3" else dtype
    return [vllm_fa3_case(f"pd_prefill{L}_{tag}_d128", dtype, 8, 2, 128, [(L, L)], kv=kv, seed=seed),
            vllm_fa3_case(f"pd_decode{L}_{tag}_d128", dtype, 8, 2, 128, [(1, L)], kv=kv, seed=seed,
                          q_of=(L, 1))]


# vLLM's FA3 fork (hopper/tile_size.h, heuristics.h use_one_mma_wg): FP8 prefill 128 x 192 tiles
# with two-level accumulation at d 128, decode (max_seqlen_q x group <= 64) one MMA warpgroup,
# 64 x 96 (FP8) or 64 x 128 (16-bit, paged without TMA).
VLLM_FA3_CASES = [
    vllm_fa3_case("prefill_mixed_fp8_d128", "bf16", 8, 2, 128, [(37, 87), (64, 200), (100, 100)],
                  kv="e4m3", seed=301),
    vllm_fa3_case("decode_fp8_d128", "bf16", 8, 2, 128, [(1, 97), (1, 200), (1, 777), (1, 2000)],
                  kv="e4m3", seed=302),
    vllm_fa3_case("prefill_chunk256x4096_fp8_d128", "bf16", 8, 2, 128, [(256, 4096)], kv="e4m3",
                  seed=303),
    vllm_fa3_case("prefill_mha_fp8_d128", "bf16", 4, 4, 128, [(150, 150), (20, 333)], kv="e4m3",
                  seed=304),
    vllm_fa3_case("prefill_fp8_d64", "bf16", 8, 2, 64, [(70, 200), (33, 33)], kv="e4m3", seed=305),
    vllm_fa3_case("decode_fp8_d64", "bf16", 8, 2, 64, [(1, 97), (1, 1000)], kv="e4m3", seed=306),
    vllm_fa3_case("prefill_mixed_bf16_d128", "bf16", 8, 2, 128, [(37, 87), (1, 300), (100, 100)],
                  seed=307),
    vllm_fa3_case("decode_bf16_d128", "bf16", 8, 2, 128, [(1, 97), (1, 500), (1, 1000), (1, 33)],
                  seed=308),
    vllm_fa3_case("prefill_fp16_d64", "fp16", 4, 4, 64, [(33, 33), (70, 200)], seed=309),
    vllm_fa3_case("decode_fp16_d64", "fp16", 8, 2, 64, [(1, 97), (1, 1000)], seed=310),
    # The fork's own split choice, as vLLM runs it without CUDA graphs (num_splits 0 and the
    # scheduler metadata): recorded for the schedule, beside the one-pass cases above.
    vllm_fa3_case("decode_fp8_d128_splits0", "bf16", 8, 2, 128,
                  [(1, 97), (1, 200), (1, 777), (1, 2000)], kv="e4m3", splits=0, seed=302),
    vllm_fa3_case("decode_bf16_d128_splits0", "bf16", 8, 2, 128,
                  [(1, 97), (1, 500), (1, 1000), (1, 33)], splits=0, seed=308),
]
for _L, _seed in ((96, 320), (97, 321), (192, 322), (193, 323), (200, 324)):
    VLLM_FA3_CASES += _fa3_pd(_L, "e4m3", _seed)
VLLM_FA3_CASES += _fa3_pd(200, "auto", 325)
