#!/usr/bin/env python3
"""Records what the Triton-generated serving kernels compute on this GPU, for attnsim's `flex` and
`vllm_triton` presets to be checked against without a GPU (issue 39):

  * FlexAttention (`torch.nn.attention.flex_attention.flex_attention` under `torch.compile`, as the
    installed torch and Triton generate it): the prefill template and the decode template (short
    queries), fp16/bf16, GQA, block masks (none, causal, sliding-window causal), the softcap score
    modification, a custom scale, and the LSE it returns. -> OUT/flex_h100.h5
  * vLLM's `unified_attention` (vllm/v1/attention/ops/triton_unified_attention.py of the vLLM
    release named by --vllm-src, read from that file; the file is brought to the GPU machine, never
    committed): the 2D kernel (prefill, mixed and large decode batches) and the 3D kernel with
    `reduce_segments` (small decode batches), paged KV with a shuffled block table, fp16/bf16, FP8
    e4m3 KV with per-tensor scales, sliding window, softcap and sinks. -> OUT/vllm_triton_h100.h5
  * OUT/kernels.tar.gz: what Triton compiled (the Triton cache: .ttir/.ttgir/.llir/.ptx/.cubin/.json,
    and cuobjdump's SASS of every cubin), Inductor's generated modules, the profiler's kernel names
    per case, and the installed torch's flex templates (read, not committed).

Inputs are the lattice of cuda_check/lattice.py (not stored; rounded to the dtype by torch, round to
nearest even) unless a case stores them (designed probes, FP8 caches). Every case is independent:
one that fails is logged and the rest go on; a deadline (--budget seconds) skips what is left.
Usage, on the GPU machine from the repository root:
  python3 cuda_check/serving/record_serving_triton.py OUT [--budget S] [--vllm-src DIR] [--only a,b]
"""
import argparse
import glob
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "sdpa"))

from serving_cases import (FLEX_CASES, VLLM_CASES, cache_slots, flex_inputs,  # noqa: E402
                           vllm_inputs)

T0 = time.time()


def set_caches(work):
    """Triton's and Inductor's caches under `work` (before torch is imported), so that what they
    compiled can be packed."""
    os.environ["TRITON_CACHE_DIR"] = os.path.join(work, "triton_cache")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(work, "inductor_cache")
    os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--budget", type=float, default=1e9, help="seconds; cases after it are skipped")
    ap.add_argument("--vllm-src", default=None, help="folder holding vllm/v1/attention/ops/"
                    "triton_unified_attention.py and triton_attention_helpers.py")
    ap.add_argument("--only", default=None)
    ap.add_argument("--order", default="interleave", help="interleave | flex | vllm")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="serving_rec_")
    set_caches(work)

    import numpy as np
    import torch

    only = set(args.only.split(",")) if args.only else None
    env = environment(torch)
    print(json.dumps(env), flush=True)
    kernels_log = {}

    flex_w = open_recording(os.path.join(args.out, "flex_h100.h5"), env)
    vllm_w = open_recording(os.path.join(args.out, "vllm_triton_h100.h5"), env)

    vllm_mod = None
    vllm_err = None
    if args.vllm_src:
        try:
            vllm_mod = import_vllm(args.vllm_src, work)
            vllm_w.attrs["vllm_src_sha256"] = json.dumps(sha_files(args.vllm_src))
        except Exception as e:
            vllm_err = f"{type(e).__name__}: {e}"
            traceback.print_exc()
            vllm_w.attrs["error_import"] = vllm_err[:1000]

    queue = []
    fl = [("flex", c) for c in FLEX_CASES]
    vl = [("vllm", c) for c in VLLM_CASES]
    if args.order == "interleave":
        while fl or vl:
            if fl:
                queue.append(fl.pop(0))
            if vl:
                queue.append(vl.pop(0))
    else:
        queue = (fl + vl) if args.order == "flex" else (vl + fl)

    done = {"flex": 0, "vllm": 0}
    for kind, c in queue:
        if only and c["name"] not in only:
            continue
        if time.time() - T0 > args.budget:
            print(f"budget: skipped {kind}/{c['name']}", flush=True)
            (flex_w if kind == "flex" else vllm_w).attrs[f"skipped_{c['name']}"] = 1
            continue
        t = time.time()
        try:
            if kind == "flex":
                record_flex(flex_w, c, torch, np, kernels_log)
            elif vllm_mod is not None:
                record_vllm(vllm_w, c, torch, np, vllm_mod, kernels_log)
            else:
                continue
            done[kind] += 1
        except Exception as e:
            traceback.print_exc()
            w = flex_w if kind == "flex" else vllm_w
            w.attrs[f"error_{c['name']}"] = f"{type(e).__name__}: {e}"[:1000]
        print(f"{kind}/{c['name']}: {time.time() - t:.1f} s", flush=True)
        flex_w.flush()
        vllm_w.flush()
    flex_w.close()
    vllm_w.close()
    print(f"recorded flex {done['flex']}, vllm {done['vllm']} in {time.time() - T0:.0f} s",
          flush=True)
    pack(args.out, work, torch, kernels_log, env)


