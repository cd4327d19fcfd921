#!/usr/bin/env python3
"""Records what the public SageAttention kernels compute on this GPU, for attnsim's bit-exact
simulators (sim/sage/) to be checked against without a GPU (tests/hw/sage_h100_test.cpp).

It imports an already installed `sageattention` package (thu-ml/SageAttention; this project
neither ships nor builds it: data/hw/h100/sage/README.md says how the recording was made) and, for
every case of a manifest (cases.json: attnsim dumps, a layer group and a token count), in fp16 and
bf16, records:
  * the output o (as 16-bit patterns, head_dim as given) and the LSE of every public entry point
    that runs on the GPU: sageattn_qk_int8_pv_fp16_triton (SageAttention 1), _fp16_cuda with
    pv_accum_dtype fp32 / fp16+fp32 / fp16, _fp8_cuda with fp32 / fp32+fp32 / fp32+fp16, and
    _fp8_cuda_sm90 (fp32+fp32), all with return_lse=True and the case's causal flag;
  * the quantizer intermediates the entry points compute first: km (the smooth-K mean), the INT8
    Q/K and their scales for each block configuration, V in FP8 with its per-channel scales, the
    LSE correction term.
Usage (from the repository root, for data/real): python3 record_sage.py --manifest cases.json --out rec.h5
"""
import argparse
import json
import math
import os
import platform
import subprocess
import sys
import traceback

import h5py
import numpy as np
import torch

import sageattention as sa
from sageattention.quant import per_channel_fp8
from sageattention.triton.quant_per_block import per_block_int8
from sageattention.triton.quant_per_thread import per_thread_int8

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lattice import M64, lattice_tensor, splitmix64  # noqa: E402

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}

# Entry points: (name, function, keyword arguments).
PATHS = [
    ("sage1", sa.sageattn_qk_int8_pv_fp16_triton, {}),
    ("sm80_fp32", sa.sageattn_qk_int8_pv_fp16_cuda, {"pv_accum_dtype": "fp32"}),
    ("sm80_fp16+fp32", sa.sageattn_qk_int8_pv_fp16_cuda, {"pv_accum_dtype": "fp16+fp32"}),
    ("sm80_fp16", sa.sageattn_qk_int8_pv_fp16_cuda, {"pv_accum_dtype": "fp16"}),
    ("sm89_fp32", sa.sageattn_qk_int8_pv_fp8_cuda, {"pv_accum_dtype": "fp32"}),
    ("sm89_fp32+fp32", sa.sageattn_qk_int8_pv_fp8_cuda, {"pv_accum_dtype": "fp32+fp32"}),
    ("sm89_fp32+fp16", sa.sageattn_qk_int8_pv_fp8_cuda, {"pv_accum_dtype": "fp32+fp16"}),
    ("sm90", sa.sageattn_qk_int8_pv_fp8_cuda_sm90, {}),
]

# Q/K quantizer configurations (name, function, keyword arguments): the entry points' own.
QUANTS = [
    ("per_block_128_64", "block", {"BLKQ": 128, "BLKK": 64}),
    ("per_thread_128_32_64_64", "thread", {"BLKQ": 128, "WARPQ": 32, "BLKK": 64, "WARPK": 64}),
    ("per_thread_128_16_64_64", "thread", {"BLKQ": 128, "WARPQ": 16, "BLKK": 64, "WARPK": 64}),
    ("per_thread_64_16_128_128", "thread", {"BLKQ": 64, "WARPQ": 16, "BLKK": 128, "WARPK": 128}),
]


def bits16(t):
    return t.contiguous().view(torch.int16).cpu().numpy().view(np.uint16)


def pad_head_dim(x):
    d = x.size(-1)
    if d < 64:
        return torch.nn.functional.pad(x, (0, 64 - d))
    if 64 < d < 128:
        return torch.nn.functional.pad(x, (0, 128 - d))
    return x


# Synthetic inputs on an exact lattice (cuda_check/lattice.py), so that this script (numpy) and the
# CI test (tests/hw/sage_inputs.hpp, C++) make the same bits without carrying any file: every value
# is (sum of four 16-bit uniforms - 2^17) * 2^-15, an Irwin-Hall approximation of a normal with
# standard deviation 1.155, computed in integers. kbias adds an integer bias in [-4, 3] per
# channel to K and V; outlier multiplies 1/32 of the Q and K channels by 16; peaked sets each
# query to 4 x a key plus a quarter of its own noise.
def channel_hash(seed, salt, d):
    c = np.arange(d, dtype=np.uint64)
    return splitmix64(np.uint64((seed * 0x9E3779B97F4A7C15 ^ salt) & M64) ^ c)


