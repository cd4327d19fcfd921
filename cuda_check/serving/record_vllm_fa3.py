#!/usr/bin/env python3
"""Records what vLLM's FlashAttention-3 fork (vllm-project/flash-attention, `hopper/`, as a vLLM
wheel ships it compiled: vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so) computes on this GPU, for
attnsim's `vllm_fa3` preset to be checked against without a GPU.

The extension is loaded from the file --fa3-so names (taken from the vLLM wheel of the release
under study and brought to the GPU machine; never committed) and called as vLLM's FlashAttention
backend calls it (vllm/v1/attention/backends/flash_attn.py and
vllm/vllm_flash_attn/flash_attn_interface.py of that release): `torch.ops._vllm_fa3_C.fwd` with
varlen queries (cu_seqlens_q, max_seqlen_q), seqused_k, a paged KV cache with a shuffled block table
(block_size 16, K and V packed in one cache row [num_blocks, block_size, hkv, 2 d] as vLLM lays
them out), causal, no window. FP8 cases quantize Q, K and V to e4m3 with per-tensor scales (Q as
vLLM's attention layer does, K/V as its cache writer does) and pass the scales expanded to
(num_seqs, hkv) as q/k/v descales; the output is the model dtype.

Cases: cuda_check/serving/serving_cases.py VLLM_FA3_CASES (lattice inputs; the e4m3 bytes are
stored). Per case: the output's 16-bit patterns `o` [T, hq, d], the LSE `lse` [hq, T] (FP32 bits),
the kernels the profiler saw, repeatability. -> OUT/vllm_fa3_h100.h5
Usage, on the GPU machine from the repository root:
  python3 cuda_check/serving/record_vllm_fa3.py OUT --fa3-so PATH/_vllm_fa3_C.abi3.so [--only a,b]
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

from record_serving_triton import (bits16, environment, kernels_of,  # noqa: E402
                                   load_extension, open_recording, record_cases)
from serving_cases import VLLM_FA3_CASES, cache_slots, vllm_inputs  # noqa: E402

T0 = time.time()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--fa3-so", required=True, help="vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so")
    ap.add_argument("--only", default=None)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    import numpy as np
    import torch

    env = environment(torch)
    env["fa3_so_sha256"] = load_extension(torch, args.fa3_so)
    op = torch.ops._vllm_fa3_C
    env["fwd_schema"] = str(op.fwd.default._schema)
    env["get_scheduler_metadata_schema"] = str(op.get_scheduler_metadata.default._schema)
    print(json.dumps(env), flush=True)
    only = set(args.only.split(",")) if args.only else None
    w = open_recording(os.path.join(args.out, "vllm_fa3_h100.h5"), env)
    done = record_cases(w, VLLM_FA3_CASES, only, lambda w, c: record(w, c, torch, np, op))
    w.close()
    print(f"recorded {done} of {len(VLLM_FA3_CASES)} in {time.time() - T0:.0f} s", flush=True)


def fp8_of(x, scale, torch):
    """x / scale rounded to e4m3 (to nearest even; the lattice stays inside +-448)."""
    return (x.float() / scale).to(torch.float8_e4m3fn)


def fa3_call(c, inp, torch, np, op):
    """(out, lse_box, call, stored): `call()` runs the fork's forward on the case into `out`
    [T, hq, d] and lse_box[0]; stored = {name: array} of the e4m3 inputs of an FP8 case."""
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[c["dtype"]]
    hq, hkv, d, bs = c["hq"], c["hkv"], c["d"], c["block_size"]
    q = torch.from_numpy(inp["q"]).cuda().to(dtype)               # [T, hq, d]
    k_log = torch.from_numpy(inp["k"]).cuda().to(dtype)           # [sum seq_lens, hkv, d]
    v_log = torch.from_numpy(inp["v"]).cuda().to(dtype)
    fp8 = c["kv"] == "e4m3"
    stored = {}
    kv_dtype = torch.float8_e4m3fn if fp8 else dtype
    if fp8:
        q = fp8_of(q, c["q_scale"], torch)
        k_log = fp8_of(k_log, c["k_scale"], torch)
        v_log = fp8_of(v_log, c["v_scale"], torch)
        for name, t in (("q_e4m3", q), ("k_e4m3", k_log), ("v_e4m3", v_log)):
            stored[name] = t.view(torch.uint8).cpu().numpy()
    nblocks = int(inp["num_blocks"])
    # vLLM's cache: K and V packed in the content dim; unused slots NaN (0x7f for e4m3), which a
    # correct kernel never reads into a result.
    kv = torch.full((nblocks, bs, hkv, 2 * d), float("nan"), device="cuda", dtype=dtype)
    kv = kv.to(kv_dtype)
    kc, vc = kv[..., :d], kv[..., d:]
    seq_lens = inp["seq_lens"]
    idx = torch.from_numpy(cache_slots(inp["block_table"], seq_lens, bs)).cuda()
    # The scatter through a byte (or 16-bit) view: index_put has no float8 kernel.
    raw = torch.uint8 if fp8 else torch.int16
    kvf = kv.view(raw).view(nblocks * bs, hkv, 2 * d)
    kvf[idx, :, :d] = k_log.view(raw)
    kvf[idx, :, d:] = v_log.view(raw)
    block_table = torch.from_numpy(inp["block_table"]).cuda()
    T = q.shape[0]
    out_dtype = dtype
    out = torch.zeros((T, hq, d), device="cuda", dtype=out_dtype)
    cu = torch.from_numpy(inp["cu_seqlens_q"]).cuda()
    sk = torch.from_numpy(np.asarray(seq_lens, np.int32)).cuda()
    nseq = len(seq_lens)
    max_q, max_k = int(max(inp["query_lens"])), int(max(seq_lens))
    desc = None
    if fp8:
        shape = (nseq, hkv)
        desc = [torch.tensor([c[n]], dtype=torch.float32, device="cuda").expand(shape)
                for n in ("q_scale", "k_scale", "v_scale")]
    sched = None
    if c["splits"] != 1:
        # vLLM's metadata builder (aot_schedule; vllm_flash_attn get_scheduler_metadata): the
        # same arguments the forward gets, qkv_dtype the cache's.
        sched = by_schema(op.get_scheduler_metadata, dict(
            batch_size=nseq, max_seqlen_q=max_q, max_seqlen_k=max_k, num_heads=hq,
            num_heads_k=hkv, headdim=d, headdim_v=d, qkv_dtype=kv_dtype, seqused_k=sk,
            cu_seqlens_q=cu, page_size=bs, max_seqlen_k_new=0, is_causal=True,
            window_size_left=-1, window_size_right=-1, has_softcap=False,
            num_splits=c["splits"], sm_margin=0))
    args = dict(q=q, k=kc, v=vc, out=out, cu_seqlens_q=cu, seqused_k=sk, max_seqlen_q=max_q,
                max_seqlen_k=max_k, page_table=block_table, softmax_scale=c["scale"],
                is_causal=True, window_size_left=-1, window_size_right=-1, softcap=0.0,
                is_rotary_interleaved=True, scheduler_metadata=sched, num_splits=c["splits"],
                sm_margin=0, cp_world_size=1, cp_rank=0)
    if desc:
        args.update(q_descale=desc[0], k_descale=desc[1], v_descale=desc[2])
    box = [None]

    def call():
        r = by_schema(op.fwd, args)
        box[0] = r[1]

    return out, box, call, stored


def by_schema(packet, named):
    """Calls the op with `named` arguments by their schema names, every other argument its
    neutral value (None for optional ones, 0 / False / 0.0); an unknown name is an error."""
    schema = packet.default._schema
    names = [a.name for a in schema.arguments]
    extra = set(named) - set(names)
    if extra:
        raise TypeError(f"{schema.name}: no argument {sorted(extra)} in {schema}")
    vals = []
    for a in schema.arguments:
        if a.name in named:
            vals.append(named[a.name])
            continue
        t = str(a.type)
        if t.endswith("?") or t.startswith("Optional"):
            vals.append(None)
        elif t == "int":
            vals.append(0)
        elif t == "bool":
            vals.append(False)
        elif t == "float":
            vals.append(0.0)
        else:
            raise TypeError(f"{schema.name}: argument {a.name} ({t}) needs a value")
    return packet(*vals)


def record(w, c, torch, np, op):
    inp = vllm_inputs(c)
    g = w.create_group(c["name"])
    for key, val in c.items():
        g.attrs[key] = json.dumps(val)
    out, box, call, stored = fa3_call(c, inp, torch, np, op)
    for name, arr in stored.items():
        g.create_dataset(name, data=arr, compression="gzip")
    call()
    torch.cuda.synchronize()
    ob = bits16(out)
    g.create_dataset("o", data=ob, compression="gzip", shuffle=True)
    lse = box[0].float().contiguous().cpu().numpy()
    g.create_dataset("lse", data=lse.view(np.uint32), compression="gzip", shuffle=True)
    ks = kernels_of(call, torch)
    g.attrs["kernels"] = json.dumps(ks)
    call()
    torch.cuda.synchronize()
    g.attrs["repeatable"] = int(np.array_equal(bits16(out), ob))
    print(f"  {c['name']}: lse {tuple(lse.shape)} kernels {sorted(set(ks))}", flush=True)


if __name__ == "__main__":
    main()