# ----------------------------------------------------------------------------------------------
def environment(torch):
    import triton
    env = {
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0),
        "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
        "capability": list(torch.cuda.get_device_capability(0)),
        "python": platform.python_version(),
    }
    try:
        env["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    try:
        import torch._inductor.config as ic
        env["inductor_max_autotune"] = bool(ic.max_autotune)
    except Exception:
        pass
    return env


def load_extension(torch, path):
    """Loads a compiled torch extension (a .so a wheel ships) and returns the file's SHA-256."""
    import hashlib
    torch.ops.load_library(path)
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def open_recording(path, env):
    """An HDF5 recording with the environment and the command as root attributes."""
    import h5py
    w = h5py.File(path, "w")
    for k, v in env.items():
        w.attrs[k] = json.dumps(v)
    w.attrs["command"] = " ".join(sys.argv)
    return w


def record_cases(w, cases, only, record_one):
    """record_one(w, case) for every case (or those named in `only`): one that fails is logged in
    the attribute error_NAME and the rest go on. Returns how many were recorded."""
    done = 0
    for c in cases:
        if only and c["name"] not in only:
            continue
        t = time.time()
        try:
            record_one(w, c)
            done += 1
        except Exception as e:
            traceback.print_exc()
            w.attrs[f"error_{c['name']}"] = f"{type(e).__name__}: {e}"[:1000]
        print(f"{c['name']}: {time.time() - t:.1f} s", flush=True)
        w.flush()
    return done


def sha_files(d):
    import hashlib
    out = {}
    for p in sorted(glob.glob(os.path.join(d, "**", "*.py"), recursive=True)):
        with open(p, "rb") as f:
            out[os.path.relpath(p, d)] = hashlib.sha256(f.read()).hexdigest()
    return out


def bits16(t):
    import numpy as np
    return t.contiguous().view(__import__("torch").int16).cpu().numpy().view(np.uint16)


def kernels_of(fn, torch):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = []
    for e in prof.events():
        dt = getattr(e, "device_type", None)
        if dt is not None and "CUDA" in str(dt):
            names.append(e.name)
    return names


# ----------------------------------------------------------------------------------------------
# FlexAttention
_FLEX = {}


def flex_compiled(torch):
    if "fn" not in _FLEX:
        import torch._dynamo
        from torch.nn.attention.flex_attention import flex_attention
        for key in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                    "accumulated_recompile_limit"):
            if hasattr(torch._dynamo.config, key):
                setattr(torch._dynamo.config, key, 4096)
        _FLEX["fn"] = torch.compile(flex_attention, dynamic=False, fullgraph=True)
    return _FLEX["fn"]


