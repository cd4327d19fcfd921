#!/usr/bin/env python3
"""Records one target sequence's output inside launches that change the kernel's schedule
(batch invariance), for attnsim's schedule models and `attnsim invariance` to be checked
against without a GPU.

For every case of invariance_cases.py (PyTorch SDPA's flash, efficient and cuDNN backends,
FlexAttention under torch.compile, vLLM's Triton unified attention, FlashAttention-3 given
--fa3-path) and every situation (the
launch: the target and its neighbours), the target's output rows are recorded as 16-bit patterns,
[hq, len_q, d], of which the last 16 query rows are stored (attributes row_from, rows and the
whole output's sha256). Equal outputs are stored once: group CASE holds `o_<j>` for each distinct output
and the attribute `which` (per situation, the j of its output); attributes `situations`,
`kernels` (per situation, the CUDA kernels the profiler saw), `repeatable` (a second call of the
first and last situations gave the same bits) and the case's fields. Inputs are the lattice
(not stored). -> OUT/invariance_h100.h5, OUT/kernels.json.

Usage, on the GPU machine from the repository root:
  python3 cuda_check/schedule/record_invariance.py OUT [--vllm-src DIR] [--fa3-path DIR]
    [--only a,b]
    [--budget S]
"""
import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "serving"))
sys.path.insert(0, os.path.join(HERE, ".."))

import invariance_cases as ic  # noqa: E402
import record_serving_triton as rst  # noqa: E402
from serving_cases import block_table  # noqa: E402

T0 = time.time()
KEEP_ROWS = 16  # query rows stored per head (the last ones): decode outputs whole
BUDGET = [1e9]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--vllm-src", default=None)
    ap.add_argument("--fa3-path", default=None,
                    help="a directory holding a built flash_attn_interface (FA3's hopper/)")
    ap.add_argument("--only", default=None, help="comma-separated case names or families")
    ap.add_argument("--budget", type=float, default=1e9, help="seconds; later cases are skipped")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    BUDGET[0] = args.budget
    work = tempfile.mkdtemp(prefix="inv_rec_")
    rst.set_caches(work)

    import numpy as np
    import torch

    env = rst.environment(torch)
    env["cudnn"] = torch.backends.cudnn.version()
    print(json.dumps(env), flush=True)
    only = set(args.only.split(",")) if args.only else None
    w = rst.open_recording(os.path.join(args.out, "invariance_h100.h5"), env)
    vllm_mod = None
    if args.vllm_src:
        try:
            vllm_mod = rst.import_vllm(args.vllm_src, work)
            w.attrs["vllm_src_sha256"] = json.dumps(rst.sha_files(args.vllm_src))
        except Exception as e:
            traceback.print_exc()
            w.attrs["error_import_vllm"] = f"{type(e).__name__}: {e}"[:1000]
    fa3_mod = None
    if args.fa3_path:
        try:
            sys.path.insert(0, os.path.abspath(args.fa3_path))
            import flash_attn_interface as fa3_mod
        except Exception as e:
            traceback.print_exc()
            w.attrs["error_import_fa3"] = f"{type(e).__name__}: {e}"[:1000]
            fa3_mod = None
    kernels_log = {}
    # The flash backend, vLLM and FlexAttention first (their schedules move), then the rest.
    order = sorted(ic.CASES, key=lambda c: c["backend"] in ("efficient", "cudnn"))
    for c in order:
        if only and c["name"] not in only and c["family"] not in only:
            continue
        if time.time() - T0 > BUDGET[0]:
            w.attrs[f"skipped_{c['name']}"] = 1
            print(f"budget: skipped {c['name']}", flush=True)
            continue
        if c["family"] == "vllm" and vllm_mod is None:
            continue
        if c["family"] == "fa3" and fa3_mod is None:
            continue
        t = time.time()
        try:
            record_case(w, c, torch, np, fa3_mod if c["family"] == "fa3" else vllm_mod,
                        kernels_log)
        except Exception as e:
            traceback.print_exc()
            w.attrs[f"error_{c['name']}"] = f"{type(e).__name__}: {e}"[:1000]
        w.flush()
        print(f"{c['name']}: {time.time() - t:.1f} s", flush=True)
    w.close()
    with open(os.path.join(args.out, "kernels.json"), "w") as f:
        json.dump({"env": env, "kernels": kernels_log}, f, indent=1)
    print(f"done in {time.time() - T0:.0f} s", flush=True)


