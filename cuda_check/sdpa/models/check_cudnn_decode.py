#!/usr/bin/env python3
"""Replays the numpy model of cuDNN's decode path (cudnn_decode.py) against every recorded cuDNN
decode output: the Lq = 1 cases of data/hw/h100/sdpa/sdpa_h100.h5 (row digests, full outputs of
the probes, LSE) and the cuDNN decode situations of data/hw/h100/schedule/invariance_h100.h5
(whole target outputs and their SHA-256). Prints the matches per case; exit status 0 only if every
replayed row, element and LSE value matches.
Usage (repository root, after building build/experiments/attnsim; ATTNSIM=... to use a copy):
  python3 cuda_check/sdpa/models/check_cudnn_decode.py [sdpa|invariance|all] [--fit]
--fit: for each invariance output also tries every split count 1, 2, 4, ..., 32 and prints which
reproduce it (the split-count rule of cudnn_decode.n_splits_for is fit from these)."""
import hashlib
import json
import os
import sys
import time

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "schedule"))
ROOT = os.path.join(HERE, "..", "..", "..")

import cudnn_decode as CD  # noqa: E402
from cases import CASES, case_inputs  # noqa: E402
from prims import F32, encode16  # noqa: E402
from sdpa_cases import fnv_rows  # noqa: E402

SDPA_H5 = os.path.join(ROOT, "data/hw/h100/sdpa/sdpa_h100.h5")
INV_H5 = os.path.join(ROOT, "data/hw/h100/schedule/invariance_h100.h5")


def check_sdpa():
    ok = True
    f = h5py.File(SDPA_H5, "r")
    for n, c in CASES.items():
        if c["lq"] != 1:
            continue
        for dname in ("fp16", "bf16"):
            g = f[f"{n}/{dname}"]
            if "o_cudnn_rows" not in g:
                continue
            kernels = json.loads(g.attrs["kernels_cudnn"])
            lean = any("lean_reduction" in k for k in kernels)
            units = c["b"] * c["hkv"]
            ns = CD.n_splits_for(units, c["lk"], c["d"])
            t0 = time.time()
            q, k, v = case_inputs(n, dname, g if "q" in g else None)
            o, lse = CD.decode(q, k, v, dname, n_splits=ns)
            rows = fnv_rows(o)
            rec = g["o_cudnn_rows"][()]
            good_rows = int((rows == rec).sum())
            msg = (f"sdpa {n} {dname}: splits {ns} (recorded lean_reduction: {int(lean)}), "
                   f"rows {good_rows}/{rows.size} match")
            ok &= good_rows == rows.size and (ns > 1) == lean
            if "o_cudnn" in g:
                bad = int((o != g["o_cudnn"][()]).sum())
                msg += f", elements {o.size - bad}/{o.size} match"
                ok &= bad == 0
            if "lse_cudnn" in g and g.attrs.get("lse_cudnn_how") == "kv":
                rl = g["lse_cudnn"][()].reshape(lse.shape).astype(F32)
                good = int((lse.view(np.uint32) == rl.view(np.uint32)).sum())
                msg += f", LSE {good}/{lse.size} match"
                ok &= good == lse.size
            print(msg + f" ({time.time() - t0:.0f} s)", flush=True)
    return ok


def target_inputs(c, IC):
    """The target's decode inputs [1, H, 1, d] / [1, Hkv, L, d] as 16-bit patterns."""
    q, k, v = IC.sequence(c, 0, 1, c["length"])
    dt = c["dtype"]
    return (encode16(q[None], dt), encode16(k[None], dt), encode16(v[None], dt))


def check_invariance(fit=False):
    import invariance_cases as IC
    ok = True
    f = h5py.File(INV_H5, "r")
    cases = {c["name"]: c for c in IC.CASES}
    for name in f:
        if not name.startswith("sdpa_cudnn_"):
            continue
        g = f[name]
        c = cases[name]
        sits = json.loads(g.attrs["situations"])
        which = json.loads(g.attrs["which"])
        kernels = json.loads(g.attrs["kernels"])
        q, k, v = target_inputs(c, IC)
        dt = c["dtype"]
        cache = {}
        for si, (s, j) in enumerate(zip(sits, which)):
            seqs = IC.parse_situation(s)
            if seqs[0][0] != 1:
                print(f"invariance {name} {s}: prefill (sm90 kernel, cudnn_sm90.py): skipped")
                continue
            if any(sq != seqs[0] for sq in seqs):
                print(f"invariance {name} {s}: mixed shapes: skipped")
                continue
            d = g[f"o_{j}"]
            rec = d[()]
            units = len(seqs) * c["hkv"]
            ns = CD.n_splits_for(units, seqs[0][1], c["d"])
            t0 = time.time()
            if ns not in cache:
                o, _ = CD.decode(q, k, v, dt, n_splits=ns)
                cache[ns] = o[0]
            o = cache[ns]
            bad = int((o != rec).sum())
            sha = hashlib.sha256(np.ascontiguousarray(o).tobytes()).hexdigest() == d.attrs["sha256"]
            kn = kernels[si] if si < len(kernels) else []
            lean = any("lean_reduction" in x for x in kn) if kn and not kn[0].startswith("same as") else None
            msg = (f"invariance {name} {s}: splits {ns}, output o_{j}: elements {o.size - bad}/{o.size} "
                   f"match, sha256 {'match' if sha else 'DIFFERS'}")
            if lean is not None:
                msg += f" (recorded lean_reduction: {int(lean)})"
                ok &= (ns > 1) == lean
            ok &= bad == 0 and sha
            print(msg + f" ({time.time() - t0:.0f} s)", flush=True)
            if fit and si == which.index(j):
                hits = []
                for cand in (1, 2, 4, 8, 16, 32):
                    if cand not in cache:
                        cache[cand] = CD.decode(q, k, v, dt, n_splits=cand)[0][0]
                    if (cache[cand] == rec).all():
                        hits.append(cand)
                print(f"  fit {name} o_{j} ({s}): split counts reproducing it: {hits}", flush=True)
    return ok


def main():
    what = [a for a in sys.argv[1:] if not a.startswith("--")] or ["all"]
    fit = "--fit" in sys.argv
    ok = True
    if what[0] in ("sdpa", "all"):
        ok &= check_sdpa()
    if what[0] in ("invariance", "all"):
        ok &= check_invariance(fit)
    print("ALL MATCH" if ok else "MISMATCHES")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