def flex_mods(c, torch):
    """(score_mod, mask_mod) of a case."""
    score_mod = None
    if c["softcap"]:
        cap = float(c["softcap"])

        def score_mod(score, b, h, q_idx, kv_idx):
            return cap * torch.tanh(score / cap)
    mask_mod = None
    if c["mask"] == "causal":
        def mask_mod(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx
    elif c["mask"] == "window":
        win = int(c["window"])

        def mask_mod(b, h, q_idx, kv_idx):
            return (q_idx >= kv_idx) & (q_idx - kv_idx < win)
    elif c["mask"] != "none":
        raise ValueError(c["mask"])
    return score_mod, mask_mod


def call_flex(fn, q, k, v, score_mod, block_mask, scale, gqa, torch):
    """(out, lse, how) with the LSE the public call returns."""
    kw = dict(score_mod=score_mod, block_mask=block_mask, scale=scale, enable_gqa=gqa)
    try:
        from torch.nn.attention.flex_attention import AuxRequest
        o, aux = fn(q, k, v, return_aux=AuxRequest(lse=True), **kw)
        return o, aux.lse, "return_aux"
    except ImportError:
        o, lse = fn(q, k, v, return_lse=True, **kw)
        return o, lse, "return_lse"


def record_flex(w, c, torch, np, kernels_log):
    from torch.nn.attention.flex_attention import create_block_mask
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[c["dtype"]]
    q32, k32, v32, store = flex_inputs(c)
    g = w.create_group(c["name"])
    for key, val in c.items():
        g.attrs[key] = json.dumps(val)
    q = torch.from_numpy(q32).cuda().to(dtype)
    k = torch.from_numpy(k32).cuda().to(dtype)
    v = torch.from_numpy(v32).cuda().to(dtype)
    if store:
        for name, t in (("q", q), ("k", k), ("v", v)):
            g.create_dataset(name, data=bits16(t), compression="gzip", shuffle=True)
    score_mod, mask_mod = flex_mods(c, torch)
    block_mask = None
    if mask_mod is not None:
        block_mask = create_block_mask(mask_mod, None, None, c["lq"], c["lk"], device="cuda")
        g.attrs["block_mask"] = str(block_mask)[:2000]
    gqa = c["hq"] != c["hkv"]
    fn = flex_compiled(torch)
    o, lse, how = call_flex(fn, q, k, v, score_mod, block_mask, c["scale"], gqa, torch)
    torch.cuda.synchronize()
    ob = bits16(o)
    g.create_dataset("o", data=ob, compression="gzip", shuffle=True)
    g.attrs["o_dtype"] = str(o.dtype)
    g.create_dataset("lse", data=lse.float().cpu().numpy(), compression="gzip", shuffle=True)
    g.attrs["lse_dtype"] = str(lse.dtype)
    g.attrs["lse_how"] = how
    ks = kernels_of(lambda: call_flex(fn, q, k, v, score_mod, block_mask, c["scale"], gqa,
                                      torch), torch)
    g.attrs["kernels"] = json.dumps(ks)
    kernels_log[f"flex/{c['name']}"] = ks
    o2, lse2, _ = call_flex(fn, q, k, v, score_mod, block_mask, c["scale"], gqa, torch)
    g.attrs["repeatable"] = int(np.array_equal(bits16(o2), ob) and
                                np.array_equal(lse2.float().cpu().numpy(),
                                               lse.float().cpu().numpy()))
    # FP64 of the same inputs (a check of the recording, not of the kernel).
    s = torch.einsum("bhqd,bhkd->bhqk", q.double(),
                     k.double().repeat_interleave(c["hq"] // c["hkv"], 1))
    s = s * (c["scale"] if c["scale"] is not None else 1.0 / math.sqrt(c["d"]))
    if c["softcap"]:
        s = c["softcap"] * torch.tanh(s / c["softcap"])
    if mask_mod is not None:
        qi = torch.arange(c["lq"], device="cuda")[:, None]
        ki = torch.arange(c["lk"], device="cuda")[None, :]
        keep = qi >= ki
        if c["mask"] == "window":
            keep = keep & (qi - ki < c["window"])
        s = s.masked_fill(~keep, float("-inf"))
    ref = torch.softmax(s, -1) @ v.double().repeat_interleave(c["hq"] // c["hkv"], 1)
    g.attrs["max_abs_err_vs_fp64"] = float((o.double() - ref).abs().max())
    print(f"  flex/{c['name']}: kernels {sorted(set(ks))}", flush=True)


# ----------------------------------------------------------------------------------------------
# vLLM unified attention
SHIMS = {
    "vllm/__init__.py": "",
    "vllm/envs.py": "VLLM_BATCH_INVARIANT = False\nVLLM_TRITON_FORCE_FIRST_CONFIG = False\n",
    "vllm/logger.py": (
        "import logging\n"
        "class _L(logging.LoggerAdapter):\n"
        "    def debug_once(self, *a, **k):\n        pass\n"
        "    def info_once(self, *a, **k):\n        pass\n"
        "    def warning_once(self, *a, **k):\n        pass\n"
        "def init_logger(name):\n    return _L(logging.getLogger(name), {})\n"),
    "vllm/platforms/__init__.py": (
        "import torch\n"
        "class _P:\n"
        "    def fp8_dtype(self):\n        return torch.float8_e4m3fn\n"
        "    def is_rocm(self):\n        return False\n"
        "    def is_cuda(self):\n        return True\n"
        "    def is_device_capability_family(self, c):\n"
        "        m, n = torch.cuda.get_device_capability()\n        return m * 10 == c\n"
        "    def is_device_capability(self, c):\n"
        "        return tuple(torch.cuda.get_device_capability()) == tuple(c)\n"
        "current_platform = _P()\n"),
    "vllm/triton_utils/__init__.py": (
        "import triton\nimport triton.language as tl\n"
        "import triton.language.extra.libdevice as tldevice\n"
        "HAS_TRITON = True\nLOG2E = 1.4426950408889634\nLOGE2 = 0.6931471805599453\n"),
    "vllm/v1/__init__.py": "",
    "vllm/v1/attention/__init__.py": "",
    "vllm/v1/attention/ops/__init__.py": "",
    "vllm/v1/kv_cache_interface.py": (
        "from enum import IntEnum\n"
        "class KVQuantMode(IntEnum):\n"
        "    NONE = 0\n    FP8_PER_TENSOR = 1\n    INT8_PER_TOKEN_HEAD = 2\n"
        "    FP8_PER_TOKEN_HEAD = 3\n    INT4_PER_TOKEN_HEAD = 4\n    NVFP4 = 5\n"),
}


def import_vllm(src, work):
    root = os.path.join(work, "vllm_shim")
    for rel, text in SHIMS.items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)
    for name in ("triton_unified_attention.py", "triton_attention_helpers.py"):
        hits = glob.glob(os.path.join(src, "**", name), recursive=True)
        if not hits:
            raise FileNotFoundError(f"{name} not under {src}")
        shutil.copy(hits[0], os.path.join(root, "vllm/v1/attention/ops", name))
    sys.path.insert(0, root)
    import importlib
    return importlib.import_module("vllm.v1.attention.ops.triton_unified_attention")


def vllm_call(c, inp, dtype, torch, np, mod):
    """(out, call, caches): `call()` runs unified_attention on the case's inputs (vllm_inputs'
    layout) into `out` [T, hq, d]; caches = the e4m3 K/V bytes of an FP8 case, else None. Also
    used by cuda_check/schedule/record_invariance.py."""
    hq, hkv, d, bs = c["hq"], c["hkv"], c["d"], c["block_size"]
    q = torch.from_numpy(inp["q"]).cuda().to(dtype)               # [T, hq, d]
    k_log = torch.from_numpy(inp["k"]).cuda().to(dtype)           # [sum seq_lens, hkv, d]
    v_log = torch.from_numpy(inp["v"]).cuda().to(dtype)
    block_table = torch.from_numpy(inp["block_table"]).cuda()     # [num_seqs, max_blocks] int32
    nblocks = int(inp["num_blocks"])
    fp8 = c["kv"] == "e4m3"
    caches = None
    kv_dtype = torch.float8_e4m3fn if fp8 else dtype
    if fp8:
        k_log = (k_log.float() / c["k_scale"]).to(torch.float8_e4m3fn)
        v_log = (v_log.float() / c["v_scale"]).to(torch.float8_e4m3fn)
        caches = (k_log.view(torch.uint8).cpu().numpy(), v_log.view(torch.uint8).cpu().numpy())
    # Paged caches [num_blocks, block_size, hkv, d]; unused slots hold NaN (16-bit) or 0x7f (fp8
    # NaN), which a correct kernel never reads into a result.
    kc = torch.full((nblocks, bs, hkv, d), float("nan"), device="cuda", dtype=dtype).to(kv_dtype)
    vc = torch.full((nblocks, bs, hkv, d), float("nan"), device="cuda", dtype=dtype).to(kv_dtype)
    seq_lens = inp["seq_lens"]
    idx = torch.from_numpy(cache_slots(inp["block_table"], seq_lens, bs)).cuda()
    kc.view(nblocks * bs, hkv, d)[idx] = k_log
    vc.view(nblocks * bs, hkv, d)[idx] = v_log
    T = q.shape[0]
    out = torch.zeros((T, hq, d), device="cuda", dtype=dtype)
    cu = torch.from_numpy(inp["cu_seqlens_q"]).cuda()
    sk = torch.from_numpy(np.asarray(seq_lens, np.int32)).cuda()
    nseq = len(seq_lens)
    ksc = torch.tensor([c.get("k_scale", 1.0)], dtype=torch.float32, device="cuda")
    vsc = torch.tensor([c.get("v_scale", 1.0)], dtype=torch.float32, device="cuda")
    dpad = 1 << (d - 1).bit_length()
    segs = 16
    rows = max(T, 1)
    segm_o = torch.empty((rows, hq, segs, dpad), dtype=torch.float32, device="cuda")
    segm_m = torch.empty((rows, hq, segs), dtype=torch.float32, device="cuda")
    segm_l = torch.empty((rows, hq, segs), dtype=torch.float32, device="cuda")
    sinks = None
    if c["sinks"]:
        sinks = torch.from_numpy(inp["sinks"]).cuda()
    win = c["window"]
    window_size = (win - 1, 0) if win else (-1, -1)
    KV = mod.KVQuantMode if hasattr(mod, "KVQuantMode") else None
    kvq = KV.FP8_PER_TENSOR if fp8 else KV.NONE
    desc_shape = (nseq, hkv)

    def call():
        mod.unified_attention(
            q=q, k=kc, v=vc, out=out, cu_seqlens_q=cu, max_seqlen_q=int(max(inp["query_lens"])),
            seqused_k=sk, max_seqlen_k=int(max(seq_lens)), softmax_scale=c["scale"],
            causal=True, window_size=window_size, block_table=block_table,
            softcap=float(c["softcap"] or 0.0), q_descale=None,
            k_descale=ksc.expand(desc_shape), v_descale=vsc.expand(desc_shape),
            seq_threshold_3D=128 // hkv, num_par_softmax_segments=segs,
            softmax_segm_output=segm_o, softmax_segm_max=segm_m, softmax_segm_expsum=segm_l,
            sinks=sinks, kv_quant_mode=kvq)

    return out, call, caches


def record_vllm(w, c, torch, np, mod, kernels_log):
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[c["dtype"]]
    inp = vllm_inputs(c)
    g = w.create_group(c["name"])
    for key, val in c.items():
        g.attrs[key] = json.dumps(val)
    out, call, caches = vllm_call(c, inp, dtype, torch, np, mod)
    if caches is not None:
        k_e4m3, v_e4m3 = caches
        g.create_dataset("k_e4m3", data=k_e4m3, compression="gzip")
        g.create_dataset("v_e4m3", data=v_e4m3, compression="gzip")
    call()
    torch.cuda.synchronize()
    ob = bits16(out)
    g.create_dataset("o", data=ob, compression="gzip", shuffle=True)
    ks = kernels_of(call, torch)
    g.attrs["kernels"] = json.dumps(ks)
    kernels_log[f"vllm/{c['name']}"] = ks
    call()
    torch.cuda.synchronize()
    g.attrs["repeatable"] = int(np.array_equal(bits16(out), ob))
    # Which path the launcher took, as its own rules say (2D / 3D).
    g.attrs["uses_reduce_segments"] = int(any("reduce_segments" in n for n in ks))
    print(f"  vllm/{c['name']}: kernels {sorted(set(ks))}", flush=True)


# ----------------------------------------------------------------------------------------------
def pack(out, work, torch, kernels_log, env):
    with open(os.path.join(work, "kernels.json"), "w") as f:
        json.dump({"env": env, "kernels": kernels_log}, f, indent=1)
    # SASS of every cubin Triton wrote.
    tool = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    for cub in glob.glob(os.path.join(work, "triton_cache", "**", "*.cubin"), recursive=True):
        try:
            r = subprocess.run([tool, "-sass", cub], capture_output=True, text=True, timeout=60)
            with open(cub + ".sass", "w") as f:
                f.write(r.stdout or r.stderr)
        except Exception as e:
            print(f"sass {cub}: {e}", flush=True)
    # The installed torch's flex sources, to read what produced the kernels.
    src = os.path.join(os.path.dirname(torch.__file__), "_inductor", "kernel", "flex")
    if os.path.isdir(src):
        shutil.copytree(src, os.path.join(work, "torch_flex_src"),
                        ignore=shutil.ignore_patterns("__pycache__"))
    for extra in ("nn/attention/flex_attention.py", "_higher_order_ops/flex_attention.py"):
        p = os.path.join(os.path.dirname(torch.__file__), extra)
        if os.path.exists(p):
            shutil.copy(p, os.path.join(work, extra.replace("/", "__")))
    with tarfile.open(os.path.join(out, "kernels.tar.gz"), "w:gz") as t:
        for name in sorted(os.listdir(work)):
            if name == "vllm_shim":
                continue
            t.add(os.path.join(work, name), arcname=name)
    print(f"packed in {time.time() - T0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
