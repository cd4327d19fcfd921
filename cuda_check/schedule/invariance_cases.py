"""The cases of the batch-invariance recordings (record_invariance.py) and their inputs,
numpy only, so that the checks can replay them without torch or a GPU.

A case is one target sequence of `length` tokens (head-major Q [hq, length, d], K and V [hkv,
length, d]: cuda_check/lattice.py's lattice_tensor(seed, 0 / 1 / 2, ...), rounded to the dtype by
round to nearest even) run by one kernel inside several launches ("situations"). A situation is
written as attnsim's `invariance` command reads it: sequences `Q:K`, joined by `+`, each
optionally repeated `xN`; the first sequence is the target, whose queries are the last Q of its
first K tokens (a decode step Q = 1, a prefill Q = K). Neighbours of one shape share one lattice
(seed + 7919): only the launch's shape reaches the target's arithmetic.

Masks: `causal` cases mask prefill rows (Q > 1) causally, the square (Q = K) form for the dense
kernels (SDPA, FlexAttention: top-left = bottom-right there); a decode row (Q = 1) sees its whole
cache, as serving engines call these kernels. vLLM's kernel is always causal, bottom-right.
"""
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lattice import lattice_at, lattice_tensor  # noqa: E402

_SEQ = re.compile(r"^(\d+):(\d+)(?:x(\d+))?$")


def parse_situation(text):
    """[(len_q, len_kv)] of a situation string; the first is the target."""
    seqs = []
    for part in text.split("+"):
        m = _SEQ.match(part.strip())
        if not m:
            raise ValueError(f"bad sequence {part!r} in situation {text!r}")
        q, k, n = int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)
        seqs += [(q, k)] * n
    return seqs


def case(name, family, method, dtype, hq, hkv, d, length, situations, causal=False, seed=0,
         backend=None, batch_invariant=False):
    return dict(name=name, family=family, method=method, dtype=dtype, hq=hq, hkv=hkv, d=d,
                length=length, situations=list(situations), causal=causal, seed=seed,
                backend=backend, batch_invariant=batch_invariant)


def _sdpa(backend, name, dtype, hq, hkv, d, length, situations, causal=False, seed=0):
    return case(f"sdpa_{backend}_{name}", "sdpa", f"sdpa:backend={backend},dtype={dtype}", dtype,
                hq, hkv, d, length, situations, causal, seed, backend=backend)


CASES = []
_FEW = (1, 2, 4, 8, 16, 26, 27, 32, 64)  # cuDNN builds a plan per shape: fewer batch sizes
for _b in ("flash", "efficient", "cudnn"):
    _dec = range(1, 65) if _b != "cudnn" else _FEW
    CASES += [
        # FA2's num_splits heuristic on a 4,096-key decode: GQA 32/8 (the group's 4 query heads
        # become the rows, m blocks 1, n blocks of 128 keys: 32) in batches of 1 to 64.
        # (The efficient backend has no GQA kernel: MHA 32/32 there.)
        _sdpa(_b, "dec4096_gqa_bf16_d128" if _b != "efficient" else "dec4096_bf16_d128", "bf16",
              32, 8 if _b != "efficient" else 32, 128, 4096,
              [f"1:4096x{b}" for b in _dec], seed=301),
        # MHA d 64 (n blocks of 256 keys: 16).
        _sdpa(_b, "dec4096_fp16_d64", "fp16", 16, 16, 64, 4096,
              [f"1:4096x{b}" for b in (list(range(1, 25)) + [32, 48, 64] if _b != "cudnn"
                                       else _FEW)], seed=302),
        # A causal 1,024-token prefill: 16 m blocks per head, so small batches split too.
        _sdpa(_b, "pre1024_causal_bf16_d128", "bf16", 8, 8, 128, 1024,
              [f"1024:1024x{b}" for b in (1, 2, 3, 4, 6, 8, 12, 16)], causal=True, seed=303),
        # Prefill vs decode of one 2,048-token sequence: its last row.
        _sdpa(_b, "pd2048_causal_bf16_d128", "bf16", 8, 8, 128, 2048,
              ["2048:2048", "2048:2048x2", "1:2048", "1:2048x8", "1:2048x32"], causal=True,
              seed=304),
    ]

