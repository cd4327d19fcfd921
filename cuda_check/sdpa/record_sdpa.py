#!/usr/bin/env python3
"""Records what PyTorch's scaled_dot_product_attention computes on this GPU with each backend
forced (cuDNN, FlashAttention-2, memory-efficient, math) and with the default choice, for
attnsim's bit-exact SDPA models (sim/sdpa/README.md) to be checked against without a GPU.

Per case (CASES, sdpa_cases.py) and dtype (fp16, bf16) it records, into OUT/sdpa_<dtype>.h5:
  * o_<backend>       the output of F.scaled_dot_product_attention under sdpa_kernel(backend), as
                      16-bit patterns, in full for the (batch, head) pairs of the case's `full`
                      list (every head by default);
  * o_<backend>_rows  FNV-1a (32-bit) of every output row's 16-bit patterns (all heads);
  * lse_<backend>     the log-sum-exp the backend's own aten op returns (float32; the flash,
                      efficient and cuDNN ops, called with the same arguments), and the attribute
                      lse_<backend>_same_o: whether that op's O equals the public call's bit for bit;
  * kernels_<backend> the CUDA kernels the profiler saw for the public call;
  * math_s, math_p    for cases with `math_parts`: the math backend's score and softmax matrices
                      (float32) recomputed with the same torch ops (attention.cpp's
                      _scaled_dot_product_attention_math), and the attribute math_replica_same_o;
  * q, k, v           the inputs as 16-bit patterns, for the designed (non-lattice) cases only.
Lattice inputs are not stored: every value is (sum of four 16-bit uniforms - 2^17) * 2^-15 from
splitmix64 of (seed, tensor, flat index), the generator of cuda_check/lattice.py that
tests/hw/sage_inputs.hpp (lattice_value) reproduces bit for bit, rounded to the dtype by torch
(round to nearest even). Causal masks are SDPA's (is_causal=True: top-left aligned).
Usage, from the repository root on the GPU machine: python3 cuda_check/sdpa/record_sdpa.py OUTDIR
"""
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
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# The cases and their inputs (numpy only; also what the models replay). Re-exported for
# cuda_check/fa3/record_fa3.py.
from sdpa_cases import (CASES, M64, case, designed_inputs, fnv_rows, inputs,  # noqa: F401
                        lattice_tensor, splitmix64, uniform_hash)

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
BACKENDS = {
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
    "default": None,
}
# SDPA_DEVICE=cpu runs the script's own logic without a GPU (every backend but math then fails
# and is recorded as an error): a dry run before spending device time.
DEVICE = os.environ.get("SDPA_DEVICE", "cuda")


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def bits16(t):
    return t.contiguous().view(torch.int16).cpu().numpy().view(np.uint16)


def kernels_of(fn):
    """CUDA kernel names the profiler sees while fn runs (in launch order, repeats kept)."""
    from torch.profiler import ProfilerActivity, profile
    act = ProfilerActivity.CUDA if DEVICE == "cuda" else ProfilerActivity.CPU
    with profile(activities=[act]) as prof:
        fn()
        sync()
    names = []
    for e in prof.events():
        dt = getattr(e, "device_type", None)
        if dt is not None and "CUDA" in str(dt):
            names.append(e.name)
    return names


def public_call(q, k, v, causal, gqa, backend):
    kw = {"is_causal": causal}
    if gqa:
        kw["enable_gqa"] = True
    if backend is None:
        return F.scaled_dot_product_attention(q, k, v, **kw)
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q, k, v, **kw)


def expand_kv(q, k, v):
    g = q.size(1) // k.size(1)
    return (k, v) if g == 1 else (k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1))


def lse_call(name, q, k, v, causal):
    """The backend's aten op with the log-sum-exp requested: (o, lse, how)."""
    ops = torch.ops.aten
    attempts = [(k, v, "kv")]
    if k.size(1) != q.size(1):
        attempts.append(expand_kv(q, k, v) + ("kv_repeat_interleave",))
    last = None
    for kk, vv, how in attempts:
        try:
            if name == "flash":
                r = ops._scaled_dot_product_flash_attention(q, kk, vv, 0.0, causal, False)
            elif name == "efficient":
                r = ops._scaled_dot_product_efficient_attention(q, kk, vv, None, True, 0.0, causal)
            elif name == "cudnn":
                r = ops._scaled_dot_product_cudnn_attention(q, kk, vv, None, True, 0.0, causal, False)
            else:
                return None
            sync()
            return r[0], r[1], how
        except Exception as e:  # try the expanded K/V, then give up
            last = e
    raise last


def math_replica(q, k, v, causal, scale_first=False):
    """attention.cpp _scaled_dot_product_attention_math, step by step (fp16/bf16 upcast to
    float32, both operands scaled by sqrt(1/sqrt(d)), additive -inf causal mask, _safe_softmax);
    scale_first: the scale multiplies in the input dtype before the upcast instead."""
    sf = math.sqrt(1.0 / math.sqrt(q.size(-1)))
    if scale_first:
        qs, kt = (q * sf).float(), (k.transpose(-2, -1) * sf).float()
    else:
        qs, kt = q.float() * sf, k.float().transpose(-2, -1) * sf
    g = q.size(1) // k.size(1)
    if g > 1:
        kt = kt.repeat_interleave(g, dim=1)
    vf = v.float() if g == 1 else v.float().repeat_interleave(g, dim=1)
    s = torch.matmul(qs, kt)
    if causal:
        mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()
        s = s + torch.zeros_like(mask, dtype=torch.float32).masked_fill(~mask, float("-inf"))
    p = torch.ops.aten._safe_softmax(s, -1)
    o = torch.matmul(p, vf).to(q.dtype)
    return s, p, o


