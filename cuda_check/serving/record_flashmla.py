#!/usr/bin/env python3
"""Records what FlashMLA's sm90 dense decode kernels compute on this GPU, as a vLLM wheel ships
them compiled (vllm/_flashmla_C.abi3.so: bf16; vllm/_flashmla_extension_C.abi3.so: the FP8 KV
cache), for attnsim's MLA presets to be checked against without a GPU.

The extensions are loaded from the files --flashmla-so and --flashmla-ext-so name (taken from the
vLLM wheel under study and brought to the GPU machine; never committed) and called as vLLM's
FlashMLA backend calls them (vllm/v1/attention/backends/mla/flashmla.py,
vllm/third_party/flashmla/flash_mla_interface.py and vllm/v1/attention/ops/flashmla.py of that
release): absorbed MLA decode, one KV head of 576 channels (512 latent + 64 RoPE) in a paged
cache of 64-token blocks with a shuffled block table, V = the first 512 channels, causal,
q [batch, s_q, h_q, 576]; the scheduler metadata computed by the kernels' own first call (bf16) or
get_mla_decoding_metadata_dense_fp8 (FP8). FP8 cases quantize Q and the cache to e4m3 with
per-tensor scales passed as descale_q / descale_k (vLLM's layer._q_scale / _k_scale).

Cases: MLA_CASES below (lattice inputs, cuda_check/lattice.py: tensors 0 = Q [b, s_q, h_q, 576],
1 = the cache rows [sum seq_lens, 576] in sequence order; the e4m3 bytes are stored). Per case: the
output's bf16 patterns `o` [b, s_q, h_q, 512], the LSE `lse` (FP32 bits, as returned), the
scheduler's `num_splits` and `tile_scheduler_metadata` (int32), the kernels the profiler saw.
-> OUT/flashmla_h100.h5
Usage, on the GPU machine from the repository root:
  python3 cuda_check/serving/record_flashmla.py OUT --flashmla-so P/_flashmla_C.abi3.so \
      --flashmla-ext-so P/_flashmla_extension_C.abi3.so [--only a,b]
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

from lattice import lattice_tensor  # noqa: E402
from record_serving_triton import (bits16, environment, kernels_of,  # noqa: E402
                                   load_extension, open_recording, record_cases)
from serving_cases import block_table, cache_slots  # noqa: E402

T0 = time.time()
BLOCK = 64          # FlashMLA's page block size (vLLM: get_supported_kernel_block_sizes)
D, DV = 576, 512    # DeepSeek-V3's absorbed MLA: kv_lora_rank 512 + qk_rope_head_dim 64


def mla_case(name, b, s_q, h_q, seq_lens, fp8=False, q_scale=0.05, k_scale=0.05, seed=0):
    return dict(name=name, b=b, s_q=s_q, h_q=h_q, seq_lens=list(seq_lens), fp8=fp8,
                q_scale=q_scale, k_scale=k_scale, seed=seed,
                scale=1.0 / float((128 + 64) ** 0.5))  # DeepSeek-V3's qk_head_dim 192


MLA_CASES = [
    mla_case("dec_b4_h16_bf16", 4, 1, 16, [100, 777, 1000, 4097], seed=401),
    mla_case("dec_b2_h128_bf16", 2, 1, 128, [2048, 300], seed=402),
    mla_case("mtp2_b2_h16_bf16", 2, 2, 16, [500, 1200], seed=403),
    mla_case("dec_b1_h16_long_bf16", 1, 1, 16, [16384], seed=404),
    mla_case("dec_b4_h16_fp8", 4, 1, 16, [100, 777, 1000, 4097], fp8=True, seed=405),
    mla_case("dec_b2_h128_fp8", 2, 1, 128, [2048, 300], fp8=True, seed=406),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--flashmla-so", required=True)
    ap.add_argument("--flashmla-ext-so", required=True)
    ap.add_argument("--only", default=None)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    import numpy as np
    import torch

    env = environment(torch)
    env["flashmla_so_sha256"] = load_extension(torch, args.flashmla_so)
    env["flashmla_ext_so_sha256"] = load_extension(torch, args.flashmla_ext_so)
    ops, ext = torch.ops._flashmla_C, torch.ops._flashmla_extension_C
    env["dense_decode_fwd_schema"] = str(ops.dense_decode_fwd.default._schema)
    env["fwd_kvcache_mla_fp8_schema"] = str(ext.fwd_kvcache_mla_fp8.default._schema)
    print(json.dumps(env), flush=True)
    only = set(args.only.split(",")) if args.only else None
    w = open_recording(os.path.join(args.out, "flashmla_h100.h5"), env)
    done = record_cases(w, MLA_CASES, only, lambda w, c: record(w, c, torch, np, ops, ext))
    w.close()
    print(f"recorded {done} of {len(MLA_CASES)} in {time.time() - T0:.0f} s", flush=True)


def record(w, c, torch, np, ops, ext):
    b, s_q, h_q, lens = c["b"], c["s_q"], c["h_q"], c["seq_lens"]
    q = torch.from_numpy(lattice_tensor(c["seed"], 0, (b, s_q, h_q, D))).cuda().to(torch.bfloat16)
    rows = torch.from_numpy(lattice_tensor(c["seed"], 1, (sum(lens), D))).cuda().to(torch.bfloat16)
    table, nblocks = block_table(lens, BLOCK, c["seed"])
    g = w.create_group(c["name"])
    for key, val in c.items():
        g.attrs[key] = json.dumps(val)
    g.create_dataset("block_table", data=table)
    fp8 = c["fp8"]
    if fp8:
        q = (q.float() / c["q_scale"]).to(torch.float8_e4m3fn)
        rows = (rows.float() / c["k_scale"]).to(torch.float8_e4m3fn)
        g.create_dataset("q_e4m3", data=q.view(torch.uint8).cpu().numpy(), compression="gzip")
        g.create_dataset("kv_e4m3", data=rows.view(torch.uint8).cpu().numpy(), compression="gzip")
    dt = rows.dtype
    raw = torch.uint8 if fp8 else torch.int16
    cache = torch.full((nblocks, BLOCK, 1, D), float("nan"), device="cuda",
                       dtype=torch.bfloat16).to(dt)
    idx = torch.from_numpy(cache_slots(table, lens, BLOCK)).cuda()
    cache.view(raw).view(nblocks * BLOCK, D)[idx] = rows.view(raw)
    bt = torch.from_numpy(table).cuda()
    sl = torch.tensor(lens, dtype=torch.int32, device="cuda")
    box = {}
    if fp8:
        meta, splits = ext.get_mla_decoding_metadata_dense_fp8(sl, s_q * h_q, 1)
        dq = torch.tensor([c["q_scale"]], dtype=torch.float32, device="cuda")
        dk = torch.tensor([c["k_scale"]], dtype=torch.float32, device="cuda")

        def call():
            # vllm/v1/attention/ops/flashmla.py flash_mla_with_kvcache_fp8's positional call.
            box["o"], box["lse"] = ext.fwd_kvcache_mla_fp8(
                q, cache, DV, sl, bt, c["scale"], True, meta, splits, dq, dk)[:2]
        box["meta"], box["splits"] = meta, splits
    else:
        def call():
            # flash_mla_interface.py flash_mla_with_kvcache's positional call (first call: no
            # metadata, the kernel computes it).
            r = ops.dense_decode_fwd(q, cache, DV, sl, bt, c["scale"], True, None, None, None)
            box["o"], box["lse"], box["meta"], box["splits"] = r[:4]
    call()
    torch.cuda.synchronize()
    ob = bits16(box["o"])
    g.create_dataset("o", data=ob, compression="gzip", shuffle=True)
    lse = box["lse"].float().contiguous().cpu().numpy()
    g.create_dataset("lse", data=lse.view(np.uint32), compression="gzip", shuffle=True)
    g.attrs["lse_shape"] = json.dumps(list(lse.shape))
    for k in ("meta", "splits"):
        if box.get(k) is not None:
            g.create_dataset("tile_scheduler_metadata" if k == "meta" else "num_splits",
                             data=box[k].cpu().numpy())
    ks = kernels_of(call, torch)
    g.attrs["kernels"] = json.dumps(ks)
    call()
    torch.cuda.synchronize()
    g.attrs["repeatable"] = int(np.array_equal(bits16(box["o"]), ob))
    print(f"  {c['name']}: out {tuple(box['o'].shape)} lse {lse.shape} kernels {sorted(set(ks))}",
          flush=True)


if __name__ == "__main__":
    main()
