#!/usr/bin/env python3
"""Records what PyTorch's scaled_dot_product_attention computes on this GPU with each backend
forced (cuDNN, FlashAttention-2, memory-efficient, math) and with the default choice, for
attnsim's bit-exact SDPA models (sim/sdpa/README.md) to be checked against without a GPU.

Per case (CASES below) and dtype (fp16, bf16) it records, into OUT/sdpa_<dtype>.h5:
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
splitmix64 of (seed, tensor, flat index), the generator of cuda_check/sage/record_sage.py that
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

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
BACKENDS = {
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
    "default": None,
}
M64 = (1 << 64) - 1
# SDPA_DEVICE=cpu runs the script's own logic without a GPU (every backend but math then fails
# and is recorded as an error): a dry run before spending device time.
DEVICE = os.environ.get("SDPA_DEVICE", "cuda")


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def case(name, b, hq, hkv, lq, lk, d, causal, kind="lattice", seed=0, full=None,
         math_parts=False):
    return dict(name=name, b=b, hq=hq, hkv=hkv, lq=lq, lk=lk, d=d, causal=causal, kind=kind,
                seed=seed, full=full,
                math_parts=math_parts)


# Lengths are never multiples of any tile except where a split count is the point; the flash
# backend's split-KV heuristic (flash_api.cpp num_splits_heuristic, 2 x 132 SMs, block_n 256 for
# d <= 64 and 128 for d <= 128) picks: r512_h1 4 splits, r512_h16 2, r512_b2h16 and r77_b4h32 1
# (the plain flash_fwd_kernel), r1000 8.
CASES = [
    case("r77_d64", 1, 2, 2, 77, 77, 64, False, seed=11, math_parts=True),
    case("r200_d128_causal", 1, 2, 2, 200, 200, 128, True, seed=12, math_parts=True),
    case("r333_d64_causal", 2, 3, 3, 333, 333, 64, True, seed=13),
    case("r1000_d128", 1, 2, 2, 1000, 1000, 128, False, seed=14, full=[(0, 0)]),
    case("r1000_d128_causal", 1, 2, 2, 1000, 1000, 128, True, seed=15, full=[(0, 1)]),
    case("r77x333_d128_causal", 1, 1, 1, 77, 333, 128, True, seed=16),
    case("r333x200_d64_causal", 1, 2, 2, 333, 200, 64, True, seed=17),
    case("r333x200_d64", 1, 2, 2, 333, 200, 64, False, seed=18),
    case("gqa200_d128_causal", 1, 8, 2, 200, 200, 128, True, seed=19, full=[(0, 0), (0, 1), (0, 4), (0, 7)]),
    case("dec500_gqa_d128", 1, 8, 2, 1, 500, 128, False, seed=20, math_parts=True),
    case("dec4097_d128", 2, 4, 4, 1, 4097, 128, False, seed=21, math_parts=True),
    case("dec4097_gqa_d64", 1, 16, 2, 1, 4097, 64, False, seed=22),
    case("r512_h1_d128", 1, 1, 1, 512, 512, 128, False, seed=23),
    case("r512_h16_d128", 1, 16, 16, 512, 512, 128, False, seed=24, full=[(0, 0), (0, 15)]),
    case("r512_b2h16_d128", 2, 16, 16, 512, 512, 128, False, seed=25, full=[(0, 0), (1, 15)]),
    case("r77_b4h32_d64_causal", 4, 32, 32, 77, 77, 64, True, seed=26, full=[(0, 0), (3, 31)]),
    case("r200_d96", 1, 2, 2, 200, 200, 96, False, seed=27),
    case("r200_d256_causal", 1, 1, 1, 200, 200, 256, True, seed=28),
    case("sharp200_d128", 1, 2, 2, 200, 200, 128, False, kind="sharp", seed=29),
    case("sharp333_d64_causal", 1, 2, 2, 333, 333, 64, True, kind="sharp", seed=30),
    # Designed probes (inputs stored): see designed_inputs.
    case("uniform333_d128", 1, 1, 1, 4, 333, 128, False, kind="uniform", seed=31),
    case("uniform4097_d64", 1, 1, 1, 1, 4097, 64, False, kind="uniform", seed=32),
    case("cancel300_d128", 1, 4, 4, 2, 300, 128, False, kind="cancel", seed=33),
    case("cancel300_d64", 1, 4, 4, 2, 300, 64, False, kind="cancel", seed=34),
    case("exp2_d64", 1, 4, 4, 512, 2, 64, False, kind="exp", seed=35),
    case("exp2_d128", 1, 4, 4, 512, 2, 128, False, kind="exp", seed=36),
    case("onehot200_d128", 1, 2, 2, 64, 200, 128, False, kind="onehot", seed=37),
]


def splitmix64(z):
    z = (z + np.uint64(0x9E3779B97F4A7C15))
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def lattice_tensor(seed, tensor, shape):
    """tests/hw/sage_inputs.hpp lattice_value(seed, tensor, i) for every flat index i."""
    n = int(np.prod(shape))
    idx = np.arange(n, dtype=np.uint64)
    base = np.uint64((seed * 0x9E3779B97F4A7C15 ^ (tensor << 40)) & M64)
    acc = np.zeros(n, dtype=np.int64)
    with np.errstate(over="ignore"):
        for r in range(4):
            u = splitmix64(base ^ (np.uint64(r) << np.uint64(32)) ^ idx)
            acc += (u >> np.uint64(48)).astype(np.int64)
    return ((acc - 131072).astype(np.float32) * np.float32(2.0 ** -15)).reshape(shape)


def uniform_hash(seed, salt, n):
    with np.errstate(over="ignore"):
        return splitmix64(np.uint64((seed * 0x9E3779B97F4A7C15 ^ salt) & M64) ^
                          np.arange(n, dtype=np.uint64))


def designed_inputs(c, dname):
    """The designed probes, in float32 values every one of which the dtype represents exactly."""
    b, hq, hkv, lq, lk, d, seed = c["b"], c["hq"], c["hkv"], c["lq"], c["lk"], c["d"], c["seed"]
    q = np.zeros((b, hq, lq, d), np.float32)
    k = np.zeros((b, hkv, lk, d), np.float32)
    v = np.zeros((b, hkv, lk, d), np.float32)
    kind = c["kind"]
    if kind == "uniform":
        # q = 0: every score 0, every p exactly 1, l = Lk; O = sum(V) / Lk in the kernel's order.
        v[:] = lattice_tensor(seed, 3, v.shape)
    elif kind == "cancel":
        # q = 0 (p = 1); in column j of V, +B at key a_j, -B at b_j, s at c_j, 0 elsewhere: O_j
        # tells in which order and grouping the P.V accumulation met the three.
        big = {"fp16": [2.0 ** 14, 2.0 ** 14, 2.0 ** 10, 2.0 ** 4],
               "bf16": [2.0 ** 20, 2.0 ** 14, 2.0 ** 10, 2.0 ** 4]}[dname]
        small = {"fp16": [2.0 ** -12, 2.0 ** -9, 2.0 ** -14, 2.0 ** -20],
                 "bf16": [2.0 ** -5, 2.0 ** -11, 2.0 ** -14, 2.0 ** -20]}[dname]
        for h in range(hkv):
            u = uniform_hash(seed, 0xCA00 + h, 3 * d)
            for j in range(d):
                pos = []
                for t in range(3):
                    p = int(u[3 * j + t] % np.uint64(lk))
                    while p in pos:
                        p = (p + 1) % lk
                    pos.append(p)
                v[0, h, pos[0], j] = big[h]
                v[0, h, pos[1], j] = -big[h]
                v[0, h, pos[2], j] = small[h] * (1 + (j % 4) / 4.0)
    elif kind == "exp":
        # Two keys: k0 = 0 (score 0), k1 = e_0 (score x_i); q_i = (x_i, 0, ...). V = (e_0, e_1 +
        # big e_2): O_i0 = p0 / l, O_i1 = p1 / l, O_i2 = p1 big / l (p1 far below 1, subnormal
        # p in bf16), LSE = the kernel's log-sum-exp of (0, x_i * scale).
        ranges = [(-8.0, 8.0), (-64.0, 64.0), (-900.0, -500.0), (-1400.0, -900.0)]
        for h in range(hq):
            lo, hi = ranges[h % 4]
            u = uniform_hash(seed, 0xE400 + h, lq).astype(np.float64) / 2.0 ** 64
            x = lo + (hi - lo) * u
            q[0, h, :, 0] = x
        k[0, :, 1, 0] = 1.0
        v[0, :, 0, 0] = 1.0
        v[0, :, 1, 1] = 1.0
        v[0, :, 1, 2] = 2.0 ** 15 if dname == "fp16" else 2.0 ** 100  # p1 * big: tiny p visible
    elif kind == "onehot":
        # Query i selects keys by exact scores: q_i = 8 e_(i mod 8); key j = e_(j mod 8) * t_j with
        # t_j from {0, 1/2, 1, 2} so scores take 4 exact values per row; V lattice.
        for i in range(lq):
            q[0, :, i, i % 8] = 8.0
        t = np.array([0.0, 0.5, 1.0, 2.0], np.float32)
        u = uniform_hash(seed, 0x0E00, lk)
        for j in range(lk):
            k[0, :, j, j % 8] = t[int(u[j] % np.uint64(4))]
        v[:] = lattice_tensor(seed, 3, v.shape)
    else:
        raise ValueError(kind)
    return q, k, v


def inputs(c, dname):
    shape_q = (c["b"], c["hq"], c["lq"], c["d"])
    shape_kv = (c["b"], c["hkv"], c["lk"], c["d"])
    if c["kind"] in ("lattice", "sharp"):
        q = lattice_tensor(c["seed"], 1, shape_q)
        k = lattice_tensor(c["seed"], 2, shape_kv)
        v = lattice_tensor(c["seed"], 3, shape_kv)
        if c["kind"] == "sharp":  # scores 16x larger: many p underflow, the max matters
            q, k = q * np.float32(4), k * np.float32(4)
        return q, k, v, False
    q, k, v = designed_inputs(c, dname)
    return q, k, v, True


def bits16(t):
    return t.contiguous().view(torch.int16).cpu().numpy().view(np.uint16)


def fnv_rows(a):
    """FNV-1a (32-bit) over the bytes of each row of the last axis, in little-endian order."""
    a = np.ascontiguousarray(a)
    rows = a.reshape(-1, a.shape[-1]).view(np.uint8)
    h = np.full(rows.shape[0], 0x811C9DC5, dtype=np.uint64)
    for j in range(rows.shape[1]):
        h = ((h ^ rows[:, j].astype(np.uint64)) * np.uint64(0x01000193)) & np.uint64(0xFFFFFFFF)
    return h.astype(np.uint32).reshape(a.shape[:-1])


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