def record_case(w, c, dname, dtype, kernels_log):
    q32, k32, v32, store_inputs = inputs(c, dname)
    g = w.create_group(c["name"])
    for key in ("b", "hq", "hkv", "lq", "lk", "d", "seed"):
        g.attrs[key] = c[key]
    g.attrs["causal"] = int(c["causal"])
    g.attrs["kind"] = c["kind"]
    q = torch.from_numpy(q32).to(DEVICE).to(dtype)
    k = torch.from_numpy(k32).to(DEVICE).to(dtype)
    v = torch.from_numpy(v32).to(DEVICE).to(dtype)
    if store_inputs:
        for name, t in (("q", q), ("k", k), ("v", v)):
            g.create_dataset(name, data=bits16(t), compression="gzip", shuffle=True)
    causal, gqa = c["causal"], c["hq"] != c["hkv"]
    full = c["full"]
    g.attrs["full"] = json.dumps(full if full is not None else "all")
    outs = {}
    for bname, backend in BACKENDS.items():
        try:
            o = public_call(q, k, v, causal, gqa, backend)
            sync()
            ob = bits16(o)
            outs[bname] = ob
            g.create_dataset(f"o_{bname}_rows", data=fnv_rows(ob), compression="gzip")
            if bname != "default":
                if full is None:
                    g.create_dataset(f"o_{bname}", data=ob, compression="gzip", shuffle=True)
                else:
                    sel = np.stack([ob[bb, hh] for bb, hh in full])
                    g.create_dataset(f"o_{bname}", data=sel, compression="gzip", shuffle=True)
        except Exception as e:
            g.attrs[f"error_{bname}"] = f"{type(e).__name__}: {e}"[:500]
            print(f"{c['name']}/{dname}/{bname}: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        try:
            ks = kernels_of(lambda: public_call(q, k, v, causal, gqa, backend))
            g.attrs[f"kernels_{bname}"] = json.dumps(ks)
            kernels_log.setdefault(bname, {})[f"{c['name']}/{dname}"] = ks
        except Exception as e:
            g.attrs[f"error_kernels_{bname}"] = f"{type(e).__name__}: {e}"[:500]
    for bname, ob in outs.items():
        if bname != "default" and "default" in outs:
            g.attrs[f"default_equals_{bname}"] = int(np.array_equal(ob, outs["default"]))
    for bname in ("flash", "efficient", "cudnn"):
        try:
            r = lse_call(bname, q, k, v, causal)
            o2, lse, how = r
            g.create_dataset(f"lse_{bname}", data=lse.float().cpu().numpy(), compression="gzip")
            g.attrs[f"lse_{bname}_how"] = how
            if bname in outs:
                g.attrs[f"lse_{bname}_same_o"] = int(np.array_equal(bits16(o2), outs[bname]))
        except Exception as e:
            g.attrs[f"error_lse_{bname}"] = f"{type(e).__name__}: {e}"[:500]
            print(f"{c['name']}/{dname}/lse_{bname}: {type(e).__name__}: {e}", file=sys.stderr)
    if c["math_parts"] and "math" in outs:
        try:
            s, p, o = math_replica(q, k, v, causal)
            sync()
            g.create_dataset("math_s", data=s.cpu().numpy(), compression="gzip", shuffle=True)
            g.create_dataset("math_p", data=p.cpu().numpy(), compression="gzip", shuffle=True)
            g.attrs["math_replica_same_o"] = int(np.array_equal(bits16(o), outs["math"]))
            o1 = math_replica(q, k, v, causal, scale_first=True)[2]
            g.attrs["math_replica_scale_first_same_o"] = int(np.array_equal(bits16(o1), outs["math"]))
            g.attrs["kernels_math_replica"] = json.dumps(
                kernels_of(lambda: math_replica(q, k, v, causal)))
        except Exception as e:
            g.attrs["error_math_replica"] = f"{type(e).__name__}: {e}"[:500]
    # Repeatability: the default call again, bit for bit.
    if "default" in outs:
        o = public_call(q, k, v, causal, gqa, None)
        g.attrs["default_repeatable"] = int(np.array_equal(bits16(o), outs["default"]))


def environment():
    env = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "gpu": torch.cuda.get_device_name(0) if DEVICE == "cuda" else "cpu",
        "sm_count": torch.cuda.get_device_properties(0).multi_processor_count
        if DEVICE == "cuda" else 0,
        "python": platform.python_version(),
        "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "allow_fp16_bf16_reduction_math_sdp":
            torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
            if hasattr(torch.backends.cuda, "fp16_bf16_reduction_math_sdp_allowed") else None,
    }
    try:
        env["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    return env


def main():
    out = sys.argv[1]
    only = set(sys.argv[2].split(",")) if len(sys.argv) > 2 else None
    os.makedirs(out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    env = environment()
    kernels_log = {}
    for dname, dtype in DTYPES.items():
        with h5py.File(os.path.join(out, f"sdpa_{dname}.h5"), "w") as w:
            for key, val in env.items():
                w.attrs[key] = json.dumps(val)
            w.attrs["command"] = " ".join(sys.argv)
            for c in CASES:
                if only and c["name"] not in only:
                    continue
                try:
                    record_case(w, c, dname, dtype, kernels_log)
                except Exception:
                    traceback.print_exc()
            print(f"{dname}: {len(w.keys())} cases", flush=True)
    with open(os.path.join(out, "sdpa_kernels.json"), "w") as f:
        json.dump({"env": env, "kernels": kernels_log}, f, indent=1)
    names = sorted({n for per in kernels_log.values() for ks in per.values() for n in ks})
    print("kernels seen:")
    for n in names:
        print("  " + n[:200])


if __name__ == "__main__":
    main()
