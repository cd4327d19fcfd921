#!/usr/bin/env python3
"""Runs the numpy kernel models of this folder on the recorded cases and counts, per case, dtype and
backend, the output rows whose FNV-1a digest differs from the H100's, the differing elements where
the recording keeps the output in full, and the differing LSE values (the models that give one).
Usage (from the repository root, after building build/experiments/attnsim):
  python3 cuda_check/sdpa/models/check_recordings.py sdpa BACKEND [CASE,...] [DTYPE,...]
  python3 cuda_check/sdpa/models/check_recordings.py fa3 [CASE,...] [DTYPE,...] [SPLIT,...]
BACKEND: cudnn, flash, efficient, math."""
import json
import os
import sys
import time

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "fa3"))
ROOT = os.path.join(HERE, "..", "..", "..")

from cases import CASES, case_inputs  # noqa: E402
import cudnn_sm90  # noqa: E402
import efficient_cutlass  # noqa: E402
import fa3_sm90  # noqa: E402
import flash_fa2  # noqa: E402
import math_sdpa  # noqa: E402
from sdpa_cases import fnv_rows  # noqa: E402


def sdpa_model(backend, c, q, k, v, dname):
    """Every head's output [B, H, Lq, d] and LSE [B, H, Lq] (None where the model has none)."""
    B, H, G = c["b"], c["hq"], c["hq"] // c["hkv"]
    out = np.zeros((B, H, c["lq"], c["d"]), np.uint16)
    lse = np.zeros((B, H, c["lq"]), np.float32)
    ns = 1
    if backend == "flash":
        swapped = c["lq"] == 1 and G > 1
        ns = flash_fa2.num_splits(B, c["hkv"] if swapped else H, G if swapped else c["lq"],
                                  c["lk"], c["d"])
    for b in range(B):
        for h in range(H):
            args = (q[b, h], k[b, h // G], v[b, h // G], dname, bool(c["causal"]))
            if backend == "cudnn":
                o, m, l = cudnn_sm90.attention_head(*args, want_state=True)
                lse[b, h] = cudnn_sm90.lse_of(m, l)
            elif backend == "flash":
                o, lse[b, h] = flash_fa2.attention_head(*args, n_split=ns, want_lse=True)
            elif backend == "efficient":
                o, lse[b, h] = efficient_cutlass.attention_head(*args, want_lse=True)
            else:
                o = math_sdpa.attention_head(*args)
                lse = None
            out[b, h] = o
    return out, lse


def check_sdpa(backend, names, dtypes, path):
    f = h5py.File(path, "r")
    for n in names:
        c = CASES[n]
        if backend == "cudnn" and c["lq"] == 1:
            print(f"{backend} {n}: decode runs cuDNN's sm80 wmma kernel + lean_reduction: no model")
            continue
        for dname in dtypes:
            g = f[f"{n}/{dname}"]
            if f"o_{backend}_rows" not in g:
                print(f"{backend} {dname} {n}: not recorded ({g.attrs.get('error_' + backend, '')[:80]})")
                continue
            t0 = time.time()
            q, k, v = case_inputs(n, dname, g if "q" in g else None)
            o, lse = sdpa_model(backend, c, q, k, v, dname)
            rows = fnv_rows(o)
            bad_rows = int((rows != g[f"o_{backend}_rows"][()]).sum())
            msg = f"{backend} {dname} {n}: rows {bad_rows}/{rows.size} differ"
            if f"o_{backend}" in g:
                msg += f", elements {int((o != g[f'o_{backend}'][()]).sum())}/{o.size} differ"
            if lse is not None and f"lse_{backend}" in g:
                rec = g[f"lse_{backend}"][()].reshape(lse.shape[0], lse.shape[1], -1)[..., :lse.shape[2]]
                if backend == "efficient" and g.attrs.get("lse_efficient_how") != "kv":
                    rec = None
                if rec is not None and g.attrs.get(f"lse_{backend}_how") == "kv":
                    msg += f", LSE {int((lse.view(np.uint32) != rec.astype(np.float32).view(np.uint32)).sum())}/{lse.size} differ"
            print(msg + f" ({time.time() - t0:.0f} s)", flush=True)


def check_fa3(names, dtypes, splits, path):
    sys.path.insert(0, os.path.join(HERE, "..", "..", "fa3"))
    import record_fa3_inputs as RI
    f = h5py.File(path, "r")
    for n in names:
        for dname in dtypes:
            for sp in splits:
                g = f[f"{n}/{dname}/{sp}"]
                a = dict(g.attrs)
                if "error" in a:
                    print(f"fa3 {n} {dname} {sp}: not recorded ({a['error'][:80]})")
                    continue
                t0 = time.time()
                q, k, v = RI.inputs(n, dname)
                B, H, G = a["b"], a["hq"], a["hq"] // a["hkv"]
                ns = int(a["num_splits"]) or fa3_sm90.num_splits(B, H, a["hkv"], a["lq"], a["lk"],
                                                                  a["d"], dname, bool(a["causal"]))
                o = np.zeros((B, H, a["lq"], a["d"]), np.uint16)
                lse = np.zeros((B, H, a["lq"]), np.float32)
                for b in range(B):
                    for h in range(H):
                        ds = (1.0, 1.0, 1.0)
                        if dname == "e4m3":
                            ds = tuple(float(g[f"{x}_descale"][b, h // G]) for x in "qkv")
                        o[b, h], lse[b, h] = fa3_sm90.attention_head(
                            q[b, h], k[b, h // G], v[b, h // G], dname, bool(a["causal"]),
                            n_split=ns, descale=ds, want_lse=True)
                bad_rows = int((fnv_rows(o) != g["o_rows"][()]).sum())
                bad_lse = int((lse.view(np.uint32) != g["lse"][()].astype(np.float32).view(np.uint32)).sum())
                print(f"fa3 {n} {dname} {sp} (splits {ns}): rows {bad_rows}/{o.shape[0]*o.shape[1]*o.shape[2]} differ, "
                      f"LSE {bad_lse}/{lse.size} differ ({time.time() - t0:.0f} s)", flush=True)


def pick(what, arg, known):
    """The comma-separated choices of `arg` (all of `known` when absent), each checked: an unknown
    one ends the run with a one-line error."""
    if arg is None:
        return list(known)
    chosen = arg.split(",")
    for x in chosen:
        if x not in known:
            sys.exit(f"check_recordings.py: unknown {what} '{x}' (known: {', '.join(known)})")
    return chosen


def main():
    usage = ("usage: check_recordings.py sdpa BACKEND [CASE,...] [DTYPE,...] | "
             "check_recordings.py fa3 [CASE,...] [DTYPE,...] [SPLIT,...]")
    args = sys.argv[1:]
    if not args or args[0] not in ("sdpa", "fa3") or (args[0] == "sdpa" and len(args) < 2):
        sys.exit(usage)
    arg = lambda i: args[i] if len(args) > i else None  # noqa: E731
    if args[0] == "fa3":
        import record_fa3_inputs as RI
        if len(args) > 4:
            sys.exit(usage)
        names = pick("case", arg(1), list(RI.CASES))
        dtypes = pick("dtype", arg(2), ["fp16", "bf16", "e4m3"])
        splits = pick("split", arg(3), ["nosplit", "heuristic", "split3"])
        check_fa3(names, dtypes, splits, os.path.join(ROOT, "data/hw/h100/fa3/fa3_h100.h5"))
    else:
        if len(args) > 4:
            sys.exit(usage)
        backend = pick("backend", args[1], ["cudnn", "flash", "efficient", "math"])[0]
        names = pick("case", arg(2), list(CASES))
        dtypes = pick("dtype", arg(3), ["fp16", "bf16"])
        check_sdpa(backend, names, dtypes, os.path.join(ROOT, "data/hw/h100/sdpa/sdpa_h100.h5"))


if __name__ == "__main__":
    main()