CASES += [
    # FlexAttention's decode template: SPLIT_KV = 2 * (132 // (batch * heads)) CTAs per row.
    case("flex_dec1000_bf16_d128", "flex", "flex:dtype=bf16", "bf16", 8, 8, 128, 1000,
         [f"1:1000x{b}" for b in (1, 2, 4, 8, 9, 16, 17, 33, 64)], seed=311),
    # Prefill template vs decode template on the sequence's last row.
    case("flex_pd1000_causal_bf16_d128", "flex", "flex:dtype=bf16", "bf16", 8, 8, 128, 1000,
         ["1000:1000", "1000:1000x2", "1:1000", "1:1000x16"], causal=True, seed=312),
    # vLLM's unified attention: 3D (16 segments + reduce_segments) while every query is one
    # token and num_seqs <= 128 // heads_kv = 64, 2D otherwise.
    case("vllm_dec500_batch_bf16_d128", "vllm", "vllm_triton:dtype=bf16", "bf16", 8, 2, 128,
         500, ["1:500"] + [f"1:500+1:300x{n - 1}" for n in range(2, 73)], causal=True,
         seed=321),
    # A neighbour prefill of q tokens joins a small decode batch (vllm #51902's shape of
    # question on the Triton kernel): q = 1 is a decode, q >= 2 takes the 2D kernel.
    case("vllm_dec500_neighbour_bf16_d128", "vllm", "vllm_triton:dtype=bf16", "bf16", 8, 2, 128,
         500, ["1:500+1:300x3"] + [f"1:500+1:300x3+{q}:{q}" for q in range(1, 13)],
         causal=True, seed=322),
    # Prefill vs decode vs chunked prefill of one 500-token sequence.
    case("vllm_pd500_bf16_d128", "vllm", "vllm_triton:dtype=bf16", "bf16", 8, 2, 128, 500,
         ["500:500", "1:500", "1:500+1:300x69", "8:500", "100:500", "200:400"], causal=True,
         seed=323),
    # VLLM_BATCH_INVARIANT=1: the 2D kernel for every batch.
    case("vllm_dec500_batch_invariant_bf16_d128", "vllm",
         "vllm_triton:dtype=bf16,batch_invariant=1", "bf16", 8, 2, 128, 500,
         ["1:500", "1:500+1:300x3", "1:500+1:300x63", "1:500+1:300x64", "500:500"],
         causal=True, seed=321, batch_invariant=True),
]


# FlashAttention-3 (Dao-AILab/flash-attention hopper/, built on the GPU machine as
# data/hw/h100/fa3/README.md says) with num_splits = 0: get_num_splits' heuristic over the whole
# batch (attnsim's fa3_schedule). Causal masks are FA3's own (bottom-right), decode rows included.
_FA3 = "fa3:dtype=bf16,splits=0"
CASES += [
    # GQA 32/8 decode of 4,096 keys: split while batch x 8 KV heads leaves SMs idle.
    case("fa3_dec4096_gqa_bf16_d128", "fa3", _FA3, "bf16", 32, 8, 128, 4096,
         [f"1:4096x{b}" for b in range(1, 33)], seed=331),
    # MHA 32/32: the split stops at a smaller batch.
    case("fa3_dec4096_bf16_d128", "fa3", _FA3, "bf16", 32, 32, 128, 4096,
         [f"1:4096x{b}" for b in range(1, 13)], seed=332),
    case("fa3_pre1024_causal_bf16_d128", "fa3", _FA3, "bf16", 8, 8, 128, 1024,
         [f"1024:1024x{b}" for b in (1, 2, 3, 4, 6, 8, 12, 16)], causal=True, seed=333),
    case("fa3_pd2048_causal_bf16_d128", "fa3", _FA3, "bf16", 8, 8, 128, 2048,
         ["2048:2048", "2048:2048x2", "1:2048", "1:2048x8", "1:2048x32"], causal=True, seed=334),
]


def neighbour_seed(c, s):
    return c["seed"] + 7919 * s


_NEIGHBOURS = {}


def sequence(c, s, len_q, len_kv):
    """(q [hq, len_q, d], k [hkv, len_kv, d], v) float32 of sequence s (0 = the target) in a
    situation: the target's Q rows are the last len_q of its first len_kv tokens (positions of
    the lattice tensors [hq or hkv, length, d]). Neighbours (s >= 1) of one shape share one
    lattice, seed + 7919: what they hold does not enter the target's arithmetic."""
    hq, hkv, d = c["hq"], c["hkv"], c["d"]
    if s == 0:
        L = c["length"]
        if len_kv > L:
            raise ValueError(f"{c['name']}: the target has {L} tokens, a situation asks {len_kv}")
        return (_rows(c["seed"], 0, hq, L, d, len_kv - len_q, len_kv),
                _rows(c["seed"], 1, hkv, L, d, 0, len_kv), _rows(c["seed"], 2, hkv, L, d, 0, len_kv))
    key = (c["seed"], hq, hkv, d, len_q, len_kv)
    if key not in _NEIGHBOURS:
        sd = neighbour_seed(c, 1)
        _NEIGHBOURS[key] = (lattice_tensor(sd, 0, (hq, len_q, d)),
                            lattice_tensor(sd, 1, (hkv, len_kv, d)),
                            lattice_tensor(sd, 2, (hkv, len_kv, d)))
    return _NEIGHBOURS[key]


_TARGET = {}


def _rows(seed, tensor, heads, L, d, lo, hi):
    """Rows lo .. hi - 1 of lattice_tensor(seed, tensor, (heads, L, d)), computed alone."""
    key = (seed, tensor, heads, L, d, lo, hi)
    if key not in _TARGET:
        h = np.arange(heads, dtype=np.uint64)[:, None, None]
        r = np.arange(lo, hi, dtype=np.uint64)[None, :, None]
        j = np.arange(d, dtype=np.uint64)[None, None, :]
        _TARGET[key] = lattice_at(seed, tensor, (h * np.uint64(L) + r) * np.uint64(d) + j)
    return _TARGET[key]