def record_case(w, c, torch, np, mod, kernels_log):
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[c["dtype"]]
    run = {"sdpa": sdpa_runner, "flex": flex_runner, "vllm": vllm_runner,
           "fa3": fa3_runner}[c["family"]]
    g = w.create_group(c["name"])
    for key, val in c.items():
        g.attrs[key] = json.dumps(val)
    uniques, which, kernels, errors = [], [], [], {}
    repeatable = []
    for i, sit in enumerate(c["situations"]):
        if time.time() - T0 > BUDGET[0]:
            errors[sit] = "skipped: over the recording's time budget"
            which.append(-1)
            kernels.append([])
            continue
        seqs = ic.parse_situation(sit)
        try:
            call, target = run(c, seqs, dtype, torch, np, mod)
            call()
            torch.cuda.synchronize()
            o = target()
        except Exception as e:
            errors[sit] = f"{type(e).__name__}: {e}"[:300]
            which.append(-1)
            kernels.append([])
            print(f"  {c['name']} [{sit}]: {errors[sit]}", flush=True)
            continue
        j = next((u for u, x in enumerate(uniques) if x.shape == o.shape and
                  np.array_equal(x, o)), -1)
        if j < 0:
            j = len(uniques)
            uniques.append(o)
            # The last KEEP_ROWS query rows of each head are stored (a prefill's whole output
            # would make the file too large to commit); `which` compares whole outputs, and each
            # stored output carries its whole output's SHA-256 and the first row it keeps.
            keep = o[:, -KEEP_ROWS:, :]
            ds = g.create_dataset(f"o_{j}", data=keep, compression="gzip", shuffle=True)
            ds.attrs["row_from"] = int(o.shape[1] - keep.shape[1])
            ds.attrs["rows"] = int(o.shape[1])
            ds.attrs["sha256"] = hashlib.sha256(np.ascontiguousarray(o).tobytes()).hexdigest()
        # The profiler (a fraction of a second a call) for the first situation and each new
        # output only: the kernels of a repeated output are those of its first situation.
        ks = rst.kernels_of(call, torch) if (i == 0 or j == len(uniques) - 1 and
                                             j not in which) else ["same as o_%d" % j]
        which.append(j)
        kernels.append(ks)
        kernels_log[f"{c['name']}/{sit}"] = ks
        if i in (0, len(c["situations"]) - 1):
            call()
            torch.cuda.synchronize()
            repeatable.append(int(np.array_equal(target(), o)))
    g.attrs["situations"] = json.dumps(c["situations"])
    g.attrs["which"] = json.dumps(which)
    g.attrs["kernels"] = json.dumps(kernels)
    g.attrs["repeatable"] = int(all(repeatable))
    if errors:
        g.attrs["errors"] = json.dumps(errors)
    short = [k.split("<")[0].split("(")[0][-60:] for ks in kernels[:1] for k in ks]
    print(f"  {c['name']}: {len(uniques)} distinct outputs over {len(which)} situations; "
          f"which {which}; first kernels {short}", flush=True)


_GPU = {}


def _stack(c, seqs, dtype, torch, np):
    """Dense [B, H, L, d] tensors of a situation whose sequences share one shape: the target, then
    B - 1 copies of the shared neighbour (built on the GPU)."""
    if any(s != seqs[0] for s in seqs):
        raise ValueError("a dense kernel needs every sequence of the launch to have one shape")
    lq, lk = seqs[0]
    out = []
    for s in (0, 1):
        key = (c["name"], s, lq, lk, str(dtype))
        if key not in _GPU:
            _GPU[key] = [torch.from_numpy(np.ascontiguousarray(t)).cuda().to(dtype)
                         for t in ic.sequence(c, s, lq, lk)]
    t0, nb = _GPU[(c["name"], 0, lq, lk, str(dtype))], _GPU[(c["name"], 1, lq, lk, str(dtype))]
    B = len(seqs)
    for t in range(3):
        parts = [t0[t][None]] + ([nb[t][None].expand(B - 1, *nb[t].shape)] if B > 1 else [])
        out.append(torch.cat(parts).contiguous())
    return out