def lattice_case(case):
    kind, seed = case["kind"], case["seed"]
    b, hq, hkv, n, d = case["b"], case["hq"], case["hkv"], case["n"], case["d"]
    with np.errstate(over="ignore"):
        q = lattice_tensor(seed, 1, (b, hq, n, d))
        k = lattice_tensor(seed, 2, (b, hkv, n, d))
        v = lattice_tensor(seed, 3, (b, hkv, n, d))
        if kind == "kbias":
            k += ((channel_hash(seed, 0xB1A5, d) >> np.uint64(61)).astype(np.float32) - 4)
            v += ((channel_hash(seed, 0xB1A6, d) >> np.uint64(61)).astype(np.float32) - 4)
        elif kind == "outlier":
            sel = (channel_hash(seed, 0x0717, d) >> np.uint64(59)) == 0
            q[..., sel] *= 16
            k[..., sel] *= 16
        elif kind == "peaked":
            j = (np.arange(n) * 7919) % n
            for h in range(hq):
                q[:, h] = 4 * k[:, h // (hq // hkv), j] + q[:, h] * np.float32(0.25)
    return q, k, v


def load_case(case):
    if "kind" in case:
        return lattice_case(case)
    with h5py.File(case["file"], "r") as f:
        g = f[case["group"]]
        n, hq = case.get("tokens", 0), case.get("heads_q", 0)
        q, k, v = (np.asarray(g[name][...], dtype=np.float32) for name in ("q", "k", "v"))
    if n:
        q, k, v = q[:, :, :n], k[:, :, :n], v[:, :, :n]
    if hq:  # the first hq query heads and the KV heads they read
        group = q.shape[1] // k.shape[1]
        q, k, v = q[:, :hq], k[:, :(hq + group - 1) // group], v[:, :(hq + group - 1) // group]
    return q, k, v


def record_case(w, case):
    q32, k32, v32 = load_case(case)
    causal = bool(case["causal"])
    for dname, dtype in DTYPES.items():
        grp = w.create_group(f"{case['name']}/{dname}")
        grp.attrs["causal"] = int(causal)
        q = torch.from_numpy(q32).cuda().to(dtype)
        k = torch.from_numpy(k32).cuda().to(dtype)
        v = torch.from_numpy(v32).cuda().to(dtype)
        d_og = q.size(-1)
        sm_scale = d_og ** -0.5
        # Intermediates, following core.py's steps (head dim padded, km, quantizers, V to FP8).
        qp, kp, vp = pad_head_dim(q), pad_head_dim(k), pad_head_dim(v)
        km = kp.mean(dim=2, keepdim=True)
        grp.create_dataset("km", data=bits16(km), compression="gzip")
        for qname, kind, kw in QUANTS:
            if qname == "per_thread_128_16_64_64" and qp.size(-1) != 128:
                continue
            if kind == "block":
                qi, qs, ki, ks = per_block_int8(qp, kp, km, sm_scale=sm_scale, **kw)
            else:
                qi, qs, ki, ks = per_thread_int8(qp, kp, km, **kw)
            for name, t in (("q_int8", qi), ("k_int8", ki)):
                grp.create_dataset(f"{name}_{qname}", data=t.cpu().numpy(), compression="gzip")
            for name, t in (("q_scale", qs), ("k_scale", ks)):
                grp.create_dataset(f"{name}_{qname}", data=t.cpu().numpy(), compression="gzip")
        for scale_max in (448.0, 2.25):
            for pad128 in (False, True):
                vv = vp
                if pad128 and vv.size(2) % 128:
                    z = torch.zeros(vv.size(0), vv.size(1), 128 - vv.size(2) % 128, vv.size(3),
                                    dtype=vv.dtype, device=vv.device)
                    vv = torch.cat([vv, z], dim=2)
                v8, vs, _ = per_channel_fp8(vv, scale_max=scale_max, smooth_v=False)
                tag = f"{scale_max:g}{'_pad128' if pad128 else ''}"
                grp.create_dataset(f"v_fp8_{tag}", data=v8.view(torch.uint8).cpu().numpy(),
                                   compression="gzip")
                grp.create_dataset(f"v_scale_{tag}", data=vs.cpu().numpy(), compression="gzip")
        corr = torch.matmul(qp, km.repeat_interleave(qp.size(1) // kp.size(1), dim=1)
                            .transpose(2, 3)).squeeze(-1).to(torch.float32)
        grp.create_dataset("lse_corr", data=corr.cpu().numpy(), compression="gzip")
        # The entry points.
        for pname, fn, kw in PATHS:
            try:
                o, lse = fn(q, k, v, tensor_layout="HND", is_causal=causal, return_lse=True, **kw)
                torch.cuda.synchronize()
                grp.create_dataset(f"o_{pname}", data=bits16(o), compression="gzip")
                grp.create_dataset(f"lse_{pname}", data=lse.float().cpu().numpy(),
                                   compression="gzip")
            except Exception as e:  # a path that cannot run here is recorded as such
                grp.attrs[f"error_{pname}"] = f"{type(e).__name__}: {e}"[:500]
                print(f"{case['name']}/{dname}/{pname}: {type(e).__name__}: {e}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cases = json.load(open(a.manifest))["cases"]
    torch.backends.cuda.matmul.allow_tf32 = False
    with h5py.File(a.out + ".tmp", "w") as w:
        w.attrs["gpu"] = torch.cuda.get_device_name(0)
        w.attrs["torch"] = str(torch.__version__)
        w.attrs["cuda"] = str(torch.version.cuda)
        try:
            import triton
            w.attrs["triton"] = str(triton.__version__)
        except Exception:
            pass
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30)
            w.attrs["driver"] = smi.stdout.strip()
        except Exception:
            pass
        w.attrs["python"] = platform.python_version()
        w.attrs["manifest"] = json.dumps(cases)
        for case in cases:
            try:
                record_case(w, case)
                print("recorded", case["name"], flush=True)
            except Exception:
                traceback.print_exc()
    os.replace(a.out + ".tmp", a.out)


if __name__ == "__main__":
    main()
