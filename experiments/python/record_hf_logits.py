#!/usr/bin/env python3
"""Records transformers' float32 logits of the tiny checkpoints (tests/python/hf_reference_test.py's reference).

  python3 experiments/python/record_hf_logits.py --out data/hw/h100/models/hf_logits.h5

For each family of attnsim.realmodels.hf (llama, mistral, qwen2, qwen3, gemma2, gemma3) the script
writes the tiny random-weight checkpoint with write_tiny_checkpoint(path, family, seed=0) into a
temporary folder (so no checkpoint travels with the recording: the SHA-256 of each file it wrote
is recorded, and the test refuses a generator whose files differ), loads it with
AutoModelForCausalLM in float32 and runs one teacher-forced forward over a fixed token sequence
(TOKENS ids from numpy's default_rng(SEED), batch 1, no padding) with attn_implementation "eager"
and "sdpa" (not where the model softcaps attention scores, Gemma 2: SDPA cannot, and some
transformers versions drop the cap silently; a refusal is recorded instead), on the CPU and, where
torch sees one, on the GPU (TF32 off: float32 matmuls as IEEE float32). Where attnsim with
attnsim.hf is importable, the same forward with attnsim.hf.register() for methods "golden" and
"flash" is recorded too (on the GPU device where there is one: the plug-in's round trip through
the CPU), or its one-line refusal.

Needs torch, transformers, numpy, h5py, ml_dtypes and tokenizers; attnsim's compiled core is
optional (write_tiny_checkpoint runs without it: the realmodels package is read from the source
folder beside this script, its forward's kernels left out). The file (a few MB, gzip):
  /tokens                          int64 [TOKENS]
  /<family>                        attrs: model_class, config (JSON), sha256 (JSON {file: hex})
  /<family>/<device>/<impl>        float32 [TOKENS, vocab] logits; impl eager, sdpa,
                                   attnsim_golden, attnsim_flash; device cpu or cuda
  /<family>/<device>               attrs "<impl>_refused": the one-line error where impl could not run
  /                                attrs: versions (python, torch, transformers, numpy, h5py,
                                   attnsim), gpu, driver, cuda, cudnn, tf32, command, seed, generator
Errors: one line on stderr, exit 2, no output file.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
# `python3 experiments/python/record_hf_logits.py` puts this folder first on the path, where the
# source folder attnsim/ (without its compiled core) would shadow the built or installed attnsim.
if sys.path and sys.path[0] and Path(sys.path[0]).resolve() == HERE:
    sys.path.pop(0)
TOKENS = 48
SEED = 20261207
IMPLS = ("eager", "sdpa")
ATTNSIM_METHODS = ("golden", "flash")
FILES = ("config.json", "tokenizer.json", "model.safetensors")


def fail(msg: str):
    print(f"record_hf_logits.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def tokens(vocab: int):
    """The fixed sequence: TOKENS ids in [3, vocab) (no pad/bos/eos ids) from default_rng(SEED)."""
    import numpy as np
    return np.random.default_rng(SEED).integers(3, vocab, TOKENS).astype(np.int64)


def realmodels_hf():
    """attnsim.realmodels.hf (for write_tiny_checkpoint): from the installed/built attnsim where it
    imports, else from the source folder with the forward's compiled kernels stubbed out (the
    writer uses none of them). Returns (module, note or None)."""
    try:
        from attnsim.realmodels import hf as rhf
        return rhf, None
    except Exception as e:  # noqa: BLE001 - no compiled attnsim here: the writer needs none
        note = (f"attnsim.realmodels unavailable ({str(e).splitlines()[0][:200]}); checkpoints "
                "written by the source folder's realmodels/hf.py")
    sys.path.append(str(HERE))
    try:
        import realmodels  # noqa: F401
        ops = types.ModuleType("realmodels.ops")
        ops.mm = None
        sys.modules["realmodels.ops"] = ops
        from realmodels import hf as rhf
    except Exception as e:  # noqa: BLE001
        fail(f"cannot import realmodels/hf.py from {HERE}: {e}")
    return rhf, note


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def checkpoint_digests(path: Path) -> dict:
    """{file name: SHA-256} of every file of the checkpoint folder (sorted)."""
    return {p.name: sha256(p) for p in sorted(Path(path).iterdir()) if p.is_file()}


def gpu_facts(torch) -> dict:
    out = {"gpu": "none", "driver": "none", "cuda": str(torch.version.cuda),
           "cudnn": str(torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None)}
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
        try:
            q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=30)
            ok = q.returncode == 0 and q.stdout.strip()
            out["driver"] = q.stdout.strip().splitlines()[0] if ok else "unknown"
        except (OSError, subprocess.SubprocessError):
            out["driver"] = "unknown (no nvidia-smi)"
    return out


def attnsim_plugin():
    """(attnsim.hf, version) where the built attnsim with its plug-in imports, else (None, why)."""
    try:
        import attnsim
        import attnsim.hf
        return attnsim.hf, attnsim.__version__
    except Exception as e:  # noqa: BLE001
        return None, f"not importable: {str(e).splitlines()[0][:200]}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the HDF5 file to write")
    ap.add_argument("--families", default="all", help="comma-separated families (default: all)")
    ap.add_argument("--no-cuda", action="store_true", help="the CPU only, even where a GPU is seen")
    args = ap.parse_args(argv)
    try:
        import h5py
        import numpy as np
        import torch
        import transformers
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        fail(f"needs torch, transformers, numpy and h5py: {e}")
    plugin, attnsim_version = attnsim_plugin()  # before realmodels_hf() puts the source folder on the path
    rhf, note = realmodels_hf()
    families = list(rhf.FAMILIES) if args.families == "all" else args.families.split(",")
    for f in families:
        if f not in rhf.FAMILIES:
            fail(f"unknown family {f!r} (expected {', '.join(rhf.FAMILIES)})")
    if plugin is not None:
        # No "flash" in a name: transformers reads it as FlashAttention.
        for i, m in enumerate(ATTNSIM_METHODS):
            plugin.register(m, name=f"attnsim{i}")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() and not args.no_cuda else [])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_name(out.name + ".partial")
    try:
        record(h5py, np, torch, transformers, AutoModelForCausalLM, rhf, note, families, plugin,
               attnsim_version, devices, tmp_out, argv)
    except BaseException:
        tmp_out.unlink(missing_ok=True)
        raise
    os.replace(tmp_out, out)
    print(f"wrote {out} ({out.stat().st_size} bytes)", file=sys.stderr)
    return 0


def record(h5py, np, torch, transformers, AutoModelForCausalLM, rhf, note, families, plugin,
           attnsim_version, devices, tmp_out, argv):
    plugin_device = devices[-1]
    z = dict(compression="gzip", compression_opts=9, shuffle=True)
    with tempfile.TemporaryDirectory() as tmp, h5py.File(tmp_out, "w") as h5:
        ids_np = None
        for fam in families:
            path = rhf.write_tiny_checkpoint(Path(tmp) / fam, fam, seed=0)
            cfg = json.loads((path / "config.json").read_text())
            if ids_np is None:
                ids_np = tokens(int(cfg["vocab_size"]))
                h5.create_dataset("tokens", data=ids_np)
            elif int(cfg["vocab_size"]) <= int(ids_np.max()):
                fail(f"{fam}: vocabulary {cfg['vocab_size']} is smaller than the token ids")
            g = h5.create_group(fam)
            g.attrs["config"] = json.dumps(cfg, sort_keys=True)
            g.attrs["sha256"] = json.dumps(checkpoint_digests(path), sort_keys=True)
            runs = [(d, i, i) for d in devices for i in IMPLS]
            runs += [(plugin_device, f"attnsim_{m}", f"attnsim{i}") for i, m in enumerate(ATTNSIM_METHODS)]
            try:
                model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                             attn_implementation="eager").eval()
            except Exception as e:  # noqa: BLE001 - e.g. a transformers without this family
                g.attrs["load_refused"] = (str(e).strip().splitlines() or [type(e).__name__])[0][:500]
                print(f"{fam}: transformers cannot load it: {g.attrs['load_refused'][:120]}", file=sys.stderr)
                continue
            g.attrs["model_class"] = type(model).__name__
            for device, label, impl in runs:
                dg = g.require_group(device)
                if label.startswith("attnsim_") and plugin is None:
                    dg.attrs[f"{label}_refused"] = f"attnsim {attnsim_version}"
                    continue
                if impl == "sdpa" and cfg.get("attn_logit_softcapping"):
                    # torch's SDPA has no score softcap: transformers 5.17 runs Gemma 2 through it
                    # all the same, without the cap; later versions refuse. Never a reference.
                    dg.attrs[f"{label}_refused"] = ("not recorded: SDPA has no attention softcap "
                                                    "(attn_logit_softcapping), which some transformers "
                                                    "versions drop silently")
                    continue
                try:
                    model.to(device)
                    model.set_attn_implementation(impl)
                    with torch.no_grad():
                        logits = model(torch.from_numpy(ids_np).view(1, -1).to(device)).logits[0]
                except (ValueError, RuntimeError, NotImplementedError) as e:
                    why = (str(e).strip().splitlines() or [type(e).__name__])[0][:500]
                    dg.attrs[f"{label}_refused"] = why
                    print(f"{fam} {device} {label}: refused: {why[:120]}", file=sys.stderr)
                    continue
                a = logits.float().cpu().numpy()
                dg.create_dataset(label, data=a, **z)
                print(f"{fam} {device} {label}: max |logit| {np.abs(a).max():.4g}", file=sys.stderr)
            del model
        gpu = gpu_facts(torch)
        facts = {
            "python": platform.python_version(), "platform": platform.platform(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "numpy": np.__version__, "h5py": h5py.__version__, "attnsim": str(attnsim_version),
            "gpu": gpu["gpu"], "driver": gpu["driver"], "cuda": gpu["cuda"], "cudnn": gpu["cudnn"],
            "tf32": "off (torch.backends.cuda.matmul.allow_tf32 = cudnn.allow_tf32 = False)",
            "dtype": "float32", "seed": SEED, "n_tokens": TOKENS,
            "command": " ".join(shlex.quote(a) for a in [
                "python3", "experiments/python/record_hf_logits.py",
                *(argv if argv is not None else sys.argv[1:])]),
            "generator": "attnsim.realmodels.hf.write_tiny_checkpoint(path, family, seed=0)",
            "generator_note": note or "",
        }
        for k, v in facts.items():  # plain str (numpy's version is a str subclass h5py refuses)
            h5.attrs[k] = v if isinstance(v, int) else str.__str__(str(v))


if __name__ == "__main__":
    sys.exit(main())
