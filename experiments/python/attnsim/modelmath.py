"""Reproducible model arithmetic: a model's forward pass outside attention, the same bits on every
machine.

numpy's ``x @ W`` is whatever its BLAS computes: the bits change with the BLAS build, the CPU's
kernels (OpenBLAS's Haswell and SkylakeX kernels sum in different orders) and even with the number
of rows in the call. These operations depend on their inputs alone: every output is one FP64
computation in a fixed order from IEEE basic operations, rounded once to float32, on attnsim's own
kernels (AVX-512, AVX2 or the scalar reference: the same bits; numerics/model_math.hpp):

    lin = attnsim.modelmath.Linear(W, b)      # W [out, in] float32 (torch.nn.Linear's layout)
    y = lin(x)                                # [..., in] -> [..., out]: fp32(Σ x·w in FP64 + b)
    rms_norm(x, w, eps), layer_norm(x, g, b, eps), silu_mul(gate, up), gelu_erf(x)
    cos, sin = rope_tables(T, d, base, start=0)                # Hugging Face's rotate_half layout
    log_softmax(logits) -> float64; kl_rows(lp, lq) -> float64 per row

The elementary functions (exp, log, sin, cos, erf) are attnsim's own FP64 polynomials, not libm.
attnsim.e2e's models (attnsim.realmodels) run on these, so its KL and perplexity tables reproduce
bit for bit on any CPU and thread count.
"""
from __future__ import annotations

import numpy as _np

from . import _core

__all__ = ["Linear", "rms_norm", "layer_norm", "silu_mul", "gelu_erf", "rope_tables",
           "log_softmax", "kl_rows", "exp", "log", "sin", "cos"]

#: A packed float32 weight matrix ``[out_features, in_features]`` with an optional bias; calling
#: it on ``x [..., in_features]`` gives ``fp32(x·Wᵀ + b)``, each output summed in FP64 in input
#: order and rounded once.
Linear = _core.Linear


def rms_norm(x, weight, eps: float):
    """Llama's RMSNorm of each row of ``x`` (last axis): ``w · x / sqrt(mean(x²) + eps)``."""
    return _core.mm_rms_norm(x, weight, float(eps))


def layer_norm(x, weight, bias, eps: float):
    """BERT's LayerNorm of each row of ``x``: ``(x − mean)/sqrt(var + eps) · weight + bias``."""
    return _core.mm_layer_norm(x, weight, bias, float(eps))


def silu_mul(gate, up):
    """The SiLU-gated MLP's product ``gate/(1 + e^−gate) · up`` (one rounding)."""
    return _core.mm_silu_mul(gate, up)


def gelu_erf(x):
    """The exact-erf GELU ``x/2 · (1 + erf(x/√2))``."""
    return _core.mm_gelu_erf(x)


def rope_tables(rows: int, head_dim: int, base: float, start: int = 0):
    """``(cos, sin)`` float32 ``[rows, head_dim]`` of positions ``start..start+rows-1``, as
    transformers computes them (float32 inv_freq and angles, the head_dim/2 frequencies repeated)."""
    for name, v in (("rows", rows), ("head_dim", head_dim), ("start", start)):
        if isinstance(v, bool) or not isinstance(v, (int, _np.integer)) or v < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
    return _core.mm_rope_tables(int(rows), int(start), int(head_dim), float(base))


def log_softmax(logits):
    """FP64 log-softmax of each row of float32 ``logits`` (last axis)."""
    return _core.mm_log_softmax(logits)


def kl_rows(lp, lq):
    """KL(p ‖ q) of each row of two float64 log-probability arrays (last axis)."""
    return _core.mm_kl_rows(lp, lq)


def exp(x):
    """attnsim's FP64 exp of a float64 array (the one the other operations use)."""
    return _core.mm_exp(x)


def log(x):
    """attnsim's FP64 natural log of a float64 array."""
    return _core.mm_log(x)


def sin(x):
    """attnsim's FP64 sine of a float64 array, |x| <= 1e6 (the one rope_tables uses)."""
    return _core.mm_sin(x)


def cos(x):
    """attnsim's FP64 cosine of a float64 array, |x| <= 1e6 (the one rope_tables uses)."""
    return _core.mm_cos(x)