def _bits(t, np, torch):
    return t.contiguous().view(torch.int16).cpu().numpy().view(np.uint16)


def sdpa_runner(c, seqs, dtype, torch, np, _):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
               "cudnn": SDPBackend.CUDNN_ATTENTION}[c["backend"]]
    q, k, v = _stack(c, seqs, dtype, torch, np)
    causal = bool(c["causal"]) and seqs[0][0] > 1
    kw = {"is_causal": causal}
    if c["hq"] != c["hkv"]:
        kw["enable_gqa"] = True
    box = {}

    def call():
        with sdpa_kernel(backend):
            box["o"] = F.scaled_dot_product_attention(q, k, v, **kw)
    return call, lambda: _bits(box["o"][0], np, torch)


def flex_runner(c, seqs, dtype, torch, np, _):
    from torch.nn.attention.flex_attention import create_block_mask
    q, k, v = _stack(c, seqs, dtype, torch, np)
    lq, lk = seqs[0]
    block_mask = None
    if c["causal"] and lq > 1:
        def mask_mod(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx
        block_mask = create_block_mask(mask_mod, None, None, lq, lk, device="cuda")
    fn = rst.flex_compiled(torch)
    gqa = c["hq"] != c["hkv"]
    box = {}

    def call():
        box["o"] = rst.call_flex(fn, q, k, v, None, block_mask, None, gqa, torch)[0]
    return call, lambda: _bits(box["o"][0], np, torch)


def fa3_runner(c, seqs, dtype, torch, np, fa3):
    """FA3's dense [B, L, H, d] forward with num_splits = 0 (its heuristic) and its own
    (bottom-right) causal mask for every situation."""
    q, k, v = (t.transpose(1, 2).contiguous() for t in _stack(c, seqs, dtype, torch, np))
    box = {}

    def call():
        box["o"] = fa3._flash_attn_forward(q, k, v, softmax_scale=1.0 / float(np.sqrt(c["d"])),
                                           causal=bool(c["causal"]), num_splits=0)[0]
    return call, lambda: _bits(box["o"][0].transpose(0, 1), np, torch)


def vllm_runner(c, seqs, dtype, torch, np, mod):
    """The launch as vLLM lays it out: Q token-major [T, hq, d], K/V paged."""
    parts = [ic.sequence(c, s, lq, lk) for s, (lq, lk) in enumerate(seqs)]
    q = np.concatenate([p[0].transpose(1, 0, 2) for p in parts])          # [T, hq, d]
    k = np.concatenate([p[1].transpose(1, 0, 2) for p in parts])          # [sum L, hkv, d]
    v = np.concatenate([p[2].transpose(1, 0, 2) for p in parts])
    kv_lens = [lk for _, lk in seqs]
    q_lens = [lq for lq, _ in seqs]
    table, num_blocks = block_table(kv_lens, 16, c["seed"])
    inp = dict(q=q, k=k, v=v, block_table=table, num_blocks=num_blocks, seq_lens=kv_lens,
               query_lens=q_lens, cu_seqlens_q=np.concatenate([[0], np.cumsum(q_lens)])
               .astype(np.int32), sinks=None)
    vc = dict(hq=c["hq"], hkv=c["hkv"], d=c["d"], block_size=16, kv="auto", k_scale=1.0,
              v_scale=1.0, sinks=False, window=0, softcap=0.0, scale=1.0 / float(np.sqrt(c["d"])))
    mod.is_batch_invariant = bool(c["batch_invariant"])
    out, call, _ = rst.vllm_call(vc, inp, dtype, torch, np, mod)
    lq0 = seqs[0][0]
    # The target's rows: tokens 0 .. lq0 - 1 of `out` [T, hq, d] -> [hq, lq0, d].
    return call, lambda: _bits(out[:lq0].transpose(0, 1), np, torch)


if __name__ == "__main__":
    main()
