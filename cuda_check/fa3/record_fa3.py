#!/usr/bin/env python3
"""Records what FlashAttention-3's Hopper forward kernels compute on this GPU (FP16, BF16 and FP8
e4m3 with descale factors; causal and not; split-KV and not), for attnsim's bit-exact FA3 model
(sim/fa3/README.md) to be checked against without a GPU.

It imports an already built `flash_attn_interface` (Dao-AILab/flash-attention hopper/, built on the
GPU machine from its public source; this project neither ships nor builds it:
data/hw/h100/fa3/README.md says how the recording was made). Inputs are the lattice cases of
cuda_check/sdpa/record_sdpa.py (tests/hw/sage_inputs.hpp lattice_value, generated in [B, H, L, d]
order and transposed to FA3's [B, L, H, d]) and the designed q = 0 probe; e4m3 inputs are the
lattice values rounded by torch's float8_e4m3fn cast, with the descale factors of DESCALES.
Per case, dtype and split setting (OUT/fa3.h5, group CASE/DTYPE/SPLIT): o (16-bit patterns,
[B, H, Lq, d]), o_rows (FNV-1a per row), lse (float32 [B, H, Lq]), kernels (profiler names).
Usage: PYTHONPATH=<hopper dir> python3 cuda_check/fa3/record_fa3.py OUT.h5
"""
import json
import math
import os
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdpa"))
from record_sdpa import bits16, fnv_rows, kernels_of, lattice_tensor  # noqa: E402

import flash_attn_interface as fa3  # noqa: E402

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn}
# Split settings: num_splits 1 (no split), 0 (FA3's own heuristic), 3 (forced).
SPLITS = {"nosplit": 1, "heuristic": 0, "split3": 3}
# (name, b, hq, hkv, lq, lk, d, causal, kind, seed); causal masks are FA3's (bottom-right).
CASES = [
    ("r200_d128", 1, 2, 2, 200, 200, 128, False, "lattice", 41),
    ("r200_d64_causal", 1, 2, 2, 200, 200, 64, True, "lattice", 42),
    ("r333_d128_causal", 2, 3, 3, 333, 333, 128, True, "lattice", 43),
    ("r77x333_d64_causal", 1, 2, 2, 77, 333, 64, True, "lattice", 44),
    ("gqa200_d128_causal", 1, 8, 2, 200, 200, 128, True, "lattice", 45),
    ("dec4097_gqa_d128", 1, 8, 2, 1, 4097, 128, False, "lattice", 46),
    ("dec1000_d64", 2, 4, 4, 1, 1000, 64, False, "lattice", 47),
    ("r1000_d128", 1, 2, 2, 1000, 1000, 128, False, "lattice", 48),
    ("sharp200_d128", 1, 2, 2, 200, 200, 128, False, "sharp", 49),
    ("uniform333_d128", 1, 1, 1, 4, 333, 128, False, "uniform", 50),
    ("uniform333_d64", 1, 1, 1, 4, 333, 64, False, "uniform", 51),
]
# e4m3: per (batch, KV head) descale factors, as flash_attn_func takes them.
DESCALES = {"q": [0.5, 0.375, 1.0, 0.0625], "k": [0.25, 1.5, 0.125, 2.0], "v": [2.0, 0.625, 1.0, 0.5]}


def case_inputs(name, b, hq, hkv, lq, lk, d, kind, seed):
    if kind == "uniform":
        q = np.zeros((b, hq, lq, d), np.float32)
        k = np.zeros((b, hkv, lk, d), np.float32)
        v = lattice_tensor(seed, 3, (b, hkv, lk, d))
        return q, k, v
    q = lattice_tensor(seed, 1, (b, hq, lq, d))
    k = lattice_tensor(seed, 2, (b, hkv, lk, d))
    v = lattice_tensor(seed, 3, (b, hkv, lk, d))
    if kind == "sharp":
        q, k = q * np.float32(4), k * np.float32(4)
    return q, k, v


def descale(name, b, hkv):
    vals = DESCALES[name]
    t = torch.tensor([[vals[(i * hkv + j) % len(vals)] for j in range(hkv)] for i in range(b)],
                     dtype=torch.float32, device="cuda")
    return t


def main():
    out = sys.argv[1]
    w = h5py.File(out, "w")
    w.attrs["torch"] = str(torch.__version__)
    w.attrs["gpu"] = torch.cuda.get_device_name(0)
    w.attrs["command"] = " ".join(sys.argv)
    w.attrs["descales"] = json.dumps(DESCALES)
    for name, b, hq, hkv, lq, lk, d, causal, kind, seed in CASES:
        q32, k32, v32 = case_inputs(name, b, hq, hkv, lq, lk, d, kind, seed)
        for dname, dtype in DTYPES.items():
            # [B, H, L, d] -> FA3's [B, L, H, d]
            q, k, v = (torch.from_numpy(x).cuda().to(dtype).transpose(1, 2).contiguous()
                       for x in (q32, k32, v32))
            kw = {}
            if dname == "e4m3":
                kw = {f"{n}_descale": descale(n, b, hkv) for n in ("q", "k", "v")}
            for sname, ns in SPLITS.items():
                g = w.create_group(f"{name}/{dname}/{sname}")
                g.attrs.update(dict(b=b, hq=hq, hkv=hkv, lq=lq, lk=lk, d=d, causal=int(causal),
                                    kind=kind, seed=seed, num_splits=ns))
                if dname == "e4m3":
                    for n in ("q", "k", "v"):
                        g.create_dataset(f"{n}_descale", data=kw[f"{n}_descale"].cpu().numpy())

                def call():
                    return fa3._flash_attn_forward(q, k, v, softmax_scale=1.0 / math.sqrt(d),
                                                   causal=causal, num_splits=ns, **kw)
                try:
                    o, lse = call()[:2]
                    torch.cuda.synchronize()
                    ob = o.transpose(1, 2).contiguous()
                    ob = ob.view(torch.int16).cpu().numpy().view(np.uint16)
                    g.create_dataset("o", data=ob, compression="gzip", shuffle=True)
                    g.create_dataset("o_rows", data=fnv_rows(ob), compression="gzip")
                    g.create_dataset("lse", data=lse.float().cpu().numpy(), compression="gzip")
                    g.attrs["o_dtype"] = str(o.dtype)
                    o2 = call()[0].transpose(1, 2).contiguous()
                    g.attrs["repeatable"] = int(np.array_equal(
                        o2.view(torch.int16).cpu().numpy().view(np.uint16), ob))
                    g.attrs["kernels"] = json.dumps(kernels_of(call))
                except Exception as e:
                    g.attrs["error"] = f"{type(e).__name__}: {e}"[:500]
                    print(f"{name}/{dname}/{sname}: {type(e).__name__}: {e}", file=sys.stderr)
        print(name, flush=True)
    w.close()


if __name__ == "__main__":
    main()
