#!/usr/bin/env python3
"""Designed probes of vLLM's 3D unified_attention + reduce_segments merge order (the lattice cases
of serving_cases.py do not separate it, cuda_check/serving/models/VLLM_NOTES.md): decode batches
of 64 sequences of 512 keys (16 segments of 32 keys), d 128, in which segments 2i and 2i+1 repeat
the same 32 keys, scaled by a factor f_i of the pair (equal maxima and sums within a pair, far
apart between pairs, so the merge weights e_s have full mantissas and the two expsum halves of
reduce_segments differ), with V = +-A + a shared pattern (+ on even, - on odd segments): the
pairs' A terms cancel only in the merge, where its order shows.
Inputs are numpy only (probe_inputs); the recording is written like record_serving_triton.py's.
Usage, on the GPU machine: python3 cuda_check/serving/probe_vllm_reduce.py OUT --vllm-src DIR"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

from lattice import lattice_tensor  # noqa: E402
from serving_cases import vllm_case, vllm_inputs  # noqa: E402


def probe_case(name, dtype, kind, seed, nseq=64, L=512):
    c = vllm_case(name, dtype, 8, 2, 128, [(1, L)] * nseq, seed=seed)
    c["probe"] = kind
    return c


PROBE_CASES = [
    probe_case("probe_pairs64_bf16", "bf16", "pairs64", 301),
    probe_case("probe_pairs64_fp16", "fp16", "pairs64", 302),
    probe_case("probe_pairs8_fp16", "fp16", "pairs8", 303),
]


def probe_inputs(c):
    """vllm_inputs(c) with K and V replaced by the probe's design (float32 values that the
    case's dtype holds exactly or rounds RNE)."""
    inp = vllm_inputs(c)
    n, hkv, d = inp["k"].shape
    seed = c["seed"]
    seg = 32                                  # keys per segment: cdiv(512, 16 * 16) tiles of 16
    j = np.concatenate([np.arange(L) for L in inp["seq_lens"]])
    s = j // seg
    if c["probe"] in ("pairs64", "pairs8"):
        A = np.float32(64.0 if c["probe"] == "pairs64" else 8.0)
        base_k = lattice_tensor(seed, 5, (seg, hkv, d))
        base_v = lattice_tensor(seed, 6, (seg, hkv, d))
        f = (np.float32(0.25) * (1 + ((s // 2) * 5) % 11)).astype(np.float32)   # 0.25 .. 2.75
        k = (base_k[j % seg] * f[:, None, None]).astype(np.float32)
        sign = np.where(s % 2 == 0, 1.0, -1.0).astype(np.float32)
        v = (sign[:, None, None] * A + base_v[j % seg]).astype(np.float32)
    else:
        raise ValueError(c["probe"])
    inp["k"], inp["v"] = k, v
    return inp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--vllm-src", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="probe_rec_")
    import record_serving_triton as rst
    rst.set_caches(work)
    import h5py
    import torch
    mod = rst.import_vllm(a.vllm_src, work)
    rst.vllm_inputs = probe_inputs          # record_vllm builds its inputs through this name
    env = rst.environment(torch)
    print(json.dumps(env), flush=True)
    with h5py.File(os.path.join(a.out, "vllm_probe_h100.h5"), "w") as w:
        for key, val in env.items():
            w.attrs[key] = json.dumps(val)
        for c in PROBE_CASES:
            rst.record_vllm(w, c, torch, np, mod, {})


if __name__ == "__main__":
    main()
